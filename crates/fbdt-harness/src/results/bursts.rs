//! `--traffic bursts`: a scheme's burst metrics (`results[].bursts`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One burst run's metrics (a scheme's `results[].bursts`, aggregated over repetitions).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BurstStats {
    pub flows: usize,
    pub burst_s: f64,
    pub gap_s: f64,
    /// Every burst's throughput (bytes of all flows received within the burst ÷ its length),
    /// repetitions one after the other.
    pub burst_mbps: Vec<f64>,
    pub burst_mean_mbps: f64,
    /// The fixed volume: 5 Gbit × the run's scale, in bytes.
    pub volume_bytes: u64,
    /// Per repetition: burst time (gaps not counted) until all flows together had received
    /// `volume_bytes`; None when the run's bursts did not deliver that much.
    pub time_to_volume_s: Vec<Option<f64>>,
    /// Per path: bytes the client received on it (every byte on the link: coding, headers,
    /// retransmissions) ÷ what the path's scheduled rate carried while the counters ran
    /// (from the schedule's start through connecting, the bursts, their gaps and the drain).
    pub link_utilisation: BTreeMap<String, f64>,
    /// TCP segments the server namespace's kernel retransmitted during the bursts
    /// (`RetransSegs`): the flows' own for TCP and COTAG, every subflow's for MPTCP, every
    /// path connection's for FBDT; None if the counter could not be read.
    pub tcp_retransmissions: Option<u64>,
    /// Every flow of every repetition arrived whole (bytes and SHA-256 equal).
    pub flows_intact: bool,
}

impl BurstStats {
    /// Folds in another repetition (utilisation: the mean).
    pub fn add(&mut self, o: &BurstStats) {
        let reps = self.time_to_volume_s.len() as f64;
        for (k, v) in &o.link_utilisation {
            let e = self.link_utilisation.entry(k.clone()).or_insert(0.0);
            *e = (*e * reps + v) / (reps + 1.0);
        }
        self.burst_mbps.extend_from_slice(&o.burst_mbps);
        self.burst_mean_mbps = mean(&self.burst_mbps);
        self.time_to_volume_s.extend_from_slice(&o.time_to_volume_s);
        self.tcp_retransmissions = match (self.tcp_retransmissions, o.tcp_retransmissions) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        self.flows_intact &= o.flows_intact;
    }

    /// Mean time to the volume over the repetitions that reached it.
    pub fn time_to_volume_mean_s(&self) -> Option<f64> {
        super::stats::mean_of(self.time_to_volume_s.iter().flatten().copied())
    }
}

/// The mean of `v`; 0 for none.
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_keeps_every_burst_and_repetition() {
        let one = |m: f64, t: Option<f64>| BurstStats {
            burst_mbps: vec![m, m],
            burst_mean_mbps: m,
            time_to_volume_s: vec![t],
            link_utilisation: BTreeMap::from([("ap1".to_string(), m / 100.0)]),
            tcp_retransmissions: Some(3),
            flows_intact: true,
            ..BurstStats::default()
        };
        let mut a = one(10.0, Some(2.0));
        a.add(&one(30.0, None));
        assert_eq!(a.burst_mbps.len(), 4);
        assert_eq!(a.burst_mean_mbps, 20.0);
        assert_eq!(a.time_to_volume_mean_s(), Some(2.0));
        assert_eq!(a.tcp_retransmissions, Some(6));
        assert!((a.link_utilisation["ap1"] - 0.2).abs() < 1e-9);
    }
}
