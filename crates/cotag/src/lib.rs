//! COTAG — coded taking and giving (paper 003), sans-IO.
//!
//! A [`Gateway`] random-linear-codes each cohort of a flow's packets over GF(2^8) and spreads
//! the combinations over two links (one per mmWave AP); each [`Ap`] holds a cohort until the
//! next one shows up, forwards it while it can and drops what is left when the one after
//! arrives ("giving"), re-encoding extra combinations with spare capacity ("taking"); the
//! [`Device`] decodes each cohort by Gaussian elimination and releases the original packets
//! in label order. docs/cotag.md has the design and our decisions.
//!
//! No sockets, no clock, no threads: time is an [`Instant`] (µs) passed in, randomness comes
//! from a seed in each config. Every piece follows quinn-proto's order: after each input
//! (`handle_*`), the driver polls output (`poll_transmit` / `poll_packet`) until `None`, then
//! re-arms its timer from `poll_timeout()` and calls `handle_timeout(now)` when it fires (an
//! early call is a no-op).
//!
//! [`sim`] joins the three over two modelled links in virtual time: the in-crate end-to-end
//! harness.

mod ap;
mod decoder;
mod device;
mod gateway;
pub mod gf;
pub mod sim;
pub mod wire;

pub use ap::{Ap, ApConfig, ApLabelRecord, ApStats};
pub use decoder::{Decoder, Insert};
pub use device::{Device, DeviceConfig, DeviceStats, FailReason, FailedCohort};
pub use gateway::{CohortSize, Gateway, GatewayConfig, GatewayLabelRecord, GatewayStats, HighCode, HighSplit};
pub use wire::{CodedPacket, Priority};

/// Microseconds on the driver's clock.
pub type Instant = u64;

/// The two links: 0 through AP1, 1 through AP2.
pub type LinkId = usize;
pub const LINKS: usize = 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("packet of {0} bytes: must be 1..={max}", max = wire::MAX_PACKET)]
    PacketLen(usize),
    #[error("no link {0} (links are 0 and 1)")]
    Link(LinkId),
    #[error(transparent)]
    Wire(#[from] wire::Error),
}

/// A seeded RNG for one node: each node draws from its own ChaCha stream of the seed.
pub(crate) fn rng(seed: u64, stream: u64) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    r.set_stream(stream);
    r
}
