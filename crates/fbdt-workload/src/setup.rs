//! What every workload runs with: the command's arguments ([`WorkloadArgs`]), the
//! scenario, schemes and seeds ([`Setup`]), how one run goes on either backend, and the
//! results JSON around a workload's own results ([`WorkloadReport`]).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use fbdt_harness::emu::Emu;
use fbdt_harness::results::fidelity::RunVerdict;
use fbdt_harness::scheme;
use fbdt_harness::sim::SimBackend;
use fbdt_harness::BackendKind;
use fbdt_scenario::Scenario;
use fbdt_sim::PathModel;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use super::driver::{Application, Drive, ObjectRecord};
use super::radio;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Q1: files of 100 KB … 1 GB (× scale), from a busy and from an idle session.
    File,
    /// Q2: synthetic pages (Table I), HTTP/1.1 over 6 connections or HTTP/2.
    Web,
    /// Q3: the paper's progressive 8K player (1-s GoPs, circular buffer, pauses, PSNR).
    Progressive,
    /// Q3b: adaptive streaming (throughput rule; with --browser dash.js), QoE_lin and
    /// rebuffering.
    Dash,
    /// Q4: 360° tiled video, FIX vs viewport-optimised tiles.
    Vr,
    /// Latency under load (testbed): a bulk download on every path and beside it a 64-byte
    /// ping-pong and a 100 kB fetch every second: their delay over the best path's RTT.
    Rrul,
}

#[derive(Args, Debug)]
pub struct WorkloadArgs {
    /// The workload.
    #[arg(value_enum)]
    pub kind: Kind,
    /// Built-in scenario name or a scenario .toml file.
    pub scenario: String,
    #[arg(long, value_enum, default_value_t = BackendKind::Sim)]
    pub backend: BackendKind,
    /// Simulator path model (see docs/simulator.md).
    #[arg(long, default_value_t = PathModel::Pipe)]
    pub model: PathModel,
    /// Comma-separated schemes as in `fbdt-lab run`. Default: fbdt, mp:minrtt and
    /// tcp:<every path>.
    #[arg(long, value_delimiter = ',')]
    pub schemes: Vec<String>,
    /// First seed (default: the scenario's); repeats use seed, seed+1, …
    #[arg(long)]
    pub seed: Option<u64>,
    /// Repetitions (seeds) per scheme and point.
    #[arg(long, default_value_t = 5)]
    pub repeat: u32,
    /// Multiplies every path rate and every workload size or video rate (default: 1 in the
    /// simulator; on the testbed the largest this machine emulates faithfully, as in `run`).
    #[arg(long)]
    pub scale: Option<f64>,
    /// Radio sleep/wake: `scenario` (as the scenario says: off in the built-ins), `off`,
    /// `defaults` (docs/scenarios.md's suggested values for paths named wifi and wigig) or
    /// `PATH=IDLE_MS:WAKE_MS,…`.
    #[arg(long, default_value = "scenario")]
    pub radio: String,
    /// Longest time of one run (s, simulated or on the testbed); the scenario's models run
    /// on past its duration. Objects not delivered by then count as incomplete.
    #[arg(long, default_value_t = 120.0)]
    pub max_duration: f64,
    /// Runs at once in the simulator (default: the number of CPUs); on the testbed one.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// file: sizes in bytes (k, M, G suffixes, decimal) before scaling.
    #[arg(long, value_delimiter = ',', default_value = "100k,1M,10M,100M,1G")]
    pub sizes: Vec<String>,
    /// file: idle time before the idle-session request (s).
    #[arg(long, default_value_t = 1.0)]
    pub idle_gap: f64,
    /// progressive: video rates in Mbit/s before scaling.
    #[arg(long, value_delimiter = ',', default_value = "425,900,1300,1700")]
    pub rates: Vec<f64>,
    /// progressive, vr, dash: video length in s (default: the scenario's duration).
    #[arg(long)]
    pub video_s: Option<f64>,
    /// progressive: the player's circular buffer, in GoPs (1 s each).
    #[arg(long, default_value_t = 3)]
    pub buffer_gops: u32,
    /// vr: the stream's rate budget in Mbit/s before scaling.
    #[arg(long, default_value_t = 1000.0)]
    pub vr_rate: f64,
    /// web: pages (msn, cnn, amazon, facebook, median).
    #[arg(long, value_delimiter = ',', default_value = "msn,cnn,amazon,facebook,median")]
    pub pages: Vec<String>,
    /// web, dash with --backend emu: load real pages, or play a real DASH ladder with
    /// dash.js, in this browser (headless Chromium through each scheme, metrics from the
    /// browser; docs/workloads.md) instead of the synthetic client.
    #[arg(long, value_enum)]
    pub browser: Option<Browser>,
    /// dash --browser: dash.js's ABR rule (default bola). The simulator's player has the
    /// throughput rule only.
    #[arg(long, value_enum)]
    pub abr: Option<Abr>,
    /// web: HTTP versions (default both): modelled (1.1 = six connections, 2 = one), or
    /// with --browser served for real (1.1: python3 http.server; 2: h2 over TLS).
    #[arg(long, value_delimiter = ',')]
    pub http: Vec<String>,
    /// web: page loads per run, each 1 s after the previous one ended.
    #[arg(long, default_value_t = 3)]
    pub page_loads: u32,
    /// rrul: the ping-pong's interval (ms).
    #[arg(long, default_value_t = 20.0)]
    pub ping_ms: f64,
    /// rrul: draw FILE.png (and FILE.svg beside it): per scheme the CDF of the ping's added
    /// delay and the bulk goodput.
    #[arg(long, value_name = "FILE.png")]
    pub plot: Option<PathBuf>,
}

/// What every workload shares: the scenario, the schemes and how to run one point.
pub struct Setup {
    pub scenario: Scenario,
    /// The scenario's own duration (the run's is `--max-duration`): the default video length.
    pub scenario_duration_s: f64,
    pub schemes: Vec<String>,
    pub seeds: Vec<u64>,
    pub scale: f64,
    pub model: PathModel,
    backend: BackendKind,
    /// Where every run of `run_one` goes: the simulator or the testbed.
    driver: Box<dyn Drive>,
    jobs: usize,
    /// What the testbed's monitors said about each emulated run.
    fidelity: std::sync::Mutex<Vec<RunVerdict>>,
    /// The options every emulated run builds its testbed with.
    pub testbed: fbdt_emu::TestbedOptions,
}

impl Setup {
    pub fn new(args: &WorkloadArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<Self> {
        if args.browser.is_some() && (!matches!(args.kind, Kind::Web | Kind::Dash) || args.backend != BackendKind::Emu)
        {
            bail!("--browser loads real pages or video on the testbed: it goes with `workload web|dash --backend emu`");
        }
        if args.abr.is_some_and(|a| a != Abr::Throughput) && (args.kind != Kind::Dash || args.browser.is_none()) {
            bail!("--abr bola|dynamic is dash.js's: it goes with `workload dash --backend emu --browser chromium`");
        }
        if args.repeat == 0 || args.repeat > 1000 {
            bail!("--repeat must be in 1..=1000");
        }
        if let Some(s) = args.scale.filter(|s| !(s.is_finite() && *s > 0.0)) {
            bail!("--scale must be > 0, got {s}");
        }
        let mut scenario = Scenario::load(&args.scenario)?;
        radio::apply(&mut scenario, &args.radio).context("--radio")?;
        let scenario_duration_s = scenario.duration_s;
        fbdt_harness::set_duration(&mut scenario, Some(args.max_duration)).context("--max-duration")?;
        let seed = args.seed.unwrap_or(scenario.seed);
        let schemes: Vec<String> = if args.schemes.is_empty() {
            let multipath = match args.backend {
                BackendKind::Sim => "mp:minrtt",
                BackendKind::Emu => "mptcp",
            };
            ["fbdt".to_string(), multipath.to_string()]
                .into_iter()
                .chain(scenario.paths.iter().map(|p| format!("tcp:{}", p.name)))
                .collect()
        } else {
            let mut v = Vec::new();
            for s in args.schemes.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
                v.extend(scheme::expand(s)?);
            }
            v
        };
        if schemes.is_empty() {
            bail!("--schemes is empty");
        }
        // rrul and the browser's runs take an fbdt scheme through `fbdt serve`/`fbdt proxy`,
        // which have options of their own (`sessions=N`): checked as the binaries take them.
        let through_binaries = args.kind == Kind::Rrul || args.browser.is_some();
        for s in &schemes {
            if through_binaries && (s == "fbdt" || s.starts_with("fbdt+")) {
                fbdt_harness::scheme::binary::flags(s, &scenario)?;
                continue;
            }
            let parsed = scheme::parse(s, &scenario, seed)?;
            match args.backend {
                BackendKind::Sim => {
                    parsed.into_sim()?;
                }
                BackendKind::Emu => {
                    fbdt_harness::emu::transport::transport(s, &scenario)?;
                }
            }
        }
        let jobs = match (args.backend, args.jobs) {
            (_, Some(j)) if j == 0 || j > 1024 => bail!("--jobs must be in 1..=1024"),
            (BackendKind::Emu, Some(j)) if j > 1 => {
                bail!("--jobs: emulated runs share the testbed's CPU; one at a time")
            }
            (BackendKind::Emu, _) => 1,
            (BackendKind::Sim, j) => j.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        };
        let scale = match args.backend {
            BackendKind::Sim => args.scale.unwrap_or(1.0),
            BackendKind::Emu => {
                // Shows the calibration's messages (a first run on a host measures it).
                let bar = fbdt_harness::progress::spinner();
                let scale = fbdt_harness::emu::scale_of(&scenario, args.scale, testbed, &bar)?.0;
                bar.finish_and_clear();
                scale
            }
        };
        // The scenario runs for `--max-duration` (set above), which bounds every run.
        let driver: Box<dyn Drive> = match args.backend {
            BackendKind::Sim => {
                let limits = fbdt_harness::TestbedLimits::from(testbed);
                Box::new(SimBackend {
                    params: fbdt_harness::sim::sim_params(&scenario, args.model, 0, &limits),
                    scale,
                    limits,
                    bar: ProgressBar::hidden(),
                })
            }
            BackendKind::Emu => Box::new(Emu {
                scale,
                testbed: testbed.clone(),
                bar: ProgressBar::hidden(),
            }),
        };
        Ok(Setup {
            scenario,
            scenario_duration_s,
            schemes,
            seeds: (0..u64::from(args.repeat)).map(|r| seed + r).collect(),
            scale,
            model: args.model,
            backend: args.backend,
            driver,
            jobs,
            fidelity: std::sync::Mutex::default(),
            testbed: testbed.clone(),
        })
    }

    /// `--video-s` (default: the scenario's duration), checked to lie in [min_s, 3600].
    pub fn video_s(&self, args: &WorkloadArgs, min_s: f64) -> Result<f64> {
        let v = args.video_s.unwrap_or(self.scenario_duration_s);
        if !(min_s..=3600.0).contains(&v) {
            bail!("--video-s must be in [{min_s}, 3600] for {:?}, got {v}", args.kind);
        }
        Ok(v)
    }

    /// One run of `app` for `scheme` with `seed`: the object timeline.
    pub fn run_one(&self, scheme_name: &str, seed: u64, app: &mut dyn Application) -> Result<Vec<ObjectRecord>> {
        let ran = self
            .driver
            .drive(&self.scenario, scheme_name, seed, app)
            .with_context(|| format!("scheme {scheme_name}, seed {seed}"))?;
        if let Some(fidelity) = ran.fidelity {
            self.record_fidelity(scheme_name, seed, fidelity);
        }
        Ok(ran.records)
    }

    /// Notes an emulated run's fidelity verdict (runs that do not go through `run_one`).
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    pub fn record_fidelity(&self, scheme: &str, seed: u64, fidelity: fbdt_emu::Fidelity) {
        let mut runs = self.fidelity.lock().expect("not poisoned");
        let run = runs.len();
        runs.push(RunVerdict::new(run, scheme, seed, fidelity));
    }

    /// The mean stack CPU (cores) of `scheme`'s faithful emulated runs so far; None without one.
    pub fn stack_cpu(&self, scheme: &str) -> Option<f64> {
        let runs = self.fidelity.lock().expect("not poisoned");
        fbdt_harness::results::fidelity::faithful_stack_cpu(&runs, scheme)
    }

    /// Runs `one` on every item, `jobs` at a time, with a progress bar; results in order.
    pub fn run_all<T: Sync, R: Send>(&self, items: &[T], one: impl Fn(&T) -> Result<R> + Sync) -> Result<Vec<R>> {
        let bar = fbdt_harness::progress::bar(items.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("workload [{bar:30}] {pos}/{len} runs, ETA {eta}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        let results = fbdt_harness::parallel::map(items, self.jobs, &bar, one);
        bar.finish_and_clear();
        results
    }
}

/// The results JSON of one workload command.
#[derive(Debug, Serialize)]
pub struct WorkloadReport<R> {
    pub kind: Kind,
    pub scenario: String,
    pub backend: &'static str,
    pub model: String,
    pub scale: f64,
    pub seeds: Vec<u64>,
    /// Radio sleep/wake per path as run (absent: always awake).
    pub radio: std::collections::BTreeMap<String, fbdt_scenario::RadioSleep>,
    pub results: Vec<R>,
    /// Emulated runs: false if the monitors found any run unfaithful (see `fidelity`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faithful: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fidelity: Vec<RunVerdict>,
    pub meta: fbdt_harness::results::Meta,
}

impl Setup {
    /// Emulated runs so far that the fidelity monitors flagged.
    pub fn unfaithful_runs(&self) -> usize {
        self.fidelity
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|f| !f.faithful)
            .count()
    }

    pub fn report<R: Serialize>(&self, kind: Kind, results: Vec<R>) -> WorkloadReport<R> {
        let fidelity = self.fidelity.lock().expect("not poisoned").clone();
        for f in fidelity.iter().filter(|f| !f.faithful) {
            eprintln!(
                "UNFAITHFUL run {} {} (seed {}): {}",
                f.run,
                f.scheme,
                f.seed,
                f.reasons.join("; ")
            );
        }
        WorkloadReport {
            kind,
            scenario: self.scenario.name.clone(),
            backend: match self.backend {
                BackendKind::Sim => "sim",
                BackendKind::Emu => "emu",
            },
            model: match self.backend {
                BackendKind::Sim => self.model.to_string(),
                BackendKind::Emu => "testbed".to_string(),
            },
            scale: self.scale,
            seeds: self.seeds.clone(),
            radio: self
                .scenario
                .paths
                .iter()
                .filter_map(|p| p.radio.map(|r| (p.name.clone(), r)))
                .collect(),
            results,
            faithful: (self.backend == BackendKind::Emu).then(|| fidelity.iter().all(|f| f.faithful)),
            fidelity,
            meta: fbdt_harness::results::Meta::here(),
        }
    }
}

/// Which browser `--browser` drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Browser {
    /// Headless Chromium over the DevTools protocol (root, `--backend emu`).
    Chromium,
}

/// dash.js's ABR strategy (`streaming.abr.ABRStrategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Abr {
    /// BOLA: buffer-based (Lyapunov), dash.js's `abrBola`.
    Bola,
    /// dash.js's default: throughput rule at start-up and low buffer, BOLA above.
    Dynamic,
    /// The throughput rule only (`abrThroughput`), as the simulator's player.
    Throughput,
}

impl Abr {
    pub(super) fn strategy(self) -> &'static str {
        match self {
            Abr::Bola => "abrBola",
            Abr::Dynamic => "abrDynamic",
            Abr::Throughput => "abrThroughput",
        }
    }
}
