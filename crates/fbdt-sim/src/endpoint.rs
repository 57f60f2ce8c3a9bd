//! What the simulator drives at each end of the paths: the FBDT core, or a single-path TCP
//! baseline (the link model itself, no framing).

use fbdt_core::delay_probe::{DelayJoin, DelayProbe, DEFAULT_STEP};
use fbdt_core::wire::{Data, FrameBuf, MpData, MAX_PATHS};
use fbdt_core::{
    Config, ConfigError, Connection, ConnectionStats, Event, Hint, Instant, PathBinding, PathId, PathStats,
    ProtocolError, SchemeConfig,
};
use thiserror::Error;

use crate::link::Chunk;
use crate::params::{Payload, Verification};
use crate::pattern::{self, Verified};

/// Why a simulated endpoint failed.
#[derive(Debug, Error)]
pub enum EndpointError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// The receiving application read bytes that differ from the pattern.
    #[error("corrupt stream bytes at offset {from}..{to}")]
    Corrupt { from: u64, to: u64 },
    /// The single-path TCP baseline delivered a byte that differs from the pattern.
    #[error("corrupt TCP bytes at offset {0}")]
    CorruptTcp(u64),
}

/// Which end of the simulated paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Sends the download (the papers' direction).
    Server,
    /// Receives it.
    Client,
}

/// A simulated endpoint: a sans-IO protocol plus the application around it.
pub trait SimEndpoint {
    fn recv(&mut self, path: usize, chunk: &Chunk, now: Instant) -> Result<(), EndpointError>;
    /// Puts at most one frame of at most `room` bytes for `path` into the empty `out`;
    /// returns its length.
    fn transmit(&mut self, path: usize, room: usize, now: Instant, out: &mut Chunk) -> usize;
    /// Whether `transmit` would return 0 and change nothing but what this call did
    /// (`Connection::poll_idle`): the simulator then leaves it out. False when unsure.
    fn transmit_idle(&mut self, _path: usize, _room: usize, _now: Instant) -> bool {
        false
    }
    /// Whether `transmit_idle` can ever be true.
    fn polls_idle(&self) -> bool {
        false
    }
    fn timeout(&self) -> Option<Instant>;
    fn on_timeout(&mut self, now: Instant);
    /// Runs the application: the server writes what fits, the client reads and checks
    /// everything available. Returns bytes the application received in order.
    fn run_app(&mut self, now: Instant) -> Result<u64, EndpointError>;
    /// Appends the protocol events worth logging, with path resets the simulator must
    /// carry out, to `out` (a buffer the simulator reuses: most steps have none).
    fn take_events(&mut self, out: &mut Vec<Event>);
    fn path_down(&mut self, path: usize, now: Instant);
    fn path_up(&mut self, path: usize, now: Instant);
    /// What the path's TCP connection would report in TCP_INFO.
    fn path_stats(&mut self, path: usize, stats: PathStats);
    /// From when more room on `path` could make `transmit` send, unless an input comes
    /// first (`Connection::room_wanted_from`); now when unsure.
    fn room_wanted_from(&self, _path: usize) -> Option<Instant> {
        Some(Instant::ZERO)
    }
    /// Server: the application may write its stream only up to `bytes` (a workload's
    /// requests so far); unlimited until called. Ignored by the client.
    fn set_app_limit(&mut self, _bytes: u64) {}
    /// Server: the kernel-like send buffer the application's writes must fit in (bytes
    /// written and not yet acknowledged at the stream level; `crate::sndbuf`).
    fn set_send_limit(&mut self, _bytes: u64) {}
    /// A driver hint (scan announcements); ignored by default.
    fn path_hint(&mut self, _path: usize, _hint: Hint) {}
    fn stats(&self) -> Option<ConnectionStats>;
    /// Hands the delay probe's marks since the last call to `join` (first transmissions,
    /// then in-order deliveries).
    fn take_delay_marks(&mut self, join: &mut DelayJoin);
    /// Client: the whole transfer arrived (only for a sized transfer). Server: every byte
    /// and the stream end were acknowledged.
    fn is_done(&self) -> bool;
    /// Client: how the bytes it received were verified so far.
    fn verified(&self) -> Verification;
}

/// Counts a verified piece.
fn note(v: &mut Verification, how: Verified, len: usize) {
    match how {
        Verified::Identity => v.by_identity += len as u64,
        Verified::Compared => v.compared += len as u64,
    }
}

/// Bulk application bytes are produced in pieces of this size.
const APP_CHUNK: usize = 256 * 1024;

pub struct FbdtEnd {
    side: Side,
    conn: Connection,
    /// Server: next offset to write. Client: next offset to read.
    offset: u64,
    /// Bytes to transfer, `None` = backlogged until the run ends.
    limit: Option<u64>,
    /// Server: the application writes no further than this yet (`set_app_limit`).
    app_limit: u64,
    /// Server: a kernel-like send buffer (`set_send_limit`), `None` = only the core's own.
    send_limit: Option<u64>,
    /// The core's send buffer (`Config::send_buffer`): what its `send_room` is left of.
    send_buffer: u64,
    /// Bytes of the write the application was woken for that are still to go: decided once
    /// per write, so that how a payload mode splits it into slices changes nothing.
    write_budget: u64,
    scratch: Vec<u8>,
    payload: Payload,
    /// Shared mode: the frame being made (header inline, payload slices).
    frame: FrameBuf,
    verified: Verification,
    /// Connections each path had so far: a reconnect's epoch, as a real client numbers
    /// them in its JOIN (the server learns it from the JOIN).
    connections: Vec<u32>,
    /// The scheme's sender may answer a poll from memory (`transmit_idle`): FBDT's. For
    /// the others asking would only cost.
    idle_polls: bool,
}

impl FbdtEnd {
    /// An endpoint over `paths` paths, whose connections exist from `now` on unless
    /// `connect_later` (then each comes with [`SimEndpoint::path_up`] once its handshake
    /// completed).
    pub fn new(
        side: Side,
        cfg: Config,
        paths: usize,
        limit: Option<u64>,
        payload: Payload,
        now: Instant,
        connect_later: bool,
    ) -> Result<Self, EndpointError> {
        let send_buffer = cfg.send_buffer as u64;
        let idle_polls = matches!(cfg.scheme, SchemeConfig::Fbdt(_));
        let mut conn = match side {
            Side::Server => Connection::server(cfg),
            Side::Client => Connection::client(cfg),
        }?;
        if !connect_later {
            for p in 0..paths {
                // `paths` is a count from the scenario: checked, not assumed below MAX_PATHS.
                let id = PathId::from_index(p).ok_or(ProtocolError::TooManyPaths { max: MAX_PATHS })?;
                conn.add_path(id, now)?;
            }
        }
        conn.enable_delay_probe(DEFAULT_STEP);
        Ok(FbdtEnd {
            side,
            conn,
            offset: 0,
            limit,
            app_limit: u64::MAX,
            send_limit: None,
            send_buffer,
            write_budget: 0,
            scratch: match payload {
                Payload::Exact => vec![0; APP_CHUNK],
                Payload::Shared => Vec::new(),
            },
            payload,
            frame: FrameBuf::new(),
            verified: Verification::default(),
            connections: vec![u32::from(!connect_later); paths],
            idle_polls,
        })
    }
}

impl SimEndpoint for FbdtEnd {
    fn recv(&mut self, path: usize, chunk: &Chunk, now: Instant) -> Result<(), EndpointError> {
        Ok(self
            .conn
            .handle_recv_split(PathId::slot(path), &chunk.head, &chunk.payload, now)?)
    }

    fn transmit(&mut self, path: usize, room: usize, now: Instant, out: &mut Chunk) -> usize {
        let path = PathId::slot(path);
        match self.payload {
            Payload::Exact => self.conn.poll_transmit(path, room, now, &mut out.head),
            Payload::Shared => {
                self.frame.clear();
                let n = self.conn.poll_transmit_buf(path, room, now, &mut self.frame);
                if n > 0 {
                    frame_to_chunk(&self.frame, out);
                }
                n
            }
        }
    }

    fn transmit_idle(&mut self, path: usize, room: usize, now: Instant) -> bool {
        self.idle_polls && self.conn.poll_idle(PathId::slot(path), room, now)
    }

    fn polls_idle(&self) -> bool {
        self.idle_polls
    }

    fn timeout(&self) -> Option<Instant> {
        self.conn.poll_timeout()
    }

    fn on_timeout(&mut self, now: Instant) {
        self.conn.handle_timeout(now);
    }

    fn run_app(&mut self, _now: Instant) -> Result<u64, EndpointError> {
        match self.side {
            Side::Server => loop {
                let left = self.limit.map_or(u64::MAX, |l| l - self.offset);
                if left == 0 {
                    self.conn.finish();
                    return Ok(0);
                }
                let mut allowed = left.min(self.app_limit.saturating_sub(self.offset));
                if let Some(sndbuf) = self.send_limit {
                    if self.write_budget == 0 {
                        let queued = self.send_buffer.saturating_sub(self.conn.send_room() as u64);
                        self.write_budget = crate::sndbuf::writable(sndbuf, queued).min(APP_CHUNK as u64);
                    }
                    allowed = allowed.min(self.write_budget);
                }
                let n = self
                    .conn
                    .send_room()
                    .min(APP_CHUNK)
                    .min(allowed.min(APP_CHUNK as u64) as usize);
                if n == 0 {
                    return Ok(0);
                }
                let (n, took) = match self.payload {
                    Payload::Exact => {
                        pattern::fill(self.offset, &mut self.scratch[..n]);
                        (n, self.conn.write(&self.scratch[..n]))
                    }
                    Payload::Shared => {
                        // Up to the period's end; the rest in the next round of the loop.
                        let b = pattern::shared_slice(self.offset, n);
                        (b.len(), self.conn.write_bytes(&b))
                    }
                };
                self.offset += took as u64;
                self.write_budget = self.write_budget.saturating_sub(took as u64);
                if took < n {
                    return Ok(0);
                }
            },
            Side::Client if self.payload == Payload::Shared => {
                let mut got = 0;
                // `readable` first: a read that finds nothing costs more than asking, and
                // most steps end with one (no piece held in order is empty, so the read
                // returns bytes exactly when some are readable).
                while self.conn.readable() > 0 {
                    let Some(b) = self.conn.read_bytes(usize::MAX) else {
                        break;
                    };
                    let how = pattern::check_shared(self.offset, &b).ok_or(EndpointError::Corrupt {
                        from: self.offset,
                        to: self.offset + b.len() as u64,
                    })?;
                    note(&mut self.verified, how, b.len());
                    self.offset += b.len() as u64;
                    got += b.len() as u64;
                }
                Ok(got)
            }
            Side::Client => {
                let mut got = 0;
                loop {
                    let n = self.conn.read(&mut self.scratch);
                    if n == 0 {
                        return Ok(got);
                    }
                    if !pattern::check(self.offset, &self.scratch[..n]) {
                        return Err(EndpointError::Corrupt {
                            from: self.offset,
                            to: self.offset + n as u64,
                        });
                    }
                    self.verified.compared += n as u64;
                    self.offset += n as u64;
                    got += n as u64;
                }
            }
        }
    }

    fn take_events(&mut self, out: &mut Vec<Event>) {
        out.extend(std::iter::from_fn(|| self.conn.poll_event()));
    }

    fn path_down(&mut self, path: usize, now: Instant) {
        self.conn.path_down(PathId::slot(path), now);
    }

    fn path_up(&mut self, path: usize, now: Instant) {
        // A fresh connection: the client JOINs on it, the server accepts the JOIN.
        let epoch = self.connections.get(path).copied().unwrap_or(0);
        if let Some(n) = self.connections.get_mut(path) {
            *n += 1;
        }
        let binding = PathBinding {
            epoch,
            ..PathBinding::default()
        };
        let _ = self.conn.add_path_bound(PathId::slot(path), binding, now);
    }

    fn path_stats(&mut self, path: usize, stats: PathStats) {
        self.conn.path_stats(PathId::slot(path), stats);
    }

    fn room_wanted_from(&self, path: usize) -> Option<Instant> {
        self.conn.room_wanted_from(PathId::slot(path))
    }

    fn path_hint(&mut self, path: usize, hint: Hint) {
        self.conn.path_hint(PathId::slot(path), hint);
    }

    fn set_app_limit(&mut self, bytes: u64) {
        self.app_limit = bytes;
    }

    fn set_send_limit(&mut self, bytes: u64) {
        self.send_limit = Some(bytes);
        self.conn.set_send_limit(bytes);
    }

    fn is_done(&self) -> bool {
        match self.side {
            Side::Client => self.conn.is_recv_finished(),
            Side::Server => self.limit.is_some_and(|l| self.offset == l) && self.conn.is_send_done(),
        }
    }

    fn stats(&self) -> Option<ConnectionStats> {
        Some(self.conn.stats())
    }

    fn verified(&self) -> Verification {
        self.verified
    }

    fn take_delay_marks(&mut self, join: &mut DelayJoin) {
        if let Some(p) = self.conn.delay_marks() {
            take_marks(p, join);
        }
    }
}

/// Turns one frame the core made into a link chunk: its head inline and its payload as one
/// slice of the shared pattern when the payload is one run of that buffer's memory right
/// after a DATA or MP_DATA head (the core then takes it without a copy,
/// `handle_recv_split`); otherwise every byte inline (a control frame, a payload the
/// sender copied, one that wraps the period).
fn frame_to_chunk(frame: &FrameBuf, out: &mut Chunk) {
    let mut parts = frame.chunks_from(0);
    let head = parts.next().unwrap_or_default();
    let split_head = matches!(
        (head.first(), head.len()),
        (Some(3), Data::OVERHEAD) | (Some(7), MpData::OVERHEAD)
    );
    let mut payload: Option<bytes::Bytes> = None;
    let mut contiguous = split_head;
    for part in parts {
        if !contiguous {
            break;
        }
        let joined = match (payload.take(), pattern::as_shared(part)) {
            (None, Some(b)) => Some(b),
            (Some(a), Some(b)) if a.as_ptr_range().end == b.as_ptr() => {
                let shared = pattern::shared();
                let start = a.as_ptr() as usize - shared.as_ptr() as usize;
                Some(shared.slice(start..start + a.len() + b.len()))
            }
            _ => None,
        };
        contiguous = joined.is_some();
        payload = joined;
    }
    match payload.filter(|_| contiguous) {
        Some(p) => {
            out.head.extend_from_slice(head);
            out.payload = p;
        }
        None => frame.chunks_from(0).for_each(|c| out.head.extend_from_slice(c)),
    }
}

fn take_marks(p: &mut DelayProbe, join: &mut DelayJoin) {
    // Most steps mark nothing: no drains set up for them.
    if !p.has_marks() {
        return;
    }
    p.take_sent().for_each(|m| join.sent(m));
    p.take_delivered().for_each(|m| join.delivered(m));
}

/// Single-path TCP: the server streams pattern bytes onto one path; the client checks them.
pub struct TcpEnd {
    side: Side,
    path: usize,
    /// Largest chunk handed to the link at once.
    chunk: usize,
    limit: Option<u64>,
    /// Server: the application writes no further than this yet (`set_app_limit`).
    app_limit: u64,
    offset: u64,
    pending: u64,
    corrupt: Option<u64>,
    payload: Payload,
    verified: Verification,
    /// Server: bytes handed to the link (first transmissions; the link retransmits below
    /// the application). Client: bytes delivered in order.
    delay: DelayProbe,
}

impl TcpEnd {
    /// The pipe model's chunk (the TCP model's is [`TCP_MODEL_CHUNK`]).
    pub const PIPE_CHUNK: usize = 64 * 1024;
    /// The TCP model accounts its window chunk by chunk: chunks of FBDT's default segment
    /// size keep a small window (slow start's first, a collapsed one) from pacing a
    /// chunk out over several round trips, and compare the baseline on FBDT's footing.
    pub const TCP_MODEL_CHUNK: usize = 16 * 1024;

    pub fn new(side: Side, path: usize, limit: Option<u64>, chunk: usize, payload: Payload) -> Self {
        TcpEnd {
            side,
            path,
            chunk,
            limit,
            app_limit: u64::MAX,
            offset: 0,
            pending: 0,
            corrupt: None,
            payload,
            verified: Verification::default(),
            delay: DelayProbe::new(DEFAULT_STEP),
        }
    }
}

impl SimEndpoint for TcpEnd {
    fn recv(&mut self, path: usize, chunk: &Chunk, now: Instant) -> Result<(), EndpointError> {
        if self.side == Side::Client && path == self.path {
            let mut at = self.offset;
            for piece in [&chunk.head[..], &chunk.payload[..]] {
                let how = match self.payload {
                    Payload::Exact => pattern::check(at, piece).then_some(Verified::Compared),
                    Payload::Shared => pattern::check_shared(at, piece),
                };
                match how {
                    Some(how) => note(&mut self.verified, how, piece.len()),
                    None => {
                        self.corrupt.get_or_insert(at);
                    }
                }
                at += piece.len() as u64;
            }
            self.offset = at;
            self.pending += chunk.len() as u64;
            self.delay.on_in_order(self.offset, now);
        }
        Ok(())
    }

    fn transmit(&mut self, path: usize, room: usize, now: Instant, out: &mut Chunk) -> usize {
        if self.side != Side::Server || path != self.path {
            return 0;
        }
        let left = self
            .limit
            .map_or(u64::MAX, |l| l - self.offset)
            .min(self.app_limit.saturating_sub(self.offset));
        let n = room.min(self.chunk).min(left.min(1 << 20) as usize);
        if n == 0 {
            return 0;
        }
        match self.payload {
            Payload::Shared => {
                out.payload = pattern::shared_slice(self.offset, n);
                if out.payload.len() < n {
                    // Across the shared pattern's wrap (once a period): a copy.
                    let rest = pattern::shared_slice(self.offset + out.payload.len() as u64, n);
                    out.head.extend_from_slice(&out.payload);
                    out.head.extend_from_slice(&rest[..n - out.payload.len()]);
                    out.payload = bytes::Bytes::new();
                }
            }
            Payload::Exact => {
                out.head.resize(n, 0);
                pattern::fill(self.offset, &mut out.head);
            }
        }
        self.delay.on_emit(self.offset, n as u64, now);
        self.offset += n as u64;
        n
    }

    fn timeout(&self) -> Option<Instant> {
        None
    }

    fn on_timeout(&mut self, _now: Instant) {}

    fn run_app(&mut self, _now: Instant) -> Result<u64, EndpointError> {
        if let Some(at) = self.corrupt {
            return Err(EndpointError::CorruptTcp(at));
        }
        Ok(std::mem::take(&mut self.pending))
    }

    fn take_events(&mut self, _out: &mut Vec<Event>) {}

    fn path_down(&mut self, _path: usize, _now: Instant) {}
    fn path_up(&mut self, _path: usize, _now: Instant) {}
    fn path_stats(&mut self, _path: usize, _stats: PathStats) {}

    fn set_app_limit(&mut self, bytes: u64) {
        self.app_limit = bytes;
    }

    fn is_done(&self) -> bool {
        self.limit.is_some_and(|l| self.offset >= l)
    }

    fn stats(&self) -> Option<ConnectionStats> {
        None
    }

    fn take_delay_marks(&mut self, join: &mut DelayJoin) {
        take_marks(&mut self.delay, join);
    }

    fn verified(&self) -> Verification {
        self.verified
    }
}
