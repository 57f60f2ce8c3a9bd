//! Session configuration. Every knob the papers leave open is here, with the default we
//! chose and why (see specs/fbdt.md "our decisions" and docs/architecture.md).

use crate::time::Duration;
use crate::wire::{MAX_PATHS, MAX_SEGMENT};
use thiserror::Error;

/// How the transmission window is sized (spec decision 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowConfig {
    /// `factor × Σ rate_i × max srtt_i` over the live, unstalled paths, clamped to `[min, max]`
    /// bytes, re-evaluated at every window load. Before any estimate exists the window is
    /// `initial` bytes.
    Auto {
        factor: f64,
        min: usize,
        max: usize,
        initial: usize,
    },
    /// A fixed number of bytes, as in the paper's experiments (64 KiB).
    Fixed(usize),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Bytes per FBDT segment (the unit a path is handed). Large segments keep framing
    /// overhead (12 bytes per segment) and per-segment work low; the paper used MSS-sized
    /// packets inside the kernel, which `Config::paper` reproduces.
    pub segment_size: usize,
    pub window: WindowConfig,
    /// Redundant-transmission wait as a multiple of the holder path's RTT: the paper's
    /// min(RTT_other, RTO) is this factor ≤ 1; factors > 1 are allowed for the RTO sweep.
    pub redundancy_wait: f64,
    /// Bytes the receiver buffers (reassembly + unread); advertised as the receive window.
    pub recv_buffer: usize,
    /// Bytes the application may write ahead of the peer's cumulative ACK.
    pub send_buffer: usize,
    /// The receiver sends an ACK after this many DATA frames ...
    pub ack_every: u32,
    /// ... or this long after the first unacknowledged one, whichever comes first.
    pub max_ack_delay: Duration,
    /// A path holding unacknowledged data whose receive counter has not moved for
    /// max(`stall_rtts` × its ACK RTT, `stall_min`) is stalled: it gets no new window
    /// regions and counts as an outage in its reliability score.
    pub stall_rtts: f64,
    pub stall_min: Duration,
    /// A new forward path must score this many times the current one to take over
    /// (hysteresis against flapping, spec decision 8).
    pub forward_hysteresis: f64,
    /// Seeds the ISN and key material (time and randomness are inputs to the core).
    pub seed: u64,
    /// A fixed initial sequence number instead of a random one (tests exercise the 2^32
    /// wrap with it).
    pub initial_seq: Option<u32>,
    /// `Some` runs the MPTCP-style meta layer with this scheduler instead of FBDT (the
    /// baselines, docs/baselines.md); `segment_size`, `recv_buffer` and `send_buffer` apply
    /// to it, the FBDT-only knobs do not. Both ends must agree (HELLO's scheme byte).
    pub mptcp: Option<crate::mptcp::MptcpConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            segment_size: 16 * 1024,
            window: WindowConfig::Auto {
                factor: 2.0,
                min: 256 * 1024,
                max: 16 * 1024 * 1024,
                initial: 1024 * 1024,
            },
            redundancy_wait: 1.0,
            recv_buffer: 32 * 1024 * 1024,
            send_buffer: 32 * 1024 * 1024,
            ack_every: 2,
            max_ack_delay: Duration::from_millis(2),
            stall_rtts: 3.0,
            stall_min: Duration::from_millis(30),
            forward_hysteresis: 1.2,
            seed: 0,
            initial_seq: None,
            mptcp: None,
        }
    }
}

/// Largest receive or send buffer: keeps every offset in flight within 2^31 of the
/// receiver's reference, which 32-bit sequence numbers need (see `seq`).
pub const MAX_BUFFER: usize = 1 << 30;

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

impl Config {
    /// The paper's setting: MSS-sized segments and a fixed 64 KiB window.
    pub fn paper() -> Self {
        Config {
            segment_size: 1448,
            window: WindowConfig::Fixed(64 * 1024),
            ..Config::default()
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
        match self.window {
            WindowConfig::Fixed(w) if w < self.segment_size || w > self.recv_buffer => {
                return Err(ConfigError::Window(format!("fixed window of {w} bytes")));
            }
            WindowConfig::Auto {
                factor,
                min,
                max,
                initial,
            } if !(factor.is_finite() && factor > 0.0)
                || min < self.segment_size
                || max < min
                || initial < min
                || initial > max =>
            {
                return Err(ConfigError::Window(format!(
                    "auto window factor {factor}, min {min}, max {max}, initial {initial}"
                )));
            }
            _ => {}
        }
        if !(self.redundancy_wait.is_finite() && self.redundancy_wait >= 0.0) {
            return Err(ConfigError::RedundancyWait(self.redundancy_wait));
        }
        if self.ack_every == 0 {
            return Err(ConfigError::Other("ack_every must be ≥ 1"));
        }
        if !(self.stall_rtts.is_finite() && self.stall_rtts > 0.0) {
            return Err(ConfigError::Other("stall_rtts must be a finite factor > 0"));
        }
        if !(self.forward_hysteresis.is_finite() && self.forward_hysteresis >= 1.0) {
            return Err(ConfigError::Other("forward_hysteresis must be ≥ 1"));
        }
        if let Some(mp) = &self.mptcp {
            if !(mp.cwnd_gain.is_finite() && mp.cwnd_gain > 0.0) {
                return Err(ConfigError::Other("mptcp cwnd_gain must be a finite factor > 0"));
            }
            if mp.rto_min.as_micros() == 0 || mp.rto_max.as_micros() < mp.rto_min.as_micros() {
                return Err(ConfigError::Other("mptcp rto_min must be > 0 and ≤ rto_max"));
            }
            let m = &mp.musher;
            if m.tau1.as_micros() == 0 || m.tau2.as_micros() == 0 || m.r_min > m.r_max || m.r_max > 100 {
                return Err(ConfigError::Other("musher: tau1, tau2 > 0 and r_min ≤ r_max ≤ 100"));
            }
        }
        Ok(())
    }

    /// A meta-layer (MPTCP-style) configuration with `scheduler` and the meta layer's
    /// defaults: 16 KiB segments and a 6 MiB shared receive buffer (mptcp::DEFAULT_*).
    pub fn mptcp(scheduler: crate::mptcp::SchedulerKind) -> Self {
        Config {
            segment_size: crate::mptcp::DEFAULT_SEGMENT,
            recv_buffer: crate::mptcp::DEFAULT_RECV_BUFFER,
            mptcp: Some(crate::mptcp::MptcpConfig::new(scheduler)),
            ..Config::default()
        }
    }
}

/// Most paths one session supports.
pub const MAX_SESSION_PATHS: usize = MAX_PATHS;
