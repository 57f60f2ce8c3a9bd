//! Both directions between an FBDT session and a TCP connection without a copy of our own:
//! the session's in-order payload slices go to the socket as they are, several per
//! `writev`, and what the socket gives is read into a buffer whose bytes the session frames
//! in place. (`tokio::io::copy_bidirectional` copied every byte once more each way, through
//! 8-KiB buffers: twice the system calls towards the socket.)

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

/// Most bytes taken from the session before they are written to the socket.
const OUT_BYTES: usize = 1 << 20;
/// Most slices in one `writev`.
const OUT_SLICES: usize = 64;
/// Bytes read from the socket at most at once (one of the session's messages).
const IN_BYTES: usize = 256 * 1024;

/// Copies `session` to `tcp` and back until both directions ended; returns the bytes each
/// way (to the socket, to the session). When one side ends its stream the other side's
/// write half is shut down, so a half-close crosses the tunnel.
pub async fn splice(session: &mut fbdt_net::Session, tcp: &mut TcpStream) -> io::Result<(u64, u64)> {
    let mut s = Splice {
        session,
        tcp,
        out: VecDeque::new(),
        out_bytes: 0,
        session_ended: false,
        socket_shut: false,
        to_socket: 0,
        inbuf: BytesMut::new(),
        pending_in: Bytes::new(),
        socket_ended: false,
        session_shut: false,
        to_session: 0,
    };
    poll_fn(|cx| s.poll(cx)).await
}

struct Splice<'a> {
    session: &'a mut fbdt_net::Session,
    tcp: &'a mut TcpStream,
    /// Session → socket: slices taken and not yet written, their total, and whether the
    /// session's stream ended (then the socket's write half is shut down).
    out: VecDeque<Bytes>,
    out_bytes: usize,
    session_ended: bool,
    socket_shut: bool,
    to_socket: u64,
    /// Socket → session: the read buffer, bytes read and not yet taken by the session, and
    /// whether the socket's stream ended (then the session is shut down).
    inbuf: BytesMut,
    pending_in: Bytes,
    socket_ended: bool,
    session_shut: bool,
    to_session: u64,
}

impl Splice<'_> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<(u64, u64)>> {
        let down = self.poll_to_socket(cx)?;
        let up = self.poll_to_session(cx)?;
        if down.is_ready() && up.is_ready() {
            Poll::Ready(Ok((self.to_socket, self.to_session)))
        } else {
            Poll::Pending
        }
    }

    /// Ready once the session's stream ended and all of it reached the socket.
    fn poll_to_socket(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            while !self.session_ended && self.out_bytes < OUT_BYTES {
                match self.session.poll_read_chunk(cx)? {
                    Poll::Ready(Some(b)) => {
                        self.out_bytes += b.len();
                        self.out.push_back(b);
                    }
                    Poll::Ready(None) => self.session_ended = true,
                    Poll::Pending => break,
                }
            }
            if self.out.is_empty() {
                if !self.session_ended {
                    return Poll::Pending;
                }
                if !self.socket_shut {
                    ready!(Pin::new(&mut *self.tcp).poll_shutdown(cx))?;
                    self.socket_shut = true;
                }
                return Poll::Ready(Ok(()));
            }
            let slices: Vec<IoSlice<'_>> = self.out.iter().take(OUT_SLICES).map(|b| IoSlice::new(b)).collect();
            let n = ready!(Pin::new(&mut *self.tcp).poll_write_vectored(cx, &slices))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.consume_out(n);
        }
    }

    fn consume_out(&mut self, mut n: usize) {
        self.out_bytes -= n;
        self.to_socket += n as u64;
        while n > 0 {
            let front = self.out.front_mut().expect("written bytes were queued");
            let k = front.len().min(n);
            front.advance(k);
            n -= k;
            if front.is_empty() {
                self.out.pop_front();
            }
        }
    }

    /// Ready once the socket's stream ended, all of it went into the session, and the
    /// session's shutdown completed (the peer acknowledged every byte).
    fn poll_to_session(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.pending_in.is_empty() {
                let before = self.pending_in.len();
                let r = self.session.poll_write_chunk(cx, &mut self.pending_in);
                self.to_session += (before - self.pending_in.len()) as u64;
                ready!(r)?;
            }
            if self.socket_ended {
                if !self.session_shut {
                    ready!(Pin::new(&mut *self.session).poll_shutdown(cx))?;
                    self.session_shut = true;
                }
                return Poll::Ready(Ok(()));
            }
            ready!(self.tcp.poll_read_ready(cx))?;
            self.inbuf.reserve(IN_BYTES);
            match self.tcp.try_read_buf(&mut self.inbuf) {
                Ok(0) => self.socket_ended = true,
                Ok(_) => {
                    crate::proxy::relay::ack_now(self.tcp);
                    self.pending_in = self.inbuf.split().freeze();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    /// The TCP side answers and half-closes while the session side still has its stream
    /// open: its EOF reaches the session's reader, the session's bytes keep reaching the
    /// socket until the session ends too, every byte arrives once and in order, and the
    /// counts say so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_close_from_the_socket_crosses_while_the_session_still_sends() {
        // A splice that lost an end of stream would leave a reader waiting: fail instead.
        tokio::time::timeout(std::time::Duration::from_secs(60), half_close_from_the_socket())
            .await
            .expect("a direction never ended");
    }

    async fn half_close_from_the_socket() {
        let (up, down) = (pattern(3 << 20, 1), pattern(2 << 20, 7));
        let cfg = fbdt_net::NetConfig::default();
        let mut l = fbdt_net::listen(&["127.0.0.1:0".parse().unwrap()], cfg.clone())
            .await
            .unwrap();
        let spec: fbdt_net::PathSpec = l.local_addrs()[0].to_string().parse().unwrap();
        let client = tokio::spawn(fbdt_net::connect(vec![spec], cfg));
        let mut session = l.accept().await.unwrap();
        let client = client.await.unwrap().unwrap();
        let tl = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (mut near, (mut far, _)) =
            tokio::try_join!(tokio::net::TcpStream::connect(tl.local_addr().unwrap()), tl.accept()).unwrap();
        let spliced = tokio::spawn(async move { super::splice(&mut session, &mut near).await });

        let answer = down.clone();
        let origin = tokio::spawn(async move {
            far.write_all(&answer).await.unwrap();
            far.shutdown().await.unwrap();
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap();
            got
        });
        let (mut r, mut w) = tokio::io::split(client);
        let sent = up.clone();
        // The session side ends its stream only after it saw the socket's end: that end
        // must cross on its own, not with the splice's.
        let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
        let writer = tokio::spawn(async move {
            w.write_all(&sent).await.unwrap();
            eof_rx.await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        assert!(got == down, "the answer differs: {} of {} bytes", got.len(), down.len());
        eof_tx.send(()).unwrap();
        writer.await.unwrap();
        assert!(origin.await.unwrap() == up, "the upload differs");
        let counts = spliced.await.unwrap().unwrap();
        assert_eq!(counts, (up.len() as u64, down.len() as u64));
    }
}
