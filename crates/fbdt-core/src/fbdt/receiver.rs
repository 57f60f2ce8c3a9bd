//! FBDT receiver: reassembles segments arriving on any path, discards duplicates by
//! sequence number, delivers in order, and acknowledges.
//!
//! Where ACKs go: every ACK carries the whole picture (cumulative point, ranges, each
//! path's counter), so one copy on a path that is moving data tells the sender about every
//! path. A path's own arrivals are acknowledged on that path once `ack_every` frames and
//! `ack_bytes` payload bytes arrived there since its last ACK (or `ack_every` × `ack_bytes`
//! bytes, for frames of many segments), or after `max_ack_delay`;
//! every live path gets one at least every [`ALL_PATHS_ACK_PERIOD`] while data flows, and
//! at once when the stream ends or the receive window reopens — the moments the sender
//! must not learn late over a slow return path. A window that completes is acknowledged
//! at once only when completing it freed data held out of order (the cumulative point
//! jumped past held pieces), and then on one path: the one that brought the most bytes
//! lately, the likeliest to be quick (issue 37). ACK frames then grow with the bytes, not
//! with data frames × paths. With `ack_bytes` = 0 the rule is the one before issue 37:
//! every `ack_every` frames, and every window completion on every live path.
//!
//! Payloads are held as `Bytes` in a [`RecvBuf`]: the slices of the driver's read buffer
//! `Connection` hands over come back out of `read_bytes` as slices, no copy between the
//! socket read and the application, within the memory bound `RecvBuf` documents.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::error::ProtocolError;
use crate::path::PathId;
use crate::scheme::{SchemeReceiver, StreamParams};
use crate::seq::Seq;
use crate::seq::SeqSpace;
use crate::stats::ReceiverStats;
use crate::stream::RecvStream;
use crate::time::{Duration, Instant};
use crate::wire::{
    Ack, Align, Data, Frame, PathRx, Piece, RecvBuf, ShortList, ACK_INLINE_RANGES, MAX_ACK_RANGES, MAX_PATHS, NO_PATH,
};

/// Offsets more than this far below the next expected byte are refused as ambiguous: a
/// copy that old could be a wrapped sequence number. The sender resets a path long before
/// it could hold data that old (see `sender::STALE_COPY_LIMIT`).
const MAX_DUPLICATE_AGE: u64 = 1 << 30;

/// While data flows, every live path carries an ACK at least this often: the sender keeps
/// hearing on a path whose return direction alone still works, and a slow path's own
/// ACKs are not the only news of it. A third of the sender's minimum stall time (30 ms).
pub const ALL_PATHS_ACK_PERIOD: Duration = Duration::from_millis(10);

#[derive(Clone)]
pub struct FbdtReceiver {
    space: SeqSpace,
    /// Next in-order offset, in-order bytes not yet read (and what every held piece keeps
    /// alive), the stream end, the window.
    stream: RecvStream,
    /// Out-of-order pieces keyed by offset; never overlapping, all within the window.
    ooo: BTreeMap<u64, Piece>,
    ooo_bytes: usize,
    /// Tests: `insert` always takes its general path (the reference for its shortcut).
    #[cfg(test)]
    general_insert: bool,
    /// Per path: bytes received over its current connection, and that connection's epoch.
    path_rx: Vec<PathRx>,
    alive: u32,
    /// Per path: data frames and payload bytes that arrived on it since it last carried
    /// an ACK.
    frames_since_ack: [u32; MAX_PATHS],
    bytes_since_ack: [u64; MAX_PATHS],
    /// Per path: payload bytes lately (halved at each all-paths ACK round): which path
    /// carries a window-completion ACK.
    recent_bytes: [u64; MAX_PATHS],
    /// Paths with arrivals not yet acknowledged on them (bitmask by path index) ...
    unacked_arrivals: u32,
    /// ... and since when, per path (valid where `unacked_arrivals` has the bit).
    unacked_since: [Instant; MAX_PATHS],
    /// When every live path last got an ACK.
    last_all_paths_ack: Option<Instant>,
    ack_deadline: Option<Instant>,
    /// Paths on which an ACK is due (bitmask by path index).
    ack_pending: u32,
    advertised: usize,
    window_end: Option<u64>,
    ack_every: u32,
    ack_bytes: u64,
    max_ack_delay: Duration,
    stats: ReceiverStats,
}

impl FbdtReceiver {
    pub fn new(cfg: StreamParams, peer_isn: u32) -> Self {
        FbdtReceiver {
            space: SeqSpace::new(peer_isn),
            stream: RecvStream::new(cfg.recv_buffer, cfg.segment_size),
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            #[cfg(test)]
            general_insert: false,
            path_rx: Vec::new(),
            alive: 0,
            frames_since_ack: [0; MAX_PATHS],
            bytes_since_ack: [0; MAX_PATHS],
            recent_bytes: [0; MAX_PATHS],
            unacked_arrivals: 0,
            unacked_since: [Instant::ZERO; MAX_PATHS],
            last_all_paths_ack: None,
            ack_deadline: None,
            ack_pending: 0,
            advertised: cfg.recv_buffer,
            window_end: None,
            ack_every: cfg.ack_every,
            ack_bytes: cfg.ack_bytes as u64,
            max_ack_delay: cfg.max_ack_delay,
            stats: ReceiverStats::default(),
        }
    }

    /// An ACK on every live path.
    fn ack_all_paths(&mut self, now: Option<Instant>) {
        self.ack_pending = self.alive;
        self.frames_since_ack = [0; MAX_PATHS];
        self.bytes_since_ack = [0; MAX_PATHS];
        self.unacked_arrivals = 0;
        self.ack_deadline = None;
        if now.is_some() {
            self.last_all_paths_ack = now;
            for b in &mut self.recent_bytes {
                *b /= 2;
            }
        }
    }

    /// The live path that brought the most bytes lately (`recent_bytes`), `arrived` on a
    /// tie: the one an urgent ACK takes. A busy path's return direction is the one known
    /// to work now; an idle path's may be blocked.
    fn busiest_path(&self, arrived: PathId) -> PathId {
        let mut best = arrived;
        for i in (0..MAX_PATHS).filter(|&i| self.alive & (1 << i) != 0) {
            if self.recent_bytes[i] > self.recent_bytes[best.index()] {
                best = PathId::slot(i);
            }
        }
        best
    }

    /// An ACK on the paths in `paths` (a bitmask), or on every live path if they have not
    /// all had one for [`ALL_PATHS_ACK_PERIOD`].
    fn ack_arrivals(&mut self, paths: u32, now: Instant) {
        if self
            .last_all_paths_ack
            .is_none_or(|t| now.saturating_since(t) >= ALL_PATHS_ACK_PERIOD)
        {
            self.ack_all_paths(Some(now));
            return;
        }
        self.ack_pending |= paths & self.alive;
        self.unacked_arrivals &= !paths;
        for i in (0..MAX_PATHS).filter(|i| paths & (1 << i) != 0) {
            self.frames_since_ack[i] = 0;
            self.bytes_since_ack[i] = 0;
        }
        self.rearm_ack_deadline();
    }

    /// The ACK timer: `max_ack_delay` after the oldest arrival not yet acknowledged on its
    /// path. (It was armed by the first such arrival and kept while any path had one, so
    /// it fired every `max_ack_delay` under steady traffic, though every arrival was
    /// acknowledged in time.)
    fn rearm_ack_deadline(&mut self) {
        let mut first: Option<Instant> = None;
        for i in (0..MAX_PATHS).filter(|i| self.unacked_arrivals & (1 << i) != 0) {
            let t = self.unacked_since[i];
            first = Some(first.map_or(t, |f| f.min(t)));
        }
        self.ack_deadline = first.map(|t| t + self.max_ack_delay);
    }

    /// Stores `payload` (at `start`, from `skip` bytes into it) except the parts already
    /// held; returns the bytes that were duplicates. Refuses a piece that would take the
    /// out-of-order map past [`RecvBuf::max_entries`].
    fn insert(&mut self, path: PathId, start: u64, payload: &Bytes, skip: usize) -> Result<u64, ProtocolError> {
        let end = start + (payload.len() - skip) as u64;
        let mut cur = start;
        let mut dup = 0u64;
        // Mostly nothing held starts inside the new bytes: then the last piece starting
        // below their end is the one below them, and one search does for the two below.
        let last = self
            .ooo
            .range(..end)
            .next_back()
            .map(|(&s, v)| (s, s + v.data.len() as u64));
        let shortcut = last.is_none_or(|(s, _)| s < start);
        #[cfg(test)]
        let shortcut = shortcut && !self.general_insert;
        if shortcut {
            if let Some((_, e)) = last.filter(|&(_, e)| e > cur) {
                dup += e.min(end) - cur;
                cur = e;
            }
            if cur < end {
                let piece = self
                    .stream
                    .held_mut()
                    .keep(payload, skip + (cur - start) as usize..skip + (end - start) as usize);
                self.ooo_bytes += piece.data.len();
                self.store(path, cur, piece)?;
            }
            return Ok(dup);
        }
        if let Some((&s, v)) = self.ooo.range(..cur).next_back() {
            let e = s + v.data.len() as u64;
            if e > cur {
                dup += e.min(end) - cur;
                cur = e;
            }
        }
        while cur < end {
            let next = self.ooo.range(cur..end).next().map(|(&s, v)| (s, v.data.len() as u64));
            let piece_end = next.map_or(end, |(s, _)| s);
            if piece_end > cur {
                let range = skip + (cur - start) as usize..skip + (piece_end - start) as usize;
                let piece = self.stream.held_mut().keep(payload, range);
                self.ooo_bytes += piece.data.len();
                self.store(path, cur, piece)?;
            }
            match next {
                Some((s, len)) => {
                    dup += (s + len).min(end) - s;
                    cur = s + len;
                }
                None => cur = end,
            }
        }
        Ok(dup)
    }

    /// Puts `piece` (at offset `at`, overlapping nothing held) into the map, merged with
    /// its neighbours where [`RecvBuf::merge`] allows.
    fn store(&mut self, path: PathId, at: u64, piece: Piece) -> Result<(), ProtocolError> {
        let end = at + piece.data.len() as u64;
        let mut piece = piece;
        // Only a piece that merges leaves the map (a backward lane's pieces, mostly slices,
        // meet the one held above them at every arrival: no removal and re-insertion).
        if self.ooo.get(&end).is_some_and(|next| RecvBuf::mergeable(&piece, next)) {
            let next = self.ooo.remove(&end).expect("checked");
            let merged = self.stream.held_mut().merge(&mut piece, next);
            debug_assert!(merged.is_ok(), "a mergeable piece did not merge");
        }
        if let Some((&s, prev)) = self.ooo.range_mut(..at).next_back() {
            if s + prev.data.len() as u64 == at {
                match self.stream.held_mut().merge(prev, piece) {
                    Ok(()) => return Ok(()),
                    Err(p) => piece = p,
                }
            }
        }
        if self.ooo.len() >= self.stream.held().max_entries() {
            self.ooo_bytes -= piece.data.len();
            self.stream.held_mut().drop_piece(piece);
            return Err(ProtocolError::Unexpected {
                path,
                what: "DATA scattered into more out-of-order pieces than the receiver holds",
            });
        }
        self.ooo.insert(at, piece);
        Ok(())
    }

    /// Every held piece lies at or above `rcv_nxt` (`insert` stores nothing below it), so
    /// the one that continues the stream, if any, is the first: no search for the
    /// (mostly missing) key.
    fn deliver_in_order(&mut self) {
        while self.ooo.first_key_value().is_some_and(|(&at, _)| at == self.stream.rcv_nxt()) {
            let (_, piece) = self.ooo.pop_first().expect("checked");
            self.ooo_bytes -= piece.data.len();
            self.stats.bytes_delivered += self.stream.deliver(piece);
        }
    }

    fn ranges(&self) -> ShortList<(u64, u64), ACK_INLINE_RANGES> {
        let mut out: ShortList<(u64, u64), ACK_INLINE_RANGES> = ShortList::new();
        for (&s, v) in &self.ooo {
            let e = s + v.data.len() as u64;
            if let Some(last) = out.last_mut().filter(|l| l.1 == s) {
                last.1 = e;
            } else if out.len() == MAX_ACK_RANGES {
                break;
            } else {
                out.push((s, e));
            }
        }
        out
    }

    fn note_path(&mut self, path: PathId) {
        if self.path_rx.len() <= path.index() {
            self.path_rx.resize(path.index() + 1, PathRx::default());
            self.stats.per_path_bytes_received.resize(path.index() + 1, 0);
        }
    }

    /// After the application read: reopen the window promptly once it drained a quarter
    /// of it, so a sender blocked by flow control is not left waiting for the next frame.
    fn after_read(&mut self, n: usize) {
        self.stats.bytes_read += n as u64;
        if self.stream.window() >= self.advertised + self.stream.capacity() / 4 {
            self.ack_all_paths(None);
        }
    }

    fn accept(
        &mut self,
        path: PathId,
        seq: Seq,
        fin: bool,
        payload: &Bytes,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        let data = Data {
            seq,
            fin,
            payload: &payload[..],
        };
        self.note_path(path);
        let len = data.payload.len() as u64;
        self.path_rx[path.index()].bytes += len;
        self.stats.per_path_bytes_received[path.index()] += len;
        let start = self
            .space
            .offset(data.seq, self.stream.rcv_nxt())
            .filter(|&o| o + MAX_DUPLICATE_AGE >= self.stream.rcv_nxt())
            .ok_or(ProtocolError::Unexpected {
                path,
                what: "sequence number outside any valid range",
            })?;
        let end = start + len;
        let limit = self.stream.right_edge();
        if end > limit {
            return Err(ProtocolError::FlowControl { end, limit });
        }
        if let Some(fin) = self.stream.fin_at() {
            if end > fin || (data.fin && end != fin) {
                return Err(if data.fin {
                    ProtocolError::FinMismatch
                } else {
                    ProtocolError::BeyondFin
                });
            }
        } else if data.fin {
            let highest = self
                .ooo
                .iter()
                .next_back()
                .map_or(self.stream.rcv_nxt(), |(&s, v)| s + v.data.len() as u64);
            if end < highest.max(self.stream.rcv_nxt()) {
                return Err(ProtocolError::FinMismatch);
            }
            self.stream.set_fin_at(end);
        }

        let old = self.stream.rcv_nxt().saturating_sub(start).min(len);
        let mut dup = old;
        if end > self.stream.rcv_nxt() {
            let from = start.max(self.stream.rcv_nxt());
            dup += self.insert(path, from, payload, (from - start) as usize)?;
        }
        self.stats.redundant_bytes_received += dup;
        let before = self.stream.rcv_nxt();
        self.deliver_in_order();
        self.stats.max_out_of_order_bytes = self.stats.max_out_of_order_bytes.max(self.ooo_bytes as u64);

        let i = path.index();
        self.frames_since_ack[i] += 1;
        self.bytes_since_ack[i] += len;
        self.recent_bytes[i] += len;
        if self.unacked_arrivals & path.bit() == 0 {
            self.unacked_since[i] = now;
        }
        self.unacked_arrivals |= path.bit();
        let window_done = self.window_end.is_some_and(|w| before < w && self.stream.rcv_nxt() >= w);
        let fin_done = self.stream.fin_reached() && before != self.stream.rcv_nxt();
        let by_frames = self.ack_bytes == 0;
        if fin_done || (len == 0 && data.fin) || (window_done && by_frames) {
            self.ack_all_paths(Some(now));
            return Ok(());
        }
        // `ack_every` frames of at least `ack_bytes`, but never more than `ack_every` ×
        // `ack_bytes` bytes: two frames of 16 segments held a path's ACK for 512 KiB, and
        // loopback goodput fell by half.
        let (frames, bytes) = (self.frames_since_ack[i], self.bytes_since_ack[i]);
        let due = frames >= self.ack_every && bytes >= self.ack_bytes
            || !by_frames && bytes >= u64::from(self.ack_every) * self.ack_bytes;
        if due {
            self.ack_arrivals(path.bit(), now);
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(self.unacked_since[i] + self.max_ack_delay);
        }
        // The window completed and the cumulative point jumped past this frame's bytes:
        // held data was freed, which the sender should hear of without delay.
        if window_done && self.stream.rcv_nxt() > end {
            let to = self.busiest_path(path);
            self.ack_arrivals(to.bit(), now);
        }
        Ok(())
    }

    fn on_data_bytes(
        &mut self,
        path: PathId,
        seq: Seq,
        fin: bool,
        payload: Bytes,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        self.accept(path, seq, fin, &payload, now)
    }

    fn on_align(&mut self, _path: PathId, a: &Align, _now: Instant) -> Result<(), ProtocolError> {
        let edge = self.stream.right_edge();
        let off = |s| {
            self.space
                .offset(s, self.stream.rcv_nxt())
                .ok_or(ProtocolError::BadAlign("offset before the stream start"))
        };
        let (start, end) = (off(a.start)?, off(a.end)?);
        if start > end || end > edge {
            return Err(ProtocolError::BadAlign("window outside the receive window"));
        }
        for l in &a.lanes {
            let (lo, hi) = (off(l.lo)?, off(l.hi)?);
            if lo > hi || lo < start || hi > end {
                return Err(ProtocolError::BadAlign("lane outside its window"));
            }
            for p in [l.bottom, l.top] {
                if p != NO_PATH && p as usize >= MAX_PATHS {
                    return Err(ProtocolError::BadAlign("lane names an impossible path"));
                }
            }
        }
        self.window_end = Some(self.window_end.map_or(end, |w| w.max(end)));
        self.stats.aligns_received += 1;
        Ok(())
    }

    fn poll_ack(&mut self, path: PathId, _now: Instant) -> Option<Ack> {
        if self.ack_pending & path.bit() == 0 {
            return None;
        }
        self.ack_pending &= !path.bit();
        self.advertised = self.stream.window();
        self.stats.acks_sent += 1;
        Some(Ack {
            cum: self.space.seq(self.stream.rcv_nxt()),
            window: self.advertised as u32,
            fin: self.stream.fin_reached(),
            path_rx: self.path_rx.iter().copied().collect(),
            ranges: self
                .ranges()
                .iter()
                .map(|&(s, e)| (self.space.seq(s), self.space.seq(e)))
                .collect(),
        })
    }
}

impl SchemeReceiver for FbdtReceiver {
    fn handle_frame(
        &mut self,
        path: PathId,
        frame: &Frame<'_>,
        encoded: &Bytes,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        match frame {
            // The payload stays a slice of the driver's read buffer.
            Frame::Data(d) => self.on_data_bytes(path, d.seq, d.fin, encoded.slice_ref(d.payload), now),
            Frame::Align(a) => self.on_align(path, a, now),
            _ => Err(ProtocolError::Unexpected {
                path,
                what: "MP_DATA in an FBDT session",
            }),
        }
    }

    fn poll_frame(&mut self, path: PathId, now: Instant) -> Option<Frame<'static>> {
        self.poll_ack(path, now).map(Frame::Ack)
    }

    fn has_frame(&self, path: PathId) -> bool {
        self.ack_pending & path.bit() != 0
    }

    fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = self.stream.read(buf);
        self.after_read(n);
        n
    }

    fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        let out = self.stream.read_bytes(max)?;
        self.after_read(out.len());
        Some(out)
    }

    fn readable(&self) -> usize {
        self.stream.readable()
    }

    fn is_finished(&self) -> bool {
        self.stream.is_finished()
    }

    /// A new connection epoch restarts the path's counter: the sender counts the new
    /// connection's bytes from 0 too, and tells the two apart by the epoch.
    fn set_path_epoch(&mut self, path: PathId, epoch: u32) {
        self.note_path(path);
        let rx = &mut self.path_rx[path.index()];
        if rx.epoch != epoch {
            *rx = PathRx { epoch, bytes: 0 };
        }
    }

    fn path_up(&mut self, path: PathId, _now: Instant) {
        self.note_path(path);
        self.alive |= path.bit();
        self.ack_pending |= path.bit();
    }

    fn path_down(&mut self, path: PathId, _now: Instant) {
        self.alive &= !path.bit();
        self.ack_pending &= !path.bit();
        self.unacked_arrivals &= !path.bit();
        self.frames_since_ack[path.index()] = 0;
        self.bytes_since_ack[path.index()] = 0;
        self.recent_bytes[path.index()] = 0;
        self.rearm_ack_deadline();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.ack_deadline
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.ack_deadline.is_some_and(|d| d <= now) {
            let due = (0..MAX_PATHS)
                .filter(|&i| self.unacked_arrivals & (1 << i) != 0 && self.unacked_since[i] + self.max_ack_delay <= now)
                .fold(0, |m, i| m | (1 << i));
            self.ack_arrivals(due, now);
        }
    }

    fn stats(&self) -> ReceiverStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::recv_pin;

    /// Out-of-order slices are kept as slices while their charges fit the receive buffer,
    /// then copied; everything still comes out in order, and the charges return to zero.
    #[test]
    fn slices_are_kept_within_the_pinned_budget_then_copied() {
        const SEG: usize = 16 * 1024;
        let cfg = StreamParams {
            recv_buffer: 512 * 1024,
            ..crate::Config::default().stream_params()
        };
        let mut r = FbdtReceiver::new(cfg, 0);
        r.path_up(PathId(0), Instant::ZERO);
        let stream: Vec<u8> = (0..cfg.recv_buffer).map(|i| (i % 251) as u8).collect();
        let segs = cfg.recv_buffer / SEG;
        // Every segment but the first, top down: all held out of order.
        for k in (1..segs).rev() {
            let block = Bytes::copy_from_slice(&stream[k * SEG..(k + 1) * SEG]);
            r.on_data_bytes(PathId(0), Seq((k * SEG) as u32), false, block, Instant::ZERO)
                .unwrap();
            assert!(r.stream.held().pinned() <= 2 * cfg.recv_buffer);
            let slices = r.ooo.values().filter(|p| p.shared).count();
            assert!(slices * (recv_pin(SEG) + crate::wire::ENTRY_COST) <= cfg.recv_buffer);
        }
        let copies = r.ooo.values().filter(|p| !p.shared).count();
        assert!(copies > 0, "the budget ran out: later pieces were copied");
        assert!(r.ooo.values().any(|p| p.shared), "earlier pieces kept as slices");
        let first = Bytes::copy_from_slice(&stream[..SEG]);
        r.on_data_bytes(PathId(0), Seq(0), false, first, Instant::ZERO).unwrap();
        let mut out = Vec::new();
        while let Some(c) = r.read_bytes(50_000) {
            out.extend_from_slice(&c);
        }
        assert!(out == stream);
        assert_eq!((r.stream.held().pinned(), r.readable(), r.ooo_bytes), (0, 0, 0));
    }

    /// `insert`'s shortcut (nothing held starts inside the new bytes) against its general
    /// path: fed the same frames — in order, out of order, meeting held pieces, overlapping
    /// and duplicated, tiny and large, with reads in between — both receivers end every
    /// frame in the same state: what they deliver in which pieces, their ranges, memory,
    /// counters and ACK decisions.
    #[test]
    fn the_insert_shortcut_stores_what_the_general_path_stores() {
        let cfg = StreamParams {
            recv_buffer: 256 * 1024,
            ..crate::Config::default().stream_params()
        };
        let stream: Vec<u8> = (0..4 << 20).map(|i| (i % 251) as u8).collect();
        let mut fast = FbdtReceiver::new(cfg, 7);
        let mut slow = FbdtReceiver::new(cfg, 7);
        slow.general_insert = true;
        for r in [&mut fast, &mut slow] {
            r.path_up(PathId(0), Instant::ZERO);
            r.path_up(PathId(1), Instant::ZERO);
        }
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rand = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let (mut fast_reads, mut slow_reads) = (Vec::new(), Vec::new());
        for step in 0..20_000u64 {
            let (rcv_nxt, edge) = (fast.stream.rcv_nxt(), fast.stream.right_edge());
            let held = fast.ooo.first_key_value().map(|(&s, _)| s);
            let len = match rand(4) {
                0 => 1 + rand(8),
                1 => 1 + rand(600),
                _ => 1024 + rand(16 * 1024),
            };
            // Often exactly up to the first piece held (lanes meeting) or just below one.
            let (start, end) = match (rand(10), held) {
                (0..=1, Some(first)) => (rcv_nxt, first),
                (2, Some(first)) => (first.saturating_sub(len).max(rcv_nxt), first),
                (3..=4, _) => (rcv_nxt, rcv_nxt + len),
                (5, _) => (rcv_nxt + 1 + rand(64), rcv_nxt + 1 + rand(64) + rand(8)),
                (6..=7, _) => (rcv_nxt + rand(64 * 1024), 0),
                (8, _) => (rcv_nxt.saturating_sub(rand(4096)), 0),
                _ => (rcv_nxt + rand(8) * 1024, 0),
            };
            let end = if end == 0 { start + len } else { end };
            let end = end.min(edge).min(stream.len() as u64);
            if end <= start {
                continue;
            }
            let payload = Bytes::copy_from_slice(&stream[start as usize..end as usize]);
            let (path, now) = (PathId((step % 2) as u8), Instant::from_micros(step * 10));
            let seq = Seq(7u32.wrapping_add(start as u32));
            let a = fast.on_data_bytes(path, seq, false, payload.clone(), now);
            let b = slow.on_data_bytes(path, seq, false, payload, now);
            assert_eq!(a.is_ok(), b.is_ok());
            if rand(3) == 0 {
                let max = 1 + rand(40_000) as usize;
                fast_reads.extend(std::iter::from_fn(|| fast.read_bytes(max)).map(|c| c.len()));
                slow_reads.extend(std::iter::from_fn(|| slow.read_bytes(max)).map(|c| c.len()));
            }
            assert_eq!(fast_reads, slow_reads, "step {step}");
            let state = |r: &FbdtReceiver| {
                let pieces: Vec<(u64, usize, bool)> = r.ooo.iter().map(|(&s, p)| (s, p.data.len(), p.shared)).collect();
                (
                    r.stream.rcv_nxt(),
                    r.ooo_bytes,
                    pieces,
                    r.stream.held().pinned(),
                    r.readable(),
                    r.stats.clone(),
                )
            };
            assert_eq!(state(&fast), state(&slow), "step {step}");
            assert_eq!(&*fast.ranges(), &*slow.ranges());
            assert_eq!(
                (fast.ack_pending, fast.ack_deadline, fast.unacked_arrivals),
                (slow.ack_pending, slow.ack_deadline, slow.unacked_arrivals)
            );
        }
        assert!(fast.stream.rcv_nxt() > 1 << 20, "the stream moved on: {}", fast.stream.rcv_nxt());
        assert!(fast.stats.redundant_bytes_received > 0, "duplicates were tried");
    }

    /// Finding 4 of issue 14: 1-byte DATA pieces out of order. Back to back they are merged
    /// and cost at most twice their wire bytes; scattered, the session refuses them once
    /// the receiver holds `max_entries` pieces, and the ACK's ranges never walk more.
    #[test]
    fn tiny_out_of_order_pieces_are_merged_or_refused() {
        let cfg = crate::Config::default().stream_params();
        let wire = |n: usize| n * (Data::OVERHEAD + 1);
        let mut r = FbdtReceiver::new(cfg, 0);
        r.path_up(PathId(0), Instant::ZERO);
        let n = 100_000;
        for k in 1..=n {
            let b = Bytes::from(vec![k as u8]);
            r.on_data_bytes(PathId(0), Seq(k as u32), false, b, Instant::ZERO)
                .unwrap();
        }
        assert!(r.stream.held().pinned() <= 2 * wire(n), "{} > 2 × {}", r.stream.held().pinned(), wire(n));
        assert!(r.ooo.len() <= n / 1000);
        r.on_data_bytes(PathId(0), Seq(0), false, Bytes::from_static(b"x"), Instant::ZERO)
            .unwrap();
        assert_eq!(r.readable(), n + 1);

        let mut r = FbdtReceiver::new(cfg, 0);
        r.path_up(PathId(0), Instant::ZERO);
        let max = r.stream.held().max_entries();
        let mut refused = None;
        for k in 0..2 * max {
            let b = Bytes::from_static(b"y");
            if let Err(e) = r.on_data_bytes(PathId(0), Seq((2 * k + 1) as u32), false, b, Instant::ZERO) {
                refused = Some((k, e));
                break;
            }
        }
        let (k, _) = refused.expect("scattered pieces are refused");
        assert_eq!(k, max);
        assert!(r.stream.held().pinned() <= max * (1 + crate::wire::ENTRY_COST));
        assert!(r.ranges().len() <= MAX_ACK_RANGES);
    }

    /// Issue 15's ACK-load bound: with 16 paths, ACK frames grow with the data frames (one
    /// per `ack_every` arrivals on a path) plus one round on every path each
    /// [`ALL_PATHS_ACK_PERIOD`] — not with data frames × paths, as when every ACK went on
    /// every path. Every path still hears at least once a period.
    #[test]
    fn sixteen_paths_ack_load_is_bounded() {
        const SEG: usize = 1448;
        let cfg = crate::Config::default().stream_params();
        let mut r = FbdtReceiver::new(cfg, 0);
        let paths = MAX_PATHS;
        for p in 0..paths {
            r.path_up(PathId::slot(p), Instant::ZERO);
        }
        // One second of data, a frame every 50 µs, round robin over the paths.
        let (frames, gap_us) = (20_000u64, 50u64);
        let mut acks = vec![0u64; paths];
        let poll_all = |r: &mut FbdtReceiver, now: Instant, acks: &mut Vec<u64>| {
            for (p, n) in acks.iter_mut().enumerate() {
                *n += u64::from(r.poll_ack(PathId::slot(p), now).is_some());
            }
        };
        poll_all(&mut r, Instant::ZERO, &mut acks);
        let at_start: u64 = acks.iter().sum();
        let payload = Bytes::from(vec![7u8; SEG]);
        for k in 0..frames {
            let now = Instant::from_micros(k * gap_us);
            if r.poll_timeout().is_some_and(|t| t <= now) {
                r.handle_timeout(now);
            }
            let path = PathId((k % paths as u64) as u8);
            r.on_data_bytes(path, Seq((k as usize * SEG) as u32), false, payload.clone(), now)
                .unwrap();
            while r.read_bytes(usize::MAX).is_some() {}
            poll_all(&mut r, now, &mut acks);
        }
        let total: u64 = acks.iter().sum::<u64>() - at_start;
        let periods = frames * gap_us / ALL_PATHS_ACK_PERIOD.as_micros() + 1;
        let bound = frames / u64::from(cfg.ack_every) + paths as u64 * periods;
        assert!(total <= bound, "{total} ACK frames > {bound}");
        let every_path_every_ack = frames / u64::from(cfg.ack_every) * paths as u64;
        assert!(total * 5 < every_path_every_ack, "{total} vs {every_path_every_ack}");
        for (p, &n) in acks.iter().enumerate() {
            assert!(n > periods - 1, "path {p}: {n} ACKs in {periods} periods");
        }
    }

    /// Issue 37's ACK rule: two paths bring 16 KiB frames back to back (4 Gbit/s in all)
    /// for 50 MB; a path is acknowledged once `ack_bytes` arrived on it, so ACK frames per
    /// MB stay within 1 MB / `ack_bytes` plus one round on both paths each
    /// [`ALL_PATHS_ACK_PERIOD`] (the timer never fires: every path reaches the bytes within
    /// `max_ack_delay`), where the per-frame rule sent one per two frames.
    #[test]
    fn acks_per_megabyte_follow_the_bytes() {
        const SEG: usize = 16 * 1024;
        let run = |ack_bytes: usize| {
            let cfg = StreamParams {
                ack_bytes,
                ..crate::Config::default().stream_params()
            };
            let mut r = FbdtReceiver::new(cfg, 0);
            for p in 0..2 {
                r.path_up(PathId(p), Instant::ZERO);
                r.poll_ack(PathId(p), Instant::ZERO);
            }
            let (frames, gap_us) = (3200u64, 32u64);
            let payload = Bytes::from(vec![3u8; SEG]);
            let mut acks = 0u64;
            for k in 0..frames {
                let now = Instant::from_micros(k * gap_us);
                if r.poll_timeout().is_some_and(|t| t <= now) {
                    r.handle_timeout(now);
                }
                let path = PathId((k % 2) as u8);
                r.on_data_bytes(path, Seq((k as usize * SEG) as u32), false, payload.clone(), now)
                    .unwrap();
                while r.read_bytes(usize::MAX).is_some() {}
                for p in 0..2 {
                    acks += u64::from(r.poll_ack(PathId(p), now).is_some());
                }
            }
            let mb = (frames as usize * SEG) as f64 / 1e6;
            let periods = (frames * gap_us / ALL_PATHS_ACK_PERIOD.as_micros() + 1) as f64;
            (acks as f64 / mb, periods * 2.0 / mb)
        };
        let (by_frames, _) = run(0);
        assert!(by_frames >= 1e6 / (2 * SEG) as f64, "{by_frames:.1} ACKs per MB");
        for ack_bytes in [crate::config::DEFAULT_ACK_BYTES, 64 << 10, 256 << 10] {
            let (by_bytes, rounds) = run(ack_bytes);
            let bound = 1e6 / ack_bytes as f64 + rounds;
            assert!(by_bytes <= bound, "{ack_bytes}: {by_bytes:.1} ACKs per MB > {bound:.1}");
            assert!(by_bytes <= by_frames, "{ack_bytes}: {by_bytes:.1} vs {by_frames:.1}");
        }
    }

    /// A window that completes by filling a hole under held data is acknowledged at once,
    /// on the path that brought the most bytes lately; one that completes in order waits
    /// for the byte rule or the timer.
    #[test]
    fn a_window_completion_that_frees_held_data_is_acked_at_once() {
        const SEG: usize = 16 * 1024;
        let cfg = StreamParams {
            ack_bytes: 64 << 10,
            ..crate::Config::default().stream_params()
        };
        let mut r = FbdtReceiver::new(cfg, 0);
        let t0 = Instant::from_micros(1000);
        for p in 0..2 {
            r.path_up(PathId(p), t0);
            r.poll_ack(PathId(p), t0);
        }
        let seg = |k: usize| Bytes::from(vec![k as u8; SEG]);
        let align = |end: usize| Align {
            window_id: 0,
            start: Seq(0),
            end: Seq((end * SEG) as u32),
            lanes: Vec::new(),
        };
        r.on_align(PathId(0), &align(4), t0).unwrap();
        // Both paths had their periodic ACK just now (the first ACK otherwise goes on all).
        r.last_all_paths_ack = Some(t0);
        // Segments 3, 2 and 1 of the window arrive on path 0 (48 KiB: no ACK yet) ...
        for k in [3, 2, 1] {
            r.on_data_bytes(PathId(0), Seq((k * SEG) as u32), false, seg(k), t0)
                .unwrap();
        }
        assert!(!r.has_frame(PathId(0)) && !r.has_frame(PathId(1)));
        // ... segment 0 on path 1 completes it and frees them: ACK on path 0 at once.
        r.on_data_bytes(PathId(1), Seq(0), false, seg(0), t0).unwrap();
        assert_eq!(r.stream.rcv_nxt(), 4 * SEG as u64);
        assert!(r.poll_ack(PathId(0), t0).is_some(), "the busier path carries it");
        assert!(r.poll_ack(PathId(1), t0).is_none(), "one path, not all");
        // The next window completes in order: nothing freed, no ACK before the timer.
        r.on_align(PathId(0), &align(5), t0).unwrap();
        r.on_data_bytes(PathId(1), Seq((4 * SEG) as u32), false, seg(4), t0)
            .unwrap();
        assert!(!r.has_frame(PathId(0)) && !r.has_frame(PathId(1)));
        let due = r.poll_timeout().expect("the ACK timer runs");
        assert_eq!(due, t0 + cfg.max_ack_delay);
        r.handle_timeout(due);
        assert!(r.poll_ack(PathId(1), due).is_some());
    }
}
