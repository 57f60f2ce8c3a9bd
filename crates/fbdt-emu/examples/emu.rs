//! `cargo run --release -p fbdt-emu --example emu -- calibrate los --json /tmp/c.json`
//! `cargo run --release -p fbdt-emu --example emu -- clean`

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "fbdt-emu testbed commands (the same ones fbdt-lab mounts)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Each path alone: configured rate vs one TCP's goodput, and the RTT.
    Calibrate(fbdt_emu::CalibrateArgs),
    /// Remove namespaces left by crashed runs.
    Clean(fbdt_emu::CleanArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().cmd {
        Cmd::Calibrate(a) => fbdt_emu::run_calibrate(a),
        Cmd::Clean(a) => fbdt_emu::run_clean(a),
    }
}
