//! `fbdt-lab workload file|web|progressive|dash|vr <scenario>`: what applications feel
//! (paper 001 sec. VI-C): file completion times, page loads, progressive 8K video, 360°
//! tiles — every scheme over one scenario, results JSON beside the paper's numbers.
//! docs/workloads.md describes the models.

pub(crate) mod browser;
pub(crate) mod dash;
pub(crate) mod dash_browser;
mod driver;
mod emu;
pub(crate) mod file;
mod h2;
mod metrics;
pub(crate) mod progressive;
mod radio;
mod setup;
pub(crate) mod vr;
pub(crate) mod web;

use anyhow::Result;
use serde::Serialize;

pub use setup::{Browser, Kind, Setup, WorkloadArgs, WorkloadReport};

fn write<R: Serialize>(args: &WorkloadArgs, report: &WorkloadReport<R>) -> Result<()> {
    if let Some(path) = &args.json {
        crate::run::write_json(path, report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

pub fn run(args: WorkloadArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<()> {
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
        Kind::Dash => match args.browser {
            Some(b) => emit(&args, &setup, dash_browser::run(&setup, &args, b)?),
            None => emit(&args, &setup, dash::run(&setup, &args)?),
        },
    }
}
