//! One direction of one path: what an ideal TCP connection offers — a reliable, in-order
//! byte pipe — with a time-varying rate, one-way delay, a bounded sender-side backlog and
//! outages that hold data in flight (after picoquic's `sim_link`: a plain object told the
//! time, with `push`, `next_event` and `pop_arrival`).
//!
//! Model, per chunk (one frame as the core wrote it):
//! - it waits in the backlog (the socket's unsent queue; `room` = cap − backlog) until
//!   serialised at the current rate (the TCP model: at the sender's pacing rate, the
//!   bottleneck queue taking the surplus, see [`Link::send_rate`]);
//! - serialised bytes count against a TCP window until one RTT later (2 × delay): in-flight
//!   bytes never exceed `max_window`, so a long path is window-limited as real TCP is
//!   (`tcp_rmem`/`tcp_wmem` maxima);
//! - it arrives one delay after serialisation, never before an earlier chunk (in order);
//! - during an outage nothing is serialised and nothing arrives; held chunks arrive when
//!   the path comes back (TCP retransmits them, modelled here as instant recovery).
//! - random loss is not dropped here (the pipe is reliable): it caps the rate at the Mathis
//!   et al. TCP throughput, MSS/RTT · 1.22/√p, which is what a loss-limited TCP achieves.
//! - a radio with power saving (the scenario's `radio`, off by default) sleeps once nothing
//!   was serialised for its idle timeout; a chunk queued on an idle, sleeping link waits the
//!   wake-up time before serialisation starts. A link starts asleep.

use std::cell::Cell;
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;
use fbdt_core::Instant;
use fbdt_scenario::{Bursts, RadioSleep};

use crate::shared::{Coupler, SharedLink};
use crate::tcp::{Ack, TcpParams, TcpState};

#[derive(Clone, Debug)]
pub struct LinkParams {
    /// Cap of the unsent backlog (the TCP_NOTSENT_LOWAT-like bound the runtime keeps).
    pub backlog_bytes: usize,
    /// Most bytes in flight (unacknowledged at TCP level).
    pub max_window_bytes: u64,
    /// Segment size for the loss-limited rate.
    pub mss: usize,
    /// The pipe's time grain in µs (0: none): a chunk arrives at the first multiple of
    /// the grain at or after its exact arrival, so every link's arrivals within one grain
    /// are handed over in one step — never early, less than a grain late, bytes and order
    /// unchanged. The simulator's cost grows with steps; an arrival (data or ACK) is one
    /// each without a grain. Like the testbed's GSO units (250 µs), it trades timing
    /// resolution for speed; it moves delay distributions by up to the grain (measured in
    /// docs/simulator.md, "Speed"). The TCP model ignores it.
    pub grain_us: u64,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            backlog_bytes: 256 * 1024,
            // Linux's default tcp_rmem/tcp_wmem maximum (net.ipv4.tcp_rmem[2] = 6 MiB).
            max_window_bytes: 6 * 1024 * 1024,
            mss: 1448,
            grain_us: 0,
        }
    }
}

/// Loss-limited TCP throughput in bytes/s (Mathis et al. 1997), `None` without loss.
pub fn mathis_rate(mss: usize, rtt_s: f64, loss: f64) -> Option<f64> {
    (loss > 0.0 && rtt_s > 0.0).then(|| mss as f64 / rtt_s * 1.22 / loss.sqrt())
}

fn secs(t: Instant) -> f64 {
    t.as_secs_f64()
}

/// Serialisation finishing within this of `now` counts as finished: keeps float rounding
/// from scheduling an event that `advance` would then not complete (a livelock).
const EPSILON_S: f64 = 1e-9;

/// The pipe wakes the simulator when its backlog has drained to this share of the cap
/// ([`Link::next_event`]).
const LOW_WATER: f64 = 0.5;

/// [`Link::lazy_until`] of a pipe lazy for good.
const ALWAYS: Instant = Instant::from_micros(u64::MAX);

/// `s` rounded up to a whole microsecond, `(s * 1e6).ceil().max(0.0) as u64` without
/// `ceil`'s library call (the baseline x86-64 target has no rounding instruction, and
/// every chunk end is rounded so): below 2^52 the cast truncates a positive `us` and
/// adds one when it dropped a fraction; from 2^52 on `us` is whole (the cast saturates as
/// before); a negative, zero or NaN `us` is 0 as `max(0.0)` made it.
fn instant_ceil(s: f64) -> Instant {
    const FRACTIONS_END: f64 = (1u64 << 52) as f64;
    let us = s * 1e6;
    let micros = if us > 0.0 && us < FRACTIONS_END {
        let whole = us as u64;
        whole + u64::from((whole as f64) < us)
    } else if us > 0.0 {
        us as u64
    } else {
        0
    };
    Instant::from_micros(micros)
}

/// `t` rounded up to a multiple of `grain_us` µs (0: `t` itself).
fn grained(t: Instant, grain_us: u64) -> Instant {
    if grain_us <= 1 {
        return t;
    }
    Instant::from_micros(t.as_micros().div_ceil(grain_us) * grain_us)
}

/// One frame on a link: inline bytes (a header, a control frame, a copied payload) and a
/// shared payload slice after them (the zero-copy mode's; empty otherwise). The link
/// looks only at its length.
#[derive(Clone, Debug, Default)]
pub struct Chunk {
    pub head: Vec<u8>,
    pub payload: Bytes,
}

impl Chunk {
    pub fn len(&self) -> usize {
        self.head.len() + self.payload.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the bytes, keeps the inline allocation.
    pub fn clear(&mut self) {
        self.head.clear();
        self.payload = Bytes::new();
    }
}

impl From<Vec<u8>> for Chunk {
    fn from(head: Vec<u8>) -> Self {
        Chunk {
            head,
            payload: Bytes::new(),
        }
    }
}

pub struct Link {
    params: LinkParams,
    backlog: VecDeque<Chunk>,
    backlog_bytes: usize,
    /// Bytes of the backlog's head serialised by `head_from`.
    head_done: f64,
    /// The pipe: since when the head has been serialising at the current rate (`None`: it
    /// starts at `clock`). Its end is worked out from here, not from the last `advance`,
    /// so it does not depend on how often `advance` is called (a lazy pipe's wake-ups
    /// then change nothing). The TCP model's rate moves with every ACK: it folds the
    /// progress in at each call instead and leaves this `None`.
    head_from: Option<f64>,
    /// Chunks on their way: when each arrives (on the grain) and when it would arrive
    /// without one.
    in_flight: VecDeque<(Instant, Instant, Chunk)>,
    /// Chunks at the head of `in_flight` that arrive although the path is down: with a
    /// grain, those that would have arrived before the outage began without one (the bound:
    /// less than a grain late), released at its start.
    released: usize,
    /// Serialised bytes awaiting their TCP-level ACK.
    window: VecDeque<Unacked>,
    window_bytes: u64,
    /// Bytes of `window` the bottleneck queue dropped (overflow): in TCP's window until
    /// their ACK, but neither queued nor on the wire.
    dropped_bytes: u64,
    /// Effective rate in bytes/s; 0 while down.
    rate: f64,
    delay_s: f64,
    up: bool,
    /// Time (s) up to which serialisation has been computed.
    clock: f64,
    last_arrival: Instant,
    /// `last_arrival` without the grain.
    last_exact: Instant,
    pub bytes_serialised: u64,
    /// Loss probability per segment now (the TCP model draws from it).
    loss: f64,
    /// The TCP-level model (`None`: an ideal pipe).
    tcp: Option<TcpState>,
    /// Radio power saving, in seconds: (idle timeout, wake-up time).
    radio: Option<(f64, f64)>,
    /// Delivery in bursts: arrivals (and the TCP model's ACKs) wait for the end of a hold.
    bursts: Option<Bursts>,
    /// When the last chunk finished serialising (s); −∞ before the first.
    last_sent_s: f64,
    /// A wake-up in progress: serialisation starts at this time (s).
    waking_until_s: Option<f64>,
    /// A pipe that need not wake the simulator at chunk ends before this instant
    /// ([`Link::lazy`], [`Link::set_lazy_until`]); zero: at every chunk's end.
    lazy_until: Instant,
    /// The pipe's last `next_event` answer and whether the pipe was lazy then: the same
    /// while nothing it depends on changed (every change but the clock's clears it; an
    /// answer that depended on the clock is not kept).
    next_memo: Cell<Option<(bool, Option<Instant>)>>,
    /// The pipe's head is serialising (up, no stall, window open) and ends at this time
    /// (s), as `advance` worked it out when it last stopped: until a call reaches it, a
    /// call only takes the ACKs due and moves the clock (`advance`'s first round, with
    /// nothing else that could differ). Cleared by anything that changes the head, the
    /// rate or a stall.
    cruise: Option<f64>,
    /// The opposite direction is cut ([`Link::hold_acks`]): no TCP-level ACK comes back,
    /// so the window does not move.
    acks_held: bool,
    /// The TCP model: when the sender last heard an ACK (s; [`Link::ack_silence_since`]),
    /// and since when none can come (the link down, or its ACKs held).
    heard_s: f64,
    down_at_s: Option<f64>,
    held_at_s: Option<f64>,
    /// The TCP model: the shared bottleneck this direction crosses and its member index
    /// ([`crate::shared`]); `None`: the path's own queue is the bottleneck.
    shared: Option<(Rc<SharedLink>, usize)>,
    /// The TCP model: the connection's coupled windows and this path's index (LIA).
    coupler: Option<(Rc<Coupler>, usize)>,
    /// Bytes handed to the receiver ([`Link::pop_arrival`]).
    pub bytes_arrived: u64,
    /// The TCP model: when lost chunks are resent (s), until [`Link::retransmits`] counts
    /// them, and how many it has counted.
    resends_pending: Vec<f64>,
    resent: u64,
}

/// A serialised chunk awaiting its ACK.
#[derive(Clone, Copy)]
struct Unacked {
    /// When the ACK arrives (s).
    ack_s: f64,
    /// When the ACKs of its first segments arrive (s): the receiver acknowledges every
    /// other segment, so a chunk's ACKs come over the time it takes to drain.
    first_ack_s: f64,
    len: usize,
    /// Its round trip as measured (a retransmitted chunk's: the one it would have had;
    /// Linux takes no sample from a retransmission, Karn).
    rtt_s: f64,
    /// It was lost and retransmitted.
    lost: bool,
    /// Its repair took a retransmission timeout.
    timed_out: bool,
    /// When it was sent (s).
    sent_s: f64,
    /// The overflowing bottleneck queue dropped it.
    dropped: bool,
}

/// What the TCP-level model reports (TCP_INFO-like).
#[derive(Clone, Copy, Debug)]
pub struct TcpInfo {
    pub srtt_s: f64,
    pub cwnd_bytes: u64,
    pub rate: f64,
    pub losses: u64,
    pub timeouts: u64,
}

impl Link {
    pub fn new(params: LinkParams) -> Self {
        Link {
            params,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            head_done: 0.0,
            head_from: None,
            in_flight: VecDeque::new(),
            released: 0,
            window: VecDeque::new(),
            window_bytes: 0,
            dropped_bytes: 0,
            rate: 0.0,
            delay_s: 0.0,
            up: false,
            clock: 0.0,
            last_arrival: Instant::ZERO,
            last_exact: Instant::ZERO,
            bytes_serialised: 0,
            loss: 0.0,
            tcp: None,
            radio: None,
            bursts: None,
            last_sent_s: f64::NEG_INFINITY,
            waking_until_s: None,
            lazy_until: Instant::ZERO,
            next_memo: Cell::new(None),
            cruise: None,
            acks_held: false,
            heard_s: 0.0,
            down_at_s: None,
            held_at_s: None,
            shared: None,
            coupler: None,
            bytes_arrived: 0,
            resends_pending: Vec::new(),
            resent: 0,
        }
    }

    /// This TCP-model link crosses the shared bottleneck `link` as its member `k`.
    pub fn join_shared(&mut self, link: Rc<SharedLink>, k: usize) {
        self.shared = Some((link, k));
        self.publish();
    }

    /// This TCP-model link's window is coupled to the connection's others as member `k`
    /// of `coupler`: RFC 6356 LIA in place of the scenario's controller unless that is
    /// BBR, or with `cubic` coupled Cubic on a Cubic path ([`crate::Coupling::Cubic`]).
    pub fn join_coupler(&mut self, coupler: Rc<Coupler>, k: usize, cubic: bool) {
        self.coupler = Some((coupler, k));
        if let Some(tcp) = &mut self.tcp {
            // Coupled from the first byte: LIA's slow start (no HyStart) and halving, or
            // coupled Cubic's.
            tcp.coupling = Some(1.0);
            tcp.cubic_coupled = cubic;
        }
        self.publish();
    }

    /// Bytes of the window queued or on the wire (not the drops).
    fn carried_bytes(&self) -> f64 {
        (self.window_bytes - self.dropped_bytes) as f64
    }

    /// Tells the shared bottleneck and the coupler this link's state now.
    fn publish(&self) {
        let Some(tcp) = &self.tcp else { return };
        if let Some((link, k)) = &self.shared {
            let access = if self.up { self.rate } else { 0.0 };
            link.publish(*k, self.carried_bytes(), 2.0 * self.delay_s, access);
        }
        if let Some((c, k)) = &self.coupler {
            let active = self.up && !self.acks_held;
            c.publish(*k, tcp.srtt_s.filter(|_| active).map(|rtt| (tcp.cwnd, rtt)));
        }
    }

    /// The rate this direction's bytes drain at now: the path's, or its share of the
    /// shared bottleneck.
    fn drain_rate(&self) -> f64 {
        match &self.shared {
            Some((link, k)) if self.tcp.is_some() => {
                link.solve(*k, self.carried_bytes(), 2.0 * self.delay_s, self.rate).rate
            }
            _ => self.rate,
        }
    }

    /// The opposite direction of this connection is cut (`held`) or back at `now`: while
    /// held, bytes already in the window still arrive but no ACK does, so the sender stops
    /// once its window is full (the TCP model's timers are not told: the outage of the
    /// other direction is what the TCP model of that direction backs off for). On release
    /// the ACKs held back arrive one delay later, as the first ACK sent after the outage.
    pub fn hold_acks(&mut self, now: Instant, held: bool) {
        if self.acks_held == held {
            return;
        }
        self.next_memo.set(None);
        self.cruise = None;
        self.acks_held = held;
        self.held_at_s = held.then(|| secs(now));
        if !held {
            let back = secs(now) + self.delay_s;
            for u in &mut self.window {
                u.ack_s = u.ack_s.max(back);
            }
        }
    }

    /// The same link whose radio sleeps when idle (`None`: always awake).
    pub fn with_radio(mut self, radio: Option<RadioSleep>) -> Self {
        self.radio = radio.map(|r| (r.idle_timeout_ms / 1e3, r.wake_ms / 1e3));
        self
    }

    /// The same link delivering in bursts (`None`: as it goes).
    pub fn with_bursts(mut self, bursts: Option<Bursts>) -> Self {
        self.bursts = bursts;
        self
    }

    /// The same pipe, waking the simulator only when a chunk arrives or its backlog is
    /// half drained ([`Link::pipe_wakes`]), not at every chunk's end: for a direction whose
    /// sender's timing nothing measures (the reverse one, acknowledgements). The TCP model
    /// ignores it (its sender's state moves with every chunk).
    pub fn lazy(mut self) -> Self {
        self.lazy_until = ALWAYS;
        self
    }

    /// Makes the pipe lazy ([`Link::lazy`]) for its chunk ends before `until` (`None`:
    /// all of them): the data direction's sender would not use more room before then
    /// unless an input (a step of its own) comes first (`SimEndpoint::room_wanted_from`).
    pub fn set_lazy_until(&mut self, until: Option<Instant>) {
        let until = until.unwrap_or(ALWAYS);
        if until != self.lazy_until {
            self.lazy_until = until;
            self.next_memo.set(None);
        }
    }

    /// A link whose sender runs the TCP-level model ([`crate::tcp`]).
    pub fn tcp(params: LinkParams, tcp: TcpParams) -> Self {
        let state = TcpState::new(tcp, params.mss);
        Link {
            tcp: Some(state),
            ..Link::new(params)
        }
    }

    /// The TCP model: chunks resent by `now` (TCP_INFO's `total_retrans`, which counts
    /// at the resend, not at the loss). `None` for an ideal pipe.
    pub fn retransmits(&mut self, now: Instant) -> Option<u64> {
        self.tcp.as_ref()?;
        let now_s = secs(now) + EPSILON_S;
        let before = self.resends_pending.len();
        self.resends_pending.retain(|&t| t > now_s);
        self.resent += (before - self.resends_pending.len()) as u64;
        Some(self.resent)
    }

    /// The TCP model's view (`None` for an ideal pipe).
    pub fn tcp_info(&self) -> Option<TcpInfo> {
        let t = self.tcp.as_ref()?;
        let srtt_s = t.srtt_s.unwrap_or(2.0 * self.delay_s);
        let cwnd = t.cwnd.min(self.params.max_window_bytes as f64);
        // At a shared bottleneck the path delivers its share there: what its window
        // drains at with the others' bytes in the queue (the window's, not what is in
        // flight now, so an idle path does not report 0).
        let rate = match &self.shared {
            Some((link, k)) => link.solve(*k, cwnd, 2.0 * self.delay_s, self.rate).rate,
            None => self.rate,
        };
        Some(TcpInfo {
            srtt_s,
            cwnd_bytes: cwnd as u64,
            rate: if srtt_s > 0.0 {
                rate.min(cwnd / srtt_s)
            } else {
                rate
            },
            losses: t.losses,
            timeouts: t.timeouts,
        })
    }

    /// The rate the head of the backlog leaves the sender at: the path's for a pipe; for the
    /// TCP model Linux's pacing rate (2 × cwnd/srtt in slow start, 1.2 × after), *not*
    /// capped at the path's rate. A window above the bandwidth-delay product therefore puts
    /// bytes into the bottleneck queue faster than it drains (`TcpState::queue`): the
    /// round trip grows, the window fills, and a window past the queue overflows it and
    /// loses — as a real sender does. Capped at the path's rate, the sender itself was the
    /// bottleneck: the queue never formed, Cubic grew to the maximum window without a loss,
    /// and a meta-layer scheduler saw a subflow whose window never filled (minRTT then
    /// sent everything on one path; see docs/simulator.md).
    fn send_rate(&self) -> f64 {
        match &self.tcp {
            Some(t) => {
                let srtt = t.srtt_s.unwrap_or(2.0 * self.delay_s);
                let window = t.cwnd.min(self.params.max_window_bytes as f64);
                if srtt > 0.0 {
                    t.pacing_gain() * window / srtt
                } else {
                    self.rate
                }
            }
            None => self.rate,
        }
    }

    /// Most bytes in flight now: the TCP window, or the maximum for a pipe.
    fn window_limit(&self) -> u64 {
        let max = self.params.max_window_bytes;
        self.tcp.as_ref().map_or(max, |t| (t.cwnd as u64).min(max))
    }

    /// Transmission is held (a TCP retransmission timer pending, the radio waking up)
    /// until this time.
    fn stalled_until(&self) -> Option<f64> {
        let tcp = self.tcp.as_ref().map(|t| t.stalled_until_s);
        let held = match (tcp, self.waking_until_s) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        held.filter(|&s| s > self.clock)
    }

    /// Bytes the sender may queue now.
    pub fn room(&self) -> usize {
        self.params.backlog_bytes.saturating_sub(self.backlog_bytes)
    }

    pub fn backlog_bytes(&self) -> usize {
        self.backlog_bytes
    }

    /// Bytes queued or sent and not yet acknowledged at the transport level: the backlog
    /// plus the TCP model's window; for a pipe, its chunks on their way and what arrived
    /// while their ACKs would still be on the way back (at most one one-way delay at the
    /// path's rate, never more than the pipe serialised).
    pub fn unacked_bytes(&self) -> u64 {
        let sent = match &self.tcp {
            Some(_) => self.window_bytes,
            None => {
                let on_the_way: u64 = self.in_flight.iter().map(|(_, _, c)| c.len() as u64).sum();
                let acks_on_the_way = (self.rate * self.delay_s) as u64;
                (on_the_way + acks_on_the_way).min(self.bytes_serialised)
            }
        };
        self.backlog_bytes as u64 + sent
    }

    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Current one-way delay in seconds.
    pub fn delay_s(&self) -> f64 {
        self.delay_s
    }

    /// The longest round trip without a queue: both delays and, on a path that delivers
    /// in bursts, one hold (an ideal transport's window must span it to keep the link busy).
    pub fn round_trip_s(&self) -> f64 {
        2.0 * self.delay_s + self.bursts.map_or(0.0, |b| b.hold_ms / 1e3)
    }

    /// Current effective rate in bytes/s.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Queues a chunk (call `advance(now)` first: an idle radio's sleep is judged at the
    /// link's clock).
    pub fn push(&mut self, chunk: Chunk) {
        self.next_memo.set(None);
        if let Some((idle_timeout_s, wake_s)) = self.radio {
            let idle = self.backlog.is_empty() && self.waking_until_s.is_none_or(|w| w <= self.clock);
            if idle && self.clock - self.last_sent_s >= idle_timeout_s {
                // On a whole microsecond, as the simulator's clock: the instant
                // `next_event` announces then finds the wake-up done (no livelock).
                self.waking_until_s = Some(instant_ceil(self.clock + wake_s).as_secs_f64());
            }
        }
        self.backlog_bytes += chunk.len();
        self.backlog.push_back(chunk);
    }

    /// Applies a schedule step at `now` (call `advance(now)` first). `rate_mbps` 0 = outage.
    pub fn set(&mut self, now: Instant, rate_mbps: f64, delay_ms: f64, loss: f64) {
        self.next_memo.set(None);
        self.cruise = None;
        self.clock = self.clock.max(secs(now));
        // The head goes on from here at the new rate.
        if let Some(from) = self.head_from.take() {
            self.head_done += (self.clock - from) * self.rate;
        }
        self.delay_s = delay_ms / 1e3;
        let was_up = self.up;
        self.up = rate_mbps > 0.0;
        if was_up != self.up {
            self.down_at_s = (!self.up).then_some(self.clock);
        }
        self.released = 0;
        if was_up && !self.up && self.params.grain_us > 1 && self.tcp.is_none() {
            // On the grain, a chunk that would have arrived before the outage without one
            // must not wait it out (it would be late by the outage, not by less than a
            // grain): it arrives now. Without a grain there is none (arrived is arrived).
            self.released = self.in_flight.iter().take_while(|&&(_, exact, _)| exact < now).count();
            for (t, _, _) in self.in_flight.iter_mut().take(self.released) {
                *t = now;
            }
        }
        let raw = rate_mbps * 1e6 / 8.0;
        self.loss = loss;
        if let Some(tcp) = &mut self.tcp {
            self.rate = if self.up { raw } else { 0.0 };
            if was_up && !self.up {
                tcp.went_down(secs(now));
            } else if !was_up && self.up {
                if let Some(resume) = tcp.came_up(secs(now)) {
                    // What was in flight was lost in the outage: it is retransmitted when
                    // transmission resumes.
                    let again = instant_ceil(resume + self.delay_s);
                    for (t, _, _) in &mut self.in_flight {
                        *t = (*t).max(again);
                    }
                    self.last_arrival = self.last_arrival.max(again);
                    self.last_exact = self.last_exact.max(again);
                    self.window.clear();
                    self.window_bytes = 0;
                    self.dropped_bytes = 0;
                }
            }
            self.publish();
            return;
        }
        let limited = mathis_rate(self.params.mss, 2.0 * self.delay_s, loss).map_or(raw, |m| m.min(raw));
        self.rate = if self.up { limited } else { 0.0 };
    }

    /// The TCP model with data in flight (sent and not acknowledged, or not arrived): when
    /// its sender last heard an ACK, as of `now` (TCP_INFO's `last_ack_recv`). `None`:
    /// nothing in flight, or a pipe.
    pub fn ack_silence_since(&self, now: Instant) -> Option<f64> {
        self.tcp.as_ref()?;
        if self.window.is_empty() && self.in_flight.is_empty() {
            return None;
        }
        let stopped = self.down_at_s.into_iter().chain(self.held_at_s).reduce(f64::min);
        // ACKs came until now, or until they stopped (the model still takes a down link's
        // window as acknowledged; no ACK reaches the sender then).
        let until = stopped.map_or(secs(now), |s| s.min(secs(now)));
        let hearing = self.window.front().is_some_and(|u| u.first_ack_s <= until);
        Some(if hearing { until } else { self.heard_s.min(until) })
    }

    /// Serialises whatever the rate allows up to `now`.
    pub fn advance(&mut self, now: Instant) {
        let now_s = secs(now);
        // The TCP model's events (ACKs, timer expiries) are due when `next_event` rounded
        // them up to `now`; float rounding must not leave them pending (a livelock). The
        // pipe keeps its exact comparison (its results stay as they were).
        let due_s = now_s + if self.tcp.is_some() { EPSILON_S } else { 0.0 };
        // The pipe keeps its exact comparison, plus the one case rounding used to leave
        // pending: an ACK `next_event` announced for `now` (before, a certain livelock).
        let ack_due = |ack_s: f64| ack_s <= due_s || instant_ceil(ack_s) <= now;
        if let Some(finish) = self.cruise {
            // The loop's first round while the head is still serialising: nothing but the
            // ACKs due can change (a push queues behind the head; a wake-up or a stall
            // needs an empty backlog or a full window; `set` and `flush` clear this).
            while !self.acks_held && self.window.front().is_some_and(|u| u.ack_s <= self.clock) {
                self.next_memo.set(None);
                let u = self.window.pop_front().expect("checked");
                self.heard_s = self.heard_s.max(u.ack_s);
                self.window_bytes -= u.len as u64;
                if u.dropped {
                    self.dropped_bytes -= u.len as u64;
                }
            }
            if finish > now_s + EPSILON_S {
                self.clock = self.clock.max(now_s);
                return;
            }
        }
        self.cruise = None;
        loop {
            while !self.acks_held && self.window.front().is_some_and(|u| u.ack_s <= self.clock) {
                self.next_memo.set(None);
                let u = self.window.pop_front().expect("checked");
                self.heard_s = self.heard_s.max(u.ack_s);
                self.window_bytes -= u.len as u64;
                if u.dropped {
                    self.dropped_bytes -= u.len as u64;
                }
                let rate = if self.shared.is_some() { self.drain_rate() } else { self.rate };
                if let Some(tcp) = &mut self.tcp {
                    if let Some((c, k)) = &self.coupler {
                        let rtt = tcp.srtt_s.unwrap_or(u.rtt_s);
                        tcp.coupling = Some(c.factor(*k, tcp.cwnd, rtt));
                    }
                    let base_rtt = 2.0 * self.delay_s;
                    tcp.flight_bytes = (self.window_bytes + u.len as u64) as f64;
                    let ack = Ack {
                        t_s: u.ack_s,
                        len: u.len,
                        rtt_s: u.rtt_s,
                        lost: u.lost,
                        timed_out: u.timed_out,
                        sent_s: u.sent_s,
                    };
                    tcp.on_ack_at(ack, rate * base_rtt, rate);
                    if let Some((c, k)) = &self.coupler {
                        c.publish(*k, tcp.srtt_s.map(|rtt| (tcp.cwnd, rtt)));
                    }
                }
            }
            if !self.up || self.rate <= 0.0 || self.backlog.is_empty() {
                break;
            }
            if let Some(until) = self.stalled_until() {
                debug_assert!(self.head_from.is_none(), "a stall in the middle of a pipe's chunk");
                if until <= due_s {
                    self.next_memo.set(None);
                    self.clock = until;
                    continue;
                }
                break;
            }
            if self.window_bytes >= self.window_limit() {
                debug_assert!(
                    self.head_from.is_none(),
                    "a full window in the middle of a pipe's chunk"
                );
                match self.window.front() {
                    Some(u) if !self.acks_held && ack_due(u.ack_s) => {
                        self.next_memo.set(None);
                        self.clock = self.clock.max(u.ack_s);
                        continue;
                    }
                    _ => break,
                }
            }
            let rate = self.send_rate();
            let from = self.head_from.unwrap_or(self.clock);
            let finish = self.head_end(from, rate);
            if finish > now_s + EPSILON_S {
                if self.tcp.is_some() {
                    self.head_done += (now_s - from) * rate;
                } else {
                    if self.head_from.is_none() {
                        self.next_memo.set(None);
                        self.head_from = Some(from);
                    }
                    self.cruise = Some(finish);
                }
                break;
            }
            self.next_memo.set(None);
            self.clock = finish;
            let chunk = self.backlog.pop_front().expect("non-empty");
            // Queued with others (serialised back to back with the chunk before it, or with
            // more behind it): the sender's socket held them together, and TCP packs queued
            // writes into full segments (`tcp_sendmsg` fills the tail skb), so a small frame
            // shares a packet with its neighbours.
            let packed = !self.backlog.is_empty() || finish - self.last_sent_s <= chunk.len() as f64 / rate + EPSILON_S;
            self.last_sent_s = finish;
            self.backlog_bytes -= chunk.len();
            self.head_done = 0.0;
            self.head_from = None;
            self.bytes_serialised += chunk.len() as u64;
            let len = chunk.len();
            let base_rtt = 2.0 * self.delay_s;
            // The pipe: one delay to arrive, one round trip to be acknowledged. The TCP
            // model adds the bottleneck queue's delay; a lost chunk arrives when its
            // retransmission does, which depends on how the loss is found (fast
            // retransmit, RACK, a loss probe or the retransmission timer:
            // `TcpState::repair`), and holds back everything after it (in-order delivery).
            let mss = self.params.mss as f64;
            let window_segments = ((self.window_limit() as f64 / mss).floor() as u32).max(1);
            let backlog_segments = (self.backlog_bytes as f64 / mss).ceil() as u32;
            let mut dropped = false;
            let (queue_s, repair) = match &mut self.tcp {
                None => (0.0, None),
                Some(tcp) => {
                    // Bytes whose ACK is only held back by a cut reverse direction have
                    // left the bottleneck: they are in the window, not in the queue.
                    // Dropped bytes are in neither (an overflowing queue's drops do not
                    // hold its room).
                    let past: u64 = if self.acks_held {
                        let clock = self.clock;
                        self.window
                            .iter()
                            .filter(|u| u.ack_s <= clock && !u.dropped)
                            .map(|u| u.len as u64)
                            .sum()
                    } else {
                        0
                    };
                    let queued = (self.window_bytes - self.dropped_bytes - past + len as u64) as f64;
                    let (queue_s, overflow) = match &self.shared {
                        None => tcp.queue(queued, self.rate, base_rtt),
                        Some((link, k)) => {
                            let s = link.solve(*k, queued, base_rtt, self.rate);
                            (s.queue_s, s.overflow)
                        }
                    };
                    dropped = overflow;
                    let repair = tcp.lost(len, self.loss, overflow, packed).map(|after| {
                        // Segments sent after the lost one within its round trip: the
                        // rest of the window (SACKs clock out new ones, limited transmit),
                        // or what there is to send.
                        let window = tcp.window_at_segment(window_segments, len, after);
                        let follow = (window - 1).min(after.saturating_add(backlog_segments));
                        let r = tcp.repair(finish, base_rtt + queue_s, base_rtt, follow, window, self.loss);
                        (r, follow)
                    });
                    (queue_s, repair)
                }
            };
            let mut acked_s = finish + base_rtt + queue_s;
            let (arrival_s, mut ack_s, lost, timed_out) = match repair {
                None => (finish + self.delay_s + queue_s, acked_s, false, false),
                Some((r, follow)) => {
                    self.resends_pending.push(r.resend_s);
                    // The window moves on at the chunk's own ACK time while later
                    // segments' SACKs keep the ACK clock running; with nothing after it,
                    // or behind a timeout, the window waits for the retransmission.
                    let held = follow == 0 || r.timeouts > 0;
                    (
                        r.resend_s + self.delay_s + queue_s,
                        if held { r.resend_s.max(acked_s) } else { acked_s },
                        true,
                        r.timeouts > 0,
                    )
                }
            };
            // In order: never before the one ahead, with the grain or without it.
            let exact = instant_ceil(arrival_s).max(self.last_exact);
            let arrival = self.arrival_at(exact).max(self.last_arrival);
            self.last_exact = exact;
            self.last_arrival = arrival;
            if let Some(b) = self.bursts {
                // The receiver's ACK leaves when the chunk arrives and waits for the
                // reverse direction's hold too.
                let held = b.release_s(secs(arrival) + self.delay_s);
                ack_s = ack_s.max(held);
                acked_s = acked_s.max(held);
            }
            let drain = self.drain_rate();
            self.window.push_back(Unacked {
                ack_s,
                first_ack_s: (acked_s - len as f64 / drain).min(ack_s),
                len,
                rtt_s: acked_s - finish,
                lost,
                timed_out,
                sent_s: finish,
                dropped,
            });
            self.window_bytes += len as u64;
            if dropped {
                self.dropped_bytes += len as u64;
            }
            self.in_flight.push_back((arrival, exact, chunk));
            if self.shared.is_some() {
                self.publish();
            }
        }
        self.clock = self.clock.max(now_s);
        self.publish();
    }

    /// When a chunk that reaches the link's end at `t` arrives: on the pipe's grain
    /// ([`LinkParams::grain_us`]; the TCP model's arrivals stay exact), and after the
    /// path's hold if it delivers in bursts.
    fn arrival_at(&self, t: Instant) -> Instant {
        let t = match self.tcp {
            None => grained(t, self.params.grain_us),
            Some(_) => t,
        };
        match self.bursts {
            Some(b) => match b.release_s(secs(t)) {
                held if held > secs(t) => t.max(instant_ceil(held)),
                _ => t,
            },
            None => t,
        }
    }

    /// When the backlog's head finishes serialising at `rate`, having serialised
    /// `head_done` bytes by `from`.
    fn head_end(&self, from: f64, rate: f64) -> f64 {
        let head_len = self.backlog.front().map_or(0, |c| c.len());
        from + (head_len as f64 - self.head_done) / rate
    }

    /// The next time something happens on this link (a chunk finishes serialising, the
    /// window opens, or a chunk arrives), if anything is pending.
    ///
    /// The simulator asks every link at every step, and most links did not change since
    /// the last step but for their clock: a pipe keeps its answer until something it
    /// depends on changes (`next_memo`). Not the clock alone: `advance` serialises to
    /// the same instants however often it is called, a stall's end and a window's ACK are
    /// instants of their own, and laziness (which depends on the clock) is checked anew.
    /// Only an answer worked out from the clock (a head that has not started) is not
    /// kept. Debug builds work it out anyway and check it agrees.
    pub fn next_event(&self) -> Option<Instant> {
        if self.tcp.is_some() {
            return self.work_out_next_event();
        }
        let lazy = self.is_lazy();
        if let Some((was_lazy, next)) = self.next_memo.get().filter(|&(l, _)| l == lazy) {
            debug_assert_eq!(
                (was_lazy, next),
                (lazy, self.work_out_next_event()),
                "a pipe's next event changed with no change noted"
            );
            return next;
        }
        let next = self.work_out_next_event();
        let from_clock = self.up && !self.backlog.is_empty() && self.head_from.is_none();
        if !from_clock {
            self.next_memo.set(Some((lazy, next)));
        }
        next
    }

    /// [`Link::next_event`], worked out.
    fn work_out_next_event(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if self.up {
            if let Some(&(t, _, _)) = self.in_flight.front() {
                consider(t);
            }
            if !self.backlog.is_empty() {
                if let Some(until) = self.stalled_until() {
                    consider(instant_ceil(until));
                } else if self.window_bytes >= self.window_limit() {
                    if let Some(u) = self.window.front().filter(|_| !self.acks_held) {
                        consider(instant_ceil(u.ack_s));
                    }
                } else if self.rate > 0.0 && (self.tcp.is_some() || !self.is_lazy()) {
                    let from = self.head_from.unwrap_or(self.clock);
                    consider(instant_ceil(self.head_end(from, self.send_rate()) - EPSILON_S));
                } else if self.rate > 0.0 {
                    let (arrival, low_water) = self.pipe_wakes();
                    consider(arrival);
                    // From `lazy_until` on the simulator must step where an eager pipe has
                    // it step (chunk ends, arrivals) and nowhere else: a poll there may send.
                    if let Some(t) = low_water.filter(|&t| t < self.lazy_until) {
                        consider(t);
                    }
                    if let Some(t) = Some(self.lazy_until).filter(|&u| u != ALWAYS) {
                        self.first_end_from(t).into_iter().for_each(&mut consider);
                    }
                }
            }
        }
        next
    }

    /// The pipe's wake-ups for a serialising backlog. Not every chunk's end: `advance`
    /// serialises to the same instants however often it is called (`head_from`), so the
    /// simulator need only be woken (a) when the head would arrive — no chunk arrives
    /// earlier, so none is delivered late — and (b) when enough of the backlog is gone that
    /// the sender should top it up: the end of the chunk that takes it to
    /// [`LOW_WATER`] of the cap or below (nothing if it is already there: the sender was
    /// offered that room and did not fill it, so more room would not be used either).
    /// One wake-up per half a backlog instead of one per chunk; the sender still finds
    /// the backlog non-empty, so the link never idles for it.
    fn pipe_wakes(&self) -> (Instant, Option<Instant>) {
        let rate = self.rate;
        let from = self.head_from.unwrap_or(self.clock);
        let head_end = self.head_end(from, rate);
        // The head's arrival as `advance` will work it out; the lazy-for-good reverse
        // direction keeps its wake a rounding early (a step where nothing happens), which
        // leaves its runs as they were.
        let arrival = if self.lazy_until == ALWAYS {
            self.arrival_at(instant_ceil(head_end + self.delay_s - EPSILON_S))
        } else {
            self.arrival_at(instant_ceil(head_end + self.delay_s))
                .max(self.last_arrival)
        };
        let low = (self.params.backlog_bytes as f64 * LOW_WATER) as usize;
        if self.backlog_bytes <= low {
            return (arrival, None);
        }
        let mut left = self.backlog_bytes;
        let mut sent = -self.head_done;
        for c in &self.backlog {
            left -= c.len();
            sent += c.len() as f64;
            if left <= low {
                return (arrival, Some(instant_ceil(from + sent / rate - EPSILON_S)));
            }
        }
        (arrival, None)
    }

    /// Lazy now: for good, or until a time past the clock, with no window stall
    /// possible before the next push (the chunk ends `first_end_from` works out then hold).
    fn is_lazy(&self) -> bool {
        self.lazy_until == ALWAYS
            || (self.clock < secs(self.lazy_until)
                && self.window_bytes + self.backlog_bytes as u64 <= self.window_limit())
    }

    /// The first chunk end at or after `at`, as the wake-up instant an eager pipe
    /// would announce for it: each chunk's end is worked out as `advance` does (from the
    /// last one's end), so the instants agree to the bit.
    fn first_end_from(&self, at: Instant) -> Option<Instant> {
        // ceil(x) ≥ n ⟺ x > n − 1: no rounding per chunk (`ceil` is a library call).
        let below = at.as_micros().saturating_sub(1) as f64;
        let from = self.head_from.unwrap_or(self.clock);
        let end = self.head_end(from, self.rate);
        // Mostly `at` (a redundancy deadline) lies beyond the whole backlog: the summed
        // ends then stay below it, which the backlog's total shows without the walk —
        // with a margin of 0.1 µs, far above the rounding of a few dozen sums.
        let last = from + (self.backlog_bytes as f64 - self.head_done) / self.rate;
        if at != Instant::ZERO && (last - EPSILON_S) * 1e6 + 0.1 <= below {
            debug_assert_eq!(self.first_end_walked(at, end), None, "the backlog ends before {at}");
            return None;
        }
        self.first_end_walked(at, end)
    }

    /// [`Link::first_end_from`] by walking the backlog from the head's `end`.
    fn first_end_walked(&self, at: Instant, mut end: f64) -> Option<Instant> {
        let below = at.as_micros().saturating_sub(1) as f64;
        let mut rest = self.backlog.iter().skip(1);
        loop {
            if (end - EPSILON_S) * 1e6 > below || at == Instant::ZERO {
                let wake = instant_ceil(end - EPSILON_S);
                debug_assert!(wake >= at);
                return Some(wake);
            }
            end += rest.next()?.len() as f64 / self.rate;
        }
    }

    /// The next chunk that has arrived by `now`, in order. Nothing arrives while down.
    pub fn pop_arrival(&mut self, now: Instant) -> Option<Chunk> {
        if !self.up {
            if self.released == 0 {
                return None;
            }
            self.released -= 1;
            let chunk = self.in_flight.pop_front().map(|(_, _, c)| c);
            self.bytes_arrived += chunk.as_ref().map_or(0, |c| c.len() as u64);
            return chunk;
        }
        if self.in_flight.front().is_none_or(|&(t, _, _)| t > now) {
            return None;
        }
        self.next_memo.set(None);
        let chunk = self.in_flight.pop_front().map(|(_, _, c)| c);
        self.bytes_arrived += chunk.as_ref().map_or(0, |c| c.len() as u64);
        chunk
    }

    /// The TCP model's connection is stalled at `now`: its path is down, or it waits for a
    /// (backed-off) retransmission timer. Never for a pipe.
    pub fn tcp_stalled(&self, now: Instant) -> bool {
        self.tcp
            .as_ref()
            .is_some_and(|t| !self.up || t.stalled_until_s > secs(now))
    }

    /// A fresh TCP connection replaces this one: everything queued or in flight is
    /// dropped ([`Link::flush`]) and the TCP model starts over ([`Link::new_connection`]).
    pub fn replace_connection(&mut self) {
        self.flush();
        self.new_connection();
    }

    /// The TCP model's connection is a new one (a reconnect after a reset or failure, or a
    /// replacement): initial window, no RTT sample, no timer pending, nothing of the old
    /// connection's ahead of its bytes. Nothing changes for a pipe.
    pub fn new_connection(&mut self) {
        if let Some(t) = &mut self.tcp {
            t.fresh();
            if self.in_flight.is_empty() {
                self.last_arrival = Instant::ZERO;
                self.last_exact = Instant::ZERO;
            }
        }
        self.publish();
    }

    /// Drops everything queued or in flight (the connection was reset).
    pub fn flush(&mut self) {
        self.next_memo.set(None);
        self.cruise = None;
        self.backlog.clear();
        self.backlog_bytes = 0;
        self.head_done = 0.0;
        self.head_from = None;
        self.in_flight.clear();
        self.released = 0;
        self.window.clear();
        self.window_bytes = 0;
        self.dropped_bytes = 0;
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    /// The sooner of the link's next event and the test's own.
    fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn drain(link: &mut Link, until: Instant) -> Vec<(Instant, usize)> {
        let mut got = Vec::new();
        let mut now = Instant::ZERO;
        while let Some(t) = link.next_event().filter(|&t| t <= until) {
            now = now.max(t);
            link.advance(now);
            while let Some(c) = link.pop_arrival(now) {
                got.push((now, c.len()));
            }
        }
        got
    }

    /// A TCP-model link of 1 Mbit/s (a BDP of 250 bytes at 1 ms one way) and a
    /// 3000-byte queue — its own, or a shared bottleneck of that rate and queue it alone
    /// fills (`shared`) — with twelve 1448-byte chunks queued and NewReno's initial window
    /// of ten segments, moved to 15 ms: the first ten leave at once, two fit the queue and
    /// the rest overflow it; the first ACK (≈ 11.7 ms) opens the window for two more.
    fn overflowing_link(shared: Option<Rc<SharedLink>>) -> Link {
        let params = TcpParams {
            cc: crate::tcp::CongestionControl::Reno,
            queue_bytes: 3000,
            seed: 1,
        };
        let mut l = Link::tcp(LinkParams::default(), params);
        let mbps = if shared.is_some() { 100.0 } else { 1.0 };
        l.set(Instant::ZERO, mbps, 1.0, 0.0);
        if let Some(link) = shared {
            l.join_shared(link, 0);
        }
        for _ in 0..12 {
            l.push(vec![0; 1448].into());
        }
        l.advance(at_ms(15));
        l
    }

    /// Chunks the overflowing queue dropped are not in it: once the first ACK frees room
    /// the next chunk fits, and what the link tells the shared bottleneck is what is
    /// queued or on the wire, not the drops its window still counts until they are
    /// repaired. (Counted as queued, every chunk sent until the drops' ACKs overflowed the
    /// queue again.)
    #[test]
    fn dropped_chunks_leave_the_queue() {
        let shared = Rc::new(SharedLink::new(125_000.0, 3000, 2));
        for link in [None, Some(shared.clone())] {
            let on_shared = link.is_some();
            let l = overflowing_link(link);
            let kept: Vec<bool> = l.window.iter().map(|u| !u.lost).collect();
            assert_eq!(kept.len(), 11, "shared {on_shared}: {kept:?}");
            assert!(kept[0], "shared {on_shared}: the second chunk fits");
            assert!(!kept[1], "shared {on_shared}: the third overflows");
            assert!(
                kept[9],
                "shared {on_shared}: after the first ACK the queue holds one chunk, the next fits: {kept:?}"
            );
        }
        // Member 0 alone: the queue it makes is what it has queued, within the queue.
        let s = shared.solve(1, 0.0, 0.002, 1e12);
        assert!(!s.overflow, "{s:?}: drops counted as queued");
        assert!(s.queue_s * 125_000.0 <= 3000.0, "{s:?}");
    }

    /// The delivery rate a TCP-model link reports is its share of the shared bottleneck
    /// (what its window drains at there), not its own link's rate.
    #[test]
    fn the_delivery_rate_is_the_share_of_the_shared_link() {
        let shared = Rc::new(SharedLink::new(25e6, 10_000_000, 2));
        // The other member: 1.5 BDP of 25 MB/s over 2 ms.
        shared.publish(1, 75_000.0, 0.002, 1e12);
        let params = TcpParams {
            cc: crate::tcp::CongestionControl::Cubic,
            queue_bytes: 1_000_000,
            seed: 1,
        };
        let mut l = Link::tcp(LinkParams::default(), params);
        l.set(Instant::ZERO, 1600.0, 1.0, 0.0);
        l.join_shared(shared.clone(), 0);
        let info = l.tcp_info().expect("tcp model");
        let share = shared.solve(0, info.cwnd_bytes as f64, 0.002, 200e6).rate;
        assert!(share < 25e6 && share > 0.0, "{share}");
        assert!(info.rate <= share * (1.0 + 1e-9), "{} above its share {share}", info.rate);
    }

    #[test]
    fn instant_ceil_rounds_up_as_ceil_does() {
        let reference = |s: f64| (s * 1e6).ceil().max(0.0) as u64;
        let mut cases = vec![
            0.0, -0.0, -1e-9, 1e-300, 1e-6, 1.000_000_1e-6, 0.999_999_9e-6, 2.5, 4_503_599_627.370_495_5,
            4_503_599_627.370_496, 1e13, 1e19, 1e300, f64::MAX, f64::NAN, f64::INFINITY, f64::NEG_INFINITY,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s = (x >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((x % 10) as i32 - 3);
            cases.extend([s, f64::from_bits(s.to_bits() + 1), (s * 1e6).round() / 1e6]);
        }
        for s in cases {
            assert_eq!(instant_ceil(s).as_micros(), reference(s), "{s:e}");
        }
    }

    #[test]
    fn serialises_at_rate_then_adds_delay() {
        let mut l = Link::new(LinkParams::default());
        l.set(Instant::ZERO, 80.0, 10.0, 0.0); // 10 MB/s
        l.push(vec![0; 10_000].into()); // 1 ms to serialise
        l.push(vec![0; 10_000].into());
        let got = drain(&mut l, at_ms(100));
        assert_eq!(got, vec![(at_ms(11), 10_000), (at_ms(12), 10_000)]);
    }

    /// Chunk ends do not depend on how often the link is told the time: the arrivals are
    /// the same whether `advance` runs only at the link's events or at every 7 µs too.
    #[test]
    fn serialisation_does_not_depend_on_the_calls() {
        let arrivals = |extra_calls: bool| {
            let mut l = Link::new(LinkParams::default());
            l.set(Instant::ZERO, 1403.7, 1.3, 0.0);
            for k in 0..20 {
                l.push(vec![0; 16_397 + 13 * k].into());
            }
            let mut got = Vec::new();
            let mut now = Instant::ZERO;
            while let Some(t) = l.next_event() {
                while extra_calls && now + fbdt_core::Duration::from_micros(7) < t {
                    now = now + fbdt_core::Duration::from_micros(7);
                    l.advance(now);
                }
                now = now.max(t);
                l.advance(now);
                while let Some(c) = l.pop_arrival(now) {
                    got.push((now, c.len()));
                }
            }
            got
        };
        assert_eq!(arrivals(true), arrivals(false));
    }

    /// The time grain's bound: every chunk arrives at a multiple of the grain, never before
    /// its exact arrival and less than a grain after it, in order, every byte — through rate
    /// changes and an outage (held chunks arrive when the path returns, as without a grain).
    #[test]
    fn a_grain_delays_each_arrival_by_less_than_a_grain_and_never_advances_one() {
        let arrivals = |grain_us: u64| {
            let mut l = Link::new(LinkParams {
                grain_us,
                ..LinkParams::default()
            });
            l.set(Instant::ZERO, 1403.7, 1.3, 0.0);
            for k in 0..40 {
                l.push(vec![0; 16_397 + 131 * k].into());
            }
            // Rate changes at 1 ms and 2.5 ms, an outage from 3.1 ms to 7.0 ms.
            let steps = [(1000, 480.0), (2500, 1800.0), (3100, 0.0), (7000, 900.0)];
            let mut steps = steps.iter().peekable();
            let mut got = Vec::new();
            let mut now = Instant::ZERO;
            loop {
                let step_at = steps.peek().map(|&&(us, _)| Instant::from_micros(us));
                let Some(next) = earliest(l.next_event(), step_at) else {
                    return got;
                };
                now = now.max(next);
                l.advance(now);
                if step_at == Some(now) {
                    let &(_, mbps) = steps.next().expect("peeked");
                    l.set(now, mbps, 1.3, 0.0);
                }
                while let Some(c) = l.pop_arrival(now) {
                    got.push((now.as_micros(), c.len()));
                }
            }
        };
        let exact = arrivals(0);
        assert_eq!(exact.len(), 40);
        for grain in [1, 7, 100, 250, 1000] {
            let grained = arrivals(grain);
            assert_eq!(grained.len(), exact.len(), "grain {grain}");
            for (&(g, glen), &(e, elen)) in grained.iter().zip(&exact) {
                assert_eq!(glen, elen, "grain {grain}: order and bytes unchanged");
                assert!(g >= e, "grain {grain}: a chunk arrived early ({g} < {e} µs)");
                assert!(
                    g < e + grain.max(1),
                    "grain {grain}: {g} µs is a grain or more after {e} µs"
                );
                // On the grid, except at the outage's edges: a chunk due before it began
                // (without the grain) arrives as it begins; one held through it arrives
                // when the path returns, with or without a grain.
                assert!(
                    g % grain == 0 || g == 3100 || g == 7000,
                    "grain {grain}: {g} µs is off the grid"
                );
            }
        }
        // A grain merges arrivals: fewer distinct instants.
        let instants = |v: &[(u64, usize)]| v.iter().map(|a| a.0).collect::<std::collections::BTreeSet<_>>().len();
        assert!(instants(&arrivals(250)) < instants(&exact));
    }

    #[test]
    fn outage_holds_data_until_the_path_returns() {
        let mut l = Link::new(LinkParams::default());
        l.set(Instant::ZERO, 80.0, 10.0, 0.0);
        l.push(vec![0; 10_000].into());
        l.advance(at_ms(5)); // serialised at 1 ms, in flight until 11 ms
        l.set(at_ms(5), 0.0, 10.0, 0.0);
        assert_eq!(l.next_event(), None);
        assert!(l.pop_arrival(at_ms(20)).is_none());
        l.advance(at_ms(50));
        l.set(at_ms(50), 80.0, 10.0, 0.0);
        assert_eq!(l.pop_arrival(at_ms(50)).map(|c| c.len()), Some(10_000));
    }

    /// Issue 41: when the TCP model's sender last heard an ACK (TCP_INFO's
    /// `last_ack_recv`): now while a chunk's ACKs are coming back, the moment they stopped
    /// once the link went down or its ACKs were held, and no silence with nothing in flight.
    #[test]
    fn the_sender_hears_acks_until_they_stop() {
        let params = TcpParams {
            cc: crate::tcp::CongestionControl::Cubic,
            queue_bytes: 1_000_000,
            seed: 1,
        };
        for held in [false, true] {
            let mut l = Link::tcp(LinkParams::default(), params.clone());
            l.set(Instant::ZERO, 10.0, 5.0, 0.0);
            assert_eq!(l.ack_silence_since(Instant::ZERO), None, "nothing in flight");
            for _ in 0..3 {
                l.push(vec![0; 16_384].into());
            }
            // The first chunk's ACKs come back from 10 ms on; the window holds the second
            // one back until they have.
            l.advance(at_ms(20));
            let heard = l.ack_silence_since(at_ms(20)).expect("in flight");
            assert!((0.010..=0.020).contains(&heard), "held {held}: last ACK at {heard} s");
            if held {
                l.hold_acks(at_ms(20), true);
            } else {
                l.set(at_ms(20), 0.0, 5.0, 0.0);
            }
            l.advance(at_ms(22));
            let stopped = l.ack_silence_since(at_ms(22)).expect("in flight");
            assert!(stopped >= heard && stopped <= 0.020, "held {held}: {stopped} s after {heard} s");
            if held {
                l.advance(at_ms(60));
                assert_eq!(l.ack_silence_since(at_ms(60)), Some(stopped), "no ACK while held");
                l.hold_acks(at_ms(60), false);
                l.advance(at_ms(70));
                assert!(l.ack_silence_since(at_ms(70)).is_none_or(|t| t > 0.060), "heard again");
            }
        }
    }

    #[test]
    fn window_limits_a_long_path() {
        let params = LinkParams {
            max_window_bytes: 100_000,
            ..LinkParams::default()
        };
        let mut l = Link::new(params);
        l.set(Instant::ZERO, 800.0, 500.0, 0.0); // 100 MB/s, RTT 1 s
        for _ in 0..30 {
            l.push(vec![0; 10_000].into());
        }
        let got = drain(&mut l, at_ms(1600));
        // 100 kB per RTT: ten chunks in the first second, ten more one RTT later.
        assert_eq!(got.iter().filter(|(t, _)| *t < at_ms(1000)).count(), 10);
        assert_eq!(got.len(), 20);
    }

    #[test]
    fn loss_caps_the_rate_like_mathis() {
        let r = mathis_rate(1448, 0.002, 0.05).expect("lossy");
        assert!((r * 8.0 / 1e6 - 31.6).abs() < 0.1, "{}", r * 8.0 / 1e6);
        let mut l = Link::new(LinkParams::default());
        l.set(Instant::ZERO, 1800.0, 1.0, 0.05);
        assert!((l.rate() - r).abs() < 1e-6);
    }

    /// Pushes `len` bytes at each `ms` (the link moved to that time first, as the
    /// simulator does) and returns every arrival in ms.
    fn arrivals_of_pushes(mut l: Link, pushes_ms: &[u64]) -> Vec<u64> {
        let mut got = Vec::new();
        let mut now = Instant::ZERO;
        let mut pending = pushes_ms.iter().copied().peekable();
        loop {
            let push_at = pending.peek().map(|&ms| at_ms(ms));
            let Some(next) = earliest(l.next_event(), push_at) else {
                return got;
            };
            now = now.max(next);
            l.advance(now);
            while let Some(c) = l.pop_arrival(now) {
                assert_eq!(c.len(), 10_000);
                got.push(now.as_micros() / 1000);
            }
            if push_at == Some(now) {
                pending.next();
                l.push(vec![0; 10_000].into());
            }
        }
    }

    #[test]
    fn a_sleeping_radio_delays_the_first_chunk_after_idle() {
        let link = |radio| {
            let mut l = Link::new(LinkParams::default()).with_radio(radio);
            l.set(Instant::ZERO, 80.0, 10.0, 0.0); // 10 MB/s: 1 ms per chunk
            l
        };
        let pushes = [0, 50, 300];
        // Always awake: 1 ms to serialise, 10 ms to arrive.
        assert_eq!(arrivals_of_pushes(link(None), &pushes), vec![11, 61, 311]);
        let radio = RadioSleep {
            idle_timeout_ms: 100.0,
            wake_ms: 20.0,
        };
        // Asleep at the start (+20 ms); 49 ms idle is under the timeout (no wake-up);
        // 249 ms idle is over it (+20 ms).
        assert_eq!(arrivals_of_pushes(link(Some(radio)), &pushes), vec![31, 61, 331]);
        // A chunk queued behind one that is waiting for the radio pays no second wake-up.
        assert_eq!(arrivals_of_pushes(link(Some(radio)), &[0, 5]), vec![31, 32]);
    }
}
