//! A server under abuse (issue 14, findings 3, 8 and 9), on loopback: the flooding
//! "attacker" connects from 127.0.0.1, the legitimate client from 127.0.0.2.. — distinct
//! source addresses, as they would be on a network. Bounded in connections and time.

mod common;
use common::{echo_all, hello_bytes};

use std::net::SocketAddr;
use std::time::Duration;

use fbdt_core::wire::Frame;
use fbdt_net::{connect, listen, NetConfig, PathSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Every wait in these tests gives up (and fails) after this.
const BOUND: Duration = Duration::from_secs(20);

async fn server(cfg: NetConfig) -> (fbdt_net::Listener, SocketAddr) {
    let l = listen(&["127.0.0.1:0".parse().unwrap()], cfg).await.expect("listen");
    let a = l.local_addrs()[0];
    (l, a)
}

/// A legitimate client from 127.0.0.2 opens a session and gets 64 KiB echoed back.
async fn client_is_served(addr: SocketAddr) {
    let spec: PathSpec = format!("127.0.0.2={addr}").parse().unwrap();
    let served = async {
        let mut c = connect(vec![spec], NetConfig::default()).await.expect("connect");
        let data = vec![7u8; 64 * 1024];
        c.write_all(&data).await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        assert!(back == data);
    };
    tokio::time::timeout(BOUND, served)
        .await
        .expect("legitimate client served");
}

/// Everything the server sends on `s` until it closes it.
async fn read_frames(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(BOUND, s.read_to_end(&mut buf))
        .await
        .expect("server closes");
    buf
}

fn close_reason(mut b: &[u8]) -> Option<(u16, String)> {
    while let Ok((f, n)) = Frame::parse(b) {
        if let Frame::Close(c) = f {
            return Some((c.code, c.reason));
        }
        b = &b[n..];
    }
    None
}

/// Finding 3: HELLOs followed by silence. One source gets `max_sessions_per_source`
/// sessions and no more, a client elsewhere is served meanwhile, and the silent sessions
/// are closed once `first_data_timeout` passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_hellos_neither_fill_the_server_nor_stay() {
    let cfg = NetConfig {
        max_sessions: 64,
        max_sessions_per_source: 4,
        // This test is about sessions: all 80 may wait for their HELLO to be read.
        max_pending_per_source: 128,
        max_pending_per_prefix: 128,
        first_data_timeout: Duration::from_millis(500),
        ..NetConfig::default()
    };
    let (l, addr) = server(cfg).await;
    let echo = echo_all(l);
    let hello = hello_bytes();
    let mut silent = Vec::new();
    for _ in 0..80 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&hello).await.unwrap();
        silent.push(s);
    }
    client_is_served(addr).await;
    let mut refused = 0;
    let mut expired = 0;
    for s in &mut silent {
        let (code, why) = close_reason(&read_frames(s).await).expect("every silent connection gets a CLOSE");
        if why.contains("sessions") && code == 7 {
            refused += 1;
        } else {
            assert!(why.contains("no data or JOIN"), "{why}");
            expired += 1;
        }
    }
    assert_eq!((refused, expired), (76, 4));
    echo.abort();
}

/// Finding 8: connections that never send a first frame. Past the per-source cap they are
/// closed at once, and a client from elsewhere is served while they hang on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_connection_flood_leaves_a_client_served() {
    let cfg = NetConfig {
        max_pending: 128,
        max_pending_per_source: 16,
        ..NetConfig::default()
    };
    let (l, addr) = server(cfg).await;
    let echo = echo_all(l);
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    client_is_served(addr).await;
    // Refused at accept: closed without a word (it might have been a live session's JOIN,
    // which a CLOSE would end).
    let mut refused = 0;
    for s in &mut idle[16..] {
        assert!(read_frames(s).await.is_empty());
        refused += 1;
    }
    assert_eq!(refused, 184);
    echo.abort();
}

/// Finding 9: a path whose server closes every connection right after accepting it is
/// re-dialled with a growing back-off (connecting alone does not reset it), not ~90 times
/// a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_closed_on_accept_is_redialled_with_back_off() {
    let (l, addr) = server(NetConfig::default()).await;
    let echo = echo_all(l);
    let closer = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closer_addr = closer.local_addr().unwrap();
    let accepts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepts.clone();
    let closing = tokio::spawn(async move {
        while let Ok((s, _)) = closer.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(s);
        }
    });
    let specs: Vec<PathSpec> = vec![
        format!("127.0.0.2={addr}").parse().unwrap(),
        format!("127.0.0.3={closer_addr}").parse().unwrap(),
    ];
    let session = connect(specs, NetConfig::default()).await.expect("connect");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let n = accepts.load(std::sync::atomic::Ordering::SeqCst);
    // 10 ms, then 50 ms doubling to 1 s: about 6 dials in 2 s (without back-off: ~180).
    assert!((2..=12).contains(&n), "{n} connections in 2 s");
    drop(session);
    closing.abort();
    echo.abort();
}
