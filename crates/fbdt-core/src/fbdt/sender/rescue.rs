//! Redundant transmission and rescue: which copy another path should send again — once a
//! window's pointers met and a copy is overdue (the paper's redundant transmission), when
//! its holders died or stalled, or when it may be what holds a full receive window.

use super::{FbdtSender, Resend, SegState};
use crate::fbdt::layout::{Deadlines, Window};
use crate::path::PathId;
use crate::time::{Duration, Instant};

/// Which windows a rescue scan looks into (`FbdtSender::rescue_scope`).
#[derive(Clone, Copy, Debug)]
pub(super) enum RescueScope {
    /// Every window with unacknowledged segments.
    All { rescue_stalled: bool },
    /// The head window: its redundancy deadline passed.
    Head,
    /// None, and — unless the sender's state changes — none before `until` (the head
    /// window's earliest redundancy deadline; never if None).
    Nothing { until: Option<Instant> },
}

impl FbdtSender {
    /// How long until a segment handed to `p` now is acknowledged: the bytes queued ahead of
    /// it at the path's delivery rate, plus its RTT and the receiver's ACK delay — and never
    /// less than the path's measured ACK RTT (EWMA). The rate is the lower of the measured
    /// and the driver's (TCP_INFO) rate: an overestimate would make copies look late and
    /// trigger needless redundant transmissions.
    pub(super) fn delivery_delay(&self, p: PathId) -> Duration {
        let t = &self.paths[p.index()];
        let queued = match (self.delivery_rate(p), t.est.driver.srtt) {
            (Some(rate), Some(srtt)) if rate > 0.0 => {
                Duration::from_secs_f64(t.in_flight() as f64 / rate) + srtt + self.params.max_ack_delay
            }
            _ => Duration::ZERO,
        };
        queued.max(t.est.rtt())
    }

    /// `p`'s delivery rate in bytes/s: the lower of the measured and the driver's.
    fn delivery_rate(&self, p: PathId) -> Option<f64> {
        let t = &self.paths[p.index()];
        match (t.est.rate, t.est.driver.delivery_rate_bps.map(|b| b / 8.0)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The paper's redundant-transmission rule, with a margin: once the window's pointers
    /// have met (`done`), a copy handed to `holder` at `last_sent` and expected to be
    /// acknowledged at `expect` is late `redundancy_wait` × its expected delay after it was
    /// handed out (factor 1 = when it is due; 0 = as soon as the pointers meet), plus
    /// max(4 × the holder's deviation from its expectations, `redundancy_floor`).
    pub(super) fn redundancy_deadline(
        &self,
        done: Instant,
        holder: PathId,
        last_sent: Instant,
        expect: Instant,
    ) -> Instant {
        let margin = self.paths[holder.index()]
            .est
            .lateness_dev()
            .mul_f64(4.0)
            .max(self.cfg.redundancy_floor);
        let due = last_sent + expect.saturating_since(last_sent).mul_f64(self.cfg.redundancy_wait);
        done.max(due + margin)
    }

    /// When `holder`'s counter is expected to pass `end` (its copy ending there arrives),
    /// as the sender will see it: the bytes still ahead of it at the path's rate, from its
    /// last progress. None when the path has no rate yet.
    fn holder_arrival(&self, holder: PathId, end: u64, now: Instant) -> Option<Instant> {
        let t = &self.paths[holder.index()];
        let rate = self.delivery_rate(holder).filter(|&r| r > 0.0)?;
        let ahead = end.saturating_sub(t.rx) as f64 / rate;
        Some(now.max(t.last_progress + Duration::from_secs_f64(ahead)))
    }

    /// A holder that has stopped moving: its counter did not advance for the margin a
    /// copy of it may be late by (or it is stalled).
    fn holder_stopped(&self, holder: PathId, now: Instant) -> bool {
        let t = &self.paths[holder.index()];
        let margin = t.est.lateness_dev().mul_f64(4.0).max(self.cfg.redundancy_floor);
        t.stalled || now >= t.last_progress + margin
    }

    /// Redundant (not rescue) bytes may still be sent: below `redundancy_cap` of the bytes
    /// delivered, with two segments' allowance for the start of the stream.
    fn redundancy_allowed(&self) -> bool {
        let allowance = 2 * self.params.segment_size as u64;
        (self.optional_resent as f64) < self.cfg.redundancy_cap * self.stream.una() as f64 + allowance as f64
    }

    /// The window's redundancy deadlines (copies some live path does not hold yet), from
    /// its cache when still valid; only for windows whose pointers met.
    pub(super) fn deadlines(&self, w: &Window, alive: u32) -> Deadlines {
        if let Some(d) = w.deadlines.get() {
            if d.after == self.checked_until || d.earliest_after.is_none_or(|t| t > self.checked_until) {
                return d;
            }
        }
        let mut d = Deadlines {
            earliest: None,
            earliest_after: None,
            after: self.checked_until,
        };
        if let Some(done) = w.handed_out_at {
            for idx in w.scan_from.max(self.seg_base)..w.seg_hi {
                if let SegState::Sent {
                    holders,
                    last_holder,
                    last_sent,
                    expect,
                    ..
                } = self.seg(idx).state
                {
                    let live = holders & alive;
                    if live != 0 && live != alive {
                        let t = self.redundancy_deadline(done, last_holder, last_sent, expect);
                        d.earliest = Some(d.earliest.map_or(t, |e| e.min(t)));
                        if t > self.checked_until {
                            d.earliest_after = Some(d.earliest_after.map_or(t, |e| e.min(t)));
                        }
                    }
                }
            }
        }
        w.deadlines.set(Some(d));
        d
    }

    pub(super) fn invalidate_deadlines(&self) {
        for w in &self.windows {
            w.deadlines.set(None);
        }
    }

    /// Which windows `rescue_segment` looks into at `now`: every window with unacknowledged
    /// segments while a rescue may be needed anywhere (flow control blocks, a holder died,
    /// a holder stalled while `p` flows), else the head window once its earliest
    /// redundancy deadline has passed, else none.
    pub(super) fn rescue_scope(&self, p: PathId, now: Instant) -> RescueScope {
        // A stalled path (no progress for several RTTs: a blockage, an outage) keeps its
        // copies until it recovers; a flowing path re-sends them now, so one blocked radio
        // never holds the stream. A stalled requester rescues nothing.
        let rescue_stalled =
            self.flowing_mask() & p.bit() != 0 && self.paths.iter().any(|t| t.stalled && t.in_flight() > 0);
        if self.flow_blocked || self.dead_holders || rescue_stalled {
            return RescueScope::All { rescue_stalled };
        }
        // Redundancy looks at the head window only (flow control does not block here).
        let Some(head) = self
            .windows
            .front()
            .filter(|w| w.unacked > 0 && self.redundancy_allowed())
        else {
            return RescueScope::Nothing { until: None };
        };
        match self.deadlines(head, self.alive_mask()).earliest {
            Some(t) if t <= now => RescueScope::Head,
            until => RescueScope::Nothing { until },
        }
    }

    /// `rescue_segment_in` with the scope worked out.
    #[cfg(test)]
    pub(super) fn rescue_segment(&self, p: PathId, now: Instant) -> Option<(u64, Resend)> {
        self.rescue_segment_in(self.rescue_scope(p, now), p, now)
    }

    /// A segment `p` should re-send now, lowest first, and why.
    ///
    /// Rescue (never capped): the copy's holders all died, or all stalled while `p` flows,
    /// or flow control blocks and the copy may be what holds the receive window and `p`
    /// delivers it sooner. Redundancy (capped at `redundancy_cap` of
    /// the delivered bytes): a copy past its deadline, only in the head window (the one
    /// the in-order point is in) or in any window while flow control blocks, and only if
    /// its holder has stopped moving or `p` is expected to deliver it sooner.
    ///
    /// `scope` is `p`'s [`FbdtSender::rescue_scope`] at `now` (worked out once per poll).
    pub(super) fn rescue_segment_in(&self, scope: RescueScope, p: PathId, now: Instant) -> Option<(u64, Resend)> {
        let (windows, rescue_stalled) = match scope {
            RescueScope::Nothing { .. } => return None,
            RescueScope::Head => (1, false),
            RescueScope::All { rescue_stalled } => (self.windows.len(), rescue_stalled),
        };
        let alive = self.alive_mask();
        let flowing = self.flowing_mask();
        let mine = now + self.delivery_delay(p);
        let may_resend = self.redundancy_allowed();
        let head = self.windows.front().map(|w| w.id);
        let redundant_here = |w: &Window| may_resend && (self.flow_blocked || Some(w.id) == head);
        for w in self.windows.iter().take(windows).filter(|w| w.unacked > 0) {
            let redundant_ok = redundant_here(w);
            for idx in w.scan_from.max(self.seg_base)..w.seg_hi {
                let SegState::Sent {
                    holders,
                    last_holder,
                    last_sent,
                    expect,
                    end,
                    ..
                } = self.seg(idx).state
                else {
                    continue;
                };
                if holders & p.bit() != 0 {
                    continue;
                }
                let live = holders & alive;
                if live == 0 || (rescue_stalled && holders & flowing == 0) {
                    return Some((idx, Resend::Rescue));
                }
                let sooner = || self.holder_arrival(last_holder, end, now).is_none_or(|t| mine < t);
                // The receive window is full and this segment may be what holds it:
                // re-sent if `p` delivers it sooner (rescue behind a stall). Limiting this
                // to the head window or capping it halved `tc-delay-wigig` with the
                // `paper` window (622 -> 328 Mbit/s, simulator).
                let holder_stalled = self.paths[last_holder.index()].stalled;
                let holding = self.flow_blocked && (holder_stalled || mine < expect);
                if holding && (holder_stalled || sooner()) {
                    return Some((idx, Resend::Rescue));
                }
                if !redundant_ok {
                    continue;
                }
                let late = w
                    .handed_out_at
                    .is_some_and(|done| now >= self.redundancy_deadline(done, last_holder, last_sent, expect));
                if late && (sooner() || self.holder_stopped(last_holder, now)) {
                    return Some((idx, Resend::Redundant));
                }
            }
        }
        None
    }

    /// During a wake episode, the lowest segment of its copied range that only one live
    /// path holds, not yet shown awake, and `p` does not: `p` copies it when it has nothing
    /// of its own to send, so the copies never delay a lane — and, while `p` has not shown
    /// it is awake either, unless it is known to wake later than the holder (`wake.rs`): a
    /// copy there would only wake it for nothing.
    pub(super) fn wake_copy_segment(&self, p: PathId) -> Option<u64> {
        let episode = self.wake_episode?;
        let alive = self.alive_mask();
        let mine = if episode.awake & p.bit() != 0 { f64::NEG_INFINITY } else { self.wake_delay(p) };
        let lo = episode.first.max(self.seg_base);
        (lo..self.seg_base + self.segs.len() as u64)
            .take_while(|&idx| self.seg(idx).off < episode.end)
            .find(|&idx| {
                matches!(self.seg(idx).state, SegState::Sent { holders, last_holder, .. }
                    if holders & p.bit() == 0 && (holders & alive).count_ones() == 1
                        && holders & episode.awake == 0
                        && mine <= self.wake_delay(last_holder))
            })
    }

    /// Ends a scan that found nothing: dead paths' copies have all been re-sent.
    pub(super) fn rescue_scan_found_nothing(&mut self) {
        self.dead_holders = false;
    }
}
