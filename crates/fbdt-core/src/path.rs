//! Per-path identity and the statistics a driver may pass in.

use crate::time::{Duration, Instant};
use crate::wire::MAX_PATHS;
use std::fmt;

/// Index of a path within a session (0 = the connection that carried HELLO).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PathId(pub u8);

impl PathId {
    /// The id of path number `i`, or `None` when no session can have such a path
    /// (`i >= MAX_PATHS`). Never truncates: a bare `i as u8` would turn path 256 into path 0
    /// and silently alias two paths.
    pub fn from_index(i: usize) -> Option<PathId> {
        if i < MAX_PATHS {
            u8::try_from(i).ok().map(PathId)
        } else {
            None
        }
    }

    /// The id of entry `i` of a per-path table: the core's path vectors and bitmasks, a
    /// driver's path slots (fbdt-net), the simulator's links (fbdt-sim). Such an index is
    /// always below [`MAX_PATHS`], because every way a path enters a session is bounded
    /// there: `Connection::add_path*` refuses an id `>= MAX_PATHS` (`TooManyPaths`) before any
    /// core table grows, the receiver's per-path arrays are `MAX_PATHS` long, fbdt-net's
    /// client refuses more paths in its config and fbdt-scenario's validation refuses a
    /// scenario with more. Where an index does not come from such a table (a count from the
    /// outside), use [`PathId::from_index`] and handle `None`.
    ///
    /// # Panics
    /// If `i >= MAX_PATHS`, i.e. if that invariant is broken: a loud failure instead of the
    /// silent wrap of `i as u8`.
    pub fn slot(i: usize) -> PathId {
        match Self::from_index(i) {
            Some(p) => p,
            None => panic!("path table index {i} beyond MAX_PATHS ({MAX_PATHS})"),
        }
    }

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
    /// the socket plus in flight (TCP_INFO's `notsent_bytes` + (`unacked` − `sacked`) × MSS; the link
    /// model's backlog and window). With `FbdtConfig::in_flight_from_transport`, the send
    /// limit counts a path's payload as delivered once TCP acknowledged it, instead of
    /// when FBDT's sparser ACKs say so.
    pub unacked_bytes: Option<u64>,
    /// The transport had data in flight and heard no ACK for it over this interval
    /// (TCP_INFO's `last_ack_recv` with `unacked` > 0; the link model's last ACK): a
    /// path whose link went away falls silent at once, while FBDT's own ACKs of it may
    /// still be on their way over other paths. `None`: nothing in flight, or unknown.
    pub ack_silence: Option<AckSilence>,
    /// Segments the transport has retransmitted on this connection so far (TCP_INFO's
    /// `total_retrans`; the link model's repaired chunks, counted when they are resent).
    /// Copies in flight when it grows may be held by the repair: FBDT's stall rule does not
    /// learn its lateness margin from them (`FbdtSender::path_stats`).
    pub retransmits: Option<u64>,
    /// When the driver read these figures (TCP_INFO's read; the simulator's step): the
    /// time of the transport's deliveries `unacked_bytes` tells of, to a report's spacing.
    pub sampled_at: Option<Instant>,
}

/// No ACK reached the transport from `since` until `until`, when it was sampled, while it
/// had data in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckSilence {
    pub since: Instant,
    pub until: Instant,
}

impl AckSilence {
    /// How long the transport stayed silent after `from` (zero if it heard an ACK then).
    pub fn after(&self, from: Instant) -> Duration {
        self.until.saturating_since(self.since.max(from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_index_refuses_what_a_cast_would_wrap() {
        assert_eq!(PathId::from_index(0), Some(PathId(0)));
        assert_eq!(PathId::from_index(MAX_PATHS - 1), Some(PathId(MAX_PATHS as u8 - 1)));
        assert_eq!(PathId::from_index(MAX_PATHS), None);
        assert_eq!(PathId::from_index(256), None);
        assert_eq!(PathId::slot(3), PathId(3));
    }

    #[test]
    #[should_panic(expected = "beyond MAX_PATHS")]
    fn slot_beyond_the_limit_is_loud() {
        let _ = PathId::slot(MAX_PATHS + 240);
    }
}
