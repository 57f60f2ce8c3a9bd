//! `fbdt-lab plan paper|sweep|faults … --out DIR`: every case of the command, with the
//! `fbdt-lab` command line that runs it alone, into DIR/manifest.json.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use fbdt_harness::campaign::{Case, Manifest};
use fbdt_harness::BackendKind;

use crate::faults::FaultsArgs;
use crate::paper::PaperArgs;
use crate::sweep::{Param, SweepArgs};

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub what: PlanWhat,
}

#[derive(Subcommand, Debug)]
pub enum PlanWhat {
    /// The paper's suite: one case per scenario (every scheme and repetition), one per
    /// workload scenario, one per point of the COTAG section (testbed); --out is the
    /// campaign folder.
    Paper(PaperArgs),
    /// A simulator sweep: one case per value and scheme; with --cotag (testbed) one per
    /// point of the grid.
    Sweep {
        #[command(flatten)]
        args: SweepArgs,
        /// The campaign folder.
        #[arg(long)]
        out: PathBuf,
    },
    /// A simulator fault campaign: one case per --per-case fault plans.
    Faults {
        #[command(flatten)]
        args: FaultsArgs,
        /// The campaign folder.
        #[arg(long)]
        out: PathBuf,
        /// Fault plans per case (each runs once per scheme).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        per_case: u64,
    },
}

/// A scenario argument that names a file becomes absolute: a case may run in another
/// folder (a Slurm task on another node).
fn absolute(arg: &str) -> String {
    let p = Path::new(arg);
    if p.is_file() {
        if let Ok(abs) = p.canonicalize() {
            return abs.to_string_lossy().into_owned();
        }
    }
    arg.to_string()
}

fn display_f64(v: f64) -> String {
    // Rust prints the shortest text that parses back to the same f64.
    format!("{v}")
}

/// The one-process command this plan splits: the command line without `plan` and without
/// the options only `plan` has.
fn one_process_command(drop: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = std::env::args().skip(1);
    let mut seen_plan = false;
    while let Some(a) = args.next() {
        if !seen_plan && a == "plan" {
            seen_plan = true;
            continue;
        }
        if seen_plan && drop.contains(&a.as_str()) {
            args.next();
            continue;
        }
        if seen_plan && drop.iter().any(|d| a.starts_with(&format!("{d}="))) {
            continue;
        }
        out.push(a);
    }
    out
}

fn global_args(gso_units: Option<u32>) -> Vec<String> {
    gso_units.map_or_else(Vec::new, |us| vec!["--gso-units".into(), us.to_string()])
}

fn paper_cases(args: &PaperArgs, gso_units: Option<u32>) -> Result<(PathBuf, Vec<Case>, Vec<String>)> {
    let Some(out) = args.out.clone() else {
        bail!("plan paper needs --out DIR (the campaign folder)");
    };
    if args.render_only {
        bail!("plan paper: --render-only runs nothing; use `fbdt-lab merge DIR`");
    }
    if args.workloads_only {
        bail!("plan paper: --workloads-only is a case's own option; plan the whole paper");
    }
    if args.resume {
        bail!("plan paper: --resume is the one-process command's; `fbdt-lab case DIR` skips the cases already done");
    }
    let (cases, command) = paper_campaign(args, &crate::paper::planned(args)?, gso_units)?;
    Ok((out, cases, command))
}

/// Every case of `paper` with these arguments, and the one-process command they split (as
/// typed, without `--resume`: resuming must not make it another campaign). The first cases
/// are the throughput suite's scenarios in the plan's order.
pub(crate) fn paper_campaign(
    args: &PaperArgs,
    planned: &crate::paper::Planned,
    gso_units: Option<u32>,
) -> Result<(Vec<Case>, Vec<String>)> {
    let crate::paper::Planned { backend, plan, .. } = planned;
    let backend = *backend;
    let bname = crate::paper::backend_name(backend);
    let scale_rule = match (backend, args.scale) {
        (_, Some(s)) => format!("given {s}"),
        (BackendKind::Sim, None) => "1".into(),
        (BackendKind::Emu, None) => "calibrated on the host (cached per host)".into(),
    } + if crate::paper::rescales(args, backend) {
        ", lower when the monitors blame the emulator"
    } else {
        ""
    };
    let mut cases: Vec<Case> = plan
        .iter()
        .map(|p| {
            let mut command = global_args(gso_units);
            command.extend(
                [
                    "run",
                    &absolute(&p.arg),
                    "--backend",
                    bname,
                    "--model",
                    &args.model.to_string(),
                    "--schemes",
                    &p.schemes.join(","),
                    "--duration",
                    &display_f64(p.duration_s),
                    "--repeat",
                    &args.repeat.to_string(),
                ]
                .map(String::from),
            );
            if let Some(s) = args.scale {
                command.extend(["--scale".to_string(), display_f64(s)]);
            }
            if crate::paper::rescales(args, backend) {
                command.push("--auto-scale".into());
            }
            let seed = fbdt_scenario::Scenario::load(&p.arg).map(|s| s.seed).ok();
            Case {
                index: 0,
                label: p.name.clone(),
                scenario: p.name.clone(),
                schemes: p.schemes.clone(),
                seed,
                scale_rule: scale_rule.clone(),
                backend: bname.into(),
                command,
                hash: String::new(),
            }
        })
        .collect();
    if !args.skip_workloads {
        cases.extend(workload_cases(args, gso_units));
    }
    if backend == BackendKind::Emu && !args.skip_cotag {
        for grid in crate::paper::cotag::plan(args.quick, args.scale) {
            for cell in fbdt_harness::cotag_grid::cells(&grid) {
                cases.push(cotag_case(&grid, &cell, gso_units));
            }
        }
    }
    let mut one = one_process_command(&[]);
    one.retain(|a| a != "--resume");
    if args.backend.is_none() {
        one.extend(["--backend".to_string(), bname.to_string()]);
    }
    Ok((cases, one))
}

/// The paper's workloads section: one case per scenario (every workload over it).
fn workload_cases(args: &PaperArgs, gso_units: Option<u32>) -> Vec<Case> {
    let wname = crate::paper::backend_name(args.workloads_backend);
    crate::paper::workload_scenarios(args)
        .iter()
        .map(|s| {
            let mut command = global_args(gso_units);
            command.extend(
                [
                    "paper",
                    "--workloads-only",
                    "--workloads-backend",
                    wname,
                    "--workload-scenarios",
                    &absolute(s),
                ]
                .map(String::from),
            );
            if args.quick {
                command.push("--quick".into());
            }
            Case {
                index: 0,
                label: format!("workloads {s}"),
                scenario: s.clone(),
                schemes: Vec::new(),
                seed: None,
                scale_rule: match args.workloads_backend {
                    BackendKind::Sim => "1".into(),
                    BackendKind::Emu => "calibrated on the host (cached per host)".into(),
                },
                backend: wname.into(),
                command,
                hash: String::new(),
            }
        })
        .collect()
}

/// One point of a COTAG grid (`sweep --cotag` with one value on each axis).
fn cotag_case(grid: &fbdt_harness::cotag_grid::Grid, cell: &(String, f64, f64), gso_units: Option<u32>) -> Case {
    let (corr, per, lat) = cell;
    let grid = &fbdt_harness::cotag_grid::one_point(grid, cell);
    let join = |v: &[f64]| v.iter().map(|x| display_f64(*x)).collect::<Vec<_>>().join(",");
    let traffic = grid
        .traffic
        .to_possible_value()
        .expect("no skipped traffic")
        .get_name()
        .to_string();
    let mut command = global_args(gso_units);
    command.extend(
        [
            "sweep",
            "--cotag",
            "--correlations",
            &grid.correlations.join(","),
            "--per",
            &join(&grid.per),
            "--latency",
            &join(&grid.latency_ms),
            "--periods",
            &join(&grid.periods_ms),
            "--schemes",
            &grid.baselines.join(","),
            "--duration",
            &display_f64(grid.duration_s),
            "--scale",
            &display_f64(grid.scale),
            "--repeat",
            &grid.repeat.to_string(),
            "--traffic",
            &traffic,
        ]
        .map(String::from),
    );
    Case {
        index: 0,
        label: format!("cotag {corr} PER {per} {lat} ms"),
        scenario: format!("cotag-corr-{corr}"),
        schemes: grid.schemes(),
        seed: None,
        scale_rule: format!("given {}", display_f64(grid.scale)),
        backend: "emu".into(),
        command,
        hash: String::new(),
    }
}

fn sweep_cases(args: &SweepArgs, gso_units: Option<u32>) -> Result<Vec<Case>> {
    if args.cotag {
        let grid = crate::sweep::cotag_grid(args)?;
        return Ok(fbdt_harness::cotag_grid::cells(&grid)
            .iter()
            .map(|cell| cotag_case(&grid, cell, gso_units))
            .collect());
    }
    let limits = fbdt_harness::TestbedLimits::from(&crate::stored::testbed_options(gso_units));
    let crate::sweep::Work {
        scenario,
        over,
        points: work,
    } = crate::sweep::work(args, &limits)?;
    let scenario_arg = absolute(args.scenario.as_deref().unwrap_or_default());
    let over_name = over
        .to_possible_value()
        .expect("no skipped values")
        .get_name()
        .to_string();
    Ok(work
        .iter()
        .map(|(value, scheme)| {
            let mut command = global_args(gso_units);
            command.extend(
                [
                    "sweep",
                    &scenario_arg,
                    "--over",
                    &over_name,
                    "--values",
                    &display_f64(*value),
                    "--schemes",
                    scheme,
                    "--model",
                    &args.model.to_string(),
                    "--grain",
                    &args.grain.to_string(),
                    "--duration",
                    &display_f64(scenario.duration_s),
                    "--jobs",
                    "1",
                ]
                .map(String::from),
            );
            let (seed, scale_rule) = match over {
                Param::Seed => (*value as u64, "1".to_string()),
                Param::Scale => (scenario.seed, display_f64(*value)),
            };
            Case {
                index: 0,
                label: format!("{over_name}={value} {scheme}"),
                scenario: scenario.name.clone(),
                schemes: vec![scheme.clone()],
                seed: Some(seed),
                scale_rule,
                backend: "sim".into(),
                command,
                hash: String::new(),
            }
        })
        .collect())
}

fn faults_cases(args: &FaultsArgs, per_case: u64, gso_units: Option<u32>) -> Result<Vec<Case>> {
    if args.first != 0 {
        bail!("plan faults splits the whole campaign; leave out --first");
    }
    let limits = fbdt_harness::TestbedLimits::from(&crate::stored::testbed_options(gso_units));
    let (scenario, schemes, kinds) = crate::faults::setup(args, &limits)?;
    let kinds: Vec<String> = kinds
        .iter()
        .map(|k| k.to_possible_value().expect("no skipped kinds").get_name().to_string())
        .collect();
    let scenario_arg = absolute(&args.scenario);
    let mut cases = Vec::new();
    let mut first = 0;
    while first < args.runs {
        let runs = per_case.min(args.runs - first);
        let mut command = global_args(gso_units);
        command.extend(
            [
                "faults",
                &scenario_arg,
                "--backend",
                "sim",
                "--runs",
                &runs.to_string(),
                "--first",
                &first.to_string(),
                "--schemes",
                &schemes.join(","),
                "--kinds",
                &kinds.join(","),
                "--seed",
                &args.seed.to_string(),
                "--duration",
                &display_f64(args.duration),
                "--scale",
                &display_f64(args.scale),
                "--model",
                &args.model.to_string(),
                "--jobs",
                "1",
            ]
            .map(String::from),
        );
        cases.push(Case {
            index: 0,
            label: format!("plans {first}..{}", first + runs),
            scenario: scenario.name.clone(),
            schemes: schemes.clone(),
            seed: Some(args.seed.wrapping_add(first)),
            scale_rule: display_f64(args.scale),
            backend: "sim".into(),
            command,
            hash: String::new(),
        });
        first += runs;
    }
    Ok(cases)
}

pub fn plan(args: PlanArgs, gso_units: Option<u32>) -> Result<()> {
    let (kind, out, cases, command) = match &args.what {
        PlanWhat::Paper(a) => {
            let (out, cases, command) = paper_cases(a, gso_units)?;
            ("paper", out, cases, command)
        }
        PlanWhat::Sweep { args, out } => {
            if args.json.is_some() {
                bail!("plan sweep: leave out --json; `fbdt-lab merge` writes DIR/sweep.json");
            }
            let cases = sweep_cases(args, gso_units)?;
            ("sweep", out.clone(), cases, one_process_command(&["--out"]))
        }
        PlanWhat::Faults { args, out, per_case } => {
            if args.json.is_some() {
                bail!("plan faults: leave out --json; `fbdt-lab merge` writes DIR/faults.json");
            }
            let cases = faults_cases(args, *per_case, gso_units)?;
            (
                "faults",
                out.clone(),
                cases,
                one_process_command(&["--out", "--per-case"]),
            )
        }
    };
    let manifest = Manifest::new(kind, command, cases);
    manifest
        .write(&out)
        .with_context(|| format!("writing the campaign to {}", out.display()))?;
    let testbed = manifest.cases.iter().filter(|c| c.is_testbed()).count();
    println!(
        "planned {} cases of `{kind}` (manifest {}) in {}{}",
        manifest.cases.len(),
        manifest.short_hash(),
        out.display(),
        if testbed > 0 {
            format!(" ({testbed} on the testbed: one machine each, as root)")
        } else {
            String::new()
        }
    );
    println!(
        "run them: `fbdt-lab case {0}` (all, here) or `fbdt-lab slurm submit {0}`; then `fbdt-lab merge {0}`",
        out.display()
    );
    Ok(())
}

/// [`sweep_cases`] for the merge's tests.
#[cfg(test)]
pub(super) fn sweep_cases_for_tests(args: &SweepArgs) -> Vec<Case> {
    sweep_cases(args, None).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Paper {
        #[command(flatten)]
        a: PaperArgs,
    }

    /// `plan paper` on the testbed: the throughput scenarios, the workloads (one case per
    /// scenario, in the simulator) and every point of the COTAG section's grids, each case
    /// a command that parses.
    #[test]
    fn a_testbed_paper_plans_every_section() {
        let args = Paper::parse_from(["x", "--backend", "emu", "--quick", "--out", "/nonexistent/c"]).a;
        let (_, cases, one) = paper_cases(&args, Some(0)).unwrap();
        let suite = crate::paper::suite::default_scenarios().len();
        let labels: Vec<&str> = cases.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(cases.len(), suite + 4 + 4, "{labels:?}");
        assert_eq!(
            &labels[suite..],
            [
                "workloads los",
                "workloads nlos",
                "workloads mobility",
                "workloads blockage",
                "cotag neg PER 0 1 ms",
                "cotag zero PER 0 1 ms",
                "cotag pos PER 0 1 ms",
                "cotag pos PER 0 5 ms",
            ]
        );
        assert!(cases[0].command.contains(&"--auto-scale".to_string()), "{:?}", cases[0].command);
        assert_eq!(cases[suite].backend, "sim");
        assert_eq!(cases[suite + 4].backend, "emu");
        for c in &cases {
            assert_eq!(&c.command[..2], ["--gso-units", "0"]);
            crate::stored::parse_stored(&c.command).unwrap_or_else(|e| panic!("{:?}: {e}", c.command));
        }
        assert!(!one.iter().any(|a| a == "--skip-workloads" || a == "--skip-cotag"));
        let skip = Paper::parse_from(["x", "--backend", "sim", "--skip-workloads", "--out", "/nonexistent/c"]).a;
        let (_, cases, _) = paper_cases(&skip, None).unwrap();
        assert_eq!(cases.len(), suite);
        assert!(!cases[0].command.contains(&"--auto-scale".to_string()));
    }
}
