//! An FBDT session as the mux's transport: batches of frames go to the session as they
//! are (`Session::poll_write_chunk`), not copied once more by `poll_write`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use fbdt_net::Session;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub struct SessionIo(pub Session);

impl AsyncRead for SessionIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for SessionIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl fbdt_mux::Transport for SessionIo {
    fn poll_write_bytes(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &mut Bytes) -> Poll<io::Result<()>> {
        self.0.poll_write_chunk(cx, data)
    }
}
