//! The session's task: owns the `Connection` and pumps it — bytes between the paths'
//! sockets and the core, bytes between the core and the application's [`Session`], the one
//! timer and TCP_INFO. It follows the core's driving order (after every input: transmit on
//! every path, re-arm the timer, drain events) and makes no protocol decisions; re-dials
//! and probes are the [`PathManager`]'s.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use fbdt_core::wire::{frame_bytes_missing, prepare_recv_buf, FrameBuf};
use fbdt_core::{max_frame_len, Duration, Event, Instant, PathBinding, PathId, PathStats, Role};
use tokio::io::AsyncWrite;
use tokio::sync::{mpsc, oneshot};

use crate::admission::{ConnTicket, Liveness};
use crate::alarm::Alarm;
use crate::app::{AppPipe, Outbound};
use crate::congestion::CcState;
use crate::lowat::Lowat;
use crate::paths::{Opened, PathManager};
use crate::secure::PathStream;
use crate::session::{NewPath, PathReport, Session, SessionStats, Shared, CHANNEL_CHUNKS};
use crate::sockopt::{self, TcpInfoSample};
use crate::{Error, NetConfig, PathSpec};

/// Most chunks in one writev (a 64 KiB batch of 16 KiB segments is about 10; a longer
/// batch goes out in several).
const MAX_IOV: usize = 64;
/// Reads per path per driver step (each up to `wire::RECV_BLOCK` bytes), so one busy path
/// cannot starve the others.
const READS_PER_STEP: usize = 16;
/// Driver steps per poll before yielding to the scheduler.
const STEPS_PER_POLL: usize = 32;
/// A client that has everything keeps pumping this long so its last ACKs go out, then
/// half-closes its connections.
const CLIENT_LINGER: Duration = Duration::from_millis(50);
/// After finishing (or a CLOSE), the longest wait for the peer to close the connections.
const END_LINGER: Duration = Duration::from_millis(3000);

/// Where the session is in its life. It only moves forward — `Running` → `Done` →
/// `HalfClosed` — and from any of them to `Closing` once the core's session is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Data may flow. `no_path_since`: since when no path carries the session (the
    /// session gives up after `idle_timeout` without one).
    Running { no_path_since: Option<Instant> },
    /// Both directions delivered and acknowledged at `since`. A client lingers so its last
    /// ACKs go out, then half-closes; a server waits for the client's FIN.
    Done { since: Instant },
    /// Client: FIN sent on every connection at `at`; waits for the server to close.
    HalfClosed { at: Instant },
    /// The core's session is closed (CLOSE sent or received) since `since`; the last
    /// frames are flushed.
    Closing { since: Instant },
}

/// The pump's side of one path.
#[derive(Default)]
struct PathSlot {
    stream: Option<PathStream>,
    /// Bytes read and not yet parsed (at most one incomplete frame between reads); DATA
    /// payloads are cut out of it as shared slices, so it is never copied wholesale.
    rbuf: BytesMut,
    /// Frames being written (one batch), `out_pos` of them written.
    out: FrameBuf,
    out_pos: usize,
    connections: u32,
    /// Connections whose TLS handshake resumed.
    resumed: u32,
    info: sockopt::TcpInfoSample,
    /// When `info` was read, and when the core wants it read again because its send limit
    /// waits on the transport's ACKs (`Connection::transport_report_wanted`).
    info_at: Option<Instant>,
    report_due: Option<Instant>,
    /// When the reader wants to be woken (plaintext paths).
    lowat: Lowat,
    /// Server: the connection's place in the server's connection count.
    ticket: Option<ConnTicket>,
}

pub(crate) struct Driver {
    conn: fbdt_core::Connection,
    cfg: Arc<NetConfig>,
    epoch: tokio::time::Instant,
    paths: Vec<PathSlot>,
    manager: PathManager,
    new_paths: Option<mpsc::Receiver<NewPath>>,
    app: AppPipe,
    phase: Phase,
    connected: Option<oneshot::Sender<Result<(), String>>>,
    /// The core's deadline (`Connection::poll_timeout`).
    timer: Alarm,
    /// The earliest receive low-water mark's fallback (see [`Lowat`]).
    lowat_timer: Alarm,
    /// The earliest `PathSlot::report_due`.
    report_timer: Alarm,
    /// Times the task was polled (woken), and what it found (see [`SessionStats`]).
    wakeups: u64,
    timer_fires: u64,
    reads: u64,
    writes: u64,
    /// TCP_INFO reads the core asked for between stats ticks.
    transport_reports: u64,
    tick: tokio::time::Interval,
    shared: Arc<Shared>,
    on_end: Option<Box<dyn FnOnce() + Send>>,
    label: String,
    /// Server: the client sent data or a JOIN (a session that does not within
    /// `NetConfig::first_data_timeout` of its start is closed).
    useful: bool,
    /// Server: what admission reads to pick a session to evict, and may ask to close.
    liveness: Option<Arc<Liveness>>,
    /// Each path's congestion controller and RTO floor.
    cc: CcState,
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

fn build(mut conn: fbdt_core::Connection, cfg: Arc<NetConfig>, specs: Option<Vec<PathSpec>>, label: String) -> Parts {
    if cfg.delay_marks {
        conn.enable_delay_probe(fbdt_core::delay_probe::DEFAULT_STEP);
    }
    let (cmd_tx, cmd_rx) = mpsc::channel(CHANNEL_CHUNKS);
    let (app_tx, app_rx) = mpsc::channel(CHANNEL_CHUNKS);
    let (ctx, crx) = oneshot::channel();
    let shared = Arc::new(Shared::default());
    let role = conn.role();
    let mut tick = tokio::time::interval(cfg.stats_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let epoch = tokio::time::Instant::now();
    let driver = Driver {
        conn,
        epoch,
        paths: Vec::new(),
        manager: PathManager::new(specs, cfg.clone(), label.clone()),
        new_paths: None,
        app: AppPipe::new(cmd_rx, app_tx),
        phase: Phase::Running { no_path_since: None },
        connected: Some(ctx),
        timer: Alarm::new(epoch),
        lowat_timer: Alarm::new(epoch),
        report_timer: Alarm::new(epoch),
        wakeups: 0,
        timer_fires: 0,
        reads: 0,
        writes: 0,
        transport_reports: 0,
        tick,
        shared: shared.clone(),
        on_end: None,
        label,
        cc: CcState::new(cfg.congestion.clone(), cfg.rto_floor, cfg.coupled),
        cfg,
        useful: false,
        liveness: None,
    };
    Parts {
        driver,
        session: Session::new(cmd_tx, app_rx, shared, role),
        connected_rx: crx,
    }
}

/// Starts a client session over the connected `streams` (`None`: that path is dialled
/// again in the background) and waits for the server's HELLO.
pub(crate) async fn start_client(
    conn: fbdt_core::Connection,
    streams: Vec<Option<PathStream>>,
    specs: Vec<PathSpec>,
    cfg: Arc<NetConfig>,
) -> Result<Session, Error> {
    let timeout = cfg.handshake_timeout;
    let Parts {
        mut driver,
        session,
        connected_rx,
    } = build(conn, cfg, Some(specs), "client".into());
    let now = driver.now();
    for (i, s) in streams.into_iter().enumerate() {
        driver.paths.push(PathSlot::default());
        match s {
            Some(s) => {
                let binding = PathBinding {
                    exporter: s.binding(),
                    epoch: 0,
                };
                driver.paths[i].stream = Some(s);
                driver.paths[i].connections = 1;
                driver.conn.add_path_bound(PathId::slot(i), binding, now)?;
            }
            None => driver.manager.redial(i, false),
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

/// Starts a server session whose path 0 already carried the HELLO (handled by `conn`);
/// `rest` holds the bytes that came behind it.
pub(crate) fn start_server(
    conn: fbdt_core::Connection,
    path0: NewPath,
    rest: BytesMut,
    new_paths: mpsc::Receiver<NewPath>,
    cfg: Arc<NetConfig>,
    label: String,
    on_end: Box<dyn FnOnce() + Send>,
    liveness: Arc<Liveness>,
) -> Session {
    let Parts {
        mut driver, session, ..
    } = build(conn, cfg, None, label);
    if let Ok(a) = path0.stream.peer_addr() {
        let _ = driver.shared.peer.set(a);
    }
    if let Some(id) = path0.stream.client_identity() {
        let _ = driver.shared.client_identity.set(id);
    }
    driver.paths.push(PathSlot {
        stream: Some(path0.stream),
        rbuf: rest,
        connections: 1,
        ticket: path0.ticket,
        ..PathSlot::default()
    });
    driver.new_paths = Some(new_paths);
    driver.on_end = Some(on_end);
    driver.liveness = Some(liveness);
    tokio::spawn(driver);
    session
}

impl Future for Driver {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let d = self.get_mut();
        d.wakeups += 1;
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

    /// The session is winding down: no new connections are wanted.
    fn ending(&self) -> bool {
        !matches!(self.phase, Phase::Running { .. }) || self.conn.is_closed()
    }

    fn slot(&mut self, i: usize) -> &mut PathSlot {
        if self.paths.len() <= i {
            self.paths.resize_with(i + 1, PathSlot::default);
        }
        &mut self.paths[i]
    }

    /// One pass of the pump; true if anything happened (then it runs again).
    fn step(&mut self, cx: &mut Context<'_>) -> bool {
        let now = self.now();
        let mut progress = false;
        progress |= self.poll_new_paths(cx, now);
        progress |= self.poll_manager(cx, now);
        progress |= self.app.pump_in(&mut self.conn, cx);
        for i in 0..self.paths.len() {
            progress |= self.read_path(i, cx);
        }
        // Reads take their own time; later steps must not see the clock go back.
        let now = self.now();
        if self.timer.take_fired(cx) {
            self.timer_fires += 1;
            self.conn.handle_timeout(now);
            progress = true;
        }
        if self.tick.poll_tick(cx).is_ready() {
            self.on_tick();
            progress = true;
        }
        progress |= self.app.pump_out(&mut self.conn, cx);
        for i in 0..self.paths.len() {
            progress |= self.write_path(i, cx, now);
        }
        progress |= self.drain_events();
        progress |= self.rearm(cx);
        progress |= self.expire_lowat(cx);
        progress |= self.refresh_reports(cx);
        progress
    }

    /// Server: connections that JOINed this session.
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
            let exporter = np.stream.binding();
            if !self.conn.accepts_join(&np.first, &exporter) {
                tracing::warn!(session = %self.label, path = i, "refused a JOIN with a wrong HMAC");
                continue;
            }
            if self.paths.get(i).is_some_and(|p| p.stream.is_some()) {
                // A fresh connection replaces this path's old one (the client saw it stall).
                self.conn.path_down(PathId(np.index), now);
            }
            // The epoch comes from the JOIN itself, when the core reads it.
            let binding = PathBinding { exporter, epoch: 0 };
            if let Err(e) = self.conn.add_path_bound(PathId(np.index), binding, now) {
                tracing::warn!(session = %self.label, path = i, "refused a joining connection: {e}");
                continue;
            }
            self.install_stream(i, np.stream);
            self.paths[i].ticket = np.ticket;
            self.useful = true;
            self.paths[i].rbuf.extend_from_slice(&np.first);
            self.on_input(i, now);
        }
        progress
    }

    /// Client: connections the path manager opened (re-dials, then probes).
    fn poll_manager(&mut self, cx: &mut Context<'_>, now: Instant) -> bool {
        let opened = self.manager.poll(cx, self.ending());
        let progress = !opened.is_empty();
        for o in opened {
            match o {
                Opened::Redialled(i, s) => {
                    if self.ending() {
                        continue;
                    }
                    tracing::info!(session = %self.label, path = i, "path reconnected");
                    self.join(i, s, now);
                }
                Opened::Probe(i, s) => {
                    let old = self.paths[i].stream.as_ref().and_then(|o| sockopt::tcp_info(o).ok());
                    let old = old.map(|t| t.signals());
                    let Some(s) = self.manager.on_probe_connected(i, s, old.as_ref(), now, self.ending()) else {
                        continue;
                    };
                    tracing::info!(session = %self.label, path = i, "fresh connection replaces a stalled one");
                    self.drop_stream(i);
                    self.conn.path_down(PathId::slot(i), now);
                    self.join(i, s, now);
                }
            }
        }
        progress
    }

    /// Client: a new connection carries path `i` and JOINs the session on it.
    /// Its JOIN carries the connection epoch: how many connections carried this path before.
    fn join(&mut self, i: usize, s: PathStream, now: Instant) {
        let binding = PathBinding {
            exporter: s.binding(),
            epoch: self.paths.get(i).map_or(0, |p| p.connections),
        };
        self.install_stream(i, s);
        if let Err(e) = self.conn.add_path_bound(PathId::slot(i), binding, now) {
            tracing::warn!(session = %self.label, path = i, "add_path: {e}");
            self.paths[i].stream = None;
        }
    }

    /// A new connection carries path `i` (its old one, if any, is already dropped).
    fn install_stream(&mut self, i: usize, s: PathStream) {
        let slot = self.slot(i);
        slot.resumed += u32::from(s.resumed());
        if let Some(old) = slot.stream.replace(s) {
            old.abort();
        }
        slot.ticket = None;
        slot.rbuf.clear();
        slot.out.clear();
        slot.out_pos = 0;
        slot.lowat.reset();
        slot.connections += 1;
        self.manager.on_connection_changed(i);
    }

    /// Ends path `i`'s connection with a reset, not a graceful close (see
    /// [`PathStream::abort`]): its connection failed, broke, or is being replaced.
    fn drop_stream(&mut self, i: usize) {
        let slot = &mut self.paths[i];
        if let Some(old) = slot.stream.take() {
            old.abort();
        }
        slot.ticket = None;
        slot.rbuf.clear();
        slot.out.clear();
        slot.out_pos = 0;
        slot.lowat.reset();
        self.manager.on_connection_changed(i);
    }

    /// Feeds the bytes read on path `i` to the core and handles what that says about the
    /// path.
    fn on_input(&mut self, i: usize, now: Instant) {
        let mut buf = std::mem::take(&mut self.paths[i].rbuf);
        let r = self.conn.handle_recv_buf(PathId::slot(i), &mut buf, now);
        self.paths[i].rbuf = buf;
        if let Err(e) = r {
            if e.is_path_local() {
                tracing::warn!(session = %self.label, path = i, "closing that connection: {e}");
                self.drop_stream(i);
                // Client: a connection whose JOIN got no valid answer is re-dialled as a
                // broken one is (the core already took the path down). A server waits for
                // the client's next JOIN.
                if self.conn.role() == Role::Client {
                    self.manager.redial(i, self.ending());
                }
            } else {
                tracing::warn!(session = %self.label, path = i, "session failed: {e}");
                self.shared.set_error(e.to_string());
            }
        }
    }

    /// The connection of path `i` died (error or EOF).
    fn kill_path(&mut self, i: usize, why: &str, now: Instant) {
        let ending = self.ending();
        if ending || (self.app.outbound != Outbound::Open && self.conn.is_send_done()) {
            tracing::debug!(session = %self.label, path = i, "connection ended: {why}");
        } else {
            tracing::warn!(session = %self.label, path = i, "connection lost: {why}");
        }
        self.drop_stream(i);
        self.conn.path_down(PathId::slot(i), now);
        self.manager.redial(i, ending);
    }

    /// Each read is stamped when it returns, not when the step began: an in-order delivery
    /// must never carry a time before the peer sent the bytes (delay marks compare the two).
    fn read_path(&mut self, i: usize, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        for _ in 0..READS_PER_STEP {
            let slot = &mut self.paths[i];
            let Some(s) = slot.stream.as_mut() else {
                break;
            };
            // An idle path holds no read block: one is allocated once the socket is
            // readable, and given back below when a read finds nothing more.
            if slot.rbuf.capacity() == 0 && s.poll_read_ready(cx).is_pending() {
                break;
            }
            // Read straight into the spare room of the path's buffer: frames are parsed in
            // place and their payloads travel on as slices of it.
            prepare_recv_buf(&mut slot.rbuf);
            let read = tokio_util::io::poll_read_buf(Pin::new(s), cx, &mut slot.rbuf);
            let now = self.now();
            let slot = &mut self.paths[i];
            match read {
                Poll::Ready(Ok(0)) => {
                    self.kill_path(i, "closed by the peer", now);
                    any = true;
                    break;
                }
                Poll::Ready(Ok(n)) => {
                    self.reads += 1;
                    slot.lowat.on_read(n);
                    self.manager.on_data(i);
                    self.on_input(i, now);
                    any = true;
                }
                Poll::Ready(Err(e)) => {
                    // The server refused our credentials before its HELLO: re-dialling
                    // cannot help, so the session fails now, saying why.
                    if e.kind() == std::io::ErrorKind::PermissionDenied && self.connected.is_some() {
                        self.conn.close(1, &format!("path {i}: {e}"));
                    }
                    self.kill_path(i, &e.to_string(), now);
                    any = true;
                    break;
                }
                Poll::Pending => {
                    // Nothing half-parsed: let the block go (payload slices still
                    // hold their part of it), so an idle session keeps no 64 KiB per path.
                    if slot.rbuf.is_empty() {
                        slot.rbuf = BytesMut::new();
                    }
                    self.wait_for_frame(i, now);
                    break;
                }
            }
        }
        any
    }

    /// Path `i`'s reader waits: on a plaintext path, ask the kernel to wake it only once
    /// the frame it holds part of can complete.
    fn wait_for_frame(&mut self, i: usize, now: Instant) {
        if !self.cfg.recv_lowat {
            return;
        }
        let fallback = Duration::from_micros(self.cfg.recv_lowat_fallback.as_micros() as u64);
        let slot = &mut self.paths[i];
        let Some(PathStream::Plain(tcp)) = slot.stream.as_ref() else {
            return;
        };
        let missing = frame_bytes_missing(&slot.rbuf);
        if let Err(e) = slot.lowat.wait_for(tcp, missing, now, fallback) {
            tracing::debug!(session = %self.label, path = i, "SO_RCVLOWAT: {e}");
        }
    }

    /// Marks past their fallback go back to 1 (which wakes the reader if bytes wait), then
    /// the fallback timer is re-armed at the earliest mark still unmet.
    fn expire_lowat(&mut self, cx: &mut Context<'_>) -> bool {
        let mut fired = false;
        if self.lowat_timer.take_fired(cx) {
            let now = self.now();
            for p in &mut self.paths {
                if let Some(PathStream::Plain(tcp)) = p.stream.as_ref() {
                    fired |= p.lowat.expire(tcp, now).unwrap_or(false);
                }
            }
        }
        let next = self.paths.iter().filter_map(|p| p.lowat.deadline()).min();
        fired | self.lowat_timer.set(next, cx)
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
                while slot.out.len() < self.cfg.write_batch.max(1) {
                    if self
                        .conn
                        .poll_transmit_buf(PathId::slot(i), max_frame_len(), now, &mut slot.out)
                        == 0
                    {
                        break;
                    }
                }
                if slot.out.is_empty() {
                    if self.await_transport(i, now) {
                        continue;
                    }
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
                    self.writes += 1;
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

    /// Path `i` had nothing to send. If the core's send limit waits on the transport's
    /// ACKs, reads TCP_INFO now when the last read is older than the core's wait (true: poll
    /// again), else schedules the read for when it is.
    fn await_transport(&mut self, i: usize, now: Instant) -> bool {
        let wait = self.conn.transport_report_wanted(PathId::slot(i));
        let slot = &mut self.paths[i];
        let Some(due) = wait.map(|w| slot.info_at.map_or(now, |at| at + w)) else {
            slot.report_due = None;
            return false;
        };
        if due > now {
            slot.report_due = Some(due);
            return false;
        }
        self.transport_reports += 1;
        self.read_transport(i, now)
    }

    /// Reads path `i`'s TCP_INFO into the core; false if there is no connection or the read
    /// failed.
    fn read_transport(&mut self, i: usize, now: Instant) -> bool {
        let slot = &mut self.paths[i];
        slot.report_due = None;
        let Some(info) = slot.stream.as_ref().and_then(|s| sockopt::tcp_info(s).ok()) else {
            return false;
        };
        slot.info = info;
        slot.info_at = Some(now);
        self.conn.path_stats(PathId::slot(i), self.core_stats(i, &info, now));
        true
    }

    /// What the core learns from path `i`'s TCP_INFO: a coupled path's window is the
    /// coupled one where that is the smaller.
    fn core_stats(&self, i: usize, info: &TcpInfoSample, now: Instant) -> PathStats {
        let mut stats = info.to_path_stats(now);
        if let Some(w) = self.cc.coupled_window(i) {
            stats.cwnd_bytes = stats.cwnd_bytes.map(|c| c.min(w));
        }
        stats
    }

    /// Reads the transport counters the core asked for once they are due, then re-arms
    /// the timer at the earliest request still open; true if a read happened.
    fn refresh_reports(&mut self, cx: &mut Context<'_>) -> bool {
        let mut fired = false;
        if self.report_timer.take_fired(cx) {
            let now = self.now();
            for i in 0..self.paths.len() {
                if self.paths[i].report_due.is_some_and(|t| t <= now) {
                    self.transport_reports += 1;
                    fired |= self.read_transport(i, now);
                }
            }
        }
        let next = self.paths.iter().filter_map(|p| p.report_due).min();
        fired | self.report_timer.set(next, cx)
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
                Event::PathStalled(p) | Event::PeerStalled(p) => {
                    let (i, by_peer) = (p.index(), matches!(ev, Event::PeerStalled(_)));
                    tracing::debug!(session = %self.label, path = i, by_peer, "path stalled");
                    if self.paths.get(i).is_some_and(|s| s.stream.is_some()) {
                        let (now, ending) = (self.now(), self.ending());
                        if by_peer {
                            self.manager.on_peer_stalled(i, now, ending);
                        } else {
                            self.manager.on_core_stalled(i, now, ending);
                        }
                    }
                }
                Event::PathFailed(p) => {
                    let i = p.index();
                    tracing::warn!(session = %self.label, path = i, "core declared the path failed; reconnecting");
                    if i < self.paths.len() {
                        self.drop_stream(i);
                        self.manager.redial(i, self.ending());
                    }
                }
                Event::Closed { code, reason, by_peer } => {
                    let who = if by_peer { "peer" } else { "we" };
                    if code != 0 {
                        tracing::warn!(session = %self.label, code, "{who} closed the session: {reason}");
                        self.shared
                            .set_error(format!("{who} closed the session (code {code}): {reason}"));
                    } else if !(self.conn.is_recv_finished() && self.conn.is_send_done()) {
                        self.shared
                            .set_error(format!("{who} closed the session before the transfer ended"));
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
        let t = self.conn.poll_timeout();
        self.timer.set(t, cx)
    }

    /// Client: a JOIN unanswered for `handshake_timeout` (the deadline a TLS handshake and
    /// path 0's HELLO have) loses its connection, and the path is re-dialled. Checked every
    /// stats tick: the deadline is seconds, the tick milliseconds.
    fn expire_joins(&mut self, now: Instant) {
        let limit = Duration::from_micros(self.cfg.handshake_timeout.as_micros() as u64);
        for i in 0..self.paths.len() {
            let late = self
                .conn
                .joining_since(PathId::slot(i))
                .is_some_and(|t| now.saturating_since(t) > limit);
            if late && self.paths[i].stream.is_some() {
                let why = format!(
                    "no valid answer to our JOIN within {:?} (the server did not prove it holds the session key)",
                    self.cfg.handshake_timeout
                );
                self.kill_path(i, &why, now);
            }
        }
    }

    /// Reads TCP_INFO of every connection into the core and the path manager, and
    /// publishes the counters.
    fn on_tick(&mut self) {
        let (now, ending) = (self.now(), self.ending());
        self.expire_joins(now);
        for i in 0..self.paths.len() {
            let Some(s) = self.paths[i].stream.as_ref() else {
                self.cc.no_connection(i);
                continue;
            };
            if let Ok(info) = sockopt::tcp_info(s) {
                self.cc.on_tick(i, s, &info, self.paths[i].connections, now);
                self.paths[i].info = info;
                self.paths[i].info_at = Some(now);
                self.conn.path_stats(PathId::slot(i), self.core_stats(i, &info, now));
                self.manager.on_tcp_info(i, &info.signals(), now, ending);
            }
        }
        if let (Some(probe), Ok(mut marks)) = (self.conn.delay_marks(), self.shared.delay_marks.lock()) {
            marks.collect(probe, self.epoch.into_std());
        }
        let cs = self.conn.stats();
        self.useful |= cs.receiver.per_path_bytes_received.iter().any(|&b| b > 0);
        self.watch(&cs);
        let paths = self
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| PathReport {
                connected: p.stream.is_some(),
                joining: p.stream.is_some() && !self.conn.is_path_up(PathId::slot(i)),
                bytes_sent: cs.sender.per_path_bytes_sent.get(i).copied().unwrap_or(0),
                bytes_received: cs.receiver.per_path_bytes_received.get(i).copied().unwrap_or(0),
                srtt_us: p.info.srtt_us,
                cwnd_bytes: p.info.cwnd_bytes,
                delivery_rate_bps: p.info.delivery_rate.unwrap_or(0) as f64 * 8.0,
                reconnects: p.connections.saturating_sub(1),
                probing: p.stream.is_some() && self.manager.probing(i),
                tls_resumed: p.resumed,
                cc: self.cc.report(i),
            })
            .collect();
        let stats = SessionStats {
            bytes_written: cs.sender.bytes_written,
            bytes_acked: cs.sender.bytes_acked,
            bytes_delivered: cs.receiver.bytes_delivered,
            redundant_bytes_sent: cs.sender.redundant_bytes_sent,
            redundant_bytes_received: cs.receiver.redundant_bytes_received,
            windows_loaded: cs.sender.windows_loaded,
            wakeups: self.wakeups,
            timer_fires: self.timer_fires,
            reads: self.reads,
            writes: self.writes,
            lowat_changes: self.paths.iter().map(|p| p.lowat.changes).sum::<u64>(),
            lowat_fallbacks: self.paths.iter().map(|p| p.lowat.fallbacks).sum::<u64>(),
            transport_reports: self.transport_reports,
            paths,
            core: cs,
        };
        if let Ok(mut g) = self.shared.stats.lock() {
            *g = stats;
        }
    }

    /// Server: tells admission how alive the session is; closes it when admission evicted
    /// it or its peer stopped acknowledging (`NetConfig::send_stall_timeout`).
    fn watch(&mut self, cs: &fbdt_core::ConnectionStats) {
        let Some(l) = &self.liveness else {
            return;
        };
        let (w, a) = (cs.sender.bytes_written, cs.sender.bytes_acked);
        let verdict = l.observe(
            self.useful,
            cs.receiver.bytes_delivered,
            w,
            a,
            self.cfg.send_stall_timeout,
        );
        if let Some(c) = verdict.filter(|_| !self.conn.is_closed()) {
            tracing::warn!(session = %self.label, "closing the session: {}", c.why);
            self.conn.close(c.code, &c.why);
            self.shared.set_error(c.why);
        }
    }

    fn flushed(&self) -> bool {
        self.paths
            .iter()
            .all(|p| p.stream.is_none() || p.out_pos == p.out.len())
    }

    /// Moves the session's [`Phase`] on; true when the task should end.
    fn should_end(&mut self) -> bool {
        let t = self.now();
        let live = self.paths.iter().any(|p| p.stream.is_some());
        if self.conn.is_closed() && !matches!(self.phase, Phase::Closing { .. }) {
            self.phase = Phase::Closing { since: t };
        }
        match self.phase {
            Phase::Closing { since } => !live || self.flushed() || t.saturating_since(since) > END_LINGER,
            Phase::Running { no_path_since } => {
                // Nothing to carry traffic and nothing coming back: give up after
                // idle_timeout. Only a path whose JOIN the peer answered counts: a server
                // that no longer knows the session refuses every re-JOIN, and connections
                // that live a moment each back-off would otherwise keep it waiting forever.
                let carrying = self
                    .paths
                    .iter()
                    .enumerate()
                    .any(|(i, p)| p.stream.is_some() && self.conn.is_path_up(PathId::slot(i)));
                let no_path_since = (!carrying).then(|| no_path_since.unwrap_or(t));
                self.phase = Phase::Running { no_path_since };
                let idle = Duration::from_micros(self.cfg.idle_timeout.as_micros() as u64);
                let deadline = Duration::from_micros(self.cfg.first_data_timeout.as_micros() as u64);
                if self.conn.role() == Role::Server && !self.useful && t.saturating_since(Instant::ZERO) > deadline {
                    let why = format!("no data or JOIN within {:?} of the HELLO", self.cfg.first_data_timeout);
                    tracing::warn!(session = %self.label, "closing the session: {why}");
                    self.conn.close(1, &why);
                    self.shared.set_error(why);
                    return false;
                }
                if no_path_since.is_some_and(|since| t.saturating_since(since) > idle) {
                    self.shared
                        .set_error(format!("no live path for {:?}", self.cfg.idle_timeout));
                    return true;
                }
                if self.app.done(&self.conn) {
                    self.phase = Phase::Done { since: t };
                    return !live;
                }
                false
            }
            Phase::Done { since } => {
                if !live {
                    return true;
                }
                match self.conn.role() {
                    Role::Client => {
                        if t.saturating_since(since) >= CLIENT_LINGER && self.flushed() {
                            // FIN after our last ACKs; the server sees EOF and ends too.
                            for p in &mut self.paths {
                                if let Some(s) = p.stream.as_mut() {
                                    s.half_close();
                                }
                            }
                            self.phase = Phase::HalfClosed { at: t };
                        }
                        false
                    }
                    Role::Server => t.saturating_since(since) > END_LINGER,
                }
            }
            Phase::HalfClosed { at } => !live || t.saturating_since(at) > END_LINGER,
        }
    }

    fn end(&mut self) {
        self.on_tick();
        let err = self.shared.error();
        self.app.end(&self.conn, err.as_ref());
        tracing::debug!(session = %self.label, "session ended{}", err.map(|e| format!(": {e}")).unwrap_or_default());
    }
}
