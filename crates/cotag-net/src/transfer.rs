//! A kernel TCP download through the COTAG link: the server (server namespace, on
//! [`SERVER_ADDR`]) writes a seeded pseudo-random stream, the client (client namespace,
//! from [`CLIENT_ADDR`]) reads it. Both ends hash what they wrote / read (SHA-256), the
//! sender reads its kernel's retransmission count (TCP_INFO) at the end.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
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
    let (sent, sent_sha256, retransmissions) = sent?;
    Ok(TcpTransfer {
        sent,
        received,
        sent_sha256,
        received_sha256,
        series,
        secs,
        retransmissions,
    })
}

type Sent = (u64, String, u32);

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
    let retrans = total_retrans(&s);
    s.shutdown(Shutdown::Write)?;
    // Wait for the reader's close so the last bytes are acknowledged before the socket goes.
    s.set_read_timeout(Some(DRAIN_LIMIT))?;
    let _ = s.read(&mut [0u8; 1]);
    Ok((sent, hex(&hash.finalize()), retrans.max(total_retrans(&s))))
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
    (rc == 0).then_some(info.tcpi_total_retrans)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
