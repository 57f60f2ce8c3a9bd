//! `fbdt-lab run`: schemes × one scenario on a backend → table + results JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant as WallClock;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use fbdt_scenario::Scenario;
use fbdt_sim::{PathModel, SimParams};
use indicatif::ProgressStyle;

use fbdt_harness::results::fidelity::RunFidelity;
use fbdt_harness::results::{percentile, Counters, DelayPool, Meta, RunReport, RunSummary, Sample, SchemeResult};
use fbdt_harness::scheme;
use fbdt_harness::sim::{check_grain, sim_params, SIM_CONGESTION_CONTROL};
use fbdt_harness::traffic::Traffic;
use fbdt_harness::TestbedLimits;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Deterministic simulator driving the protocol core over modelled paths.
    Sim,
    /// Emulated radios in network namespaces (real TCP stacks).
    Emu,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Built-in scenario name (see `fbdt-lab scenarios`) or a scenario .toml file.
    pub scenario: String,
    #[arg(long, value_enum, default_value_t = Backend::Sim)]
    pub backend: Backend,
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
    /// Emulated runs: when a run is unfaithful (the emulator ran out of CPU), repeat the
    /// scenario at a lower scale (up to 3 attempts).
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
    crate::run::set_duration(&mut scenario, args.duration)?;
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
    if args.backend == Backend::Emu {
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
        scheme::parse_sim(n, &scenario, seed, &limits)?;
    }
    let first = scenario.schedule(scale)?;
    check_grain(args.model, args.grain)?;
    let params = sim_params(&scenario, args.model, args.grain, &limits);
    let ticks_per_run = (scenario.duration_s / params.sample_interval_s).round() as u64;
    let bar = crate::progress::bar(ticks_per_run * names.len() as u64 * u64::from(args.repeat));
    bar.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {percent:>3}% sim-time, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );

    let mut results = Vec::new();
    for name in &names {
        bar.set_message(name.clone());
        let started = WallClock::now();
        let mut runs = Vec::new();
        let mut seconds = Vec::new();
        let mut series: Vec<Sample> = Vec::new();
        let mut total = SchemeResult {
            scheme: name.clone(),
            // The simulator carries no TLS (a `+tls` scheme is refused before this).
            encryption: "none".into(),
            ..SchemeResult::default()
        };
        let mut delays = DelayPool::default();
        let is_mp = name.starts_with("mp:");
        for r in 0..args.repeat {
            let run_seed = seed + u64::from(r);
            let mut sc = scenario.clone();
            sc.seed = run_seed;
            let schedule = if r == 0 { first.clone() } else { sc.schedule(scale)? };
            let params = SimParams {
                seed: run_seed,
                ..params.clone()
            };
            let sim_scheme = scheme::parse_sim(name, &sc, run_seed, &limits)?;
            let base = bar.position();
            let out = fbdt_sim::run(&schedule, &sim_scheme, &params, |t| {
                bar.set_position(base + (t / params.sample_interval_s).round() as u64)
            })
            .with_context(|| format!("scheme {name}, seed {run_seed}"))?;
            bar.set_position(base + ticks_per_run);
            if r == 0 {
                series = out.series.iter().map(|&(t, mbps)| Sample { t, mbps }).collect();
            }
            seconds.extend_from_slice(&out.per_second_mbps);
            delays.add(&out.delay);
            runs.push(RunSummary {
                seed: run_seed,
                goodput_mbps: out.goodput_mbps,
                redundant_bytes: out.redundant_bytes,
            });
            total.bytes_delivered += out.bytes_delivered;
            total.redundant_bytes += out.redundant_bytes;
            for (p, b) in schedule.paths.iter().zip(&out.per_path_bytes) {
                *total.per_path_bytes.entry(p.name.clone()).or_default() += b;
            }
            for (p, c) in schedule.paths.iter().zip(&out.per_path_tcp) {
                let t = total
                    .tcp_per_path
                    .get_or_insert_with(BTreeMap::new)
                    .entry(p.name.clone())
                    .or_default();
                t.loss_events += c.loss_events;
                t.timeouts += c.timeouts;
            }
            if let (true, Some(s), Some(c)) = (is_mp, &out.server, &out.client) {
                let m = total.recv_buffer_max_bytes.get_or_insert(0);
                *m = (*m).max(c.receiver.max_buffered_bytes);
                *total.reinjected_bytes.get_or_insert(0) += s.sender.redundant_bytes_sent;
            }
            if let (Some(s), Some(c)) = (&out.server, &out.client) {
                total
                    .counters
                    .get_or_insert_with(Counters::default)
                    .add(&s.sender, &c.receiver);
            }
        }
        total.goodput_mbps = runs.iter().map(|r| r.goodput_mbps).sum::<f64>() / runs.len() as f64;
        total.goodput_p10_mbps = percentile(&seconds, 0.1);
        total.goodput_p50_mbps = percentile(&seconds, 0.5);
        total.goodput_p90_mbps = percentile(&seconds, 0.9);
        total.series_100ms_mbps = series.iter().map(|s| s.mbps).collect();
        total.series = series;
        total.delivery_delay_ms = delays.summary();
        total.runs = if args.repeat > 1 { runs } else { Vec::new() };
        total.wall_s = started.elapsed().as_secs_f64();
        bar.println(format!(
            "{name}: {:.1} Mbit/s ({:.1}x real time)",
            total.goodput_mbps,
            scenario.duration_s * f64::from(args.repeat) / total.wall_s.max(1e-9)
        ));
        total.fill_ack_rate();
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
        Backend::Sim,
        seed,
        scale,
        capacity_mbps,
        results,
        meta,
        None,
    )
}

/// Overrides the scenario's duration (`--duration`), checked.
pub fn set_duration(scenario: &mut Scenario, duration: Option<f64>) -> Result<()> {
    if let Some(d) = duration {
        if !(d.is_finite() && d > 0.0 && d <= 86_400.0) {
            bail!("--duration must be in (0, 86400] seconds, got {d}");
        }
        scenario.duration_s = d;
    }
    Ok(())
}

fn run_emu(
    args: &RunArgs,
    scenario: Scenario,
    names: &[String],
    seed: u64,
    testbed: &fbdt_emu::TestbedOptions,
) -> Result<RunReport> {
    let bar =
        crate::progress::bar((scenario.duration_s / 0.1).round() as u64 * names.len() as u64 * u64::from(args.repeat));
    bar.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {percent:>3}%, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let choice = crate::emu::ScaleChoice {
        given: args.scale,
        auto: args.auto_scale,
    };
    let emu = crate::emu::run(&scenario, names, choice, args.repeat, args.traffic, testbed, &bar)?;
    bar.finish_and_clear();
    publish(
        args,
        scenario,
        Backend::Emu,
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
    backend: Backend,
    seed: u64,
    scale: f64,
    capacity_mbps: f64,
    results: Vec<SchemeResult>,
    meta: Meta,
    fidelity: Option<RunFidelity>,
) -> Result<RunReport> {
    let (backend, congestion_control) = match backend {
        Backend::Sim if args.model == PathModel::Tcp => ("sim", format!("{} (tcp model)", scenario.congestion_control)),
        Backend::Sim => ("sim", SIM_CONGESTION_CONTROL.to_string()),
        Backend::Emu => ("emu", scenario.congestion_control.clone()),
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
        write_json(path, &report)?;
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

pub fn write_json(path: &std::path::Path, value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
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
        "{:<26} {:>9} {:>5} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8}  per-path MB",
        "scheme", "Mbit/s", "CPU", "p10", "p50", "p90", "redund", "/Σtcp", "/cap", "sd100ms", "dly p50", "dly p99"
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
            "{:<26} {:>9.1} {:>5} {:>8.1} {:>8.1} {:>8.1} {:>6.2}% {:>7} {:>7} {:>7} {:>8} {:>8}  {}",
            if s.faithful == Some(false) {
                format!("{} (UNFAITHFUL)", s.scheme)
            } else {
                s.scheme.clone()
            },
            s.goodput_mbps,
            s.endpoint_cpu_cores.map_or("-".to_string(), |c| format!("{c:.2}")),
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
}
