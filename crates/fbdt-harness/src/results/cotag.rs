//! What a COTAG / dual-rr run adds to a scheme's results (`results[].cotag`).

use serde::{Deserialize, Serialize};

/// What a COTAG / dual-rr run adds to the results JSON (summed over repetitions; the
/// ratio is over all of them).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CotagCounters {
    /// The sender's kernel TCP retransmissions (TCP_INFO `tcpi_total_retrans`).
    pub tcp_retransmissions: u64,
    /// COTAG only: coded bytes received per original byte delivered, minus one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coding_overhead: Option<f64>,
    pub cohorts_decoded: u64,
    /// Cohorts the device dropped whole (decode failures).
    pub cohorts_failed: u64,
    /// Coded packets the APs flushed unsent (giving) and dropped with a full buffer.
    pub ap_flushed: u64,
    pub ap_full_dropped: u64,
    /// Packets the gateway dropped with its queue full (above max_cohort per T for long).
    pub gateway_queue_dropped: u64,
    pub max_cohort: Option<usize>,
    pub period_ms: Option<f64>,
    /// Coded bytes the device received and original bytes it delivered (the overhead's terms).
    pub bytes_received: u64,
    pub bytes_delivered: u64,
    /// High combinations the gateway gave up at the end of their send interval, and cohorts
    /// it closed smaller to fit the links' current rates (`size=rate`).
    #[serde(default)]
    pub gateway_high_given_up: u64,
    #[serde(default)]
    pub gateway_budget_capped: u64,
    /// The COTAG loops' timeliness, server (gateway + APs) and client (device): turns that
    /// woke > 250 µs late, turns that worked > 250 µs, the worst of each (µs; max over runs).
    #[serde(default)]
    pub loop_late_wakeups: [u64; 2],
    #[serde(default)]
    pub loop_long_turns: [u64; 2],
    #[serde(default)]
    pub loop_max_wake_lag_us: [u64; 2],
    #[serde(default)]
    pub loop_max_turn_us: [u64; 2],
    /// Failed cohorts by the rule that lost them (COTAG only).
    #[serde(default, skip_serializing_if = "Option::is_none", skip_deserializing)]
    pub failures: Option<cotag_net::FailureBreakdown>,
}

impl CotagCounters {
    pub fn add(&mut self, other: &CotagCounters) {
        self.tcp_retransmissions += other.tcp_retransmissions;
        self.cohorts_decoded += other.cohorts_decoded;
        self.cohorts_failed += other.cohorts_failed;
        self.ap_flushed += other.ap_flushed;
        self.ap_full_dropped += other.ap_full_dropped;
        self.gateway_queue_dropped += other.gateway_queue_dropped;
        self.bytes_received += other.bytes_received;
        self.bytes_delivered += other.bytes_delivered;
        self.gateway_high_given_up += other.gateway_high_given_up;
        self.gateway_budget_capped += other.gateway_budget_capped;
        for i in 0..2 {
            self.loop_late_wakeups[i] += other.loop_late_wakeups[i];
            self.loop_long_turns[i] += other.loop_long_turns[i];
            self.loop_max_wake_lag_us[i] = self.loop_max_wake_lag_us[i].max(other.loop_max_wake_lag_us[i]);
            self.loop_max_turn_us[i] = self.loop_max_turn_us[i].max(other.loop_max_turn_us[i]);
        }
        if let Some(f) = &other.failures {
            self.failures.get_or_insert_with(Default::default).add(f);
        }
        self.max_cohort = other.max_cohort;
        self.period_ms = other.period_ms;
        self.coding_overhead = (other.coding_overhead.is_some() && self.bytes_delivered > 0)
            .then(|| self.bytes_received as f64 / self.bytes_delivered as f64 - 1.0);
    }
}
