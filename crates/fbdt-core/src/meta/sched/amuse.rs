//! AMuSe ([A]): FixedRatio with r set to the current throughput ratio of the two paths, plus
//! SCAN and BLOCKAGE handling. The "oracle": r = 100 · rate_1 / (rate_0 + rate_1) from the
//! delivery rates the driver reports in `PathStats` — in the simulator that is the link
//! model's current rate (an exact oracle while a path is up; frozen at its last value during
//! an outage, as TCP_INFO is); in the runtime it is TCP_INFO's delivery rate. r is
//! re-evaluated at the start of every 100-packet cycle, clamped to [1, 99] so neither
//! path is abandoned.

use super::fixed::{RatioPattern, RATIO_PATH};
use super::{Scheduler, View};
use crate::path::PathId;

#[derive(Clone)]
pub struct Amuse {
    pub pattern: RatioPattern,
}

impl Default for Amuse {
    fn default() -> Self {
        Amuse {
            pattern: RatioPattern { r: 50, pos: 0 },
        }
    }
}

/// r from the reported rates, `None` while they are unknown.
pub fn oracle_ratio(v: &View<'_>) -> Option<u8> {
    let ratio = v.paths.iter().find(|p| p.id == RATIO_PATH)?.rate_bps;
    let other: f64 = v.paths.iter().filter(|p| p.id != RATIO_PATH).map(|p| p.rate_bps).sum();
    let sum = ratio + other;
    (sum > 0.0).then(|| (100.0 * ratio / sum).round().clamp(1.0, 99.0) as u8)
}

impl Scheduler for Amuse {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        if self.pattern.at_cycle_start() {
            if let Some(r) = oracle_ratio(v) {
                self.pattern.r = r;
            }
        }
        self.pattern.select(v)
    }
    fn on_sent(&mut self, _path: PathId, len: u64) {
        self.pattern.advance(len);
    }
    fn reinject_default(&self) -> bool {
        false
    }
    fn scan_aware(&self) -> bool {
        true
    }
    fn ratio(&self) -> Option<u8> {
        Some(self.pattern.r)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{path, view};
    use super::*;

    #[test]
    fn ratio_follows_the_reported_rates() {
        let mut a = path(0, 5.0, 1 << 20, 0);
        a.rate_bps = 500e6;
        let mut b = path(1, 2.0, 1 << 20, 0);
        b.rate_bps = 1600e6;
        let paths = [a, b];
        let mut s = Amuse::default();
        assert_eq!(s.select(&view(&paths, 1 << 30, 1 << 30)), Some(PathId(1)));
        assert_eq!(s.ratio(), Some(76), "1600 / 2100 = 76 %");
    }
}
