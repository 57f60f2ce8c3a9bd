//! The TCP-level path model end to end: what it must show that the ideal pipe cannot.

use fbdt_core::Config;
use fbdt_scenario::{PathTimeline, Schedule, Step};
use fbdt_sim::{run, PathModel, SimParams, SimScheme};

fn one_path(steps: Vec<Step>, duration_s: f64) -> Schedule {
    Schedule {
        duration_s,
        scale: 1.0,
        paths: vec![PathTimeline {
            name: "p0".into(),
            steps,
            radio: None,
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
    let scheme = SimScheme::Fbdt(Config::default());
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
    };
    let s = Schedule {
        duration_s: 5.0,
        scale: 1.0,
        paths: vec![path("slow", 200.0), path("fast", 600.0)],
    };
    let out = run(
        &s,
        &SimScheme::mptcp(fbdt_core::SchedulerKind::MinRtt),
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
