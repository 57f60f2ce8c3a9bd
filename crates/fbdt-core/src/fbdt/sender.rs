//! FBDT sender: serves transmission windows from both ends over N paths.
//!
//! Life of a byte: the application writes it into the send buffer; when a path asks for
//! data and the newest window has nothing left to hand out, a new window is loaded (its
//! size from [`WindowConfig`], its layout from `layout::initial_layout`); the path takes
//! segments from its lane end (ascending if it serves the bottom, descending if the top);
//! an idle path joins a lane's free end or splits the slowest lane (a re-alignment, sent to
//! the receiver as ALIGN). Once every segment of a window has been handed out (the
//! pointers met), a segment still unacknowledged after `redundancy_wait × RTT` of its
//! holder is re-sent by another path (the paper's redundant transmission); a segment held
//! only by dead paths is re-sent at once. Bytes leave the buffer when cumulatively acked.
//!
//! Memory is bounded: the send buffer by `Config::send_buffer`, the segment table by the
//! peer's receive window (windows are only loaded inside it).

use std::collections::VecDeque;

use super::config::{FbdtConfig, WindowConfig};
use super::estimate::{PathEstimate, SAMPLE_INTERVAL};
use super::layout::{initial_layout, split_lane, Assign, Deadlines, End, Lane, Window};
use crate::error::ProtocolError;
use crate::path::{PathId, PathStats};
use crate::scheme::{SchemeSender, StreamParams};
use crate::seq::SeqSpace;
use crate::stats::SenderStats;
use crate::time::{Duration, Instant};
use crate::wire::{Ack, Align, Data, Frame, FrameBuf, FrameOut, SendBuf, MAX_PATHS};

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
        copies: u8,
    },
    Acked,
}

#[derive(Clone, Debug)]
struct Seg {
    off: u64,
    len: u32,
    fin: bool,
    window: u32,
    state: SegState,
}

#[derive(Debug)]
struct PathTx {
    alive: bool,
    assign: Option<Assign>,
    /// A lane reserved in a newer window while the path finishes its current one.
    next_assign: Option<Assign>,
    /// Payload bytes handed to this path, and bytes the receiver reports it got there.
    sent: u64,
    rx: u64,
    /// Undelivered copies in path order: (value of `sent` after the copy, stream offset).
    copies: VecDeque<(u64, u64)>,
    last_progress: Instant,
    stalled: bool,
    est: PathEstimate,
}

impl PathTx {
    fn new() -> Self {
        PathTx {
            alive: false,
            assign: None,
            next_assign: None,
            sent: 0,
            rx: 0,
            copies: VecDeque::new(),
            last_progress: Instant::ZERO,
            stalled: false,
            est: PathEstimate::new(),
        }
    }
    fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.rx)
    }
}

pub struct FbdtSender {
    cfg: FbdtConfig,
    params: StreamParams,
    space: SeqSpace,
    /// Bytes `[una, written)`, as shared chunks: frames carry slices of them, so bytes
    /// the application hands over as `Bytes` reach the socket without a copy.
    buf: SendBuf,
    una: u64,
    written: u64,
    finished: bool,
    /// Bytes `[.., loaded)` belong to windows.
    loaded: u64,
    fin_loaded: bool,
    fin_acked: bool,
    segs: VecDeque<Seg>,
    seg_base: u64,
    windows: VecDeque<Window>,
    next_window_id: u32,
    /// The peer's flow-control limit: never send a byte at or past this offset.
    right_edge: u64,
    paths: Vec<PathTx>,
    forward: Option<PathId>,
    aligns: VecDeque<Align>,
    last_sample: Instant,
    checked_until: Instant,
    flow_blocked: bool,
    /// A path died since the last full rescue scan: its copies may need re-sending even in
    /// windows whose pointers have not met.
    dead_holders: bool,
    failed: VecDeque<PathId>,
    /// Paths that became stalled and were not yet reported (at most one entry per path).
    newly_stalled: VecDeque<PathId>,
    stats: SenderStats,
}

impl FbdtSender {
    /// `isn` numbers our direction; `peer_recv_buffer` is the window the peer announced.
    pub fn new(cfg: &FbdtConfig, params: StreamParams, isn: u32, peer_recv_buffer: u64) -> Self {
        FbdtSender {
            cfg: cfg.clone(),
            params,
            space: SeqSpace::new(isn),
            buf: SendBuf::new(),
            una: 0,
            written: 0,
            finished: false,
            loaded: 0,
            fin_loaded: false,
            fin_acked: false,
            segs: VecDeque::new(),
            seg_base: 0,
            windows: VecDeque::new(),
            next_window_id: 0,
            right_edge: peer_recv_buffer,
            paths: Vec::new(),
            forward: None,
            aligns: VecDeque::new(),
            last_sample: Instant::ZERO,
            checked_until: Instant::ZERO,
            flow_blocked: false,
            dead_holders: false,
            failed: VecDeque::new(),
            newly_stalled: VecDeque::new(),
            stats: SenderStats::default(),
        }
    }

    fn ensure_path(&mut self, p: PathId) {
        while self.paths.len() <= p.index() {
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
            .filter(|(_, t)| t.alive && !t.stalled)
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

    /// How long until a segment handed to `p` now is acknowledged: the bytes queued ahead of
    /// it at the path's delivery rate, plus its RTT and the receiver's ACK delay — and never
    /// less than the path's measured ACK RTT (EWMA). The rate is the lower of the measured
    /// and the driver's (TCP_INFO) rate: an overestimate would make copies look late and
    /// trigger needless redundant transmissions.
    fn delivery_delay(&self, p: PathId) -> Duration {
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
    fn redundancy_deadline(&self, done: Instant, last_sent: Instant, expect: Instant) -> Instant {
        done.max(last_sent + expect.saturating_since(last_sent).mul_f64(self.cfg.redundancy_wait))
    }

    /// The window's redundancy deadlines (copies some live path does not hold yet), from
    /// its cache when still valid; only for windows whose pointers met.
    fn deadlines(&self, w: &Window, alive: u32) -> Deadlines {
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

    fn invalidate_deadlines(&self) {
        for w in &self.windows {
            w.deadlines.set(None);
        }
    }

    fn stall_after(&self, p: PathId) -> Duration {
        let rtt = self.paths[p.index()].est.rtt().mul_f64(self.cfg.stall_rtts);
        rtt.max(self.cfg.stall_min)
    }

    /// Rate used for layout decisions: measured, else the driver's, else the mean of the
    /// others (so an unmeasured path gets a fair share to be measured with).
    fn layout_rate(&self, p: PathId) -> f64 {
        let t = &self.paths[p.index()];
        if t.stalled || !t.alive {
            return 0.0;
        }
        if let Some(r) = t.est.rate_bps() {
            return r;
        }
        let known: Vec<f64> = self
            .paths
            .iter()
            .filter(|t| t.alive)
            .filter_map(|t| t.est.rate_bps())
            .collect();
        if known.is_empty() {
            1.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        }
    }

    fn target_window(&self) -> usize {
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
                for t in self.paths.iter().filter(|t| t.alive && !t.stalled) {
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
        }
    }

    /// Live paths ranked by reliability (forward first), with their layout rates.
    fn ranked_paths(&mut self, requester: PathId, now: Instant) -> Vec<(PathId, f64)> {
        let mut ranked: Vec<(PathId, f64)> = (0..self.paths.len())
            .map(|i| PathId(i as u8))
            .filter(|&p| {
                let t = &self.paths[p.index()];
                t.alive && (!t.stalled || p == requester)
            })
            .map(|p| (p, self.paths[p.index()].est.score(now)))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if let Some(fwd) = self.forward {
            if let Some(pos) = ranked.iter().position(|&(p, _)| p == fwd) {
                if ranked[pos].1 * self.cfg.forward_hysteresis >= ranked[0].1 {
                    let keep = ranked.remove(pos);
                    ranked.insert(0, keep);
                }
            }
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

    /// Most payload bytes `p` may hold undelivered (spec decision 6: the paper's
    /// per-direction send window = the TCP connection's window, plus a small backlog so the
    /// pipe never runs dry). Twice the path's window (cwnd, or rate × srtt) plus two
    /// segments; unlimited while the driver reports nothing.
    fn path_send_limit(&self, p: PathId) -> Option<u64> {
        let d = &self.paths[p.index()].est.driver;
        let bdp = d.delivery_rate_bps.zip(d.srtt).map(|(r, s)| r / 8.0 * s.as_secs_f64());
        let window = match (d.cwnd_bytes, bdp) {
            (Some(c), Some(b)) => (c as f64).max(b),
            (Some(c), None) => c as f64,
            (None, Some(b)) => b,
            (None, None) => return None,
        };
        Some(2 * window as u64 + 2 * self.params.segment_size as u64)
    }

    fn has_current_work(&self, p: PathId) -> bool {
        let Some(a) = self.paths[p.index()].assign else {
            return false;
        };
        self.window_pos(a.window).is_some_and(|w| {
            let lane = &self.windows[w].lanes[a.lane];
            lane.server(a.end) == Some(p) && lane.remaining() > 0
        })
    }

    fn queue_align(&mut self, pos: usize) {
        let w = &self.windows[pos];
        // Lane bounds of exhausted lanes may name segments already acknowledged and
        // dropped; those lanes are empty, so any offset inside the window will do.
        let seq_of_seg = |idx: u64| {
            let off = if idx >= w.seg_hi {
                w.off_hi
            } else if idx < self.seg_base {
                self.una.clamp(w.off_lo, w.off_hi)
            } else {
                self.seg(idx).off
            };
            self.space.seq(off)
        };
        let align = Align {
            window_id: w.id,
            start: seq_of_seg(w.seg_lo),
            end: seq_of_seg(w.seg_hi),
            lanes: w.lane_reprs(seq_of_seg),
        };
        // Only the newest layout matters to the receiver; drop superseded ones.
        self.aligns.retain(|a| a.window_id != w.id);
        self.aligns.push_back(align);
    }

    /// Loads the next window if data and the peer's receive window allow.
    fn load_window(&mut self, requester: PathId, now: Instant) -> bool {
        let avail = self.written - self.loaded;
        let need_fin = self.finished && !self.fin_loaded;
        if avail == 0 && !need_fin {
            return false;
        }
        let limit = self.right_edge.saturating_sub(self.loaded);
        let target = self.target_window() as u64;
        let wanted = target.min(avail);
        // The window is cut short by the peer's receive window, or by our own send buffer
        // being full of unacknowledged data: either way data is held behind a hole, so the
        // segments at the bottom are worth re-sending (`rescue_segment`).
        let buffer_full = self.buf.len() + self.params.segment_size > self.params.send_buffer;
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
            let fin = self.finished && off + len == self.written;
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
        let ranked = self.ranked_paths(requester, now);
        let (lanes, ends) = initial_layout(seg_lo, seg_hi - seg_lo, &ranked);
        self.windows.push_back(Window {
            id,
            seg_lo,
            seg_hi,
            off_lo,
            off_hi: end,
            lanes,
            handed_out_at: None,
            unacked: seg_hi - seg_lo,
            scan_from: seg_lo,
            deadlines: std::cell::Cell::new(None),
        });
        for (q, lane, end) in ends {
            let a = Assign { window: id, lane, end };
            if q == requester || !self.has_current_work(q) {
                self.paths[q.index()].assign = Some(a);
            } else {
                self.paths[q.index()].next_assign = Some(a);
            }
        }
        self.stats.windows_loaded += 1;
        let pos = self.windows.len() - 1;
        self.queue_align(pos);
        true
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
        let seg_bytes = self.params.segment_size as f64;
        let eta = |s: &Self, l: &Lane| {
            let rate: f64 = [l.bottom, l.top].iter().flatten().map(|&q| s.layout_rate(q)).sum();
            l.remaining() as f64 * seg_bytes / rate.max(1e-9)
        };
        let w = &self.windows[pos];
        let free = w
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| l.remaining() > 0 && (l.bottom.is_none() || l.top.is_none()))
            .max_by(|a, b| eta(self, a.1).total_cmp(&eta(self, b.1)).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i);
        let id = w.id;
        let assign = if let Some(i) = free {
            let lane = &mut self.windows[pos].lanes[i];
            let end = if lane.bottom.is_none() { End::Bottom } else { End::Top };
            lane.set_server(end, Some(p));
            Assign {
                window: id,
                lane: i,
                end,
            }
        } else {
            let Some(i) = w
                .lanes
                .iter()
                .enumerate()
                .filter(|(_, l)| l.remaining() >= 2)
                .max_by(|a, b| eta(self, a.1).total_cmp(&eta(self, b.1)).then(b.0.cmp(&a.0)))
                .map(|(i, _)| i)
            else {
                return false;
            };
            let lane = &self.windows[pos].lanes[i];
            let (rb, rt) = (
                lane.bottom.map_or(0.0, |q| self.layout_rate(q)),
                lane.top.map_or(0.0, |q| self.layout_rate(q)),
            );
            let old_top = lane.top;
            let rp = self.layout_rate(p).max(1.0);
            let upper = split_lane(&mut self.windows[pos].lanes[i], rb, rt, rp, p);
            self.windows[pos].lanes.push(upper);
            let new_lane = self.windows[pos].lanes.len() - 1;
            if let Some(q) = old_top {
                let t = &mut self.paths[q.index()];
                for a in [&mut t.assign, &mut t.next_assign].into_iter().flatten() {
                    if a.window == id && a.lane == i && a.end == End::Top {
                        a.lane = new_lane;
                    }
                }
            }
            Assign {
                window: id,
                lane: i,
                end: End::Top,
            }
        };
        self.paths[p.index()].assign = Some(assign);
        self.stats.realignments += 1;
        self.queue_align(pos);
        true
    }

    /// The segment `p` should send next from its lane, assigning work if needed.
    fn lane_segment(&mut self, p: PathId, now: Instant) -> Option<(Assign, u64)> {
        // Bounded: each round either returns or consumes an assignment; find_work adds one.
        for _ in 0..4 {
            if let Some(a) = self.paths[p.index()].assign {
                if let Some(pos) = self.window_pos(a.window) {
                    let lane = &self.windows[pos].lanes[a.lane];
                    if lane.server(a.end) == Some(p) {
                        if let Some(idx) = lane.peek(a.end) {
                            return Some((a, idx));
                        }
                    }
                }
            }
            let t = &mut self.paths[p.index()];
            t.assign = t.next_assign.take();
            if t.assign.is_none() && !self.find_work(p, now) {
                return None;
            }
        }
        None
    }

    /// A segment `p` should re-send now (redundant transmission or rescue), lowest first.
    fn rescue_segment(&self, p: PathId, now: Instant) -> Option<u64> {
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
    fn rescue_scan_found_nothing(&mut self) {
        self.dead_holders = false;
    }

    fn emit_segment(&mut self, p: PathId, idx: u64, now: Instant, out: &mut impl FrameOut) -> usize {
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
        if len > 0 {
            t.copies.push_back((t.sent, seg.off));
        }
        Data::OVERHEAD + len
    }

    fn mark_acked(&mut self, idx: u64, now: Instant) -> Result<(), ProtocolError> {
        let seg = self.seg(idx);
        let (window, state) = (seg.window, seg.state);
        match state {
            SegState::Acked => return Ok(()),
            SegState::Unsent => return Err(ProtocolError::AckOfUnsent),
            SegState::Sent {
                copies,
                first_sent,
                last_holder,
                ..
            } => {
                if copies == 1 {
                    self.paths[last_holder.index()]
                        .est
                        .rtt_sample(now.saturating_since(first_sent));
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

    fn advance_una(&mut self) {
        while let Some(front) = self.segs.front() {
            if front.state != SegState::Acked {
                break;
            }
            let len = front.len as usize;
            self.fin_acked |= front.fin;
            self.una += len as u64;
            self.buf.advance(len);
            self.segs.pop_front();
            self.seg_base += 1;
        }
        while self
            .windows
            .front()
            .is_some_and(|w| w.unacked == 0 && w.seg_hi <= self.seg_base)
        {
            self.windows.pop_front();
        }
        self.stats.bytes_acked = self.una;
    }

    /// One frame for `path` into `out` (a `Vec` for `poll_transmit`, a `FrameBuf` for
    /// `poll_transmit_buf`): the two differ only in whether the payload is copied.
    fn transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        self.ensure_path(path);
        if !self.paths[path.index()].alive {
            return 0;
        }
        self.checked_until = self.checked_until.max(now);
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
        if let Some(limit) = self.path_send_limit(path) {
            let allowed = limit.saturating_sub(self.paths[path.index()].in_flight());
            payload_room = payload_room.min(allowed as usize);
        }
        match self.rescue_segment(path, now) {
            Some(idx) => {
                if self.seg(idx).len as usize > payload_room || room < Data::OVERHEAD {
                    return 0;
                }
                return self.emit_segment(path, idx, now, out);
            }
            None => self.rescue_scan_found_nothing(),
        }
        let Some((a, idx)) = self.lane_segment(path, now) else {
            return 0;
        };
        if self.seg(idx).len as usize > payload_room || room < Data::OVERHEAD {
            return 0;
        }
        let pos = self.window_pos(a.window).expect("lane_segment returns a live window");
        let taken = self.windows[pos].lanes[a.lane].take(a.end);
        debug_assert_eq!(taken, Some(idx));
        if !self.windows[pos].has_unsent() {
            self.windows[pos].handed_out_at = Some(now);
            self.windows[pos].deadlines.set(None);
        }
        self.emit_segment(path, idx, now, out)
    }

    fn count_written(&mut self, n: usize) -> usize {
        self.written += n as u64;
        self.stats.bytes_written += n as u64;
        n
    }

    fn update_stalls(&mut self, now: Instant) {
        for i in 0..self.paths.len() {
            let p = PathId(i as u8);
            let stall_after = self.stall_after(p);
            let t = &mut self.paths[i];
            if !t.alive {
                continue;
            }
            if !t.stalled && t.in_flight() > 0 && now >= t.last_progress + stall_after {
                t.stalled = true;
                t.est.last_outage = Some(now);
                self.stats.path_stalls += 1;
                if !self.newly_stalled.contains(&p) {
                    self.newly_stalled.push_back(p);
                }
            }
            if t.copies
                .front()
                .is_some_and(|&(_, off)| off + STALE_COPY_LIMIT < self.una)
            {
                self.failed.push_back(p);
                self.path_down(p, now);
            }
        }
    }

    fn on_ack(&mut self, path: PathId, ack: &Ack, now: Instant) -> Result<(), ProtocolError> {
        self.ensure_path(path);
        let cum = self.space.offset(ack.cum, self.una).ok_or(ProtocolError::AckOfUnsent)?;
        if cum > self.loaded {
            return Err(ProtocolError::AckOfUnsent);
        }
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
            let (Some(s), Some(e)) = (self.space.offset(s, self.una), self.space.offset(e, self.una)) else {
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
                self.mark_acked(idx, now)?;
                idx += 1;
            }
        }
        for (i, &rx) in ack.path_rx.iter().enumerate().take(self.paths.len().min(MAX_PATHS)) {
            let t = &mut self.paths[i];
            if rx > t.rx {
                t.rx = rx.min(t.sent.max(t.rx));
                t.last_progress = now;
                t.stalled = false;
                while t.copies.front().is_some_and(|&(end, _)| end <= t.rx) {
                    t.copies.pop_front();
                }
            }
        }
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
}

impl SchemeSender for FbdtSender {
    /// The peer's receive buffer, learnt from its HELLO: the initial flow-control limit.
    fn set_peer_recv_buffer(&mut self, bytes: u64) {
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
        let n = data.len().min(self.send_room());
        self.buf.push_slice(&data[..n]);
        self.count_written(n)
    }

    fn write_bytes(&mut self, data: &bytes::Bytes) -> usize {
        let n = data.len().min(self.send_room());
        self.buf.push(data.slice(..n));
        self.count_written(n)
    }

    fn finish(&mut self) {
        self.finished = true;
    }

    fn is_all_acked(&self) -> bool {
        self.una == self.written && (!self.finished || self.fin_acked)
    }

    fn send_room(&self) -> usize {
        if self.finished {
            0
        } else {
            self.params.send_buffer.saturating_sub(self.buf.len())
        }
    }

    fn path_up(&mut self, path: PathId, now: Instant) {
        self.ensure_path(path);
        let t = &mut self.paths[path.index()];
        t.alive = true;
        t.stalled = false;
        t.last_progress = now;
        t.est.rebase(t.rx, t.sent);
        self.invalidate_deadlines();
    }

    fn path_down(&mut self, path: PathId, _now: Instant) {
        self.ensure_path(path);
        let t = &mut self.paths[path.index()];
        t.alive = false;
        t.stalled = false;
        t.assign = None;
        t.next_assign = None;
        t.copies.clear();
        // Whatever the connection held is gone; count from what was delivered.
        t.sent = t.rx;
        for w in self.windows.iter_mut() {
            for lane in w.lanes.iter_mut() {
                for end in [End::Bottom, End::Top] {
                    if lane.server(end) == Some(path) {
                        lane.set_server(end, None);
                    }
                }
            }
        }
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
        self.paths[path.index()].est.driver = stats;
    }

    fn poll_transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut Vec<u8>) -> usize {
        self.transmit(path, room, now, out)
    }

    fn poll_transmit_buf(&mut self, path: PathId, room: usize, now: Instant, out: &mut FrameBuf) -> usize {
        self.transmit(path, room, now, out)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let alive = self.alive_mask();
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| {
            if t > self.checked_until {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for w in self
            .windows
            .iter()
            .filter(|w| w.unacked > 0 && w.handed_out_at.is_some())
        {
            if let Some(t) = self.deadlines(w, alive).earliest_after {
                consider(t);
            }
        }
        for (i, t) in self.paths.iter().enumerate() {
            if t.alive && !t.stalled && t.in_flight() > 0 {
                consider(t.last_progress + self.stall_after(PathId(i as u8)));
            }
        }
        next
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.checked_until = self.checked_until.max(now);
        self.update_stalls(now);
    }

    fn stats(&self) -> SenderStats {
        self.stats.clone()
    }

    fn poll_stalled_path(&mut self) -> Option<PathId> {
        self.newly_stalled.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// Feeds `data` to one sender through `write` (copies) and to another through
    /// `write_bytes` in pieces of `sizes` (cycled), drives both over two paths with
    /// cumulative ACKs in between, and checks that they emit the same frames. Returns the
    /// payload bytes the `Bytes` sender emitted and how many of them were slices of `data`
    /// itself (no copy).
    fn run_both(data: &Bytes, sizes: &[usize]) -> (u64, u64) {
        let params = StreamParams {
            send_buffer: 256 * 1024,
            ..crate::Config::default().stream_params()
        };
        let cfg = FbdtConfig::default();
        let mut copying = FbdtSender::new(&cfg, params, 7, 1 << 20);
        let mut sharing = FbdtSender::new(&cfg, params, 7, 1 << 20);
        let mut now = Instant::ZERO;
        for s in [&mut copying, &mut sharing] {
            s.path_up(PathId(0), now);
            s.path_up(PathId(1), now);
        }
        let app = data.as_ptr_range();
        let (mut off, mut shared) = (0usize, 0u64);
        let mut sizes = sizes.iter().cycle();
        for _ in 0..10_000 {
            while off < data.len() {
                let piece = data.slice(off..(off + sizes.next().unwrap()).min(data.len()));
                let n = copying.write(&piece);
                assert_eq!(sharing.write_bytes(&piece), n);
                off += n;
                if n < piece.len() {
                    break;
                }
            }
            if off == data.len() {
                copying.finish();
                sharing.finish();
            }
            for p in [PathId(0), PathId(1)].into_iter().cycle().take(200) {
                let (mut v, mut fb) = (Vec::new(), FrameBuf::new());
                let n = copying.poll_transmit(p, 64 * 1024, now, &mut v);
                assert_eq!(sharing.poll_transmit_buf(p, 64 * 1024, now, &mut fb), n);
                assert_eq!(v, fb.to_vec());
                shared += fb
                    .chunks_from(0)
                    .filter(|c| app.contains(&c.as_ptr()))
                    .map(|c| c.len() as u64)
                    .sum::<u64>();
            }
            now = now + Duration::from_millis(1);
            // Acknowledge everything up to the first segment not sent yet.
            let s = &sharing;
            let cum = s
                .segs
                .iter()
                .find(|g| g.state == SegState::Unsent)
                .map_or(s.loaded, |g| g.off);
            let ack = Ack {
                cum: s.space.seq(cum),
                window: 1 << 20,
                fin: s.fin_loaded && cum == s.loaded && s.segs.iter().all(|g| g.state != SegState::Unsent),
                path_rx: s.paths.iter().map(|t| t.sent).collect(),
                ranges: Vec::new(),
            };
            copying.on_ack(PathId(0), &ack, now).unwrap();
            sharing.on_ack(PathId(0), &ack, now).unwrap();
            if sharing.is_all_acked() && sharing.finished {
                break;
            }
        }
        assert!(copying.is_all_acked() && sharing.is_all_acked() && sharing.finished);
        assert_eq!(copying.stats().bytes_acked, data.len() as u64);
        let st = sharing.stats();
        (st.bytes_sent + st.redundant_bytes_sent, shared)
    }

    fn data(n: usize) -> Bytes {
        (0..n).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>().into()
    }

    /// Large writes: every payload byte goes out as a slice of the application's memory.
    #[test]
    fn bytes_writes_go_out_as_slices_of_the_applications_memory() {
        let d = data(3 << 20);
        let (payload, shared) = run_both(&d, &[100_000, 250_000, 8192]);
        assert!(payload >= d.len() as u64);
        assert_eq!(shared, payload);
    }

    /// Small writes are gathered (copied) into the buffer's tail; frames then straddle
    /// shared chunks and the tail, and still match the copying path byte for byte.
    #[test]
    fn mixed_writes_frame_like_the_copying_path() {
        let d = data(2 << 20);
        let (payload, shared) = run_both(&d, &[1, 5000, 300, 70_000, 4095, 4096, 17]);
        assert!(payload >= d.len() as u64 && shared > 0 && shared < payload);
    }
}
