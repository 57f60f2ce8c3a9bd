//! `fbdt-lab paper`: the FBDT journal paper's throughput suite (Fig. 3b, 8c–f, the blocked
//! log, Fig. 12) in one command — every scenario a case of a campaign run here
//! (`campaign::local::paper`), then `summary.json`, the figures and `report.html` in one
//! directory.

mod check;
pub(crate) mod cotag;
mod html;
pub(crate) mod plot;
pub(crate) mod suite;
pub(crate) mod summary;
pub(crate) mod text;
pub(crate) mod workloads;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use fbdt_scenario::Scenario;

use fbdt_harness::results::RunReport;
use fbdt_harness::scheme;
use fbdt_harness::BackendKind;
use summary::{Failure, RunInfo, Summary};

#[derive(Args, Debug)]
pub struct PaperArgs {
    /// Short runs: at most 10 s per scheme (12 s for the blockage, so its 4 s period is seen
    /// three times), only fbdt, the MPTCP baseline and single-path TCP.
    #[arg(long)]
    pub quick: bool,
    /// Default: emu when running as root, otherwise an error (pass --backend sim).
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// Simulator path model (`--backend sim`): pipe or tcp.
    #[arg(long, default_value_t = fbdt_sim::PathModel::Pipe)]
    pub model: fbdt_sim::PathModel,
    /// Output directory (default: results/paper-<backend>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Comma-separated scenarios instead of the paper's suite (built-in names or .toml files).
    #[arg(long, value_delimiter = ',')]
    pub scenarios: Vec<String>,
    /// More schemes to run in every scenario, e.g. fbdt+rto=0,mp:ecf.
    #[arg(long, value_delimiter = ',')]
    pub schemes_extra: Vec<String>,
    /// Multiply every path rate by this factor (default: 1 in the simulator; on the testbed
    /// the largest this machine emulates faithfully).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Emulated runs with --scale: repeat a scenario at scale ÷ 1.5 (up to 3 attempts) when
    /// the monitors blame the emulator (late or dropped packets). At the calibrated scale
    /// (no --scale) the suite always does; a busy host never lowers the scale.
    #[arg(long)]
    pub auto_scale: bool,
    /// Runs per scheme in each scenario of the throughput suite (seeds seed …, interleaved):
    /// the targets are judged on the means, and each target also shows its ratio seed by seed
    /// and whether those runs fall on both sides of the threshold. On the testbed, when most
    /// repetitions were faithful, the others are left out whole.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// A text or markdown file of findings, shown verbatim in the report's notes section.
    #[arg(long)]
    pub notes: Option<PathBuf>,
    /// Run nothing: rebuild summary.json, the figures and report.html from the per-scenario
    /// JSON already in --out (for example after writing --notes).
    #[arg(long)]
    pub render_only: bool,
    /// Seconds per scheme for every scenario (tests).
    #[arg(long, hide = true)]
    pub duration: Option<f64>,
    /// Leave out the application workloads (files, web, video, 360°).
    #[arg(long)]
    pub skip_workloads: bool,
    /// Where the workloads run: sim (default, whatever --backend is: minutes) or emu (the
    /// testbed, as root: every run in real time, about an hour for the four scenarios;
    /// flagged runs count in no claim).
    #[arg(long, value_enum, default_value = "sim")]
    pub workloads_backend: BackendKind,
    /// Leave out the COTAG section (paper 003's ten-flow bursts on the testbed; it runs only
    /// on the emulated backend as root: about 2 minutes with --quick).
    #[arg(long)]
    pub skip_cotag: bool,
    /// Scenarios of the workloads section (default: los, nlos, mobility, blockage).
    #[arg(long, value_delimiter = ',', hide = true)]
    pub workload_scenarios: Vec<String>,
    /// Only the workloads section, into --out/workloads.json (a campaign's workloads case).
    #[arg(long, hide = true)]
    pub workloads_only: bool,
    /// Keep the cases an interrupted run of this very command finished in --out (their
    /// results are in --out/cases/) and run only the others. Without it every case runs
    /// again and the earlier case results in --out are removed.
    #[arg(long, conflicts_with = "render_only")]
    pub resume: bool,
}

/// Where the workloads section is kept between `paper` and `paper --render-only`.
const WORKLOADS_JSON: &str = "workloads.json";

/// The backend to use: the one asked for, else the testbed when we may build it. Never a
/// silent switch to the simulator: its numbers mean something else.
fn resolve_backend(asked: Option<BackendKind>, emu_skip: Option<String>) -> Result<BackendKind> {
    match (asked, emu_skip) {
        (Some(b), _) => Ok(b),
        (None, None) => Ok(BackendKind::Emu),
        (None, Some(why)) => bail!(
            "the default backend is the emulated testbed, which needs root ({why}); run as root, \
             or pass --backend sim for the simulator"
        ),
    }
}

pub(crate) fn backend_name(b: BackendKind) -> &'static str {
    match b {
        BackendKind::Sim => "sim",
        BackendKind::Emu => "emu",
    }
}

/// Creates `dir` and proves we can write into it before spending minutes on runs.
fn prepare_out(dir: &Path) -> Result<()> {
    let fail = |e: std::io::Error| anyhow!("--out {}: cannot write there: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(".fbdt-lab-write-test");
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

fn load_scenarios(names: &[String]) -> Result<Vec<(String, Scenario)>> {
    let mut v: Vec<(String, Scenario)> = Vec::new();
    for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        let s = Scenario::load(n).map_err(|e| anyhow!("--scenarios: {e}"))?;
        if !v.iter().any(|(_, x)| x.name == s.name) {
            v.push((n.to_string(), s));
        }
    }
    if v.is_empty() {
        bail!("--scenarios is empty");
    }
    Ok(v)
}

/// Every scheme of the plan must parse before anything runs, so a typo fails in a second,
/// not after the first ten minutes of the suite.
fn check_schemes(plan: &[suite::Planned], scenarios: &[(String, Scenario)], backend: BackendKind) -> Result<()> {
    for (p, (_, sc)) in plan.iter().zip(scenarios) {
        for name in &p.schemes {
            for n in scheme::expand(name)? {
                if n == "mptcp" {
                    if backend != BackendKind::Emu {
                        bail!("scheme `mptcp` (kernel MPTCP) runs only on the emulated testbed (--backend emu)");
                    }
                } else {
                    scheme::parse(&n, sc, sc.seed).with_context(|| format!("scenario {}", sc.name))?;
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn mmss(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    format!("{}m{:02}s", s / 60, s % 60)
}

/// What a paper run will run.
pub(crate) struct Planned {
    pub backend: BackendKind,
    /// As named (built-in name or file) and loaded.
    pub scenarios: Vec<(String, Scenario)>,
    pub plan: Vec<suite::Planned>,
}

/// What a paper run will run, checked before anything runs (the one-process run and
/// `fbdt-lab plan paper` alike).
pub(crate) fn planned(args: &PaperArgs) -> Result<Planned> {
    let backend = resolve_backend(args.backend, fbdt_emu::skip_reason())?;
    let names: Vec<String> = if args.scenarios.is_empty() {
        suite::default_scenarios().into_iter().map(String::from).collect()
    } else {
        args.scenarios.clone()
    };
    let scenarios = load_scenarios(&names)?;
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration must be > 0 seconds, got {d}");
        }
    }
    let plan = suite::plan(&scenarios, backend, args.quick, &args.schemes_extra, args.duration);
    check_schemes(&plan, &scenarios, backend)?;
    Ok(Planned {
        backend,
        scenarios,
        plan,
    })
}

/// Whether the suite repeats a scenario lower when the monitors blame the emulator: on the
/// testbed at the calibrated scale always (the calibration does not fill every path — a
/// 1-s RTT path is never probed full — so a run can find the emulator late where the
/// probes did not), and at a given `--scale` with `--auto-scale`.
pub(crate) fn rescales(args: &PaperArgs, backend: BackendKind) -> bool {
    backend == BackendKind::Emu && (args.auto_scale || args.scale.is_none())
}

/// The scenarios of the workloads section.
pub(crate) fn workload_scenarios(args: &PaperArgs) -> Vec<String> {
    if args.workload_scenarios.is_empty() {
        workloads::SCENARIOS.iter().map(|s| s.to_string()).collect()
    } else {
        args.workload_scenarios.clone()
    }
}

/// Runs the workloads section (every workload over [`workload_scenarios`]).
pub(crate) fn workloads_section(
    args: &PaperArgs,
    testbed: &fbdt_emu::TestbedOptions,
) -> Result<workloads::WorkloadSection> {
    workloads::run(
        &workload_scenarios(args),
        args.quick,
        args.workloads_backend,
        testbed,
        &|line| eprintln!("{line}"),
    )
}

/// What `fbdt-lab paper` does before its suite runs: the options checked, the plan made,
/// the output folder writable. `--workloads-only` and `--render-only` are done here (None);
/// otherwise the folder and the plan the suite runs (`campaign::local::paper` runs it).
pub(crate) fn prepare(args: &PaperArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<Option<(PathBuf, Planned)>> {
    if args.workloads_backend == BackendKind::Emu && !args.skip_workloads && !args.render_only {
        if let Some(why) = fbdt_emu::skip_reason() {
            bail!("--workloads-backend emu needs the emulated testbed, which needs root ({why})");
        }
    }
    if args.workloads_only {
        let out = args.out.clone().context("--workloads-only needs --out DIR")?;
        prepare_out(&out)?;
        let w = workloads_section(args, testbed)?;
        let path = out.join(WORKLOADS_JSON);
        fbdt_harness::results::write_json(&path, &w)?;
        eprintln!("wrote {}", path.display());
        return Ok(None);
    }
    let Planned {
        backend,
        scenarios,
        plan,
    } = planned(args)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("results/paper-{}", backend_name(backend))));
    let notes = match &args.notes {
        Some(p) => Some(std::fs::read_to_string(p).with_context(|| format!("--notes {}", p.display()))?),
        None => None,
    };
    prepare_out(&out)?;
    if args.render_only {
        render_existing(args, backend, &out, &plan, scenarios, notes.as_deref())?;
        return Ok(None);
    }
    Ok(Some((
        out,
        Planned {
            backend,
            scenarios,
            plan,
        },
    )))
}

/// The sections beside the throughput suite.
struct Sections {
    workloads: Option<workloads::WorkloadSection>,
    cotag: Option<cotag::CotagSection>,
}

/// `--render-only`: the reports come from `out`, the run's description from the summary
/// written when they were measured (else it is rebuilt from the reports, without a duration).
fn render_existing(
    args: &PaperArgs,
    backend: BackendKind,
    out: &Path,
    plan: &[suite::Planned],
    scenarios: Vec<(String, Scenario)>,
    notes: Option<&str>,
) -> Result<()> {
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for p in plan {
        let path = out.join(format!("{}.json", p.name));
        let read = std::fs::read_to_string(&path)
            .map_err(anyhow::Error::from)
            .and_then(|text| serde_json::from_str::<RunReport>(&text).map_err(anyhow::Error::from));
        match read {
            Ok(r) => reports.push(r),
            Err(e) => failures.push(Failure {
                scenario: p.name.clone(),
                error: format!("--render-only: {}: {e}", path.display()),
            }),
        }
    }
    if reports.is_empty() {
        bail!(
            "--render-only: no scenario JSON in {} (run `fbdt-lab paper` with this --out first)",
            out.display()
        );
    }
    let earlier = std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Summary>(&t).ok());
    let info = match earlier {
        Some(s) => s.run,
        None => run_info(args, backend, &reports, SystemTime::now(), 0.0),
    };
    let workloads = std::fs::read_to_string(out.join(WORKLOADS_JSON))
        .ok()
        .and_then(|t| serde_json::from_str::<workloads::WorkloadSection>(&t).ok());
    let cotag = std::fs::read_to_string(out.join(cotag::JSON))
        .ok()
        .and_then(|t| serde_json::from_str::<cotag::CotagSection>(&t).ok())
        .map(|mut c| {
            // Judged again from the stored points, so the verdicts follow this build's rules.
            c.report.claims = fbdt_harness::cotag_grid::claims(&c.report.points);
            c
        });
    eprintln!(
        "fbdt-lab paper --render-only: {} scenario reports{} from {}",
        reports.len(),
        match (workloads.is_some(), cotag.is_some()) {
            (true, true) => " and the workloads and COTAG sections",
            (true, false) => " and the workloads",
            (false, true) => " and the COTAG section",
            (false, false) => "",
        },
        out.display()
    );
    write_outputs(
        out,
        reports,
        &scenarios,
        failures,
        Sections { workloads, cotag },
        info,
        notes,
        plan.len(),
    )
}

/// What a paper campaign's cases produced, section by section, each in case order.
pub(crate) struct CampaignParts {
    /// The throughput suite: one report per scenario, in the plan's order.
    pub reports: Vec<RunReport>,
    /// The workloads section: one part per workload scenario.
    pub workloads: Vec<workloads::WorkloadSection>,
    /// The COTAG section: every point of its grids.
    pub cotag_points: Vec<fbdt_harness::cotag_grid::Point>,
    /// The cases' run time added up: all of them, the workloads', the COTAG section's.
    pub wall_s: f64,
    pub workloads_wall_s: f64,
    pub cotag_wall_s: f64,
    /// When the campaign started (unknown: when it is merged).
    pub started: Option<SystemTime>,
    /// How many cases it planned, and those that failed (reported, the others still merged).
    pub cases: usize,
    pub failures: Vec<Failure>,
}

/// `fbdt-lab merge` of a paper campaign: its cases' results written as the one-process run
/// writes them — per-scenario JSON, workloads.json and cotag.json, summary.json, figures,
/// report.html.
pub(crate) fn merge(args: &PaperArgs, planned: &Planned, out: &Path, parts: CampaignParts) -> Result<()> {
    let Planned { backend, scenarios, .. } = planned;
    let backend = *backend;
    let notes = match &args.notes {
        Some(p) => Some(std::fs::read_to_string(p).with_context(|| format!("--notes {}", p.display()))?),
        None => None,
    };
    for r in &parts.reports {
        fbdt_harness::results::write_json(&out.join(format!("{}.json", r.scenario)), r)?;
    }
    let workloads = workloads::merge(parts.workloads, parts.workloads_wall_s);
    if let Some(w) = &workloads {
        fbdt_harness::results::write_json(&out.join(WORKLOADS_JSON), w)?;
    }
    let cotag = (!parts.cotag_points.is_empty()).then(|| {
        cotag::section(
            args.quick,
            &cotag::plan(args.quick, args.scale),
            parts.cotag_points,
            parts.cotag_wall_s,
        )
    });
    if let Some(c) = &cotag {
        fbdt_harness::results::write_json(&out.join(cotag::JSON), c)?;
    }
    let info = run_info(
        args,
        backend,
        &parts.reports,
        parts.started.unwrap_or_else(SystemTime::now),
        parts.wall_s,
    );
    write_outputs(
        out,
        parts.reports,
        scenarios,
        parts.failures,
        Sections { workloads, cotag },
        info,
        notes.as_deref(),
        parts.cases,
    )
}

/// summary.json, the figures and report.html; fails at the end if any scenario failed.
#[allow(clippy::too_many_arguments)]
fn write_outputs(
    out: &Path,
    reports: Vec<RunReport>,
    scenarios: &[(String, Scenario)],
    failures: Vec<Failure>,
    sections: Sections,
    info: RunInfo,
    notes: Option<&str>,
    planned: usize,
) -> Result<()> {
    let defined: Vec<Scenario> = scenarios.iter().map(|(_, s)| s.clone()).collect();
    let mut summary = summary::build(&reports, &defined, failures, info);
    if let Some(w) = sections.workloads {
        summary = summary.with_workloads(w);
    }
    if let Some(c) = sections.cotag {
        summary = summary.with_cotag(c);
    }
    fbdt_harness::results::write_json(&out.join("summary.json"), &summary)?;
    let mut figures = figures(out, &reports)?;
    if let Some(c) = &summary.cotag {
        plot::save(out, "cotag-bars", &cotag::Bars { section: c })?;
        figures.push(html::Figure {
            file: "cotag-bars.png".into(),
            svg: Some("cotag-bars.svg".into()),
            caption: "COTAG (paper 003): mean burst throughput of ten Cubic flows per point and scheme; \
                      pale bars = runs the fidelity monitors flagged"
                .into(),
        });
    }
    let page = html::render(&summary, &figures, notes);
    let page_path = out.join("report.html");
    std::fs::write(&page_path, page).with_context(|| format!("writing {}", page_path.display()))?;
    print_checks(&summary);
    eprintln!(
        "wrote {} (summary.json, figures, per-scenario JSON)",
        page_path.display()
    );
    if !summary.failures.is_empty() {
        bail!(
            "{} of {} cases failed (see {})",
            summary.failures.len(),
            planned,
            page_path.display()
        );
    }
    Ok(())
}

fn run_info(args: &PaperArgs, backend: BackendKind, reports: &[RunReport], at: SystemTime, wall_s: f64) -> RunInfo {
    let mut scales: Vec<f64> = Vec::new();
    let mut ccs: Vec<String> = Vec::new();
    for r in reports {
        if !scales.contains(&r.scale) {
            scales.push(r.scale);
        }
        if !ccs.contains(&r.congestion_control) {
            ccs.push(r.congestion_control.clone());
        }
    }
    let meta = reports
        .first()
        .map_or_else(fbdt_harness::results::Meta::here, |r| r.meta.clone());
    let scale_sources = reports
        .iter()
        .filter_map(|r| {
            r.fidelity
                .as_ref()
                .map(|f| format!("{}: {} {}", r.scenario, f.scale, f.scale_source))
        })
        .collect();
    RunInfo {
        backend: backend_name(backend).into(),
        quick: args.quick,
        baseline: suite::baseline(backend).into(),
        scales,
        scale_sources,
        gso_unit_airtime_us: reports
            .iter()
            .find_map(|r| r.fidelity.as_ref().and_then(|f| f.gso_unit_airtime_us)),
        congestion_control: ccs,
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        // What `uname -r` prints.
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_string()),
        git_revision: meta.git_revision,
        command_line: meta.command_line,
        started: humantime::format_rfc3339_seconds(at).to_string(),
        wall_s,
    }
}

/// Draws every figure; returns them in page order.
fn figures(out: &Path, reports: &[RunReport]) -> Result<Vec<html::Figure>> {
    let order = plot::scheme_order(reports);
    let mut figs = Vec::new();
    let mut add = |stem: String, caption: String| {
        figs.push(html::Figure {
            file: format!("{stem}.png"),
            svg: Some(format!("{stem}.svg")),
            caption,
        })
    };
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in reports {
        let g = suite::group_of(&r.scenario);
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    for (id, title) in groups {
        let members: Vec<&RunReport> = reports
            .iter()
            .filter(|r| suite::group_of(&r.scenario).0 == id)
            .collect();
        let stem = format!("bars-{id}");
        let fig = plot::Bars {
            title: title.to_string(),
            reports: members,
            order: &order,
        };
        plot::save(out, &stem, &fig)?;
        add(
            stem,
            format!("{title}: mean goodput per scheme, error bars = p10–p90 of one-second samples"),
        );
    }
    let cdf: Vec<&RunReport> = reports
        .iter()
        .filter(|r| suite::CDF_SCENARIOS.contains(&r.scenario.as_str()))
        .collect();
    if !cdf.is_empty() {
        plot::save(
            out,
            "cdf",
            &plot::Cdfs {
                reports: cdf,
                order: &order,
            },
        )?;
        add(
            "cdf".into(),
            "Fig. 8d–f and the blocked log: CDF of one-second goodput (means of ten 100 ms samples)".into(),
        );
    }
    for r in reports {
        let schedule = r.scenario_def.schedule(r.scale)?;
        let stem = format!("ts-{}", r.scenario);
        plot::save(
            out,
            &stem,
            &plot::TimeSeries {
                report: r,
                schedule,
                order: &order,
            },
        )?;
        add(
            stem,
            format!(
                "{}: goodput per 100 ms; shaded = a path's rate is 0; dashed = capacity, each step a rate change",
                r.scenario
            ),
        );
    }
    Ok(figs)
}

fn print_checks(s: &Summary) {
    println!(
        "\ntarget checks ({} backend, MPTCP = {}):",
        s.run.backend, s.run.baseline
    );
    for c in &s.checks {
        println!(
            "  {:<10} {:<16} {:<28} ours {:>6} paper {:>6}{}",
            c.status.label(),
            c.scenario,
            c.target,
            c.value.map_or("-".into(), |v| format!("{v:.4}")),
            c.paper_value.map_or("-".into(), |v| format!("{v:.4}")),
            c.runs_note().map_or(String::new(), |n| format!("  ({n})"))
        );
    }
    for sc in s.scenarios.iter().filter(|sc| !sc.left_out_seeds.is_empty()) {
        println!(
            "  {}: repetition (seed) {} left out as unfaithful, judged on the others ({})",
            sc.scenario,
            sc.left_out_seeds
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            sc.unfaithful.join("; ")
        );
    }
    for f in &s.failures {
        println!("  FAILED {}: {}", f.scenario, f.error);
    }
    if let Some(c) = &s.cotag {
        println!("\nCOTAG (paper 003) claims, faithful points only:");
        for line in fbdt_harness::cotag_grid::describe(&c.report) {
            println!("  {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_silent_switch_to_the_simulator() {
        assert_eq!(resolve_backend(None, None).unwrap(), BackendKind::Emu);
        assert_eq!(resolve_backend(Some(BackendKind::Sim), None).unwrap(), BackendKind::Sim);
        assert_eq!(
            resolve_backend(Some(BackendKind::Emu), Some("not root".into())).unwrap(),
            BackendKind::Emu
        );
        let e = resolve_backend(None, Some("not root".into())).unwrap_err().to_string();
        assert!(e.contains("--backend sim") && e.contains("not root"), "{e}");
    }

    #[test]
    fn unknown_scenarios_and_bad_schemes_fail_before_running() {
        let e = load_scenarios(&["los".into(), "no-such".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no-such"), "{e}");
        let sc = load_scenarios(&["los".into(), "los".into()]).unwrap();
        assert_eq!(sc.len(), 1);
        let plan = suite::plan(&sc, BackendKind::Sim, true, &["tcp:lte".into()], None);
        let e = format!("{:#}", check_schemes(&plan, &sc, BackendKind::Sim).unwrap_err());
        assert!(e.contains("lte"), "{e}");
        let plan = suite::plan(&sc, BackendKind::Sim, true, &["mptcp".into()], None);
        assert!(check_schemes(&plan, &sc, BackendKind::Sim).is_err());
        let plan = suite::plan(&sc, BackendKind::Emu, true, &[], None);
        check_schemes(&plan, &sc, BackendKind::Emu).unwrap();
    }

    #[test]
    fn the_testbed_suite_rescales_at_the_calibrated_scale() {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: PaperArgs,
        }
        let args = |v: &[&str]| P::parse_from(std::iter::once("paper").chain(v.iter().copied())).a;
        assert!(rescales(&args(&[]), BackendKind::Emu));
        assert!(!rescales(&args(&["--scale", "0.3"]), BackendKind::Emu));
        assert!(rescales(&args(&["--scale", "0.3", "--auto-scale"]), BackendKind::Emu));
        assert!(!rescales(&args(&[]), BackendKind::Sim));
    }

    #[test]
    fn minutes_and_seconds() {
        assert_eq!(mmss(0.0), "0m00s");
        assert_eq!(mmss(125.4), "2m05s");
    }
}
