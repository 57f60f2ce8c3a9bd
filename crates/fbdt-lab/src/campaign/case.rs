//! `fbdt-lab case DIR [--index I]`: runs cases of a campaign, each through the very code its
//! command runs from a shell, and writes its result (stamped with the host and the
//! fidelity verdict) atomically; a case already done is skipped.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{bail, Context, Result};
use clap::Args;
use fbdt_harness::campaign::{CaseResult, Existing, HostStamp, Manifest, Requeue};

#[derive(Args, Debug)]
pub struct CaseArgs {
    /// The campaign folder (written by `fbdt-lab plan`).
    pub dir: PathBuf,
    /// The cases to run: an index, a range or a list (3, 0-9, 1,4,7-9); default: every case.
    #[arg(long)]
    pub index: Option<String>,
}

/// `command` with its `--scale` replaced by `scale`.
fn with_scale(command: &[String], scale: f64) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = command.iter();
    while let Some(a) = it.next() {
        if a == "--scale" {
            it.next();
        } else if !a.starts_with("--scale=") {
            out.push(a.clone());
        }
    }
    out.extend(["--scale".to_string(), format!("{scale}")]);
    out
}

/// Runs case `i` (at the scale `requeue` gives it, if any) and writes its result into `dir`.
pub(crate) fn run_one(dir: &Path, manifest: &Manifest, requeue: &[Requeue], i: usize) -> Result<CaseResult> {
    let case = manifest.case(i)?;
    let rescaled = requeue.iter().find(|r| r.index == i).and_then(|r| r.scale);
    let command = match rescaled {
        Some(s) if case.command.iter().any(|a| a == "run") => {
            eprintln!("case {i} ({}): the emulator was at fault last time: at scale {s} now", case.label);
            with_scale(&case.command, s)
        }
        _ => case.command.clone(),
    };
    let started = Instant::now();
    let out = crate::stored::run_case_command(&command)?;
    let mut host = HostStamp::current();
    host.testbed_reference = out.testbed_reference;
    let result = CaseResult {
        manifest_hash: manifest.hash.clone(),
        case_hash: case.hash.clone(),
        index: i,
        label: case.label.clone(),
        host,
        verdict: out.verdict,
        finished_unix_s: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        wall_s: started.elapsed().as_secs_f64(),
        rescaled,
        output: out.json,
    };
    result.write(dir)?;
    Ok(result)
}

pub fn case(args: CaseArgs) -> Result<()> {
    let dir = &args.dir;
    let manifest = Manifest::load(dir).with_context(|| format!("campaign {}", dir.display()))?;
    let indices = match &args.index {
        Some(text) => super::parse_indices(text)?,
        None => (0..manifest.cases.len()).collect(),
    };
    for &i in &indices {
        manifest.case(i)?;
    }
    let requeue = Requeue::load(dir)?;
    let mut failed = Vec::new();
    for (k, &i) in indices.iter().enumerate() {
        let case = &manifest.cases[i];
        let head = format!("[{}/{}] case {i} ({})", k + 1, indices.len(), case.label);
        match CaseResult::existing(dir, &manifest, i)? {
            Existing::Done(_) => {
                eprintln!("{head}: done already, skipped");
                continue;
            }
            Existing::Corrupt(why) | Existing::Foreign(why) => {
                eprintln!("{head}: refusing {why}; running the case again");
            }
            Existing::Missing => eprintln!("{head}: {}", case.command.join(" ")),
        }
        match run_one(dir, &manifest, &requeue, i) {
            Ok(result) => eprintln!(
                "{head}: {} in {:.1} s → {}",
                result.verdict.label,
                result.wall_s,
                Manifest::case_path(dir, i).display()
            ),
            Err(e) => {
                eprintln!("error: case {i} ({}): {e:#}", case.label);
                failed.push(i);
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} cases failed: {}",
            failed.len(),
            indices.len(),
            failed.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rescaled_command_has_one_scale() {
        let c: Vec<String> = ["run", "los", "--scale", "0.3", "--auto-scale"]
            .map(String::from)
            .to_vec();
        assert_eq!(with_scale(&c, 0.2), ["run", "los", "--auto-scale", "--scale", "0.2"]);
        let c: Vec<String> = ["run", "los"].map(String::from).to_vec();
        assert_eq!(with_scale(&c, 0.2), ["run", "los", "--scale", "0.2"]);
    }
}
