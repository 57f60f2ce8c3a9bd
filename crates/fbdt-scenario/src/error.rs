use std::fmt;
use std::path::PathBuf;

/// Where a problem is: the file (or built-in / scenario name) and, when known, the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub file: String,
    pub line: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}", self.file, line),
            None => write!(f, "{}", self.file),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The TOML does not parse or does not fit the schema (unknown key, wrong type).
    #[error("{at}: {message}")]
    Syntax { at: Origin, message: String },
    /// The TOML fits the schema but a value is out of bounds or inconsistent.
    #[error("{at}: {message}")]
    Invalid { at: Origin, message: String },
    /// A mahimahi trace file is malformed.
    #[error("{at}: bad mahimahi trace: {message}")]
    Trace { at: Origin, message: String },
    #[error("unknown scenario `{name}`: not a built-in ({known}) and no such file")]
    Unknown { name: String, known: String },
    #[error("scale must be finite and > 0, got {0}")]
    Scale(f64),
}

impl ScenarioError {
    /// The line the problem is on, when known (tests and editors use it).
    pub fn line(&self) -> Option<usize> {
        match self {
            ScenarioError::Syntax { at, .. } | ScenarioError::Invalid { at, .. } | ScenarioError::Trace { at, .. } => {
                at.line
            }
            _ => None,
        }
    }
}
