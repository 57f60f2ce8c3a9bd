//! Wire format: length-prefixed frames on each TCP connection (docs/protocol.md).
//!
//! Every frame starts with a fixed 8-byte header — type, flags, two reserved bytes, and the
//! body length as a big-endian u32 — followed by the body. Each frame type has a hard upper
//! bound on its body length, checked from the header alone, so a decoder never buffers or
//! allocates more than [`MAX_FRAME_LEN`] bytes for one frame, whatever the peer sends.
//!
//! No-panic contract (after smoltcp's `wire` module): [`Frame::parse`] on any byte string
//! returns a frame, [`Error::Incomplete`] or another [`Error`]; it never panics, never
//! indexes out of bounds and never allocates more than the frame it returns.

mod buf;
mod frames;
mod layout;
mod recv_buf;
mod short_list;

pub use buf::{
    frame_bytes_missing, prepare_recv_buf, recv_pin, FrameBuf, FrameOut, SendBuf, RECV_BLOCK, RECV_MIN_READ,
};
pub use frames::{Ack, Align, Close, Data, DataAck, Hello, Join, JoinOk, LaneRepr, MpData, PathRx, Scheme, Stalled, NO_PATH};
pub use layout::{
    Error, FrameType, Header, ACK_INLINE_PATHS, ACK_INLINE_RANGES, HEADER_LEN, MAGIC, MAX_ACK_RANGES, MAX_LANES,
    MAX_PATHS, MAX_REASON, MAX_SEGMENT, VERSION,
};
pub use recv_buf::{Piece, RecvBuf, ENTRY_COST, MERGE_MAX, OUT_PIN_RATIO};
pub use short_list::ShortList;

/// Largest frame of any type, header included.
pub const MAX_FRAME_LEN: usize = HEADER_LEN + layout::MP_DATA_FIXED + MAX_SEGMENT;

/// A decoded frame. DATA borrows its payload from the input buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Hello(Hello),
    Join(Join),
    Data(Data<'a>),
    Ack(Ack),
    Align(Align),
    Close(Close),
    MpData(MpData<'a>),
    DataAck(DataAck),
    JoinOk(JoinOk),
    Stalled(Stalled),
}

impl<'a> Frame<'a> {
    /// Decodes one frame from the front of `buf`; returns it and the bytes it used.
    pub fn parse(buf: &'a [u8]) -> Result<(Frame<'a>, usize), Error> {
        let header = Header::parse(buf)?;
        let total = HEADER_LEN + header.body_len;
        let body = buf.get(HEADER_LEN..total).ok_or_else(|| Error::Incomplete {
            needed: total - buf.len(),
        })?;
        let frame = match header.kind {
            FrameType::Hello => Frame::Hello(Hello::parse(body)?),
            FrameType::Join => Frame::Join(Join::parse(body)?),
            FrameType::Data => Frame::Data(Data::parse(header.flags, body)?),
            FrameType::Ack => Frame::Ack(Ack::parse(body)?),
            FrameType::Align => Frame::Align(Align::parse(body)?),
            FrameType::Close => Frame::Close(Close::parse(body)?),
            FrameType::MpData => Frame::MpData(MpData::parse(header.flags, body)?),
            FrameType::DataAck => Frame::DataAck(DataAck::parse(body)?),
            FrameType::JoinOk => Frame::JoinOk(JoinOk::parse(body)?),
            FrameType::Stalled => Frame::Stalled(Stalled::parse(body)?),
        };
        if !matches!(header.kind, FrameType::Data | FrameType::MpData) && header.flags != 0 {
            return Err(Error::Malformed {
                kind: header.kind,
                what: "flags must be zero",
            });
        }
        Ok((frame, total))
    }

    /// Decodes a DATA or MP_DATA frame held in two pieces, as a sender's [`FrameBuf`]
    /// gives it out: `head` is exactly the header and the fixed fields, `payload` the
    /// payload. The frame is the one [`Frame::parse`] finds in the joined bytes; a split
    /// anywhere else, or lengths that disagree with the header, are malformed (a split
    /// frame is whole: never `Incomplete`). Lets a driver that holds payloads as shared
    /// slices (the simulator) hand them over without joining them to their headers.
    pub fn parse_split(head: &'a [u8], payload: &'a [u8]) -> Result<Frame<'a>, Error> {
        let header = Header::parse(head)?;
        let kind = header.kind;
        let fixed = match kind {
            FrameType::Data => layout::DATA_FIXED,
            FrameType::MpData => layout::MP_DATA_FIXED,
            _ => {
                return Err(Error::Malformed {
                    kind,
                    what: "a payload apart from a frame that carries none",
                })
            }
        };
        if head.len() != HEADER_LEN + fixed || header.body_len != fixed + payload.len() {
            return Err(Error::Malformed {
                kind,
                what: "split frame's pieces disagree with its header",
            });
        }
        let body = &head[HEADER_LEN..];
        Ok(match kind {
            FrameType::Data => Frame::Data(Data {
                payload,
                ..Data::parse(header.flags, body)?
            }),
            _ => {
                let d = MpData::parse(header.flags, body)?;
                if d.dsn.checked_add(payload.len() as u64).is_none() {
                    return Err(Error::Malformed {
                        kind,
                        what: "data sequence number overflows",
                    });
                }
                Frame::MpData(MpData { payload, ..d })
            }
        })
    }

    /// Appends the encoded frame to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let (kind, flags) = match self {
            Frame::Hello(_) => (FrameType::Hello, 0),
            Frame::Join(_) => (FrameType::Join, 0),
            Frame::Data(d) => (FrameType::Data, d.flags()),
            Frame::Ack(_) => (FrameType::Ack, 0),
            Frame::Align(_) => (FrameType::Align, 0),
            Frame::Close(_) => (FrameType::Close, 0),
            Frame::MpData(d) => (FrameType::MpData, d.flags()),
            Frame::DataAck(_) => (FrameType::DataAck, 0),
            Frame::JoinOk(_) => (FrameType::JoinOk, 0),
            Frame::Stalled(_) => (FrameType::Stalled, 0),
        };
        let body_len = self.buffer_len() - HEADER_LEN;
        Header { kind, flags, body_len }.emit(out);
        match self {
            Frame::Hello(f) => f.emit(out),
            Frame::Join(f) => f.emit(out),
            Frame::Data(f) => f.emit(out),
            Frame::Ack(f) => f.emit(out),
            Frame::Align(f) => f.emit(out),
            Frame::Close(f) => f.emit(out),
            Frame::MpData(f) => f.emit(out),
            Frame::DataAck(f) => f.emit(out),
            Frame::JoinOk(f) => f.emit(out),
            Frame::Stalled(f) => f.emit(out),
        }
    }

    /// Encoded length, header included.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Frame::Hello(_) => layout::HELLO_LEN,
                Frame::Join(_) => layout::JOIN_LEN,
                Frame::Data(d) => d.body_len(),
                Frame::Ack(a) => a.body_len(),
                Frame::Align(a) => a.body_len(),
                Frame::Close(c) => c.body_len(),
                Frame::MpData(d) => d.body_len(),
                Frame::DataAck(a) => a.body_len(),
                Frame::JoinOk(_) => layout::JOIN_OK_LEN,
                Frame::Stalled(_) => layout::STALLED_LEN,
            }
    }

    /// Which part of an endpoint a frame is for: the session itself, the receiver of the
    /// peer's stream, or the sender of ours (feedback about it).
    pub fn flow(&self) -> Flow {
        match self {
            Frame::Hello(_) | Frame::Join(_) | Frame::JoinOk(_) | Frame::Close(_) | Frame::Stalled(_) => {
                Flow::Control
            }
            Frame::Data(_) | Frame::Align(_) | Frame::MpData(_) => Flow::Stream,
            Frame::Ack(_) | Frame::DataAck(_) => Flow::Feedback,
        }
    }

    pub fn kind(&self) -> FrameType {
        match self {
            Frame::Hello(_) => FrameType::Hello,
            Frame::Join(_) => FrameType::Join,
            Frame::Data(_) => FrameType::Data,
            Frame::Ack(_) => FrameType::Ack,
            Frame::Align(_) => FrameType::Align,
            Frame::Close(_) => FrameType::Close,
            Frame::MpData(_) => FrameType::MpData,
            Frame::DataAck(_) => FrameType::DataAck,
            Frame::JoinOk(_) => FrameType::JoinOk,
            Frame::Stalled(_) => FrameType::Stalled,
        }
    }
}

/// Where a received frame goes (see [`Frame::flow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// HELLO, JOIN, JOIN_OK, CLOSE, STALLED: the session's own business.
    Control,
    /// The peer's stream (DATA, ALIGN, MP_DATA): for our receiver.
    Stream,
    /// Acknowledgements of our stream (ACK, DATA_ACK): for our sender.
    Feedback,
}

#[cfg(test)]
mod tests;
