//! Joins a TCP connection and a mux stream, both directions, keeping TCP's endings: a FIN
//! on either side becomes a FIN on the other (half-close), an error or RST on the TCP side
//! resets the stream, a reset stream resets the TCP connection (SO_LINGER 0).
//!
//! No copies in user space on either way: bytes read from TCP go to the stream as the
//! buffer they were read into (the mux's frames are slices of it), and the stream's
//! received buffers go to TCP as they are, several per (vectored) write.

use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};
use fbdt_mux::MuxStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;

/// Most bytes moved per read on either way: a stream's whole send buffer (fewer system
/// calls per byte; the mux cuts it into frames without copying).
const BUF: usize = 256 * 1024;
/// The first buffer of a connection.
const MIN_BUF: usize = 16 * 1024;
/// Most buffers in one vectored write (16 frames of 16 KiB is one `BUF`).
const IOVECS: usize = 64;

/// Which side failed first.
enum Broke {
    Tcp(std::io::Error),
    Stream(std::io::Error),
}

/// Copies until both directions ended; returns the bytes TCP→stream and stream→TCP. On an
/// error the other side is aborted (RST) and the error is returned.
pub async fn relay(tcp: TcpStream, stream: MuxStream) -> std::io::Result<(u64, u64)> {
    relay_with(tcp, stream, false).await
}

/// As [`relay`]; with `reply_pending` the server's answer to the stream's OPEN is still to
/// come (the client was told "connected" before it): TCP→stream flows at once, and the
/// answer is read off the stream before anything goes back to TCP. A refusal then resets
/// the TCP connection (the only "failed" a client told "connected" can still see) and
/// comes back as the error.
pub async fn relay_with(mut tcp: TcpStream, stream: MuxStream, reply_pending: bool) -> std::io::Result<(u64, u64)> {
    let result = {
        let (mut tr, mut tw) = tcp.split();
        let up = tcp_to_stream(&mut tr, &stream);
        let down = async {
            if reply_pending {
                answer(&stream).await.map_err(Broke::Stream)?;
            }
            stream_to_tcp(&stream, &mut tw).await
        };
        tokio::try_join!(up, down)
    };
    match result {
        Ok(counts) => Ok(counts),
        Err(Broke::Tcp(e)) => {
            stream.reset();
            Err(e)
        }
        Err(Broke::Stream(e)) => {
            abort_tcp(tcp);
            Err(e)
        }
    }
}

/// Closes `tcp` with an RST instead of a FIN, as the peer's reset asks. (A zero linger
/// time never blocks the close, unlike the non-zero times tokio warns about.)
pub fn abort_tcp(tcp: TcpStream) {
    let _ = socket2::SockRef::from(&tcp).set_linger(Some(std::time::Duration::ZERO));
    drop(tcp);
}

/// Reads the server's answer to the OPEN; a refusal is an error.
async fn answer(s: &MuxStream) -> std::io::Result<()> {
    match super::wire::read_reply(&mut &*s).await? {
        (super::wire::Status::Ok, _) => Ok(()),
        (status, why) => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!("server: {status:?}: {why}"),
        )),
    }
}

async fn tcp_to_stream(r: &mut ReadHalf<'_>, s: &MuxStream) -> Result<u64, Broke> {
    let mut buf = BytesMut::new();
    // Buffers start small (most connections are requests and idle keep-alives) and grow to
    // BUF once one read brings MIN_BUF or more (bytes are flowing in bulk).
    let mut size = MIN_BUF;
    let mut total = 0u64;
    loop {
        if buf.capacity() < size / 4 {
            // A new buffer once the mux still holds slices of the last one.
            buf.reserve(size);
        }
        let n = r.read_buf(&mut buf).await.map_err(Broke::Tcp)?;
        if n == 0 {
            s.finish().map_err(Broke::Stream)?;
            return Ok(total);
        }
        if n >= MIN_BUF {
            size = BUF;
        }
        s.write_bytes(buf.split().freeze()).await.map_err(Broke::Stream)?;
        total += n as u64;
    }
}

async fn stream_to_tcp(s: &MuxStream, w: &mut WriteHalf<'_>) -> Result<u64, Broke> {
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0u64;
    loop {
        let n = s.read_chunks(&mut chunks, BUF).await.map_err(Broke::Stream)?;
        if n == 0 {
            w.shutdown().await.map_err(Broke::Tcp)?;
            return Ok(total);
        }
        write_all_chunks(w, &mut chunks).await.map_err(Broke::Tcp)?;
        total += n as u64;
    }
}

/// Writes every buffer of `chunks` (emptying it), many per system call.
async fn write_all_chunks(w: &mut WriteHalf<'_>, chunks: &mut Vec<Bytes>) -> std::io::Result<()> {
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<IoSlice<'_>> = chunks[first..].iter().take(IOVECS).map(|c| IoSlice::new(c)).collect();
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let c = &mut chunks[first];
            let k = c.len().min(n);
            c.advance(k);
            n -= k;
            if c.is_empty() {
                first += 1;
            }
        }
    }
    chunks.clear();
    Ok(())
}
