//! Errors of the testbed.

/// What can go wrong while building or driving a testbed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not privileged: {0}")]
    NotPrivileged(String),
    #[error("network namespace: {0}")]
    Netns(String),
    #[error("command failed: {0}")]
    Command(String),
    #[error("emulator (rattan-core): {0}")]
    Emulator(String),
    #[error("invalid testbed spec: {0}")]
    Spec(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
