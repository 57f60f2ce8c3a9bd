//! The manifest: every case of a campaign, each with the exact `fbdt-lab` command line that
//! runs it and a content hash, and a hash of the whole (what a case's result is checked
//! against before it is trusted).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{sha256_hex, write_json_atomic, CampaignError};

/// Raised when the manifest's meaning changes; a manifest of another version is refused.
pub const VERSION: u32 = 1;

/// One case: one process, one JSON out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// Position in the manifest; the result is `cases/<index>.json`.
    pub index: usize,
    /// Short human name (`los`, `seed=3 fbdt`, `plans 10..20`).
    pub label: String,
    pub scenario: String,
    pub schemes: Vec<String>,
    /// The seed of the case's first run (null: the scenario's own).
    pub seed: Option<u64>,
    /// How the rate scale is chosen (`1`, `given 0.2`, `calibrated on the host`, …).
    pub scale_rule: String,
    /// `sim` or `emu`: an `emu` case needs a whole node.
    pub backend: String,
    /// The `fbdt-lab` arguments (without the program name) that run this case alone.
    pub command: Vec<String>,
    /// SHA-256 of everything above, hex.
    #[serde(default)]
    pub hash: String,
}

impl Case {
    /// A case of `scenario` on `backend` that `command` runs; schemes, seed and scale rule
    /// empty until set; index and hash set by [`Manifest::new`].
    pub fn new(label: &str, scenario: &str, backend: &str, command: Vec<String>) -> Self {
        Case {
            index: 0,
            label: label.into(),
            scenario: scenario.into(),
            schemes: Vec::new(),
            seed: None,
            scale_rule: String::new(),
            backend: backend.into(),
            command,
            hash: String::new(),
        }
    }

    fn content_hash(&self) -> String {
        let mut c = self.clone();
        c.hash = String::new();
        sha256_hex(&serde_json::to_vec(&c).expect("a case serialises"))
    }

    /// The testbed runs a case in real time on the whole machine.
    pub fn is_testbed(&self) -> bool {
        self.backend == "emu"
    }
}

/// `DIR/manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    /// The one-process command split: `paper`, `sweep` or `faults`.
    pub kind: String,
    /// Its arguments (without the program name): what the merge builds the report with.
    pub command: Vec<String>,
    pub cases: Vec<Case>,
    /// SHA-256 over version, kind, command and every case's hash, hex.
    #[serde(default)]
    pub hash: String,
    /// Who planned it (not hashed: planning again elsewhere gives the same campaign).
    #[serde(default)]
    pub planned_by: Vec<String>,
    #[serde(default)]
    pub git_revision: String,
}

#[derive(Serialize)]
struct Hashed<'a> {
    version: u32,
    kind: &'a str,
    command: &'a [String],
    cases: Vec<&'a str>,
}

impl Manifest {
    /// A manifest of `cases` (their index and hashes are set here).
    pub fn new(kind: &str, command: Vec<String>, mut cases: Vec<Case>) -> Self {
        for (i, c) in cases.iter_mut().enumerate() {
            c.index = i;
            c.hash = c.content_hash();
        }
        let mut m = Manifest {
            version: VERSION,
            kind: kind.to_string(),
            command,
            cases,
            hash: String::new(),
            planned_by: std::env::args().collect(),
            git_revision: env!("FBDT_GIT_REV").to_string(),
        };
        m.hash = m.content_hash();
        m
    }

    fn content_hash(&self) -> String {
        let h = Hashed {
            version: self.version,
            kind: &self.kind,
            command: &self.command,
            cases: self.cases.iter().map(|c| c.hash.as_str()).collect(),
        };
        sha256_hex(&serde_json::to_vec(&h).expect("a manifest serialises"))
    }

    /// The first 12 hex digits of the hash: enough to tell campaigns apart in a message.
    pub fn short_hash(&self) -> &str {
        &self.hash[..self.hash.len().min(12)]
    }

    pub fn path(dir: &Path) -> PathBuf {
        dir.join("manifest.json")
    }

    /// Where case `index`'s result lives.
    pub fn case_path(dir: &Path, index: usize) -> PathBuf {
        dir.join("cases").join(format!("{index}.json"))
    }

    pub fn case(&self, index: usize) -> Result<&Case, CampaignError> {
        self.cases.get(index).ok_or(CampaignError::NoSuchCase {
            index,
            count: self.cases.len(),
        })
    }

    /// Writes `DIR/manifest.json` (and `DIR/cases/`). Planning the same campaign again is a
    /// no-op; a folder holding another campaign's manifest is refused.
    pub fn write(&self, dir: &Path) -> Result<(), CampaignError> {
        let path = Self::path(dir);
        if path.exists() {
            match Self::load(dir) {
                Ok(old) if old.hash == self.hash => {}
                Ok(old) => return Err(CampaignError::Occupied(dir.to_path_buf(), old.short_hash().to_string())),
                Err(_) => return Err(CampaignError::Occupied(dir.to_path_buf(), "unreadable".into())),
            }
        }
        let cases = dir.join("cases");
        std::fs::create_dir_all(&cases).map_err(|e| CampaignError::io(&cases, e))?;
        write_json_atomic(&path, self)
    }

    /// Reads `DIR/manifest.json` and checks every hash.
    pub fn load(dir: &Path) -> Result<Self, CampaignError> {
        let path = Self::path(dir);
        let text = std::fs::read_to_string(&path).map_err(|e| CampaignError::io(&path, e))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|source| CampaignError::Json {
            path: path.clone(),
            source,
        })?;
        if m.version != VERSION {
            return Err(CampaignError::Invalid(format!(
                "{}: manifest version {} (this fbdt-lab reads {VERSION}); plan the campaign again",
                path.display(),
                m.version
            )));
        }
        for (i, c) in m.cases.iter().enumerate() {
            if c.index != i || c.hash != c.content_hash() {
                return Err(CampaignError::Tampered {
                    path,
                    what: format!("case {i}'s"),
                });
            }
        }
        if m.hash != m.content_hash() {
            return Err(CampaignError::Tampered {
                path,
                what: "the manifest's".into(),
            });
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(label: &str) -> Case {
        Case::new(label, "los", "sim", vec!["run".into(), "los".into()])
    }

    #[test]
    fn hashes_follow_the_content() {
        let a = Manifest::new("sweep", vec!["sweep".into()], vec![case("a"), case("b")]);
        let b = Manifest::new("sweep", vec!["sweep".into()], vec![case("a"), case("b")]);
        assert_eq!(a.hash, b.hash);
        assert_eq!(a.cases[1].index, 1);
        assert_ne!(a.cases[0].hash, a.cases[1].hash);
        let c = Manifest::new("sweep", vec!["sweep".into()], vec![case("a"), case("c")]);
        assert_ne!(a.hash, c.hash);
        assert_eq!(a.cases[0].hash, c.cases[0].hash);
    }

    #[test]
    fn written_read_back_edited_refused() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::new("sweep", vec!["sweep".into()], vec![case("a")]);
        m.write(dir.path()).unwrap();
        assert_eq!(Manifest::load(dir.path()).unwrap(), m);
        // The same campaign again is fine; another one is refused.
        m.write(dir.path()).unwrap();
        let other = Manifest::new("sweep", vec!["sweep".into()], vec![case("z")]);
        let e = other.write(dir.path()).unwrap_err().to_string();
        assert!(e.contains("another campaign"), "{e}");
        let path = Manifest::path(dir.path());
        let text = std::fs::read_to_string(&path).unwrap().replace("\"a\"", "\"x\"");
        std::fs::write(&path, text).unwrap();
        let e = Manifest::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("does not match"), "{e}");
        assert!(Manifest::load(&dir.path().join("none")).is_err());
    }
}
