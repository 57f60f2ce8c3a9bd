//! Session exhaustion from many sources (issue 42), on loopback with the default limits:
//! floods of idle HELLOs, of useful-but-silent sessions and of bare TCP connections from
//! 4, 8 and 64 source addresses (127.A.0.1, each in its own /24, so per-prefix caps do not
//! help) must leave a legitimate client from another address served and a live session
//! able to re-JOIN. The attackers speak raw frames (a client `Connection` without a task),
//! as a cheap attacker would. Each test prints how long the legitimate client took.

mod common;
use common::hello_bytes;

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use fbdt_core::{max_frame_len, Connection, PathId};
use fbdt_net::{connect, listen, NetConfig, PathSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every wait gives up (and fails) after this.
const BOUND: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug)]
enum Flood {
    /// A HELLO, then nothing.
    IdleHellos,
    /// A HELLO, one byte of data (the session is useful), then nothing.
    UsefulSilent,
    /// TCP connections that never send a byte.
    BareTcp,
}

fn source(i: usize) -> IpAddr {
    IpAddr::from([127, 1 + i as u8, 0, 1])
}

/// One attacker connection of `kind` from `src`; `None` if the server refused it.
async fn attack_one(kind: Flood, src: IpAddr, to: SocketAddr) -> Option<TcpStream> {
    let mut s = common::dial(Some(src), to).await.ok()?;
    match kind {
        Flood::BareTcp => {}
        Flood::IdleHellos => s.write_all(&hello_bytes()).await.ok()?,
        Flood::UsefulSilent => {
            let now = fbdt_core::Instant::ZERO;
            let mut c = Connection::client(fbdt_core::Config::default()).ok()?;
            c.add_path(PathId(0), now).ok()?;
            let mut out = Vec::new();
            while c.poll_transmit(PathId(0), max_frame_len(), now, &mut out) > 0 {}
            s.write_all(&out).await.ok()?;
            let mut buf = BytesMut::with_capacity(4096);
            while !c.is_established() {
                let n = tokio::time::timeout(Duration::from_secs(5), s.read_buf(&mut buf))
                    .await
                    .ok()?
                    .ok()?;
                if n == 0 {
                    return None;
                }
                c.handle_recv_buf(PathId(0), &mut buf, now).ok()?;
            }
            c.write(b"x");
            out.clear();
            while c.poll_transmit(PathId(0), max_frame_len(), now, &mut out) > 0 {}
            s.write_all(&out).await.ok()?;
        }
    }
    Some(s)
}

/// Up to `per_source` connections of `kind` from each of `sources` addresses, held
/// (as many as the server keeps) while the returned task lives; refused and closed ones
/// are re-opened, as a persistent attacker would.
fn flood(
    kind: Flood,
    sources: usize,
    per_source: usize,
    to: SocketAddr,
) -> (tokio::task::JoinHandle<()>, Arc<Mutex<usize>>) {
    let held = Arc::new(Mutex::new(0usize));
    let h = held.clone();
    let task = tokio::spawn(async move {
        let mut tasks = Vec::new();
        for i in 0..sources {
            for _ in 0..per_source {
                let h = h.clone();
                tasks.push(tokio::spawn(async move {
                    loop {
                        if let Some(mut s) = attack_one(kind, source(i), to).await {
                            *h.lock().unwrap() += 1;
                            // Held until the server closes it.
                            let mut sink = [0u8; 512];
                            while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
                            *h.lock().unwrap() -= 1;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }));
            }
        }
        // Aborting this task aborts the attackers.
        struct AbortAll(Vec<tokio::task::JoinHandle<()>>);
        impl Drop for AbortAll {
            fn drop(&mut self) {
                self.0.iter().for_each(|t| t.abort());
            }
        }
        let _all = AbortAll(tasks);
        std::future::pending::<()>().await;
    });
    (task, held)
}

/// Echoes every session; the victim's server side is handed back through `victim`.
fn serve(mut l: fbdt_net::Listener, victim: Arc<Mutex<Option<fbdt_net::StatsHandle>>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(mut s) = l.accept().await {
            if s.peer_addr().is_some_and(|a| a.ip() == IpAddr::from([127, 201, 0, 1])) {
                *victim.lock().unwrap() = Some(s.stats_handle());
            }
            tokio::spawn(async move {
                let mut buf = [0u8; 64 * 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = s.shutdown().await;
            });
        }
    })
}

/// 64 KiB echoed back over `s`.
async fn echo_64k(s: &mut fbdt_net::Session) {
    let data = vec![7u8; 64 * 1024];
    s.write_all(&data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    s.read_exact(&mut back).await.unwrap();
    assert!(back == data);
}

/// One flood at a time: each loads the machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn run(kind: Flood, sources: usize) {
    let _one = SERIAL.lock().await;
    let l = listen(&["127.0.0.1:0".parse().unwrap()], NetConfig::default())
        .await
        .expect("listen");
    let addr = l.local_addrs()[0];
    let victim_at_server = Arc::new(Mutex::new(None));
    let server = serve(l, victim_at_server.clone());
    // The victim: a live two-path session from 127.201.0.1, path 1 through a relay
    // (dialling from 127.201.0.2) whose connections the test cuts to force a re-JOIN.
    let relay = common::Relay::start([127, 0, 0, 1].into(), Some(IpAddr::from([127, 201, 0, 2])), addr).await;
    let specs: Vec<PathSpec> = vec![
        format!("127.201.0.1={addr}").parse().unwrap(),
        format!("127.0.0.1={}", relay.addr).parse().unwrap(),
    ];
    let mut victim = connect(specs, NetConfig::default()).await.expect("victim connects");
    echo_64k(&mut victim).await;

    let per_source = match kind {
        Flood::BareTcp => 64,
        _ => 32,
    };
    let (attack, held) = flood(kind, sources, per_source, addr);
    // Let the flood build up, and its sessions grow idle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = *held.lock().unwrap();

    let t = Instant::now();
    let spec: PathSpec = format!("127.200.0.1={addr}").parse().unwrap();
    let mut legit = tokio::time::timeout(BOUND, connect(vec![spec], NetConfig::default()))
        .await
        .expect("bounded")
        .expect("a legitimate client is served");
    echo_64k(&mut legit).await;
    let served = t.elapsed();

    // The victim's path 1 loses its connection and re-JOINs through the flood.
    let before = victim_at_server
        .lock()
        .unwrap()
        .as_ref()
        .map_or(0, |h| h.stats().paths.get(1).map_or(0, |p| p.reconnects));
    let t = Instant::now();
    relay.cut();
    tokio::time::timeout(BOUND, async {
        loop {
            let rejoined = victim_at_server.lock().unwrap().as_ref().is_some_and(|h| {
                let s = h.stats();
                s.paths.get(1).is_some_and(|p| p.connected && p.reconnects > before)
            });
            if rejoined {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the victim's path re-JOINs");
    let rejoin = t.elapsed();
    echo_64k(&mut victim).await;
    eprintln!(
        "{kind:?} from {sources} sources: {during} attacker connections held; \
         legitimate client served in {served:?}; victim's path re-joined in {rejoin:?}"
    );
    attack.abort();
    drop(relay);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_hellos_from_4_sources() {
    run(Flood::IdleHellos, 4).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_hellos_from_64_sources() {
    run(Flood::IdleHellos, 64).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn useful_silent_sessions_from_4_sources() {
    run(Flood::UsefulSilent, 4).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn useful_silent_sessions_from_64_sources() {
    run(Flood::UsefulSilent, 64).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_tcp_from_8_sources() {
    run(Flood::BareTcp, 8).await
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_tcp_from_64_sources() {
    run(Flood::BareTcp, 64).await
}

/// The process's resident memory, in KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What one idle session costs the server (the figure docs/security.md sizes
/// `max_sessions` from): 1000 sessions that sent a HELLO (over TLS, and plaintext) and
/// nothing more. Prints the resident memory per session. A measurement, not a check:
/// `cargo test -p fbdt-net --test exhaustion -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn idle_session_memory() {
    let _one = SERIAL.lock().await;
    let dir = std::env::temp_dir().join(format!("fbdt-exhaustion-keys-{}", std::process::id()));
    let id = fbdt_net::ServerIdentity::load_or_generate(&dir).unwrap();
    let pin = fbdt_net::secure::parse_fingerprint(&id.fingerprint()).unwrap();
    let tls_server = fbdt_net::Security::Server(Arc::new(fbdt_net::TlsServer::new(id, None).unwrap()));
    let tls_client = fbdt_net::Security::Client(Arc::new(
        fbdt_net::TlsClient::new(fbdt_net::Trust::Pins(vec![pin]), None).unwrap(),
    ));
    const N: usize = 1000;
    for (name, server_sec, client_sec) in [
        (
            "plaintext",
            fbdt_net::Security::Plaintext,
            fbdt_net::Security::Plaintext,
        ),
        ("TLS", tls_server, tls_client),
    ] {
        let cfg = NetConfig {
            security: server_sec,
            max_sessions: N + 10,
            max_sessions_per_source: N,
            max_sessions_per_prefix: N,
            max_pending_per_source: N,
            max_pending_per_prefix: N,
            max_pending: N,
            first_data_timeout: Duration::from_secs(600),
            ..NetConfig::default()
        };
        let mut l = listen(&["127.0.0.1:0".parse().unwrap()], cfg).await.unwrap();
        let addr = l.local_addrs()[0];
        let spec: PathSpec = addr.to_string().parse().unwrap();
        let held = tokio::spawn(async move {
            let mut v = Vec::new();
            while let Some(s) = l.accept().await {
                v.push(s);
                if v.len() == N {
                    return (l, v);
                }
            }
            panic!("listener ended");
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = rss_kib();
        let mut conns = Vec::new();
        for _ in 0..N {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let mut s = fbdt_net::secure::connect(tcp, &spec, &client_sec).await.unwrap();
            s.write_all(&hello_bytes()).await.unwrap();
            conns.push(s);
        }
        let (l, sessions) = tokio::time::timeout(BOUND, held).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rss_kib();
        eprintln!(
            "{name}: {N} idle sessions: RSS {before} KiB -> {after} KiB, {:.1} KiB per session \
             (the client ends' TLS state included)",
            (after.saturating_sub(before)) as f64 / N as f64
        );
        drop((sessions, conns, l));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
