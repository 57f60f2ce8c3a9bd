//! The mux's frames on the wire (pure: no I/O). Every frame is a 9-byte header — kind (1),
//! stream id (4, big-endian), length (4, big-endian) — followed by `length` payload bytes
//! for OPEN and DATA; for WINDOW the length field is the credit increment and no payload
//! follows; FIN, RST and BLOCKED carry nothing.

use bytes::{BufMut, BytesMut};

pub const HEADER_LEN: usize = 9;
/// Most payload bytes in one DATA frame: small enough that a frame of one stream delays the
/// others by little (16 KiB is ~13 µs at 10 Gbit/s), large enough that headers cost < 0.1%.
pub const MAX_DATA: usize = 16 * 1024;
/// Most bytes an OPEN may carry (the application's request, e.g. a destination).
pub const MAX_OPEN: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A new stream; the payload is the opener's request.
    Open = 0,
    Data = 1,
    /// The receiver lets the sender send `length` more bytes.
    Window = 2,
    /// The sender's direction ended (TCP FIN).
    Fin = 3,
    /// The stream was aborted (TCP RST) or refused.
    Rst = 4,
    /// The sender has data but no credit: the receiver may grow the stream's window.
    Blocked = 5,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub stream: u32,
    pub length: u32,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("{kind:?} frame of {length} bytes (at most {max})")]
    TooLong { kind: Kind, length: u32, max: usize },
    #[error("{0:?} frame for stream 0")]
    StreamZero(Kind),
}

impl Header {
    /// Parses and checks a header: a known kind, a payload no longer than the kind allows.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, FrameError> {
        let kind = match b[0] {
            0 => Kind::Open,
            1 => Kind::Data,
            2 => Kind::Window,
            3 => Kind::Fin,
            4 => Kind::Rst,
            5 => Kind::Blocked,
            k => return Err(FrameError::UnknownKind(k)),
        };
        let stream = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
        let length = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
        if stream == 0 {
            return Err(FrameError::StreamZero(kind));
        }
        let max = match kind {
            Kind::Open => MAX_OPEN,
            Kind::Data => MAX_DATA,
            Kind::Window => usize::MAX,
            Kind::Fin | Kind::Rst | Kind::Blocked => 0,
        };
        if length as usize > max {
            return Err(FrameError::TooLong { kind, length, max });
        }
        Ok(Header { kind, stream, length })
    }

    /// Payload bytes that follow this header.
    pub fn payload_len(&self) -> usize {
        match self.kind {
            Kind::Open | Kind::Data => self.length as usize,
            _ => 0,
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(self.kind as u8);
        out.put_u32(self.stream);
        out.put_u32(self.length);
    }
}

/// A frame without payload (WINDOW, FIN, RST, BLOCKED) or an OPEN with its request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Control {
    pub header: Header,
    pub payload: bytes::Bytes,
}

impl Control {
    pub fn new(kind: Kind, stream: u32, length: u32) -> Control {
        Control {
            header: Header { kind, stream, length },
            payload: bytes::Bytes::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(h: Header) -> [u8; HEADER_LEN] {
        let mut b = BytesMut::new();
        h.encode(&mut b);
        b[..].try_into().unwrap()
    }

    #[test]
    fn headers_round_trip() {
        for kind in [
            Kind::Open,
            Kind::Data,
            Kind::Window,
            Kind::Fin,
            Kind::Rst,
            Kind::Blocked,
        ] {
            let length = match kind {
                Kind::Open => 7,
                Kind::Data => MAX_DATA as u32,
                Kind::Window => u32::MAX,
                _ => 0,
            };
            let h = Header {
                kind,
                stream: 0xdead_beef,
                length,
            };
            assert_eq!(Header::decode(&bytes_of(h)), Ok(h));
        }
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut b = bytes_of(Header {
            kind: Kind::Data,
            stream: 1,
            length: 0,
        });
        b[0] = 9;
        assert_eq!(Header::decode(&b), Err(FrameError::UnknownKind(9)));
        let b = bytes_of(Header {
            kind: Kind::Data,
            stream: 1,
            length: MAX_DATA as u32 + 1,
        });
        assert!(matches!(Header::decode(&b), Err(FrameError::TooLong { .. })));
        let b = bytes_of(Header {
            kind: Kind::Fin,
            stream: 1,
            length: 1,
        });
        assert!(matches!(Header::decode(&b), Err(FrameError::TooLong { .. })));
        let b = bytes_of(Header {
            kind: Kind::Open,
            stream: 0,
            length: 0,
        });
        assert_eq!(Header::decode(&b), Err(FrameError::StreamZero(Kind::Open)));
    }
}
