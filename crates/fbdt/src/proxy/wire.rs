//! What `fbdt proxy` and `fbdt serve` say to each other inside one mux stream: the OPEN
//! carries the destination, the server answers with one status before any data.
//!
//! - request (the OPEN's payload): `1` (CONNECT), then `HOST:PORT` in UTF-8 (a name, an
//!   IPv4 address or a bracketed IPv6 address; names are resolved at the server);
//! - reply (the stream's first bytes from the server): a [`Status`] byte, the length of a
//!   message (one byte), the message (UTF-8, why it failed; empty on success).

use anyhow::{bail, Context};
use tokio::io::{AsyncRead, AsyncReadExt};

const CONNECT: u8 = 1;

/// Where a stream goes, as the client named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Destination {
    /// Parses `HOST:PORT` or `[IPV6]:PORT`; the host must be a plausible DNS name or an
    /// address, the port 1-65535.
    pub fn parse(s: &str) -> anyhow::Result<Destination> {
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, p) = rest
                .split_once("]:")
                .with_context(|| format!("{s:?}: expected [IPV6]:PORT"))?;
            h.parse::<std::net::Ipv6Addr>()
                .with_context(|| format!("{s:?}: bad IPv6 address"))?;
            (h, p)
        } else {
            s.rsplit_once(':')
                .with_context(|| format!("{s:?}: expected HOST:PORT"))?
        };
        let port: u16 = port.parse().with_context(|| format!("{s:?}: bad port"))?;
        if port == 0 {
            bail!("{s:?}: port 0");
        }
        let ok_name = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_' || b == b':');
        if !ok_name {
            bail!("{s:?}: bad host name");
        }
        Ok(Destination {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    pub fn encode(&self) -> bytes::Bytes {
        let mut v = vec![CONNECT];
        v.extend_from_slice(self.to_string().as_bytes());
        v.into()
    }

    pub fn decode(b: &[u8]) -> anyhow::Result<Destination> {
        match b.split_first() {
            Some((&CONNECT, rest)) => Destination::parse(std::str::from_utf8(rest).context("request is not UTF-8")?),
            Some((k, _)) => bail!("unknown request kind {k}"),
            None => bail!("empty request"),
        }
    }
}

/// How the server's attempt to reach a destination ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Ok = 0,
    /// Outside the server's allow-list (SOCKS 0x02, HTTP 403).
    NotAllowed = 1,
    /// The destination refused the connection (SOCKS 0x05, HTTP 502).
    Refused = 2,
    /// The name did not resolve, or no route (SOCKS 0x04, HTTP 502).
    HostUnreachable = 3,
    /// No answer in time (SOCKS 0x06, HTTP 504).
    TimedOut = 4,
    /// Anything else, a malformed request included (SOCKS 0x01, HTTP 502).
    Failed = 5,
}

impl Status {
    fn from_byte(b: u8) -> Option<Status> {
        Some(match b {
            0 => Status::Ok,
            1 => Status::NotAllowed,
            2 => Status::Refused,
            3 => Status::HostUnreachable,
            4 => Status::TimedOut,
            5 => Status::Failed,
            _ => return None,
        })
    }

    /// The SOCKS5 reply code (RFC 1928 §6).
    pub fn socks_code(self) -> u8 {
        match self {
            Status::Ok => 0x00,
            Status::Failed => 0x01,
            Status::NotAllowed => 0x02,
            Status::HostUnreachable => 0x04,
            Status::Refused => 0x05,
            Status::TimedOut => 0x06,
        }
    }

    /// The HTTP status a proxy answers with.
    pub fn http(self) -> (u16, &'static str) {
        match self {
            Status::Ok => (200, "Connection established"),
            Status::NotAllowed => (403, "Forbidden"),
            Status::TimedOut => (504, "Gateway Timeout"),
            _ => (502, "Bad Gateway"),
        }
    }

    /// The status an I/O error of connecting stands for.
    pub fn of_connect_error(e: &std::io::Error) -> Status {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused => Status::Refused,
            K::TimedOut => Status::TimedOut,
            K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => Status::HostUnreachable,
            _ => Status::Failed,
        }
    }
}

/// A reply's bytes (the message cut to 255 bytes at a character boundary).
pub fn encode_reply(status: Status, message: &str) -> Vec<u8> {
    let mut end = message.len().min(255);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let mut v = vec![status as u8, end as u8];
    v.extend_from_slice(&message.as_bytes()[..end]);
    v
}

/// Reads the server's reply off a stream.
pub async fn read_reply<R: AsyncRead + Unpin>(r: &mut R) -> std::io::Result<(Status, String)> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head).await?;
    let status = Status::from_byte(head[0]).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unknown reply status {}", head[0]),
        )
    })?;
    let mut msg = vec![0u8; head[1] as usize];
    r.read_exact(&mut msg).await?;
    Ok((status, String::from_utf8_lossy(&msg).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_round_trip_and_bad_ones_are_refused() {
        for s in ["example.com:443", "10.0.0.1:80", "[::1]:8080"] {
            let d = Destination::parse(s).unwrap();
            assert_eq!(d.to_string(), s);
            assert_eq!(Destination::decode(&d.encode()).unwrap(), d);
        }
        for bad in ["", "host", "host:0", "host:99999", ":80", "[::1:80", "a b:80", "[zz]:1"] {
            assert!(Destination::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(Destination::decode(&[9, b'a']).is_err());
        assert!(Destination::decode(&[]).is_err());
    }

    #[tokio::test]
    async fn replies_round_trip() {
        let long = "é".repeat(200);
        let bytes = encode_reply(Status::NotAllowed, &long);
        let (s, m) = read_reply(&mut &bytes[..]).await.unwrap();
        assert_eq!(s, Status::NotAllowed);
        assert!(long.starts_with(&m) && m.len() <= 255);
        assert!(read_reply(&mut &[9u8, 0][..]).await.is_err());
    }
}
