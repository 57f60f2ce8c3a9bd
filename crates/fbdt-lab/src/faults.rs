//! `fbdt-lab faults`: the fault campaign (fbdt_harness::faults, docs/faults.md) — this file
//! only reads the command line, runs it and prints the summary.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use fbdt_harness::faults::{EmuCampaign, FaultKind, Report, SimCampaign, Summary};
use fbdt_harness::BackendKind;
use fbdt_scenario::Scenario;
use fbdt_sim::PathModel;

#[derive(Args, Debug)]
pub struct FaultsArgs {
    /// Built-in scenario name or a scenario .toml file (at least two paths).
    pub scenario: String,
    /// Fault plans; each runs once per scheme.
    #[arg(long, default_value_t = 100)]
    pub runs: u64,
    /// sim: the simulator, runs in parallel; emu: the testbed (root), one run at a time on
    /// a fresh testbed, with the fidelity monitors' verdict per run (docs/faults.md).
    #[arg(long, value_enum, default_value = "sim")]
    pub backend: BackendKind,
    /// Comma-separated schemes (as in `fbdt-lab run`); default fbdt, mp:minrtt (sim) or
    /// kernel mptcp (emu), and single TCP on the first path.
    #[arg(long, value_delimiter = ',')]
    pub schemes: Vec<String>,
    /// Comma-separated fault kinds; default all: cut, blackhole, reset, blockage, uplink,
    /// downlink, flap.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub kinds: Vec<FaultKind>,
    /// The first plan's index: runs plans first..first+runs, each as it is in the whole
    /// campaign (how `fbdt-lab plan faults` splits a campaign into cases).
    #[arg(long, default_value_t = 0)]
    pub first: u64,
    /// Campaign seed: plan i and its run use seed + i.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated seconds per run (at least 5: warm-up, faults up to 2 s, 1.5 s after).
    #[arg(long, default_value_t = 6.0)]
    pub duration: f64,
    /// Factor on every path rate and, under `--model tcp`, every bottleneck queue (small
    /// keeps a run cheap; gaps are set by delays, queueing delays and timers, which the
    /// scaled queues keep as they are at full rate).
    #[arg(long, default_value_t = 0.05)]
    pub scale: f64,
    /// Simulator path model; `tcp` has retransmission timers that back off in an outage.
    /// (The testbed runs the real stacks.)
    #[arg(long, default_value = "tcp")]
    pub model: PathModel,
    /// Simulator threads (default: one per CPU); the testbed runs one run at a time.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Write the campaign JSON here (runs[] and summary per scheme).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the CDF of the longest gap per scheme, with the bound, into
    /// DIR/faults-gap-cdf.png and .svg (DIR is created).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
}

pub fn run(args: FaultsArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<()> {
    let report = report(&args, testbed)?;
    finish(&report, args.json.as_deref(), args.plot.as_deref())
}

/// The campaign's scenario (with `--duration`) and schemes, checked.
pub fn setup(args: &FaultsArgs, limits: &fbdt_harness::TestbedLimits) -> Result<(Scenario, Vec<String>, Vec<FaultKind>)> {
    if !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 10.0) {
        bail!("--scale must be in (0, 10], got {}", args.scale);
    }
    if args.runs > 1_000_000 || args.first > 1_000_000 {
        bail!("--runs and --first must be at most 1 000 000, got {} and {}", args.runs, args.first);
    }
    let mut scenario = Scenario::load(&args.scenario)?;
    fbdt_harness::set_duration(&mut scenario, Some(args.duration))?;
    let emu = args.backend == BackendKind::Emu;
    let schemes = if args.schemes.is_empty() {
        let first = &scenario.paths[0].name;
        let mp = if emu { "mptcp" } else { "mp:minrtt" };
        vec!["fbdt".to_string(), mp.to_string(), format!("tcp:{first}")]
    } else {
        args.schemes.clone()
    };
    for s in &schemes {
        if emu {
            use fbdt_harness::emu::transport::{transport, Transport};
            if let Transport::CotagLink(_) = transport(s, &scenario).with_context(|| format!("scheme `{s}`"))? {
                bail!("scheme `{s}`: the testbed fault campaign runs fbdt, mp:*, mptcp and tcp:PATH");
            }
        } else {
            fbdt_harness::scheme::parse_sim(s, &scenario, scenario.seed, limits)
                .with_context(|| format!("scheme `{s}`"))?;
        }
    }
    let kinds = if args.kinds.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        args.kinds.clone()
    };
    Ok((scenario, schemes, kinds))
}

/// Runs the campaign (plans `--first` … on `--jobs` threads) and summarises it.
pub fn report(args: &FaultsArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<Report> {
    let limits = fbdt_harness::TestbedLimits::from(testbed);
    let (scenario, schemes, kinds) = setup(args, &limits)?;
    let bar = fbdt_harness::progress::bar(0).with_style(
        indicatif::ProgressStyle::with_template("faults [{bar:30}] {pos}/{len} runs, ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let (runs, backend, model) = if args.backend == BackendKind::Emu {
        let campaign = EmuCampaign {
            scenario: &scenario,
            scale: args.scale,
            testbed: testbed.clone(),
            schemes,
            kinds: kinds.clone(),
            runs: args.runs,
            first: args.first,
            seed: args.seed,
        };
        (campaign.run(&bar)?, "emu", "real stacks".to_string())
    } else {
        let campaign = SimCampaign {
            scenario: &scenario,
            scale: args.scale,
            params: fbdt_harness::faults::sim_params(&scenario, args.model, args.scale, &limits),
            limits,
            schemes,
            kinds: kinds.clone(),
            runs: args.runs,
            first: args.first,
            seed: args.seed,
            jobs: fbdt_harness::parallel::jobs(args.jobs)?,
        };
        (campaign.run(&bar)?, "sim", args.model.to_string())
    };
    bar.finish_and_clear();
    let mut report = Report {
        scenario: scenario.name.clone(),
        backend: backend.into(),
        model,
        scale: args.scale,
        duration_s: scenario.duration_s,
        seed: args.seed,
        kinds,
        runs,
        summary: Default::default(),
        groups: Default::default(),
    };
    report.summarise();
    Ok(report)
}

/// Prints the summary and writes the JSON and the figure (into `plot`) if asked (the
/// one-process run and the merge of a campaign alike).
pub fn finish(report: &Report, json: Option<&std::path::Path>, plot: Option<&std::path::Path>) -> Result<()> {
    print_report(report);
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(dir) = plot {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        crate::paper::plot::save(dir, "faults-gap-cdf", &gap_cdf(report))?;
    }
    Ok(())
}

/// The campaign's figure: per scheme (in the order given), the sorted longest gaps; the
/// bound drawn is the largest of the runs' (one value on a scenario whose best surviving
/// path is under 25 ms, as every built-in).
fn gap_cdf(r: &Report) -> crate::paper::plot::GapCdf {
    let mut curves: Vec<(String, Vec<f64>)> = Vec::new();
    for run in &r.runs {
        match curves.iter_mut().find(|c| c.0 == run.scheme) {
            Some(c) => c.1.push(run.max_gap_ms as f64),
            None => curves.push((run.scheme.clone(), vec![run.max_gap_ms as f64])),
        }
    }
    for c in &mut curves {
        c.1.sort_by(f64::total_cmp);
    }
    let bound_ms = r.runs.iter().map(|x| x.bound_ms).fold(fbdt_harness::faults::BOUND_FLOOR_MS, f64::max);
    let runs = curves.first().map_or(0, |c| c.1.len());
    crate::paper::plot::GapCdf {
        title: format!("{}: longest gap per run ({} runs per scheme, {}, scale {})", r.scenario, runs, r.backend, r.scale),
        curves,
        bound_ms,
    }
}

fn print_report(r: &Report) {
    println!(
        "faults on {} ({}, model {}, scale {}, {} s per run, seed {})",
        r.scenario, r.backend, r.model, r.scale, r.duration_s, r.seed
    );
    let head = format!(
        "{:<26} {:>5} {:>7} {:>7} {:>7} {:>6} {:>8} {:>6} {:>6} {:>9} {:>9}",
        "scheme / fault@path", "runs", "gap p50", "p99", "max", ">bound", "survived", "lost", "dup", "reuse p50", "reuse max"
    );
    println!("{head}");
    let line = |name: &str, s: &Summary| {
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
        println!(
            "{:<26} {:>5} {:>7} {:>7} {:>7} {:>6} {:>8} {:>6} {:>6} {:>9} {:>9}",
            name,
            s.runs,
            s.p50_max_gap_ms,
            s.p99_max_gap_ms,
            s.max_max_gap_ms,
            s.over_bound,
            s.survived,
            s.bytes_lost,
            s.bytes_duplicated,
            ms(s.p50_reuse_ms),
            ms(s.max_reuse_ms)
        );
    };
    for (scheme, s) in &r.summary {
        line(scheme, s);
        for (group, g) in r.groups.get(scheme).into_iter().flatten() {
            line(&format!("  {group}"), g);
        }
    }
    if r.backend == "emu" {
        for (scheme, s) in &r.summary {
            println!("{scheme}: {} of {} runs UNFAITHFUL (the fidelity monitors; reasons in the JSON)", s.unfaithful, s.runs);
            if let (Some(ends), Some(stack)) = (s.endpoint_cpu_cores, s.stack_cpu_cores) {
                println!("{scheme}: CPU over the faithful runs, mean: ends {ends:.2} cores, stack {stack:.2} cores");
            }
        }
        // One-direction outages: goodput while the fault lasted against what the other
        // paths offered (the issue's ≥ 0.9 × the surviving capacity).
        for x in r.runs.iter().filter(|x| {
            x.plan.first().is_some_and(|f| matches!(f.kind, FaultKind::Uplink | FaultKind::Downlink))
        }) {
            if let (Some(g), Some(c), Some(f)) = (x.fault_goodput_mbps, x.surviving_capacity_mbps, x.plan.first()) {
                println!(
                    "#{} {} {}@{} {:.2} s: {:.1} Mbit/s during it, {:.2} of the other paths' {:.1} Mbit/s",
                    x.run,
                    x.scheme,
                    f.kind.name(),
                    f.path,
                    f.duration_s,
                    g,
                    g / c.max(1e-9),
                    c
                );
            }
        }
    }
}
