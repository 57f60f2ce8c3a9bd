//! The meta-layer receiver: ONE reorder buffer for all paths, in-order delivery, and ONE
//! receive window: `window = recv_buffer − unread bytes`, counted from data_ack, so the
//! right edge `data_ack + window` only moves right and out-of-order bytes held for a slow
//! path use up the same window the fast path needs (head-of-line blocking).
//!
//! Payloads stay slices of the driver's read buffers up to `read_bytes`, within the memory
//! bound [`RecvBuf`](crate::wire::RecvBuf) documents.

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};

use crate::error::ProtocolError;
use crate::path::PathId;
use crate::scheme::{SchemeReceiver, StreamParams};
use crate::stats::ReceiverStats;
use crate::stream::RecvStream;
use crate::time::Instant;
use crate::wire::{DataAck, Frame, MpData, PathRx, Piece};

#[derive(Clone)]
pub struct MetaReceiver {
    /// Next in-order offset, in-order bytes not yet read (and what every held piece keeps
    /// alive), the stream end, the window.
    stream: RecvStream,
    ofo: BTreeMap<u64, Piece>,
    ofo_bytes: u64,
    /// Per path: bytes received over its current connection, and that connection's epoch.
    path_rx: Vec<PathRx>,
    up: u32,
    /// Paths owing a DATA_ACK (the path data arrived on, as a subflow ACKs its own data).
    ack_due: u32,
    /// Right edge last advertised.
    advertised_edge: u64,
    stats: ReceiverStats,
}

impl MetaReceiver {
    pub fn new(params: StreamParams) -> Self {
        MetaReceiver {
            stream: RecvStream::new(params.recv_buffer, params.segment_size),
            ofo: BTreeMap::new(),
            ofo_bytes: 0,
            path_rx: Vec::new(),
            up: 0,
            ack_due: 0,
            advertised_edge: params.recv_buffer as u64,
            stats: ReceiverStats::default(),
        }
    }

    fn edge(&self) -> u64 {
        self.stream.right_edge()
    }

    /// Appends `piece`, which starts at `rcv_nxt`, to the in-order bytes.
    fn deliver(&mut self, piece: Piece) {
        self.stats.bytes_delivered += self.stream.deliver(piece);
    }

    /// An MP_DATA frame `d` whose payload is `payload` (a slice of the encoded frame).
    fn on_mp_data(&mut self, path: PathId, d: &MpData<'_>, payload: &Bytes) -> Result<(), ProtocolError> {
        let len = d.payload.len() as u64;
        let end = d.dsn + len;
        let i = path.index();
        if self.path_rx.len() <= i {
            self.path_rx.resize(i + 1, PathRx::default());
            self.stats.per_path_bytes_received.resize(i + 1, 0);
        }
        self.path_rx[i].bytes += len;
        self.stats.per_path_bytes_received[i] += len;
        self.ack_due |= path.bit();
        if d.fin {
            match self.stream.fin_at() {
                Some(f) if f != end => {
                    return Err(ProtocolError::Unexpected {
                        path,
                        what: "DATA_FIN at two different offsets",
                    })
                }
                _ => self.stream.set_fin_at(end),
            }
        }
        if self.stream.fin_at().is_some_and(|f| end > f) {
            return Err(ProtocolError::Unexpected {
                path,
                what: "MP_DATA past the DATA_FIN",
            });
        }
        if end > self.advertised_edge.max(self.edge()) {
            return Err(ProtocolError::Unexpected {
                path,
                what: "MP_DATA beyond the shared receive window",
            });
        }
        if end <= self.stream.rcv_nxt() {
            self.stats.redundant_bytes_received += len;
            return Ok(());
        }
        if d.dsn <= self.stream.rcv_nxt() {
            let skip = (self.stream.rcv_nxt() - d.dsn) as usize;
            let piece = self.stream.held_mut().keep(payload, skip..payload.len());
            self.deliver(piece);
            while let Some(entry) = self.ofo.first_entry() {
                if *entry.key() > self.stream.rcv_nxt() {
                    break;
                }
                let (k, mut piece) = entry.remove_entry();
                let len = piece.data.len() as u64;
                self.ofo_bytes -= len;
                if k + len > self.stream.rcv_nxt() {
                    piece.data.advance((self.stream.rcv_nxt() - k) as usize);
                    self.deliver(piece);
                } else {
                    self.stats.redundant_bytes_received += len;
                    self.stream.held_mut().drop_piece(piece);
                }
            }
        } else if self.covered(d.dsn, end) {
            self.stats.redundant_bytes_received += len;
        } else {
            let piece = self.stream.held_mut().keep(payload, 0..payload.len());
            self.store(path, d.dsn, piece)?;
        }
        self.stats.max_out_of_order_bytes = self.stats.max_out_of_order_bytes.max(self.ofo_bytes);
        let held = self.ofo_bytes + self.stream.readable() as u64;
        self.stats.max_buffered_bytes = self.stats.max_buffered_bytes.max(held);
        Ok(())
    }

    /// `dsn..end` is already held out of order (in one piece: overlaps are rare).
    fn covered(&self, dsn: u64, end: u64) -> bool {
        self.ofo
            .range(..=dsn)
            .next_back()
            .is_some_and(|(&s, p)| s + p.data.len() as u64 >= end)
    }

    /// Holds `piece` (at `dsn`) out of order, appended to the piece it continues when
    /// [`RecvBuf::merge`](crate::wire::RecvBuf::merge) allows; refuses it past
    /// [`RecvBuf::max_entries`](crate::wire::RecvBuf::max_entries) pieces.
    fn store(&mut self, path: PathId, dsn: u64, piece: Piece) -> Result<(), ProtocolError> {
        let len = piece.data.len() as u64;
        let mut piece = piece;
        if let Some((&s, prev)) = self.ofo.range_mut(..dsn).next_back() {
            if s + prev.data.len() as u64 == dsn {
                match self.stream.held_mut().merge(prev, piece) {
                    Ok(()) => {
                        self.ofo_bytes += len;
                        return Ok(());
                    }
                    Err(p) => piece = p,
                }
            }
        }
        if self.ofo.len() >= self.stream.held().max_entries() {
            self.stream.held_mut().drop_piece(piece);
            return Err(ProtocolError::Unexpected {
                path,
                what: "MP_DATA scattered into more out-of-order pieces than the receiver holds",
            });
        }
        if let Some(old) = self.ofo.insert(dsn, piece) {
            // A shorter piece at the same DSN: the new one covers it.
            self.ofo_bytes -= old.data.len() as u64;
            self.stream.held_mut().drop_piece(old);
        }
        self.ofo_bytes += len;
        Ok(())
    }

    /// The application took `n` bytes: a window update once a quarter of the buffer opened
    /// since the last advertisement.
    fn after_read(&mut self, n: usize) {
        self.stats.bytes_read += n as u64;
        if n > 0 && self.edge() >= self.advertised_edge + self.stream.capacity() as u64 / 4 {
            self.ack_due |= self.up;
        }
    }

    /// The DATA_ACK to send on `path` now, if one is due there.
    fn poll_data_ack(&mut self, path: PathId) -> Option<DataAck> {
        if self.ack_due & path.bit() == 0 {
            return None;
        }
        self.ack_due &= !path.bit();
        self.stats.acks_sent += 1;
        let window = self.edge() - self.stream.rcv_nxt();
        self.advertised_edge = self.advertised_edge.max(self.edge());
        Some(DataAck {
            data_ack: self.stream.rcv_nxt(),
            window: window.min(u64::from(u32::MAX)) as u32,
            fin: self.stream.fin_reached(),
            path_rx: self.path_rx.clone(),
        })
    }
}

impl SchemeReceiver for MetaReceiver {
    fn handle_frame(
        &mut self,
        path: PathId,
        frame: &Frame<'_>,
        encoded: &Bytes,
        _now: Instant,
    ) -> Result<(), ProtocolError> {
        match frame {
            Frame::MpData(d) => self.on_mp_data(path, d, &encoded.slice_ref(d.payload)),
            Frame::Align(_) => Err(ProtocolError::Unexpected {
                path,
                what: "ALIGN in a meta-layer session",
            }),
            _ => Err(ProtocolError::Unexpected {
                path,
                what: "FBDT DATA in a meta-layer session",
            }),
        }
    }

    fn poll_frame(&mut self, path: PathId, _now: Instant) -> Option<Frame<'static>> {
        self.poll_data_ack(path).map(Frame::DataAck)
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

    fn path_up(&mut self, path: PathId, _now: Instant) {
        let i = path.index();
        if self.path_rx.len() <= i {
            self.path_rx.resize(i + 1, PathRx::default());
            self.stats.per_path_bytes_received.resize(i + 1, 0);
        }
        // A new connection: its counter restarts (the sender resets its side too, and
        // tells the two apart by the epoch `set_path_epoch` gave).
        self.path_rx[i].bytes = 0;
        self.up |= path.bit();
    }

    fn path_down(&mut self, path: PathId, _now: Instant) {
        self.up &= !path.bit();
        self.ack_due &= !path.bit();
    }

    fn set_path_epoch(&mut self, path: PathId, epoch: u32) {
        let i = path.index();
        if self.path_rx.len() <= i {
            self.path_rx.resize(i + 1, PathRx::default());
            self.stats.per_path_bytes_received.resize(i + 1, 0);
        }
        self.path_rx[i] = PathRx { epoch, bytes: 0 };
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn stats(&self) -> ReceiverStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn frame(dsn: u64, payload: &[u8]) -> Bytes {
        let mut v = Vec::new();
        Frame::MpData(MpData {
            dsn,
            fin: false,
            payload,
        })
        .emit(&mut v);
        Bytes::from(v)
    }

    /// Payloads arrive out of order and leave in order as slices of the frames they came
    /// in (no copy); a duplicate is counted and dropped with its charge.
    #[test]
    fn payloads_leave_as_slices_of_the_received_frames() {
        let mut r = MetaReceiver::new(Config::meta(crate::SchedulerKind::MinRtt).stream_params());
        r.path_up(PathId(0), Instant::ZERO);
        let data: Vec<u8> = (0..3 * 16_384).map(|i| (i % 251) as u8).collect();
        let seg = |k: usize| &data[k * 16_384..(k + 1) * 16_384];
        let frames: Vec<Bytes> = (0..3).map(|k| frame((k * 16_384) as u64, seg(k))).collect();
        for k in [2, 1, 1, 0] {
            let f = &frames[k];
            let (parsed, _) = Frame::parse(f).unwrap();
            r.handle_frame(PathId(0), &parsed, f, Instant::ZERO).unwrap();
        }
        assert_eq!(r.stats().redundant_bytes_received, 16_384);
        let mut out = Vec::new();
        while let Some(c) = r.read_bytes(1 << 20) {
            assert!(frames.iter().any(|f| f.as_ptr_range().contains(&c.as_ptr())));
            out.extend_from_slice(&c);
        }
        assert!(out == data);
        assert_eq!(r.stream.held().pinned(), 0);
    }

    /// Finding 4 of issue 14 for the meta layer: back-to-back 1-byte MP_DATA pieces are
    /// merged (≤ 2× their wire bytes); scattered ones are refused at `max_entries`.
    #[test]
    fn tiny_out_of_order_pieces_are_merged_or_refused() {
        let params = Config::meta(crate::SchedulerKind::MinRtt).stream_params();
        let feed = |r: &mut MetaReceiver, dsn: u64| {
            let f = frame(dsn, b"z");
            let (parsed, _) = Frame::parse(&f).unwrap();
            r.handle_frame(PathId(0), &parsed, &f, Instant::ZERO)
        };
        let mut r = MetaReceiver::new(params);
        r.path_up(PathId(0), Instant::ZERO);
        let n = 100_000u64;
        for dsn in 1..=n {
            feed(&mut r, dsn).unwrap();
            feed(&mut r, dsn).unwrap();
        }
        let wire = frame(1, b"z").len() * n as usize;
        assert!(r.stream.held().pinned() <= 2 * wire, "{} > 2 × {wire}", r.stream.held().pinned());
        assert_eq!(r.stats().redundant_bytes_received, n);
        feed(&mut r, 0).unwrap();
        assert_eq!(r.readable(), n as usize + 1);

        let mut r = MetaReceiver::new(params);
        r.path_up(PathId(0), Instant::ZERO);
        let max = r.stream.held().max_entries() as u64;
        let first_err = (0..2 * max).find(|k| feed(&mut r, 2 * k + 1).is_err());
        assert_eq!(first_err, Some(max));
        assert!(r.stream.held().pinned() <= max as usize * (1 + crate::wire::ENTRY_COST));
    }
}
