//! Window loading: how large the next window is, which paths share it in which order
//! (forward path first), its initial layout, and the ALIGN that tells the receiver.

use super::{FbdtSender, Seg, SegState};
use crate::fbdt::config::WindowConfig;
use crate::fbdt::layout::{initial_layout, LaneEnd, Window};
use crate::path::PathId;
use crate::time::Instant;
use crate::wire::Align;

/// A path whose base RTT exceeds the shortest one's × this + [`FAR_RTT_SLACK`] is
/// never the forward path while a nearer one flows.
const FAR_RTT_FACTOR: f64 = 2.0;
const FAR_RTT_SLACK: crate::time::Duration = crate::time::Duration::from_millis(10);

impl FbdtSender {
    /// Rate used for layout decisions: measured, else the driver's, else the mean of the
    /// others (so an unmeasured path gets a fair share to be measured with).
    pub(super) fn layout_rate(&self, p: PathId) -> f64 {
        let t = &self.paths[p.index()];
        if t.stalled || !t.alive {
            return 0.0;
        }
        if let Some(r) = t.est.rate_bps() {
            return r;
        }
        let known = || self.paths.iter().filter(|t| t.alive).filter_map(|t| t.est.rate_bps());
        match known().count() {
            0 => 1.0,
            n => known().sum::<f64>() / n as f64,
        }
    }

    pub(super) fn target_window(&self) -> usize {
        match self.cfg.window {
            WindowConfig::Fixed(w) => w,
            WindowConfig::Auto {
                factor,
                min,
                max,
                initial,
            } => {
                // The aggregate rate times the longest RTT: a path's segments at the back of
                // the window are then due before the others reach them, so a slow-RTT path
                // does not hold every window's delivery for its RTT.
                let (mut rate, mut rtt, mut known) = (0.0, 0.0f64, false);
                for t in self.paths.iter().filter(|t| t.flows()) {
                    if let Some(r) = t.est.rate_bps() {
                        rate += r;
                        rtt = rtt.max(t.est.rtt().as_secs_f64());
                        known = true;
                    }
                }
                if known {
                    ((factor * rate * rtt) as usize).clamp(min, max)
                } else {
                    initial
                }
            }
            WindowConfig::Budget { delay, max } => {
                let flowing = self.paths.iter().filter(|t| t.flows());
                let lanes = flowing.clone().count().max(1);
                // (Summed in place: this runs at nearly every poll.)
                let mut rates = flowing.filter_map(|t| t.est.rate_bps()).peekable();
                let min = (2 * lanes * self.params.segment_size).min(max);
                // Before any rate is measured, the smallest window: a guess sized for a fast
                // host (1 MiB) held the first quarter second's delivery on a 30 Mbit/s pair
                // of paths behind its slower lane.
                let wanted = if rates.peek().is_none() {
                    min
                } else {
                    (rates.sum::<f64>() * delay.as_secs_f64()) as usize
                };
                wanted.clamp(min, max)
            }
        }
    }

    /// Live paths ranked by reliability (forward first), with their layout rates; without
    /// `excluded`.
    pub(super) fn ranked_paths(
        &mut self,
        requester: PathId,
        excluded: Option<PathId>,
        now: Instant,
    ) -> Vec<(PathId, f64)> {
        let mut ranked: Vec<(PathId, f64)> = (0..self.paths.len())
            .map(PathId::slot)
            .filter(|&p| {
                let t = &self.paths[p.index()];
                t.alive && (!t.stalled || p == requester) && Some(p) != excluded
            })
            .map(|p| (p, self.paths[p.index()].est.score(now)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if let Some(fwd) = self.forward {
            if let Some(pos) = ranked.iter().position(|&(p, _)| p == fwd) {
                let (challenger, lead) = ranked[0];
                // The forward path keeps its place unless a challenger has outscored it by
                // the factor at every window load for `forward_hold`.
                if ranked[pos].1 * self.cfg.forward_hysteresis >= lead {
                    self.forward_challenger = None;
                } else if self.forward_challenger.is_none_or(|(c, _)| c != challenger) {
                    self.forward_challenger = Some((challenger, now));
                }
                let held_long_enough = self
                    .forward_challenger
                    .is_some_and(|(_, since)| now >= since + self.cfg.forward_hold);
                if !held_long_enough {
                    let keep = ranked.remove(pos);
                    ranked.insert(0, keep);
                }
            }
        }
        // The forward path serves the head of every window: one whose round trip is far
        // longer than the shortest (tc-delay-wigig's 1 s WiGig beside 4 ms WiFi) would
        // hold every window's delivery for it, however fast it is. Such paths rank last
        // (with the arrival rule; `auto` and `paper` keep the paper's ranking).
        let shortest = ranked
            .iter()
            .map(|&(p, _)| self.paths[p.index()].est.base_rtt())
            .min()
            .filter(|_| self.meets_by_arrival());
        if let Some(shortest) = shortest {
            let far = shortest.mul_f64(FAR_RTT_FACTOR) + FAR_RTT_SLACK;
            ranked.sort_by_key(|&(p, _)| self.paths[p.index()].est.base_rtt() > far);
        }
        if ranked.first().map(|&(p, _)| p) != self.forward {
            self.forward_challenger = None;
        }
        if let Some(&(first, _)) = ranked.first() {
            if self.forward.is_some_and(|f| f != first) {
                self.stats.forward_changes += 1;
            }
            self.forward = Some(first);
        }
        ranked
            .into_iter()
            .map(|(p, _)| (p, self.layout_rate(p).max(1.0)))
            .collect()
    }

    /// Written bytes not in a window yet, or a stream end not loaded yet: what a window
    /// loaded now would hold.
    /// How many written bytes may wait outside any window (`FbdtConfig::unsent_budget`):
    /// the live paths' summed drain rate over the budget, and at least two windows so the
    /// next one always loads whole.
    pub(super) fn unsent_allowance(&self) -> u64 {
        let Some(budget) = self.cfg.unsent_budget else {
            return u64::MAX;
        };
        let rate: f64 = self
            .paths
            .iter()
            .filter(|t| t.flows())
            .filter_map(|t| t.est.drain_rate_bps())
            .sum();
        let floor = 2 * self.target_window().max(self.params.segment_size) as u64;
        ((rate * budget.as_secs_f64()) as u64).max(floor)
    }

    pub(super) fn has_data_to_load(&self) -> bool {
        self.stream.written() > self.loaded || (self.stream.is_finished() && !self.fin_loaded)
    }

    /// Loads the next window if data and the peer's receive window allow.
    pub(super) fn load_window(&mut self, requester: PathId, now: Instant) -> bool {
        self.load_window_for(requester, true, now)
    }

    /// Loads the next window, laid out over every flowing path, `requester` among them
    /// only if `with_requester` (a path working ahead loads windows for the others).
    pub(super) fn load_window_for(&mut self, requester: PathId, with_requester: bool, now: Instant) -> bool {
        if !self.has_data_to_load() {
            return false;
        }
        let avail = self.stream.written() - self.loaded;
        let limit = self.right_edge.saturating_sub(self.loaded);
        let target = self.target_window() as u64;
        let wanted = target.min(avail);
        // The window is cut short by the peer's receive window, or by our own send buffer
        // being full of unacknowledged data: either way data is held behind a hole, so the
        // segments at the bottom are worth re-sending (`rescue_segment`).
        let buffer_full = self.stream.queued() + self.params.segment_size > self.params.send_buffer;
        let blocked = limit < wanted || (avail < target && buffer_full);
        if blocked && !self.flow_blocked {
            self.stats.window_stalls += 1;
        }
        self.flow_blocked = blocked;
        if avail > 0 && limit == 0 {
            return false;
        }
        let size = wanted.min(limit);
        let id = self.next_window_id;
        self.next_window_id = self.next_window_id.wrapping_add(1);
        let seg_lo = self.seg_base + self.segs.len() as u64;
        let off_lo = self.loaded;
        let seg_size = self.params.segment_size as u64;
        let mut off = self.loaded;
        let end = self.loaded + size;
        loop {
            let len = (end - off).min(seg_size);
            let fin = self.stream.is_finished() && off + len == self.stream.written();
            self.segs.push_back(Seg {
                off,
                len: len as u32,
                fin,
                window: id,
                state: SegState::Unsent,
            });
            off += len;
            self.fin_loaded |= fin;
            if off >= end {
                break;
            }
        }
        self.loaded = end;
        let seg_hi = self.seg_base + self.segs.len() as u64;
        let excluded = (!with_requester).then_some(requester);
        let ranked = self.ranked_paths(requester, excluded, now);
        let (lanes, ends) = initial_layout(seg_lo, seg_hi - seg_lo, &ranked);
        let unsent = lanes.iter().map(|l| l.remaining()).sum();
        self.unsent += unsent;
        self.windows.push_back(Window {
            id,
            seg_lo,
            seg_hi,
            off_lo,
            off_hi: end,
            lanes,
            unsent,
            handed_out_at: None,
            unacked: seg_hi - seg_lo,
            scan_from: seg_lo,
            deadlines: std::cell::Cell::new(None),
        });
        // An idle path starts on its lane end; one still busy in an older window gets it
        // reserved for later, unless it holds a reservation already. With the arrival
        // rule nothing is reserved, and idle paths start here only if no older window has
        // a lane end nobody serves: a path that finishes its lane end looks for the next
        // one oldest window first (`find_work`), so nobody skips the windows a path
        // working ahead loaded in between.
        let by_arrival = self.meets_by_arrival();
        let older_free = by_arrival && self.has_unserved_end_before(self.windows.len() - 1);
        for (q, lane, end) in ends {
            let at = LaneEnd { window: id, lane, end };
            let t = &self.paths[q.index()];
            if (q == requester && with_requester) || (!older_free && !self.has_current_work(q)) {
                self.paths[q.index()].work = Some(at);
            } else if !by_arrival && t.reserved.is_none() {
                self.paths[q.index()].reserved = Some(at);
            }
        }
        self.stats.windows_loaded += 1;
        let pos = self.windows.len() - 1;
        self.queue_align(pos);
        true
    }

    pub(super) fn queue_align(&mut self, pos: usize) {
        let w = &self.windows[pos];
        // Lane bounds of exhausted lanes may name segments already acknowledged and
        // dropped; those lanes are empty, so any offset inside the window will do.
        let seq_of_seg = |idx: u64| {
            let off = if idx >= w.seg_hi {
                w.off_hi
            } else if idx < self.seg_base {
                self.stream.una().clamp(w.off_lo, w.off_hi)
            } else {
                self.seg(idx).off
            };
            self.space.seq(off)
        };
        let align = Align {
            window_id: w.id,
            start: seq_of_seg(w.seg_lo),
            end: seq_of_seg(w.seg_hi),
            lanes: w.lane_reprs(seq_of_seg, |lane, end| self.server(w.id, lane, end)),
        };
        // Only the newest layout matters to the receiver; drop superseded ones.
        self.aligns.retain(|a| a.window_id != w.id);
        self.aligns.push_back(align);
    }
}
