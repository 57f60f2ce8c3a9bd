//! Sans-IO core of FBDT — Forward and Backward Data Transmission over N paths.
//!
//! No sockets, no clock, no threads: time (`now`) and path state are inputs, frames to send
//! are polled out (see [`Connection`] for the driving order). The same code runs under the
//! async runtime (fbdt-net) and the deterministic simulator (fbdt-sim).
//!
//! Layout:
//! - [`wire`]: frames and their codec (docs/protocol.md);
//! - [`seq`]: 32-bit sequence numbers with wrap;
//! - [`fbdt`]: the FBDT sender and receiver;
//! - [`mptcp`]: an MPTCP-style meta layer with the published schedulers (the baselines);
//! - [`scheme`]: the sender/receiver traits every multipath scheme implements;
//! - [`connection`]: handshake, per-path framing, one endpoint;
//! - [`config`], [`stats`], [`time`], [`path`].

#![forbid(unsafe_code)]

pub mod config;
pub mod connection;
pub mod error;
pub mod fbdt;
pub mod handshake;
pub mod mptcp;
pub mod path;
pub mod path_policy;
pub mod scheme;
pub mod seq;
pub mod stats;
pub mod time;
pub mod wire;

pub use config::{Config, ConfigError, WindowConfig};
pub use connection::{max_frame_len, Connection, ConnectionStats, Event, Role};
pub use error::ProtocolError;
pub use mptcp::{Hint, MptcpConfig, SchedulerKind};
pub use path::{PathId, PathStats};
pub use stats::{ReceiverStats, SenderStats};
pub use time::{Duration, Instant};
