//! The application's handle to one stream: `AsyncRead + AsyncWrite`. Reading returns EOF
//! after the peer's FIN and `ConnectionReset` after its RST (once the bytes that came
//! before it were read); `shutdown` sends our FIN once
//! everything written before it went out; dropping the handle before both directions
//! ended resets the stream.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::collections::VecDeque;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::Shared;

pub struct MuxStream {
    id: u32,
    shared: Arc<Shared>,
}

impl MuxStream {
    pub(crate) fn new(id: u32, shared: Arc<Shared>) -> MuxStream {
        MuxStream { id, shared }
    }

    /// The stream's id (odd: opened by the client end, even: by the server end).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The window this end grants the peer now (it grows while the reader keeps up).
    pub fn receive_window(&self) -> u64 {
        self.shared.lock().streams.get(&self.id).map_or(0, |s| s.window)
    }

    /// Aborts the stream: the peer's reads and writes fail with `ConnectionReset`.
    pub fn reset(self) {
        self.shared.lock().drop_handle(self.id, true);
        self.shared.writer.notify_one();
        std::mem::forget(self);
    }

    /// Why the stream cannot go on: reset by the peer, or the mux ended.
    fn failure(st: &crate::State, s: Option<&crate::state::StreamState>) -> Option<io::Error> {
        match s {
            Some(s) if s.reset => Some(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "stream reset by the peer",
            )),
            Some(_) => st
                .closed
                .as_ref()
                .map(|why| io::Error::new(io::ErrorKind::ConnectionAborted, why.clone())),
            None => Some(io::Error::new(io::ErrorKind::NotConnected, "stream is gone")),
        }
    }
}

impl Drop for MuxStream {
    fn drop(&mut self) {
        self.shared.lock().drop_handle(self.id, false);
        self.shared.writer.notify_one();
    }
}

impl MuxStream {
    /// Takes received bytes with `take` (which moves what it can from the queue and returns
    /// how many); waits while nothing arrived. `Ok(0)`: the peer's FIN, nothing left.
    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        take: impl FnOnce(&mut VecDeque<Bytes>) -> usize,
    ) -> Poll<io::Result<usize>> {
        let mut st = self.shared.lock();
        let st = &mut *st;
        let s = st.streams.get_mut(&self.id);
        // What arrived before the peer's RST stays readable; a FIN before it still reads
        // as a clean end (the RST then concerned only our direction).
        let Some(s) = s.filter(|s| !s.recv.is_empty() || s.recv_fin) else {
            if let Some(e) = Self::failure(st, st.streams.get(&self.id)) {
                return Poll::Ready(Err(e));
            }
            let s = st.streams.get_mut(&self.id).expect("failure() saw it");
            s.read_waker = Some(cx.waker().clone());
            return Poll::Pending;
        };
        let n = take(&mut s.recv);
        if n > 0 && st.on_read(self.id, n) {
            self.shared.writer.notify_one();
        }
        Poll::Ready(Ok(n))
    }

    /// Moves the received buffers themselves (no copy) into `out`, at most `max` bytes
    /// (`max` > 0); `Ok(0)` means the peer's FIN and nothing left. Takes `&self`, so one
    /// task may read and write the stream at once.
    pub fn poll_read_chunks(&self, cx: &mut Context<'_>, out: &mut Vec<Bytes>, max: usize) -> Poll<io::Result<usize>> {
        self.poll_recv(cx, |recv| {
            let mut n = 0;
            while n < max {
                let Some(front) = recv.front_mut() else { break };
                if front.len() <= max - n {
                    n += front.len();
                    out.push(recv.pop_front().expect("front exists"));
                } else {
                    out.push(front.split_to(max - n));
                    n = max;
                }
            }
            n
        })
    }

    /// [`poll_read_chunks`](Self::poll_read_chunks) as a future.
    pub async fn read_chunks(&self, out: &mut Vec<Bytes>, max: usize) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_read_chunks(cx, out, max)).await
    }

    /// Queues `take(n)` — the next `n` of `len` bytes the caller has — with `n` as large as
    /// the peer's credit and the send buffer allow; waits while there is no room.
    fn poll_queue(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        take: impl FnOnce(usize) -> Bytes,
    ) -> Poll<io::Result<usize>> {
        let mut st = self.shared.lock();
        let st = &mut *st;
        if let Some(e) = Self::failure(st, st.streams.get(&self.id)) {
            return Poll::Ready(Err(e));
        }
        let send_buffer = st.cfg.send_buffer;
        let s = st.streams.get_mut(&self.id).expect("failure() saw it");
        if s.fin_queued {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "write after shutdown")));
        }
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        let room = (s.credit as usize).min(send_buffer.saturating_sub(s.out_len));
        if room == 0 {
            s.write_waker = Some(cx.waker().clone());
            if s.credit == 0 && !s.blocked_sent {
                s.blocked_sent = true;
                s.blocked_queued = true;
                st.mark_sendable(self.id);
                self.shared.writer.notify_one();
            }
            return Poll::Pending;
        }
        let n = room.min(len);
        s.out.push_back(take(n));
        s.out_len += n;
        s.credit -= n as u64;
        st.mark_sendable(self.id);
        self.shared.writer.notify_one();
        Poll::Ready(Ok(n))
    }

    /// Sends all of `data` without copying it (its frames are slices of it); waits for
    /// credit as a write does. Takes `&self`, so one task may read and write the stream at
    /// once.
    pub async fn write_bytes(&self, mut data: Bytes) -> io::Result<()> {
        while !data.is_empty() {
            let len = data.len();
            std::future::poll_fn(|cx| self.poll_queue(cx, len, |n| data.split_to(n))).await?;
        }
        Ok(())
    }

    /// Queues our FIN behind everything written (half-close); does not wait for the peer.
    pub fn finish(&self) -> io::Result<()> {
        let mut st = self.shared.lock();
        let st = &mut *st;
        if let Some(e) = Self::failure(st, st.streams.get(&self.id)) {
            return Err(e);
        }
        let s = st.streams.get_mut(&self.id).expect("failure() saw it");
        if !s.fin_queued {
            s.fin_queued = true;
            st.mark_sendable(self.id);
            self.shared.writer.notify_one();
        }
        Ok(())
    }
}

impl MuxStream {
    /// Copies received bytes into `buf` (AsyncRead for both `MuxStream` and `&MuxStream`).
    fn poll_copy(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.poll_recv(cx, |recv| {
            let mut n = 0;
            while buf.remaining() > 0 {
                let Some(front) = recv.front_mut() else { break };
                let k = front.len().min(buf.remaining());
                buf.put_slice(&front[..k]);
                front.advance(k);
                if front.is_empty() {
                    recv.pop_front();
                }
                n += k;
            }
            n
        })
        .map_ok(|_| ())
    }
}

impl AsyncRead for MuxStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.poll_copy(cx, buf)
    }
}

/// Reading through a shared reference (one task reading while it also writes).
impl AsyncRead for &MuxStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.poll_copy(cx, buf)
    }
}

impl AsyncWrite for MuxStream {
    /// Copies what fits into the stream's queue ([`write_bytes`](Self::write_bytes) does not
    /// copy).
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_queue(cx, buf.len(), |n| Bytes::copy_from_slice(&buf[..n]))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Queues our FIN behind everything written; does not wait for the peer.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.finish())
    }
}
