//! The meeting point by expected arrival (issue 15).
//!
//! The paper's pointers meet wherever the paths' send rates put them, so a path whose
//! delay exceeds the others' hands out segments that arrive after the forward lane would
//! have delivered them: they add head-of-line delay and help nobody. Here a lane end takes
//! its next segment only while that segment is expected to arrive no later than the
//! lane's other end would deliver it. A path that declines leaves the rest of the lane to
//! the other end and looks for work further on (`lanes::lane_segment`): a free end of an
//! older window, a split, else a new window — so a path whose delay exceeds the others'
//! works as many windows ahead as its delay is worth, instead of idling or holding every
//! window up. With one segment left and both ends served, it goes to the path that
//! delivers it first: a small request takes the fast path, whichever path asks first.

use super::FbdtSender;
use crate::fbdt::layout::{End, LaneEnd};
use crate::path::PathId;

/// Relative slack of the arrival comparison (`arrives_in_time`).
const ARRIVAL_TOLERANCE: f64 = 0.1;

impl FbdtSender {
    /// The arrival rule comes with the budget window; `auto` and `paper` keep the paper's
    /// meeting point (Algorithm 1), as the reference they are measured against.
    pub(super) fn meets_by_arrival(&self) -> bool {
        matches!(self.cfg.window, crate::fbdt::config::WindowConfig::Budget { .. })
    }

    /// `p`'s [`FbdtSender::arrival_in`] and drain rate, worked out once per change of the
    /// sender's state (`changes`: every input and every poll that sent or changed
    /// something; a transport report that moves only `p`'s figure forgets `p`'s alone,
    /// `transport_moved`), not at every arrival check of every poll. Debug builds work
    /// them out anyway and check they agree. Each read is noted (`estimate_reads`).
    fn estimates(&self, p: PathId) -> (Option<f64>, Option<f64>) {
        self.estimate_reads.set(self.estimate_reads.get() | p.bit());
        let (arrival, drain) = self.estimates_kept(p);
        (arrival.map(|a| a + self.wake_delay(p)), drain)
    }

    /// Seconds `p` is expected to take to wake up before a byte handed to it now leaves
    /// (`wake::WakeCost::delay`; zero on a path never seen asleep). Apart from the kept
    /// estimates: it changes with time alone, as an idle path dozes off.
    pub(super) fn wake_delay(&self, p: PathId) -> f64 {
        let t = &self.paths[p.index()];
        t.est.wake.delay(self.checked_until, t.in_flight())
    }

    /// The first instant after `now` at which a path's wake-up delay changes with time
    /// alone: a poll that found nothing to do holds (`IdlePoll`) only until then.
    pub(super) fn wake_changes_after(&self, now: crate::time::Instant) -> Option<crate::time::Instant> {
        self.paths
            .iter()
            .filter_map(|t| t.est.wake.changes_after(now, t.in_flight()))
            .min()
    }

    /// [`FbdtSender::estimates`] before the wake-up delay.
    fn estimates_kept(&self, p: PathId) -> (Option<f64>, Option<f64>) {
        let t = &self.paths[p.index()];
        if let Some((changes, arrival, drain)) = t.estimates.get().filter(|e| e.0 == self.changes) {
            debug_assert_eq!(
                (changes, arrival, drain),
                (self.changes, self.work_out_arrival(p), t.est.drain_rate_bps()),
                "a path's estimates changed with no change counted"
            );
            return (arrival, drain);
        }
        let (arrival, drain) = (self.work_out_arrival(p), t.est.drain_rate_bps());
        t.estimates.set(Some((self.changes, arrival, drain)));
        (arrival, drain)
    }

    /// Seconds until a byte handed to `p` now reaches the receiver: the bytes ahead of it
    /// at the drain rate, less the ACK's way back, and never less than the one-way delay
    /// (half the base RTT). `p`'s unacknowledged bytes span one base RTT at its rate when
    /// nothing queues, so what exceeds that is queue. An idle path needs no rate: its next
    /// byte takes the one-way delay (the direction that only carries requests never
    /// measures one) — plus, on a path seen to doze off after that long idle, its learned
    /// wake-up (`wake.rs`).
    pub(super) fn arrival_in(&self, p: PathId) -> Option<f64> {
        self.estimates(p).0
    }

    /// [`FbdtSender::arrival_in`], worked out.
    fn work_out_arrival(&self, p: PathId) -> Option<f64> {
        let t = &self.paths[p.index()];
        let base = t.est.base_rtt().as_secs_f64();
        let ahead = match t.limited_in_flight() {
            0 => 0.0,
            bytes => bytes as f64 / t.est.drain_rate_bps()?,
        };
        Some(ahead.max(base) - base / 2.0)
    }

    /// Whether `p`, at lane end `at` (window position `pos`), should take segment `idx`.
    ///
    /// A backward end takes it if it is expected to arrive no later than the other flowing
    /// paths would have delivered every unsent segment below it (at their summed drain
    /// rate, from the earliest of their arrival times). A forward end (the bottom of its
    /// lane) gives way only to the lane's backward server, and only if that server would
    /// deliver it sooner after sending the rest of the lane: the forward path never
    /// leaves the head of the stream to a path that only looks faster while it idles. A
    /// forward end whose lane has no backward server (a lane a far path left) is judged
    /// as a backward end: otherwise that path would take back the very lanes it left.
    /// Within [`ARRIVAL_TOLERANCE`] counts as in time, so estimates that cross back and
    /// forth do not hand a lane back and forth.
    pub(super) fn arrives_in_time(&self, p: PathId, pos: usize, at: LaneEnd, idx: u64) -> bool {
        self.arrives_in_time_after(p, pos, at, idx, 0)
    }

    /// [`FbdtSender::arrives_in_time`] with `extra` more bytes queued on `p` first (the
    /// segments a DATA frame already carries ahead of `idx`).
    pub(super) fn arrives_in_time_after(&self, p: PathId, pos: usize, at: LaneEnd, idx: u64, extra: u64) -> bool {
        if !self.meets_by_arrival() {
            return true;
        }
        let server = match at.end {
            End::Forward => self
                .server(at.window, at.lane, End::Backward)
                .filter(|&q| q != p && self.paths[q.index()].flows()),
            End::Backward => None,
        };
        let Some(mine) = self.arrival_after(p, extra) else {
            return true;
        };
        match server {
            Some(q) => self.sooner_than(mine, [q], self.windows[pos].lanes[at.lane].backward - 1 - idx),
            None => self.sooner_than(mine, self.paths_flowing_besides(p), self.unsent_below(idx)),
        }
    }

    /// [`FbdtSender::arrival_in`] once `extra` more bytes are queued on `p`.
    fn arrival_after(&self, p: PathId, extra: u64) -> Option<f64> {
        if extra == 0 {
            return self.arrival_in(p);
        }
        let t = &self.paths[p.index()];
        let base = t.est.base_rtt().as_secs_f64();
        let ahead = (t.limited_in_flight() + extra) as f64 / self.estimates(p).1?;
        Some(ahead.max(base) - base / 2.0 + self.wake_delay(p))
    }

    /// Whether a window loaded now, starting at segment `idx`, has a segment `p` delivers
    /// in time: a path that could only send behind every unsent segment, later than the
    /// others deliver them, loads nothing (and leaves no lanes for the others to pick up).
    pub(super) fn new_window_in_time(&self, p: PathId) -> bool {
        if !self.meets_by_arrival() {
            return true;
        }
        let idx = self.seg_base + self.segs.len() as u64;
        let Some(mine) = self.arrival_in(p) else {
            return true;
        };
        self.sooner_than(mine, self.paths_flowing_besides(p), self.unsent_below(idx))
    }

    /// Loads windows for the other paths, `p` left out of their layout, until a window
    /// loaded next starts where `p`'s next byte would arrive no later than the others
    /// deliver everything below it: a path whose delay exceeds the others' then works
    /// that far ahead instead of idling. Only if the written data reach a window beyond
    /// that point (so `p` has a window of its own there) and the peer's receive window
    /// twice as far: were `p` late by its whole lead, the others could still go on that
    /// long before flow control stops them (tc-delay-wigig's 1 s WiGig in slow start,
    /// given a lead of 39 MB in a 32 MiB window, stopped WiFi for 0.5 s at a time).
    pub(super) fn load_ahead(&mut self, p: PathId, now: crate::time::Instant) {
        if !self.meets_by_arrival() {
            return;
        }
        // No lead (the common case) needs no window size: it is worked out at every poll
        // that looks for work.
        let Some(lead) = self.lead_needed(p).filter(|&lead| lead > 0) else {
            return;
        };
        let window = self.target_window() as u64;
        let data = self.stream.written() - self.loaded;
        let rcv_room = self.right_edge.saturating_sub(self.loaded);
        if lead + window > data || 2 * lead + window > rcv_room {
            return;
        }
        let stop = self.loaded + lead;
        while self.loaded < stop && self.load_window_for(p, false, now) {}
    }

    /// Bytes beyond those loaded at which `p`'s next byte, at `p`'s one-way delay, would
    /// arrive just as the other flowing paths (at their summed drain rate, from the
    /// earliest of their arrival times) have delivered every unsent segment below it.
    /// `p`'s own queue does not count: a path whose queue makes it late waits for the
    /// queue to drain (`new_window_in_time`) instead of working further ahead, where
    /// its queue — Cubic fills any it gets — would delay every byte it carries. None
    /// while an arrival or rate is unknown or no other path flows.
    fn lead_needed(&self, p: PathId) -> Option<u64> {
        // A dozing path's wake-up counts as delay too: it works that far ahead and is awake
        // when its bytes are due, instead of never being in time.
        let mine = self.paths[p.index()].est.base_rtt().as_secs_f64() / 2.0 + self.wake_delay(p);
        let (first, rate) = self.delivery_by(self.paths_flowing_besides(p))?;
        if rate == 0.0 {
            return None;
        }
        let next = self.seg_base + self.segs.len() as u64;
        let unsent = self.unsent_below(next) * self.params.segment_size as u64;
        Some((((mine - first) * rate) as u64).saturating_sub(unsent))
    }

    /// Lazily, in path order: this runs at every poll of every path, so no `Vec`.
    fn paths_flowing_besides(&self, p: PathId) -> impl Iterator<Item = PathId> + '_ {
        (0..self.paths.len())
            .map(PathId::slot)
            .filter(move |&q| q != p && self.paths[q.index()].flows())
    }

    /// Whether a byte arriving in `mine` seconds (a path's `arrival_in`) arrives no later
    /// than `others` would deliver it after `before` segments (at their summed drain rate,
    /// from the earliest of their arrival times), within [`ARRIVAL_TOLERANCE`]. True when
    /// none of `others` flows or while one of their arrivals (or, with segments below, a
    /// rate) is unknown.
    fn sooner_than(&self, mine: f64, others: impl IntoIterator<Item = PathId>, before: u64) -> bool {
        let theirs = if before == 0 {
            // Nothing below it: who delivers first decides, not how fast the others drain.
            let first = others
                .into_iter()
                .try_fold(f64::INFINITY, |m, q| self.arrival_in(q).map(|a| m.min(a)));
            match first {
                Some(first) => first,
                None => return true,
            }
        } else {
            match self.delivery_by(others) {
                Some((first, rate)) if rate > 0.0 => first + before as f64 * self.params.segment_size as f64 / rate,
                _ => return true,
            }
        };
        mine <= theirs * (1.0 + ARRIVAL_TOLERANCE)
    }

    /// The earliest arrival time of `paths` and their summed drain rate (0 and infinity
    /// for none); None while one of them is unknown.
    fn delivery_by(&self, paths: impl IntoIterator<Item = PathId>) -> Option<(f64, f64)> {
        let (mut first, mut rate) = (f64::INFINITY, 0.0);
        for q in paths {
            // Both from one look at the path's estimates.
            let (arrival, drain) = self.estimates(q);
            first = first.min(arrival?);
            rate += drain?;
        }
        Some((first, rate))
    }

    /// Unsent segments with an index below `idx`, in every window: all of them
    /// (`FbdtSender::unsent`) less those at or above `idx`, counted from the newest
    /// window down — a window wholly above by its count (`Window::unsent`), the one `idx`
    /// falls in lane by lane. The windows below, mostly handed out long ago and waiting
    /// for their ACKs, are not walked.
    fn unsent_below(&self, idx: u64) -> u64 {
        let mut above = 0;
        for w in self.windows.iter().rev() {
            if w.seg_lo >= idx {
                above += w.unsent;
                continue;
            }
            if w.seg_hi > idx {
                above += w
                    .lanes
                    .iter()
                    .map(|l| l.backward.saturating_sub(l.forward.max(idx)))
                    .sum::<u64>();
            }
            break;
        }
        let below = self.unsent - above;
        debug_assert_eq!(
            below,
            self.windows
                .iter()
                .take_while(|w| w.seg_lo < idx)
                .flat_map(|w| &w.lanes)
                .map(|l| l.backward.min(idx).saturating_sub(l.forward))
                .sum::<u64>(),
            "the unsent counts went wrong"
        );
        below
    }
}

#[cfg(test)]
mod tests {
    use super::super::SegState;
    use super::*;
    use crate::fbdt::config::{FbdtConfig, WindowConfig};
    use crate::scheme::SchemeSender;
    use crate::time::{Duration, Instant};

    /// A sender over a near path 0 (base RTT 2 ms) and a far path 1 (base RTT `far_rtt`),
    /// each draining `rate` bytes/s, the receive window `window` bytes.
    fn near_and_far(far_rtt: Duration, rates: [f64; 2], window: u64) -> FbdtSender {
        let cfg = FbdtConfig {
            window: WindowConfig::budget(crate::fbdt::config::DEFAULT_BUDGET),
            ..FbdtConfig::default()
        };
        with_config(&cfg, far_rtt, rates, window)
    }

    fn with_config(cfg: &FbdtConfig, far_rtt: Duration, rates: [f64; 2], window: u64) -> FbdtSender {
        let params = crate::scheme::StreamParams {
            send_buffer: 64 << 20,
            ..crate::Config::default().stream_params()
        };
        let mut s = FbdtSender::new(cfg, params, 0, window);
        let now = Instant::ZERO;
        for (p, rtt) in [(0, Duration::from_millis(2)), (1, far_rtt)] {
            s.path_up(PathId(p), now);
            s.paths[p as usize].est.set_rate(rates[p as usize]);
            s.paths[p as usize].est.rtt_sample(rtt, now);
        }
        s
    }

    fn poll(s: &mut FbdtSender, p: u8) -> usize {
        s.poll_transmit(PathId(p), 64 * 1024, Instant::ZERO, &mut Vec::new())
    }

    /// The offsets of the segments `p` holds.
    fn held_by(s: &FbdtSender, p: u8) -> Vec<u64> {
        s.segs
            .iter()
            .filter(|g| matches!(g.state, SegState::Sent { holders, .. } if holders & PathId(p).bit() != 0))
            .map(|g| g.off)
            .collect()
    }

    /// A one-segment request goes to the path that delivers it first, whichever path
    /// asks first — until the near path's queue outlasts the far path's delay.
    #[test]
    fn a_small_request_takes_the_path_that_delivers_it_first() {
        let mut s = near_and_far(Duration::from_millis(100), [100e6, 100e6], 64 << 20);
        let request = |s: &mut FbdtSender| {
            s.write(&[7u8; 1000]);
            while poll(s, 1) + poll(s, 0) > 0 {}
            (held_by(s, 0).len(), held_by(s, 1).len())
        };
        assert_eq!(request(&mut s), (1, 0), "the far path asked first and took it");
        // 30 ms of backlog on the near path still beats 50 ms of one-way delay ...
        s.paths[0].sent += 3_000_000;
        assert_eq!(request(&mut s), (2, 0));
        // ... 100 ms does not.
        s.paths[0].sent += 7_000_000;
        assert_eq!(request(&mut s), (2, 1), "the far path delivers sooner now");
    }

    /// The direction that only carries requests never measures a rate; an idle path's
    /// next byte still takes its one-way delay, so the request goes to the nearer path
    /// though the farther one asks first.
    #[test]
    fn a_request_takes_the_near_path_before_any_rate_is_known() {
        let cfg = FbdtConfig {
            window: WindowConfig::budget(crate::fbdt::config::DEFAULT_BUDGET),
            ..FbdtConfig::default()
        };
        let params = crate::Config::default().stream_params();
        let mut s = FbdtSender::new(&cfg, params, 0, 64 << 20);
        for (p, rtt) in [(0, Duration::from_millis(4)), (1, Duration::from_millis(2))] {
            s.path_up(PathId(p), Instant::ZERO);
            s.paths[p as usize].est.rtt_sample(rtt, Instant::ZERO);
        }
        assert!(s.paths.iter().all(|t| t.est.drain_rate_bps().is_none()));
        s.write(&[7u8; 8]);
        while poll(&mut s, 0) + poll(&mut s, 1) > 0 {}
        assert_eq!((held_by(&s, 0).len(), held_by(&s, 1).len()), (0, 1));
    }

    /// The `auto` and `paper` windows keep the paper's meeting point: whoever asks first
    /// takes the segment.
    #[test]
    fn the_auto_window_keeps_algorithm_1() {
        let auto = FbdtConfig {
            window: WindowConfig::auto(),
            ..FbdtConfig::default()
        };
        let mut s = with_config(&auto, Duration::from_millis(100), [100e6, 100e6], 64 << 20);
        s.write(&[7u8; 1000]);
        while poll(&mut s, 1) + poll(&mut s, 0) > 0 {}
        assert_eq!((held_by(&s, 0).len(), held_by(&s, 1).len()), (0, 1));
    }

    /// tc-delay-wigig's shape: a 3× faster path 1 s away. It takes only segments the near
    /// path would not reach before they arrive — at least 0.5 s × 80 MB/s ÷ (1 +
    /// tolerance) ≈ 36 MB ahead of the stream's front (`sooner_than`) — and leaves no
    /// lane behind: every byte below that goes out on the near path.
    #[test]
    fn a_far_path_works_ahead_and_leaves_nothing_behind() {
        let mut s = near_and_far(Duration::from_millis(1000), [80e6, 225e6], 64 << 20);
        let total = 48 << 20;
        assert_eq!(s.write(&vec![1u8; total]), total);
        let mut busy = true;
        while busy {
            busy = poll(&mut s, 1) > 0;
            busy |= poll(&mut s, 0) > 0;
        }
        let far = held_by(&s, 1);
        let near = held_by(&s, 0);
        assert!(!far.is_empty(), "the far path idled");
        let first_far = *far.iter().min().unwrap();
        assert!(
            first_far >= 32 << 20,
            "far path took offset {first_far}, still within the near path's reach"
        );
        // Below the far path's first segment, everything went out on the near path.
        let below = s.segs.iter().filter(|g| g.off < first_far).count();
        assert_eq!(near.iter().filter(|&&o| o < first_far).count(), below);
        assert!(s.segs.iter().all(|g| g.state != SegState::Unsent || g.off > first_far));
    }

    /// The delay-gap sweep's shape: a far path of the near one's rate, 100 ms further
    /// away, asks first. It loads the windows in between for the near path rather than
    /// idle, and starts its own 100 ms of the near path's delivery ahead; the near
    /// path then serves the windows in between from the oldest on, skipping none.
    #[test]
    fn a_far_path_loads_the_windows_in_between_for_the_near_one() {
        let rate = 37.5e6;
        let mut s = near_and_far(Duration::from_millis(202), [rate, rate], 64 << 20);
        s.write(&vec![1u8; 16 << 20]);
        // The near path finishes the first window's lane (it has no segment in hand when
        // the far path loads its windows)...
        while s.segs.iter().any(|g| g.state == SegState::Unsent) {
            poll(&mut s, 0);
        }
        // ... which the far path, whose segments there would arrive too late, left alone.
        assert!(held_by(&s, 1).is_empty());
        for _ in 0..8 {
            poll(&mut s, 1);
        }
        let first_far = *held_by(&s, 1).iter().min().expect("the far path idled") as f64;
        let lead = (0.101 - 0.001) * rate;
        assert!(
            first_far >= lead && first_far <= lead + 4.0 * s.target_window() as f64,
            "far path starts at {first_far}, lead {lead}"
        );
        let mut near = 0;
        // Until everything loaded is out (then the near path loads windows of its own).
        while let Some(lowest) = s.segs.iter().find(|g| g.state == SegState::Unsent).map(|g| g.off) {
            if poll(&mut s, 0) == 0 {
                break;
            }
            let held = held_by(&s, 0);
            if held.len() > near {
                // (Frames without a segment carry ALIGNs.)
                near = held.len();
                assert_eq!(held.iter().max().copied(), Some(lowest), "segment {near}");
            }
        }
        let sent = (near * s.params.segment_size) as f64;
        assert!(sent >= lead, "the near path stopped after {sent} bytes");
    }

    /// A Cubic window far above the path's bandwidth-delay product (it grew into the
    /// bottleneck queue) does not become backlog: with the arrival rule a path holds at
    /// most 1.25 × drain rate × base RTT (+ 2 segments); `auto` keeps the TCP window.
    #[test]
    fn the_send_limit_is_the_bdp_not_a_bloated_window() {
        let bloated = crate::path::PathStats {
            unacked_bytes: None,
            srtt: Some(Duration::from_millis(40)),
            delivery_rate_bps: Some(800e6),
            cwnd_bytes: Some(10 << 20),
            ack_silence: None,
            retransmits: None,
            sampled_at: None,
        };
        // No transport report: the bytes between two ACKs are added (the default's
        // 128 KiB, whole segments).
        let between_acks = crate::Config::default().ack_bytes as u64;
        let mut s = near_and_far(Duration::from_millis(100), [100e6, 100e6], 64 << 20);
        s.paths[0].est.driver = bloated;
        // 100 MB/s × 2 ms base RTT = 200 kB.
        assert_eq!(s.path_send_limit(PathId(0)), Some(250_000 + between_acks));
        let auto = FbdtConfig {
            window: WindowConfig::auto(),
            ..FbdtConfig::default()
        };
        let mut s = with_config(&auto, Duration::from_millis(100), [100e6, 100e6], 64 << 20);
        s.paths[0].est.driver = bloated;
        assert_eq!(
            s.path_send_limit(PathId(0)),
            Some((1.25 * (10 << 20) as f64) as u64 + between_acks)
        );
    }

    /// Path 0's transport reports `acked_more` bytes more acknowledged at `now` (200 kB stay
    /// unacknowledged), delivering at `rate` bytes/s.
    fn transport_report(s: &mut FbdtSender, now: Instant, acked_more: u64, rate: f64) {
        s.paths[0].sent += acked_more;
        let stats = crate::path::PathStats {
            srtt: Some(Duration::from_millis(40)),
            delivery_rate_bps: Some(rate * 8.0),
            cwnd_bytes: Some(10 << 20),
            unacked_bytes: Some(200_000),
            sampled_at: Some(now),
            ..Default::default()
        };
        s.path_stats(PathId(0), stats);
    }

    /// A path whose transport delivers in bursts (a radio's aggregation, a paused host)
    /// holds a burst more than its BDP: capped at the BDP, each round trip would deliver
    /// less than the rate measured, and the measure and the limit fall round after round.
    /// Steady deliveries add nothing, nor does a burst the limit's probing margin absorbs;
    /// one faster than the rate estimate (a ramp) counts at most its excess over one base
    /// RTT, and a burst is forgotten after two memory spans.
    #[test]
    fn a_bursty_path_holds_a_burst_more_than_its_bdp() {
        let mut s = near_and_far(Duration::from_millis(100), [100e6, 100e6], 64 << 20);
        let rate = 100e6; // bytes/s, × the 2-ms base RTT = 200 kB
        let mut now = Instant::ZERO + Duration::from_millis(1000);
        let report = |s: &mut FbdtSender, now: Instant, acked_more: u64| transport_report(s, now, acked_more, rate);
        let step = Duration::from_micros(500);
        let steady = |s: &mut FbdtSender, now: &mut Instant, until: Duration, k: f64| {
            let end = *now + until;
            while *now < end {
                *now = *now + step;
                report(s, *now, (k * rate * step.as_secs_f64()) as u64);
            }
        };
        steady(&mut s, &mut now, Duration::from_millis(50), 1.0);
        let between = 2 * s.frame_segments(PathId(0)) * s.params.segment_size as u64;
        assert!(s.paths[0].est.burst_bytes() <= between, "{}", s.paths[0].est.burst_bytes());
        assert_eq!(s.path_send_limit(PathId(0)), Some(250_000 + between));
        // 3 ms without an acknowledgement, then what the path held arrives within 0.2 ms.
        let paused = now + Duration::from_millis(3);
        report(&mut s, paused, 100_000);
        report(&mut s, paused + Duration::from_micros(100), 150_000);
        report(&mut s, paused + Duration::from_micros(200), 150_000);
        // 300 kB within 0.2 ms of the report that ended the pause, 20 kB of which the
        // rate explains.
        let burst = s.paths[0].est.burst_bytes();
        assert!(burst.abs_diff(280_000) <= 1, "{burst}");
        assert_eq!(s.path_send_limit(PathId(0)), Some(250_000 + burst));
        // Two memory spans (100 ms each at this base RTT) of steady deliveries forget it.
        now = paused + Duration::from_micros(200);
        steady(&mut s, &mut now, Duration::from_millis(201), 1.0);
        assert!(s.paths[0].est.burst_bytes() <= between);
        // A burst larger than the bytes between two ACKs but within them and the limit's
        // probing quarter (50 kB) adds nothing: 1.1 ms without an acknowledgement, then
        // 50 kB and 0.1 ms later 50 kB more, 40 kB ahead of the rate.
        let paused = now + Duration::from_micros(1100);
        report(&mut s, paused, 50_000);
        report(&mut s, paused + Duration::from_micros(100), 50_000);
        let small = s.paths[0].est.burst_bytes();
        assert!(small.abs_diff(40_000) <= 1 && small > between, "{small} vs {between}");
        assert_eq!(s.path_send_limit(PathId(0)), Some(250_000 + between));
        now = paused + Duration::from_micros(100);
        steady(&mut s, &mut now, Duration::from_millis(201), 1.0);
        // Deliveries half again faster than the rate estimate for 50 ms (a lagging estimate
        // in a ramp-up) count at most their excess over one base RTT (100 kB), not over
        // the 50 ms (1.25 MB).
        steady(&mut s, &mut now, Duration::from_millis(50), 1.5);
        let ramp = s.paths[0].est.burst_bytes();
        assert!(ramp <= 100_000, "{ramp}");
    }

    /// Reports of nothing new during a hold count: the transport's ACKs after it arrived
    /// after the last of them, so a hold's deliveries handed over in one report are a
    /// burst, not the rate at work since the last report that brought bytes.
    #[test]
    fn a_burst_after_reports_of_nothing_is_seen_whole() {
        let mut s = near_and_far(Duration::from_millis(100), [100e6, 100e6], 64 << 20);
        let rate = 100e6; // bytes/s
        let report = |s: &mut FbdtSender, now: Instant, acked_more: u64| transport_report(s, now, acked_more, rate);
        let step = Duration::from_micros(500);
        let mut now = Instant::ZERO + Duration::from_millis(1000);
        for _ in 0..100 {
            now = now + step;
            report(&mut s, now, (rate * step.as_secs_f64()) as u64);
        }
        // A 3-ms hold read every 0.5 ms, then all it held in the report after the last read.
        for _ in 0..6 {
            now = now + step;
            report(&mut s, now, 0);
        }
        report(&mut s, now + step, 300_000);
        let burst = s.paths[0].est.burst_bytes();
        assert!(burst.abs_diff(250_000) <= 1, "{burst}");
    }

    /// With a receive window smaller than that lead, the far path sends nothing: its
    /// segments would hold the stream up (tc-delay-wigig with the default 32 MiB window).
    #[test]
    fn a_far_path_beyond_the_receive_window_sends_nothing() {
        let mut s = near_and_far(Duration::from_millis(1000), [80e6, 225e6], 32 << 20);
        s.write(&vec![1u8; 16 << 20]);
        let mut busy = true;
        while busy {
            busy = poll(&mut s, 1) > 0;
            busy |= poll(&mut s, 0) > 0;
        }
        assert!(held_by(&s, 1).is_empty());
        assert!(
            s.segs.iter().all(|g| g.state != SegState::Unsent),
            "a lane was orphaned"
        );
    }
}
