//! Congestion control per path over loopback (no root): each path's connection runs the
//! controller its plan names, on both ends, and the stats say so.

use std::net::SocketAddr;
use std::time::Duration;

use fbdt_net::{connect, listen, CongestionPlan, NetConfig, PathSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOUND: Duration = Duration::from_secs(60);

fn has(cc: &str) -> bool {
    fbdt_net::congestion::available().is_some_and(|a| a.iter().any(|n| n == cc))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_path_runs_its_own_controller_on_both_ends() {
    if !has("bbr") || !has("cubic") {
        eprintln!("SKIP: this kernel lacks bbr or cubic");
        return;
    }
    tokio::time::timeout(BOUND, async {
        let plan = CongestionPlan::parse("0=cubic,1=bbr", &[]).unwrap();
        let cfg = NetConfig {
            congestion: plan,
            ..NetConfig::default()
        };
        let addrs: Vec<SocketAddr> = (0..2).map(|_| "127.0.0.1:0".parse().unwrap()).collect();
        let mut l = listen(&addrs, cfg.clone()).await.expect("listen");
        let paths: Vec<PathSpec> = l
            .local_addrs()
            .iter()
            .enumerate()
            .map(|(i, a)| format!("127.0.0.{}={a}", i + 2).parse().unwrap())
            .collect();
        let mut client = connect(paths, cfg).await.expect("connect");
        let mut server = l.accept().await.expect("session");
        let (cs, ss) = (client.stats_handle(), server.stats_handle());
        let send = tokio::spawn(async move {
            server.write_all(&vec![7u8; 8 << 20]).await.unwrap();
            server.shutdown().await.unwrap();
            server
        });
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got.len(), 8 << 20);
        let _server = send.await.unwrap();
        // The stats are refreshed on the driver's 10-ms tick.
        let want = ["cubic", "bbr"];
        loop {
            let (c, s) = (cs.stats(), ss.stats());
            let in_force = |st: &fbdt_net::SessionStats| -> Vec<String> {
                st.paths.iter().map(|p| p.cc.in_force.clone()).collect()
            };
            if in_force(&c) == want && in_force(&s) == want {
                // Time was counted for the controller in force, and only for it.
                for (p, name) in s.paths.iter().zip(want) {
                    assert!(p.cc.seconds.keys().all(|k| k == name), "{:?}", p.cc);
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("controllers in force within the bound");
}

#[tokio::test]
async fn an_unknown_controller_fails_connect_and_listen_with_its_name() {
    if fbdt_net::congestion::available().is_none() {
        eprintln!("SKIP: no tcp_available_congestion_control");
        return;
    }
    let cfg = NetConfig {
        congestion: CongestionPlan::all("nosuchcc").unwrap(),
        ..NetConfig::default()
    };
    let e = listen(&["127.0.0.1:0".parse().unwrap()], cfg.clone()).await.err().expect("refused");
    assert!(e.to_string().contains("nosuchcc"), "{e}");
    let spec: PathSpec = "127.0.0.1:9".parse().unwrap();
    let e = connect(vec![spec], cfg).await.err().expect("refused");
    assert!(e.to_string().contains("nosuchcc"), "{e}");
}
