//! One session: the task that owns the `Connection` (the driver) and the application's
//! handle to it (`Session`, AsyncRead + AsyncWrite). They talk through two bounded channels
//! of byte chunks, so the hot path takes no lock.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration as StdDuration;

use bytes::{Buf, Bytes, BytesMut};
use fbdt_core::wire::{prepare_recv_buf, FrameBuf};
use fbdt_core::{max_frame_len, Event, Instant, PathId, Role};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;
use tokio_util::sync::PollSender;

use crate::sockopt;
use crate::{Error, NetConfig, PathSpec};

/// Most bytes in one message between the application and the driver (one write's copy, or
/// one batch of received slices). Large, so that the two tasks — often on two threads —
/// wake each other once per 256 KiB, not once per segment: on loopback those wake-ups
/// cost more CPU than the copies.
const CHUNK: usize = 256 * 1024;
/// Messages each channel holds: 4 × 256 KiB = 1 MiB per direction on top of the core's
/// buffers.
const CHANNEL_CHUNKS: usize = 4;
/// Bytes of frames gathered for one write(2) on a path.
const WRITE_BATCH: usize = 64 * 1024;
/// Reads per path per driver step (each up to `wire::RECV_BLOCK` bytes), so one busy path
/// cannot starve the others.
const READS_PER_STEP: usize = 16;
/// Driver steps per poll before yielding to the scheduler.
const STEPS_PER_POLL: usize = 32;
/// A client that has everything keeps pumping this long so its last ACKs go out, then
/// half-closes its connections.
const CLIENT_LINGER: StdDuration = StdDuration::from_millis(50);
/// A probe's connect attempt is abandoned after this long and a new SYN is sent: the first
/// SYN's retransmission timer is 1 s, so a link that came back is found within ~this.
const PROBE_CONNECT: StdDuration = StdDuration::from_millis(300);
/// After finishing (or a CLOSE), the longest wait for the peer to close the connections.
const END_LINGER: StdDuration = StdDuration::from_secs(3);

pub(crate) enum Cmd {
    Data(Bytes),
    Finish(oneshot::Sender<Result<(), String>>),
}

pub(crate) struct NewPath {
    pub index: u8,
    pub stream: TcpStream,
    pub first: Vec<u8>,
}

pub(crate) struct Dialer {
    pub specs: Vec<PathSpec>,
}

/// A snapshot of one path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathReport {
    /// A TCP connection is open for this path.
    pub connected: bool,
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
    pub paths: Vec<PathReport>,
    /// Every counter of the protocol core, both directions (re-alignments, stalls, peak
    /// out-of-order bytes, the meta layer's peak receive-buffer occupancy, ...).
    pub core: fbdt_core::ConnectionStats,
}

#[derive(Default)]
struct Shared {
    stats: Mutex<SessionStats>,
    error: Mutex<Option<String>>,
    token: std::sync::OnceLock<[u8; 8]>,
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
    /// The latest counters (at most one `stats_interval` old).
    pub fn stats(&self) -> SessionStats {
        self.shared.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }
    /// A handle that reads the counters while the session is split or moved.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.shared.clone())
    }
    /// Why the session failed, if it did.
    pub fn error(&self) -> Option<String> {
        self.shared.error.lock().ok().and_then(|e| e.clone())
    }
    /// The session token JOINs carry (diagnostics; not a secret: it crosses in clear).
    pub fn token(&self) -> Option<[u8; 8]> {
        self.shared.token.get().copied()
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
        if self.shutdown.is_some() {
            return Err(broken("write after shutdown"));
        }
        while !data.is_empty() {
            if std::future::poll_fn(|cx| self.cmd.poll_reserve(cx)).await.is_err() {
                return Err(broken(self.error().unwrap_or_else(|| "session ended".into())));
            }
            let piece = data.split_to(data.len().min(CHUNK));
            if self.cmd.send_item(Cmd::Data(piece)).is_err() {
                return Err(broken("session ended"));
            }
        }
        Ok(())
    }
}

/// Reads a session's counters from anywhere (cheap to clone).
#[derive(Clone)]
pub struct StatsHandle(Arc<Shared>);

impl StatsHandle {
    pub fn stats(&self) -> SessionStats {
        self.0.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }
    pub fn error(&self) -> Option<String> {
        self.0.error.lock().ok().and_then(|e| e.clone())
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
            match next {
                Some(mut batch) => {
                    batch.reverse();
                    me.cur = batch;
                }
                None => {
                    return Poll::Ready(match me.error() {
                        Some(e) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, e)),
                        None => Ok(()),
                    })
                }
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

/// Most chunks in one writev (a 64 KiB batch of 16 KiB segments is about 10).
const MAX_IOV: usize = 64;

type DialFuture = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

#[derive(Default)]
struct PathSlot {
    stream: Option<TcpStream>,
    /// Bytes read and not yet parsed (at most one incomplete frame between reads); DATA
    /// payloads are cut out of it as shared slices, so it is never copied wholesale.
    rbuf: BytesMut,
    /// Frames being written (one batch), `out_pos` of them written.
    out: FrameBuf,
    out_pos: usize,
    dialing: Option<DialFuture>,
    /// Client: a fresh connection being opened beside a stalled one.
    probe: Option<DialFuture>,
    /// When the core reported this connection's path stalled (`Event::PathStalled`);
    /// cleared once TCP saw an ACK after that.
    core_stalled_at: Option<tokio::time::Instant>,
    failures: u32,
    connections: u32,
    info: sockopt::TcpInfoSample,
}

struct Driver {
    conn: fbdt_core::Connection,
    cfg: Arc<NetConfig>,
    epoch: tokio::time::Instant,
    paths: Vec<PathSlot>,
    dialer: Option<Dialer>,
    new_paths: Option<mpsc::Receiver<NewPath>>,
    cmd_rx: mpsc::Receiver<Cmd>,
    cmd_closed: bool,
    parked: Option<Bytes>,
    finished: bool,
    finish_waiters: Vec<oneshot::Sender<Result<(), String>>>,
    to_app: PollSender<Vec<Bytes>>,
    app_gone: bool,
    eof_sent: bool,
    connected: Option<oneshot::Sender<Result<(), String>>>,
    timer: Pin<Box<Sleep>>,
    timer_at: Option<tokio::time::Instant>,
    tick: tokio::time::Interval,
    shared: Arc<Shared>,
    /// When everything was delivered both ways.
    done_at: Option<tokio::time::Instant>,
    half_closed_at: Option<tokio::time::Instant>,
    closed_at: Option<tokio::time::Instant>,
    no_path_since: Option<tokio::time::Instant>,
    on_end: Option<Box<dyn FnOnce() + Send>>,
    label: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(f) = self.on_end.take() {
            f();
        }
    }
}

struct Parts {
    driver: Driver,
    session: Session,
    connected_rx: oneshot::Receiver<Result<(), String>>,
}

fn build(conn: fbdt_core::Connection, cfg: Arc<NetConfig>, label: String) -> Parts {
    let (cmd_tx, cmd_rx) = mpsc::channel(CHANNEL_CHUNKS);
    let (app_tx, app_rx) = mpsc::channel(CHANNEL_CHUNKS);
    let (ctx, crx) = oneshot::channel();
    let shared = Arc::new(Shared::default());
    let role = conn.role();
    let mut tick = tokio::time::interval(cfg.stats_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let driver = Driver {
        conn,
        epoch: tokio::time::Instant::now(),
        paths: Vec::new(),
        dialer: None,
        new_paths: None,
        cmd_rx,
        cmd_closed: false,
        parked: None,
        finished: false,
        finish_waiters: Vec::new(),
        to_app: PollSender::new(app_tx),
        app_gone: false,
        eof_sent: false,
        connected: Some(ctx),
        timer: Box::pin(tokio::time::sleep(StdDuration::from_secs(3600))),
        timer_at: None,
        tick,
        shared: shared.clone(),
        done_at: None,
        half_closed_at: None,
        closed_at: None,
        no_path_since: None,
        on_end: None,
        label,
        cfg,
    };
    let session = Session {
        cmd: PollSender::new(cmd_tx),
        rx: app_rx,
        cur: Vec::new(),
        shutdown: None,
        shared,
        role,
    };
    Parts {
        driver,
        session,
        connected_rx: crx,
    }
}

pub(crate) async fn start_client(
    conn: fbdt_core::Connection,
    streams: Vec<Option<TcpStream>>,
    dialer: Dialer,
    cfg: Arc<NetConfig>,
) -> Result<Session, Error> {
    let timeout = cfg.handshake_timeout;
    let Parts {
        mut driver,
        session,
        connected_rx,
    } = build(conn, cfg, "client".into());
    driver.dialer = Some(dialer);
    let now = driver.now();
    for (i, s) in streams.into_iter().enumerate() {
        driver.paths.push(PathSlot::default());
        match s {
            Some(s) => {
                driver.paths[i].stream = Some(s);
                driver.paths[i].connections = 1;
                driver.conn.add_path(PathId(i as u8), now)?;
            }
            None => driver.schedule_dial(i),
        }
    }
    tokio::spawn(driver);
    match tokio::time::timeout(timeout, connected_rx).await {
        Ok(Ok(Ok(()))) => Ok(session),
        Ok(Ok(Err(e))) => Err(Error::Closed(e)),
        Ok(Err(_)) => Err(Error::Closed(
            session.error().unwrap_or_else(|| "handshake failed".into()),
        )),
        Err(_) => Err(Error::Closed("no HELLO from the server in time".into())),
    }
}

/// Starts a server session whose path 0 already carried the HELLO (handled by `conn`).
pub(crate) fn start_server(
    conn: fbdt_core::Connection,
    stream0: TcpStream,
    new_paths: mpsc::Receiver<NewPath>,
    cfg: Arc<NetConfig>,
    label: String,
    on_end: Box<dyn FnOnce() + Send>,
) -> Session {
    let Parts {
        mut driver, session, ..
    } = build(conn, cfg, label);
    driver.paths.push(PathSlot {
        stream: Some(stream0),
        connections: 1,
        ..PathSlot::default()
    });
    driver.new_paths = Some(new_paths);
    driver.on_end = Some(on_end);
    tokio::spawn(driver);
    session
}

impl Future for Driver {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let d = self.get_mut();
        for _ in 0..STEPS_PER_POLL {
            let progress = d.step(cx);
            if d.should_end() {
                d.end();
                return Poll::Ready(());
            }
            if !progress {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Driver {
    fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    fn slot(&mut self, i: usize) -> &mut PathSlot {
        while self.paths.len() <= i {
            self.paths.push(PathSlot::default());
        }
        &mut self.paths[i]
    }

    /// One pass of the pump; true if anything happened (then it runs again).
    fn step(&mut self, cx: &mut Context<'_>) -> bool {
        let now = self.now();
        let mut progress = false;
        progress |= self.poll_new_paths(cx, now);
        progress |= self.poll_dials(cx, now);
        progress |= self.poll_probes(cx, now);
        progress |= self.pump_app_in(cx);
        for i in 0..self.paths.len() {
            progress |= self.read_path(i, cx, now);
        }
        if self.timer_at.is_some() && self.timer.as_mut().poll(cx).is_ready() {
            self.timer_at = None;
            self.conn.handle_timeout(now);
            progress = true;
        }
        if self.tick.poll_tick(cx).is_ready() {
            self.on_tick();
            progress = true;
        }
        progress |= self.pump_app_out(cx);
        for i in 0..self.paths.len() {
            progress |= self.write_path(i, cx, now);
        }
        progress |= self.drain_events();
        progress |= self.rearm(cx);
        progress
    }

    fn poll_new_paths(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        while let Some(rx) = self.new_paths.as_mut() {
            let np = match rx.poll_recv(cx) {
                Poll::Ready(Some(np)) => np,
                Poll::Ready(None) => {
                    self.new_paths = None;
                    break;
                }
                Poll::Pending => break,
            };
            progress = true;
            let i = np.index as usize;
            if !self.conn.accepts_join(&np.first) {
                tracing::warn!(session = %self.label, path = i, "refused a JOIN with a wrong HMAC");
                continue;
            }
            if self.paths.get(i).is_some_and(|p| p.stream.is_some()) {
                // A fresh connection replaces this path's old one (the client saw it stall).
                self.conn.path_down(PathId(np.index), now);
            }
            if let Err(e) = self.conn.add_path(PathId(np.index), now) {
                tracing::warn!(session = %self.label, path = i, "refused a joining connection: {e}");
                continue;
            }
            self.install_stream(i, np.stream);
            self.paths[i].rbuf.extend_from_slice(&np.first);
            self.on_input(i, now);
        }
        progress
    }

    fn poll_dials(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        for i in 0..self.paths.len() {
            let Some(f) = self.paths[i].dialing.as_mut() else {
                continue;
            };
            let Poll::Ready(r) = f.as_mut().poll(cx) else {
                continue;
            };
            progress = true;
            self.paths[i].dialing = None;
            match r {
                Ok(s) if self.done_at.is_none() && !self.conn.is_closed() => {
                    tracing::info!(session = %self.label, path = i, "path reconnected");
                    self.install_stream(i, s);
                    self.paths[i].failures = 0;
                    if let Err(e) = self.conn.add_path(PathId(i as u8), now) {
                        tracing::warn!(session = %self.label, path = i, "add_path: {e}");
                        self.paths[i].stream = None;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(session = %self.label, path = i, "re-dial failed: {e}");
                    self.paths[i].failures += 1;
                    self.schedule_dial(i);
                }
            }
        }
        progress
    }

    /// Client: a fresh connection opened beside a stalled one takes over the path if the
    /// old one is still stalled.
    fn poll_probes(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut progress = false;
        for i in 0..self.paths.len() {
            let Some(f) = self.paths[i].probe.as_mut() else {
                continue;
            };
            let Poll::Ready(r) = f.as_mut().poll(cx) else {
                continue;
            };
            progress = true;
            self.paths[i].probe = None;
            let Ok(s) = r else { continue };
            let still_stalled = match self.paths[i].stream.as_ref() {
                None => true,
                Some(old) => sockopt::tcp_info(old).map_or(true, |t| t.stalled_given_core(self.core_stalled_for(i))),
            };
            if !still_stalled || self.done_at.is_some() || self.conn.is_closed() {
                continue;
            }
            tracing::info!(session = %self.label, path = i, "fresh connection replaces a stalled one");
            self.drop_stream(i);
            self.conn.path_down(PathId(i as u8), now);
            self.paths[i].dialing = None;
            self.install_stream(i, s);
            if let Err(e) = self.conn.add_path(PathId(i as u8), now) {
                tracing::warn!(session = %self.label, path = i, "add_path: {e}");
                self.paths[i].stream = None;
            }
        }
        progress
    }

    /// How long ago the core reported path `i` stalled, if it did.
    fn core_stalled_for(&self, i: usize) -> Option<StdDuration> {
        self.paths[i].core_stalled_at.map(|t| t.elapsed())
    }

    /// Client: keeps sending fresh SYNs (each attempt bounded by `PROBE_CONNECT`) until one
    /// connects: a new connection is not held back by the old one's RTO back-off.
    fn start_probe(&mut self, i: usize) {
        let Some(spec) = self.dialer.as_ref().and_then(|d| d.specs.get(i)).cloned() else {
            return;
        };
        let cfg = self.cfg.clone();
        tracing::debug!(session = %self.label, path = i, "path looks stalled: probing with fresh connections");
        self.paths[i].probe = Some(Box::pin(async move {
            loop {
                match tokio::time::timeout(PROBE_CONNECT, crate::dial::dial_tcp(&spec, &cfg, false)).await {
                    Ok(Ok(s)) => return Ok(s),
                    Ok(Err(e)) => {
                        tracing::trace!(path = i, "probe: {e}");
                        tokio::time::sleep(PROBE_CONNECT / 2).await
                    }
                    Err(_) => tracing::trace!(path = i, "probe: no SYN-ACK in time"),
                }
            }
        }));
    }

    fn schedule_dial(&mut self, i: usize) {
        let Some(spec) = self.dialer.as_ref().and_then(|d| d.specs.get(i)).cloned() else {
            return;
        };
        if self.done_at.is_some() || self.conn.is_closed() {
            return;
        }
        let cfg = self.cfg.clone();
        let slot = self.slot(i);
        // 10 ms, then doubling from 50 ms up to `max_backoff` (default 1 s): a path that
        // comes back is re-joined within about a second.
        let delay = if slot.failures == 0 {
            StdDuration::from_millis(10)
        } else {
            (StdDuration::from_millis(50) * 2u32.saturating_pow(slot.failures.min(10) - 1)).min(cfg.max_backoff)
        };
        slot.dialing = Some(Box::pin(async move {
            tokio::time::sleep(delay).await;
            crate::dial::dial_tcp(&spec, &cfg, false).await
        }));
    }

    /// A new connection carries path `i` (its old one, if any, is already dropped).
    fn install_stream(&mut self, i: usize, s: TcpStream) {
        let slot = self.slot(i);
        slot.stream = Some(s);
        slot.rbuf.clear();
        slot.out.clear();
        slot.out_pos = 0;
        slot.core_stalled_at = None;
        slot.connections += 1;
    }

    /// Feeds the bytes read on path `i` to the core and handles what that says about the
    /// path.
    fn on_input(&mut self, i: usize, now: Instant) {
        let mut buf = std::mem::take(&mut self.paths[i].rbuf);
        let r = self.conn.handle_recv_buf(PathId(i as u8), &mut buf, now);
        self.paths[i].rbuf = buf;
        if let Err(e) = r {
            if e.is_path_local() {
                tracing::warn!(session = %self.label, path = i, "closing that connection: {e}");
                self.drop_stream(i);
            } else {
                tracing::warn!(session = %self.label, path = i, "session failed: {e}");
                self.set_error(e.to_string());
            }
        }
    }

    fn set_error(&mut self, e: String) {
        if let Ok(mut g) = self.shared.error.lock() {
            g.get_or_insert(e);
        }
    }

    fn drop_stream(&mut self, i: usize) {
        let slot = &mut self.paths[i];
        slot.stream = None;
        slot.core_stalled_at = None;
        slot.rbuf.clear();
        slot.out.clear();
        slot.out_pos = 0;
    }

    /// The connection of path `i` died (error or EOF).
    fn kill_path(&mut self, i: usize, why: &str, now: Instant) {
        let ending = self.done_at.is_some() || self.conn.is_closed();
        if ending || (self.finished && self.conn.is_send_done()) {
            tracing::debug!(session = %self.label, path = i, "connection ended: {why}");
        } else {
            tracing::warn!(session = %self.label, path = i, "connection lost: {why}");
        }
        self.drop_stream(i);
        self.conn.path_down(PathId(i as u8), now);
        if !ending {
            self.schedule_dial(i);
        }
    }

    fn read_path(&mut self, i: usize, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut any = false;
        for _ in 0..READS_PER_STEP {
            let slot = &mut self.paths[i];
            let Some(s) = slot.stream.as_mut() else {
                break;
            };
            // Read straight into the spare room of the path's buffer: frames are parsed in
            // place and their payloads travel on as slices of it.
            prepare_recv_buf(&mut slot.rbuf);
            match tokio_util::io::poll_read_buf(Pin::new(s), cx, &mut slot.rbuf) {
                Poll::Ready(Ok(0)) => {
                    self.kill_path(i, "closed by the peer", now);
                    any = true;
                    break;
                }
                Poll::Ready(Ok(_)) => {
                    self.on_input(i, now);
                    any = true;
                }
                Poll::Ready(Err(e)) => {
                    self.kill_path(i, &e.to_string(), now);
                    any = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        any
    }

    fn write_path(&mut self, i: usize, cx: &mut Context<'_>, now: Instant) -> bool {
        let mut any = false;
        for _ in 0..64 {
            let slot = &mut self.paths[i];
            let Some(s) = slot.stream.as_mut() else {
                return any;
            };
            if slot.out_pos == slot.out.len() {
                // Offer room only when the kernel takes more (TCP_NOTSENT_LOWAT makes that
                // "little unsent data queued"), so the core decides as late as it can.
                match s.poll_write_ready(cx) {
                    Poll::Pending => return any,
                    Poll::Ready(Err(e)) => {
                        self.kill_path(i, &e.to_string(), now);
                        return true;
                    }
                    Poll::Ready(Ok(())) => {}
                }
                slot.out.clear();
                slot.out_pos = 0;
                while slot.out.len() < WRITE_BATCH {
                    if self
                        .conn
                        .poll_transmit_buf(PathId(i as u8), max_frame_len(), now, &mut slot.out)
                        == 0
                    {
                        break;
                    }
                }
                if slot.out.is_empty() {
                    return any;
                }
            }
            // One writev of headers and payload slices.
            let mut iov = [io::IoSlice::new(&[]); MAX_IOV];
            let mut n_iov = 0;
            for (slot_iov, c) in iov.iter_mut().zip(slot.out.chunks_from(slot.out_pos)) {
                *slot_iov = io::IoSlice::new(c);
                n_iov += 1;
            }
            match Pin::new(s).poll_write_vectored(cx, &iov[..n_iov]) {
                Poll::Ready(Ok(0)) => {
                    self.kill_path(i, "write returned 0", now);
                    return true;
                }
                Poll::Ready(Ok(n)) => {
                    slot.out_pos += n;
                    any = true;
                }
                Poll::Ready(Err(e)) => {
                    self.kill_path(i, &e.to_string(), now);
                    return true;
                }
                Poll::Pending => return any,
            }
        }
        true
    }

    fn pump_app_in(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progress = false;
        loop {
            if let Some(b) = self.parked.as_mut() {
                let n = self.conn.write_bytes(b);
                b.advance(n);
                if b.is_empty() {
                    self.parked = None;
                    progress = true;
                    continue;
                }
                progress |= n > 0;
                break;
            }
            if self.cmd_closed || self.conn.send_room() == 0 {
                break;
            }
            match self.cmd_rx.poll_recv(cx) {
                Poll::Ready(Some(Cmd::Data(b))) => self.parked = Some(b),
                Poll::Ready(Some(Cmd::Finish(tx))) => {
                    self.conn.finish();
                    self.finished = true;
                    self.finish_waiters.push(tx);
                }
                Poll::Ready(None) => {
                    self.cmd_closed = true;
                    if !self.finished {
                        self.conn.finish();
                        self.finished = true;
                    }
                }
                Poll::Pending => break,
            }
            progress = true;
        }
        if self.finished && self.conn.is_send_done() {
            for tx in self.finish_waiters.drain(..) {
                let _ = tx.send(Ok(()));
            }
        }
        progress
    }

    fn pump_app_out(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progress = false;
        loop {
            let n = self.conn.readable().min(CHUNK);
            if n == 0 {
                if !self.eof_sent && self.conn.is_recv_finished() {
                    self.eof_sent = true;
                    self.to_app.close();
                    progress = true;
                }
                break;
            }
            if self.app_gone {
                let _ = self.conn.read_bytes(n);
                progress = true;
                continue;
            }
            match self.to_app.poll_reserve(cx) {
                Poll::Ready(Ok(())) => {
                    // In-order payloads go to the application as the slices they arrived
                    // in, up to CHUNK bytes per message.
                    let mut batch = Vec::new();
                    let mut left = n;
                    while let Some(b) = self.conn.read_bytes(left) {
                        left -= b.len();
                        batch.push(b);
                    }
                    let _ = self.to_app.send_item(batch);
                    progress = true;
                }
                Poll::Ready(Err(_)) => {
                    self.app_gone = true;
                    progress = true;
                }
                Poll::Pending => break,
            }
        }
        progress
    }

    fn drain_events(&mut self) -> bool {
        let mut any = false;
        while let Some(ev) = self.conn.poll_event() {
            any = true;
            match ev {
                Event::Connected => {
                    tracing::debug!(session = %self.label, "connected");
                    if let Some(t) = self.conn.token() {
                        let _ = self.shared.token.set(t);
                    }
                    if let Some(tx) = self.connected.take() {
                        let _ = tx.send(Ok(()));
                    }
                }
                Event::PathJoined(p) => tracing::debug!(session = %self.label, path = p.0, "path joined"),
                Event::PathStalled(p) => {
                    let i = p.index();
                    tracing::debug!(session = %self.label, path = i, "core: path stalled");
                    // Probe at once rather than after TCP's 300 ms of silence: a fresh
                    // connection is ready by the time the old one is known to be stuck.
                    // It replaces the old one only while no ACK arrived since this report.
                    if self.paths.get(i).is_some_and(|s| s.stream.is_some()) {
                        self.paths[i].core_stalled_at = Some(tokio::time::Instant::now());
                        if self.paths[i].probe.is_none()
                            && self.dialer.is_some()
                            && self.done_at.is_none()
                            && !self.conn.is_closed()
                        {
                            self.start_probe(i);
                        }
                    }
                }
                Event::PathFailed(p) => {
                    let i = p.index();
                    tracing::warn!(session = %self.label, path = i, "core declared the path failed; reconnecting");
                    if i < self.paths.len() {
                        self.drop_stream(i);
                        self.schedule_dial(i);
                    }
                }
                Event::Closed { code, reason, by_peer } => {
                    let who = if by_peer { "peer" } else { "we" };
                    if code != 0 {
                        tracing::warn!(session = %self.label, code, "{who} closed the session: {reason}");
                        self.set_error(format!("{who} closed the session (code {code}): {reason}"));
                    } else if !(self.conn.is_recv_finished() && self.conn.is_send_done()) {
                        self.set_error(format!("{who} closed the session before the transfer ended"));
                    }
                    if let Some(tx) = self.connected.take() {
                        let _ = tx.send(Err(reason));
                    }
                }
            }
        }
        any
    }

    /// Re-arms the one timer at the core's deadline; true if it is already due.
    fn rearm(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(t) = self.conn.poll_timeout() else {
            self.timer_at = None;
            return false;
        };
        let at = self.epoch + StdDuration::from_micros(t.as_micros());
        if self.timer_at != Some(at) {
            self.timer.as_mut().reset(at);
            self.timer_at = Some(at);
        }
        self.timer.as_mut().poll(cx).is_ready()
    }

    fn on_tick(&mut self) {
        for i in 0..self.paths.len() {
            let Some(s) = self.paths[i].stream.as_ref() else {
                continue;
            };
            if let Ok(info) = sockopt::tcp_info(s) {
                self.paths[i].info = info;
                self.conn.path_stats(PathId(i as u8), info.to_path_stats());
                let core = self.core_stalled_for(i);
                if core.is_some() && !info.stalled_given_core(core) {
                    // TCP got an ACK since the core's report: that stall is over.
                    self.paths[i].core_stalled_at = None;
                }
                let stalled = info.stalled_given_core(self.core_stalled_for(i));
                if !stalled {
                    if self.paths[i].probe.take().is_some() {
                        tracing::debug!(session = %self.label, path = i, "path recovered on its own; probe dropped");
                    }
                } else if self.paths[i].probe.is_none()
                    && self.dialer.is_some()
                    && self.done_at.is_none()
                    && !self.conn.is_closed()
                {
                    self.start_probe(i);
                }
            }
        }
        let cs = self.conn.stats();
        let n = self.paths.len();
        let stats = SessionStats {
            bytes_written: cs.sender.bytes_written,
            bytes_acked: cs.sender.bytes_acked,
            bytes_delivered: cs.receiver.bytes_delivered,
            redundant_bytes_sent: cs.sender.redundant_bytes_sent,
            redundant_bytes_received: cs.receiver.redundant_bytes_received,
            windows_loaded: cs.sender.windows_loaded,
            paths: (0..n)
                .map(|i| {
                    let p = &self.paths[i];
                    PathReport {
                        connected: p.stream.is_some(),
                        bytes_sent: cs.sender.per_path_bytes_sent.get(i).copied().unwrap_or(0),
                        bytes_received: cs.receiver.per_path_bytes_received.get(i).copied().unwrap_or(0),
                        srtt_us: p.info.srtt_us,
                        cwnd_bytes: p.info.cwnd_bytes,
                        delivery_rate_bps: p.info.delivery_rate.unwrap_or(0) as f64 * 8.0,
                        reconnects: p.connections.saturating_sub(1),
                    }
                })
                .collect(),
            core: cs,
        };
        if let Ok(mut g) = self.shared.stats.lock() {
            *g = stats;
        }
    }

    fn flushed(&self) -> bool {
        self.paths
            .iter()
            .all(|p| p.stream.is_none() || p.out_pos == p.out.len())
    }

    fn should_end(&mut self) -> bool {
        let t = tokio::time::Instant::now();
        let live = self.paths.iter().any(|p| p.stream.is_some());
        if self.conn.is_closed() {
            let at = *self.closed_at.get_or_insert(t);
            return !live || self.flushed() || t - at > END_LINGER;
        }
        // Nothing to carry traffic and nothing coming back: give up after idle_timeout.
        if !live && self.paths.iter().all(|p| p.dialing.is_none() || self.dialer.is_some()) {
            let since = *self.no_path_since.get_or_insert(t);
            if t - since > self.cfg.idle_timeout {
                self.set_error(format!("no live path for {:?}", self.cfg.idle_timeout));
                return true;
            }
        } else {
            self.no_path_since = None;
        }
        let done = self.finished && self.conn.is_send_done() && self.eof_sent;
        if !done {
            return false;
        }
        let done_at = *self.done_at.get_or_insert(t);
        if !live {
            return true;
        }
        match self.conn.role() {
            Role::Client => {
                if self.half_closed_at.is_none() && t - done_at >= CLIENT_LINGER && self.flushed() {
                    // FIN after our last ACKs; the server sees EOF and ends too.
                    for p in &self.paths {
                        if let Some(s) = p.stream.as_ref() {
                            let _ = socket2::SockRef::from(s).shutdown(std::net::Shutdown::Write);
                        }
                    }
                    self.half_closed_at = Some(t);
                }
                self.half_closed_at.is_some_and(|h| t - h > END_LINGER)
            }
            Role::Server => t - done_at > END_LINGER,
        }
    }

    fn end(&mut self) {
        self.on_tick();
        let err = self.shared.error.lock().ok().and_then(|e| e.clone());
        for tx in self.finish_waiters.drain(..) {
            let _ = tx.send(match &err {
                None if self.conn.is_send_done() => Ok(()),
                None => Err("session ended".into()),
                Some(e) => Err(e.clone()),
            });
        }
        tracing::debug!(session = %self.label, "session ended{}", err.map(|e| format!(": {e}")).unwrap_or_default());
    }
}
