//! One case's result, `DIR/cases/<index>.json`: the command's own JSON with the host and
//! the fidelity verdict stamped beside it, tied to the manifest by both hashes.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{write_json_atomic, CampaignError, HostStamp, Manifest};
use crate::results::fidelity::RunFidelity;

/// What the fidelity monitors said about a case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// `simulator` (deterministic: nothing to judge), `faithful` or `UNFAITHFUL`.
    pub label: String,
    pub faithful: bool,
    /// The monitors blamed the emulator (late or dropped packets, its CPU saturated): the
    /// case is worth running again at a lower scale. Otherwise (the host was busy) at the
    /// same scale.
    pub emulator_blamed: bool,
    /// The monitors' reasons, one per unfaithful run.
    pub reasons: Vec<String>,
}

impl Verdict {
    pub fn simulator() -> Self {
        Verdict {
            label: "simulator".into(),
            faithful: true,
            emulator_blamed: false,
            reasons: Vec::new(),
        }
    }

    /// The verdict of a testbed run's `fidelity` object; the emulator is blamed by the rule
    /// the runs rescale by ([`crate::emu::blame`]: never when the host was busy).
    pub fn of(f: &RunFidelity) -> Self {
        let bad: Vec<_> = f.runs.iter().filter(|r| !r.faithful).collect();
        Verdict {
            label: if f.faithful { "faithful" } else { "UNFAITHFUL" }.into(),
            faithful: f.faithful,
            emulator_blamed: !f.faithful && crate::emu::blame(&f.runs, &f.tolerances).lower_helps(),
            reasons: bad
                .iter()
                .map(|r| {
                    format!(
                        "{} seed {} at scale {}: {}",
                        r.scheme,
                        r.seed,
                        r.scale,
                        r.reasons.join("; ")
                    )
                })
                .collect(),
        }
    }
}

/// `DIR/cases/<index>.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseResult {
    pub manifest_hash: String,
    pub case_hash: String,
    pub index: usize,
    pub label: String,
    pub host: HostStamp,
    pub verdict: Verdict,
    /// When the case finished, Unix seconds.
    pub finished_unix_s: u64,
    pub wall_s: f64,
    /// The scale this case was run at instead of its rule's, after `merge --requeue` found
    /// the emulator at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescaled: Option<f64>,
    /// What the case's command produced (its results JSON).
    pub output: serde_json::Value,
}

/// What `DIR/cases/<index>.json` holds.
#[derive(Debug)]
pub enum Existing {
    Missing,
    /// A result of this very case.
    Done(Box<CaseResult>),
    /// Not a case result (truncated, edited, not JSON): why.
    Corrupt(String),
    /// The result of another manifest or another case: why.
    Foreign(String),
}

impl CaseResult {
    /// Reads and checks case `index`'s result against `manifest`.
    pub fn existing(dir: &Path, manifest: &Manifest, index: usize) -> Result<Existing, CampaignError> {
        let case = manifest.case(index)?;
        let path = Manifest::case_path(dir, index);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Missing),
            Err(e) => return Err(CampaignError::io(&path, e)),
        };
        let r: CaseResult = match serde_json::from_slice(&text) {
            Ok(r) => r,
            Err(e) => return Ok(Existing::Corrupt(format!("{}: not a case result: {e}", path.display()))),
        };
        if r.manifest_hash != manifest.hash {
            return Ok(Existing::Foreign(format!(
                "{}: written for another manifest ({}…, this one is {})",
                path.display(),
                &r.manifest_hash[..r.manifest_hash.len().min(12)],
                manifest.short_hash()
            )));
        }
        if r.case_hash != case.hash || r.index != index {
            return Ok(Existing::Foreign(format!(
                "{}: the result of another case (index {}, hash {}…)",
                path.display(),
                r.index,
                &r.case_hash[..r.case_hash.len().min(12)]
            )));
        }
        Ok(Existing::Done(Box::new(r)))
    }

    /// Writes this result to its place, atomically.
    pub fn write(&self, dir: &Path) -> Result<(), CampaignError> {
        let cases = dir.join("cases");
        std::fs::create_dir_all(&cases).map_err(|e| CampaignError::io(&cases, e))?;
        write_json_atomic(&Manifest::case_path(dir, self.index), self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::Case;

    fn manifest(label: &str) -> Manifest {
        let c = Case::new(label, "los", "sim", vec!["run".into(), "los".into()]);
        Manifest::new("paper", vec!["paper".into()], vec![c])
    }

    fn result(m: &Manifest) -> CaseResult {
        CaseResult {
            manifest_hash: m.hash.clone(),
            case_hash: m.cases[0].hash.clone(),
            index: 0,
            label: "los".into(),
            host: HostStamp::current(),
            verdict: Verdict::simulator(),
            finished_unix_s: 0,
            wall_s: 0.5,
            rescaled: None,
            output: serde_json::json!({"x": 1}),
        }
    }

    #[test]
    fn missing_done_corrupt_and_foreign_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let m = manifest("los");
        m.write(dir.path()).unwrap();
        assert!(matches!(
            CaseResult::existing(dir.path(), &m, 0).unwrap(),
            Existing::Missing
        ));
        result(&m).write(dir.path()).unwrap();
        assert!(matches!(
            CaseResult::existing(dir.path(), &m, 0).unwrap(),
            Existing::Done(_)
        ));
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("cases")).unwrap().collect();
        assert_eq!(names.len(), 1);

        let other = manifest("nlos");
        let e = CaseResult::existing(dir.path(), &other, 0).unwrap();
        assert!(
            matches!(&e, Existing::Foreign(why) if why.contains("another manifest")),
            "{e:?}"
        );

        std::fs::write(Manifest::case_path(dir.path(), 0), "{\"manifest_hash\": ").unwrap();
        let e = CaseResult::existing(dir.path(), &m, 0).unwrap();
        assert!(
            matches!(&e, Existing::Corrupt(why) if why.contains("not a case result")),
            "{e:?}"
        );
        assert!(CaseResult::existing(dir.path(), &m, 1).is_err());
    }
}
