//! Waking a path's reader only when a frame can complete. The core uses only whole frames,
//! but a socket reports readable at every packet: at 16 KiB frames over a 1500-byte MTU
//! most wake-ups only appended to the read buffer (issue 37: ≈ 20 k wake-ups/s at
//! 315 Mbit/s). After each read the driver asks the kernel (SO_RCVLOWAT) to wake it once
//! the bytes the current frame still lacks have arrived.
//!
//! What the kernel does with it (net/ipv4/tcp.c, Linux ≥ 4.18): the socket signals
//! readable once `SO_RCVLOWAT` bytes are queued, or the receive window is nearly closed,
//! or under memory pressure, or at FIN/error — so a mark never deadlocks TCP. Setting a
//! mark re-checks at once (`tcp_set_rcvlowat` → `tcp_data_ready`), so lowering it to 1
//! wakes a reader whose bytes are already there: that is the fallback when a mark is not
//! met within [`NetConfig::recv_lowat_fallback`](crate::NetConfig) (a peer that stopped
//! mid-frame; an estimate that was too high). A non-blocking read returns what is queued
//! whatever the mark, so a read never waits for it.
//!
//! A mark costs a system call, so it is set only where it saves wake-ups: while the reads
//! bring on average less than what the frame lacks. Where packets arrive as large
//! aggregates (GRO, loopback, the testbed's TSO frames) each wake-up completes a frame
//! anyway, and a mark per wake-up only added a system call (measured, issue 37: 76,661 marks
//! set for 77,178 wake-ups and no fewer wake-ups).
//!
//! Marks are capped at [`MAX_LOWAT`]: a mark whose doubled size exceeds the socket's
//! receive buffer makes the kernel grow the buffer *and clamp the window* to the mark.

use std::io;
use std::os::fd::AsRawFd;

use fbdt_core::{Duration, Instant};

/// Largest mark set: twice it stays below the kernel's initial receive buffer
/// (`tcp_rmem[1]`, 128 KiB by default, 87 KiB on old kernels), so setting it never
/// clamps the window. A frame longer than this wakes the reader every `MAX_LOWAT` bytes.
pub const MAX_LOWAT: usize = 32 * 1024;
/// Below this many missing bytes the mark stays 1: one or two packets complete the
/// frame anyway, and a mark costs a system call.
pub const MIN_LOWAT: usize = 4 * 1024;

/// One path's receive low-water mark: what is set on its socket and until when it may
/// stay unmet.
#[derive(Debug, Default)]
pub(crate) struct Lowat {
    /// The mark now set on the socket (0 or 1: the kernel's default, wake at any byte).
    set: usize,
    /// When the fallback lowers an unmet mark to 1.
    deadline: Option<Instant>,
    /// Bytes per read, averaged (1/8 weight for the newest).
    read_avg: usize,
    /// The fallback fired and no read brought bytes since: the mark stays 1. Raising it
    /// again before the wake-up it caused is read would lose that wake-up (epoll asks the
    /// socket again when it delivers the event, and the socket then says "not readable").
    fell_back: bool,
    /// Times the fallback fired.
    pub fallbacks: u64,
    /// Times a mark was set or cleared (system calls).
    pub changes: u64,
}

impl Lowat {
    /// A read returned `n` bytes.
    pub fn on_read(&mut self, n: usize) {
        self.read_avg = self.read_avg - self.read_avg / 8 + n / 8;
        self.fell_back &= n == 0;
        if n > 0 {
            // Bytes came: the next wait is a new one, with a fallback of its own.
            self.deadline = None;
        }
    }

    /// The mark for a reader whose current frame lacks `missing` bytes, when its reads
    /// bring `read_avg` bytes on average.
    pub fn mark_for(missing: usize, read_avg: usize) -> usize {
        if missing < MIN_LOWAT || read_avg >= missing {
            1
        } else {
            missing.min(MAX_LOWAT)
        }
    }

    /// The reader found nothing more to read and waits: ask to be woken after `missing`
    /// bytes (see [`Lowat::mark_for`]). The fallback starts with a new mark or after a read
    /// that brought bytes — not at every step of a driver kept busy by other paths, which
    /// would push it later for as long as they keep it busy.
    pub fn wait_for(&mut self, fd: &impl AsRawFd, missing: usize, now: Instant, fallback: Duration) -> io::Result<()> {
        let mark = if self.fell_back {
            1
        } else {
            Self::mark_for(missing, self.read_avg)
        };
        if mark <= 1 {
            self.deadline = None;
        } else if self.deadline.is_none() || mark != self.set.max(1) {
            self.deadline = Some(now + fallback);
        }
        self.apply(fd, mark)
    }

    /// The earliest time [`Lowat::expire`] has work.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Past the deadline, an unmet mark goes back to 1 (which wakes the reader if bytes
    /// are queued). True if it fired.
    pub fn expire(&mut self, fd: &impl AsRawFd, now: Instant) -> io::Result<bool> {
        if self.deadline.is_none_or(|d| d > now) {
            return Ok(false);
        }
        self.deadline = None;
        self.fallbacks += 1;
        self.fell_back = true;
        self.apply(fd, 1)?;
        Ok(true)
    }

    /// A new connection carries the path: its socket starts at the kernel's default (the
    /// counters go on).
    pub fn reset(&mut self) {
        self.set = 0;
        self.deadline = None;
        self.fell_back = false;
    }

    fn apply(&mut self, fd: &impl AsRawFd, mark: usize) -> io::Result<()> {
        if mark == self.set.max(1) {
            return Ok(());
        }
        self.changes += 1;
        self.set = mark;
        crate::sockopt::set_rcvlowat(fd, mark as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration as StdDuration;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    #[test]
    fn marks_are_one_for_small_gaps_and_capped() {
        let packet = 1448;
        assert_eq!(Lowat::mark_for(0, packet), 1);
        assert_eq!(Lowat::mark_for(MIN_LOWAT - 1, packet), 1);
        assert_eq!(Lowat::mark_for(MIN_LOWAT, packet), MIN_LOWAT);
        assert_eq!(Lowat::mark_for(16 * 1024 + 30, packet), 16 * 1024 + 30);
        assert_eq!(Lowat::mark_for(256 * 1024, packet), MAX_LOWAT);
    }

    #[test]
    fn no_mark_where_reads_are_large_anyway() {
        let mut l = Lowat::default();
        for _ in 0..64 {
            l.on_read(1448);
        }
        assert!(
            Lowat::mark_for(16 * 1024, l.read_avg) > 1,
            "packet-sized reads: worth a mark"
        );
        for _ in 0..64 {
            l.on_read(27_000);
        }
        assert_eq!(
            Lowat::mark_for(16 * 1024, l.read_avg),
            1,
            "each read completes a frame anyway"
        );
    }

    /// A driver that other paths keep busy steps again and again without reading this one:
    /// the unmet mark still falls back at the first wait's deadline; a read that brings bytes
    /// starts the next wait's own.
    #[test]
    fn steps_without_reads_do_not_push_the_fallback_later() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        let ms = |m: u64| Instant::from_micros(m * 1000);
        let fallback = Duration::from_millis(2);
        let mut lowat = Lowat::default();
        lowat.wait_for(&rx, 20_000, ms(10), fallback).unwrap();
        for step_us in [10_100, 10_900, 11_500, 11_999] {
            lowat.wait_for(&rx, 20_000, Instant::from_micros(step_us), fallback).unwrap();
            assert_eq!(lowat.deadline(), Some(ms(12)), "a step at {step_us} µs");
        }
        assert!(!lowat.expire(&rx, Instant::from_micros(11_999)).unwrap());
        assert!(lowat.expire(&rx, ms(12)).unwrap(), "falls back at the first wait's deadline");
        assert_eq!(lowat.deadline(), None);

        lowat.on_read(1448);
        lowat.wait_for(&rx, 20_000, ms(20), fallback).unwrap();
        assert_eq!(lowat.deadline(), Some(ms(22)), "a read starts a new wait");
        lowat.wait_for(&rx, 20_000, ms(21), fallback).unwrap();
        assert_eq!(lowat.deadline(), Some(ms(22)));
        lowat.wait_for(&rx, 2_000, ms(21), fallback).unwrap();
        assert_eq!(lowat.deadline(), None, "a mark of 1 has nothing to fall back from");
        assert!(!lowat.expire(&rx, ms(30)).unwrap());
    }

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// Reads what is queued without waiting (a non-blocking read ignores the mark).
    fn drain(s: &TcpStream) -> usize {
        let mut buf = [0u8; 65536];
        let mut n = 0;
        loop {
            match s.try_read(&mut buf) {
                Ok(0) => return n,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return n,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A mark that cannot be met (the peer sends less and stops) holds the reader until the
    /// fallback, not longer; a mark that is met wakes it as soon as the bytes are there.
    #[tokio::test]
    async fn an_unmet_mark_waits_for_the_fallback_and_no_longer() {
        let fallback = Duration::from_millis(40);
        let (mut tx, rx) = pair().await;
        let start = std::time::Instant::now();
        let now = || Instant::from_micros(start.elapsed().as_micros() as u64);
        let mut lowat = Lowat::default();
        // Nothing queued yet: the readiness of the fresh socket is consumed.
        assert_eq!(drain(&rx), 0);
        lowat.wait_for(&rx, 20_000, now(), fallback).unwrap();
        tx.write_all(&[1u8; 1000]).await.unwrap();
        let sent = std::time::Instant::now();
        // The driver's loop: wait for readable or for the fallback deadline.
        let mut read = 0;
        while read == 0 {
            let until = lowat
                .deadline()
                .map(|d| d.as_micros().saturating_sub(now().as_micros()));
            let sleep = tokio::time::sleep(StdDuration::from_micros(until.unwrap_or(1_000_000)));
            tokio::select! {
                r = rx.readable() => { r.unwrap(); read += drain(&rx); }
                _ = sleep => {
                    lowat.expire(&rx, now()).unwrap();
                    // The driver steps again at once and, finding nothing yet, waits anew:
                    // that must not raise the mark over the wake-up just caused.
                    lowat.wait_for(&rx, 20_000, now(), fallback).unwrap();
                }
            }
            assert!(sent.elapsed() < StdDuration::from_secs(2), "the reader never woke");
        }
        let waited = sent.elapsed();
        assert_eq!(read, 1000);
        assert_eq!(lowat.fallbacks, 1, "woken by the fallback, not by the bytes");
        assert!(
            waited >= StdDuration::from_millis(30),
            "the mark held the bytes back: {waited:?}"
        );
        assert!(waited < StdDuration::from_millis(40 + 500), "waited {waited:?}");
        lowat.on_read(read);

        // A mark that is met: woken without the fallback.
        lowat.wait_for(&rx, 6000, now(), Duration::from_millis(5000)).unwrap();
        tx.write_all(&[2u8; 3000]).await.unwrap();
        tokio::time::sleep(StdDuration::from_millis(20)).await;
        let early = tokio::time::timeout(StdDuration::from_millis(50), rx.readable()).await;
        assert!(early.is_err(), "woken below the mark");
        tx.write_all(&[3u8; 3000]).await.unwrap();
        tokio::time::timeout(StdDuration::from_secs(2), rx.readable())
            .await
            .expect("woken once the mark was met")
            .unwrap();
        assert_eq!(drain(&rx), 6000);
        assert_eq!(lowat.fallbacks, 1);
    }
}
