//! What the `direct` datapath's stages move: frames (a packet, or a GSO unit and the
//! packets it stands for), frames with the logical time they are due, and the buffers
//! frames are read into.

use std::time::{Duration, Instant};

use crate::emu::offload::{self, VnetHdr, VNET_HDR_LEN};

/// Ethernet header bytes in front of each IP packet (rates count IP bytes, as rattan's cells).
pub(super) const ETH: usize = 14;

pub(super) struct Frame {
    pub(super) buf: Box<[u8]>,
    pub(super) len: usize,
    /// Where the Ethernet frame starts: after the `virtio_net_hdr`, if the socket has one.
    pub(super) head: usize,
    /// Packets and wire bytes it stands for.
    pub(super) unit: offload::Unit,
}

impl Frame {
    pub(super) fn new(buf: Box<[u8]>, len: usize, head: usize) -> Self {
        let unit = if head == 0 {
            offload::Unit {
                segments: 1,
                wire_l3: len.saturating_sub(ETH) as u64,
            }
        } else {
            offload::unit(&VnetHdr::read(&buf[..head]), &buf[head..len])
        };
        Self { buf, len, head, unit }
    }

    /// IP bytes on the wire (every segment's headers, for a GSO unit).
    pub(super) fn l3(&self) -> u64 {
        self.unit.wire_l3
    }

    pub(super) fn segments(&self) -> usize {
        self.unit.segments as usize
    }

    pub(super) fn eth_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head..self.len]
    }

    /// A GSO unit that can be cut into its segments.
    pub(super) fn divisible(&self) -> bool {
        self.unit.segments > 1 && offload::can_segment(&VnetHdr::read(&self.buf), &self.buf[self.head..self.len])
    }

    /// The segments `keep` says to keep, as frames of their own.
    pub(super) fn split(&self, pool: &mut Pool, keep: impl FnMut(u32) -> bool, mut out: impl FnMut(Frame)) {
        let hdr = VnetHdr::read(&self.buf);
        offload::segment_ipv4_tcp(&hdr, &self.buf[self.head..self.len], keep, |seg| {
            let mut buf = pool.take_for(seg.len());
            buf[..seg.len()].copy_from_slice(seg);
            out(Frame::new(buf, seg.len(), VNET_HDR_LEN));
        });
    }
}

/// Drop-tail admission to a queue with `room` packets free: the frame back in `Ok` if it fits
/// whole. Else it is dropped (given back in `Err`), and of a GSO unit the leading segments
/// that fit go to `take` as frames of their own, as a queue of packets would take them.
pub(super) fn admit(frame: Frame, room: usize, pool: &mut Pool, take: impl FnMut(Frame)) -> Result<Frame, Frame> {
    if frame.segments() <= room {
        return Ok(frame);
    }
    if room > 0 && frame.divisible() {
        frame.split(pool, |i| (i as usize) < room, take);
    }
    Err(frame)
}

/// A frame and the logical time it is due at the next stage.
pub(super) struct Timed {
    pub(super) frame: Frame,
    pub(super) at: Instant,
}

pub(super) fn serialisation(l3: u64, rate_bps: u64) -> Duration {
    Duration::from_nanos((u128::from(l3) * 8 * 1_000_000_000 / u128::from(rate_bps.max(1))) as u64)
}

/// Buffers for received frames, reused, in two sizes: `size` fits the largest frame read
/// (a GSO unit with GSO units on, else an MTU frame) and `small` an MTU frame with its
/// header. A short frame read into a large buffer is copied into a small one, so a queue of
/// ACKs does not hold 64 KB per packet.
pub(super) struct Pool {
    pub(super) size: usize,
    pub(super) small: usize,
    /// Free buffers kept of each size; the rest are dropped.
    keep: usize,
    free: Vec<Box<[u8]>>,
    free_small: Vec<Box<[u8]>>,
}

impl Pool {
    pub(super) fn new(size: usize, small: usize, keep: usize) -> Self {
        Self {
            size,
            small: small.min(size),
            keep,
            free: Vec::new(),
            free_small: Vec::new(),
        }
    }

    pub(super) fn take(&mut self) -> Box<[u8]> {
        self.free
            .pop()
            .unwrap_or_else(|| vec![0u8; self.size].into_boxed_slice())
    }

    /// A buffer for `len` bytes, small when it fits.
    pub(super) fn take_for(&mut self, len: usize) -> Box<[u8]> {
        if len > self.small {
            return self.take();
        }
        self.free_small
            .pop()
            .unwrap_or_else(|| vec![0u8; self.small].into_boxed_slice())
    }

    pub(super) fn give(&mut self, b: Box<[u8]>) {
        let list = if b.len() == self.size {
            &mut self.free
        } else {
            &mut self.free_small
        };
        if list.len() < self.keep {
            list.push(b);
        }
    }
}
