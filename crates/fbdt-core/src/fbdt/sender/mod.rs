//! FBDT sender: serves transmission windows from both ends over N paths.
//!
//! Life of a byte: the application writes it into the send buffer; when a path asks for
//! data and the newest window has nothing left to hand out, a new window is loaded (its
//! size from [`WindowConfig`], its layout from `layout::initial_layout`); the path takes
//! segments from its lane end (ascending from the forward pointer, descending from the
//! backward pointer); an idle path joins a lane's free end or splits the slowest lane (a
//! re-alignment, sent to the receiver as ALIGN). Once every segment of a window has been handed out (the
//! pointers met), a segment still unacknowledged after `redundancy_wait × RTT` of its
//! holder is re-sent by another path (the paper's redundant transmission); a segment held
//! only by dead paths is re-sent at once. Bytes leave the buffer when cumulatively acked.
//!
//! Memory is bounded: the send buffer by `Config::send_buffer`, the segment table by the
//! peer's receive window (windows are only loaded inside it).
//!
//! One file per job: `window` loads windows and lays them out, `lanes` keeps which path
//! serves which lane end, `rescue` decides redundant transmissions and rescues, `acks`
//! takes ACKs and tracks stalls, `transmit` puts one frame out.

mod acks;
mod arrival;
mod lanes;
mod rescue;
#[cfg(test)]
mod tests;
mod transmit;
mod window;

use std::cell::Cell;
use std::collections::VecDeque;

use super::config::{AckSilenceUse, FbdtConfig};
#[cfg(doc)]
use super::config::WindowConfig;
use super::estimate::PathEstimate;
use super::layout::{LaneEnd, Window};
use crate::error::ProtocolError;
use crate::path::{AckSilence, PathId, PathStats};
use crate::scheme::{SchemeSender, StreamParams};
use crate::seq::SeqSpace;
use crate::stats::SenderStats;
use crate::time::{Duration, Instant};
use crate::stream::SendStream;
use crate::wire::{Align, Frame, FrameBuf};

/// A path whose oldest undelivered copy is this far behind the cumulative ACK is reset:
/// were it to deliver that copy after the stream moved on by 2^31 bytes, its 32-bit
/// sequence number would be ambiguous. 2^29 leaves a factor-4 margin.
const STALE_COPY_LIMIT: u64 = 1 << 29;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SegState {
    Unsent,
    Sent {
        /// Paths that were handed a copy (bitmask by path index).
        holders: u32,
        last_holder: PathId,
        first_sent: Instant,
        last_sent: Instant,
        /// When the ACK for the latest copy is expected (queue ahead of it on its path,
        /// the path's RTT, the receiver's ACK delay).
        expect: Instant,
        /// `last_holder`'s `sent` once the copy was handed to it: its counter passing this
        /// means the copy arrived.
        end: u64,
        copies: u8,
    },
    Acked,
}

/// Why a segment is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resend {
    /// Its holders died or stalled: needed, never capped.
    Rescue,
    /// Its holder is late: optional, capped at `FbdtConfig::redundancy_cap`.
    Redundant,
}

#[derive(Clone, Debug)]
struct Seg {
    off: u64,
    len: u32,
    fin: bool,
    window: u32,
    state: SegState,
}

#[derive(Clone, Debug)]
struct PathTx {
    alive: bool,
    /// The lane end the path takes segments from: with `reserved`, the one record of
    /// which path serves which lane end (`lanes`).
    work: Option<LaneEnd>,
    /// A lane end reserved in a newer window while the path finishes its current one.
    reserved: Option<LaneEnd>,
    /// The connection epoch of the path's current connection (JOIN's): the receiver's
    /// counter is read only from ACKs that carry it.
    epoch: u32,
    /// The epoch announced for the next `path_up`.
    next_epoch: Option<u32>,
    connections: u32,
    /// Payload bytes handed to this path's current connection, and bytes the receiver
    /// reports it got there.
    sent: u64,
    rx: u64,
    /// The driver's last `PathStats::unacked_bytes` for this connection and `sent` when it
    /// came (`FbdtConfig::in_flight_from_transport`).
    transport_unacked: Option<(u64, u64)>,
    /// The driver's last `PathStats::ack_silence` for this connection
    /// (`FbdtConfig::stall_on_ack_silence`).
    ack_silence: Option<AckSilence>,
    /// Bytes by which the send limit fell short of the next frame at the last poll of
    /// this path (0: the limit did not hold it back).
    limit_shortfall: u64,
    /// The receiver's counter counts this connection's bytes alone (its epoch is new), so
    /// a copy it passes has arrived. After a reconnect under the same epoch the counter
    /// may include the old connection's bytes and only measures rates and stalls.
    counter_exact: bool,
    /// Undelivered copies in path order.
    copies: VecDeque<HeldCopy>,
    /// Copies that end at or below this `sent` offset were in flight when the transport
    /// retransmitted or the path's stall ended: their lateness is the repair's or the
    /// outage's, not the path's usual spread, and the lateness margin does not learn it.
    unsampled_below: u64,
    /// The transport's last `PathStats::retransmits` for this connection.
    retransmits: Option<u64>,
    last_progress: Instant,
    stalled: bool,
    est: PathEstimate,
    /// The last poll of this path found nothing to send and changed nothing.
    idle: Option<IdlePoll>,
    /// The path's arrival estimate and drain rate, and the `changes` they are for
    /// (`FbdtSender::estimates`).
    estimates: Cell<Option<Estimates>>,
}

/// A path's arrival estimate and drain rate (s, bytes/s), and the `changes` they are for.
type Estimates = (u64, Option<f64>, Option<f64>);

/// A poll that sent nothing and changed nothing: the next poll of the path sends nothing
/// either while the sender is unchanged (`changes`), the driver offers less than
/// `room_needed` bytes, and `until` (a redundancy deadline) has not come.
#[derive(Clone, Copy, Debug)]
struct IdlePoll {
    changes: u64,
    room_needed: usize,
    until: Option<Instant>,
    /// The paths (bitmask) whose arrival estimates the poll read: a transport report that
    /// moves one path's estimate and nothing else leaves `changes` alone and voids the
    /// memory only if that path is among them (`transport_moved`).
    reads: u32,
    held: Option<HeldAtLimit>,
}

/// What held an idle poll back when it was its send limit alone: the poll took its lane's
/// next segment `idx` (lane end `at` of the window at `pos`) after one arrival check, and
/// `want` payload bytes did not fit under the limit (`transport_moved`).
#[derive(Clone, Copy, Debug)]
struct HeldAtLimit {
    pos: usize,
    at: LaneEnd,
    idx: u64,
    want: usize,
}

impl IdlePoll {
    fn holds(&self, changes: u64, room: usize, now: Instant) -> bool {
        self.changes == changes && room < self.room_needed && self.until.is_none_or(|t| now < t)
    }
}

/// A copy a path was handed and has not delivered yet.
#[derive(Clone, Copy, Debug)]
struct HeldCopy {
    /// The path's `sent` once the copy was handed over: delivered when `rx` reaches it.
    end: u64,
    seg: u64,
    off: u64,
    /// When its delivery should reach the sender (the stall rule's due time).
    due: Instant,
}

impl PathTx {
    fn new() -> Self {
        PathTx {
            alive: false,
            work: None,
            reserved: None,
            epoch: 0,
            next_epoch: None,
            connections: 0,
            sent: 0,
            rx: 0,
            transport_unacked: None,
            ack_silence: None,
            limit_shortfall: 0,
            counter_exact: false,
            copies: VecDeque::new(),
            unsampled_below: 0,
            retransmits: None,
            last_progress: Instant::ZERO,
            stalled: false,
            est: PathEstimate::new(),
            idle: None,
            estimates: Cell::new(None),
        }
    }
    fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.rx)
    }

    /// What the send limit counts as not delivered: `in_flight`, or less when the
    /// transport's last report (plus what was sent since) says fewer bytes are
    /// unacknowledged.
    fn limited_in_flight(&self) -> u64 {
        let fbdt = self.in_flight();
        match self.transport_unacked {
            Some((unacked, at)) => fbdt.min(unacked + self.sent.saturating_sub(at)),
            None => fbdt,
        }
    }

    /// Up and delivering: what window sizing, layout and the arrival rule count on.
    fn flows(&self) -> bool {
        self.alive && !self.stalled
    }
}

#[derive(Clone)]
pub struct FbdtSender {
    cfg: FbdtConfig,
    params: StreamParams,
    space: SeqSpace,
    /// Bytes written and not yet acknowledged, and the stream end.
    stream: SendStream,
    /// Bytes `[.., loaded)` belong to windows.
    loaded: u64,
    fin_loaded: bool,
    segs: VecDeque<Seg>,
    seg_base: u64,
    windows: VecDeque<Window>,
    /// Unsent segments in all windows: the sum of their `Window::unsent`.
    unsent: u64,
    next_window_id: u32,
    /// The peer's flow-control limit: never send a byte at or past this offset.
    right_edge: u64,
    paths: Vec<PathTx>,
    forward: Option<PathId>,
    /// A path outscoring the forward one by `forward_hysteresis`, and since when.
    forward_challenger: Option<(PathId, Instant)>,
    aligns: VecDeque<Align>,
    last_sample: Instant,
    checked_until: Instant,
    flow_blocked: bool,
    /// A path died since the last full rescue scan: its copies may need re-sending even in
    /// windows whose pointers have not met.
    dead_holders: bool,
    /// Bytes sent as [`Resend::Redundant`] (the ones the cap counts).
    optional_resent: u64,
    failed: VecDeque<PathId>,
    /// Paths that became stalled and were not yet reported (at most one entry per path).
    newly_stalled: VecDeque<PathId>,
    stats: SenderStats,
    /// Counts the changes a poll depends on: every input (ACK, write, path event, timeout)
    /// and every poll that sent or changed something. A remembered idle poll (`IdlePoll`)
    /// holds only while it stays the same.
    changes: u64,
    /// The last `poll_timeout` answer, with the `changes` it was for.
    timeout_memo: Cell<Option<(u64, Option<Instant>)>>,
    /// The paths whose arrival estimates the poll under way read (`IdlePoll::reads`).
    estimate_reads: Cell<u32>,
    /// `acks::take_path_counters`' list of copies that arrived, kept (empty) between ACKs.
    arrived: Vec<u64>,
    /// The last time a segment was handed to a path or an ACK arrived; the first poll's
    /// time before either (a session starts with its radios awake from the handshake).
    last_activity: Option<Instant>,
    /// A wake episode (`wake_copy_segment`), from its first segment until every live path
    /// has shown it is awake or its bytes are acknowledged.
    wake_episode: Option<WakeEpisode>,
}

/// Data was sent after every path had been idle for `FbdtConfig::wake_copies_after`: the
/// first `wake_copy_bytes` from segment `first` on get a copy on a second path.
#[derive(Clone, Copy, Debug)]
struct WakeEpisode {
    first: u64,
    /// Stream offset where the copied range ends (`first`'s offset + `wake_copy_bytes`).
    end: u64,
    /// Paths that sent an ACK since the episode began: awake, so what they hold needs no
    /// copy, and they copy what the others hold without waiting for a learned wake-up.
    awake: u32,
    /// Just after it began: a driver that polls its paths in turn (the simulator) may have
    /// polled the others before it, so the sender asks for a poll then (`next_timeout`)
    /// for them to send their copies.
    poll_at: Instant,
}

impl FbdtSender {
    /// `isn` numbers our direction; `peer_recv_buffer` is the window the peer announced.
    pub fn new(cfg: &FbdtConfig, params: StreamParams, isn: u32, peer_recv_buffer: u64) -> Self {
        FbdtSender {
            cfg: cfg.clone(),
            params,
            space: SeqSpace::new(isn),
            stream: SendStream::new(),
            loaded: 0,
            fin_loaded: false,
            segs: VecDeque::new(),
            seg_base: 0,
            windows: VecDeque::new(),
            unsent: 0,
            next_window_id: 0,
            right_edge: peer_recv_buffer,
            paths: Vec::new(),
            forward: None,
            forward_challenger: None,
            aligns: VecDeque::new(),
            last_sample: Instant::ZERO,
            checked_until: Instant::ZERO,
            flow_blocked: false,
            dead_holders: false,
            optional_resent: 0,
            failed: VecDeque::new(),
            newly_stalled: VecDeque::new(),
            stats: SenderStats::default(),
            changes: 0,
            timeout_memo: Cell::new(None),
            estimate_reads: Cell::new(0),
            arrived: Vec::new(),
            last_activity: None,
            wake_episode: None,
        }
    }

    // Inline: every poll and input calls it, and the path almost always exists.
    #[inline]
    fn ensure_path(&mut self, p: PathId) {
        while self.paths.len() <= p.index() {
            self.changes += 1;
            self.paths.push(PathTx::new());
            self.stats.per_path_bytes_sent.push(0);
        }
    }

    fn alive_mask(&self) -> u32 {
        self.paths
            .iter()
            .enumerate()
            .filter(|(_, t)| t.alive)
            .fold(0, |m, (i, _)| m | (1 << i))
    }

    /// Live paths that are not stalled: the ones whose copies will arrive.
    fn flowing_mask(&self) -> u32 {
        self.paths
            .iter()
            .enumerate()
            .filter(|(_, t)| t.flows())
            .fold(0, |m, (i, _)| m | (1 << i))
    }

    fn seg(&self, idx: u64) -> &Seg {
        &self.segs[(idx - self.seg_base) as usize]
    }

    fn seg_mut(&mut self, idx: u64) -> &mut Seg {
        &mut self.segs[(idx - self.seg_base) as usize]
    }

    fn window_pos(&self, id: u32) -> Option<usize> {
        let front = self.windows.front()?.id;
        let pos = id.wrapping_sub(front) as usize;
        (pos < self.windows.len()).then_some(pos)
    }
}

impl SchemeSender for FbdtSender {
    /// The peer's receive buffer, learnt from its HELLO: the initial flow-control limit.
    fn set_peer_recv_buffer(&mut self, bytes: u64) {
        self.changes += 1;
        self.right_edge = self.right_edge.max(bytes);
    }

    /// The forward path of the most recent window (the most reliable one).
    fn forward_path(&self) -> Option<PathId> {
        self.forward
    }

    /// A path that had to be reset (its data could no longer be numbered unambiguously);
    /// the driver should close its connection and open a new one.
    fn poll_failed_path(&mut self) -> Option<PathId> {
        self.failed.pop_front()
    }

    fn handle_frame(&mut self, path: PathId, frame: &Frame<'_>, now: Instant) -> Result<(), ProtocolError> {
        self.changes += 1;
        match frame {
            Frame::Ack(a) => self.on_ack(path, a, now),
            _ => Err(ProtocolError::Unexpected {
                path,
                what: "DATA_ACK in an FBDT session",
            }),
        }
    }

    // `send_room` is 0 once finished, so a write after `finish` takes nothing.
    fn write(&mut self, data: &[u8]) -> usize {
        let n = self.stream.write(data, self.send_room());
        self.count_written(n)
    }

    fn write_bytes(&mut self, data: &bytes::Bytes) -> usize {
        let n = self.stream.write_bytes(data, self.send_room());
        self.count_written(n)
    }

    fn finish(&mut self) {
        // A driver may call it again and again after the last write (the simulator's
        // sized transfer does, at every step): only the first changes anything, and a
        // change count bumped by the others would void every path's idle-poll memory.
        if self.stream.finish() {
            self.changes += 1;
        }
    }

    fn is_all_acked(&self) -> bool {
        self.stream.is_all_acked()
    }

    fn send_room(&self) -> usize {
        if self.stream.is_finished() {
            0
        } else {
            let unsent = self.stream.written() - self.loaded;
            let unsent_room = self.unsent_allowance().saturating_sub(unsent);
            self.params
                .send_buffer
                .saturating_sub(self.stream.queued())
                .min(usize::try_from(unsent_room).unwrap_or(usize::MAX))
        }
    }

    fn set_path_epoch(&mut self, path: PathId, epoch: u32) {
        self.changes += 1;
        self.ensure_path(path);
        self.paths[path.index()].next_epoch = Some(epoch);
    }

    /// A new connection epoch restarts the path's counters at 0 on both ends; the same
    /// epoch again (a driver that numbers no connections) continues them as before.
    fn path_up(&mut self, path: PathId, now: Instant) {
        self.changes += 1;
        self.ensure_path(path);
        let t = &self.paths[path.index()];
        let epoch = t.next_epoch.unwrap_or(t.epoch);
        let new_epoch = t.connections == 0 || epoch != t.epoch;
        if new_epoch && t.alive {
            self.path_down(path, now);
        }
        let t = &mut self.paths[path.index()];
        t.next_epoch = None;
        t.connections += 1;
        t.counter_exact = new_epoch;
        // The transport's last report was the old connection's.
        t.transport_unacked = None;
        t.ack_silence = None;
        t.retransmits = None;
        if new_epoch {
            t.epoch = epoch;
            t.sent = 0;
            t.rx = 0;
            t.copies.clear();
            t.unsampled_below = 0;
        }
        t.alive = true;
        t.stalled = false;
        t.last_progress = now;
        t.est.rebase(t.rx, t.sent);
        self.invalidate_deadlines();
    }

    fn path_down(&mut self, path: PathId, _now: Instant) {
        self.changes += 1;
        self.ensure_path(path);
        let t = &mut self.paths[path.index()];
        t.alive = false;
        t.stalled = false;
        // Its lane ends are free for others to join.
        t.work = None;
        t.reserved = None;
        t.copies.clear();
        // Whatever the connection held is gone; count from what was delivered.
        t.sent = t.rx;
        t.transport_unacked = None;
        for seg in self.segs.iter_mut() {
            if let SegState::Sent { holders, .. } = &mut seg.state {
                *holders &= !path.bit();
            }
        }
        self.dead_holders = true;
        self.invalidate_deadlines();
        if self.forward == Some(path) {
            self.forward = None;
        }
    }

    fn path_stats(&mut self, path: PathId, stats: PathStats) {
        self.ensure_path(path);
        // A driver may report at every event; the same report again changes nothing (bit
        // for bit: a rate of -0.0 is not 0.0 to every formula).
        let from_transport = self.cfg.in_flight_from_transport;
        let t = &mut self.paths[path.index()];
        let driver = &mut t.est.driver;
        let bits = |s: &PathStats| (s.srtt, s.delivery_rate_bps.map(f64::to_bits), s.cwnd_bytes);
        let driver_changed = bits(driver) != bits(&stats);
        if driver_changed {
            *driver = stats;
            self.changes += 1;
        }
        if self.cfg.stall_on_ack_silence != AckSilenceUse::Off {
            let before = (self.silent_long(path), self.silence_proof(path));
            self.paths[path.index()].ack_silence = stats.ack_silence;
            if (self.silent_long(path), self.silence_proof(path)) != before {
                // The stall deadline moved (`stall_deadline`).
                self.changes += 1;
            }
        }
        let t = &mut self.paths[path.index()];
        if let Some(count) = stats.retransmits {
            if t.retransmits.is_some_and(|seen| count > seen) {
                t.unsampled_below = t.sent;
            }
            t.retransmits = Some(count);
        }
        if let Some(unacked) = stats.unacked_bytes.filter(|_| from_transport) {
            let before = t.limited_in_flight();
            let earlier = t.transport_unacked.replace((unacked, t.sent));
            if let (Some((unacked_then, sent_then)), Some(at)) = (earlier, stats.sampled_at) {
                let acked = |unacked: u64, sent: u64| sent.saturating_sub(unacked);
                // A report of nothing new counts too: what the next one adds arrived after it.
                let newly = acked(unacked, t.sent).saturating_sub(acked(unacked_then, sent_then));
                t.est.transport_acked(newly, at);
            }
            if t.limited_in_flight() != before {
                if driver_changed || earlier.is_none() {
                    self.changes += 1;
                } else {
                    self.transport_moved(path);
                }
            }
        }
    }

    fn poll_transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut Vec<u8>) -> usize {
        self.transmit(path, room, now, out)
    }

    /// A remembered idle poll that holds (`IdlePoll::holds`) answers the poll; all the
    /// poll would change then is `checked_until`. Path events a poll's caller collects
    /// (stalled, failed paths) must not be waiting either.
    fn poll_idle(&mut self, path: PathId, room: usize, now: Instant) -> bool {
        let Some(t) = self.paths.get(path.index()) else {
            return false;
        };
        let holds = t.alive && t.idle.is_some_and(|idle| idle.holds(self.changes, room, now));
        if !holds || !self.failed.is_empty() || !self.newly_stalled.is_empty() {
            return false;
        }
        self.checked_until = self.checked_until.max(now);
        true
    }

    /// While the path's last poll is remembered as idle for any room (its send limit holds
    /// it), from that memory's deadline on; otherwise now.
    fn room_wanted_from(&self, path: PathId) -> Option<Instant> {
        match self.paths.get(path.index()).and_then(|p| p.idle) {
            Some(i) if i.changes == self.changes && i.room_needed == usize::MAX => i.until,
            _ => Some(Instant::ZERO),
        }
    }

    fn poll_transmit_buf(&mut self, path: PathId, room: usize, now: Instant, out: &mut FrameBuf) -> usize {
        self.transmit(path, room, now, out)
    }

    /// The earliest of the sender's state's deadlines that lies past `checked_until`. A
    /// driver asks at every event, mostly with nothing changed but `checked_until` (every
    /// poll moves it to now): while that has not reached the last answer, the answer is
    /// the same.
    fn poll_timeout(&self) -> Option<Instant> {
        match self.timeout_memo.get() {
            Some((changes, next)) if changes == self.changes && next.is_none_or(|t| t > self.checked_until) => {
                debug_assert_eq!(next, self.next_timeout(), "poll_timeout changed with no change counted");
                next
            }
            _ => {
                let next = self.next_timeout();
                self.timeout_memo.set(Some((self.changes, next)));
                next
            }
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.changes += 1;
        self.checked_until = self.checked_until.max(now);
        self.update_stalls(now);
    }

    fn stats(&self) -> SenderStats {
        self.stats.clone()
    }

    fn poll_stalled_path(&mut self) -> Option<PathId> {
        self.newly_stalled.pop_front()
    }

    fn transport_report_wanted(&self, path: PathId) -> Option<Duration> {
        let t = self.paths.get(path.index())?;
        if !self.cfg.in_flight_from_transport || t.transport_unacked.is_none() || t.limit_shortfall == 0 {
            return None;
        }
        Some(report_wait(t.limit_shortfall, t.est.drain_rate_bps(), t.est.rtt()))
    }
}

/// When a path's send limit holds back its next frame by `shortfall` bytes: the time the
/// transport takes to deliver that much at `drain` (bytes/s), but no sooner than an eighth
/// of the path's RTT (the kernel still holds about a round trip of data, so the path does
/// not idle meanwhile, and a wake-up per frame would cost what sparse ACKs saved) nor later
/// than one RTT.
fn report_wait(shortfall: u64, drain: Option<f64>, rtt: Duration) -> Duration {
    let floor = Duration::from_micros((rtt.as_micros() / 8).max(50));
    let ceiling = rtt.max(floor);
    match drain {
        Some(rate) => Duration::from_secs_f64(shortfall as f64 / rate).clamp(floor, ceiling),
        None => floor,
    }
}

impl FbdtSender {
    /// A transport report moved `p`'s `limited_in_flight` and nothing else. That figure is
    /// read by `p`'s own polls (its send limit) and by `p`'s arrival estimate, which other
    /// paths' polls read through `estimates`; no deadline `poll_timeout` answers depends on
    /// it. So `p`'s estimates go, and an idle memory of `p` or of a path whose poll read
    /// `p`'s estimate stays only if the poll was held by its send limit alone and still
    /// would be (`still_held`): the pipe's report moves at most steps, and counting it as
    /// a change of everything voided every memory, estimate and `poll_timeout`'s answer
    /// each time (issue 37).
    fn transport_moved(&mut self, p: PathId) {
        self.paths[p.index()].estimates.set(None);
        for q in (0..self.paths.len()).map(PathId::slot) {
            let Some(idle) = self.paths[q.index()].idle else {
                continue;
            };
            if q != p && idle.reads & p.bit() == 0 {
                continue;
            }
            if idle.changes != self.changes || !self.still_held(q, idle.held) {
                self.paths[q.index()].idle = None;
            }
        }
    }

    /// Whether a full poll of `p`, which was held by its send limit alone (`held`), would
    /// be held the same way now: its one arrival check answers the same and its frame
    /// still does not fit under the limit. Then the shortfall is what that poll would
    /// note (the driver times its next report from it).
    fn still_held(&mut self, p: PathId, held: Option<HeldAtLimit>) -> bool {
        let Some(h) = held else {
            return false;
        };
        let Some(limit) = self.path_send_limit(p) else {
            return false;
        };
        let allowed = limit.saturating_sub(self.paths[p.index()].limited_in_flight()) as usize;
        if h.want <= allowed || !self.arrives_in_time(p, h.pos, h.at, h.idx) {
            return false;
        }
        self.paths[p.index()].limit_shortfall = (h.want - allowed) as u64;
        true
    }

    /// [`SchemeSender::poll_timeout`], worked out: the earliest redundancy deadline not yet
    /// handled and the earliest stall check of a path with data in flight.
    fn next_timeout(&self) -> Option<Instant> {
        let alive = self.alive_mask();
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| {
            if t > self.checked_until {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        // Redundancy looks at the head window only, unless flow control blocks.
        let windows = if self.flow_blocked { self.windows.len() } else { 1 };
        for w in self
            .windows
            .iter()
            .take(windows)
            .filter(|w| w.unacked > 0 && w.handed_out_at.is_some())
        {
            if let Some(t) = self.deadlines(w, alive).earliest_after {
                consider(t);
            }
        }
        for (i, t) in self.paths.iter().enumerate() {
            if t.flows() && t.in_flight() > 0 {
                consider(self.stall_deadline(PathId::slot(i)));
            }
        }
        if let Some(episode) = self.wake_episode {
            consider(episode.poll_at);
        }
        next
    }
}
