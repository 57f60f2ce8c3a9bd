//! Joins a TCP connection and a mux stream, both directions, keeping TCP's endings: a FIN
//! on either side becomes a FIN on the other (half-close), an error or RST on the TCP side
//! resets the stream, a reset stream resets the TCP connection (SO_LINGER 0).

use fbdt_mux::MuxStream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes copied per read: a few mux frames.
const BUF: usize = 64 * 1024;

/// Which side failed first.
enum Broke {
    Tcp(std::io::Error),
    Stream(std::io::Error),
}

/// Copies until both directions ended; returns the bytes TCP→stream and stream→TCP. On an
/// error the other side is aborted (RST) and the error is returned.
pub async fn relay(mut tcp: TcpStream, stream: MuxStream) -> std::io::Result<(u64, u64)> {
    let (mut sr, mut sw) = tokio::io::split(stream);
    let result = {
        let (mut tr, mut tw) = tcp.split();
        let up = copy_then_fin(&mut tr, &mut sw, Broke::Tcp, Broke::Stream);
        let down = copy_then_fin(&mut sr, &mut tw, Broke::Stream, Broke::Tcp);
        tokio::try_join!(up, down)
    };
    let stream = sr.unsplit(sw);
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

async fn copy_then_fin<R, W>(
    r: &mut R,
    w: &mut W,
    read_err: fn(std::io::Error) -> Broke,
    write_err: fn(std::io::Error) -> Broke,
) -> Result<u64, Broke>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf).await.map_err(read_err)?;
        if n == 0 {
            w.shutdown().await.map_err(write_err)?;
            return Ok(total);
        }
        w.write_all(&buf[..n]).await.map_err(write_err)?;
        total += n as u64;
    }
}
