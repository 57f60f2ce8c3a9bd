//! Errors that end a path or a session. None of them is ever a panic.

use crate::path::PathId;
use crate::wire::{self, MAX_SEGMENT};
use thiserror::Error;

/// A configuration that cannot run (`Config::validate`).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ConfigError {
    #[error("segment_size must be in 1..={MAX_SEGMENT}, got {0}")]
    SegmentSize(usize),
    #[error("window must hold at least one segment and at most the receive buffer ({0})")]
    Window(String),
    #[error("{name} must be in {min}..={max} bytes, got {got}")]
    Buffer {
        name: &'static str,
        min: usize,
        max: usize,
        got: usize,
    },
    #[error("redundancy_wait must be a finite factor ≥ 0, got {0}")]
    RedundancyWait(f64),
    #[error("{0}")]
    Other(&'static str),
}

/// A window a user typed that does not parse ([`crate::WindowConfig`]'s `FromStr`,
/// `WindowConfig::parse_budget_ms`); the text is what the CLIs print.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WindowParseError {
    #[error("budget=`{0}` is not a number of ms in [0.001, 60000]")]
    Budget(String),
    #[error("`{0}` is not a window: budget=<ms>, auto, or a size such as 64k or 4m")]
    Window(String),
}

/// A violation by the peer (or a corrupt byte stream). Fatal for the session unless noted.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error("{path}: undecodable frame: {source}")]
    Wire { path: PathId, source: wire::Error },
    #[error("{path}: unexpected {what}")]
    Unexpected { path: PathId, what: &'static str },
    #[error("DATA beyond the advertised receive window (offset {end} > limit {limit})")]
    FlowControl { end: u64, limit: u64 },
    #[error("DATA beyond the end of the stream")]
    BeyondFin,
    #[error("two different stream ends announced")]
    FinMismatch,
    #[error("ACK for data that was never sent")]
    AckOfUnsent,
    #[error("malformed ALIGN: {0}")]
    BadAlign(&'static str),
    #[error("{path}: JOIN failed authentication")]
    BadJoin { path: PathId },
    /// A JOIN whose connection epoch is not above the last one accepted for its path: a
    /// delayed JOIN of an older connection must not replace a newer one, nor a replayed
    /// JOIN the connection it was recorded on.
    #[error("{path}: JOIN of connection epoch {epoch}, not after the accepted {last}")]
    StaleJoin { path: PathId, epoch: u32, last: u32 },
    /// Client: what the server sent on a joining connection is not a valid answer to our
    /// JOIN (wrong MAC, another frame first, garbage). Only that connection is dropped: its
    /// far end may not hold the session key.
    #[error("{path}: no valid answer to our JOIN: {why}")]
    BadJoinAnswer { path: PathId, why: String },
    #[error("HELLO parameters refused: {0}")]
    BadHello(&'static str),
    #[error("more than {max} paths")]
    TooManyPaths { max: usize },
    #[error("peer closed the session with code {code}: {reason}")]
    PeerClosed { code: u16, reason: String },
}

impl ProtocolError {
    /// Errors confined to one path (a bad JOIN, a bad answer to ours): the path is dropped,
    /// the session lives on.
    pub fn is_path_local(&self) -> bool {
        matches!(
            self,
            ProtocolError::BadJoin { .. } | ProtocolError::StaleJoin { .. } | ProtocolError::BadJoinAnswer { .. }
        )
    }

    /// Code sent in the CLOSE frame for this error.
    pub fn close_code(&self) -> u16 {
        match self {
            ProtocolError::Wire { .. } => 1,
            ProtocolError::Unexpected { .. } => 2,
            ProtocolError::FlowControl { .. } | ProtocolError::BeyondFin | ProtocolError::FinMismatch => 3,
            ProtocolError::AckOfUnsent => 4,
            ProtocolError::BadAlign(_) => 5,
            ProtocolError::BadJoin { .. } | ProtocolError::StaleJoin { .. } | ProtocolError::BadJoinAnswer { .. } => 6,
            ProtocolError::BadHello(_) => 7,
            ProtocolError::TooManyPaths { .. } => 8,
            ProtocolError::PeerClosed { code, .. } => *code,
        }
    }
}
