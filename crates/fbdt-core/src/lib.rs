//! Sans-IO core of FBDT — Forward and Backward Data Transmission over N paths.
//!
//! No sockets, no clock, no threads: time (`now`) and path state are inputs, frames to send
//! are polled out (see [`Connection`] for the driving order). The same code runs under the
//! async runtime (fbdt-net) and the deterministic simulator (fbdt-sim).
//!
//! Layout, bottom up — each module uses only those above it in this list:
//! - [`time`], [`seq`], [`path`], [`stats`]: instants, 32-bit sequence numbers with wrap,
//!   path ids and hints, counters;
//! - [`wire`]: frames and their codec (docs/protocol.md); [`error`]: what ends a path, a
//!   session or a configuration;
//! - [`scheme`]: the sender/receiver traits every multipath scheme implements; `stream`: the
//!   byte stream's bookkeeping both schemes share (written/acknowledged/finished on the send
//!   side; next in-order offset, unread bytes, stream end and window on the receive side);
//! - [`fbdt`]: the FBDT sender and receiver;
//! - [`meta`]: an MPTCP-style meta layer with the published schedulers (the baselines);
//! - [`config`]: the session's configuration, which builds the chosen scheme;
//! - [`handshake`], [`connection`]: session keys; handshake, per-path framing, one endpoint;
//!   [`delay_probe`]: the sampled in-order delivery delay a connection can record;
//! - [`path_policy`], [`cc_policy`], [`coupling`]: clock-free policies a runtime consults
//!   about each path's TCP connection (stall probes; the `auto` congestion-controller choice;
//!   the coupled windows of RFC 6356 LIA as pacing ceilings).

#![forbid(unsafe_code)]

pub mod cc_policy;
pub mod config;
pub mod coupling;
pub mod connection;
pub mod delay_probe;
pub mod error;
pub mod fbdt;
pub mod handshake;
pub mod meta;
pub mod path;
pub mod path_policy;
pub mod scheme;
pub mod seq;
pub mod shared_bottleneck;
pub mod stats;
mod stream;
pub mod time;
pub mod wire;

pub use config::{AckSilenceUse, Config, ConfigError, WindowParseError, FbdtConfig, MetaConfig, SchemeConfig, WindowConfig};
pub use connection::{max_frame_len, Connection, ConnectionStats, Event, Role};
pub use error::ProtocolError;
pub use handshake::PathBinding;
pub use meta::SchedulerKind;
pub use path::{AckSilence, Hint, PathId, PathStats};
pub use stats::{ReceiverStats, SenderStats};
pub use time::{Duration, Instant};
