//! The COTAG header and coded packets.
//!
//! Every coded packet (gateway → AP → device) is one header followed by the coded payload:
//!
//! ```text
//!  0       1       2               6       8                8+n_k
//! +-------+-------+---------------+-------+----------------+------------------------+
//! |version| flags |   label k     |  n_k  | n_k coefficients | coded payload (L bytes) |
//! |  = 1  |bit0=H |  u32, BE      |u16,BE |  one GF(2^8) byte each                    |
//! +-------+-------+---------------+-------+----------------+------------------------+
//! ```
//!
//! * `flags` bit 0 is the priority (1 = High, 0 = Low); bit 1 marks a *unit row* (below);
//!   the other bits must be 0.
//! * `n_k` is the cohort size, 1..=[`MAX_COHORT`]; coefficient `i` multiplies source `i`.
//! * **Unit rows.** A packet whose coefficients are the unit row e_i (source packet i itself,
//!   as every systematic High is) carries, with bit 1 set, the 2-byte index i (big-endian,
//!   `< n_k`) in place of the n_k coefficient bytes. [`CodedPacket::emit`] picks this form
//!   whenever it is shorter (n_k > 2); [`CodedPacket::parse`] gives back the same
//!   coefficients, so nothing above the wire sees the difference.
//! * **Lengths.** Packets of one cohort may differ in length. Before coding, each source packet
//!   becomes a *symbol*: its length as a big-endian `u16`, the packet, then zeros up to the
//!   cohort's longest packet + 2. All symbols of a cohort (and so every coded payload of it)
//!   have the same length `L`; the length travels *inside* the coded payload, so decoding
//!   recovers it with the bytes and the header's size depends on `n_k` and the row's form only.
//!
//! Overhead per coded packet: [`FIXED_HEADER`] (8) + `n_k` header bytes (a unit row: + 2),
//! plus 2 coded length bytes, plus the padding up to the cohort's longest packet (0 when all
//! packets have the same length, as in a bulk TCP flow of full-size segments):
//!
//! | n_k | header | + length prefix | per packet |
//! |----:|-------:|----------------:|-----------:|
//! |   4 |     12 |               2 |         14 |
//! |  16 |     24 |               2 |         26 |
//! |  32 |     40 |               2 |         42 |
//! |  64 |     72 |               2 |         74 |
//!
//! Parsing is strict and never panics: every length is checked against the buffer and the
//! limits before it is used (smoltcp's contract).

/// Version byte of this header layout.
pub const VERSION: u8 = 1;
/// Version, flags, label, n_k.
pub const FIXED_HEADER: usize = 8;
/// Largest cohort a header may describe. 1024 coefficients already make a header of 1 KiB;
/// the gateway's own cap (`GatewayConfig::max_cohort`) is far lower.
pub const MAX_COHORT: usize = 1024;
/// Largest source packet (IPv4/IPv6 without jumbograms).
pub const MAX_PACKET: usize = 65_535;
/// Largest coded payload: the longest packet plus its 2-byte length.
pub const MAX_SYMBOL: usize = MAX_PACKET + LEN_PREFIX;
/// Bytes of the length carried inside each symbol.
pub const LEN_PREFIX: usize = 2;

const FLAG_HIGH: u8 = 0x01;
const FLAG_UNIT: u8 = 0x02;
/// Bytes of a unit row's index.
pub const UNIT_INDEX: usize = 2;

mod field {
    use std::ops::Range;
    pub const VERSION: usize = 0;
    pub const FLAGS: usize = 1;
    pub const LABEL: Range<usize> = 2..6;
    pub const N: Range<usize> = 6..8;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("truncated: {need} bytes needed, {have} present")]
    Truncated { need: usize, have: usize },
    #[error("unknown version {0}")]
    Version(u8),
    #[error("reserved flag bits set: {0:#04x}")]
    Flags(u8),
    #[error("cohort size {0} outside 1..={MAX_COHORT}")]
    CohortSize(usize),
    #[error("unit row {index} of a cohort of {n}")]
    UnitIndex { index: usize, n: usize },
    /// A unit row sent as a dense row where the index is shorter, or as an index where it is
    /// not: every packet has one encoding, so parsing and emitting give back the same bytes.
    #[error("a unit row of a cohort of {0} in the other form than the shorter one")]
    NonCanonical(usize),
    #[error("coded payload of {0} bytes outside 3..={MAX_SYMBOL}")]
    PayloadLen(usize),
    #[error("output buffer of {have} bytes, {need} needed")]
    BufferTooSmall { need: usize, have: usize },
}

/// High combinations are the cohort's first `n_k`; Low ones are extras made with spare
/// capacity, dropped first when a buffer is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    High,
    Low,
}

/// One coded packet, parsed and validated (smoltcp's `Repr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodedPacket {
    pub label: u32,
    pub priority: Priority,
    /// `n_k` coefficients over GF(2^8).
    pub coeffs: Vec<u8>,
    /// The coded symbol, `L` bytes.
    pub payload: Vec<u8>,
}

impl CodedPacket {
    pub fn cohort_size(&self) -> usize {
        self.coeffs.len()
    }

    /// The largest header of a packet of a cohort of `n` packets (a dense row; a unit row's
    /// is [`CodedPacket::header_bytes`]).
    pub fn header_len(n: usize) -> usize {
        FIXED_HEADER + n
    }

    /// This packet's header bytes on the wire.
    pub fn header_bytes(&self) -> usize {
        header_for(self.coeffs.len(), index_form(&self.coeffs).is_some())
    }

    pub fn buffer_len(&self) -> usize {
        self.header_bytes() + self.payload.len()
    }

    pub fn parse(buf: &[u8]) -> Result<CodedPacket, Error> {
        let fixed = buf.get(..FIXED_HEADER).ok_or(Error::Truncated {
            need: FIXED_HEADER,
            have: buf.len(),
        })?;
        if fixed[field::VERSION] != VERSION {
            return Err(Error::Version(fixed[field::VERSION]));
        }
        let flags = fixed[field::FLAGS];
        if flags & !(FLAG_HIGH | FLAG_UNIT) != 0 {
            return Err(Error::Flags(flags));
        }
        let label = u32::from_be_bytes([fixed[2], fixed[3], fixed[4], fixed[5]]);
        let n = usize::from(u16::from_be_bytes([fixed[field::N.start], fixed[field::N.start + 1]]));
        debug_assert_eq!(field::LABEL.end, field::N.start);
        if n == 0 || n > MAX_COHORT {
            return Err(Error::CohortSize(n));
        }
        let header = header_for(n, flags & FLAG_UNIT != 0);
        let row = buf.get(FIXED_HEADER..header).ok_or(Error::Truncated {
            need: header,
            have: buf.len(),
        })?;
        let coeffs = if flags & FLAG_UNIT != 0 {
            let index = usize::from(u16::from_be_bytes([row[0], row[1]]));
            if index >= n {
                return Err(Error::UnitIndex { index, n });
            }
            if n <= UNIT_INDEX {
                return Err(Error::NonCanonical(n));
            }
            let mut unit = vec![0; n];
            unit[index] = 1;
            unit
        } else {
            if index_form(row).is_some() {
                return Err(Error::NonCanonical(n));
            }
            row.to_vec()
        };
        let payload = &buf[header..];
        if payload.len() <= LEN_PREFIX || payload.len() > MAX_SYMBOL {
            return Err(Error::PayloadLen(payload.len()));
        }
        Ok(CodedPacket {
            label,
            priority: if flags & FLAG_HIGH != 0 {
                Priority::High
            } else {
                Priority::Low
            },
            coeffs,
            payload: payload.to_vec(),
        })
    }

    /// Writes the packet into `out`; returns the bytes written.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        let n = self.coeffs.len();
        if n == 0 || n > MAX_COHORT {
            return Err(Error::CohortSize(n));
        }
        if self.payload.len() <= LEN_PREFIX || self.payload.len() > MAX_SYMBOL {
            return Err(Error::PayloadLen(self.payload.len()));
        }
        let unit = index_form(&self.coeffs);
        let header = header_for(n, unit.is_some());
        let len = header + self.payload.len();
        let have = out.len();
        let out = out.get_mut(..len).ok_or(Error::BufferTooSmall { need: len, have })?;
        let high = if self.priority == Priority::High { FLAG_HIGH } else { 0 };
        out[field::VERSION] = VERSION;
        out[field::FLAGS] = high | if unit.is_some() { FLAG_UNIT } else { 0 };
        out[field::LABEL].copy_from_slice(&self.label.to_be_bytes());
        // n <= MAX_COHORT < u16::MAX, checked above; so is a unit row's index.
        out[field::N].copy_from_slice(&(n as u16).to_be_bytes());
        match unit {
            Some(i) => out[FIXED_HEADER..header].copy_from_slice(&(i as u16).to_be_bytes()),
            None => out[FIXED_HEADER..header].copy_from_slice(&self.coeffs),
        }
        out[header..].copy_from_slice(&self.payload);
        Ok(len)
    }

    /// `emit` into a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        let mut v = vec![0; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

/// Header bytes of a cohort of `n`, with the unit-row index or with the row.
fn header_for(n: usize, index: bool) -> usize {
    if index {
        FIXED_HEADER + UNIT_INDEX
    } else {
        FIXED_HEADER + n
    }
}

/// `Some(i)` when `row` travels as an index: it is the unit row e_i and the index is shorter
/// than the row (n_k > 2). The one rule both `emit` and `parse` follow.
fn index_form(row: &[u8]) -> Option<usize> {
    if row.len() <= UNIT_INDEX {
        return None;
    }
    let mut nonzero = row.iter().enumerate().filter(|(_, &c)| c != 0);
    match (nonzero.next(), nonzero.next()) {
        (Some((i, &1)), None) => Some(i),
        _ => None,
    }
}

/// A source packet as a symbol of length `symbol_len` (length prefix, bytes, zero padding).
/// `None` when the packet does not fit.
pub fn to_symbol(packet: &[u8], symbol_len: usize) -> Option<Vec<u8>> {
    let len = u16::try_from(packet.len()).ok()?;
    if packet.len() + LEN_PREFIX > symbol_len {
        return None;
    }
    let mut s = vec![0; symbol_len];
    s[..LEN_PREFIX].copy_from_slice(&len.to_be_bytes());
    s[LEN_PREFIX..LEN_PREFIX + packet.len()].copy_from_slice(packet);
    Some(s)
}

/// The packet inside a decoded symbol; `None` when the carried length does not fit (a
/// corrupted or wrongly decoded symbol).
pub fn from_symbol(symbol: &[u8]) -> Option<&[u8]> {
    let prefix = symbol.get(..LEN_PREFIX)?;
    let len = usize::from(u16::from_be_bytes([prefix[0], prefix[1]]));
    symbol.get(LEN_PREFIX..LEN_PREFIX + len)
}
