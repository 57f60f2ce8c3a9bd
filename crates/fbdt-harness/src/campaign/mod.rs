//! A campaign: every case of a lab command written down as a manifest, each case run in a
//! process of its own (locally or as one task of a Slurm job array), and the cases' JSON
//! merged into the report the one-process command writes (docs/campaigns.md).
//!
//! - [`manifest`]: the cases (scenario, schemes, seed, scale rule, backend, the exact
//!   command line) and their content hashes;
//! - [`host`]: where a case ran, stamped into its result;
//! - [`case`]: one case's result file — written atomically, checked against the manifest
//!   before it is trusted;
//! - [`merge`]: which cases are done, missing or unfaithful, and the list to run again.
//!
//! Nothing here runs a backend: the `fbdt-lab` binary runs a case's command through the
//! same code as the one-process command and hands its JSON to [`case::CaseResult`].

pub mod case;
pub mod host;
pub mod manifest;
pub mod merge;

use std::path::PathBuf;

pub use case::{CaseResult, Existing, Verdict};
pub use host::HostStamp;
pub use manifest::{Case, Manifest};
pub use merge::{Collected, Requeue};

/// What reading or writing a campaign folder can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a campaign file: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The manifest's hashes do not match its content (edited by hand, or truncated).
    #[error("{path}: {what} hash does not match its content (the manifest was edited; plan the campaign again)")]
    Tampered { path: PathBuf, what: String },
    #[error("{0} already holds another campaign (manifest {1}); plan into an empty folder or remove it")]
    Occupied(PathBuf, String),
    #[error("case {index} is not in this campaign (it has {count} cases: 0..{count})")]
    NoSuchCase { index: usize, count: usize },
    #[error("{0}")]
    Invalid(String),
}

impl CampaignError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        CampaignError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// SHA-256 of `bytes`, hex.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `value` as pretty JSON to `path` through a temporary file in the same folder and
/// a rename: a reader (a merge, another task) sees the old file or the whole new one.
pub fn write_json_atomic(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), CampaignError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| CampaignError::Json {
        path: path.to_path_buf(),
        source,
    })? + "\n";
    write_atomic(path, text.as_bytes())
}

/// [`write_json_atomic`] for bytes.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), CampaignError> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    // Unique per process and call: two tasks writing the same case never share a temp file.
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{serial}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| CampaignError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CampaignError::io(path, e)
    })
}
