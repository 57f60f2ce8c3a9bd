//! Client timeouts (issue 42): a server that accepts TCP and then says nothing must not
//! hang a client's TLS handshake, on path 0 or on a re-dial (a re-dial stuck there would
//! leave the path dead for the whole session).

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fbdt_net::secure::parse_fingerprint;
use fbdt_net::{connect, listen, NetConfig, PathSpec, Security, ServerIdentity, TlsClient, TlsServer, Trust};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOUND: Duration = Duration::from_secs(20);

struct Keys {
    dir: std::path::PathBuf,
    server: Security,
    client: Security,
}

impl Keys {
    fn new(tag: &str) -> Keys {
        let dir = std::env::temp_dir().join(format!("fbdt-timeouts-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let id = ServerIdentity::load_or_generate(&dir).unwrap();
        let pin = parse_fingerprint(&id.fingerprint()).unwrap();
        Keys {
            server: Security::Server(Arc::new(TlsServer::new(id, None).unwrap())),
            client: Security::Client(Arc::new(TlsClient::new(Trust::Pins(vec![pin]), None).unwrap())),
            dir,
        }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn client_cfg(security: Security) -> NetConfig {
    NetConfig {
        security,
        handshake_timeout: Duration::from_millis(300),
        ..NetConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_fails_the_tls_handshake_in_time() {
    let keys = Keys::new("silent");
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    let spec: PathSpec = addr.to_string().parse().unwrap();
    let r = tokio::time::timeout(BOUND, connect(vec![spec], client_cfg(keys.client.clone())))
        .await
        .expect("the client gives up by itself");
    let e = r.err().expect("no session with a silent server").to_string();
    assert!(e.contains("no TLS handshake within 300ms"), "{e}");
    hold.abort();
}

/// Path 1's connection is cut while its relay turns silent: its re-dials connect TCP and
/// get no handshake. They time out and are tried again, and once the relay forwards
/// again the path re-joins and carries data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redial_stuck_in_a_silent_handshake_is_retried() {
    tokio::time::timeout(BOUND, async {
        let keys = Keys::new("redial");
        let server_cfg = NetConfig {
            security: keys.server.clone(),
            ..NetConfig::default()
        };
        let mut l = listen(&["127.0.0.1:0".parse().unwrap()], server_cfg).await.unwrap();
        let addr = l.local_addrs()[0];
        let relay = common::Relay::start([127, 0, 0, 1].into(), None, addr).await;
        let specs: Vec<PathSpec> = vec![
            format!("127.0.0.2={addr}").parse().unwrap(),
            format!("127.0.0.3={}", relay.addr).parse().unwrap(),
        ];
        let mut client = connect(specs, client_cfg(keys.client.clone())).await.expect("connect");
        let mut server = l.accept().await.expect("session");
        let sh = server.stats_handle();
        let echo = tokio::spawn(async move {
            let mut buf = [0u8; 65536];
            loop {
                match server.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => server.write_all(&buf[..n]).await.unwrap(),
                }
            }
            let _ = server.shutdown().await;
        });
        let wait_path1 = |reconnects: u32| {
            let sh = sh.clone();
            async move {
                loop {
                    let s = sh.stats();
                    if s.paths
                        .get(1)
                        .is_some_and(|p| p.connected && p.reconnects >= reconnects)
                    {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        wait_path1(0).await;
        relay.silent.store(true, Ordering::SeqCst);
        relay.cut();
        // Several re-dials (back-off 10 ms, 50, 100, 200 ...) meet a silent handshake.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !sh.stats().paths[1].connected,
            "path 1 is down while its relay is silent"
        );
        relay.silent.store(false, Ordering::SeqCst);
        wait_path1(1).await;
        let data = vec![3u8; 1 << 20];
        client.write_all(&data).await.unwrap();
        let mut back = vec![0u8; data.len()];
        client.read_exact(&mut back).await.unwrap();
        assert!(back == data);
        client.shutdown().await.unwrap();
        echo.await.unwrap();
    })
    .await
    .expect("bounded");
}

/// The server restarts under a live session (its process gone, a new one on the same
/// addresses): every re-JOIN reaches a server that never heard of the session and is
/// refused on the spot. Such connections never carry the session, so the client ends it
/// with an error after `idle_timeout` instead of dialling for ever.
#[test]
fn a_client_gives_up_on_a_session_the_restarted_server_does_not_know() {
    let keys = Keys::new("restart");
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let server_cfg = NetConfig {
        security: keys.server.clone(),
        ..NetConfig::default()
    };
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let first = runtime();
    let addrs = first.block_on(async {
        let l = listen(&[any, any], server_cfg.clone()).await.unwrap();
        let addrs = l.local_addrs().to_vec();
        common::echo_all(l);
        addrs
    });
    let client_rt = runtime();
    let mut session = client_rt.block_on(async {
        let specs: Vec<PathSpec> = vec![
            format!("127.0.0.2={}", addrs[0]).parse().unwrap(),
            format!("127.0.0.3={}", addrs[1]).parse().unwrap(),
        ];
        let cfg = NetConfig {
            idle_timeout: Duration::from_secs(1),
            ..client_cfg(keys.client.clone())
        };
        let mut s = connect(specs, cfg).await.expect("connect");
        s.write_all(b"before the restart").await.unwrap();
        s
    });
    // The first server's tasks, its sessions and sockets go with its runtime.
    drop(first);
    let second = runtime();
    second.block_on(async {
        common::echo_all(listen(&addrs, server_cfg).await.expect("the same addresses again"));
    });
    let err = client_rt
        .block_on(async {
            let mut buf = Vec::new();
            tokio::time::timeout(BOUND, session.read_to_end(&mut buf)).await
        })
        .expect("the client gives up by itself")
        .expect_err("no echo from a server that forgot the session")
        .to_string();
    assert!(err.contains("no live path for 1s"), "{err}");
    assert!(session.stats().paths.iter().map(|p| p.reconnects).sum::<u32>() > 0);
}
