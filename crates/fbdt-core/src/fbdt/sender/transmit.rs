//! One frame out: a pending ALIGN, else a segment to re-send (`rescue`), else the next
//! segments of the path's lane (`lanes`) — as many adjacent ones as the path's rate fills
//! in `FbdtConfig::frame_budget` and the arrival rule hands it —, within the path's send
//! limit.

use super::rescue::RescueScope;
use super::{FbdtSender, HeldAtLimit, HeldCopy, IdlePoll, Resend, SegState, WakeEpisode};
use crate::path::PathId;
use crate::time::Instant;
use crate::wire::{Data, Frame, FrameOut, MAX_SEGMENT};

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
        self.last_activity.get_or_insert(now);
        let unchanged = self.paths[path.index()]
            .idle
            .is_some_and(|idle| idle.holds(self.changes, room, now));
        if unchanged && !cfg!(debug_assertions) {
            return 0;
        }
        let before = self.poll_marks(path);
        self.estimate_reads.set(0);
        let mut idle = None;
        let n = self.poll_frame(path, room, now, out, &mut idle);
        if let (Some((_, until, _)), Some(wake)) = (idle.as_mut(), self.wake_changes_after(now)) {
            *until = Some(until.map_or(wake, |u| u.min(wake)));
        }
        let quiet = n == 0 && self.poll_marks(path) == before;
        debug_assert!(
            quiet || !unchanged,
            "a poll skipped as unchanged would have sent or changed state"
        );
        if !quiet {
            self.changes += 1;
        }
        let changes = self.changes;
        let reads = self.estimate_reads.get();
        self.paths[path.index()].idle = idle.filter(|_| quiet).map(|(room_needed, until, held)| IdlePoll {
            changes,
            room_needed,
            until,
            reads,
            held,
        });
        n
    }

    /// What a poll that sends nothing may still change (a lane end left or taken, a
    /// window loaded or a split, flow control noticed, a dead holders' scan finished): the
    /// same before and after means the poll changed nothing but `checked_until`.
    pub(super) fn poll_marks(&self, p: PathId) -> impl PartialEq {
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
    /// second is set, until that instant (a redundancy deadline); the third says what held
    /// it when that was the send limit alone.
    fn poll_frame(
        &mut self,
        path: PathId,
        room: usize,
        now: Instant,
        out: &mut impl FrameOut,
        idle: &mut Option<(usize, Option<Instant>, Option<HeldAtLimit>)>,
    ) -> usize {
        self.paths[path.index()].limit_shortfall = 0;
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
            allowed = limit.saturating_sub(self.paths[path.index()].limited_in_flight()) as usize;
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
                    self.note_limit_shortfall(path, len as usize, allowed);
                    return 0;
                }
                if why == Resend::Redundant {
                    self.optional_resent += u64::from(len);
                }
                return self.emit_segments(path, idx, idx, now, out);
            }
            None => self.rescue_scan_found_nothing(),
        }
        let Some(next) = self.lane_segment(path, now) else {
            if let Some(idx) = self.wake_copy_segment(path) {
                let len = self.seg(idx).len;
                if len as usize <= payload_room && room >= Data::OVERHEAD {
                    self.stats.wake_copy_bytes += u64::from(len);
                    return self.emit_segments(path, idx, idx, now, out);
                }
                // No room for it now: the next poll with room finds it again (no idle memory).
                return 0;
            }
            *idle = quiet_until.map(|until| (usize::MAX, until, None));
            return 0;
        };
        // A path that still holds data waits until a whole frame fits (as many segments as
        // `frame_segments` and the lane give it): sending each segment the moment room for
        // it opens — after every ACK, at the send limit — would make every frame one
        // segment (TCP's silly-window avoidance, for frames).
        let len = self.seg(next.idx).len as usize;
        let frame = self
            .frame_segments(path)
            .min(self.windows[next.pos].lanes[next.at.lane].remaining());
        let want = if self.paths[path.index()].in_flight() > 0 {
            len * frame as usize
        } else {
            len
        };
        if want > payload_room || room < Data::OVERHEAD {
            self.note_limit_shortfall(path, want, allowed);
            let (room_needed, held) = if want > allowed {
                let held = HeldAtLimit {
                    pos: next.pos,
                    at: next.at,
                    idx: next.idx,
                    want,
                };
                (usize::MAX, Some(held))
            } else {
                (Data::OVERHEAD + want, None)
            };
            *idle = quiet_until.map(|until| (room_needed, until, held));
            return 0;
        }
        self.take_unsent(next.pos, next.at, next.idx);
        let (mut lo, mut hi) = (next.idx, next.idx);
        let mut bytes = len;
        let max_bytes = payload_room.min(MAX_SEGMENT);
        for _ in 1..self.frame_segments(path) {
            // The lane end's next segment, if it continues the frame's bytes, fits, and the
            // arrival rule hands it to this path with the frame's bytes counted as queued.
            let Some(idx) = self.windows[next.pos].lanes[next.at.lane].peek(next.at.end) else {
                break;
            };
            let seg = self.seg(idx);
            let adjacent = idx + 1 == lo || idx == hi + 1;
            if !adjacent || seg.len == 0 || bytes + seg.len as usize > max_bytes {
                break;
            }
            let extra = bytes as u64;
            if !self.arrives_in_time_after(path, next.pos, next.at, idx, extra) {
                break;
            }
            bytes += seg.len as usize;
            self.take_unsent(next.pos, next.at, idx);
            (lo, hi) = (lo.min(idx), hi.max(idx));
        }
        if !self.windows[next.pos].has_unsent() {
            // The pointers met: from now on its copies may be sent redundantly.
            let w = &mut self.windows[next.pos];
            w.handed_out_at = Some(now);
            w.deadlines.set(None);
        }
        self.emit_segments(path, lo, hi, now, out)
    }

    /// Takes segment `idx` from lane end `at` of the window at `pos`.
    fn take_unsent(&mut self, pos: usize, at: crate::fbdt::layout::LaneEnd, idx: u64) {
        let w = &mut self.windows[pos];
        let taken = w.lanes[at.lane].take(at.end);
        debug_assert_eq!(taken, Some(idx));
        w.unsent -= 1;
        self.unsent -= 1;
    }

    /// Most segments one DATA frame of `p` carries: what `p` drains in
    /// `FbdtConfig::frame_budget` at its drain rate, at least one (one while the rate is
    /// unknown or the budget 0). The payload bound (`MAX_SEGMENT`, the room, the send
    /// limit) and the arrival rule may stop a frame sooner.
    pub(super) fn frame_segments(&self, p: PathId) -> u64 {
        let budget = self.cfg.frame_budget.as_secs_f64();
        if budget == 0.0 {
            return 1;
        }
        let rate = self.paths[p.index()].est.drain_rate_bps().unwrap_or(0.0);
        let seg = self.params.segment_size as u64;
        // No more than a frame carries: a frame asked to hold more would wait for room
        // that never opens (the kernel's delivery rate on loopback reads tens of Gbit/s).
        ((rate * budget / seg as f64) as u64).clamp(1, (MAX_SEGMENT as u64 / seg).max(1))
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
        let transport_window = match (d.cwnd_bytes, bdp) {
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
        let rate_capped = t.est.drain_rate_bps().filter(|_| self.meets_by_arrival());
        let window = match rate_capped {
            Some(rate) => transport_window.min(rate * t.est.base_rtt().as_secs_f64()),
            None => transport_window,
        };
        // Counted from the transport's ACKs, delivered bytes do not wait for FBDT's.
        let between_acks = if self.cfg.in_flight_from_transport && t.transport_unacked.is_some() {
            2 * self.frame_segments(p) * self.params.segment_size as u64
        } else {
            self.bytes_per_ack(p)
        };
        // A path that delivers in bursts holds a burst more than its BDP while it runs at
        // its rate; capped below that, each round trip delivers less than the rate measured
        // and the measure (and the limit) falls round after round (docs/congestion.md,
        // "Bursty paths"). A burst the probing margin and the bytes between two ACKs absorb
        // needs nothing more; none counts beyond the transport's window, which it would not
        // send.
        let burst = t.est.burst_bytes().min(transport_window as u64);
        let absorbed = between_acks as f64 + (self.cfg.send_limit_windows - 1.0) * window;
        let undelivered_extra = match rate_capped {
            Some(_) if burst as f64 > absorbed => burst,
            _ => between_acks,
        };
        Some((self.cfg.send_limit_windows * window) as u64 + undelivered_extra)
    }

    /// The send limit (`allowed` bytes more) held back a frame of `want` payload bytes on
    /// `p` (`SchemeSender::transport_report_wanted`).
    fn note_limit_shortfall(&mut self, p: PathId, want: usize, allowed: usize) {
        if want > allowed {
            self.paths[p.index()].limit_shortfall = (want - allowed) as u64;
        }
    }

    /// Payload bytes that arrive on `p` between two of its ACKs (the receiver's rule,
    /// which a sender assumes its peer shares, as it does `max_ack_delay`): `ack_every`
    /// of its largest frames and at least `ack_bytes`, but no more frames than reach
    /// `ack_every` × `ack_bytes`. Two segments before issue 37.
    fn bytes_per_ack(&self, p: PathId) -> u64 {
        let frame = self.frame_segments(p) * self.params.segment_size as u64;
        let (every, bytes) = (u64::from(self.params.ack_every), self.params.ack_bytes as u64);
        if bytes == 0 {
            return every * frame;
        }
        let frames = every.min((every * bytes).div_ceil(frame)).max(bytes.div_ceil(frame));
        frames * frame
    }

    /// One DATA frame carrying the adjacent segments `lo..=hi` (their bytes are
    /// contiguous, lowest first), each then accounted as its own copy on `p`: its state,
    /// expected ACK and place in the path's byte count, as if sent alone in offset order.
    pub(super) fn emit_segments(
        &mut self,
        p: PathId,
        lo: u64,
        hi: u64,
        now: Instant,
        out: &mut impl FrameOut,
    ) -> usize {
        let (first, last) = (self.seg(lo), self.seg(hi));
        let off = first.off;
        let total = (last.off + u64::from(last.len) - off) as usize;
        let fin = last.fin;
        debug_assert!(
            (lo..hi).all(|i| self.seg(i).off + u64::from(self.seg(i).len) == self.seg(i + 1).off && !self.seg(i).fin),
            "a frame's segments are adjacent and only its last may end the stream"
        );
        out.put_inline(|v| Data::emit_header(self.space.seq(off), fin, total, v));
        // The payload as slices of the send buffer: shared into a FrameBuf, copied into a Vec.
        self.stream.slices(off, total, |b| out.put_shared(b));
        for idx in lo..=hi {
            self.account_copy(p, idx, now);
        }
        Data::OVERHEAD + total
    }

    /// Segment `idx` handed to `p` now: its state, the path's byte count and held copies.
    fn account_copy(&mut self, p: PathId, idx: u64, now: Instant) {
        if self.seg(idx).state == SegState::Unsent {
            self.maybe_start_wake_episode(idx, now);
        }
        self.last_activity = Some(now);
        let seg = self.seg(idx).clone();
        let expect = now + self.delivery_delay(p);
        let len = seg.len as usize;
        let due = now + self.ack_due_in(p, len as u64);
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
        let ack_allowance = self.params.max_ack_delay;
        let t = &mut self.paths[p.index()];
        t.est.wake.on_send(now, t.in_flight() == 0, ack_allowance);
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
                due,
            });
        }
    }

    /// New data goes out after every path has been idle for `wake_copies_after`: each
    /// radio may be dozing, and which wakes first is unknown until an ACK comes back, so
    /// the first `wake_copy_bytes` get a copy on a second path (`wake_copy_segment`).
    /// Called for every segment's first send: the test that fails while data flows (the
    /// last send was just now) comes first.
    fn maybe_start_wake_episode(&mut self, idx: u64, now: Instant) {
        let Some(after) = self.cfg.wake_copies_after else { return };
        let idle_long = self.last_activity.is_some_and(|t| now.saturating_since(t) >= after);
        // More waiting than the copies would cover: not a short transfer, and a wake-up
        // is a fraction of it.
        let short = self.stats.bytes_written.saturating_sub(self.stats.bytes_sent) <= self.cfg.wake_copy_bytes;
        if idle_long
            && short
            && self.wake_episode.is_none()
            && self.paths.iter().all(|t| t.in_flight() == 0)
            && self.alive_mask().count_ones() > 1
        {
            self.wake_episode = Some(WakeEpisode {
                first: idx,
                end: self.seg(idx).off + self.cfg.wake_copy_bytes,
                awake: 0,
                poll_at: now + crate::time::Duration::from_micros(1),
            });
            self.stats.wake_episodes += 1;
        }
    }

    pub(super) fn count_written(&mut self, n: usize) -> usize {
        self.changes += 1;
        self.stats.bytes_written += n as u64;
        n
    }
}
