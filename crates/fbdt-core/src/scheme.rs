//! The two halves every multipath scheme implements. FBDT implements them in `fbdt`; the
//! MPTCP-style meta layer with its schedulers will implement the same traits, so the
//! runtime, the simulator and the lab drive every scheme alike.

use crate::error::ProtocolError;
use crate::path::{PathId, PathStats};
use crate::stats::{ReceiverStats, SenderStats};
use crate::time::Instant;
use crate::wire::{Ack, Align, Data};

/// Sends one byte stream over N paths.
pub trait StreamSender {
    /// Takes application bytes; returns how many fit in the send buffer (back-pressure).
    fn write(&mut self, data: &[u8]) -> usize;
    /// No more bytes will be written; the stream end is sent after the last byte.
    fn finish(&mut self);
    /// Every byte written (and the end, if finished) is acknowledged.
    fn is_all_acked(&self) -> bool;
    /// Bytes the application may write now.
    fn send_room(&self) -> usize;

    fn path_up(&mut self, path: PathId, now: Instant);
    fn path_down(&mut self, path: PathId, now: Instant);
    fn path_stats(&mut self, path: PathId, stats: PathStats);

    /// An ACK arrived on `path` (it may acknowledge data sent on any path).
    fn on_ack(&mut self, path: PathId, ack: &Ack, now: Instant) -> Result<(), ProtocolError>;
    /// Appends at most one frame of at most `room` bytes for `path` to `out`; returns its
    /// length (0 = nothing to send on this path now).
    fn poll_transmit(&mut self, path: PathId, room: usize, now: Instant, out: &mut Vec<u8>) -> usize;
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    fn stats(&self) -> SenderStats;
}

/// Receives one byte stream from N paths and delivers it in order.
pub trait StreamReceiver {
    fn on_data(&mut self, path: PathId, data: &Data<'_>, now: Instant) -> Result<(), ProtocolError>;
    fn on_align(&mut self, path: PathId, align: &Align, now: Instant) -> Result<(), ProtocolError>;
    /// Copies in-order bytes into `buf`; returns how many.
    fn read(&mut self, buf: &mut [u8]) -> usize;
    /// In-order bytes ready to read.
    fn readable(&self) -> usize;
    /// The stream ended and every byte was read.
    fn is_finished(&self) -> bool;

    fn path_up(&mut self, path: PathId, now: Instant);
    fn path_down(&mut self, path: PathId, now: Instant);

    /// The ACK to send on `path` now, if one is due there.
    fn poll_ack(&mut self, path: PathId, now: Instant) -> Option<Ack>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    fn stats(&self) -> ReceiverStats;
}
