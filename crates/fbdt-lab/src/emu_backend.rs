//! `fbdt-lab run --backend emu`: each scheme on a fresh emulated testbed (fbdt-emu), the
//! download direction (server sends, as in the papers). Kernel TCP and MPTCP are read by
//! fbdt-emu's perf reader, FBDT and `mp:*` by a reader over the fbdt-net session that samples
//! the same way (cumulative bytes every 100 ms; only bytes that arrived within the duration
//! count). Needs root.

use std::collections::BTreeMap;
use std::time::Instant as WallClock;

use anyhow::{anyhow, bail, Context, Result};
use fbdt_emu::perf::{self, Proto};
use fbdt_emu::{Testbed, TestbedOptions};
use fbdt_scenario::Scenario;
use indicatif::ProgressBar;

use crate::report::{percentile, Counters, Sample, SchemeResult};
use crate::scheme::{self, Scheme};

/// What the emulated runs produced.
pub struct EmuRun {
    pub scale: f64,
    pub capacity_mbps: f64,
    pub results: Vec<SchemeResult>,
}

/// How a scheme runs on the testbed.
enum Transport {
    /// A kernel socket (TCP or MPTCP) from the client address of this path.
    Kernel(Proto, usize),
    /// The fbdt-net runtime with this core configuration (FBDT or the `mp:*` meta layer).
    Session(Box<fbdt_core::Config>),
}

fn transport(name: &str, scenario: &Scenario) -> Result<Transport> {
    if let Some(path) = name.strip_prefix("tcp:") {
        let i = scenario
            .path_index(path)
            .ok_or_else(|| anyhow!("scheme `{name}`: no path `{path}`"))?;
        return Ok(Transport::Kernel(Proto::Tcp, i));
    }
    if name == "mptcp" {
        // Kernel MPTCP starts on the first path; its endpoints add a subflow per other path.
        return Ok(Transport::Kernel(Proto::Mptcp, 0));
    }
    match scheme::parse(name, scenario, scenario.seed)? {
        Scheme::Fbdt(cfg) => Ok(Transport::Session(cfg)),
        Scheme::Tcp { path } => Ok(Transport::Kernel(Proto::Tcp, path)),
    }
}

/// Runs every scheme in `names` for the scenario's duration. `scale` None = the machine's
/// default (fbdt_emu::default_scale).
pub fn run(scenario: &Scenario, names: &[String], scale: Option<f64>, bar: &ProgressBar) -> Result<EmuRun> {
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("--backend emu needs root (CAP_NET_ADMIN) to build network namespaces: {why}");
    }
    for n in names {
        transport(n, scenario)?;
    }
    let scale = match scale {
        Some(s) => s,
        None => {
            let unscaled = fbdt_emu::spec_from_schedule(scenario, &scenario.schedule(1.0)?)?;
            fbdt_emu::default_scale(unscaled.peak_total_mbps(), TestbedOptions::default().mtu)
        }
    };
    let schedule = scenario.schedule(scale)?;
    let spec = fbdt_emu::spec_from_schedule(scenario, &schedule)?;
    let ticks = (scenario.duration_s / 0.1).round() as u64;
    let mut results = Vec::new();
    for name in names {
        bar.set_message(name.clone());
        let transport = transport(name, scenario)?;
        let started = WallClock::now();
        let base = bar.position();
        let mut tb = Testbed::start(&spec, &TestbedOptions::default()).context("starting the testbed")?;
        let before = tb.path_counters()?;
        tb.play()?;
        let progress = |t: f64| bar.set_position(base + (t / 0.1) as u64);
        let (transfer, sessions) = match transport {
            Transport::Kernel(proto, path) => {
                let t = perf::download(
                    &tb,
                    path,
                    path,
                    proto,
                    scenario.duration_s,
                    0.0,
                    Some(&|t, _| progress(t)),
                );
                (t.map_err(anyhow::Error::from), None)
            }
            Transport::Session(core) => {
                let net = fbdt_net::NetConfig {
                    core: *core,
                    ..fbdt_net::NetConfig::default()
                };
                match crate::emu_fbdt::download(&tb, net, scenario.duration_s, &progress) {
                    Ok(s) => (Ok(s.transfer), Some((s.server, s.client))),
                    Err(e) => (Err(e), None),
                }
            }
        };
        let transfer = transfer.with_context(|| format!("scheme {name}"))?;
        let after = tb.path_counters()?;
        tb.stop();
        bar.set_position(base + ticks);

        let series: Vec<Sample> = transfer
            .series
            .windows(2)
            .map(|w| Sample {
                t: w[1].0,
                mbps: (w[1].1 - w[0].1) as f64 * 8.0 / (w[1].0 - w[0].0).max(1e-9) / 1e6,
            })
            .collect();
        let seconds: Vec<f64> = series
            .chunks(10)
            .filter(|c| c.len() == 10)
            .map(|c| c.iter().map(|s| s.mbps).sum::<f64>() / 10.0)
            .collect();
        let per_path_bytes: BTreeMap<String, u64> = before
            .iter()
            .zip(&after)
            .map(|(b, a)| (a.name.clone(), a.client.rx_bytes.saturating_sub(b.client.rx_bytes)))
            .collect();
        // What arrived within the run's duration: the reader drains queued bytes for a while
        // after the sender stops, and those would inflate the rate.
        let in_time = transfer
            .series
            .iter()
            .take_while(|&&(t, _)| t <= scenario.duration_s + 1e-6)
            .last()
            .map_or(0, |&(_, b)| b);
        let goodput = in_time as f64 * 8.0 / scenario.duration_s / 1e6;
        bar.println(format!("{name}: {goodput:.1} Mbit/s (emulated, scale {scale})"));
        results.push(SchemeResult {
            scheme: name.clone(),
            goodput_mbps: goodput,
            goodput_p10_mbps: percentile(&seconds, 0.1),
            goodput_p50_mbps: percentile(&seconds, 0.5),
            goodput_p90_mbps: percentile(&seconds, 0.9),
            bytes_delivered: in_time,
            redundant_bytes: sessions.as_ref().map_or(0, |(_, c)| c.redundant_bytes_received),
            per_path_bytes,
            series,
            runs: Vec::new(),
            counters: sessions.as_ref().map(|(s, c)| Counters {
                windows_loaded: s.windows_loaded,
                redundant_bytes_received: c.redundant_bytes_received,
                ..Counters::default()
            }),
            recv_buffer_max_bytes: None,
            reinjected_bytes: sessions
                .as_ref()
                .filter(|_| name.starts_with("mp:"))
                .map(|(s, _)| s.redundant_bytes_sent),
            wall_s: started.elapsed().as_secs_f64(),
        });
    }
    Ok(EmuRun {
        scale,
        capacity_mbps: schedule.capacity_mbps(),
        results,
    })
}
