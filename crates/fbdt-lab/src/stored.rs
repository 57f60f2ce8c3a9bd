//! A one-process command stored in a campaign's manifest (`run`, `paper`, `sweep`,
//! `faults`): parsed again, and run through the very code the command runs from a shell.
//! Apart from `main.rs` so the campaign commands need not import the binary's root.

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::{faults, paper, run, sweep};

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

/// What one campaign case produced: its results JSON and its fidelity.
pub(crate) struct CaseOutput {
    pub json: serde_json::Value,
    pub fidelity: Option<fbdt_harness::results::fidelity::RunFidelity>,
}

/// Runs a campaign case's command (`fbdt-lab` arguments without the program name) through
/// the very code the command runs from a shell, and returns its results instead of
/// writing them.
pub(crate) fn run_case_command(args: &[String]) -> Result<CaseOutput> {
    let argv = std::iter::once("fbdt-lab".to_string()).chain(args.iter().cloned());
    let cli = StoredCli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("the case's command does not parse: {e}"))?;
    let testbed = testbed_options(cli.gso_units);
    match cli.command {
        Stored::Run(mut a) => {
            a.json = None;
            let r = run::run(a, &testbed)?;
            Ok(CaseOutput {
                fidelity: r.fidelity.clone(),
                json: serde_json::to_value(&r)?,
            })
        }
        Stored::Sweep(a) => Ok(CaseOutput {
            json: serde_json::to_value(sweep::report(&a, &testbed)?)?,
            fidelity: None,
        }),
        Stored::Faults(a) => Ok(CaseOutput {
            json: serde_json::to_value(faults::report(&a, &testbed)?)?,
            fidelity: None,
        }),
        Stored::Paper(_) => anyhow::bail!("a campaign case runs `run`, `sweep` or `faults`, not `{}`", args.join(" ")),
    }
}

/// The arguments of a one-process command stored in a manifest, parsed again.
pub(crate) fn parse_stored(args: &[String]) -> Result<(Stored, fbdt_emu::TestbedOptions)> {
    let argv = std::iter::once("fbdt-lab".to_string()).chain(args.iter().cloned());
    let cli = StoredCli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("the manifest's command does not parse: {e}"))?;
    Ok((cli.command, testbed_options(cli.gso_units)))
}
