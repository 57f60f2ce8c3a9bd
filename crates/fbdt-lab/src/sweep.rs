//! `fbdt-lab sweep`: schemes × the values of one parameter in the simulator, run in
//! parallel across cores (`--jobs`), with a progress bar and JSON.

use std::path::PathBuf;
use std::time::Instant as WallClock;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use fbdt_scenario::Scenario;
use fbdt_sim::PathModel;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::scheme;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Param {
    /// The seed of the scenario's random models and of the loss draws.
    Seed,
    /// A factor on every path rate.
    Scale,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Built-in scenario name or a scenario .toml file.
    pub scenario: String,
    /// Comma-separated schemes (as in `fbdt-lab run`).
    #[arg(long, value_delimiter = ',', default_value = "fbdt")]
    pub schemes: Vec<String>,
    /// The parameter swept.
    #[arg(long, value_enum)]
    pub over: Param,
    /// Its values: a comma-separated list, or A..B/S (A to B inclusive in steps of S).
    #[arg(long)]
    pub values: String,
    #[arg(long, default_value_t = PathModel::Pipe)]
    pub model: PathModel,
    /// Seconds to run (default: the scenario's duration).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Runs at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct SweepPoint {
    value: f64,
    scheme: String,
    goodput_mbps: f64,
    wall_s: f64,
}

#[derive(Debug, Serialize)]
struct SweepReport {
    scenario: String,
    model: String,
    over: Param,
    duration_s: f64,
    jobs: usize,
    points: Vec<SweepPoint>,
}

/// Parses `1,2,3` or `A..B/S`.
fn parse_values(text: &str) -> Result<Vec<f64>> {
    let num = |s: &str| -> Result<f64> {
        let v: f64 = s.trim().parse().map_err(|_| anyhow!("`{s}` is not a number"))?;
        if v.is_finite() {
            Ok(v)
        } else {
            bail!("`{s}` is not a finite number")
        }
    };
    if let Some((range, step)) = text.split_once('/') {
        let (a, b) = range
            .split_once("..")
            .ok_or_else(|| anyhow!("`{text}`: expected A..B/S"))?;
        let (a, b, step) = (num(a)?, num(b)?, num(step)?);
        if step <= 0.0 || b < a {
            bail!("`{text}`: need A <= B and S > 0");
        }
        let n = ((b - a) / step + 1e-9).floor() as usize + 1;
        if n > 100_000 {
            bail!("`{text}`: more than 100000 values");
        }
        return Ok((0..n).map(|k| a + k as f64 * step).collect());
    }
    text.split(',').map(num).collect()
}

pub fn run(args: SweepArgs) -> Result<()> {
    let values = parse_values(&args.values).context("--values")?;
    if values.is_empty() {
        bail!("--values is empty");
    }
    let mut scenario = Scenario::load(&args.scenario)?;
    crate::run::set_duration(&mut scenario, args.duration)?;
    for v in &values {
        match args.over {
            Param::Seed if *v < 0.0 || v.fract() != 0.0 => bail!("--values: seed {v} is not a whole number >= 0"),
            Param::Scale if *v <= 0.0 => bail!("--values: scale {v} must be > 0"),
            _ => {}
        }
    }
    for s in &args.schemes {
        scheme::parse(s, &scenario, scenario.seed)?.into_sim()?;
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if jobs == 0 || jobs > 1024 {
        bail!("--jobs must be in 1..=1024");
    }
    let work: Vec<(f64, String)> = values
        .iter()
        .flat_map(|&v| args.schemes.iter().map(move |s| (v, s.clone())))
        .collect();
    let bar = ProgressBar::new(work.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("sweep [{bar:30}] {pos}/{len} runs, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let one = |(value, name): &(f64, String)| -> Result<SweepPoint> {
        let mut sc = scenario.clone();
        let scale = match args.over {
            Param::Seed => {
                sc.seed = *value as u64;
                1.0
            }
            Param::Scale => *value,
        };
        let schedule = sc.schedule(scale)?;
        let params = crate::run::sim_params(&sc, args.model);
        let sim_scheme = scheme::parse(name, &sc, sc.seed)?.into_sim()?;
        let started = WallClock::now();
        let out = fbdt_sim::run(&schedule, &sim_scheme, &params, |_| {})
            .with_context(|| format!("scheme {name}, {:?} {value}", args.over))?;
        Ok(SweepPoint {
            value: *value,
            scheme: name.clone(),
            goodput_mbps: out.goodput_mbps,
            wall_s: started.elapsed().as_secs_f64(),
        })
    };
    let points = crate::parallel::map(&work, jobs, &bar, one);
    bar.finish_and_clear();
    let points = points?;
    println!(
        "{:>10} {:<26} {:>9}",
        format!("{:?}", args.over).to_lowercase(),
        "scheme",
        "Mbit/s"
    );
    for p in &points {
        println!("{:>10} {:<26} {:>9.1}", p.value, p.scheme, p.goodput_mbps);
    }
    let report = SweepReport {
        scenario: scenario.name.clone(),
        model: args.model.to_string(),
        over: args.over,
        duration_s: scenario.duration_s,
        jobs,
        points,
    };
    if let Some(path) = &args.json {
        crate::run::write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_lists_or_ranges_and_bad_ones_are_errors() {
        assert_eq!(parse_values("1,2.5,3").unwrap(), vec![1.0, 2.5, 3.0]);
        assert_eq!(parse_values("0.5..1.5/0.5").unwrap(), vec![0.5, 1.0, 1.5]);
        assert!(parse_values("1..0/1").is_err());
        assert!(parse_values("0..1/0").is_err());
        assert!(parse_values("a,b").is_err());
        assert!(parse_values("0..1e9/1e-9").is_err());
    }
}
