//! `workload rrul --backend emu`: latency under load. A bulk download keeps every path
//! busy; beside it a ping-pong flow asks for 64 bytes every `--ping-ms` and a fetch asks
//! for 100 kB every second, each on its own connection through the same route: `fbdt`
//! through `fbdt proxy`/`fbdt serve` (the mux carries all three in one session), kernel
//! `mptcp`, or `tcp:<path>` over one radio. What a person feels is the interactive flow's
//! delay over the best path's base RTT and the fetch times; the bulk goodput says what
//! that cost.
//!
//! Testbed only: the simulator carries one in-order stream per session and has no mux, so
//! a ping there would queue behind the bulk bytes by construction.

mod flows;
mod origin;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fbdt_emu::perf::Proto;
use fbdt_emu::Side;
use fbdt_harness::process::Children;
use fbdt_harness::results::percentile;
use fbdt_harness::BackendKind;
use serde::Serialize;

use crate::browser::{on_testbed, route, start_fbdt_pair, Route};
use crate::setup::{Setup, WorkloadArgs};
use flows::{Dial, FlowPlan, Measured};

/// The origin's port in the server namespace.
const ORIGIN_PORT: u16 = 9100;
/// Bulk alone before the interactive flows start.
const WARMUP: Duration = Duration::from_secs(2);
const PING_BYTES: u64 = 64;
const FETCH_BYTES: u64 = 100_000;
const FETCH_INTERVAL: Duration = Duration::from_secs(1);

/// p50/p90/p99 of some samples (ms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Spread {
        Spread {
            p50: percentile(v, 0.5),
            p90: percentile(v, 0.9),
            p99: percentile(v, 0.99),
        }
    }
}

/// One scheme's result over every seed.
#[derive(Clone, Debug, Serialize)]
pub struct RrulResult {
    pub scheme: String,
    /// The best path's base RTT (twice its least one-way delay in the schedule), what the
    /// interactive flow's delay is measured against.
    pub base_rtt_ms: f64,
    /// The ping-pong's round trip less `base_rtt_ms`.
    pub interactive_added_ms: Spread,
    pub interactive_rtt_ms: Spread,
    pub pings: usize,
    pub pings_unanswered: usize,
    /// 100 kB fetches, request to last byte.
    pub fetch_ms: Spread,
    pub fetches: usize,
    pub fetches_unfinished: usize,
    /// The bulk download's goodput while the interactive flows ran.
    pub bulk_mbps: f64,
    /// What the runs cost: the testbed monitors' stack CPU (both ends, the processes they
    /// started — `fbdt serve`/`proxy`, the origin — and the kernel's work for them), cores,
    /// mean over the scheme's faithful runs; null if none was faithful.
    pub stack_cpu_cores: Option<f64>,
    /// Per seed: (seed, ping p99 ms, bulk Mbit/s), to see the spread between runs.
    pub runs: Vec<(u64, f64, f64)>,
    /// The distribution `interactive_added_ms` summarises: its quantiles at 0, 0.5, 1, …,
    /// 100 % (201 values), what `--plot` draws the CDF from.
    pub interactive_added_quantiles_ms: Vec<f64>,
}

/// Quantile steps of `interactive_added_quantiles_ms`: every 0.5 %, so the tail above p99
/// shows as one step of its own.
pub const QUANTILE_STEPS: usize = 200;

/// `--plot` is rrul's and writes a PNG: refused before anything runs otherwise.
pub fn check_plot(args: &WorkloadArgs) -> Result<()> {
    let Some(path) = &args.plot else {
        return Ok(());
    };
    if args.kind != crate::Kind::Rrul {
        bail!("--plot draws rrul's figure; the other workloads write JSON (--json)");
    }
    if path.extension().and_then(|e| e.to_str()) != Some("png") {
        bail!("--plot {}: expected a file name ending in .png (an .svg is written beside it)", path.display());
    }
    Ok(())
}

pub fn run(setup: &Setup, args: &WorkloadArgs) -> Result<Vec<RrulResult>> {
    if setup.backend() != BackendKind::Emu {
        bail!(
            "rrul runs on the testbed (--backend emu): the simulator carries one in-order stream \
             per session and no mux, so its pings would queue behind the bulk bytes by construction"
        );
    }
    if !(1.0..=1000.0).contains(&args.ping_ms) {
        bail!("--ping-ms must be in 1..=1000");
    }
    let routes: Vec<Route> = setup.schemes.iter().map(|s| route(s, setup)).collect::<Result<_>>()?;
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("rrul needs root to build the emulated testbed: {why}");
    }
    let fbdt = if routes.iter().any(Route::is_fbdt) {
        Some(fbdt_harness::process::fbdt_binary(None)?)
    } else {
        None
    };
    let run_s = setup.scenario_duration_s.min(setup.scenario.duration_s);
    let measure = Duration::from_secs_f64((run_s - WARMUP.as_secs_f64()).clamp(5.0, 600.0));
    let base_rtt_ms = best_base_rtt_ms(setup)?;
    let bar = fbdt_harness::progress::bar((setup.schemes.len() * setup.seeds.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("rrul [{bar:30}] {pos}/{len} runs, ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut out = Vec::new();
    for (scheme, route) in setup.schemes.iter().zip(&routes) {
        let mut all = Measured::default();
        let mut runs = Vec::new();
        for &seed in &setup.seeds {
            bar.set_message(format!("{scheme}, seed {seed}"));
            let m = on_testbed(setup, scheme, seed, |tb, children| {
                one_run(tb, children, route, fbdt.as_deref(), args.ping_ms, measure)
            })?;
            runs.push((seed, percentile(&m.ping_ms, 0.99), mbps(m.bulk_bytes, m.bulk_s)));
            all.ping_ms.extend(&m.ping_ms);
            all.pings_unanswered += m.pings_unanswered;
            all.fetch_ms.extend(&m.fetch_ms);
            all.fetches_unfinished += m.fetches_unfinished;
            all.bulk_bytes += m.bulk_bytes;
            all.bulk_s += m.bulk_s;
            bar.inc(1);
        }
        let mut added: Vec<f64> = all.ping_ms.iter().map(|r| (r - base_rtt_ms).max(0.0)).collect();
        added.sort_by(f64::total_cmp);
        let quantiles = if added.is_empty() {
            Vec::new()
        } else {
            (0..=QUANTILE_STEPS)
                .map(|i| fbdt_harness::results::percentile_sorted(&added, i as f64 / QUANTILE_STEPS as f64))
                .collect()
        };
        out.push(RrulResult {
            scheme: scheme.clone(),
            base_rtt_ms,
            interactive_added_ms: Spread::of(&added),
            interactive_rtt_ms: Spread::of(&all.ping_ms),
            pings: all.ping_ms.len(),
            pings_unanswered: all.pings_unanswered,
            fetch_ms: Spread::of(&all.fetch_ms),
            fetches: all.fetch_ms.len(),
            fetches_unfinished: all.fetches_unfinished,
            bulk_mbps: mbps(all.bulk_bytes, all.bulk_s),
            stack_cpu_cores: setup.stack_cpu(scheme),
            runs,
            interactive_added_quantiles_ms: quantiles,
        });
    }
    bar.finish_and_clear();
    print_table(&out);
    Ok(out)
}

fn mbps(bytes: u64, s: f64) -> f64 {
    if s > 0.0 {
        bytes as f64 * 8.0 / s / 1e6
    } else {
        0.0
    }
}

/// Twice the least one-way delay any path has while it carries (rate > 0).
fn best_base_rtt_ms(setup: &Setup) -> Result<f64> {
    let schedule = setup.scenario.schedule(setup.scale)?;
    schedule
        .paths
        .iter()
        .flat_map(|p| p.steps.iter().filter(|s| s.rate_mbps > 0.0).map(|s| 2.0 * s.delay_ms))
        .min_by(f64::total_cmp)
        .context("no path of the scenario ever carries")
}

/// One run on a started testbed: the origin, the route's servers, the flows.
fn one_run(
    tb: &fbdt_emu::Testbed,
    children: &mut Children,
    route: &Route,
    fbdt: Option<&std::path::Path>,
    ping_ms: f64,
    measure: Duration,
) -> Result<Measured> {
    let paths = tb.paths().to_vec();
    let server_ip = match route {
        Route::Tcp(i) => paths[*i].server_ip,
        _ => paths[0].server_ip,
    };
    let origin = SocketAddr::from((server_ip, ORIGIN_PORT));
    let mptcp = *route == Route::Mptcp;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = tb.spawn_in(Side::Server, move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async move {
            let listener = origin::bind(SocketAddr::from(([0, 0, 0, 0], ORIGIN_PORT)), mptcp);
            let ok = listener.is_ok();
            let _ = ready_tx.send(listener.as_ref().map(|_| ()).map_err(|e| format!("{e:#}")));
            if ok {
                origin::serve(listener.expect("checked"), stop_rx).await
            } else {
                Ok(())
            }
        })
    })?;
    let started = ready_rx
        .recv_timeout(Duration::from_secs(10))
        .context("the rrul origin did not start")?;
    // The servers' logs and the proxy's control socket, kept until the run's processes end.
    let work = tempfile::tempdir().context("a working directory")?;
    let measured = (|| -> Result<Measured> {
        started.map_err(anyhow::Error::msg)?;
        let dial = match route {
            Route::Fbdt(flags) => {
                let fbdt = fbdt.expect("found for an fbdt scheme");
                let proxy = start_fbdt_pair(tb, &[origin], fbdt, flags, work.path(), children)?;
                Dial::Socks { proxy, origin }
            }
            Route::Tcp(i) => Dial::Kernel {
                from: paths[*i].client_ip,
                origin,
                proto: Proto::Tcp,
            },
            Route::Mptcp => Dial::Kernel {
                from: paths[0].client_ip,
                origin,
                proto: Proto::Mptcp,
            },
        };
        let plan = FlowPlan {
            dial,
            warmup: WARMUP,
            measure,
            ping_interval: Duration::from_secs_f64(ping_ms / 1e3),
            ping_bytes: PING_BYTES,
            fetch_interval: FETCH_INTERVAL,
            fetch_bytes: FETCH_BYTES,
        };
        let client = tb.spawn_in(Side::Client, move || -> Result<Measured> {
            // Two workers, so reading the bulk flow at Gbit/s never delays a ping's answer
            // (threads started from here share this thread's namespace).
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(flows::run(plan))
        })?;
        let m = client
            .join()
            .map_err(|_| anyhow::anyhow!("the rrul client panicked"))?
            .context("entering the client namespace")??;
        children.check(work.path())?;
        Ok(m)
    })();
    let _ = stop_tx.send(());
    let served = server.join().map_err(|_| anyhow::anyhow!("the rrul origin panicked"))?;
    let m = measured?;
    served
        .context("entering the server namespace")?
        .context("the rrul origin")?;
    Ok(m)
}

fn print_table(results: &[RrulResult]) {
    println!(
        "{:<16} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9}",
        "scheme", "added p50", "p90", "p99", "fetch p50", "fetch p99", "bulk Mb/s", "stack CPU"
    );
    for r in results {
        let a = r.interactive_added_ms;
        println!(
            "{:<16} {:>9.1} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>10.1} {:>9}",
            r.scheme,
            a.p50,
            a.p90,
            a.p99,
            r.fetch_ms.p50,
            r.fetch_ms.p99,
            r.bulk_mbps,
            r.stack_cpu_cores.map_or("-".to_string(), |c| format!("{c:.2}"))
        );
    }
    if let Some(r) = results.first() {
        println!(
            "(ms over the best path's base RTT, {:.1} ms; stack CPU in cores, faithful runs only)",
            r.base_rtt_ms
        );
    }
}
