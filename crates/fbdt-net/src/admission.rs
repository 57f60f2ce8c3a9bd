//! Server admission control: how many connections the server holds in all, how many
//! pending connections and sessions one source address and one source prefix (/24 IPv4,
//! /64 IPv6) may hold, and whom to let go when the server is full. Each admitted
//! connection or session carries a ticket whose drop gives its place back, so no path
//! through the server can leak a slot. Limits are listed in docs/security.md ("Limits").
//!
//! Full is not the end of admission:
//! - the pending pool (connections before their first frame) evicts, for a new connection,
//!   the oldest member of the source prefix holding the most pending connections: a flood's
//!   connections sit there in numbers, a legitimate one finishes its handshake in a round
//!   trip or two, so a re-JOIN of a live session (which looks like any other connection
//!   until its first frame) is neither refused because of the pool nor pushed out by a
//!   flood from a few prefixes. Past half full, new connections get the shorter
//!   `NetConfig::pressured_handshake_timeout`;
//! - a full session table evicts only from the newcomer's own prefix or from one holding
//!   at least two sessions more (so a flood cannot evict a light user, nor churn its own
//!   sessions young across its prefixes): from the heaviest such prefix, a session that
//!   never became useful (oldest first), then the useful session idle longest (idle at
//!   least `NetConfig::evict_idle_after`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// The pending pool: connections that have not sent their first frame, oldest first, and
/// the same ids grouped by source prefix.
#[derive(Default)]
struct Pool {
    next: u64,
    members: BTreeMap<u64, (IpAddr, CancellationToken)>,
    by_prefix: HashMap<IpAddr, BTreeSet<u64>>,
}

impl Pool {
    fn insert(&mut self, prefix: IpAddr, evicted: CancellationToken) -> u64 {
        let id = self.next;
        self.next += 1;
        self.members.insert(id, (prefix, evicted));
        self.by_prefix.entry(prefix).or_default().insert(id);
        id
    }

    fn remove(&mut self, id: u64) -> Option<CancellationToken> {
        let (prefix, token) = self.members.remove(&id)?;
        if let Some(ids) = self.by_prefix.get_mut(&prefix) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_prefix.remove(&prefix);
            }
        }
        Some(token)
    }

    /// The oldest member of the prefix holding the most members (ties: the prefix whose
    /// oldest member is older).
    fn eviction_candidate(&self) -> Option<u64> {
        self.by_prefix
            .values()
            .filter_map(|ids| Some((ids.len(), std::cmp::Reverse(*ids.first()?))))
            .max()
            .map(|(_, std::cmp::Reverse(id))| id)
    }
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
    /// pool makes room by evicting the oldest member of its heaviest prefix.
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
            let Some(token) = pool.eviction_candidate().and_then(|id| pool.remove(id)) else {
                break;
            };
            token.cancel();
            self.evicted_pending.fetch_add(1, Ordering::Relaxed);
        }
        let id = pool.insert(prefix_of(ip), evicted.clone());
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
            p.remove(self.id);
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

/// How [`evict_one`] ranks candidates: (prefix weight, never useful, ms unused); the
/// largest goes.
type EvictionRank = (usize, bool, u64);

/// Picks the session to evict for a new one from `newcomer` among `sessions`. Only the
/// newcomer's own source prefix, or a prefix holding at least two sessions more than it,
/// gives way: taking from a prefix one session heavier would only move the imbalance, and
/// would let a flood spread over many prefixes evict its own sessions round after round,
/// keeping them young while a light user's idle session ages into the victim. From the
/// heaviest such prefix: the oldest session that never became useful, else the useful one
/// idle longest, if idle at least `min_idle` (`None`: useful sessions are never evicted).
/// Marks it and returns true, or false when nobody qualifies.
pub(crate) fn evict_one<'a>(
    sessions: impl Iterator<Item = &'a Arc<Liveness>> + Clone,
    newcomer: IpAddr,
    min_idle: Option<Duration>,
) -> bool {
    let t = now_ms();
    let live = |l: &&Arc<Liveness>| !l.evict.load(Ordering::Relaxed);
    let mut held: HashMap<IpAddr, usize> = HashMap::new();
    for l in sessions.clone().filter(live) {
        *held.entry(prefix_of(l.source)).or_default() += 1;
    }
    let own = prefix_of(newcomer);
    let own_held = held.get(&own).copied().unwrap_or(0);
    let mut victim: Option<(EvictionRank, &Arc<Liveness>)> = None;
    for l in sessions.filter(live) {
        let prefix = prefix_of(l.source);
        let w = held.get(&prefix).copied().unwrap_or(0);
        if prefix != own && w < own_held + 2 {
            continue;
        }
        let key = if l.useful.load(Ordering::Relaxed) {
            let quiet = t.saturating_sub(l.active_ms.load(Ordering::Relaxed));
            if min_idle.is_none_or(|m| u128::from(quiet) < m.as_millis()) {
                continue;
            }
            (w, false, quiet)
        } else {
            (w, true, t.saturating_sub(l.started_ms))
        };
        if victim.is_none_or(|(k, _)| key > k) {
            victim = Some((key, l));
        }
    }
    victim.is_some_and(|(_, v)| v.mark_evicted())
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

    /// A pending pool of four places, no per-source caps in the way.
    fn pool_of_four() -> (NetConfig, Arc<Admission>) {
        let cfg = NetConfig {
            max_pending: 4,
            max_pending_per_source: 100,
            max_pending_per_prefix: 100,
            ..NetConfig::default()
        };
        let adm = Admission::new(&cfg);
        (cfg, adm)
    }

    #[test]
    fn a_full_pool_evicts_its_oldest_and_shortens_deadlines() {
        let (cfg, adm) = pool_of_four();
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
    fn a_full_pool_evicts_from_its_heaviest_prefix() {
        let (_, adm) = pool_of_four();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // The oldest member is a light source's (a re-JOIN, say); a flood fills the rest.
        let rejoin = adm.connection(ip("192.0.2.7")).unwrap();
        let flood: Vec<_> = (1..=3).map(|i| adm.connection(ip(&format!("198.51.100.{i}"))).unwrap()).collect();
        let more: Vec<_> = (0..5).map(|_| adm.connection(ip("198.51.100.9")).unwrap()).collect();
        assert!(!rejoin.evicted.is_cancelled(), "the light source's connection stays");
        assert!(flood.iter().all(|p| p.evicted.is_cancelled()), "the flood's oldest went first");
        assert_eq!(more.iter().filter(|p| p.evicted.is_cancelled()).count(), 2);
        assert!(more[..2].iter().all(|p| p.evicted.is_cancelled()), "oldest first within the prefix");
        assert_eq!(adm.pending(), 4);
        drop((flood, more));
        assert_eq!(adm.pending(), 1);
    }

    /// Sessions of useful clients: `idle_ms` since their last progress on the shared clock
    /// (at most since its origin).
    fn useful(addrs: &[&str], idle_ms: u64) -> Vec<Arc<Liveness>> {
        let t = aged_clock();
        addrs
            .iter()
            .map(|a| {
                let l = Liveness::new(a.parse().unwrap());
                l.observe(true, 1, 0, 0, None);
                l.active_ms.store(t.saturating_sub(idle_ms), Ordering::Relaxed);
                l
            })
            .collect()
    }

    fn evicted(l: &[Arc<Liveness>]) -> Vec<bool> {
        l.iter().map(|l| l.evict.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn eviction_takes_the_useless_first_then_the_longest_idle() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let mut all = useful(&["10.0.0.1", "10.0.0.2"], 0);
        // 10.0.0.2 was active long ago, 10.0.0.1 just now.
        all[1].active_ms.store(0, Ordering::Relaxed);
        all.push(Liveness::new(ip("10.0.0.3")));
        let min = Some(Duration::from_millis(1));
        let newcomer = ip("10.0.0.9");
        assert!(evict_one(all.iter(), newcomer, min));
        assert_eq!(evicted(&all), [false, false, true], "never useful goes first");
        assert!(all[2].observe(false, 0, 0, 0, None).is_some_and(|c| c.code == 7));
        assert!(evict_one(all.iter(), newcomer, min));
        assert_eq!(evicted(&all), [false, true, true], "then the longest idle");
        assert!(
            !evict_one(all.iter(), newcomer, Some(Duration::from_secs(3600))),
            "10.0.0.1 is not idle long enough"
        );
        assert!(
            !evict_one(all.iter(), newcomer, None),
            "useful sessions are kept without a minimum"
        );
    }

    #[test]
    fn eviction_takes_from_the_prefix_holding_most() {
        // A light user idle for long, a flood's sessions idle for less.
        let mut all = useful(&["198.51.100.1", "198.51.100.2", "198.51.100.3"], 100);
        all[1].active_ms.fetch_sub(100, Ordering::Relaxed);
        all.extend(useful(&["192.0.2.1"], 300));
        assert!(evict_one(all.iter(), "203.0.113.1".parse().unwrap(), Some(Duration::ZERO)));
        assert_eq!(evicted(&all), [false, true, false, false], "the flood's longest idle");
    }

    #[test]
    fn a_flood_cannot_evict_a_light_user() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Two flood prefixes of three idle sessions each, and a light user idle longest.
        let mut all = useful(&["198.51.100.1", "198.51.100.2", "198.51.100.3"], 500);
        all.extend(useful(&["203.0.113.1", "203.0.113.2", "203.0.113.3"], 500));
        all.extend(useful(&["192.0.2.1"], 5000));
        let min = Some(Duration::ZERO);
        // The flood's next HELLO takes from its own prefix, not from its sibling prefix
        // (one session heavier at most) nor from the light user.
        assert!(evict_one(all.iter(), ip("198.51.100.4"), min));
        assert_eq!(evicted(&all)[..3].iter().filter(|e| **e).count(), 1);
        assert_eq!(evicted(&all)[3..], [false; 4]);
        // A newcomer from a fresh prefix takes from the heaviest, now the second flood prefix.
        assert!(evict_one(all.iter(), ip("233.252.0.1"), min));
        assert_eq!(evicted(&all)[3..6].iter().filter(|e| **e).count(), 1);
        assert!(!all[6].evict.load(Ordering::Relaxed));
        // Everyone left holds two or one: a fresh newcomer finds nobody heavier by two.
        let singles = useful(&["192.0.2.1", "198.51.100.1", "203.0.113.1"], 5000);
        assert!(!evict_one(singles.iter(), ip("233.252.0.1"), min));
        // But the light user's own prefix may give way to its newcomer.
        assert!(evict_one(singles.iter(), ip("192.0.2.99"), min));
        assert_eq!(evicted(&singles), [true, false, false]);
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
