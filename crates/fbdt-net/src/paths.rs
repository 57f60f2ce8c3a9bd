//! Path management on the client: re-dialling a path whose connection died (with back-off)
//! and probing a stalled one with fresh connections. When a path counts as stalled and
//! whether a probe takes over is decided by the core's clock-free
//! [`fbdt_core::path_policy`]; this module measures (TCP_INFO) and acts (dials).
//!
//! A server has no dialer: it never re-dials or probes (the client does both, and its new
//! connections arrive as JOINs).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration as StdDuration;

use crate::dial::{dial_tcp, secure_path};
use crate::secure::{self, PathStream};
use crate::{NetConfig, PathSpec};
use fbdt_core::path_policy::{Abilities, Decision, PathPolicy, TcpSignals};
use fbdt_core::Instant;

/// A probe sends a fresh SYN this often (issue 41: 300 ms before, then a path that came
/// back waited up to that long for its next SYN); the earlier attempts stay open beside it.
const PROBE_PERIOD: StdDuration = StdDuration::from_millis(50);
/// A probe's connect attempt is abandoned after this long: a SYN lost in the outage is
/// retransmitted by the kernel only after 1 s, and a path with RTTs up to this still
/// connects (at most `PROBE_CONNECT / PROBE_PERIOD` = 6 attempts open at once).
const PROBE_CONNECT: StdDuration = StdDuration::from_millis(300);
/// A session's first dial sends fresh SYNs beside its first one only after this: its
/// path's RTT is not known yet, and a path slower than this to answer would otherwise
/// open two connections (the first answers too). Shorter than the kernel's 1-s SYN
/// retransmission, which a lossy radio or a server whose listen queue is full under a
/// connection flood (docs/security.md) would make the client wait.
pub(crate) const FIRST_DIAL_HEAD_START: StdDuration = StdDuration::from_millis(250);
/// First re-dial after a connection died.
const FIRST_REDIAL: StdDuration = StdDuration::from_millis(10);
/// Re-dials after failed ones wait this, doubling up to `NetConfig::max_backoff` (1 s by
/// default): a path that comes back is re-joined within about a second.
const BACKOFF_BASE: StdDuration = StdDuration::from_millis(50);

type DialFuture = Pin<Box<dyn Future<Output = io::Result<PathStream>> + Send>>;

/// A dial no longer wanted may be mid-handshake, holding one of the session cache's TLS
/// tickets: it is let finish (bounded) and its connection retired
/// ([`PathStream::retire`]), so the tickets the server gives it are kept.
fn retire_dial(dial: Option<DialFuture>) {
    let Some(dial) = dial else {
        return;
    };
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        if let Ok(Ok(s)) = tokio::time::timeout(secure::RETIRE_READ, dial).await {
            s.retire();
        }
    });
}

#[derive(Default)]
struct Managed {
    /// A re-dial under way (after its back-off).
    dialing: Option<DialFuture>,
    /// Fresh connections being tried beside a stalled one.
    probe: Option<DialFuture>,
    /// A probe's connection kept aside while TCP may still recover the old one
    /// ([`Decision::Hold`]).
    held: Option<PathStream>,
    /// The held connection is to take over: handed out by the next [`PathManager::poll`].
    release: bool,
    policy: PathPolicy,
    /// Re-dials in a row that did not lead to data on the path (failed to connect, or
    /// connected and died before anything arrived).
    failures: u32,
}

/// A connection a dial or probe opened.
pub(crate) enum Opened {
    /// A re-dial connected: it carries the path (which has no connection).
    Redialled(usize, PathStream),
    /// A probe connected: ask [`PathManager::on_probe_connected`] whether it takes over.
    Probe(usize, PathStream),
}

pub(crate) struct PathManager {
    /// Client: where each path goes; `None` on a server.
    specs: Option<Vec<PathSpec>>,
    cfg: Arc<NetConfig>,
    label: String,
    paths: Vec<Managed>,
}

impl PathManager {
    pub fn new(specs: Option<Vec<PathSpec>>, cfg: Arc<NetConfig>, label: String) -> Self {
        PathManager {
            specs,
            cfg,
            label,
            paths: Vec::new(),
        }
    }

    fn spec(&self, i: usize) -> Option<PathSpec> {
        self.specs.as_ref().and_then(|s| s.get(i)).cloned()
    }

    fn slot(&mut self, i: usize) -> &mut Managed {
        if self.paths.len() <= i {
            self.paths.resize_with(i + 1, Managed::default);
        }
        &mut self.paths[i]
    }

    fn abilities(&self, i: usize, ending: bool) -> Abilities {
        Abilities {
            probing: self.paths.get(i).is_some_and(|m| m.probe.is_some()),
            can_probe: !ending && self.spec(i).is_some(),
            holding: self.paths.get(i).is_some_and(|m| m.held.is_some()),
        }
    }

    /// Fresh connections are being tried beside path `i`'s connection.
    pub fn probing(&self, i: usize) -> bool {
        self.paths.get(i).is_some_and(|m| m.probe.is_some())
    }

    /// Client: dials path `i` again after its back-off (10 ms, then 50 ms doubling up to
    /// `max_backoff` after failures). Not while the session is `ending`.
    pub fn redial(&mut self, i: usize, ending: bool) {
        let Some(spec) = self.spec(i) else {
            return;
        };
        if ending {
            return;
        }
        let cfg = self.cfg.clone();
        let slot = self.slot(i);
        let delay = if slot.failures == 0 {
            FIRST_REDIAL
        } else {
            (BACKOFF_BASE * 2u32.saturating_pow(slot.failures.min(10) - 1)).min(cfg.max_backoff)
        };
        slot.dialing = Some(Box::pin(async move {
            tokio::time::sleep(delay).await;
            let tcp = raced_dial_tcp(&spec, &cfg, i, PROBE_PERIOD).await?;
            secure_path(tcp, &spec, &cfg).await
        }));
    }

    /// Polls every re-dial, then every probe; a failed re-dial is retried after back-off.
    /// Returns the connections that opened, re-dials first, each in path order.
    pub fn poll(&mut self, cx: &mut Context<'_>, ending: bool) -> Vec<Opened> {
        let mut opened = Vec::new();
        for i in 0..self.paths.len() {
            let Some(Poll::Ready(r)) = self.paths[i].dialing.as_mut().map(|f| f.as_mut().poll(cx)) else {
                continue;
            };
            self.paths[i].dialing = None;
            match r {
                Ok(s) => {
                    // Connecting is not enough to reset the back-off: a server that closes
                    // right after accept would be re-dialled at once, forever. Data resets
                    // it (`on_data`).
                    self.paths[i].failures += 1;
                    opened.push(Opened::Redialled(i, s));
                }
                Err(e) => {
                    tracing::debug!(session = %self.label, path = i, "re-dial failed: {e}");
                    self.paths[i].failures += 1;
                    self.redial(i, ending);
                }
            }
        }
        for i in 0..self.paths.len() {
            let m = &mut self.paths[i];
            if std::mem::take(&mut m.release) {
                if let Some(s) = m.held.take() {
                    opened.push(Opened::Probe(i, s));
                }
            }
            let Some(Poll::Ready(r)) = self.paths[i].probe.as_mut().map(|f| f.as_mut().poll(cx)) else {
                continue;
            };
            self.paths[i].probe = None;
            if let Ok(s) = r {
                opened.push(Opened::Probe(i, s));
            }
        }
        opened
    }

    /// Bytes arrived on path `i`: its connection works, the re-dial back-off starts over.
    pub fn on_data(&mut self, i: usize) {
        if let Some(m) = self.paths.get_mut(i) {
            m.failures = 0;
        }
    }

    /// The core reported path `i` stalled (`Event::PathStalled`) while a connection
    /// carries it.
    pub fn on_core_stalled(&mut self, i: usize, now: Instant, ending: bool) {
        let can = self.abilities(i, ending);
        let d = self.slot(i).policy.on_core_stalled(now, can);
        self.act(i, d);
    }

    /// The server reported that path `i` stalls its data (`Event::PeerStalled`).
    pub fn on_peer_stalled(&mut self, i: usize, now: Instant, ending: bool) {
        let can = self.abilities(i, ending);
        let d = self.slot(i).policy.on_peer_stalled(now, can);
        self.act(i, d);
    }

    /// A TCP_INFO sample of path `i`'s connection.
    pub fn on_tcp_info(&mut self, i: usize, tcp: &TcpSignals, now: Instant, ending: bool) {
        let can = self.abilities(i, ending);
        let d = self.slot(i).policy.on_tcp_info(tcp, now, can);
        self.act(i, d);
    }

    /// A probe of path `i` connected with `s`; `old` is the current connection's TCP_INFO,
    /// if any. On [`Decision::Replace`] the connection comes back for the caller to install
    /// (a re-dial under way is dropped here); on [`Decision::Hold`] it is kept aside here
    /// until TCP_INFO decides; otherwise it was retired.
    pub fn on_probe_connected(
        &mut self,
        i: usize,
        s: PathStream,
        old: Option<&TcpSignals>,
        now: Instant,
        ending: bool,
    ) -> Option<PathStream> {
        let label = self.label.clone();
        let patient = self.cfg.patient_replacement;
        let slot = self.slot(i);
        match slot.policy.on_probe_connected(old, now, ending) {
            Decision::Replace => {
                retire_dial(slot.dialing.take());
                Some(s)
            }
            Decision::Hold if !patient => {
                retire_dial(slot.dialing.take());
                Some(s)
            }
            Decision::Hold => {
                tracing::debug!(session = %label, path = i, "probe connected; held while TCP may still recover");
                if let Some(old) = slot.held.replace(s) {
                    old.retire();
                }
                None
            }
            _ => {
                s.retire();
                None
            }
        }
    }

    /// Another connection carries path `i` now, or none does.
    pub fn on_connection_changed(&mut self, i: usize) {
        let slot = self.slot(i);
        slot.policy.on_connection_changed();
        // A held probe was about the old connection.
        slot.release = false;
        if let Some(s) = slot.held.take() {
            s.retire();
        }
    }

    fn act(&mut self, i: usize, d: Decision) {
        match d {
            Decision::Probe => self.start_probe(i),
            Decision::CancelProbe => {
                retire_dial(self.paths[i].probe.take());
                if let Some(s) = self.paths[i].held.take() {
                    s.retire();
                }
                tracing::debug!(session = %self.label, path = i, "path recovered on its own; probe dropped");
            }
            // The held connection goes to the driver through `poll`, which asks again.
            Decision::Replace => self.paths[i].release = self.paths[i].held.is_some(),
            Decision::Keep | Decision::DiscardProbe | Decision::Hold => {}
        }
    }

    /// Keeps sending fresh SYNs (one every `PROBE_PERIOD`, each attempt bounded by
    /// `PROBE_CONNECT`) until one connects: a new connection is not held back by the old
    /// one's RTO back-off. The TLS handshake after the first SYN-ACK has the handshake
    /// timeout: cutting it short would waste the TLS ticket it took.
    fn start_probe(&mut self, i: usize) {
        let Some(spec) = self.spec(i) else {
            return;
        };
        let cfg = self.cfg.clone();
        tracing::debug!(session = %self.label, path = i, "path looks stalled: probing with fresh connections");
        self.slot(i).probe = Some(Box::pin(async move {
            loop {
                let tcp = first_syn_ack(&spec, &cfg, i).await;
                let tls = secure::connect(tcp, &spec, &cfg.security);
                match tokio::time::timeout(cfg.handshake_timeout, tls).await {
                    Ok(Ok(s)) => return Ok(s),
                    Ok(Err(e)) => tracing::trace!(path = i, "probe: {e}"),
                    Err(_) => tracing::trace!(path = i, "probe: TLS handshake timed out"),
                }
            }
        }));
    }
}

type ConnectAttempt = Pin<Box<dyn Future<Output = Result<io::Result<tokio::net::TcpStream>, tokio::time::error::Elapsed>> + Send>>;

/// The first of the probe's TCP connects to succeed: a SYN now and every `PROBE_PERIOD`
/// after (a failing dial — no route, refused — is retried at that pace too), each
/// attempt open for `PROBE_CONNECT`.
async fn first_syn_ack(spec: &PathSpec, cfg: &NetConfig, i: usize) -> tokio::net::TcpStream {
    let mut attempts: Vec<ConnectAttempt> = Vec::new();
    let mut tick = tokio::time::interval(PROBE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let (spec, cfg) = (spec.clone(), cfg.clone());
                attempts.push(Box::pin(async move {
                    tokio::time::timeout(PROBE_CONNECT, dial_tcp(&spec, &cfg, false)).await
                }));
            }
            (done, k) = first_done(&mut attempts), if !attempts.is_empty() => {
                drop(attempts.swap_remove(k));
                match done {
                    Ok(Ok(tcp)) => return tcp,
                    Ok(Err(e)) => tracing::trace!(path = i, "probe: {e}"),
                    Err(_) => tracing::trace!(path = i, "probe: no SYN-ACK in time"),
                }
            }
        }
    }
}

/// A path's TCP connect: one attempt that waits as long as [`dial_tcp`] does (a path of
/// any RTT connects), raced after `head_start` by the probe's fresh SYNs
/// ([`first_syn_ack`]). Re-dials start them a `PROBE_PERIOD` after: a connection
/// dies with its path more often than not, so the re-dial's first SYN is often lost in
/// the outage, and the kernel sends it again only after a second (issue 41's testbed
/// campaign: 257–817 ms from a reset path's return to its first byte); the fresh SYNs
/// reach the path within `PROBE_PERIOD` of its return. The first attempt's failure
/// (refused, no route, its timeout) is the dial's: the re-dial then backs off as before.
/// A session's first dials start them [`FIRST_DIAL_HEAD_START`] after.
pub(crate) async fn raced_dial_tcp(
    spec: &PathSpec,
    cfg: &NetConfig,
    i: usize,
    head_start: StdDuration,
) -> io::Result<tokio::net::TcpStream> {
    let patient = dial_tcp(spec, cfg, false);
    let fresh = async {
        // The patient attempt's SYN goes first.
        tokio::time::sleep(head_start).await;
        first_syn_ack(spec, cfg, i).await
    };
    tokio::select! {
        r = patient => r,
        tcp = fresh => Ok(tcp),
    }
}

/// The first of `attempts` to finish, and its place.
fn first_done(attempts: &mut [ConnectAttempt]) -> impl Future<Output = (<ConnectAttempt as Future>::Output, usize)> + '_ {
    std::future::poll_fn(move |cx| {
        for (k, a) in attempts.iter_mut().enumerate() {
            if let Poll::Ready(out) = a.as_mut().poll(cx) {
                return Poll::Ready((out, k));
            }
        }
        Poll::Pending
    })
}

/// A loopback listener whose accept queue is full (backlog 0 and one connection waiting,
/// the second returned): Linux drops further SYNs without a word.
#[cfg(test)]
pub(crate) fn full_listen_queue() -> (std::net::TcpListener, std::net::TcpStream) {
    use socket2::{Domain, Socket, Type};
    let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    listener.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
    listener.listen(0).unwrap();
    let listener: std::net::TcpListener = listener.into();
    let filler = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    (listener, filler)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A re-dial whose first SYN is lost does not wait for the kernel to send it again: a
    /// fresh SYN connects once the far end takes SYNs again. A listener whose accept queue
    /// is full drops SYNs without a word (Linux), as a path in an outage does.
    #[tokio::test]
    async fn a_redial_whose_first_syn_is_lost_connects_with_a_fresh_one() {
        let head_start = PROBE_PERIOD;
        let (listener, filler) = full_listen_queue();
        let addr = listener.local_addr().unwrap();
        let spec: PathSpec = addr.to_string().parse().unwrap();
        let cfg = NetConfig::default();
        // The queue opens again a while after the re-dial's first SYN was dropped.
        let reopen = std::thread::spawn(move || {
            std::thread::sleep(head_start + PROBE_PERIOD);
            let (first, _) = listener.accept().unwrap();
            (listener, first)
        });
        let tcp = tokio::time::timeout(StdDuration::from_secs(60), raced_dial_tcp(&spec, &cfg, 0, head_start))
            .await
            .expect("the re-dial connected")
            .expect("the re-dial connected");
        let (_listener, first) = reopen.join().unwrap();
        assert_eq!(first.peer_addr().unwrap(), filler.local_addr().unwrap());
        assert_eq!(tcp.peer_addr().unwrap(), addr);
        // Its SYN was never sent twice: a fresh attempt's, not the first attempt's resent.
        let info = crate::sockopt::tcp_info(&tcp).unwrap();
        assert_eq!(info.total_retrans, 0, "the re-dial waited for a SYN retransmission");
    }

    /// A probe keeps dialling at its own pace until the far end listens: the first dials
    /// are refused (nothing listens on the port yet), a later one connects.
    #[tokio::test]
    async fn a_probe_connects_once_the_far_end_listens() {
        // Take a free port and let it go: dials to it are refused until it listens again.
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let spec: PathSpec = addr.to_string().parse().unwrap();
        let cfg = NetConfig::default();
        let listener = async {
            tokio::time::sleep(PROBE_PERIOD * 3).await;
            let l = tokio::net::TcpListener::bind(addr).await.unwrap();
            l.accept().await.unwrap()
        };
        let (tcp, (_, from)) = tokio::time::timeout(StdDuration::from_secs(60), async {
            tokio::join!(first_syn_ack(&spec, &cfg, 0), listener)
        })
        .await
        .expect("the probe connected");
        assert_eq!(tcp.peer_addr().unwrap(), addr);
        assert_eq!(tcp.local_addr().unwrap(), from);
    }
}
