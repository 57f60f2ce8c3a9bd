//! Per-path identity and the statistics a driver may pass in.

use crate::time::Duration;
use std::fmt;

/// Index of a path within a session (0 = the connection that carried HELLO).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathId(pub u8);

impl PathId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
    pub(crate) fn bit(self) -> u32 {
        1u32 << self.0
    }
}

impl fmt::Display for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path{}", self.0)
    }
}

/// What the driver knows ahead of the protocol about a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    /// The interface is about to go off-channel scanning.
    ScanSoon,
    /// The scan is over.
    ScanEnded,
}

/// What the driver knows about a path's TCP connection (TCP_INFO in the runtime, the link
/// model in the simulator). All optional: the core measures delivery and RTT itself from
/// FBDT ACKs and uses these only until its own estimates exist.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathStats {
    pub srtt: Option<Duration>,
    pub delivery_rate_bps: Option<f64>,
    pub cwnd_bytes: Option<u64>,
    /// Bytes the connection's transport holds that its peer has not acknowledged: unsent in
    /// the socket plus in flight (TCP_INFO's `notsent_bytes` + `unacked` × MSS; the link
    /// model's backlog and window). With `FbdtConfig::in_flight_from_transport`, the send
    /// limit counts a path's payload as delivered once TCP acknowledged it, instead of
    /// when FBDT's sparser ACKs say so.
    pub unacked_bytes: Option<u64>,
}
