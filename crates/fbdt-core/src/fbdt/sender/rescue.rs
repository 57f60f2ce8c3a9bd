//! Redundant transmission and rescue: which copy another path should send again — once a
//! window's pointers met and a copy is overdue (the paper's redundant transmission), when
//! its holders died or stalled, or when it may be what holds a full receive window.

use super::{FbdtSender, SegState};
use crate::fbdt::layout::{Deadlines, Window};
use crate::path::PathId;
use crate::time::{Duration, Instant};

impl FbdtSender {
    /// How long until a segment handed to `p` now is acknowledged: the bytes queued ahead of
    /// it at the path's delivery rate, plus its RTT and the receiver's ACK delay — and never
    /// less than the path's measured ACK RTT (EWMA). The rate is the lower of the measured
    /// and the driver's (TCP_INFO) rate: an overestimate would make copies look late and
    /// trigger needless redundant transmissions.
    pub(super) fn delivery_delay(&self, p: PathId) -> Duration {
        let t = &self.paths[p.index()];
        let d = &t.est.driver;
        let rate = match (t.est.rate, d.delivery_rate_bps.map(|b| b / 8.0)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let queued = match (rate, d.srtt) {
            (Some(rate), Some(srtt)) if rate > 0.0 => {
                Duration::from_secs_f64(t.in_flight() as f64 / rate) + srtt + self.params.max_ack_delay
            }
            _ => Duration::ZERO,
        };
        queued.max(t.est.rtt())
    }

    /// The paper's redundant-transmission rule: once the window's pointers have met
    /// (`done`), a copy handed out at `last_sent` and expected to be acknowledged at
    /// `expect` is re-sent `redundancy_wait` × its expected delay after it was handed out
    /// (factor 1 = when it is due; 0 = as soon as the pointers meet).
    pub(super) fn redundancy_deadline(&self, done: Instant, last_sent: Instant, expect: Instant) -> Instant {
        done.max(last_sent + expect.saturating_since(last_sent).mul_f64(self.cfg.redundancy_wait))
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
                    last_sent,
                    expect,
                    ..
                } = self.seg(idx).state
                {
                    let live = holders & alive;
                    if live != 0 && live != alive {
                        let t = self.redundancy_deadline(done, last_sent, expect);
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

    /// A segment `p` should re-send now (redundant transmission or rescue), lowest first.
    pub(super) fn rescue_segment(&self, p: PathId, now: Instant) -> Option<u64> {
        let alive = self.alive_mask();
        let flowing = self.flowing_mask();
        let mine = now + self.delivery_delay(p);
        // A stalled path (no progress for several RTTs: a blockage, an outage) keeps its
        // copies until it recovers; a flowing path re-sends them now, so one blocked radio
        // never holds the stream. A stalled requester rescues nothing.
        let rescue_stalled = flowing & p.bit() != 0 && self.paths.iter().any(|t| t.stalled && t.in_flight() > 0);
        // Only four things make a copy worth re-sending: its window's pointers met, the
        // window is stalled by flow control, its holder died or stalled. Skip windows where
        // none can.
        let any_window = self.flow_blocked || self.dead_holders || rescue_stalled;
        let due = |w: &Window| self.deadlines(w, alive).earliest.is_some_and(|t| t <= now);
        for w in self.windows.iter().filter(|w| w.unacked > 0 && (any_window || due(w))) {
            for idx in w.scan_from.max(self.seg_base)..w.seg_hi {
                let SegState::Sent {
                    holders,
                    last_holder,
                    last_sent,
                    expect,
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
                    return Some(idx);
                }
                if let Some(done) = w.handed_out_at {
                    if now >= self.redundancy_deadline(done, last_sent, expect) {
                        return Some(idx);
                    }
                }
                // The receive window is full and this segment may be what holds it: re-send
                // it if `p` would deliver it sooner than its holder is expected to.
                if self.flow_blocked && (self.paths[last_holder.index()].stalled || mine < expect) {
                    return Some(idx);
                }
            }
        }
        None
    }

    /// Ends a scan that found nothing: dead paths' copies have all been re-sent.
    pub(super) fn rescue_scan_found_nothing(&mut self) {
        self.dead_holders = false;
    }
}
