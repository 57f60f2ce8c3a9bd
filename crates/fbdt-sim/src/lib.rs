//! fbdt-sim: a seeded, deterministic discrete-event simulator that drives the very same
//! protocol code as the runtime (fbdt-core) over modelled paths.
//!
//! Paths are modelled as ideal TCP connections ([`link`]): a reliable in-order byte pipe
//! per direction with the scenario's time-varying rate and delay, a bounded backlog, a TCP
//! window, outages that hold data, and loss folded into a loss-limited rate. No wall clock
//! is read; the same schedule and configuration give bit-identical results.

pub mod endpoint;
mod error;
pub mod link;
mod params;
pub mod pattern;
mod run;
mod sim;
pub mod shared;
mod sndbuf;
pub mod tcp;

pub use endpoint::EndpointError;
pub use error::SimError;
pub use link::{Chunk, LinkParams, TcpInfo};
pub use params::{
    BottleneckOutcome, Coupling, Direction, OneWayOutage, PathModel, PathReset, Payload, SimOutcome, SimParams, SimScheme,
    TcpCounters, Verification,
};
pub use run::run;
pub use sim::Sim;
pub use tcp::{CongestionControl, TcpParams};
