//! The byte stream's own bookkeeping, the same in every scheme: on the send side the bytes
//! written and not yet acknowledged (`[una, written)`), whether the application finished
//! and whether the end was acknowledged; on the receive side the next in-order offset, the
//! in-order bytes not yet read, the stream end and the receive window they leave.
//!
//! What differs between schemes — how bytes are split into frames, numbered, acknowledged,
//! held out of order, and when a window update is due — stays in the scheme; it moves these
//! counters only through the methods below, so the two schemes cannot drift apart on what
//! "acknowledged", "finished" or "readable" means.

use bytes::Bytes;

use crate::wire::{Piece, RecvBuf, SendBuf};

/// The send side: bytes `[una, written)` held as shared chunks (frames carry slices of
/// them, so bytes the application hands over as `Bytes` reach the socket without a copy).
#[derive(Clone)]
pub(crate) struct SendStream {
    buf: SendBuf,
    una: u64,
    written: u64,
    finished: bool,
    fin_acked: bool,
}

impl SendStream {
    pub(crate) fn new() -> Self {
        SendStream {
            buf: SendBuf::new(),
            una: 0,
            written: 0,
            finished: false,
            fin_acked: false,
        }
    }

    /// Offset of the oldest unacknowledged byte.
    #[inline]
    pub(crate) fn una(&self) -> u64 {
        self.una
    }

    /// Offset one past the last byte written.
    #[inline]
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Bytes written and not yet acknowledged (the send buffer's fill).
    #[inline]
    pub(crate) fn queued(&self) -> usize {
        self.buf.len()
    }

    /// The application said it writes no more.
    #[inline]
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// Copies the first `room` bytes of `data` at most; returns how many it took.
    pub(crate) fn write(&mut self, data: &[u8], room: usize) -> usize {
        let n = data.len().min(room);
        self.buf.push_slice(&data[..n]);
        self.written += n as u64;
        n
    }

    /// Keeps the first `room` bytes of `data` at most as a slice (no copy unless small);
    /// returns how many it took.
    pub(crate) fn write_bytes(&mut self, data: &Bytes, room: usize) -> usize {
        let n = data.len().min(room);
        self.buf.push(data.slice(..n));
        self.written += n as u64;
        n
    }

    /// No more writes; returns whether this call changed that (the first one does).
    pub(crate) fn finish(&mut self) -> bool {
        !std::mem::replace(&mut self.finished, true)
    }

    /// The next `n` bytes from `una` are acknowledged: they leave the buffer.
    #[inline]
    pub(crate) fn acknowledge(&mut self, n: u64) {
        self.una += n;
        self.buf.advance(n as usize);
    }

    /// The stream end was acknowledged.
    pub(crate) fn fin_acknowledged(&mut self) {
        self.fin_acked = true;
    }

    /// Every byte written, and the end if finished, is acknowledged.
    pub(crate) fn is_all_acked(&self) -> bool {
        self.una == self.written && (!self.finished || self.fin_acked)
    }

    /// Hands `f` the shared slices that hold bytes `[off, off + len)` (stream offsets, at
    /// or above `una`), in order.
    #[inline]
    pub(crate) fn slices(&mut self, off: u64, len: usize, f: impl FnMut(Bytes)) {
        self.buf.slices((off - self.una) as usize, len, f);
    }
}

/// The receive side: the next in-order offset, the in-order bytes not yet read (in a
/// [`RecvBuf`], which also keeps the memory charge of every piece a scheme holds out of
/// order), the stream end once known, and the window: `capacity` minus the unread bytes.
#[derive(Clone)]
pub(crate) struct RecvStream {
    capacity: usize,
    rcv_nxt: u64,
    held: RecvBuf,
    fin_at: Option<u64>,
}

impl RecvStream {
    pub(crate) fn new(capacity: usize, segment_size: usize) -> Self {
        RecvStream {
            capacity,
            rcv_nxt: 0,
            held: RecvBuf::new(capacity, segment_size),
            fin_at: None,
        }
    }

    /// The receive buffer the window is counted from.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Next in-order offset expected.
    #[inline]
    pub(crate) fn rcv_nxt(&self) -> u64 {
        self.rcv_nxt
    }

    /// Where the stream ends, once the peer said.
    #[inline]
    pub(crate) fn fin_at(&self) -> Option<u64> {
        self.fin_at
    }

    pub(crate) fn set_fin_at(&mut self, end: u64) {
        self.fin_at = Some(end);
    }

    /// Every byte up to the stream end arrived in order.
    #[inline]
    pub(crate) fn fin_reached(&self) -> bool {
        self.fin_at == Some(self.rcv_nxt)
    }

    /// The buffer that holds the in-order bytes and charges the out-of-order pieces.
    #[inline]
    pub(crate) fn held(&self) -> &RecvBuf {
        &self.held
    }

    #[inline]
    pub(crate) fn held_mut(&mut self) -> &mut RecvBuf {
        &mut self.held
    }

    /// Receive window: the buffer not taken by unread bytes.
    #[inline]
    pub(crate) fn window(&self) -> usize {
        self.capacity - self.held.ready_len()
    }

    /// Offset one past the last byte the sender may send (never moves backwards).
    #[inline]
    pub(crate) fn right_edge(&self) -> u64 {
        self.rcv_nxt + self.window() as u64
    }

    /// Appends `piece`, which starts at `rcv_nxt`, to the in-order bytes; returns its length.
    #[inline]
    pub(crate) fn deliver(&mut self, piece: Piece) -> u64 {
        let n = piece.data.len() as u64;
        self.held.push_ready(piece);
        self.rcv_nxt += n;
        n
    }

    /// Copies in-order bytes into `buf`; returns how many.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> usize {
        self.held.read(buf)
    }

    /// Takes up to `max` in-order bytes as one slice.
    pub(crate) fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        self.held.read_bytes(max)
    }

    /// In-order bytes ready to read.
    #[inline]
    pub(crate) fn readable(&self) -> usize {
        self.held.ready_len()
    }

    /// The stream ended and every byte was read.
    pub(crate) fn is_finished(&self) -> bool {
        self.fin_reached() && self.held.ready_len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_side_counts_written_acknowledged_and_the_end() {
        let mut s = SendStream::new();
        assert!(s.is_all_acked());
        assert_eq!(s.write(b"hello", 3), 3);
        assert_eq!(s.write_bytes(&Bytes::from_static(b"world"), 10), 5);
        assert_eq!((s.una(), s.written(), s.queued()), (0, 8, 8));
        let mut out = Vec::new();
        s.slices(1, 4, |b| out.extend_from_slice(&b));
        assert_eq!(out, b"elwo");
        s.acknowledge(8);
        assert!(s.is_all_acked());
        assert!(s.finish() && !s.finish(), "only the first finish changes anything");
        assert!(!s.is_all_acked(), "the end is not acknowledged yet");
        s.fin_acknowledged();
        assert!(s.is_all_acked());
    }

    #[test]
    fn receive_side_delivers_reads_and_finishes() {
        let mut r = RecvStream::new(100, 10);
        assert_eq!((r.window(), r.right_edge()), (100, 100));
        let payload = Bytes::from_static(b"0123456789");
        let piece = r.held_mut().keep(&payload, 0..10);
        assert_eq!(r.deliver(piece), 10);
        r.set_fin_at(10);
        assert_eq!((r.rcv_nxt(), r.readable(), r.window(), r.right_edge()), (10, 10, 90, 100));
        assert!(r.fin_reached() && !r.is_finished(), "unread bytes remain");
        let mut buf = [0u8; 4];
        assert_eq!(r.read(&mut buf), 4);
        assert_eq!(r.read_bytes(100).as_deref(), Some(&b"456789"[..]));
        assert!(r.is_finished());
        assert_eq!(r.right_edge(), 110);
    }
}
