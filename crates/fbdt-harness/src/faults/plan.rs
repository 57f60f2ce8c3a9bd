//! Seeded fault plans: which fault, on which path, when and for how long.

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// What happens to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum FaultKind {
    /// Hard cut: the path goes silent (no reset, no error) and never returns in the run.
    Cut,
    /// Blackhole: the path goes silent without a reset for a while, then returns.
    Blackhole,
    /// The connection is reset (the interface died): both ends learn at once; the link
    /// is down for a while, then a new connection joins.
    Reset,
    /// Blockage: the rate falls to 1/1000 of its value (a blocked mmWave beam still
    /// trickles) for a while — the path looks alive but carries next to nothing.
    Blockage,
    /// The client's uplink (client → server: the download's ACKs) is out for a while.
    Uplink,
    /// The client's downlink (server → client: the download's data) is out for a while.
    Downlink,
    /// Flapping: 2–5 short silent outages in a row.
    Flap,
}

impl FaultKind {
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Cut,
        FaultKind::Blackhole,
        FaultKind::Reset,
        FaultKind::Blockage,
        FaultKind::Uplink,
        FaultKind::Downlink,
        FaultKind::Flap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Cut => "cut",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Reset => "reset",
            FaultKind::Blockage => "blockage",
            FaultKind::Uplink => "uplink",
            FaultKind::Downlink => "downlink",
            FaultKind::Flap => "flap",
        }
    }
}

/// One fault interval of a plan: `path` is out (as `kind` says) in `[start_s, start_s +
/// duration_s)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub path: String,
    pub path_index: usize,
    pub start_s: f64,
    pub duration_s: f64,
}

impl Fault {
    pub fn end_s(&self) -> f64 {
        self.start_s + self.duration_s
    }
}

/// The time window faults are drawn in, derived from the run's duration.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Run length, s.
    pub duration_s: f64,
}

/// Faults start after the session carries data at full rate: one second covers the
/// handshake, the joins and (TCP model) slow start at the scenarios' round trips of a few ms.
pub const WARMUP_S: f64 = 1.0;
/// Time left after the last return to see the path carry again and the stream go on:
/// hundreds of round trips of the scenarios' paths plus a backed-off retransmission timer.
pub const TAIL_S: f64 = 1.5;
/// Longest outage that returns: 2 s, beyond kernel MPTCP's and QUIC stacks' give-up times.
pub const MAX_OUTAGE_S: f64 = 2.0;
/// Shortest outage: 50 ms, the bound's floor (a shorter one cannot break it).
pub const MIN_OUTAGE_S: f64 = 0.05;

impl Window {
    /// The shortest run that fits a warm-up, the longest fault and the tail.
    pub const MIN_DURATION_S: f64 = WARMUP_S + MAX_OUTAGE_S + TAIL_S + 0.5;

    pub fn new(duration_s: f64) -> Result<Self> {
        if !(duration_s.is_finite() && duration_s >= Self::MIN_DURATION_S && duration_s <= 3600.0) {
            bail!(
                "a fault run must last between {} and 3600 s (warm-up {WARMUP_S} s, faults up to {MAX_OUTAGE_S} s, \
                 {TAIL_S} s after the last return), got {duration_s}",
                Self::MIN_DURATION_S
            );
        }
        Ok(Window { duration_s })
    }

    /// Latest start of a fault that must end `TAIL_S` before the run does.
    fn latest_start(&self, length_s: f64) -> f64 {
        self.duration_s - TAIL_S - length_s
    }
}

/// The plan of run `run` of a campaign seeded `seed`: fault kind and path cycle so that
/// every kind meets every path equally often (`kinds` × `paths` in turn); times and
/// lengths are drawn from a generator seeded by (seed, run).
pub fn plan(seed: u64, run: u64, kinds: &[FaultKind], paths: &[String], window: Window) -> Vec<Fault> {
    let kind = kinds[(run % kinds.len() as u64) as usize];
    let path_index = ((run / kinds.len() as u64) % paths.len() as u64) as usize;
    // Golden-ratio mixing keeps neighbouring runs' streams unrelated.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ run.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let fault = |kind, start_s: f64, duration_s: f64| Fault {
        kind,
        path: paths[path_index].clone(),
        path_index,
        start_s: round_ms(start_s),
        duration_s: round_ms(duration_s),
    };
    match kind {
        FaultKind::Cut => {
            let start = rng.gen_range(WARMUP_S..window.latest_start(0.0));
            vec![fault(kind, start, window.duration_s - round_ms(start))]
        }
        FaultKind::Flap => {
            let k = rng.gen_range(2..=5);
            let pieces: Vec<(f64, f64)> = (0..k)
                .map(|_| (rng.gen_range(0.02..0.2), rng.gen_range(0.05..0.3)))
                .collect();
            let total: f64 = pieces.iter().map(|(on, off)| on + off).sum();
            let mut t = rng.gen_range(WARMUP_S..window.latest_start(total).max(WARMUP_S + 1e-3));
            pieces
                .into_iter()
                .map(|(out, up)| {
                    let f = fault(kind, t, out);
                    t = f.end_s() + up;
                    f
                })
                .collect()
        }
        _ => {
            let length = rng.gen_range(MIN_OUTAGE_S..MAX_OUTAGE_S);
            let start = rng.gen_range(WARMUP_S..window.latest_start(length));
            vec![fault(kind, start, length)]
        }
    }
}

/// Plans in whole milliseconds: what the JSON says is what ran.
fn round_ms(t: f64) -> f64 {
    (t * 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn every_kind_meets_every_path() {
        let w = Window::new(6.0).unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for run in 0..14 {
            let p = plan(7, run, &FaultKind::ALL, &paths(), w);
            seen.insert((p[0].kind, p[0].path_index));
        }
        assert_eq!(seen.len(), 14);
    }

    #[test]
    fn faults_fit_the_window_and_repeat() {
        let w = Window::new(6.0).unwrap();
        for run in 0..500 {
            let p = plan(3, run, &FaultKind::ALL, &paths(), w);
            assert_eq!(p, plan(3, run, &FaultKind::ALL, &paths(), w));
            for f in &p {
                assert!(f.start_s >= WARMUP_S - 1e-9, "{f:?}");
                assert!(f.duration_s > 0.0, "{f:?}");
                if f.kind != FaultKind::Cut {
                    assert!(f.end_s() <= 6.0 - TAIL_S + 1e-3, "{f:?}");
                }
            }
        }
    }

    #[test]
    fn too_short_a_run_is_refused() {
        assert!(Window::new(2.0).is_err());
        assert!(Window::new(f64::NAN).is_err());
    }
}
