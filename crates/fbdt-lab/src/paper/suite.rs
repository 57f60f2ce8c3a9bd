//! What `fbdt-lab paper` runs: the papers' throughput scenarios in figure order, and the
//! schemes and durations for each. Pure functions, so the plan is testable without running.

use fbdt_scenario::Scenario;

use fbdt_harness::BackendKind;

/// The FBDT journal paper's throughput figures, in the paper's order. Each group becomes one
/// bar chart.
pub const GROUPS: [(&str, &str, &[&str]); 3] = [
    (
        "fig3b",
        "Fig. 3b: TC normal, 5% loss on WiGig, +500 ms on WiGig",
        &["tc-normal", "tc-loss-wigig", "tc-delay-wigig"],
    ),
    (
        "fig8c",
        "Fig. 8c: LoS, nLoS, mobility, and the \"blocked\" log",
        &["los", "nlos", "mobility", "blockage"],
    ),
    (
        "fig12",
        "Fig. 12: four RATs, no loss / 5% on WiGig / 5% on WiGig + Eth",
        &["rats4", "rats4-loss1", "rats4-loss2"],
    ),
];

/// Scenarios whose per-second goodput CDF the paper plots (Fig. 8d–f and the blocked log).
pub const CDF_SCENARIOS: [&str; 4] = ["los", "nlos", "mobility", "blockage"];

/// The default suite: every scenario of [`GROUPS`] in order.
pub fn default_scenarios() -> Vec<&'static str> {
    GROUPS.iter().flat_map(|g| g.2.iter().copied()).collect()
}

/// The group (id, title) a scenario belongs to; scenarios outside the paper's figures share
/// one "other" chart.
pub fn group_of(scenario: &str) -> (&'static str, &'static str) {
    GROUPS
        .iter()
        .find(|g| g.2.contains(&scenario))
        .map_or(("other", "Other scenarios"), |g| (g.0, g.1))
}

/// The MPTCP the paper compares with: the kernel's on the testbed; in the simulator our
/// userspace meta layer with BLEST, the scheduler the FBDT paper's MPTCP ran.
pub fn baseline(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Emu => "mptcp",
        BackendKind::Sim => "mp:blest",
    }
}

/// The extra userspace schedulers a full (non-quick) run adds on both backends.
const FULL_EXTRAS: [&str; 3] = ["mp:minrtt", "mp:blest", "mp:musher"];

/// `fbdt`, the MPTCP baseline, (full runs) the userspace schedulers, `tcp:<path>` for every
/// path, then the user's extras; each name once, first occurrence wins.
pub fn schemes_for(scenario: &Scenario, backend: BackendKind, quick: bool, extra: &[String]) -> Vec<String> {
    let mut names: Vec<String> = vec!["fbdt".into(), baseline(backend).into()];
    if !quick {
        names.extend(FULL_EXTRAS.iter().map(|s| s.to_string()));
    }
    names.extend(scenario.paths.iter().map(|p| format!("tcp:{}", p.name)));
    names.extend(extra.iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()));
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// Seconds per scheme in a quick run.
pub const QUICK_S: f64 = 10.0;

/// A quick run's duration: at most [`QUICK_S`], except that an event repeating within that
/// window (the blockage: 2 s off every 4 s) is seen at least three times, so its on/off
/// average is sampled rather than one phase of it. Rarer events (nLoS' fade every 7 s) are
/// seen once anyway. Never longer than the scenario.
pub fn quick_duration(scenario: &Scenario) -> f64 {
    let shortest_period = scenario
        .events
        .iter()
        .filter_map(|e| e.every_s)
        .filter(|&p| p <= QUICK_S / 2.0)
        .fold(f64::INFINITY, f64::min);
    let want = if shortest_period.is_finite() {
        QUICK_S.max(3.0 * shortest_period)
    } else {
        QUICK_S
    };
    want.min(scenario.duration_s)
}

/// One scenario of the plan.
#[derive(Clone, Debug)]
pub struct Planned {
    /// What the user named (built-in name or file), as `fbdt-lab run` takes it.
    pub arg: String,
    /// The scenario's own name: the JSON file is `<name>.json`.
    pub name: String,
    pub duration_s: f64,
    pub schemes: Vec<String>,
}

/// The whole plan. `duration_override` (hidden `--duration`, for tests) wins over everything.
pub fn plan(
    scenarios: &[(String, Scenario)],
    backend: BackendKind,
    quick: bool,
    extra: &[String],
    duration_override: Option<f64>,
) -> Vec<Planned> {
    scenarios
        .iter()
        .map(|(arg, s)| Planned {
            arg: arg.clone(),
            name: s.name.clone(),
            duration_s: duration_override.unwrap_or(if quick { quick_duration(s) } else { s.duration_s }),
            schemes: schemes_for(s, backend, quick, extra),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(name: &str) -> Scenario {
        Scenario::load(name).unwrap()
    }

    #[test]
    fn the_suite_is_the_papers_figures_in_order_and_all_built_in() {
        let s = default_scenarios();
        assert_eq!(
            s,
            [
                "tc-normal",
                "tc-loss-wigig",
                "tc-delay-wigig",
                "los",
                "nlos",
                "mobility",
                "blockage",
                "rats4",
                "rats4-loss1",
                "rats4-loss2"
            ]
        );
        for n in s {
            assert_eq!(load(n).name, n);
        }
        assert_eq!(group_of("blockage").0, "fig8c");
        assert_eq!(group_of("scan-wifi").0, "other");
    }

    #[test]
    fn schemes_follow_the_backend_and_the_mode() {
        let los = load("los");
        assert_eq!(
            schemes_for(&los, BackendKind::Emu, true, &[]),
            ["fbdt", "mptcp", "tcp:wifi", "tcp:wigig"]
        );
        assert_eq!(
            schemes_for(&los, BackendKind::Sim, true, &[]),
            ["fbdt", "mp:blest", "tcp:wifi", "tcp:wigig"]
        );
        // Full runs add the userspace schedulers; mp:blest is not listed twice in the simulator.
        assert_eq!(
            schemes_for(&los, BackendKind::Sim, false, &["fbdt+rto=0".into(), "tcp:wifi".into()]),
            [
                "fbdt",
                "mp:blest",
                "mp:minrtt",
                "mp:musher",
                "tcp:wifi",
                "tcp:wigig",
                "fbdt+rto=0"
            ]
        );
        assert_eq!(
            schemes_for(&load("rats4"), BackendKind::Emu, false, &[]).len(),
            2 + 3 + 4
        );
    }

    #[test]
    fn quick_runs_are_short_but_see_the_blockage_three_times() {
        assert_eq!(quick_duration(&load("los")), 10.0);
        assert_eq!(quick_duration(&load("nlos")), 10.0);
        assert_eq!(quick_duration(&load("blockage")), 12.0);
        let mut short = load("blockage");
        short.duration_s = 8.0;
        assert_eq!(quick_duration(&short), 8.0);
    }

    #[test]
    fn the_quick_emulated_suite_has_46_runs() {
        let scenarios: Vec<(String, Scenario)> = default_scenarios()
            .into_iter()
            .map(|n| (n.to_string(), load(n)))
            .collect();
        let p = plan(&scenarios, BackendKind::Emu, true, &[], None);
        assert_eq!(p.iter().map(|p| p.schemes.len()).sum::<usize>(), 46);
        assert!(p.iter().all(|p| p.duration_s <= 12.0));
        let p = plan(&scenarios, BackendKind::Sim, false, &[], Some(2.0));
        assert!(p.iter().all(|p| p.duration_s == 2.0));
        assert_eq!(p[0].duration_s, 2.0);
    }
}
