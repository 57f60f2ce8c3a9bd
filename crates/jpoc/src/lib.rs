//! JPOC: fair mmWave initial access (thesis 000, chapter 3) — a beacon-interval simulator
//! of 802.11ad/ay A-BFT and of JPOC (client power control + adaptive mini-slot A-BFT).
//!
//! Layers, bottom up: [`antenna`] (8×4 UPA, 36-beam codebook) and [`channel`] (TR 38.901
//! InH path loss, LOS probability, reduced multipath) give each client's per-beam received
//! power; [`power`] (eq. 3.1–3.5) and [`jpoc`] (eq. 3.6–3.9) are the protocol's equations;
//! [`abft`] resolves one contention round with the capture rule; [`sim`] runs beacon
//! intervals; [`experiments`] reproduces the thesis figures; [`plot`] writes their PNGs (the
//! command line is the lab's `fbdt-lab jpoc`). Everything random is seeded ([`rng`]).
//! Modelling choices and where they differ from the thesis: docs/jpoc.md.

pub mod abft;
pub mod antenna;
pub mod channel;
pub mod cli;
pub mod config;
pub mod experiments;
pub mod jpoc;
pub mod metrics;
pub mod plot;
pub mod power;
pub mod rng;
pub mod sim;

pub use config::Config;
