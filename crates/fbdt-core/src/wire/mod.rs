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
mod recv_buf;
mod short_list;

pub use buf::{
    frame_bytes_missing, prepare_recv_buf, recv_pin, FrameBuf, FrameOut, SendBuf, RECV_BLOCK, RECV_MIN_READ,
};
pub use frames::{Ack, Align, Close, Data, DataAck, Hello, Join, JoinOk, LaneRepr, MpData, PathRx, Scheme, NO_PATH};
pub use recv_buf::{Piece, RecvBuf, ENTRY_COST, MERGE_MAX, OUT_PIN_RATIO};
pub use short_list::ShortList;

use thiserror::Error as ThisError;

/// Protocol version carried in HELLO. A peer with another version is refused. Version 2
/// turned HELLO's window mode and window size, which no peer read, into reserved zeros;
/// version 3 added JOIN's connection epoch and binds its HMAC to the connection; version 4
/// tags each ACK path counter with that epoch (counters restart with each connection);
/// version 5 does the same for the meta layer's DATA_ACK; version 6 added JOIN_OK, the
/// server's authenticated answer to a JOIN (the client sends nothing on a path before it).
pub const VERSION: u8 = 6;
/// First four bytes of every HELLO body.
pub const MAGIC: [u8; 4] = *b"FBDT";
/// Bytes of the fixed frame header.
pub const HEADER_LEN: usize = 8;
/// Largest DATA payload (one FBDT segment). 256 KiB: well above useful segment sizes
/// (an MSS up to a few TSO super-packets), small enough to bound per-path buffering.
pub const MAX_SEGMENT: usize = 256 * 1024;
/// Most paths a session may have (ACKs carry one counter per path).
pub const MAX_PATHS: usize = 16;
/// Most SACK ranges one ACK carries.
pub const MAX_ACK_RANGES: usize = 32;
/// Path counters an [`Ack`] keeps inline (more go to the heap): a session has a few paths.
pub const ACK_INLINE_PATHS: usize = 4;
/// Ranges an [`Ack`] keeps inline (more go to the heap): mostly one per backward lane.
pub const ACK_INLINE_RANGES: usize = 8;
/// Most lanes one ALIGN describes (at most one per path).
pub const MAX_LANES: usize = MAX_PATHS;
/// Longest CLOSE reason text.
pub const MAX_REASON: usize = 256;
/// Largest frame of any type, header included.
pub const MAX_FRAME_LEN: usize = HEADER_LEN + frames::MP_DATA_FIXED + MAX_SEGMENT;

/// Frame types. Values are part of the protocol; never reuse one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    Hello = 1,
    Join = 2,
    Data = 3,
    Ack = 4,
    Align = 5,
    Close = 6,
    /// MPTCP-style meta layer only: a segment with a 64-bit data sequence number.
    MpData = 7,
    /// MPTCP-style meta layer only: the shared DATA_ACK and receive window.
    DataAck = 8,
    /// The server's answer to a JOIN, proving it holds the session key (version 6).
    JoinOk = 9,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => FrameType::Hello,
            2 => FrameType::Join,
            3 => FrameType::Data,
            4 => FrameType::Ack,
            5 => FrameType::Align,
            6 => FrameType::Close,
            7 => FrameType::MpData,
            8 => FrameType::DataAck,
            9 => FrameType::JoinOk,
            _ => return None,
        })
    }

    /// Hard bound on this type's body length.
    fn max_body(self) -> usize {
        match self {
            FrameType::Hello => frames::HELLO_LEN,
            FrameType::Join => frames::JOIN_LEN,
            FrameType::Data => frames::DATA_FIXED + MAX_SEGMENT,
            FrameType::Ack => frames::ACK_FIXED + frames::PATH_RX_LEN * MAX_PATHS + 8 * MAX_ACK_RANGES,
            FrameType::Align => frames::ALIGN_FIXED + frames::LANE_LEN * MAX_LANES,
            FrameType::Close => frames::CLOSE_FIXED + MAX_REASON,
            FrameType::MpData => frames::MP_DATA_FIXED + MAX_SEGMENT,
            FrameType::DataAck => frames::DATA_ACK_FIXED + 8 * MAX_PATHS,
            FrameType::JoinOk => frames::JOIN_OK_LEN,
        }
    }
}

/// Why bytes could not be decoded. Every variant except `Incomplete` is fatal for the path.
#[derive(Clone, Debug, PartialEq, Eq, ThisError)]
pub enum Error {
    #[error("incomplete frame: {needed} more bytes needed")]
    Incomplete { needed: usize },
    #[error("unknown frame type {0:#04x}")]
    UnknownType(u8),
    #[error("{kind:?} frame body of {len} bytes exceeds the limit of {max}")]
    TooLong { kind: FrameType, len: usize, max: usize },
    #[error("malformed {kind:?} frame: {what}")]
    Malformed { kind: FrameType, what: &'static str },
    #[error("bad magic in HELLO (not an FBDT peer)")]
    BadMagic,
    #[error("unsupported protocol version {0} (this build speaks {VERSION})")]
    UnsupportedVersion(u8),
    #[error("reserved header bytes must be zero")]
    ReservedNonZero,
}

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
            FrameType::Data => frames::DATA_FIXED,
            FrameType::MpData => frames::MP_DATA_FIXED,
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
        }
    }

    /// Encoded length, header included.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Frame::Hello(_) => frames::HELLO_LEN,
                Frame::Join(_) => frames::JOIN_LEN,
                Frame::Data(d) => d.body_len(),
                Frame::Ack(a) => a.body_len(),
                Frame::Align(a) => a.body_len(),
                Frame::Close(c) => c.body_len(),
                Frame::MpData(d) => d.body_len(),
                Frame::DataAck(a) => a.body_len(),
                Frame::JoinOk(_) => frames::JOIN_OK_LEN,
            }
    }

    /// Which part of an endpoint a frame is for: the session itself, the receiver of the
    /// peer's stream, or the sender of ours (feedback about it).
    pub fn flow(&self) -> Flow {
        match self {
            Frame::Hello(_) | Frame::Join(_) | Frame::JoinOk(_) | Frame::Close(_) => Flow::Control,
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
        }
    }
}

/// Where a received frame goes (see [`Frame::flow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// HELLO, JOIN, JOIN_OK, CLOSE: the session's own business.
    Control,
    /// The peer's stream (DATA, ALIGN, MP_DATA): for our receiver.
    Stream,
    /// Acknowledgements of our stream (ACK, DATA_ACK): for our sender.
    Feedback,
}

/// The fixed 8-byte header, validated on its own so a bad length is refused before any
/// body byte is buffered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameType,
    pub flags: u8,
    pub body_len: usize,
}

mod field {
    use std::ops::Range;
    pub const TYPE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const RESERVED: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..8;
}

impl Header {
    pub fn parse(buf: &[u8]) -> Result<Header, Error> {
        let Some(head) = buf.get(..HEADER_LEN) else {
            return Err(Error::Incomplete {
                needed: HEADER_LEN - buf.len(),
            });
        };
        let kind = FrameType::from_u8(head[field::TYPE]).ok_or(Error::UnknownType(head[field::TYPE]))?;
        if head[field::RESERVED] != [0, 0] {
            return Err(Error::ReservedNonZero);
        }
        let body_len = be_u32(&head[field::LENGTH]) as usize;
        let max = kind.max_body();
        if body_len > max {
            return Err(Error::TooLong {
                kind,
                len: body_len,
                max,
            });
        }
        Ok(Header {
            kind,
            flags: head[field::FLAGS],
            body_len,
        })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.kind as u8);
        out.push(self.flags);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(self.body_len as u32).to_be_bytes());
    }
}

/// Reads a big-endian u32 from exactly four bytes (callers slice with known offsets).
fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests;
