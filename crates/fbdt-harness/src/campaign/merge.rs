//! Which cases of a campaign are done, missing or unfaithful, and the list of cases to run
//! again (`merge --requeue`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{write_atomic, write_json_atomic, CampaignError, CaseResult, Existing, Manifest};

/// The state of a campaign folder.
#[derive(Debug, Default)]
pub struct Collected {
    /// Results of this manifest's cases, in index order.
    pub done: Vec<CaseResult>,
    /// Cases without a usable result, with why (absent, corrupt, another manifest's).
    pub missing: Vec<(usize, String)>,
    /// Done cases the fidelity monitors flagged.
    pub unfaithful: Vec<usize>,
}

impl Collected {
    pub fn of(dir: &Path, manifest: &Manifest) -> Result<Self, CampaignError> {
        let mut c = Collected::default();
        for case in &manifest.cases {
            match CaseResult::existing(dir, manifest, case.index)? {
                Existing::Done(r) => {
                    if !r.verdict.faithful {
                        c.unfaithful.push(case.index);
                    }
                    c.done.push(*r);
                }
                Existing::Missing => c.missing.push((case.index, "not run yet".into())),
                Existing::Corrupt(why) | Existing::Foreign(why) => c.missing.push((case.index, why)),
            }
        }
        Ok(c)
    }

    pub fn complete(&self) -> bool {
        self.missing.is_empty()
    }
}

/// One case to run again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Requeue {
    pub index: usize,
    pub why: String,
    /// Run it at this scale (the emulator was blamed at the last one); null: as planned.
    pub scale: Option<f64>,
}

impl Requeue {
    pub fn json_path(dir: &Path) -> PathBuf {
        dir.join("requeue.json")
    }

    pub fn txt_path(dir: &Path) -> PathBuf {
        dir.join("requeue.txt")
    }

    /// The cases to run again: every missing one, and every unfaithful one — at a lower
    /// scale (the last one divided by `lower_by`) when the monitors blamed the emulator.
    pub fn plan(c: &Collected, lower_by: f64) -> Vec<Requeue> {
        let mut v: Vec<Requeue> = c
            .missing
            .iter()
            .map(|(index, why)| Requeue {
                index: *index,
                why: why.clone(),
                scale: None,
            })
            .collect();
        for r in c.done.iter().filter(|r| !r.verdict.faithful) {
            let last = r.rescaled.or_else(|| r.output.get("scale").and_then(|s| s.as_f64()));
            let lower = last.filter(|_| r.verdict.emulator_blamed).map(|s| s / lower_by);
            v.push(Requeue {
                index: r.index,
                why: match lower {
                    Some(s) => format!("unfaithful, the emulator at fault: again at scale {s:.4}"),
                    // A COTAG point's scale is the grid's, the same at every point.
                    None if r.verdict.emulator_blamed => {
                        "unfaithful, the emulator at fault at the grid's fixed scale: again at it".into()
                    }
                    None => "unfaithful, not the emulator's fault: again at the same scale".into(),
                },
                scale: lower,
            });
        }
        v.sort_by_key(|r| r.index);
        v
    }

    /// Writes `requeue.txt` (one index a line) and `requeue.json`, and sets the unfaithful
    /// results aside as `cases/<index>.unfaithful.json` so that the next `case` runs them.
    pub fn write(dir: &Path, list: &[Requeue]) -> Result<(), CampaignError> {
        for r in list {
            let path = Manifest::case_path(dir, r.index);
            if r.why.starts_with("unfaithful") {
                let aside = dir.join("cases").join(format!("{}.unfaithful.json", r.index));
                std::fs::rename(&path, &aside).map_err(|e| CampaignError::io(&path, e))?;
            }
        }
        let txt: String = list.iter().map(|r| format!("{}\n", r.index)).collect();
        write_atomic(&Self::txt_path(dir), txt.as_bytes())?;
        write_json_atomic(&Self::json_path(dir), &list)
    }

    /// `requeue.json` of `dir` (empty when there is none).
    pub fn load(dir: &Path) -> Result<Vec<Requeue>, CampaignError> {
        let path = Self::json_path(dir);
        match std::fs::read(&path) {
            Ok(t) => serde_json::from_slice(&t).map_err(|source| CampaignError::Json { path, source }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(CampaignError::io(&path, e)),
        }
    }

    /// `requeue.txt` of `dir`: the indices to run again.
    pub fn load_indices(dir: &Path) -> Result<Vec<usize>, CampaignError> {
        let path = Self::txt_path(dir);
        let text = std::fs::read_to_string(&path).map_err(|e| CampaignError::io(&path, e))?;
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| {
                l.parse()
                    .map_err(|_| CampaignError::Invalid(format!("{}: `{l}` is not a case index", path.display())))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::{Case, HostStamp, Verdict};

    #[test]
    fn missing_and_unfaithful_cases_are_requeued_the_emulator_at_fault_lower() {
        let dir = tempfile::tempdir().unwrap();
        let cases: Vec<Case> = (0..4)
            .map(|i| Case::new(&format!("c{i}"), "los", "emu", vec!["run".into(), format!("c{i}")]))
            .collect();
        let m = Manifest::new("paper", vec!["paper".into()], cases);
        m.write(dir.path()).unwrap();
        let verdict = |faithful: bool, blamed: bool| Verdict {
            label: if faithful { "faithful" } else { "UNFAITHFUL" }.into(),
            faithful,
            emulator_blamed: blamed,
            reasons: Vec::new(),
        };
        for (i, v) in [
            (0, verdict(true, false)),
            (1, verdict(false, true)),
            (2, verdict(false, false)),
        ] {
            CaseResult {
                manifest_hash: m.hash.clone(),
                case_hash: m.cases[i].hash.clone(),
                index: i,
                label: m.cases[i].label.clone(),
                host: HostStamp::current(),
                verdict: v,
                finished_unix_s: 0,
                wall_s: 1.0,
                rescaled: None,
                output: serde_json::json!({"scale": 0.3}),
            }
            .write(dir.path())
            .unwrap();
        }
        let c = Collected::of(dir.path(), &m).unwrap();
        assert!(!c.complete());
        assert_eq!(c.unfaithful, [1, 2]);
        let list = Requeue::plan(&c, 1.5);
        assert_eq!(list.iter().map(|r| r.index).collect::<Vec<_>>(), [1, 2, 3]);
        assert!((list[0].scale.unwrap() - 0.2).abs() < 1e-12);
        assert_eq!((list[1].scale, list[2].scale), (None, None));
        Requeue::write(dir.path(), &list).unwrap();
        assert_eq!(Requeue::load_indices(dir.path()).unwrap(), [1, 2, 3]);
        assert_eq!(Requeue::load(dir.path()).unwrap(), list);
        // The unfaithful results are set aside: those cases are now missing.
        let c = Collected::of(dir.path(), &m).unwrap();
        assert_eq!(c.missing.iter().map(|m| m.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(dir.path().join("cases/1.unfaithful.json").exists());
    }
}
