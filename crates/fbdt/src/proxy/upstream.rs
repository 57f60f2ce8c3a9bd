//! The proxy's one session to the server and the mux on it: every proxied connection is a
//! stream of it (no handshake per connection). When the session ends (every path gone for
//! longer than the idle timeout), the next stream connects a new one.

use std::sync::Arc;

use anyhow::Context;
use fbdt_mux::{Mux, MuxConfig, MuxStream};
use fbdt_net::{NetConfig, PathSpec, StatsHandle};
use tokio::sync::Mutex;

use super::wire::{read_reply, Destination, Status};

pub struct Upstream {
    /// The paths a new session is connected over (`--auto-paths` changes them).
    paths: std::sync::Mutex<Vec<PathSpec>>,
    cfg: NetConfig,
    current: Mutex<Option<Mux>>,
    /// Sessions replaced by `switch_paths` that still carry streams (a mux ends when its
    /// last `Mux` handle goes, so these are kept until their streams ended).
    retired: std::sync::Mutex<Vec<Mux>>,
    /// The live link, for `fbdt status` (read without waiting on `current`).
    pub status: std::sync::Mutex<Option<(Mux, StatsHandle)>>,
}

/// How opening a stream to a destination failed.
pub enum OpenError {
    /// The server answered: not allowed, unreachable, ...
    Refused(Status, String),
    /// No session, or it broke.
    Session(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Refused(s, why) => write!(f, "server: {s:?}: {why}"),
            OpenError::Session(why) => write!(f, "session: {why}"),
        }
    }
}

impl OpenError {
    pub fn status(&self) -> Status {
        match self {
            OpenError::Refused(s, _) => *s,
            OpenError::Session(_) => Status::Failed,
        }
    }
}

impl Upstream {
    /// Connects the first session now, so a wrong server or key fails at start.
    pub async fn connect(paths: Vec<PathSpec>, cfg: NetConfig) -> anyhow::Result<Arc<Upstream>> {
        let up = Arc::new(Upstream {
            paths: std::sync::Mutex::new(paths),
            cfg,
            current: Mutex::new(None),
            retired: std::sync::Mutex::new(Vec::new()),
            status: std::sync::Mutex::new(None),
        });
        let link = up.new_link().await.context("connecting to the server")?;
        *up.current.lock().await = Some(link);
        Ok(up)
    }

    fn paths(&self) -> Vec<PathSpec> {
        self.paths.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Connects a session over `paths`; from then on new streams open on it, while the
    /// streams open now stay on theirs (which lives until its last stream ends). On an
    /// error nothing changes.
    pub async fn switch_paths(&self, paths: Vec<PathSpec>) -> anyhow::Result<()> {
        let link = self.link_over(paths.clone()).await?;
        let mut cur = self.current.lock().await;
        if let Ok(mut p) = self.paths.lock() {
            *p = paths;
        }
        if let (Some(old), Ok(mut r)) = (cur.replace(link), self.retired.lock()) {
            r.push(old);
        }
        Ok(())
    }

    /// Lets retired sessions whose streams all ended go.
    pub fn prune_retired(&self) {
        if let Ok(mut r) = self.retired.lock() {
            r.retain(|m| m.closed().is_none() && m.open_streams() > 0);
        }
    }

    async fn new_link(&self) -> anyhow::Result<Mux> {
        self.link_over(self.paths()).await
    }

    async fn link_over(&self, paths: Vec<PathSpec>) -> anyhow::Result<Mux> {
        let session = fbdt_net::connect(paths, self.cfg.clone()).await?;
        let stats = session.stats_handle();
        let (mux, _incoming) = Mux::over(super::session_io::SessionIo(session), true, MuxConfig::default())?;
        if let Ok(mut s) = self.status.lock() {
            *s = Some((mux.clone(), stats));
        }
        Ok(mux)
    }

    /// A stream without waiting for the server's answer (the caller reads it with
    /// [`await_reply`] when it needs it, and may send data first).
    pub async fn open(&self, dest: &Destination) -> Result<MuxStream, OpenError> {
        let mut cur = self.current.lock().await;
        if let Some(mux) = cur.as_ref() {
            match mux.open(dest.encode()) {
                Ok(s) => return Ok(s),
                Err(e) if mux.closed().is_none() => return Err(OpenError::Session(e.to_string())),
                Err(e) => log!("proxy: session ended ({e}); connecting a new one"),
            }
        }
        *cur = None;
        let mux = self
            .new_link()
            .await
            .map_err(|e| OpenError::Session(format!("{e:#}")))?;
        let stream = mux.open(dest.encode()).map_err(|e| OpenError::Session(e.to_string()));
        *cur = Some(mux);
        stream
    }
}

/// Waits for the server's answer on a fresh stream.
pub async fn await_reply(stream: &mut MuxStream) -> Result<(), OpenError> {
    match read_reply(stream).await {
        Ok((Status::Ok, _)) => Ok(()),
        Ok((status, why)) => Err(OpenError::Refused(status, why)),
        Err(e) => Err(OpenError::Session(e.to_string())),
    }
}
