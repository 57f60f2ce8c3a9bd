//! The results JSON (docs/results.md). The top-level and per-result fields listed in
//! DESIGN.md are stable; the rest are additions other tools may ignore.

use std::collections::BTreeMap;

use fbdt_scenario::Scenario;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    pub scenario: String,
    pub backend: String,
    pub duration_s: f64,
    pub seed: u64,
    pub scale: f64,
    pub congestion_control: String,
    /// `"tls13"` or `"none"`. The lab runs FBDT plaintext (paper-faithful: the schemes it
    /// compares carry no encryption either), so this is `"none"`; results written before
    /// the field existed read back as `"none"` too.
    #[serde(default = "plaintext")]
    pub encryption: String,
    /// Time-averaged sum of the configured path rates (at scale): the physical limit.
    pub capacity_mbps: f64,
    pub results: Vec<SchemeResult>,
    /// Σ of the `tcp:<path>` goodputs, when every path was run alone.
    pub sum_standalone_mbps: Option<f64>,
    pub meta: Meta,
    /// The scenario as run (after --duration/--seed overrides).
    pub scenario_def: Scenario,
    /// Emulated runs: what the emulator's fidelity monitors saw (see docs/testbed.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<crate::emu_fidelity::RunFidelity>,
}

fn plaintext() -> String {
    "none".into()
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SchemeResult {
    pub scheme: String,
    pub goodput_mbps: f64,
    pub goodput_p10_mbps: f64,
    pub goodput_p50_mbps: f64,
    pub goodput_p90_mbps: f64,
    pub bytes_delivered: u64,
    pub redundant_bytes: u64,
    pub per_path_bytes: BTreeMap<String, u64>,
    pub series: Vec<Sample>,
    /// One entry per repetition (seed) when `--repeat` > 1; the figures above are means
    /// (goodput) or pooled over every repetition's one-second samples (percentiles).
    pub runs: Vec<RunSummary>,
    /// Protocol counters of the sending side (FBDT only).
    pub counters: Option<Counters>,
    /// Wall-clock seconds this scheme took (all repetitions).
    pub wall_s: f64,
    /// `mp:*` schemes: peak occupancy of the shared receive (reorder) buffer, bytes (max
    /// over repetitions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_buffer_max_bytes: Option<u64>,
    /// `mp:*` schemes: bytes sent again by the meta layer (window-blocking reinjections,
    /// reinjections after a subflow timeout or death, redundant copies), summed over
    /// repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reinjected_bytes: Option<u64>,
    /// Emulated runs: whether every run of this scheme was within the emulator's
    /// tolerances. An unfaithful scheme's numbers say nothing about the protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faithful: Option<bool>,
    /// `cotag` / `dual-rr`: TCP retransmissions and the coding counters, summed over
    /// repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cotag: Option<crate::emu_cotag::CotagCounters>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub t: f64,
    pub mbps: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSummary {
    pub seed: u64,
    pub goodput_mbps: f64,
    pub redundant_bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Counters {
    pub windows_loaded: u64,
    pub realignments: u64,
    pub window_stalls: u64,
    pub path_stalls: u64,
    pub forward_changes: u64,
    pub redundant_bytes_received: u64,
    pub max_out_of_order_bytes: u64,
    pub acks_sent: u64,
}

impl Counters {
    /// Adds one run: the sending side's counters and the receiving side's.
    pub fn add(&mut self, sender: &fbdt_core::SenderStats, receiver: &fbdt_core::ReceiverStats) {
        self.windows_loaded += sender.windows_loaded;
        self.realignments += sender.realignments;
        self.window_stalls += sender.window_stalls;
        self.path_stalls += sender.path_stalls;
        self.forward_changes += sender.forward_changes;
        self.redundant_bytes_received += receiver.redundant_bytes_received;
        self.max_out_of_order_bytes = self.max_out_of_order_bytes.max(receiver.max_out_of_order_bytes);
        self.acks_sent += receiver.acks_sent;
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    pub tool: String,
    pub version: String,
    pub git_revision: String,
    pub command_line: Vec<String>,
    /// Simulator parameters (sim backend).
    pub sim: Option<BTreeMap<String, f64>>,
}

impl Meta {
    pub fn here() -> Self {
        Meta {
            tool: "fbdt-lab".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            git_revision: env!("FBDT_GIT_REV").into(),
            command_line: std::env::args().collect(),
            sim: None,
        }
    }
}

/// Linear-interpolated percentile of `values` (`q` in 0..=1); 0 for no values.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate() {
        let v = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 5.0);
        assert!((percentile(&v, 0.1) - 1.4).abs() < 1e-12);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
