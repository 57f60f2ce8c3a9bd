//! `fbdt-lab sweep --cotag` (and the COTAG section of `fbdt-lab paper`): paper 003's grid on
//! the testbed — link correlation (the three built-in `cotag-corr-*` scenarios) × PER ×
//! server→gateway latency — every point through `emu::run` with COTAG at each
//! cohort period T and the baselines, then the paper's qualitative claims judged over the
//! faithful points only.
//!
//! Server→gateway latency: the gateway runs in the server namespace, so the latency has no
//! hop of its own; it is the paths' one-way delay (both paths, replacing the scenarios'
//! 1 ms). It lengthens every scheme's RTT alike, as a wired hop before G would.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use fbdt_scenario::Scenario;
use indicatif::ProgressStyle;
use serde::{Deserialize, Serialize};

use fbdt_harness::results::fidelity::RunFidelity;
use fbdt_harness::traffic::Traffic;

/// The three correlations of the paper (−0.34, 0, +0.34), as built-in scenario suffixes.
pub const CORRELATIONS: [&str; 3] = ["neg", "zero", "pos"];

/// One grid's settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Grid {
    pub correlations: Vec<String>,
    /// Packet error rates, both paths, data direction.
    pub per: Vec<f64>,
    pub latency_ms: Vec<f64>,
    /// COTAG's cohort periods (ms): one scheme `cotag+T=<t>` each.
    pub periods_ms: Vec<f64>,
    /// The other schemes (dual-rr, mptcp, fbdt, tcp:<path> …).
    pub baselines: Vec<String>,
    pub duration_s: f64,
    pub scale: f64,
    pub traffic: Traffic,
    /// Runs per scheme and point (seeds seed … seed + repeat − 1), interleaved: every scheme
    /// once, then again (results written before: 1).
    #[serde(default = "one")]
    pub repeat: u32,
}

fn one() -> u32 {
    1
}

impl Grid {
    pub fn schemes(&self) -> Vec<String> {
        self.periods_ms
            .iter()
            .map(|t| format!("cotag+T={t}"))
            .chain(self.baselines.iter().cloned())
            .collect()
    }

    /// Bad settings, said before anything runs.
    pub fn check(&self) -> Result<()> {
        for c in &self.correlations {
            if !CORRELATIONS.contains(&c.as_str()) {
                bail!("correlation `{c}`: expected one of {}", CORRELATIONS.join(", "));
            }
        }
        if self.per.iter().any(|p| !(0.0..0.5).contains(p)) {
            bail!("PER must be in [0, 0.5)");
        }
        if self.latency_ms.iter().any(|l| !(0.0..=1000.0).contains(l)) {
            bail!("latency must be in [0, 1000] ms");
        }
        if self.periods_ms.is_empty() {
            bail!("at least one COTAG period T");
        }
        if !(self.scale.is_finite() && self.scale > 0.0) {
            bail!("--scale must be > 0");
        }
        if self.correlations.is_empty() || self.per.is_empty() || self.latency_ms.is_empty() {
            bail!("an empty axis");
        }
        if !(1..=100).contains(&self.repeat) {
            bail!("--repeat must be in 1..=100");
        }
        Ok(())
    }
}

/// One scheme at one point: one run, or (with `repeat` > 1) its runs combined — faithful
/// when most of its runs were, the figures then the means over the faithful runs only (over
/// all runs when it is unfaithful), the runs themselves in `runs`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PointScheme {
    pub scheme: String,
    pub faithful: bool,
    /// Why not, if unfaithful.
    #[serde(default)]
    pub unfaithful_reasons: Vec<String>,
    pub goodput_mbps: f64,
    /// Bursts: the mean burst throughput; bulk: None.
    pub burst_mbps: Option<f64>,
    pub time_to_volume_s: Option<f64>,
    #[serde(default)]
    pub link_utilisation: BTreeMap<String, f64>,
    pub tcp_retransmissions: Option<u64>,
    pub coding_overhead: Option<f64>,
    pub cohorts_failed: Option<u64>,
    /// The seed of a single run (results written before: 0).
    #[serde(default)]
    pub seed: u64,
    /// With `repeat` > 1: every run, in seed order (each with empty `runs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<PointScheme>,
}

impl PointScheme {
    /// The throughput the claims compare: burst throughput with bursts, else goodput.
    pub fn mbps(&self) -> f64 {
        self.burst_mbps.unwrap_or(self.goodput_mbps)
    }

    /// Faithful runs out of all runs.
    pub fn faithful_runs(&self) -> (usize, usize) {
        if self.runs.is_empty() {
            (usize::from(self.faithful), 1)
        } else {
            (self.runs.iter().filter(|r| r.faithful).count(), self.runs.len())
        }
    }

    /// Combines one scheme's runs at a point (see the type's doc).
    fn combine(runs: Vec<PointScheme>) -> PointScheme {
        if runs.len() == 1 {
            return runs.into_iter().next().expect("one run");
        }
        let good = runs.iter().filter(|r| r.faithful).count();
        let faithful = 2 * good > runs.len();
        let counted: Vec<&PointScheme> = runs.iter().filter(|r| r.faithful || !faithful).collect();
        let n = counted.len() as f64;
        let mean = |f: &dyn Fn(&PointScheme) -> f64| counted.iter().map(|r| f(r)).sum::<f64>() / n;
        let mean_opt = |f: &dyn Fn(&PointScheme) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = counted.iter().filter_map(|r| f(r)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let mut link_utilisation: BTreeMap<String, f64> = BTreeMap::new();
        for r in &counted {
            for (path, u) in &r.link_utilisation {
                *link_utilisation.entry(path.clone()).or_default() += u / n;
            }
        }
        PointScheme {
            scheme: runs[0].scheme.clone(),
            faithful,
            unfaithful_reasons: runs
                .iter()
                .filter(|r| !r.faithful)
                .flat_map(|r| {
                    r.unfaithful_reasons
                        .iter()
                        .map(move |why| format!("seed {}: {why}", r.seed))
                })
                .collect(),
            goodput_mbps: mean(&|r| r.goodput_mbps),
            burst_mbps: mean_opt(&|r| r.burst_mbps),
            // A run that never delivered the volume has no time to average in: none then.
            time_to_volume_s: counted
                .iter()
                .all(|r| r.time_to_volume_s.is_some())
                .then(|| mean(&|r| r.time_to_volume_s.unwrap_or_default())),
            link_utilisation,
            tcp_retransmissions: mean_opt(&|r| r.tcp_retransmissions.map(|x| x as f64)).map(|x| x.round() as u64),
            coding_overhead: mean_opt(&|r| r.coding_overhead),
            cohorts_failed: mean_opt(&|r| r.cohorts_failed.map(|x| x as f64)).map(|x| x.round() as u64),
            seed: runs[0].seed,
            runs,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub correlation: String,
    pub per: f64,
    pub latency_ms: f64,
    /// The host's 1-minute load average when the point's runs finished (the largest over
    /// the repetitions).
    pub load_avg: Option<f64>,
    pub capacity_mbps: f64,
    pub schemes: Vec<PointScheme>,
    /// Every run of the point (all repetitions).
    pub fidelity: RunFidelity,
}

impl Point {
    fn get(&self, scheme: &str) -> Option<&PointScheme> {
        self.schemes.iter().find(|s| s.scheme == scheme)
    }

    /// The best faithful COTAG (over T), if every COTAG scheme here was faithful.
    pub fn best_cotag(&self) -> Option<&PointScheme> {
        let c: Vec<&PointScheme> = self.schemes.iter().filter(|s| s.scheme.starts_with("cotag")).collect();
        if c.is_empty() || c.iter().any(|s| !s.faithful) {
            return None;
        }
        c.into_iter().max_by(|a, b| a.mbps().total_cmp(&b.mbps()))
    }

    /// A faithful baseline's throughput.
    fn faithful_mbps(&self, scheme: &str) -> Option<f64> {
        self.get(scheme).filter(|s| s.faithful).map(|s| s.mbps())
    }
}

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

/// The grid's points in the order they run and are reported: correlation, then PER, then
/// latency.
pub fn cells(grid: &Grid) -> Vec<(String, f64, f64)> {
    grid.correlations
        .iter()
        .flat_map(|c| {
            grid.per
                .iter()
                .flat_map(move |&per| grid.latency_ms.iter().map(move |&l| (c.clone(), per, l)))
        })
        .collect()
}

/// The grid of one point of `grid` (a campaign case).
pub fn one_point(grid: &Grid, (correlation, per, latency_ms): &(String, f64, f64)) -> Grid {
    Grid {
        correlations: vec![correlation.clone()],
        per: vec![*per],
        latency_ms: vec![*latency_ms],
        ..grid.clone()
    }
}

/// "COTAG outperforms `rival` in all cases": at every point where COTAG and the rival ran
/// faithfully.
fn beats(points: &[Point], rival: &str) -> Claim {
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

fn load_avg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The scenario of one point: `cotag-corr-<c>` with both paths' loss and delay set.
pub fn point_scenario(correlation: &str, per: f64, latency_ms: f64, duration_s: f64) -> Result<Scenario> {
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
    let bar = fbdt_harness::progress::bar(ticks);
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
            let choice = fbdt_harness::emu::ScaleChoice {
                given: Some(grid.scale),
                auto: false,
            };
            let run = fbdt_harness::emu::run(&one, &schemes, choice, 1, grid.traffic, testbed, &bar)
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
fn scheme_run(r: &fbdt_harness::results::SchemeResult, fidelity: &RunFidelity, seed: u64) -> PointScheme {
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
