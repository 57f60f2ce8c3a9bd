//! An MPTCP-style meta layer over the same N subflows FBDT uses, with the published
//! schedulers (specs/baselines.md §3–4, docs/baselines.md).
//!
//! MPTCP semantics kept on purpose, because they are what the baselines are measured for:
//! - 64-bit data sequence numbers (DSN), starting at 0 in each direction;
//! - ONE shared reorder buffer at the receiver and ONE receive window for all paths: the
//!   sender never sends a byte at or past `data_ack + rwnd`, so a segment stuck on a slow or
//!   blocked path holds the window and stalls the fast path too (head-of-line blocking,
//!   \[M\] F1);
//! - in-order delivery from the reorder buffer;
//! - reinjection: of the segment that blocks the window (opportunistic, with penalisation of
//!   the slow path, as Linux's `mptcp_rcv_buf_optimization`), of a subflow's data after its
//!   retransmission timeout, and of a dead subflow's data;
//! - per-path send allowances (a congestion window per subflow) the scheduler must respect.
//!
//! The scheduler is a [`sched::Scheduler`]; one file per scheduler under `sched/`.

pub mod receiver;
pub mod sched;
pub mod sender;

pub use receiver::MetaReceiver;
pub use sched::{MusherParams, SchedulerKind};
pub use sender::MetaSender;

use crate::error::ConfigError;
use crate::time::Duration;

/// Receive buffer a meta-layer session uses unless told otherwise: 6 MiB, the largest
/// receive buffer Linux autotuning grows a socket to by default (`net.ipv4.tcp_rmem[2]` =
/// 6 MiB; MPTCP's meta socket autotunes against the same limit).
pub const DEFAULT_RECV_BUFFER: usize = 6 * 1024 * 1024;

/// Meta-layer segment: 16 KiB. The kernel schedules sk_buffs of up to the subflow's TSO
/// size goal (up to 64 KiB) rather than single 1448-byte packets; 16 KiB is such a chunk and
/// the same unit FBDT's default uses, so per-segment overheads match between the schemes.
pub const DEFAULT_SEGMENT: usize = 16 * 1024;

/// How the meta layer behaves; `SchemeConfig::Meta` selects it instead of FBDT.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaConfig {
    pub scheduler: SchedulerKind,
    /// Opportunistic reinjection of the window-blocking segment plus penalisation of the
    /// path holding it. `None` = the scheduler's default (on for minrtt, blest, ecf, rr,
    /// musher; off for the strict fixed/amuse and the redundant scheduler).
    pub reinject: Option<bool>,
    /// A subflow may hold `cwnd_gain × cwnd + cwnd_extra` bytes sent and not yet reported
    /// received, `cwnd` being what the driver reports (TCP_INFO; rate × RTT in the
    /// simulator). 1.0 and 64 KiB: the cwnd already is the BDP, and the in-flight count lags
    /// the DATA_ACKs by a few segments. Much more than that exceeds what a simulated link
    /// takes (BDP + its 256 KiB backlog): minRTT would then see room on the fast path that
    /// the link refuses, and never use the slow one.
    pub cwnd_gain: f64,
    pub cwnd_extra: u64,
    /// Subflow retransmission timeout: max(rto_min, 3 × srtt), doubled on every expiry
    /// without progress up to rto_max (Linux: TCP_RTO_MIN 200 ms, TCP_RTO_MAX 120 s).
    pub rto_min: Duration,
    pub rto_max: Duration,
    pub musher: MusherParams,
}

impl MetaConfig {
    pub fn new(scheduler: SchedulerKind) -> Self {
        MetaConfig {
            scheduler,
            reinject: None,
            cwnd_gain: 1.0,
            cwnd_extra: 64 * 1024,
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs_f64(120.0),
            musher: MusherParams::default(),
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.cwnd_gain.is_finite() && self.cwnd_gain > 0.0) {
            return Err(ConfigError::Other("meta-layer cwnd_gain must be a finite factor > 0"));
        }
        if self.rto_min.as_micros() == 0 || self.rto_max.as_micros() < self.rto_min.as_micros() {
            return Err(ConfigError::Other("meta-layer rto_min must be > 0 and ≤ rto_max"));
        }
        let m = &self.musher;
        if m.tau1.as_micros() == 0 || m.tau2.as_micros() == 0 || m.r_min > m.r_max || m.r_max > 100 {
            return Err(ConfigError::Other("musher: tau1, tau2 > 0 and r_min ≤ r_max ≤ 100"));
        }
        Ok(())
    }
}
