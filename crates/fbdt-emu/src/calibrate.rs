//! `calibrate`: each path alone, configured rate vs a single TCP's goodput, and the RTT,
//! so users can see the testbed is honest. Also the `clean` command.

use std::{io::Write, path::PathBuf};

use serde::Serialize;

use crate::{
    cleanup,
    error::Result,
    perf::{self, Proto},
    spec::{PathPlan, PathStep, TestbedSpec},
    testbed::{Testbed, TestbedOptions},
};

/// One path's calibration.
#[derive(Debug, Clone, Serialize)]
pub struct PathCalibration {
    pub name: String,
    /// Rate configured in the emulator (at scale), Mbit/s, IP-layer bytes.
    pub configured_mbps: f64,
    /// Goodput of one TCP connection (server → client) after a 1 s warm-up, Mbit/s.
    pub measured_mbps: f64,
    /// measured / configured. TCP/IP headers cap it at 1448/1500 = 0.965 at MTU 1500.
    pub ratio: f64,
    /// 2 × the configured one-way delay, ms.
    pub configured_rtt_ms: f64,
    /// Median TCP connect time (SYN → SYN/ACK) on the idle path, ms.
    pub rtt_ms: f64,
    /// Loss configured on the data direction during the measurement.
    pub loss: f64,
}

/// What `calibrate` measured.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationReport {
    pub scenario: String,
    pub scale: f64,
    pub congestion_control: String,
    /// How the RTT was measured.
    pub rtt_method: String,
    /// Minimum seconds of transfer per path (long-RTT paths get 20 RTTs, at most 30 s).
    pub secs_per_path: f64,
    pub cores: usize,
    pub options: TestbedOptions,
    pub paths: Vec<PathCalibration>,
}

/// The constant link a path is calibrated at: its time-averaged rate over the steps with a
/// positive rate, with the first such step's delay and loss.
pub fn calibration_step(p: &PathPlan) -> PathStep {
    let up: Vec<(usize, &PathStep)> = p
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.rate_mbps > 0.0 && !s.scan)
        .collect();
    let Some(first) = up.first().map(|(_, s)| **s) else {
        return PathStep::constant(0.0, p.steps[0].delay_ms, 0.0);
    };
    let (mut acc, mut dur) = (0.0, 0.0);
    for (i, s) in &up {
        // Steps past the schedule's end count 1 s (only the last can be open-ended).
        let d = p.steps.get(i + 1).map_or(1.0, |n| n.t_s - s.t_s);
        acc += s.rate_mbps * d;
        dur += d;
    }
    PathStep {
        t_s: 0.0,
        rate_mbps: if dur > 0.0 { acc / dur } else { first.rate_mbps },
        ..first
    }
}

/// Measures every path alone (the others idle) on one testbed with constant links.
/// `progress`: print per-second progress on stderr.
pub fn calibrate(spec: &TestbedSpec, opts: &TestbedOptions, secs: f64, progress: bool) -> Result<CalibrationReport> {
    let mut st = spec.clone();
    for p in &mut st.paths {
        p.steps = vec![calibration_step(p)];
    }
    let tb = Testbed::start(&st, opts)?;
    let mut out = Vec::new();
    for (i, p) in st.paths.iter().enumerate() {
        let step = p.steps[0];
        if progress {
            eprintln!(
                "calibrate: path {} ({:.1} Mbit/s, {} ms one-way, loss {}) …",
                p.name, step.rate_mbps, step.delay_ms, step.loss
            );
        }
        let rtt = perf::connect_rtt_ms(&tb, i, 5)?;
        // Long-RTT paths need time to leave slow start: at least 20 RTTs (≤ 30 s), and the
        // first half (≥ 1 s, ≤ 10 RTTs) is warm-up.
        let rtt_s = 2.0 * step.delay_ms / 1e3;
        let secs = secs.max((20.0 * rtt_s).min(30.0));
        let warmup = (10.0 * rtt_s).clamp(1.0_f64.min(secs / 3.0), secs / 2.0);
        let name = p.name.clone();
        let cb = move |t: f64, mbps: f64| eprintln!("  {name}: t={t:4.1}s {mbps:8.1} Mbit/s");
        let tr = perf::download(
            &tb,
            i,
            i,
            Proto::Tcp,
            secs,
            warmup,
            if progress { Some(&cb) } else { None },
        )?;
        out.push(PathCalibration {
            name: p.name.clone(),
            configured_mbps: step.rate_mbps,
            measured_mbps: tr.goodput_mbps,
            ratio: if step.rate_mbps > 0.0 {
                tr.goodput_mbps / step.rate_mbps
            } else {
                0.0
            },
            configured_rtt_ms: 2.0 * step.delay_ms,
            rtt_ms: rtt,
            loss: step.loss,
        });
    }
    drop(tb);
    Ok(CalibrationReport {
        scenario: spec.name.clone(),
        scale: spec.scale,
        congestion_control: spec.congestion_control.clone(),
        rtt_method: "tcp-connect (median of 5 SYN→SYN/ACK times on the idle path)".into(),
        secs_per_path: secs,
        cores: crate::scenario::cores(),
        options: opts.clone(),
        paths: out,
    })
}

/// `calibrate <scenario> [--json PATH] [--scale X]`
#[derive(Debug, Clone, clap::Args)]
pub struct CalibrateArgs {
    /// Built-in scenario name or path to a scenario TOML file.
    pub scenario: String,
    /// Also write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Multiply every rate by this (default: the largest that fits this machine).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Seconds of transfer per path.
    #[arg(long, default_value_t = 4.0)]
    pub secs: f64,
    /// Tokio worker threads of the emulator.
    #[arg(long, default_value_t = 1)]
    pub emu_threads: usize,
    /// MTU of the emulated links.
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
}

/// Runs `calibrate`: progress on stderr, a table on stdout, JSON to `--json`.
pub fn run_calibrate(args: CalibrateArgs) -> anyhow::Result<()> {
    let (_sc, spec) = crate::scenario::load_spec(&args.scenario, args.scale, args.mtu)?;
    let opts = TestbedOptions {
        emu_threads: args.emu_threads,
        mtu: args.mtu,
        ..TestbedOptions::default()
    };
    let r = calibrate(&spec, &opts, args.secs, true)?;
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "scenario {}  scale {}  cc {}  ({} cores)",
        r.scenario, r.scale, r.congestion_control, r.cores
    )?;
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
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)? + "\n")?;
        writeln!(o, "wrote {}", path.display())?;
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
pub fn run_clean(args: CleanArgs) -> anyhow::Result<()> {
    let r = cleanup::clean_leftovers(args.all);
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
