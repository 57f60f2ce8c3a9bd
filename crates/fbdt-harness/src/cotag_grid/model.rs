//! The grid as plain data: its settings ([`Grid`]) and the order of its points, one
//! scheme's runs at a point combined ([`PointScheme`]), a point ([`Point`]). Nothing here
//! runs the testbed.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::results::fidelity::RunFidelity;
use crate::traffic::Traffic;

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
    pub(super) fn faithful_runs(&self) -> (usize, usize) {
        if self.runs.is_empty() {
            (usize::from(self.faithful), 1)
        } else {
            (self.runs.iter().filter(|r| r.faithful).count(), self.runs.len())
        }
    }

    /// Combines one scheme's runs at a point (see the type's doc).
    pub(super) fn combine(runs: Vec<PointScheme>) -> PointScheme {
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
    pub(super) fn get(&self, scheme: &str) -> Option<&PointScheme> {
        self.schemes.iter().find(|s| s.scheme == scheme)
    }

    /// The best faithful COTAG (over T), if every COTAG scheme here was faithful.
    pub(super) fn best_cotag(&self) -> Option<&PointScheme> {
        let c: Vec<&PointScheme> = self.schemes.iter().filter(|s| s.scheme.starts_with("cotag")).collect();
        if c.is_empty() || c.iter().any(|s| !s.faithful) {
            return None;
        }
        c.into_iter().max_by(|a, b| a.mbps().total_cmp(&b.mbps()))
    }

    /// A faithful baseline's throughput.
    pub(super) fn faithful_mbps(&self, scheme: &str) -> Option<f64> {
        self.get(scheme).filter(|s| s.faithful).map(|s| s.mbps())
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
