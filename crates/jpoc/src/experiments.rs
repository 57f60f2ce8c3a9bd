//! The four evaluations (thesis Fig. 3.5 and 3.7) as pure functions: config + seed in,
//! serialisable report out. `tick` is called once per unit of work (for a progress bar).

use crate::channel::Site;
use crate::config::Config;
use crate::metrics::{bracket_of, Summary, BRACKET_LABELS};
use crate::rng::{stream, Purpose};
use crate::sim::{simulate, Model, Protocol, RunResult, SimError, TxPolicy};
use rand::Rng;
use serde::Serialize;
use std::f64::consts::PI;

// ───────────────────────────── fairness (Fig. 3.7a) ─────────────────────────────

#[derive(Debug, Clone, Serialize)]
pub struct FairnessPoint {
    pub blockage: f64,
    pub jain_jpoc: f64,
    pub jain_80211ad: f64,
    pub jain_jpoc_ci95: [f64; 2],
    pub jain_80211ad_ci95: [f64; 2],
    pub failure_jpoc: f64,
    pub failure_80211ad: f64,
    pub minislots_jpoc: f64,
    pub minislots_80211ad: f64,
    pub contenders_per_bi_jpoc: f64,
    pub contenders_per_bi_80211ad: f64,
    /// Mean airtime of the farthest quarter of clients / nearest quarter (realization mean).
    pub far_near_airtime_jpoc: f64,
    pub far_near_airtime_80211ad: f64,
    /// 802.11ad: A-BFTs skipped in RSS back-off per client per second.
    pub backoff_skips_per_client_s_80211ad: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FairnessReport {
    pub clients: usize,
    pub repeat: usize,
    pub seed: u64,
    pub points: Vec<FairnessPoint>,
}

fn ci(s: &Summary) -> [f64; 2] {
    [s.ci95_low, s.ci95_high]
}

fn pooled_failure(runs: &[RunResult]) -> f64 {
    let a: u64 = runs.iter().map(|r| r.attempts).sum();
    let f: u64 = runs.iter().map(|r| r.failures).sum();
    if a == 0 {
        0.0
    } else {
        f as f64 / a as f64
    }
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        f64::NAN
    } else {
        s / n as f64
    }
}

fn run_many(
    model: &Model,
    p: Protocol,
    seed: u64,
    repeat: usize,
    tick: &mut dyn FnMut(),
) -> Result<Vec<RunResult>, SimError> {
    (0..repeat as u64)
        .map(|rep| {
            let r = simulate(model, p, seed, rep);
            tick();
            r
        })
        .collect()
}

/// Jain's index vs blockage probability for both protocols. Realization `rep` uses the same
/// deployment at every blockage value and for both protocols (common random numbers).
pub fn fairness(
    base: &Config,
    blockages: &[f64],
    repeat: usize,
    seed: u64,
    tick: &mut dyn FnMut(),
) -> Result<FairnessReport, SimError> {
    let mut points = Vec::new();
    for &b in blockages {
        let mut cfg = base.clone();
        cfg.dynamics.blockage_prob = b;
        let model = Model::new(&cfg);
        let j = run_many(&model, Protocol::Jpoc, seed, repeat, tick)?;
        let a = run_many(&model, Protocol::Ieee80211ad, seed, repeat, tick)?;
        let sj = Summary::of(&j.iter().map(|r| r.jain).collect::<Vec<_>>());
        let sa = Summary::of(&a.iter().map(|r| r.jain).collect::<Vec<_>>());
        points.push(FairnessPoint {
            blockage: b,
            jain_jpoc: sj.mean,
            jain_80211ad: sa.mean,
            jain_jpoc_ci95: ci(&sj),
            jain_80211ad_ci95: ci(&sa),
            failure_jpoc: pooled_failure(&j),
            failure_80211ad: pooled_failure(&a),
            minislots_jpoc: mean(j.iter().map(|r| r.minislots_per_bi)),
            minislots_80211ad: mean(a.iter().map(|r| r.minislots_per_bi)),
            contenders_per_bi_jpoc: mean(j.iter().map(|r| r.contenders_per_bi)),
            contenders_per_bi_80211ad: mean(a.iter().map(|r| r.contenders_per_bi)),
            far_near_airtime_jpoc: mean(j.iter().map(|r| r.far_near_airtime_ratio())),
            far_near_airtime_80211ad: mean(a.iter().map(|r| r.far_near_airtime_ratio())),
            backoff_skips_per_client_s_80211ad: mean(
                a.iter()
                    .map(|r| r.backoff_skips as f64 / (r.airtime_s.len().max(1) as f64 * cfg.sim.duration_s)),
            ),
        });
    }
    Ok(FairnessReport {
        clients: base.sim.clients,
        repeat,
        seed,
        points,
    })
}

// ───────────────────────────── overhead (Fig. 3.7b) ─────────────────────────────

#[derive(Debug, Clone, Serialize)]
pub struct OverheadPoint {
    pub clients: usize,
    /// JPOC: mean mini-slots allocated per A-BFT (its adaptive M).
    pub minislots_jpoc: f64,
    pub minislots_jpoc_ci95: [f64; 2],
    /// Measured JPOC per-attempt failure probability (target P0).
    pub failure_jpoc: f64,
    /// 802.11ad: smallest slot count whose pooled failure probability ≤ P0, × 36.
    pub minislots_80211ad: f64,
    pub slots_80211ad: usize,
    pub failure_80211ad: f64,
    /// True if even `max_slots` did not meet P0 (then minislots_80211ad is a lower bound).
    pub ieee80211ad_capped: bool,
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct OverheadReport {
    pub p0: f64,
    pub blockage: f64,
    pub repeat: usize,
    pub seed: u64,
    pub max_slots: usize,
    pub points: Vec<OverheadPoint>,
}

/// For each client count: JPOC's mean M (its controller targets `p0`), and the smallest
/// 802.11ad slot count meeting `p0`, found by doubling then bisection (failure falls with
/// more slots; the repeats use the same seeds at every slot count).
// One call per figure; the parameters mirror the CLI flags one to one.
#[allow(clippy::too_many_arguments)]
pub fn overhead(
    base: &Config,
    p0: f64,
    blockage: f64,
    clients: &[usize],
    repeat: usize,
    max_slots: usize,
    seed: u64,
    tick: &mut dyn FnMut(),
) -> Result<OverheadReport, SimError> {
    let mut points = Vec::new();
    for &n in clients {
        let mut cfg = base.clone();
        cfg.sim.clients = n;
        cfg.dynamics.blockage_prob = blockage;
        cfg.jpoc.p0 = p0;
        let model = Model::new(&cfg);
        let j = run_many(&model, Protocol::Jpoc, seed, repeat, tick)?;
        let sj = Summary::of(&j.iter().map(|r| r.minislots_per_bi).collect::<Vec<_>>());

        let eval = |slots: usize, tick: &mut dyn FnMut()| -> Result<f64, SimError> {
            let mut c = cfg.clone();
            c.ieee80211ad.slots = slots;
            let m = Model::new(&c);
            Ok(pooled_failure(&run_many(
                &m,
                Protocol::Ieee80211ad,
                seed,
                repeat,
                tick,
            )?))
        };
        // Doubling: find hi with failure ≤ p0 (or hit the cap).
        let mut lo = 0usize; // largest slot count known to fail the target
        let mut hi = 1usize;
        let mut f_hi = eval(hi, tick)?;
        while f_hi > p0 && hi < max_slots {
            lo = hi;
            hi = (hi * 2).min(max_slots);
            f_hi = eval(hi, tick)?;
        }
        let capped = f_hi > p0;
        if !capped {
            while hi - lo > 1 {
                let mid = (lo + hi) / 2;
                let f = eval(mid, tick)?;
                if f <= p0 {
                    hi = mid;
                    f_hi = f;
                } else {
                    lo = mid;
                }
            }
        }
        let per_slot = cfg.ieee80211ad.minislots_per_slot;
        let ms_ad = (hi * per_slot) as f64;
        points.push(OverheadPoint {
            clients: n,
            minislots_jpoc: sj.mean,
            minislots_jpoc_ci95: ci(&sj),
            failure_jpoc: pooled_failure(&j),
            minislots_80211ad: ms_ad,
            slots_80211ad: hi,
            failure_80211ad: f_hi,
            ieee80211ad_capped: capped,
            ratio: ms_ad / sj.mean,
        });
    }
    Ok(OverheadReport {
        p0,
        blockage,
        repeat,
        seed,
        max_slots,
        points,
    })
}

/// Upper bound of `tick` calls of [`overhead`] for a progress bar (doubling + bisection).
pub fn overhead_work(clients: usize, repeat: usize, max_slots: usize) -> u64 {
    let steps = 2 * (usize::BITS - max_slots.max(1).leading_zeros()) as u64 + 2;
    clients as u64 * repeat as u64 * steps
}

// ───────────────────────────── good beams (Fig. 3.5a) ─────────────────────────────

#[derive(Debug, Clone, Serialize)]
pub struct BeamSeries {
    pub label: String,
    /// None = no power control (max power).
    pub gamma_db: Option<f64>,
    /// Percentage of clients per bracket (BRACKET_LABELS), mean over realizations.
    pub percent: Vec<f64>,
    pub percent_ci95: Vec<[f64; 2]>,
    pub mean_good_beams: f64,
    pub max_good_beams: usize,
    /// Share of clients with 1–12 good beams (the thesis' γ = 4 claim: > 90%).
    pub percent_1_to_12: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BeamsReport {
    pub samples: usize,
    pub repeat: usize,
    pub seed: u64,
    pub brackets: Vec<String>,
    pub series: Vec<BeamSeries>,
}

/// Good-beam count distribution over random client drops, without PC and with PC for
/// each γ; every policy sees the same drops.
pub fn beams(
    cfg: &Config,
    gammas: &[f64],
    samples: usize,
    repeat: usize,
    seed: u64,
    tick: &mut dyn FnMut(),
) -> Result<BeamsReport, SimError> {
    let model = Model::new(cfg);
    let mut policies = vec![(String::from("W/O PC"), None)];
    for &g in gammas {
        policies.push((format!("W PC, gamma = {g} dB"), Some(g)));
    }
    let nb = BRACKET_LABELS.len();
    // per policy, per repetition, per bracket: percentage
    let mut pct: Vec<Vec<Vec<f64>>> = vec![Vec::new(); policies.len()];
    let mut sum_beams = vec![0.0; policies.len()];
    let mut max_beams = vec![0usize; policies.len()];
    let mut within_12 = vec![0usize; policies.len()];
    for rep in 0..repeat as u64 {
        let mut rng = stream(seed, Purpose::Beams, rep);
        let mut counts = vec![vec![0usize; nb]; policies.len()];
        for _ in 0..samples {
            let (_, link) = model.draw_client(&mut rng)?;
            for (k, (_, g)) in policies.iter().enumerate() {
                let policy = match g {
                    None => TxPolicy::Max,
                    Some(g) => TxPolicy::PowerControl { gamma_db: *g },
                };
                let n = model.good_beams(&model.abft_rx_dbm(&link, policy));
                counts[k][bracket_of(n)] += 1;
                sum_beams[k] += n as f64;
                max_beams[k] = max_beams[k].max(n);
                within_12[k] += (1..=12).contains(&n) as usize;
            }
        }
        for k in 0..policies.len() {
            pct[k].push(counts[k].iter().map(|&c| 100.0 * c as f64 / samples as f64).collect());
        }
        tick();
    }
    let total = (samples * repeat) as f64;
    let series = policies
        .into_iter()
        .enumerate()
        .map(|(k, (label, gamma_db))| {
            let sums: Vec<Summary> = (0..nb)
                .map(|b| Summary::of(&pct[k].iter().map(|r| r[b]).collect::<Vec<_>>()))
                .collect();
            BeamSeries {
                label,
                gamma_db,
                percent: sums.iter().map(|s| s.mean).collect(),
                percent_ci95: sums.iter().map(ci).collect(),
                mean_good_beams: sum_beams[k] / total,
                max_good_beams: max_beams[k],
                percent_1_to_12: 100.0 * within_12[k] as f64 / total,
            }
        })
        .collect();
    Ok(BeamsReport {
        samples,
        repeat,
        seed,
        brackets: BRACKET_LABELS.iter().map(|s| s.to_string()).collect(),
        series,
    })
}

// ───────────────────────────── heatmap (Fig. 3.1c / 3.5b,c) ─────────────────────────────

#[derive(Debug, Clone, Serialize)]
pub struct HeatCell {
    pub x: f64,
    pub y: f64,
    /// Mean S_other / mean S_near over realizations; None when the near client never won
    /// a beam (index undefined — the other client is at least as strong everywhere).
    pub index: Option<f64>,
    pub s_other: f64,
    pub s_near: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeatPanel {
    pub label: String,
    pub gamma_db: Option<f64>,
    pub cells: Vec<HeatCell>,
    /// Share of cells whose index is ≥ 0.5 (None counts as fair).
    pub fraction_fair: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HeatmapReport {
    pub cell_m: f64,
    pub near_m: f64,
    pub repeat: usize,
    pub seed: u64,
    pub radius_m: f64,
    pub panels: Vec<HeatPanel>,
}

/// Competition fairness index S_other/S_near (thesis sec. 3.1): S_X counts beams i that the
/// AP decodes from X (SNR ≥ 1 dB) and that are ≥ 3 dB stronger than the other client's beam i.
/// Near client at `near_m` in front of the AP (LOS, facing it); the other on a grid.
pub fn heatmap(
    cfg: &Config,
    gammas: &[f64],
    cell_m: f64,
    near_m: f64,
    repeat: usize,
    seed: u64,
    tick: &mut dyn FnMut(),
) -> Result<HeatmapReport, SimError> {
    let model = Model::new(cfg);
    let r = cfg.cell.radius_m;
    let mut centres = Vec::new();
    let n = (2.0 * r / cell_m).ceil() as i64;
    for iy in 0..n {
        for ix in 0..n {
            let x = -r + cell_m * (ix as f64 + 0.5);
            let y = -r + cell_m * (iy as f64 + 0.5);
            let d = x.hypot(y);
            if d <= r && d >= cfg.cell.min_distance_m {
                centres.push((x, y));
            }
        }
    }
    let mut policies = vec![(String::from("W/O PC"), None)];
    for &g in gammas {
        policies.push((format!("W PC, gamma = {g} dB"), Some(g)));
    }
    let to_policy = |g: &Option<f64>| match g {
        None => TxPolicy::Max,
        Some(g) => TxPolicy::PowerControl { gamma_db: *g },
    };
    let noise = cfg.radio.noise_dbm();
    let dec = cfg.radio.decode_snr_db;
    let cap = cfg.radio.capture_db;
    let mut acc = vec![vec![(0.0f64, 0.0f64); centres.len()]; policies.len()];
    let near_site = Site {
        x: near_m,
        y: 0.0,
        orientation: PI,
    }; // facing the AP at the origin
    for (ci_, &(x, y)) in centres.iter().enumerate() {
        let mut rng = stream(seed, Purpose::Heatmap, ci_ as u64);
        for _ in 0..repeat {
            let near = model.link(&near_site, Some(true), &mut rng);
            let other_site = Site {
                x,
                y,
                orientation: rng.gen_range(-PI..PI),
            };
            let other = model.link(&other_site, None, &mut rng);
            for (k, (_, g)) in policies.iter().enumerate() {
                let p = to_policy(g);
                let a = model.abft_rx_dbm(&near, p);
                let b = model.abft_rx_dbm(&other, p);
                let (mut s_near, mut s_other) = (0usize, 0usize);
                for (pa, pb) in a.iter().zip(&b) {
                    if pa - noise >= dec && pa - pb >= cap {
                        s_near += 1;
                    }
                    if pb - noise >= dec && pb - pa >= cap {
                        s_other += 1;
                    }
                }
                acc[k][ci_].0 += s_other as f64;
                acc[k][ci_].1 += s_near as f64;
            }
        }
        tick();
    }
    let panels = policies
        .into_iter()
        .enumerate()
        .map(|(k, (label, gamma_db))| {
            let cells: Vec<HeatCell> = centres
                .iter()
                .zip(&acc[k])
                .map(|(&(x, y), &(so, sn))| HeatCell {
                    x,
                    y,
                    index: (sn > 0.0).then(|| so / sn),
                    s_other: so / repeat as f64,
                    s_near: sn / repeat as f64,
                })
                .collect();
            let fair = cells.iter().filter(|c| c.index.is_none_or(|i| i >= 0.5)).count();
            HeatPanel {
                label,
                gamma_db,
                fraction_fair: fair as f64 / cells.len().max(1) as f64,
                cells,
            }
        })
        .collect();
    Ok(HeatmapReport {
        cell_m,
        near_m,
        repeat,
        seed,
        radius_m: r,
        panels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Config {
        let mut c = Config::default();
        c.sim.clients = 6;
        c.sim.duration_s = 1.0;
        c
    }

    #[test]
    fn fairness_small_is_deterministic_and_bounded() {
        let cfg = small();
        let a = fairness(&cfg, &[0.0, 0.3], 3, 9, &mut || {}).unwrap();
        let b = fairness(&cfg, &[0.0, 0.3], 3, 9, &mut || {}).unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        for p in &a.points {
            for j in [p.jain_jpoc, p.jain_80211ad] {
                assert!(j > 0.0 && j <= 1.0 + 1e-12);
            }
            // 802.11ad always allocates 8 × 36; JPOC at least its minimum.
            assert_eq!(p.minislots_80211ad, 288.0);
            assert!(p.minislots_jpoc >= 36.0);
        }
    }

    #[test]
    fn overhead_small_runs_and_meets_target() {
        let cfg = small();
        let r = overhead(&cfg, 0.1, 0.2, &[4], 3, 64, 1, &mut || {}).unwrap();
        let p = &r.points[0];
        assert!(p.ieee80211ad_capped || p.failure_80211ad <= 0.1);
        assert_eq!(p.minislots_80211ad, (p.slots_80211ad * 36) as f64);
    }

    #[test]
    fn power_control_concentrates_good_beams() {
        let cfg = Config::default();
        let r = beams(&cfg, &[4.0, 10.0], 150, 2, 3, &mut || {}).unwrap();
        let no_pc = &r.series[0];
        let g4 = &r.series[1];
        let g10 = &r.series[2];
        assert!(g4.mean_good_beams < g10.mean_good_beams);
        assert!(g10.mean_good_beams < no_pc.mean_good_beams);
        for s in &r.series {
            assert!((s.percent.iter().sum::<f64>() - 100.0).abs() < 1e-9);
        }
    }

    #[test]
    fn heatmap_small() {
        let cfg = Config::default();
        let r = heatmap(&cfg, &[4.0], 10.0, 1.0, 2, 1, &mut || {}).unwrap();
        assert_eq!(r.panels.len(), 2);
        assert!(!r.panels[0].cells.is_empty());
    }
}
