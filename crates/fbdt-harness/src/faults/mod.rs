//! The fault campaign (`fbdt-lab faults`, docs/faults.md): N runs of a scenario, each with
//! a seeded plan of faults (a path cut, reset, blocked, losing one direction, flapping, or
//! returning), per scheme; per run the longest in-order delivery gap at 1 ms resolution,
//! how soon a returned path carries again, bytes lost or duplicated and whether the
//! session survived; per scheme the distribution of the longest gap against the bound.

pub mod emu;
pub mod plan;
mod result;
pub mod sim;
pub mod stream;

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use fbdt_scenario::Scenario;
use fbdt_sim::SimParams;
use serde::{Deserialize, Serialize};

pub use plan::{Fault, FaultKind, Window};
pub use result::RunResult;

use crate::TestbedLimits;

/// The floor of the bound on the longest gap, ms.
pub const BOUND_FLOOR_MS: f64 = 50.0;

/// One scheme's runs summed up (the issue's `summary`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub runs: usize,
    pub p50_max_gap_ms: u64,
    pub p99_max_gap_ms: u64,
    pub max_max_gap_ms: u64,
    /// Runs whose longest gap exceeded their bound.
    pub over_bound: usize,
    pub survived: usize,
    pub bytes_lost: u64,
    pub bytes_duplicated: u64,
    /// Median and largest reuse time of a returned path, ms.
    pub p50_reuse_ms: Option<f64>,
    pub max_reuse_ms: Option<f64>,
    /// Testbed runs the fidelity monitors did not call faithful.
    #[serde(default)]
    pub unfaithful: usize,
    /// Testbed: the mean over the faithful runs of their ends' CPU and of the stack's
    /// (`RunResult::endpoint_cpu_cores`, `stack_cpu_cores`), cores; None without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_cpu_cores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_cpu_cores: Option<f64>,
}

impl Summary {
    pub fn of<'a>(runs: impl IntoIterator<Item = &'a RunResult>) -> Summary {
        let runs: Vec<&RunResult> = runs.into_iter().collect();
        let mut gaps: Vec<u64> = runs.iter().map(|r| r.max_gap_ms).collect();
        gaps.sort_unstable();
        let mut reuse: Vec<f64> = runs.iter().filter_map(|r| r.reuse_after_return_ms).collect();
        reuse.sort_by(f64::total_cmp);
        Summary {
            runs: runs.len(),
            p50_max_gap_ms: nearest_rank(&gaps, 0.5).unwrap_or(0),
            p99_max_gap_ms: nearest_rank(&gaps, 0.99).unwrap_or(0),
            max_max_gap_ms: gaps.last().copied().unwrap_or(0),
            over_bound: runs.iter().filter(|r| r.max_gap_ms as f64 > r.bound_ms).count(),
            survived: runs.iter().filter(|r| r.survived).count(),
            bytes_lost: runs.iter().map(|r| r.bytes_lost).sum(),
            bytes_duplicated: runs.iter().map(|r| r.bytes_duplicated).sum(),
            p50_reuse_ms: nearest_rank(&reuse, 0.5),
            max_reuse_ms: reuse.last().copied(),
            unfaithful: runs.iter().filter(|r| r.faithful == Some(false)).count(),
            endpoint_cpu_cores: faithful_mean(&runs, |r| r.endpoint_cpu_cores),
            stack_cpu_cores: faithful_mean(&runs, |r| r.stack_cpu_cores),
        }
    }
}

/// The mean of `value` over the runs the monitors called faithful: a run a steal burst
/// disturbed books its ends' time wrongly.
fn faithful_mean(runs: &[&RunResult], value: impl Fn(&RunResult) -> Option<f64>) -> Option<f64> {
    crate::results::stats::mean_of(runs.iter().filter(|r| r.faithful == Some(true)).filter_map(|r| value(r)))
}

/// The nearest-rank percentile of sorted values.
fn nearest_rank<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// What a campaign writes (`--json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub scenario: String,
    pub backend: String,
    pub model: String,
    pub scale: f64,
    pub duration_s: f64,
    pub seed: u64,
    pub kinds: Vec<FaultKind>,
    pub runs: Vec<RunResult>,
    /// Per scheme.
    pub summary: BTreeMap<String, Summary>,
    /// Per scheme, then per `kind@path`.
    pub groups: BTreeMap<String, BTreeMap<String, Summary>>,
}

impl Report {
    /// Fills `summary` and `groups` from `runs`.
    pub fn summarise(&mut self) {
        let r = self;
        r.summary.clear();
        r.groups.clear();
        let schemes: std::collections::BTreeSet<String> = r.runs.iter().map(|x| x.scheme.clone()).collect();
        for s in schemes {
            let mine: Vec<&RunResult> = r.runs.iter().filter(|x| x.scheme == s).collect();
            r.summary.insert(s.clone(), Summary::of(mine.iter().copied()));
            let mut keys: Vec<String> = mine.iter().map(|x| group_key(x)).collect();
            keys.sort();
            keys.dedup();
            let groups = keys
                .into_iter()
                .map(|k| {
                    let sum = Summary::of(mine.iter().copied().filter(|x| group_key(x) == k));
                    (k, sum)
                })
                .collect();
            r.groups.insert(s, groups);
        }
    }
}

fn group_key(r: &RunResult) -> String {
    r.plan
        .first()
        .map_or_else(|| "none".to_string(), |f| format!("{}@{}", f.kind.name(), f.path))
}

/// The bound on a run's longest gap: max(50 ms, 2 × the base RTT of the best path the
/// plan leaves working), the RTT from the scenario's one-way delays.
pub fn bound_ms(scenario: &Scenario, plan: &[Fault]) -> f64 {
    let best = scenario
        .paths
        .iter()
        .enumerate()
        .filter(|(i, _)| !plan.iter().any(|f| f.path_index == *i))
        .map(|(_, p)| 2.0 * p.delay_ms)
        .min_by(f64::total_cmp);
    best.map_or(BOUND_FLOOR_MS, |rtt| BOUND_FLOOR_MS.max(2.0 * rtt))
}

/// The smallest scaled queue: 10 packets of 1500 bytes, so that a path keeps a few
/// packets' buffer at any scale.
const QUEUE_FLOOR_BYTES: u64 = 10 * 1500;

/// The simulator's parameters for a campaign at `scale`: [`crate::sim::sim_params`] with
/// the bottleneck queues scaled as the rates are. A gap is a time, and a 1000-packet queue
/// at 5 % of the rate would hold 20 times longer than the scenario's.
pub fn sim_params(scenario: &Scenario, model: fbdt_sim::PathModel, scale: f64, limits: &TestbedLimits) -> SimParams {
    let mut params = crate::sim::sim_params(scenario, model, 0, limits);
    for q in &mut params.queue_bytes {
        *q = ((*q as f64 * scale).round() as u64).max(QUEUE_FLOOR_BYTES);
    }
    params
}

/// A simulator campaign: `runs` plans × `schemes`.
pub struct SimCampaign<'a> {
    pub scenario: &'a Scenario,
    pub scale: f64,
    pub params: SimParams,
    pub limits: TestbedLimits,
    pub schemes: Vec<String>,
    pub kinds: Vec<FaultKind>,
    pub runs: u64,
    /// The first plan's index: plans `first..first + runs` (a campaign split into parts,
    /// each part the same plans it would be in one run).
    pub first: u64,
    pub seed: u64,
    pub jobs: usize,
}

/// One case of a campaign: (plan index, scheme, plan).
pub type Case = (u64, String, Vec<Fault>);

/// Every (run, scheme) of plans `first..first + runs`, in order, with its plan.
pub fn cases(scenario: &Scenario, kinds: &[FaultKind], schemes: &[String], runs: u64, first: u64, seed: u64) -> Result<Vec<Case>> {
    if scenario.paths.len() < 2 {
        bail!("a fault campaign needs at least two paths (one must keep working)");
    }
    if kinds.is_empty() || schemes.is_empty() || runs == 0 {
        bail!("nothing to run: give at least one fault kind, one scheme and one run");
    }
    let window = Window::new(scenario.duration_s)?;
    let names: Vec<String> = scenario.paths.iter().map(|p| p.name.clone()).collect();
    let mut out = Vec::new();
    for run in first..first.saturating_add(runs) {
        let plan = plan::plan(seed, run, kinds, &names, window);
        for s in schemes {
            out.push((run, s.clone(), plan.clone()));
        }
    }
    Ok(out)
}

/// A testbed campaign: `runs` plans × `schemes`, one after the other (each run on a fresh
/// testbed, the host's cores for it alone), the monitors' verdict in every run.
pub struct EmuCampaign<'a> {
    pub scenario: &'a Scenario,
    pub scale: f64,
    pub testbed: fbdt_emu::TestbedOptions,
    pub schemes: Vec<String>,
    pub kinds: Vec<FaultKind>,
    pub runs: u64,
    pub first: u64,
    pub seed: u64,
}

impl EmuCampaign<'_> {
    /// Runs every case in turn, ticking `bar` once per case and printing a line per run
    /// (UNFAITHFUL, with why, when the monitors say so).
    pub fn run(&self, bar: &indicatif::ProgressBar) -> Result<Vec<RunResult>> {
        if let Some(why) = fbdt_emu::skip_reason() {
            bail!("the testbed campaign needs root (CAP_NET_ADMIN): {why}");
        }
        let cases = cases(self.scenario, &self.kinds, &self.schemes, self.runs, self.first, self.seed)?;
        bar.set_length(cases.len() as u64);
        let mut out = Vec::with_capacity(cases.len());
        for (run, scheme, plan) in cases {
            let seed = self.seed.wrapping_add(run);
            let what = plan.first().map_or("none".to_string(), |f| format!("{}@{}", f.kind.name(), f.path));
            bar.set_message(format!("#{run} {scheme} {what}"));
            let mut r = emu::run_one(self.scenario, self.scale, &self.testbed, &scheme, seed, &plan)
                .with_context(|| format!("run {run}, {scheme}, {what}"))?;
            r.run = run;
            r.scheme = scheme.clone();
            r.seed = seed;
            r.plan = plan.clone();
            r.bound_ms = bound_ms(self.scenario, &plan);
            bar.println(format!(
                "#{run} {scheme:<10} {what:<16} gap {:>5} ms  lost {}  {}{}",
                r.max_gap_ms,
                r.bytes_lost,
                if r.survived { "survived" } else { "NOT survived" },
                match r.faithful {
                    Some(false) => format!("  UNFAITHFUL: {}", r.unfaithful_reasons.join("; ")),
                    _ => String::new(),
                }
            ));
            bar.inc(1);
            out.push(r);
        }
        Ok(out)
    }
}

impl SimCampaign<'_> {
    /// Every (run, scheme) in order, with its plan.
    pub fn cases(&self) -> Result<Vec<Case>> {
        cases(self.scenario, &self.kinds, &self.schemes, self.runs, self.first, self.seed)
    }

    /// Runs every case on `jobs` threads, ticking `bar` once per case.
    pub fn run(&self, bar: &indicatif::ProgressBar) -> Result<Vec<RunResult>> {
        let cases = self.cases()?;
        bar.set_length(cases.len() as u64);
        crate::parallel::map(&cases, self.jobs, bar, |(run, scheme, plan)| {
            let seed = self.seed.wrapping_add(*run);
            let (mut r, _log) = sim::run_traced(self.scenario, self.scale, &self.params, &self.limits, scheme, seed, plan)?;
            r.run = *run;
            r.scheme = scheme.clone();
            r.seed = seed;
            r.plan = plan.clone();
            r.bound_ms = bound_ms(self.scenario, plan);
            Ok(r)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 0.5), Some(50));
        assert_eq!(nearest_rank(&v, 0.99), Some(99));
        assert_eq!(nearest_rank::<u64>(&[], 0.5), None);
        assert_eq!(nearest_rank(&[7], 0.99), Some(7));
    }

    /// The summary's CPU is the faithful runs' mean; runs without a verdict (the
    /// simulator's) or without figures give none.
    #[test]
    fn cpu_is_averaged_over_faithful_runs_only() {
        let run = |faithful, ends| RunResult {
            faithful,
            endpoint_cpu_cores: ends,
            stack_cpu_cores: ends.map(|c| c + 0.1),
            ..RunResult::default()
        };
        let runs = [
            run(Some(true), Some(0.2)),
            run(Some(false), Some(1.5)),
            run(Some(true), Some(0.4)),
        ];
        let s = Summary::of(&runs);
        assert!((s.endpoint_cpu_cores.unwrap() - 0.3).abs() < 1e-9, "{s:?}");
        assert!((s.stack_cpu_cores.unwrap() - 0.4).abs() < 1e-9, "{s:?}");
        assert_eq!(s.unfaithful, 1);
        let sim = Summary::of(&[run(None, None)]);
        assert_eq!((sim.endpoint_cpu_cores, sim.stack_cpu_cores), (None, None));
    }
}
