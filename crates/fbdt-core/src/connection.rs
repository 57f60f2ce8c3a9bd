//! One endpoint of an FBDT session: handshake, per-path framing, and the sender and
//! receiver of the two stream directions.
//!
//! # Driving a connection (sans-IO)
//! The driver owns the sockets and the clock. After *every* input
//! (`add_path`, `handle_recv`, `path_down`, `handle_timeout`, `write`, `read`, `finish`) it:
//! 1. calls [`Connection::poll_transmit`] for every path with room, repeatedly, until it
//!    returns 0, and writes the bytes to that path's connection;
//! 2. re-arms one timer at [`Connection::poll_timeout`] and calls
//!    [`Connection::handle_timeout`] when it fires (an early call is a no-op);
//! 3. drains [`Connection::poll_event`].
//!
//! `room` is how many bytes the path's connection can take now; offer at least
//! [`max_frame_len`] or large DATA frames will wait.
//!
//! # Without copies
//! `handle_recv`, `poll_transmit`, `write` and `read` work on slices (the simulator's
//! reference payload mode uses them). A driver on real sockets can avoid copying payloads with their `Bytes`
//! counterparts: read into a `BytesMut` readied by [`wire::prepare_recv_buf`] and pass it
//! to [`Connection::handle_recv_buf`] (DATA payloads stay slices of it up to
//! [`Connection::read_bytes`]); write with [`Connection::write_bytes`] and collect frames
//! with [`Connection::poll_transmit_buf`] into a [`FrameBuf`] for one vectored write. Use
//! one input style per connection of a path. A driver that moves whole frames rather than
//! byte streams (the simulator) can hand a frame over as its head plus its payload `Bytes`
//! ([`Connection::handle_recv_split`]), so the payload is never copied at all.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::config::{Config, ConfigError, MAX_BUFFER};
use crate::delay_probe::{DelayProbe, StreamProbe, FRAME_HEAD_LEN};
use crate::error::ProtocolError;
use crate::handshake::{PathBinding, SessionKeys};
use crate::path::{Hint, PathId, PathStats};
use crate::scheme::{SchemeReceiver, SchemeSender};
use crate::stats::{ReceiverStats, SenderStats};
use crate::time::{Duration, Instant};
use crate::wire::{self, Close, Flow, Frame, FrameBuf, Header, Hello, MAX_PATHS, MAX_SEGMENT};

/// Largest frame this build emits or accepts.
pub const fn max_frame_len() -> usize {
    wire::MAX_FRAME_LEN
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// Things the driver should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Both HELLOs exchanged; data can flow.
    Connected,
    /// A further path was authenticated: server, its JOIN verified (the answer is queued);
    /// client, the server's answer to its JOIN verified (data may flow on it from now).
    PathJoined(PathId),
    /// The core gave up on a path; close its connection (and open a new one to re-join).
    PathFailed(PathId),
    /// A path holds undelivered data and delivered nothing for the sender's stall time
    /// (FBDT: max(3 × RTT, 30 ms)); the core already gives it no new work. Sooner than a
    /// TCP-level sign (TCP_INFO shows a stall only after the RTO): a driver may start
    /// opening a fresh connection for the path. Once per stall; delivery ends it.
    PathStalled(PathId),
    /// Client: the server reported that the path stalls its data (a STALLED frame about the
    /// path's current connection). The client's own TCP shows nothing (the stuck data sits
    /// in the server's), and only the client can open a fresh connection: a driver may
    /// start one as for [`Event::PathStalled`].
    PeerStalled(PathId),
    /// The session ended, by us (`by_peer` false) or by the peer.
    Closed { code: u16, reason: String, by_peer: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PathState {
    /// Connected at TCP level, not yet usable (server: awaiting HELLO/JOIN; client: awaiting
    /// the server's HELLO before it can JOIN).
    Pending,
    /// Client, a further path: its JOIN is due or sent, the server's answer (JOIN_OK) not
    /// yet verified. Nothing but the JOIN goes out on it and the scheme does not know it;
    /// any frame other than a valid answer drops only this connection.
    Joining,
    Up,
    Down,
}

impl PathIo {
    /// A CLOSE goes to the authenticated peer only: not down a connection whose JOIN
    /// answer was never verified (whoever holds it may not be the server).
    fn carries_close(&self) -> bool {
        !matches!(self.state, PathState::Down | PathState::Joining)
    }
}

#[derive(Clone)]
struct PathIo {
    state: PathState,
    /// `handle_recv`'s read buffer: at most one incomplete frame between calls.
    rx: BytesMut,
    hello_due: bool,
    join_due: bool,
    /// Server: the answer to the JOIN just accepted goes out before anything else.
    join_ok_due: bool,
    /// Client: when the JOIN went out, while its answer is awaited.
    join_sent_at: Option<Instant>,
    close_due: bool,
    /// The connection's binding and epoch (see [`crate::handshake`]).
    binding: PathBinding,
    /// A receiver frame (ACK / DATA_ACK) taken when the path had no room for it: sent at the
    /// next chance unless the receiver has a newer one by then (both are cumulative).
    held_ack: Option<Frame<'static>>,
}

/// Counters of both directions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConnectionStats {
    pub sender: SenderStats,
    pub receiver: ReceiverStats,
    pub forward_path: Option<PathId>,
    /// Server: STALLED reports sent. Client: reports heard about a current connection
    /// (each an `Event::PeerStalled`).
    pub stall_reports: u64,
}

/// One endpoint of a session (see the module's documentation for how to drive it). A clone
/// is an independent copy of the whole state, down to the buffered bytes: the fuzz targets
/// set an established pair up once and hand every input a clone of it.
#[derive(Clone)]
pub struct Connection {
    cfg: Config,
    role: Role,
    local_key: [u8; 32],
    local_isn: u32,
    keys: Option<SessionKeys>,
    paths: Vec<PathIo>,
    /// The sending half of whichever scheme the session runs (`Config::scheme`).
    sender: Box<dyn SchemeSender>,
    /// The receiving half, once the peer's HELLO told us its ISN.
    receiver: Option<Box<dyn SchemeReceiver>>,
    established: bool,
    closed: bool,
    close_reason: Option<(u16, String)>,
    events: VecDeque<Event>,
    /// The in-order delivery delay probe, when the driver asked for one.
    delay_probe: Option<StreamProbe>,
    /// Server: per path, the connection epoch of the last JOIN (or HELLO, epoch 0) accepted.
    joined_epochs: Vec<Option<u32>>,
    /// Bytes of the peer's stream the application read (with `readable`, the in-order point).
    bytes_read: u64,
    /// Server: paths whose stall the client is yet to hear of (`Config::report_stalls`),
    /// each with the epoch of the connection that stalled.
    stall_reports: Vec<(PathId, u32)>,
    /// [`ConnectionStats::stall_reports`].
    stall_reports_counted: u64,
}

impl Connection {
    pub fn client(cfg: Config) -> Result<Self, ConfigError> {
        Self::new(cfg, Role::Client)
    }

    pub fn server(cfg: Config) -> Result<Self, ConfigError> {
        Self::new(cfg, Role::Server)
    }

    fn new(cfg: Config, role: Role) -> Result<Self, ConfigError> {
        cfg.validate()?;
        // Distinct streams for the two roles even when both ends share a seed (simulator).
        let mut rng = ChaCha20Rng::seed_from_u64(
            cfg.seed
                ^ if role == Role::Client {
                    0x636c_6965_6e74
                } else {
                    0x7365_7276_6572
                },
        );
        let local_key: [u8; 32] = rng.gen();
        let random_isn: u32 = rng.gen();
        let local_isn = cfg.initial_seq.unwrap_or(random_isn);
        Ok(Connection {
            sender: cfg.scheme.sender(cfg.stream_params(), local_isn),
            cfg,
            role,
            local_key,
            local_isn,
            keys: None,
            paths: Vec::new(),
            receiver: None,
            established: false,
            closed: false,
            close_reason: None,
            events: VecDeque::new(),
            delay_probe: None,
            joined_epochs: Vec::new(),
            bytes_read: 0,
            stall_reports: Vec::new(),
            stall_reports_counted: 0,
        })
    }

    /// Starts recording the in-order delivery delay ([`crate::delay_probe`]): first
    /// transmissions of our stream and in-order deliveries of the peer's, every `step`
    /// bytes. The driver takes the marks with [`Connection::delay_marks`].
    pub fn enable_delay_probe(&mut self, step: u64) {
        self.delay_probe = Some(StreamProbe::new(step, self.local_isn));
    }

    /// The delay probe's marks, if [`Connection::enable_delay_probe`] was called.
    pub fn delay_marks(&mut self) -> Option<&mut DelayProbe> {
        self.delay_probe.as_mut().map(|p| &mut p.marks)
    }

    /// Tells the probe where the in-order point of the peer's stream is now.
    fn probe_in_order(&mut self, now: Instant) {
        if let Some(p) = self.delay_probe.as_mut() {
            let readable = self.receiver.as_ref().map_or(0, |r| r.readable());
            p.marks.on_in_order(self.bytes_read + readable as u64, now);
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }
    pub fn is_established(&self) -> bool {
        self.established
    }
    pub fn is_closed(&self) -> bool {
        self.closed
    }
    /// The session token (after the handshake), for a server routing JOINs.
    pub fn token(&self) -> Option<[u8; 8]> {
        self.keys.as_ref().map(|k| k.token)
    }
    pub fn local_isn(&self) -> u32 {
        self.local_isn
    }

    fn hello(&self) -> Hello {
        Hello {
            scheme: self.cfg.scheme.wire_scheme(),
            isn: self.local_isn,
            recv_buffer: self.cfg.recv_buffer as u32,
            segment_size: self.cfg.segment_size as u32,
            key: self.local_key,
        }
    }

    /// A driver hint about `path` (scan announcements). Only the meta layer's scan-aware
    /// schedulers (MuSher, AMuSe) act on it; FBDT ignores it.
    pub fn path_hint(&mut self, path: PathId, hint: Hint) {
        self.sender.path_hint(path, hint);
    }

    /// The meta layer's current scheduler ratio (FixedRatio, AMuSe, MuSher), for logs.
    pub fn scheduler_ratio(&self) -> Option<u8> {
        self.sender.scheduler_ratio()
    }

    /// Sets the 32 bytes this end puts in its HELLO. The driver passes bytes from the OS's
    /// CSPRNG (the core stays OS-free); without this call they come from `Config::seed`,
    /// which only the simulator and tests should rely on. Call before the HELLO is sent.
    pub fn set_local_key(&mut self, key: [u8; 32]) {
        self.local_key = key;
    }

    /// The connection epoch of `path`'s current connection: on a client what it passed to
    /// [`Connection::add_path_bound`], on a server what the JOIN said (0 for path 0 and for
    /// paths added with [`Connection::add_path`]).
    pub fn path_epoch(&self, path: PathId) -> Option<u32> {
        self.paths.get(path.index()).map(|io| io.binding.epoch)
    }

    /// Whether `first` (the first bytes of a new connection whose binding is `exporter`)
    /// begins with a JOIN this session accepts: right token, and an HMAC made for this very
    /// connection. A server checks this before a new connection may replace a live path, so
    /// a forged or replayed JOIN cannot knock a working path out.
    pub fn accepts_join(&self, first: &[u8], exporter: &[u8; 32]) -> bool {
        match (Frame::parse(first), &self.keys) {
            (Ok((Frame::Join(j), _)), Some(k)) => {
                k.verify(&j, exporter) && self.stale_join(PathId(j.path_index), j.epoch).is_none()
            }
            _ => false,
        }
    }

    /// The last accepted epoch of `path` if `epoch` is not after it. Every new connection
    /// of a path carries a higher epoch (both drivers number them), so an equal one is a
    /// replay: under `--plaintext`, where no TLS exporter binds a JOIN to its connection,
    /// a recorded JOIN replayed from another address would otherwise take the path over.
    fn stale_join(&self, path: PathId, epoch: u32) -> Option<u32> {
        self.joined_epochs
            .get(path.index())
            .copied()
            .flatten()
            .filter(|&last| epoch <= last)
    }

    fn note_joined(&mut self, path: PathId, epoch: u32) {
        if self.joined_epochs.len() <= path.index() {
            self.joined_epochs.resize(path.index() + 1, None);
        }
        self.joined_epochs[path.index()] = Some(epoch);
    }

    /// A new connection for `path` exists. Client: path 0 carries HELLO, others JOIN once
    /// the session is established and carry data only once the server's answer to the JOIN
    /// verified ([`Connection::is_path_up`]). Server: path 0 for a connection that began with HELLO,
    /// the JOIN's path index otherwise (see `handshake::first_frame`).
    pub fn add_path(&mut self, path: PathId, now: Instant) -> Result<(), ProtocolError> {
        self.add_path_bound(path, PathBinding::default(), now)
    }

    /// [`Connection::add_path`] for a connection with a `binding` (its TLS exporter; on a
    /// client also the connection epoch its JOIN carries). A server learns the epoch from
    /// the JOIN.
    pub fn add_path_bound(&mut self, path: PathId, binding: PathBinding, _now: Instant) -> Result<(), ProtocolError> {
        if path.index() >= MAX_PATHS {
            return Err(ProtocolError::TooManyPaths { max: MAX_PATHS });
        }
        while self.paths.len() <= path.index() {
            self.paths.push(PathIo {
                state: PathState::Down,
                rx: BytesMut::new(),
                hello_due: false,
                join_due: false,
                join_ok_due: false,
                join_sent_at: None,
                close_due: false,
                binding: PathBinding::default(),
                held_ack: None,
            });
        }
        let io = &mut self.paths[path.index()];
        *io = PathIo {
            state: PathState::Pending,
            rx: BytesMut::new(),
            hello_due: false,
            join_due: false,
            join_ok_due: false,
            join_sent_at: None,
            close_due: false,
            binding,
            held_ack: None,
        };
        if self.role == Role::Client {
            if path.0 == 0 && !self.established {
                io.hello_due = true;
            } else if self.established {
                io.join_due = true;
                io.state = PathState::Joining;
            }
        }
        Ok(())
    }

    /// Whether `path` carries data: its connection is authenticated (path 0: both HELLOs;
    /// a further path: server, its JOIN; client, the server's answer to it).
    pub fn is_path_up(&self, path: PathId) -> bool {
        self.paths.get(path.index()).is_some_and(|io| io.state == PathState::Up)
    }

    /// Client: since when `path`'s JOIN awaits the server's answer (`None` when no JOIN is
    /// out). The driver gives the answer a deadline and drops the connection past it; the
    /// core has no clock of its own.
    pub fn joining_since(&self, path: PathId) -> Option<Instant> {
        let io = self.paths.get(path.index())?;
        io.join_sent_at.filter(|_| io.state == PathState::Joining)
    }

    /// Client: `path` is joining (JOIN due or sent, no verified answer yet).
    pub fn is_path_joining(&self, path: PathId) -> bool {
        self.paths.get(path.index()).is_some_and(|io| io.state == PathState::Joining)
    }

    fn mark_up(&mut self, path: PathId, now: Instant) {
        self.paths[path.index()].state = PathState::Up;
        let epoch = self.paths[path.index()].binding.epoch;
        self.sender.set_path_epoch(path, epoch);
        self.sender.path_up(path, now);
        if let Some(r) = self.receiver.as_mut() {
            r.set_path_epoch(path, epoch);
            r.path_up(path, now);
        }
    }

    /// The connection of `path` broke or was closed.
    pub fn path_down(&mut self, path: PathId, now: Instant) {
        let Some(io) = self.paths.get_mut(path.index()) else {
            return;
        };
        let was = std::mem::replace(&mut io.state, PathState::Down);
        io.rx.clear();
        // The client drops that connection anyway.
        self.stall_reports.retain(|&(p, _)| p != path);
        io.join_sent_at = None;
        if was == PathState::Joining {
            // The scheme never saw this connection: it counts the path down already.
            return;
        }
        self.sender.path_down(path, now);
        if let Some(r) = self.receiver.as_mut() {
            r.path_down(path, now);
        }
    }

    pub fn path_stats(&mut self, path: PathId, stats: PathStats) {
        self.sender.path_stats(path, stats);
    }

    /// How long until the driver should read `path`'s transport counters again
    /// (`PathStats::unacked_bytes`) and report them: the send limit, counted from the last
    /// report, holds back the path's next frame and no socket event will say when the
    /// transport's ACKs free it (`SchemeSender::transport_report_wanted`).
    #[must_use]
    pub fn transport_report_wanted(&self, path: PathId) -> Option<Duration> {
        self.sender.transport_report_wanted(path)
    }

    /// The driver holds the application's writes to a send buffer of `bytes`
    /// (`SchemeSender::set_send_limit`): the simulator's model of kernel MPTCP's.
    pub fn set_send_limit(&mut self, bytes: u64) {
        self.sender.set_send_limit(bytes);
    }

    /// From when `poll_transmit` on `path` could return a frame given more room than it was
    /// last offered, unless an input (`handle_*`, `path_*`, a write or read, a timeout)
    /// comes first; `None`: not before an input. Until then a driver need not poll the
    /// path when its socket drains — as a runtime that sets TCP_NOTSENT_LOWAT only from
    /// then on. Conservative: now whenever unsure.
    pub fn room_wanted_from(&self, path: PathId) -> Option<Instant> {
        let io = self.paths.get(path.index())?;
        if io.state == PathState::Down {
            return None;
        }
        if io.close_due || io.hello_due || io.join_due || io.join_ok_due || io.held_ack.is_some() {
            return Some(Instant::ZERO);
        }
        if self.closed || !self.established || io.state != PathState::Up {
            return None;
        }
        match &self.receiver {
            Some(r) if r.has_frame(path) => Some(Instant::ZERO),
            _ => self.sender.room_wanted_from(path),
        }
    }

    /// Bytes arrived on `path`. A path-local error (`is_path_local`) means: close this
    /// path's connection, the session lives on. Any other error ended the session (a CLOSE
    /// is queued on the other paths).
    ///
    /// The bytes are copied into the path's own read buffer, in blocks as a socket read
    /// would fill one, and parsed there ([`Connection::handle_recv_buf`]): an incomplete
    /// frame waits there for the rest.
    pub fn handle_recv(&mut self, path: PathId, mut bytes: &[u8], now: Instant) -> Result<(), ProtocolError> {
        while !bytes.is_empty() && !self.closed {
            let Some(io) = self.paths.get_mut(path.index()) else {
                return Err(ProtocolError::Unexpected {
                    path,
                    what: "bytes on a path never added",
                });
            };
            let mut buf = std::mem::take(&mut io.rx);
            wire::prepare_recv_buf(&mut buf);
            let n = bytes.len().min(buf.capacity() - buf.len());
            buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            let result = self.parse_and_settle(path, &mut buf, now);
            if let Some(io) = self.paths.get_mut(path.index()) {
                io.rx = buf;
            }
            result?;
        }
        Ok(())
    }

    /// Bytes arrived on `path` and were appended to `buf` (readied by
    /// [`wire::prepare_recv_buf`]): consumes every complete frame from its front and leaves
    /// an incomplete one there for the next read. DATA payloads are kept as slices of
    /// `buf`'s allocation, not copied. Errors as [`Connection::handle_recv`]; after an
    /// error, or once the path is down, `buf` is emptied (its connection is done).
    pub fn handle_recv_buf(&mut self, path: PathId, buf: &mut BytesMut, now: Instant) -> Result<(), ProtocolError> {
        if let Some(io) = self.paths.get(path.index()) {
            debug_assert!(
                io.rx.is_empty(),
                "handle_recv and handle_recv_buf mixed on one connection"
            );
        }
        self.parse_and_settle(path, buf, now)
    }

    /// One whole frame arrived on `path` in two pieces: `head` (its header and fixed
    /// fields) and `payload` (a DATA or MP_DATA payload, kept as a slice of `payload`, not
    /// copied) — as a [`FrameBuf`] holds a frame the peer's sender made. An empty
    /// `payload` means `head` is the whole frame ([`Connection::handle_recv`]). For a
    /// driver that moves frames, not byte streams (the simulator); the pieces must start
    /// at a frame boundary. Errors as [`Connection::handle_recv`].
    pub fn handle_recv_split(
        &mut self,
        path: PathId,
        head: &[u8],
        payload: &Bytes,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        if payload.is_empty() {
            if let Some(frame) = self.whole_control_frame(path, head) {
                return self.settle(path, now, |conn| conn.on_frame(path, frame, &Bytes::new(), now));
            }
            return self.handle_recv(path, head, now);
        }
        if self.paths.get(path.index()).is_some_and(|io| !io.rx.is_empty()) {
            return Err(ProtocolError::Unexpected {
                path,
                what: "a split frame inside a partial frame",
            });
        }
        self.settle(path, now, |conn| {
            let frame = Frame::parse_split(head, payload).map_err(|source| ProtocolError::Wire { path, source })?;
            conn.on_frame(path, frame, payload, now)
        })
    }

    /// `head` as one whole frame with no payload to keep (not DATA or MP_DATA) on a path
    /// with nothing buffered: `handle_recv` would parse exactly this frame out of the
    /// path's read buffer and nothing else, so it need not go through it (a copy, a split
    /// and an allocation for every ACK the simulator hands over). None when anything
    /// differs, and for bytes that do not parse (`handle_recv` reports those).
    fn whole_control_frame<'h>(&self, path: PathId, head: &'h [u8]) -> Option<Frame<'h>> {
        if self.closed || !self.paths.get(path.index())?.rx.is_empty() {
            return None;
        }
        match Frame::parse(head) {
            Ok((frame, used)) if used == head.len() && !matches!(frame, Frame::Data(_) | Frame::MpData(_)) => {
                Some(frame)
            }
            _ => None,
        }
    }

    /// Parses what `buf` holds for `path` and settles the outcome ([`Connection::settle`]);
    /// empties `buf` once its connection is done.
    fn parse_and_settle(&mut self, path: PathId, buf: &mut BytesMut, now: Instant) -> Result<(), ProtocolError> {
        let result = self.settle(path, now, |conn| conn.parse_frames_buf(path, buf, now));
        let down = self
            .paths
            .get(path.index())
            .is_some_and(|io| io.state == PathState::Down);
        let known = path.index() < self.paths.len();
        if self.closed || down || (known && result.is_err()) {
            buf.clear();
        }
        result
    }

    /// Runs `parse` on input for `path` unless the session is closed or the path down,
    /// then settles the outcome: a path-local error takes the path down, any other ends
    /// the session.
    fn settle(
        &mut self,
        path: PathId,
        now: Instant,
        parse: impl FnOnce(&mut Self) -> Result<(), ProtocolError>,
    ) -> Result<(), ProtocolError> {
        if self.closed {
            return Ok(());
        }
        let Some(io) = self.paths.get(path.index()) else {
            return Err(ProtocolError::Unexpected {
                path,
                what: "bytes on a path never added",
            });
        };
        if io.state == PathState::Down {
            return Ok(());
        }
        let result = parse(self);
        self.probe_in_order(now);
        // Until the server's answer verified, a joining connection may lead anywhere: what
        // comes on it (a CLOSE, garbage) drops that connection only, never the session.
        let result = match result {
            Err(e) if !e.is_path_local() && self.is_path_joining(path) => Err(ProtocolError::BadJoinAnswer {
                path,
                why: e.to_string(),
            }),
            r => r,
        };
        match result {
            Ok(()) => {
                self.collect_stalled_paths();
                Ok(())
            }
            Err(e) if e.is_path_local() => {
                self.path_down(path, now);
                Err(e)
            }
            Err(e) => {
                self.fail(&e);
                Err(e)
            }
        }
    }

    fn parse_frames_buf(&mut self, path: PathId, buf: &mut BytesMut, now: Instant) -> Result<(), ProtocolError> {
        while !buf.is_empty() {
            let len = match Header::parse(buf) {
                Ok(h) if buf.len() >= wire::HEADER_LEN + h.body_len => wire::HEADER_LEN + h.body_len,
                Ok(_) | Err(wire::Error::Incomplete { .. }) => break,
                Err(source) => return Err(ProtocolError::Wire { path, source }),
            };
            // The frame is cut out of the buffer as a shared slice: a receiver keeps DATA
            // payloads as slices of it rather than copying them.
            let encoded = buf.split_to(len).freeze();
            let frame = match Frame::parse(&encoded) {
                Ok((frame, _)) => frame,
                Err(source) => return Err(ProtocolError::Wire { path, source }),
            };
            self.on_frame(path, frame, &encoded, now)?;
            if self.closed || self.paths[path.index()].state == PathState::Down {
                break;
            }
        }
        Ok(())
    }

    fn on_frame(&mut self, path: PathId, frame: Frame<'_>, encoded: &Bytes, now: Instant) -> Result<(), ProtocolError> {
        let state = self.paths[path.index()].state;
        if state == PathState::Joining {
            return self.on_join_answer(path, frame, now);
        }
        match frame {
            Frame::Close(c) => {
                self.closed = true;
                self.events.push_back(Event::Closed {
                    code: c.code,
                    reason: c.reason.clone(),
                    by_peer: true,
                });
                if c.code != 0 {
                    return Err(ProtocolError::PeerClosed {
                        code: c.code,
                        reason: c.reason,
                    });
                }
                Ok(())
            }
            Frame::Hello(h) => {
                let expected =
                    path.0 == 0 && !self.established && (self.role == Role::Server || !self.paths[0].hello_due);
                if !expected {
                    return Err(ProtocolError::Unexpected { path, what: "HELLO" });
                }
                self.on_hello(&h, now)
            }
            Frame::Join(j) => {
                if self.role != Role::Server
                    || !self.established
                    || state != PathState::Pending
                    || j.path_index != path.0
                {
                    return Err(ProtocolError::Unexpected { path, what: "JOIN" });
                }
                let exporter = self.paths[path.index()].binding.exporter;
                let ok = self.keys.as_ref().is_some_and(|k| k.verify(&j, &exporter));
                if !ok {
                    return Err(ProtocolError::BadJoin { path });
                }
                if let Some(last) = self.stale_join(path, j.epoch) {
                    return Err(ProtocolError::StaleJoin {
                        path,
                        epoch: j.epoch,
                        last,
                    });
                }
                self.note_joined(path, j.epoch);
                let io = &mut self.paths[path.index()];
                io.binding.epoch = j.epoch;
                io.join_ok_due = true;
                self.mark_up(path, now);
                self.events.push_back(Event::PathJoined(path));
                Ok(())
            }
            Frame::JoinOk(_) => Err(ProtocolError::Unexpected {
                path,
                what: "JOIN_OK on a path that is not joining",
            }),
            Frame::Stalled(r) => self.on_stall_report(path, r),
            // The rest belongs to the scheme: the peer's stream to our receiver, feedback on
            // ours to our sender. Each refuses frames of another scheme.
            _ => {
                let up = state == PathState::Up && self.established;
                match (frame.flow(), self.receiver.as_mut()) {
                    (Flow::Feedback, _) if up => self.sender.handle_frame(path, &frame, now),
                    (Flow::Stream, Some(r)) if up => r.handle_frame(path, &frame, encoded, now),
                    _ => Err(ProtocolError::Unexpected {
                        path,
                        what: "frame before the handshake completed",
                    }),
                }
            }
        }
    }

    /// Client: the server's report that path `r.path_index` stalls its data. A report about
    /// a connection the path no longer has (another epoch), or a path not up, is stale.
    fn on_stall_report(&mut self, path: PathId, r: wire::Stalled) -> Result<(), ProtocolError> {
        if self.role != Role::Client || !self.established || self.paths[path.index()].state != PathState::Up {
            return Err(ProtocolError::Unexpected { path, what: "STALLED" });
        }
        let Some(io) = self.paths.get(usize::from(r.path_index)) else {
            return Err(ProtocolError::Unexpected {
                path,
                what: "STALLED about a path never added",
            });
        };
        if io.state == PathState::Up && io.binding.epoch == r.epoch {
            self.events.push_back(Event::PeerStalled(PathId(r.path_index)));
            self.stall_reports_counted += 1;
        }
        Ok(())
    }

    /// Client: the first frame the server sent on a joining path must be its answer, made
    /// with the session key for this connection; then the path is up.
    fn on_join_answer(&mut self, path: PathId, frame: Frame<'_>, now: Instant) -> Result<(), ProtocolError> {
        let io = &self.paths[path.index()];
        let Frame::JoinOk(ok) = frame else {
            return Err(ProtocolError::BadJoinAnswer {
                path,
                why: format!("{:?} frame before the answer", frame.kind()),
            });
        };
        if io.join_due {
            return Err(ProtocolError::BadJoinAnswer {
                path,
                why: "an answer before our JOIN went out".into(),
            });
        }
        let binding = io.binding;
        if !self.keys.as_ref().is_some_and(|k| k.verify_join_ok(&ok, path.0, &binding)) {
            return Err(ProtocolError::BadJoinAnswer {
                path,
                why: "JOIN_OK failed authentication (not made with the session key for this connection)".into(),
            });
        }
        self.paths[path.index()].join_sent_at = None;
        self.mark_up(path, now);
        self.events.push_back(Event::PathJoined(path));
        Ok(())
    }

    fn on_hello(&mut self, h: &Hello, now: Instant) -> Result<(), ProtocolError> {
        if h.scheme != self.cfg.scheme.wire_scheme() {
            return Err(ProtocolError::BadHello("scheme"));
        }
        if h.segment_size == 0 || h.segment_size as usize > MAX_SEGMENT {
            return Err(ProtocolError::BadHello("segment size out of range"));
        }
        let min_buffer = self.cfg.scheme.min_peer_recv_buffer(h.segment_size);
        if h.recv_buffer < min_buffer || h.recv_buffer as usize > MAX_BUFFER {
            return Err(ProtocolError::BadHello("receive buffer out of range"));
        }
        let keys = match self.role {
            Role::Client => SessionKeys::derive(&self.local_key, &h.key, &self.paths[0].binding.exporter),
            Role::Server => SessionKeys::derive(&h.key, &self.local_key, &self.paths[0].binding.exporter),
        };
        self.keys = Some(keys);
        self.sender.set_peer_recv_buffer(u64::from(h.recv_buffer));
        self.receiver = Some(self.cfg.scheme.receiver(self.cfg.stream_params(), h.isn));
        self.established = true;
        self.events.push_back(Event::Connected);
        match self.role {
            Role::Server => {
                self.paths[0].hello_due = true;
                self.note_joined(PathId(0), 0);
            }
            Role::Client => {
                for io in self.paths.iter_mut().skip(1) {
                    if io.state == PathState::Pending {
                        io.join_due = true;
                        io.state = PathState::Joining;
                    }
                }
            }
        }
        self.mark_up(PathId(0), now);
        Ok(())
    }

    fn fail(&mut self, e: &ProtocolError) {
        if self.closed {
            return;
        }
        self.closed = true;
        for io in self.paths.iter_mut().filter(|io| io.carries_close()) {
            io.close_due = true;
        }
        self.close_reason = Some((e.close_code(), e.to_string()));
        self.events.push_back(Event::Closed {
            code: e.close_code(),
            reason: e.to_string(),
            by_peer: false,
        });
    }

    /// Ends the session: a CLOSE with `code` (0 = normal) goes out on every live path.
    pub fn close(&mut self, code: u16, reason: &str) {
        if self.closed {
            return;
        }
        self.closed = true;
        for io in self.paths.iter_mut().filter(|io| io.carries_close()) {
            io.close_due = true;
        }
        self.close_reason = Some((code, reason.to_owned()));
        self.events.push_back(Event::Closed {
            code,
            reason: reason.to_owned(),
            by_peer: false,
        });
    }

    /// Appends at most one frame for `path` (at most `room` bytes) to `out`; returns its
    /// length, 0 when the path has nothing to send now.
    #[must_use]
    pub fn poll_transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut Vec<u8>) -> usize {
        self.poll_transmit_to(path, room, now, Out::Vec(out))
    }

    /// [`Connection::poll_transmit`] into a [`FrameBuf`]: DATA payloads may be appended as
    /// slices of the send buffer rather than copied (when the scheme's sender keeps
    /// `Bytes`); write the chunks with one vectored write.
    #[must_use]
    pub fn poll_transmit_buf(&mut self, path: PathId, room: usize, now: Instant, out: &mut FrameBuf) -> usize {
        self.poll_transmit_to(path, room, now, Out::Buf(out))
    }

    fn poll_transmit_to(&mut self, path: PathId, room: usize, now: Instant, mut out: Out<'_>) -> usize {
        let Some(io) = self.paths.get_mut(path.index()) else {
            return 0;
        };
        if io.state == PathState::Down {
            return 0;
        }
        // A JOIN's answer first: the client reads nothing else on the connection before it
        // (not even a CLOSE that follows it).
        let control = if io.join_ok_due {
            self.keys.as_ref().map(|k| Frame::JoinOk(k.join_ok(path.0, &io.binding)))
        } else if io.close_due {
            let (code, reason) = self.close_reason.clone().unwrap_or((0, String::new()));
            Some(Frame::Close(Close { code, reason }))
        } else if io.hello_due {
            Some(Frame::Hello(self.hello()))
        } else if io.join_due {
            self.keys.as_ref().map(|k| Frame::Join(k.join(path.0, &io.binding)))
        } else if io.state == PathState::Up && self.established && !self.closed {
            stall_report_for(&self.stall_reports, path)
        } else {
            None
        };
        if let Some(frame) = control {
            let len = frame.buffer_len();
            if len > room {
                return 0;
            }
            out.frame(&frame);
            let io = &mut self.paths[path.index()];
            match frame {
                Frame::Close(_) => io.close_due = false,
                Frame::Hello(_) => io.hello_due = false,
                Frame::Join(_) => {
                    io.join_due = false;
                    io.join_sent_at = Some(now);
                }
                Frame::JoinOk(_) => io.join_ok_due = false,
                Frame::Stalled(r) => {
                    self.stall_reports.retain(|&(p, _)| p.0 != r.path_index);
                    self.stall_reports_counted += 1;
                }
                _ => {}
            }
            return len;
        }
        if self.closed || !self.established || self.paths[path.index()].state != PathState::Up {
            return 0;
        }
        // Most polls find no ACK due: no call that builds none (`has_frame` is exact or
        // conservative).
        let fresh = self
            .receiver
            .as_mut()
            .filter(|r| r.has_frame(path))
            .and_then(|r| r.poll_frame(path, now));
        // `take` only a held ACK there is: taking from `None` moves a whole `Frame`.
        let held = &mut self.paths[path.index()].held_ack;
        if let Some(frame) = fresh.or_else(|| if held.is_some() { held.take() } else { None }) {
            let len = frame.buffer_len();
            if len <= room {
                self.paths[path.index()].held_ack = None;
                out.frame(&frame);
                return len;
            }
            self.paths[path.index()].held_ack = Some(frame);
            return 0;
        }
        let sender = &mut self.sender;
        let mut head = [0u8; FRAME_HEAD_LEN];
        let n = match out {
            Out::Vec(v) => {
                let n = sender.poll_transmit(path, room, now, v);
                let frame = &v[v.len() - n..];
                let k = frame.len().min(head.len());
                head[..k].copy_from_slice(&frame[..k]);
                n
            }
            Out::Buf(b) => {
                let n = sender.poll_transmit_buf(path, room, now, b);
                // Most polls send nothing: no walk over the buffer's chunks for them.
                if n > 0 {
                    b.copy_last(n, &mut head);
                }
                n
            }
        };
        if let (true, Some(p)) = (n > 0, self.delay_probe.as_mut()) {
            p.on_frame(&head[..n.min(FRAME_HEAD_LEN)], now);
        }
        self.collect_path_events(now);
        n
    }

    /// Whether [`Connection::poll_transmit`] on `path` with `room` at `now` would return 0
    /// and change nothing the driver could tell: no control frame or ACK due, and the
    /// scheme's sender answers from its memory of the last poll
    /// ([`SchemeSender::poll_idle`]). If so, the poll counts as made (the sender's
    /// timers see it, as they see every poll) and the driver need not make it: most of
    /// a simulator's polls are such, and the layers around the sender's memory cost
    /// more than the memory itself. False whenever unsure. Debug builds make the poll
    /// anyway and check it sent nothing (the sender checks it changed nothing).
    pub fn poll_idle(&mut self, path: PathId, room: usize, now: Instant) -> bool {
        let Some(io) = self.paths.get(path.index()) else {
            return false;
        };
        let due = io.close_due
            || io.hello_due
            || io.join_due
            || io.join_ok_due
            || io.held_ack.is_some()
            || stall_report_for(&self.stall_reports, path).is_some();
        if due || io.state != PathState::Up || self.closed || !self.established {
            return false;
        }
        if self.receiver.as_ref().is_some_and(|r| r.has_frame(path)) || !self.sender.poll_idle(path, room, now) {
            return false;
        }
        if cfg!(debug_assertions) {
            let n = self.poll_transmit_to(path, room, now, Out::Vec(&mut Vec::new()));
            assert_eq!(n, 0, "a poll left out as idle would have sent");
        }
        true
    }

    /// Turns what the sender learnt about paths (after ACKs, timeouts, transmits) into
    /// events.
    fn collect_path_events(&mut self, now: Instant) {
        self.collect_stalled_paths();
        while let Some(p) = self.sender.poll_failed_path() {
            self.path_down(p, now);
            self.events.push_back(Event::PathFailed(p));
        }
    }

    /// Stalls are reported as soon as an input reveals them (an ACK, a timeout).
    fn collect_stalled_paths(&mut self) {
        while let Some(p) = self.sender.poll_stalled_path() {
            self.events.push_back(Event::PathStalled(p));
            let report = self.role == Role::Server && self.cfg.report_stalls;
            if let (true, Some(io)) = (report, self.paths.get(p.index())) {
                let epoch = io.binding.epoch;
                self.stall_reports.retain(|&(q, _)| q != p);
                self.stall_reports.push((p, epoch));
            }
        }
    }

    /// When `handle_timeout` should next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed || !self.established {
            return None;
        }
        let r = self.receiver.as_ref().and_then(|r| r.poll_timeout());
        match (self.sender.poll_timeout(), r) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if self.closed || !self.established {
            return;
        }
        self.sender.handle_timeout(now);
        if let Some(r) = self.receiver.as_mut() {
            r.handle_timeout(now);
        }
        self.collect_path_events(now);
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Writes application bytes; returns how many fit (0 when the send buffer is full or the
    /// stream was finished). Bytes written before the handshake completes wait.
    pub fn write(&mut self, data: &[u8]) -> usize {
        if self.closed {
            return 0;
        }
        self.sender.write(data)
    }

    /// [`Connection::write`] for bytes held in a `Bytes`: a sender that keeps its buffer as
    /// `Bytes` takes a slice instead of copying. The caller advances `data` by the result.
    pub fn write_bytes(&mut self, data: &Bytes) -> usize {
        if self.closed {
            return 0;
        }
        self.sender.write_bytes(data)
    }

    /// Bytes `write` would accept now.
    pub fn send_room(&self) -> usize {
        if self.closed {
            0
        } else {
            self.sender.send_room()
        }
    }

    /// Ends our direction of the stream after the bytes written so far.
    pub fn finish(&mut self) {
        self.sender.finish();
    }

    /// Every byte we wrote (and our stream end, if finished) has been acknowledged.
    pub fn is_send_done(&self) -> bool {
        self.sender.is_all_acked()
    }

    /// Reads in-order bytes of the peer's stream.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = self.receiver.as_mut().map_or(0, |r| r.read(buf));
        self.bytes_read += n as u64;
        n
    }

    /// Takes up to `max` in-order bytes of the peer's stream as one chunk, without copying
    /// when they arrived through [`Connection::handle_recv_buf`]; None when none are ready.
    pub fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        let b = self.receiver.as_mut().and_then(|r| r.read_bytes(max));
        self.bytes_read += b.as_ref().map_or(0, |b| b.len() as u64);
        b
    }

    pub fn readable(&self) -> usize {
        self.receiver.as_ref().map_or(0, |r| r.readable())
    }

    /// The peer's stream ended and we read all of it.
    pub fn is_recv_finished(&self) -> bool {
        self.receiver.as_ref().is_some_and(|r| r.is_finished())
    }

    pub fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            sender: self.sender.stats(),
            receiver: self.receiver.as_ref().map(|r| r.stats()).unwrap_or_default(),
            forward_path: self.sender.forward_path(),
            stall_reports: self.stall_reports_counted,
        }
    }
}

/// Where `poll_transmit` puts a frame.
enum Out<'a> {
    Vec(&'a mut Vec<u8>),
    Buf(&'a mut FrameBuf),
}

impl Out<'_> {
    fn frame(&mut self, frame: &Frame<'_>) {
        match self {
            Out::Vec(v) => frame.emit(v),
            Out::Buf(b) => {
                b.push_with(|v| frame.emit(v));
            }
        }
    }
}

/// A stall report due to go on `path`: one about another path (a stalled connection
/// carries nothing, its own report least of all).
fn stall_report_for(reports: &[(PathId, u32)], path: PathId) -> Option<Frame<'static>> {
    reports
        .iter()
        .find(|&&(p, _)| p != path)
        .map(|&(p, epoch)| Frame::Stalled(wire::Stalled { path_index: p.0, epoch }))
}

/// The runtime moves a `Connection` between worker threads: keep it `Send`.
#[allow(dead_code)]
const fn connection_is_send() {
    const fn assert_send<T: Send>() {}
    assert_send::<Connection>();
}
