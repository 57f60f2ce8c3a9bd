//! Session configuration: the knobs both schemes share, and the scheme with its own knobs
//! ([`FbdtConfig`], [`MetaConfig`]). See specs/fbdt.md "our decisions" and
//! docs/architecture.md for the defaults and why.

use crate::fbdt::{FbdtReceiver, FbdtSender};
use crate::meta::{MetaReceiver, MetaSender};
use crate::scheme::{SchemeReceiver, SchemeSender, StreamParams};
use crate::time::{Duration, Instant};
use crate::wire::{self, MAX_PATHS, MAX_SEGMENT};

pub use crate::error::{ConfigError, WindowParseError};
pub use crate::fbdt::{AckSilenceUse, FbdtConfig, WindowConfig};
pub use crate::meta::{MetaConfig, SchedulerKind};

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Bytes per segment (the unit a path is handed). Large segments keep framing
    /// overhead (12 bytes per segment) and per-segment work low; the paper used MSS-sized
    /// packets inside the kernel, which `Config::paper` reproduces.
    pub segment_size: usize,
    /// Bytes the receiver buffers (reassembly + unread); advertised as the receive window.
    pub recv_buffer: usize,
    /// Bytes the application may write ahead of the peer's cumulative ACK.
    pub send_buffer: usize,
    /// The receiver acknowledges a path's arrivals on that path once at least this many
    /// DATA frames ...
    pub ack_every: u32,
    /// ... and at least this many payload bytes arrived on it since its last ACK, or
    /// `ack_every` × this many bytes in fewer frames (issue 37: ACKs by bytes, not per
    /// frame; 0 = by frames alone, and every window completion acknowledged on every path,
    /// the rule before it) ...
    pub ack_bytes: usize,
    /// ... or this long after the first unacknowledged arrival, whichever comes first.
    pub max_ack_delay: Duration,
    /// Seeds the ISN and key material (time and randomness are inputs to the core).
    pub seed: u64,
    /// A fixed initial sequence number instead of a random one (tests exercise the 2^32
    /// wrap with it).
    pub initial_seq: Option<u32>,
    /// Server: tell the client when one of the paths stalls our data (a STALLED frame on
    /// another path), so that it opens a fresh connection for it; the server cannot. Without
    /// the report a link that returns carries again only when the server's backed-off
    /// retransmission timer fires (docs/faults.md, round 11).
    pub report_stalls: bool,
    /// Which scheme the session runs, with its own knobs. Both ends must agree (HELLO's
    /// scheme byte).
    pub scheme: SchemeConfig,
}

/// The scheme a session runs.
#[derive(Clone, Debug, PartialEq)]
pub enum SchemeConfig {
    Fbdt(FbdtConfig),
    /// The MPTCP-style meta layer with one of the published schedulers (the baselines,
    /// docs/baselines.md).
    Meta(MetaConfig),
}

impl Default for Config {
    fn default() -> Self {
        Config {
            segment_size: 16 * 1024,
            recv_buffer: 32 * 1024 * 1024,
            send_buffer: 32 * 1024 * 1024,
            ack_every: 2,
            ack_bytes: DEFAULT_ACK_BYTES,
            max_ack_delay: Duration::from_millis(2),
            seed: 0,
            initial_seq: None,
            report_stalls: true,
            scheme: SchemeConfig::Fbdt(FbdtConfig::default()),
        }
    }
}

/// Default [`Config::ack_bytes`]: eight 16 KiB segments. Each ACK frame costs a `writev` and
/// a reverse packet at the receiver and a wake-up and a read at the sender; spacing them to
/// 128 KiB cut the testbed endpoints' CPU by 19–32 % (tc-normal, mobility, rats4; issue 37,
/// docs/runtime.md). Sparse ACKs alone let more bytes queue unseen between two ACKs (p99
/// in-order delay +0.3–1.7 ms in the simulator); the sender counts them from the transport's
/// ACKs instead ([`crate::FbdtConfig::in_flight_from_transport`], on by default), which takes
/// that price back.
pub const DEFAULT_ACK_BYTES: usize = 128 * 1024;

/// Largest receive or send buffer: keeps every offset in flight within 2^31 of the
/// receiver's reference, which 32-bit sequence numbers need (see `seq`).
pub const MAX_BUFFER: usize = 1 << 30;

impl Config {
    /// The paper's setting: MSS-sized segments, a fixed 64 KiB window, one segment per
    /// frame and an ACK every two frames (a kernel TCP's delayed ACK).
    pub fn paper() -> Self {
        Config {
            segment_size: 1448,
            ack_bytes: 0,
            scheme: SchemeConfig::Fbdt(FbdtConfig::paper()),
            ..Config::default()
        }
    }

    /// A meta-layer (MPTCP-style) configuration with `scheduler` and the meta layer's
    /// defaults: 16 KiB segments and a 6 MiB shared receive buffer (meta::DEFAULT_*).
    pub fn meta(scheduler: SchedulerKind) -> Self {
        Config {
            segment_size: crate::meta::DEFAULT_SEGMENT,
            recv_buffer: crate::meta::DEFAULT_RECV_BUFFER,
            scheme: SchemeConfig::Meta(MetaConfig::new(scheduler)),
            ..Config::default()
        }
    }

    /// FBDT's knobs, when the session runs FBDT.
    pub fn fbdt(&self) -> Option<&FbdtConfig> {
        match &self.scheme {
            SchemeConfig::Fbdt(f) => Some(f),
            SchemeConfig::Meta(_) => None,
        }
    }

    pub fn fbdt_mut(&mut self) -> Option<&mut FbdtConfig> {
        match &mut self.scheme {
            SchemeConfig::Fbdt(f) => Some(f),
            SchemeConfig::Meta(_) => None,
        }
    }

    /// The meta layer's knobs, when the session runs the meta layer.
    pub fn meta_config(&self) -> Option<&MetaConfig> {
        match &self.scheme {
            SchemeConfig::Meta(m) => Some(m),
            SchemeConfig::Fbdt(_) => None,
        }
    }

    pub fn meta_config_mut(&mut self) -> Option<&mut MetaConfig> {
        match &mut self.scheme {
            SchemeConfig::Meta(m) => Some(m),
            SchemeConfig::Fbdt(_) => None,
        }
    }

    /// The knobs both schemes share, as the schemes take them.
    pub fn stream_params(&self) -> StreamParams {
        StreamParams {
            segment_size: self.segment_size,
            recv_buffer: self.recv_buffer,
            send_buffer: self.send_buffer,
            ack_every: self.ack_every,
            ack_bytes: self.ack_bytes,
            max_ack_delay: self.max_ack_delay,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.segment_size == 0 || self.segment_size > MAX_SEGMENT {
            return Err(ConfigError::SegmentSize(self.segment_size));
        }
        let min_buf = 2 * self.segment_size;
        for (name, got) in [("recv_buffer", self.recv_buffer), ("send_buffer", self.send_buffer)] {
            if got < min_buf || got > MAX_BUFFER {
                return Err(ConfigError::Buffer {
                    name,
                    min: min_buf,
                    max: MAX_BUFFER,
                    got,
                });
            }
        }
        if self.ack_every == 0 {
            return Err(ConfigError::Other("ack_every must be ≥ 1"));
        }
        match &self.scheme {
            SchemeConfig::Fbdt(f) => f.validate(&self.stream_params()),
            SchemeConfig::Meta(m) => m.validate(),
        }
    }
}

impl SchemeConfig {
    /// The scheme byte HELLO carries.
    pub(crate) fn wire_scheme(&self) -> wire::Scheme {
        match self {
            SchemeConfig::Fbdt(_) => wire::Scheme::Fbdt,
            SchemeConfig::Meta(_) => wire::Scheme::Meta,
        }
    }

    /// Smallest receive buffer a peer announcing `segment_size` may announce. FBDT: two
    /// maximal segments, so a window of at least one segment always fits; the meta layer
    /// only needs two of the peer's segments to make progress.
    pub(crate) fn min_peer_recv_buffer(&self, segment_size: u32) -> u32 {
        match self {
            SchemeConfig::Fbdt(_) => 2 * MAX_SEGMENT as u32,
            SchemeConfig::Meta(_) => 2 * segment_size,
        }
    }

    /// The sending half of our direction, numbered from `isn`.
    pub(crate) fn sender(&self, params: StreamParams, isn: u32) -> Box<dyn SchemeSender> {
        match self {
            SchemeConfig::Fbdt(f) => Box::new(FbdtSender::new(f, params, isn, 0)),
            SchemeConfig::Meta(m) => Box::new(MetaSender::new(m, params, Instant::ZERO)),
        }
    }

    /// The receiving half of the peer's direction, numbered from the peer's `isn`.
    pub(crate) fn receiver(&self, params: StreamParams, peer_isn: u32) -> Box<dyn SchemeReceiver> {
        match self {
            SchemeConfig::Fbdt(_) => Box::new(FbdtReceiver::new(params, peer_isn)),
            SchemeConfig::Meta(_) => Box::new(MetaReceiver::new(params)),
        }
    }
}

/// Most paths one session supports.
pub const MAX_SESSION_PATHS: usize = MAX_PATHS;
