//! Every stream's buffers and credit, and what each frame does to them. No I/O: the driver
//! feeds frames in and takes batches out, the stream handles read and write under the
//! same lock. Invariants per stream:
//! - the peer never has more than `window` bytes outstanding (received and not yet read,
//!   or in flight): `peer_credit + unread + consumed == window`, and a DATA frame larger
//!   than `peer_credit` is a protocol violation that ends the mux;
//! - we queue at most `credit` bytes (the peer's grant) and at most `send_buffer` bytes
//!   unsent, so a stream the peer does not read holds little memory here.

use std::collections::{HashMap, VecDeque};
use std::task::Waker;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::frame::{Control, Header, Kind, MAX_DATA, MAX_OPEN};
use crate::{MuxConfig, INITIAL_WINDOW};

/// Why a stream cannot be opened.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The mux ended; why it did.
    #[error("{0}")]
    Closed(String),
    #[error("{0} streams open (the most allowed)")]
    TooMany(usize),
    #[error("stream ids exhausted")]
    IdsExhausted,
    #[error("request of {0} bytes (at most {MAX_OPEN})")]
    RequestTooLong(usize),
}

/// A frame of the peer's that breaks the protocol: the mux ends.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Violation {
    #[error("{kind:?} for stream {stream} that was never opened")]
    NeverOpened { kind: Kind, stream: u32 },
    #[error("stream {stream}: {n} bytes sent with {credit} credit")]
    OverCredit { stream: u32, n: u64, credit: u64 },
    #[error("stream {0}: data after FIN")]
    DataAfterFin(u32),
    #[error("OPEN of stream {0}: not a new id of the peer")]
    NotNewId(u32),
}

#[derive(Default)]
pub(crate) struct StreamState {
    // Receiving.
    pub recv: VecDeque<Bytes>,
    pub unread: usize,
    /// Bytes the peer may have outstanding (grows when a reader keeps up, see `on_blocked`).
    pub window: u64,
    /// Bytes the peer may still send, once what is in flight arrived.
    pub peer_credit: u64,
    /// Bytes read by the application and not yet returned to the peer as credit.
    pub consumed: u64,
    pub recv_fin: bool,
    pub read_waker: Option<Waker>,
    // Sending.
    pub out: VecDeque<Bytes>,
    pub out_len: usize,
    /// Bytes the peer lets us send beyond what we queued.
    pub credit: u64,
    /// A BLOCKED waits behind the stream's queued data (sent ahead of it, the peer would
    /// judge its reader by a buffer the data has not reached yet).
    pub blocked_queued: bool,
    pub blocked_sent: bool,
    pub fin_queued: bool,
    pub fin_sent: bool,
    /// An RST waits behind the data the application wrote before dropping its handle.
    pub rst_queued: bool,
    pub in_sendable: bool,
    /// `State::sent` when this stream last had a turn (or became sendable): what it has
    /// waited for since is `sent - turn`.
    pub turn: u64,
    pub write_waker: Option<Waker>,
    /// The peer reset or refused the stream.
    pub reset: bool,
    /// The application dropped its handle; the entry lives on only to send what it queued.
    pub handle_dropped: bool,
}

impl StreamState {
    fn new() -> StreamState {
        StreamState {
            window: INITIAL_WINDOW,
            peer_credit: INITIAL_WINDOW,
            credit: INITIAL_WINDOW,
            ..StreamState::default()
        }
    }

    pub fn wake(&mut self) {
        if let Some(w) = self.read_waker.take() {
            w.wake();
        }
        if let Some(w) = self.write_waker.take() {
            w.wake();
        }
    }
}

pub(crate) struct State {
    pub cfg: MuxConfig,
    pub streams: HashMap<u32, StreamState>,
    /// Frames without data, sent before any DATA of the next batch.
    pub control: VecDeque<Control>,
    /// Streams with data, a FIN, a BLOCKED or an RST to send, in the order they became
    /// sendable (see `next_turn` for who goes first).
    pub sendable: VecDeque<u32>,
    /// DATA bytes put into batches so far (the clock of `StreamState::turn`).
    sent: u64,
    next_local: u32,
    highest_remote: u32,
    /// Sum of every stream's `window`: the most the peers may make us buffer.
    pub granted: u64,
    pub incoming: VecDeque<(u32, Bytes)>,
    pub accept_waker: Option<Waker>,
    /// Why the mux ended (the first reason wins).
    pub closed: Option<String>,
    /// False once no one accepts the peer's streams: its OPENs are refused.
    pub accepting: bool,
}

impl State {
    pub fn new(cfg: MuxConfig, client: bool) -> State {
        State {
            cfg,
            streams: HashMap::new(),
            control: VecDeque::new(),
            sendable: VecDeque::new(),
            sent: 0,
            next_local: if client { 1 } else { 2 },
            highest_remote: 0,
            granted: 0,
            incoming: VecDeque::new(),
            accept_waker: None,
            closed: None,
            accepting: true,
        }
    }

    fn is_local(&self, id: u32) -> bool {
        id % 2 == self.next_local % 2
    }

    /// A stream id that was open once and is gone now (late frames for it are dropped).
    fn was_open(&self, id: u32) -> bool {
        if self.is_local(id) {
            id < self.next_local
        } else {
            id <= self.highest_remote
        }
    }

    /// Opens a stream whose OPEN carries `request`; its id.
    pub fn open(&mut self, request: Bytes) -> Result<u32, OpenError> {
        if let Some(why) = &self.closed {
            return Err(OpenError::Closed(why.clone()));
        }
        if self.streams.len() >= self.cfg.max_streams {
            return Err(OpenError::TooMany(self.streams.len()));
        }
        let id = self.next_local;
        self.next_local = id.checked_add(2).ok_or(OpenError::IdsExhausted)?;
        self.insert(id);
        let mut c = Control::new(Kind::Open, id, request.len() as u32);
        c.payload = request;
        self.control.push_back(c);
        Ok(id)
    }

    fn insert(&mut self, id: u32) {
        self.streams.insert(id, StreamState::new());
        self.granted += INITIAL_WINDOW;
    }

    fn remove(&mut self, id: u32) {
        if let Some(s) = self.streams.remove(&id) {
            self.granted -= s.window;
        }
    }

    /// Ends the mux: every waiting handle wakes and sees `why`.
    pub fn close(&mut self, why: String) {
        self.closed.get_or_insert(why);
        for s in self.streams.values_mut() {
            s.wake();
        }
        if let Some(w) = self.accept_waker.take() {
            w.wake();
        }
    }

    /// Applies one received frame. An error is a protocol violation: the mux ends.
    pub fn on_frame(&mut self, h: Header, payload: Bytes) -> Result<(), Violation> {
        if h.kind == Kind::Open {
            return self.on_open(h.stream, payload);
        }
        let Some(s) = self.streams.get_mut(&h.stream) else {
            return if self.was_open(h.stream) {
                // Data for a stream we closed: tell the peer, as TCP answers a closed port.
                if h.kind == Kind::Data {
                    self.control.push_back(Control::new(Kind::Rst, h.stream, 0));
                }
                Ok(())
            } else {
                Err(Violation::NeverOpened {
                    kind: h.kind,
                    stream: h.stream,
                })
            };
        };
        match h.kind {
            Kind::Open => unreachable!("handled above"),
            Kind::Data => {
                let n = payload.len() as u64;
                if n > s.peer_credit {
                    return Err(Violation::OverCredit {
                        stream: h.stream,
                        n,
                        credit: s.peer_credit,
                    });
                }
                if s.recv_fin {
                    return Err(Violation::DataAfterFin(h.stream));
                }
                s.peer_credit -= n;
                if !s.handle_dropped && !payload.is_empty() {
                    s.unread += payload.len();
                    s.recv.push_back(payload);
                    if let Some(w) = s.read_waker.take() {
                        w.wake();
                    }
                }
            }
            Kind::Window => {
                s.credit = s.credit.saturating_add(u64::from(h.length));
                s.blocked_sent = false;
                if let Some(w) = s.write_waker.take() {
                    w.wake();
                }
            }
            Kind::Fin => {
                s.recv_fin = true;
                if let Some(w) = s.read_waker.take() {
                    w.wake();
                }
                self.remove_if_done(h.stream);
            }
            Kind::Rst => {
                s.reset = true;
                s.out.clear();
                s.out_len = 0;
                s.wake();
                self.remove_if_done(h.stream);
            }
            Kind::Blocked => self.on_blocked(h.stream),
        }
        Ok(())
    }

    fn on_open(&mut self, id: u32, request: Bytes) -> Result<(), Violation> {
        if self.is_local(id) || id <= self.highest_remote {
            return Err(Violation::NotNewId(id));
        }
        self.highest_remote = id;
        if !self.accepting || self.streams.len() >= self.cfg.max_streams {
            tracing::debug!(id, "refusing a stream: {} open", self.streams.len());
            self.control.push_back(Control::new(Kind::Rst, id, 0));
            return Ok(());
        }
        self.insert(id);
        self.incoming.push_back((id, request));
        if let Some(w) = self.accept_waker.take() {
            w.wake();
        }
        Ok(())
    }

    /// The peer is out of credit on `id`. If the reader keeps up (less than half the window
    /// unread) the window, not the reader, limits the stream: double it, within the
    /// per-stream maximum and the mux's budget. Either way return what was read.
    fn on_blocked(&mut self, id: u32) {
        let (max_window, budget, granted) = (self.cfg.max_window, self.cfg.budget, self.granted);
        let Some(s) = self.streams.get_mut(&id) else { return };
        let mut grant = std::mem::take(&mut s.consumed);
        if (s.unread as u64) <= s.window / 2 && s.window < max_window {
            let grow = s.window.min(max_window - s.window);
            if granted + grow <= budget {
                s.window += grow;
                self.granted += grow;
                grant += grow;
            }
        }
        let s = self.streams.get_mut(&id).expect("looked up above");
        s.peer_credit += grant;
        if grant > 0 {
            self.control.push_back(window_frame(id, grant));
        }
    }

    /// The application read `n` bytes of `id`: return them as credit once a quarter of the
    /// window was read (fewer, larger WINDOW frames). True if a frame was queued.
    pub fn on_read(&mut self, id: u32, n: usize) -> bool {
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        s.unread -= n;
        s.consumed += n as u64;
        if s.recv_fin || s.consumed < s.window / 4 {
            return false;
        }
        let grant = std::mem::take(&mut s.consumed);
        s.peer_credit += grant;
        self.control.push_back(window_frame(id, grant));
        true
    }

    pub fn mark_sendable(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.in_sendable {
                s.in_sendable = true;
                s.turn = self.sent;
                self.sendable.push_back(id);
            }
        }
    }

    /// The handle of `id` is gone. As a TCP socket's close: after our FIN (with nothing
    /// left unread, or the peer's FIN in) the stream ends quietly once what was queued is
    /// sent, and data the peer sends later is answered with RST; any other stream is
    /// reset. Unlike TCP, data written before the drop still goes out ahead of the RST
    /// (a server's error answer is not lost); `force_reset` (an explicit abort) drops it.
    pub fn drop_handle(&mut self, id: u32, force_reset: bool) {
        let Some(s) = self.streams.get_mut(&id) else { return };
        let quiet = !force_reset && (s.reset || (s.fin_queued && (s.recv_fin || s.unread == 0)));
        s.handle_dropped = true;
        s.recv.clear();
        s.unread = 0;
        if quiet {
            self.remove_if_done(id);
            return;
        }
        if !force_reset {
            s.rst_queued = true;
            self.mark_sendable(id);
            return;
        }
        if !s.reset {
            self.control.push_back(Control::new(Kind::Rst, id, 0));
        }
        self.remove(id);
    }

    fn remove_if_done(&mut self, id: u32) {
        let Some(s) = self.streams.get(&id) else { return };
        if s.handle_dropped && (s.reset || s.fin_sent) {
            self.remove(id);
        }
    }

    /// Moves control frames, then DATA of the sendable streams, one frame (at most
    /// `MAX_DATA`) per turn in the order of [`State::next_turn`], into `batch` until it
    /// holds `max` bytes. A stream's BLOCKED, FIN or RST follows its last queued byte.
    pub fn fill_batch(&mut self, batch: &mut BytesMut, max: usize) {
        while let Some(c) = self.control.pop_front() {
            c.header.encode(batch);
            batch.put_slice(&c.payload);
        }
        while batch.len() < max {
            let Some(i) = self.next_turn() else { break };
            let id = self.sendable[i];
            let Some(s) = self.streams.get_mut(&id) else {
                self.sendable.remove(i);
                continue;
            };
            let n = s.out_len.min(MAX_DATA);
            if n > 0 {
                Header {
                    kind: Kind::Data,
                    stream: id,
                    length: n as u32,
                }
                .encode(batch);
                let mut left = n;
                while left > 0 {
                    let front = s.out.front_mut().expect("out_len counts these bytes");
                    let k = front.len().min(left);
                    batch.put_slice(&front[..k]);
                    front.advance(k);
                    if front.is_empty() {
                        s.out.pop_front();
                    }
                    left -= k;
                }
                s.out_len -= n;
                self.sent += n as u64;
                s.turn = self.sent;
                if let Some(w) = s.write_waker.take() {
                    w.wake();
                }
            }
            if s.out_len > 0 {
                continue;
            }
            self.sendable.remove(i);
            s.in_sendable = false;
            if std::mem::take(&mut s.blocked_queued) && !s.reset {
                Header {
                    kind: Kind::Blocked,
                    stream: id,
                    length: 0,
                }
                .encode(batch);
            }
            if s.fin_queued && !s.fin_sent && !s.reset {
                Header {
                    kind: Kind::Fin,
                    stream: id,
                    length: 0,
                }
                .encode(batch);
                s.fin_sent = true;
            }
            if s.rst_queued {
                // The handle was dropped mid-exchange: its data (and FIN) went out above,
                // now the RST (a FIN before it still reads as a clean end at the peer).
                if !s.reset {
                    Header {
                        kind: Kind::Rst,
                        stream: id,
                        length: 0,
                    }
                    .encode(batch);
                }
                self.remove(id);
            } else {
                self.remove_if_done(id);
            }
        }
    }

    /// The position in `sendable` of the stream whose turn it is: the one with the least
    /// `queued − waited` bytes (queued: its unsent bytes; waited: DATA bytes other streams
    /// sent since its last turn). Among streams that are all just served this is the
    /// nearest to done, so a short answer queued beside a long one goes out whole first
    /// instead of in alternating 16 KiB frames (under processor sharing every answer ends
    /// late); and a stream never waits for more bytes of others than it has queued itself
    /// (plus one frame per stream waiting longer), so a long one is not starved and two long
    /// ones alternate in runs of about one send buffer. Ties go to the one sendable first.
    fn next_turn(&self) -> Option<usize> {
        let mut best: Option<(i128, usize)> = None;
        for (i, id) in self.sendable.iter().enumerate() {
            let Some(s) = self.streams.get(id) else {
                return Some(i);
            };
            let key = s.out_len as i128 - i128::from(self.sent - s.turn);
            if best.is_none_or(|(k, _)| key < k) {
                best = Some((key, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// Streams open now (accepted or not, finishing or not).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }
}

fn window_frame(id: u32, grant: u64) -> Control {
    Control::new(Kind::Window, id, grant.min(u64::from(u32::MAX)) as u32)
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
