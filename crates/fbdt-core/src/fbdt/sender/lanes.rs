//! Lane assignment: which path serves which lane end.
//!
//! The one record of it is per path: `work` (the lane end it takes segments from) and
//! `reserved` (a lane end in a newer window it moves to when its lane is handed out). Who
//! serves a lane end — for ALIGN, for joining a free end, for splitting a lane — is
//! derived from those ([`FbdtSender::server`]).

use super::FbdtSender;
use crate::fbdt::layout::{split_lane, End, Lane, LaneEnd};
use crate::path::PathId;
use crate::time::Instant;

/// The segment a path sends next from its lane: `idx` at the end `at`, in the window at
/// position `pos`.
pub(super) struct LaneSegment {
    pub pos: usize,
    pub at: LaneEnd,
    pub idx: u64,
}

impl FbdtSender {
    /// The path serving `end` of lane `lane` in window `window`, if any.
    pub(super) fn server(&self, window: u32, lane: usize, end: End) -> Option<PathId> {
        let at = Some(LaneEnd { window, lane, end });
        self.paths
            .iter()
            .position(|t| t.work == at || t.reserved == at)
            .map(PathId::slot)
    }

    /// `p`'s next segment from its current lane end, if that lane has one left.
    fn current_segment(&self, p: PathId) -> Option<LaneSegment> {
        let at = self.paths[p.index()].work?;
        let pos = self.window_pos(at.window)?;
        let idx = self.windows[pos].lanes[at.lane].peek(at.end)?;
        Some(LaneSegment { pos, at, idx })
    }

    pub(super) fn has_current_work(&self, p: PathId) -> bool {
        self.current_segment(p).is_some()
    }

    /// The segment `p` should send next from its lane, assigning work if needed: its
    /// current lane end, else the one reserved for it, else a free end, a split or a new
    /// window (`find_work`). A segment the lane's other end delivers sooner is left to it
    /// (`arrival`): `p` leaves that end and looks further on.
    pub(super) fn lane_segment(&mut self, p: PathId, now: Instant) -> Option<LaneSegment> {
        // Each round either returns, or moves `p` on (a reservation taken, an end left,
        // work found): a handful of rounds covers leaving an end and starting a new
        // window; the next poll continues from there.
        for _ in 0..6 {
            if let Some(next) = self.current_segment(p) {
                if self.arrives_in_time(p, next.pos, next.at, next.idx) {
                    return Some(next);
                }
                self.paths[p.index()].work = None;
                self.stats.arrival_yields += 1;
            }
            let t = &mut self.paths[p.index()];
            if let Some(r) = t.reserved.take() {
                t.work = Some(r);
                continue;
            }
            t.work = None;
            if !self.find_work(p, now) {
                return None;
            }
        }
        None
    }

    /// Gives idle path `p` work: a free lane end it delivers in time, in the oldest window
    /// that has one, else part of the slowest lane of the newest window (re-alignment),
    /// else a new window — also while older windows still have unsent segments that the
    /// other paths deliver sooner (`p` works ahead).
    fn find_work(&mut self, p: PathId, now: Instant) -> bool {
        let found = (0..self.windows.len())
            .find_map(|pos| self.free_end(p, pos).map(|at| (pos, at)))
            .or_else(|| self.split_for(p));
        let Some((pos, at)) = found else {
            // Nothing written beyond the windows (the direction that only carries
            // requests, mostly): `load_ahead` and `load_window` would load nothing, so
            // their arrival estimates are not worth making at every poll.
            if !self.has_data_to_load() {
                return false;
            }
            self.load_ahead(p, now);
            return self.new_window_in_time(p) && self.load_window(p, now);
        };
        self.paths[p.index()].work = Some(at);
        self.stats.realignments += 1;
        self.queue_align(pos);
        true
    }

    /// Whether a window older than the one at `pos` has a lane end with segments left
    /// that no path serves.
    pub(super) fn has_unserved_end_before(&self, pos: usize) -> bool {
        self.windows.iter().take(pos).any(|w| {
            w.lanes.iter().enumerate().any(|(i, l)| {
                [End::Forward, End::Backward]
                    .into_iter()
                    .any(|end| l.peek(end).is_some() && self.server(w.id, i, end).is_none())
            })
        })
    }

    /// Time until lane `i` of the window at `pos` is handed out at its servers' rates.
    fn lane_eta(&self, pos: usize, i: usize) -> f64 {
        let id = self.windows[pos].id;
        let rate: f64 = [End::Forward, End::Backward]
            .into_iter()
            .filter_map(|end| self.server(id, i, end))
            .map(|q| self.layout_rate(q))
            .sum();
        let seg_bytes = self.params.segment_size as f64;
        self.windows[pos].lanes[i].remaining() as f64 * seg_bytes / rate.max(1e-9)
    }

    /// The slowest lane of the window at `pos` among those `fits` says something of, with
    /// what it said: the longest `lane_eta`, the lowest index among equal ones.
    fn slowest_lane<T>(&self, pos: usize, fits: impl Fn(usize, &Lane) -> Option<T>) -> Option<(usize, T)> {
        let mut slowest: Option<(usize, f64, T)> = None;
        for (i, l) in self.windows[pos].lanes.iter().enumerate() {
            let Some(x) = fits(i, l) else {
                continue;
            };
            let eta = self.lane_eta(pos, i);
            // Strictly slower only: on a tie the lower index, found first, stays.
            if slowest.as_ref().is_none_or(|s| eta.total_cmp(&s.1).is_gt()) {
                slowest = Some((i, eta, x));
            }
        }
        slowest.map(|(i, _, x)| (i, x))
    }

    /// A lane end nobody serves in the window at `pos` whose next segment `p` delivers in
    /// time: the slowest such lane's. Each lane's arrival check is made once (it was made
    /// again for the lane chosen).
    fn free_end(&self, p: PathId, pos: usize) -> Option<LaneEnd> {
        let id = self.windows[pos].id;
        let open = |i: usize, l: &Lane| {
            let end = [End::Forward, End::Backward]
                .into_iter()
                .find(|&end| self.server(id, i, end).is_none())?;
            let at = LaneEnd {
                window: id,
                lane: i,
                end,
            };
            let idx = l.peek(end)?;
            self.arrives_in_time(p, pos, at, idx).then_some(at)
        };
        self.slowest_lane(pos, open).map(|(_, at)| at)
    }

    /// Splits the slowest lane of the newest window that has two segments or more, if `p`
    /// delivers the first segment of its part in time: `p` takes the backward end of the
    /// lower part, meeting the forward server; the backward server keeps the upper part.
    fn split_for(&mut self, p: PathId) -> Option<(usize, LaneEnd)> {
        let pos = self.windows.len().checked_sub(1)?;
        let id = self.windows[pos].id;
        let (i, ()) = self.slowest_lane(pos, |_, l| (l.remaining() >= 2).then_some(()))?;
        let forward = self.server(id, i, End::Forward);
        let backward = self.server(id, i, End::Backward);
        let rate = |q: Option<PathId>| q.map_or(0.0, |q| self.layout_rate(q));
        let (rf, rb, rp) = (rate(forward), rate(backward), self.layout_rate(p).max(1.0));
        let mut lower = self.windows[pos].lanes[i].clone();
        let upper = split_lane(&mut lower, rf, rb, rp);
        let at = LaneEnd {
            window: id,
            lane: i,
            end: End::Backward,
        };
        if !self.arrives_in_time(p, pos, at, lower.backward - 1) {
            return None;
        }
        self.windows[pos].lanes[i] = lower;
        self.windows[pos].lanes.push(upper);
        // The backward server keeps its pointer, which now bounds the upper lane.
        let upper = self.windows[pos].lanes.len() - 1;
        if let Some(q) = backward {
            let t = &mut self.paths[q.index()];
            for held in [&mut t.work, &mut t.reserved].into_iter().flatten() {
                if *held == at {
                    held.lane = upper;
                }
            }
        }
        Some((pos, at))
    }
}
