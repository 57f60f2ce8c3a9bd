//! The `fidelity` object of emulated results: what fbdt-emu's monitors saw in every run
//! of a scenario, reduced to one verdict, and where the run's scale came from.

use fbdt_emu::{calibrate::ScaleSource, Fidelity, HostKey};
use serde::{Deserialize, Serialize};

/// One path over a scenario's runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PathSummary {
    pub name: String,
    /// Largest delivered / configured over the runs (the run that loaded this path most;
    /// a scheme need not use every path, so the smallest says nothing about the emulator).
    pub delivered_over_configured: f64,
}

/// One run (scheme × repetition) of the scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunEntry {
    pub scheme: String,
    pub seed: u64,
    pub scale: f64,
    pub faithful: bool,
    /// Where the rate limit ran ("direct", "rattan" or "kernel-rate").
    #[serde(default)]
    pub datapath: String,
    /// The endpoints' receive work was steered off the emulator's core (results written
    /// before: false).
    #[serde(default)]
    pub receive_steered: bool,
    /// GSO units of at most this airtime, µs (`--gso-units`); null: MTU packets (and in
    /// results written before).
    #[serde(default)]
    pub gso_unit_airtime_us: Option<u32>,
    pub reasons: Vec<String>,
    pub emulator_late_share: f64,
    pub emulator_late_p99_ms: f64,
    pub emulator_drops: u64,
    pub emulator_cpu: f64,
    pub emulator_cpu_wait: f64,
    pub endpoints_cpu: f64,
    pub host_busy: f64,
    /// Idle cores the endpoints could have used (results written before: 0).
    #[serde(default)]
    pub endpoint_idle_cores: f64,
    pub steal: f64,
    /// Cores used by programs that are not this run (results written before: 0).
    #[serde(default)]
    pub others_cpu: f64,
    pub delivered_over_configured: Vec<f64>,
}

/// One emulated run's verdict alone, in the order the runs went: what a workload's results
/// JSON lists as its `fidelity` (docs/testbed.md). [`RunEntry`] is the same verdict with the
/// monitors' figures, as a scenario run's [`RunFidelity`] keeps it.
#[derive(Clone, Debug, Serialize)]
pub struct RunVerdict {
    /// The run's place in the order they ran.
    pub run: usize,
    pub scheme: String,
    pub seed: u64,
    pub faithful: bool,
    pub reasons: Vec<String>,
    /// The monitors' `stack_cpu` over the run, cores: the host's busy cores less the
    /// emulator's and other programs' — both ends (with every process they started) and the
    /// kernel's work for them, wherever booked.
    pub stack_cpu_cores: f64,
}

impl RunVerdict {
    pub fn new(run: usize, scheme: &str, seed: u64, f: Fidelity) -> Self {
        Self {
            run,
            scheme: scheme.into(),
            seed,
            faithful: f.faithful,
            reasons: f.reasons,
            stack_cpu_cores: f.stack_cpu,
        }
    }
}

/// The mean `stack_cpu_cores` of `scheme`'s faithful runs; None without one.
pub fn faithful_stack_cpu(runs: &[RunVerdict], scheme: &str) -> Option<f64> {
    super::stats::mean_of(
        runs.iter()
            .filter(|r| r.scheme == scheme && r.faithful)
            .map(|r| r.stack_cpu_cores),
    )
}

/// Top-level `fidelity` of an emulated results JSON.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunFidelity {
    /// Every run of the scenario within tolerance.
    pub faithful: bool,
    /// Where the rate limit ran ("direct", "rattan" or "kernel-rate"), as in the runs.
    #[serde(default)]
    pub datapath: String,
    /// The endpoints' receive work was steered off the emulator's core, as in the runs.
    #[serde(default)]
    pub receive_steered: bool,
    /// GSO units of at most this airtime, µs, as in the runs; null: MTU packets.
    #[serde(default)]
    pub gso_unit_airtime_us: Option<u32>,
    /// Worst (largest) over the runs.
    pub emulator_late_share: f64,
    pub emulator_late_p99_ms: f64,
    pub emulator_cpu: f64,
    pub emulator_drops: u64,
    pub endpoints_cpu: f64,
    pub steal: f64,
    /// Cores used by other programs, worst over the runs (results written before: 0).
    #[serde(default)]
    pub others_cpu: f64,
    pub paths: Vec<PathSummary>,
    /// The scale of these results, and where it came from: "given" (--scale), "cached"
    /// (measured on this host earlier), "measured" (calibrated for this run).
    pub scale: f64,
    pub scale_source: String,
    /// The host the scale was calibrated for.
    pub host: HostKey,
    /// Scales that were tried first and found unfaithful (--auto-scale).
    #[serde(default)]
    pub rejected_scales: Vec<f64>,
    /// Attempts at this scale discarded because the host was disturbed (busy, stolen
    /// from) and the scenario ran again (`emu::HOST_REPEATS`).
    #[serde(default)]
    pub host_repeats: u32,
    /// The tolerances every run was judged with.
    pub tolerances: fbdt_emu::Tolerances,
    pub runs: Vec<RunEntry>,
}

pub fn source_name(s: &ScaleSource) -> &'static str {
    match s {
        ScaleSource::Given => "given",
        ScaleSource::Cached => "cached",
        ScaleSource::Measured => "measured",
        ScaleSource::Disturbed => "measured under hypervisor steal (not cached)",
        ScaleSource::Fallback => "fallback (no faithful scale found)",
    }
}

impl RunEntry {
    pub fn new(scheme: &str, seed: u64, scale: f64, f: &Fidelity) -> Self {
        Self {
            scheme: scheme.into(),
            seed,
            scale,
            faithful: f.faithful,
            datapath: f.datapath.clone(),
            receive_steered: f.receive_steered,
            gso_unit_airtime_us: f.gso_unit_airtime_us,
            reasons: f.reasons.clone(),
            emulator_late_share: f.emulator_late_share,
            emulator_late_p99_ms: f.emulator_late_p99_ms,
            emulator_drops: f.emulator_drops,
            emulator_cpu: f.emulator_cpu,
            emulator_cpu_wait: f.emulator_cpu_wait,
            endpoints_cpu: f.endpoints_cpu,
            host_busy: f.host_busy,
            endpoint_idle_cores: f.endpoint_idle_cores,
            steal: f.steal,
            others_cpu: f.others_cpu,
            delivered_over_configured: f.paths.iter().map(|p| p.delivered_over_configured).collect(),
        }
    }
}

impl RunFidelity {
    /// Reduces the runs (all at `scale`) to one verdict.
    pub fn from_runs(
        paths: &[String],
        runs: Vec<RunEntry>,
        scale: f64,
        source: &ScaleSource,
        rejected_scales: Vec<f64>,
    ) -> Self {
        let max = |f: fn(&RunEntry) -> f64| runs.iter().map(f).fold(0.0, f64::max);
        Self {
            faithful: runs.iter().all(|r| r.faithful),
            datapath: runs.first().map(|r| r.datapath.clone()).unwrap_or_default(),
            receive_steered: runs.first().is_some_and(|r| r.receive_steered),
            gso_unit_airtime_us: runs.first().and_then(|r| r.gso_unit_airtime_us),
            emulator_late_share: max(|r| r.emulator_late_share),
            emulator_late_p99_ms: max(|r| r.emulator_late_p99_ms),
            emulator_cpu: max(|r| r.emulator_cpu),
            emulator_drops: runs.iter().map(|r| r.emulator_drops).sum(),
            endpoints_cpu: max(|r| r.endpoints_cpu),
            steal: max(|r| r.steal),
            others_cpu: max(|r| r.others_cpu),
            paths: paths
                .iter()
                .enumerate()
                .map(|(i, name)| PathSummary {
                    name: name.clone(),
                    delivered_over_configured: runs
                        .iter()
                        .filter_map(|r| r.delivered_over_configured.get(i).copied())
                        .fold(0.0, f64::max),
                })
                .collect(),
            scale,
            scale_source: source_name(source).into(),
            host: HostKey::current(),
            rejected_scales,
            host_repeats: 0,
            tolerances: fbdt_emu::Tolerances::default(),
            runs,
        }
    }

    /// Whether every run of `scheme` was faithful.
    pub fn scheme_faithful(&self, scheme: &str) -> bool {
        self.runs.iter().filter(|r| r.scheme == scheme).all(|r| r.faithful)
    }

    /// The lines printed under the run's table.
    pub fn describe(&self) -> Vec<String> {
        let mut v = vec![format!(
            "fidelity: {} — scale {} ({}), emulator late ≥ {} ms {:.2}% (p99 ≤ {:.1} ms), \
             emulator CPU ≤ {:.2} core, endpoints ≤ {:.2} core, other programs ≤ {:.2} core, \
             steal ≤ {:.1}%, drops {}",
            if self.faithful { "faithful" } else { "UNFAITHFUL" },
            self.scale,
            self.scale_source,
            self.tolerances.late_ms,
            self.emulator_late_share * 100.0,
            self.emulator_late_p99_ms,
            self.emulator_cpu,
            self.endpoints_cpu,
            self.others_cpu,
            self.steal * 100.0,
            self.emulator_drops
        )];
        for r in self.runs.iter().filter(|r| !r.faithful) {
            v.push(format!(
                "  UNFAITHFUL {} (seed {}): {}",
                r.scheme,
                r.seed,
                r.reasons.join("; ")
            ));
        }
        if !self.rejected_scales.is_empty() {
            let s: Vec<String> = self.rejected_scales.iter().map(|s| s.to_string()).collect();
            v.push(format!(
                "  unfaithful at scale {} first; repeated lower (--auto-scale)",
                s.join(", ")
            ));
        }
        if self.host_repeats > 0 {
            v.push(format!(
                "  the host was busy or stolen from at {} earlier attempt(s) at this scale; run again",
                self.host_repeats
            ));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(scheme: &str, faithful: bool, cpu: f64) -> RunVerdict {
        RunVerdict {
            run: 0,
            scheme: scheme.into(),
            seed: 1,
            faithful,
            reasons: Vec::new(),
            stack_cpu_cores: cpu,
        }
    }

    #[test]
    fn stack_cpu_is_the_mean_of_the_schemes_faithful_runs() {
        let runs = [
            verdict("fbdt", true, 0.4),
            verdict("fbdt", false, 1.9),
            verdict("fbdt", true, 0.6),
            verdict("mptcp", true, 0.2),
            verdict("tcp:wifi", false, 0.1),
        ];
        assert!((faithful_stack_cpu(&runs, "fbdt").unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(faithful_stack_cpu(&runs, "mptcp"), Some(0.2));
        assert_eq!(faithful_stack_cpu(&runs, "tcp:wifi"), None);
        assert_eq!(faithful_stack_cpu(&runs, "fbdt+sessions=1"), None);
    }
}
