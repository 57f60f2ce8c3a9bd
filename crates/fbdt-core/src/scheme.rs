//! The two halves every multipath scheme implements: FBDT (`fbdt`) and the MPTCP-style meta
//! layer (`meta`). Each half owns its frames — it decodes the ones addressed to it and
//! produces the ones it sends — so `Connection` only frames, routes by direction
//! ([`Frame::flow`]) and runs the handshake, and the runtime, the simulator and the lab
//! drive every scheme alike.

use bytes::Bytes;

use crate::error::ProtocolError;
use crate::path::{Hint, PathId, PathStats};
use crate::stats::{ReceiverStats, SenderStats};
use crate::time::{Duration, Instant};
use crate::wire::{Frame, FrameBuf};

/// The knobs both schemes share (see `Config` for their meaning), handed to a scheme's
/// sender and receiver when the session builds them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StreamParams {
    pub segment_size: usize,
    pub recv_buffer: usize,
    pub send_buffer: usize,
    pub ack_every: u32,
    pub ack_bytes: usize,
    pub max_ack_delay: Duration,
}

/// Sends one byte stream over N paths. Every sender is `Clone` (through
/// [`SchemeSenderClone`]), so a whole `Connection` is.
pub trait SchemeSender: Send + SchemeSenderClone {
    /// Takes application bytes; returns how many fit in the send buffer (back-pressure).
    fn write(&mut self, data: &[u8]) -> usize;
    /// Like `write`, for bytes the driver already holds in a `Bytes`: a sender that keeps
    /// its buffer as `Bytes` chunks takes a slice of `data` instead of copying it.
    fn write_bytes(&mut self, data: &Bytes) -> usize;
    /// No more bytes will be written; the stream end is sent after the last byte.
    fn finish(&mut self);
    /// Every byte written (and the end, if finished) is acknowledged.
    fn is_all_acked(&self) -> bool;
    /// Bytes the application may write now.
    fn send_room(&self) -> usize;
    /// The peer's receive buffer, from its HELLO: the initial flow-control limit.
    fn set_peer_recv_buffer(&mut self, bytes: u64);

    /// The connection epoch (JOIN's) of the connection `path` comes up on, told just before
    /// its `path_up`: per-path counters restart with each epoch. Schemes whose counters
    /// carry no epoch ignore it.
    fn set_path_epoch(&mut self, _path: PathId, _epoch: u32) {}
    fn path_up(&mut self, path: PathId, now: Instant);
    fn path_down(&mut self, path: PathId, now: Instant);
    fn path_stats(&mut self, path: PathId, stats: PathStats);
    /// From when more room on `path` than the last poll was offered could make a poll
    /// send something, unless an input comes first (`None`: not before an input); see
    /// `Connection::room_wanted_from`. Now, for schemes that do not remember their polls.
    fn room_wanted_from(&self, _path: PathId) -> Option<Instant> {
        Some(Instant::ZERO)
    }
    /// A driver hint about `path` (scan announcements); schemes that do not use hints
    /// ignore it.
    fn path_hint(&mut self, _path: PathId, _hint: Hint) {}

    /// A feedback frame ([`Flow::Feedback`](crate::wire::Flow)) arrived on `path`; it may
    /// acknowledge data sent on any path. A frame of another scheme is an error.
    fn handle_frame(&mut self, path: PathId, frame: &Frame<'_>, now: Instant) -> Result<(), ProtocolError>;
    /// Appends at most one frame of at most `room` bytes for `path` to `out`; returns its
    /// length (0 = nothing to send on this path now).
    fn poll_transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut Vec<u8>) -> usize;
    /// Like `poll_transmit`, appending to a `FrameBuf`: the header inline and the payload
    /// as shared slices of the send buffer (no copy).
    fn poll_transmit_buf(&mut self, path: PathId, room: usize, now: Instant, out: &mut FrameBuf) -> usize;
    /// Whether a poll of `path` with `room` at `now` would be answered from the sender's
    /// memory of its last poll there — nothing to send, nothing changed, no path event
    /// waiting to be collected. If so, what that poll would still change is done and the
    /// answer is true: the driver may leave the poll out (`Connection::poll_idle`).
    /// False whenever unsure (the default): the driver then polls.
    fn poll_idle(&mut self, _path: PathId, _room: usize, _now: Instant) -> bool {
        false
    }
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    fn stats(&self) -> SenderStats;
    /// A path that just became stalled (it holds undelivered data and delivered nothing
    /// for the scheme's stall time), once per stall; `Connection` turns it into
    /// `Event::PathStalled`. Schemes that do not track stalls never report one.
    fn poll_stalled_path(&mut self) -> Option<PathId> {
        None
    }
    /// A path the scheme had to reset; `Connection` takes it down and reports
    /// `Event::PathFailed`.
    fn poll_failed_path(&mut self) -> Option<PathId> {
        None
    }
    /// The path the scheme currently treats as its most reliable one, if it has such a
    /// notion (FBDT's forward path).
    fn forward_path(&self) -> Option<PathId> {
        None
    }
    /// The scheduler's current split in percent, for schedulers that keep one (logs).
    fn scheduler_ratio(&self) -> Option<u8> {
        None
    }
    /// The driver holds the application's writes to a send buffer of `bytes` counted from
    /// the oldest unacknowledged byte (a kernel-like socket buffer, tighter than the
    /// scheme's own); schemes that react to a blocked writer read it.
    fn set_send_limit(&mut self, _bytes: u64) {}
    /// How long until a fresh `PathStats::unacked_bytes` for `path` is worth reading: set
    /// while the scheme's send limit, counted from the transport's last report, holds back
    /// the path's next frame (no socket event announces the transport's ACKs, so the
    /// driver reads its counters again then). `None`: no report is awaited.
    fn transport_report_wanted(&self, _path: PathId) -> Option<Duration> {
        None
    }
}

/// Receives one byte stream from N paths and delivers it in order. Every receiver is
/// `Clone` (through [`SchemeReceiverClone`]).
pub trait SchemeReceiver: Send + SchemeReceiverClone {
    /// A stream frame ([`Flow::Stream`](crate::wire::Flow)) arrived on `path`. `frame` was
    /// decoded from `encoded`, so its payload can be kept without a copy as
    /// `encoded.slice_ref(payload)`. A frame of another scheme is an error.
    fn handle_frame(
        &mut self,
        path: PathId,
        frame: &Frame<'_>,
        encoded: &Bytes,
        now: Instant,
    ) -> Result<(), ProtocolError>;
    /// The feedback frame (ACK, DATA_ACK) due on `path` now, if any. `Connection` sends it
    /// before any data of ours on that path.
    fn poll_frame(&mut self, path: PathId, now: Instant) -> Option<Frame<'static>>;
    /// `poll_frame` may have something for `path` (always, for receivers that do not say).
    fn has_frame(&self, _path: PathId) -> bool {
        true
    }
    /// Copies in-order bytes into `buf`; returns how many.
    fn read(&mut self, buf: &mut [u8]) -> usize;
    /// Takes up to `max` in-order bytes as one chunk (None when nothing is ready); a
    /// receiver that holds payloads as `Bytes` hands out slices without copying.
    fn read_bytes(&mut self, max: usize) -> Option<Bytes> {
        let n = self.readable().min(max);
        if n == 0 {
            return None;
        }
        let mut v = vec![0u8; n];
        let got = self.read(&mut v);
        v.truncate(got);
        Some(Bytes::from(v))
    }
    /// In-order bytes ready to read.
    fn readable(&self) -> usize;
    /// The stream ended and every byte was read.
    fn is_finished(&self) -> bool;

    /// The connection epoch (JOIN's) of the connection `path` comes up on, told just before
    /// its `path_up`: per-path counters restart with each epoch. Schemes whose counters
    /// carry no epoch ignore it.
    fn set_path_epoch(&mut self, _path: PathId, _epoch: u32) {}
    fn path_up(&mut self, path: PathId, now: Instant);
    fn path_down(&mut self, path: PathId, now: Instant);

    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    fn stats(&self) -> ReceiverStats;
}

/// Makes `Box<dyn Trait>` `Clone`, for a trait all of whose implementors are `Clone`:
/// declares `$helper` (a supertrait for `Trait`) with its impl for every `Clone` implementor.
macro_rules! boxed_clone {
    ($(#[$doc:meta])* $helper:ident for dyn $tr:ident $(+ $bound:ident)*) => {
        $(#[$doc])*
        pub trait $helper {
            fn clone_box(&self) -> Box<dyn $tr $(+ $bound)*>;
        }

        impl<T: $tr + Clone $(+ $bound)* + 'static> $helper for T {
            fn clone_box(&self) -> Box<dyn $tr $(+ $bound)*> {
                Box::new(self.clone())
            }
        }

        impl Clone for Box<dyn $tr $(+ $bound)*> {
            fn clone(&self) -> Self {
                (**self).clone_box()
            }
        }
    };
}
pub(crate) use boxed_clone;

boxed_clone! {
    /// `Clone` for a boxed [`SchemeSender`].
    SchemeSenderClone for dyn SchemeSender
}

boxed_clone! {
    /// `Clone` for a boxed [`SchemeReceiver`].
    SchemeReceiverClone for dyn SchemeReceiver
}
