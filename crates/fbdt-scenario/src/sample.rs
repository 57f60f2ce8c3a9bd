//! A path's rate model → its base rate series over the run (unscaled, before events).

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Origin, ScenarioError};
use crate::limits::MAX_RATE_MBPS;
use crate::mahimahi;
use crate::model::RateSpec;

/// `(t_s, mbps)` sorted, first at 0, all before `duration_s`.
pub(crate) type Series = Vec<(f64, f64)>;

/// Each path draws from its own ChaCha stream of the scenario seed, so adding a path or
/// changing one path's model never changes another path's samples.
fn rng(seed: u64, path_index: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(path_index as u64);
    rng
}

/// A uniform sample in `[lo, hi]`. Written out rather than `gen_range` so the sequence only
/// depends on ChaCha's raw output, not on rand's sampling internals.
fn uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    let u: f64 = rng.gen();
    (lo + u * (hi - lo)).clamp(lo, hi)
}

/// Repeats one period of `(offset_s, mbps)` until `duration_s`.
fn looped(pattern: &[(f64, f64)], period_s: f64, duration_s: f64) -> Series {
    let mut out = Vec::new();
    let mut cycle = 0u64;
    'outer: loop {
        let base = cycle as f64 * period_s;
        for &(off, v) in pattern {
            let t = base + off;
            if t >= duration_s {
                break 'outer;
            }
            out.push((t, v));
        }
        cycle += 1;
    }
    out
}

/// A standard normal sample (Box–Muller), from ChaCha's raw output like [`uniform`].
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    // 1 - u is in (0, 1], so the logarithm is finite.
    let u1: f64 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Streams of the joint Markov chains, clear of the per-path streams (path indices).
const MARKOV_STREAM: u64 = 1 << 32;

/// The High (true) / Low state of two links over `steps` steps: a joint chain in which each
/// link on its own is a two-state Markov chain flipping with probability `p` (0 ≤ p ≤ 1/2)
/// per step, and the stationary correlation of the two ±1 states is `q` (−1 ≤ q ≤ 1).
///
/// Construction. Call the links' states *agreeing* (HH, LL) or *disagreeing* (HL, LH). Each
/// step either nothing flips, one link flips (each with half the probability), or both flip.
/// In the state `q` favours (agreeing for q ≥ 0, disagreeing for q < 0) both flip with
/// probability 2p|q|/(1+|q|) and one flips with 2p(1−|q|)/(1+|q|); in the other state only
/// single flips happen, with probability 2p. Then each link flips with probability exactly
/// `p` in every joint state (so each is the Markov chain asked for), and the balance between
/// the two classes, π_fav · 2p(1−|q|)/(1+|q|) = π_other · 2p, gives π_fav = (1+|q|)/2: the
/// correlation is π_agree − π_disagree = q. Total move probability is at most 2p ≤ 1.
///
/// Paper 003's Fig. 13 instead flips link 1 with p and then draws link 2 equal to link 1 with
/// probability q, independent of link 2's past: its q is (1 + correlation)/2, and link 2 is
/// not a Markov chain with flip probability p (at correlation 0 it is i.i.d. per step). We
/// keep what the text says — each link flips with p, the links correlate with q.
pub(crate) fn markov_pair(seed: u64, stream: u64, p: f64, q: f64, steps: usize) -> Vec<[bool; 2]> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(MARKOV_STREAM + stream);
    let a = q.abs();
    let favoured_both = 2.0 * p * a / (1.0 + a);
    let favoured_single = 2.0 * p * (1.0 - a) / (1.0 + a);
    // Start from the stationary distribution: each link High half the time, agreeing with
    // probability (1+q)/2.
    let first = r.gen::<f64>() < 0.5;
    let agree = r.gen::<f64>() < (1.0 + q) / 2.0;
    let mut s = [first, if agree { first } else { !first }];
    let mut out = Vec::with_capacity(steps);
    for _ in 0..steps {
        out.push(s);
        let favoured = (s[0] == s[1]) == (q >= 0.0);
        let (both, single) = if favoured {
            (favoured_both, favoured_single)
        } else {
            (0.0, 2.0 * p)
        };
        let u: f64 = r.gen();
        if u < both {
            s = [!s[0], !s[1]];
        } else if u < both + single / 2.0 {
            s[0] = !s[0];
        } else if u < both + single {
            s[1] = !s[1];
        }
    }
    out
}

/// `pair_index`: the path a `markov` model is paired with, if any.
pub(crate) fn base_rate(
    spec: &RateSpec,
    seed: u64,
    path_index: usize,
    pair_index: Option<usize>,
    duration_s: f64,
) -> Result<Series, ScenarioError> {
    Ok(match spec {
        RateSpec::Constant { mbps } => vec![(0.0, *mbps)],
        RateSpec::Steps { steps, period_s } => {
            let pattern: Vec<(f64, f64)> = steps.iter().map(|s| (s.at_s, s.mbps)).collect();
            match period_s {
                Some(p) => looped(&pattern, *p, duration_s),
                None => pattern
                    .into_iter()
                    .filter(|&(t, _)| t == 0.0 || t < duration_s)
                    .collect(),
            }
        }
        RateSpec::Random {
            min_mbps,
            max_mbps,
            step_s,
        } => {
            let mut r = rng(seed, path_index);
            let mut out = Vec::new();
            let mut k = 0u64;
            while (k as f64) * step_s < duration_s {
                out.push((k as f64 * step_s, uniform(&mut r, *min_mbps, *max_mbps)));
                k += 1;
            }
            out
        }
        RateSpec::Alternating {
            high_min_mbps,
            high_max_mbps,
            high_s,
            low_min_mbps,
            low_max_mbps,
            low_s,
            step_s,
            start_low,
        } => {
            let mut r = rng(seed, path_index);
            let phases = [
                (*high_min_mbps, *high_max_mbps, *high_s),
                (*low_min_mbps, *low_max_mbps, *low_s),
            ];
            let order = if *start_low { [1, 0] } else { [0, 1] };
            let cycle_s = high_s + low_s;
            let mut out = Vec::new();
            let mut cycle = 0u64;
            'outer: loop {
                let mut phase_start = cycle as f64 * cycle_s;
                for &ph in &order {
                    let (lo, hi, dwell) = phases[ph];
                    let mut m = 0u64;
                    loop {
                        let t = phase_start + m as f64 * step_s;
                        if t >= duration_s {
                            break 'outer;
                        }
                        if m > 0 && (m as f64) * step_s >= dwell {
                            break;
                        }
                        out.push((t, uniform(&mut r, lo, hi)));
                        m += 1;
                    }
                    phase_start += dwell;
                }
                cycle += 1;
            }
            out
        }
        RateSpec::Markov {
            high_mean_mbps,
            high_sd_mbps,
            low_mean_mbps,
            low_sd_mbps,
            flip_p,
            correlation,
            step_s,
            ..
        } => {
            // Both paths of a pair replay the chain of the lower index; each reads its own
            // column. An unpaired path uses column 0 of a chain of its own.
            let (stream, column, q) = match pair_index {
                Some(j) => (path_index.min(j) as u64, usize::from(path_index > j), *correlation),
                None => (path_index as u64 + MARKOV_STREAM / 2, 0, 0.0),
            };
            let steps = (duration_s / step_s).ceil() as usize;
            let chain = markov_pair(seed, stream, *flip_p, q, steps);
            let mut r = rng(seed, path_index);
            chain
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    let (mean, sd) = if s[column] {
                        (high_mean_mbps, high_sd_mbps)
                    } else {
                        (low_mean_mbps, low_sd_mbps)
                    };
                    let v = (mean + sd * normal(&mut r)).clamp(0.0, MAX_RATE_MBPS);
                    (k as f64 * step_s, v)
                })
                .filter(|&(t, _)| t < duration_s)
                .collect()
        }
        RateSpec::Trace { file, bin_ms } => {
            let ts = mahimahi::read(Path::new(file))?;
            let (period_s, bins) = mahimahi::bin(&ts, *bin_ms, file)?;
            if let Some(&(off, v)) = bins.iter().find(|b| b.1 > MAX_RATE_MBPS) {
                return Err(ScenarioError::Trace {
                    at: Origin {
                        file: file.clone(),
                        line: None,
                    },
                    message: format!("{v:.0} Mbit/s in the bin at {off} s exceeds {MAX_RATE_MBPS} Mbit/s"),
                });
            }
            looped(&bins, period_s, duration_s)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fraction of steps in which each link changed state, and the correlation of the two
    /// ±1 state series.
    fn flip_rates_and_correlation(chain: &[[bool; 2]]) -> ([f64; 2], f64) {
        let n = (chain.len() - 1) as f64;
        let flips = |i: usize| chain.windows(2).filter(|w| w[0][i] != w[1][i]).count() as f64 / n;
        let pm = |b: bool| if b { 1.0 } else { -1.0 };
        let len = chain.len() as f64;
        let (m0, m1) = (
            chain.iter().map(|s| pm(s[0])).sum::<f64>() / len,
            chain.iter().map(|s| pm(s[1])).sum::<f64>() / len,
        );
        let cov = chain.iter().map(|s| (pm(s[0]) - m0) * (pm(s[1]) - m1)).sum::<f64>() / len;
        let var = |m: f64| 1.0 - m * m;
        ([flips(0), flips(1)], cov / (var(m0) * var(m1)).sqrt())
    }

    #[test]
    fn markov_pair_has_the_requested_flip_rate_and_correlation() {
        // 400 000 steps. Sampling error: a flip rate's sd is sqrt(p(1-p)/N) < 0.001; the
        // states are autocorrelated with lag-one coefficient 1-2p, which inflates the
        // correlation estimate's variance by about (1+ρ)/(1−ρ) = (1-p)/p (9 for p = 0.1,
        // 19 for p = 0.05): sd ≈ sqrt(19/N) ≈ 0.007. Tolerances are ≥ 4 sd.
        let n = 400_000;
        for (seed, p, q) in [
            (1, 0.1, -0.34),
            (2, 0.1, 0.0),
            (3, 0.1, 0.34),
            (4, 0.05, 0.8),
            (5, 0.3, -0.9),
            (6, 0.5, 0.5),
            (7, 0.1, 1.0),
            (8, 0.1, -1.0),
        ] {
            let chain = markov_pair(seed, 0, p, q, n);
            let (flips, corr) = flip_rates_and_correlation(&chain);
            for f in flips {
                assert!((f - p).abs() < 0.005, "p={p} q={q}: flip rate {f}");
            }
            assert!((corr - q).abs() < 0.03, "p={p} q={q}: correlation {corr}");
        }
    }

    #[test]
    fn markov_pair_is_seeded() {
        assert_eq!(markov_pair(1, 0, 0.1, 0.3, 1000), markov_pair(1, 0, 0.1, 0.3, 1000));
        assert_ne!(markov_pair(1, 0, 0.1, 0.3, 1000), markov_pair(2, 0, 0.1, 0.3, 1000));
        assert_ne!(markov_pair(1, 0, 0.1, 0.3, 1000), markov_pair(1, 1, 0.1, 0.3, 1000));
    }

    #[test]
    fn normal_has_unit_variance() {
        let mut r = rng(9, 0);
        let xs: Vec<f64> = (0..100_000).map(|_| normal(&mut r)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.03, "{mean} {var}");
    }
}
