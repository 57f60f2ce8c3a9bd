//! A shared bottleneck's shares (docs/results.md): what each flow got across the link and
//! Jain's fairness index between the scheme as a whole and the competing single-path TCPs.

use fbdt_sim::BottleneckOutcome;
use serde::{Deserialize, Serialize};

/// One flow at the shared bottleneck.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowShare {
    /// `"scheme"` (every path of it that joins the link, together) or `"tcp#<k>"`.
    pub flow: String,
    /// Mean rate across the link, Mbit/s (bytes as they arrived: headers and repeats
    /// included), pooled over the repetitions.
    pub mbps: f64,
    /// Its part of everything that crossed the link, 0–1.
    pub bottleneck_share: f64,
}

/// Every flow's share and the fairness between them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BottleneckShares {
    pub flows: Vec<FlowShare>,
    /// Jain's index over the flows' rates, `(Σx)² / (n·Σx²)`: 1 for equal shares, 1/n
    /// when one flow takes all.
    pub jain_index: f64,
    /// The scheme's rate over the mean competing flow's (no competing flow: `null`).
    pub scheme_to_tcp: Option<f64>,
}

impl BottleneckShares {
    /// Pooled over the repetitions' outcomes (bytes summed, durations summed); `None`
    /// without any.
    pub fn pool<'a>(runs: impl IntoIterator<Item = &'a BottleneckOutcome>) -> Option<Self> {
        let mut scheme = 0u64;
        let mut competing: Vec<u64> = Vec::new();
        let mut seconds = 0.0;
        let mut any = false;
        for r in runs {
            any = true;
            scheme += r.scheme_bytes;
            competing.resize(competing.len().max(r.competing_bytes.len()), 0);
            for (sum, b) in competing.iter_mut().zip(&r.competing_bytes) {
                *sum += b;
            }
            seconds += r.duration_s;
        }
        if !any || seconds <= 0.0 {
            return None;
        }
        let mbps = |b: u64| b as f64 * 8.0 / seconds / 1e6;
        let rates: Vec<f64> = std::iter::once(mbps(scheme)).chain(competing.iter().map(|&b| mbps(b))).collect();
        let total: f64 = rates.iter().sum();
        let flows = rates
            .iter()
            .enumerate()
            .map(|(k, &r)| FlowShare {
                flow: if k == 0 { "scheme".to_string() } else { format!("tcp#{k}") },
                mbps: r,
                bottleneck_share: if total > 0.0 { r / total } else { 0.0 },
            })
            .collect();
        let tcp_mean = (!competing.is_empty()).then(|| rates[1..].iter().sum::<f64>() / competing.len() as f64);
        Some(BottleneckShares {
            flows,
            jain_index: fbdt_sim::shared::jain_index(&rates).unwrap_or(0.0),
            scheme_to_tcp: tcp_mean.filter(|&t| t > 0.0).map(|t| rates[0] / t),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_shares_to_one_give_jain_0_9() {
        let run = BottleneckOutcome {
            scheme_bytes: 2_000_000,
            competing_bytes: vec![1_000_000],
            duration_s: 1.0,
        };
        let s = BottleneckShares::pool([&run, &run]).unwrap();
        assert_eq!(s.flows.len(), 2);
        assert!((s.flows[0].mbps - 16.0).abs() < 1e-9);
        assert!((s.flows[0].bottleneck_share - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.jain_index - 0.9).abs() < 1e-12);
        assert!((s.scheme_to_tcp.unwrap() - 2.0).abs() < 1e-12);
        assert_eq!(BottleneckShares::pool([]), None);
    }
}
