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

pub(crate) fn base_rate(
    spec: &RateSpec,
    seed: u64,
    path_index: usize,
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
