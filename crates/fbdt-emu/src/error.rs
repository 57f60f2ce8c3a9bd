//! Errors of the testbed. Each variant carries what it is about (a namespace, a file, a
//! path, a command) as fields, so callers can match on it rather than parse a message.

use std::path::PathBuf;

/// What can go wrong while building or driving a testbed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not root / no CAP_NET_ADMIN / no `ip`.
    #[error("not privileged: {reason}")]
    NotPrivileged { reason: String },
    /// A namespace operation (open, setns, create) failed.
    #[error("network namespace {namespace}: {op}: {detail}")]
    Netns {
        namespace: String,
        op: &'static str,
        detail: String,
    },
    /// A namespace of that name is already there (another testbed, or a leftover).
    #[error("network namespace {0} already exists")]
    NamespaceExists(String),
    /// An external command could not start or exited non-zero.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        /// Exit status, or why it did not run.
        status: String,
        stderr: String,
    },
    /// A file (sysctl, /proc, the calibration cache) could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A socket operation of the probes (`perf`).
    #[error("socket {op}: {source}")]
    Socket {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// rattan-core refused something (its errors are only `Display`).
    #[error("emulator (rattan-core): {0}")]
    Emulator(String),
    /// A thread of the testbed could not be spawned.
    #[error("spawn thread {name}: {source}")]
    Thread {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// One path of the spec is unusable.
    #[error("invalid testbed spec: path {path:?}: {reason}")]
    Path { path: String, reason: String },
    /// The spec as a whole is unusable.
    #[error("invalid testbed spec: {0}")]
    Spec(String),
    /// `index` is not a path of this testbed.
    #[error("no path {index} (the testbed has {count})")]
    NoPath { index: usize, count: usize },
    /// The congestion control is not compiled into / loaded in this kernel.
    #[error("congestion control {cc:?} not available in this kernel (have: {available}); try `modprobe tcp_{cc}`")]
    CongestionControl { cc: String, available: String },
    /// A scale that is not a positive finite number.
    #[error("scale must be > 0 and finite, got {0}")]
    Scale(f64),
    /// The scenario could not be loaded or scheduled.
    #[error("scenario {name}: {source}")]
    Scenario {
        name: String,
        #[source]
        source: fbdt_scenario::ScenarioError,
    },
    /// The calibration found no scale at which the emulator is faithful.
    #[error("calibration of {scenario}: not faithful even at scale {lowest} ({why})")]
    NoFaithfulScale { scenario: String, lowest: f64, why: String },
    #[error(
        "cannot calibrate while other programs use {cores:.2} cores of this host (limit {limit:.2}): \
         a scale measured now would be the busy host's; run again on a quiet host"
    )]
    HostBusy { cores: f64, limit: f64 },
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    pub(crate) fn file(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::File { path, source }
    }

    pub(crate) fn path(path: &str, reason: impl Into<String>) -> Error {
        Error::Path {
            path: path.to_string(),
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
