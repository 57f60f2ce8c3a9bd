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
        ack_now(r.as_ref());
        if n >= MIN_BUF {
            size = BUF;
        }
        s.write_bytes(buf.split().freeze()).await.map_err(Broke::Stream)?;
        total += n as u64;
    }
}

/// Acknowledges what was just read at once (TCP_QUICKACK, which the kernel clears again, so
/// it is set after every read). A relay both reads and writes its TCP connection, so Linux
/// puts it in "ping-pong" mode and delays the ACK of a small segment by 40 ms hoping to
/// carry it on data going back; a peer with Nagle's algorithm on (python's `http.server`
/// writes an answer's head and body apart, without TCP_NODELAY) holds the rest of its
/// answer until that ACK. Measured on loopback: every 20 kB response through `fbdt serve`
/// took 44 ms, the body leaving 43–47 ms after the head (docs/proxy.md). One system call
/// per read; a failure only costs the delay it would have saved.
pub(crate) fn ack_now(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_quickack(true);
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

#[cfg(test)]
mod tests {
    use fbdt_mux::{Mux, MuxConfig};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// An origin answers each request with a small head (as python's `http.server` does
    /// before it writes the body, Nagle on): the relay acknowledges the head as it reads it,
    /// so nothing of the origin's is unacknowledged once the head came out of the stream's
    /// far end — in every round, also after Linux put the relay's socket in ping-pong mode
    /// (which without TCP_QUICKACK delays that ACK by 40 ms, and the origin's body with it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_answer_is_acknowledged_as_it_is_read() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_side = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (mut origin, _) = listener.accept().await.unwrap();
        let (a, b) = tokio::io::duplex(1 << 20);
        let (near_mux, _near_incoming) = Mux::new(a, true, MuxConfig::default()).unwrap();
        let (_far_mux, mut far_incoming) = Mux::new(b, false, MuxConfig::default()).unwrap();
        let near = near_mux.open(Bytes::new()).unwrap();
        let (mut far, _) = far_incoming.accept().await.unwrap();
        tokio::spawn(relay(relay_side, near));
        let request = b"GET /f HTTP/1.1\r\nHost: o\r\n\r\n";
        let mut got = [0u8; 200];
        let mut late = Vec::new();
        for round in 0..20 {
            far.write_all(request).await.unwrap();
            origin.read_exact(&mut got[..request.len()]).await.unwrap();
            origin.write_all(&[b'h'; 200]).await.unwrap();
            far.read_exact(&mut got).await.unwrap();
            // The relay's ACK left before it queued the head on the stream; on loopback the
            // kernel has handled it by now (a few checks spare a slow softirq).
            let mut acked = false;
            for _ in 0..5 {
                if fbdt_net::sockopt::tcp_info(&origin).unwrap().unacked == 0 {
                    acked = true;
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_micros(200)).await;
            }
            if !acked {
                late.push(round);
            }
        }
        assert!(late.is_empty(), "the head waited for a delayed ACK in rounds {late:?}");
    }
}
