//! `fbdt-lab merge DIR [--requeue]`: the one-process command's report from the campaign's
//! case results — built by the same code — and the lists of missing and unfaithful cases.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use fbdt_harness::campaign::{CaseResult, Collected, HostStamp, Manifest, Requeue, Verdict};
use fbdt_harness::results::RunReport;
use serde::Serialize;

use crate::stored::Stored;

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The campaign folder.
    pub dir: PathBuf,
    /// Also write DIR/requeue.txt (the indices to run again: missing and unfaithful cases)
    /// and DIR/requeue.json (why; testbed cases the monitors found the emulator at fault
    /// in run again at a lower scale). Unfaithful results are kept as cases/I.unfaithful.json.
    #[arg(long)]
    pub requeue: bool,
}

/// One case in DIR/campaign.json.
#[derive(Serialize)]
struct Stamp<'a> {
    index: usize,
    label: &'a str,
    host: &'a HostStamp,
    verdict: &'a Verdict,
    wall_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    rescaled: Option<f64>,
}

/// DIR/campaign.json: every case's host and fidelity stamp beside the merged report.
#[derive(Serialize)]
struct CampaignJson<'a> {
    kind: &'a str,
    manifest_hash: &'a str,
    cases: usize,
    complete: bool,
    missing: Vec<usize>,
    unfaithful: Vec<usize>,
    stamps: Vec<Stamp<'a>>,
}

fn outputs<T: serde::de::DeserializeOwned>(done: &[CaseResult]) -> Result<Vec<T>> {
    done.iter()
        .map(|r| {
            serde_json::from_value(r.output.clone()).map_err(|e| {
                anyhow!(
                    "case {} ({}): its output is not what the command writes: {e}",
                    r.index,
                    r.label
                )
            })
        })
        .collect()
}

/// Builds the command's report in `dir` from the complete campaign's results.
fn build(manifest: &Manifest, dir: &Path, done: &[CaseResult]) -> Result<()> {
    let (command, _testbed) = crate::stored::parse_stored(&manifest.command)?;
    match command {
        Stored::Paper(args) => {
            let reports: Vec<RunReport> = outputs(done)?;
            let wall_s = done.iter().map(|r| r.wall_s).sum();
            crate::paper::merge(&args, dir, reports, wall_s)
        }
        Stored::Sweep(args) => {
            let parts: Vec<crate::sweep::SweepReport> = outputs(done)?;
            let mut report = parts.first().cloned().ok_or_else(|| anyhow!("no cases"))?;
            report.points = parts.into_iter().flat_map(|p| p.points).collect();
            report.jobs = fbdt_harness::parallel::jobs(args.jobs)?;
            crate::sweep::finish(&report, Some(&dir.join("sweep.json")))
        }
        Stored::Faults(args) => {
            let parts: Vec<fbdt_harness::faults::Report> = outputs(done)?;
            let mut report = parts.first().cloned().ok_or_else(|| anyhow!("no cases"))?;
            report.runs = parts.into_iter().flat_map(|p| p.runs).collect();
            report.seed = args.seed;
            report.summarise();
            crate::faults::finish(&report, Some(&dir.join("faults.json")), args.plot.as_deref())?;
            eprintln!("wrote {}", dir.join("faults.json").display());
            Ok(())
        }
        _ => bail!("the manifest's command is not paper, sweep or faults"),
    }
}

pub fn merge(args: MergeArgs) -> Result<()> {
    let dir = &args.dir;
    let manifest = Manifest::load(dir).with_context(|| format!("campaign {}", dir.display()))?;
    let c = Collected::of(dir, &manifest)?;
    eprintln!(
        "campaign {} ({}, manifest {}): {} cases, {} done, {} missing, {} unfaithful",
        dir.display(),
        manifest.kind,
        manifest.short_hash(),
        manifest.cases.len(),
        c.done.len(),
        c.missing.len(),
        c.unfaithful.len()
    );
    for (i, why) in &c.missing {
        eprintln!("  missing {i} ({}): {why}", manifest.cases[*i].label);
    }
    for r in c.done.iter().filter(|r| !r.verdict.faithful) {
        eprintln!(
            "  UNFAITHFUL {} ({}): {}",
            r.index,
            r.label,
            r.verdict.reasons.join(" | ")
        );
    }
    let stamps = CampaignJson {
        kind: &manifest.kind,
        manifest_hash: &manifest.hash,
        cases: manifest.cases.len(),
        complete: c.complete(),
        missing: c.missing.iter().map(|m| m.0).collect(),
        unfaithful: c.unfaithful.clone(),
        stamps: c
            .done
            .iter()
            .map(|r| Stamp {
                index: r.index,
                label: &r.label,
                host: &r.host,
                verdict: &r.verdict,
                wall_s: r.wall_s,
                rescaled: r.rescaled,
            })
            .collect(),
    };
    fbdt_harness::campaign::write_json_atomic(&dir.join("campaign.json"), &stamps)?;
    if c.complete() {
        build(&manifest, dir, &c.done)?;
    }
    if args.requeue {
        let list = Requeue::plan(&c, fbdt_harness::emu::AUTO_SCALE_STEP);
        Requeue::write(dir, &list)?;
        eprintln!(
            "wrote {}: {} cases to run again{}",
            Requeue::txt_path(dir).display(),
            list.len(),
            if list.is_empty() {
                String::new()
            } else {
                format!(
                    " (`fbdt-lab case {0} --index {1}` or `fbdt-lab slurm submit {0} --requeue`)",
                    dir.display(),
                    list.iter().map(|r| r.index.to_string()).collect::<Vec<_>>().join(",")
                )
            }
        );
    }
    if !c.complete() {
        bail!(
            "the campaign is incomplete: {} of {} cases missing ({}); no report written",
            c.missing.len(),
            manifest.cases.len(),
            c.missing.iter().map(|m| m.0.to_string()).collect::<Vec<_>>().join(",")
        );
    }
    Ok(())
}
