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
            .map(|i| PathId(i as u8))
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
    /// current lane end, else the one reserved for it, else a free end or a split of the
    /// newest window, else a new window.
    pub(super) fn lane_segment(&mut self, p: PathId, now: Instant) -> Option<LaneSegment> {
        if let Some(next) = self.current_segment(p) {
            return Some(next);
        }
        let t = &mut self.paths[p.index()];
        t.work = t.reserved.take();
        if let Some(next) = self.current_segment(p) {
            return Some(next);
        }
        self.paths[p.index()].work = None;
        if !self.find_work(p, now) {
            return None;
        }
        if let Some(next) = self.current_segment(p) {
            return Some(next);
        }
        // A new window gave `p` an empty region (fewer segments than paths): look again,
        // now for a share of that window.
        self.paths[p.index()].work = None;
        if !self.find_work(p, now) {
            return None;
        }
        self.current_segment(p)
    }

    /// Gives idle path `p` work in the newest window: a free lane end, else part of the
    /// slowest lane (re-alignment), else a new window.
    fn find_work(&mut self, p: PathId, now: Instant) -> bool {
        let Some(pos) = self
            .windows
            .len()
            .checked_sub(1)
            .filter(|&i| self.windows[i].has_unsent())
        else {
            return self.load_window(p, now);
        };
        let id = self.windows[pos].id;
        let servers = |s: &Self, i: usize| [s.server(id, i, End::Forward), s.server(id, i, End::Backward)];
        let seg_bytes = self.params.segment_size as f64;
        // Time until the lane's pointers meet at its servers' rates.
        let eta = |s: &Self, i: usize, l: &Lane| {
            let rate: f64 = servers(s, i).iter().flatten().map(|&q| s.layout_rate(q)).sum();
            l.remaining() as f64 * seg_bytes / rate.max(1e-9)
        };
        let slowest = |s: &Self, enough: &dyn Fn(usize, &Lane) -> bool| {
            s.windows[pos]
                .lanes
                .iter()
                .enumerate()
                .filter(|&(i, l)| enough(i, l))
                .max_by(|a, b| eta(s, a.0, a.1).total_cmp(&eta(s, b.0, b.1)).then(b.0.cmp(&a.0)))
                .map(|(i, _)| i)
        };
        let free = slowest(self, &|i, l| {
            l.remaining() > 0 && servers(self, i).iter().any(Option::is_none)
        });
        let at = if let Some(i) = free {
            let end = if self.server(id, i, End::Forward).is_none() {
                End::Forward
            } else {
                End::Backward
            };
            LaneEnd {
                window: id,
                lane: i,
                end,
            }
        } else {
            let Some(i) = slowest(self, &|_, l| l.remaining() >= 2) else {
                return false;
            };
            let [forward, backward] = servers(self, i);
            let rate = |q: Option<PathId>| q.map_or(0.0, |q| self.layout_rate(q));
            let (rf, rb, rp) = (rate(forward), rate(backward), self.layout_rate(p).max(1.0));
            let upper = split_lane(&mut self.windows[pos].lanes[i], rf, rb, rp);
            self.windows[pos].lanes.push(upper);
            // The backward server keeps its pointer, which now bounds the upper lane.
            let upper = self.windows[pos].lanes.len() - 1;
            if let Some(q) = backward {
                let t = &mut self.paths[q.index()];
                for at in [&mut t.work, &mut t.reserved].into_iter().flatten() {
                    if *at
                        == (LaneEnd {
                            window: id,
                            lane: i,
                            end: End::Backward,
                        })
                    {
                        at.lane = upper;
                    }
                }
            }
            LaneEnd {
                window: id,
                lane: i,
                end: End::Backward,
            }
        };
        self.paths[p.index()].work = Some(at);
        self.stats.realignments += 1;
        self.queue_align(pos);
        true
    }
}
