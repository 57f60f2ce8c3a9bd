//! The TCP-level path model end to end: what it must show that the ideal pipe cannot.

use fbdt_core::Config;
use fbdt_scenario::{PathTimeline, Schedule, Step};
use fbdt_sim::{run, PathModel, SimParams, SimScheme};

fn one_path(steps: Vec<Step>, duration_s: f64) -> Schedule {
    Schedule {
        duration_s,
        scale: 1.0,
        bottleneck: None,
        paths: vec![PathTimeline {
            name: "p0".into(),
            steps,
            radio: None,
            bursts: None,
        }],
    }
}

fn step(t_s: f64, rate_mbps: f64, loss: f64) -> Step {
    Step {
        t_s,
        rate_mbps,
        delay_ms: 5.0,
        loss,
        scan: false,
    }
}

fn params(model: PathModel) -> SimParams {
    SimParams {
        model,
        ..SimParams::default()
    }
}

#[test]
fn a_lone_tcp_backs_off_through_an_outage_and_the_pipe_does_not() {
    // Down from 1 s to 3.5 s: RTO ≈ 0.21 s fires at 1.21, 1.63, 2.47, then 4.15 s — the
    // TCP model resumes only then, the pipe at 3.5 s.
    let s = one_path(
        vec![step(0.0, 100.0, 0.0), step(1.0, 0.0, 0.0), step(3.5, 100.0, 0.0)],
        5.0,
    );
    let goodput_after = |model| {
        let out = run(&s, &SimScheme::Tcp(0), &params(model), |_| {}).unwrap();
        // Goodput samples every 0.1 s: sum over 3.6..4.1 s.
        out.series
            .iter()
            .filter(|(t, _)| *t > 3.65 && *t < 4.1)
            .map(|(_, m)| *m)
            .sum::<f64>()
    };
    assert!(goodput_after(PathModel::Pipe) > 300.0);
    assert_eq!(goodput_after(PathModel::Tcp), 0.0);
}

/// The run reports what the TCP model counted: an outage's backed-off timeouts (three
/// expiries while down, the one that resumes after it), random loss's window reductions;
/// nothing over an ideal pipe.
#[test]
fn the_tcp_models_counters_come_out_of_a_run() {
    let outage = one_path(
        vec![step(0.0, 100.0, 0.0), step(1.0, 0.0, 0.0), step(3.5, 100.0, 0.0)],
        5.0,
    );
    let lossy = one_path(vec![step(0.0, 200.0, 0.01)], 4.0);
    let counters = |s: &Schedule, model| run(s, &SimScheme::Tcp(0), &params(model), |_| {}).unwrap().per_path_tcp;
    let c = counters(&outage, PathModel::Tcp);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].timeouts, 4, "1.21, 1.63, 2.47 s while down, 4.15 s after: {c:?}");
    let c = counters(&lossy, PathModel::Tcp);
    assert!(c[0].loss_events > 10, "{c:?}");
    assert!(counters(&lossy, PathModel::Pipe).is_empty());
}

#[test]
fn random_loss_costs_a_cubic_tcp_throughput() {
    let clean = one_path(vec![step(0.0, 200.0, 0.0)], 4.0);
    let lossy = one_path(vec![step(0.0, 200.0, 0.01)], 4.0);
    let g = |s: &Schedule| {
        run(s, &SimScheme::Tcp(0), &params(PathModel::Tcp), |_| {})
            .unwrap()
            .goodput_mbps
    };
    let (clean, lossy) = (g(&clean), g(&lossy));
    assert!(clean > 150.0, "{clean}");
    assert!(lossy < 0.8 * clean, "clean {clean}, lossy {lossy}");
}

#[test]
fn the_tcp_model_delivers_fbdt_intact_and_repeats_bit_for_bit() {
    let s = one_path(
        vec![step(0.0, 300.0, 0.002), step(0.7, 0.0, 0.0), step(1.2, 300.0, 0.002)],
        6.0,
    );
    // Loss 0.2 % limits a Cubic TCP at a 10 ms RTT to a few tens of Mbit/s.
    let p = SimParams {
        transfer_bytes: Some(8_000_000),
        seed: 9,
        ..params(PathModel::Tcp)
    };
    let scheme = SimScheme::Session(Config::default());
    let a = run(&s, &scheme, &p, |_| {}).unwrap();
    let b = run(&s, &scheme, &p, |_| {}).unwrap();
    assert_eq!(a.bytes_delivered, 8_000_000);
    assert!(a.completed_at_s.is_some());
    assert_eq!(a.log, b.log);
    assert_eq!(a.series, b.series);
}

/// A Cubic sender fills the bottleneck queue (it paces at its window, not at the path's
/// rate), so its window fills and minRTT spills over to the second subflow: each path
/// carries most of what it offers. With the sender capped at the path's rate the queue
/// never formed, the window grew to its maximum without a loss, the faster subflow always
/// had room and the other carried a trickle (tc-normal: WiFi 184 of 779 MB).
#[test]
fn min_rtt_over_tcp_subflows_uses_both_paths() {
    let path = |name: &str, rate_mbps: f64| PathTimeline {
        name: name.into(),
        steps: vec![Step {
            rate_mbps,
            ..step(0.0, 0.0, 0.0)
        }],
        radio: None,
        bursts: None,
    };
    let s = Schedule {
        duration_s: 5.0,
        scale: 1.0,
        bottleneck: None,
        paths: vec![path("slow", 200.0), path("fast", 600.0)],
    };
    let out = run(
        &s,
        &SimScheme::meta(fbdt_core::SchedulerKind::MinRtt),
        &params(PathModel::Tcp),
        |_| {},
    )
    .unwrap();
    for (i, rate) in [200.0, 600.0].into_iter().enumerate() {
        let offered = rate * 1e6 / 8.0 * s.duration_s;
        let carried = out.per_path_bytes[i] as f64;
        assert!(carried > 0.7 * offered, "path {i}: {carried} of {offered} bytes");
    }
}

/// Kernel MPTCP behind a 1 s-RTT subflow (the testbed's `tc-delay-wigig`): Linux's default
/// scheduler hands the slow subflow data whenever its queue is empty, every byte on it holds
/// the cumulative DATA_ACK back for a second, and the MPTCP socket's send buffer (the sum of
/// the subflows' autotuned buffers, a few cwnds each) fills with unacknowledged bytes: the
/// stream moves about one buffer per second. FBDT over the same TCP-level paths is not held
/// (its per-path connections are acknowledged each on its own), nor is minRTT (it never
/// uses the slow path while the fast one has room), nor the same scheduler over ideal pipes
/// with the testbed's 64 MiB buffers (no kernel send buffer there).
#[test]
fn kernel_mptcp_is_held_back_by_its_send_buffer_behind_a_one_second_subflow() {
    let path = |name: &str, rate_mbps: f64, delay_ms: f64| PathTimeline {
        name: name.into(),
        steps: vec![Step {
            rate_mbps,
            delay_ms,
            ..step(0.0, 0.0, 0.0)
        }],
        radio: None,
        bursts: None,
    };
    let s = Schedule {
        duration_s: 6.0,
        scale: 1.0,
        bottleneck: None,
        paths: vec![path("wifi", 300.0, 2.0), path("slow", 300.0, 500.0)],
    };
    let g = |scheme: SimScheme, model| run(&s, &scheme, &params(model), |_| {}).unwrap().goodput_mbps;
    let kernel = g(SimScheme::meta(fbdt_core::SchedulerKind::Kernel), PathModel::Tcp);
    let minrtt = g(SimScheme::meta(fbdt_core::SchedulerKind::MinRtt), PathModel::Tcp);
    let fbdt = g(SimScheme::Session(Config::default()), PathModel::Tcp);
    let wifi = g(SimScheme::Tcp(0), PathModel::Tcp);
    let mut big = Config::meta(fbdt_core::SchedulerKind::Kernel);
    (big.send_buffer, big.recv_buffer) = (64 << 20, 64 << 20);
    let kernel_pipe = g(SimScheme::Session(big), PathModel::Pipe);
    assert!(wifi > 250.0, "wifi alone {wifi}");
    assert!(kernel < 0.5 * wifi, "kernel MPTCP {kernel}, wifi alone {wifi}");
    assert!(fbdt > 0.9 * wifi, "fbdt {fbdt}, wifi alone {wifi}");
    assert!(minrtt > 0.9 * wifi, "minrtt {minrtt}, wifi alone {wifi}");
    assert!(
        kernel_pipe > 2.0 * kernel,
        "kernel over pipes {kernel_pipe}, over TCP {kernel}"
    );
}

/// `blockage` (WiGig down 2 s of every 4): a lone TCP on WiGig backs its retransmission
/// timer off through each outage (expiries at rto·(2^k − 1) after it began, rto = srtt +
/// 200 ms) and stays silent after the path returns until the next expiry. Its goodput is
/// bounded by the rate times the up time less those silences — the shortest silence any
/// srtt between the base round trip and the base plus a full bottleneck queue gives — and
/// is well below what the path offers (the pipe, which resumes at once, gets that).
#[test]
fn a_lone_tcp_over_blockage_loses_the_back_off_after_each_outage() {
    let mut scenario = fbdt_scenario::Scenario::load("blockage").unwrap();
    scenario.duration_s = 10.0;
    let s = scenario.schedule(1.0).unwrap();
    let wigig = s.paths.iter().position(|p| p.name == "wigig").unwrap();
    let steps = &s.paths[wigig].steps;
    let rate_mbps = steps.iter().map(|st| st.rate_mbps).fold(0.0, f64::max);
    let base_rtt_s = 2.0 * steps[0].delay_ms / 1e3;
    let queue_s = 1000.0 * 1500.0 * 8.0 / (rate_mbps * 1e6);
    // Outages (rate 0) that end within the run.
    let mut outages = Vec::new();
    for (k, st) in steps.iter().enumerate() {
        if st.rate_mbps == 0.0 {
            let end = steps.get(k + 1).map_or(s.duration_s, |n| n.t_s);
            if end < s.duration_s {
                outages.push((st.t_s, end));
            }
        }
    }
    assert!(outages.len() >= 2, "{outages:?}");
    let silence = |start: f64, end: f64, rto: f64| {
        let mut fire = start + rto;
        let mut interval = rto;
        while fire < end {
            interval *= 2.0;
            fire += interval;
        }
        fire - end
    };
    let min_silence = |start: f64, end: f64| {
        (0..=100)
            .map(|i| {
                let srtt = base_rtt_s + queue_s * i as f64 / 100.0;
                silence(start, end, srtt + fbdt_sim::tcp::RTO_MIN_S)
            })
            .fold(f64::INFINITY, f64::min)
    };
    let down: f64 = outages.iter().map(|(a, b)| b - a).sum::<f64>()
        + steps
            .iter()
            .filter(|st| st.rate_mbps == 0.0 && st.t_s >= outages.last().unwrap().1)
            .map(|st| s.duration_s - st.t_s)
            .sum::<f64>();
    let silent: f64 = outages.iter().map(|&(a, b)| min_silence(a, b)).sum();
    let offered = rate_mbps * (s.duration_s - down) / s.duration_s;
    let bound = rate_mbps * (s.duration_s - down - silent) / s.duration_s;
    let g = |model| {
        run(&s, &SimScheme::Tcp(wigig), &params(model), |_| {})
            .unwrap()
            .goodput_mbps
    };
    let (tcp, pipe) = (g(PathModel::Tcp), g(PathModel::Pipe));
    assert!(silent > 0.5 * outages.len() as f64, "silences {silent} s");
    assert!(tcp <= bound, "lone TCP {tcp} Mbit/s, bound {bound} (offered {offered})");
    assert!(pipe > 0.95 * offered, "pipe {pipe} Mbit/s, offered {offered}");
}

/// FBDT's runtime replaces a stalled connection with a fresh one (fbdt-net's probe: a SYN
/// every 300 ms from the core's stall report; docs/runtime.md), so after each blockage
/// WiGig carries FBDT's data again within a probe period and a round trip, while a lone
/// TCP on WiGig is still silent, waiting for its backed-off retransmission timer.
#[test]
fn fbdt_replaces_the_stalled_connection_after_a_blockage() {
    let mut scenario = fbdt_scenario::Scenario::load("blockage").unwrap();
    scenario.duration_s = 10.0;
    let s = scenario.schedule(1.0).unwrap();
    let wigig = s.paths.iter().position(|p| p.name == "wigig").unwrap();
    let wifi = 1 - wigig;
    let wifi_mbps = s.paths[wifi].steps[0].rate_mbps;
    let steps = &s.paths[wigig].steps;
    let wigig_mbps = steps.iter().map(|st| st.rate_mbps).fold(0.0, f64::max);
    // The path's returns, each followed by at least a second up.
    let returns: Vec<f64> = steps
        .windows(2)
        .filter(|w| w[0].rate_mbps == 0.0 && w[1].rate_mbps > 0.0 && w[1].t_s + 1.0 <= s.duration_s)
        .map(|w| w[1].t_s)
        .collect();
    assert!(!returns.is_empty());
    let series = |scheme: SimScheme| run(&s, &scheme, &params(PathModel::Tcp), |_| {}).unwrap().series;
    let fbdt = series(SimScheme::Session(Config::default()));
    let lone = series(SimScheme::Tcp(wigig));
    // Mean goodput over (from, to] of the 0.1 s samples.
    let mean = |series: &[(f64, f64)], from: f64, to: f64| {
        let v: Vec<f64> = series
            .iter()
            .filter(|(t, _)| *t > from + 1e-9 && *t <= to + 1e-9)
            .map(|(_, m)| *m)
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    for &up in &returns {
        // A probe period and a round trip later the fresh connection is in use.
        let (from, to) = (up + 0.4, up + 0.9);
        let f = mean(&fbdt, from, to);
        assert!(
            f > wifi_mbps + 0.5 * wigig_mbps,
            "FBDT {f} Mbit/s after the return at {up} s"
        );
        assert_eq!(mean(&lone, from, to), 0.0, "a lone TCP resumed at once after {up} s");
    }
}

/// A connection killed while its probe is under way (a reset during an outage) reconnects
/// once, not twice: the probe is dropped with the connection, and the transfer (long
/// enough to need the path after it returns) completes.
#[test]
fn a_reset_during_a_probe_reconnects_once_and_delivers_everything() {
    let path = |name: &str, steps: Vec<Step>| PathTimeline {
        name: name.into(),
        steps,
        radio: None,
        bursts: None,
    };
    let s = Schedule {
        duration_s: 8.0,
        scale: 1.0,
        bottleneck: None,
        paths: vec![
            path("a", vec![step(0.0, 100.0, 0.0)]),
            path(
                "b",
                vec![step(0.0, 100.0, 0.0), step(1.0, 0.0, 0.0), step(3.0, 100.0, 0.0)],
            ),
        ],
    };
    let p = SimParams {
        transfer_bytes: Some(80_000_000),
        path_resets: vec![fbdt_sim::PathReset {
            at_s: 1.5,
            path: 1,
            reconnect_after_s: Some(0.05),
        }],
        ..params(PathModel::Tcp)
    };
    let out = run(&s, &SimScheme::Session(Config::default()), &p, |_| {}).unwrap();
    assert_eq!(out.bytes_delivered, 80_000_000);
    assert!(out.completed_at_s.is_some());
    let reconnects = out.log.iter().filter(|l| l.contains("path1 reconnected")).count();
    let replaced = out.log.iter().filter(|l| l.contains("path1 replaced")).count();
    assert_eq!((reconnects, replaced), (1, 0), "{:#?}", out.log);
}

/// Under the TCP model every connection first completes its handshake: nothing leaves
/// before the SYN and SYN/ACK's round trip, so over a 1 s round trip a lone TCP's first
/// byte arrives a round trip later than over the pipe (the model then paces its first
/// window over half a round trip, 2 × cwnd / srtt, at 1 s as before), and FBDT's, whose
/// HELLO waits for the handshake too, also a round trip later.
#[test]
fn the_tcp_model_connects_each_path_before_it_sends() {
    let s = one_path(
        vec![Step {
            t_s: 0.0,
            rate_mbps: 100.0,
            delay_ms: 500.0,
            loss: 0.0,
            scan: false,
        }],
        4.0,
    );
    let first = |scheme: &SimScheme, model| {
        let out = run(&s, scheme, &params(model), |_| {}).unwrap();
        out.series.iter().find(|(_, m)| *m > 0.0).map(|(t, _)| *t).unwrap()
    };
    // Samples end every 0.1 s: the first non-empty one ends within 0.1 s of the arrival.
    for scheme in [SimScheme::Tcp(0), SimScheme::Session(Config::default())] {
        let pipe = first(&scheme, PathModel::Pipe);
        let tcp = first(&scheme, PathModel::Tcp);
        // Without the handshake the TCP model's first byte came 0.5 s after the pipe's.
        let later = tcp - pipe;
        assert!((1.4..1.7).contains(&later), "{scheme:?}: {tcp} s against {pipe} s");
    }
}
