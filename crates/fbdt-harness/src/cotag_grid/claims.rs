//! The paper's qualitative claims about COTAG, judged over a grid's faithful points only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::{Point, CORRELATIONS};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    Pass,
    Miss,
    /// No point (or cell) could be judged: every one had an unfaithful run.
    Unfaithful,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
            Verdict::Unfaithful => "unfaithful",
        }
    }
}

/// One of the paper's qualitative claims, judged on the faithful points.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Claim {
    pub claim: String,
    pub verdict: Verdict,
    /// Points (or cells) judged, and left out as unfaithful.
    pub judged: usize,
    pub unfaithful: usize,
    pub detail: String,
}

/// "COTAG outperforms `rival` in all cases": at every point where COTAG and the rival ran
/// faithfully. (Seen by the grid's tests, which judge repeated runs with it.)
pub(super) fn beats(points: &[Point], rival: &str) -> Claim {
    let (mut wins, mut judged, mut unfaithful) = (0, 0, 0);
    // With repetitions, the same seed is the same channel for both: paired runs say whether a
    // win holds channel by channel, not only on the means.
    let (mut paired_wins, mut paired) = (0, 0);
    for p in points {
        match (p.best_cotag(), p.faithful_mbps(rival)) {
            (Some(c), Some(r)) => {
                judged += 1;
                wins += usize::from(c.mbps() > r);
                if let Some(rival_runs) = p.get(rival).map(|x| &x.runs) {
                    for (a, b) in c.runs.iter().zip(rival_runs) {
                        if a.faithful && b.faithful && a.seed == b.seed {
                            paired += 1;
                            paired_wins += usize::from(a.mbps() > b.mbps());
                        }
                    }
                }
            }
            _ => unfaithful += 1,
        }
    }
    Claim {
        claim: format!("COTAG (best T) beats {rival} at every point"),
        verdict: match judged {
            0 => Verdict::Unfaithful,
            _ if wins == judged => Verdict::Pass,
            _ => Verdict::Miss,
        },
        judged,
        unfaithful,
        detail: if paired > 0 {
            format!(
                "COTAG ahead at {wins} of {judged} faithful points; seed by seed (the same channel) \
                 in {paired_wins} of {paired} paired faithful runs"
            )
        } else {
            format!("COTAG ahead at {wins} of {judged} faithful points")
        },
    }
}

/// "COTAG performs better with higher correlation": its gain over dual-rr (mean over the
/// (PER, latency) cells where all three correlations ran faithfully) does not fall from
/// negative to zero to positive correlation.
fn grows_with_correlation(points: &[Point]) -> Claim {
    let mut cells: BTreeMap<(u64, u64), BTreeMap<&str, f64>> = BTreeMap::new();
    let mut unfaithful = 0;
    for p in points {
        match (p.best_cotag(), p.faithful_mbps("dual-rr")) {
            (Some(c), Some(r)) if r > 0.0 => {
                cells
                    .entry((p.per.to_bits(), p.latency_ms.to_bits()))
                    .or_default()
                    .insert(p.correlation.as_str(), c.mbps() / r);
            }
            _ => unfaithful += 1,
        }
    }
    let full: Vec<&BTreeMap<&str, f64>> = cells.values().filter(|c| c.len() == CORRELATIONS.len()).collect();
    let gain: Vec<f64> = CORRELATIONS
        .iter()
        .map(|c| full.iter().map(|m| m[c]).sum::<f64>() / full.len().max(1) as f64)
        .collect();
    let verdict = if full.is_empty() {
        Verdict::Unfaithful
    } else if gain.windows(2).all(|w| w[0] <= w[1]) {
        Verdict::Pass
    } else {
        Verdict::Miss
    };
    Claim {
        claim: "COTAG's gain over dual-rr grows with correlation".into(),
        verdict,
        judged: full.len(),
        unfaithful,
        detail: if full.is_empty() {
            "no (PER, latency) cell with all three correlations faithful".into()
        } else {
            format!(
                "mean best-COTAG / dual-rr: neg {:.2}, zero {:.2}, pos {:.2} over {} complete cells",
                gain[0],
                gain[1],
                gain[2],
                full.len()
            )
        },
    }
}

/// "COTAG is affected less when the latency increases": throughput at the largest latency
/// ÷ at the smallest, mean over the (correlation, PER) cells where both ran faithfully, is
/// higher for COTAG than for dual-rr and for MPTCP.
fn less_affected_by_latency(points: &[Point]) -> Claim {
    let (lo, hi) = points.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
        (lo.min(p.latency_ms), hi.max(p.latency_ms))
    });
    let value = |p: &Point, scheme: &str| -> Option<f64> {
        if scheme == "cotag" {
            p.best_cotag().map(|c| c.mbps())
        } else {
            p.faithful_mbps(scheme)
        }
    };
    let mut retention: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut judged = 0;
    let mut unfaithful = 0;
    for p in points.iter().filter(|p| p.latency_ms == lo) {
        let Some(q) = points
            .iter()
            .find(|q| q.latency_ms == hi && q.correlation == p.correlation && q.per == p.per)
        else {
            continue;
        };
        let r: Option<Vec<f64>> = ["cotag", "dual-rr", "mptcp"]
            .iter()
            .map(|s| match (value(p, s), value(q, s)) {
                (Some(a), Some(b)) if a > 0.0 => Some(b / a),
                _ => None,
            })
            .collect();
        match r {
            Some(r) => {
                judged += 1;
                for (s, v) in ["cotag", "dual-rr", "mptcp"].iter().zip(r) {
                    retention.entry(s).or_default().push(v);
                }
            }
            None => unfaithful += 1,
        }
    }
    let mean = |s: &str| retention.get(s).map_or(0.0, |v| v.iter().sum::<f64>() / v.len() as f64);
    let (c, d, m) = (mean("cotag"), mean("dual-rr"), mean("mptcp"));
    Claim {
        claim: format!("COTAG is less affected by latency ({lo} → {hi} ms) than dual-rr and MPTCP"),
        verdict: if judged == 0 || lo == hi {
            Verdict::Unfaithful
        } else if c > d && c > m {
            Verdict::Pass
        } else {
            Verdict::Miss
        },
        judged,
        unfaithful,
        detail: if lo == hi {
            format!("one latency only ({lo} ms): nothing to compare")
        } else if judged == 0 {
            format!("no (correlation, PER) cell with COTAG, dual-rr and MPTCP faithful at {lo} and {hi} ms")
        } else {
            format!("mean throughput kept at {hi} ms vs {lo} ms: COTAG {c:.2}, dual-rr {d:.2}, MPTCP {m:.2}")
        },
    }
}

/// The paper's claims over the grid's points.
pub fn claims(points: &[Point]) -> Vec<Claim> {
    vec![
        beats(points, "dual-rr"),
        beats(points, "mptcp"),
        grows_with_correlation(points),
        less_affected_by_latency(points),
    ]
}
