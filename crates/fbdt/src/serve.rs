//! `fbdt serve`: the server side of a tunnel. Two forms:
//! - `--forward HOST:PORT`: every FBDT session is spliced to a new TCP connection to that
//!   address, both directions, until both ends finished (any program using
//!   `fbdt_net::connect` can be the client);
//! - without it: every session carries many streams (`fbdt proxy` is the client), each
//!   asking for a destination that the server checks against `--allow` and dials (`dial`).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{bail, Context};
use tokio::net::TcpStream;

use crate::allow::{AllowList, Rule};
use crate::net_args::NetArgs;

#[derive(clap::Args)]
#[command(after_help = "\
Examples:
  fbdt serve --listen 0.0.0.0:5400 --token-file /etc/fbdt/token     # for `fbdt proxy`: public destinations
  fbdt serve --listen 0.0.0.0:5400 --token-file t --allow public --allow 10.0.0.5:80
  fbdt serve --listen 0.0.0.0:5400 --forward 127.0.0.1:22          # sessions reach the local sshd
  fbdt serve --listen 10.0.0.1:5400 --listen 10.1.0.1:5400 --forward web.internal:80
  fbdt serve --config serve.toml   # keys = long options: listen = [\"…\"], allow = [\"…\"], token_file = \"…\"")]
pub struct ServeArgs {
    /// Address to accept FBDT paths on (repeat for several).
    #[arg(long, required = true, value_name = "IP:PORT")]
    listen: Vec<SocketAddr>,
    /// TCP service each session is spliced to (resolved for every session). Without it
    /// each session carries streams to the destinations `fbdt proxy` asks for.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "allow")]
    forward: Option<String>,
    /// Destinations streams may reach: `public` (every globally routable address), a
    /// CIDR or address, or a host name (`*.example.com` for subdomains), each with an
    /// optional :PORT; repeat for several. Default: public (private, loopback and
    /// link-local ranges refused unless listed).
    #[arg(long, value_name = "CIDR|HOST[:PORT]")]
    allow: Vec<Rule>,
    /// Forward for every client that reaches this port. Without it the server needs
    /// --token/--token-file or --client-ca (TLS), so only clients holding the token or a
    /// certificate from that CA reach the service.
    #[arg(long)]
    allow_anyone: bool,
    #[command(flatten)]
    net: NetArgs,
}

pub async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    if let Some(f) = &a.forward {
        check_forward(f).await?;
    }
    let target = match &a.forward {
        Some(f) => format!("forwarding to {f}"),
        None => format!("dialling for streams, allowed: {}", describe(&a.allow)),
    };
    let sec = &a.net.security;
    let identity = match (sec.requires_token(), sec.requires_client_cert()) {
        (true, true) => "token and client certificate",
        (true, false) => "token",
        (false, true) => "client certificate",
        (false, false) if a.allow_anyone => "anyone (--allow-anyone)",
        (false, false) => bail!(
            "serve ({target}): give --token/--token-file or --client-ca so only your clients \
             reach it, or --allow-anyone to serve every client that reaches this port"
        ),
    };
    let mut l = fbdt_net::listen(&a.listen, a.net.server_config()?).await?;
    // One line a script can wait for (with port 0 it names the ports taken).
    let addrs: Vec<String> = l.local_addrs().iter().map(|s| s.to_string()).collect();
    log!("listening on {} {target}", addrs.join(" "));
    let allow = Arc::new(AllowList::new(a.allow.clone()));
    let mut next = 0u64;
    while let Some(session) = l.accept().await {
        next += 1;
        let id = next;
        let client = match authorize(&session, identity) {
            Ok(c) => c,
            Err(why) => {
                log!("session {id}: refused: {why}");
                continue;
            }
        };
        let Some(forward) = a.forward.clone() else {
            log!("session {id}: from {client}, streams");
            let allow = allow.clone();
            tokio::spawn(async move {
                crate::dial::serve_streams(session, allow, format!("session {id} ({client})")).await;
                log!("session {id} ({client}): ended");
            });
            continue;
        };
        log!("session {id}: from {client}, forwarding to {forward}");
        tokio::spawn(async move {
            match splice(session, &forward).await {
                Ok((up, down)) => log!("session {id} ({client}): done, {up} bytes to {forward}, {down} back"),
                Err(e) => log!("session {id} ({client}): {e:#}"),
            }
        });
    }
    bail!("the listener stopped")
}

fn describe(rules: &[Rule]) -> String {
    if rules.is_empty() {
        return "public".into();
    }
    let shown: Vec<String> = rules
        .iter()
        .map(|r| match r {
            Rule::Public => "public".to_string(),
            Rule::Net(n, p) => with_port(n.to_string(), *p),
            Rule::Name(n, p) => with_port(n.clone(), *p),
        })
        .collect();
    shown.join(", ")
}

fn with_port(s: String, port: Option<u16>) -> String {
    match port {
        Some(p) => format!("{s}:{p}"),
        None => s,
    }
}

/// Who a session's client is, as logged beside everything it does.
struct Client {
    addr: Option<std::net::SocketAddr>,
    /// How the client proved who it is.
    identity: &'static str,
    /// The SHA-256 fingerprint of its certificate (with --client-ca).
    cert: Option<String>,
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            Some(a) => write!(f, "{a} ({}", self.identity)?,
            None => write!(f, "unknown address ({}", self.identity)?,
        }
        match &self.cert {
            Some(c) => write!(f, " {c})"),
            None => f.write_str(")"),
        }
    }
}

/// The one access check before a session reaches the forwarded service. With a token the
/// listener already refused every connection whose TLS token proof was wrong, and with
/// --client-ca every connection without a certificate from that CA, so a session that got
/// here passed both; with neither the operator chose --allow-anyone. Either way the
/// client's address, how it was admitted and its certificate's fingerprint go into every
/// log line about the session.
fn authorize(session: &fbdt_net::Session, identity: &'static str) -> Result<Client, String> {
    let cert = session.client_identity().map(str::to_owned);
    if identity.contains("certificate") && cert.is_none() {
        return Err("no client certificate on path 0".into());
    }
    Ok(Client {
        addr: session.peer_addr(),
        identity,
        cert,
    })
}

/// Refuses a forward address that cannot work before anything listens: no port, or a
/// name that does not resolve.
async fn check_forward(forward: &str) -> anyhow::Result<()> {
    let Some((host, port)) = forward.rsplit_once(':') else {
        bail!("--forward {forward:?}: expected HOST:PORT (e.g. 127.0.0.1:22)");
    };
    if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
        bail!("--forward {forward:?}: expected HOST:PORT with a port 1-65535");
    }
    let mut addrs = tokio::net::lookup_host(forward)
        .await
        .with_context(|| format!("--forward {forward:?} does not resolve"))?;
    if addrs.next().is_none() {
        bail!("--forward {forward:?} resolves to no address");
    }
    Ok(())
}

/// Copies the session to a new connection to `forward` and back; returns the bytes each
/// way. When one side ends its stream the other side's write half is shut down, so a
/// half-close crosses the tunnel.
async fn splice(mut session: fbdt_net::Session, forward: &str) -> anyhow::Result<(u64, u64)> {
    let mut tcp = TcpStream::connect(forward)
        .await
        .with_context(|| format!("connect to {forward}"))?;
    // The session already batches; small writes of interactive protocols should leave now.
    tcp.set_nodelay(true)?;
    let (up, down) = crate::splice::splice(&mut session, &mut tcp)
        .await
        .with_context(|| match session.error() {
            Some(e) => format!("session: {e}"),
            None => format!("splice to {forward}"),
        })?;
    Ok((up, down))
}
