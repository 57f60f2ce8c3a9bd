//! What the flows of a run are: one bulk download, or paper 003's ten TCP flows in 2-s
//! bursts (docs/cotag.md, "Traffic"; the testbed runs them in fbdt-lab's `emu/bursts.rs`).

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

/// The paper's ten TCP flows.
pub const FLOWS: usize = 10;
/// The paper's burst length.
pub const BURST_S: f64 = 2.0;
/// Idle time between bursts (not given in the paper): long enough for the queues of the
/// last burst to drain (1000 packets at the slowest scaled Low rate, 30 Mbit/s, take 0.4 s).
pub const GAP_S: f64 = 1.0;
/// "The time to send 5 Gb" (paper 003, Fig. 17), multiplied by the run's scale.
pub const PAPER_VOLUME_BITS: f64 = 5e9;
/// What the flows of an emulated run are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Traffic {
    /// One bulk download for the whole duration (the default).
    #[default]
    Bulk,
    /// Paper 003's ten TCP flows in 2-s bursts (docs/cotag.md).
    Bursts,
}

/// When the bursts are.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    pub flows: usize,
    pub burst_s: f64,
    pub gap_s: f64,
    pub bursts: usize,
}

impl Plan {
    /// As many bursts as fit in `duration_s`, at least one.
    pub fn for_duration(duration_s: f64) -> Plan {
        let bursts = ((duration_s + GAP_S) / (BURST_S + GAP_S) + 1e-9).floor().max(1.0) as usize;
        Plan {
            flows: FLOWS,
            burst_s: BURST_S,
            gap_s: GAP_S,
            bursts,
        }
    }

    /// Start of burst `b`, seconds after the common start.
    pub fn start_s(&self, b: usize) -> f64 {
        b as f64 * (self.burst_s + self.gap_s)
    }

    /// End of the last burst.
    pub fn end_s(&self) -> f64 {
        self.start_s(self.bursts.saturating_sub(1)) + self.burst_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_fits_bursts_in_the_duration() {
        assert_eq!(Plan::for_duration(1.0).bursts, 1);
        assert_eq!(Plan::for_duration(5.0).bursts, 2);
        assert_eq!(Plan::for_duration(8.0).bursts, 3);
        assert_eq!(Plan::for_duration(30.0).bursts, 10);
        let p = Plan::for_duration(8.0);
        assert_eq!((p.start_s(1), p.end_s()), (3.0, 8.0));
    }
}
