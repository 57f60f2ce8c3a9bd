//! Why a simulated run failed.

use thiserror::Error;

use crate::endpoint::{EndpointError, Side};

#[derive(Debug, Error)]
pub enum SimError {
    #[error("{side:?} endpoint at t={t:.6}s: {source}")]
    Endpoint {
        side: Side,
        t: f64,
        #[source]
        source: EndpointError,
    },
    #[error("livelock: more than {0} steps at t={1:.6}s without time advancing")]
    Livelock(u32, f64),
    #[error("scheme uses path {0}, the schedule has {1}")]
    NoSuchPath(usize, usize),
    #[error("invalid configuration: {0}")]
    Config(#[source] EndpointError),
    /// What the run asks for needs the TCP model (`--model tcp`) or a multipath scheme.
    #[error("{0}")]
    Unsupported(String),
}
