//! `fbdt-lab bench sim`: how fast the simulator runs, as simulated seconds per wall-clock
//! second (`realtime_factor`) for each scenario × scheme, with the machine's load average,
//! the hypervisor's steal and a host speed reference beside it (a loaded or slower machine
//! runs slower; quote them together).

use std::path::PathBuf;
use std::time::Instant as WallClock;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use fbdt_scenario::Scenario;
use serde::Serialize;

use fbdt_harness::scheme;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Simulator speed: realtime_factor per scenario and scheme.
    Sim(BenchSimArgs),
    /// The emulator's faithful rate ceiling by paths and MTU (root).
    Emu(crate::calibrate::BenchArgs),
}

#[derive(Args, Debug)]
pub struct BenchSimArgs {
    /// Comma-separated scenarios.
    #[arg(long, value_delimiter = ',', default_value = "los,rats4-loss2,blockage")]
    pub scenarios: Vec<String>,
    /// Comma-separated schemes (as in `fbdt-lab run`).
    #[arg(long, value_delimiter = ',', default_value = "fbdt,mp:minrtt")]
    pub schemes: Vec<String>,
    /// Simulated seconds per run (default: the scenario's duration).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Comma-separated payload modes: `shared` (zero-copy, the default of every run) and
    /// `exact` (every byte generated, copied and compared: the old cost, side by side).
    #[arg(long, value_delimiter = ',', default_value = "shared")]
    pub payload: Vec<String>,
    /// The pipe model's time grain in µs for its rows (0: exact; as `fbdt-lab run --grain`).
    #[arg(long, default_value_t = 0)]
    pub grain: u64,
    /// Runs per case; the fastest is reported (the least disturbed by other load).
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Print the results as JSON (to stdout, or to this file).
    #[arg(long, num_args = 0..=1)]
    pub json: Option<Option<PathBuf>>,
}

#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// /proc/loadavg (1, 5, 15 min) before and after the benchmark.
    pub loadavg_before: Option<[f64; 3]>,
    pub loadavg_after: Option<[f64; 3]>,
    pub cpus: usize,
    /// Share of the host's CPU time the hypervisor stole while the benchmark ran, in
    /// percent (/proc/stat; `None` where it cannot be read).
    pub steal_pct: Option<f64>,
    pub host: HostSpeed,
    pub results: Vec<BenchResult>,
}

/// Which machine, and how fast it is at a fixed job: realtime factors from two hosts
/// compare only through this (hosts of one class differ by 2× and more).
#[derive(Debug, Serialize)]
pub struct HostSpeed {
    /// /proc/cpuinfo's model name.
    pub cpu_model: String,
    pub kernel: String,
    /// Wall-clock ms of a fixed single-threaded job (sorting 2^20 pseudo-random 64-bit
    /// keys), fastest of five, taken before the runs: smaller is a faster host.
    pub reference_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct BenchResult {
    pub model: String,
    /// The pipe's time grain in µs (0: exact; the TCP model has none).
    pub grain_us: u64,
    /// How payload bytes travelled (`shared` or `exact`, see `fbdt_sim::Payload`).
    pub payload: String,
    pub scenario: String,
    pub scheme: String,
    pub sim_s: f64,
    /// Fastest of `runs` wall-clock times.
    pub wall_s: f64,
    pub runs: u32,
    pub realtime_factor: f64,
    pub steps: u64,
    pub goodput_mbps: f64,
}

/// Sorting 2^20 keys from a fixed xorshift sequence: branchy, cache-bound work of the kind
/// the simulator does, the same on every host; fastest of five, in ms.
fn reference_ms() -> f64 {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let keys: Vec<u64> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    (0..5)
        .map(|_| {
            let mut v = keys.clone();
            let started = WallClock::now();
            v.sort_unstable();
            let ms = started.elapsed().as_secs_f64() * 1e3;
            std::hint::black_box(&v);
            ms
        })
        .fold(f64::INFINITY, f64::min)
}

/// Percent of CPU time stolen between two (busy, steal, total) readings.
fn steal_pct(before: (u64, u64, u64), after: (u64, u64, u64)) -> Option<f64> {
    let total = after.2.checked_sub(before.2).filter(|&t| t > 0)?;
    let steal = after.1.checked_sub(before.1)?;
    Some(100.0 * steal as f64 / total as f64)
}

fn loadavg() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut v = text.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([v.next()??, v.next()??, v.next()??])
}

pub fn run(cmd: BenchCommand, testbed: &fbdt_emu::TestbedOptions) -> Result<()> {
    match cmd {
        BenchCommand::Sim(args) => bench_sim(args, testbed.into()),
        BenchCommand::Emu(args) => crate::calibrate::run_bench(args, testbed),
    }
}

fn bench_sim(args: BenchSimArgs, limits: fbdt_harness::TestbedLimits) -> Result<()> {
    if args.runs == 0 || args.runs > 100 {
        bail!("--runs must be in 1..=100");
    }
    let payloads = args
        .payload
        .iter()
        .map(|p| match p.as_str() {
            "shared" => Ok((p.clone(), fbdt_sim::Payload::Shared)),
            "exact" => Ok((p.clone(), fbdt_sim::Payload::Exact)),
            other => bail!("unknown payload mode `{other}` (known: shared, exact)"),
        })
        .collect::<Result<Vec<_>>>()?;
    fbdt_harness::sim::check_grain(fbdt_sim::PathModel::Pipe, args.grain)?;
    let grain = |model| {
        if model == fbdt_sim::PathModel::Pipe {
            args.grain
        } else {
            0
        }
    };
    let host_key = fbdt_emu::HostKey::current();
    let host = HostSpeed {
        cpu_model: host_key.cpu_model,
        kernel: host_key.kernel,
        reference_ms: reference_ms(),
    };
    eprintln!(
        "host: {}, reference job {:.1} ms (smaller is faster)",
        host.cpu_model, host.reference_ms
    );
    let loadavg_before = loadavg();
    let cpu_before = fbdt_emu::fidelity::host_cpu_jiffies();
    let mut results = Vec::new();
    for name in &args.scenarios {
        let mut scenario = Scenario::load(name)?;
        fbdt_harness::set_duration(&mut scenario, args.duration)?;
        let schedule = scenario.schedule(1.0)?;
        for model in fbdt_sim::PathModel::ALL {
            for (payload_name, payload) in &payloads {
                let params = fbdt_sim::SimParams {
                    payload: *payload,
                    ..fbdt_harness::sim::sim_params(&scenario, model, grain(model), &limits)
                };
                for s in &args.schemes {
                    let sim_scheme = scheme::parse_sim(s, &scenario, scenario.seed, &limits)?;
                    let mut best = f64::INFINITY;
                    let mut last = None;
                    for _ in 0..args.runs {
                        let started = WallClock::now();
                        let out = fbdt_sim::run(&schedule, &sim_scheme, &params, |_| {})
                            .with_context(|| format!("scenario {name}, scheme {s}"))?;
                        best = best.min(started.elapsed().as_secs_f64());
                        last = Some(out);
                    }
                    let out = last.expect("runs ≥ 1");
                    let r = BenchResult {
                        model: model.to_string(),
                        grain_us: grain(model),
                        payload: payload_name.clone(),
                        scenario: scenario.name.clone(),
                        scheme: s.clone(),
                        sim_s: scenario.duration_s,
                        wall_s: best,
                        runs: args.runs,
                        realtime_factor: scenario.duration_s / best.max(1e-9),
                        steps: out.steps,
                        goodput_mbps: out.goodput_mbps,
                    };
                    eprintln!(
                        "{:<5} {:<6} {:<16} {:<12} {:>8.1}x real time ({:.3} s wall, {} steps, {:.1} Mbit/s){}",
                        r.model,
                        r.payload,
                        r.scenario,
                        r.scheme,
                        r.realtime_factor,
                        r.wall_s,
                        r.steps,
                        r.goodput_mbps,
                        if r.grain_us > 0 {
                            format!(", grain {} µs", r.grain_us)
                        } else {
                            String::new()
                        }
                    );
                    results.push(r);
                }
            }
        }
    }
    let report = BenchReport {
        loadavg_before,
        loadavg_after: loadavg(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        steal_pct: steal_pct(cpu_before, fbdt_emu::fidelity::host_cpu_jiffies()),
        host,
        results,
    };
    eprintln!(
        "load average before {:?}, after {:?}; hypervisor steal {}",
        report.loadavg_before,
        report.loadavg_after,
        report.steal_pct.map_or("unknown".into(), |p| format!("{p:.1} %"))
    );
    match args.json {
        Some(Some(path)) => fbdt_harness::results::write_json(&path, &report)?,
        Some(None) => println!("{}", serde_json::to_string_pretty(&report)?),
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> fbdt_harness::TestbedLimits {
        (&fbdt_emu::TestbedOptions::default()).into()
    }

    fn args(payload: &[&str], json: PathBuf) -> BenchSimArgs {
        BenchSimArgs {
            scenarios: vec!["los".into()],
            schemes: vec!["fbdt".into(), "tcp:wigig".into()],
            duration: Some(0.3),
            payload: payload.iter().map(|s| s.to_string()).collect(),
            runs: 1,
            grain: 0,
            json: Some(Some(json)),
        }
    }

    /// One result per model × payload × scheme, each with a realtime factor; both payload
    /// modes simulate the same run (same steps and goodput).
    #[test]
    fn reports_every_model_and_payload_mode() {
        let dir = std::env::temp_dir().join(format!("fbdt-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bench.json");
        bench_sim(args(&["shared", "exact"], file.clone()), limits()).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(v["host"]["reference_ms"].as_f64().unwrap() > 0.0);
        assert!(v["host"]["cpu_model"].is_string());
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2 * 2 * 2);
        for r in results {
            assert!(r["realtime_factor"].as_f64().unwrap() > 0.0);
            let twin = results
                .iter()
                .find(|o| o["model"] == r["model"] && o["scheme"] == r["scheme"] && o["payload"] != r["payload"])
                .unwrap();
            assert_eq!(
                (&r["steps"], &r["goodput_mbps"]),
                (&twin["steps"], &twin["goodput_mbps"])
            );
        }
    }

    #[test]
    fn steal_is_a_share_of_the_time_between_two_readings() {
        assert_eq!(steal_pct((0, 10, 1000), (0, 30, 1200)), Some(10.0));
        // A counter that did not move (or went back) says nothing.
        assert_eq!(steal_pct((0, 10, 1000), (0, 10, 1000)), None);
        assert_eq!(steal_pct((0, 10, 1000), (0, 5, 1100)), None);
    }

    #[test]
    fn an_unknown_payload_mode_is_an_error() {
        let e = bench_sim(args(&["zero"], std::env::temp_dir().join("unused.json")), limits()).unwrap_err();
        assert!(e.to_string().contains("unknown payload mode"), "{e}");
    }
}
