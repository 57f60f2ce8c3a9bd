//! Paths that deliver in bursts (`bursts = { every_ms, hold_ms }`, scenarios/tc-bursty.toml):
//! a hold takes no capacity from a link, and FBDT's send limit holds the bursts such a path
//! needs (docs/congestion.md, "Bursty paths"), so it still carries the sum of its paths.

use fbdt_core::Config;
use fbdt_scenario::{Bursts, PathTimeline, Scenario, Schedule, Step};
use fbdt_sim::{run, PathModel, SimParams, SimScheme};

fn one_path(bursts: Option<Bursts>) -> Schedule {
    Schedule {
        duration_s: 5.0,
        scale: 1.0,
        bottleneck: None,
        paths: vec![PathTimeline {
            name: "p0".into(),
            steps: vec![Step {
                t_s: 0.0,
                rate_mbps: 100.0,
                delay_ms: 5.0,
                loss: 0.0,
                scan: false,
            }],
            radio: None,
            bursts,
        }],
    }
}

/// A single-path transfer over a pipe that holds its deliveries for 5 ms in every 20 ms
/// gets the pipe's rate, and its in-order delay grows by at most the hold.
#[test]
fn a_hold_adds_delay_and_takes_no_capacity() {
    let params = SimParams {
        model: PathModel::Pipe,
        ..SimParams::default()
    };
    let held = Bursts {
        every_ms: 20.0,
        hold_ms: 5.0,
    };
    let steady = run(&one_path(None), &SimScheme::Tcp(0), &params, |_| {}).unwrap();
    let bursty = run(&one_path(Some(held)), &SimScheme::Tcp(0), &params, |_| {}).unwrap();
    let ratio = bursty.goodput_mbps / steady.goodput_mbps;
    assert!((0.99..=1.0 + 1e-9).contains(&ratio), "bursty {} vs steady {} Mbit/s", bursty.goodput_mbps, steady.goodput_mbps);
    let max_ms = |d: &[u64]| d.iter().max().copied().unwrap_or(0) as f64 / 1e3;
    let (steady_max, bursty_max) = (max_ms(&steady.delay.delays_us), max_ms(&bursty.delay.delays_us));
    assert!(
        bursty_max > steady_max + 0.8 * held.hold_ms && bursty_max <= steady_max + held.hold_ms + 0.01,
        "largest in-order delay {bursty_max} ms with holds, {steady_max} ms without"
    );
}

/// tc-bursty over the TCP model: FBDT ≥ 0.95 × the two single-path TCPs' sum, in the same
/// run. Without the send limit's burst allowance it got 0.87 (docs/congestion.md).
#[test]
fn fbdt_carries_the_sum_of_paths_that_deliver_in_bursts() {
    let mut s = Scenario::load("tc-bursty").unwrap();
    s.duration_s = 5.0;
    let schedule = s.schedule(1.0).unwrap();
    let params = SimParams {
        model: PathModel::Tcp,
        ..SimParams::default()
    };
    let goodput = |scheme: &SimScheme| run(&schedule, scheme, &params, |_| {}).unwrap().goodput_mbps;
    let sum: f64 = (0..2).map(|i| goodput(&SimScheme::Tcp(i))).sum();
    let fbdt = goodput(&SimScheme::Session(Config::default()));
    assert!(fbdt >= 0.95 * sum, "FBDT {fbdt:.1} Mbit/s = {:.3} × the TCPs' sum {sum:.1}", fbdt / sum);
}
