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

/// A session over two loopback paths, `cfg` at both ends, after the server sent the client
/// 8 MiB: both ends, kept open so their stats stay live.
async fn after_a_download(cfg: NetConfig) -> (fbdt_net::Session, fbdt_net::Session) {
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
    let send = tokio::spawn(async move {
        server.write_all(&vec![7u8; 8 << 20]).await.unwrap();
        server.shutdown().await.unwrap();
        server
    });
    let mut got = Vec::new();
    client.read_to_end(&mut got).await.unwrap();
    assert_eq!(got.len(), 8 << 20);
    (client, send.await.unwrap())
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
        let (client, server) = after_a_download(cfg).await;
        let (cs, ss) = (client.stats_handle(), server.stats_handle());
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

/// Issue 41: by default every path's socket on both ends gets the RTO floor scaled to its
/// RTT, so a download's sender — which cannot dial a fresh connection — uses a returned
/// link again after ≈ 2 × RTT + 40 ms, not Linux's 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_session_lowers_every_sockets_rto_floor() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let sock = std::net::TcpStream::connect(probe.local_addr().unwrap()).unwrap();
    if fbdt_net::sockopt::set_rto_min_us(&sock, 50_000).is_err() {
        eprintln!("SKIP: this kernel has no TCP_RTO_MIN_US");
        return;
    }
    tokio::time::timeout(BOUND, async {
        let cfg = NetConfig::default();
        assert!(cfg.rto_floor, "the floor is the default");
        let (client, server) = after_a_download(cfg).await;
        let (cs, ss) = (client.stats_handle(), server.stats_handle());
        // Loopback's RTT is microseconds: the floor is the delayed-ACK allowance, 40 ms
        // and a little (more only if a loaded host stretches the RTT), below Linux's
        // 200 ms. Set at the driver's 10-ms TCP_INFO reads.
        let floors = |st: &fbdt_net::SessionStats| -> Vec<Option<u32>> { st.paths.iter().map(|p| p.cc.rto_floor_us).collect() };
        loop {
            let (c, s) = (floors(&cs.stats()), floors(&ss.stats()));
            let set = |f: &[Option<u32>]| f.len() == 2 && f.iter().all(|f| f.is_some_and(|us| (40_000..200_000).contains(&us)));
            if set(&c) && set(&s) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every socket's floor set within the bound");
}

/// Issue 40, coupled mode: the sender paces each loss-based path at its coupled (LIA)
/// window over its RTT (SO_MAX_PACING_RATE), leaves a BBR path alone, and the data still
/// arrives whole (`after_a_download` checks it). Uncoupled, no socket gets a ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coupled_sender_paces_its_loss_based_paths_and_leaves_bbr_alone() {
    if !has("bbr") || !has("cubic") {
        eprintln!("SKIP: this kernel lacks bbr or cubic");
        return;
    }
    tokio::time::timeout(BOUND, async {
        let cfg = NetConfig {
            congestion: CongestionPlan::parse("0=cubic,1=bbr", &[]).unwrap(),
            coupled: fbdt_net::CoupledMode::Always,
            ..NetConfig::default()
        };
        let (_client, server) = after_a_download(cfg).await;
        let ss = server.stats_handle();
        loop {
            let s = ss.stats();
            let cubic = s.paths.first().map(|p| &p.cc);
            // Coupled time is counted from the tick after the first ceiling.
            if let Some(cc) = cubic.filter(|cc| cc.pacing_ceiling_bps.is_some() && cc.coupled_seconds > 0.0) {
                let window = cc.coupled_window_bytes.expect("a paced path has a coupled window");
                assert!(window >= 2 * 1448, "{cc:?}");
                assert!(cc.pacing_ceiling_bps.unwrap() > 0.0, "{cc:?}");
                assert!(cc.pacing_updates >= 1, "{cc:?}");
                let bbr = &s.paths[1].cc;
                assert_eq!(bbr.in_force, "bbr", "{bbr:?}");
                assert_eq!((bbr.pacing_ceiling_bps, bbr.coupled_window_bytes, bbr.pacing_updates), (None, None, 0), "{bbr:?}");
                assert_eq!(bbr.coupled_seconds, 0.0, "{bbr:?}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the cubic path paced within the bound");

    let (_client, server) = tokio::time::timeout(BOUND, after_a_download(NetConfig::default()))
        .await
        .expect("uncoupled download within the bound");
    // Two ticks after the download at least, so a ceiling would have been set by now.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for p in server.stats_handle().stats().paths {
        assert_eq!((p.cc.pacing_ceiling_bps, p.cc.coupled_window_bytes, p.cc.pacing_updates), (None, None, 0), "{:?}", p.cc);
    }
}
