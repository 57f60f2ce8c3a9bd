//! One frame out: a pending ALIGN, else a segment to re-send (`rescue`), else the next
//! segment of the path's lane (`lanes`), within the path's send limit.

use super::rescue::RescueScope;
use super::{FbdtSender, HeldCopy, IdlePoll, Resend, SegState};
use crate::path::PathId;
use crate::time::Instant;
use crate::wire::{Data, Frame, FrameOut};

impl FbdtSender {
    /// One frame for `path` into `out` (a `Vec` for `poll_transmit`, a `FrameBuf` for
    /// `poll_transmit_buf`): the two differ only in whether the payload is copied.
    ///
    /// A driver polls every path at every event, and most polls find nothing to send (the
    /// path is at its send limit): a poll that found nothing and changed nothing is
    /// remembered (`IdlePoll`), and the next one returns at once while nothing it looked
    /// at has changed. Debug builds make the full poll anyway and check it agrees.
    pub(super) fn transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        self.ensure_path(path);
        if !self.paths[path.index()].alive {
            return 0;
        }
        self.checked_until = self.checked_until.max(now);
        let unchanged = self.paths[path.index()]
            .idle
            .is_some_and(|idle| idle.holds(self.changes, room, now));
        if unchanged && !cfg!(debug_assertions) {
            return 0;
        }
        let before = self.poll_marks(path);
        let mut idle = None;
        let n = self.poll_frame(path, room, now, out, &mut idle);
        let quiet = n == 0 && self.poll_marks(path) == before;
        debug_assert!(
            quiet || !unchanged,
            "a poll skipped as unchanged would have sent or changed state"
        );
        if !quiet {
            self.changes += 1;
        }
        let changes = self.changes;
        self.paths[path.index()].idle = idle.filter(|_| quiet).map(|(room_needed, until)| IdlePoll {
            changes,
            room_needed,
            until,
        });
        n
    }

    /// What a poll that sends nothing may still change (a lane end left or taken, a
    /// window loaded or a split, flow control noticed, a dead holders' scan finished): the
    /// same before and after means the poll changed nothing but `checked_until`.
    fn poll_marks(&self, p: PathId) -> impl PartialEq {
        let t = &self.paths[p.index()];
        let s = &self.stats;
        (
            (t.work, t.reserved),
            (s.arrival_yields, s.realignments, s.windows_loaded, s.window_stalls),
            (self.next_window_id, self.flow_blocked, self.dead_holders),
        )
    }

    /// [`FbdtSender::transmit`]'s full poll. When it sends nothing, `idle` says for how
    /// long it would keep sending nothing while the sender's state stays as it is: until
    /// `room` reaches the first element (`usize::MAX`: no room is enough) and, if the
    /// second is set, until that instant (a redundancy deadline).
    fn poll_frame(
        &mut self,
        path: PathId,
        room: usize,
        now: Instant,
        out: &mut impl FrameOut,
        idle: &mut Option<(usize, Option<Instant>)>,
    ) -> usize {
        if let Some(a) = self.aligns.front() {
            let frame = Frame::Align(a.clone());
            if frame.buffer_len() > room {
                return 0;
            }
            out.put_inline(|v| frame.emit(v));
            self.aligns.pop_front();
            return frame.buffer_len();
        }
        let mut payload_room = room.saturating_sub(Data::OVERHEAD);
        let mut allowed = usize::MAX;
        if let Some(limit) = self.path_send_limit(path) {
            allowed = limit.saturating_sub(self.paths[path.index()].in_flight()) as usize;
            payload_room = payload_room.min(allowed);
        }
        let scope = self.rescue_scope(path, now);
        // Only a scan that looks into no window is sure to find nothing until a deadline.
        let quiet_until = match scope {
            RescueScope::Nothing { until } => Some(until),
            _ => None,
        };
        match self.rescue_segment_in(scope, path, now) {
            Some((idx, why)) => {
                let len = self.seg(idx).len;
                if len as usize > payload_room || room < Data::OVERHEAD {
                    return 0;
                }
                if why == Resend::Redundant {
                    self.optional_resent += u64::from(len);
                }
                return self.emit_segment(path, idx, now, out);
            }
            None => self.rescue_scan_found_nothing(),
        }
        let Some(next) = self.lane_segment(path, now) else {
            *idle = quiet_until.map(|until| (usize::MAX, until));
            return 0;
        };
        let len = self.seg(next.idx).len as usize;
        if len > payload_room || room < Data::OVERHEAD {
            let room_needed = if len > allowed {
                usize::MAX
            } else {
                Data::OVERHEAD + len
            };
            *idle = quiet_until.map(|until| (room_needed, until));
            return 0;
        }
        let w = &mut self.windows[next.pos];
        let taken = w.lanes[next.at.lane].take(next.at.end);
        debug_assert_eq!(taken, Some(next.idx));
        w.unsent -= 1;
        self.unsent -= 1;
        if !w.has_unsent() {
            // The pointers met: from now on its copies may be sent redundantly.
            w.handed_out_at = Some(now);
            w.deadlines.set(None);
        }
        self.emit_segment(path, next.idx, now, out)
    }

    /// Most payload bytes `p` may hold undelivered (spec decision 6: the paper's
    /// per-direction send window = the TCP connection's window, plus a small backlog so the
    /// pipe never runs dry): `send_limit_windows` × the path's window (cwnd, or rate ×
    /// srtt; with the arrival rule at most drain rate × base RTT) plus what arrives between
    /// two of the receiver's ACKs (`ack_every` frames and `ack_bytes`, at least two
    /// segments): bytes that arrived wait that long to be counted delivered;
    /// unlimited while the driver reports nothing.
    pub(super) fn path_send_limit(&self, p: PathId) -> Option<u64> {
        let d = &self.paths[p.index()].est.driver;
        let bdp = d.delivery_rate_bps.zip(d.srtt).map(|(r, s)| r / 8.0 * s.as_secs_f64());
        let window = match (d.cwnd_bytes, bdp) {
            (Some(c), Some(b)) => (c as f64).max(b),
            (Some(c), None) => c as f64,
            (None, Some(b)) => b,
            (None, None) => return None,
        };
        // With the arrival rule, no more than the path's bandwidth-delay product at its
        // base RTT either: Cubic's window grows into the bottleneck queue, and every byte
        // of it is delay. 1.25 × the BDP queues at most a quarter of the base RTT and still
        // probes: the path then delivers up to 1.25 × the rate measured, so the measure
        // (and the limit) grows each round trip until the path's capacity.
        let t = &self.paths[p.index()];
        let window = match t.est.drain_rate_bps().filter(|_| self.meets_by_arrival()) {
            Some(rate) => window.min(rate * t.est.base_rtt().as_secs_f64()),
            None => window,
        };
        Some((self.cfg.send_limit_windows * window) as u64 + self.bytes_per_ack())
    }

    /// Payload bytes that arrive on one path between two of its ACKs: `ack_every` frames
    /// and at least `ack_bytes` (the receiver's rule, which a sender assumes its peer
    /// shares, as it does `max_ack_delay`). Two segments before issue 37.
    fn bytes_per_ack(&self) -> u64 {
        let frames = u64::from(self.params.ack_every) * self.params.segment_size as u64;
        frames.max(self.params.ack_bytes as u64)
    }

    pub(super) fn emit_segment(&mut self, p: PathId, idx: u64, now: Instant, out: &mut impl FrameOut) -> usize {
        let seg = self.seg(idx).clone();
        let expect = now + self.delivery_delay(p);
        let start = (seg.off - self.una) as usize;
        let len = seg.len as usize;
        out.put_inline(|v| Data::emit_header(self.space.seq(seg.off), seg.fin, len, v));
        // The payload as slices of the send buffer: shared into a FrameBuf, copied into a Vec.
        self.buf.slices(start, len, |b| out.put_shared(b));
        let state = match seg.state {
            SegState::Unsent => {
                self.stats.bytes_sent += len as u64;
                SegState::Sent {
                    holders: p.bit(),
                    last_holder: p,
                    first_sent: now,
                    last_sent: now,
                    expect,
                    end: 0,
                    copies: 1,
                }
            }
            SegState::Sent {
                holders,
                first_sent,
                copies,
                ..
            } => {
                self.stats.redundant_bytes_sent += len as u64;
                SegState::Sent {
                    holders: holders | p.bit(),
                    last_holder: p,
                    first_sent,
                    last_sent: now,
                    expect,
                    end: 0,
                    copies: copies.saturating_add(1),
                }
            }
            SegState::Acked => unreachable!("acked segments are never selected"),
        };
        self.seg_mut(idx).state = state;
        if let Some(pos) = self.window_pos(seg.window) {
            self.windows[pos].deadlines.set(None);
        }
        self.stats.per_path_bytes_sent[p.index()] += len as u64;
        let t = &mut self.paths[p.index()];
        if t.in_flight() == 0 {
            t.last_progress = now;
        }
        t.sent += len as u64;
        if let SegState::Sent { end, .. } = &mut self.segs[(idx - self.seg_base) as usize].state {
            *end = t.sent;
        }
        if len > 0 {
            t.copies.push_back(HeldCopy {
                end: t.sent,
                seg: idx,
                off: seg.off,
            });
        }
        Data::OVERHEAD + len
    }

    pub(super) fn count_written(&mut self, n: usize) -> usize {
        self.changes += 1;
        self.written += n as u64;
        self.stats.bytes_written += n as u64;
        n
    }
}
