//! SOCKS5 (RFC 1928), the parts browsers and curl use: no authentication, CONNECT, IPv4,
//! IPv6 and domain-name destinations (socks5h: the name goes to the server unresolved).
//! Anything else is answered with the RFC's reply code and the connection closed.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::wire::{Destination, Status};

pub const VERSION: u8 = 5;
const NO_AUTH: u8 = 0;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CMD_CONNECT: u8 = 1;
const COMMAND_NOT_SUPPORTED: u8 = 0x07;
const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;

/// Reads the greeting and the request; returns the destination, or answers the client with
/// the fitting reply and returns why it was refused.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> Result<Destination, String> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).await.map_err(|e| format!("greeting: {e}"))?;
    if head[0] != VERSION {
        return Err(format!("SOCKS version {} (only 5)", head[0]));
    }
    let mut methods = vec![0u8; head[1] as usize];
    s.read_exact(&mut methods).await.map_err(|e| format!("greeting: {e}"))?;
    if !methods.contains(&NO_AUTH) {
        let _ = s.write_all(&[VERSION, NO_ACCEPTABLE_METHOD]).await;
        return Err("the client offers no method without authentication".into());
    }
    s.write_all(&[VERSION, NO_AUTH]).await.map_err(|e| e.to_string())?;

    let mut req = [0u8; 4];
    s.read_exact(&mut req).await.map_err(|e| format!("request: {e}"))?;
    if req[0] != VERSION || req[2] != 0 {
        reply(s, Status::Failed.socks_code()).await;
        return Err(format!("malformed request header {req:02x?}"));
    }
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            s.read_exact(&mut a).await.map_err(|e| format!("request: {e}"))?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        4 => {
            let mut a = [0u8; 16];
            s.read_exact(&mut a).await.map_err(|e| format!("request: {e}"))?;
            std::net::Ipv6Addr::from(a).to_string()
        }
        3 => {
            let mut len = [0u8; 1];
            s.read_exact(&mut len).await.map_err(|e| format!("request: {e}"))?;
            let mut name = vec![0u8; len[0] as usize];
            s.read_exact(&mut name).await.map_err(|e| format!("request: {e}"))?;
            String::from_utf8(name).map_err(|_| "domain name is not UTF-8".to_string())?
        }
        t => {
            reply(s, ADDRESS_TYPE_NOT_SUPPORTED).await;
            return Err(format!("address type {t}"));
        }
    };
    let mut port = [0u8; 2];
    s.read_exact(&mut port).await.map_err(|e| format!("request: {e}"))?;
    if req[1] != CMD_CONNECT {
        reply(s, COMMAND_NOT_SUPPORTED).await;
        return Err(format!("command {} (only CONNECT)", req[1]));
    }
    let text = if host.contains(':') {
        format!("[{host}]:{}", u16::from_be_bytes(port))
    } else {
        format!("{host}:{}", u16::from_be_bytes(port))
    };
    match Destination::parse(&text) {
        Ok(d) => Ok(d),
        Err(e) => {
            reply(s, Status::Failed.socks_code()).await;
            Err(format!("{e:#}"))
        }
    }
}

/// Sends a reply with `code` (the bound address is not meaningful here: 0.0.0.0:0).
pub async fn reply<S: AsyncWrite + Unpin>(s: &mut S, code: u8) {
    let _ = s.write_all(&[VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0]).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(client_bytes: &[u8]) -> (Result<Destination, String>, Vec<u8>) {
        let (mut a, mut b) = tokio::io::duplex(4096);
        a.write_all(client_bytes).await.unwrap();
        a.shutdown().await.unwrap();
        let r = accept(&mut b).await;
        drop(b);
        let mut back = Vec::new();
        a.read_to_end(&mut back).await.unwrap();
        (r, back)
    }

    #[tokio::test]
    async fn connect_by_name_and_by_address() {
        let mut m = vec![5, 1, 0, 5, 1, 0, 3, 11];
        m.extend_from_slice(b"example.com");
        m.extend_from_slice(&443u16.to_be_bytes());
        let (r, back) = run(&m).await;
        assert_eq!(r.unwrap().to_string(), "example.com:443");
        assert_eq!(back, [5, 0]);
        let (r, _) = run(&[
            5, 2, 2, 0, 5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 80,
        ])
        .await;
        assert_eq!(r.unwrap().to_string(), "[::1]:80");
    }

    #[tokio::test]
    async fn refusals_carry_the_rfc_reply_codes() {
        let (r, back) = run(&[5, 1, 2]).await;
        assert!(r.is_err());
        assert_eq!(back, [5, 0xff], "no acceptable method");
        let (r, back) = run(&[5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80]).await;
        assert!(r.unwrap_err().contains("command 2"));
        assert_eq!(back[2..4], [5, COMMAND_NOT_SUPPORTED]);
        let (r, back) = run(&[5, 1, 0, 5, 1, 0, 9]).await;
        assert!(r.is_err());
        assert_eq!(back[2..4], [5, ADDRESS_TYPE_NOT_SUPPORTED]);
        let (r, back) = run(&[5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 0]).await;
        assert!(r.is_err(), "port 0");
        assert_eq!(back[2..4], [5, 1]);
        let (r, _) = run(&[4, 1, 0, 80]).await;
        assert!(r.unwrap_err().contains("version 4"));
        let (r, _) = run(&[5, 3, 0]).await;
        assert!(r.is_err(), "truncated greeting");
    }
}
