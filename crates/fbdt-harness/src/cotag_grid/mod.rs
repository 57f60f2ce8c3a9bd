//! `fbdt-lab sweep --cotag` (and the COTAG section of `fbdt-lab paper`): paper 003's grid on
//! the testbed — link correlation (the three built-in `cotag-corr-*` scenarios) × PER ×
//! server→gateway latency — every point through `emu::run` with COTAG at each
//! cohort period T and the baselines, then the paper's qualitative claims judged over the
//! faithful points only.
//!
//! Server→gateway latency: the gateway runs in the server namespace, so the latency has no
//! hop of its own; it is the paths' one-way delay (both paths, replacing the scenarios'
//! 1 ms). It lengthens every scheme's RTT alike, as a wired hop before G would.
//!
//! The grid's data is `model.rs`, the claims `claims.rs`; here the report of both, the
//! runs that fill it and its table. fbdt-lab keeps the command's arguments (sweep.rs) and
//! the paper's section of it (paper/cotag.rs).

use anyhow::{Context, Result};
use fbdt_scenario::Scenario;
use indicatif::ProgressStyle;
use serde::{Deserialize, Serialize};

use crate::results::fidelity::RunFidelity;
use crate::traffic::Traffic;

mod claims;
mod model;

pub use claims::{claims, Claim, Verdict};
pub use model::{cells, one_point, Grid, Point, PointScheme, CORRELATIONS};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GridReport {
    pub grid: Grid,
    pub points: Vec<Point>,
    pub claims: Vec<Claim>,
}

impl GridReport {
    /// The report of `grid`'s `points` (in [`cells`] order), the claims judged over them.
    pub fn of(grid: Grid, points: Vec<Point>) -> Self {
        GridReport {
            claims: claims(&points),
            grid,
            points,
        }
    }
}

fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The scenario of one point: `cotag-corr-<c>` with both paths' loss and delay set.
fn point_scenario(correlation: &str, per: f64, latency_ms: f64, duration_s: f64) -> Result<Scenario> {
    let mut sc = Scenario::load(&format!("cotag-corr-{correlation}"))?;
    sc.duration_s = duration_s;
    for p in &mut sc.paths {
        p.loss = per;
        p.delay_ms = latency_ms;
    }
    sc.name = format!("{}_per{per}_lat{latency_ms}ms", sc.name);
    Ok(sc)
}

/// Runs every point of `grid` (needs root). `each` sees every finished point (to save
/// partial results).
pub fn run_grid(
    grid: &Grid,
    testbed: &fbdt_emu::TestbedOptions,
    mut each: impl FnMut(&[Point]) -> Result<()>,
) -> Result<Vec<Point>> {
    grid.check()?;
    let schemes = grid.schemes();
    let cells = cells(grid);
    let ticks =
        (grid.duration_s / 0.1).round() as u64 * schemes.len() as u64 * cells.len() as u64 * u64::from(grid.repeat);
    let bar = crate::progress::bar(ticks);
    bar.set_style(
        ProgressStyle::with_template("{prefix} {msg:>16} [{bar:30}] {percent:>3}%, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut points = Vec::new();
    for (i, (corr, per, lat)) in cells.iter().enumerate() {
        let sc = point_scenario(corr, *per, *lat, grid.duration_s)?;
        let mut runs: Vec<Vec<PointScheme>> = schemes.iter().map(|_| Vec::new()).collect();
        let mut entries = Vec::new();
        let (mut load, mut capacity) = (None::<f64>, 0.0);
        // One repetition at a time, every scheme in it: slow drifts of the host hit all alike.
        for r in 0..grid.repeat {
            bar.set_prefix(if grid.repeat > 1 {
                format!("[{}/{}] {corr} PER {per} {lat} ms #{}", i + 1, cells.len(), r + 1)
            } else {
                format!("[{}/{}] {corr} PER {per} {lat} ms", i + 1, cells.len())
            });
            let mut one = sc.clone();
            one.seed = sc.seed + u64::from(r);
            let choice = crate::emu::ScaleChoice {
                given: Some(grid.scale),
                auto: false,
            };
            let run = crate::emu::run(&one, &schemes, choice, 1, grid.traffic, testbed, &bar)
                .with_context(|| format!("point {corr}, PER {per}, {lat} ms, seed {}", one.seed))?;
            for (k, res) in run.results.iter().enumerate() {
                runs[k].push(scheme_run(res, &run.fidelity, one.seed));
            }
            capacity += run.capacity_mbps / f64::from(grid.repeat);
            load = match (load, load_avg()) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            entries.extend(run.fidelity.runs);
        }
        let paths: Vec<String> = sc.paths.iter().map(|p| p.name.clone()).collect();
        points.push(Point {
            correlation: corr.clone(),
            per: *per,
            latency_ms: *lat,
            load_avg: load,
            capacity_mbps: capacity,
            schemes: runs.into_iter().map(PointScheme::combine).collect(),
            fidelity: RunFidelity::from_runs(
                &paths,
                entries,
                grid.scale,
                &fbdt_emu::calibrate::ScaleSource::Given,
                Vec::new(),
            ),
        });
        each(&points)?;
    }
    bar.finish_and_clear();
    Ok(points)
}

/// One scheme's result of one run at a point.
fn scheme_run(r: &crate::results::SchemeResult, fidelity: &RunFidelity, seed: u64) -> PointScheme {
    PointScheme {
        scheme: r.scheme.clone(),
        faithful: fidelity.scheme_faithful(&r.scheme),
        unfaithful_reasons: fidelity
            .runs
            .iter()
            .filter(|e| e.scheme == r.scheme && !e.faithful)
            .flat_map(|e| e.reasons.iter().cloned())
            .collect(),
        goodput_mbps: r.goodput_mbps,
        burst_mbps: r.bursts.as_ref().map(|b| b.burst_mean_mbps),
        time_to_volume_s: r.bursts.as_ref().and_then(|b| b.time_to_volume_mean_s()),
        link_utilisation: r
            .bursts
            .as_ref()
            .map(|b| b.link_utilisation.clone())
            .unwrap_or_default(),
        tcp_retransmissions: r
            .bursts
            .as_ref()
            .and_then(|b| b.tcp_retransmissions)
            .or(r.cotag.as_ref().map(|c| c.tcp_retransmissions)),
        coding_overhead: r.cotag.as_ref().and_then(|c| c.coding_overhead),
        cohorts_failed: r
            .cotag
            .as_ref()
            .filter(|c| c.period_ms.is_some())
            .map(|c| c.cohorts_failed),
        seed,
        runs: Vec::new(),
    }
}

/// The grid's table and the claims, as printed by the sweep and the paper section.
pub fn describe(report: &GridReport) -> Vec<String> {
    let schemes = report.grid.schemes();
    let mut out = vec![format!(
        "{:<5} {:>6} {:>6} {:>5}  {}   (Mbit/s, {}{}; * = unfaithful)",
        "corr",
        "PER",
        "lat ms",
        "load",
        schemes.iter().map(|s| format!("{s:>14}")).collect::<String>(),
        match report.grid.traffic {
            Traffic::Bursts => "mean burst throughput",
            Traffic::Bulk => "goodput",
        },
        if report.grid.repeat > 1 {
            format!(
                ", mean of {} runs, unfaithful runs left out: (k/n) = k of n counted",
                report.grid.repeat
            )
        } else {
            String::new()
        }
    )];
    for p in &report.points {
        let cols: String = schemes
            .iter()
            .map(|s| {
                p.get(s).map_or(format!("{:>14}", "-"), |r| {
                    let (good, all) = r.faithful_runs();
                    let left_out = if r.faithful && good < all {
                        format!(" ({good}/{all})")
                    } else {
                        String::new()
                    };
                    format!(
                        "{:>14}",
                        format!("{:.1}{}{left_out}", r.mbps(), if r.faithful { "" } else { "*" })
                    )
                })
            })
            .collect();
        out.push(format!(
            "{:<5} {:>6} {:>6} {:>5}  {cols}",
            p.correlation,
            p.per,
            p.latency_ms,
            p.load_avg.map_or("-".into(), |l| format!("{l:.1}"))
        ));
    }
    for c in &report.claims {
        out.push(format!(
            "{:<10} {} — {} ({} judged, {} left out as unfaithful)",
            c.verdict.label(),
            c.claim,
            c.detail,
            c.judged,
            c.unfaithful
        ));
    }
    out
}

#[cfg(test)]
mod tests;
