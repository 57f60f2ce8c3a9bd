//! COTAG on the emulated testbed (fbdt-emu): unmodified kernel TCP flows between the client
//! and server namespaces run over a TUN device at each end; this crate's two loops carry the
//! IP packets between the TUN devices over UDP on the two emulated paths.
//!
//! * **Server end** ([`gateway_side`]): the cotag [`Gateway`](cotag::Gateway) codes the
//!   downlink packets read from the server's TUN device; each [`Ap`](cotag::Ap)'s buffer
//!   discipline sits at the ingress of its emulated path, paced at the path's scheduled rate
//!   ([`pacer`]) so its hold / forward / flush rules act where the queue is.
//! * **Client end** ([`device_side`]): the cotag [`Device`](cotag::Device) decodes and writes
//!   the original packets, in cohort order, into the client's TUN device.
//! * **Uplink** (the client's ACKs): uncoded over path 1 — the paper codes only the download.
//! * **`dual-rr`**: the same plumbing without coding: downlink packets alternate between the
//!   paths and the emulator's drop-tail queues are the APs' buffers.
//!
//! The loops are plain threads (one per end) around the sans-IO core; see docs/cotag.md.

pub mod gso;
mod device_side;
mod gateway_side;
pub mod io;
pub mod link;
pub mod pacer;
pub mod params;
pub mod stats;
pub mod transfer;
pub mod tun;

use std::net::SocketAddr;

pub use link::{inner_mtu, CotagLink};
pub use params::{CotagParams, Mode};
pub use stats::{Cause, FailureBreakdown, FailureTrace, LinkStats, LinkTrace, SideStats};

/// IPv4 + UDP header bytes around every datagram: what the emulator's rate stage also counts.
pub const IP_UDP_HEADER: usize = 28;
/// A loop wakes at least this often (to notice `stop` and rate changes).
pub(crate) const MAX_WAIT_US: u64 = 2_000;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Io(&'static str, #[source] std::io::Error),
    #[error(transparent)]
    Cotag(#[from] cotag::Error),
    #[error(transparent)]
    Testbed(#[from] fbdt_emu::Error),
    #[error("{0}")]
    Setup(String),
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io("socket setup", e)
    }
}

/// One path's datagram addresses: server end and client end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ends {
    pub server: SocketAddr,
    pub client: SocketAddr,
}

/// What each end's loop is built from.
#[derive(Debug, Clone)]
pub(crate) struct SideSetup {
    pub mode: Mode,
    pub down: [Ends; cotag::LINKS],
    pub up: Ends,
    /// Each path's scheduled rate, for the APs' pacers.
    pub rates: [pacer::RateSteps; cotag::LINKS],
    /// The paths' MTU: the IP bytes of a full-size coded datagram.
    pub outer_mtu: usize,
    pub clock: io::Clock,
}
