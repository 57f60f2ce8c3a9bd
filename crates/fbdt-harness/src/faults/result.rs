//! What one fault run measured: plain data, filled by the backend's run ([`super::sim`])
//! and summed up by [`super::Summary`].

use serde::{Deserialize, Serialize};

use super::plan::Fault;

/// What one run measured (the issue's `runs[]`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub run: u64,
    pub scheme: String,
    pub seed: u64,
    pub plan: Vec<Fault>,
    /// Longest time between two in-order deliveries (and from the last one to the end),
    /// from the receiver's timestamps at 1 ms resolution.
    pub max_gap_ms: u64,
    /// When that gap began, s.
    pub max_gap_at_s: f64,
    /// From the end of the plan's last outage that returns to the first payload byte
    /// arriving on that path; `None` for a cut, or a path the scheme never used again.
    pub reuse_after_return_ms: Option<f64>,
    /// max(50 ms, 2 × base RTT of the best path the plan leaves working).
    pub bound_ms: f64,
    pub bytes_delivered: u64,
    pub bytes_lost: u64,
    pub bytes_duplicated: u64,
    /// No error, and the receiver still got bytes in the run's last seconds.
    pub survived: bool,
    pub error: Option<String>,
    /// Testbed runs: bytes delivered in order while the (single) fault lasted ÷ its
    /// length, Mbit/s, and the capacity the other paths offered meanwhile (at scale).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault_goodput_mbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surviving_capacity_mbps: Option<f64>,
    /// Testbed runs with a reset: from the reset's scheduled start until both ends'
    /// connections were destroyed (`ss -K`), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_took_ms: Option<f64>,
    /// Testbed runs: the fidelity monitors' verdict, and why not faithful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faithful: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfaithful_reasons: Vec<String>,
    /// Testbed runs: the two ends' CPU, and the host's busy cores less the emulator's and
    /// other programs' (both ends and the kernel's work for them, wherever booked), in
    /// cores over the run (the run results' `endpoint_cpu_cores` and `stack_cpu_cores`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_cpu_cores: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_cpu_cores: Option<f64>,
    /// FBDT and `mp:*` runs: times the sender's core declared a path stalled, and the
    /// connections the client dialled after the first (probes that took over, re-dials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_stalls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconnects: Option<u64>,
    /// Testbed FBDT and `mp:*` runs: when the sender's count of stalls grew, s on the
    /// plan's clock, up to one session stats tick (10 ms) late — what the simulator's
    /// trace shows, for a run with real stacks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stalls_at_s: Vec<f64>,
}

