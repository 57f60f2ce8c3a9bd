//! `fbdt-lab`: run FBDT and its baselines over the papers' scenarios.

mod bench;
mod calibrate;
mod campaign;
mod faults;
mod paper;
mod run;
mod slurm;
mod stored;
mod sweep;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use stored::testbed_options;

#[derive(Parser, Debug)]
#[command(name = "fbdt-lab", version, about = "Run FBDT and its baselines over the papers' multi-radio scenarios", long_about = None,
    after_help = "Examples:\n  fbdt-lab scenarios\n  sudo fbdt-lab paper --quick\n  fbdt-lab run mobility --schemes fbdt,tcp:wifi,tcp:wigig --json mobility.json\n  fbdt-lab run blockage --schemes fbdt+rto=0,fbdt+rto=1,fbdt+window=paper --duration 10\n  fbdt-lab run my-scenario.toml --repeat 3\n  sudo fbdt-lab calibrate los --json calibration.json\n  fbdt-lab jpoc fairness --json fairness.json --plot fairness.png")]
struct Cli {
    /// Emulated testbed (direct datapath): the endpoints' TSO super-packets pass the emulator
    /// whole, each at most US µs on its path at the path's peak rate (default 250) — several
    /// times the rate ceiling of one MTU packet per frame, at that time grain; queue, loss and
    /// lateness stay per packet (docs/testbed.md, limits). 0: one MTU packet per frame.
    #[arg(long, global = true, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=100_000))]
    gso_units: Option<u32>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run schemes over one scenario and report goodput (table + JSON).
    Run(run::RunArgs),
    /// The paper's throughput suite: every scenario and scheme, summary.json, plots, report.html.
    Paper(paper::PaperArgs),
    /// List the built-in scenarios.
    Scenarios,
    /// Emulated testbed: find the largest scale this host emulates faithfully (cached for
    /// later runs), then each path alone and all together, configured vs measured (root).
    Calibrate(calibrate::CalibrateArgs),
    /// Fault campaign: seeded cuts, resets, blockages, one-way outages and flaps on every
    /// path; longest delivery gap, reuse after return, bytes lost, survival (docs/faults.md).
    Faults(faults::FaultsArgs),
    /// Remove network namespaces left behind by a crashed testbed run.
    Clean(calibrate::CleanArgs),
    /// Schemes × the values of one parameter in the simulator, in parallel (--jobs).
    Sweep(sweep::SweepArgs),
    /// Simulator (TCP-level model) vs a testbed suite: FBDT/Σ, FBDT/MPTCP and the order of schemes, scenario by scenario.
    Agree(fbdt_harness::agree::AgreeArgs),
    /// Benchmarks: the simulator's speed, the emulator's faithful rate ceiling.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// JPOC: fair mmWave initial access vs 802.11ad A-BFT (thesis ch. 3).
    #[command(subcommand)]
    Jpoc(jpoc::cli::JpocCommand),
    /// What applications feel: files, web pages, progressive and 360° video (docs/workloads.md).
    Workload(fbdt_workload::WorkloadArgs),
    /// A real application (curl) through `fbdt proxy`/`fbdt serve` over the emulated radios,
    /// beside each radio alone: goodput, content hash, longest delivery gap (root).
    App(fbdt_workload::app::AppArgs),
    /// Campaign: write every case of `paper`, `sweep` or `faults` into DIR/manifest.json,
    /// each with its command line and a content hash (docs/campaigns.md).
    Plan(campaign::PlanArgs),
    /// Campaign: run cases of DIR (skipping those done), one JSON each, stamped with the host
    /// and the fidelity verdict.
    Case(campaign::CaseArgs),
    /// Campaign: the one-process command's report from DIR's case results; missing and
    /// unfaithful cases listed (non-zero exit when any is missing).
    Merge(campaign::MergeArgs),
    /// Campaign on a Slurm cluster: submit DIR's cases as a job array plus a merge job, or
    /// show their progress.
    #[command(subcommand)]
    Slurm(slurm::SlurmCommand),
    /// Internal: run a program as a child subreaper so that the CPU time of everything it
    /// leaves behind counts as this run's (fbdt_emu::reaper).
    #[command(name = "__reap", hide = true)]
    Reap {
        program: std::ffi::OsString,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

fn main() {
    // The testbed runs FBDT's ends in this process: with the `fbdt` binary's allocator
    // settings, so their CPU is the product's, not page faults of the lab's own making.
    fbdt_net::keep_freed_memory();
    // fbdt-net reports path events (stalls, re-joins, lost connections) through `tracing`;
    // RUST_LOG=fbdt_net=debug shows them during an emulated run. Off by default: a timed run
    // ends its FBDT sessions at the deadline with data still queued, which the library
    // rightly reports as lost connections.
    if let Ok(filter) = tracing_subscriber::EnvFilter::try_from_default_env() {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            // A failed write would be reported with a panicking `eprintln!` (see `fbdt`).
            .log_internal_errors(false)
            .init();
    }
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The testbed options of every emulated run of a command: the defaults, with what the
/// command line changed (`--gso-units`); passed to whatever builds a testbed or must match
/// its limits.
fn real_main() -> Result<()> {
    let cli = Cli::parse();
    let testbed = testbed_options(cli.gso_units);
    match cli.command {
        Command::Run(args) => run::run(args, &testbed).map(|_| ()),
        Command::Paper(args) => campaign::local::paper(args, cli.gso_units),
        Command::Scenarios => scenarios(),
        Command::Calibrate(args) => calibrate::run_calibrate(args, &testbed),
        Command::Faults(args) => faults::run(args, &testbed),
        Command::Plan(args) => campaign::plan(args, cli.gso_units),
        Command::Case(args) => campaign::case(args),
        Command::Merge(args) => campaign::merge(args),
        Command::Slurm(cmd) => slurm::run(cmd),
        Command::Clean(args) => calibrate::run_clean(args),
        Command::Bench(cmd) => bench::run(cmd, &testbed),
        Command::Sweep(args) => sweep::run(args, &testbed),
        Command::Agree(args) => fbdt_harness::agree::run(args, &testbed),
        Command::Jpoc(cmd) => jpoc::cli::run(cmd, fbdt_harness::progress::bar),
        Command::Workload(args) => workload(args, &testbed),
        Command::App(args) => fbdt_workload::app::run(args, &testbed),
        Command::Reap { program, args } => {
            let code = fbdt_emu::reaper::run_reaping(&program, &args)
                .map_err(|e| anyhow::anyhow!("running {}: {e}", program.to_string_lossy()))?;
            std::process::exit(code)
        }
    }
}

/// `workload`, and rrul's `--plot` (the font is looked for before the runs, not after).
fn workload(args: fbdt_workload::WorkloadArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<()> {
    let plot = args.plot.clone();
    if plot.is_some() {
        fbdt_workload::rrul::check_plot(&args)?;
        fbdt_font::ensure()?;
    }
    let report = fbdt_workload::run(args, testbed)?;
    let (Some(path), Some(report)) = (plot, report) else {
        return Ok(());
    };
    let verdict = match report.faithful {
        Some(true) => "faithful",
        Some(false) => "UNFAITHFUL",
        None => "",
    };
    let fig = paper::plot::Rrul {
        title: format!(
            "rrul · {} · scale {} · {} seed(s) · {verdict}",
            report.scenario,
            paper::text::short(report.scale),
            report.seeds.len()
        ),
        results: &report.results,
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let stem = path.file_stem().and_then(|s| s.to_str()).context("--plot: a file name")?;
    paper::plot::save(dir, stem, &fig)?;
    eprintln!("wrote {} and {stem}.svg", path.display());
    Ok(())
}

fn scenarios() -> Result<()> {
    println!("{:<16} {:>6} {:>10}  description", "name", "paths", "capacity");
    for name in fbdt_scenario::builtin_names() {
        let s = fbdt_scenario::Scenario::load(name)?;
        let cap = s.schedule(1.0)?.capacity_mbps();
        let paths: Vec<&str> = s.paths.iter().map(|p| p.name.as_str()).collect();
        let desc = s.description.lines().next().unwrap_or("");
        println!(
            "{:<16} {:>6} {:>9.0}M  {} [{}]",
            name,
            paths.len(),
            cap,
            desc,
            paths.join(",")
        );
    }
    Ok(())
}
