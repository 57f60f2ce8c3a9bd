//! A `PACKET_RX_RING` of `TPACKET_V3` blocks for the `direct` datapath's AF_PACKET sockets:
//! the kernel writes received frames into memory shared with the emulator thread, which
//! walks the blocks the kernel handed over instead of calling `recvmmsg` per batch.
//!
//! Why: with `recvmmsg` every frame is an skb queued on the socket, dequeued and copied by
//! a system call; a ring takes the copy into user space at receive time (in the softirq
//! that delivers the frame) and leaves the thread one copy out of shared memory and no
//! system call per batch. Whether that lifts the datapath's faithful ceiling is measured in
//! docs/testbed.md (limits).
//!
//! Facts this relies on (Documentation/networking/packet_mmap.rst and linux/if_packet.h):
//! the ring is `tp_block_nr` blocks of `tp_block_size` bytes (a multiple of the page size);
//! a block belongs to the kernel while its `block_status` lacks `TP_STATUS_USER`, and the
//! kernel hands it over when it is full or its retire timer (`tp_retire_blk_tov`, in
//! milliseconds) fires with at least one frame in it; blocks are handed over in ring order;
//! each frame is a `tpacket3_hdr` followed, at `TPACKET_ALIGN(sizeof(tpacket3_hdr))`, by
//! the `sockaddr_ll` of the frame, the frame itself at `tp_mac`, the next at
//! `tp_next_offset`; writing `TP_STATUS_KERNEL` to `block_status` gives the block back. The
//! socket polls readable while a block is the user's.
//!
//! The cost: a frame waits in its block until the block fills or the timer retires it. At
//! high rates blocks fill within tens of microseconds; a lone frame (an ACK on an idle
//! reverse lane) waits up to the timeout. The loop takes each frame's arrival from the
//! kernel's receive timestamp, not from when it read the block, so the wait counts against
//! the path's delay (and, where it exceeds it, as lateness) instead of adding to it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The shortest block timeout the kernel takes (the field is in whole milliseconds; 0 asks
/// the kernel for its own default, which is longer).
pub(super) const RETIRE_MS: u32 = 1;
/// Frames of the largest size one block holds: small blocks fill (and are handed over)
/// sooner, large ones cost fewer hand-overs per frame. Measured (`bench emu --ring`, 4
/// paths, MTU 1500, quiet host): 16 → 536 Mbit/s faithful, 2 → 1290; with 16 a 160 Mbit/s
/// lane waited for the timer and the wait, as long as the bench's 1 ms delay, made frames late.
const FRAMES_PER_BLOCK: usize = 2;

/// A mapped receive ring; unmapped on drop (the socket owns the kernel side).
pub(super) struct RxRing {
    base: *mut u8,
    block_size: usize,
    blocks: usize,
    /// The block to look at next: the kernel hands blocks over in ring order.
    next: usize,
}

// SAFETY: the mapping is only touched through `&mut self`; the kernel side synchronises
// through `block_status` (acquire/release below), not through the thread that owns it.
unsafe impl Send for RxRing {}

/// Where a frame came from and when the kernel received it.
pub(super) struct RingFrame<'a> {
    pub data: &'a [u8],
    /// `sll_pkttype` (PACKET_HOST, PACKET_BROADCAST, …).
    pub pkttype: u8,
    /// The frame was cut short by the block (`tp_snaplen < tp_len`).
    pub truncated: bool,
    /// The kernel's stamp: CLOCK_REALTIME, or CLOCK_MONOTONIC for a sender's departure time.
    pub stamp: Option<Duration>,
}

fn page_size() -> usize {
    // SAFETY: sysconf with a valid name has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// `TPACKET_ALIGN`: the ring's headers and frames start on 16-byte boundaries.
fn align(x: usize) -> usize {
    (x + libc::TPACKET_ALIGNMENT - 1) & !(libc::TPACKET_ALIGNMENT - 1)
}

/// Offset of the `sockaddr_ll` behind each frame's header.
fn sll_offset() -> usize {
    align(std::mem::size_of::<libc::tpacket3_hdr>())
}

/// Block size and count for frames up to `max_frame` bytes in about `total` bytes of ring.
fn geometry(max_frame: usize, total: usize) -> (usize, usize, usize) {
    // A frame's slot: header, address, padding up to the MAC header, the frame, aligned.
    let slot = align(libc::TPACKET3_HDRLEN + 16 + max_frame);
    let page = page_size();
    let block = (slot * FRAMES_PER_BLOCK + 64).next_power_of_two().max(page);
    let blocks = (total / block).max(4);
    (block, blocks, slot)
}

impl RxRing {
    /// Switches `fd` (an unbound AF_PACKET socket) to TPACKET_V3 with a receive ring of
    /// about `total` bytes for frames up to `max_frame` bytes, and maps it.
    pub(super) fn attach(fd: i32, max_frame: usize, total: usize, retire_ms: u32) -> std::io::Result<Self> {
        super::host_io::set_int_option(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V3 as libc::c_int,
        )?;
        let (block, blocks, slot) = geometry(max_frame, total);
        let req = libc::tpacket_req3 {
            tp_block_size: block as u32,
            tp_block_nr: blocks as u32,
            // V3 packs frames of any size into a block; the kernel only checks that the
            // frame size is aligned and that the counts agree.
            tp_frame_size: slot as u32,
            tp_frame_nr: ((block / slot) * blocks) as u32,
            tp_retire_blk_tov: retire_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        // SAFETY: setsockopt with a tpacket_req3 of the size the kernel expects for V3.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                &req as *const libc::tpacket_req3 as *const libc::c_void,
                std::mem::size_of::<libc::tpacket_req3>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let len = block * blocks;
        // SAFETY: maps the ring the kernel just allocated for this socket, at offset 0 and
        // its full length, shared so both sides see the same pages.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            base: base as *mut u8,
            block_size: block,
            blocks,
            next: 0,
        })
    }

    fn status(&self, block: usize) -> &AtomicU32 {
        // SAFETY: `block < blocks`, so the descriptor lies inside the mapping; block_status
        // is the first u32 of `tpacket_hdr_v1`, at offset 8 of the block (after `version`
        // and `offset_to_priv`), 4-aligned; the kernel writes it concurrently, hence atomic.
        unsafe {
            AtomicU32::from_ptr(
                self.base
                    .add(block * self.block_size + std::mem::offset_of!(libc::tpacket_block_desc, hdr))
                    as *mut u32,
            )
        }
    }

    /// Whether the next block is ready (frames to read without a system call).
    pub(super) fn ready(&self) -> bool {
        self.status(self.next).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Hands every frame of the ready blocks to `take`, in order, and gives the blocks back;
    /// stops after the block in which `max_frames` was reached, so a flood on one socket
    /// cannot hold back the releases. Returns the number of frames.
    pub(super) fn drain(&mut self, max_frames: usize, mut take: impl FnMut(RingFrame<'_>)) -> usize {
        let mut frames = 0;
        while frames < max_frames {
            if !self.ready() {
                break;
            }
            let b = self.next;
            // SAFETY: the block is the user's (TP_STATUS_USER, acquired above), so the
            // kernel does not write it until we give it back; its descriptor is in bounds.
            let desc = unsafe { &*(self.base.add(b * self.block_size) as *const libc::tpacket_block_desc) };
            // SAFETY: V3 blocks carry the `bh1` variant, the only one the union has.
            let h1 = unsafe { desc.hdr.bh1 };
            let block = b * self.block_size;
            let mut at = h1.offset_to_first_pkt as usize;
            for _ in 0..h1.num_pkts {
                if at + libc::TPACKET3_HDRLEN > self.block_size {
                    break;
                }
                // SAFETY: `at` is a frame header inside this block (checked above), written
                // by the kernel before it handed the block over; read unaligned to be safe.
                let hdr = unsafe { std::ptr::read_unaligned(self.base.add(block + at) as *const libc::tpacket3_hdr) };
                // SAFETY: the sockaddr_ll follows the header inside the slot (bounds above).
                let sll = unsafe {
                    std::ptr::read_unaligned(self.base.add(block + at + sll_offset()) as *const libc::sockaddr_ll)
                };
                let start = at + usize::from(hdr.tp_mac);
                let len = (hdr.tp_snaplen as usize).min(self.block_size.saturating_sub(start));
                // SAFETY: [start, start + len) lies inside this block (clamped above), which
                // stays ours until the status is written back after this loop.
                let data = unsafe { std::slice::from_raw_parts(self.base.add(block + start), len) };
                // The skb's stamp (TP_STATUS_TS_SOFTWARE) or, if it had none, the real time at
                // which the kernel wrote the frame into the block. A TCP sender's skb carries
                // its departure time on CLOCK_MONOTONIC, which survives the veth: the
                // stamp may be on either clock (`StampClock` tells them apart).
                let stamp = Some(Duration::new(u64::from(hdr.tp_sec), hdr.tp_nsec));
                take(RingFrame {
                    data,
                    pkttype: sll.sll_pkttype,
                    truncated: (hdr.tp_len as usize) > len,
                    stamp,
                });
                frames += 1;
                if hdr.tp_next_offset == 0 {
                    break;
                }
                at += hdr.tp_next_offset as usize;
            }
            self.status(b).store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.next = (b + 1) % self.blocks;
        }
        frames
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `attach`; no slice of it outlives a
        // `drain` call.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.block_size * self.blocks) };
    }
}

fn clock_now(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Converts the kernel's stamps to `Instant`s of one wake-up.
pub(super) struct StampClock {
    now: Instant,
    /// CLOCK_REALTIME and CLOCK_MONOTONIC (the clock of `Instant`) at about `now`.
    real_now: Duration,
    mono_now: Duration,
}

/// Stamps older than this are not trusted (a clock step), nor any from the future beyond
/// [`AHEAD`].
const STALE: Duration = Duration::from_millis(100);
/// A sender's departure time may lie a little ahead of when the frame is read (pacing).
const AHEAD: Duration = Duration::from_millis(1);

impl StampClock {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            now,
            real_now: clock_now(libc::CLOCK_REALTIME),
            mono_now: clock_now(libc::CLOCK_MONOTONIC),
        }
    }

    /// How long ago `stamp` was on a clock that reads `clock_now` now, if recent.
    fn age(stamp: Duration, clock_now: Duration) -> Option<Duration> {
        match clock_now.checked_sub(stamp) {
            Some(age) if age < STALE => Some(age),
            Some(_) => None,
            None if stamp - clock_now <= AHEAD => Some(Duration::ZERO),
            None => None,
        }
    }

    /// When a frame stamped `stamp` arrived, as an `Instant` no later than the wake-up. The
    /// two clocks are decades apart, so a stamp is recent on at most one of them; one that
    /// is recent on neither falls back to the wake-up, as `recvmmsg` frames are timed.
    pub(super) fn arrival(&self, stamp: Option<Duration>) -> Instant {
        let age = stamp.and_then(|s| Self::age(s, self.real_now).or_else(|| Self::age(s, self.mono_now)));
        match age {
            Some(age) => self.now.checked_sub(age).unwrap_or(self.now),
            None => self.now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_hold_the_largest_frame_several_times_and_are_whole_pages() {
        for (mtu, total) in [(1514usize, 16usize << 20), (9018, 16 << 20), (1514, 0)] {
            let (block, blocks, slot) = geometry(mtu, total);
            assert_eq!(block % page_size(), 0);
            assert!(block.is_power_of_two());
            assert!(block / slot >= FRAMES_PER_BLOCK, "{mtu}: {block} / {slot}");
            assert!(blocks >= 4);
            assert!(slot % libc::TPACKET_ALIGNMENT == 0);
        }
    }

    #[test]
    fn stamps_become_instants_and_bad_ones_fall_back() {
        let now = Instant::now();
        let c = StampClock::new(now);
        assert_eq!(
            c.arrival(Some(c.real_now - Duration::from_micros(300))),
            now - Duration::from_micros(300)
        );
        assert_eq!(c.arrival(None), now);
        // A sender's departure time on the monotonic clock.
        assert_eq!(
            c.arrival(Some(c.mono_now - Duration::from_micros(700))),
            now - Duration::from_micros(700)
        );
        // From the future (the clock stepped back) or long ago: the wake-up.
        assert_eq!(c.arrival(Some(c.real_now + Duration::from_millis(5))), now);
        assert_eq!(c.arrival(Some(c.mono_now - Duration::from_secs(5))), now);
        assert_eq!(c.arrival(Some(Duration::from_secs(5))), now);
    }
}
