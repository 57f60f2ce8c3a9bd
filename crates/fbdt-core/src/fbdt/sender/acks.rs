//! ACK and stall accounting: what an ACK acknowledges, per-path delivery counters and
//! estimates, the cumulative point that frees the send buffer, and stalled or stale paths.

use super::{FbdtSender, SegState, STALE_COPY_LIMIT};
use crate::error::ProtocolError;
use crate::fbdt::estimate::SAMPLE_INTERVAL;
use crate::fbdt::AckSilenceUse;
use crate::path::PathId;
use crate::scheme::SchemeSender;
use crate::time::{Duration, Instant};
use crate::wire::{Ack, MAX_PATHS};

/// The transport's ACK silence stands for a stall's quiet time once it lasted this
/// fraction of its round trip (and `stall_late`): see `FbdtSender::silent_long`.
const SILENCE_RTT_SHARE: u64 = 8;

impl FbdtSender {
    pub(super) fn on_ack(&mut self, path: PathId, ack: &Ack, now: Instant) -> Result<(), ProtocolError> {
        self.ensure_path(path);
        self.last_activity = Some(now);
        let cum = self.space.offset(ack.cum, self.stream.una()).ok_or(ProtocolError::AckOfUnsent)?;
        if cum > self.loaded {
            return Err(ProtocolError::AckOfUnsent);
        }
        self.note_awake(path, cum);
        // An ACK that travelled a slow path may be older than what we know: use only what
        // moves us forward.
        self.right_edge = self.right_edge.max(cum + u64::from(ack.window));
        let mut idx = self.seg_base;
        while idx < self.seg_base + self.segs.len() as u64 {
            let s = self.seg(idx);
            let covered = s.off + u64::from(s.len) <= cum && (s.len > 0 || (ack.fin && s.off == cum));
            if !covered {
                break;
            }
            self.mark_acked(idx, now)?;
            idx += 1;
        }
        for &(s, e) in &ack.ranges {
            let (Some(s), Some(e)) = (self.space.offset(s, self.stream.una()), self.space.offset(e, self.stream.una())) else {
                continue;
            };
            if s >= e || e > self.loaded {
                return Err(ProtocolError::AckOfUnsent);
            }
            let first = self.seg_base + self.segs.partition_point(|g| g.off < s) as u64;
            let mut idx = first;
            while idx < self.seg_base + self.segs.len() as u64 {
                let g = self.seg(idx);
                if g.off + u64::from(g.len) > e || g.len == 0 {
                    break;
                }
                // Every ACK repeats the ranges, so most of their segments were acked by an
                // earlier one: `mark_acked` would return at once for them.
                if g.state != SegState::Acked {
                    self.mark_acked(idx, now)?;
                }
                idx += 1;
            }
        }
        self.take_path_counters(ack, now)?;
        if now.saturating_since(self.last_sample) >= SAMPLE_INTERVAL {
            let dt = now.saturating_since(self.last_sample);
            for t in self.paths.iter_mut().filter(|t| t.alive) {
                t.est.sample(t.rx, t.sent, dt);
            }
            self.last_sample = now;
        }
        self.advance_una();
        self.update_stalls(now);
        Ok(())
    }

    /// Each path's counter of the current connection (older epochs' are ignored): its
    /// progress, and — a connection delivers in order — every copy it has passed arrived,
    /// whether or not the ranges (the lowest 32 only) say so.
    fn take_path_counters(&mut self, ack: &Ack, now: Instant) -> Result<(), ProtocolError> {
        // A buffer kept across ACKs (empty between them): one allocation per ACK saved.
        let mut arrived = std::mem::take(&mut self.arrived);
        for (i, rx) in ack.path_rx.iter().enumerate().take(self.paths.len().min(MAX_PATHS)) {
            let t = &mut self.paths[i];
            if rx.epoch != t.epoch || rx.bytes <= t.rx {
                continue;
            }
            t.rx = rx.bytes.min(t.sent.max(t.rx));
            t.last_progress = now;
            if std::mem::replace(&mut t.stalled, false) {
                // A stall's end says how long the outage was, not how late copies come;
                // so do the later ACKs of copies that sat through it.
                t.unsampled_below = t.sent;
            }
            while let Some(c) = t.copies.front().filter(|c| c.end <= t.rx) {
                if t.counter_exact {
                    arrived.push(c.seg);
                }
                if c.end > t.unsampled_below {
                    let late = now.saturating_since(c.due).as_secs_f64() - c.due.saturating_since(now).as_secs_f64();
                    t.est.overdue_sample(late);
                }
                t.copies.pop_front();
            }
        }
        let mut result = Ok(());
        for &idx in &arrived {
            if idx >= self.seg_base {
                result = self.mark_acked(idx, now);
                if result.is_err() {
                    break;
                }
            }
        }
        arrived.clear();
        self.arrived = arrived;
        result
    }

    pub(super) fn mark_acked(&mut self, idx: u64, now: Instant) -> Result<(), ProtocolError> {
        let seg = self.seg(idx);
        let (window, state) = (seg.window, seg.state);
        match state {
            SegState::Acked => return Ok(()),
            SegState::Unsent => return Err(ProtocolError::AckOfUnsent),
            SegState::Sent {
                copies,
                first_sent,
                last_holder,
                expect,
                ..
            } => {
                if copies == 1 {
                    let est = &mut self.paths[last_holder.index()].est;
                    est.rtt_sample(now.saturating_since(first_sent), now);
                    let error = now.saturating_since(expect).as_secs_f64() - expect.saturating_since(now).as_secs_f64();
                    est.lateness_sample(error);
                }
            }
        }
        self.seg_mut(idx).state = SegState::Acked;
        if let Some(pos) = self.window_pos(window) {
            self.windows[pos].deadlines.set(None);
            self.windows[pos].unacked -= 1;
            let hi = self.windows[pos].seg_hi;
            let mut from = self.windows[pos].scan_from.max(self.seg_base);
            while from < hi && self.seg(from).state == SegState::Acked {
                from += 1;
            }
            self.windows[pos].scan_from = from;
        }
        Ok(())
    }

    pub(super) fn advance_una(&mut self) {
        while let Some(front) = self.segs.front() {
            if front.state != SegState::Acked {
                break;
            }
            let len = front.len as usize;
            if front.fin {
                self.stream.fin_acknowledged();
            }
            self.stream.acknowledge(len as u64);
            self.segs.pop_front();
            self.seg_base += 1;
        }
        while self
            .windows
            .front()
            .is_some_and(|w| w.unacked == 0 && w.seg_hi <= self.seg_base)
        {
            let w = self.windows.pop_front().expect("checked");
            debug_assert_eq!(w.unsent, 0, "an acknowledged window with unsent segments");
        }
        self.stats.bytes_acked = self.stream.una();
    }

    pub(super) fn stall_after(&self, p: PathId) -> Duration {
        let rtt = self.paths[p.index()].est.rtt().mul_f64(self.cfg.stall_rtts);
        rtt.max(self.cfg.stall_min)
    }

    /// Seconds from handing `bytes` more to `p` now until the sender should learn that
    /// the last of them arrived: the bytes ahead of them and their own at the path's drain
    /// rate, never less than its base RTT (unacknowledged bytes span one base RTT when
    /// nothing queues, as in `arrival::work_out_arrival`), plus the receiver's ACK delay.
    /// Without a rate yet, the path's ACK RTT.
    pub(super) fn ack_due_in(&self, p: PathId, bytes: u64) -> Duration {
        let t = &self.paths[p.index()];
        let base = t.est.base_rtt();
        let trip = match t.est.drain_rate_bps() {
            Some(rate) => Duration::from_secs_f64((t.in_flight() + bytes) as f64 / rate).max(base),
            None => t.est.rtt(),
        };
        trip + self.params.max_ack_delay
    }

    /// When `p`, holding data, counts as stalled unless its counter moves: the RTT rule
    /// (`stall_after` past its last progress), the lateness rule (its oldest undelivered
    /// copy overdue by the path's margin, and no progress for max(`stall_quiet_rtts` ×
    /// its ACK RTT, `stall_late`) — or for `stall_late` once its transport heard no ACK
    /// that long, `silent_long`) or the silence's proof (`silence_proof`), whichever
    /// comes first.
    pub(super) fn stall_deadline(&self, p: PathId) -> Instant {
        let t = &self.paths[p.index()];
        let by_rtt = t.last_progress + self.stall_after(p);
        let by_lateness = self.cfg.stall_late.zip(t.copies.front()).map(|(floor, c)| {
            let overdue = c.due + t.est.overdue_margin(floor);
            let quiet = if self.silent_long(p) {
                floor
            } else {
                t.est.rtt().mul_f64(self.cfg.stall_quiet_rtts).max(floor)
            };
            overdue.max(t.last_progress + quiet)
        });
        let by_rules = by_lateness.map_or(by_rtt, |l| l.min(by_rtt));
        self.silence_proof(p).map_or(by_rules, |proof| proof.min(by_rules))
    }

    /// `p`'s transport reported no ACK for at least `stall_late`, and an eighth of its
    /// round trip, since the path last made progress, while it had data in flight
    /// (`FbdtConfig::stall_on_ack_silence`). TCP's ACKs pause as long as its sending
    /// paused one round trip before, and on a long path FBDT's sending pauses that long
    /// between its bursts (a 290-ms path's ACKs came in bursts with 20-ms gaps and each
    /// gap declared a false stall, docs/faults.md round 11).
    pub(super) fn silent_long(&self, p: PathId) -> bool {
        let t = &self.paths[p.index()];
        let floor = self.cfg.stall_late.filter(|_| self.cfg.stall_on_ack_silence != AckSilenceUse::Off);
        let round_trip = t.est.driver.srtt.unwrap_or_else(|| t.est.rtt());
        floor
            .map(|f| f.max(Duration::from_micros(round_trip.as_micros() / SILENCE_RTT_SHARE)))
            .zip(t.ack_silence)
            .is_some_and(|(least, s)| s.after(t.last_progress) >= least)
    }

    /// When `p`'s transport, silent since the path's last progress, had been so for one
    /// round trip (TCP's smoothed RTT, else the path's ACK RTT) plus the receiver's ACK delay
    /// plus `stall_late`, once a report shows it was (`AckSilenceUse::Proof`). A byte sent
    /// just before the silence began is acknowledged by TCP one round trip later, and its
    /// frame by FBDT (the path's progress) at most the ACK delay after that. TCP's RTT,
    /// not FBDT's ACK RTT: the silence is TCP's, and Karn's rule keeps an outage's
    /// retransmissions out of TCP's estimate while copies that sat through it lengthen
    /// FBDT's.
    pub(super) fn silence_proof(&self, p: PathId) -> Option<Instant> {
        let t = &self.paths[p.index()];
        let floor = self.cfg.stall_late.filter(|_| self.cfg.stall_on_ack_silence == AckSilenceUse::Proof)?;
        let silence = t.ack_silence?;
        let round_trip = t.est.driver.srtt.unwrap_or_else(|| t.est.rtt());
        let proof = silence.since.max(t.last_progress) + round_trip + self.params.max_ack_delay + floor;
        (proof <= silence.until).then_some(proof)
    }

    pub(super) fn update_stalls(&mut self, now: Instant) {
        for i in 0..self.paths.len() {
            let p = PathId::slot(i);
            let stall_at = self.stall_deadline(p);
            let t = &mut self.paths[i];
            if !t.alive {
                continue;
            }
            if !t.stalled && t.in_flight() > 0 && now >= stall_at {
                t.stalled = true;
                t.est.last_outage = Some(now);
                self.stats.path_stalls += 1;
                if !self.newly_stalled.contains(&p) {
                    self.newly_stalled.push_back(p);
                }
            }
            if t.copies.front().is_some_and(|c| c.off + STALE_COPY_LIMIT < self.stream.una()) {
                self.failed.push_back(p);
                self.path_down(p, now);
            }
        }
    }
}

impl FbdtSender {
    /// An ACK came on `path`: that radio is awake. A wake episode ends once every live
    /// path is, or once its copied range (or all that was loaded) is acknowledged; until
    /// then the awake paths copy what only a silent one holds (`wake_copy_segment`) —
    /// a transfer longer than one round of the first path to wake is not left behind a
    /// radio still asleep.
    fn note_awake(&mut self, path: PathId, cum: u64) {
        let alive = self.alive_mask();
        let Some(episode) = &mut self.wake_episode else { return };
        episode.awake |= path.bit();
        if alive & !episode.awake == 0 || cum >= episode.end.min(self.loaded) {
            self.wake_episode = None;
        }
    }
}
