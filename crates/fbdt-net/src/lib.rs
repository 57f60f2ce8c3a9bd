//! FBDT over real TCP connections: a thin tokio pump around [`fbdt_core::Connection`].
//!
//! - [`connect`] opens one TCP connection per [`PathSpec`] (path i = the i-th spec), each
//!   bound to a local address or interface, sends HELLO on path 0 and JOINs on the others,
//!   and returns a [`Session`] once the handshake completed.
//! - [`listen`] accepts on one or more addresses, routes each new connection by its first
//!   frame (HELLO → new session, JOIN → the session with that token) and yields
//!   [`Session`]s from [`Listener::accept`].
//! - A [`Session`] is `AsyncRead + AsyncWrite`; `shutdown` ends our direction of the stream
//!   and resolves once the peer acknowledged every byte.
//!
//! One task per session owns the `Connection` (`driver`); it follows the core's driving
//! order (after every input: transmit on every path, re-arm the one timer, drain events)
//! and makes no protocol decisions. Re-dials and stall probes live in `paths`, their policy
//! in `fbdt_core::path_policy`. Modules depend one way: `client`/`server` → `driver` →
//! `paths` → `dial`, and `driver` → `session` (the application's handle). Limits are
//! listed in docs/runtime.md.

mod admission;
mod alarm;
mod app;
mod client;
pub mod congestion;
mod dial;
mod driver;
mod lowat;
mod memory;
mod paths;
pub mod sample;
pub mod secure;
mod server;
mod session;
pub mod sockopt;

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

pub use admission::{connection_cap, FD_RESERVE};
pub use client::connect;
pub use congestion::{Choice, CongestionError, CongestionPlan, CoupledMode, PathCcReport};
pub use dial::{connect_path, dial_tcp};
pub use memory::keep_freed_memory;
pub use secure::{ClientCert, FingerprintError, PathStream, Security, ServerIdentity, TlsClient, TlsServer, Trust};
pub use server::{listen, Listener};
pub use session::{DelayMarks, PathReport, Session, SessionStats, StatsHandle, MAX_HELD_MARKS};

/// Where one path goes: the server address, optionally from a local address or interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathSpec {
    pub local: Option<LocalBind>,
    pub remote: SocketAddr,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalBind {
    /// Bind the socket to this source address (port chosen by the kernel).
    Addr(IpAddr),
    /// SO_BINDTODEVICE to this interface (needs CAP_NET_RAW on older kernels).
    Iface(String),
}

impl FromStr for PathSpec {
    type Err = String;
    /// `SERVER_IP:PORT`, `LOCAL_IP=SERVER_IP:PORT` or `%IFACE=SERVER_IP:PORT`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (local, remote) = match s.split_once('=') {
            None => (None, s),
            Some((l, r)) => {
                let local = if let Some(iface) = l.strip_prefix('%') {
                    if iface.is_empty() || iface.len() >= 16 {
                        return Err(format!("bad interface name in path {s:?}"));
                    }
                    LocalBind::Iface(iface.to_string())
                } else {
                    LocalBind::Addr(
                        l.parse()
                            .map_err(|e| format!("bad local address {l:?} in path {s:?}: {e}"))?,
                    )
                };
                (Some(local), r)
            }
        };
        let remote = remote
            .parse()
            .map_err(|e| format!("bad server address {remote:?} in path {s:?}: {e} (want IP:PORT)"))?;
        Ok(PathSpec { local, remote })
    }
}

/// Runtime configuration: the core's [`fbdt_core::Config`] plus socket and server limits.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// The protocol core's configuration. Its `seed` is replaced by a random one per session
    /// (it seeds the session keys).
    pub core: fbdt_core::Config,
    /// TCP_CONGESTION per path (see [`CongestionPlan`]); empty = the system default.
    pub congestion: CongestionPlan,
    /// Lower each connection's RTO floor (TCP_RTO_MIN_US, Linux ≥ 6.15) to about twice its
    /// RTT plus a delayed ACK ([`congestion::rto_floor_us`]) instead of Linux's 200 ms, so a
    /// lossy short path recovers from a timeout in tens of ms, and a link back from an
    /// outage is used again as soon (the sender of a download cannot dial a fresh
    /// connection; its old one waits for its timer: issue 41, docs/faults.md round 10).
    /// On by default; kernels without the option keep theirs.
    pub rto_floor: bool,
    /// Couple the paths' congestion control (RFC 6356 LIA, `fbdt_core::coupling`): each
    /// path's socket gets the pacing ceiling (SO_MAX_PACING_RATE) of its coupled window over
    /// its RTT, so the paths as a whole take about one TCP flow's share at a bottleneck they
    /// share. It acts where this end sends. [`CoupledMode::WhenShared`] couples only the
    /// paths found behind one queue (`fbdt_core::shared_bottleneck`). Off by default:
    /// always coupled, disjoint paths lose throughput (14–47 % on tc-normal,
    /// docs/congestion.md round 7).
    pub coupled: CoupledMode,
    /// Client: a fresh connection replaces a stalled path's connection only once TCP's own
    /// timeout retransmission went unanswered (or after TCP's long silence), not while TCP
    /// may still recover it (`fbdt_core::path_policy`, `Decision::Hold`). `false`: the
    /// earlier rule, replace as soon as a probe connects and no ACK came since the stall
    /// (kept to measure the difference).
    pub patient_replacement: bool,
    /// TCP_NOTSENT_LOWAT for every path's socket.
    pub notsent_lowat: u32,
    /// Bytes of frames the driver gathers for one `writev` on a path (at least one frame
    /// is always gathered). Each `writev` costs a syscall and the kernel's transmit in the
    /// caller's context, so fewer, larger ones cost less CPU per byte; frames wait in the
    /// batch when the socket refuses them (at most this many bytes more per path than
    /// `notsent_lowat` lets the kernel queue).
    pub write_batch: usize,
    /// TCP_RTO_MAX_MS for every path's socket (kernels without it ignore this): bounds how
    /// long a connection stays silent after its link returns. `None` = the kernel's 120 s.
    pub rto_max_ms: Option<u32>,
    /// How often TCP_INFO is read into the core.
    pub stats_interval: Duration,
    /// Server: most sessions at once; further HELLOs are refused (connection closed).
    pub max_sessions: usize,
    /// Server: most accepted connections that have not yet sent a complete HELLO/JOIN (the
    /// pending pool). A new connection past it evicts the oldest pending one.
    pub max_pending: usize,
    /// Server: time a new connection has for its TLS handshake and first frame. Client:
    /// time a connection has for its TLS handshake and token proof (path 0, re-dials,
    /// probes), and path 0 for the server's HELLO.
    pub handshake_timeout: Duration,
    /// Server: [`NetConfig::handshake_timeout`] for connections that arrive while the
    /// pending pool is more than half full.
    pub pressured_handshake_timeout: Duration,
    /// Server: most connections held at once (pending and paths of sessions); capped
    /// further by the process's file-descriptor limit (see [`connection_cap`]).
    pub max_connections: usize,
    /// Server: most connections from one source address that have not sent their first
    /// frame.
    pub max_pending_per_source: usize,
    /// Server: most sessions opened from one source address.
    pub max_sessions_per_source: usize,
    /// Server: most pending connections from one source prefix (/24 IPv4, /64 IPv6).
    pub max_pending_per_prefix: usize,
    /// Server: most sessions from one source prefix (/24 IPv4, /64 IPv6).
    pub max_sessions_per_prefix: usize,
    /// Server: when the session table is full, a session whose client sent data may be
    /// evicted for a new one once neither direction progressed for this long (sessions
    /// that never became useful go first, at any age). `None`: only those are evicted.
    pub evict_idle_after: Option<Duration>,
    /// Server: a session whose peer acknowledged none of its outstanding bytes for this
    /// long (a peer that does not read) is closed, and its buffers freed. `None`: never.
    pub send_stall_timeout: Option<Duration>,
    /// Server: a session must become useful (its client's first data, or a JOIN) this soon
    /// after its HELLO, or it is closed.
    pub first_data_timeout: Duration,
    /// Server: TCP keepalive idle time and TCP_USER_TIMEOUT on accepted connections, so a
    /// vanished client's connections (and then its session) end.
    pub dead_peer_timeout: Duration,
    /// Client: time to open one TCP connection.
    pub connect_timeout: Duration,
    /// Client: longest wait between re-dials of a failed path.
    pub max_backoff: Duration,
    /// Time a session waits with no live path (for a re-JOIN) before it ends with an error.
    /// A path is live once the peer answered its JOIN: connections a restarted server
    /// refuses the moment they JOIN do not hold the session open.
    pub idle_timeout: Duration,
    /// TLS 1.3 on every path ([`Security::Client`] / [`Security::Server`]) or plaintext.
    /// The default is plaintext because TLS needs keys and trust the caller must choose;
    /// the `fbdt` binary runs TLS unless told `--plaintext`.
    pub security: Security,
    /// Record the in-order delivery delay probe's marks (`fbdt_core::delay_probe`) for
    /// [`StatsHandle::take_delay_marks`]. Off by default: they are held until taken.
    pub delay_marks: bool,
    /// Wake a path's reader only once the frame it is reading can complete (SO_RCVLOWAT,
    /// see the `lowat` module), instead of at every packet. Plaintext paths only for now.
    pub recv_lowat: bool,
    /// The longest a reader waits for a low-water mark that is not met before it reads
    /// what is there.
    pub recv_lowat_fallback: Duration,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            core: fbdt_core::Config::default(),
            congestion: CongestionPlan::default(),
            rto_floor: true,
            coupled: CoupledMode::Off,
            patient_replacement: true,
            // 128 KiB: a few maximal frames, so a path never has more than ~1 ms of unsent
            // data at 1 Gbit/s queued where the scheduler can no longer move it.
            notsent_lowat: 128 * 1024,
            write_batch: 64 * 1024,
            // The kernel's minimum: a recovered link is used again within ~1 s + 1 RTT.
            rto_max_ms: Some(1000),
            stats_interval: Duration::from_millis(10),
            // An idle session costs the server at most ~30 KiB with TLS, ~16 KiB plaintext
            // (measured, `idle_session_memory` in tests/exhaustion.rs): 1024 idle ones are
            // ~30 MiB. A busy one costs its buffers (docs/security.md, "Limits").
            max_sessions: 1024,
            max_pending: 512,
            handshake_timeout: Duration::from_secs(5),
            // A TLS handshake and a first frame take two round trips: 1 s covers 300 ms RTTs.
            pressured_handshake_timeout: Duration::from_secs(1),
            max_connections: 8192,
            max_pending_per_source: 16,
            max_sessions_per_source: 16,
            max_pending_per_prefix: 64,
            max_sessions_per_prefix: 64,
            evict_idle_after: Some(Duration::from_secs(2)),
            send_stall_timeout: Some(Duration::from_secs(20)),
            first_data_timeout: Duration::from_secs(10),
            dead_peer_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(3),
            max_backoff: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(30),
            security: Security::Plaintext,
            delay_marks: false,
            recv_lowat: true,
            // Insurance only: a mark is what the current frame lacks, which a live peer
            // sends. At 2 ms even a slow path wakes its reader at least every 2 ms.
            recv_lowat_fallback: Duration::from_millis(2),
        }
    }
}

/// A configuration [`connect`] or [`listen`] refuses before any socket opens.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("at most {0} paths")]
    TooManyPaths(usize),
    #[error("no listen address")]
    NoListenAddress,
    #[error("a client's TLS settings given to a server")]
    ClientTlsOnServer,
    #[error(transparent)]
    Congestion(#[from] CongestionError),
    #[error(transparent)]
    Core(#[from] fbdt_core::ConfigError),
}

/// Errors a session can end with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("path {path} ({remote}): {source}")]
    Dial {
        path: usize,
        remote: SocketAddr,
        source: std::io::Error,
    },
    #[error("no paths given")]
    NoPaths,
    #[error("configuration: {0}")]
    Config(#[from] ConfigError),
    #[error("protocol: {0}")]
    Protocol(#[from] fbdt_core::ProtocolError),
    #[error("session closed: {0}")]
    Closed(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_spec_forms() {
        let p: PathSpec = "10.0.0.1:5000".parse().unwrap();
        assert_eq!(p.local, None);
        let p: PathSpec = "127.0.0.2=127.0.0.1:5000".parse().unwrap();
        assert_eq!(p.local, Some(LocalBind::Addr("127.0.0.2".parse().unwrap())));
        let p: PathSpec = "%wlan0=10.0.0.1:5000".parse().unwrap();
        assert_eq!(p.local, Some(LocalBind::Iface("wlan0".into())));
        assert!("nonsense".parse::<PathSpec>().is_err());
        assert!("1.2.3.4=5".parse::<PathSpec>().is_err());
    }
}
