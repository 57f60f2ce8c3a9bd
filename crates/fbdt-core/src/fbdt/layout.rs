//! Transmission windows and their layout: which path serves which part of a window, from
//! which end (journal sec. IV-B/C, eq. 4–5, Algorithm 1).
//!
//! A window's unsent segments are kept as *lanes*: contiguous ranges of segment indices
//! between a forward pointer (ascending) and a backward pointer (descending), each end
//! served by at most one path. With two paths there is one lane and this is exactly the
//! paper's forward/backward pair: the pointers meet wherever the two paths' speeds put
//! them. With N paths the initial layout is the paper's: regions sized by throughput share
//! (eq. 4) at cumulative offsets (eq. 5), the forward path ascending in region 0 and each
//! backward path descending from the end of its region; regions 0 and 1 form one lane
//! because their pointers move toward each other.

use crate::path::PathId;
use crate::time::Instant;
use crate::wire::{LaneRepr, MAX_LANES, NO_PATH};

/// The end of a lane a path serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// Ascending from the lane's start: the forward pointer (the paper's forward path in
    /// the first lane).
    Forward,
    /// Descending from the lane's end: the backward pointer (the paper's backward paths).
    Backward,
}

/// A lane of a window: the unsent segments between two pointers.
///
/// Glossary (journal sec. IV-B): the *forward pointer* is the next segment the path at the
/// [`End::Forward`] end sends, and moves up; the *backward pointer* is one past the next
/// segment the path at the [`End::Backward`] end sends, and moves down; the lane is handed
/// out when the pointers meet. Which path serves which end is not stored here but in the
/// sender's per-path work (`sender::lanes`), the one record of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Lane {
    pub forward: u64,
    pub backward: u64,
}

impl Lane {
    /// Unsent segments left between the pointers.
    pub fn remaining(&self) -> u64 {
        self.backward - self.forward
    }
    /// Hands out the next segment from `end`, moving its pointer, if any is left.
    pub fn take(&mut self, end: End) -> Option<u64> {
        let idx = self.peek(end)?;
        match end {
            End::Forward => self.forward += 1,
            End::Backward => self.backward -= 1,
        }
        Some(idx)
    }
    /// The segment `end` would send next.
    pub fn peek(&self, end: End) -> Option<u64> {
        (self.forward < self.backward).then(|| match end {
            End::Forward => self.forward,
            End::Backward => self.backward - 1,
        })
    }
}

/// Where a path works: one end of one lane of one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LaneEnd {
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
    /// Unsent segments left in all lanes: the sum of their `remaining`, kept as segments
    /// are handed out (a split keeps it), so that `unsent_below` need not walk the lanes
    /// of every window at every poll.
    pub unsent: u64,
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
        self.lanes.iter().any(|l| l.remaining() > 0)
    }

    /// The lanes still holding unsent segments, lowest first, at most [`MAX_LANES`]
    /// (splits can leave more; the receiver needs only the window bounds, so a long layout
    /// is cut rather than refused). `server(lane, end)` names the path at each end.
    pub fn lane_reprs(
        &self,
        seq_of_seg: impl Fn(u64) -> crate::seq::Seq,
        server: impl Fn(usize, End) -> Option<PathId>,
    ) -> Vec<LaneRepr> {
        let id = |p: Option<PathId>| p.map_or(NO_PATH, |p| p.0);
        let mut live: Vec<(usize, &Lane)> = self
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| l.remaining() > 0)
            .collect();
        live.sort_by_key(|(_, l)| l.forward);
        live.truncate(MAX_LANES);
        live.into_iter()
            .map(|(i, l)| LaneRepr {
                lo: seq_of_seg(l.forward),
                hi: seq_of_seg(l.backward),
                bottom: id(server(i, End::Forward)),
                top: id(server(i, End::Backward)),
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
/// its lane and end: the forward path at the forward end of lane 0, every other path at
/// the backward end of its region.
pub(super) fn initial_layout(seg_lo: u64, n: u64, ranked: &[(PathId, f64)]) -> (Vec<Lane>, Vec<(PathId, usize, End)>) {
    let rates: Vec<f64> = ranked.iter().map(|&(_, r)| r).collect();
    let sizes = region_sizes(n, &rates);
    let mut lanes: Vec<Lane> = Vec::new();
    let mut ends = Vec::new();
    let mut at = seg_lo;
    for (i, (&(p, _), &size)) in ranked.iter().zip(&sizes).enumerate() {
        let (forward, backward) = (at, at + size);
        at = backward;
        match i {
            0 => {
                lanes.push(Lane { forward, backward });
                ends.push((p, 0, End::Forward));
            }
            // Region 1's backward pointer descends toward region 0's forward one: one lane.
            1 => {
                lanes[0].backward = backward;
                ends.push((p, 0, End::Backward));
            }
            _ => {
                lanes.push(Lane { forward, backward });
                ends.push((p, lanes.len() - 1, End::Backward));
            }
        }
    }
    (lanes, ends)
}

/// Splits a lane served at both ends so an idle path can help. The backward server keeps a
/// part at the top sized by its rate share, returned as a new lane (its backward pointer
/// unchanged, nobody at its forward end); `lane` keeps the rest, whose new backward end
/// the idle path takes, meeting the forward server.
pub(super) fn split_lane(lane: &mut Lane, rate_forward: f64, rate_backward: f64, rate_idle: f64) -> Lane {
    let n = lane.remaining();
    let total = (rate_forward + rate_backward + rate_idle).max(1e-9);
    let top_share = ((n as f64) * rate_backward / total).round() as u64;
    // The idle path must get at least one segment (n ≥ 2 is checked by the caller).
    let top_share = top_share.min(n.saturating_sub(1));
    let cut = lane.backward - top_share;
    let upper = Lane {
        forward: cut,
        backward: lane.backward,
    };
    lane.backward = cut;
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

    fn lane(forward: u64, backward: u64) -> Lane {
        Lane { forward, backward }
    }

    #[test]
    fn two_paths_share_one_lane_from_both_ends() {
        let (lanes, ends) = initial_layout(10, 40, &[(PathId(1), 3.0), (PathId(0), 1.0)]);
        assert_eq!(lanes, vec![lane(10, 50)]);
        assert_eq!(ends, vec![(PathId(1), 0, End::Forward), (PathId(0), 0, End::Backward)]);
    }

    #[test]
    fn n_paths_follow_eq_4_and_5() {
        let ranked = [(PathId(0), 4.0), (PathId(1), 2.0), (PathId(2), 1.0), (PathId(3), 1.0)];
        let (lanes, ends) = initial_layout(0, 80, &ranked);
        // Sizes 40/20/10/10 at offsets 0/40/60/70; regions 0 and 1 form lane 0.
        assert_eq!(lanes, vec![lane(0, 60), lane(60, 70), lane(70, 80)]);
        assert_eq!(
            ends,
            vec![
                (PathId(0), 0, End::Forward),
                (PathId(1), 0, End::Backward),
                (PathId(2), 1, End::Backward),
                (PathId(3), 2, End::Backward)
            ]
        );
    }

    #[test]
    fn split_gives_the_idle_path_the_middle() {
        let mut l = lane(0, 100);
        let upper = split_lane(&mut l, 1.0, 1.0, 2.0);
        assert_eq!((l, upper), (lane(0, 75), lane(75, 100)));
        let mut l = lane(0, 2);
        let upper = split_lane(&mut l, 0.0, 100.0, 0.0);
        assert_eq!((l.remaining(), upper.remaining()), (1, 1));
    }

    #[test]
    fn pointers_move_toward_each_other_and_meet() {
        let mut l = lane(5, 8);
        assert_eq!(l.take(End::Forward), Some(5));
        assert_eq!(l.take(End::Backward), Some(7));
        assert_eq!(l.peek(End::Backward), Some(6));
        assert_eq!(l.take(End::Forward), Some(6));
        assert_eq!((l.remaining(), l.take(End::Backward)), (0, None));
    }
}
