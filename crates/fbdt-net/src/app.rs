//! The session's two byte streams between the application's [`Session`] handle and the
//! core: commands and bytes in, in-order bytes and EOF out, and where each direction is in
//! its life.
//!
//! [`Session`]: crate::Session

use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use fbdt_core::Connection;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;

use crate::session::{Cmd, CHUNK};

/// The application's stream into the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outbound {
    Open,
    /// `Connection::finish` was called (a shutdown); commands are still read.
    Finished,
    /// The application dropped its handle (the stream is finished too).
    Dropped,
}

/// The session's stream to the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Inbound {
    Open,
    /// The application dropped its handle: what arrives is read and discarded.
    AppGone,
    /// The peer's stream ended and the application got EOF.
    Eof,
}

/// The driver's ends of the application's channels.
pub(crate) struct AppPipe {
    cmd_rx: mpsc::Receiver<Cmd>,
    /// Application bytes the core had no room for yet.
    parked: Option<Bytes>,
    /// `shutdown` calls waiting for the peer to acknowledge everything.
    finish_waiters: Vec<oneshot::Sender<Result<(), String>>>,
    to_app: PollSender<Vec<Bytes>>,
    pub outbound: Outbound,
    pub inbound: Inbound,
}

impl AppPipe {
    pub fn new(cmd_rx: mpsc::Receiver<Cmd>, to_app: mpsc::Sender<Vec<Bytes>>) -> Self {
        AppPipe {
            cmd_rx,
            parked: None,
            finish_waiters: Vec::new(),
            to_app: PollSender::new(to_app),
            outbound: Outbound::Open,
            inbound: Inbound::Open,
        }
    }

    /// Both directions delivered and acknowledged, and the application told.
    pub fn done(&self, conn: &Connection) -> bool {
        self.outbound != Outbound::Open && conn.is_send_done() && self.inbound == Inbound::Eof
    }

    /// The session ends: pending `shutdown` calls learn how (`err`: why it failed).
    pub fn end(&mut self, conn: &Connection, err: Option<&String>) {
        for tx in self.finish_waiters.drain(..) {
            let _ = tx.send(match err {
                None if conn.is_send_done() => Ok(()),
                None => Err("session ended".into()),
                Some(e) => Err(e.clone()),
            });
        }
    }

    /// Application bytes and commands into the core, as far as it has room.
    pub fn pump_in(&mut self, conn: &mut Connection, cx: &mut Context<'_>) -> bool {
        let mut progress = false;
        loop {
            if let Some(b) = self.parked.as_mut() {
                let n = conn.write_bytes(b);
                b.advance(n);
                if b.is_empty() {
                    self.parked = None;
                    progress = true;
                    continue;
                }
                progress |= n > 0;
                break;
            }
            if self.outbound == Outbound::Dropped || conn.send_room() == 0 {
                break;
            }
            match self.cmd_rx.poll_recv(cx) {
                Poll::Ready(Some(Cmd::Data(b))) => self.parked = Some(b),
                Poll::Ready(Some(Cmd::Finish(tx))) => {
                    conn.finish();
                    self.outbound = Outbound::Finished;
                    self.finish_waiters.push(tx);
                }
                Poll::Ready(None) => {
                    if self.outbound == Outbound::Open {
                        conn.finish();
                    }
                    self.outbound = Outbound::Dropped;
                }
                Poll::Pending => break,
            }
            progress = true;
        }
        if self.outbound != Outbound::Open && conn.is_send_done() {
            for tx in self.finish_waiters.drain(..) {
                let _ = tx.send(Ok(()));
            }
        }
        progress
    }

    /// In-order bytes from the core to the application, then EOF.
    pub fn pump_out(&mut self, conn: &mut Connection, cx: &mut Context<'_>) -> bool {
        let mut progress = false;
        loop {
            let n = conn.readable().min(CHUNK);
            if n == 0 {
                if self.inbound != Inbound::Eof && conn.is_recv_finished() {
                    self.inbound = Inbound::Eof;
                    self.to_app.close();
                    progress = true;
                }
                break;
            }
            if self.inbound == Inbound::AppGone {
                let _ = conn.read_bytes(n);
                progress = true;
                continue;
            }
            match self.to_app.poll_reserve(cx) {
                Poll::Ready(Ok(())) => {
                    // In-order payloads go to the application as the slices they arrived
                    // in, up to CHUNK bytes per message.
                    let mut batch = Vec::new();
                    let mut left = n;
                    while let Some(b) = conn.read_bytes(left) {
                        left -= b.len();
                        batch.push(b);
                    }
                    let _ = self.to_app.send_item(batch);
                    progress = true;
                }
                Poll::Ready(Err(_)) => {
                    self.inbound = Inbound::AppGone;
                    progress = true;
                }
                Poll::Pending => break,
            }
        }
        progress
    }
}
