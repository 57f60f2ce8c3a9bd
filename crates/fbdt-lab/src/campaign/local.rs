//! `fbdt-lab paper` run as its own campaign: the manifest `plan` would write goes into the
//! command's output folder, whose `cases/` then keeps each case's result as it finishes, so
//! an interrupted run can be resumed and any case can be looked at (or merged) alone.

use std::path::Path;
use std::time::{Instant, SystemTime};

use anyhow::{bail, Result};
use fbdt_harness::campaign::{CaseResult, Collected, Existing, Manifest, Requeue};

use crate::paper::PaperArgs;

/// What an earlier campaign left in `dir` besides its report.
fn remove_earlier(dir: &Path) -> Result<()> {
    let cases = dir.join("cases");
    if cases.is_dir() {
        std::fs::remove_dir_all(&cases).map_err(|e| anyhow::anyhow!("removing {}: {e}", cases.display()))?;
    }
    for f in [
        Manifest::path(dir),
        dir.join("campaign.json"),
        Requeue::txt_path(dir),
        Requeue::json_path(dir),
    ] {
        match std::fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("removing {}: {e}", f.display()),
        }
    }
    Ok(())
}

/// Makes `dir` the home of `manifest`. Without `resume` whatever an earlier campaign left
/// there goes first (a new run measures everything again); with it the folder must hold
/// this very campaign, whose finished cases are then kept, or none.
pub(crate) fn start(dir: &Path, manifest: Manifest, resume: bool) -> Result<Manifest> {
    let earlier = Manifest::path(dir).exists().then(|| Manifest::load(dir));
    match (resume, earlier) {
        (true, Some(Ok(old))) if old.hash == manifest.hash => {
            eprintln!(
                "--resume: continuing the campaign in {} (manifest {})",
                dir.display(),
                old.short_hash()
            );
        }
        (true, Some(Ok(old))) => bail!(
            "--resume: {} holds another campaign (manifest {}, planned by `{}`); this command \
             line or this build's plan differs — run without --resume to start over",
            dir.display(),
            old.short_hash(),
            old.planned_by.join(" ")
        ),
        (true, Some(Err(e))) => bail!(
            "--resume: {} holds a campaign this build cannot read ({e}); run without --resume to start over",
            dir.display()
        ),
        (true, None) => eprintln!("--resume: nothing to resume in {}; running every case", dir.display()),
        (false, _) => remove_earlier(dir)?,
    }
    manifest.write(dir)?;
    Ok(manifest)
}

/// `fbdt-lab paper`: the suite as the campaign `plan paper` writes, planned into --out and run here case by
/// case (one code path with a cluster's run: the same cases, the same merge). A failed case
/// is reported in the summary and the page, and the command fails at the end: one broken
/// scenario must not throw away the others' minutes.
pub fn paper(args: PaperArgs, gso_units: Option<u32>) -> Result<()> {
    let testbed = crate::stored::testbed_options(gso_units);
    let Some((out, planned)) = crate::paper::prepare(&args, &testbed)? else {
        return Ok(());
    };
    let (args, out, plan, backend) = (&args, out.as_path(), &planned.plan, planned.backend);
    let started_at = SystemTime::now();
    let started = Instant::now();
    let (cases, command) = super::paper_campaign(args, &planned, gso_units)?;
    let manifest = start(out, Manifest::new("paper", command, cases), args.resume)?;
    let repeat = args.repeat as usize;
    let total_runs: usize = plan.iter().map(|p| p.schemes.len() * repeat).sum();
    // Work = traffic seconds; the ETA scales the wall time per traffic second so far.
    let total_work: f64 = plan
        .iter()
        .map(|p| p.duration_s * (p.schemes.len() * repeat) as f64)
        .sum();
    let is_cotag = |c: &fbdt_harness::campaign::Case| c.command.iter().any(|a| a == "--cotag");
    let cotag_cases = manifest.cases.iter().filter(|c| is_cotag(c)).count();
    eprintln!(
        "fbdt-lab paper: {} backend, {} scenarios, {total_runs} runs, {:.0} s of traffic{} → {}",
        crate::paper::backend_name(backend),
        plan.len(),
        total_work,
        match (args.skip_workloads, cotag_cases) {
            (true, 0) => String::new(),
            (false, 0) => ", then the workloads".into(),
            (true, n) => format!(", then {n} COTAG points"),
            (false, n) => format!(", then the workloads and {n} COTAG points"),
        },
        out.display()
    );
    let mut failures = Vec::new();
    // Work resumed from an earlier run took no time here: the ETA leaves it out.
    let (mut done_runs, mut done_work, mut resumed_work, mut cotag_seen) = (0usize, 0.0, 0.0, 0);
    for (i, case) in manifest.cases.iter().enumerate() {
        let scenario = plan.get(i);
        let head = match scenario {
            Some(p) => {
                let elapsed = started.elapsed().as_secs_f64();
                let eta = if done_work > resumed_work {
                    crate::paper::mmss(elapsed / (done_work - resumed_work) * (total_work - done_work))
                } else {
                    "unknown".into()
                };
                format!(
                    "[{}/{total_runs}] {} {} ({:.0} s each) — elapsed {}, ETA {eta}",
                    done_runs + 1,
                    p.name,
                    p.schemes.join(" "),
                    p.duration_s,
                    crate::paper::mmss(elapsed)
                )
            }
            None if is_cotag(case) => {
                cotag_seen += 1;
                format!("[cotag {cotag_seen}/{cotag_cases}] COTAG (paper 003), ten-flow bursts: {}", case.label)
            }
            None => case.label.clone(),
        };
        let work = scenario.map_or(0.0, |p| p.duration_s * (p.schemes.len() * repeat) as f64);
        done_runs += scenario.map_or(0, |p| p.schemes.len() * repeat);
        done_work += work;
        if let Existing::Done(_) = CaseResult::existing(out, &manifest, i)? {
            eprintln!("{head}: done in the run --resume continues, skipped");
            resumed_work += work;
            continue;
        }
        eprintln!("{head}");
        match super::run_one(out, &manifest, &[], i) {
            // Each scenario's JSON as soon as it is measured, as `run --json` writes it.
            Ok(r) if scenario.is_some() => {
                fbdt_harness::results::write_json(&out.join(format!("{}.json", case.scenario)), &r.output)?
            }
            Ok(_) => {}
            Err(e) => {
                eprintln!("error: {}: {e:#}", case.label);
                failures.push(crate::paper::summary::Failure {
                    scenario: case.label.clone(),
                    error: format!("{e:#}"),
                });
            }
        }
    }
    let collected = Collected::of(out, &manifest)?;
    super::stamp(out, &manifest, &collected)?;
    let mut parts = super::paper_parts(&manifest, &collected.done)?;
    parts.started = Some(started_at);
    parts.wall_s = started.elapsed().as_secs_f64();
    parts.failures = failures;
    crate::paper::merge(args, &planned, out, parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fbdt_harness::campaign::Case;

    fn manifest(values: &str) -> Manifest {
        let command: Vec<String> = ["sweep", "los", "--values", values].map(String::from).to_vec();
        Manifest::new("sweep", command.clone(), vec![Case::new("a", "los", "sim", command)])
    }

    #[test]
    fn a_new_run_clears_the_folder_and_resume_keeps_only_its_own_campaign() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        start(d, manifest("1"), false).unwrap();
        std::fs::write(Manifest::case_path(d, 0), "{}").unwrap();
        std::fs::write(d.join("campaign.json"), "{}").unwrap();
        std::fs::write(d.join("report.html"), "kept").unwrap();

        // Resuming the same campaign keeps its results.
        start(d, manifest("1"), true).unwrap();
        assert!(Manifest::case_path(d, 0).exists());
        // Resuming into another campaign's folder is refused and changes nothing.
        let e = start(d, manifest("2"), true).unwrap_err().to_string();
        assert!(e.contains("holds another campaign"), "{e}");
        assert!(Manifest::case_path(d, 0).exists());
        // A new run, of this campaign or another, starts from an empty folder of results.
        start(d, manifest("2"), false).unwrap();
        assert!(!Manifest::case_path(d, 0).exists() && !d.join("campaign.json").exists());
        assert_eq!(Manifest::load(d).unwrap().hash, manifest("2").hash);
        assert!(d.join("report.html").exists(), "the report is the merge's to replace");
        // Nothing to resume: every case runs.
        let fresh = d.join("fresh");
        start(&fresh, manifest("1"), true).unwrap();
        assert!(Manifest::path(&fresh).exists());
    }
}
