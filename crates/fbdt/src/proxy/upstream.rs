//! The proxy's sessions to the server and the mux on each: every proxied connection is a
//! stream of one of them (no handshake per connection). With `--sessions N` the proxy keeps
//! N sessions over the same paths and opens each new stream on the one moving the fewest
//! bytes: a session delivers one in-order byte stream, so a small answer on the session of a
//! bulk download waits behind every byte written before it, while on a quiet session it
//! waits only for the radios. When a session ends (every path gone for longer than the idle
//! timeout), the next stream that picks it connects a new one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use fbdt_mux::{Mux, MuxConfig, MuxStream};
use fbdt_net::{NetConfig, PathSpec, StatsHandle};
use tokio::sync::Mutex;

use super::wire::{read_reply, Destination, Status};

/// The most sessions `--sessions` may ask for: each is one TCP connection per path, and the
/// server admits at most 16 sessions from one address by default.
pub const MAX_SESSIONS: usize = 8;

/// A session's rate is re-read at a stream's opening only if its last reading is at least
/// this old (two openings close together see the same rates, not a rate over microseconds).
const LOAD_SAMPLE: Duration = Duration::from_millis(20);

/// Below this a session counts as idle (bytes per second; four 16-KiB frames): a SOCKS
/// reply, a ping every 20 ms or the mux's own frames must not decide between two sessions
/// that carry nothing a new stream could wait behind — the streams' count does.
const IDLE_RATE: f64 = 64.0 * 1024.0;

pub struct Upstream {
    /// The paths a new session is connected over (`--auto-paths` changes them).
    paths: std::sync::Mutex<Vec<PathSpec>>,
    cfg: NetConfig,
    /// `--sessions` slots; `None` until connected, or after a session ended.
    pool: Mutex<Vec<Option<Link>>>,
    /// Sessions replaced by `switch_paths` that still carry streams (a mux ends when its
    /// last `Mux` handle goes, so these are kept until their streams ended).
    retired: std::sync::Mutex<Vec<Mux>>,
    /// The live sessions, for `fbdt status` (read without waiting on `pool`).
    pub status: std::sync::Mutex<Vec<(Mux, StatsHandle)>>,
}

/// One session, with what it moved when last looked at.
struct Link {
    mux: Mux,
    stats: StatsHandle,
    read_at: Instant,
    bytes_then: u64,
    /// Bytes per second (written and delivered) between the last two readings.
    rate: f64,
}

impl Link {
    fn moved(&self) -> u64 {
        let s = self.stats.stats();
        s.bytes_written + s.bytes_delivered
    }

    /// The session's rate, re-read if the last reading is older than [`LOAD_SAMPLE`]; 0
    /// below [`IDLE_RATE`].
    fn load(&mut self, now: Instant) -> f64 {
        let dt = now.duration_since(self.read_at);
        if dt >= LOAD_SAMPLE {
            let bytes = self.moved();
            self.rate = bytes.saturating_sub(self.bytes_then) as f64 / dt.as_secs_f64();
            self.bytes_then = bytes;
            self.read_at = now;
        }
        if self.rate < IDLE_RATE {
            0.0
        } else {
            self.rate
        }
    }
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
    /// Connects every session now, so a wrong server or key fails at start.
    pub async fn connect(paths: Vec<PathSpec>, cfg: NetConfig, sessions: usize) -> anyhow::Result<Arc<Upstream>> {
        anyhow::ensure!(
            (1..=MAX_SESSIONS).contains(&sessions),
            "--sessions {sessions}: expected 1 to {MAX_SESSIONS}"
        );
        let up = Arc::new(Upstream {
            paths: std::sync::Mutex::new(paths.clone()),
            cfg,
            pool: Mutex::new(Vec::new()),
            retired: std::sync::Mutex::new(Vec::new()),
            status: std::sync::Mutex::new(Vec::new()),
        });
        let links = up.links_over(&paths, sessions).await.context("connecting to the server")?;
        {
            let mut pool = up.pool.lock().await;
            *pool = links.into_iter().map(Some).collect();
            up.publish_status(&pool);
        }
        Ok(up)
    }

    fn paths(&self) -> Vec<PathSpec> {
        self.paths.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Connects as many sessions over `paths` as there are now; from then on new streams
    /// open on them, while the streams open now stay on theirs (each lives until its last
    /// stream ends). On an error nothing changes.
    pub async fn switch_paths(&self, paths: Vec<PathSpec>) -> anyhow::Result<()> {
        let count = self.pool.lock().await.len();
        let links = self.links_over(&paths, count).await?;
        let mut pool = self.pool.lock().await;
        if let Ok(mut p) = self.paths.lock() {
            *p = paths;
        }
        let old: Vec<Link> = pool.drain(..).flatten().collect();
        pool.extend(links.into_iter().map(Some));
        if let Ok(mut r) = self.retired.lock() {
            r.extend(old.into_iter().map(|l| l.mux));
        }
        self.publish_status(&pool);
        Ok(())
    }

    /// Lets retired sessions whose streams all ended go.
    pub fn prune_retired(&self) {
        if let Ok(mut r) = self.retired.lock() {
            r.retain(|m| m.closed().is_none() && m.open_streams() > 0);
        }
    }

    async fn links_over(&self, paths: &[PathSpec], count: usize) -> anyhow::Result<Vec<Link>> {
        let mut links = Vec::with_capacity(count);
        for _ in 0..count {
            links.push(self.link_over(paths.to_vec()).await?);
        }
        Ok(links)
    }

    async fn link_over(&self, paths: Vec<PathSpec>) -> anyhow::Result<Link> {
        let session = fbdt_net::connect(paths, self.cfg.clone()).await?;
        let stats = session.stats_handle();
        let (mux, _incoming) = Mux::over(super::session_io::SessionIo(session), true, MuxConfig::default())?;
        let mut link = Link {
            mux,
            stats,
            read_at: Instant::now(),
            bytes_then: 0,
            rate: 0.0,
        };
        link.bytes_then = link.moved();
        Ok(link)
    }

    fn publish_status(&self, pool: &[Option<Link>]) {
        if let Ok(mut s) = self.status.lock() {
            *s = pool.iter().flatten().map(|l| (l.mux.clone(), l.stats.clone())).collect();
        }
    }

    /// A stream without waiting for the server's answer (the caller reads it with
    /// [`await_reply`] when it needs it, and may send data first), on the session that
    /// moved the fewest bytes lately (idle ones alike; ties: the fewest open streams, then
    /// the first).
    pub async fn open(&self, dest: &Destination) -> Result<MuxStream, OpenError> {
        let mut pool = self.pool.lock().await;
        let now = Instant::now();
        let pick = (0..pool.len())
            .map(|i| match pool[i].as_mut() {
                // An ended session is as good as an idle one: it is connected afresh.
                Some(l) if l.mux.closed().is_none() => (l.load(now), l.mux.open_streams(), i),
                _ => (0.0, 0, i),
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)))
            .map(|(_, _, i)| i)
            .ok_or_else(|| OpenError::Session("no session slots".into()))?;
        if let Some(l) = pool[pick].as_ref() {
            match l.mux.open(dest.encode()) {
                Ok(s) => return Ok(s),
                Err(e) if l.mux.closed().is_none() => return Err(OpenError::Session(e.to_string())),
                Err(e) => log!("proxy: session {pick} ended ({e}); connecting a new one"),
            }
        }
        pool[pick] = None;
        self.publish_status(&pool);
        let link = self
            .link_over(self.paths())
            .await
            .map_err(|e| OpenError::Session(format!("{e:#}")))?;
        let stream = link.mux.open(dest.encode()).map_err(|e| OpenError::Session(e.to_string()));
        pool[pick] = Some(link);
        self.publish_status(&pool);
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
