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
//! * `flags` bit 0 is the priority (1 = High, 0 = Low); the other bits must be 0.
//! * `n_k` is the cohort size, 1..=[`MAX_COHORT`]; coefficient `i` multiplies source `i`.
//! * **Lengths.** Packets of one cohort may differ in length. Before coding, each source packet
//!   becomes a *symbol*: its length as a big-endian `u16`, the packet, then zeros up to the
//!   cohort's longest packet + 2. All symbols of a cohort (and so every coded payload of it)
//!   have the same length `L`; the length travels *inside* the coded payload, so decoding
//!   recovers it with the bytes and the header stays fixed-size per `n_k`.
//!
//! Overhead per coded packet: [`FIXED_HEADER`] (8) + `n_k` header bytes, plus 2 coded length
//! bytes, plus the padding up to the cohort's longest packet (0 when all packets have the same
//! length, as in a bulk TCP flow of full-size segments):
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

    /// Header bytes of a packet of a cohort of `n` packets.
    pub fn header_len(n: usize) -> usize {
        FIXED_HEADER + n
    }

    pub fn buffer_len(&self) -> usize {
        Self::header_len(self.coeffs.len()) + self.payload.len()
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
        if flags & !FLAG_HIGH != 0 {
            return Err(Error::Flags(flags));
        }
        let label = u32::from_be_bytes([fixed[2], fixed[3], fixed[4], fixed[5]]);
        let n = usize::from(u16::from_be_bytes([fixed[field::N.start], fixed[field::N.start + 1]]));
        debug_assert_eq!(field::LABEL.end, field::N.start);
        if n == 0 || n > MAX_COHORT {
            return Err(Error::CohortSize(n));
        }
        let coeffs = buf.get(FIXED_HEADER..FIXED_HEADER + n).ok_or(Error::Truncated {
            need: FIXED_HEADER + n,
            have: buf.len(),
        })?;
        let payload = &buf[FIXED_HEADER + n..];
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
            coeffs: coeffs.to_vec(),
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
        let len = self.buffer_len();
        let have = out.len();
        let out = out.get_mut(..len).ok_or(Error::BufferTooSmall { need: len, have })?;
        out[field::VERSION] = VERSION;
        out[field::FLAGS] = if self.priority == Priority::High { FLAG_HIGH } else { 0 };
        out[field::LABEL].copy_from_slice(&self.label.to_be_bytes());
        // n <= MAX_COHORT < u16::MAX, checked above.
        out[field::N].copy_from_slice(&(n as u16).to_be_bytes());
        out[FIXED_HEADER..FIXED_HEADER + n].copy_from_slice(&self.coeffs);
        out[FIXED_HEADER + n..].copy_from_slice(&self.payload);
        Ok(len)
    }

    /// `emit` into a new vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>, Error> {
        let mut v = vec![0; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
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
