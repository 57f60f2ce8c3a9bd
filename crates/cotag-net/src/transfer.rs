//! A kernel TCP download through the COTAG link: the server (server namespace, on
//! [`SERVER_ADDR`]) writes a seeded pseudo-random stream, the client (client namespace,
//! from [`CLIENT_ADDR`]) reads it. Both ends hash what they wrote / read (SHA-256), the
//! sender reads its kernel's retransmission count (TCP_INFO) at the end and, while it sends,
//! samples its TCP state every [`TCP_SAMPLE_MS`] ms ([`TcpSample`]: RTT, cwnd, congestion
//! state, retransmissions) — what the sender saw of the link, for the bulk-flow trace.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fbdt_emu::{Side, Testbed};
use rand::{RngCore, SeedableRng};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::link::{CLIENT_ADDR, SERVER_ADDR};
use crate::Error;

const CHUNK: usize = 128 * 1024;
const PORT: u16 = 5_201;
const ACCEPT_LIMIT: Duration = Duration::from_secs(15);
/// After the sending time, how long the receiver keeps reading queued bytes.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Cumulative bytes are sampled this often.
const SAMPLE_S: f64 = 0.1;
/// The sender's TCP_INFO is sampled this often (ms), at most [`TCP_SAMPLES_CAP`] times.
pub const TCP_SAMPLE_MS: u64 = 10;
const TCP_SAMPLES_CAP: usize = 100_000;

/// The sender's TCP state at one moment (TCP_INFO).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TcpSample {
    /// Seconds since the connection was accepted.
    pub t: f64,
    /// Smoothed RTT and its variation, µs.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    /// Congestion window, segments.
    pub cwnd: u32,
    /// Segments in flight (sent, not acknowledged).
    pub unacked: u32,
    /// The congestion state: 0 open, 1 disorder, 2 CWR, 3 recovery (fast retransmit),
    /// 4 loss (a retransmission timeout).
    pub ca_state: u8,
    /// Retransmissions so far, and the kernel's reordering estimate (segments).
    pub total_retrans: u32,
    pub reordering: u32,
}

/// How much the server sends.
#[derive(Debug, Clone, Copy)]
pub enum Amount {
    Bytes(u64),
    /// Send for this long; the receiver reads until EOF or `DRAIN_LIMIT` after it.
    Secs(f64),
}

#[derive(Debug, Clone, Serialize)]
pub struct TcpTransfer {
    pub sent: u64,
    pub received: u64,
    pub sent_sha256: String,
    pub received_sha256: String,
    /// Cumulative bytes received every 100 ms since the connection was up: (t_s, bytes).
    pub series: Vec<(f64, u64)>,
    /// Seconds from connect to the last byte read.
    pub secs: f64,
    /// The sender's `tcpi_total_retrans` at the end.
    pub retransmissions: u32,
    /// The sender's TCP state every [`TCP_SAMPLE_MS`] ms while it sent.
    pub tcp_samples: Vec<TcpSample>,
}

impl TcpTransfer {
    /// Everything sent arrived, byte for byte.
    pub fn intact(&self) -> bool {
        self.sent == self.received && self.sent_sha256 == self.received_sha256
    }
}

/// Runs one download through a running [`crate::CotagLink`].
pub fn download(
    tb: &Testbed,
    amount: Amount,
    seed: u64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<TcpTransfer, Error> {
    let listener = tb.run_in(Side::Server, || TcpListener::bind((SERVER_ADDR, PORT)))??;
    let sender = tb.spawn_in(Side::Server, move || send(listener, amount, seed))?;
    let stream = tb.run_in(Side::Client, || -> std::io::Result<TcpStream> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.bind(&SocketAddr::from((CLIENT_ADDR, 0)).into())?;
        s.connect_timeout(&SocketAddr::from((SERVER_ADDR, PORT)).into(), Duration::from_secs(10))?;
        Ok(s.into())
    })?;
    let received = stream
        .map_err(|e| Error::Io("connecting through the COTAG link", e))
        .and_then(|s| receive(s, amount, progress));
    let sent = sender
        .join()
        .map_err(|_| Error::Setup("the sender panicked".into()))??;
    let (received, received_sha256, series, secs) = received?;
    let (sent, sent_sha256, retransmissions, tcp_samples) = sent?;
    Ok(TcpTransfer {
        sent,
        received,
        sent_sha256,
        received_sha256,
        series,
        secs,
        retransmissions,
        tcp_samples,
    })
}

type Sent = (u64, String, u32, Vec<TcpSample>);

fn send(listener: TcpListener, amount: Amount, seed: u64) -> Result<Sent, Error> {
    listener.set_nonblocking(true)?;
    let t0 = Instant::now();
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && t0.elapsed() < ACCEPT_LIMIT => {
                std::thread::sleep(Duration::from_millis(2))
            }
            Err(e) => return Err(Error::Io("accepting the download connection", e)),
        }
    };
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(Duration::from_millis(200)))?;
    let (done, fd) = (AtomicBool::new(false), s.as_raw_fd());
    let (result, samples) = std::thread::scope(|scope| {
        let done = &done;
        // The socket outlives the scope, so its fd stays valid while the sampler reads it.
        let sampler = scope.spawn(move || sample_tcp(fd, done));
        let result = send_stream(&mut s, amount, seed);
        done.store(true, Ordering::Relaxed);
        (result, sampler.join().unwrap_or_default())
    });
    let (sent, hash) = result?;
    let retrans = total_retrans(&s);
    s.shutdown(Shutdown::Write)?;
    // Wait for the reader's close so the last bytes are acknowledged before the socket goes.
    s.set_read_timeout(Some(DRAIN_LIMIT))?;
    let _ = s.read(&mut [0u8; 1]);
    Ok((sent, hash, retrans.max(total_retrans(&s)), samples))
}

/// Samples `fd`'s TCP_INFO every [`TCP_SAMPLE_MS`] until `done`.
fn sample_tcp(fd: std::os::fd::RawFd, done: &AtomicBool) -> Vec<TcpSample> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while !done.load(Ordering::Relaxed) && out.len() < TCP_SAMPLES_CAP {
        if let Some(i) = tcp_info_of(fd) {
            out.push(TcpSample {
                t: t0.elapsed().as_secs_f64(),
                rtt_us: i.tcpi_rtt,
                rttvar_us: i.tcpi_rttvar,
                cwnd: i.tcpi_snd_cwnd,
                unacked: i.tcpi_unacked,
                ca_state: i.tcpi_ca_state,
                total_retrans: i.tcpi_total_retrans,
                reordering: i.tcpi_reordering,
            });
        }
        std::thread::sleep(Duration::from_millis(TCP_SAMPLE_MS));
    }
    out
}

/// Writes the seeded stream for `amount`; returns the bytes written and their SHA-256.
fn send_stream(s: &mut TcpStream, amount: Amount, seed: u64) -> Result<(u64, String), Error> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut hash = Sha256::new();
    let mut chunk = vec![0u8; CHUNK];
    let (mut sent, started) = (0u64, Instant::now());
    loop {
        let want = match amount {
            Amount::Bytes(n) if sent >= n => break,
            Amount::Bytes(n) => (n - sent).min(CHUNK as u64) as usize,
            Amount::Secs(t) if started.elapsed().as_secs_f64() >= t => break,
            Amount::Secs(_) => CHUNK,
        };
        rng.fill_bytes(&mut chunk[..want]);
        let mut off = 0;
        while off < want {
            match s.write(&chunk[off..want]) {
                Ok(n) => {
                    hash.update(&chunk[off..off + n]);
                    off += n;
                }
                Err(e) if crate::io::nothing_now(&e) || e.kind() == std::io::ErrorKind::TimedOut => {
                    if let Amount::Secs(t) = amount {
                        if started.elapsed().as_secs_f64() >= t + DRAIN_LIMIT.as_secs_f64() {
                            return Err(Error::Setup("the sender was blocked past the drain limit".into()));
                        }
                    }
                }
                Err(e) => return Err(Error::Io("sending the download", e)),
            }
        }
        sent += want as u64;
    }
    Ok((sent, hex(&hash.finalize())))
}

type Received = (u64, String, Vec<(f64, u64)>, f64);

fn receive(mut s: TcpStream, amount: Amount, progress: &(dyn Fn(f64) + Sync)) -> Result<Received, Error> {
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let hard_stop = match amount {
        Amount::Secs(t) => Some(t + DRAIN_LIMIT.as_secs_f64()),
        Amount::Bytes(_) => None,
    };
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let t0 = Instant::now();
    let (mut bytes, mut series, mut next_tick) = (0u64, vec![(0.0, 0u64)], SAMPLE_S);
    let mut last_progress = 0.0;
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hash.update(&buf[..n]);
                bytes += n as u64;
            }
            Err(e) if crate::io::nothing_now(&e) || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(Error::Io("receiving the download", e)),
        }
        let t = t0.elapsed().as_secs_f64();
        while t >= next_tick {
            series.push((next_tick, bytes));
            next_tick += SAMPLE_S;
        }
        if t - last_progress >= SAMPLE_S {
            progress(t);
            last_progress = t;
        }
        if hard_stop.is_some_and(|h| t > h) {
            break;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    series.push((secs, bytes));
    Ok((bytes, hex(&hash.finalize()), series, secs))
}

/// `tcpi_total_retrans` of a connected socket (0 if the kernel refuses TCP_INFO).
fn total_retrans(s: &TcpStream) -> u32 {
    total_retrans_of(s.as_raw_fd()).unwrap_or(0)
}

/// `tcpi_total_retrans` of a connected TCP socket; None if the kernel refuses TCP_INFO.
pub fn total_retrans_of(fd: std::os::fd::RawFd) -> Option<u32> {
    tcp_info_of(fd).map(|i| i.tcpi_total_retrans)
}

/// TCP_INFO of a connected TCP socket; None if the kernel refuses it.
fn tcp_info_of(fd: std::os::fd::RawFd) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; getsockopt writes at most `len` bytes into it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(info)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
