//! Socket options the runtime sets and reads: TCP_NODELAY, TCP_NOTSENT_LOWAT,
//! TCP_CONGESTION, SO_RCVLOWAT, SO_MAX_PACING_RATE, SO_BINDTODEVICE (via socket2), and
//! TCP_INFO.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use fbdt_core::path_policy::TcpSignals;
use fbdt_core::{AckSilence, Duration, Instant, PathStats};

/// Sets TCP_NOTSENT_LOWAT: the socket reports writable (and accepts writes) only while
/// fewer than `bytes` unsent bytes sit in the kernel, so the core decides late.
pub fn set_notsent_lowat(fd: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    setsockopt_u32(fd.as_raw_fd(), libc::TCP_NOTSENT_LOWAT, bytes)
}

/// TCP_RTO_MAX_MS (Linux ≥ 6.15; include/uapi/linux/tcp.h): caps the retransmission
/// timeout's exponential back-off, so a connection whose link comes back retransmits within
/// that bound instead of after seconds of back-off.
pub const TCP_RTO_MAX_MS: libc::c_int = 44;

/// Sets TCP_RTO_MAX_MS (the kernel accepts 1000 ms … 120 s).
pub fn set_rto_max_ms(fd: &impl AsRawFd, ms: u32) -> io::Result<()> {
    setsockopt_u32(fd.as_raw_fd(), TCP_RTO_MAX_MS, ms)
}

/// Sets TCP_CONGESTION (e.g. "cubic", "bbr", "reno").
pub fn set_congestion(fd: &impl AsRawFd, name: &str) -> io::Result<()> {
    // SAFETY: valid fd, pointer/length of a live byte slice.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The controller a socket runs (TCP_CONGESTION read back): what is in force, whatever
/// was asked for.
pub fn congestion(fd: &impl AsRawFd) -> io::Result<String> {
    // TCP_CA_NAME_MAX in include/net/tcp.h.
    let mut name = [0u8; 16];
    let mut len = name.len() as libc::socklen_t;
    // SAFETY: valid fd; the kernel writes at most `len` bytes into `name`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let name = &name[..(len as usize).min(name.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// TCP_RTO_MIN_US (Linux ≥ 6.15; include/uapi/linux/tcp.h): this socket's floor under the
/// retransmission timeout, in µs. The kernel takes 2 jiffies … 200 ms (it can only lower
/// the system's floor).
pub const TCP_RTO_MIN_US: libc::c_int = 45;

/// Sets TCP_RTO_MIN_US.
pub fn set_rto_min_us(fd: &impl AsRawFd, us: u32) -> io::Result<()> {
    setsockopt_u32(fd.as_raw_fd(), TCP_RTO_MIN_US, us)
}

/// Sets SO_RCVLOWAT: the socket reports readable once this many bytes are queued (see
/// the driver's `lowat` module for what else wakes it).
pub fn set_rcvlowat(fd: &impl AsRawFd, bytes: u32) -> io::Result<()> {
    setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVLOWAT, bytes)
}

/// Sets SO_MAX_PACING_RATE (bytes/s; `u64::MAX`: no ceiling). Without the fq qdisc TCP
/// then paces itself (the socket's pacing status becomes "needed"), so the ceiling holds on
/// any interface.
pub fn set_max_pacing_rate(fd: &impl AsRawFd, bytes_per_s: u64) -> io::Result<()> {
    // SAFETY: valid fd, pointer/length of a live u64 (the kernel reads 64 bits when given 8).
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&bytes_per_s as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads SO_MAX_PACING_RATE back (bytes/s).
pub fn max_pacing_rate(fd: &impl AsRawFd) -> io::Result<u64> {
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: valid fd; the kernel writes at most `len` bytes into `v`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            (&mut v as *mut u64).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

fn setsockopt_u32(fd: RawFd, opt: libc::c_int, v: u32) -> io::Result<()> {
    setsockopt_int(fd, libc::IPPROTO_TCP, opt, v)
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: u32) -> io::Result<()> {
    let v = v as libc::c_int;
    // SAFETY: valid fd, pointer/length of a live c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The prefix of the kernel's `struct tcp_info` (include/uapi/linux/tcp.h) up to
/// `tcpi_total_rto_time` (kernel ≥ 6.7); older kernels fill less of it, and what they leave
/// out is read as absent (see [`tcp_info`]). Declared here because libc's copy differs
/// between C libraries.
#[repr(C)]
#[derive(Default)]
struct TcpInfo {
    state: u8,
    ca_state: u8,
    retransmits: u8,
    probes: u8,
    backoff: u8,
    options: u8,
    wscale: u8,
    app_limited: u8,
    rto: u32,
    ato: u32,
    snd_mss: u32,
    rcv_mss: u32,
    unacked: u32,
    sacked: u32,
    lost: u32,
    retrans: u32,
    fackets: u32,
    last_data_sent: u32,
    last_ack_sent: u32,
    last_data_recv: u32,
    last_ack_recv: u32,
    pmtu: u32,
    rcv_ssthresh: u32,
    rtt: u32,
    rttvar: u32,
    snd_ssthresh: u32,
    snd_cwnd: u32,
    advmss: u32,
    reordering: u32,
    rcv_rtt: u32,
    rcv_space: u32,
    total_retrans: u32,
    pacing_rate: u64,
    max_pacing_rate: u64,
    bytes_acked: u64,
    bytes_received: u64,
    segs_out: u32,
    segs_in: u32,
    notsent_bytes: u32,
    min_rtt: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delivery_rate: u64,
    busy_time: u64,
    rwnd_limited: u64,
    sndbuf_limited: u64,
    delivered: u32,
    delivered_ce: u32,
    bytes_sent: u64,
    bytes_retrans: u64,
    dsack_dups: u32,
    reord_seen: u32,
    rcv_ooopack: u32,
    snd_wnd: u32,
    rcv_wnd: u32,
    rehash: u32,
    total_rto: u16,
    total_rto_recoveries: u16,
    total_rto_time: u32,
}

/// What TCP_INFO says about one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TcpInfoSample {
    pub srtt_us: u32,
    pub cwnd_bytes: u64,
    /// The sender's MSS (bytes).
    pub mss: u32,
    /// TCP's congestion state (`tcpi_ca_state`): 0 open, 1 disorder, 2 CWR, 3 recovery,
    /// 4 loss (after a timeout).
    pub ca_state: u8,
    /// Bytes/s; `None` on kernels without it or before a sample exists.
    pub delivery_rate: Option<u64>,
    pub notsent_bytes: u32,
    pub total_retrans: u32,
    /// Segments sent and not yet acknowledged by TCP.
    pub unacked: u32,
    /// Milliseconds since the last ACK arrived.
    pub last_ack_recv_ms: u32,
    /// Milliseconds since data was last sent.
    pub last_data_sent_ms: u32,
    /// Milliseconds since data last arrived.
    pub last_data_recv_ms: u32,
    /// RTO back-offs in a row (0 while ACKs arrive).
    pub backoff: u8,
    /// Bytes written and not yet through the path: unsent plus the segments sent and not
    /// yet acknowledged, less those the peer has selectively acknowledged (`unacked` −
    /// `sacked`), of the sender's MSS. SACKed segments have arrived and wait only for a
    /// hole's repair, which the path's other bytes do not wait for; on a path that loses
    /// packets they are a window's worth or more, and counting them held FBDT's send limit
    /// on lossy radios to a fraction of what TCP carried (docs/congestion.md). `None` on
    /// kernels without `notsent_bytes`.
    pub unacked_bytes: Option<u64>,
    /// The lowest RTT seen (µs; 0 before a sample).
    pub min_rtt_us: u32,
    /// The current retransmission timeout (µs).
    pub rto_us: u32,
    /// Bytes TCP has seen acknowledged (kernel ≥ 4.1; 0 before).
    pub bytes_acked: u64,
    /// Retransmission timeouts so far (kernel ≥ 6.7); `None` on older kernels.
    pub total_rto: Option<u16>,
}

impl TcpInfoSample {
    /// What the core's stall policy (`fbdt_core::path_policy`) needs from this sample.
    pub fn signals(&self) -> TcpSignals {
        TcpSignals {
            unacked: self.unacked,
            since_last_ack: Duration::from_millis(u64::from(self.last_ack_recv_ms)),
            backoff: self.backoff,
            since_last_send: Duration::from_millis(u64::from(self.last_data_sent_ms)),
            since_last_recv: Duration::from_millis(u64::from(self.last_data_recv_ms)),
            srtt: Duration::from_micros(u64::from(self.srtt_us)),
        }
    }

    /// The core's view of this sample, taken at `now` (the core's clock).
    pub fn to_path_stats(self, now: Instant) -> PathStats {
        PathStats {
            // Jiffy resolution (1–10 ms with HZ), so a silence reads up to a jiffy long or
            // short; only ones of `FbdtConfig::stall_late` (10 ms) and more count.
            ack_silence: (self.unacked > 0).then(|| AckSilence {
                since: now - Duration::from_millis(u64::from(self.last_ack_recv_ms)),
                until: now,
            }),
            srtt: (self.srtt_us > 0).then(|| Duration::from_micros(u64::from(self.srtt_us))),
            delivery_rate_bps: self.delivery_rate.filter(|r| *r > 0).map(|r| r as f64 * 8.0),
            cwnd_bytes: (self.cwnd_bytes > 0).then_some(self.cwnd_bytes),
            unacked_bytes: self.unacked_bytes,
            retransmits: Some(u64::from(self.total_retrans)),
            sampled_at: Some(now),
        }
    }
}

/// Reads TCP_INFO.
pub fn tcp_info(fd: &impl AsRawFd) -> io::Result<TcpInfoSample> {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: valid fd; the kernel writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut TcpInfo).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // A field is there when the kernel wrote up to its end.
    let has = |end: usize| len as usize >= end;
    let full = has(std::mem::offset_of!(TcpInfo, delivery_rate) + 8);
    Ok(TcpInfoSample {
        srtt_us: info.rtt,
        cwnd_bytes: u64::from(info.snd_cwnd) * u64::from(info.snd_mss),
        mss: info.snd_mss,
        ca_state: info.ca_state,
        delivery_rate: full.then_some(info.delivery_rate),
        notsent_bytes: if full { info.notsent_bytes } else { 0 },
        min_rtt_us: if full { info.min_rtt } else { 0 },
        rto_us: info.rto,
        bytes_acked: if full { info.bytes_acked } else { 0 },
        total_rto: has(std::mem::offset_of!(TcpInfo, total_rto) + 2).then_some(info.total_rto),
        total_retrans: info.total_retrans,
        unacked: info.unacked,
        last_ack_recv_ms: info.last_ack_recv,
        last_data_sent_ms: info.last_data_sent,
        last_data_recv_ms: info.last_data_recv,
        backoff: info.backoff,
        unacked_bytes: full.then(|| bytes_in_path(info.notsent_bytes, info.unacked, info.sacked, info.snd_mss)),
    })
}

/// `TcpInfoSample::unacked_bytes`: unsent bytes plus the segments sent, not acknowledged
/// and not selectively acknowledged either. (Also leaving out the segments TCP deems lost
/// and counting their retransmissions, as the kernel's own in-flight count does, measured
/// the same on a 5 %-loss path: the simpler rule stays.)
fn bytes_in_path(notsent: u32, unacked: u32, sacked: u32, mss: u32) -> u64 {
    u64::from(notsent) + u64::from(unacked.saturating_sub(sacked)) * u64::from(mss)
}

/// TCP keepalive (first probe after half of `t`, then probes until about `t`) and
/// TCP_USER_TIMEOUT `t`: a connection whose peer vanished ends within about `t`, idle or
/// not.
pub fn set_dead_peer_timeout(s: &tokio::net::TcpStream, t: std::time::Duration) -> io::Result<()> {
    let sock = socket2::SockRef::from(s);
    let ka = socket2::TcpKeepalive::new()
        .with_time(t / 2)
        .with_interval((t / 6).max(std::time::Duration::from_secs(1)))
        .with_retries(3);
    sock.set_tcp_keepalive(&ka)?;
    sock.set_tcp_user_timeout(Some(t))
}

#[cfg(test)]
mod tests {
    use super::{bytes_in_path, TcpInfoSample};
    use fbdt_core::{AckSilence, Duration, Instant};

    /// Issue 41: a sample tells the core how long TCP has heard no ACK only while it has
    /// segments in flight (an idle connection's last ACK is old, and says nothing).
    #[test]
    fn the_silence_is_told_only_with_segments_in_flight() {
        let now = Instant::from_micros(5_000_000);
        let idle = TcpInfoSample {
            last_ack_recv_ms: 900,
            ..TcpInfoSample::default()
        };
        assert_eq!(idle.to_path_stats(now).ack_silence, None);
        let busy = TcpInfoSample {
            unacked: 12,
            ..idle
        };
        let since = now - Duration::from_millis(900);
        assert_eq!(busy.to_path_stats(now).ack_silence, Some(AckSilence { since, until: now }));
    }

    #[test]
    fn selectively_acknowledged_segments_are_not_in_the_path() {
        // No loss: every unacknowledged segment is on its way.
        assert_eq!(bytes_in_path(1000, 10, 0, 1448), 1000 + 10 * 1448);
        // A hole with 30 segments SACKed behind it: only the 10 others still take the path.
        assert_eq!(bytes_in_path(0, 40, 30, 1448), 10 * 1448);
        // Counters read at slightly different moments never go below nothing in flight.
        assert_eq!(bytes_in_path(500, 3, 5, 1448), 500);
    }

    /// Coupled mode's ceiling reaches the socket as set, and `u64::MAX` lifts it.
    #[test]
    fn a_pacing_ceiling_is_set_and_lifted() {
        let s = std::net::TcpListener::bind("127.0.0.1:0").expect("loopback socket");
        super::set_max_pacing_rate(&s, 12_500_000).expect("SO_MAX_PACING_RATE");
        assert_eq!(super::max_pacing_rate(&s).unwrap(), 12_500_000);
        super::set_max_pacing_rate(&s, u64::MAX).unwrap();
        assert_eq!(super::max_pacing_rate(&s).unwrap(), u64::MAX);
    }
}
