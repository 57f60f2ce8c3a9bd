//! The meta-layer sender: one send buffer, 64-bit DSNs, one shared receive window, per-path
//! allowances, reinjection, and a pluggable [`Scheduler`].

use std::collections::{BTreeMap, BTreeSet};

use super::sched::{PathView, Scheduler, View};
use super::MetaConfig;
use crate::error::ProtocolError;
use crate::path::{Hint, PathId, PathStats};
use crate::scheme::{SchemeSender, StreamParams};
use crate::stats::SenderStats;
use crate::time::{Duration, Instant};
use crate::stream::SendStream;
use crate::wire::{DataAck, Frame, FrameBuf, FrameOut, MpData};

/// TCP MSS for congestion-avoidance growth after a penalisation.
const MSS: f64 = 1448.0;
/// Allowance before the driver reports a cwnd: Linux's initial window, 10 × MSS, rounded up
/// to whole meta segments by `has_space` (an idle path always takes one).
const INITIAL_CWND: u64 = 10 * 1448;
/// Upstream MPTCP's `net.mptcp.stale_loss_cnt` default: a subflow with data outstanding that
/// received nothing over more than this many MPTCP-level retransmission intervals is stale.
const STALE_LOSS_CNT: u32 = 4;

#[derive(Clone, Copy, Debug)]
struct Seg {
    len: u32,
    fin: bool,
    /// Paths that carried a copy.
    mask: u32,
}

#[derive(Clone, Debug)]
struct MetaPath {
    up: bool,
    stats: PathStats,
    /// Payload bytes handed to this connection / reported received (DATA_ACK counters).
    sent: u64,
    rx: u64,
    /// The connection epoch (JOIN's) of the path's current connection: a DATA_ACK counter
    /// with another epoch counts an earlier connection and is ignored.
    epoch: u32,
    /// Retransmission timer: armed while data is in flight.
    rto_at: Option<Instant>,
    backoff: u32,
    /// Potentially failed (out-of-tree MPTCP's `pf`) or stale (upstream's): no new data
    /// until the subflow makes progress again.
    pf: bool,
    /// Upstream's stale accounting (`mptcp_pm_subflow_chk_stale`): MPTCP-level
    /// retransmission intervals this subflow had data outstanding and received nothing, and
    /// its delivered-byte counter when the count began (the kernel compares `rcv_tstamp`).
    stale_count: u32,
    stale_rx: u64,
    /// Paused for an announced scan (scan-aware schedulers).
    scan_paused: bool,
    /// Congestion window after an opportunistic-reinjection penalty, regrowing by one MSS
    /// per window of delivered bytes (Reno congestion avoidance) until the driver's value.
    penalised_cwnd: Option<f64>,
    last_penalty: Option<Instant>,
    /// Redundant scheduler: next DSN this path has not carried.
    red_next: u64,
}

impl MetaPath {
    fn new() -> Self {
        MetaPath {
            up: false,
            stats: PathStats::default(),
            sent: 0,
            rx: 0,
            epoch: 0,
            rto_at: None,
            backoff: 0,
            pf: false,
            stale_count: 0,
            stale_rx: 0,
            scan_paused: false,
            penalised_cwnd: None,
            last_penalty: None,
            red_next: 0,
        }
    }
    fn in_flight(&self) -> u64 {
        self.sent.saturating_sub(self.rx)
    }
    fn srtt_s(&self) -> f64 {
        self.stats.srtt.map_or(0.0, |d| d.as_secs_f64())
    }
}

#[derive(Clone)]
pub struct MetaSender {
    cfg: MetaConfig,
    seg_size: u64,
    send_buffer: u64,
    sched: Box<dyn Scheduler + Send>,
    reinject: bool,
    /// Bytes written and not yet acknowledged (`[una, written)`), and the stream end.
    stream: SendStream,
    snd_nxt: u64,
    fin_sent: bool,
    /// Right edge of the shared receive window (data_ack + rwnd, never moves left).
    edge: u64,
    segs: BTreeMap<u64, Seg>,
    /// Segments to send again on another path (RTO expiry, dead path).
    reinject_q: BTreeSet<u64>,
    /// Upstream MPTCP's recovery (`Scheduler::upstream_recovery`): one MPTCP-level
    /// retransmission timer instead of a timer per subflow.
    upstream: bool,
    /// `Scheduler::queues_past_cwnd`: the window does not limit new data.
    queues_past_cwnd: bool,
    /// The send buffer the driver holds the application's writes to, if tighter than
    /// `send_buffer` (`SchemeSender::set_send_limit`).
    send_limit: Option<u64>,
    /// The MPTCP-level retransmission timer (`mptcp_reset_rtx_timer`).
    rtx_at: Option<Instant>,
    /// The segment that timer chose to send again, and the idle subflow it goes on.
    rtx_pending: Option<(PathId, u64)>,
    paths: Vec<MetaPath>,
    views: Vec<PathView>,
    stats: SenderStats,
}

impl MetaSender {
    pub fn new(cfg: &MetaConfig, params: StreamParams, now: Instant) -> Self {
        let sched = cfg.scheduler.build(&cfg.musher, now);
        let reinject = cfg.reinject.unwrap_or_else(|| sched.reinject_default());
        let upstream = sched.upstream_recovery();
        let queues_past_cwnd = sched.queues_past_cwnd();
        MetaSender {
            cfg: cfg.clone(),
            seg_size: params.segment_size as u64,
            send_buffer: params.send_buffer as u64,
            sched,
            reinject,
            stream: SendStream::new(),
            snd_nxt: 0,
            fin_sent: false,
            edge: 0,
            segs: BTreeMap::new(),
            reinject_q: BTreeSet::new(),
            upstream,
            queues_past_cwnd,
            send_limit: None,
            rtx_at: None,
            rtx_pending: None,
            paths: Vec::new(),
            views: Vec::new(),
            stats: SenderStats::default(),
        }
    }

    fn path(&mut self, p: PathId) -> &mut MetaPath {
        if self.paths.len() <= p.index() {
            self.paths.resize_with(p.index() + 1, MetaPath::new);
            self.stats.per_path_bytes_sent.resize(p.index() + 1, 0);
        }
        &mut self.paths[p.index()]
    }

    fn rto(&self, p: &MetaPath) -> Duration {
        let base = Duration::from_secs_f64((3.0 * p.srtt_s()).max(self.cfg.rto_min.as_secs_f64()));
        let backed = base.mul_f64(f64::from(1u32 << p.backoff.min(20)));
        if backed.as_micros() > self.cfg.rto_max.as_micros() {
            self.cfg.rto_max
        } else {
            backed
        }
    }

    fn allowance(&self, p: &MetaPath) -> u64 {
        let cwnd = p.stats.cwnd_bytes.map_or(INITIAL_CWND as f64, |c| {
            c as f64 * self.cfg.cwnd_gain + self.cfg.cwnd_extra as f64
        });
        let c = p.penalised_cwnd.map_or(cwnd, |pc| pc.min(cwnd));
        c as u64
    }

    fn build_views(&mut self, now: Instant) -> Vec<PathView> {
        let mut views = std::mem::take(&mut self.views);
        views.clear();
        for (i, p) in self.paths.iter().enumerate() {
            views.push(PathView {
                id: PathId::slot(i),
                up: p.up,
                usable: p.up && !p.pf && !p.scan_paused,
                srtt_s: p.srtt_s(),
                cwnd: self.allowance(p),
                tcp_cwnd: p.stats.cwnd_bytes.unwrap_or(INITIAL_CWND),
                in_flight: p.in_flight(),
                rate_bps: p.stats.delivery_rate_bps.unwrap_or(0.0),
                delivered: p.rx,
            });
        }
        let _ = now;
        views
    }

    fn view<'a>(&self, now: Instant, views: &'a [PathView]) -> View<'a> {
        View {
            now,
            paths: views,
            seg: self.seg_size,
            window_left: self.edge.saturating_sub(self.snd_nxt),
            unsent: self.stream.written() - self.snd_nxt,
            reinjected: self.stats.redundant_bytes_sent,
        }
    }

    /// Emits the segment at `dsn` (already in `segs`) on `path`.
    fn emit(&mut self, path: PathId, dsn: u64, now: Instant, out: &mut impl FrameOut) -> usize {
        let seg = self.segs[&dsn];
        out.put_inline(|v| MpData::emit_header(dsn, seg.fin, seg.len as usize, v));
        // The payload as slices of the send buffer: shared into a FrameBuf, copied into a Vec.
        self.stream.slices(dsn, seg.len as usize, |b| out.put_shared(b));
        if let Some(s) = self.segs.get_mut(&dsn) {
            s.mask |= path.bit();
        }
        if !self.upstream {
            let rto = {
                let p = &self.paths[path.index()];
                (p.in_flight() == 0 && !p.pf).then(|| self.rto(p))
            };
            if let Some(rto) = rto {
                self.paths[path.index()].rto_at = Some(now + rto);
            }
        }
        let p = &mut self.paths[path.index()];
        p.sent += u64::from(seg.len);
        self.stats.per_path_bytes_sent[path.index()] += u64::from(seg.len);
        if self.upstream && self.rtx_at.is_none() {
            // `__mptcp_push_pending`: the MPTCP-level timer runs while data is out (its
            // interval counts the segment just handed over).
            self.rtx_at = Some(now + self.rtx_interval());
        }
        MpData::OVERHEAD + seg.len as usize
    }

    fn space(&self, path: PathId) -> bool {
        let p = &self.paths[path.index()];
        p.up && !p.pf
            && !p.scan_paused
            && (self.queues_past_cwnd || p.in_flight() == 0 || p.in_flight() + self.seg_size <= self.allowance(p))
    }

    /// The next new segment's length, if one may be sent (window and data permitting).
    fn next_len(&self) -> Option<(u32, bool)> {
        let unsent = self.stream.written() - self.snd_nxt;
        if unsent == 0 {
            return (self.stream.is_finished() && !self.fin_sent).then_some((0, true));
        }
        let len = unsent.min(self.seg_size);
        if self.snd_nxt + len > self.edge {
            return None;
        }
        let fin = self.stream.is_finished() && self.snd_nxt + len == self.stream.written();
        Some((len as u32, fin))
    }

    fn window_blocked(&self) -> bool {
        let unsent = self.stream.written() - self.snd_nxt;
        unsent > 0 && self.snd_nxt + unsent.min(self.seg_size) > self.edge
    }

    /// The out-of-tree kernel's second trigger for opportunistic reinjection
    /// (`__mptcp_next_segment`): nothing left to send while the application waits on a full
    /// send buffer (`SOCK_NOSPACE` with free space below half the queued bytes,
    /// `sk_stream_min_wspace`). The head segment's DATA_ACK, held by a slow subflow, is then
    /// what frees the buffer — as a blocked receive window is in the first trigger.
    fn send_buffer_blocked(&self) -> bool {
        let limit = self.send_limit.map_or(self.send_buffer, |l| l.min(self.send_buffer));
        let queued = self.stream.written() - self.stream.una();
        !self.stream.is_finished() && queued > 0 && self.stream.written() == self.snd_nxt && limit.saturating_sub(queued) < queued / 2
    }

    /// Sends the head-of-window segment again on `path` and penalises the slower paths
    /// holding it (Linux `mptcp_rcv_buf_optimization`: at most once per their RTT).
    fn opportunistic_reinject(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        let Some((&dsn, &seg)) = self.segs.iter().next() else {
            return 0;
        };
        if dsn != self.stream.una() || seg.mask & path.bit() != 0 || MpData::OVERHEAD + seg.len as usize > room {
            return 0;
        }
        let my_rtt = self.paths[path.index()].srtt_s();
        for i in 0..self.paths.len() {
            if seg.mask & (1 << i) == 0 {
                continue;
            }
            let cwnd = self.allowance(&self.paths[i]) as f64;
            let p = &mut self.paths[i];
            let srtt = p.srtt_s();
            let due = p
                .last_penalty
                .is_none_or(|t| now.saturating_since(t).as_secs_f64() >= srtt);
            if srtt > my_rtt && due {
                p.penalised_cwnd = Some((cwnd / 2.0).max(2.0 * MSS));
                p.last_penalty = Some(now);
            }
        }
        let n = self.emit(path, dsn, now, out);
        self.stats.redundant_bytes_sent += u64::from(seg.len);
        n
    }

    /// Queued reinjections (RTO, dead path) that `path` has not carried yet.
    fn reinject_from_queue(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        let pick = self.reinject_q.iter().copied().find(|d| {
            self.segs
                .get(d)
                .is_some_and(|s| s.mask & path.bit() == 0 && MpData::OVERHEAD + s.len as usize <= room)
        });
        let Some(dsn) = pick else { return 0 };
        if !self.space(path) {
            return 0;
        }
        self.reinject_q.remove(&dsn);
        let len = u64::from(self.segs[&dsn].len);
        let n = self.emit(path, dsn, now, out);
        self.stats.redundant_bytes_sent += len;
        n
    }

    /// Upstream's MPTCP-level retransmission interval (`__mptcp_set_timeout`): the longest
    /// subflow retransmission timeout among the active subflows with data out that are not
    /// counting towards stale (`mptcp_timeout_from_subflow`), or `TCP_RTO_MIN` if there is
    /// none. The meta layer does not see a subflow's timer, so it takes Linux's RTO for a
    /// steady round trip, srtt + `TCP_RTO_MIN`, without the subflow's own back-off.
    fn rtx_interval(&self) -> Duration {
        let rto_min = self.cfg.rto_min.as_secs_f64();
        let longest = self
            .paths
            .iter()
            .filter(|p| p.up && !p.pf && p.stale_count == 0 && p.in_flight() > 0)
            .map(|p| p.srtt_s() + rto_min)
            .fold(rto_min, f64::max);
        Duration::from_secs_f64(longest.min(self.cfg.rto_max.as_secs_f64()))
    }

    /// Upstream's MPTCP-level retransmission timer fired (`mptcp_retransmit_timer` →
    /// `__mptcp_retrans`). Every subflow with data outstanding counts one more interval
    /// without progress, and one that received nothing over more than `STALE_LOSS_CNT` of
    /// them becomes stale — while another subflow is doing better — and its data is sent
    /// again elsewhere (`mptcp_pm_subflow_chk_stale`, `__mptcp_retransmit_pending_data`).
    /// The oldest unacknowledged segment goes again on a subflow with nothing outstanding
    /// (`mptcp_subflow_get_retrans`: upstream never queues a retransmission behind data the
    /// subflow still holds), if there is one.
    fn mptcp_retrans(&mut self, now: Instant) {
        if self.stream.una() == self.snd_nxt && self.snd_nxt == self.stream.written() {
            self.rtx_at = None;
            return;
        }
        let mut idle = None;
        for i in 0..self.paths.len() {
            let p = &self.paths[i];
            if !p.up {
                continue;
            }
            if p.in_flight() == 0 {
                if idle.is_none() && !p.pf && !p.scan_paused {
                    idle = Some(PathId::slot(i));
                }
                continue;
            }
            self.chk_stale(i);
        }
        if let Some(path) = idle {
            if let Some((&dsn, seg)) = self.segs.iter().next() {
                if seg.mask & path.bit() == 0 {
                    self.rtx_pending = Some((path, dsn));
                }
            }
        }
        self.rtx_at = Some(now + self.rtx_interval());
    }

    /// One MPTCP-level retransmission interval passed with path `i` holding data.
    fn chk_stale(&mut self, i: usize) {
        let p = &mut self.paths[i];
        if p.stale_count == 0 {
            p.stale_count = 1;
            p.stale_rx = p.rx;
            return;
        }
        if p.rx != p.stale_rx {
            p.stale_count = 0;
            p.pf = false;
            return;
        }
        p.stale_count += 1;
        if p.pf || p.stale_count <= STALE_LOSS_CNT {
            return;
        }
        // Stale only if another subflow is usable and doing better (`stale_count` below
        // stale_loss_cnt − 1): the last working subflow is never given up.
        let better = (STALE_LOSS_CNT - 1).max(1);
        let other = self
            .paths
            .iter()
            .enumerate()
            .any(|(j, q)| j != i && q.up && !q.pf && !q.scan_paused && q.stale_count < better);
        if other {
            self.paths[i].pf = true;
            self.stats.path_stalls += 1;
            self.queue_reinjection_of(PathId::slot(i));
        }
    }

    /// The segment the MPTCP-level timer chose, on the idle subflow it chose.
    fn send_rtx_pending(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        let Some((q, dsn)) = self.rtx_pending else { return 0 };
        if q != path {
            return 0;
        }
        let Some(seg) = self.segs.get(&dsn).copied() else {
            // Acknowledged meanwhile.
            self.rtx_pending = None;
            return 0;
        };
        if MpData::OVERHEAD + seg.len as usize > room {
            return 0;
        }
        self.rtx_pending = None;
        if !self.space(path) {
            return 0;
        }
        let n = self.emit(path, dsn, now, out);
        self.stats.redundant_bytes_sent += u64::from(seg.len);
        n
    }

    fn queue_reinjection_of(&mut self, path: PathId) {
        let bit = path.bit();
        for (&d, s) in &self.segs {
            if s.mask & bit != 0 {
                self.reinject_q.insert(d);
            }
        }
    }

    /// Handles a DATA_ACK that arrived on any path.
    fn on_data_ack(&mut self, _path: PathId, ack: &DataAck, now: Instant) -> Result<(), ProtocolError> {
        let top = if self.fin_sent { self.stream.written() } else { self.snd_nxt };
        if ack.data_ack > top {
            return Err(ProtocolError::Unexpected {
                path: _path,
                what: "DATA_ACK beyond the data sent",
            });
        }
        if ack.data_ack > self.stream.una() {
            let n = ack.data_ack - self.stream.una();
            self.stream.acknowledge(n);
            // A segment straddling data_ack keeps its unacknowledged tail.
            let mut keep = self.segs.split_off(&ack.data_ack);
            if let Some((&d, s)) = self.segs.iter().next_back() {
                let end = d + u64::from(s.len);
                if end > ack.data_ack {
                    keep.insert(
                        ack.data_ack,
                        Seg {
                            len: (end - ack.data_ack) as u32,
                            ..*s
                        },
                    );
                }
            }
            self.segs = keep;
            self.reinject_q = self.reinject_q.split_off(&ack.data_ack);
            self.stats.bytes_acked += n;
            for p in &mut self.paths {
                p.red_next = p.red_next.max(ack.data_ack);
            }
            if self.upstream {
                // `__mptcp_clean_una`: progress restarts the MPTCP-level timer; it stops
                // once everything written is acknowledged.
                self.rtx_at =
                    (self.stream.una() < self.snd_nxt || self.snd_nxt < self.stream.written()).then(|| now + self.rtx_interval());
            }
        }
        self.edge = self.edge.max(ack.data_ack + u64::from(ack.window));
        if ack.fin && self.fin_sent && ack.data_ack == self.stream.written() {
            self.stream.fin_acknowledged();
            self.segs.clear();
            self.reinject_q.clear();
        }
        let upstream = self.upstream;
        for (i, rx) in ack.path_rx.iter().enumerate().take(self.paths.len()) {
            let rto_base = {
                let p = &self.paths[i];
                Duration::from_secs_f64((3.0 * p.srtt_s()).max(self.cfg.rto_min.as_secs_f64()))
            };
            let p = &mut self.paths[i];
            // A counter of an earlier connection of this path (a DATA_ACK that left, on
            // any path, before the peer saw the new connection) says nothing about this one.
            if !p.up || rx.epoch != p.epoch {
                continue;
            }
            let v = rx.bytes.min(p.sent);
            if v <= p.rx {
                continue;
            }
            let delivered = (v - p.rx) as f64;
            p.rx = v;
            if let Some(pc) = p.penalised_cwnd.as_mut() {
                *pc += MSS * delivered / pc.max(MSS);
            }
            // Something got through: the subflow works again, and takes new data at once.
            // Both kernels do this on the first sign of life, not at a later timer: the
            // out-of-tree MPTCP clears `pf` on any valid packet (`mptcp_data_ack`), upstream
            // clears `stale` as soon as the subflow's `rcv_tstamp` moves
            // (`mptcp_subflow_active`). Waiting for the meta layer's own backed-off timer
            // instead stacked a second back-off on the subflow's TCP one (blockage under the
            // TCP-level model: silent from 2 s to 9.7 s).
            p.pf = false;
            if !upstream {
                p.backoff = 0;
                p.rto_at = (p.in_flight() > 0).then(|| now + rto_base);
            }
        }
        // A penalised window that regrew to the driver's cwnd is no longer a cap.
        for i in 0..self.paths.len() {
            let p = &self.paths[i];
            let drv = p
                .stats
                .cwnd_bytes
                .map_or(f64::MAX, |c| c as f64 * self.cfg.cwnd_gain + self.cfg.cwnd_extra as f64);
            if p.penalised_cwnd.is_some_and(|c| c >= drv) {
                self.paths[i].penalised_cwnd = None;
            }
        }
        Ok(())
    }

    fn send_redundant(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        let next = {
            let p = &self.paths[path.index()];
            p.red_next.max(self.stream.una())
        };
        if next < self.snd_nxt {
            if !self.space(path) {
                return 0;
            }
            let Some((&d, s)) = self.segs.range(next..).next() else {
                return 0;
            };
            if MpData::OVERHEAD + s.len as usize > room {
                return 0;
            }
            let len = u64::from(s.len);
            self.paths[path.index()].red_next = d + len.max(1);
            let n = self.emit(path, d, now, out);
            self.stats.redundant_bytes_sent += len;
            return n;
        }
        let n = self.send_new(path, room, now, out);
        if n > 0 {
            self.paths[path.index()].red_next = self.snd_nxt;
        }
        n
    }

    fn send_new(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        let Some((len, fin)) = self.next_len() else { return 0 };
        if MpData::OVERHEAD + len as usize > room || !self.space(path) {
            return 0;
        }
        let dsn = self.snd_nxt;
        self.segs.insert(dsn, Seg { len, fin, mask: 0 });
        self.snd_nxt += u64::from(len);
        if fin {
            self.fin_sent = true;
        }
        self.stats.bytes_sent += u64::from(len);
        self.sched.on_sent(path, u64::from(len));
        self.emit(path, dsn, now, out)
    }

    /// One frame for `path` into `out` (a `Vec` for `poll_transmit`, a `FrameBuf` for
    /// `poll_transmit_buf`).
    fn transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut impl FrameOut) -> usize {
        if self.paths.get(path.index()).is_none_or(|p| !p.up) {
            return 0;
        }
        let n = self.send_rtx_pending(path, room, now, out);
        if n > 0 {
            return n;
        }
        let n = self.reinject_from_queue(path, room, now, out);
        if n > 0 {
            return n;
        }
        if self.sched.redundant() {
            return self.send_redundant(path, room, now, out);
        }
        if self.window_blocked() {
            self.stats.window_stalls += 1;
            if self.reinject && self.space(path) {
                return self.opportunistic_reinject(path, room, now, out);
            }
            return 0;
        }
        if self.reinject && self.send_buffer_blocked() && self.space(path) {
            return self.opportunistic_reinject(path, room, now, out);
        }
        if self.next_len().is_none() {
            return 0;
        }
        let views = self.build_views(now);
        let chosen = {
            let v = self.view(now, &views);
            if self.next_len() == Some((0, true)) {
                // DATA_FIN alone: any usable path.
                views.iter().find(|p| p.usable).map(|p| p.id)
            } else {
                self.sched.select(&v)
            }
        };
        self.views = views;
        if chosen != Some(path) {
            return 0;
        }
        self.send_new(path, room, now, out)
    }
}

impl SchemeSender for MetaSender {
    /// The peer's receive buffer from its HELLO: the initial window.
    fn set_peer_recv_buffer(&mut self, bytes: u64) {
        self.edge = self.edge.max(self.stream.una() + bytes);
    }

    /// The scheduler's current ratio (ratio schedulers).
    fn scheduler_ratio(&self) -> Option<u8> {
        self.sched.ratio()
    }

    fn set_send_limit(&mut self, bytes: u64) {
        self.send_limit = Some(bytes);
    }

    /// A driver hint (scan announcements): scan-aware schedulers pause the path.
    fn path_hint(&mut self, path: PathId, hint: Hint) {
        if !self.sched.scan_aware() {
            return;
        }
        let p = self.path(path);
        p.scan_paused = hint == Hint::ScanSoon;
    }

    // `send_room` is 0 once finished, so a write after `finish` takes nothing.
    fn write(&mut self, data: &[u8]) -> usize {
        let n = self.stream.write(data, self.send_room());
        self.stats.bytes_written += n as u64;
        n
    }

    fn write_bytes(&mut self, data: &bytes::Bytes) -> usize {
        let n = self.stream.write_bytes(data, self.send_room());
        self.stats.bytes_written += n as u64;
        n
    }

    fn finish(&mut self) {
        self.stream.finish();
    }

    fn is_all_acked(&self) -> bool {
        self.stream.is_all_acked()
    }

    fn send_room(&self) -> usize {
        if self.stream.is_finished() {
            return 0;
        }
        self.send_buffer.saturating_sub(self.stream.written() - self.stream.una()) as usize
    }

    fn path_up(&mut self, path: PathId, _now: Instant) {
        let una = self.stream.una();
        let p = self.path(path);
        // A new connection: its counters start from zero on both ends.
        *p = MetaPath {
            up: true,
            stats: p.stats,
            epoch: p.epoch,
            red_next: una,
            ..MetaPath::new()
        };
    }

    fn set_path_epoch(&mut self, path: PathId, epoch: u32) {
        self.path(path).epoch = epoch;
    }

    fn path_down(&mut self, path: PathId, _now: Instant) {
        let p = self.path(path);
        if !p.up {
            return;
        }
        p.up = false;
        p.rto_at = None;
        if self.rtx_pending.is_some_and(|(q, _)| q == path) {
            self.rtx_pending = None;
        }
        self.queue_reinjection_of(path);
        // The copies it carried are gone: other paths may carry them now.
        let bit = path.bit();
        for s in self.segs.values_mut() {
            s.mask &= !bit;
        }
    }

    fn path_stats(&mut self, path: PathId, stats: PathStats) {
        self.path(path).stats = stats;
    }

    fn handle_frame(&mut self, path: PathId, frame: &Frame<'_>, now: Instant) -> Result<(), ProtocolError> {
        match frame {
            Frame::DataAck(a) => self.on_data_ack(path, a, now),
            _ => Err(ProtocolError::Unexpected {
                path,
                what: "FBDT ACK in a meta-layer session",
            }),
        }
    }

    fn poll_transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut Vec<u8>) -> usize {
        self.transmit(path, room, now, out)
    }

    fn poll_transmit_buf(&mut self, path: PathId, room: usize, now: Instant, out: &mut FrameBuf) -> usize {
        self.transmit(path, room, now, out)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let rto = self
            .paths
            .iter()
            .filter(|p| p.up)
            .filter_map(|p| p.rto_at)
            .chain(self.rtx_at)
            .min();
        match (rto, self.sched.next_tick()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.rtx_at.is_some_and(|t| t <= now) {
            self.mptcp_retrans(now);
        }
        for i in 0..self.paths.len() {
            let p = &self.paths[i];
            if !p.up || p.rto_at.is_none_or(|t| t > now) {
                continue;
            }
            if p.in_flight() == 0 && !p.pf {
                self.paths[i].rto_at = None;
                continue;
            }
            // RTO expiry without progress: potentially failed, reinject its data elsewhere,
            // back off.
            if !self.paths[i].pf {
                self.paths[i].pf = true;
                self.stats.path_stalls += 1;
                self.queue_reinjection_of(PathId::slot(i));
            }
            self.paths[i].backoff += 1;
            let rto = self.rto(&self.paths[i]);
            self.paths[i].rto_at = Some(now + rto);
        }
        if self.sched.next_tick().is_some_and(|t| t <= now) {
            let views = self.build_views(now);
            let v = self.view(now, &views);
            self.sched.on_tick(&v);
            self.views = views;
        }
    }

    fn stats(&self) -> SenderStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::PathRx;
    use crate::{Config, SchedulerKind};

    fn sender() -> MetaSender {
        sender_with(SchedulerKind::MinRtt)
    }

    fn sender_with(kind: SchedulerKind) -> MetaSender {
        let cfg = Config::meta(kind);
        let mut s = MetaSender::new(cfg.meta_config().unwrap(), cfg.stream_params(), Instant::ZERO);
        s.set_peer_recv_buffer(1 << 24);
        // Path 1 is the faster one: minRTT gives it the new data.
        for (p, ms) in [(PathId(0), 50), (PathId(1), 5)] {
            s.set_path_epoch(p, 0);
            s.path_up(p, Instant::ZERO);
            s.path_stats(
                p,
                PathStats {
                    srtt: Some(Duration::from_millis(ms)),
                    cwnd_bytes: Some(1 << 20),
                    ..PathStats::default()
                },
            );
        }
        s
    }

    /// Sends up to `n` bytes of new data on `path`; returns how many payload bytes went.
    fn send_on(s: &mut MetaSender, path: PathId, n: usize) -> u64 {
        let before = s.paths[path.index()].sent;
        let mut out = Vec::new();
        while s.paths[path.index()].sent - before < n as u64 {
            if s.poll_transmit(path, 20_000, Instant::ZERO, &mut out) == 0 {
                break;
            }
        }
        s.paths[path.index()].sent - before
    }

    /// A DATA_ACK that left before the peer saw path 1's new connection — it counts the old
    /// connection's bytes, and arrives on path 0 after the re-join — credits nothing to the
    /// new connection; the new connection's own counter (its epoch) does.
    #[test]
    fn a_late_data_ack_of_a_replaced_connection_is_not_counted() {
        let mut s = sender();
        s.write(&vec![7u8; 400_000]);
        let old = send_on(&mut s, PathId(1), 100_000);
        assert!(old > 0);
        // Path 1's connection is replaced (epoch 1); new data goes out on it.
        s.path_down(PathId(1), Instant::ZERO);
        s.set_path_epoch(PathId(1), 1);
        s.path_up(PathId(1), Instant::ZERO);
        let new = send_on(&mut s, PathId(1), 50_000);
        assert!(new > 0);
        let late = |epoch, bytes| DataAck {
            data_ack: 0,
            window: 1 << 20,
            fin: false,
            path_rx: vec![PathRx::default(), PathRx { epoch, bytes }],
        };
        s.on_data_ack(PathId(0), &late(0, old), Instant::ZERO).unwrap();
        assert_eq!(
            s.paths[1].rx, 0,
            "the old connection's counter was not read as the new one's"
        );
        assert_eq!(s.paths[1].in_flight(), new);
        s.on_data_ack(PathId(0), &late(1, new / 2), Instant::ZERO).unwrap();
        assert_eq!(s.paths[1].rx, new / 2);
    }

    fn ack(data_ack: u64, rx: [u64; 2]) -> DataAck {
        DataAck {
            data_ack,
            window: 1 << 24,
            fin: false,
            path_rx: rx.iter().map(|&bytes| PathRx { epoch: 0, bytes }).collect(),
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    /// `mp:kernel` hands a subflow data past its congestion window, up to the send buffer
    /// `tcp_sndbuf_expand` gives that window (the bytes wait in the subflow's send queue, as upstream
    /// MPTCP's scheduler only asks `sk_stream_memory_free`); minRTT stops at the window.
    #[test]
    fn the_kernel_scheduler_fills_a_subflow_past_its_window_up_to_its_send_buffer() {
        let cwnd = 64 * 1024;
        let sent_with = |kind| {
            let mut s = sender_with(kind);
            s.path_down(PathId(0), Instant::ZERO);
            let stats = PathStats {
                srtt: Some(Duration::from_millis(5)),
                cwnd_bytes: Some(cwnd),
                ..PathStats::default()
            };
            s.path_stats(PathId(1), stats);
            s.write(&vec![7u8; 4_000_000]);
            let sent = send_on(&mut s, PathId(1), 4_000_000);
            (sent, s.allowance(&s.paths[1]), s.seg_size)
        };
        let (minrtt, allowance, seg) = sent_with(SchedulerKind::MinRtt);
        assert_eq!(minrtt, allowance, "minRTT: the window (cwnd + cwnd_extra)");
        let (kernel, _, _) = sent_with(SchedulerKind::Kernel);
        // From the subflow's own window, not the allowance (2 × 45 segments × 2304 bytes).
        let sndbuf = crate::meta::sched::subflow_sndbuf(cwnd, 2);
        assert_eq!(sndbuf, 207_360);
        assert!(sndbuf > allowance);
        assert!(
            (sndbuf..sndbuf + seg).contains(&kernel),
            "mp:kernel: up to the send buffer ({kernel} of {sndbuf})"
        );
    }

    /// minRTT (the out-of-tree kernel) re-sends the head segment on a fast subflow when
    /// everything written is out and the application waits on a full send buffer — the
    /// kernel's `SOCK_NOSPACE` trigger — not only when the receive window blocks.
    #[test]
    fn a_writer_blocked_on_the_send_buffer_triggers_opportunistic_reinjection() {
        let limit = 200_000;
        let resent_with = |send_limit: u64| {
            let mut s = sender();
            s.set_send_limit(send_limit);
            s.write(&vec![7u8; limit as usize]);
            // The head segment goes on slow path 0 (path 1 not up yet), the rest on path 1.
            s.path_down(PathId(1), Instant::ZERO);
            let mut out = Vec::new();
            assert!(s.poll_transmit(PathId(0), 20_000, Instant::ZERO, &mut out) > 0);
            s.set_path_epoch(PathId(1), 1);
            s.path_up(PathId(1), Instant::ZERO);
            let rest = limit - s.seg_size;
            assert_eq!(send_on(&mut s, PathId(1), rest as usize), rest);
            assert_eq!(s.snd_nxt, s.stream.written(), "everything written is out");
            let before = s.stats.redundant_bytes_sent;
            let mut out = Vec::new();
            s.poll_transmit(PathId(1), 20_000, at(1), &mut out);
            (s.stats.redundant_bytes_sent - before, s.segs[&0].mask)
        };
        let (resent, mask) = resent_with(limit);
        assert!(resent > 0, "the head segment goes again on the fast subflow");
        assert_eq!(mask, 0b11);
        assert_eq!(resent_with(4 * limit).0, 0, "a writer with room left is not blocked");
    }

    /// A subflow that timed out (potentially failed) takes new data again as soon as
    /// anything it carried is reported received — as both kernels clear `pf`/`stale` on the
    /// first sign of life — not at the meta layer's next backed-off expiry, which under the
    /// TCP-level model came seconds after the subflow's own TCP had resumed.
    #[test]
    fn a_failed_subflow_is_usable_again_once_it_makes_progress() {
        let mut s = sender();
        s.write(&vec![7u8; 4_000_000]);
        let sent = send_on(&mut s, PathId(1), 64 * 1024);
        assert!(sent > 0);
        // Its timer expires with nothing delivered: potentially failed, no new data.
        let t = s.poll_timeout().expect("a timer runs while data is out");
        s.handle_timeout(t);
        assert!(s.paths[1].pf);
        assert_eq!(send_on(&mut s, PathId(1), 16 * 1024), 0);
        // Backed off: the next expiry is later than the first.
        let next = s.paths[1].rto_at.unwrap();
        assert!(next.saturating_since(t) > t.saturating_since(Instant::ZERO));
        // Part of what it held arrives (its TCP resumed) well before that expiry.
        s.on_data_ack(PathId(0), &ack(16 * 1024, [0, 16 * 1024]), t + Duration::from_millis(1))
            .unwrap();
        assert!(!s.paths[1].pf, "progress ends the potentially-failed state at once");
        assert!(
            send_on(&mut s, PathId(1), 16 * 1024) > 0,
            "and the subflow takes new data"
        );
    }

    /// `mp:kernel` recovers as upstream: no timer per subflow; one MPTCP-level timer whose
    /// expiry sends the oldest unacknowledged segment again on a subflow with nothing
    /// outstanding, and never on one that still holds data.
    #[test]
    fn upstream_retransmits_the_oldest_segment_on_an_idle_subflow() {
        let mut s = sender_with(SchedulerKind::Kernel);
        s.write(&vec![7u8; 400_000]);
        // Path 0 carries the oldest segments (the scheduler's first burst); path 1 one
        // after them.
        let mut out = Vec::new();
        assert!(s.poll_transmit(PathId(0), 20_000, Instant::ZERO, &mut out) > 0);
        while s.poll_transmit(PathId(0), 20_000, Instant::ZERO, &mut out) > 0 {}
        assert!(s.poll_transmit(PathId(1), 20_000, Instant::ZERO, &mut out) > 0);
        assert!(s.paths.iter().all(|p| p.rto_at.is_none()), "no per-subflow timer");
        let seg = s.seg_size;
        // Path 1's segment arrives; path 0's does not: the DATA_ACK stays at 0.
        s.on_data_ack(PathId(1), &ack(0, [0, seg]), at(10)).unwrap();
        let t = s.poll_timeout().unwrap();
        // srtt 50 ms on path 0 + TCP_RTO_MIN, from the first send.
        assert_eq!(t, at(250));
        s.handle_timeout(t);
        let redundant = s.stats.redundant_bytes_sent;
        // Path 0 still holds data: it gets no retransmission.
        let mut out0 = Vec::new();
        s.poll_transmit(PathId(0), 20_000, t, &mut out0);
        assert_eq!(s.stats.redundant_bytes_sent, redundant);
        // Idle path 1 sends the oldest segment (DSN 0) again.
        let mut out1 = Vec::new();
        assert!(s.poll_transmit(PathId(1), 20_000, t, &mut out1) > 0);
        assert_eq!(s.stats.redundant_bytes_sent, redundant + seg);
        assert_eq!(s.segs[&0].mask, 0b11);
    }

    /// Upstream's stale subflow: one that received nothing over more than
    /// `stale_loss_cnt` (4) MPTCP-level intervals while another subflow works gets no new
    /// data and its data goes elsewhere; it is active again as soon as it delivers anything.
    /// The last working subflow is never made stale.
    #[test]
    fn upstream_marks_a_silent_subflow_stale_until_it_delivers() {
        let mut s = sender_with(SchedulerKind::Kernel);
        s.write(&vec![7u8; 4_000_000]);
        let mut out = Vec::new();
        assert!(s.poll_transmit(PathId(0), 20_000, Instant::ZERO, &mut out) > 0);
        // The rest of the scheduler's burst on path 0.
        while s.poll_transmit(PathId(0), 20_000, Instant::ZERO, &mut out) > 0 {}
        let seg = s.seg_size;
        let mut now = Instant::ZERO;
        let mut delivered1 = 0;
        for _ in 0..STALE_LOSS_CNT {
            // Path 1 keeps delivering (and always holds a segment); path 0 delivers nothing.
            let mut o = Vec::new();
            s.poll_transmit(PathId(1), 20_000, now, &mut o);
            now = s.poll_timeout().unwrap();
            delivered1 = s.paths[1].sent - seg;
            s.on_data_ack(PathId(1), &ack(0, [0, delivered1]), now).unwrap();
            s.handle_timeout(now);
            assert!(!s.paths[0].pf, "not stale after {} intervals", s.paths[0].stale_count);
        }
        let mut o = Vec::new();
        s.poll_transmit(PathId(1), 20_000, now, &mut o);
        now = s.poll_timeout().unwrap();
        s.handle_timeout(now);
        assert!(s.paths[0].pf, "stale after more than stale_loss_cnt intervals");
        assert_eq!(s.stats.path_stalls, 1);
        assert!(s.reinject_q.contains(&0), "its data goes on another subflow");
        // It delivers: active again at once.
        s.on_data_ack(PathId(1), &ack(0, [seg, delivered1]), now).unwrap();
        assert!(!s.paths[0].pf);

        // Alone (the other subflow silent too), a subflow is never made stale.
        let mut s = sender_with(SchedulerKind::Kernel);
        s.write(&vec![7u8; 400_000]);
        for p in [PathId(0), PathId(1)] {
            let mut o = Vec::new();
            assert!(s.poll_transmit(p, 20_000, Instant::ZERO, &mut o) > 0);
            // The rest of the scheduler's burst on it.
            while s.poll_transmit(p, 20_000, Instant::ZERO, &mut o) > 0 {}
        }
        for _ in 0..20 {
            let t = s.poll_timeout().unwrap();
            s.handle_timeout(t);
        }
        assert!(
            s.paths.iter().all(|p| !p.pf),
            "no subflow is doing better: none is stale"
        );
    }
}
