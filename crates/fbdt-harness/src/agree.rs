//! `fbdt-lab agree` (its arguments and its work; fbdt-lab only mounts it): do the
//! simulator's TCP-level model and the emulated testbed agree? For
//! every scenario of a testbed suite (`paper --backend emu` output), the simulator runs the
//! same scenario as run there (its duration, its scale, the testbed's seeds), and the table
//! compares FBDT / Σ standalone and FBDT / MPTCP — the testbed's kernel MPTCP against each
//! simulated MPTCP scheme — and whether the testbed's order of schemes holds (issue 19,
//! docs/reproducing.md "Do the backends agree?").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use fbdt_sim::PathModel;
use indicatif::ProgressStyle;
use serde::Serialize;

use crate::results::RunReport;
use crate::scheme;

/// A ratio agrees when within this share of the testbed's; so does an order: schemes the
/// testbed separates by more than this keep their order in the simulator.
const TOLERANCE: f64 = 0.10;

#[derive(Args, Debug)]
pub struct AgreeArgs {
    /// A testbed suite's output directory (`sudo fbdt-lab paper --out DIR`): its
    /// per-scenario JSON files are read; other files are skipped.
    #[arg(long)]
    pub testbed: PathBuf,
    /// The simulated MPTCP schemes compared with the testbed's kernel MPTCP.
    #[arg(long, value_delimiter = ',', default_value = "mp:kernel,mp:minrtt")]
    pub mptcp: Vec<String>,
    /// Also run at scale 1 (the testbed ran at the scale it could emulate faithfully).
    #[arg(long)]
    pub full_scale: bool,
    /// Seeds per scheme, from the scenario's: goodputs are their mean, as the testbed's
    /// are the mean of its repetitions (default: as many as the testbed ran).
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Runs at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Write the table as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One scenario of the testbed suite, as the comparison needs it.
#[derive(Debug)]
struct Testbed {
    report: RunReport,
    paths: Vec<String>,
    /// Mean goodput of each scheme over its faithful runs (all runs if none was).
    goodput: BTreeMap<String, f64>,
    seeds: u64,
}

/// A scheme's mean goodput on the testbed, leaving out the runs its fidelity monitors
/// flagged — unless every run was flagged, then all of them (the row says so).
fn testbed_goodput(report: &RunReport) -> (BTreeMap<String, f64>, Vec<String>) {
    let faithful = |scheme: &str, seed: u64| {
        report.fidelity.as_ref().is_none_or(|f| {
            f.runs
                .iter()
                .find(|r| r.scheme == scheme && r.seed == seed)
                .is_none_or(|r| r.faithful)
        })
    };
    let mut out = BTreeMap::new();
    let mut all_flagged = Vec::new();
    for r in &report.results {
        let runs: Vec<(u64, f64)> = if r.runs.is_empty() {
            vec![(report.seed, r.goodput_mbps)]
        } else {
            r.runs.iter().map(|x| (x.seed, x.goodput_mbps)).collect()
        };
        let (mean, flagged) = mean_of_faithful(&runs, |seed| faithful(&r.scheme, seed));
        if flagged {
            all_flagged.push(r.scheme.clone());
        }
        out.insert(r.scheme.clone(), mean);
    }
    (out, all_flagged)
}

/// The mean goodput of the `(seed, goodput)` runs that were faithful, or of all of them
/// when none was (then `true`).
fn mean_of_faithful(runs: &[(u64, f64)], faithful: impl Fn(u64) -> bool) -> (f64, bool) {
    let kept: Vec<f64> = runs.iter().filter(|(s, _)| faithful(*s)).map(|x| x.1).collect();
    let (used, flagged) = if kept.is_empty() {
        (runs.iter().map(|x| x.1).collect(), true)
    } else {
        (kept, false)
    };
    (used.iter().sum::<f64>() / used.len().max(1) as f64, flagged)
}

fn read_testbed(dir: &Path) -> Result<(Vec<Testbed>, Vec<String>)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
        let Ok(report) = serde_json::from_slice::<RunReport>(&bytes) else {
            continue; // summary.json and other files: not one scenario's results
        };
        if report.backend != "emu" {
            notes.push(format!(
                "{}: backend {}, not the testbed: skipped",
                f.display(),
                report.backend
            ));
            continue;
        }
        let paths: Vec<String> = report.scenario_def.paths.iter().map(|p| p.name.clone()).collect();
        let (goodput, flagged) = testbed_goodput(&report);
        let needed = ["fbdt".to_string(), "mptcp".to_string()]
            .into_iter()
            .chain(paths.iter().map(|p| format!("tcp:{p}")));
        if let Some(missing) = needed.into_iter().find(|s| !goodput.contains_key(s)) {
            notes.push(format!("{}: no `{missing}` result: skipped", report.scenario));
            continue;
        }
        for s in flagged {
            notes.push(format!(
                "{}: every `{s}` run was flagged unfaithful: their mean is used",
                report.scenario
            ));
        }
        let seeds = report
            .results
            .iter()
            .map(|r| r.runs.len().max(1) as u64)
            .max()
            .unwrap_or(1);
        out.push(Testbed {
            report,
            paths,
            goodput,
            seeds,
        });
    }
    if out.is_empty() {
        bail!(
            "{}: no testbed scenario results (run `sudo fbdt-lab paper --out DIR` first)",
            dir.display()
        );
    }
    Ok((out, notes))
}

fn within(sim: f64, testbed: f64) -> bool {
    (sim / testbed - 1.0).abs() <= TOLERANCE
}

/// Every pair of schemes the testbed separates by more than the tolerance keeps its order.
fn order_kept(sim: &BTreeMap<String, f64>, testbed: &BTreeMap<String, f64>) -> bool {
    testbed.iter().all(|(a, &ta)| {
        testbed
            .iter()
            .all(|(b, &tb)| ta <= (1.0 + TOLERANCE) * tb || sim[a] > sim[b])
    })
}

#[derive(Debug, Serialize)]
struct Comparison {
    /// The simulated MPTCP scheme standing for the testbed's kernel MPTCP.
    mptcp: String,
    fbdt_over_mptcp_sim: f64,
    fbdt_over_mptcp_testbed: f64,
    /// FBDT/Σ and FBDT/MPTCP both within the tolerance of the testbed's.
    ratios_within: bool,
    order_kept: bool,
    agree: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    scenario: String,
    scale: f64,
    duration_s: f64,
    seeds: Vec<u64>,
    fbdt_over_sum_sim: f64,
    fbdt_over_sum_testbed: f64,
    /// Mean goodput per scheme, Mbit/s.
    sim_mbps: BTreeMap<String, f64>,
    testbed_mbps: BTreeMap<String, f64>,
    comparisons: Vec<Comparison>,
}

#[derive(Debug, Serialize)]
struct AgreeReport {
    testbed: String,
    model: &'static str,
    tolerance: f64,
    rows: Vec<Row>,
    /// Scenarios that agree, per simulated MPTCP scheme and scale ("testbed" or "1").
    agree: BTreeMap<String, usize>,
    notes: Vec<String>,
}

/// One simulator run of the comparison.
struct Job {
    row: usize,
    scheme: String,
    seed: u64,
}

pub fn run(args: AgreeArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<()> {
    let limits = crate::TestbedLimits::from(testbed);
    let (testbeds, notes) = read_testbed(&args.testbed)?;
    let jobs = crate::parallel::jobs(args.jobs)?;
    if args.seeds == Some(0) || args.seeds.is_some_and(|n| n > 100) {
        bail!("--seeds must be in 1..=100");
    }
    if args.mptcp.is_empty() {
        bail!("--mptcp needs at least one scheme");
    }
    // (testbed, scale, seeds) per row.
    let mut rows: Vec<(&Testbed, f64, Vec<u64>)> = Vec::new();
    for t in &testbeds {
        let first = t.report.scenario_def.seed;
        let seeds: Vec<u64> = (0..args.seeds.unwrap_or(t.seeds))
            .map(|k| first.wrapping_add(k))
            .collect();
        rows.push((t, t.report.scale, seeds.clone()));
        if args.full_scale && t.report.scale != 1.0 {
            rows.push((t, 1.0, seeds));
        }
    }
    let mut work = Vec::new();
    for (k, (t, _, seeds)) in rows.iter().enumerate() {
        let schemes = ["fbdt".to_string()]
            .into_iter()
            .chain(args.mptcp.iter().cloned())
            .chain(t.paths.iter().map(|p| format!("tcp:{p}")));
        for s in schemes {
            scheme::parse_sim(&s, &t.report.scenario_def, t.report.scenario_def.seed, &limits)
                .with_context(|| format!("{}: scheme {s}", t.report.scenario))?;
            for &seed in seeds {
                work.push(Job {
                    row: k,
                    scheme: s.clone(),
                    seed,
                });
            }
        }
    }
    let bar = crate::progress::bar(work.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("agree [{bar:30}] {pos}/{len} simulator runs, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let one = |j: &Job| -> Result<f64> {
        let (t, scale, _) = &rows[j.row];
        let mut sc = t.report.scenario_def.clone();
        sc.seed = j.seed;
        crate::set_duration(&mut sc, Some(t.report.duration_s))?;
        let schedule = sc.schedule(*scale)?;
        let params = crate::sim::sim_params(&sc, PathModel::Tcp, 0, &limits);
        let sim_scheme = scheme::parse_sim(&j.scheme, &sc, sc.seed, &limits)?;
        let out = fbdt_sim::run(&schedule, &sim_scheme, &params, |_| {})
            .with_context(|| format!("{} at scale {scale}, {} seed {}", t.report.scenario, j.scheme, j.seed))?;
        Ok(out.goodput_mbps)
    };
    let goodputs = crate::parallel::map(&work, jobs, &bar, one);
    bar.finish_and_clear();
    let goodputs = goodputs?;
    let mut sums: Vec<BTreeMap<String, (f64, u32)>> = rows.iter().map(|_| BTreeMap::new()).collect();
    for (j, g) in work.iter().zip(goodputs) {
        let e = sums[j.row].entry(j.scheme.clone()).or_insert((0.0, 0));
        e.0 += g;
        e.1 += 1;
    }
    let mut agree = BTreeMap::new();
    let mut out_rows = Vec::new();
    for ((t, scale, seeds), sums) in rows.iter().zip(sums) {
        let sim: BTreeMap<String, f64> = sums.into_iter().map(|(k, (s, n))| (k, s / f64::from(n))).collect();
        let sum = |m: &BTreeMap<String, f64>| t.paths.iter().map(|p| m[&format!("tcp:{p}")]).sum::<f64>();
        let (fs_sim, fs_tb) = (sim["fbdt"] / sum(&sim), t.goodput["fbdt"] / sum(&t.goodput));
        let singles = |m: &BTreeMap<String, f64>, mp: f64| -> BTreeMap<String, f64> {
            let mut o: BTreeMap<String, f64> = t.paths.iter().map(|p| (p.clone(), m[&format!("tcp:{p}")])).collect();
            o.insert("fbdt".into(), m["fbdt"]);
            o.insert("mptcp".into(), mp);
            o
        };
        let tb_order = singles(&t.goodput, t.goodput["mptcp"]);
        let comparisons: Vec<Comparison> = args
            .mptcp
            .iter()
            .map(|mp| {
                let (fm_sim, fm_tb) = (sim["fbdt"] / sim[mp], t.goodput["fbdt"] / t.goodput["mptcp"]);
                let order = order_kept(&singles(&sim, sim[mp]), &tb_order);
                let ratios = within(fs_sim, fs_tb) && within(fm_sim, fm_tb);
                let ok = order && ratios;
                if ok {
                    let at = if *scale == t.report.scale { "testbed" } else { "1" };
                    *agree.entry(format!("{mp} at scale {at}")).or_insert(0) += 1;
                }
                Comparison {
                    mptcp: mp.clone(),
                    fbdt_over_mptcp_sim: fm_sim,
                    fbdt_over_mptcp_testbed: fm_tb,
                    ratios_within: ratios,
                    order_kept: order,
                    agree: ok,
                }
            })
            .collect();
        out_rows.push(Row {
            scenario: t.report.scenario.clone(),
            scale: *scale,
            duration_s: t.report.duration_s,
            seeds: seeds.clone(),
            fbdt_over_sum_sim: fs_sim,
            fbdt_over_sum_testbed: fs_tb,
            sim_mbps: sim,
            testbed_mbps: t.goodput.clone(),
            comparisons,
        });
    }
    for mp in &args.mptcp {
        for at in ["testbed", "1"] {
            if at == "testbed" || args.full_scale {
                agree.entry(format!("{mp} at scale {at}")).or_insert(0);
            }
        }
    }
    let report = AgreeReport {
        testbed: args.testbed.display().to_string(),
        model: "tcp",
        tolerance: TOLERANCE,
        rows: out_rows,
        agree,
        notes,
    };
    print_table(&report, testbeds.len());
    if let Some(path) = &args.json {
        crate::results::write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn print_table(r: &AgreeReport, scenarios: usize) {
    println!(
        "{:<16} {:>6} {:>14} {:>14}  FBDT/MPTCP sim vs testbed (agree)",
        "scenario", "scale", "FBDT/Σ sim", "FBDT/Σ tb"
    );
    for row in &r.rows {
        let mps: Vec<String> = row
            .comparisons
            .iter()
            .map(|c| {
                let verdict = match (c.ratios_within, c.order_kept) {
                    (true, true) => "yes",
                    (false, true) => "no: ratio",
                    (true, false) => "no: order",
                    (false, false) => "no: ratio, order",
                };
                format!(
                    "{} {:.3} vs {:.3} ({verdict})",
                    c.mptcp, c.fbdt_over_mptcp_sim, c.fbdt_over_mptcp_testbed
                )
            })
            .collect();
        println!(
            "{:<16} {:>6} {:>14.3} {:>14.3}  {}",
            row.scenario,
            row.scale,
            row.fbdt_over_sum_sim,
            row.fbdt_over_sum_testbed,
            mps.join("; ")
        );
    }
    for (k, n) in &r.agree {
        println!("agree: {k}: {n} of {scenarios}");
    }
    for n in &r.notes {
        println!("note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn flagged_runs_are_left_out_unless_all_are() {
        let runs = [(1, 100.0), (2, 50.0), (3, 110.0)];
        assert_eq!(mean_of_faithful(&runs, |s| s != 2), (105.0, false));
        assert_eq!(mean_of_faithful(&runs, |_| false), (260.0 / 3.0, true));
    }

    #[test]
    fn ratios_agree_within_ten_percent() {
        assert!(within(1.374, 1.463));
        assert!(!within(1.308, 1.463));
        assert!(within(1.0999, 1.0) && !within(1.1001, 1.0));
    }

    /// Pairs the testbed separates by more than 10 % keep their order; closer pairs may swap.
    #[test]
    fn only_clear_orders_must_hold() {
        let tb = m(&[("fbdt", 100.0), ("mptcp", 95.0), ("wifi", 50.0)]);
        assert!(order_kept(&m(&[("fbdt", 90.0), ("mptcp", 96.0), ("wifi", 40.0)]), &tb));
        assert!(!order_kept(&m(&[("fbdt", 90.0), ("mptcp", 96.0), ("wifi", 97.0)]), &tb));
    }
}
