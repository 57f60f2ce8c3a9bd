//! FixedRatio(r) ([A], AMuSe poster): of every 100 new segments, the first r go to the
//! ratio path and the other 100 − r to the other path, in two consecutive bursts. Strict:
//! when the path whose turn it is has no space, nothing is sent (no spill-over).
//!
//! The pattern counts MSS-sized packets (1448 bytes), as the kernel scheduler does, not
//! meta-layer segments: a 100-packet cycle is 144,800 bytes, the ratio path takes the first
//! r × 1448 of them. With 16 KiB segments a segment-counted burst of 77 would be 1.2 MiB —
//! larger than a subflow's window — and the two paths would take turns instead of running
//! side by side. A segment goes where the cycle position at its first byte says.
//!
//! The ratio path is path 1 — the WiGig/802.11ad path in every two-path built-in scenario
//! (path 0 = WiFi). With more than two paths the "other" share goes to the lowest-index
//! other path with space. A path that is not available — down, "potentially failed" after a
//! retransmission timeout, or paused for a scan — leaves the pattern and its share goes to
//! the available paths, as the kernel's schedulers only ever pick among available
//! subflows. "Strict" is about a *full* path (no cwnd room): its turn is waited for.

use super::{Scheduler, View};
use crate::path::PathId;

/// The path that gets r of every 100 segments.
pub const RATIO_PATH: PathId = PathId(1);

/// The pattern's unit: one TCP MSS.
pub const UNIT: u64 = 1448;

/// Position in the 100-packet pattern (in bytes) and the share r.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RatioPattern {
    pub r: u8,
    /// Bytes into the current cycle of 100 × UNIT.
    pub pos: u64,
}

impl RatioPattern {
    /// Whether the next segment is the ratio path's.
    pub fn ratio_turn(&self) -> bool {
        self.pos < u64::from(self.r) * UNIT
    }
    /// A segment of `len` bytes was assigned.
    pub fn advance(&mut self, len: u64) {
        self.pos = (self.pos + len.max(1)) % (100 * UNIT);
    }
    /// At the start of a cycle (where AMuSe re-reads its oracle).
    pub fn at_cycle_start(&self) -> bool {
        self.pos < UNIT
    }

    /// The strict FixedRatio decision.
    pub fn select(&self, v: &View<'_>) -> Option<PathId> {
        let ratio = v.paths.iter().find(|p| p.id == RATIO_PATH && p.usable);
        let others_up = v.paths.iter().any(|p| p.id != RATIO_PATH && p.usable);
        let to_ratio = match (ratio.is_some(), others_up) {
            (true, true) => self.ratio_turn(),
            (true, false) => true,
            (false, _) => false,
        };
        if to_ratio {
            ratio.filter(|p| p.has_space(v.seg)).map(|p| p.id)
        } else {
            // Strict towards the ratio path: the other share waits for an "other" path.
            v.paths
                .iter()
                .filter(|p| p.id != RATIO_PATH)
                .find(|p| p.has_space(v.seg))
                .map(|p| p.id)
        }
    }
}

#[derive(Clone)]
pub struct FixedRatio {
    pub pattern: RatioPattern,
}

impl FixedRatio {
    pub fn new(r: u8) -> Self {
        FixedRatio {
            pattern: RatioPattern { r: r.min(100), pos: 0 },
        }
    }
}

impl Scheduler for FixedRatio {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        self.pattern.select(v)
    }
    fn on_sent(&mut self, _path: PathId, len: u64) {
        self.pattern.advance(len);
    }
    fn reinject_default(&self) -> bool {
        false
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
    fn a_hundred_segments_are_r_then_100_minus_r() {
        for r in [0u8, 5, 77, 100] {
            let paths = [path(0, 5.0, u64::MAX / 2, 0), path(1, 2.0, u64::MAX / 2, 0)];
            let mut s = FixedRatio::new(r);
            let mut seq = Vec::new();
            for _ in 0..200 {
                let p = s.select(&view(&paths, 1 << 30, 1 << 30)).unwrap();
                s.on_sent(p, UNIT);
                seq.push(p.0);
            }
            let mut want: Vec<u8> = std::iter::repeat_n(1, r as usize).collect();
            want.extend(std::iter::repeat_n(0, 100 - r as usize));
            assert_eq!(&seq[..100], &want[..], "r = {r}");
            assert_eq!(&seq[100..], &want[..], "the pattern repeats");
        }
    }

    #[test]
    fn large_segments_follow_the_ratio_in_bytes() {
        let paths = [path(0, 5.0, u64::MAX / 2, 0), path(1, 2.0, u64::MAX / 2, 0)];
        let mut s = FixedRatio::new(77);
        let mut bytes = [0u64; 2];
        for _ in 0..10_000 {
            let p = s.select(&view(&paths, 1 << 30, 1 << 30)).unwrap();
            s.on_sent(p, 16384);
            bytes[p.index()] += 16384;
        }
        let share = bytes[1] as f64 / (bytes[0] + bytes[1]) as f64;
        assert!((share - 0.77).abs() < 0.01, "share {share}");
    }

    #[test]
    fn strict_no_spill_over_and_dead_paths_leave_the_pattern() {
        let mut s = FixedRatio::new(77);
        // Ratio path full on its turn → wait, although path 0 has space.
        let paths = [path(0, 5.0, 1 << 20, 0), path(1, 2.0, 100_000, 100_000)];
        assert_eq!(s.select(&view(&paths, 1 << 30, 1 << 30)), None);
        // Ratio path unavailable (potentially failed) → everything to path 0.
        let mut dead = path(1, 2.0, 1 << 20, 0);
        dead.usable = false;
        let paths = [path(0, 5.0, 1 << 20, 0), dead];
        assert_eq!(s.select(&view(&paths, 1 << 30, 1 << 30)), Some(PathId(0)));
        // One path only → it takes everything.
        let paths = [path(0, 5.0, 1 << 20, 0)];
        assert_eq!(s.select(&view(&paths, 1 << 30, 1 << 30)), Some(PathId(0)));
    }
}
