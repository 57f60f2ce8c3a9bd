//! `fbdt-lab calibrate`, `fbdt-lab bench emu` and `fbdt-lab clean`: the command-line side
//! of fbdt-emu's calibration (the library returns data and typed errors; this prints).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use fbdt_emu::calibrate::{self, ScaleSearch, ScaleSource};
use fbdt_emu::{Datapath, PathPlan, TestbedOptions, TestbedSpec};
use serde::Serialize;

/// `calibrate <scenario> [--json PATH] [--scale X]`
#[derive(Debug, Clone, clap::Args)]
pub struct CalibrateArgs {
    /// Built-in scenario name or path to a scenario TOML file.
    pub scenario: String,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Multiply every rate by this. Default: measure the largest scale this host emulates
    /// faithfully (a bisection over short probes) and cache it for later runs.
    #[arg(long)]
    pub scale: Option<f64>,
    /// Seconds of transfer per path in the report (the search's probes are shorter).
    #[arg(long, default_value_t = 4.0)]
    pub secs: f64,
    /// Tokio worker threads of the emulator.
    #[arg(long, default_value_t = 1)]
    pub emu_threads: usize,
    /// MTU of the emulated links.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// The emulator's datapath: direct (one real-time thread), rattan (rattan-core's cells)
    /// or kernel-rate (HTB on the emulator's veths). Default: the testbed's default (direct).
    #[arg(long)]
    pub datapath: Option<Datapath>,
    /// Leave the endpoints' receive work on whichever CPU writes the frame (no RPS, the
    /// emulator not pinned): the direct datapath as it was before steering.
    #[arg(long)]
    pub no_steer: bool,
    #[command(flatten)]
    pub sockets: SocketArgs,
}

/// The `direct` datapath's socket options under measurement (hidden switches of
/// `calibrate` and `bench emu`; docs/testbed.md, limits).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct SocketArgs {
    /// direct: receive through a TPACKET_V3 ring (PACKET_RX_RING) instead of recvmmsg.
    #[arg(long, hide = true, conflicts_with = "no_ring")]
    pub ring: bool,
    /// direct: receive with recvmmsg even where the ring is the default.
    #[arg(long, hide = true)]
    pub no_ring: bool,
    /// direct: PACKET_QDISC_BYPASS on the emulator's sockets.
    #[arg(long, hide = true)]
    pub qdisc_bypass: bool,
}

impl SocketArgs {
    fn apply(self, o: &mut TestbedOptions) {
        if self.ring {
            o.packet_rx_ring = true;
        }
        if self.no_ring {
            o.packet_rx_ring = false;
        }
        if self.qdisc_bypass {
            o.qdisc_bypass = true;
        }
    }
}

fn options(
    base: &TestbedOptions,
    emu_threads: usize,
    mtu: u32,
    datapath: Option<Datapath>,
    no_steer: bool,
) -> Result<TestbedOptions> {
    if !(1..=64).contains(&emu_threads) {
        bail!("--emu-threads must be in 1..=64, got {emu_threads}");
    }
    if !(576..=65_535).contains(&mtu) {
        bail!("--mtu must be in 576..=65535, got {mtu}");
    }
    let d = base.clone();
    Ok(TestbedOptions {
        emu_threads,
        mtu,
        datapath: datapath.unwrap_or(d.datapath),
        steer_receive: d.steer_receive && !no_steer,
        ..d
    })
}

/// Runs `calibrate`: progress on stderr, a table on stdout, JSON to `--json`.
pub fn run_calibrate(args: CalibrateArgs, testbed: &TestbedOptions) -> Result<()> {
    if !(args.secs.is_finite() && args.secs > 0.0 && args.secs <= 600.0) {
        bail!("--secs must be in (0, 600], got {}", args.secs);
    }
    let mut opts = options(testbed, args.emu_threads, args.mtu, args.datapath, args.no_steer)?;
    args.sockets.apply(&mut opts);
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("calibrate builds a testbed: {why}");
    }
    let (_sc, unscaled) = fbdt_emu::load_spec(&args.scenario, Some(1.0), args.mtu)?;
    let (scale, source, search) = match args.scale {
        Some(s) if s.is_finite() && s > 0.0 => (s, ScaleSource::Given, None),
        Some(s) => bail!("--scale must be > 0, got {s}"),
        None => calibrate::scale_for(&unscaled, &opts, true, true)?,
    };
    let spec = unscaled.rescaled(scale);
    let mut r = fbdt_emu::calibrate(&spec, &opts, args.secs, true)?;
    r.search = search;
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "scenario {}  scale {} ({})  cc {}  ({} cores, {}, kernel {})",
        r.scenario,
        r.scale,
        fbdt_harness::results::fidelity::source_name(&source),
        r.congestion_control,
        r.cores,
        r.host.cpu_model,
        r.host.kernel
    )?;
    if let Some(s) = &r.search {
        writeln!(o, "scale search: {} probes in {:.0} s", s.probes.len(), s.took_s)?;
        for p in &s.probes {
            writeln!(
                o,
                "  scale {:<8} {}{}",
                p.scale,
                if p.pass { "faithful" } else { "NOT faithful" },
                if p.why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", p.why.join(" | "))
                }
            )?;
        }
    }
    writeln!(
        o,
        "{:<12} {:>14} {:>13} {:>6} {:>12} {:>8}",
        "path", "configured", "measured", "ratio", "conf. RTT", "RTT"
    )?;
    for p in &r.paths {
        writeln!(
            o,
            "{:<12} {:>9.1} Mb/s {:>8.1} Mb/s {:>6.3} {:>9.2} ms {:>5.2} ms",
            p.name, p.configured_mbps, p.measured_mbps, p.ratio, p.configured_rtt_ms, p.rtt_ms
        )?;
    }
    if let Some(t) = &r.together {
        let ratios: Vec<String> = t
            .paths
            .iter()
            .zip(&t.delivered_over_configured)
            .map(|(p, x)| format!("{p} {x:.3}"))
            .collect();
        writeln!(
            o,
            "all paths at once: delivered/configured (IP) {}; late {:.2}%, emulator CPU {:.2}, {}",
            ratios.join(", "),
            t.fidelity.emulator_late_share * 100.0,
            t.fidelity.emulator_cpu,
            if t.pass { "faithful" } else { "NOT faithful" }
        )?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(o, "wrote {}", path.display())?;
    }
    Ok(())
}

/// `bench emu [--paths 2,4] [--mtu 1500,9000] [--json PATH]`
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Numbers of equal paths to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [2usize, 4])]
    pub paths: Vec<usize>,
    /// Link MTUs to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1500u32, 9000])]
    pub mtu: Vec<u32>,
    /// One-way delay of every path, ms.
    #[arg(long, default_value_t = 1.0)]
    pub delay_ms: f64,
    /// Rate of every path at scale 1, Mbit/s: the search's ceiling is this × the paths.
    #[arg(long, default_value_t = 1000.0)]
    pub path_mbps: f64,
    /// Tokio worker threads of the emulator.
    #[arg(long, default_value_t = 1)]
    pub emu_threads: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// The datapath without this version's tuning, for before/after numbers: the emulator
    /// under normal scheduling and its sockets at the kernel's default buffers.
    #[arg(long)]
    pub untuned: bool,
    /// The emulator's datapath: rattan, kernel-rate or direct. Default: the testbed's default.
    #[arg(long)]
    pub datapath: Option<Datapath>,
    /// Leave the endpoints' receive work on whichever CPU writes the frame (no RPS, the
    /// emulator not pinned): the direct datapath as it was before steering.
    #[arg(long)]
    pub no_steer: bool,
    #[command(flatten)]
    pub sockets: SocketArgs,
}

#[derive(Debug, Serialize)]
struct BenchRow {
    paths: usize,
    mtu: u32,
    /// Largest aggregate rate (Σ of the paths) at which one TCP per path, alone and all
    /// at once, still gets ≥ 0.95 of configured with the monitors in tolerance, Mbit/s;
    /// `None` when not even the lowest probe was faithful (see `error`).
    aggregate_mbps: Option<f64>,
    search: Option<ScaleSearch>,
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Bench {
    host: fbdt_emu::HostKey,
    loadavg_before: String,
    loadavg_after: String,
    delay_ms: f64,
    path_mbps: f64,
    emu_threads: usize,
    untuned: bool,
    datapath: Datapath,
    /// The endpoints' receive work steered off the emulator's core (`--no-steer`: false).
    receive_steered: bool,
    /// direct: received through a TPACKET_V3 ring (`--ring`) rather than recvmmsg.
    packet_rx_ring: bool,
    /// direct: PACKET_QDISC_BYPASS on the emulator's sockets (`--qdisc-bypass`).
    qdisc_bypass: bool,
    /// direct: GSO units of at most this airtime, µs (`--gso-units`); null: MTU frames.
    gso_unit_airtime_us: Option<u32>,
    rows: Vec<BenchRow>,
}

/// The emulator benchmark: for N equal paths and an MTU, the largest aggregate rate the
/// emulator carries faithfully (the same search as the scale calibration, over N paths of
/// 1 Gbit/s each at scale 1).
pub fn run_bench(args: BenchArgs, testbed: &TestbedOptions) -> Result<()> {
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("bench emu builds testbeds: {why}");
    }
    if !(args.delay_ms.is_finite() && (0.0..=1000.0).contains(&args.delay_ms)) {
        bail!("--delay-ms must be in [0, 1000], got {}", args.delay_ms);
    }
    if !(args.path_mbps.is_finite() && (1.0..=100_000.0).contains(&args.path_mbps)) {
        bail!("--path-mbps must be in [1, 100000], got {}", args.path_mbps);
    }
    let loadavg = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let loadavg_before = loadavg();
    let mut rows = Vec::new();
    for &n in &args.paths {
        if !(1..=8).contains(&n) {
            bail!("--paths: 1 to 8 paths, got {n}");
        }
        for &mtu in &args.mtu {
            let mut opts = options(testbed, args.emu_threads, mtu, args.datapath, args.no_steer)?;
            args.sockets.apply(&mut opts);
            if args.untuned {
                opts.emu_rt_priority = None;
                opts.packet_socket_buffer = None;
            }
            let spec = TestbedSpec {
                name: format!("bench-{n}x-mtu{mtu}"),
                congestion_control: "cubic".into(),
                duration_s: 0.0,
                scale: 1.0,
                seed: 1,
                paths: (0..n)
                    .map(|i| PathPlan::constant(&format!("p{}", i + 1), args.path_mbps, args.delay_ms, 0.0))
                    .collect(),
                bottleneck: None,
            };
            let start = fbdt_emu::scenario::default_scale(spec.peak_total_mbps(), mtu);
            // The emulator's ceiling: the endpoints' CPU headroom is the suite's concern.
            let row = match calibrate::find_scale(&spec, &opts, start, true, 0.0) {
                Ok(search) => {
                    let agg = search.scale * spec.peak_total_mbps();
                    println!(
                        "{n} paths, MTU {mtu}, {}{}{}{}{}: {agg:.0} Mbit/s aggregate ({} probes, {:.0} s)",
                        opts.datapath,
                        if opts.receive_steered() {
                            " (receive steered)"
                        } else {
                            ""
                        },
                        if opts.packet_rx_ring { " (rx ring)" } else { "" },
                        if opts.qdisc_bypass { " (qdisc bypass)" } else { "" },
                        opts.gso_units()
                            .map_or(" (MTU frames)".to_string(), |us| format!(" (GSO units ≤ {us} µs)")),
                        search.probes.len(),
                        search.took_s
                    );
                    BenchRow {
                        paths: n,
                        mtu,
                        aggregate_mbps: Some(agg),
                        search: Some(search),
                        error: None,
                    }
                }
                Err(e @ fbdt_emu::Error::NoFaithfulScale { .. }) => {
                    println!("{n} paths, MTU {mtu}: {e}");
                    BenchRow {
                        paths: n,
                        mtu,
                        aggregate_mbps: None,
                        search: None,
                        error: Some(e.to_string()),
                    }
                }
                Err(e) => return Err(e.into()),
            };
            rows.push(row);
        }
    }
    // The options the rows were measured with (their MTU aside), for the report's header.
    let mut measured = options(testbed, args.emu_threads, 1500, args.datapath, args.no_steer)?;
    args.sockets.apply(&mut measured);
    let b = Bench {
        host: fbdt_emu::HostKey::current(),
        loadavg_before,
        loadavg_after: loadavg(),
        delay_ms: args.delay_ms,
        path_mbps: args.path_mbps,
        emu_threads: args.emu_threads,
        untuned: args.untuned,
        datapath: args.datapath.unwrap_or(TestbedOptions::default().datapath),
        receive_steered: measured.receive_steered(),
        packet_rx_ring: measured.packet_rx_ring,
        qdisc_bypass: measured.qdisc_bypass,
        gso_unit_airtime_us: measured.gso_units(),
        rows,
    };
    println!("load average before {} after {}", b.loadavg_before, b.loadavg_after);
    if let Some(path) = &args.json {
        fbdt_harness::results::write_json(path, &b)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// `clean [--all]`
#[derive(Debug, Clone, clap::Args)]
pub struct CleanArgs {
    /// Also remove namespaces whose creating process is still running.
    #[arg(long)]
    pub all: bool,
}

/// Removes leftovers of crashed runs and says what it did.
pub fn run_clean(args: CleanArgs) -> Result<()> {
    let r = fbdt_emu::clean_leftovers(args.all);
    for n in &r.namespaces {
        println!("removed {n}");
    }
    for n in &r.skipped_live {
        println!("kept {n} (its process is still running; --all removes it)");
    }
    if r.namespaces.is_empty() && r.skipped_live.is_empty() {
        println!("nothing to clean");
    }
    Ok(())
}
