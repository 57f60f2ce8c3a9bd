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
    /// Client end: IP packets delivered to the client's TCP, the writes that carried runs
    /// of merged segments and the segments in those (cotag-net's receive coalescing).
    #[serde(default)]
    pub tun_packets_delivered: u64,
    #[serde(default)]
    pub tun_merged_writes: u64,
    #[serde(default)]
    pub tun_merged_segments: u64,
    /// The client's ACKs (and anything else it sent) carried back, uncoded.
    #[serde(default)]
    pub uplink_packets: u64,
    /// Failed cohorts by the rule that lost them (COTAG only).
    #[serde(default, skip_serializing_if = "Option::is_none", skip_deserializing)]
    pub failures: Option<cotag_net::FailureBreakdown>,
    /// One bulk download's trace per run (`--traffic bulk`): what its TCP sender saw and how
    /// full the COTAG queues were (docs/cotag.md, "One bulk flow").
    #[serde(default, skip_serializing_if = "Vec::is_empty", skip_deserializing)]
    pub traces: Vec<TcpTrace>,
}

/// What one bulk flow's sender saw (TCP_INFO every 10 ms) and, for COTAG, the server end's
/// queues every 10 ms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TcpTrace {
    /// Smoothed RTT over the samples, ms: 10th, 50th, 90th percentile and the largest.
    pub rtt_ms: [f64; 4],
    /// Median congestion window, segments.
    pub cwnd_p50: f64,
    /// Times the sender entered fast recovery (congestion state 3) and the loss state after a
    /// retransmission timeout (4), as seen at the samples.
    pub recoveries: u64,
    pub timeouts: u64,
    /// The kernel's largest reordering estimate, segments (3 = none seen).
    pub max_reordering: u32,
    /// Gateway queue, packets: median and largest (COTAG only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_queue: Option<[u32; 2]>,
    pub samples: Vec<cotag_net::transfer::TcpSample>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queue_samples: Vec<cotag_net::stats::QueueSample>,
}

impl TcpTrace {
    pub fn new(samples: Vec<cotag_net::transfer::TcpSample>, queue_samples: Vec<cotag_net::stats::QueueSample>) -> TcpTrace {
        let mut rtt: Vec<f64> = samples.iter().map(|s| f64::from(s.rtt_us) / 1e3).collect();
        rtt.sort_by(f64::total_cmp);
        let mut cwnd: Vec<f64> = samples.iter().map(|s| f64::from(s.cwnd)).collect();
        cwnd.sort_by(f64::total_cmp);
        let entered = |state: u8| {
            samples
                .windows(2)
                .filter(|w| w[0].ca_state != state && w[1].ca_state == state)
                .count() as u64
                + u64::from(samples.first().is_some_and(|s| s.ca_state == state))
        };
        let mut gw: Vec<u32> = queue_samples.iter().map(|q| q.gateway).collect();
        gw.sort_unstable();
        TcpTrace {
            rtt_ms: [
                quantile(&rtt, 0.1),
                quantile(&rtt, 0.5),
                quantile(&rtt, 0.9),
                rtt.last().copied().unwrap_or(0.0),
            ],
            cwnd_p50: quantile(&cwnd, 0.5),
            recoveries: entered(3),
            timeouts: entered(4),
            max_reordering: samples.iter().map(|s| s.reordering).max().unwrap_or(0),
            gateway_queue: (!gw.is_empty()).then(|| [gw[gw.len() / 2], gw[gw.len() - 1]]),
            samples,
            queue_samples,
        }
    }
}

/// The `q` quantile of sorted values (nearest rank; 0 when empty).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
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
        self.tun_packets_delivered += other.tun_packets_delivered;
        self.tun_merged_writes += other.tun_merged_writes;
        self.tun_merged_segments += other.tun_merged_segments;
        self.uplink_packets += other.uplink_packets;
        for i in 0..2 {
            self.loop_late_wakeups[i] += other.loop_late_wakeups[i];
            self.loop_long_turns[i] += other.loop_long_turns[i];
            self.loop_max_wake_lag_us[i] = self.loop_max_wake_lag_us[i].max(other.loop_max_wake_lag_us[i]);
            self.loop_max_turn_us[i] = self.loop_max_turn_us[i].max(other.loop_max_turn_us[i]);
        }
        self.traces.extend(other.traces.iter().cloned());
        if let Some(f) = &other.failures {
            self.failures.get_or_insert_with(Default::default).add(f);
        }
        self.max_cohort = other.max_cohort;
        self.period_ms = other.period_ms;
        self.coding_overhead = (other.coding_overhead.is_some() && self.bytes_delivered > 0)
            .then(|| self.bytes_received as f64 / self.bytes_delivered as f64 - 1.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cotag_net::stats::QueueSample;
    use cotag_net::transfer::TcpSample;

    #[test]
    fn a_trace_counts_entries_into_recovery_and_loss_and_takes_rtt_quantiles() {
        let states = [0, 3, 3, 0, 0, 3, 4, 4, 0, 0, 1];
        let samples: Vec<TcpSample> = states
            .iter()
            .enumerate()
            .map(|(i, &ca_state)| TcpSample {
                t: i as f64 * 0.01,
                rtt_us: (i as u32 + 1) * 1_000,
                cwnd: 10 * (i as u32 + 1),
                ca_state,
                reordering: if i == 4 { 40 } else { 3 },
                ..TcpSample::default()
            })
            .collect();
        let queues = [5, 1, 9].map(|gateway| QueueSample {
            gateway,
            ..QueueSample::default()
        });
        let t = TcpTrace::new(samples, queues.to_vec());
        assert_eq!((t.recoveries, t.timeouts), (2, 1), "3 entered twice, 4 once");
        assert_eq!(t.rtt_ms, [2.0, 6.0, 10.0, 11.0]);
        assert_eq!(t.cwnd_p50, 60.0);
        assert_eq!(t.max_reordering, 40);
        assert_eq!(t.gateway_queue, Some([5, 9]));
        let empty = TcpTrace::new(Vec::new(), Vec::new());
        assert_eq!((empty.rtt_ms, empty.recoveries, empty.gateway_queue), ([0.0; 4], 0, None));
    }
}
