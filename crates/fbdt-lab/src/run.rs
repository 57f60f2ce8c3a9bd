//! `fbdt-lab run`: schemes × one scenario on a backend → table + results JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant as WallClock;

use anyhow::{bail, Result};
use clap::Args;
use fbdt_scenario::Scenario;
use fbdt_sim::PathModel;
use indicatif::ProgressStyle;

use fbdt_harness::backend::{aggregate, Backend as _, BackendKind};
use fbdt_harness::results::fidelity::RunFidelity;
use fbdt_harness::results::{Meta, RunReport, SchemeResult};
use fbdt_harness::scheme::{self, Encryption};
use fbdt_harness::sim::{check_grain, sim_params, SimBackend, SIM_CONGESTION_CONTROL};
use fbdt_harness::traffic::Traffic;
use fbdt_harness::TestbedLimits;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Built-in scenario name (see `fbdt-lab scenarios`) or a scenario .toml file.
    pub scenario: String,
    #[arg(long, value_enum, default_value_t = BackendKind::Sim)]
    pub backend: BackendKind,
    /// Simulator path model: `pipe` (ideal TCP pipes, fast) or `tcp` (congestion window,
    /// loss recovery, RTO back-off, bottleneck queue; see docs/simulator.md).
    #[arg(long, default_value_t = PathModel::Pipe)]
    pub model: PathModel,
    /// The pipe model's time grain in µs (0: exact, the default): every arrival is handed
    /// over at the next multiple of it, so arrivals within one grain share a step — never
    /// early, less than a grain late, bytes exact. Faster, at the cost of delays up to a
    /// grain longer (docs/simulator.md, "Speed"). Not with `--model tcp`.
    #[arg(long, default_value_t = 0)]
    pub grain: u64,
    /// Comma-separated schemes: fbdt[+budget=MS][+window=auto|paper|64k][+limit=F][+rto=F][+seg=N][+rcvbuf=N],
    /// tcp:<path>, mp:<minrtt|kernel|blest|ecf|rr|redundant|fixed=R|amuse|musher>[+rcvbuf=N]
    /// [+seg=N][+reinject=on|off][+gain=F]; mp:fixed=A..B/S expands to one scheme per R.
    /// Default: fbdt and tcp:<every path>.
    #[arg(long, value_delimiter = ',')]
    pub schemes: Vec<String>,
    /// Seconds to run (default: the scenario's duration).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seed for the scenario's random models and the protocol (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Repetitions with seeds seed, seed+1, …
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Multiply every path rate by this factor (default: 1 in the simulator; on the testbed
    /// the largest this machine emulates faithfully, see docs/testbed.md).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Emulated runs: when a run is unfaithful and the monitors blame the emulator (late or
    /// dropped packets, its CPU saturated), repeat the scenario at scale ÷ 1.5 (up to 3
    /// attempts); a busy host never lowers the scale — the scenario runs once more at the
    /// same scale instead.
    #[arg(long)]
    pub auto_scale: bool,
    /// What the flows are (testbed only): `bulk`, one download for the whole duration, or
    /// `bursts`, paper 003's ten TCP flows in 2-s bursts with 1-s gaps (docs/cotag.md).
    #[arg(long, value_enum, default_value_t = Traffic::Bulk)]
    pub traffic: Traffic,
}

pub fn run(args: RunArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<RunReport> {
    if args.repeat == 0 || args.repeat > 1000 {
        bail!("--repeat must be in 1..=1000");
    }
    let mut scenario = Scenario::load(&args.scenario)?;
    fbdt_harness::set_duration(&mut scenario, args.duration)?;
    let seed = args.seed.unwrap_or(scenario.seed);
    scenario.seed = seed;
    let names: Vec<String> = if args.schemes.is_empty() {
        std::iter::once("fbdt".to_string())
            .chain(scenario.paths.iter().map(|p| format!("tcp:{}", p.name)))
            .collect()
    } else {
        let mut v = Vec::new();
        for s in args.schemes.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            v.extend(scheme::expand(s)?);
        }
        v
    };
    if names.is_empty() {
        bail!("--schemes is empty");
    }
    if args.backend == BackendKind::Emu {
        return run_emu(&args, scenario, &names, seed, testbed);
    }
    if args.traffic != Traffic::Bulk {
        bail!("--traffic bursts needs --backend emu (the simulator runs one bulk flow)");
    }
    let scale = args.scale.unwrap_or(1.0);
    if !(scale.is_finite() && scale > 0.0) {
        bail!("--scale must be > 0, got {scale}");
    }
    let limits = TestbedLimits::from(testbed);
    // Parse every scheme before running any, so a typo fails fast.
    for n in &names {
        scheme::parse_sim_coupled(n, &scenario, seed, &limits)?;
    }
    let first = scenario.schedule(scale)?;
    check_grain(args.model, args.grain)?;
    let params = sim_params(&scenario, args.model, args.grain, &limits);
    let ticks_per_run = (scenario.duration_s / params.sample_interval_s).round() as u64;
    let bar = fbdt_harness::progress::bar(ticks_per_run * names.len() as u64 * u64::from(args.repeat));
    bar.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {percent:>3}% sim-time, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );

    let sim = SimBackend {
        params: params.clone(),
        scale,
        limits,
        bar: bar.clone(),
    };
    let mut results = Vec::new();
    for name in &names {
        bar.set_message(name.clone());
        let started = WallClock::now();
        let mut runs = Vec::new();
        for r in 0..args.repeat {
            let run_seed = seed + u64::from(r);
            runs.push((run_seed, sim.run(&scenario, name, Traffic::Bulk, run_seed)?));
        }
        // The simulator carries no TLS (a `+tls` scheme is refused before this).
        let total = aggregate(name, Encryption::None, runs, started.elapsed().as_secs_f64());
        bar.println(format!(
            "{name}: {:.1} Mbit/s ({:.1}x real time)",
            total.goodput_mbps,
            scenario.duration_s * f64::from(args.repeat) / total.wall_s.max(1e-9)
        ));
        results.push(total);
    }
    bar.finish_and_clear();

    let mut meta = Meta::here();
    meta.sim = Some(BTreeMap::from([
        ("backlog_bytes".to_string(), params.link.backlog_bytes as f64),
        ("max_window_bytes".to_string(), params.link.max_window_bytes as f64),
        ("mss".to_string(), params.link.mss as f64),
        ("sample_interval_s".to_string(), params.sample_interval_s),
        ("grain_us".to_string(), params.link.grain_us as f64),
    ]));
    let capacity_mbps = first.capacity_mbps();
    publish(
        &args,
        scenario,
        BackendKind::Sim,
        seed,
        scale,
        capacity_mbps,
        results,
        meta,
        None,
    )
}

fn run_emu(
    args: &RunArgs,
    scenario: Scenario,
    names: &[String],
    seed: u64,
    testbed: &fbdt_emu::TestbedOptions,
) -> Result<RunReport> {
    let bar = fbdt_harness::progress::bar(
        (scenario.duration_s / 0.1).round() as u64 * names.len() as u64 * u64::from(args.repeat),
    );
    bar.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {percent:>3}%, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let choice = fbdt_harness::emu::ScaleChoice {
        given: args.scale,
        auto: args.auto_scale,
    };
    let emu = fbdt_harness::emu::run(&scenario, names, choice, args.repeat, args.traffic, testbed, &bar)?;
    bar.finish_and_clear();
    publish(
        args,
        scenario,
        BackendKind::Emu,
        seed,
        emu.scale,
        emu.capacity_mbps,
        emu.results,
        Meta::here(),
        Some(emu.fidelity),
    )
}

/// Assembles the report (the one place for either backend), prints its table and writes
/// the JSON if asked.
#[allow(clippy::too_many_arguments)]
fn publish(
    args: &RunArgs,
    scenario: Scenario,
    backend: BackendKind,
    seed: u64,
    scale: f64,
    capacity_mbps: f64,
    results: Vec<SchemeResult>,
    meta: Meta,
    fidelity: Option<RunFidelity>,
) -> Result<RunReport> {
    let (backend, congestion_control) = match backend {
        BackendKind::Sim if args.model == PathModel::Tcp => {
            ("sim", format!("{} (tcp model)", scenario.congestion_control))
        }
        BackendKind::Sim => ("sim", SIM_CONGESTION_CONTROL.to_string()),
        BackendKind::Emu => ("emu", scenario.congestion_control.clone()),
    };
    let report = RunReport {
        scenario: scenario.name.clone(),
        backend: backend.into(),
        duration_s: scenario.duration_s,
        seed,
        scale,
        congestion_control,
        encryption: fbdt_harness::results::run_encryption(&results),
        capacity_mbps,
        sum_standalone_mbps: sum_standalone(&scenario, &results),
        results,
        meta,
        scenario_def: scenario,
        fidelity,
    };
    print_table(&report);
    for line in report.fidelity.iter().flat_map(|f| f.describe()) {
        println!("{line}");
    }
    if let Some(path) = &args.json {
        fbdt_harness::results::write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(report)
}

/// Σ of the `tcp:<path>` goodputs when every path was run alone.
fn sum_standalone(scenario: &Scenario, results: &[SchemeResult]) -> Option<f64> {
    let tcp: Vec<f64> = scenario
        .paths
        .iter()
        .filter_map(|p| {
            results
                .iter()
                .find(|r| r.scheme == format!("tcp:{}", p.name))
                .map(|r| r.goodput_mbps)
        })
        .collect();
    (tcp.len() == scenario.paths.len()).then(|| tcp.iter().sum())
}

fn print_table(r: &RunReport) {
    println!(
        "scenario {} ({} backend, {:.1} s, seed {}, scale {}{}{}, {}): capacity {:.1} Mbit/s{}",
        r.scenario,
        r.backend,
        r.duration_s,
        r.seed,
        r.scale,
        r.meta
            .sim
            .as_ref()
            .and_then(|m| m.get("grain_us"))
            .filter(|&&g| g > 0.0)
            .map_or(String::new(), |g| format!(", grain {g} µs")),
        r.fidelity.as_ref().map_or(String::new(), |f| {
            let units = f
                .gso_unit_airtime_us
                .map_or(String::new(), |us| format!(", GSO units ≤ {us} µs"));
            format!(" {}{units}", f.scale_source)
        }),
        r.congestion_control,
        r.capacity_mbps,
        r.sum_standalone_mbps
            .map_or(String::new(), |s| format!(", Σ standalone {s:.1} Mbit/s"))
    );
    println!(
        "{:<26} {:>9} {:>5} {:>5} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8}  per-path MB",
        "scheme", "Mbit/s", "CPU", "stack", "p10", "p50", "p90", "redund", "/Σtcp", "/cap", "sd100ms", "dly p50", "dly p99"
    );
    for s in &r.results {
        let ratio = |d: Option<f64>| {
            d.filter(|d| *d > 0.0)
                .map_or("-".to_string(), |d| format!("{:.3}", s.goodput_mbps / d))
        };
        let paths: Vec<String> = s
            .per_path_bytes
            .iter()
            .map(|(k, v)| format!("{k}={:.0}", *v as f64 / 1e6))
            .collect();
        let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}ms"));
        let delay = s.delivery_delay_ms.as_ref();
        println!(
            "{:<26} {:>9.1} {:>5} {:>5} {:>8.1} {:>8.1} {:>8.1} {:>6.2}% {:>7} {:>7} {:>7} {:>8} {:>8}  {}",
            if s.faithful == Some(false) {
                format!("{} (UNFAITHFUL)", s.scheme)
            } else {
                s.scheme.clone()
            },
            s.goodput_mbps,
            s.endpoint_cpu_cores.map_or("-".to_string(), |c| format!("{c:.2}")),
            s.stack_cpu_cores.map_or("-".to_string(), |c| format!("{c:.2}")),
            s.goodput_p10_mbps,
            s.goodput_p50_mbps,
            s.goodput_p90_mbps,
            s.redundant_bytes as f64 * 100.0 / s.bytes_delivered.max(1) as f64,
            ratio(r.sum_standalone_mbps),
            ratio(Some(r.capacity_mbps)),
            s.sd_100ms_mbps().map_or("-".to_string(), |v| format!("{v:.1}")),
            ms(delay.map(|d| d.p50)),
            ms(delay.map(|d| d.p99)),
            paths.join(" ")
        );
    }
    print_bursts(r);
    print_cotag(r);
    print_bottleneck(r);
}

/// A shared bottleneck: what each flow took across it and how fairly (docs/results.md).
fn print_bottleneck(r: &RunReport) {
    if r.results.iter().all(|s| s.bottleneck.is_none()) {
        return;
    }
    println!(
        "shared bottleneck: {:<15} {:>9} {:>7} {:>9} {:>6}  {:<16} competing flows Mbit/s",
        "", "scheme", "share", "÷ tcp", "Jain", "÷ tcp per run"
    );
    for s in &r.results {
        let Some(b) = &s.bottleneck else { continue };
        let Some(scheme) = b.flows.first() else { continue };
        let per_run: Vec<String> = s
            .runs
            .iter()
            .filter_map(|run| run.bottleneck_scheme_to_tcp)
            .map(|x| format!("{x:.2}"))
            .collect();
        println!(
            "{:<34} {:>9.1} {:>6.1}% {:>9} {:>6.3}  {:<16} {}",
            s.scheme,
            scheme.mbps,
            scheme.bottleneck_share * 100.0,
            b.scheme_to_tcp.map_or("-".into(), |x| format!("{x:.2}")),
            b.jain_index,
            if per_run.is_empty() { "-".into() } else { per_run.join(" ") },
            b.flows[1..]
                .iter()
                .map(|f| format!("{}={:.1}", f.flow, f.mbps))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
}

/// `--traffic bursts`: one line per scheme with the burst metrics.
fn print_bursts(r: &RunReport) {
    let Some(plan) = r.results.iter().find_map(|s| s.bursts.as_ref()) else {
        return;
    };
    println!(
        "bursts: {} flows, {} s on / {} s off; volume {:.1} MB (5 Gbit x scale)",
        plan.flows,
        plan.burst_s,
        plan.gap_s,
        plan.volume_bytes as f64 / 1e6
    );
    println!(
        "{:<26} {:>9} {:>9}  {:<24} {:>8} {:>9} {:>7}  per-burst Mbit/s",
        "scheme", "burst", "t(vol) s", "link utilisation", "retrans", "overhead", "failed"
    );
    for s in &r.results {
        let Some(b) = &s.bursts else { continue };
        let util: Vec<String> = b
            .link_utilisation
            .iter()
            .map(|(k, v)| format!("{k}={:.0}%", v * 100.0))
            .collect();
        let c = s.cotag.as_ref();
        println!(
            "{:<26} {:>9.1} {:>9} {:<24} {:>8} {:>9} {:>7}  {}{}",
            s.scheme,
            b.burst_mean_mbps,
            b.time_to_volume_mean_s().map_or("-".into(), |t| format!("{t:.2}")),
            util.join(" "),
            b.tcp_retransmissions.map_or("-".into(), |n| n.to_string()),
            c.and_then(|c| c.coding_overhead)
                .map_or("-".into(), |o| format!("{:.1}%", o * 100.0)),
            c.filter(|c| c.period_ms.is_some())
                .map_or("-".into(), |c| c.cohorts_failed.to_string()),
            b.burst_mbps
                .iter()
                .map(|m| format!("{m:.0}"))
                .collect::<Vec<_>>()
                .join(" "),
            if b.flows_intact { "" } else { "  (a flow ended short)" }
        );
    }
}

/// COTAG / dual-rr: what one bulk flow's sender saw, and why cohorts failed (either traffic).
fn print_cotag(r: &RunReport) {
    // What one bulk flow's sender saw through COTAG / dual-rr (docs/cotag.md, "One bulk flow").
    for s in &r.results {
        for t in s.cotag.iter().flat_map(|c| &c.traces) {
            println!(
                "{:<26} tcp: rtt p10/p50/p90/max {:.1}/{:.1}/{:.1}/{:.1} ms, cwnd p50 {:.0}, recoveries {}, timeouts {}, reordering ≤ {}{}",
                s.scheme,
                t.rtt_ms[0],
                t.rtt_ms[1],
                t.rtt_ms[2],
                t.rtt_ms[3],
                t.cwnd_p50,
                t.recoveries,
                t.timeouts,
                t.max_reordering,
                t.gateway_queue
                    .map_or(String::new(), |[p50, max]| format!(", gateway queue p50/max {p50}/{max} packets"))
            );
        }
    }
    // Why COTAG's cohorts failed (docs/cotag.md, "Why cohorts fail").
    for s in &r.results {
        let Some(f) = s.cotag.as_ref().and_then(|c| c.failures.as_ref()) else {
            continue;
        };
        let causes: Vec<String> = f
            .by_cause
            .iter()
            .map(|(c, n)| {
                format!(
                    "{}={n}",
                    serde_json::to_value(c)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                )
            })
            .collect();
        println!(
            "{:<26} failed cohorts {}: {}; ranks missing {} (Highs short per link {} / {})",
            s.scheme,
            f.cohorts_failed,
            if causes.is_empty() {
                "-".into()
            } else {
                causes.join(" ")
            },
            f.missing_rank,
            f.missing_by_link[0],
            f.missing_by_link[1]
        );
    }
    // What the client's TCP received per write, and what it sent back.
    for s in &r.results {
        let Some(c) = s.cotag.as_ref().filter(|c| c.tun_packets_delivered > 0) else {
            continue;
        };
        let writes = c.tun_packets_delivered - c.tun_merged_segments + c.tun_merged_writes;
        println!(
            "{:<26} client: {} packets in {} writes ({:.1} per write), {} uplink packets ({:.2} per packet delivered)",
            s.scheme,
            c.tun_packets_delivered,
            writes,
            c.tun_packets_delivered as f64 / writes.max(1) as f64,
            c.uplink_packets,
            c.uplink_packets as f64 / c.tun_packets_delivered as f64
        );
    }
}
