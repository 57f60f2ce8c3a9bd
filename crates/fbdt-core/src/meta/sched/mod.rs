//! Schedulers: which subflow the next new segment goes to. One file per scheduler; each is
//! a pure decision over a [`View`] of the paths, so unit tests can say "at t, paths in state
//! X, expect path Y" without a connection.

mod amuse;
mod blest;
mod ecf;
mod fixed;
mod kernel;
pub use kernel::subflow_sndbuf;
mod minrtt;
mod musher;
mod redundant;
mod rr;

pub use amuse::Amuse;
pub use blest::Blest;
pub use ecf::Ecf;
pub use fixed::{FixedRatio, RatioPattern};
pub use kernel::Kernel;
pub use minrtt::MinRtt;
pub use musher::{Musher, MusherParams};
pub use redundant::Redundant;
pub use rr::RoundRobin;

use crate::path::PathId;
use crate::time::Instant;

/// What a scheduler sees of one subflow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathView {
    pub id: PathId,
    /// The subflow exists (joined, not reset).
    pub up: bool,
    /// Up, not "potentially failed" after a retransmission timeout, not paused for a scan.
    pub usable: bool,
    /// Smoothed RTT in seconds (the driver's view; 0 before any).
    pub srtt_s: f64,
    /// Send allowance in bytes (cwnd, after any penalisation, with the meta layer's
    /// `cwnd_gain` and `cwnd_extra`).
    pub cwnd: u64,
    /// The subflow's own congestion window in bytes as the driver reports it (TCP_INFO),
    /// Linux's initial window before any report: what the kernel's pacing rate and
    /// send-buffer autotuning are made from, without the meta layer's allowance.
    pub tcp_cwnd: u64,
    /// Bytes sent on the subflow and not yet received (its send-queue occupancy).
    pub in_flight: u64,
    /// Delivery rate in bit/s the driver reports (TCP_INFO; the link model in the sim).
    pub rate_bps: f64,
    /// Payload bytes the receiver has got on this subflow (its counter in DATA_ACK).
    pub delivered: u64,
}

impl PathView {
    /// Room for one more segment of `seg` bytes within the allowance (an idle subflow always
    /// takes one, so a tiny cwnd cannot starve it).
    pub fn has_space(&self, seg: u64) -> bool {
        self.usable && (self.in_flight == 0 || self.in_flight + seg <= self.cwnd)
    }
}

/// What a scheduler sees of the meta connection.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub now: Instant,
    pub paths: &'a [PathView],
    /// Size of the next segment.
    pub seg: u64,
    /// Bytes of the shared receive window left past the highest DSN sent.
    pub window_left: u64,
    /// Bytes written by the application and not yet sent once.
    pub unsent: u64,
    /// Bytes the meta layer has sent again so far (reinjections of every kind): BLEST's
    /// signal that the window blocked anyway.
    pub reinjected: u64,
}

impl View<'_> {
    /// The usable path with the lowest RTT (ties: lowest index), with or without space.
    pub fn fastest(&self) -> Option<&PathView> {
        self.paths
            .iter()
            .filter(|p| p.usable)
            .min_by(|a, b| a.srtt_s.total_cmp(&b.srtt_s).then(a.id.cmp(&b.id)))
    }
    /// The lowest-RTT path that has space now.
    pub fn fastest_with_space(&self) -> Option<&PathView> {
        self.paths
            .iter()
            .filter(|p| p.has_space(self.seg))
            .min_by(|a, b| a.srtt_s.total_cmp(&b.srtt_s).then(a.id.cmp(&b.id)))
    }
}

pub trait Scheduler: SchedulerClone {
    /// The path the next new segment goes to; `None` = hold it for now.
    fn select(&mut self, v: &View<'_>) -> Option<PathId>;
    /// A new segment of `len` bytes went out on `path`.
    fn on_sent(&mut self, _path: PathId, _len: u64) {}
    /// Every segment on every path (the meta layer then ignores `select`).
    fn redundant(&self) -> bool {
        false
    }
    /// Default for opportunistic reinjection + penalisation (MetaConfig::reinject).
    fn reinject_default(&self) -> bool {
        true
    }
    /// Upstream Linux MPTCP's recovery instead of the out-of-tree kernel's: one MPTCP-level
    /// retransmission timer that re-sends the oldest unacknowledged data on an idle subflow
    /// and marks a subflow stale after `stale_loss_cnt` intervals without progress
    /// (meta/sender.rs `mptcp_retrans`), not a retransmission timer per subflow whose first
    /// expiry marks the subflow potentially failed and re-sends all it holds.
    fn upstream_recovery(&self) -> bool {
        false
    }
    /// The scheduler bounds what a subflow holds by its send buffer, not its congestion
    /// window: bytes past the window wait in the subflow's send queue. Upstream MPTCP hands
    /// data to the subflow it picks whenever `sk_stream_memory_free` allows; the meta
    /// layer's window check (`cwnd + cwnd_extra`) would stop a subflow at about one round
    /// trip of queue, so the least-lingering rule could never let a short-RTT subflow's
    /// queue grow past a longer-RTT subflow's round trip, and the longer one starved.
    fn queues_past_cwnd(&self) -> bool {
        false
    }
    /// SCAN handling: a subflow announced to scan gets no new segments until the scan ends.
    fn scan_aware(&self) -> bool {
        false
    }
    /// When `on_tick` wants to run next.
    fn next_tick(&self) -> Option<Instant> {
        None
    }
    fn on_tick(&mut self, _v: &View<'_>) {}
    /// The current split in percent to the ratio path (FixedRatio, AMuSe, MuSher).
    fn ratio(&self) -> Option<u8> {
        None
    }
}

crate::scheme::boxed_clone! {
    /// `Clone` for a boxed [`Scheduler`] (the meta layer's sender is `Clone`).
    SchedulerClone for dyn Scheduler + Send
}

/// Which scheduler, as the lab names it (`mp:<name>`).
#[derive(Clone, Debug, PartialEq)]
pub enum SchedulerKind {
    MinRtt,
    Blest,
    Ecf,
    RoundRobin,
    Redundant,
    /// FixedRatio(r): r of every 100 segments to the ratio path.
    Fixed(u8),
    Amuse,
    Musher,
    /// Upstream Linux MPTCP's default (`kernel.rs`).
    Kernel,
}

impl SchedulerKind {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "minrtt" | "default" => SchedulerKind::MinRtt,
            "blest" => SchedulerKind::Blest,
            "ecf" => SchedulerKind::Ecf,
            "rr" | "roundrobin" => SchedulerKind::RoundRobin,
            "redundant" => SchedulerKind::Redundant,
            "amuse" => SchedulerKind::Amuse,
            "musher" => SchedulerKind::Musher,
            "kernel" => SchedulerKind::Kernel,
            _ => {
                let r: u8 = name.strip_prefix("fixed=")?.parse().ok()?;
                (r <= 100).then_some(SchedulerKind::Fixed(r))?
            }
        })
    }

    pub fn build(&self, musher: &MusherParams, now: Instant) -> Box<dyn Scheduler + Send> {
        match self {
            SchedulerKind::MinRtt => Box::new(MinRtt),
            SchedulerKind::Blest => Box::new(Blest::default()),
            SchedulerKind::Ecf => Box::new(Ecf::default()),
            SchedulerKind::RoundRobin => Box::new(RoundRobin::default()),
            SchedulerKind::Redundant => Box::new(Redundant),
            SchedulerKind::Fixed(r) => Box::new(FixedRatio::new(*r)),
            SchedulerKind::Amuse => Box::new(Amuse::default()),
            SchedulerKind::Musher => Box::new(Musher::new(musher.clone(), now)),
            SchedulerKind::Kernel => Box::new(Kernel::default()),
        }
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// A usable path with RTT `rtt_ms`, allowance `cwnd` and `in_flight` bytes.
    pub fn path(i: u8, rtt_ms: f64, cwnd: u64, in_flight: u64) -> PathView {
        PathView {
            id: PathId(i),
            up: true,
            usable: true,
            srtt_s: rtt_ms / 1e3,
            cwnd,
            tcp_cwnd: cwnd,
            in_flight,
            rate_bps: cwnd as f64 * 8.0 / (rtt_ms / 1e3),
            delivered: 0,
        }
    }

    pub fn view(paths: &[PathView], window_left: u64, unsent: u64) -> View<'_> {
        View {
            now: Instant::ZERO,
            paths,
            seg: 16384,
            window_left,
            unsent,
            reinjected: 0,
        }
    }
}
