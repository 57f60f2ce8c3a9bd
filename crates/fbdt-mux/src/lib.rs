//! Many byte streams over one reliable, ordered byte stream (an FBDT `Session`, or any
//! `AsyncRead + AsyncWrite`).
//!
//! - Opening a stream is one OPEN frame: no handshake on any path; data may follow at once.
//! - Each stream has its own credit (a receive window the reader returns as it reads), so
//!   a reader that stops holds up only its own stream: the other streams' frames keep
//!   flowing, and the stalled stream never has more than its window in flight or buffered.
//! - Windows start at [`INITIAL_WINDOW`] and double when the sender reports it was blocked
//!   while the reader kept up (less than half the window unread), up to
//!   [`MuxConfig::max_window`], within [`MuxConfig::budget`] for all streams together.
//! - Half-close is a FIN (`shutdown`), abort is an RST ([`MuxStream::reset`], or dropping a
//!   handle before both directions ended); the peer reads EOF or `ConnectionReset`.
//! - At most [`MuxConfig::max_streams`] streams are open; a further OPEN is refused (RST).
//!
//! The frame format is in `frame`, the per-stream accounting (pure, no I/O) in `state`,
//! the two tasks that move frames in `driver`, the application's handle in `stream`.

mod config;
mod driver;
mod frame;
mod shared;
mod state;
mod stream;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};

pub use config::{MuxConfig, INITIAL_WINDOW};
pub use driver::Transport;
pub use frame::{MAX_DATA, MAX_OPEN};
pub use state::OpenError;
pub use stream::MuxStream;

#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    #[error("configuration: {0}")]
    Config(#[from] MuxConfigError),
    #[error("cannot open a stream: {0}")]
    Open(#[from] OpenError),
}

/// A [`MuxConfig`] the mux cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxConfigError {
    #[error(
        "max_streams {max_streams} must be > 0 and max_window {max_window} within {}..=4 GiB",
        INITIAL_WINDOW
    )]
    Limits { max_streams: usize, max_window: u64 },
    #[error("send_buffer must be > 0")]
    NoSendBuffer,
}

pub(crate) use shared::Shared;
pub(crate) use state::State;

/// Opens streams; cheap to clone. The mux runs until the transport ends or fails, or every
/// `Mux` and the [`Incoming`] are dropped.
#[derive(Clone)]
pub struct Mux {
    shared: Arc<Shared>,
    _alive: Arc<driver::Alive>,
}

/// The streams the peer opens, each with the request its OPEN carried.
pub struct Incoming {
    shared: Arc<Shared>,
    _alive: Arc<driver::Alive>,
}

impl Mux {
    /// Starts a mux over `io` (spawns its reader and writer tasks on the current tokio
    /// runtime). `client` picks the stream-id half: one end must be the client, the other
    /// not. Each batch of frames is copied into `io` by `poll_write`; [`Mux::over`] takes a
    /// transport that can keep the batch instead.
    pub fn new<T>(io: T, client: bool, cfg: MuxConfig) -> Result<(Mux, Incoming), MuxError>
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        Mux::over(driver::Copying(Box::pin(io)), client, cfg)
    }

    /// As [`Mux::new`], over a [`Transport`] (which may take each batch without a copy).
    pub fn over<T: Transport>(io: T, client: bool, cfg: MuxConfig) -> Result<(Mux, Incoming), MuxError> {
        if cfg.max_streams == 0 || cfg.max_window < INITIAL_WINDOW || cfg.max_window > u64::from(u32::MAX) {
            return Err(MuxConfigError::Limits {
                max_streams: cfg.max_streams,
                max_window: cfg.max_window,
            }
            .into());
        }
        if cfg.send_buffer == 0 {
            return Err(MuxConfigError::NoSendBuffer.into());
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(cfg, client)),
            writer: tokio::sync::Notify::new(),
        });
        let alive = Arc::new(driver::start(io, shared.clone()));
        Ok((
            Mux {
                shared: shared.clone(),
                _alive: alive.clone(),
            },
            Incoming { shared, _alive: alive },
        ))
    }

    /// Opens a stream whose peer receives `request` (at most [`MAX_OPEN`] bytes) with it.
    /// Costs one frame; fails only if the mux ended or too many streams are open.
    pub fn open(&self, request: Bytes) -> Result<MuxStream, MuxError> {
        if request.len() > MAX_OPEN {
            return Err(OpenError::RequestTooLong(request.len()).into());
        }
        let id = self.shared.lock().open(request).map_err(MuxError::Open)?;
        self.shared.writer.notify_one();
        Ok(MuxStream::new(id, self.shared.clone()))
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.shared.lock().open_streams()
    }

    /// Why the mux ended, if it did (no stream can be opened then).
    pub fn closed(&self) -> Option<String> {
        self.shared.lock().closed.clone()
    }
}

impl Incoming {
    /// The next stream the peer opened and its request; `None` once the mux ended.
    pub async fn accept(&mut self) -> Option<(MuxStream, Bytes)> {
        let (id, request) = std::future::poll_fn(|cx| {
            let mut st = self.shared.lock();
            if let Some(next) = st.incoming.pop_front() {
                return std::task::Poll::Ready(Some(next));
            }
            if st.closed.is_some() {
                return std::task::Poll::Ready(None);
            }
            st.accept_waker = Some(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await?;
        Some((MuxStream::new(id, self.shared.clone()), request))
    }
}

impl Drop for Incoming {
    /// Streams the peer opened and no one accepted are reset.
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.accepting = false;
        while let Some((id, _)) = st.incoming.pop_front() {
            st.drop_handle(id, true);
        }
        drop(st);
        self.shared.writer.notify_one();
    }
}

#[cfg(test)]
mod tests;
