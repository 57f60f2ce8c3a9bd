//! The wire's fixed layout: the frame header, the frame types and their body-size bounds,
//! the protocol's limits and the decoding error. The frame bodies (frames.rs) and the frame
//! enum (mod.rs) build on it; it depends on neither, so the checker's import graph of
//! `wire/` has no circle (issue 38).

use thiserror::Error as ThisError;

/// Protocol version carried in HELLO. A peer with another version is refused. Version 2
/// turned HELLO's window mode and window size, which no peer read, into reserved zeros;
/// version 3 added JOIN's connection epoch and binds its HMAC to the connection; version 4
/// tags each ACK path counter with that epoch (counters restart with each connection);
/// version 5 does the same for the meta layer's DATA_ACK; version 6 added JOIN_OK, the
/// server's authenticated answer to a JOIN (the client sends nothing on a path before it);
/// version 7 added STALLED, the server's report that one of its paths stalls (the client,
/// the end that dials, probes it with a fresh connection).
pub const VERSION: u8 = 7;
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
/// Path counters an [`Ack`](super::Ack) keeps inline (more go to the heap): a session has a few paths.
pub const ACK_INLINE_PATHS: usize = 4;
/// Ranges an [`Ack`](super::Ack) keeps inline (more go to the heap): mostly one per backward lane.
pub const ACK_INLINE_RANGES: usize = 8;
/// Most lanes one ALIGN describes (at most one per path).
pub const MAX_LANES: usize = MAX_PATHS;
/// Longest CLOSE reason text.
pub const MAX_REASON: usize = 256;

// Fixed body sizes (and per-entry sizes) of each frame type; offsets are written out next
// to each type in frames.rs.
pub(super) const HELLO_LEN: usize = 56;
pub(super) const JOIN_LEN: usize = 48;
pub(super) const JOIN_OK_LEN: usize = 40;
pub(super) const STALLED_LEN: usize = 8;
pub(super) const DATA_FIXED: usize = 4;
pub(super) const ACK_FIXED: usize = 12;
pub(super) const ALIGN_FIXED: usize = 16;
pub(super) const LANE_LEN: usize = 12;
pub(super) const CLOSE_FIXED: usize = 4;
pub(super) const MP_DATA_FIXED: usize = 8;
pub(super) const DATA_ACK_FIXED: usize = 16;
/// Bytes of one `PathRx` (an ACK's per-path counter) on the wire.
pub(super) const PATH_RX_LEN: usize = 12;

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
    /// The server's report that a path's connection stalls its data (version 7).
    Stalled = 10,
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
            10 => FrameType::Stalled,
            _ => return None,
        })
    }

    /// Hard bound on this type's body length.
    fn max_body(self) -> usize {
        match self {
            FrameType::Hello => HELLO_LEN,
            FrameType::Join => JOIN_LEN,
            FrameType::Data => DATA_FIXED + MAX_SEGMENT,
            FrameType::Ack => ACK_FIXED + PATH_RX_LEN * MAX_PATHS + 8 * MAX_ACK_RANGES,
            FrameType::Align => ALIGN_FIXED + LANE_LEN * MAX_LANES,
            FrameType::Close => CLOSE_FIXED + MAX_REASON,
            FrameType::MpData => MP_DATA_FIXED + MAX_SEGMENT,
            FrameType::DataAck => DATA_ACK_FIXED + 8 * MAX_PATHS,
            FrameType::JoinOk => JOIN_OK_LEN,
            FrameType::Stalled => STALLED_LEN,
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

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.push(self.kind as u8);
        out.push(self.flags);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(self.body_len as u32).to_be_bytes());
    }
}

/// Reads a big-endian u32 from exactly four bytes (callers slice with known offsets).
pub(super) fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

pub(super) fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

pub(super) fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
