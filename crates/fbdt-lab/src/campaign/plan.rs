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
    /// The paper's throughput suite: one case per scenario (every scheme and repetition);
    /// --out is the campaign folder. The workloads and COTAG sections are not split yet.
    Paper(PaperArgs),
    /// A simulator sweep: one case per value and scheme.
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
    let crate::paper::Planned { backend, plan, .. } = crate::paper::planned(args)?;
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
    let cases = plan
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
    let mut one = one_process_command(&[]);
    if args.backend.is_none() {
        one.extend(["--backend".to_string(), bname.to_string()]);
    }
    for flag in ["--skip-workloads", "--skip-cotag"] {
        if !one.iter().any(|a| a == flag) {
            one.push(flag.into());
        }
    }
    if !args.skip_workloads || (backend == BackendKind::Emu && !args.skip_cotag) {
        eprintln!(
            "note: the workloads and COTAG sections are not part of a campaign yet; run them with `fbdt-lab paper`"
        );
    }
    Ok((out, cases, one))
}

fn sweep_cases(args: &SweepArgs, gso_units: Option<u32>) -> Result<Vec<Case>> {
    if args.cotag {
        bail!("plan sweep --cotag is not split into cases yet; run `fbdt-lab sweep --cotag`");
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
