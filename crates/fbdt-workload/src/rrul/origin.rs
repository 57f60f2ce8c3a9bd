//! The rrul origin in the server namespace: on every connection it answers requests in
//! turn, each an 8-byte little-endian size, with that many bytes (zeros; the sizes, not the
//! content, are what the flows measure). `u64::MAX` asks for an endless stream: the bulk
//! flow.

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
    loop {
        let mut head = [0u8; 8];
        match s.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let mut left = u64::from_le_bytes(head);
        if left != ENDLESS && left > MAX_ANSWER {
            bail!("request for {left} bytes (most {MAX_ANSWER})");
        }
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            s.write_all(&zeros[..n]).await?;
            if left != ENDLESS {
                left -= n as u64;
            }
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
