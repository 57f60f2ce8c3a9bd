//! `summary.json`: the suite's runs reduced to one machine-readable table — goodputs, the
//! ratios the paper argues with, the paper's own numbers and ratios, and the target checks.
//! Paper numbers are at full rate and emulated runs are scaled, so the targets are ratios.

use std::collections::BTreeMap;

use fbdt_scenario::Scenario;
use serde::{Deserialize, Serialize};

use fbdt_harness::results::RunReport;

pub use super::check::{Check, Status};

/// How the suite was run (the report's "what was run" block).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    pub backend: String,
    pub quick: bool,
    /// The scheme standing for "MPTCP" in the ratios and targets.
    pub baseline: String,
    /// Distinct scales of the runs (one on a given machine).
    pub scales: Vec<f64>,
    /// Emulated runs: where each scenario's scale came from ("los: 0.12 measured").
    #[serde(default)]
    pub scale_sources: Vec<String>,
    /// Emulated runs through GSO units of at most this airtime, µs (`--gso-units`); null:
    /// one MTU packet per frame (and in summaries written before).
    #[serde(default)]
    pub gso_unit_airtime_us: Option<u32>,
    pub congestion_control: Vec<String>,
    pub cores: usize,
    pub kernel: String,
    pub git_revision: String,
    pub command_line: Vec<String>,
    /// UTC, RFC 3339.
    pub started: String,
    pub wall_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    pub run: RunInfo,
    pub scenarios: Vec<ScenarioSummary>,
    pub checks: Vec<Check>,
    /// Scenarios whose run failed: (scenario, error). Their targets are not measured.
    pub failures: Vec<Failure>,
    /// Every check passed and nothing failed.
    pub all_pass: bool,
    /// The application workloads (simulator), when they ran; their checks are in `checks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workloads: Option<super::workloads::WorkloadSection>,
    /// The COTAG section (testbed), when it ran; its claims are its own, not in `checks`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cotag: Option<super::cotag::CotagSection>,
}

impl Summary {
    /// Adds the workloads section and its claims to the checks.
    pub fn with_workloads(mut self, w: super::workloads::WorkloadSection) -> Self {
        self.checks.extend(super::workloads::checks(&w.tables));
        self.all_pass = self.failures.is_empty() && self.checks.iter().all(|c| c.status == Status::Pass);
        self.workloads = Some(w);
        self
    }

    pub fn with_cotag(mut self, c: super::cotag::CotagSection) -> Self {
        self.cotag = Some(c);
        self
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Failure {
    pub scenario: String,
    pub error: String,
}

/// The three ratios the targets are about.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    pub fbdt_over_sum_standalone: Option<f64>,
    pub fbdt_over_mptcp: Option<f64>,
    pub fbdt_over_capacity: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScenarioSummary {
    pub scenario: String,
    pub duration_s: f64,
    pub scale: f64,
    /// At scale.
    pub capacity_mbps: f64,
    pub sum_standalone_mbps: Option<f64>,
    pub schemes: Vec<SchemeSummary>,
    pub ratios: Ratios,
    pub paper: PaperNumbers,
    /// Emulated runs: every run within the emulator's tolerances (true for the simulator).
    #[serde(default = "yes")]
    pub faithful: bool,
    /// Why not: "scheme: reason" per unfaithful run.
    #[serde(default)]
    pub unfaithful: Vec<String>,
    /// With `--repeat`: the ratios of each counted repetition (seed order; every scheme ran
    /// with the same seeds, so a repetition is one channel for all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_ratios: Vec<Ratios>,
    /// With `--repeat` on the testbed, when most repetitions were faithful: the seeds of
    /// the unfaithful ones, left out of every mean and ratio above (see [`counted_seeds`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out_seeds: Vec<u64>,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SchemeSummary {
    pub scheme: String,
    pub goodput_mbps: f64,
    pub p10_mbps: f64,
    pub p50_mbps: f64,
    pub p90_mbps: f64,
    /// goodput ÷ scale: what the run amounts to at the paper's full rates.
    pub full_rate_mbps: f64,
    /// The paper's number for this scheme (full rate), if it gives one.
    pub paper_mbps: Option<f64>,
    pub ratio_to_sum_standalone: Option<f64>,
    pub paper_ratio_to_sum_standalone: Option<f64>,
    /// False when the emulator was out of tolerance in a run of this scheme: its numbers
    /// are shown greyed and no target counts them.
    #[serde(default = "yes")]
    pub faithful: bool,
    /// Standard deviation of the 100 ms goodput series, Mbit/s.
    #[serde(default)]
    pub sd_100ms_mbps: Option<f64>,
    /// In-order delivery delay, median and 99th percentile, ms (docs/results.md).
    #[serde(default)]
    pub delay_p50_ms: Option<f64>,
    #[serde(default)]
    pub delay_p99_ms: Option<f64>,
    /// Both endpoints' CPU (cores: CPU-seconds per second of run), measured on the testbed;
    /// none in the simulator.
    #[serde(default)]
    pub endpoint_cpu_cores: Option<f64>,
    /// The host's busy cores less the emulator's and other programs' (testbed; see
    /// `SchemeResult::stack_cpu_cores`).
    #[serde(default)]
    pub stack_cpu_cores: Option<f64>,
}

/// The paper's side of a scenario, from the scenario file's `[reference]` table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PaperNumbers {
    pub reference: BTreeMap<String, f64>,
    /// Σ of the paper's `tcp:<path>` numbers when it gives one for every path.
    pub sum_standalone_mbps: Option<f64>,
    /// The scenario's capacity at full rate (scale 1) over its own full duration, not a
    /// shortened run's: the paper's links as we model them.
    pub capacity_mbps: Option<f64>,
    pub ratios: Ratios,
}

/// The paper's number for a scheme. The `mptcp` entry is the paper's MPTCP, which our
/// baseline (whatever its name on this backend) stands for.
pub fn paper_number(reference: &BTreeMap<String, f64>, scheme: &str, baseline: &str) -> Option<f64> {
    let key = if scheme == baseline { "mptcp" } else { scheme };
    reference.get(key).copied()
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Σ of the paper's `tcp:<path>` numbers, if it has one for every path.
fn paper_sum_standalone(r: &RunReport) -> Option<f64> {
    r.scenario_def
        .paths
        .iter()
        .map(|p| r.scenario_def.reference.get(&format!("tcp:{}", p.name)).copied())
        .sum()
}

/// `full`: the scenario as defined (before a shortened run's `--duration`), for the paper's
/// side; the run's own `scenario_def` when absent.
pub fn scenario_summary(r: &RunReport, full: Option<&Scenario>, baseline: &str) -> ScenarioSummary {
    let counted = counted_seeds(r);
    // A scheme's goodput: the mean over the counted repetitions (all of them, or one run).
    let mean_of = |x: &fbdt_harness::results::SchemeResult| match &counted {
        Some(c) if !c.left_out.is_empty() => {
            let v: Vec<f64> = x
                .runs
                .iter()
                .filter(|run| c.seeds.contains(&run.seed))
                .map(|run| run.goodput_mbps)
                .collect();
            if v.is_empty() {
                x.goodput_mbps
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            }
        }
        _ => x.goodput_mbps,
    };
    let goodput = |s: &str| r.results.iter().find(|x| x.scheme == s).map(mean_of);
    let sum_standalone = match &counted {
        Some(c) if !c.left_out.is_empty() => r
            .scenario_def
            .paths
            .iter()
            .map(|p| goodput(&format!("tcp:{}", p.name)))
            .sum::<Option<f64>>()
            .or(r.sum_standalone_mbps),
        _ => r.sum_standalone_mbps,
    };
    let reference = &r.scenario_def.reference;
    let paper_sum = paper_sum_standalone(r);
    let full_capacity = full
        .unwrap_or(&r.scenario_def)
        .schedule(1.0)
        .ok()
        .map(|s| s.capacity_mbps());
    let schemes = r
        .results
        .iter()
        .map(|x| {
            let paper = paper_number(reference, &x.scheme, baseline);
            let goodput_mbps = mean_of(x);
            SchemeSummary {
                scheme: x.scheme.clone(),
                goodput_mbps,
                p10_mbps: x.goodput_p10_mbps,
                p50_mbps: x.goodput_p50_mbps,
                p90_mbps: x.goodput_p90_mbps,
                full_rate_mbps: goodput_mbps / r.scale,
                paper_mbps: paper,
                ratio_to_sum_standalone: ratio(Some(goodput_mbps), sum_standalone),
                paper_ratio_to_sum_standalone: ratio(paper, paper_sum),
                faithful: counted.is_some() || x.faithful != Some(false),
                sd_100ms_mbps: x.sd_100ms_mbps(),
                delay_p50_ms: x.delivery_delay_ms.as_ref().map(|d| d.p50),
                delay_p99_ms: x.delivery_delay_ms.as_ref().map(|d| d.p99),
                endpoint_cpu_cores: x.endpoint_cpu_cores,
                stack_cpu_cores: x.stack_cpu_cores,
            }
        })
        .collect();
    let paper_fbdt = reference.get("fbdt").copied();
    let unfaithful: Vec<String> = r
        .fidelity
        .iter()
        .flat_map(|f| f.runs.iter().filter(|e| !e.faithful))
        .map(|e| format!("{}: {}", e.scheme, e.reasons.join("; ")))
        .collect();
    let run_ratios = per_run_ratios(r, baseline, counted.as_ref().map(|c| c.seeds.as_slice()));
    ScenarioSummary {
        run_ratios,
        faithful: counted.is_some()
            || (unfaithful.is_empty()
                && r.fidelity.as_ref().is_none_or(|f| f.faithful)
                && r.results.iter().all(|x| x.faithful != Some(false))),
        unfaithful,
        left_out_seeds: counted.as_ref().map(|c| c.left_out.clone()).unwrap_or_default(),
        scenario: r.scenario.clone(),
        duration_s: r.duration_s,
        scale: r.scale,
        capacity_mbps: r.capacity_mbps,
        sum_standalone_mbps: sum_standalone,
        schemes,
        ratios: Ratios {
            fbdt_over_sum_standalone: ratio(goodput("fbdt"), r.sum_standalone_mbps),
            fbdt_over_mptcp: ratio(goodput("fbdt"), goodput(baseline)),
            fbdt_over_capacity: ratio(goodput("fbdt"), Some(r.capacity_mbps)),
        },
        paper: PaperNumbers {
            reference: reference.clone(),
            sum_standalone_mbps: paper_sum,
            capacity_mbps: full_capacity,
            ratios: Ratios {
                fbdt_over_sum_standalone: ratio(paper_fbdt, paper_sum),
                fbdt_over_mptcp: ratio(paper_fbdt, reference.get("mptcp").copied()),
                fbdt_over_capacity: ratio(paper_fbdt, full_capacity),
            },
        },
    }
}

/// The repetitions a repeated testbed run is judged on.
pub struct Counted {
    pub seeds: Vec<u64>,
    pub left_out: Vec<u64>,
}

/// With `--repeat` on the testbed: a repetition (one seed, every scheme) is faithful when
/// each of its runs was. When most repetitions are, the targets are judged on those alone
/// — as `sweep --cotag --repeat` counts a point — so one run spoiled by a burst of
/// hypervisor steal (5.1 % against a 5 % limit in one of twelve runs of a scenario, the
/// 2026-11-27 suite) no longer greys out every target that scheme enters; dropping the
/// whole repetition keeps every ratio a comparison of the same channels. `None`: a single
/// run, no fidelity record, or no faithful majority (then every unfaithful scheme stays
/// greyed, as for one run).
pub fn counted_seeds(r: &RunReport) -> Option<Counted> {
    let fidelity = r.fidelity.as_ref()?;
    let fbdt = r.results.iter().find(|x| x.scheme == "fbdt")?;
    let seeds: Vec<u64> = fbdt.runs.iter().map(|run| run.seed).collect();
    if seeds.len() < 2 {
        return None;
    }
    let (good, left_out): (Vec<u64>, Vec<u64>) = seeds
        .iter()
        .partition(|&&seed| fidelity.runs.iter().filter(|e| e.seed == seed).all(|e| e.faithful));
    (2 * good.len() > seeds.len()).then_some(Counted { seeds: good, left_out })
}

/// The ratios of each repetition, paired by seed (only `seeds` when given); empty for a
/// single run.
fn per_run_ratios(r: &RunReport, baseline: &str, seeds: Option<&[u64]>) -> Vec<Ratios> {
    let by_seed = |scheme: &str, seed: u64| {
        r.results
            .iter()
            .find(|x| x.scheme == scheme)
            .and_then(|x| x.runs.iter().find(|run| run.seed == seed))
            .map(|run| run.goodput_mbps)
    };
    let Some(fbdt) = r.results.iter().find(|x| x.scheme == "fbdt") else {
        return Vec::new();
    };
    fbdt.runs
        .iter()
        .filter(|run| seeds.is_none_or(|s| s.contains(&run.seed)))
        .map(|run| {
            let sum: Option<f64> = r
                .scenario_def
                .paths
                .iter()
                .map(|p| by_seed(&format!("tcp:{}", p.name), run.seed))
                .sum();
            let mut sc = r.scenario_def.clone();
            sc.seed = run.seed;
            let capacity = sc.schedule(r.scale).ok().map(|s| s.capacity_mbps());
            Ratios {
                fbdt_over_sum_standalone: ratio(Some(run.goodput_mbps), sum),
                fbdt_over_mptcp: ratio(Some(run.goodput_mbps), by_seed(baseline, run.seed)),
                fbdt_over_capacity: ratio(Some(run.goodput_mbps), capacity),
            }
        })
        .collect()
}

/// The project's targets for one scenario: FBDT ≥ 0.95 × Σ standalone and ≥ MPTCP
/// everywhere; ≥ 0.85 × capacity where a link comes and goes (blockage, mobility);
/// ≥ 1.3 × MPTCP with loss on two of four links (rats4-loss2).
pub fn checks(s: &ScenarioSummary, baseline: &str) -> Vec<Check> {
    let unfaithful = |name: &str| s.schemes.iter().any(|x| x.scheme == name && !x.faithful);
    let tcp_unfaithful = s.schemes.iter().any(|x| x.scheme.starts_with("tcp:") && !x.faithful);
    let mut v = Vec::new();
    // `uses`: the target's ratio involves the standalone TCPs (Σ) / the MPTCP baseline.
    let runs_of = |pick: fn(&Ratios) -> Option<f64>| -> Vec<f64> {
        s.run_ratios
            .iter()
            .map(pick)
            .collect::<Option<Vec<f64>>>()
            .unwrap_or_default()
    };
    let mut add = |target: &str,
                   value: Option<f64>,
                   threshold: f64,
                   paper_value: Option<f64>,
                   uses: (bool, bool),
                   runs: Vec<f64>| {
        let tainted = unfaithful("fbdt") || (uses.0 && tcp_unfaithful) || (uses.1 && unfaithful(baseline));
        let status = match value {
            Some(_) if tainted => Status::Unfaithful,
            None => Status::NotMeasured,
            Some(x) if x >= threshold => Status::Pass,
            Some(_) => Status::Miss,
        };
        v.push(Check {
            scenario: s.scenario.clone(),
            target: target.into(),
            value,
            threshold,
            paper_value,
            status,
            runs,
        });
    };
    let (ours, paper) = (&s.ratios, &s.paper.ratios);
    add(
        "FBDT ≥ 0.95 × Σ standalone",
        ours.fbdt_over_sum_standalone,
        0.95,
        paper.fbdt_over_sum_standalone,
        (true, false),
        runs_of(|r| r.fbdt_over_sum_standalone),
    );
    add(
        "FBDT ≥ MPTCP",
        ours.fbdt_over_mptcp,
        1.0,
        paper.fbdt_over_mptcp,
        (false, true),
        runs_of(|r| r.fbdt_over_mptcp),
    );
    if matches!(s.scenario.as_str(), "blockage" | "mobility") {
        add(
            "FBDT ≥ 0.85 × capacity",
            ours.fbdt_over_capacity,
            0.85,
            paper.fbdt_over_capacity,
            (false, false),
            runs_of(|r| r.fbdt_over_capacity),
        );
    }
    if s.scenario == "rats4-loss2" {
        add(
            "FBDT ≥ 1.3 × MPTCP",
            ours.fbdt_over_mptcp,
            1.3,
            paper.fbdt_over_mptcp,
            (false, true),
            runs_of(|r| r.fbdt_over_mptcp),
        );
    }
    v
}

/// `defined`: the scenarios as defined, matched to the reports by name (see
/// [`scenario_summary`]).
pub fn build(reports: &[RunReport], defined: &[Scenario], failures: Vec<Failure>, run: RunInfo) -> Summary {
    let scenarios: Vec<ScenarioSummary> = reports
        .iter()
        .map(|r| scenario_summary(r, defined.iter().find(|s| s.name == r.scenario), &run.baseline))
        .collect();
    let checks: Vec<Check> = scenarios.iter().flat_map(|s| checks(s, &run.baseline)).collect();
    let all_pass = failures.is_empty() && checks.iter().all(|c| c.status == Status::Pass);
    Summary {
        run,
        scenarios,
        checks,
        failures,
        all_pass,
        workloads: None,
        cotag: None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use fbdt_harness::results::{Meta, Sample, SchemeResult};

    pub(crate) fn result(scheme: &str, mbps: f64) -> SchemeResult {
        SchemeResult {
            scheme: scheme.into(),
            encryption: "none".into(),
            goodput_mbps: mbps,
            goodput_p10_mbps: mbps * 0.9,
            goodput_p50_mbps: mbps,
            goodput_p90_mbps: mbps * 1.1,
            series: (1..=30)
                .map(|i| Sample {
                    t: i as f64 * 0.1,
                    mbps,
                })
                .collect(),
            ..SchemeResult::default()
        }
    }

    /// A report as `run::run` would write it: the built-in scenario, these goodputs.
    pub(crate) fn report(name: &str, scale: f64, capacity: f64, goodputs: &[(&str, f64)]) -> RunReport {
        let sc = Scenario::load(name).unwrap();
        let results: Vec<SchemeResult> = goodputs.iter().map(|(s, g)| result(s, *g)).collect();
        let tcp: Vec<f64> = sc
            .paths
            .iter()
            .filter_map(|p| goodputs.iter().find(|g| g.0 == format!("tcp:{}", p.name)).map(|g| g.1))
            .collect();
        RunReport {
            scenario: name.into(),
            backend: "emu".into(),
            duration_s: 3.0,
            seed: 1,
            scale,
            congestion_control: "cubic".into(),
            encryption: "none".into(),
            capacity_mbps: capacity,
            sum_standalone_mbps: (tcp.len() == sc.paths.len()).then(|| tcp.iter().sum()),
            results,
            meta: Meta::here(),
            scenario_def: sc,
            fidelity: None,
        }
    }

    pub(crate) fn info(baseline: &str) -> RunInfo {
        RunInfo {
            backend: "emu".into(),
            quick: true,
            baseline: baseline.into(),
            scales: vec![0.2],
            scale_sources: Vec::new(),
            gso_unit_airtime_us: None,
            congestion_control: vec!["cubic".into()],
            cores: 2,
            kernel: "6.1.0".into(),
            git_revision: "abc".into(),
            command_line: vec!["fbdt-lab".into(), "paper".into()],
            started: "2025-01-01T00:00:00Z".into(),
            wall_s: 1.0,
        }
    }

    #[test]
    fn repeated_runs_give_each_target_its_ratio_run_by_run() {
        use fbdt_harness::results::RunSummary;
        let mut r = report("los", 0.2, 380.0, &[("fbdt", 300.0), ("mptcp", 300.0)]);
        let runs = |v: &[f64]| -> Vec<RunSummary> {
            v.iter()
                .enumerate()
                .map(|(i, &g)| RunSummary {
                    seed: 1 + i as u64,
                    goodput_mbps: g,
                    redundant_bytes: 0,
                    bottleneck_scheme_to_tcp: None,
                })
                .collect()
        };
        r.results[0].runs = runs(&[310.0, 290.0]);
        r.results[1].runs = runs(&[300.0, 300.0]);
        let s = scenario_summary(&r, None, "mptcp");
        assert_eq!(s.run_ratios.len(), 2);
        let c = checks(&s, "mptcp");
        let parity = c.iter().find(|c| c.target == "FBDT ≥ MPTCP").unwrap();
        assert_eq!(parity.status, Status::Pass, "the means are equal: 300 / 300");
        assert!(close(parity.runs.first().copied(), 310.0 / 300.0));
        assert!(close(parity.runs.get(1).copied(), 290.0 / 300.0));
        assert!(parity.runs_straddle());
        assert!(
            parity.runs_note().unwrap().ends_with("on both sides of 1"),
            "{:?}",
            parity.runs_note()
        );
        // No tcp:* runs: no Σ per run, so that target carries none rather than a partial list.
        let sum = c.iter().find(|c| c.target.contains("Σ")).unwrap();
        assert!(sum.runs.is_empty());

        // Seed 2 of MPTCP missing: its FBDT ≥ MPTCP ratio cannot be formed.
        r.results[1].runs.pop();
        let s = scenario_summary(&r, None, "mptcp");
        let c = checks(&s, "mptcp");
        let parity = c.iter().find(|c| c.target == "FBDT ≥ MPTCP").unwrap();
        assert!(parity.runs.is_empty(), "a run without its pair drops the per-run list");
        assert_eq!(parity.runs_note(), None);
    }

    /// Three repetitions of los on the testbed; `bad` = (scheme, seed) runs the monitors
    /// flagged.
    fn repeated_los(bad: &[(&str, u64)]) -> RunReport {
        use fbdt_harness::results::fidelity::{RunEntry, RunFidelity};
        use fbdt_harness::results::RunSummary;
        let mut r = report(
            "los",
            0.2,
            380.0,
            &[("fbdt", 0.0), ("mptcp", 0.0), ("tcp:wifi", 0.0), ("tcp:wigig", 0.0)],
        );
        // Per seed: fbdt, mptcp, wifi, wigig. Seed 2 is the disturbed one (fbdt low).
        let by_seed = [
            [360.0, 350.0, 90.0, 280.0],
            [300.0, 350.0, 90.0, 280.0],
            [362.0, 352.0, 92.0, 282.0],
        ];
        let mut entries = Vec::new();
        for (i, x) in r.results.iter_mut().enumerate() {
            x.runs = (0..3)
                .map(|k| RunSummary {
                    seed: 1 + k as u64,
                    goodput_mbps: by_seed[k][i],
                    redundant_bytes: 0,
                    bottleneck_scheme_to_tcp: None,
                })
                .collect();
            x.goodput_mbps = x.runs.iter().map(|run| run.goodput_mbps).sum::<f64>() / 3.0;
            for seed in 1..=3u64 {
                let faithful = !bad.contains(&(x.scheme.as_str(), seed));
                x.faithful = Some(x.faithful != Some(false) && faithful);
                entries.push(RunEntry {
                    scheme: x.scheme.clone(),
                    seed,
                    scale: 0.2,
                    faithful,
                    datapath: "direct".into(),
                    receive_steered: true,
                    gso_unit_airtime_us: Some(250),
                    reasons: if faithful {
                        Vec::new()
                    } else {
                        vec!["5.1% of CPU time stolen".into()]
                    },
                    emulator_late_share: 0.0,
                    emulator_late_p99_ms: 0.0,
                    emulator_drops: 0,
                    emulator_cpu: 0.5,
                    emulator_cpu_wait: 0.0,
                    endpoints_cpu: 0.5,
                    host_busy: 0.0,
                    endpoint_idle_cores: 1.0,
                    steal: if faithful { 0.0 } else { 0.051 },
                    others_cpu: 0.0,
                    delivered_over_configured: vec![1.0, 1.0],
                });
            }
        }
        r.sum_standalone_mbps = Some(r.results[2].goodput_mbps + r.results[3].goodput_mbps);
        r.fidelity = Some(RunFidelity::from_runs(
            &["wifi".into(), "wigig".into()],
            entries,
            0.2,
            &fbdt_emu::calibrate::ScaleSource::Given,
            Vec::new(),
        ));
        r
    }

    /// One repetition spoiled (here FBDT's, seed 2): the targets are judged on the other
    /// two, whole repetitions only, so every ratio still compares the same seeds.
    #[test]
    fn a_repetition_the_monitors_flagged_is_left_out_when_most_are_faithful() {
        let s = scenario_summary(&repeated_los(&[("fbdt", 2)]), None, "mptcp");
        assert_eq!(s.left_out_seeds, vec![2]);
        assert!(s.faithful && s.schemes.iter().all(|x| x.faithful));
        assert!(close(Some(s.schemes[0].goodput_mbps), 361.0), "fbdt over seeds 1 and 3");
        assert!(
            close(Some(s.schemes[1].goodput_mbps), 351.0),
            "mptcp over the same seeds"
        );
        assert!(close(s.sum_standalone_mbps, 91.0 + 281.0));
        assert_eq!(s.run_ratios.len(), 2);
        let c = checks(&s, "mptcp");
        let parity = c.iter().find(|c| c.target == "FBDT ≥ MPTCP").unwrap();
        assert_eq!(parity.status, Status::Pass, "361 / 351, not the spoiled seed's 300");
        assert!(close(parity.value, 361.0 / 351.0));
        assert_eq!(parity.runs.len(), 2);
        // A standalone run flagged instead: the same seed goes, for every scheme.
        let s = scenario_summary(&repeated_los(&[("tcp:wigig", 2)]), None, "mptcp");
        assert_eq!(s.left_out_seeds, vec![2]);
        assert!(close(Some(s.schemes[0].goodput_mbps), 361.0));
    }

    /// Two of three repetitions flagged: no faithful majority, the flagged schemes stay
    /// greyed and their targets unjudged, as with a single run.
    #[test]
    fn without_a_faithful_majority_the_flagged_schemes_stay_unjudged() {
        let s = scenario_summary(&repeated_los(&[("mptcp", 1), ("tcp:wifi", 3)]), None, "mptcp");
        assert!(s.left_out_seeds.is_empty());
        assert!(!s.faithful && !s.schemes[1].faithful && s.schemes[0].faithful);
        assert!(close(Some(s.schemes[0].goodput_mbps), (360.0 + 300.0 + 362.0) / 3.0));
        let c = checks(&s, "mptcp");
        assert!(c.iter().all(|c| c.status == Status::Unfaithful), "{c:?}");
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn los_ratios_paper_numbers_and_targets() {
        // Paper (los): tcp:wifi 450, tcp:wigig 1400, mptcp 1550, fbdt 1970.
        let r = report(
            "los",
            0.2,
            380.0,
            &[
                ("fbdt", 360.0),
                ("mptcp", 300.0),
                ("tcp:wifi", 90.0),
                ("tcp:wigig", 280.0),
            ],
        );
        let s = build(&[r], &[], Vec::new(), info("mptcp"));
        let los = &s.scenarios[0];
        assert_eq!(los.sum_standalone_mbps, Some(370.0));
        assert!(close(los.ratios.fbdt_over_sum_standalone, 360.0 / 370.0));
        assert!(close(los.ratios.fbdt_over_mptcp, 1.2));
        assert!(close(los.ratios.fbdt_over_capacity, 360.0 / 380.0));
        assert_eq!(los.paper.sum_standalone_mbps, Some(1850.0));
        assert!(close(los.paper.ratios.fbdt_over_sum_standalone, 1970.0 / 1850.0));
        assert!(close(los.paper.ratios.fbdt_over_mptcp, 1970.0 / 1550.0));
        let fbdt = &los.schemes[0];
        assert!((fbdt.full_rate_mbps - 1800.0).abs() < 1e-9);
        assert_eq!(fbdt.paper_mbps, Some(1970.0));
        // The kernel MPTCP carries the paper's MPTCP number.
        assert_eq!(los.schemes[1].paper_mbps, Some(1550.0));
        assert!(close(los.schemes[2].paper_ratio_to_sum_standalone, 450.0 / 1850.0));

        // 360/370 = 0.973 ≥ 0.95 and 1.2 ≥ 1: both targets pass; los has no capacity target.
        assert_eq!(s.checks.len(), 2);
        assert!(s.checks.iter().all(|c| c.status == Status::Pass), "{:?}", s.checks);
        assert!(s.all_pass);
    }

    #[test]
    fn unfaithful_runs_are_neither_pass_nor_miss() {
        // The same numbers as above, but the emulator was out of tolerance in the MPTCP run.
        let mut r = report(
            "los",
            0.2,
            380.0,
            &[
                ("fbdt", 360.0),
                ("mptcp", 200.0),
                ("tcp:wifi", 90.0),
                ("tcp:wigig", 280.0),
            ],
        );
        r.results[1].faithful = Some(false);
        let s = build(&[r], &[], Vec::new(), info("mptcp"));
        let by: BTreeMap<&str, Status> = s.checks.iter().map(|c| (c.target.as_str(), c.status)).collect();
        // FBDT vs Σ standalone does not involve MPTCP: still judged.
        assert_eq!(by["FBDT ≥ 0.95 × Σ standalone"], Status::Pass);
        assert_eq!(by["FBDT ≥ MPTCP"], Status::Unfaithful);
        assert!(!s.scenarios[0].schemes[1].faithful && !s.scenarios[0].faithful);
        assert!(!s.all_pass, "an unfaithful check is not a pass");
        let page = crate::paper::html::render(&s, &[], None);
        assert!(page.contains("<td class=\"UNF\">UNFAITHFUL</td>"), "{page}");
        assert!(page.contains("<tr class=\"unf\">"), "{page}");
    }

    #[test]
    fn misses_and_unmeasured_targets_are_reported_not_hidden() {
        // Blockage in the simulator: FBDT below MPTCP and below 0.85 × capacity, no tcp runs.
        let r = report("blockage", 1.0, 1200.0, &[("fbdt", 1000.0), ("mp:blest", 1100.0)]);
        let s = build(&[r], &[], Vec::new(), info("mp:blest"));
        let by: BTreeMap<&str, &Check> = s.checks.iter().map(|c| (c.target.as_str(), c)).collect();
        assert_eq!(by["FBDT ≥ 0.95 × Σ standalone"].status, Status::NotMeasured);
        assert_eq!(by["FBDT ≥ MPTCP"].status, Status::Miss);
        assert_eq!(by["FBDT ≥ 0.85 × capacity"].status, Status::Miss);
        assert!(close(by["FBDT ≥ 0.85 × capacity"].value, 1000.0 / 1200.0));
        assert!(!s.all_pass);
        // The simulator's baseline stands for the paper's MPTCP (blockage gives none).
        assert_eq!(s.scenarios[0].schemes[1].paper_mbps, None);
        // The paper's FBDT (1292) against our model of its links at full rate.
        let full = Scenario::load("blockage")
            .unwrap()
            .schedule(1.0)
            .unwrap()
            .capacity_mbps();
        assert!(close(by["FBDT ≥ 0.85 × capacity"].paper_value, 1292.0 / full));
    }

    #[test]
    fn rats4_loss2_needs_a_30_percent_lead_over_mptcp() {
        let tcp = [
            ("tcp:wifi", 90.0),
            ("tcp:wigig", 10.0),
            ("tcp:eth1", 10.0),
            ("tcp:eth2", 188.0),
        ];
        let mut g = vec![("fbdt", 290.0), ("mptcp", 250.0)];
        g.extend(tcp);
        let s = build(&[report("rats4-loss2", 0.2, 746.0, &g)], &[], Vec::new(), info("mptcp"));
        let lead: Vec<&Check> = s.checks.iter().filter(|c| c.target == "FBDT ≥ 1.3 × MPTCP").collect();
        assert_eq!(lead.len(), 1);
        assert_eq!(lead[0].status, Status::Miss, "290/250 = 1.16 < 1.3");
        assert_eq!(
            s.checks.iter().find(|c| c.target == "FBDT ≥ MPTCP").unwrap().status,
            Status::Pass
        );
        // No paper numbers for Fig. 12 in the scenario file: nothing is made up.
        assert_eq!(lead[0].paper_value, None);
    }

    #[test]
    fn a_failed_scenario_fails_the_suite() {
        let f = Failure {
            scenario: "nlos".into(),
            error: "boom".into(),
        };
        let s = build(&[], &[], vec![f], info("mptcp"));
        assert!(!s.all_pass && s.checks.is_empty());
    }
}
