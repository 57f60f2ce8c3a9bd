//! `fbdt-lab sweep`: schemes × the values of one parameter in the simulator, run in
//! parallel across cores (`--jobs`), with a progress bar and JSON; or, with `--cotag`,
//! paper 003's grid on the testbed (correlation × PER × latency × T), whose runs and claims
//! are `fbdt_harness::cotag_grid`; here its arguments.

use std::path::PathBuf;
use std::time::Instant as WallClock;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use fbdt_scenario::Scenario;
use fbdt_sim::PathModel;
use indicatif::ProgressStyle;
use serde::{Deserialize, Serialize};

use fbdt_harness::cotag_grid::{Grid, GridReport, Point};
use fbdt_harness::scheme;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Param {
    /// The seed of the scenario's random models and of the loss draws.
    Seed,
    /// A factor on every path rate.
    Scale,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Built-in scenario name or a scenario .toml file (not with --cotag).
    #[arg(required_unless_present = "cotag")]
    pub scenario: Option<String>,
    /// Comma-separated schemes (as in `fbdt-lab run`). With --cotag the baselines beside
    /// COTAG; left at `fbdt` it means dual-rr, mptcp, fbdt, tcp:ap1, tcp:ap2.
    #[arg(long, value_delimiter = ',', default_value = "fbdt")]
    pub schemes: Vec<String>,
    /// The parameter swept.
    #[arg(long, value_enum, required_unless_present = "cotag")]
    pub over: Option<Param>,
    /// Its values: a comma-separated list, or A..B/S (A to B inclusive in steps of S).
    #[arg(long, required_unless_present = "cotag")]
    pub values: Option<String>,
    /// Paper 003's grid on the emulated testbed (root): the cotag-corr-{neg,zero,pos}
    /// scenarios × --per × --latency, COTAG at every --periods T plus the --schemes
    /// (default dual-rr, mptcp, fbdt, tcp:ap1, tcp:ap2), every point's fidelity recorded and
    /// the paper's claims judged on faithful points only.
    #[arg(long, conflicts_with_all = ["scenario", "over", "values"])]
    pub cotag: bool,
    /// --cotag: correlations (neg, zero, pos).
    #[arg(long, value_delimiter = ',', default_value = "neg,zero,pos")]
    pub correlations: Vec<String>,
    /// --cotag: packet error rates (both paths, data direction).
    #[arg(long, value_delimiter = ',', default_value = "0,0.005")]
    pub per: Vec<f64>,
    /// --cotag: server→gateway latencies, ms (the paths' one-way delay).
    #[arg(long, value_delimiter = ',', default_value = "0,1,5")]
    pub latency: Vec<f64>,
    /// --cotag: COTAG cohort periods T, ms.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1")]
    pub periods: Vec<f64>,
    /// --cotag: the rate scale (default 0.1: `los` calibrates to 0.10–0.13 on the 2-core
    /// development host).
    #[arg(long, default_value_t = 0.1)]
    pub scale: f64,
    /// --cotag: runs per scheme and point (seeds seed …), interleaved; a scheme counts at a
    /// point when most of its runs were faithful, with the mean of those.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// --cotag: the flows (default bursts, the paper's ten flows).
    #[arg(long, value_enum, default_value_t = fbdt_harness::traffic::Traffic::Bursts)]
    pub traffic: fbdt_harness::traffic::Traffic,
    #[arg(long, default_value_t = PathModel::Pipe)]
    pub model: PathModel,
    /// The pipe model's time grain in µs (0: exact, the default): every arrival is handed
    /// over at the next multiple of it, so arrivals within one grain share a step — never
    /// early, less than a grain late, bytes exact. Faster, at the cost of delays up to a
    /// grain longer (docs/simulator.md, "Speed"). Not with `--model tcp`.
    #[arg(long, default_value_t = 0)]
    pub grain: u64,
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

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepPoint {
    value: f64,
    scheme: String,
    goodput_mbps: f64,
    wall_s: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepReport {
    pub scenario: String,
    pub model: String,
    /// The pipe's time grain in µs (0: exact).
    pub grain_us: u64,
    pub over: Param,
    pub duration_s: f64,
    pub jobs: usize,
    pub points: Vec<SweepPoint>,
}

/// Parses `1,2,3` or `A..B/S`.
pub fn parse_values(text: &str) -> Result<Vec<f64>> {
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

/// The `--cotag` sweep's default baselines.
pub const COTAG_BASELINES: [&str; 5] = ["dual-rr", "mptcp", "fbdt", "tcp:ap1", "tcp:ap2"];

/// The `--cotag` grid these options ask for, checked.
pub fn cotag_grid(args: &SweepArgs) -> Result<Grid> {
    let baselines: Vec<String> = if args.schemes == ["fbdt"] {
        COTAG_BASELINES.iter().map(|s| s.to_string()).collect()
    } else {
        args.schemes.clone()
    };
    let grid = Grid {
        correlations: args.correlations.clone(),
        per: args.per.clone(),
        latency_ms: args.latency.clone(),
        periods_ms: args.periods.clone(),
        baselines,
        duration_s: args.duration.unwrap_or(5.0),
        scale: args.scale,
        traffic: args.traffic,
        repeat: args.repeat,
    };
    grid.check()?;
    Ok(grid)
}

/// Runs the `--cotag` grid (root), writing the points done so far to `--json` after each.
pub fn cotag_report(args: &SweepArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<GridReport> {
    let grid = cotag_grid(args)?;
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("sweep --cotag runs on the emulated testbed, which needs root: {why}");
    }
    let write = |points: &[Point]| -> Result<()> {
        if let Some(path) = &args.json {
            let report = GridReport::of(grid.clone(), points.to_vec());
            fbdt_harness::results::write_json(path, &report)?;
        }
        Ok(())
    };
    let points = fbdt_harness::cotag_grid::run_grid(&grid, testbed, write)?;
    Ok(GridReport::of(grid, points))
}

/// Prints a `--cotag` grid's table and claims and writes its JSON if asked (the
/// one-process run and the merge of a campaign alike).
pub fn finish_cotag(report: &GridReport, json: Option<&std::path::Path>) -> Result<()> {
    for line in fbdt_harness::cotag_grid::describe(report) {
        println!("{line}");
    }
    if let Some(path) = json {
        fbdt_harness::results::write_json(path, report)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

pub fn run(args: SweepArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<()> {
    if args.cotag {
        let report = cotag_report(&args, testbed)?;
        return finish_cotag(&report, args.json.as_deref());
    }
    let report = report(&args, testbed)?;
    finish(&report, args.json.as_deref())
}

/// A simulator sweep's work.
pub struct Work {
    pub scenario: Scenario,
    pub over: Param,
    /// Every (value, scheme) in the order they are reported (`fbdt-lab plan sweep` makes
    /// one case of each).
    pub points: Vec<(f64, String)>,
}

/// A simulator sweep's work, checked.
pub fn work(args: &SweepArgs, limits: &fbdt_harness::TestbedLimits) -> Result<Work> {
    if args.cotag {
        bail!("this is the --cotag grid, not a simulator sweep");
    }
    let (Some(scenario_arg), Some(over), Some(values_arg)) = (&args.scenario, args.over, &args.values) else {
        bail!("sweep needs a scenario, --over and --values (or --cotag)");
    };
    fbdt_harness::sim::check_grain(args.model, args.grain)?;
    let values = parse_values(values_arg).context("--values")?;
    if values.is_empty() {
        bail!("--values is empty");
    }
    let mut scenario = Scenario::load(scenario_arg)?;
    fbdt_harness::set_duration(&mut scenario, args.duration)?;
    for v in &values {
        match over {
            Param::Seed if *v < 0.0 || v.fract() != 0.0 => bail!("--values: seed {v} is not a whole number >= 0"),
            Param::Scale if *v <= 0.0 => bail!("--values: scale {v} must be > 0"),
            _ => {}
        }
    }
    for s in &args.schemes {
        scheme::parse_sim(s, &scenario, scenario.seed, limits)?;
    }
    let points = values
        .iter()
        .flat_map(|&v| args.schemes.iter().map(move |s| (v, s.clone())))
        .collect();
    Ok(Work {
        scenario,
        over,
        points,
    })
}

/// Runs a simulator sweep (every point, `--jobs` at once) and prints its table.
pub fn report(args: &SweepArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<SweepReport> {
    let limits = fbdt_harness::TestbedLimits::from(testbed);
    let Work {
        scenario,
        over,
        points: work,
    } = work(args, &limits)?;
    let jobs = fbdt_harness::parallel::jobs(args.jobs)?;
    let bar = fbdt_harness::progress::bar(work.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("sweep [{bar:30}] {pos}/{len} runs, ETA {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let one = |(value, name): &(f64, String)| -> Result<SweepPoint> {
        let mut sc = scenario.clone();
        let scale = match over {
            Param::Seed => {
                sc.seed = *value as u64;
                1.0
            }
            Param::Scale => *value,
        };
        let schedule = sc.schedule(scale)?;
        let params = fbdt_harness::sim::sim_params(&sc, args.model, args.grain, &limits);
        let sim_scheme = scheme::parse_sim(name, &sc, sc.seed, &limits)?;
        let started = WallClock::now();
        let out = fbdt_sim::run(&schedule, &sim_scheme, &params, |_| {})
            .with_context(|| format!("scheme {name}, {:?} {value}", over))?;
        Ok(SweepPoint {
            value: *value,
            scheme: name.clone(),
            goodput_mbps: out.goodput_mbps,
            wall_s: started.elapsed().as_secs_f64(),
        })
    };
    let points = fbdt_harness::parallel::map(&work, jobs, &bar, one);
    bar.finish_and_clear();
    Ok(SweepReport {
        scenario: scenario.name.clone(),
        model: args.model.to_string(),
        grain_us: args.grain,
        over,
        duration_s: scenario.duration_s,
        jobs,
        points: points?,
    })
}

/// Prints a sweep's table and writes its JSON if asked (the one-process run and the merge
/// of a campaign alike).
pub fn finish(report: &SweepReport, json: Option<&std::path::Path>) -> Result<()> {
    println!(
        "{:>10} {:<26} {:>9}",
        format!("{:?}", report.over).to_lowercase(),
        "scheme",
        "Mbit/s"
    );
    for p in &report.points {
        println!("{:>10} {:<26} {:>9.1}", p.value, p.scheme, p.goodput_mbps);
    }
    if let Some(path) = json {
        fbdt_harness::results::write_json(path, report)?;
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
