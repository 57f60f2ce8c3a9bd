//! The two halves every multipath scheme implements. FBDT implements them in `fbdt`; the
//! MPTCP-style meta layer with its schedulers will implement the same traits, so the
//! runtime, the simulator and the lab drive every scheme alike.

use bytes::Bytes;

use crate::error::ProtocolError;
use crate::path::{PathId, PathStats};
use crate::seq::Seq;
use crate::stats::{ReceiverStats, SenderStats};
use crate::time::Instant;
use crate::wire::{Ack, Align, Data, FrameBuf};

/// Sends one byte stream over N paths.
pub trait StreamSender {
    /// Takes application bytes; returns how many fit in the send buffer (back-pressure).
    fn write(&mut self, data: &[u8]) -> usize;
    /// Like `write`, for bytes the driver already holds in a `Bytes`: a sender that keeps
    /// its buffer as `Bytes` chunks takes a slice of `data` instead of copying it.
    fn write_bytes(&mut self, data: &Bytes) -> usize {
        self.write(data)
    }
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
    /// Like `poll_transmit`, appending to a `FrameBuf`: a sender that keeps its buffer as
    /// `Bytes` chunks appends the header inline and the payload as shared slices (no copy).
    fn poll_transmit_buf(&mut self, path: PathId, room: usize, now: Instant, out: &mut FrameBuf) -> usize {
        out.push_with(|v| {
            let _ = self.poll_transmit(path, room, now, v);
        })
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
}

/// Receives one byte stream from N paths and delivers it in order.
pub trait StreamReceiver {
    fn on_data(&mut self, path: PathId, data: &Data<'_>, now: Instant) -> Result<(), ProtocolError>;
    /// A DATA frame whose payload the driver holds as `Bytes` (a slice of its read
    /// buffer): a receiver may keep slices of it instead of copying.
    fn on_data_bytes(
        &mut self,
        path: PathId,
        seq: Seq,
        fin: bool,
        payload: Bytes,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        self.on_data(
            path,
            &Data {
                seq,
                fin,
                payload: &payload,
            },
            now,
        )
    }
    fn on_align(&mut self, path: PathId, align: &Align, now: Instant) -> Result<(), ProtocolError>;
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

    fn path_up(&mut self, path: PathId, now: Instant);
    fn path_down(&mut self, path: PathId, now: Instant);

    /// The ACK to send on `path` now, if one is due there.
    fn poll_ack(&mut self, path: PathId, now: Instant) -> Option<Ack>;
    fn poll_timeout(&self) -> Option<Instant>;
    fn handle_timeout(&mut self, now: Instant);
    fn stats(&self) -> ReceiverStats;
}
