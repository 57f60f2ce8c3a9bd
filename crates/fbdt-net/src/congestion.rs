//! Congestion control per path: which controller each path's TCP connection runs
//! ([`CongestionPlan`]: one for all, one per path, or `auto`), the per-socket RTO floor, and
//! what was in force (time shares, retransmissions, RTOs) for the results.
//!
//! Sockets are opened before the path they carry is known (a server learns it from the
//! first frame), so they start with the plan's all-paths controller; the driver's periodic
//! TCP_INFO pass ([`CcState::on_tick`]) then puts each connection on its path's controller.
//! TCP_CONGESTION works on established sockets, which is also how `auto` switches.
//!
//! Coupled mode (`NetConfig::coupled`) adds RFC 6356 LIA across the paths: the same tick
//! feeds each path's sample to `fbdt_core::coupling::LiaPacer` and sets the coupled window
//! over the RTT as the socket's `SO_MAX_PACING_RATE`. Paths on BBR are not coupled (BBR
//! paces itself by its own model; Linux couples only loss-based windows either).
//! [`CoupledMode::WhenShared`] couples a path only while `fbdt_core::shared_bottleneck`
//! finds it behind one queue with another path.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::AsRawFd;

use fbdt_core::cc_policy::{AutoCc, CcClass, CcSample};
use fbdt_core::coupling::{CoupledSample, LiaPacer};
use fbdt_core::shared_bottleneck::SharedBottleneck;
use fbdt_core::{Duration, Instant};

use crate::sockopt::{self, TcpInfoSample};

/// The controller `auto` moves a path to when its losses are not congestion.
pub const LOSS_TOLERANT: &str = "bbr";

/// When the paths' congestion control is coupled (RFC 6356 LIA as pacing ceilings).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CoupledMode {
    /// Each path's TCP on its own.
    #[default]
    Off,
    /// Every path not on BBR, all the time.
    Always,
    /// Only paths that share a bottleneck with another path, while they do
    /// (`fbdt_core::shared_bottleneck`).
    WhenShared,
}

impl std::str::FromStr for CoupledMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(CoupledMode::Off),
            "always" | "on" => Ok(CoupledMode::Always),
            "shared" => Ok(CoupledMode::WhenShared),
            _ => Err(format!("`{s}`: expected always, shared or off")),
        }
    }
}

impl fmt::Display for CoupledMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CoupledMode::Off => "off",
            CoupledMode::Always => "always",
            CoupledMode::WhenShared => "shared",
        })
    }
}

/// What one path runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// This Linux controller ("cubic", "bbr", …).
    Named(String),
    /// The default controller, or [`LOSS_TOLERANT`] while the path's losses come without
    /// RTT inflation (`fbdt_core::cc_policy`).
    Auto,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Choice::Named(n) => f.write_str(n),
            Choice::Auto => f.write_str("auto"),
        }
    }
}

/// Which controller each path runs. Empty: the system's default on every path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CongestionPlan {
    /// Paths not named in `paths`.
    pub all: Option<Choice>,
    /// By path index.
    pub paths: BTreeMap<usize, Choice>,
}

/// Linux's limit on a controller's name (TCP_CA_NAME_MAX, with its NUL).
const MAX_NAME: usize = 15;

/// A congestion plan that does not parse, or names a controller this kernel lacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CongestionError {
    #[error("`{0}` is not a congestion-control name (1..={MAX_NAME} of a-z 0-9 _, or `auto`)")]
    BadName(String),
    #[error("`{0}`: more than one controller for all paths")]
    TwoForAll(String),
    /// `known` says which path names or indexes there are.
    #[error("`{item}`: no path `{key}` ({known})")]
    NoPath { item: String, key: String, known: String },
    #[error("`{item}`: path index {index} out of range (0..{paths})")]
    IndexOutOfRange { item: String, index: usize, paths: usize },
    #[error("`{plan}`: path `{key}` named twice")]
    NamedTwice { plan: String, key: String },
    /// `available` lists the kernel's controllers, comma-separated.
    #[error(
        "congestion control `{name}` is not available in this kernel (available: {available}; \
         `modprobe tcp_{name}` may add it)"
    )]
    Unavailable { name: String, available: String },
}

fn choice(name: &str) -> Result<Choice, CongestionError> {
    if name == "auto" {
        return Ok(Choice::Auto);
    }
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(CongestionError::BadName(name.to_string()));
    }
    Ok(Choice::Named(name.to_string()))
}

impl CongestionPlan {
    /// One controller for every path.
    pub fn all(name: &str) -> Result<Self, CongestionError> {
        Ok(CongestionPlan {
            all: Some(choice(name)?),
            paths: BTreeMap::new(),
        })
    }

    /// Parses `cubic` (every path), `wifi=cubic,wigig=bbr` or `1:bbr` (per path; a path is
    /// a name from `names` or an index), `auto`, or a mix (`cubic,wigig=auto`: the bare name
    /// is for the paths not listed). Names are checked for form only; [`Self::validate`]
    /// asks the kernel.
    pub fn parse(s: &str, names: &[&str]) -> Result<Self, CongestionError> {
        let mut plan = CongestionPlan::default();
        for item in s.split(',').map(str::trim) {
            let kv = item.split_once('=').or_else(|| item.split_once(':'));
            match kv {
                None => {
                    if plan.all.is_some() {
                        return Err(CongestionError::TwoForAll(s.to_string()));
                    }
                    plan.all = Some(choice(item)?);
                }
                Some((key, name)) => {
                    let idx = names
                        .iter()
                        .position(|n| *n == key)
                        .or_else(|| key.parse::<usize>().ok())
                        .ok_or_else(|| {
                            let known = if names.is_empty() {
                                "path indexes 0, 1, …".to_string()
                            } else {
                                format!("paths {} or their indexes", names.join(", "))
                            };
                            CongestionError::NoPath {
                                item: item.to_string(),
                                key: key.to_string(),
                                known,
                            }
                        })?;
                    if !names.is_empty() && idx >= names.len() {
                        return Err(CongestionError::IndexOutOfRange {
                            item: item.to_string(),
                            index: idx,
                            paths: names.len(),
                        });
                    }
                    if plan.paths.insert(idx, choice(name.trim())?).is_some() {
                        return Err(CongestionError::NamedTwice {
                            plan: s.to_string(),
                            key: key.to_string(),
                        });
                    }
                }
            }
        }
        Ok(plan)
    }

    /// Merges `other` in (its entries win).
    pub fn extend(&mut self, other: CongestionPlan) {
        if other.all.is_some() {
            self.all = other.all;
        }
        self.paths.extend(other.paths);
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_none() && self.paths.is_empty()
    }

    /// What path `i` runs; `None`: the system's default.
    pub fn choice(&self, i: usize) -> Option<&Choice> {
        self.paths.get(&i).or(self.all.as_ref())
    }

    /// The controller a new socket gets before its path is known.
    pub fn initial(&self) -> Option<&str> {
        match &self.all {
            Some(Choice::Named(n)) => Some(n),
            Some(Choice::Auto) | None => None,
        }
    }

    /// Every named controller (and `auto`'s [`LOSS_TOLERANT`]) must be one this kernel has
    /// (`/proc/sys/net/ipv4/tcp_available_congestion_control`).
    pub fn validate(&self) -> Result<(), CongestionError> {
        let Some(avail) = available() else {
            // Not Linux or no /proc: the first setsockopt says it.
            return Ok(());
        };
        for c in self.all.iter().chain(self.paths.values()) {
            let name = match c {
                Choice::Named(n) => n.as_str(),
                Choice::Auto => LOSS_TOLERANT,
            };
            if !avail.iter().any(|a| a == name) {
                return Err(CongestionError::Unavailable {
                    name: name.to_string(),
                    available: avail.join(", "),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for CongestionPlan {
    /// The form [`CongestionPlan::parse`] reads back (paths by index).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = self.all.iter().map(|c| c.to_string()).collect();
        items.extend(self.paths.iter().map(|(i, c)| format!("{i}={c}")));
        f.write_str(&items.join(","))
    }
}

/// Coupled mode's state: the windows, and in [`CoupledMode::WhenShared`] the detector.
struct Coupling {
    pacer: LiaPacer,
    detector: Option<SharedBottleneck>,
    /// A path ran BBR without being asked to (the system's default): said once.
    warned_default_bbr: bool,
}

/// Coupled mode on path `i`: its sample into the pacer, the pacer's ceiling onto the socket.
/// A BBR path, or one not behind a shared bottleneck in [`CoupledMode::WhenShared`], leaves
/// the coupling and loses any ceiling set before.
#[allow(clippy::too_many_arguments)]
fn couple(c: &mut Coupling, i: usize, p: &mut PathCc, fd: &impl AsRawFd, info: &TcpInfoSample, connection: u32, asked_bbr: bool, now: Instant) {
    if let Some(d) = c.detector.as_mut() {
        let us = |v: u32| Duration::from_micros(u64::from(v));
        d.on_sample(i, us(info.srtt_us), us(info.min_rtt_us), now);
    }
    let bbr = p.report.in_force == LOSS_TOLERANT;
    if bbr && !asked_bbr && !c.warned_default_bbr {
        c.warned_default_bbr = true;
        tracing::warn!(
            path = i,
            "coupled mode: this path runs bbr, the system's default controller, and stays uncoupled; \
             `--congestion cubic` couples it"
        );
    }
    let engaged = !bbr && c.detector.as_ref().is_none_or(|d| d.shared(i, now));
    if engaged != p.coupled_now {
        tracing::debug!(path = i, engaged, "coupled mode");
    }
    p.coupled_now = engaged;
    let pacer = &mut c.pacer;
    let ceiling = if !engaged {
        pacer.leave(i);
        None
    } else {
        let sample = CoupledSample {
            bytes_acked: info.bytes_acked,
            retransmits: info.total_retrans,
            // TCP_CA_Recovery, TCP_CA_Loss.
            in_recovery: info.ca_state >= 3,
            srtt: Duration::from_micros(u64::from(info.srtt_us)),
            mss: info.mss,
            in_flight_bytes: u64::from(info.unacked) * u64::from(info.mss),
            cwnd_bytes: info.cwnd_bytes,
        };
        let ceiling = pacer.on_sample(i, connection, &sample, now);
        tracing::trace!(path = i, ?sample, window = ?pacer.window(i), ?ceiling, "coupled sample");
        ceiling
    };
    p.report.coupled_window_bytes = pacer.window(i);
    let bps = ceiling.map(|b| b as f64 * 8.0);
    let moved = match (p.report.pacing_ceiling_bps, bps) {
        (Some(old), Some(new)) => (new - old).abs() > old * CEILING_STEP,
        (old, new) => old.is_some() != new.is_some(),
    };
    if !moved || p.pacing_refused {
        return;
    }
    match sockopt::set_max_pacing_rate(fd, ceiling.unwrap_or(u64::MAX)) {
        Ok(()) => {
            tracing::trace!(path = i, window = ?p.report.coupled_window_bytes, ceiling_bps = ?bps, "coupled pacing");
            p.report.pacing_ceiling_bps = bps;
            p.report.pacing_updates += 1;
        }
        Err(e) => {
            tracing::warn!(path = i, "SO_MAX_PACING_RATE: {e}; this connection runs uncoupled");
            p.pacing_refused = true;
        }
    }
}

/// The controllers this kernel has; `None` when that cannot be read.
pub fn available() -> Option<Vec<String>> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").ok()?;
    Some(s.split_whitespace().map(str::to_string).collect())
}

/// A socket's RTO floor for a path whose smoothed RTT is `srtt`: twice the RTT (the queue
/// may double it) plus Linux's shortest delayed-ACK timer (TCP_ATO_MIN, 40 ms), so an
/// ACK that was merely late does not fire a spurious timeout; never above Linux's 200 ms.
pub fn rto_floor_us(srtt_us: u32) -> u32 {
    const DELACK_US: u32 = 40_000;
    const LINUX_RTO_MIN_US: u32 = 200_000;
    srtt_us.saturating_mul(2).saturating_add(DELACK_US).min(LINUX_RTO_MIN_US)
}

/// What ran on one path over the session, for the results.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathCcReport {
    /// The controller in force now (TCP_CONGESTION read back); empty before a connection.
    pub in_force: String,
    /// Seconds each controller was in force on this path's connections.
    pub seconds: BTreeMap<String, f64>,
    /// Segments retransmitted on this path's connections (`tcpi_total_retrans`, summed
    /// over connections).
    pub retransmits: u64,
    /// Retransmission timeouts (`tcpi_total_rto`, kernel ≥ 6.7); `None` before that.
    pub rto_count: Option<u64>,
    /// `auto`: times the controller was switched.
    pub switches: u32,
    /// The RTO floor set on the current connection (µs); `None`: the system's.
    pub rto_floor_us: Option<u32>,
    /// Coupled mode: the pacing ceiling set on the current connection (bit/s); `None`: none.
    pub pacing_ceiling_bps: Option<f64>,
    /// Coupled mode: the path's coupled (LIA) window (bytes).
    pub coupled_window_bytes: Option<u64>,
    /// Coupled mode: pacing ceilings set (one setsockopt each), over the path's connections.
    pub pacing_updates: u32,
    /// Coupled mode: seconds this path was coupled (all of its time on a loss-based
    /// controller with [`CoupledMode::Always`]; while a shared bottleneck was detected
    /// with [`CoupledMode::WhenShared`]).
    pub coupled_seconds: f64,
}

/// A ceiling is set again only when it moved by more than this fraction: every setsockopt
/// is a syscall, and the tick comes every 10 ms.
const CEILING_STEP: f64 = 1.0 / 32.0;

/// The per-path state behind [`CcState`].
#[derive(Default)]
struct PathCc {
    /// Which of the path's connections (its count of connections) the fields below are about.
    connection: u32,
    /// The controller asked for on the current connection.
    asked: Option<String>,
    /// `auto`: the connection's default controller (what it ran before any switch).
    default: Option<String>,
    auto: AutoCc,
    switches_before: u32,
    floor_refused: bool,
    pacing_refused: bool,
    /// Coupled at the last tick.
    coupled_now: bool,
    /// The controller in force was read back since the connection began and since the last
    /// TCP_CONGESTION set (only a set changes it): no getsockopt per tick.
    in_force_known: bool,
    last_tick: Option<Instant>,
    /// Counters of the connections before the current one.
    retrans_before: u64,
    rto_before: u64,
    last: TcpInfoSample,
    report: PathCcReport,
}

/// Every path's controller state; the driver calls [`CcState::on_tick`] with each TCP_INFO
/// sample.
pub(crate) struct CcState {
    plan: CongestionPlan,
    rto_floor: bool,
    paths: Vec<PathCc>,
    /// `None`: paths uncoupled.
    coupling: Option<Coupling>,
}

impl CcState {
    pub fn new(plan: CongestionPlan, rto_floor: bool, coupled: CoupledMode) -> Self {
        CcState {
            plan,
            rto_floor,
            paths: Vec::new(),
            coupling: (coupled != CoupledMode::Off).then(|| Coupling {
                pacer: LiaPacer::new(),
                detector: (coupled == CoupledMode::WhenShared).then(SharedBottleneck::new),
                warned_default_bbr: false,
            }),
        }
    }

    /// Path `i` has no connection now: its coupled window leaves the others' alpha, and its
    /// queueing-delay history the detector.
    pub fn no_connection(&mut self, i: usize) {
        if let Some(c) = self.coupling.as_mut() {
            c.pacer.leave(i);
            if let Some(d) = c.detector.as_mut() {
                d.leave(i);
            }
        }
        if let Some(p) = self.paths.get_mut(i) {
            p.report.coupled_window_bytes = None;
            p.coupled_now = false;
        }
    }

    /// Path `i`'s connection number `connection` (the path's count of connections so far)
    /// gave `info` at `now`: put it on its controller and RTO floor, and account.
    pub fn on_tick(&mut self, i: usize, fd: &impl AsRawFd, info: &TcpInfoSample, connection: u32, now: Instant) {
        if self.paths.len() <= i {
            self.paths.resize_with(i + 1, PathCc::default);
        }
        let choice = self.plan.choice(i).cloned();
        let p = &mut self.paths[i];
        if p.connection != connection {
            // A new connection: fold the old one's counters in, start over.
            p.retrans_before += u64::from(p.last.total_retrans);
            p.rto_before += u64::from(p.last.total_rto.unwrap_or(0));
            p.switches_before += p.auto.switches();
            *p = PathCc {
                connection,
                retrans_before: p.retrans_before,
                rto_before: p.rto_before,
                switches_before: p.switches_before,
                last_tick: p.last_tick,
                report: PathCcReport {
                    rto_floor_us: None,
                    pacing_ceiling_bps: None,
                    ..std::mem::take(&mut p.report)
                },
                ..PathCc::default()
            };
        }
        // Time since the last tick goes to what was in force during it.
        if let Some(t) = p.last_tick {
            let dt = now.saturating_since(t).as_secs_f64();
            if !p.report.in_force.is_empty() {
                *p.report.seconds.entry(p.report.in_force.clone()).or_default() += dt;
            }
            if p.coupled_now {
                p.report.coupled_seconds += dt;
            }
        }
        p.last_tick = Some(now);
        p.last = *info;
        if p.default.is_none() {
            p.default = sockopt::congestion(fd).ok();
        }
        let want = match &choice {
            None => None,
            Some(Choice::Named(n)) => Some(n.clone()),
            Some(Choice::Auto) => {
                let s = CcSample {
                    total_retrans: info.total_retrans,
                    srtt: Duration::from_micros(u64::from(info.srtt_us)),
                    min_rtt: Duration::from_micros(u64::from(info.min_rtt_us)),
                };
                match p.auto.on_sample(&s, now) {
                    CcClass::Default => p.default.clone(),
                    CcClass::LossTolerant => Some(LOSS_TOLERANT.to_string()),
                }
            }
        };
        if want.is_some() && want != p.asked {
            let name = want.as_deref().unwrap_or_default();
            if let Err(e) = sockopt::set_congestion(fd, name) {
                // Validated at start; a refusal now (e.g. not permitted) leaves the
                // connection on what it runs, said once per connection.
                tracing::warn!(path = i, "TCP_CONGESTION {name:?}: {e}");
            }
            p.asked = want;
            p.in_force_known = false;
        }
        if !p.in_force_known {
            if let Ok(n) = sockopt::congestion(fd) {
                p.report.in_force = n;
                p.in_force_known = true;
            }
        }
        if self.rto_floor && !p.floor_refused && info.srtt_us > 0 {
            let floor = rto_floor_us(info.srtt_us);
            // Re-set only on a change of a tenth or more: every setsockopt is a syscall.
            let stale = p
                .report
                .rto_floor_us
                .is_none_or(|f| f.abs_diff(floor) * 10 > f);
            if stale {
                match sockopt::set_rto_min_us(fd, floor) {
                    Ok(()) => p.report.rto_floor_us = Some(floor),
                    Err(e) => {
                        tracing::debug!(path = i, "TCP_RTO_MIN_US not available: {e}");
                        p.floor_refused = true;
                    }
                }
            }
        }
        if let Some(c) = self.coupling.as_mut() {
            let asked_bbr = matches!(&choice, Some(Choice::Named(n)) if n == LOSS_TOLERANT) || matches!(choice, Some(Choice::Auto));
            couple(c, i, p, fd, info, connection, asked_bbr, now);
        }
        p.report.retransmits = p.retrans_before + u64::from(info.total_retrans);
        p.report.rto_count = info.total_rto.map(|r| p.rto_before + u64::from(r));
        p.report.switches = p.switches_before + p.auto.switches();
    }

    /// Path `i`'s coupled window while it is coupled: the window the path may fill, which
    /// the core must see in place of the kernel's larger one. Otherwise a scheduler that
    /// fills the lowest-RTT path up to its cwnd (`mp:minrtt`) keeps queueing on a path paced
    /// far below it and leaves the others idle (round 9's trace: WiFi without a byte in
    /// flight for 10 s while WiGig sat at its ceiling).
    pub fn coupled_window(&self, i: usize) -> Option<u64> {
        // `couple` clears it whenever the path is not engaged.
        self.paths.get(i).and_then(|p| p.report.coupled_window_bytes)
    }

    /// What ran on path `i` so far.
    pub fn report(&self, i: usize) -> PathCcReport {
        self.paths.get(i).map(|p| p.report.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let names = ["wifi", "wigig"];
        let p = CongestionPlan::parse("bbr", &names).unwrap();
        assert_eq!((p.choice(0), p.choice(1)), (Some(&Choice::Named("bbr".into())), Some(&Choice::Named("bbr".into()))));
        let p = CongestionPlan::parse("wifi=cubic,wigig=bbr", &names).unwrap();
        assert_eq!(p.choice(1), Some(&Choice::Named("bbr".into())));
        assert_eq!(p.initial(), None);
        let p = CongestionPlan::parse("cubic,1:auto", &names).unwrap();
        assert_eq!((p.choice(0), p.choice(1)), (Some(&Choice::Named("cubic".into())), Some(&Choice::Auto)));
        assert_eq!(p.initial(), Some("cubic"));
        assert_eq!(p.to_string(), "cubic,1=auto");
        assert_eq!(CongestionPlan::parse(&p.to_string(), &names).unwrap(), p);
        // Without names, indexes only.
        assert_eq!(CongestionPlan::parse("3=bbr", &[]).unwrap().choice(3), Some(&Choice::Named("bbr".into())));
    }

    #[test]
    fn bad_plans_say_why() {
        let names = ["wifi", "wigig"];
        for (s, want) in [
            ("lte=bbr", "no path `lte`"),
            ("5=bbr", "out of range"),
            ("wifi=bbr,wifi=cubic", "named twice"),
            ("cubic,bbr", "more than one"),
            ("Cubic!", "not a congestion-control name"),
            ("wifi=", "not a congestion-control name"),
        ] {
            let e = CongestionPlan::parse(s, &names).unwrap_err();
            assert!(e.to_string().contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn unknown_controllers_are_refused_by_name() {
        if available().is_none() {
            eprintln!("SKIP: no /proc/sys/net/ipv4/tcp_available_congestion_control");
            return;
        }
        let e = CongestionPlan::all("nosuchcc").unwrap().validate().unwrap_err();
        assert!(e.to_string().contains("`nosuchcc` is not available"), "{e}");
    }

    /// The window the core is told of: the coupled one while a loss-based path is coupled
    /// (here halved by a loss episode, below the kernel's), none uncoupled.
    #[test]
    fn a_coupled_path_reports_its_coupled_window_for_the_core() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        if sockopt::set_congestion(&socket, "cubic").is_err() {
            eprintln!("SKIP: this kernel lacks cubic");
            return;
        }
        let sample = |total_retrans, ca_state| TcpInfoSample {
            srtt_us: 10_000,
            cwnd_bytes: 1_000_000,
            mss: 1448,
            ca_state,
            total_retrans,
            bytes_acked: 1,
            ..TcpInfoSample::default()
        };
        let at = |ms: u64| Instant::from_micros(ms * 1000);
        let mut coupled = CcState::new(CongestionPlan::default(), false, CoupledMode::Always);
        coupled.on_tick(0, &socket, &sample(0, 0), 1, at(0));
        assert_eq!(coupled.coupled_window(0), Some(1_000_000));
        // A loss episode (retransmissions, TCP in recovery) halves the coupled window only.
        coupled.on_tick(0, &socket, &sample(5, 3), 1, at(10));
        assert_eq!(coupled.coupled_window(0), Some(500_000));
        coupled.no_connection(0);
        assert_eq!(coupled.coupled_window(0), None);
        let mut uncoupled = CcState::new(CongestionPlan::default(), false, CoupledMode::Off);
        uncoupled.on_tick(0, &socket, &sample(5, 3), 1, at(10));
        assert_eq!(uncoupled.coupled_window(0), None);
    }

    #[test]
    fn the_floor_follows_the_rtt_within_linux_bounds() {
        assert_eq!(rto_floor_us(0), 40_000);
        assert_eq!(rto_floor_us(5_000), 50_000);
        assert_eq!(rto_floor_us(100_000), 200_000);
        assert_eq!(rto_floor_us(u32::MAX), 200_000);
    }
}
