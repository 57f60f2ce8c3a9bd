//! `fbdt-lab jpoc <cmd>`: the command line over this library (its arguments and what each
//! command does; fbdt-lab only mounts them). Tables go to stdout,
//! progress to stderr, results to --json/--plot.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use crate::config::Config;
use crate::experiments::{self, BeamsReport, FairnessReport, HeatmapReport, OverheadReport};
use crate::plot;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Options every command takes.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// TOML file overriding the default parameters (any subset; see docs/jpoc.md).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Base seed; realization k uses streams derived from (seed, k).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write a PNG figure here.
    #[arg(long, value_name = "PATH.png")]
    pub plot: Option<PathBuf>,
    /// Directory for <command>.json and <command>.png (when --json/--plot are not given).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Subcommand)]
pub enum JpocCommand {
    /// Jain's fairness index vs blockage probability, JPOC vs 802.11ad (thesis Fig. 3.7a).
    Fairness {
        #[command(flatten)]
        common: CommonArgs,
        /// Number of data clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Blockage probabilities per beacon interval (comma-separated, each in [0, 1]).
        #[arg(long, value_delimiter = ',', default_values_t = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5])]
        blockage: Vec<f64>,
        /// Realizations per point.
        #[arg(long, short = 'k', default_value_t = 20)]
        repeat: usize,
        /// Seconds per realization (default: config, 10 s).
        #[arg(long)]
        duration_s: Option<f64>,
        /// JPOC's γ in dB (default: config, 4 dB).
        #[arg(long)]
        gamma: Option<f64>,
    },
    /// A-BFT mini-slots needed to meet a target failure rate vs number of clients (Fig. 3.7b).
    Overhead {
        #[command(flatten)]
        common: CommonArgs,
        /// Target per-client failure probability P0.
        #[arg(long, default_value_t = 0.1)]
        p0: f64,
        /// Blockage probability per beacon interval.
        #[arg(long, default_value_t = 0.2)]
        blockage: f64,
        /// Client counts (comma-separated).
        #[arg(long, value_delimiter = ',', default_values_t = [4usize, 8, 16, 24, 32])]
        clients: Vec<usize>,
        /// Realizations per evaluated configuration.
        #[arg(long, short = 'k', default_value_t = 10)]
        repeat: usize,
        /// Largest 802.11ad slot count searched (the standard allows 8; we go beyond on purpose).
        #[arg(long, default_value_t = 256)]
        max_slots: usize,
        #[arg(long)]
        duration_s: Option<f64>,
        #[arg(long)]
        gamma: Option<f64>,
    },
    /// Distribution of good beams per client without and with power control (Fig. 3.5a).
    Beams {
        #[command(flatten)]
        common: CommonArgs,
        /// γ values (dB) for the power-controlled series.
        #[arg(long, value_delimiter = ',', default_values_t = [10.0, 4.0])]
        gammas: Vec<f64>,
        /// Client drops per realization.
        #[arg(long, default_value_t = 500)]
        samples: usize,
        #[arg(long, short = 'k', default_value_t = 10)]
        repeat: usize,
    },
    /// Competition fairness index heatmap, near client vs every grid cell (Fig. 3.1c/3.5b,c).
    Heatmap {
        #[command(flatten)]
        common: CommonArgs,
        #[arg(long, value_delimiter = ',', default_values_t = [10.0, 4.0])]
        gammas: Vec<f64>,
        /// Grid cell size in metres.
        #[arg(long, default_value_t = 2.0)]
        cell_m: f64,
        /// Near client's distance from the AP in metres.
        #[arg(long, default_value_t = 1.0)]
        near_m: f64,
        /// Channel realizations per grid cell.
        #[arg(long, short = 'k', default_value_t = 20)]
        repeat: usize,
    },
}

fn load_config(common: &CommonArgs) -> Result<Config> {
    match &common.config {
        Some(p) => Ok(Config::load(p)?),
        None => Ok(Config::default()),
    }
}

/// `bar` makes the bar (fbdt-lab passes `fbdt_harness::progress::bar`: drawn on a
/// terminal, logged every few seconds otherwise).
fn progress(bar: Bar, common: &CommonArgs, total: u64, what: &str) -> ProgressBar {
    if common.quiet {
        return ProgressBar::hidden();
    }
    let pb = bar(total);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})") {
        pb.set_style(style);
    }
    pb.set_message(what.to_string());
    pb
}

fn outputs(common: &CommonArgs, name: &str) -> Result<(Option<PathBuf>, Option<PathBuf>)> {
    if let Some(dir) = &common.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = common
        .json
        .clone()
        .or_else(|| common.out.as_ref().map(|d| d.join(format!("{name}.json"))));
    let png = common
        .plot
        .clone()
        .or_else(|| common.out.as_ref().map(|d| d.join(format!("{name}.png"))));
    // Fail before a long run, not after it.
    if let Some(p) = &png {
        plot::check_png(p)?;
    }
    Ok((json, png))
}

/// Results JSON: the report's own (stable) fields plus the full config used.
fn write_json<T: Serialize>(path: &Path, command: &str, report: &T, cfg: &Config) -> Result<()> {
    let mut v = serde_json::to_value(report)?;
    if let Some(obj) = v.as_object_mut() {
        obj.insert("command".into(), serde_json::Value::String(command.into()));
        obj.insert("config".into(), serde_json::to_value(cfg)?);
    }
    let text = serde_json::to_string_pretty(&v)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn check_positive(name: &str, v: usize) -> Result<()> {
    if v == 0 {
        bail!("--{name} must be at least 1");
    }
    Ok(())
}

fn check_prob(name: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
        bail!("--{name} values must be probabilities in [0, 1], got {v}");
    }
    Ok(())
}

/// Apply the optional per-command overrides and re-validate.
fn override_cfg(
    mut cfg: Config,
    clients: Option<usize>,
    duration_s: Option<f64>,
    gamma: Option<f64>,
) -> Result<Config> {
    if let Some(n) = clients {
        cfg.sim.clients = n;
    }
    if let Some(d) = duration_s {
        cfg.sim.duration_s = d;
    }
    if let Some(g) = gamma {
        cfg.jpoc.gamma_db = g;
    }
    cfg.validate()?;
    Ok(cfg)
}

fn pm(mean: f64, ci: [f64; 2]) -> String {
    format!("{mean:.3} ± {:.3}", (ci[1] - ci[0]) / 2.0)
}

pub fn print_fairness(r: &FairnessReport) {
    println!(
        "Jain's fairness index, {} clients, {} realizations (mean ± 95% CI half-width)",
        r.clients, r.repeat
    );
    println!(
        "{:>9} | {:>15} | {:>15} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8}",
        "blockage", "JPOC", "802.11ad", "fail JP", "fail AD", "M JPOC", "M AD", "far/nr JP", "far/nr AD"
    );
    for p in &r.points {
        println!(
            "{:>8.0}% | {:>15} | {:>15} | {:>8.3} {:>8.3} | {:>8.1} {:>8.0} | {:>9.2} {:>9.2}",
            p.blockage * 100.0,
            pm(p.jain_jpoc, p.jain_jpoc_ci95),
            pm(p.jain_80211ad, p.jain_80211ad_ci95),
            p.failure_jpoc,
            p.failure_80211ad,
            p.minislots_jpoc,
            p.minislots_80211ad,
            p.far_near_airtime_jpoc,
            p.far_near_airtime_80211ad
        );
    }
}

pub fn print_overhead(r: &OverheadReport) {
    println!(
        "A-BFT mini-slots for P0 = {} at {}% blockage, {} realizations per configuration",
        r.p0,
        r.blockage * 100.0,
        r.repeat
    );
    println!(
        "{:>7} | {:>17} {:>8} | {:>6} {:>9} {:>8} | {:>6}",
        "clients", "JPOC M (mean±CI)", "fail", "slots", "AD mslots", "fail", "ratio"
    );
    for p in &r.points {
        println!(
            "{:>7} | {:>17} {:>8.3} | {:>5}{} {:>9.0} {:>8.3} | {:>5.1}x",
            p.clients,
            format!(
                "{:.1} ± {:.1}",
                p.minislots_jpoc,
                (p.minislots_jpoc_ci95[1] - p.minislots_jpoc_ci95[0]) / 2.0
            ),
            p.failure_jpoc,
            p.slots_80211ad,
            if p.ieee80211ad_capped { "+" } else { " " },
            p.minislots_80211ad,
            p.failure_80211ad,
            p.ratio
        );
    }
    if r.points.iter().any(|p| p.ieee80211ad_capped) {
        println!("(+ = even --max-slots {} did not meet P0; a lower bound)", r.max_slots);
    }
}

pub fn print_beams(r: &BeamsReport) {
    println!(
        "Good beams per client: % of clients per bracket, {} drops x {} realizations",
        r.samples, r.repeat
    );
    print!("{:>24} |", "series");
    for b in &r.brackets {
        print!(" {:>7}", b);
    }
    println!(" | {:>5} {:>4} {:>7}", "mean", "max", "1-12 %");
    for s in &r.series {
        print!("{:>24} |", s.label);
        for v in &s.percent {
            print!(" {:>7.1}", v);
        }
        println!(
            " | {:>5.1} {:>4} {:>7.1}",
            s.mean_good_beams, s.max_good_beams, s.percent_1_to_12
        );
    }
}

pub fn print_heatmap(r: &HeatmapReport) {
    println!(
        "Competition fairness index, near client at {} m, {} m grid, {} realizations per cell",
        r.near_m, r.cell_m, r.repeat
    );
    println!(
        "{:>24} | {:>7} | {:>8} | {:>10} | {:>10}",
        "series", "cells", "median", "≥ 0.5 (%)", "undefined"
    );
    for p in &r.panels {
        let mut v: Vec<f64> = p.cells.iter().map(|c| c.index.unwrap_or(f64::INFINITY)).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        let med = v.get(v.len() / 2).copied().unwrap_or(f64::NAN);
        let undefined = p.cells.iter().filter(|c| c.index.is_none()).count();
        println!(
            "{:>24} | {:>7} | {:>8.3} | {:>10.1} | {:>10}",
            p.label,
            p.cells.len(),
            med,
            p.fraction_fair * 100.0,
            undefined
        );
    }
}

/// Run one `jpoc` subcommand.
/// A progress bar of so many steps.
pub type Bar = fn(u64) -> ProgressBar;

/// Runs one command; `bar` makes its progress bars.
pub fn run(cmd: JpocCommand, bar: Bar) -> Result<()> {
    let progress = |common: &CommonArgs, total: u64, what: &str| progress(bar, common, total, what);
    match cmd {
        JpocCommand::Fairness {
            common,
            clients,
            blockage,
            repeat,
            duration_s,
            gamma,
        } => {
            check_positive("repeat", repeat)?;
            check_positive("clients", clients)?;
            if blockage.is_empty() {
                bail!("--blockage needs at least one value");
            }
            for &b in &blockage {
                check_prob("blockage", b)?;
            }
            let cfg = override_cfg(load_config(&common)?, Some(clients), duration_s, gamma)?;
            let (json, png) = outputs(&common, "fairness")?;
            let pb = progress(&common, (blockage.len() * 2 * repeat) as u64, "fairness");
            let r = experiments::fairness(&cfg, &blockage, repeat, common.seed, &mut || pb.inc(1))?;
            pb.finish_and_clear();
            print_fairness(&r);
            if let Some(p) = json {
                write_json(&p, "fairness", &r, &cfg)?;
            }
            if let Some(p) = png {
                plot::fairness(&r, &p)?;
                eprintln!("wrote {}", p.display());
            }
        }
        JpocCommand::Overhead {
            common,
            p0,
            blockage,
            clients,
            repeat,
            max_slots,
            duration_s,
            gamma,
        } => {
            check_positive("repeat", repeat)?;
            check_positive("max-slots", max_slots)?;
            check_prob("blockage", blockage)?;
            if !(p0 > 0.0 && p0 < 1.0) {
                bail!("--p0 must be in (0, 1), got {p0}");
            }
            if clients.is_empty() || clients.contains(&0) {
                bail!("--clients needs one or more counts ≥ 1");
            }
            let mut cfg = override_cfg(load_config(&common)?, None, duration_s, gamma)?;
            cfg.jpoc.p0 = p0;
            cfg.dynamics.blockage_prob = blockage;
            cfg.validate()?;
            let (json, png) = outputs(&common, "overhead")?;
            let total = experiments::overhead_work(clients.len(), repeat, max_slots);
            let pb = progress(&common, total, "overhead");
            let r = experiments::overhead(
                &cfg,
                p0,
                blockage,
                &clients,
                repeat,
                max_slots,
                common.seed,
                &mut || pb.inc(1),
            )?;
            pb.finish_and_clear();
            print_overhead(&r);
            if let Some(p) = json {
                write_json(&p, "overhead", &r, &cfg)?;
            }
            if let Some(p) = png {
                plot::overhead(&r, &p)?;
                eprintln!("wrote {}", p.display());
            }
        }
        JpocCommand::Beams {
            common,
            gammas,
            samples,
            repeat,
        } => {
            check_positive("repeat", repeat)?;
            check_positive("samples", samples)?;
            if gammas.iter().any(|g| !g.is_finite()) {
                bail!("--gammas must be finite dB values");
            }
            let cfg = load_config(&common)?;
            let (json, png) = outputs(&common, "beams")?;
            let pb = progress(&common, repeat as u64, "beams");
            let r = experiments::beams(&cfg, &gammas, samples, repeat, common.seed, &mut || pb.inc(1))?;
            pb.finish_and_clear();
            print_beams(&r);
            if let Some(p) = json {
                write_json(&p, "beams", &r, &cfg)?;
            }
            if let Some(p) = png {
                plot::beams(&r, &p)?;
                eprintln!("wrote {}", p.display());
            }
        }
        JpocCommand::Heatmap {
            common,
            gammas,
            cell_m,
            near_m,
            repeat,
        } => {
            check_positive("repeat", repeat)?;
            if gammas.iter().any(|g| !g.is_finite()) {
                bail!("--gammas must be finite dB values");
            }
            let cfg = load_config(&common)?;
            if !(cell_m.is_finite() && cell_m > 0.0 && cell_m <= cfg.cell.radius_m) {
                bail!(
                    "--cell-m must be in (0, cell radius = {} m], got {cell_m}",
                    cfg.cell.radius_m
                );
            }
            if !(near_m.is_finite() && near_m > 0.0 && near_m <= cfg.cell.radius_m) {
                bail!(
                    "--near-m must be in (0, cell radius = {} m], got {near_m}",
                    cfg.cell.radius_m
                );
            }
            let (json, png) = outputs(&common, "heatmap")?;
            let cells = ((2.0 * cfg.cell.radius_m / cell_m).ceil() as u64).pow(2);
            // Only cells inside the disk tick; π/4 of the square.
            let pb = progress(
                &common,
                (cells as f64 * std::f64::consts::FRAC_PI_4).ceil() as u64,
                "heatmap",
            );
            let r = experiments::heatmap(&cfg, &gammas, cell_m, near_m, repeat, common.seed, &mut || pb.inc(1))?;
            pb.finish_and_clear();
            print_heatmap(&r);
            if let Some(p) = json {
                write_json(&p, "heatmap", &r, &cfg)?;
            }
            if let Some(p) = png {
                plot::heatmap(&r, &p)?;
                eprintln!("wrote {}", p.display());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(subcommand)]
        cmd: JpocCommand,
    }

    #[test]
    fn parses_defaults_and_options() {
        let t = T::try_parse_from(["x", "fairness", "--json", "/tmp/f.json", "--seed", "3", "-k", "2"]).unwrap();
        match t.cmd {
            JpocCommand::Fairness {
                common,
                clients,
                blockage,
                repeat,
                ..
            } => {
                assert_eq!(clients, 16);
                assert_eq!(blockage, vec![0.0, 0.1, 0.2, 0.3, 0.4, 0.5]);
                assert_eq!(repeat, 2);
                assert_eq!(common.seed, 3);
            }
            _ => panic!("wrong variant"),
        }
        let t = T::try_parse_from(["x", "overhead", "--clients", "4,8"]).unwrap();
        assert!(matches!(t.cmd, JpocCommand::Overhead { ref clients, .. } if clients == &vec![4, 8]));
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let t = T::try_parse_from(["x", "fairness", "--blockage", "1.5", "--quiet"]).unwrap();
        let e = run(t.cmd, ProgressBar::new).unwrap_err();
        assert!(e.to_string().contains("blockage"), "{e}");
        let t = T::try_parse_from(["x", "beams", "--config", "/nonexistent/x.toml", "--quiet"]).unwrap();
        let e = run(t.cmd, ProgressBar::new).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x.toml"), "{e}");
        let t = T::try_parse_from([
            "x",
            "fairness",
            "--plot",
            "/tmp/x.svg",
            "--quiet",
            "-k",
            "1",
            "--clients",
            "2",
            "--blockage",
            "0",
            "--duration-s",
            "0.2",
        ])
        .unwrap();
        assert!(run(t.cmd, ProgressBar::new).unwrap_err().to_string().contains(".png"));
    }
}
