//! A small bulk-transfer and connect-time probe for calibration and tests: the server
//! sends, the client counts (the download direction of every scheme).

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    sync::mpsc,
    time::{Duration, Instant},
};

use fbdt_core::delay_probe::DelaySamples;
use serde::Serialize;
use socket2::{Domain, Protocol, Socket, Type};

use crate::{
    error::{Error, Result},
    stamp::{self, StampReader, Stamper},
    testbed::{Side, Testbed},
};

/// Which socket: plain TCP or kernel MPTCP (`libc::IPPROTO_MPTCP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Proto {
    Tcp,
    Mptcp,
}

fn socket(proto: Proto) -> std::io::Result<Socket> {
    let p = match proto {
        Proto::Tcp => Protocol::TCP,
        Proto::Mptcp => Protocol::from(libc::IPPROTO_MPTCP),
    };
    Socket::new(Domain::IPV4, Type::STREAM, Some(p))
}

fn io(op: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Socket { op, source }
}

/// A listener in the server namespace on `ip`, port chosen by the kernel.
fn listen(tb: &Testbed, ip: Ipv4Addr, proto: Proto) -> Result<TcpListener> {
    tb.run_in(Side::Server, || -> Result<TcpListener> {
        let s = socket(proto).map_err(io("socket"))?;
        s.set_reuse_address(true).map_err(io("SO_REUSEADDR"))?;
        s.bind(&SocketAddr::V4(SocketAddrV4::new(ip, 0)).into())
            .map_err(io("bind"))?;
        s.listen(16).map_err(io("listen"))?;
        Ok(s.into())
    })?
}

fn accept_within(l: &TcpListener, limit: Duration) -> Result<TcpStream> {
    l.set_nonblocking(true).map_err(io("nonblocking"))?;
    let t0 = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(io("blocking"))?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && t0.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(io("accept")(e)),
        }
    }
}

/// A client socket bound to `src` (so policy routing sends it by that path), connected to
/// `dst`. Created in the client namespace.
fn connect_from(tb: &Testbed, src: Ipv4Addr, dst: SocketAddr, proto: Proto) -> Result<(TcpStream, Duration)> {
    tb.run_in(Side::Client, || -> Result<(TcpStream, Duration)> {
        let s = socket(proto).map_err(io("socket"))?;
        s.bind(&SocketAddr::V4(SocketAddrV4::new(src, 0)).into())
            .map_err(io("bind"))?;
        let t0 = Instant::now();
        s.connect_timeout(&dst.into(), Duration::from_secs(5))
            .map_err(io("connect"))?;
        Ok((s.into(), t0.elapsed()))
    })?
}

/// Result of one download.
#[derive(Debug, Clone, Serialize)]
pub struct Transfer {
    /// Bytes the client received.
    pub bytes: u64,
    /// Seconds from the first byte's connection to the end of the transfer.
    pub secs: f64,
    /// Goodput after the warm-up (slow start excluded), Mbit/s.
    pub goodput_mbps: f64,
    /// Cumulative bytes received, sampled every 100 ms: (t_s, bytes).
    pub series: Vec<(f64, u64)>,
}

impl Transfer {
    /// Bytes received by `t_s`, interpolated between the samples around it (a reader's
    /// samples fall a little after their 100-ms marks; the last one before the end may
    /// fall just past it). Everything, if the series ends before `t_s`.
    pub fn bytes_by(&self, t_s: f64) -> u64 {
        bytes_by(&self.series, t_s)
    }
}

/// [`Transfer::bytes_by`] over any cumulative `(t_s, bytes)` series, sorted by time.
pub fn bytes_by(series: &[(f64, u64)], t_s: f64) -> u64 {
    let after = series.partition_point(|&(t, _)| t <= t_s);
    match (after.checked_sub(1).map(|i| series[i]), series.get(after)) {
        (None, _) => 0,
        (Some((_, b)), None) => b,
        (Some((t0, b0)), Some(&(t1, b1))) => {
            let share = if t1 > t0 { (t_s - t0) / (t1 - t0) } else { 0.0 };
            b0 + (b1.saturating_sub(b0) as f64 * share).round() as u64
        }
    }
}

/// The server (at `server` path's server address) sends for `secs` seconds to a client
/// bound to `client` path's address; returns what the client received. `progress` is
/// called about once a second with (elapsed s, Mbit/s over the last second).
pub fn download(
    tb: &Testbed,
    client: usize,
    server: usize,
    proto: Proto,
    secs: f64,
    warmup_s: f64,
    progress: Option<&(dyn Fn(f64, f64) + Sync)>,
) -> Result<Transfer> {
    let ends = (tb.paths()[client].client_ip, tb.paths()[server].server_ip);
    transfer(tb, ends, proto, secs, warmup_s, progress, false).map(|(t, _)| t)
}

/// A single-path TCP download for `secs` seconds over `path`'s addresses: one of the
/// testbed's [`Testbed::competitors`] (a competing flow at a shared bottleneck) or a path.
pub fn download_over(tb: &Testbed, path: &crate::PathInfo, secs: f64) -> Result<Transfer> {
    transfer(tb, (path.client_ip, path.server_ip), Proto::Tcp, secs, 0.0, None, false).map(|(t, _)| t)
}

/// [`download`] with the in-order delivery delay (µs; offsets the client never read are
/// aged to when it stopped reading): the stream carries time stamps, and the sender runs
/// with TCP_NOTSENT_LOWAT and non-blocking writes after `poll` ([`crate::stamp`]).
pub fn download_with_delay(
    tb: &Testbed,
    client: usize,
    server: usize,
    proto: Proto,
    secs: f64,
    progress: Option<&(dyn Fn(f64, f64) + Sync)>,
) -> Result<(Transfer, DelaySamples)> {
    let ends = (tb.paths()[client].client_ip, tb.paths()[server].server_ip);
    let (t, d) = transfer(tb, ends, proto, secs, 0.0, progress, true)?;
    Ok((t, d.unwrap_or_default()))
}

/// What the sending thread reports: bytes written and, when stamping, its stamps.
type Sent = Result<(u64, Option<Stamper>)>;

/// Writes for `dur`: plain blocking writes, or stamped non-blocking ones (`origin`: the
/// shared clock's zero).
fn send(s: &mut TcpStream, dur: Duration, origin: Option<Instant>) -> Sent {
    let mut buf = vec![0x5au8; 128 * 1024];
    let mut stamper = origin.map(|_| Stamper::new());
    if stamper.is_some() {
        stamp::set_notsent_lowat(s, stamp::NOTSENT_LOWAT).map_err(io("TCP_NOTSENT_LOWAT"))?;
        s.set_nonblocking(true).map_err(io("nonblocking"))?;
    }
    let t0 = Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < dur {
        let mut now_us = 0;
        if let (Some(st), Some(origin)) = (stamper.as_ref(), origin) {
            if !stamp::wait_writable(s, 200) {
                continue;
            }
            now_us = origin.elapsed().as_micros() as u64;
            st.fill(&mut buf, now_us);
        }
        match s.write(&buf) {
            Ok(n) => {
                sent += n as u64;
                if let Some(st) = stamper.as_mut() {
                    st.advance(n, now_us);
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(io("send")(e)),
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    Ok((sent, stamper))
}

/// `ends`: the client's address (its path) and the server's.
fn transfer(
    tb: &Testbed,
    (client_ip, server_ip): (Ipv4Addr, Ipv4Addr),
    proto: Proto,
    secs: f64,
    warmup_s: f64,
    progress: Option<&(dyn Fn(f64, f64) + Sync)>,
    stamped: bool,
) -> Result<(Transfer, Option<DelaySamples>)> {
    let l = listen(tb, server_ip, proto)?;
    let dst = l.local_addr().map_err(io("local_addr"))?;
    let dur = Duration::from_secs_f64(secs);
    let origin = Instant::now();
    let (tx, rx) = mpsc::channel::<Sent>();
    let sender = std::thread::spawn(move || {
        let r = (|| -> Sent {
            let mut s = accept_within(&l, Duration::from_secs(10))?;
            s.set_write_timeout(Some(Duration::from_millis(200)))
                .map_err(io("SO_SNDTIMEO"))?;
            send(&mut s, dur, stamped.then_some(origin))
        })();
        let _ = tx.send(r);
    });
    let mut reader = stamped.then(StampReader::new);
    let (mut s, _) = connect_from(tb, client_ip, dst, proto)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(io("SO_RCVTIMEO"))?;
    let mut buf = vec![0u8; 256 * 1024];
    let t0 = Instant::now();
    let hard_stop = dur + Duration::from_secs(5);
    let (mut bytes, mut series) = (0u64, vec![(0.0, 0u64)]);
    let (mut next_tick, mut last_report) = (0.1f64, (0.0f64, 0u64));
    // Samples taken right after the socket was drained (a short read): the byte count is
    // then exact at that instant, whereas a reader that fell behind (a busy CPU) would
    // otherwise count backlog late and overstate the goodput of a window.
    let mut drained: Vec<(f64, u64)> = vec![(0.0, 0)];
    loop {
        let short = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                bytes += n as u64;
                if let Some(r) = reader.as_mut() {
                    r.on_read(&buf[..n], origin.elapsed().as_micros() as u64);
                }
                n < buf.len()
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => true,
            Err(e) => return Err(io("recv")(e)),
        };
        let t = t0.elapsed().as_secs_f64();
        if short {
            drained.push((t, bytes));
        }
        while t >= next_tick {
            series.push((next_tick, bytes));
            next_tick += 0.1;
        }
        if let Some(p) = progress {
            if t - last_report.0 >= 1.0 {
                p(t, (bytes - last_report.1) as f64 * 8.0 / (t - last_report.0) / 1e6);
                last_report = (t, bytes);
            }
        }
        if t0.elapsed() > hard_stop {
            break;
        }
    }
    let secs_total = t0.elapsed().as_secs_f64();
    let end_us = origin.elapsed().as_micros() as u64;
    series.push((secs_total, bytes));
    drop(s);
    let _ = sender.join();
    let stamps = match rx.try_recv() {
        Ok(Err(e)) => return Err(e),
        Ok(Ok((_, stamps))) => stamps,
        Err(_) => None,
    };
    let delay = reader.map(|r| DelaySamples {
        // A stamp the client read only in part was not delivered.
        undelivered_age_us: stamps
            .iter()
            .flat_map(|st| st.written_from(r.offset().saturating_sub(stamp::STAMP_LEN - 1)))
            .map(|(_, us)| end_us.saturating_sub(us))
            .collect(),
        delivered: r.delays_us.seen(),
        delays_us: r.delays_us.values().to_vec(),
        unmatched: 0,
    });
    // Goodput between the first sample at/after the warm-up and the end of sending.
    let end_t = secs.min(secs_total);
    let a = drained
        .iter()
        .find(|(t, _)| *t >= warmup_s)
        .copied()
        .unwrap_or((0.0, 0));
    let b = drained
        .iter()
        .rev()
        .find(|(t, _)| *t <= end_t + 1e-9)
        .copied()
        .unwrap_or((secs_total, bytes));
    let goodput_mbps = if b.0 > a.0 {
        (b.1 - a.1) as f64 * 8.0 / (b.0 - a.0) / 1e6
    } else {
        0.0
    };
    let t = Transfer {
        bytes,
        secs: secs_total,
        goodput_mbps,
        series,
    };
    Ok((t, delay))
}

/// Median TCP connect time (SYN → SYN/ACK: one round trip) over `n` connects on path
/// `path`, in ms. The path should be idle.
pub fn connect_rtt_ms(tb: &Testbed, path: usize, n: usize) -> Result<f64> {
    let p = &tb.paths()[path];
    let l = listen(tb, p.server_ip, Proto::Tcp)?;
    let dst = l.local_addr().map_err(io("local_addr"))?;
    let acceptor = std::thread::spawn(move || {
        for _ in 0..n {
            if accept_within(&l, Duration::from_secs(10)).is_err() {
                break;
            }
        }
    });
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let (_s, d) = connect_from(tb, p.client_ip, dst, Proto::Tcp)?;
        v.push(d.as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = acceptor.join();
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 MB/s sampled every 100 ms, each sample `late_s` after its mark.
    fn steady(late_s: f64) -> Vec<(f64, u64)> {
        let mut s = vec![(0.0, 0)];
        for k in 1..=101u64 {
            let t = k as f64 * 0.1 + late_s;
            s.push((t, (t * 1e8) as u64));
        }
        s
    }

    #[test]
    fn bytes_by_the_end_count_the_last_interval_whatever_the_sample_lateness() {
        // Samples on their marks (the kernel reader) and 0.4 ms late (FBDT's reader, whose
        // last sample before 10 s then lies past it): both give 10 s of bytes.
        for late in [0.0, 0.0004, 0.03] {
            let b = bytes_by(&steady(late), 10.0);
            assert!((b as f64 - 1e9).abs() <= 1.0, "late {late}: {b}");
        }
        // The rule it replaces, the last sample at or before the end, lost an interval.
        let late = steady(0.0004);
        let old = late.iter().take_while(|&&(t, _)| t <= 10.0 + 1e-6).last().unwrap().1;
        assert!(old < 991_000_000, "{old}");
    }

    #[test]
    fn bytes_by_interpolates_inside_and_holds_outside_the_series() {
        let s = [(0.0, 0), (0.1, 1000), (0.2, 1000), (0.3, 4000)];
        assert_eq!(bytes_by(&s, 0.05), 500);
        assert_eq!(bytes_by(&s, 0.15), 1000, "nothing arrived in that interval");
        assert_eq!(bytes_by(&s, 0.25), 2500);
        assert_eq!(bytes_by(&s, 9.0), 4000, "everything, after the last sample");
        assert_eq!(bytes_by(&s, -1.0), 0);
        assert_eq!(bytes_by(&[], 1.0), 0);
    }
}
