//! A one-process command stored in a campaign's manifest (`run`, `paper`, `sweep`,
//! `faults`): parsed again, and run through the very code the command runs from a shell.
//! Apart from `main.rs` so the campaign commands need not import the binary's root.

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::{faults, paper, run, sweep};
use fbdt_harness::campaign::Verdict;
use fbdt_harness::results::fidelity::RunFidelity;

/// `fbdt-lab`'s command line as far as a manifest stores it (the global `--gso-units`
/// as `main.rs`'s `Cli` takes it).
#[derive(Parser, Debug)]
#[command(name = "fbdt-lab")]
struct StoredCli {
    #[arg(long, global = true, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    gso_units: Option<u32>,
    #[command(subcommand)]
    command: Stored,
}

/// The commands a campaign plans.
#[derive(Subcommand, Debug)]
pub(crate) enum Stored {
    Run(run::RunArgs),
    Paper(paper::PaperArgs),
    Sweep(sweep::SweepArgs),
    Faults(faults::FaultsArgs),
}

pub(crate) fn testbed_options(gso_units: Option<u32>) -> fbdt_emu::TestbedOptions {
    let defaults = fbdt_emu::TestbedOptions::default();
    fbdt_emu::TestbedOptions {
        gso_unit_airtime_us: match gso_units {
            None => defaults.gso_unit_airtime_us,
            Some(0) => None,
            Some(us) => Some(us),
        },
        ..defaults
    }
}

/// What one campaign case produced: its results JSON, the fidelity verdict, and for
/// testbed cases the scale it emulated and where that came from.
pub(crate) struct CaseOutput {
    pub json: serde_json::Value,
    pub verdict: Verdict,
    pub testbed_reference: Option<String>,
}

fn reference(f: &RunFidelity) -> String {
    format!(
        "scale {} ({}), calibrated for {} ({} cores, kernel {})",
        f.scale, f.scale_source, f.host.cpu_model, f.host.cores, f.host.kernel
    )
}

/// One verdict over several (a COTAG case's points): faithful when all are, the emulator
/// blamed when it was in any, every reason.
fn combined(verdicts: Vec<Verdict>) -> Verdict {
    let faithful = verdicts.iter().all(|v| v.faithful);
    Verdict {
        label: if faithful { "faithful" } else { "UNFAITHFUL" }.into(),
        faithful,
        emulator_blamed: verdicts.iter().any(|v| v.emulator_blamed),
        reasons: verdicts.into_iter().flat_map(|v| v.reasons).collect(),
    }
}

/// A workloads section's verdict: the simulator's, or on the testbed faithful when no table
/// had a flagged run (the tables keep counts, not the monitors' reasons: nobody blamed).
fn workloads_verdict(w: &paper::workloads::WorkloadSection) -> Verdict {
    if w.backend != "emu" {
        return Verdict::simulator();
    }
    let reasons: Vec<String> = w
        .tables
        .iter()
        .filter(|t| t.unfaithful_runs > 0)
        .map(|t| format!("{} over {}: {} runs flagged", t.kind, t.scenario, t.unfaithful_runs))
        .collect();
    Verdict {
        label: if reasons.is_empty() { "faithful" } else { "UNFAITHFUL" }.into(),
        faithful: reasons.is_empty(),
        emulator_blamed: false,
        reasons,
    }
}

/// Runs a campaign case's command (`fbdt-lab` arguments without the program name) through
/// the very code the command runs from a shell, and returns its results instead of
/// writing them.
pub(crate) fn run_case_command(args: &[String]) -> Result<CaseOutput> {
    let argv = std::iter::once("fbdt-lab".to_string()).chain(args.iter().cloned());
    let cli = StoredCli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("the case's command does not parse: {e}"))?;
    let testbed = testbed_options(cli.gso_units);
    let simulator = |json: serde_json::Value| CaseOutput {
        json,
        verdict: Verdict::simulator(),
        testbed_reference: None,
    };
    match cli.command {
        Stored::Run(mut a) => {
            a.json = None;
            let r = run::run(a, &testbed)?;
            Ok(CaseOutput {
                verdict: r.fidelity.as_ref().map_or_else(Verdict::simulator, Verdict::of),
                testbed_reference: r.fidelity.as_ref().map(reference),
                json: serde_json::to_value(&r)?,
            })
        }
        Stored::Sweep(a) if a.cotag => {
            let r = sweep::cotag_report(&a, &testbed)?;
            Ok(CaseOutput {
                verdict: combined(r.points.iter().map(|p| Verdict::of(&p.fidelity)).collect()),
                testbed_reference: r.points.first().map(|p| reference(&p.fidelity)),
                json: serde_json::to_value(&r)?,
            })
        }
        Stored::Sweep(a) => Ok(simulator(serde_json::to_value(sweep::report(&a, &testbed)?)?)),
        Stored::Faults(a) => Ok(simulator(serde_json::to_value(faults::report(&a, &testbed)?)?)),
        Stored::Paper(a) if a.workloads_only => {
            let w = paper::workloads_section(&a, &testbed)?;
            Ok(CaseOutput {
                verdict: workloads_verdict(&w),
                testbed_reference: None,
                json: serde_json::to_value(&w)?,
            })
        }
        Stored::Paper(_) => anyhow::bail!(
            "a campaign case runs `run`, `sweep`, `faults` or `paper --workloads-only`, not `{}`",
            args.join(" ")
        ),
    }
}

/// The arguments of a one-process command stored in a manifest, parsed again.
pub(crate) fn parse_stored(args: &[String]) -> Result<(Stored, fbdt_emu::TestbedOptions)> {
    let argv = std::iter::once("fbdt-lab".to_string()).chain(args.iter().cloned());
    let cli = StoredCli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("the manifest's command does not parse: {e}"))?;
    Ok((cli.command, testbed_options(cli.gso_units)))
}
