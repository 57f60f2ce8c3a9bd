//! The lab's workloads (`fbdt-lab workload file|web|progressive|dash|vr <scenario>`): what
//! applications feel (paper 001 sec. VI-C): file completion times, page loads, progressive
//! 8K video, 360° tiles — every scheme over one scenario, results JSON beside the paper's
//! numbers. docs/workloads.md describes the models.
//!
//! An application ([`driver::Application`]) asks for objects; a backend of fbdt-harness
//! drives it ([`driver::Drive`]: the simulator in driver.rs, the testbed in emu.rs) and
//! returns the object timeline every metric (metrics.rs) is computed from.

pub mod app;
pub mod browser;
pub mod dash;
pub mod dash_browser;
pub mod driver;
mod emu;
pub mod file;
mod h2;
mod metrics;
pub mod progressive;
pub mod rrul;
mod radio;
mod setup;
pub mod vr;
pub mod web;

use anyhow::Result;
use serde::Serialize;

pub use setup::{Browser, Kind, Setup, WorkloadArgs, WorkloadReport};

fn write<R: Serialize>(args: &WorkloadArgs, report: &WorkloadReport<R>) -> Result<()> {
    if let Some(path) = &args.json {
        fbdt_harness::results::write_json(path, report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs the workload and writes its JSON; rrul's report is handed back too, for the figure
/// `--plot` asks fbdt-lab to draw.
pub fn run(args: WorkloadArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<Option<WorkloadReport<rrul::RrulResult>>> {
    rrul::check_plot(&args)?;
    let setup = Setup::new(&args, testbed)?;
    fn emit<R: Serialize>(args: &WorkloadArgs, setup: &Setup, results: Vec<R>) -> Result<()> {
        write(args, &setup.report(args.kind, results))
    }
    match args.kind {
        Kind::File => emit(&args, &setup, file::run(&setup, &args)?),
        Kind::Web => match args.browser {
            Some(b) => emit(&args, &setup, browser::run(&setup, &args, b)?),
            None => emit(&args, &setup, web::run(&setup, &args)?),
        },
        Kind::Progressive => emit(&args, &setup, progressive::run(&setup, &args)?),
        Kind::Vr => emit(&args, &setup, vr::run(&setup, &args)?),
        Kind::Rrul => {
            let report = setup.report(args.kind, rrul::run(&setup, &args)?);
            write(&args, &report)?;
            return Ok(Some(report));
        }
        Kind::Dash => match args.browser {
            Some(b) => emit(&args, &setup, dash_browser::run(&setup, &args, b)?),
            None => emit(&args, &setup, dash::run(&setup, &args)?),
        },
    }?;
    Ok(None)
}
