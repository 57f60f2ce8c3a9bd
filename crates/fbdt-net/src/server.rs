//! Server side: accept connections, route each by its first frame, run one task per
//! session.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use fbdt_core::handshake::{first_frame, FirstFrame};
use fbdt_core::wire::{self, Close, Frame};
use fbdt_core::{max_frame_len, Connection, Instant, PathBinding, PathId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::admission::{self, Admission, ConnTicket, Liveness, PendingAdmit};
use crate::driver;
use crate::secure::{self, PathStream};
use crate::session::NewPath;
use crate::{ConfigError, Error, NetConfig, Session};

/// Joining connections queued for one session before its task takes them.
const JOIN_QUEUE: usize = 16;

/// A running session as the router sees it: where its JOINs go, and how alive it is.
struct Entry {
    joins: mpsc::Sender<NewPath>,
    live: Arc<Liveness>,
}

struct Registry {
    sessions: Mutex<HashMap<[u8; 8], Entry>>,
    count: AtomicUsize,
    next_id: AtomicUsize,
    admission: Arc<Admission>,
}

impl Registry {
    /// Counts a new session from `peer`, making room when the server is full: a session
    /// that never became useful, else the longest-idle one, from a prefix heavier than the
    /// newcomer's or its own, is evicted (see [`admission::evict_one`]);
    /// evicted sessions close within a stats tick and their final flush, and while they
    /// do the count may exceed `max_sessions` by at most an eighth.
    fn take_slot(&self, cfg: &NetConfig, peer: std::net::IpAddr) -> Result<(), String> {
        let max = cfg.max_sessions;
        let n = self.count.fetch_add(1, Ordering::SeqCst);
        if n < max {
            return Ok(());
        }
        let evicted = n < max + max / 8 + 1
            && self
                .sessions
                .lock()
                .is_ok_and(|m| admission::evict_one(m.values().map(|e| &e.live), peer, cfg.evict_idle_after));
        if evicted {
            return Ok(());
        }
        self.count.fetch_sub(1, Ordering::SeqCst);
        Err(format!("server full ({max} sessions)"))
    }
}

/// Accepts FBDT sessions. Dropping it stops accepting: running sessions go on over the paths
/// they have, but their later JOINs are refused too (a slow path's first connection, every
/// re-join after a stall), so keep it as long as any session it gave should stay whole.
pub struct Listener {
    rx: mpsc::Receiver<Session>,
    addrs: Vec<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl Listener {
    /// The next session whose HELLO arrived; `None` after the listener failed.
    pub async fn accept(&mut self) -> Option<Session> {
        self.rx.recv().await
    }
    /// The bound addresses (useful with port 0).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Listens on every address in `addrs`; a client's paths may arrive on any of them.
pub async fn listen(addrs: &[SocketAddr], cfg: NetConfig) -> Result<Listener, Error> {
    if addrs.is_empty() {
        return Err(ConfigError::NoListenAddress.into());
    }
    fbdt_core::Connection::server(cfg.core.clone()).map_err(ConfigError::from)?;
    cfg.congestion.validate().map_err(ConfigError::from)?;
    if matches!(cfg.security, crate::Security::Client(_)) {
        return Err(ConfigError::ClientTlsOnServer.into());
    }
    let cfg = Arc::new(cfg);
    let (tx, rx) = mpsc::channel(cfg.max_sessions.max(1));
    let admission = Admission::new(&cfg);
    let registry = Arc::new(Registry {
        sessions: Mutex::new(HashMap::new()),
        count: AtomicUsize::new(0),
        next_id: AtomicUsize::new(0),
        admission: admission.clone(),
    });
    let mut bound = Vec::new();
    let mut tasks = Vec::new();
    for a in addrs {
        let l = TcpListener::bind(a)
            .await
            .map_err(|e| Error::Io(std::io::Error::new(e.kind(), format!("listen on {a}: {e}"))))?;
        bound.push(l.local_addr()?);
        let (cfg, registry, tx) = (cfg.clone(), registry.clone(), tx.clone());
        tasks.push(tokio::spawn(accept_loop(l, cfg, registry, tx)));
    }
    Ok(Listener {
        rx,
        addrs: bound,
        tasks,
    })
}

/// Accepts until the listener is dropped: an accept error (EMFILE, ENFILE, ENOBUFS, ...)
/// only pauses it.
async fn accept_loop(l: TcpListener, cfg: Arc<NetConfig>, registry: Arc<Registry>, tx: mpsc::Sender<Session>) {
    loop {
        let (stream, peer) = match l.accept().await {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let admitted = match registry.admission.connection(peer.ip()) {
            Ok(a) => a,
            Err(why) => {
                // Closed without a CLOSE frame: this may be a JOIN of a live session, and a
                // CLOSE would end that session; a closed connection is only re-dialled.
                tracing::warn!(%peer, "refused at accept: {why}");
                drop(stream);
                continue;
            }
        };
        if let Err(e) = tune(&stream, &cfg) {
            tracing::warn!(%peer, "socket options: {e}");
        }
        tokio::spawn(route(stream, peer, admitted, cfg.clone(), registry.clone(), tx.clone()));
    }
}

fn tune(s: &TcpStream, cfg: &NetConfig) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    crate::sockopt::set_notsent_lowat(s, cfg.notsent_lowat)?;
    if let Some(ms) = cfg.rto_max_ms {
        // Best effort: older kernels lack the option.
        let _ = crate::sockopt::set_rto_max_ms(s, ms);
    }
    if let Some(cc) = cfg.congestion.initial() {
        crate::sockopt::set_congestion(s, cc)?;
    }
    crate::sockopt::set_dead_peer_timeout(s, cfg.dead_peer_timeout)
}

/// Best effort: tell the peer why before closing its connection.
async fn refuse(mut stream: PathStream, peer: SocketAddr, code: u16, reason: String) {
    tracing::warn!(%peer, "closing connection: {reason}");
    let mut out = Vec::new();
    let mut reason = reason;
    reason.truncate(wire::MAX_REASON);
    while !reason.is_char_boundary(reason.len()) {
        reason.pop();
    }
    Frame::Close(Close { code, reason }).emit(&mut out);
    let _ = tokio::time::timeout(std::time::Duration::from_millis(200), async {
        stream.write_all(&out).await?;
        stream.flush().await
    })
    .await;
}

/// The TLS handshake and token proof (or nothing with --plaintext), then the first frame,
/// within `limit`: the secured stream, the bytes read and what they begin with. `None`
/// when the connection was dropped or refused (the peer told why where it can read it).
async fn first_frame_within(
    tcp: TcpStream,
    peer: SocketAddr,
    limit: std::time::Duration,
    cfg: &NetConfig,
) -> Option<(PathStream, Vec<u8>, FirstFrame)> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut stream = match tokio::time::timeout_at(deadline, secure::accept(tcp, &cfg.security)).await {
        Ok(Ok(s)) => s,
        Ok(Err(secure::Refused { why, tell: Some(s), .. })) => {
            refuse(s, peer, 1, why).await;
            return None;
        }
        Ok(Err(secure::Refused { why, tell: None, closed_silently })) => {
            if closed_silently {
                tracing::debug!(%peer, "dropped connection: {why}");
            } else {
                tracing::warn!(%peer, "dropped connection: {why}");
            }
            return None;
        }
        Err(_) => {
            tracing::warn!(%peer, "dropped connection: no TLS handshake within {limit:?}");
            return None;
        }
    };
    let mut buf = Vec::with_capacity(512);
    let mut tmp = [0u8; 4096];
    let read_first = async {
        loop {
            match first_frame(&buf) {
                Ok(f) => return Ok(f),
                Err(wire::Error::Incomplete { .. }) => {}
                Err(e) => return Err((1, format!("bad first frame: {e}"))),
            }
            // HELLO and JOIN are tiny; anything needing more is not a first frame we take.
            if buf.len() > max_frame_len() {
                return Err((1, "first frame too long".into()));
            }
            match stream.read(&mut tmp).await {
                Ok(0) if buf.is_empty() => return Err((0, "closed without sending anything".into())),
                Ok(0) => return Err((0, "closed in the middle of its first frame".into())),
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
                Err(e) => return Err((0, format!("read: {e}"))),
            }
        }
    };
    let first = match tokio::time::timeout_at(deadline, read_first).await {
        Ok(Ok(f)) => f,
        // A client's stall probe that its path made unneeded, or a port check: not a fault.
        Ok(Err((0, why))) if buf.is_empty() => {
            tracing::debug!(%peer, "dropped connection: {why}");
            return None;
        }
        Ok(Err((0, why))) => {
            tracing::warn!(%peer, "dropped connection: {why}");
            return None;
        }
        Ok(Err((code, why))) => {
            refuse(stream, peer, code, why).await;
            return None;
        }
        Err(_) => {
            refuse(stream, peer, 1, format!("no HELLO or JOIN within {limit:?}")).await;
            return None;
        }
    };
    Some((stream, buf, first))
}

async fn route(
    tcp: TcpStream,
    peer: SocketAddr,
    admitted: PendingAdmit,
    cfg: Arc<NetConfig>,
    registry: Arc<Registry>,
    tx: mpsc::Sender<Session>,
) {
    let PendingAdmit {
        conn: ticket,
        pending,
        evicted,
        deadline,
    } = admitted;
    // Until its first frame the connection may be evicted from the full pending pool for
    // a newer one: closed without a word (it may be a live session's JOIN, which would
    // only re-dial).
    let first = tokio::select! {
        r = first_frame_within(tcp, peer, deadline, &cfg) => r,
        () = evicted.cancelled() => {
            tracing::debug!(%peer, "dropped connection: evicted from the full pending pool");
            return;
        }
    };
    let Some((stream, buf, first)) = first else {
        return;
    };
    drop(pending);
    match first {
        FirstFrame::Join { token, path_index } => {
            let target = registry
                .sessions
                .lock()
                .ok()
                .and_then(|m| m.get(&token).map(|e| e.joins.clone()));
            let Some(target) = target else {
                return refuse(stream, peer, 6, "JOIN for an unknown session".into()).await;
            };
            let np = NewPath {
                index: path_index,
                stream,
                first: buf,
                ticket: Some(ticket),
            };
            if let Err(e) = target.try_send(np) {
                tracing::warn!(%peer, "JOIN dropped: session busy or gone ({e})");
            }
        }
        FirstFrame::Hello => open_session(stream, peer, ticket, buf, &cfg, &registry, &tx).await,
    }
}

/// A HELLO arrived on `stream`: starts its session unless the server or its source is full.
async fn open_session(
    mut stream: PathStream,
    peer: SocketAddr,
    ticket: ConnTicket,
    buf: Vec<u8>,
    cfg: &Arc<NetConfig>,
    registry: &Arc<Registry>,
    tx: &mpsc::Sender<Session>,
) {
    let per_source = match registry.admission.session(peer.ip()) {
        Ok(t) => t,
        Err(why) => return refuse(stream, peer, 7, format!("refused: {why}")).await,
    };
    if let Err(why) = registry.take_slot(cfg, peer.ip()) {
        return refuse(stream, peer, 7, why).await;
    }
    let mut core = cfg.core.clone();
    core.seed = rand::random();
    let Ok(mut conn) = Connection::server(core) else {
        registry.count.fetch_sub(1, Ordering::SeqCst);
        return;
    };
    conn.set_local_key(crate::client::os_key());
    let binding = PathBinding {
        exporter: stream.binding(),
        epoch: 0,
    };
    let _ = conn.add_path_bound(PathId(0), binding, Instant::ZERO);
    // Bytes pipelined behind the HELLO stay in the path's buffer for the driver: a frame
    // cut in two by our read is completed by its next one.
    let mut rest = BytesMut::from(&buf[..]);
    if let Err(e) = conn.handle_recv_buf(PathId(0), &mut rest, Instant::ZERO) {
        registry.count.fetch_sub(1, Ordering::SeqCst);
        // The core queued a CLOSE naming the error: send it.
        let mut out = Vec::new();
        while conn.poll_transmit(PathId(0), max_frame_len(), Instant::ZERO, &mut out) > 0 {}
        tracing::warn!(%peer, "refused HELLO: {e}");
        let _ = tokio::time::timeout(std::time::Duration::from_millis(200), async {
            stream.write_all(&out).await?;
            stream.flush().await
        })
        .await;
        return;
    }
    let Some(token) = conn.token() else {
        registry.count.fetch_sub(1, Ordering::SeqCst);
        return;
    };
    let (jtx, jrx) = mpsc::channel(JOIN_QUEUE);
    let live = Liveness::new(peer.ip());
    let inserted = match registry.sessions.lock() {
        Ok(mut m) if !m.contains_key(&token) => {
            m.insert(
                token,
                Entry {
                    joins: jtx,
                    live: live.clone(),
                },
            );
            true
        }
        _ => false,
    };
    if !inserted {
        registry.count.fetch_sub(1, Ordering::SeqCst);
        return refuse(stream, peer, 7, "session token collision".into()).await;
    }
    let id = registry.next_id.fetch_add(1, Ordering::Relaxed);
    let reg = registry.clone();
    let on_end = Box::new(move || {
        if let Ok(mut m) = reg.sessions.lock() {
            m.remove(&token);
        }
        reg.count.fetch_sub(1, Ordering::SeqCst);
        drop(per_source);
    });
    tracing::info!(%peer, session = id, "new session");
    let path0 = NewPath {
        index: 0,
        stream,
        first: Vec::new(),
        ticket: Some(ticket),
    };
    let s = driver::start_server(conn, path0, rest, jrx, cfg.clone(), format!("s{id}"), on_end, live);
    if tx.try_send(s).is_err() {
        tracing::warn!(%peer, "session dropped: the application is not accepting");
    }
}
