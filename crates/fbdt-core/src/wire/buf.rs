//! Buffers that let a driver move frames without copying payloads: [`SendBuf`] holds a
//! sender's unacknowledged bytes as shared chunks; [`FrameBuf`] collects outgoing frames
//! as small inline bytes (headers, control frames) plus shared slices of the send buffer,
//! for one vectored write ([`FrameOut`] lets one emitter fill it or a plain `Vec<u8>`);
//! [`prepare_recv_buf`] sizes the read buffer out of which `Connection::handle_recv_buf`
//! cuts DATA payloads as shared slices.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};

/// Largest allocation `prepare_recv_buf` makes for reads (beyond one incomplete frame). A
/// received payload kept as a slice holds its whole allocation alive, so the receiver
/// charges every kept slice `max(len + RECV_MIN_READ, RECV_BLOCK)` against its buffer —
/// see `FbdtReceiver`. 64 KiB: four default segments, one typical loopback read.
pub const RECV_BLOCK: usize = 64 * 1024;
/// Spare room below which `prepare_recv_buf` starts a new allocation: a read smaller than
/// this costs a syscall for little data.
pub const RECV_MIN_READ: usize = 16 * 1024;

/// Readies `buf` for the next socket read into its spare capacity: if less than
/// [`RECV_MIN_READ`] is free, moves the bytes it holds (at most one incomplete frame, since
/// `handle_recv_buf` consumes every complete one) into a new allocation of
/// `max(RECV_BLOCK, whole frame + RECV_MIN_READ)` bytes, so a frame longer than a block is
/// moved once, not once per read (frames of several segments reach 256 KiB). Slices
/// already cut from the old allocation keep it alive until they are dropped.
pub fn prepare_recv_buf(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() >= RECV_MIN_READ {
        return;
    }
    // The length is the peer's word: never more than the longest frame there is.
    let frame = (buf.len() + frame_bytes_missing(buf)).min(super::MAX_FRAME_LEN);
    let mut fresh = BytesMut::with_capacity(RECV_BLOCK.max(frame + RECV_MIN_READ));
    fresh.extend_from_slice(buf);
    *buf = fresh;
}

/// Bytes still to come before the frame that starts `buf` is whole: 0 when `buf` is empty
/// (no frame begun); while the header is incomplete, what completes the header (the
/// frame's length is not known yet). A driver that only feeds whole frames to the core can
/// ask its socket to wake it after this many bytes (a receive low-water mark) instead of
/// at every packet. The header's length is not checked here: a bad one fails the parse.
pub fn frame_bytes_missing(buf: &[u8]) -> usize {
    let Some(len) = buf.get(4..super::HEADER_LEN) else {
        return if buf.is_empty() {
            0
        } else {
            super::HEADER_LEN - buf.len()
        };
    };
    let body = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    (super::HEADER_LEN + body).saturating_sub(buf.len())
}

/// What a received payload kept as a slice of a read buffer may hold alive: the whole
/// allocation `prepare_recv_buf` made for it (a frame longer than a block got one sized
/// for it plus one read).
pub fn recv_pin(len: usize) -> usize {
    RECV_BLOCK.max(len + super::HEADER_LEN + super::layout::MP_DATA_FIXED + RECV_MIN_READ)
}

/// Where a sender puts a frame: a `Vec<u8>` (everything copied) or a [`FrameBuf`]
/// (payload slices shared).
pub trait FrameOut {
    /// Appends the bytes `emit` writes (headers, control frames).
    fn put_inline(&mut self, emit: impl FnOnce(&mut Vec<u8>));
    /// Appends a payload slice.
    fn put_shared(&mut self, b: Bytes);
}

impl FrameOut for Vec<u8> {
    fn put_inline(&mut self, emit: impl FnOnce(&mut Vec<u8>)) {
        emit(self);
    }
    fn put_shared(&mut self, b: Bytes) {
        self.extend_from_slice(&b);
    }
}

impl FrameOut for FrameBuf {
    fn put_inline(&mut self, emit: impl FnOnce(&mut Vec<u8>)) {
        self.push_with(emit);
    }
    fn put_shared(&mut self, b: Bytes) {
        self.push_shared(b);
    }
}

/// Writes shorter than this are copied into a shared tail chunk rather than kept as their
/// own chunk: a stream of tiny writes must not become a queue of tiny chunks.
const SMALL_WRITE: usize = 4 * 1024;
/// Allocation of the tail that gathers small writes.
const TAIL_BLOCK: usize = 64 * 1024;

/// A send buffer: the bytes `[front, front + len)` of a stream as shared chunks. Writes of
/// `Bytes` are kept without copying (small ones are gathered into one chunk), frames take
/// slices, acknowledged bytes leave from the front.
#[derive(Clone, Debug, Default)]
pub struct SendBuf {
    /// (stream offset of the chunk's first byte, chunk), contiguous.
    chunks: VecDeque<(u64, Bytes)>,
    /// Small writes after the last chunk, not yet frozen into one.
    tail: BytesMut,
    /// Stream offset of the first byte held.
    front: u64,
    len: usize,
}

impl SendBuf {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn end_of_chunks(&self) -> u64 {
        self.chunks.back().map_or(self.front, |(s, b)| s + b.len() as u64)
    }

    fn freeze_tail(&mut self) {
        if !self.tail.is_empty() {
            let at = self.end_of_chunks();
            self.chunks.push_back((at, self.tail.split().freeze()));
        }
    }

    /// Appends `b` (kept as a shared chunk unless it is small).
    pub fn push(&mut self, b: Bytes) {
        if b.len() < SMALL_WRITE {
            self.push_slice(&b);
            return;
        }
        self.freeze_tail();
        let at = self.end_of_chunks();
        self.len += b.len();
        self.chunks.push_back((at, b));
    }

    /// Appends a copy of `s`.
    pub fn push_slice(&mut self, s: &[u8]) {
        if s.len() >= SMALL_WRITE {
            self.push(Bytes::copy_from_slice(s));
            return;
        }
        if self.tail.capacity() - self.tail.len() < s.len() {
            self.freeze_tail();
            self.tail = BytesMut::with_capacity(TAIL_BLOCK);
        }
        self.tail.extend_from_slice(s);
        self.len += s.len();
    }

    /// Drops the first `n` bytes (acknowledged).
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        let tail_start = self.end_of_chunks();
        self.len -= n;
        let front = self.front + n as u64;
        while let Some((s, b)) = self.chunks.front_mut() {
            if *s + b.len() as u64 <= front {
                self.chunks.pop_front();
            } else {
                if *s < front {
                    b.advance((front - *s) as usize);
                    *s = front;
                }
                break;
            }
        }
        if front > tail_start {
            self.tail.advance((front - tail_start) as usize);
        }
        self.front = front;
    }

    /// Hands `f` the slices that cover bytes `[start, start + len)` counted from the front
    /// (shared, no copy), in order. Panics if the range is not held (a sender bug).
    pub fn slices(&mut self, start: usize, len: usize, mut f: impl FnMut(Bytes)) {
        assert!(start + len <= self.len, "slice beyond the send buffer");
        if len == 0 {
            return;
        }
        let from = self.front + start as u64;
        let to = from + len as u64;
        if to > self.end_of_chunks() {
            self.freeze_tail();
        }
        let first = self.chunks.partition_point(|(s, b)| s + b.len() as u64 <= from);
        for (s, b) in self.chunks.range(first..) {
            if *s >= to {
                break;
            }
            let lo = from.saturating_sub(*s) as usize;
            let hi = ((to - s) as usize).min(b.len());
            f(b.slice(lo..hi));
        }
    }
}

#[derive(Clone, Debug)]
enum Part {
    Inline(Range<usize>),
    Shared(Bytes),
}

/// Outgoing frames of one path, in order, as chunks for one vectored write: inline bytes
/// (headers, control frames, payloads a sender copied) and shared payload slices.
#[derive(Clone, Debug, Default)]
pub struct FrameBuf {
    inline: Vec<u8>,
    parts: Vec<Part>,
    len: usize,
}

impl FrameBuf {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every chunk (keeps the inline allocation for the next batch).
    pub fn clear(&mut self) {
        self.inline.clear();
        self.parts.clear();
        self.len = 0;
    }

    /// Appends inline bytes written by `emit` (a closure that appends to a `Vec<u8>`, as
    /// every `emit` of the wire module does); returns how many it wrote.
    pub fn push_with(&mut self, emit: impl FnOnce(&mut Vec<u8>)) -> usize {
        let start = self.inline.len();
        emit(&mut self.inline);
        let end = self.inline.len();
        if end > start {
            // Adjacent inline bytes form one chunk.
            match self.parts.last_mut() {
                Some(Part::Inline(r)) if r.end == start => r.end = end,
                _ => self.parts.push(Part::Inline(start..end)),
            }
        }
        self.len += end - start;
        end - start
    }

    /// Appends a shared slice (no copy).
    pub fn push_shared(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.len += b.len();
        self.parts.push(Part::Shared(b));
    }

    /// The chunks, in order, starting `from` bytes in (after a partial write).
    pub fn chunks_from(&self, from: usize) -> impl Iterator<Item = &[u8]> {
        let mut skip = from;
        self.parts.iter().filter_map(move |p| {
            let c = self.part_of(p);
            if skip >= c.len() {
                skip -= c.len();
                None
            } else {
                let out = &c[skip..];
                skip = 0;
                Some(out)
            }
        })
    }

    /// Copies the bytes from `len() - n` on (the last `n` bytes, e.g. the frame just
    /// appended) into `out`, as many as fit; returns how many. Walks the chunks from the
    /// end, so the cost does not grow with the batch.
    pub fn copy_last(&self, n: usize, out: &mut [u8]) -> usize {
        let n = n.min(self.len);
        // Find the chunk where the last `n` bytes start.
        let mut back = 0usize;
        let mut first = self.parts.len();
        while back < n && first > 0 {
            first -= 1;
            back += self.part(first).len();
        }
        let mut skip = back - n;
        let mut copied = 0;
        for c in self.parts[first..].iter().map(|p| self.part_of(p)) {
            if copied == out.len() {
                break;
            }
            let c = &c[skip.min(c.len())..];
            skip = 0;
            let k = c.len().min(out.len() - copied);
            out[copied..copied + k].copy_from_slice(&c[..k]);
            copied += k;
        }
        copied
    }

    fn part(&self, i: usize) -> &[u8] {
        self.part_of(&self.parts[i])
    }

    fn part_of<'a>(&'a self, p: &'a Part) -> &'a [u8] {
        match p {
            Part::Inline(r) => &self.inline[r.clone()],
            Part::Shared(b) => b,
        }
    }

    /// All bytes in one vector (tests, and drivers without vectored writes).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for c in self.chunks_from(0) {
            v.extend_from_slice(c);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_keep_order_and_skip_written_bytes() {
        let mut f = FrameBuf::new();
        assert_eq!(f.push_with(|v| v.extend_from_slice(b"ab")), 2);
        f.push_with(|v| v.extend_from_slice(b"c"));
        f.push_shared(Bytes::from_static(b"defg"));
        f.push_shared(Bytes::new());
        f.push_with(|v| v.extend_from_slice(b"hi"));
        assert_eq!(f.len(), 9);
        assert_eq!(f.to_vec(), b"abcdefghi");
        // "ab" + "c" merged into one chunk.
        assert_eq!(f.chunks_from(0).count(), 3);
        let rest: Vec<&[u8]> = f.chunks_from(4).collect();
        assert_eq!(rest, vec![&b"efg"[..], &b"hi"[..]]);
        assert_eq!(f.chunks_from(9).count(), 0);
        let mut tail = [0u8; 4];
        assert_eq!(f.copy_last(5, &mut tail), 4);
        assert_eq!(&tail, b"efgh");
        assert_eq!(f.copy_last(2, &mut tail), 2);
        assert_eq!(&tail[..2], b"hi");
        assert_eq!(f.copy_last(99, &mut tail), 4);
        assert_eq!(&tail, b"abcd");
        f.clear();
        assert!(f.is_empty());
        assert_eq!(f.chunks_from(0).count(), 0);
    }

    /// The send buffer against a plain byte vector, through writes of every size,
    /// acknowledgements and slices that straddle chunks and the tail.
    #[test]
    fn send_buf_matches_a_plain_vector() {
        let mut model: Vec<u8> = Vec::new();
        let mut front = 0usize;
        let mut b = SendBuf::new();
        let mut next = 0u8;
        let mut gen = |n: usize| {
            (0..n)
                .map(|_| {
                    next = next.wrapping_add(1);
                    next
                })
                .collect::<Vec<u8>>()
        };
        let sizes = [1usize, 10, 5000, 3, 70_000, 4095, 4096, 2, 100_000, 7];
        for (k, &n) in sizes.iter().cycle().take(60).enumerate() {
            let d = gen(n);
            model.extend_from_slice(&d);
            if k % 2 == 0 {
                b.push(Bytes::from(d));
            } else {
                b.push_slice(&d);
            }
            assert_eq!(b.len(), model.len() - front);
            for (start, len) in [
                (0, b.len()),
                (b.len() / 3, b.len() / 2),
                (b.len().saturating_sub(5), 5.min(b.len())),
            ] {
                let mut got = Vec::new();
                b.slices(start, len, |s| got.extend_from_slice(&s));
                assert_eq!(got, &model[front + start..front + start + len]);
            }
            let ack = if k % 3 == 0 { b.len() } else { b.len() / 2 };
            b.advance(ack);
            front += ack;
            assert_eq!(b.len(), model.len() - front);
        }
    }

    #[test]
    fn recv_buf_keeps_an_incomplete_frame_and_bounds_allocations() {
        use crate::seq::Seq;
        use crate::wire::{Data, Frame, MAX_FRAME_LEN};
        let mut b = BytesMut::new();
        prepare_recv_buf(&mut b);
        assert!(b.capacity() >= RECV_BLOCK && b.is_empty());
        b.extend_from_slice(&[7u8; 100]);
        let cap = b.capacity();
        prepare_recv_buf(&mut b);
        assert_eq!(b.capacity(), cap, "enough room: same allocation");
        // The block ends inside a frame of 200 KB: the next block holds all of it at once.
        let mut frame = Vec::new();
        Frame::Data(Data {
            seq: Seq(1),
            fin: false,
            payload: &[1u8; 200_000],
        })
        .emit(&mut frame);
        let held = b.capacity() - b.len() - 10;
        b.extend_from_slice(&frame[..held]);
        let _kept = b.split_to(100).freeze();
        prepare_recv_buf(&mut b);
        assert_eq!(&b[..], &frame[..held], "the incomplete frame moved whole");
        assert!(
            b.capacity() >= frame.len() + RECV_MIN_READ,
            "room for the rest of the frame"
        );
        assert!(b.capacity() <= frame.len() + RECV_MIN_READ + 64);
        // A length no frame has is not believed beyond the longest frame.
        let mut junk = BytesMut::new();
        junk.extend_from_slice(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        prepare_recv_buf(&mut junk);
        prepare_recv_buf(&mut junk);
        assert!(junk.capacity() <= MAX_FRAME_LEN + RECV_MIN_READ + 64);
    }

    #[test]
    fn frame_bytes_missing_counts_to_the_end_of_the_first_frame() {
        use crate::seq::Seq;
        use crate::wire::{Data, Frame};
        let mut whole = Vec::new();
        Frame::Data(Data {
            seq: Seq(7),
            fin: false,
            payload: &[3u8; 5000],
        })
        .emit(&mut whole);
        assert_eq!(frame_bytes_missing(&[]), 0, "no frame begun");
        for cut in 1..super::super::HEADER_LEN {
            assert_eq!(frame_bytes_missing(&whole[..cut]), super::super::HEADER_LEN - cut);
        }
        for cut in [super::super::HEADER_LEN, 100, whole.len() - 1, whole.len()] {
            assert_eq!(frame_bytes_missing(&whole[..cut]), whole.len() - cut);
        }
        let mut two = whole.clone();
        two.extend_from_slice(&whole[..10]);
        assert_eq!(frame_bytes_missing(&two), 0, "only the first frame counts");
    }
}
