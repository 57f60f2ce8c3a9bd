//! The simulator's side of a run: its parameters for a scenario and path model, with the
//! testbed's limits passed in so that both backends run the same configuration.

use anyhow::{bail, Result};
use fbdt_scenario::Scenario;
use fbdt_sim::{PathModel, SimParams};

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
