//! Server admission control: how many connections the server holds in all, how many
//! pending connections and sessions one source address and one source prefix (/24 IPv4,
//! /64 IPv6) may hold, and whom to let go when the server is full. Each admitted
//! connection or session carries a ticket whose drop gives its place back, so no path
//! through the server can leak a slot. Limits are listed in docs/security.md ("Limits").
//!
//! Full is not the end of admission:
//! - the pending pool (connections before their first frame) evicts its *oldest* member
//!   for a new connection: a legitimate connection finishes its handshake in a round trip
//!   or two, a flood's connections sit there, so a re-JOIN of a live session (which looks
//!   like any other connection until its first frame) is never refused because of the
//!   pool. Past half full, new connections get the shorter
//!   `NetConfig::pressured_handshake_timeout`;
//! - a full session table evicts a session that never became useful (oldest first), then
//!   the useful session idle longest (idle at least `NetConfig::evict_idle_after`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::NetConfig;

/// File descriptors kept free under the process's limit for everything that is not a
/// path (listeners, files, the forwarded service's connections, logging).
pub const FD_RESERVE: usize = 64;

/// Most connections the server holds at once: `NetConfig::max_connections`, never more
/// than the process's file-descriptor limit minus [`FD_RESERVE`].
pub fn connection_cap(cfg: &NetConfig) -> usize {
    let fds = fd_limit().unwrap_or(1024);
    cfg.max_connections.min(fds.saturating_sub(FD_RESERVE)).max(1)
}

fn fd_limit() -> Option<usize> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass and reads nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    (rc == 0).then(|| usize::try_from(r.rlim_cur).unwrap_or(usize::MAX))
}

/// The source prefix an address is counted in: its /24 (IPv4) or /64 (IPv6). One host
/// commonly holds a whole IPv6 /64, and a small network a v4 /24.
pub fn prefix_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let [a, b, c, _] = a.octets();
            IpAddr::from([a, b, c, 0])
        }
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => prefix_of(IpAddr::V4(v4)),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(a) & !((1u128 << 64) - 1))),
        },
    }
}

/// What a per-source count is kept for: one address, or its prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Source {
    Addr(IpAddr),
    Prefix(IpAddr),
}

#[derive(Default)]
struct PerSource {
    pending: usize,
    sessions: usize,
}

/// Which count a charge is on.
#[derive(Clone, Copy)]
enum Kind {
    Pending,
    Sessions,
}

impl Kind {
    fn field(self, s: &mut PerSource) -> &mut usize {
        match self {
            Kind::Pending => &mut s.pending,
            Kind::Sessions => &mut s.sessions,
        }
    }
}

/// The pending pool: connections that have not sent their first frame, oldest first.
#[derive(Default)]
struct Pool {
    next: u64,
    members: BTreeMap<u64, CancellationToken>,
}

/// Counts shared by every accept loop of one listener.
pub(crate) struct Admission {
    connections: AtomicUsize,
    cap: usize,
    max_pending: usize,
    max_pending_per_source: usize,
    max_pending_per_prefix: usize,
    max_sessions_per_source: usize,
    max_sessions_per_prefix: usize,
    handshake_timeout: Duration,
    pressured_handshake_timeout: Duration,
    sources: Mutex<HashMap<Source, PerSource>>,
    pool: Mutex<Pool>,
    /// Connections evicted from the pending pool since the start (diagnostics).
    evicted_pending: AtomicU64,
}

/// Why a connection or session was not admitted (sent to the peer in a CLOSE).
pub(crate) type Refusal = String;

/// A connection let into the pending pool.
pub(crate) struct PendingAdmit {
    pub conn: ConnTicket,
    pub pending: PendingTicket,
    /// Cancelled when the connection is evicted from the pool for a newer one.
    pub evicted: CancellationToken,
    /// Time it has for its TLS handshake and first frame.
    pub deadline: Duration,
}

impl Admission {
    pub fn new(cfg: &NetConfig) -> Arc<Self> {
        Arc::new(Admission {
            connections: AtomicUsize::new(0),
            cap: connection_cap(cfg),
            max_pending: cfg.max_pending.max(1),
            max_pending_per_source: cfg.max_pending_per_source,
            max_pending_per_prefix: cfg.max_pending_per_prefix,
            max_sessions_per_source: cfg.max_sessions_per_source,
            max_sessions_per_prefix: cfg.max_sessions_per_prefix,
            handshake_timeout: cfg.handshake_timeout,
            pressured_handshake_timeout: cfg.pressured_handshake_timeout.min(cfg.handshake_timeout),
            sources: Mutex::new(HashMap::new()),
            pool: Mutex::new(Pool::default()),
            evicted_pending: AtomicU64::new(0),
        })
    }

    /// A new TCP connection from `ip`: counted against the global cap, as pending for its
    /// source and prefix, and in the pending pool until it sent its first frame. A full
    /// pool makes room by evicting its oldest member.
    pub fn connection(self: &Arc<Self>, ip: IpAddr) -> Result<PendingAdmit, Refusal> {
        if self.connections.fetch_add(1, Ordering::SeqCst) >= self.cap {
            self.connections.fetch_sub(1, Ordering::SeqCst);
            return Err(format!("server at its connection limit ({})", self.cap));
        }
        let conn = ConnTicket(self.clone());
        let charge = self.charge(
            ip,
            Kind::Pending,
            (self.max_pending_per_source, self.max_pending_per_prefix),
            "pending connections",
        )?;
        let evicted = CancellationToken::new();
        let mut pool = self
            .pool
            .lock()
            .map_err(|_| Refusal::from("admission state poisoned"))?;
        while pool.members.len() >= self.max_pending {
            if let Some((_, oldest)) = pool.members.pop_first() {
                oldest.cancel();
                self.evicted_pending.fetch_add(1, Ordering::Relaxed);
            }
        }
        let id = pool.next;
        pool.next += 1;
        pool.members.insert(id, evicted.clone());
        let deadline = if pool.members.len() * 2 > self.max_pending {
            self.pressured_handshake_timeout
        } else {
            self.handshake_timeout
        };
        drop(pool);
        Ok(PendingAdmit {
            conn,
            pending: PendingTicket {
                _charge: charge,
                adm: self.clone(),
                id,
            },
            evicted,
            deadline,
        })
    }

    /// A HELLO from `ip` opens a session: counted for its source and prefix while the
    /// session lives.
    pub fn session(self: &Arc<Self>, ip: IpAddr) -> Result<SessionTicket, Refusal> {
        self.charge(
            ip,
            Kind::Sessions,
            (self.max_sessions_per_source, self.max_sessions_per_prefix),
            "sessions",
        )
        .map(SessionTicket)
    }

    fn charge(
        self: &Arc<Self>,
        ip: IpAddr,
        kind: Kind,
        (per_addr, per_prefix): (usize, usize),
        what: &'static str,
    ) -> Result<SourceCharge, Refusal> {
        let mut m = self
            .sources
            .lock()
            .map_err(|_| Refusal::from("admission state poisoned"))?;
        let (addr, prefix) = (Source::Addr(ip), Source::Prefix(prefix_of(ip)));
        if *kind.field(m.entry(addr).or_default()) >= per_addr {
            return Err(format!("{ip} already holds {per_addr} {what}"));
        }
        if *kind.field(m.entry(prefix).or_default()) >= per_prefix {
            let net = match ip {
                IpAddr::V4(_) => format!("{}/24", prefix_of(ip)),
                IpAddr::V6(_) => format!("{}/64", prefix_of(ip)),
            };
            return Err(format!("{net} already holds {per_prefix} {what}"));
        }
        for k in [addr, prefix] {
            *kind.field(m.entry(k).or_default()) += 1;
        }
        Ok(SourceCharge {
            adm: self.clone(),
            keys: [addr, prefix],
            kind,
        })
    }

    /// Connections held now.
    #[cfg(test)]
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Connections in the pending pool now.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pool.lock().map(|p| p.members.len()).unwrap_or(0)
    }
}

/// One of the server's connections; dropped with it.
pub(crate) struct ConnTicket(Arc<Admission>);

impl Drop for ConnTicket {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One unit of a per-source count, on the address and on its prefix.
pub(crate) struct SourceCharge {
    adm: Arc<Admission>,
    keys: [Source; 2],
    kind: Kind,
}

impl Drop for SourceCharge {
    fn drop(&mut self) {
        if let Ok(mut m) = self.adm.sources.lock() {
            for k in self.keys {
                if let Some(s) = m.get_mut(&k) {
                    let n = self.kind.field(s);
                    *n = n.saturating_sub(1);
                    if s.pending == 0 && s.sessions == 0 {
                        m.remove(&k);
                    }
                }
            }
        }
    }
}

/// A connection that has not sent its first frame yet: its place in the per-source counts
/// and in the pending pool.
pub(crate) struct PendingTicket {
    _charge: SourceCharge,
    adm: Arc<Admission>,
    id: u64,
}

impl Drop for PendingTicket {
    fn drop(&mut self) {
        if let Ok(mut p) = self.adm.pool.lock() {
            p.members.remove(&self.id);
        }
    }
}

/// A session, for its source address and prefix.
pub(crate) struct SessionTicket(#[allow(dead_code)] SourceCharge);

/// Milliseconds on the process's monotonic clock (a shared origin, so sessions compare).
fn now_ms() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(std::time::Instant::now);
    u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What the server's admission knows of one running session, written by its driver at
/// every stats tick (`NetConfig::stats_interval`) and read when the server is full.
pub(crate) struct Liveness {
    /// The client's address (where its HELLO came from).
    source: IpAddr,
    started_ms: u64,
    /// The client sent data or a JOIN.
    useful: AtomicBool,
    /// When either stream last made progress (bytes delivered to us, or acknowledged by
    /// the peer).
    active_ms: AtomicU64,
    progress: AtomicU64,
    /// When the peer last acknowledged our bytes, or had none of ours outstanding.
    acked_ms: AtomicU64,
    acked: AtomicU64,
    /// Set by admission: the session is to close (its driver sees it at its next tick).
    evict: AtomicBool,
}

/// Why a driver should close its session (see [`Liveness::observe`]).
pub(crate) struct CloseFor {
    pub code: u16,
    pub why: String,
}

impl Liveness {
    pub fn new(source: IpAddr) -> Arc<Self> {
        let t = now_ms();
        Arc::new(Liveness {
            source,
            started_ms: t,
            useful: AtomicBool::new(false),
            active_ms: AtomicU64::new(t),
            progress: AtomicU64::new(0),
            acked_ms: AtomicU64::new(t),
            acked: AtomicU64::new(0),
            evict: AtomicBool::new(false),
        })
    }

    /// The driver's tick: whether the client has been useful, bytes delivered to us,
    /// bytes of ours written and acknowledged. Says when the session must close: evicted,
    /// or the peer acknowledged none of our outstanding bytes for `stall` (a peer that
    /// does not read holds our send buffers until then, and no longer).
    pub fn observe(
        &self,
        useful: bool,
        delivered: u64,
        written: u64,
        acked: u64,
        stall: Option<Duration>,
    ) -> Option<CloseFor> {
        let t = now_ms();
        if useful {
            self.useful.store(true, Ordering::Relaxed);
        }
        let progress = delivered.wrapping_add(acked);
        if self.progress.swap(progress, Ordering::Relaxed) != progress {
            self.active_ms.store(t, Ordering::Relaxed);
        }
        if self.acked.swap(acked, Ordering::Relaxed) != acked || written <= acked {
            self.acked_ms.store(t, Ordering::Relaxed);
        }
        if self.evict.load(Ordering::Relaxed) {
            return Some(CloseFor {
                code: 7,
                why: "evicted: the server is full and this session was idle".into(),
            });
        }
        let stalled_ms = t.saturating_sub(self.acked_ms.load(Ordering::Relaxed));
        match stall {
            Some(s) if written > acked && u128::from(stalled_ms) > s.as_millis() => Some(CloseFor {
                code: 1,
                why: format!(
                    "the peer acknowledged none of our {} outstanding bytes for {s:?} (not reading?)",
                    written - acked
                ),
            }),
            _ => None,
        }
    }

    /// Marks the session for eviction; false if it already was.
    fn mark_evicted(&self) -> bool {
        !self.evict.swap(true, Ordering::Relaxed)
    }
}

/// Picks the session to evict for a new one among `sessions` (none of them already
/// marked), from the source prefix that holds the most sessions — a flood's, not a light
/// user's: in it, the oldest session that never became useful, else the useful one idle
/// longest, if idle at least `min_idle` (`None`: useful sessions are never evicted).
/// Marks it and returns true, or false when nobody qualifies.
pub(crate) fn evict_one<'a>(
    sessions: impl Iterator<Item = &'a Arc<Liveness>> + Clone,
    min_idle: Option<Duration>,
) -> bool {
    let t = now_ms();
    let mut held: HashMap<IpAddr, usize> = HashMap::new();
    for l in sessions.clone() {
        *held.entry(prefix_of(l.source)).or_default() += 1;
    }
    let weight = |l: &Liveness| held.get(&prefix_of(l.source)).copied().unwrap_or(0);
    let mut useless: Option<(usize, &Arc<Liveness>)> = None;
    let mut idle: Option<(usize, u64, &Arc<Liveness>)> = None;
    for l in sessions {
        if l.evict.load(Ordering::Relaxed) {
            continue;
        }
        let w = weight(l);
        if !l.useful.load(Ordering::Relaxed) {
            if useless.is_none_or(|(uw, u)| (w, u.started_ms) > (uw, l.started_ms)) {
                useless = Some((w, l));
            }
            continue;
        }
        let quiet = t.saturating_sub(l.active_ms.load(Ordering::Relaxed));
        if min_idle.is_none_or(|m| u128::from(quiet) < m.as_millis()) {
            continue;
        }
        if idle.is_none_or(|(iw, q, _)| (w, quiet) > (iw, q)) {
            idle = Some((w, quiet, l));
        }
    }
    let victim = useless.map(|(_, l)| l).or(idle.map(|(_, _, l)| l));
    victim.is_some_and(|v| v.mark_evicted())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared clock, at least 500 ms after its origin (so tests can date events back).
    fn aged_clock() -> u64 {
        let t = now_ms();
        if t < 500 {
            std::thread::sleep(Duration::from_millis(500 - t));
        }
        now_ms()
    }

    fn cfg() -> NetConfig {
        NetConfig {
            max_connections: 3,
            max_pending_per_source: 2,
            max_sessions_per_source: 1,
            ..NetConfig::default()
        }
    }

    #[test]
    fn tickets_give_their_places_back() {
        let adm = Admission::new(&cfg());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t1 = adm.connection(a).unwrap();
        let t2 = adm.connection(a).unwrap();
        assert!(adm.connection(a).is_err(), "third pending connection from one source");
        let t3 = adm.connection(b).unwrap();
        assert!(adm.connection(b).is_err(), "global cap");
        assert_eq!(adm.connections(), 3);
        assert_eq!(adm.pending(), 3);
        let s = adm.session(a).unwrap();
        assert!(adm.session(a).is_err());
        drop((t1, t2, t3, s));
        assert_eq!(adm.connections(), 0);
        assert_eq!(adm.pending(), 0);
        assert!(adm.sources.lock().unwrap().is_empty());
        assert!(adm.session(a).is_ok());
    }

    #[test]
    fn prefixes_are_counted_beside_addresses() {
        let cfg = NetConfig {
            max_sessions_per_source: 2,
            max_sessions_per_prefix: 3,
            ..NetConfig::default()
        };
        let adm = Admission::new(&cfg);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let held: Vec<_> = ["10.0.0.1", "10.0.0.1", "10.0.0.2"]
            .iter()
            .map(|a| adm.session(ip(a)).unwrap())
            .collect();
        let e = adm.session(ip("10.0.0.3")).err().unwrap();
        assert!(e.contains("10.0.0.0/24 already holds 3 sessions"), "{e}");
        assert!(adm.session(ip("10.0.1.3")).is_ok(), "another /24");
        // One IPv6 host with many addresses is one /64.
        let v6: Vec<_> = (1..=3)
            .map(|i| adm.session(ip(&format!("2001:db8:1:2::{i}"))).unwrap())
            .collect();
        let e = adm.session(ip("2001:db8:1:2:ffff::9")).err().unwrap();
        assert!(e.contains("2001:db8:1:2::/64"), "{e}");
        drop((held, v6));
        assert_eq!(prefix_of(ip("::ffff:192.0.2.77")), ip("192.0.2.0"));
    }

    #[test]
    fn a_full_pool_evicts_its_oldest_and_shortens_deadlines() {
        let cfg = NetConfig {
            max_pending: 4,
            max_pending_per_source: 100,
            max_pending_per_prefix: 100,
            ..NetConfig::default()
        };
        let adm = Admission::new(&cfg);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let first: Vec<_> = (0..4).map(|_| adm.connection(a).unwrap()).collect();
        assert_eq!(first[0].deadline, cfg.handshake_timeout);
        assert_eq!(first[3].deadline, cfg.pressured_handshake_timeout);
        assert!(first.iter().all(|p| !p.evicted.is_cancelled()));
        let fifth = adm.connection(a).expect("a full pool makes room");
        assert!(first[0].evicted.is_cancelled(), "the oldest is evicted");
        assert!(first[1..].iter().all(|p| !p.evicted.is_cancelled()));
        assert_eq!(adm.pending(), 4);
        // The evicted connection's tickets go when its task ends; nothing is counted twice.
        drop(first);
        assert_eq!(adm.pending(), 1);
        drop(fifth);
        assert_eq!(adm.pending(), 0);
        assert_eq!(adm.connections(), 0);
    }

    #[test]
    fn eviction_takes_the_useless_first_then_the_longest_idle() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let a = Liveness::new(ip("10.0.0.1"));
        let b = Liveness::new(ip("10.0.0.2"));
        let c = Liveness::new(ip("10.0.1.1"));
        for l in [&a, &b] {
            l.observe(true, 1, 0, 0, None);
        }
        // b was active long ago, a just now.
        b.active_ms.store(0, Ordering::Relaxed);
        let all = [a.clone(), b.clone(), c.clone()];
        let min = Some(Duration::from_millis(1));
        assert!(evict_one(all.iter(), min));
        assert!(c.evict.load(Ordering::Relaxed), "never useful goes first");
        assert!(c.observe(false, 0, 0, 0, None).is_some_and(|c| c.code == 7));
        assert!(evict_one(all.iter(), min));
        assert!(b.evict.load(Ordering::Relaxed), "then the longest idle");
        assert!(
            !evict_one(all.iter(), Some(Duration::from_secs(3600))),
            "a is not idle long enough"
        );
        assert!(
            !evict_one(all.iter(), None),
            "useful sessions are kept without a minimum"
        );
    }

    #[test]
    fn eviction_takes_from_the_prefix_holding_most() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // A light user idle for long, a flood's sessions idle for less.
        let light = Liveness::new(ip("192.0.2.1"));
        let flood: Vec<_> = (1..=3).map(|i| Liveness::new(ip(&format!("198.51.100.{i}")))).collect();
        for l in flood.iter().chain([&light]) {
            l.observe(true, 1, 0, 0, None);
        }
        let t = aged_clock();
        flood.iter().for_each(|l| l.active_ms.store(t, Ordering::Relaxed));
        light.active_ms.store(t - 300, Ordering::Relaxed);
        flood[1].active_ms.store(t - 200, Ordering::Relaxed);
        let all: Vec<_> = flood.iter().cloned().chain([light.clone()]).collect();
        assert!(evict_one(all.iter(), Some(Duration::ZERO)));
        assert!(flood[1].evict.load(Ordering::Relaxed), "the flood's longest idle");
        assert!(!light.evict.load(Ordering::Relaxed));
    }

    #[test]
    fn a_peer_that_acknowledges_nothing_is_closed_after_the_stall() {
        let t = aged_clock();
        let l = Liveness::new("10.0.0.1".parse().unwrap());
        let stall = Some(Duration::from_millis(50));
        assert!(l.observe(true, 0, 1000, 0, stall).is_none());
        l.acked_ms.store(t - 100, Ordering::Relaxed);
        let c = l.observe(true, 0, 1000, 0, stall).expect("stalled");
        assert!(c.why.contains("1000 outstanding"), "{}", c.why);
        // Nothing outstanding: no stall, however long it is quiet.
        let l = Liveness::new("10.0.0.1".parse().unwrap());
        l.acked_ms.store(0, Ordering::Relaxed);
        assert!(l.observe(true, 0, 500, 500, stall).is_none());
    }
}
