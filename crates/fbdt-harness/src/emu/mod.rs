//! The emulated backend (`--backend emu`): every scheme on a fresh testbed (fbdt-emu).
//! `backend` runs schemes × repetitions and aggregates them into the harness's results;
//! `transport` says how a scheme runs there; `session` drives fbdt-net sessions (FBDT and
//! `mp:*`), `cotag_link` the COTAG and dual-rr link, `bursts` paper 003's burst traffic.

mod backend;
pub mod bursts;
pub mod cotag_link;
pub mod session;
pub mod transport;

pub use backend::{
    blame, next_attempt, run, scale_of, Blame, Emu, EmuRun, NextAttempt, ScaleChoice, AUTO_SCALE_STEP, AUTO_SCALE_TRIES,
    HOST_REPEATS,
};
