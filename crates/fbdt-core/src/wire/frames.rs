//! Frame bodies. Offsets are written out next to each type; `parse` checks the exact body
//! length for fixed-size frames and every count against its bound before allocating.

use super::layout::{
    be_u16, be_u32, be_u64, Error, FrameType, Header, ACK_FIXED, ACK_INLINE_PATHS, ACK_INLINE_RANGES, ALIGN_FIXED,
    CLOSE_FIXED, DATA_ACK_FIXED, DATA_FIXED, HEADER_LEN, HELLO_LEN, JOIN_LEN, JOIN_OK_LEN, LANE_LEN, MAGIC,
    STALLED_LEN,
    MAX_ACK_RANGES, MAX_LANES, MAX_PATHS, MAX_REASON, MP_DATA_FIXED, PATH_RX_LEN, VERSION,
};
use super::short_list::ShortList;
use crate::seq::Seq;

/// Marks "no path" in an ALIGN lane end.
pub const NO_PATH: u8 = 0xff;

const FLAG_FIN: u8 = 0x01;
const ACK_FLAG_FIN: u8 = 0x01;

/// Which multipath scheme a session runs; both ends must agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Scheme {
    Fbdt = 0,
    /// The MPTCP-style meta layer (crate::meta): MP_DATA / DATA_ACK instead of
    /// DATA / ACK / ALIGN. The scheduler is the sender's business and not announced.
    Meta = 1,
}

fn malformed(kind: FrameType, what: &'static str) -> Error {
    Error::Malformed { kind, what }
}

/// HELLO: opens a session on its first connection; each side sends one.
///
/// ```text
///  0..4 magic "FBDT" | 4 version | 5 scheme | 6..8 reserved
///  8..12 ISN of the sender's direction | 12..16 receive buffer (bytes)
/// 16..20 segment size | 20..24 reserved | 24..56 key material
/// ```
///
/// How the sender sizes its windows is its own business: the receiver needs only the
/// bounds ALIGN and the receive window give it. Version 1 announced the window mode (byte
/// 6) and size (20..24) and nothing read them; version 2 sends zeros there and refuses
/// anything else. The bytes stay so HELLO keeps its length: the simulator times every
/// byte, and a shorter HELLO would shift every result after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub scheme: Scheme,
    pub isn: u32,
    pub recv_buffer: u32,
    pub segment_size: u32,
    pub key: [u8; 32],
}

impl Hello {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        const K: FrameType = FrameType::Hello;
        if b.len() != HELLO_LEN {
            return Err(malformed(K, "body must be 56 bytes"));
        }
        if b[0..4] != MAGIC {
            return Err(Error::BadMagic);
        }
        if b[4] != VERSION {
            return Err(Error::UnsupportedVersion(b[4]));
        }
        let scheme = match b[5] {
            0 => Scheme::Fbdt,
            1 => Scheme::Meta,
            _ => return Err(malformed(K, "unknown scheme")),
        };
        if b[6..8] != [0, 0] || b[20..24] != [0, 0, 0, 0] {
            return Err(Error::ReservedNonZero);
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(&b[24..56]);
        Ok(Hello {
            scheme,
            isn: be_u32(&b[8..12]),
            recv_buffer: be_u32(&b[12..16]),
            segment_size: be_u32(&b[16..20]),
            key,
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, self.scheme as u8, 0, 0]);
        out.extend_from_slice(&self.isn.to_be_bytes());
        out.extend_from_slice(&self.recv_buffer.to_be_bytes());
        out.extend_from_slice(&self.segment_size.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.key);
    }
}

/// JOIN: first frame on every further connection of a session.
///
/// ```text
///  0..8 session token | 8 path index | 9..12 reserved | 12..16 connection epoch | 16..48 HMAC-SHA256
/// ```
///
/// The epoch is the client's count of connections it joined for this path before this one
/// (0 for the first). The HMAC covers the token, the index, the epoch and a value bound to
/// the connection carrying the JOIN (its TLS exporter), see [`crate::handshake`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Join {
    pub token: [u8; 8],
    pub path_index: u8,
    pub epoch: u32,
    pub hmac: [u8; 32],
}

impl Join {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() != JOIN_LEN {
            return Err(malformed(FrameType::Join, "body must be 48 bytes"));
        }
        if b[9..12] != [0, 0, 0] {
            return Err(Error::ReservedNonZero);
        }
        let mut token = [0u8; 8];
        token.copy_from_slice(&b[0..8]);
        let mut hmac = [0u8; 32];
        hmac.copy_from_slice(&b[16..48]);
        Ok(Join {
            token,
            path_index: b[8],
            epoch: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            hmac,
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.token);
        out.extend_from_slice(&[self.path_index, 0, 0, 0]);
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.hmac);
    }
}

/// JOIN_OK: the server's answer to an accepted JOIN, the first frame it sends on that
/// connection (version 6).
///
/// ```text
///  0 path index | 1..4 reserved | 4..8 connection epoch | 8..40 HMAC-SHA256
/// ```
///
/// Index and epoch echo the JOIN's. The HMAC is keyed by the session key and covers them and
/// the connection's binding under a label of its own ("fbdt join ok", not the JOIN's "fbdt
/// join"), so a JOIN's HMAC is never a valid answer, see [`crate::handshake`]. The client
/// sends nothing but its JOIN on the connection until the answer verifies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinOk {
    pub path_index: u8,
    pub epoch: u32,
    pub hmac: [u8; 32],
}

impl JoinOk {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() != JOIN_OK_LEN {
            return Err(malformed(FrameType::JoinOk, "body must be 40 bytes"));
        }
        if b[1..4] != [0, 0, 0] {
            return Err(Error::ReservedNonZero);
        }
        let mut hmac = [0u8; 32];
        hmac.copy_from_slice(&b[8..40]);
        Ok(JoinOk {
            path_index: b[0],
            epoch: be_u32(&b[4..8]),
            hmac,
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.path_index, 0, 0, 0]);
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.hmac);
    }
}

/// STALLED: the server's report that its data stalls in one path's connection (version 7),
/// sent on another path.
///
/// ```text
///  0 path index | 1..4 reserved | 4..8 connection epoch
/// ```
///
/// The server cannot open connections; the client can. A connection whose link went away
/// and came back carries again only when the server's retransmission timer fires, backed
/// off through the outage; a fresh connection the client opens finds the link at once.
/// The epoch names the connection meant: a report about one the client already replaced
/// is stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stalled {
    pub path_index: u8,
    pub epoch: u32,
}

impl Stalled {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        if b.len() != STALLED_LEN {
            return Err(malformed(FrameType::Stalled, "body must be 8 bytes"));
        }
        if b[1..4] != [0, 0, 0] {
            return Err(Error::ReservedNonZero);
        }
        Ok(Stalled {
            path_index: b[0],
            epoch: be_u32(&b[4..8]),
        })
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.path_index, 0, 0, 0]);
        out.extend_from_slice(&self.epoch.to_be_bytes());
    }
}

/// DATA: one segment of the stream. Flag 0x01 = FIN (the segment ends the stream).
///
/// ```text
///  0..4 sequence number of the first payload byte | 4.. payload
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data<'a> {
    pub seq: Seq,
    pub fin: bool,
    pub payload: &'a [u8],
}

impl<'a> Data<'a> {
    pub(super) fn parse(flags: u8, b: &'a [u8]) -> Result<Self, Error> {
        if b.len() < DATA_FIXED {
            return Err(malformed(FrameType::Data, "body shorter than its sequence number"));
        }
        if flags & !FLAG_FIN != 0 {
            return Err(malformed(FrameType::Data, "unknown flags"));
        }
        Ok(Data {
            seq: Seq(be_u32(&b[0..4])),
            fin: flags & FLAG_FIN != 0,
            payload: &b[DATA_FIXED..],
        })
    }

    pub(super) fn flags(&self) -> u8 {
        if self.fin {
            FLAG_FIN
        } else {
            0
        }
    }

    pub(super) fn body_len(&self) -> usize {
        DATA_FIXED + self.payload.len()
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.seq.0.to_be_bytes());
        out.extend_from_slice(self.payload);
    }

    /// Appends a DATA frame header (common header + sequence number) for a payload of
    /// `len` bytes that the caller appends right after; avoids building a `Data` that
    /// borrows the sender's buffer.
    pub fn emit_header(seq: Seq, fin: bool, len: usize, out: &mut Vec<u8>) {
        Header {
            kind: FrameType::Data,
            flags: if fin { FLAG_FIN } else { 0 },
            body_len: DATA_FIXED + len,
        }
        .emit(out);
        out.extend_from_slice(&seq.0.to_be_bytes());
    }

    /// Bytes of header before a DATA payload.
    pub const OVERHEAD: usize = HEADER_LEN + DATA_FIXED;
}

/// ACK: the receiver's state, sent on every live path (any path acknowledges any path's
/// data — the paper's cross-path ACK).
///
/// ```text
///  0..4 cumulative ACK: next expected sequence number | 4..8 receive window (bytes past it)
///  8 number of path counters P | 9 number of ranges R | 10 flags (0x01 = FIN received:
///  the stream ended at the cumulative ACK) | 11 reserved
///  12.. P × (u32 connection epoch, u64 bytes): payload bytes received on path 0..P over
///  its current connection, which the epoch names (JOIN's connection epoch)
///  then R × (u32 start, u32 end): received ranges above the cumulative ACK, lowest first
/// ```
/// The ranges are the paper's per-direction "next expected" numbers: with the FBDT layout
/// each backward path fills one range downward from its top, so the start of that range is
/// that direction's next expected sequence number.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Ack {
    pub cum: Seq,
    pub window: u32,
    pub fin: bool,
    pub path_rx: ShortList<PathRx, ACK_INLINE_PATHS>,
    pub ranges: ShortList<(Seq, Seq), ACK_INLINE_RANGES>,
}

/// One path's receive counter in an ACK: payload bytes received over the connection with
/// this epoch. A counter restarts at 0 with every new connection of its path, and the epoch
/// tells the sender which connection it counts, so a counter of an earlier connection (an
/// ACK that left before the reconnect) is never read as one of the current connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PathRx {
    pub epoch: u32,
    pub bytes: u64,
}

impl Ack {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        const K: FrameType = FrameType::Ack;
        if b.len() < ACK_FIXED {
            return Err(malformed(K, "body shorter than its fixed part"));
        }
        let n_paths = b[8] as usize;
        let n_ranges = b[9] as usize;
        if b[10] & !ACK_FLAG_FIN != 0 {
            return Err(malformed(K, "unknown flags"));
        }
        if b[11] != 0 {
            return Err(Error::ReservedNonZero);
        }
        if n_paths > MAX_PATHS {
            return Err(malformed(K, "too many path counters"));
        }
        if n_ranges > MAX_ACK_RANGES {
            return Err(malformed(K, "too many ranges"));
        }
        if b.len() != ACK_FIXED + PATH_RX_LEN * n_paths + 8 * n_ranges {
            return Err(malformed(K, "length does not match its counts"));
        }
        let mut at = ACK_FIXED;
        let mut path_rx = ShortList::new();
        for _ in 0..n_paths {
            path_rx.push(PathRx {
                epoch: be_u32(&b[at..at + 4]),
                bytes: be_u64(&b[at + 4..at + 12]),
            });
            at += PATH_RX_LEN;
        }
        let mut ranges = ShortList::new();
        for _ in 0..n_ranges {
            ranges.push((Seq(be_u32(&b[at..at + 4])), Seq(be_u32(&b[at + 4..at + 8]))));
            at += 8;
        }
        Ok(Ack {
            cum: Seq(be_u32(&b[0..4])),
            window: be_u32(&b[4..8]),
            fin: b[10] & ACK_FLAG_FIN != 0,
            path_rx,
            ranges,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        ACK_FIXED + PATH_RX_LEN * self.path_rx.len() + 8 * self.ranges.len()
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        debug_assert!(self.path_rx.len() <= MAX_PATHS && self.ranges.len() <= MAX_ACK_RANGES);
        out.extend_from_slice(&self.cum.0.to_be_bytes());
        out.extend_from_slice(&self.window.to_be_bytes());
        let flags = if self.fin { ACK_FLAG_FIN } else { 0 };
        out.extend_from_slice(&[self.path_rx.len() as u8, self.ranges.len() as u8, flags, 0]);
        for v in &self.path_rx {
            out.extend_from_slice(&v.epoch.to_be_bytes());
            out.extend_from_slice(&v.bytes.to_be_bytes());
        }
        for (s, e) in &self.ranges {
            out.extend_from_slice(&s.0.to_be_bytes());
            out.extend_from_slice(&e.0.to_be_bytes());
        }
    }
}

/// One lane of an ALIGN: the unsent range `[lo, hi)` and the paths serving it from the
/// bottom (ascending) and from the top (descending); [`NO_PATH`] where nobody does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneRepr {
    pub lo: Seq,
    pub hi: Seq,
    pub bottom: u8,
    pub top: u8,
}

/// ALIGN: the sender's layout of a transmission window (journal Algorithm 1,
/// AlignFBDTSendWin), sent when a window is loaded and whenever paths are re-aligned.
///
/// ```text
///  0..4 window id | 4..8 window start seq | 8..12 window end seq | 12 lanes L | 13..16 reserved
///  16.. L × (u32 lo, u32 hi, u8 bottom path, u8 top path, u16 reserved)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Align {
    pub window_id: u32,
    pub start: Seq,
    pub end: Seq,
    pub lanes: Vec<LaneRepr>,
}

impl Align {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        const K: FrameType = FrameType::Align;
        if b.len() < ALIGN_FIXED {
            return Err(malformed(K, "body shorter than its fixed part"));
        }
        let n = b[12] as usize;
        if b[13..16] != [0, 0, 0] {
            return Err(Error::ReservedNonZero);
        }
        if n > MAX_LANES {
            return Err(malformed(K, "too many lanes"));
        }
        if b.len() != ALIGN_FIXED + LANE_LEN * n {
            return Err(malformed(K, "length does not match its lane count"));
        }
        let mut lanes = Vec::with_capacity(n);
        for i in 0..n {
            let l = &b[ALIGN_FIXED + LANE_LEN * i..ALIGN_FIXED + LANE_LEN * (i + 1)];
            if l[10..12] != [0, 0] {
                return Err(Error::ReservedNonZero);
            }
            lanes.push(LaneRepr {
                lo: Seq(be_u32(&l[0..4])),
                hi: Seq(be_u32(&l[4..8])),
                bottom: l[8],
                top: l[9],
            });
        }
        Ok(Align {
            window_id: be_u32(&b[0..4]),
            start: Seq(be_u32(&b[4..8])),
            end: Seq(be_u32(&b[8..12])),
            lanes,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        ALIGN_FIXED + LANE_LEN * self.lanes.len()
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        debug_assert!(self.lanes.len() <= MAX_LANES);
        out.extend_from_slice(&self.window_id.to_be_bytes());
        out.extend_from_slice(&self.start.0.to_be_bytes());
        out.extend_from_slice(&self.end.0.to_be_bytes());
        out.extend_from_slice(&[self.lanes.len() as u8, 0, 0, 0]);
        for l in &self.lanes {
            out.extend_from_slice(&l.lo.0.to_be_bytes());
            out.extend_from_slice(&l.hi.0.to_be_bytes());
            out.extend_from_slice(&[l.bottom, l.top, 0, 0]);
        }
    }
}

/// CLOSE: ends the session (code 0 = normal) with a UTF-8 reason.
///
/// ```text
///  0..2 code | 2..4 reserved | 4.. reason (UTF-8, at most 256 bytes)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    pub code: u16,
    pub reason: String,
}

impl Close {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        const K: FrameType = FrameType::Close;
        if b.len() < CLOSE_FIXED {
            return Err(malformed(K, "body shorter than its fixed part"));
        }
        if b[2..4] != [0, 0] {
            return Err(Error::ReservedNonZero);
        }
        let reason = std::str::from_utf8(&b[CLOSE_FIXED..])
            .map_err(|_| malformed(K, "reason is not UTF-8"))?
            .to_owned();
        Ok(Close {
            code: be_u16(&b[0..2]),
            reason,
        })
    }

    /// Encodes at most [`MAX_REASON`] bytes of the reason, cut on a character boundary.
    fn reason_bytes(&self) -> &[u8] {
        let mut end = self.reason.len().min(MAX_REASON);
        while !self.reason.is_char_boundary(end) {
            end -= 1;
        }
        &self.reason.as_bytes()[..end]
    }

    pub(super) fn body_len(&self) -> usize {
        CLOSE_FIXED + self.reason_bytes().len()
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.code.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(self.reason_bytes());
    }
}

/// MP_DATA: one meta-layer segment. Flag 0x01 = DATA_FIN (the segment ends the stream).
///
/// ```text
///  0..8 data sequence number (u64) of the first payload byte | 8.. payload
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpData<'a> {
    pub dsn: u64,
    pub fin: bool,
    pub payload: &'a [u8],
}

impl<'a> MpData<'a> {
    pub(super) fn parse(flags: u8, b: &'a [u8]) -> Result<Self, Error> {
        const K: FrameType = FrameType::MpData;
        if b.len() < MP_DATA_FIXED {
            return Err(malformed(K, "body shorter than its data sequence number"));
        }
        if flags & !FLAG_FIN != 0 {
            return Err(malformed(K, "unknown flags"));
        }
        let dsn = be_u64(&b[0..8]);
        if dsn.checked_add((b.len() - MP_DATA_FIXED) as u64).is_none() {
            return Err(malformed(K, "data sequence number overflows"));
        }
        Ok(MpData {
            dsn,
            fin: flags & FLAG_FIN != 0,
            payload: &b[MP_DATA_FIXED..],
        })
    }

    pub(super) fn flags(&self) -> u8 {
        if self.fin {
            FLAG_FIN
        } else {
            0
        }
    }

    pub(super) fn body_len(&self) -> usize {
        MP_DATA_FIXED + self.payload.len()
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.dsn.to_be_bytes());
        out.extend_from_slice(self.payload);
    }

    /// Appends an MP_DATA header for a payload of `len` bytes the caller appends next.
    pub fn emit_header(dsn: u64, fin: bool, len: usize, out: &mut Vec<u8>) {
        Header {
            kind: FrameType::MpData,
            flags: if fin { FLAG_FIN } else { 0 },
            body_len: MP_DATA_FIXED + len,
        }
        .emit(out);
        out.extend_from_slice(&dsn.to_be_bytes());
    }

    /// Bytes of header before an MP_DATA payload.
    pub const OVERHEAD: usize = HEADER_LEN + MP_DATA_FIXED;
}

/// DATA_ACK: the meta-level cumulative ACK and the ONE receive window shared by all paths.
///
/// ```text
///  0..8 data_ack: next expected data sequence number (u64) | 8..12 receive window (bytes
///  past data_ack) | 12 number of path counters P | 13 flags (0x01 = DATA_FIN received: the
///  stream ended at data_ack) | 14..16 reserved
///  16.. P × (u32 connection epoch, u64 bytes): payload bytes received on path 0..P over
///  its current connection, which the epoch names (as in an FBDT ACK: [`PathRx`])
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DataAck {
    pub data_ack: u64,
    pub window: u32,
    pub fin: bool,
    pub path_rx: Vec<PathRx>,
}

impl DataAck {
    pub(super) fn parse(b: &[u8]) -> Result<Self, Error> {
        const K: FrameType = FrameType::DataAck;
        if b.len() < DATA_ACK_FIXED {
            return Err(malformed(K, "body shorter than its fixed part"));
        }
        let n = b[12] as usize;
        if b[13] & !ACK_FLAG_FIN != 0 {
            return Err(malformed(K, "unknown flags"));
        }
        if b[14..16] != [0, 0] {
            return Err(Error::ReservedNonZero);
        }
        if n > MAX_PATHS {
            return Err(malformed(K, "too many path counters"));
        }
        if b.len() != DATA_ACK_FIXED + PATH_RX_LEN * n {
            return Err(malformed(K, "length does not match its counts"));
        }
        let path_rx = b[DATA_ACK_FIXED..]
            .chunks_exact(PATH_RX_LEN)
            .map(|c| PathRx {
                epoch: be_u32(&c[..4]),
                bytes: be_u64(&c[4..]),
            })
            .collect();
        Ok(DataAck {
            data_ack: be_u64(&b[0..8]),
            window: be_u32(&b[8..12]),
            fin: b[13] & ACK_FLAG_FIN != 0,
            path_rx,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        DATA_ACK_FIXED + PATH_RX_LEN * self.path_rx.len()
    }

    pub(super) fn emit(&self, out: &mut Vec<u8>) {
        debug_assert!(self.path_rx.len() <= MAX_PATHS);
        out.extend_from_slice(&self.data_ack.to_be_bytes());
        out.extend_from_slice(&self.window.to_be_bytes());
        let flags = if self.fin { ACK_FLAG_FIN } else { 0 };
        out.extend_from_slice(&[self.path_rx.len() as u8, flags, 0, 0]);
        for v in &self.path_rx {
            out.extend_from_slice(&v.epoch.to_be_bytes());
            out.extend_from_slice(&v.bytes.to_be_bytes());
        }
    }
}
