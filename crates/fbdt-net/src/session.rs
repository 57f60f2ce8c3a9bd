//! The application's handle to a session (`Session`, AsyncRead + AsyncWrite) and the
//! counters it reads. It talks to the session's task (the driver, `driver.rs`) through two
//! bounded channels of byte chunks, so the hot path takes no lock.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use fbdt_core::Role;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;

/// Most bytes in one message between the application and the driver (one write's copy, or
/// one batch of received slices). Large, so that the two tasks — often on two threads —
/// wake each other once per 256 KiB, not once per segment: on loopback those wake-ups
/// cost more CPU than the copies.
pub(crate) const CHUNK: usize = 256 * 1024;
/// Messages each channel holds: 4 × 256 KiB = 1 MiB per direction on top of the core's
/// buffers.
pub(crate) const CHANNEL_CHUNKS: usize = 4;
pub(crate) enum Cmd {
    Data(Bytes),
    Finish(oneshot::Sender<Result<(), String>>),
}

pub(crate) struct NewPath {
    pub index: u8,
    pub stream: crate::secure::PathStream,
    pub first: Vec<u8>,
    /// Server: the connection's place in the server's connection count.
    pub ticket: Option<crate::admission::ConnTicket>,
}

/// A snapshot of one path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathReport {
    /// A TCP connection is open for this path.
    pub connected: bool,
    /// A connection is open but not yet authenticated, so it carries no data: before the
    /// HELLOs, or (client) while its JOIN awaits the server's verified answer — dropped and
    /// re-dialled without one within `NetConfig::handshake_timeout`. A path is up when
    /// `connected && !joining`.
    pub joining: bool,
    /// Payload bytes we handed to this path (first copies and redundant ones).
    pub bytes_sent: u64,
    /// Payload bytes that arrived on this path (duplicates included).
    pub bytes_received: u64,
    /// From TCP_INFO.
    pub srtt_us: u32,
    pub cwnd_bytes: u64,
    pub delivery_rate_bps: f64,
    /// Connections opened for this path after the first.
    pub reconnects: u32,
    /// A fresh connection is being dialled beside the live one (the path looked stalled);
    /// it takes over if it proves better.
    pub probing: bool,
    /// Connections of this path whose TLS handshake resumed an earlier TLS session (a
    /// re-join without a certificate exchange).
    pub tls_resumed: u32,
    /// The controller in force and what it did (`crate::congestion`).
    pub cc: crate::PathCcReport,
}

/// Counters of a session, refreshed every `NetConfig::stats_interval`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionStats {
    pub bytes_written: u64,
    pub bytes_acked: u64,
    /// Bytes of the peer's stream delivered in order.
    pub bytes_delivered: u64,
    pub redundant_bytes_sent: u64,
    pub redundant_bytes_received: u64,
    pub windows_loaded: u64,
    /// Times the session's task woke (was polled): the runtime's per-wake-up cost is paid
    /// this often.
    pub wakeups: u64,
    /// What the wake-ups found: the core's timer due, socket reads that returned bytes,
    /// socket writes (one batch each).
    pub timer_fires: u64,
    pub reads: u64,
    pub writes: u64,
    /// Receive low-water marks set or cleared (one system call each), and marks that were
    /// not met within `NetConfig::recv_lowat_fallback`, over every path's connections.
    pub lowat_changes: u64,
    pub lowat_fallbacks: u64,
    /// TCP_INFO reads between stats ticks because the core's send limit, counted from the
    /// transport's ACKs, waited on them (`FbdtConfig::in_flight_from_transport`).
    pub transport_reports: u64,
    pub paths: Vec<PathReport>,
    /// Every counter of the protocol core, both directions (re-alignments, stalls, peak
    /// out-of-order bytes, the meta layer's peak receive-buffer occupancy, ...).
    pub core: fbdt_core::ConnectionStats,
}

/// The delay probe's marks (`NetConfig::delay_marks`) on the process's monotonic clock:
/// (stream offset, when). Both ends of a session in one process (the lab's testbed runs)
/// share that clock, so one end's `sent` joins the other's `delivered` by offset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DelayMarks {
    /// First transmissions of our stream's followed offsets.
    pub sent: Vec<(u64, std::time::Instant)>,
    /// In-order deliveries of the peer's stream's followed offsets.
    pub delivered: Vec<(u64, std::time::Instant)>,
    /// Marks dropped here past [`MAX_HELD_MARKS`] per side (nobody took them).
    pub lost: u64,
    /// Marks the core's probe dropped (its queue overflowed between two stats ticks),
    /// since the session began.
    pub core_lost: u64,
}

/// Most marks a session holds per side until the application takes them: 4 Mi, 64 GiB of
/// stream at the probe's 16 KiB step (about 100 MB of marks).
pub const MAX_HELD_MARKS: usize = 1 << 22;

impl DelayMarks {
    /// Moves the core's queued marks here; `epoch` is the driver's time origin.
    pub(crate) fn collect(&mut self, probe: &mut fbdt_core::delay_probe::DelayProbe, epoch: std::time::Instant) {
        let at = |m: fbdt_core::delay_probe::DelayMark| {
            (m.offset, epoch + std::time::Duration::from_micros(m.at.as_micros()))
        };
        let lost = &mut self.lost;
        let mut hold = |v: &mut Vec<(u64, std::time::Instant)>, mark| {
            if v.len() < MAX_HELD_MARKS {
                v.push(at(mark));
            } else {
                *lost += 1;
            }
        };
        probe.take_sent().for_each(|m| hold(&mut self.sent, m));
        probe.take_delivered().for_each(|m| hold(&mut self.delivered, m));
        self.core_lost = probe.lost_marks();
    }
}

/// What the driver publishes and the application reads.
#[derive(Default)]
pub(crate) struct Shared {
    pub stats: Mutex<SessionStats>,
    pub delay_marks: Mutex<DelayMarks>,
    pub error: Mutex<Option<String>>,
    pub token: std::sync::OnceLock<[u8; 8]>,
    /// Server: the address path 0 (the HELLO) came from.
    pub peer: std::sync::OnceLock<std::net::SocketAddr>,
    /// Server: the fingerprint of the client's certificate on path 0, if it showed one.
    pub client_identity: std::sync::OnceLock<String>,
}

impl Shared {
    /// Records why the session failed (the first reason wins).
    pub fn set_error(&self, e: String) {
        if let Ok(mut g) = self.error.lock() {
            g.get_or_insert(e);
        }
    }

    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    pub fn stats(&self) -> SessionStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// An FBDT session: a reliable byte stream in each direction over N TCP connections.
/// `poll_shutdown` ends our direction and resolves once the peer acknowledged every byte;
/// reading returns EOF after the peer's stream ended.
pub struct Session {
    cmd: PollSender<Cmd>,
    rx: mpsc::Receiver<Vec<Bytes>>,
    /// The batch being read, front first (reversed: the next slice is last).
    cur: Vec<Bytes>,
    shutdown: Option<oneshot::Receiver<Result<(), String>>>,
    shared: Arc<Shared>,
    role: Role,
}

impl Session {
    /// The application's end of the driver's channels.
    pub(crate) fn new(cmd: mpsc::Sender<Cmd>, rx: mpsc::Receiver<Vec<Bytes>>, shared: Arc<Shared>, role: Role) -> Self {
        Session {
            cmd: PollSender::new(cmd),
            rx,
            cur: Vec::new(),
            shutdown: None,
            shared,
            role,
        }
    }

    /// The latest counters (at most one `stats_interval` old).
    pub fn stats(&self) -> SessionStats {
        self.shared.stats()
    }
    /// A handle that reads the counters while the session is split or moved.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.shared.clone())
    }
    /// Why the session failed, if it did.
    pub fn error(&self) -> Option<String> {
        self.shared.error()
    }
    /// The session token JOINs carry (diagnostics; not a secret: it crosses in clear).
    pub fn token(&self) -> Option<[u8; 8]> {
        self.shared.token.get().copied()
    }
    /// Server: the client's address (where its HELLO came from).
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.shared.peer.get().copied()
    }
    /// Server: the SHA-256 fingerprint (`sha256:HEX`) of the certificate the client
    /// presented on path 0, when the server asked for one (`--client-ca`).
    pub fn client_identity(&self) -> Option<&str> {
        self.shared.client_identity.get().map(String::as_str)
    }
    pub fn is_client(&self) -> bool {
        self.role == Role::Client
    }

    /// Queues `data` without copying it: the frames that carry it are slices of it, and the
    /// kernel copies straight from its memory. For applications that already hold `Bytes`
    /// (a file read into memory, a message being forwarded, a benchmark's one buffer);
    /// `AsyncWrite` copies each write once. Waits while the session's buffers are full, as
    /// a write does; an error means the session ended.
    pub async fn write_chunk(&mut self, mut data: Bytes) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_write_chunk(cx, &mut data)).await
    }

    /// [`write_chunk`](Self::write_chunk) as a poll (for a writer inside a `poll` of its
    /// own, e.g. a multiplexer's): hands `data` over piece by piece, advancing it, and
    /// resolves once all of it is queued. Cancel-safe: what was taken is gone from `data`.
    pub fn poll_write_chunk(&mut self, cx: &mut Context<'_>, data: &mut Bytes) -> Poll<io::Result<()>> {
        if self.shutdown.is_some() {
            return Poll::Ready(Err(broken("write after shutdown")));
        }
        while !data.is_empty() {
            if ready!(self.cmd.poll_reserve(cx)).is_err() {
                return Poll::Ready(Err(broken(self.error().unwrap_or_else(|| "session ended".into()))));
            }
            let piece = data.split_to(data.len().min(CHUNK));
            if self.cmd.send_item(Cmd::Data(piece)).is_err() {
                return Poll::Ready(Err(broken("session ended")));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl Session {
    /// Takes the next run of the peer's in-order bytes as it arrived: a slice of the
    /// driver's read buffer, not a copy (`AsyncRead` copies each byte once more into the
    /// caller's buffer). `None` at the end of the peer's stream; an error if the session
    /// failed. Mixing it with `AsyncRead` reads is fine: both take from the same queue.
    pub async fn read_chunk(&mut self) -> io::Result<Option<Bytes>> {
        std::future::poll_fn(|cx| self.poll_read_chunk(cx)).await
    }

    /// [`read_chunk`](Self::read_chunk) as a poll.
    pub fn poll_read_chunk(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<Bytes>>> {
        loop {
            if let Some(b) = self.cur.pop() {
                if !b.is_empty() {
                    return Poll::Ready(Ok(Some(b)));
                }
                continue;
            }
            let batch = ready!(self.rx.poll_recv(cx));
            if !self.take_batch(batch)? {
                return Poll::Ready(Ok(None));
            }
        }
    }

    /// Makes a batch from the driver the one being read; false at the end of the peer's
    /// stream (`None`), an error if the session failed.
    fn take_batch(&mut self, batch: Option<Vec<Bytes>>) -> io::Result<bool> {
        match batch {
            Some(mut batch) => {
                batch.reverse();
                self.cur = batch;
                Ok(true)
            }
            None => match self.error() {
                Some(e) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, e)),
                None => Ok(false),
            },
        }
    }
}

/// Reads a session's counters from anywhere (cheap to clone).
#[derive(Clone)]
pub struct StatsHandle(Arc<Shared>);

impl StatsHandle {
    pub fn stats(&self) -> SessionStats {
        self.0.stats()
    }
    /// Takes the delay probe's marks gathered so far (empty unless
    /// `NetConfig::delay_marks`); the driver adds the last ones when the session ends.
    pub fn take_delay_marks(&self) -> DelayMarks {
        self.0
            .delay_marks
            .lock()
            .map(|mut m| std::mem::take(&mut *m))
            .unwrap_or_default()
    }
    pub fn error(&self) -> Option<String> {
        self.0.error()
    }
}

fn broken(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, msg.into())
}

impl AsyncRead for Session {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        let start = buf.filled().len();
        // Fill `buf` from the batches at hand; wait only if nothing was copied.
        while buf.remaining() > 0 {
            if let Some(b) = me.cur.last_mut() {
                let n = b.len().min(buf.remaining());
                buf.put_slice(&b[..n]);
                b.advance(n);
                if b.is_empty() {
                    me.cur.pop();
                }
                continue;
            }
            let next = if buf.filled().len() > start {
                match me.rx.try_recv() {
                    Ok(batch) => Some(batch),
                    Err(_) => break,
                }
            } else {
                ready!(me.rx.poll_recv(cx))
            };
            if !me.take_batch(next)? {
                return Poll::Ready(Ok(()));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Session {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = &mut *self;
        if me.shutdown.is_some() {
            return Poll::Ready(Err(broken("write after shutdown")));
        }
        if ready!(me.cmd.poll_reserve(cx)).is_err() {
            return Poll::Ready(Err(broken(me.error().unwrap_or_else(|| "session ended".into()))));
        }
        let n = buf.len().min(CHUNK);
        if me.cmd.send_item(Cmd::Data(Bytes::copy_from_slice(&buf[..n]))).is_err() {
            return Poll::Ready(Err(broken("session ended")));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = &mut *self;
        if me.shutdown.is_none() {
            if ready!(me.cmd.poll_reserve(cx)).is_err() {
                return Poll::Ready(Err(broken(me.error().unwrap_or_else(|| "session ended".into()))));
            }
            let (tx, rx) = oneshot::channel();
            if me.cmd.send_item(Cmd::Finish(tx)).is_err() {
                return Poll::Ready(Err(broken("session ended")));
            }
            me.shutdown = Some(rx);
        }
        let rx = me.shutdown.as_mut().expect("set above");
        Poll::Ready(match ready!(Pin::new(rx).poll(cx)) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(broken(e)),
            Err(_) => Err(broken(me.error().unwrap_or_else(|| {
                "session ended before the peer acknowledged everything".into()
            }))),
        })
    }
}
