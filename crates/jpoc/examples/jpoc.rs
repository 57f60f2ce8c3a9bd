//! Stand-alone driver for the `jpoc` commands (the lab mounts the same enum as
//! `fbdt-lab jpoc <cmd>`), e.g.
//! `cargo run --release -p jpoc --example jpoc -- fairness --json /tmp/f.json --plot /tmp/f.png`.

use clap::Parser;
use jpoc::cli::{run, JpocCommand};

/// JPOC vs 802.11ad initial-access simulator.
#[derive(Parser)]
#[command(name = "jpoc", version)]
struct Cli {
    #[command(subcommand)]
    cmd: JpocCommand,
}

fn main() -> anyhow::Result<()> {
    run(Cli::parse().cmd)
}
