//! Server admission control: how many connections the server holds in all, and how many
//! pending connections and sessions one source address may hold. Each admitted connection
//! or session carries a ticket whose drop gives its place back, so no path through the
//! server can leak a slot. Limits are listed in docs/security.md ("Limits").

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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

#[derive(Default)]
struct PerSource {
    pending: usize,
    sessions: usize,
}

/// Counts shared by every accept loop of one listener.
pub(crate) struct Admission {
    connections: AtomicUsize,
    cap: usize,
    max_pending_per_source: usize,
    max_sessions_per_source: usize,
    sources: Mutex<HashMap<IpAddr, PerSource>>,
}

/// Why a connection or session was not admitted (sent to the peer in a CLOSE).
pub(crate) type Refusal = String;

impl Admission {
    pub fn new(cfg: &NetConfig) -> Arc<Self> {
        Arc::new(Admission {
            connections: AtomicUsize::new(0),
            cap: connection_cap(cfg),
            max_pending_per_source: cfg.max_pending_per_source,
            max_sessions_per_source: cfg.max_sessions_per_source,
            sources: Mutex::new(HashMap::new()),
        })
    }

    /// A new TCP connection from `ip`: counted against the global cap and as pending for
    /// its source until it sent its first frame.
    pub fn connection(self: &Arc<Self>, ip: IpAddr) -> Result<(ConnTicket, PendingTicket), Refusal> {
        if self.connections.fetch_add(1, Ordering::SeqCst) >= self.cap {
            self.connections.fetch_sub(1, Ordering::SeqCst);
            return Err(format!("server at its connection limit ({})", self.cap));
        }
        let conn = ConnTicket(self.clone());
        let pending = self.charge(
            ip,
            |s| &mut s.pending,
            self.max_pending_per_source,
            "pending connections",
        )?;
        Ok((conn, PendingTicket(pending)))
    }

    /// A HELLO from `ip` opens a session: counted for its source while the session lives.
    pub fn session(self: &Arc<Self>, ip: IpAddr) -> Result<SessionTicket, Refusal> {
        self.charge(ip, |s| &mut s.sessions, self.max_sessions_per_source, "sessions")
            .map(SessionTicket)
    }

    fn charge(
        self: &Arc<Self>,
        ip: IpAddr,
        field: fn(&mut PerSource) -> &mut usize,
        max: usize,
        what: &'static str,
    ) -> Result<SourceCharge, Refusal> {
        let mut m = self
            .sources
            .lock()
            .map_err(|_| Refusal::from("admission state poisoned"))?;
        let n = field(m.entry(ip).or_default());
        if *n >= max {
            return Err(format!("{ip} already holds {max} {what}"));
        }
        *n += 1;
        Ok(SourceCharge {
            adm: self.clone(),
            ip,
            field,
        })
    }

    /// Connections held now.
    #[cfg(test)]
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// One of the server's connections; dropped with it.
pub(crate) struct ConnTicket(Arc<Admission>);

impl Drop for ConnTicket {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One unit of a per-source count.
pub(crate) struct SourceCharge {
    adm: Arc<Admission>,
    ip: IpAddr,
    field: fn(&mut PerSource) -> &mut usize,
}

impl Drop for SourceCharge {
    fn drop(&mut self) {
        if let Ok(mut m) = self.adm.sources.lock() {
            if let Some(s) = m.get_mut(&self.ip) {
                let n = (self.field)(s);
                *n = n.saturating_sub(1);
                if s.pending == 0 && s.sessions == 0 {
                    m.remove(&self.ip);
                }
            }
        }
    }
}

/// A connection that has not sent its first frame yet.
pub(crate) struct PendingTicket(#[allow(dead_code)] SourceCharge);
/// A session, for its source address.
pub(crate) struct SessionTicket(#[allow(dead_code)] SourceCharge);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_give_their_places_back() {
        let cfg = NetConfig {
            max_connections: 3,
            max_pending_per_source: 2,
            max_sessions_per_source: 1,
            ..NetConfig::default()
        };
        let adm = Admission::new(&cfg);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t1 = adm.connection(a).unwrap();
        let t2 = adm.connection(a).unwrap();
        assert!(adm.connection(a).is_err(), "third pending connection from one source");
        let t3 = adm.connection(b).unwrap();
        assert!(adm.connection(b).is_err(), "global cap");
        assert_eq!(adm.connections(), 3);
        let s = adm.session(a).unwrap();
        assert!(adm.session(a).is_err());
        drop((t1, t2, t3, s));
        assert_eq!(adm.connections(), 0);
        assert!(adm.sources.lock().unwrap().is_empty());
        assert!(adm.session(a).is_ok());
    }
}
