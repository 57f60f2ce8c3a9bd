//! Issue 15's delay-gap sweep: two paths of 300 Mbit/s whose one-way delays differ by 20
//! to 200 ms (scenarios/delay-gap.toml). FBDT must get the sum of what each path carries
//! alone, with no cliff: redundant bytes ≤ 1% of the delivered ones and goodput ≥ 0.97 ×
//! the two single-path TCPs' sum, measured in the same run.
//!
//! Budget windows (the arrival rule: the far path works its delay's worth ahead) and the
//! paper's 64 KiB window (where the 32-range ACK cliff was: 16–23 % redundant, 0.69 of
//! capacity at 95 ms), both path models. Measured: docs/architecture.md, "Working ahead".

use fbdt_core::fbdt::DEFAULT_BUDGET;
use fbdt_core::{Config, FbdtConfig, SchemeConfig, WindowConfig};
use fbdt_scenario::{PathTimeline, Schedule, Step};
use fbdt_sim::{run, PathModel, SimParams, SimScheme};

const NEAR_DELAY_MS: f64 = 5.0;

fn near_and_far(gap_ms: f64) -> Schedule {
    let path = |name: &str, delay_ms: f64| PathTimeline {
        name: name.into(),
        steps: vec![Step {
            t_s: 0.0,
            rate_mbps: 300.0,
            delay_ms,
            loss: 0.0,
            scan: false,
        }],
        radio: None,
        bursts: None,
    };
    Schedule {
        duration_s: 10.0,
        scale: 1.0,
        bottleneck: None,
        paths: vec![path("near", NEAR_DELAY_MS), path("far", NEAR_DELAY_MS + gap_ms)],
    }
}

fn budget() -> Config {
    Config {
        scheme: SchemeConfig::Fbdt(FbdtConfig {
            window: WindowConfig::budget(DEFAULT_BUDGET),
            ..FbdtConfig::default()
        }),
        ..Config::default()
    }
}

fn assert_no_cliff(cfg: Config, model: PathModel, gaps_ms: &[f64]) {
    let window = cfg.fbdt().unwrap().window;
    let fbdt = SimScheme::Session(cfg);
    let params = SimParams {
        model,
        ..SimParams::default()
    };
    for &gap in gaps_ms {
        let s = near_and_far(gap);
        let goodput = |scheme: &SimScheme| run(&s, scheme, &params, |_| {}).unwrap();
        let sum: f64 = (0..2).map(|i| goodput(&SimScheme::Tcp(i)).goodput_mbps).sum();
        let out = goodput(&fbdt);
        let redundant = out.redundant_bytes as f64 / out.bytes_delivered as f64;
        let ratio = out.goodput_mbps / sum;
        assert!(
            redundant <= 0.01,
            "{window:?} {model:?} gap {gap} ms: {:.2}% redundant",
            redundant * 100.0
        );
        assert!(
            ratio >= 0.97,
            "{window:?} {model:?} gap {gap} ms: {:.1} Mbit/s = {ratio:.3} × the sum {sum:.1}",
            out.goodput_mbps
        );
    }
}

const SWEEP_MS: [f64; 7] = [20.0, 40.0, 65.0, 95.0, 140.0, 160.0, 200.0];

#[test]
fn budget_windows_get_the_sum_across_the_delay_gap_sweep_over_pipes() {
    assert_no_cliff(budget(), PathModel::Pipe, &SWEEP_MS);
}

#[test]
fn budget_windows_get_the_sum_across_the_delay_gap_sweep_over_tcp() {
    assert_no_cliff(budget(), PathModel::Tcp, &SWEEP_MS);
}

#[test]
fn the_paper_window_has_no_ack_range_cliff() {
    for model in [PathModel::Pipe, PathModel::Tcp] {
        assert_no_cliff(Config::paper(), model, &SWEEP_MS);
    }
}
