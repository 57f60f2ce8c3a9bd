//! `fbdt-lab merge DIR [--requeue]`: the one-process command's report from the campaign's
//! case results — built by the same code — and the lists of missing and unfaithful cases.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use fbdt_harness::campaign::{CaseResult, Collected, HostStamp, Manifest, Requeue, Verdict};
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

fn output<T: serde::de::DeserializeOwned>(r: &CaseResult) -> Result<T> {
    serde_json::from_value(r.output.clone()).map_err(|e| {
        anyhow!(
            "case {} ({}): its output is not what the command writes: {e}",
            r.index,
            r.label
        )
    })
}

fn outputs<T: serde::de::DeserializeOwned>(done: &[CaseResult]) -> Result<Vec<T>> {
    done.iter().map(output).collect()
}

/// The points of COTAG cases (each a `sweep --cotag` over part of the grid), in order.
fn cotag_points<'a>(done: impl Iterator<Item = &'a CaseResult>) -> Result<Vec<fbdt_harness::cotag_grid::Point>> {
    let mut points = Vec::new();
    for r in done {
        points.extend(output::<fbdt_harness::cotag_grid::GridReport>(r)?.points);
    }
    Ok(points)
}

/// A paper campaign's results sorted into its sections by the command each case ran; it
/// started when its earliest case did.
pub(crate) fn paper_parts(manifest: &Manifest, done: &[CaseResult]) -> Result<crate::paper::CampaignParts> {
    let started = done
        .iter()
        .map(|r| r.finished_unix_s.saturating_sub(r.wall_s.ceil() as u64))
        .min()
        .map(|s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s));
    let mut parts = crate::paper::CampaignParts {
        reports: Vec::new(),
        workloads: Vec::new(),
        cotag_points: Vec::new(),
        wall_s: done.iter().map(|r| r.wall_s).sum(),
        workloads_wall_s: 0.0,
        cotag_wall_s: 0.0,
        started,
        cases: manifest.cases.len(),
        failures: Vec::new(),
    };
    for r in done {
        let (command, _) = crate::stored::parse_stored(&manifest.cases[r.index].command)?;
        match command {
            Stored::Run(_) => parts.reports.push(output(r)?),
            Stored::Paper(_) => {
                parts.workloads.push(output(r)?);
                parts.workloads_wall_s += r.wall_s;
            }
            Stored::Sweep(_) => {
                parts.cotag_points.extend(cotag_points(std::iter::once(r))?);
                parts.cotag_wall_s += r.wall_s;
            }
            Stored::Faults(_) => bail!("case {} ({}): a fault campaign in a paper campaign", r.index, r.label),
        }
    }
    Ok(parts)
}

/// Builds the command's report in `dir` from the complete campaign's results.
fn build(manifest: &Manifest, dir: &Path, done: &[CaseResult]) -> Result<()> {
    let (command, _testbed) = crate::stored::parse_stored(&manifest.command)?;
    match command {
        Stored::Paper(args) => {
            crate::paper::merge(&args, &crate::paper::planned(&args)?, dir, paper_parts(manifest, done)?)
        }
        Stored::Sweep(args) if args.cotag => {
            let grid = crate::sweep::cotag_grid(&args)?;
            let report = fbdt_harness::cotag_grid::GridReport::of(grid, cotag_points(done.iter())?);
            crate::sweep::finish_cotag(&report, Some(&dir.join("sweep.json")))
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

/// Lists the campaign's missing and unfaithful cases and writes DIR/campaign.json (every
/// done case's host and fidelity stamp).
pub(crate) fn stamp(dir: &Path, manifest: &Manifest, c: &Collected) -> Result<()> {
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
    Ok(())
}

pub fn merge(args: MergeArgs) -> Result<()> {
    let dir = &args.dir;
    let manifest = Manifest::load(dir).with_context(|| format!("campaign {}", dir.display()))?;
    let c = Collected::of(dir, &manifest)?;
    stamp(dir, &manifest, &c)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use fbdt_harness::cotag_grid::{GridReport, Point, PointScheme};

    #[derive(Parser)]
    struct Sweep {
        #[command(flatten)]
        a: crate::sweep::SweepArgs,
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    /// A point as a testbed run would report it, every scheme at `mbps` but COTAG ahead by
    /// the correlation (so the claims have something to judge).
    fn point(grid: &fbdt_harness::cotag_grid::Grid, (corr, per, lat): &(String, f64, f64), mbps: f64) -> Point {
        let bonus = match corr.as_str() {
            "neg" => 1.0,
            "zero" => 2.0,
            _ => 3.0,
        };
        Point {
            correlation: corr.clone(),
            per: *per,
            latency_ms: *lat,
            load_avg: Some(0.5),
            capacity_mbps: 100.0,
            schemes: grid
                .schemes()
                .into_iter()
                .map(|s| {
                    let v = if s.starts_with("cotag") { mbps + bonus } else { mbps };
                    PointScheme {
                        scheme: s,
                        faithful: true,
                        unfaithful_reasons: Vec::new(),
                        goodput_mbps: v,
                        burst_mbps: Some(v),
                        time_to_volume_s: Some(1.0),
                        link_utilisation: Default::default(),
                        tcp_retransmissions: Some(3),
                        coding_overhead: None,
                        cohorts_failed: None,
                        seed: 1,
                        runs: Vec::new(),
                    }
                })
                .collect(),
            fidelity: fbdt_harness::results::fidelity::RunFidelity::from_runs(
                &["ap1".into(), "ap2".into()],
                Vec::new(),
                grid.scale,
                &fbdt_emu::calibrate::ScaleSource::Given,
                Vec::new(),
            ),
        }
    }

    /// `plan sweep --cotag` makes one case per point, each a `sweep --cotag` whose grid is
    /// that point alone; the merge of their reports is the whole grid's report — the points
    /// in the one-process order, the claims judged over all of them.
    #[test]
    fn a_cotag_sweep_is_one_case_per_point_and_merges_to_the_whole_grid() {
        let command = words(
            "sweep --cotag --correlations neg,zero,pos --per 0,0.005 --latency 1,5 --periods 1 \
             --schemes dual-rr,mptcp --duration 3 --scale 0.05",
        );
        let args = Sweep::parse_from(std::iter::once("x".to_string()).chain(command[1..].iter().cloned())).a;
        let grid = crate::sweep::cotag_grid(&args).unwrap();
        let cells = fbdt_harness::cotag_grid::cells(&grid);
        assert_eq!(cells.len(), 12);
        let cases = super::super::plan::sweep_cases_for_tests(&args);
        assert_eq!(cases.len(), cells.len());
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest::new("sweep", command, cases);
        manifest.write(dir.path()).unwrap();
        let mut all = Vec::new();
        // Written out of order, as array tasks finish.
        for i in (0..cells.len()).rev() {
            let case = &manifest.cases[i];
            assert!(case.is_testbed() && case.label.starts_with("cotag "), "{case:?}");
            let (stored, _) = crate::stored::parse_stored(&case.command).unwrap();
            let Stored::Sweep(a) = stored else {
                panic!("{:?}", case.command)
            };
            let one = crate::sweep::cotag_grid(&a).unwrap();
            assert_eq!(
                serde_json::to_value(&one).unwrap(),
                serde_json::to_value(fbdt_harness::cotag_grid::one_point(&grid, &cells[i])).unwrap()
            );
            let p = point(&one, &cells[i], 10.0 + i as f64);
            CaseResult {
                manifest_hash: manifest.hash.clone(),
                case_hash: case.hash.clone(),
                index: i,
                label: case.label.clone(),
                host: HostStamp::current(),
                verdict: Verdict::of(&p.fidelity),
                finished_unix_s: 0,
                wall_s: 20.0,
                rescaled: None,
                output: serde_json::to_value(GridReport::of(one, vec![p.clone()])).unwrap(),
            }
            .write(dir.path())
            .unwrap();
            all.push(p);
        }
        all.reverse();
        merge(MergeArgs {
            dir: dir.path().to_path_buf(),
            requeue: false,
        })
        .unwrap();
        let text = std::fs::read_to_string(dir.path().join("sweep.json")).unwrap();
        let merged: serde_json::Value = serde_json::from_str(&text).unwrap();
        let whole = GridReport::of(grid, all);
        assert_eq!(merged, serde_json::to_value(&whole).unwrap());
        assert_eq!(whole.claims[2].verdict, fbdt_harness::cotag_grid::Verdict::Pass, "{:?}", whole.claims);
    }
}
