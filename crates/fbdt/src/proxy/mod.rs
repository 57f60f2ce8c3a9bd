//! `fbdt proxy`: the client side. One local port speaks SOCKS5 and HTTP proxy requests
//! (told apart by the first byte) and, with `--transparent`, takes connections redirected
//! to it by nftables (their destination from SO_ORIGINAL_DST). Every accepted connection
//! becomes one stream of an FBDT session to `fbdt serve` (one session, or `--sessions N`).

pub mod autopath;
pub mod http;
pub mod relay;
pub mod session_io;
pub mod socks;
pub mod status;
pub mod transparent;
pub mod upstream;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::net_args::NetArgs;
use upstream::{await_reply, OpenError, Upstream};
use wire::Destination;

/// Time a client has to finish its SOCKS or HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(clap::Args)]
#[command(after_help = "\
Examples (server: fbdt serve --listen 0.0.0.0:5400 --token-file t):
  fbdt proxy --listen 127.0.0.1:1080 --path %wlan0=10.0.0.1:5400 --path %eth0=10.0.0.1:5400 \\
             --pin sha256:… --token-file t
  fbdt proxy --listen 127.0.0.1:1080 --auto-paths 10.0.0.1:5400 --exclude wwan0 --pin sha256:… --token-file t
                                                              # a path per interface that reaches the server
  curl -x socks5h://127.0.0.1:1080 https://example.com/      # SOCKS5, names resolved at the server
  curl -x http://127.0.0.1:1080 http://example.com/           # HTTP proxy (CONNECT or absolute URI)
  ffmpeg -http_proxy http://127.0.0.1:1080 -i http://example.com/v.mp4 out.mp4
  chromium --proxy-server=socks5://127.0.0.1:1080 …
Transparent (root): fbdt proxy … --transparent --nft-install   # or print the rule with --transparent
Config file: fbdt proxy --config proxy.toml   # keys = long options: listen = \"…\", path = [\"…\"], pin = \"…\"")]
pub struct ProxyArgs {
    /// Local address the proxy listens on.
    #[arg(long, value_name = "IP:PORT")]
    listen: SocketAddr,
    /// One path per interface: [LOCAL_IP=|%IFACE=]SERVER_IP:PORT (path i = i-th --path).
    #[arg(long = "path", required_unless_present = "auto_paths", value_name = "PATH")]
    paths: Vec<fbdt_net::PathSpec>,
    /// Instead of --path: one path to SERVER_IP:PORT per interface that is up, has an
    /// address and a route to the server (bound with SO_BINDTODEVICE), looked for again
    /// every second; when the set changes, new connections go over a session on the new set.
    #[arg(long, value_name = "SERVER_IP:PORT", conflicts_with = "paths")]
    auto_paths: Option<SocketAddr>,
    /// With --auto-paths: never use this interface (repeatable).
    #[arg(long, value_name = "IFACE", requires = "auto_paths")]
    exclude: Vec<String>,
    /// Also take connections that nftables redirected to --listen (their destination read
    /// with SO_ORIGINAL_DST); prints the nft rule that redirects this machine's TCP.
    #[arg(long)]
    transparent: bool,
    /// With --transparent: install that rule now (root) and remove it on exit.
    #[arg(long, requires = "transparent")]
    nft_install: bool,
    /// Answer SOCKS5 and HTTP CONNECT clients "connected" at once, without waiting for the
    /// server to connect: their first bytes follow the stream's OPEN, saving one round trip
    /// of the session per connection. A destination the server cannot reach or refuses is
    /// then seen as a reset connection (and a log line), not as a SOCKS reply code or an
    /// HTTP 403/502.
    #[arg(long)]
    early_reply: bool,
    /// Keep N sessions to the server over the same paths and open each connection on the
    /// one that moved the fewest bytes lately: a session delivers its streams' bytes in one
    /// order, so on one session a small answer waits behind a bulk download's bytes sent
    /// before it. Each session is one TCP connection per path (1 to 8; 2 by default).
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=upstream::MAX_SESSIONS as i64))]
    sessions: u8,
    /// Control socket `fbdt status` reads (default: $XDG_RUNTIME_DIR/fbdt-proxy.sock or
    /// proxy.sock in ~/.local/share/fbdt).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    #[command(flatten)]
    net: NetArgs,
}

pub async fn run(a: ProxyArgs) -> anyhow::Result<()> {
    if !a.listen.ip().is_loopback() {
        log!(
            "fbdt: warning: --listen {}: not a loopback address; SOCKS5 and HTTP proxies have no \
             authentication, so anyone who reaches it can use the server through this proxy",
            a.listen
        );
    }
    let listener = TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("listening on {}", a.listen))?;
    let local = listener.local_addr()?;
    let paths = match a.auto_paths {
        Some(server) => {
            let p = autopath::paths(server, &a.exclude);
            if p.is_empty() {
                anyhow::bail!("--auto-paths: no interface is up with an address and a route to {server}");
            }
            log!("auto paths: {}", autopath::describe(&p));
            p
        }
        None => a.paths.clone(),
    };
    let upstream = Upstream::connect(paths.clone(), a.net.client_config()?, usize::from(a.sessions)).await?;
    let _watch = a.auto_paths.map(|server| {
        AbortOnDrop(tokio::spawn(autopath::follow(
            server,
            a.exclude.clone(),
            paths,
            upstream.clone(),
        )))
    });
    let control = match a.control.clone() {
        Some(c) => c,
        None => status::default_socket()?,
    };
    let _control = status::serve(&control, upstream.clone())?;
    let _nft = if a.transparent {
        let mut servers: Vec<_> = a.paths.iter().map(|p| p.remote.ip()).collect();
        servers.extend(a.auto_paths.map(|s| s.ip()));
        let rules = transparent::rules(local.port(), &servers);
        if a.nft_install {
            Some(transparent::Installed::install(&rules)?)
        } else {
            log!("transparent mode: redirect TCP here with\n{rules}");
            None
        }
    } else {
        None
    };
    // One line a script can wait for (with port 0 it names the port taken).
    log!("proxy listening on {local} (control {})", control.display());
    let transparent = a.transparent;
    let early = a.early_reply;
    let mut next = 0u64;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, from) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        // EMFILE and the like pass; the proxy goes on.
                        log!("proxy: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                next += 1;
                let (up, id) = (upstream.clone(), next);
                tokio::spawn(async move { handle(tcp, from, id, up, transparent, early, local).await });
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = terminated() => break,
        }
    }
    log!("proxy: stopping");
    Ok(())
}

/// Stops a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

/// What a client asked for and how to answer it once the server replied.
enum Ask {
    Socks,
    Connect,
    /// An HTTP request to pass on (its rewritten head goes first).
    Forward(Vec<u8>),
    Transparent,
}

async fn handle(
    mut tcp: TcpStream,
    from: SocketAddr,
    id: u64,
    up: Arc<Upstream>,
    transparent: bool,
    early_reply: bool,
    local: SocketAddr,
) {
    let _ = tcp.set_nodelay(true);
    let who = format!("proxy conn {id} from {from}");
    let asked = match tokio::time::timeout(REQUEST_TIMEOUT, request(&mut tcp, transparent, local)).await {
        Ok(Ok(a)) => a,
        Ok(Err(why)) => {
            log!("{who}: refused: {why}");
            return close_gently(tcp).await;
        }
        Err(_) => {
            log!("{who}: no complete request in {REQUEST_TIMEOUT:?}");
            return;
        }
    };
    let (dest, ask, early) = asked;
    let mut stream = match up.open(&dest).await {
        Ok(s) => s,
        Err(e) => return refuse(tcp, &ask, &e, &who, &dest).await,
    };
    // A forwarded HTTP request goes right behind the OPEN (no round trip to wait for);
    // the server drops it if the destination turns out unreachable.
    let first = match &ask {
        Ask::Forward(head) => [head.as_slice(), &early].concat(),
        _ => early,
    };
    if !first.is_empty() && stream.write_all(&first).await.is_err() {
        return log!("{who}: {dest}: the session failed");
    }
    // A client that needs no answer in its protocol (transparent: a failure is an RST
    // either way), or told "connected" at once (--early-reply), sends its first bytes right
    // behind the OPEN; the relay reads the server's answer before anything goes back.
    let optimistic = match ask {
        Ask::Transparent => true,
        Ask::Socks | Ask::Connect => early_reply,
        Ask::Forward(_) => false,
    };
    if !optimistic {
        if let Err(e) = await_reply(&mut stream).await {
            return refuse(tcp, &ask, &e, &who, &dest).await;
        }
    }
    let confirmed = match ask {
        Ask::Socks => tcp.write_all(&[socks::VERSION, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await,
        Ask::Connect => tcp.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await,
        Ask::Forward(_) | Ask::Transparent => Ok(()),
    };
    if confirmed.is_err() {
        return stream.reset();
    }
    match relay::relay_with(tcp, stream, optimistic).await {
        Ok((out, back)) => tracing::debug!("{who}: {dest}: {out} bytes out, {back} back"),
        Err(e) => log!("{who}: {dest}: aborted: {e}"),
    }
}

/// Reads the client's request: SOCKS5 (first byte 5), HTTP (a letter), or with
/// --transparent a redirected connection. Bytes sent past the request come back as `early`.
async fn request(
    tcp: &mut TcpStream,
    transparent: bool,
    local: SocketAddr,
) -> Result<(Destination, Ask, Vec<u8>), String> {
    if transparent {
        if let Some(dest) = transparent::original_destination(tcp, local) {
            return Ok((dest, Ask::Transparent, Vec::new()));
        }
    }
    let mut first = [0u8; 1];
    match tcp.peek(&mut first).await {
        Ok(0) | Err(_) => return Err("closed before a request".into()),
        Ok(_) => {}
    }
    match first[0] {
        socks::VERSION => {
            // Buffered: the greeting and the request take one read each, not one per field;
            // bytes read past the request go on as the stream's first bytes.
            let mut buffered = tokio::io::BufReader::with_capacity(1024, &mut *tcp);
            let dest = socks::accept(&mut buffered).await?;
            Ok((dest, Ask::Socks, buffered.buffer().to_vec()))
        }
        b'A'..=b'Z' => match http::accept(tcp).await {
            Ok(http::Request::Connect { dest, early }) => Ok((dest, Ask::Connect, early)),
            Ok(http::Request::Forward { dest, head, early }) => Ok((dest, Ask::Forward(head), early)),
            Err(Some(r)) => {
                http::respond(tcp, r.code, r.reason, &r.why).await;
                Err(format!("HTTP {}: {}", r.code, r.why))
            }
            Err(None) => Err("closed inside the HTTP request".into()),
        },
        b => Err(format!("first byte 0x{b:02x} is neither SOCKS5 nor HTTP")),
    }
}

/// Answers a request the server (or the session) could not serve, in the client's protocol.
async fn refuse(mut tcp: TcpStream, ask: &Ask, e: &OpenError, who: &str, dest: &Destination) {
    log!("{who}: {dest}: {e}");
    let status = e.status();
    match ask {
        Ask::Socks => socks::reply(&mut tcp, status.socks_code()).await,
        Ask::Connect | Ask::Forward(_) => {
            let (code, reason) = status.http();
            http::respond(&mut tcp, code, reason, &e.to_string()).await;
        }
        // The application sees the failure as TCP shows one: a reset connection.
        Ask::Transparent => return relay::abort_tcp(tcp),
    }
    close_gently(tcp).await;
}

/// Ends a connection after an answer without destroying it: closing with unread input
/// would send an RST, and the client's kernel could drop our answer unread. So send a
/// FIN, then read (and drop) what the client still sends, for a little while.
async fn close_gently(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left = 64 * 1024;
        while left > 0 {
            match tcp.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left -= n.min(left),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
}
