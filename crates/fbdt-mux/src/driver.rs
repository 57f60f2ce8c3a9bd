//! The mux's two tasks: the reader parses frames off the transport and applies them to the
//! state; the writer hands the batches the state prepares to the transport. Neither waits
//! for a stream's application, so a stalled reader of one stream stalls nothing else.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;

use crate::frame::{Header, HEADER_LEN};
use crate::Shared;

/// Bytes the writer gathers before one hand-off to the transport (an FBDT session takes
/// 256 KiB per message to its driver, so one batch is one message).
const BATCH: usize = 256 * 1024;

/// A byte stream the mux runs over. [`Transport::poll_write_bytes`] hands a whole batch
/// over; the default copies it through `poll_write`, a transport that can keep the buffer
/// itself (an FBDT session: `fbdt_net::Session::poll_write_chunk`) saves that copy.
pub trait Transport: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// Writes all of `data` (advancing it as it goes); `Ready(Ok)` once it is empty.
    fn poll_write_bytes(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &mut Bytes) -> Poll<io::Result<()>> {
        while !data.is_empty() {
            let n = ready!(self.as_mut().poll_write(cx, data))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            data.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

/// Any `AsyncRead + AsyncWrite`, written through copies (what [`crate::Mux::new`] takes).
pub(crate) struct Copying<T>(pub Pin<Box<T>>);

impl<T: AsyncRead> AsyncRead for Copying<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for Copying<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.0.as_mut().poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_shutdown(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + Send + 'static> Transport for Copying<T> {}

/// The transport shared by the two tasks; each holds the lock only inside one poll.
struct Io<T>(Arc<Mutex<T>>);

impl<T> Io<T> {
    fn with<R>(&self, f: impl FnOnce(Pin<&mut T>) -> R) -> R
    where
        T: Unpin,
    {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(Pin::new(&mut *g))
    }
}

impl<T: Transport> AsyncRead for Io<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.with(|t| t.poll_read(cx, buf))
    }
}

/// Ends the mux when the last `Mux`/`Incoming` goes: the reader stops, the writer sends
/// what is queued and shuts the transport's write side down.
pub(crate) struct Alive {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.lock().close("the mux was dropped".into());
        self.shared.writer.notify_one();
    }
}

pub(crate) fn start<T: Transport>(io: T, shared: Arc<Shared>) -> Alive {
    let io = Arc::new(Mutex::new(io));
    tokio::spawn(write_loop(Io(io.clone()), shared.clone()));
    let reader = tokio::spawn(read_loop(Io(io), shared.clone()));
    Alive { shared, reader }
}

async fn read_loop<T: Transport>(mut r: Io<T>, shared: Arc<Shared>) {
    let why = match read_frames(&mut r, &shared).await {
        Ok(()) => "the peer ended the session".to_string(),
        Err(e) => e,
    };
    tracing::debug!("mux reader: {why}");
    shared.lock().close(why);
    shared.writer.notify_one();
}

/// Reads frames until the transport ends (Ok) or fails or breaks the protocol (Err). Each
/// payload is read into its own buffer, so a stream's unread data holds exactly its bytes
/// (slices of a shared read buffer would pin the whole buffer).
async fn read_frames<R: AsyncRead + Unpin>(r: &mut R, shared: &Shared) -> Result<(), String> {
    let mut head = [0u8; HEADER_LEN];
    loop {
        match r.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("session: {e}")),
        }
        let h = Header::decode(&head).map_err(|e| format!("protocol: {e}"))?;
        let len = h.payload_len();
        // Uninitialised capacity, filled by the reads (no zeroing first).
        let mut payload = BytesMut::with_capacity(len);
        while payload.len() < len {
            let want = len - payload.len();
            let n = r
                .read_buf(&mut (&mut payload).limit(want))
                .await
                .map_err(|e| format!("session, inside a frame: {e}"))?;
            if n == 0 {
                return Err("session, inside a frame: early end".into());
            }
        }
        let queued = {
            let mut st = shared.lock();
            st.on_frame(h, payload.freeze()).map_err(|e| format!("protocol: {e}"))?;
            !st.control.is_empty()
        };
        if queued {
            shared.writer.notify_one();
        }
    }
}

async fn write_loop<T: Transport>(w: Io<T>, shared: Arc<Shared>) {
    let mut batch = BytesMut::new();
    loop {
        if batch.capacity() < BATCH {
            // A fresh buffer once the transport still holds the last one.
            batch.reserve(BATCH + 2 * crate::MAX_DATA);
        }
        let closed = {
            let mut st = shared.lock();
            st.fill_batch(&mut batch, BATCH);
            st.closed.is_some()
        };
        if !batch.is_empty() {
            let mut data = batch.split().freeze();
            let sent = std::future::poll_fn(|cx| w.with(|t| t.poll_write_bytes(cx, &mut data))).await;
            let sent = match sent {
                Ok(()) => std::future::poll_fn(|cx| w.with(|t| t.poll_flush(cx))).await,
                e => e,
            };
            if let Err(e) = sent {
                shared.lock().close(format!("session: {e}"));
                return;
            }
            continue;
        }
        if closed {
            let _ = std::future::poll_fn(|cx| w.with(|t| t.poll_shutdown(cx))).await;
            return;
        }
        // A permit stored by a notify_one() that came before this await is taken at once,
        // so a frame queued between the batch and here is not missed.
        shared.writer.notified().await;
    }
}
