//! A small bulk-transfer and connect-time probe for calibration and tests: the server
//! sends, the client counts (the download direction of every scheme).

use std::{
    io::{Read, Write},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    sync::mpsc,
    time::{Duration, Instant},
};

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

/// The in-order delivery delay of a stamped download (see [`crate::stamp`]), µs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamDelay {
    /// One per followed offset the client read.
    pub delays_us: Vec<u64>,
    /// Followed offsets the server wrote that the client never read: their age when the
    /// client stopped reading.
    pub undelivered_age_us: Vec<u64>,
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
    transfer(tb, client, server, proto, secs, warmup_s, progress, false).map(|(t, _)| t)
}

/// [`download`] with the in-order delivery delay: the stream carries time stamps, and the
/// sender runs with TCP_NOTSENT_LOWAT and non-blocking writes after `poll` ([`crate::stamp`]).
pub fn download_with_delay(
    tb: &Testbed,
    client: usize,
    server: usize,
    proto: Proto,
    secs: f64,
    progress: Option<&(dyn Fn(f64, f64) + Sync)>,
) -> Result<(Transfer, StreamDelay)> {
    let (t, d) = transfer(tb, client, server, proto, secs, 0.0, progress, true)?;
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

#[allow(clippy::too_many_arguments)]
fn transfer(
    tb: &Testbed,
    client: usize,
    server: usize,
    proto: Proto,
    secs: f64,
    warmup_s: f64,
    progress: Option<&(dyn Fn(f64, f64) + Sync)>,
    stamped: bool,
) -> Result<(Transfer, Option<StreamDelay>)> {
    let (cp, sp) = (&tb.paths()[client], &tb.paths()[server]);
    let l = listen(tb, sp.server_ip, proto)?;
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
    let (mut s, _) = connect_from(tb, cp.client_ip, dst, proto)?;
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
    let delay = reader.map(|r| StreamDelay {
        // A stamp the client read only in part was not delivered.
        undelivered_age_us: stamps
            .iter()
            .flat_map(|st| st.written_from(r.offset().saturating_sub(stamp::STAMP_LEN - 1)))
            .map(|(_, us)| end_us.saturating_sub(us))
            .collect(),
        delays_us: r.delays_us,
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
