//! The in-order delivery delay of a kernel TCP or MPTCP stream (docs/results.md): the
//! kernel does not show when a byte is first transmitted, so the sender writes the time into
//! the stream at every followed offset and the receiver reads it back when the offset
//! arrives in order. Both ends must share a clock: the lab runs them in one process
//! (threads in two namespaces share `CLOCK_MONOTONIC`), times are µs since one `Instant`.
//!
//! To make "written" close to "first transmitted", the sender sets `TCP_NOTSENT_LOWAT`
//! ([`NOTSENT_LOWAT`]) and stamps right before a non-blocking write that follows a `poll`
//! for writability: the kernel then holds at most about that much unsent data (plus one
//! write's overshoot) ahead of a stamp.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;

/// Followed offsets: every 16 KiB, as the FBDT probe (`fbdt_core::delay_probe`).
pub const STEP: u64 = 16 * 1024;
/// Bytes of a stamp: µs since the shared origin, big-endian.
pub const STAMP_LEN: u64 = 8;
/// The sender's TCP_NOTSENT_LOWAT, the fbdt-net runtime's own default.
pub const NOTSENT_LOWAT: u32 = 128 * 1024;
/// Filler between stamps (what the unstamped download sends).
const FILLER: u8 = 0x5a;
/// Most stamps the sender remembers (only those not yet delivered are needed at the end;
/// 1 GiB of stream at the step).
const MAX_REMEMBERED: usize = 1 << 16;

/// Sets TCP_NOTSENT_LOWAT on a (TCP or MPTCP) socket.
pub fn set_notsent_lowat(s: &impl AsRawFd, bytes: u32) -> std::io::Result<()> {
    let v = bytes as libc::c_int;
    // SAFETY: a valid fd and a c_int option value of the right size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NOTSENT_LOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Waits until `s` is writable or `timeout_ms` passed; true when writable.
pub fn wait_writable(s: &impl AsRawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    rc > 0 && p.revents & libc::POLLOUT != 0
}

/// The sending side: makes the bytes of the stream from any offset, stamping followed
/// offsets whose stamp has not started yet with the time given.
#[derive(Debug, Default)]
pub struct Stamper {
    /// Stream bytes written so far.
    offset: u64,
    /// A stamp cut by a partial write: its offset and value (the rest must match).
    split: Option<(u64, u64)>,
    /// (offset, µs) of the latest stamps written.
    written: VecDeque<(u64, u64)>,
}

impl Stamper {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fills `buf` with the stream from the current offset, stamping with `now_us`.
    pub fn fill(&self, buf: &mut [u8], now_us: u64) {
        buf.fill(FILLER);
        let end = self.offset + buf.len() as u64;
        let mut b = self.offset / STEP * STEP;
        while b < end {
            let value = match self.split {
                Some((at, v)) if at == b => v,
                _ if b < self.offset => {
                    b += STEP;
                    continue;
                }
                _ => now_us,
            };
            for (i, byte) in value.to_be_bytes().into_iter().enumerate() {
                let p = b + i as u64;
                if (self.offset..end).contains(&p) {
                    buf[(p - self.offset) as usize] = byte;
                }
            }
            b += STEP;
        }
    }

    /// `n` bytes of what [`Stamper::fill`] made (with `now_us`) were written.
    pub fn advance(&mut self, n: usize, now_us: u64) {
        let new = self.offset + n as u64;
        let mut b = self.offset.div_ceil(STEP) * STEP;
        while b < new {
            if self.written.len() == MAX_REMEMBERED {
                self.written.pop_front();
            }
            self.written.push_back((b, now_us));
            b += STEP;
        }
        let last = new / STEP * STEP;
        self.split = if new > last && new < last + STAMP_LEN {
            let value = match self.split {
                Some((at, v)) if at == last => v,
                _ => now_us,
            };
            Some((last, value))
        } else {
            None
        };
        self.offset = new;
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Stamps written at or above `offset` (the receiver never got them), oldest first.
    pub fn written_from(&self, offset: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.written.iter().copied().filter(move |&(b, _)| b >= offset)
    }
}

/// The receiving side: reads stamps back as the stream arrives in order.
#[derive(Debug, Default)]
pub struct StampReader {
    offset: u64,
    stamp: [u8; 8],
    /// Delay of every followed offset read, µs.
    pub delays_us: Vec<u64>,
}

impl StampReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// The next `data` of the stream arrived at `now_us`.
    pub fn on_read(&mut self, data: &[u8], now_us: u64) {
        let end = self.offset + data.len() as u64;
        let mut b = self.offset / STEP * STEP;
        while b < end {
            for i in 0..STAMP_LEN {
                let p = b + i;
                if (self.offset..end).contains(&p) {
                    self.stamp[i as usize] = data[(p - self.offset) as usize];
                    if i == STAMP_LEN - 1 {
                        let sent = u64::from_be_bytes(self.stamp);
                        self.delays_us.push(now_us.saturating_sub(sent));
                    }
                }
            }
            b += STEP;
        }
        self.offset = end;
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream written in awkward pieces (stamps cut by partial writes) and read in other
    /// awkward pieces gives one delay per followed offset, the stamp of its first write.
    #[test]
    fn stamps_survive_partial_writes_and_reads() {
        let mut w = Stamper::new();
        let mut stream = Vec::new();
        let mut now = 1000u64;
        let writes = [5usize, 3, 16_380, 7, 1, 40_000, 16_384, 2, 9000];
        let mut attempts = Vec::new();
        for &n in writes.iter().cycle().take(40) {
            let mut buf = vec![0u8; 20_000];
            w.fill(&mut buf, now);
            let n = n.min(buf.len());
            stream.extend_from_slice(&buf[..n]);
            w.advance(n, now);
            attempts.push(now);
            now += 10;
        }
        let total = stream.len() as u64;
        assert_eq!(w.offset(), total);
        let mut r = StampReader::new();
        let mut at = 0;
        for (k, n) in [1usize, 9, 4096, 7, 30_000].iter().cycle().enumerate() {
            if at == stream.len() {
                break;
            }
            let n = (*n).min(stream.len() - at);
            r.on_read(&stream[at..at + n], 1_000_000 + k as u64);
            at += n;
        }
        // Every followed offset whose stamp was fully written was read back.
        let complete = (total.saturating_sub(STAMP_LEN) / STEP) + 1;
        assert_eq!(r.delays_us.len() as u64, complete);
        // Each stamp is the time of the write that carried its first byte.
        let stamps: Vec<u64> = w.written_from(0).map(|(_, us)| us).collect();
        assert_eq!(stamps.len() as u64, total.div_ceil(STEP));
        for (b, &stamp) in stamps.iter().take(complete as usize).enumerate() {
            let at = b * STEP as usize;
            let v = u64::from_be_bytes(stream[at..at + 8].try_into().unwrap());
            assert_eq!(v, stamp, "stamp at {at}");
        }
        // Filler elsewhere.
        assert_eq!(stream[8], FILLER);
        assert!(w.written_from(total).next().is_none());
    }
}
