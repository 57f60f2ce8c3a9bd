//! The simulator's side of a run: its parameters for a scenario and path model, with the
//! testbed's limits passed in so that both backends run the same configuration, and the
//! simulator as a [`Backend`].

use anyhow::{anyhow, bail, Result};
use fbdt_scenario::{Scenario, Schedule};
use fbdt_sim::{PathModel, SimParams, SimScheme};
use indicatif::ProgressBar;

use crate::backend::{Backend, Outcome};
use crate::error::HarnessError;
use crate::results::{Sample, TcpPathCounters};
use crate::scheme;
use crate::traffic::Traffic;
use crate::TestbedLimits;

/// What the simulator records as the congestion control: its paths are ideal pipes (see
/// fbdt_sim::link) with no congestion control, whatever the scenario names; the testbed
/// applies the scenario's.
pub const SIM_CONGESTION_CONTROL: &str = "none (ideal pipe)";

/// A time grain is the pipe model's (`--grain`).
pub fn check_grain(model: PathModel, grain_us: u64) -> Result<()> {
    if grain_us > 0 && model != PathModel::Pipe {
        bail!("--grain is the pipe model's (the TCP model's arrivals stay exact)");
    }
    if grain_us > 1_000_000 {
        bail!("--grain must be at most 1 000 000 µs, got {grain_us}");
    }
    Ok(())
}

/// Each path's largest TCP window. The TCP-level model grows its windows as the testbed's
/// kernels do, so it gets the testbed's ceiling (`tcp_rmem`/`tcp_wmem` set to
/// `TestbedOptions::tcp_buffer_max`, 64 MiB). The ideal pipe has no slow start — its window
/// is the bandwidth-delay product from the first byte — so it keeps Linux's default 6 MiB:
/// at 64 MiB `tc-delay-wigig`'s 1 s WiGig would carry 537 Mbit/s at once, where a real
/// TCP reaches 4 Mbit/s in 10 s.
fn tcp_window_max(model: PathModel, limits: &TestbedLimits) -> u64 {
    let default = fbdt_sim::LinkParams::default().max_window_bytes;
    match model {
        PathModel::Tcp => limits.tcp_buffer_max.unwrap_or(default),
        PathModel::Pipe => default,
    }
}

/// The simulator's parameters for `scenario` under `model`: the TCP model takes the
/// scenario's congestion control, queues and seed; the pipe its time grain in µs.
pub fn sim_params(scenario: &Scenario, model: PathModel, grain_us: u64, limits: &TestbedLimits) -> SimParams {
    SimParams {
        model,
        link: fbdt_sim::LinkParams {
            grain_us,
            max_window_bytes: tcp_window_max(model, limits),
            ..fbdt_sim::LinkParams::default()
        },
        congestion_control: fbdt_sim::CongestionControl::from_name(&scenario.congestion_control),
        queue_bytes: scenario
            .paths
            .iter()
            .map(|p| u64::from(p.queue_packets) * 1500)
            .collect(),
        seed: scenario.seed,
        ..SimParams::default()
    }
}

/// The simulator as a [`Backend`]: every run of a command shares the parameters (its seed
/// replaced by the run's), the scale and the testbed's limits; progress in simulated
/// sample intervals moves `bar`.
pub struct SimBackend {
    pub params: SimParams,
    pub scale: f64,
    pub limits: TestbedLimits,
    pub bar: ProgressBar,
}

impl SimBackend {
    /// Sample intervals in one run of `scenario`: the bar's steps per run.
    pub fn ticks_per_run(&self, scenario: &Scenario) -> u64 {
        (scenario.duration_s / self.params.sample_interval_s).round() as u64
    }

    /// What one run of `name` with `seed` simulates: the scenario's schedule at this
    /// backend's scale, the scheme and the parameters, all with `seed`.
    pub fn prepare(&self, scenario: &Scenario, name: &str, seed: u64) -> Result<SimRun, HarnessError> {
        let mut sc = scenario.clone();
        sc.seed = seed;
        let (scheme, coupling) = scheme::parse_sim_coupled(name, &sc, seed, &self.limits)?;
        Ok(SimRun {
            schedule: sc.schedule(self.scale)?,
            scheme,
            params: SimParams {
                seed,
                coupling,
                ..self.params.clone()
            },
        })
    }
}

/// One simulated run's inputs ([`SimBackend::prepare`]).
pub struct SimRun {
    pub schedule: Schedule,
    pub scheme: SimScheme,
    pub params: SimParams,
}

impl Backend for SimBackend {
    fn run(&self, scenario: &Scenario, name: &str, traffic: Traffic, seed: u64) -> Result<Outcome, HarnessError> {
        if traffic != Traffic::Bulk {
            return Err(anyhow!("--traffic bursts needs --backend emu (the simulator runs one bulk flow)").into());
        }
        let SimRun {
            schedule,
            scheme: sim_scheme,
            params,
        } = self.prepare(scenario, name, seed)?;
        let bar = &self.bar;
        let base = bar.position();
        let out = fbdt_sim::run(&schedule, &sim_scheme, &params, |t| {
            bar.set_position(base + (t / params.sample_interval_s).round() as u64)
        })
        .map_err(|e| HarnessError::from(e).in_run(name, seed))?;
        bar.set_position(base + self.ticks_per_run(scenario));
        let names = schedule.paths.iter().map(|p| p.name.clone());
        Ok(Outcome {
            goodput_mbps: out.goodput_mbps,
            bytes: out.bytes_delivered,
            redundant_bytes: out.redundant_bytes,
            series: out.series.iter().map(|&(t, mbps)| Sample { t, mbps }).collect(),
            seconds: out.per_second_mbps,
            per_path_bytes: names.clone().zip(out.per_path_bytes).collect(),
            tcp_per_path: names
                .zip(&out.per_path_tcp)
                .map(|(p, c)| {
                    let c = TcpPathCounters {
                        loss_events: c.loss_events,
                        timeouts: c.timeouts,
                    };
                    (p, c)
                })
                .collect(),
            counters: match (out.server, out.client) {
                (Some(s), Some(c)) => Some((s.sender, c.receiver)),
                _ => None,
            },
            delay: out.delay,
            bottleneck: out.bottleneck,
            ..Outcome::default()
        })
    }
}
