//! Transmission windows and their layout: which path serves which part of a window, from
//! which end (journal sec. IV-B/C, eq. 4–5, Algorithm 1).
//!
//! A window's unsent segments are kept as *lanes*: contiguous ranges `[lo, hi)` of segment
//! indices, each served by at most two paths — one ascending from the bottom, one
//! descending from the top. With two paths there is one lane and this is exactly the
//! paper's forward/backward pair: the pointers meet wherever the two paths' speeds put
//! them. With N paths the initial layout is the paper's: regions sized by throughput share
//! (eq. 4) at cumulative offsets (eq. 5), the forward path ascending in region 0 and each
//! backward path descending from the end of its region; regions 0 and 1 form one lane
//! because their pointers move toward each other.

use crate::path::PathId;
use crate::time::Instant;
use crate::wire::{LaneRepr, MAX_LANES, NO_PATH};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Bottom,
    Top,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Lane {
    pub lo: u64,
    pub hi: u64,
    pub bottom: Option<PathId>,
    pub top: Option<PathId>,
}

impl Lane {
    pub fn remaining(&self) -> u64 {
        self.hi - self.lo
    }
    pub fn server(&self, end: End) -> Option<PathId> {
        match end {
            End::Bottom => self.bottom,
            End::Top => self.top,
        }
    }
    pub fn set_server(&mut self, end: End, p: Option<PathId>) {
        match end {
            End::Bottom => self.bottom = p,
            End::Top => self.top = p,
        }
    }
    /// Hands out the next segment from `end`, if any.
    pub fn take(&mut self, end: End) -> Option<u64> {
        if self.lo >= self.hi {
            return None;
        }
        Some(match end {
            End::Bottom => {
                self.lo += 1;
                self.lo - 1
            }
            End::Top => {
                self.hi -= 1;
                self.hi
            }
        })
    }
    pub fn peek(&self, end: End) -> Option<u64> {
        (self.lo < self.hi).then(|| match end {
            End::Bottom => self.lo,
            End::Top => self.hi - 1,
        })
    }
}

/// Where a path works: a lane end in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Assign {
    pub window: u32,
    pub lane: usize,
    pub end: End,
}

#[derive(Clone, Debug)]
pub(super) struct Window {
    pub id: u32,
    /// Segment indices `[seg_lo, seg_hi)`.
    pub seg_lo: u64,
    pub seg_hi: u64,
    /// Stream offsets `[off_lo, off_hi)` the window covers.
    pub off_lo: u64,
    pub off_hi: u64,
    pub lanes: Vec<Lane>,
    /// When the last unsent segment was handed to a path (the pointers met).
    pub handed_out_at: Option<Instant>,
    /// Segments not yet acknowledged.
    pub unacked: u64,
    /// Every segment below this index is acknowledged (scans for re-sends start here).
    pub scan_from: u64,
    /// Cached redundancy deadlines of this window, cleared whenever one of its segments
    /// is sent or acknowledged or a path comes or goes (see `FbdtSender::deadlines`).
    pub deadlines: std::cell::Cell<Option<Deadlines>>,
}

/// The earliest redundancy deadline of a window's copies, and the earliest one after the
/// time the sender had processed when it was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Deadlines {
    pub earliest: Option<Instant>,
    pub earliest_after: Option<Instant>,
    pub after: Instant,
}

impl Window {
    pub fn has_unsent(&self) -> bool {
        self.lanes.iter().any(|l| l.lo < l.hi)
    }

    /// The lanes still holding unsent segments, lowest first, at most [`MAX_LANES`]
    /// (splits can leave more; the receiver needs only the window bounds, so a long layout
    /// is cut rather than refused).
    pub fn lane_reprs(&self, seq_of_seg: impl Fn(u64) -> crate::seq::Seq) -> Vec<LaneRepr> {
        let id = |p: Option<PathId>| p.map_or(NO_PATH, |p| p.0);
        let mut live: Vec<&Lane> = self.lanes.iter().filter(|l| l.remaining() > 0).collect();
        live.sort_by_key(|l| l.lo);
        live.truncate(MAX_LANES);
        live.into_iter()
            .map(|l| LaneRepr {
                lo: seq_of_seg(l.lo),
                hi: seq_of_seg(l.hi),
                bottom: id(l.bottom),
                top: id(l.top),
            })
            .collect()
    }
}

/// Splits `n` segments among paths in proportion to `rates` (eq. 4), by largest
/// remainder so the sizes add up to `n`; every path gets at least one segment while
/// segments last, so a path whose estimate is stale still gets probed.
pub(super) fn region_sizes(n: u64, rates: &[f64]) -> Vec<u64> {
    let k = rates.len() as u64;
    if k == 0 {
        return Vec::new();
    }
    if n <= k {
        return (0..k).map(|i| u64::from(i < n)).collect();
    }
    let floor_rate = 1e-9;
    let total: f64 = rates.iter().map(|r| r.max(floor_rate)).sum();
    let exact: Vec<f64> = rates.iter().map(|r| n as f64 * r.max(floor_rate) / total).collect();
    let mut sizes: Vec<u64> = exact.iter().map(|e| e.floor() as u64).collect();
    let mut left = n.saturating_sub(sizes.iter().sum::<u64>());
    let mut order: Vec<usize> = (0..rates.len()).collect();
    order.sort_by(|&a, &b| {
        (exact[b] - exact[b].floor())
            .total_cmp(&(exact[a] - exact[a].floor()))
            .then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        sizes[i] += 1;
        left -= 1;
    }
    // Every path gets a segment to be measured with, taken from the largest region.
    for i in 0..sizes.len() {
        if sizes[i] == 0 {
            let big = (0..sizes.len())
                .max_by_key(|&j| (sizes[j], std::cmp::Reverse(j)))
                .expect("non-empty");
            sizes[big] -= 1;
            sizes[i] = 1;
        }
    }
    sizes
}

/// The initial layout of a window of `n` segments starting at `seg_lo` over `ranked`
/// paths (most reliable first, with their rates). Returns the lanes and, per ranked path,
/// its lane end.
pub(super) fn initial_layout(seg_lo: u64, n: u64, ranked: &[(PathId, f64)]) -> (Vec<Lane>, Vec<(PathId, usize, End)>) {
    let rates: Vec<f64> = ranked.iter().map(|&(_, r)| r).collect();
    let sizes = region_sizes(n, &rates);
    let mut lanes = Vec::new();
    let mut ends = Vec::new();
    let mut at = seg_lo;
    for (i, (&(p, _), &size)) in ranked.iter().zip(&sizes).enumerate() {
        let (lo, hi) = (at, at + size);
        at = hi;
        match i {
            0 => {
                lanes.push(Lane {
                    lo,
                    hi,
                    bottom: Some(p),
                    top: None,
                });
                ends.push((p, 0, End::Bottom));
            }
            // Region 1 descends toward region 0's ascending pointer: one lane.
            1 => {
                lanes[0].hi = hi;
                lanes[0].top = Some(p);
                ends.push((p, 0, End::Top));
            }
            _ => {
                lanes.push(Lane {
                    lo,
                    hi,
                    bottom: None,
                    top: Some(p),
                });
                ends.push((p, lanes.len() - 1, End::Top));
            }
        }
    }
    (lanes, ends)
}

/// Splits a lane served at both ends so an idle path can help: the top server keeps a
/// part at the top sized by its rate share; the idle path takes the top end of what
/// remains, meeting the bottom server. Returns the new lane (for the old top server).
pub(super) fn split_lane(lane: &mut Lane, rate_bottom: f64, rate_top: f64, rate_idle: f64, idle: PathId) -> Lane {
    let n = lane.remaining();
    let total = (rate_bottom + rate_top + rate_idle).max(1e-9);
    let top_share = ((n as f64) * rate_top / total).round() as u64;
    // The idle path must get at least one segment (n ≥ 2 is checked by the caller).
    let top_share = top_share.min(n.saturating_sub(1));
    let cut = lane.hi - top_share;
    let upper = Lane {
        lo: cut,
        hi: lane.hi,
        bottom: None,
        top: lane.top,
    };
    lane.hi = cut;
    lane.top = Some(idle);
    upper
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_sizes_follow_rates_and_add_up() {
        assert_eq!(region_sizes(100, &[3.0, 1.0]), vec![75, 25]);
        assert_eq!(region_sizes(10, &[1.0, 1.0, 1.0]).iter().sum::<u64>(), 10);
        assert_eq!(region_sizes(2, &[1.0, 1.0, 1.0]), vec![1, 1, 0]);
        assert_eq!(region_sizes(5, &[0.0, 1.0]), vec![1, 4]);
    }

    #[test]
    fn two_paths_share_one_lane_from_both_ends() {
        let (lanes, ends) = initial_layout(10, 40, &[(PathId(1), 3.0), (PathId(0), 1.0)]);
        assert_eq!(
            lanes,
            vec![Lane {
                lo: 10,
                hi: 50,
                bottom: Some(PathId(1)),
                top: Some(PathId(0))
            }]
        );
        assert_eq!(ends, vec![(PathId(1), 0, End::Bottom), (PathId(0), 0, End::Top)]);
    }

    #[test]
    fn n_paths_follow_eq_4_and_5() {
        let ranked = [(PathId(0), 4.0), (PathId(1), 2.0), (PathId(2), 1.0), (PathId(3), 1.0)];
        let (lanes, _) = initial_layout(0, 80, &ranked);
        // Sizes 40/20/10/10 at offsets 0/40/60/70; regions 0 and 1 form lane 0.
        assert_eq!(
            lanes[0],
            Lane {
                lo: 0,
                hi: 60,
                bottom: Some(PathId(0)),
                top: Some(PathId(1))
            }
        );
        assert_eq!(
            lanes[1],
            Lane {
                lo: 60,
                hi: 70,
                bottom: None,
                top: Some(PathId(2))
            }
        );
        assert_eq!(
            lanes[2],
            Lane {
                lo: 70,
                hi: 80,
                bottom: None,
                top: Some(PathId(3))
            }
        );
    }

    #[test]
    fn split_gives_the_idle_path_the_middle() {
        let mut lane = Lane {
            lo: 0,
            hi: 100,
            bottom: Some(PathId(0)),
            top: Some(PathId(1)),
        };
        let upper = split_lane(&mut lane, 1.0, 1.0, 2.0, PathId(2));
        assert_eq!(
            upper,
            Lane {
                lo: 75,
                hi: 100,
                bottom: None,
                top: Some(PathId(1))
            }
        );
        assert_eq!(
            lane,
            Lane {
                lo: 0,
                hi: 75,
                bottom: Some(PathId(0)),
                top: Some(PathId(2))
            }
        );
        let mut lane = Lane {
            lo: 0,
            hi: 2,
            bottom: Some(PathId(0)),
            top: Some(PathId(1)),
        };
        let upper = split_lane(&mut lane, 0.0, 100.0, 0.0, PathId(2));
        assert_eq!((lane.remaining(), upper.remaining()), (1, 1));
    }
}
