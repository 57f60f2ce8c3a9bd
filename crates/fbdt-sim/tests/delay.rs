//! The in-order delivery delay the simulator measures (fbdt_core::delay_probe): sane on a
//! path whose delay can be worked out by hand, and a golden distribution for one scenario.

use fbdt_core::delay_probe::DEFAULT_STEP;
use fbdt_core::Config;
use fbdt_scenario::{PathTimeline, Scenario, Schedule, Step};
use fbdt_sim::{run, LinkParams, SimParams, SimScheme};

const RATE_MBPS: f64 = 100.0;
const DELAY_MS: f64 = 10.0;

fn one_constant_path(duration_s: f64) -> Schedule {
    Schedule {
        duration_s,
        scale: 1.0,
        bottleneck: None,
        paths: vec![PathTimeline {
            name: "p0".into(),
            steps: vec![Step {
                t_s: 0.0,
                rate_mbps: RATE_MBPS,
                delay_ms: DELAY_MS,
                loss: 0.0,
                scan: false,
            }],
            radio: None,
            bursts: None,
        }],
    }
}

/// Nearest-rank quantile of sorted µs values, in ms.
fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i] as f64 / 1e3
}

/// On one constant path (pipe model) a backlogged sender keeps the link's backlog full, so
/// a byte handed to the path waits behind at most `backlog` bytes, is serialised with the
/// frame it travels in (at most `chunk` bytes) and arrives one delay later:
/// delay ≤ d + (backlog + chunk) / R. Once the backlog is full, it waits behind at least
/// backlog − chunk bytes (the room a finished frame frees is at most one frame), so in
/// steady state delay ≥ d + (backlog − chunk) / R. The link delivers whole frames in order,
/// and one path cannot reorder, so nothing else adds to it.
fn assert_steady_state_delay(scheme: &SimScheme, chunk: usize) {
    let link = LinkParams::default();
    let out = run(&one_constant_path(5.0), scheme, &SimParams::default(), |_| {}).unwrap();
    let mut d = out.delay.delays_us.clone();
    d.sort_unstable();
    assert!(d.len() > 1000, "{} samples", d.len());
    let rate = RATE_MBPS * 1e6 / 8.0;
    let lo = DELAY_MS + (link.backlog_bytes - chunk) as f64 / rate * 1e3;
    // + 1 µs per event for the simulator's rounding of instants.
    let hi = DELAY_MS + (link.backlog_bytes + chunk) as f64 / rate * 1e3 + 0.01;
    let (p50, p99, max) = (quantile_ms(&d, 0.5), quantile_ms(&d, 0.99), quantile_ms(&d, 1.0));
    assert!((lo..=hi).contains(&p50), "p50 {p50} ms outside [{lo}, {hi}]");
    assert!((lo..=hi).contains(&p99), "p99 {p99} ms outside [{lo}, {hi}]");
    assert!(max <= hi, "max {max} ms above {hi}");
    assert!(quantile_ms(&d, 0.0) >= DELAY_MS, "faster than the path's delay");
    // In flight at the end: at most the backlog plus the bytes on the wire, one sample
    // per step.
    let in_flight = link.backlog_bytes as f64 + rate * DELAY_MS / 1e3 + chunk as f64;
    assert!(out.delay.undelivered_age_us.len() as f64 <= in_flight / DEFAULT_STEP as f64 + 1.0);
    assert_eq!(out.delay.unmatched, 0);
}

#[test]
fn single_path_tcp_delay_is_the_path_delay_plus_the_backlog() {
    assert_steady_state_delay(&SimScheme::Tcp(0), fbdt_sim::endpoint::TcpEnd::PIPE_CHUNK);
}

/// FBDT holds at most `send_limit_windows` of the path's window undelivered, so on one
/// path it queues less than a TCP that fills the link's backlog — and still keeps the link
/// busy. Between the path's delay and the backlog bound, and the link's rate delivered.
#[test]
fn single_path_fbdt_queues_less_than_the_backlog_and_keeps_the_link_busy() {
    let cfg = Config::default();
    let frame = cfg.segment_size + fbdt_core::wire::Data::OVERHEAD;
    let link = LinkParams::default();
    let duration = 5.0;
    let out = run(
        &one_constant_path(duration),
        &SimScheme::Session(cfg),
        &SimParams::default(),
        |_| {},
    )
    .unwrap();
    let mut d = out.delay.delays_us.clone();
    d.sort_unstable();
    assert!(d.len() > 1000, "{} samples", d.len());
    let rate = RATE_MBPS * 1e6 / 8.0;
    let hi = DELAY_MS + (link.backlog_bytes + frame) as f64 / rate * 1e3 + 0.01;
    let (p50, max) = (quantile_ms(&d, 0.5), quantile_ms(&d, 1.0));
    assert!(quantile_ms(&d, 0.0) >= DELAY_MS, "faster than the path's delay");
    assert!(max <= hi, "max {max} ms above the backlog bound {hi}");
    // Well below the bound: the send limit, not the link's backlog, sets the queue.
    assert!(
        p50 < DELAY_MS + (hi - DELAY_MS) * 0.75,
        "p50 {p50} ms: the backlog filled"
    );
    // The first RTT has nothing to deliver; after that, the link's full rate.
    let carried = out.bytes_delivered as f64 / (rate * (duration - 2.0 * DELAY_MS / 1e3));
    assert!(carried > 0.99, "link used {carried:.3} of its rate");
    assert_eq!(out.delay.unmatched, 0);
}

#[test]
fn mp_delay_is_measured_too() {
    let out = run(
        &one_constant_path(2.0),
        &SimScheme::meta(fbdt_core::SchedulerKind::MinRtt),
        &SimParams::default(),
        |_| {},
    )
    .unwrap();
    // Every followed offset of the delivered bytes has a sample.
    assert_eq!(
        out.delay.delays_us.len() as u64,
        out.bytes_delivered.div_ceil(DEFAULT_STEP)
    );
    assert!(
        !out.delay.undelivered_age_us.is_empty(),
        "a backlogged run ends with bytes in flight"
    );
    assert!(out.delay.delays_us.iter().all(|&us| us >= (DELAY_MS * 1e3) as u64));
}

/// The distribution's deciles and tail for 6 s of `blockage` (deterministic). When FBDT's
/// behaviour changes on purpose, regenerate with `UPDATE_GOLDEN=1 cargo test -p fbdt-sim
/// --test delay` and review the diff.
#[test]
fn blockage_delay_matches_the_golden_distribution() {
    let mut s = Scenario::load("blockage").unwrap();
    s.duration_s = 6.0;
    let out = run(
        &s.schedule(1.0).unwrap(),
        &SimScheme::Session(Config::default()),
        &SimParams::default(),
        |_| {},
    )
    .unwrap();
    let mut d: Vec<u64> = out.delay.capped_us().collect();
    d.sort_unstable();
    let mut text = format!(
        "samples {} undelivered {} unmatched {}\n",
        d.len(),
        out.delay.undelivered_age_us.len(),
        out.delay.unmatched
    );
    for q in [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0] {
        text.push_str(&format!("q{q}: {:.3} ms\n", quantile_ms(&d, q)));
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/blockage-6s-delay.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &text).unwrap();
    }
    let golden = std::fs::read_to_string(path).expect("golden file missing: run with UPDATE_GOLDEN=1");
    assert_eq!(
        text, golden,
        "delay distribution changed; if intended, regenerate with UPDATE_GOLDEN=1"
    );
}
