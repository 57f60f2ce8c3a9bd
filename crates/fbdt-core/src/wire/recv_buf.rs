//! [`RecvBuf`]: the received bytes a receiver holds (in order and out of order), kept as
//! slices of the driver's read buffers while that is cheap, and the in-order ones until
//! the application reads them. Both schemes' receivers use it.
//!
//! A slice keeps its whole read allocation alive, so each one is charged [`recv_pin`] (at
//! least a read block); once those charges would pass the receive buffer, further pieces
//! are copied into allocations of their own. Memory is therefore at most 2 × the receive
//! buffer: slices' allocations ≤ the buffer, copies ≤ the bytes held ≤ the buffer (flow
//! control). A slice [`RecvBuf::read_bytes`] hands out keeps at most [`OUT_PIN_RATIO`] ×
//! its length alive (smaller ones are copied on the way out).
//!
//! Out-of-order pieces cost more than their bytes: each is a map entry. Every piece is
//! therefore also charged [`ENTRY_COST`], small neighbours are merged into one copy
//! ([`RecvBuf::merge`], up to [`MERGE_MAX`] bytes), and a receiver holds at most
//! [`RecvBuf::max_entries`] out-of-order pieces (more is a protocol error): 1-byte pieces
//! sent back to back cost about their bytes, and scattered ones are bounded in count.

use std::collections::VecDeque;
use std::ops::Range;

use bytes::{Buf, Bytes};

use super::recv_pin;

/// A slice handed to the application keeps at most this many times its length alive, so
/// the bytes on their way to it (a bounded channel in fbdt-net) bound the memory too.
pub const OUT_PIN_RATIO: usize = 8;

/// What one held piece costs beyond its bytes: its map entry (key, `Piece`, the tree's
/// slack) and the allocator's header of a copy.
pub const ENTRY_COST: usize = 96;

/// Neighbouring out-of-order pieces are merged into one copy while the result stays this
/// small (so a merge copies at most this much).
pub const MERGE_MAX: usize = 2048;

/// Pieces shorter than this are always copied (and so may be merged): a slice would keep a
/// whole read block alive for a few bytes.
pub const SLICE_MIN: usize = 1024;

/// Fewest out-of-order pieces any receiver may hold (see [`RecvBuf::max_entries`]).
pub const MIN_ENTRIES: usize = 1024;

/// Received bytes held until read, and the memory they keep alive.
#[derive(Clone, Debug)]
pub struct Piece {
    pub data: Bytes,
    /// What `data` keeps allocated plus [`ENTRY_COST`]: its own length if copied,
    /// `recv_pin` if a slice of a read buffer.
    pub pin: usize,
    /// `data` is a slice of a read buffer (not a copy of its own).
    pub shared: bool,
}

#[derive(Clone, Debug)]
pub struct RecvBuf {
    capacity: usize,
    /// The segment size both ends use: the smallest out-of-order piece a sender makes.
    segment: usize,
    /// In-order bytes not yet read by the application (`ready_len` of them).
    ready: VecDeque<Piece>,
    ready_len: usize,
    /// Σ `pin` of the pieces kept and not yet read or dropped.
    pinned: usize,
}

impl RecvBuf {
    /// A buffer charging slices against `capacity` bytes (the receive buffer), for a
    /// stream cut into `segment`-byte segments.
    pub fn new(capacity: usize, segment: usize) -> Self {
        RecvBuf {
            capacity,
            segment: segment.max(1),
            ready: VecDeque::new(),
            ready_len: 0,
            pinned: 0,
        }
    }

    /// Keeps `range` of `payload`: a slice if the pinned budget allows, else a copy. The
    /// piece stays charged until it is read or given back with [`RecvBuf::drop_piece`].
    pub fn keep(&mut self, payload: &Bytes, range: Range<usize>) -> Piece {
        let pin = recv_pin(payload.len()) + ENTRY_COST;
        // Small pieces are copied: a slice would keep a whole read block alive for them.
        let piece = if range.len() >= SLICE_MIN && self.pinned + pin <= self.capacity {
            Piece {
                data: payload.slice(range),
                pin,
                shared: true,
            }
        } else {
            Self::copy(&payload[range])
        };
        self.pinned += piece.pin;
        piece
    }

    fn copy(b: &[u8]) -> Piece {
        Piece {
            data: Bytes::copy_from_slice(b),
            pin: b.len() + ENTRY_COST,
            shared: false,
        }
    }

    /// Most out-of-order pieces a receiver holds: as many as segments of at least
    /// `SLICE_MIN` (1 KiB) fit in the receive buffer (+1 for a short last one), at least
    /// `MIN_ENTRIES` (1024). A sender scattering whole segments never reaches it — flow control
    /// keeps its out-of-order bytes within the buffer; 1448-byte segments fill a 1.4 MiB
    /// buffer with ~1000 pieces, more than one per 2 KiB — while a peer scattering tiny
    /// pieces is refused once it is reached (their memory is bounded by the charges anyway;
    /// the cap bounds the work of walking them for ACK ranges).
    pub fn max_entries(&self) -> usize {
        (self.capacity / self.segment.min(SLICE_MIN) + 1).max(MIN_ENTRIES)
    }

    /// Whether [`RecvBuf::merge`] would join the two: both copies (not slices), together
    /// at most [`MERGE_MAX`] bytes.
    pub fn mergeable(front: &Piece, back: &Piece) -> bool {
        front.data.len() + back.data.len() <= MERGE_MAX && !front.shared && !back.shared
    }

    /// Appends `back` (which starts where `front` ends) to `front` as one copy if both are
    /// small; gives `back` back otherwise.
    pub fn merge(&mut self, front: &mut Piece, back: Piece) -> Result<(), Piece> {
        if !Self::mergeable(front, &back) {
            return Err(back);
        }
        let len = front.data.len() + back.data.len();
        let mut v = Vec::with_capacity(len);
        v.extend_from_slice(&front.data);
        v.extend_from_slice(&back.data);
        self.pinned -= front.pin + back.pin;
        *front = Self::copy(&v);
        self.pinned += front.pin;
        Ok(())
    }

    /// A kept piece that will not be delivered (a duplicate): its charge ends.
    pub fn drop_piece(&mut self, piece: Piece) {
        self.pinned -= piece.pin;
    }

    /// Appends a kept piece to the in-order bytes.
    pub fn push_ready(&mut self, piece: Piece) {
        self.ready_len += piece.data.len();
        self.ready.push_back(piece);
    }

    /// In-order bytes ready to read.
    pub fn ready_len(&self) -> usize {
        self.ready_len
    }

    /// What the held pieces keep allocated.
    pub fn pinned(&self) -> usize {
        self.pinned
    }

    /// Copies in-order bytes into `buf`; returns how many.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len().min(self.ready_len);
        let mut at = 0;
        for p in &self.ready {
            if at == n {
                break;
            }
            let take = (n - at).min(p.data.len());
            buf[at..at + take].copy_from_slice(&p.data[..take]);
            at += take;
        }
        self.consume_ready(n);
        n
    }

    /// Takes up to `max` in-order bytes as one chunk, a slice when it keeps little else
    /// alive; None when nothing is ready.
    pub fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        let front = self.ready.front_mut()?;
        let (pin, shared) = (front.pin, front.shared);
        let mut out = if front.data.len() <= max {
            let p = self.ready.pop_front()?;
            self.pinned -= p.pin;
            p.data
        } else {
            front.data.split_to(max)
        };
        if out.is_empty() {
            return None;
        }
        // Beyond the receiver its pin is no longer counted: a slice leaves only if it is at
        // least 1/OUT_PIN_RATIO of what it keeps alive, smaller ones are copied out.
        if shared && out.len() * OUT_PIN_RATIO < pin {
            out = Bytes::copy_from_slice(&out);
        }
        self.ready_len -= out.len();
        Some(out)
    }

    /// Drops the front `n` ready bytes (after the application took them).
    fn consume_ready(&mut self, mut n: usize) {
        self.ready_len -= n;
        while n > 0 {
            let Some(front) = self.ready.front_mut() else {
                break;
            };
            let take = n.min(front.data.len());
            front.data.advance(take);
            n -= take;
            if front.data.is_empty() {
                self.pinned -= front.pin;
                self.ready.pop_front();
            }
        }
    }
}
