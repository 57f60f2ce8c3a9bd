//! The rrul origin in the server namespace: on every connection it answers requests in
//! turn, each a little-endian 8-byte size and 8-byte tag, with that many bytes of the tag's
//! [`pattern`], so the client can check that each answer is the one it asked for, whole and
//! unshifted. `u64::MAX` asks for an endless stream of zeros: the bulk flow (its bytes are
//! counted, not checked: a check at Gbit/s would cost the client the CPU it measures with).

use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The largest finite answer: a request above it (other than the endless one) is refused
/// and the connection closed.
pub const MAX_ANSWER: u64 = 1 << 30;
/// What the bulk flow asks for.
pub const ENDLESS: u64 = u64::MAX;
const CHUNK: usize = 64 * 1024;
/// A request: size, then tag.
pub const REQUEST_BYTES: usize = 16;

/// The request for `size` bytes of `tag`'s pattern.
pub fn request(size: u64, tag: u64) -> [u8; REQUEST_BYTES] {
    let mut r = [0u8; REQUEST_BYTES];
    r[..8].copy_from_slice(&size.to_le_bytes());
    r[8..].copy_from_slice(&tag.to_le_bytes());
    r
}

/// Byte `offset` of the answer to request `tag`: the top byte of a multiplicative hash
/// of both, so answers to different tags differ and a shifted answer does not match.
pub fn pattern(tag: u64, offset: u64) -> u8 {
    const A: u64 = 0x9E37_79B9_7F4A_7C15;
    const B: u64 = 0x2545_F491_4F6C_DD1D;
    (tag.wrapping_mul(A).wrapping_add(offset.wrapping_mul(B)) >> 56) as u8
}

/// Serves on `listener` until `stop` fires (or its sender is dropped).
pub async fn serve(listener: TcpListener, mut stop: oneshot::Receiver<()>) -> Result<()> {
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            accepted = listener.accept() => {
                let (s, _) = accepted.context("accepting an rrul connection")?;
                // A connection ends with an error when the client drops it mid-answer
                // (the bulk flow always does): nothing to report.
                tokio::spawn(async move {
                    let _ = answer(s).await;
                });
            }
        }
    }
}

async fn answer(mut s: TcpStream) -> Result<()> {
    s.set_nodelay(true)?;
    let zeros = vec![0u8; CHUNK];
    let mut out = vec![0u8; CHUNK];
    loop {
        let mut head = [0u8; REQUEST_BYTES];
        match s.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let size = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let tag = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
        if size == ENDLESS {
            loop {
                s.write_all(&zeros).await?;
            }
        }
        if size > MAX_ANSWER {
            bail!("request for {size} bytes (most {MAX_ANSWER})");
        }
        let mut sent = 0u64;
        while sent < size {
            let n = (size - sent).min(CHUNK as u64) as usize;
            for (i, b) in out[..n].iter_mut().enumerate() {
                *b = pattern(tag, sent + i as u64);
            }
            s.write_all(&out[..n]).await?;
            sent += n as u64;
        }
    }
}

/// Binds the origin's listener on `addr` (call inside the server namespace).
pub fn bind(addr: SocketAddr, mptcp: bool) -> Result<TcpListener> {
    let proto = if mptcp {
        socket2::Protocol::MPTCP
    } else {
        socket2::Protocol::TCP
    };
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(proto))
        .context("the rrul origin's socket")?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into()).with_context(|| format!("binding the rrul origin to {addr}"))?;
    s.listen(64)?;
    s.set_nonblocking(true)?;
    Ok(TcpListener::from_std(s.into())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_to_different_tags_or_offsets_differ() {
        let answer = |tag: u64, from: u64| -> Vec<u8> { (from..from + 64).map(|k| pattern(tag, k)).collect() };
        assert_ne!(answer(1, 0), answer(2, 0));
        assert_ne!(answer(1, 0), answer(1, 1), "a shifted answer does not match");
        assert_eq!(&request(100_000, 7)[..8], &100_000u64.to_le_bytes());
    }
}
