//! `fbdt-lab run --backend emu`: each scheme on a fresh emulated testbed (fbdt-emu), the
//! download direction (server sends, as in the papers). Kernel TCP and MPTCP are read by
//! fbdt-emu's perf reader, FBDT and `mp:*` by a reader over the fbdt-net session that samples
//! the same way (cumulative bytes every 100 ms; only bytes that arrived within the duration
//! count). Needs root.

use std::collections::BTreeMap;
use std::time::Instant as WallClock;

use anyhow::{bail, Context, Result};
use fbdt_emu::calibrate::ScaleSource;
use fbdt_emu::perf;
use fbdt_emu::{Testbed, TestbedOptions, TestbedSpec};
use fbdt_scenario::{Scenario, Schedule};
use indicatif::ProgressBar;

use crate::backend::{aggregate, Backend, Outcome};
use crate::error::HarnessError;
use crate::results::cotag::CotagCounters;
use crate::results::fidelity::{RunEntry, RunFidelity};
use crate::results::{Sample, SchemeResult};
use crate::scheme;
use crate::traffic::Traffic;
use fbdt_net::NetConfig;

use super::transport::{transport, transport_encryption, Transport};

/// What the emulated runs produced.
pub struct EmuRun {
    pub scale: f64,
    pub capacity_mbps: f64,
    pub results: Vec<SchemeResult>,
    /// What the fidelity monitors saw in every run, and where the scale came from.
    pub fidelity: RunFidelity,
}

/// How the scale of an emulated run is chosen.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScaleChoice {
    /// `--scale`: this one, no calibration.
    pub given: Option<f64>,
    /// `--auto-scale` (and `paper` at a calibrated scale): when the monitors blame the
    /// emulator for an unfaithful run ([`Blame::Emulator`]), repeat the scenario (every
    /// scheme, so they stay comparable) at a lower scale, up to [`AUTO_SCALE_TRIES`]
    /// attempts. A busy host never lowers the scale; it gets [`HOST_REPEATS`] repeat at
    /// the same scale.
    pub auto: bool,
}

/// Scenario attempts with `--auto-scale` (each at 1/[`AUTO_SCALE_STEP`] of the previous scale).
pub const AUTO_SCALE_TRIES: u32 = 3;
pub const AUTO_SCALE_STEP: f64 = 1.5;
/// Repeats of a scenario at the same scale when the monitors blamed the host (a burst of
/// hypervisor steal or another program): such bursts usually pass within the minute a
/// scenario takes, and a newcomer can do nothing with an UNFAITHFUL verdict. A host that
/// stays disturbed keeps its flagged second attempt.
pub const HOST_REPEATS: u32 = 1;

/// Whom the fidelity monitors blamed for a scenario's unfaithful runs: what decides whether
/// running it again at a lower scale can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// Every run within tolerance.
    Nobody,
    /// The emulator fell behind — packets released late, packets dropped unread, its
    /// threads saturated — on an otherwise quiet host: the scale asked more than this host
    /// emulates (a long-RTT path the calibration does not fill, a run longer than its
    /// probes). A lower scale helps.
    Emulator,
    /// The host was disturbed: other programs used its CPU or the hypervisor stole it. What
    /// the emulator did beside that is the host's doing as much as the scale's; a lower
    /// scale would hide it and, from a cached scale, lower this host's cache for good.
    Host,
    /// Neither (the endpoints' CPUs were busy): not the emulator's rate.
    Endpoints,
}

impl Blame {
    /// A repeat at a lower scale can make the runs faithful.
    pub fn lower_helps(self) -> bool {
        self == Blame::Emulator
    }
}

/// [`Blame`] of a scenario's runs, judged with `tol` (what they were judged with). The host
/// is blamed first: late packets beside a busy host say nothing about the scale.
pub fn blame(runs: &[RunEntry], tol: &fbdt_emu::Tolerances) -> Blame {
    let bad: Vec<&RunEntry> = runs.iter().filter(|r| !r.faithful).collect();
    if bad.is_empty() {
        return Blame::Nobody;
    }
    if bad.iter().any(|r| r.others_cpu > tol.max_others_cpu || r.steal > tol.max_steal) {
        return Blame::Host;
    }
    // Drops and saturation are judged on shares and per-thread CPU the entry does not keep;
    // their reasons (fbdt_emu::fidelity::verdict) are the emulator's own lines.
    let emulator = |r: &RunEntry| {
        r.emulator_late_share > tol.max_late_share || r.reasons.iter().any(|x| x.starts_with("emulator "))
    };
    if bad.iter().any(|r| emulator(r)) {
        Blame::Emulator
    } else {
        Blame::Endpoints
    }
}

/// What follows an attempt at a scenario that the monitors judged `blame`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NextAttempt {
    /// Keep this attempt's results.
    Keep,
    /// Every scheme again at this lower scale: the emulator could not keep up.
    Lower(f64),
    /// Every scheme once more at the same scale: the host was disturbed.
    Again,
}

/// After attempt number `attempt` (from 1; the scales tried) at `scale`, with `host_repeats` repeats for a
/// disturbed host made so far: lower by [`AUTO_SCALE_STEP`] when rescaling is on, the
/// emulator was blamed and attempts are left; the same scale again when the host was
/// blamed and [`HOST_REPEATS`] are not used up; otherwise keep.
pub fn next_attempt(blame: Blame, auto: bool, attempt: u32, scale: f64, host_repeats: u32) -> NextAttempt {
    match blame {
        _ if !auto => NextAttempt::Keep,
        Blame::Emulator if attempt < AUTO_SCALE_TRIES => {
            NextAttempt::Lower(fbdt_emu::calibrate::round_scale(scale / AUTO_SCALE_STEP))
        }
        Blame::Host if host_repeats < HOST_REPEATS => NextAttempt::Again,
        _ => NextAttempt::Keep,
    }
}

/// `given`, else this host's calibrated scale for the scenario (cached, or measured now),
/// else — on a busy host or when no scale is faithful — the default guess, said on `bar`.
pub fn scale_of(
    scenario: &Scenario,
    given: Option<f64>,
    testbed: &TestbedOptions,
    bar: &ProgressBar,
) -> Result<(f64, ScaleSource), HarnessError> {
    if let Some(s) = given {
        return Ok((s, ScaleSource::Given));
    }
    let unscaled = fbdt_emu::spec_from_schedule(scenario, &scenario.schedule(1.0)?)?;
    let found = bar.suspend(|| fbdt_emu::calibrate::scale_for(&unscaled, testbed, false, true));
    let (s, src, search) = match found {
        Ok(x) => x,
        Err(e @ (fbdt_emu::Error::NoFaithfulScale { .. } | fbdt_emu::Error::HostBusy { .. })) => {
            let guess = fbdt_emu::default_scale(unscaled.peak_total_mbps(), testbed.mtu);
            bar.println(format!("{e}; running at scale {guess}, the runs' monitors will tell"));
            (guess, ScaleSource::Fallback, None)
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(search) = search {
        bar.println(format!(
            "{}: calibrated scale {} on this host in {:.0} s ({} probes)",
            scenario.name,
            s,
            search.took_s,
            search.probes.len()
        ));
    }
    Ok((s, src))
}

/// The testbed as a [`Backend`]: each run on a fresh testbed at `scale`, progress in
/// 100-ms steps of the duration on `bar`.
pub struct Emu {
    pub scale: f64,
    pub testbed: TestbedOptions,
    pub bar: ProgressBar,
}

impl Emu {
    /// What one run with `seed` plays: the scenario with that seed, its schedule at this
    /// backend's scale and the testbed built from it.
    pub fn prepare(&self, scenario: &Scenario, seed: u64) -> Result<(Scenario, Schedule, TestbedSpec), HarnessError> {
        let mut sc = scenario.clone();
        sc.seed = seed;
        let schedule = sc.schedule(self.scale)?;
        let spec = fbdt_emu::spec_from_schedule(&sc, &schedule)?;
        Ok((sc, schedule, spec))
    }
}

impl Backend for Emu {
    fn run(&self, scenario: &Scenario, name: &str, traffic: Traffic, seed: u64) -> Result<Outcome, HarnessError> {
        let (sc, schedule, spec) = self.prepare(scenario, seed)?;
        run_one(&sc, &spec, &schedule, name, traffic, &self.testbed, &self.bar)
            .map_err(|e| HarnessError::from(e).in_run(name, seed))
    }
}

/// Runs every scheme in `names` for the scenario's duration, `repeat` times (interleaved:
/// every scheme once, then again, so slow drifts of a noisy machine hit all schemes alike;
/// repetition r uses seed + r). The scale: `choice.given`, else this host's calibrated
/// scale for the scenario (cached, or measured now; see fbdt_emu::calibrate::scale_for).
pub fn run(
    scenario: &Scenario,
    names: &[String],
    choice: ScaleChoice,
    repeat: u32,
    traffic: Traffic,
    testbed: &TestbedOptions,
    bar: &ProgressBar,
) -> Result<EmuRun, HarnessError> {
    if let Some(why) = fbdt_emu::skip_reason() {
        return Err(HarnessError::NeedsRoot(why));
    }
    for n in names {
        transport(n, scenario)?;
    }
    let (mut scale, source) = scale_of(scenario, choice.given, testbed, bar)?;
    let mut rejected = Vec::new();
    let paths: Vec<String> = scenario.paths.iter().map(|p| p.name.clone()).collect();
    let mut attempt = 1;
    let mut host_repeats = 0;
    loop {
        let mut out = run_at(scenario, names, scale, repeat, traffic, testbed, bar)?;
        let faithful = out.1.iter().all(|e| e.faithful);
        let blamed = blame(&out.1, &fbdt_emu::Tolerances::default());
        match next_attempt(blamed, choice.auto, attempt, scale, host_repeats) {
            NextAttempt::Lower(lower) => {
                rejected.push(scale);
                bar.println(format!(
                    "{}: unfaithful at scale {scale}, the emulator at fault; every scheme again at {lower}",
                    scenario.name
                ));
                scale = lower;
                attempt += 1;
            }
            NextAttempt::Again => {
                host_repeats += 1;
                bar.println(format!(
                    "{}: unfaithful at scale {scale}, the host busy or stolen from (not the emulator); every scheme once more at the same scale",
                    scenario.name
                ));
            }
            NextAttempt::Keep => {
                if choice.auto && !faithful {
                    bar.println(format!(
                        "{}: unfaithful at scale {scale}; not repeated lower ({})",
                        scenario.name,
                        match blamed {
                            Blame::Host => "the host was busy or stolen from again, not the emulator at fault",
                            Blame::Endpoints => "the endpoints' CPUs were busy, not the emulator at fault",
                            _ => "no attempts left",
                        }
                    ));
                }
                let measured_here = matches!(source, ScaleSource::Cached | ScaleSource::Measured);
                if faithful && !rejected.is_empty() && measured_here {
                    let unscaled = fbdt_emu::spec_from_schedule(scenario, &scenario.schedule(1.0)?)?;
                    fbdt_emu::calibrate::remember_lower_scale(&unscaled, testbed, scale)?;
                    bar.println(format!("{}: this host's cached scale is now {scale}", scenario.name));
                }
                let mut fidelity = RunFidelity::from_runs(&paths, std::mem::take(&mut out.1), scale, &source, rejected);
                fidelity.host_repeats = host_repeats;
                for r in &mut out.0.results {
                    r.faithful = Some(fidelity.scheme_faithful(&r.scheme));
                }
                return Ok(EmuRun { fidelity, ..out.0 });
            }
        }
    }
}

/// Every scheme × repetition at one scale.
fn run_at(
    scenario: &Scenario,
    names: &[String],
    scale: f64,
    repeat: u32,
    traffic: Traffic,
    testbed: &TestbedOptions,
    bar: &ProgressBar,
) -> Result<(EmuRun, Vec<RunEntry>), HarnessError> {
    let mut entries = Vec::new();
    let first = scenario.schedule(scale)?;
    let mut singles: Vec<Vec<(u64, Outcome)>> = names.iter().map(|_| Vec::new()).collect();
    let mut wall = vec![0.0; names.len()];
    let emu = Emu {
        scale,
        testbed: testbed.clone(),
        bar: bar.clone(),
    };
    for r in 0..repeat {
        let seed = scenario.seed + u64::from(r);
        for (i, name) in names.iter().enumerate() {
            bar.set_message(if repeat > 1 {
                format!("{name} #{}", r + 1)
            } else {
                name.clone()
            });
            let started = WallClock::now();
            let one = emu.run(scenario, name, traffic, seed)?;
            let fidelity = one.fidelity.clone().context("the testbed reported no fidelity")?;
            wall[i] += started.elapsed().as_secs_f64();
            bar.println(format!(
                "{name}: {:.1} Mbit/s (emulated, scale {scale:.3}, seed {}){}",
                one.goodput_mbps,
                seed,
                if fidelity.faithful {
                    String::new()
                } else {
                    format!(" UNFAITHFUL: {}", fidelity.reasons.join("; "))
                }
            ));
            entries.push(RunEntry::new(name, seed, scale, &fidelity));
            singles[i].push((seed, one));
        }
    }
    let results = names
        .iter()
        .zip(singles)
        .zip(wall)
        .map(|((name, runs), wall_s)| aggregate(name, transport_encryption(name, scenario), runs, wall_s))
        .collect();
    let paths: Vec<String> = scenario.paths.iter().map(|p| p.name.clone()).collect();
    let fidelity = RunFidelity::from_runs(&paths, Vec::new(), scale, &ScaleSource::Given, Vec::new());
    Ok((
        EmuRun {
            scale,
            capacity_mbps: first.capacity_mbps(),
            results,
            fidelity,
        },
        entries,
    ))
}

fn run_one(
    scenario: &Scenario,
    spec: &fbdt_emu::TestbedSpec,
    schedule: &fbdt_scenario::Schedule,
    name: &str,
    traffic: Traffic,
    testbed: &TestbedOptions,
    bar: &ProgressBar,
) -> Result<Outcome> {
    let ticks = (scenario.duration_s / 0.1).round() as u64;
    let transport = transport(name, scenario)?;
    let (_, opts) = scheme::runtime_options(name, scenario)?;
    // A kernel scheme's `+cc=` is the testbed's controller for this run (both namespaces).
    let mut spec = spec.clone();
    if let Some(cc) = opts.kernel_congestion().filter(|_| matches!(transport, Transport::Kernel(..))) {
        spec.congestion_control = cc.to_string();
    }
    let spec = &spec;
    let base = bar.position();
    let mut tb = Testbed::start(spec, testbed).context("starting the testbed")?;
    let before = tb.path_counters()?;
    tb.play()?;
    let played = WallClock::now();
    let progress = |t: f64| bar.set_position(base + ((t / 0.1) as u64).min(ticks));
    let competing: Vec<fbdt_emu::PathInfo> = tb.competitors().into_iter().cloned().collect();
    let crossed_from = tb.bottleneck_bytes();
    let (traffic_result, crossed) = std::thread::scope(|scope| {
        let tb = &tb;
        // A shared bottleneck's competing flows run beside the scheme for the duration.
        let flows: Vec<_> = competing
            .iter()
            .map(|p| scope.spawn(move || perf::download_over(tb, p, scenario.duration_s)))
            .collect();
        let sampler = crossed_from.as_ref().map(|_| {
            scope.spawn(move || {
                let end = played + std::time::Duration::from_secs_f64(scenario.duration_s);
                std::thread::sleep(end.saturating_duration_since(WallClock::now()));
                (tb.bottleneck_bytes(), played.elapsed().as_secs_f64())
            })
        });
        let r = run_traffic(tb, scenario, name, traffic, transport, &opts, testbed, played, &progress);
        let flows = flows
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(fbdt_emu::Error::Emulator("a competing flow panicked".into()))))
            .collect::<Result<Vec<_>, _>>();
        let crossed = sampler.and_then(|h| h.join().ok());
        (r.and_then(|r| flows.map(|_| r).context("a competing flow at the shared bottleneck")), crossed)
    });
    let TrafficRun {
        transfer,
        sessions,
        delay,
        cotag,
        mut bursts,
    } = traffic_result?;
    let bottleneck = match (crossed_from, crossed) {
        (Some(from), Some((Some(to), secs))) => {
            let b = to.since(&from);
            Some(fbdt_sim::BottleneckOutcome {
                scheme_bytes: b.scheme,
                competing_bytes: b.competing,
                duration_s: secs,
            })
        }
        _ => None,
    };
    let after = tb.path_counters()?;
    // The counters span the whole testbed run: connecting, the traffic and the drain after it.
    let counted_s = played.elapsed().as_secs_f64();
    let fidelity = tb.fidelity();
    tb.stop();
    bar.set_position(base + ticks);

    // Within the duration only, like the simulator's series: after it the reader drains.
    let series: Vec<Sample> = transfer
        .series
        .windows(2)
        .take_while(|w| w[1].0 <= scenario.duration_s + 0.05)
        .map(|w| Sample {
            t: w[1].0,
            mbps: (w[1].1 - w[0].1) as f64 * 8.0 / (w[1].0 - w[0].0).max(1e-9) / 1e6,
        })
        .collect();
    let seconds = series
        .chunks(10)
        .filter(|c| c.len() == 10)
        .map(|c| c.iter().map(|s| s.mbps).sum::<f64>() / 10.0)
        .collect();
    let per_path_bytes: BTreeMap<String, u64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a.name.clone(), a.client.rx_bytes.saturating_sub(b.client.rx_bytes)))
        .collect();
    if let Some(b) = &mut bursts {
        b.link_utilisation = link_utilisation(&per_path_bytes, schedule, counted_s);
    }
    // What arrived within the run's duration: the reader drains queued bytes for a while
    // after the sender stops, and those would inflate the rate. At the duration exactly:
    // FBDT's reader stamps its samples a little after each 100-ms mark (the kernel reader
    // stamps the mark), and taking the last sample at or before the duration dropped
    // FBDT's last 100 ms — 1 % of a 10-s run.
    let bytes = transfer.bytes_by(scenario.duration_s);
    let secs = transfer.secs;
    let path_transport = sessions
        .as_ref()
        .map(|(server, client)| path_transport(tb_paths(scenario), server, client))
        .unwrap_or_default();
    let kernel_cc = opts.kernel_congestion().map(str::to_string);
    Ok(Outcome {
        goodput_mbps: bytes as f64 * 8.0 / scenario.duration_s / 1e6,
        path_transport,
        kernel_congestion: kernel_cc,
        bytes,
        redundant_bytes: sessions.as_ref().map_or(0, |(_, c)| c.redundant_bytes_received),
        series,
        seconds,
        per_path_bytes,
        counters: sessions
            .as_ref()
            .map(|(server, client)| (server.core.sender.clone(), client.core.receiver.clone())),
        wakeups_per_s: sessions
            .as_ref()
            .map(|(s, c)| (s.wakeups + c.wakeups) as f64 / secs.max(1e-9)),
        activity: sessions.as_ref().map(|(s, c)| crate::results::activity::SessionActivity {
            sender: crate::results::activity::EndActivity::of(s, secs),
            receiver: crate::results::activity::EndActivity::of(c, secs),
        }),
        endpoint_cpu_cores: Some(fidelity.endpoints_cpu),
        stack_cpu_cores: Some(fidelity.stack_cpu),
        delay,
        cotag,
        bursts,
        bottleneck,
        fidelity: Some(fidelity),
        ..Outcome::default()
    })
}

/// What one run's traffic gave, before the testbed's counters are read.
struct TrafficRun {
    transfer: perf::Transfer,
    sessions: Option<(fbdt_net::SessionStats, fbdt_net::SessionStats)>,
    delay: fbdt_core::delay_probe::DelaySamples,
    cotag: Option<CotagCounters>,
    bursts: Option<crate::results::bursts::BurstStats>,
}

impl TrafficRun {
    /// A transfer and nothing else (what a transport does not fill stays empty).
    fn of(transfer: perf::Transfer) -> Self {
        Self {
            transfer,
            sessions: None,
            delay: fbdt_core::delay_probe::DelaySamples::default(),
            cotag: None,
            bursts: None,
        }
    }
}

/// The scheme's traffic over `tb` for the scenario's duration (started at `played`).
#[allow(clippy::too_many_arguments)]
fn run_traffic(
    tb: &Testbed,
    scenario: &Scenario,
    name: &str,
    traffic: Traffic,
    transport: Transport,
    opts: &scheme::RuntimeOptions,
    testbed: &TestbedOptions,
    played: WallClock,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<TrafficRun> {
    Ok(match (traffic, transport) {
        (Traffic::Bursts, transport) => {
            let b = run_bursts(tb, scenario, name, transport, testbed, played, progress)?;
            TrafficRun {
                bursts: Some(b.run.stats),
                cotag: b.cotag,
                ..TrafficRun::of(b.run.transfer)
            }
        }
        (Traffic::Bulk, Transport::Kernel(proto, path)) => {
            let (t, delay) =
                perf::download_with_delay(tb, path, path, proto, scenario.duration_s, Some(&|t, _| progress(t)))?;
            TrafficRun {
                delay,
                ..TrafficRun::of(t)
            }
        }
        (Traffic::Bulk, Transport::Session(mut core, encryption)) => {
            scheme::buffer_parity(name, &mut core, testbed.tcp_buffer_max);
            let mut net = NetConfig {
                core: *core,
                ..NetConfig::default()
            };
            opts.apply(&mut net);
            let ends = crate::emu::session::Ends::new(encryption)?;
            let s = crate::emu::session::download(tb, net, ends, scenario.duration_s, progress)?;
            TrafficRun {
                sessions: Some((s.server, s.client)),
                delay: s.delay,
                ..TrafficRun::of(s.transfer)
            }
        }
        (Traffic::Bulk, Transport::CotagLink(c)) => {
            let mode = crate::emu::cotag_link::mode(c.as_ref(), tb);
            let (t, counters) =
                crate::emu::cotag_link::download(tb, mode, played, scenario.duration_s, scenario.seed, progress)?;
            // The flow through the TUN link is not stamped yet: no delay samples.
            TrafficRun {
                cotag: Some(counters),
                ..TrafficRun::of(t)
            }
        }
    })
}

fn tb_paths(scenario: &Scenario) -> Vec<String> {
    scenario.paths.iter().map(|p| p.name.clone()).collect()
}

/// Per path, from the download's data sender (the server): the controllers in force and
/// TCP's retransmissions and timeouts; reconnects as either end counted them (a client's
/// re-dial and the server's JOIN are the same connection).
fn path_transport(
    names: Vec<String>,
    server: &fbdt_net::SessionStats,
    client: &fbdt_net::SessionStats,
) -> Vec<(String, crate::results::PathTransport)> {
    names
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let s = server.paths.get(i).cloned().unwrap_or_default();
            let c = client.paths.get(i).cloned().unwrap_or_default();
            let t = crate::results::PathTransport {
                congestion_control: s.cc.seconds.clone(),
                retransmits: s.cc.retransmits,
                rto_count: s.cc.rto_count,
                reconnects: u64::from(s.reconnects.max(c.reconnects)),
                cc_switches: u64::from(s.cc.switches),
                pacing_updates: u64::from(s.cc.pacing_updates),
                coupled: s.cc.coupled_seconds,
            };
            (name, t)
        })
        .collect()
}

/// Per path: bytes received ÷ what its scheduled rate carried over the `counted_s` seconds
/// the counters ran from the schedule's start (the last step holds after the schedule).
fn link_utilisation(
    per_path_bytes: &BTreeMap<String, u64>,
    schedule: &fbdt_scenario::Schedule,
    counted_s: f64,
) -> BTreeMap<String, f64> {
    per_path_bytes
        .iter()
        .filter_map(|(name, &bytes)| {
            let mbps = schedule.path(name)?.mean_rate_mbps(counted_s);
            (mbps > 0.0).then(|| (name.clone(), bytes as f64 * 8.0 / (mbps * 1e6 * counted_s)))
        })
        .collect()
}

struct Bursts {
    run: crate::emu::bursts::BurstRun,
    cotag: Option<CotagCounters>,
}

/// `--traffic bursts`: the ten flows over `transport` (the COTAG link started around them).
fn run_bursts(
    tb: &Testbed,
    scenario: &Scenario,
    name: &str,
    transport: Transport,
    testbed: &TestbedOptions,
    played: WallClock,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Bursts> {
    let plan = crate::traffic::Plan::for_duration(scenario.duration_s);
    let (net, ends) = match &transport {
        Transport::Session(core, encryption) => {
            let mut core = core.clone();
            scheme::buffer_parity(name, &mut core, testbed.tcp_buffer_max);
            if !name.contains("+sndbuf=") {
                core.send_buffer = core.send_buffer.min(crate::emu::bursts::FBDT_BURST_SEND_BUFFER);
            }
            let (_, opts) = scheme::runtime_options(name, scenario)?;
            let mut net = NetConfig {
                core: *core,
                ..NetConfig::default()
            };
            opts.apply(&mut net);
            (Some(net), Some(crate::emu::session::Ends::new(*encryption)?))
        }
        _ => (None, None),
    };
    let Transport::CotagLink(c) = &transport else {
        let run = crate::emu::bursts::run(tb, &transport, net, ends, plan, scenario.seed, progress)?;
        return Ok(Bursts { run, cotag: None });
    };
    if tb.paths().len() != cotag::LINKS {
        bail!("cotag and dual-rr need a scenario with exactly two paths");
    }
    let mode = crate::emu::cotag_link::mode(c.as_ref(), tb);
    let params = match &mode {
        cotag_net::Mode::Cotag(p) => Some((**p).clone()),
        cotag_net::Mode::DualRr => None,
    };
    let link = cotag_net::CotagLink::start(tb, mode, played).context("starting the COTAG link")?;
    let run = crate::emu::bursts::run(tb, &transport, None, None, plan, scenario.seed, progress);
    let stats = link.stop().context("stopping the COTAG link")?;
    let run = run?;
    let retrans = run.stats.tcp_retransmissions.unwrap_or(0);
    let counters = crate::emu::cotag_link::counters_from_run(&stats, retrans, params.as_ref());
    Ok(Bursts {
        run,
        cotag: Some(counters),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run the monitors judged with the default tolerances: `reasons` as
    /// fbdt_emu::fidelity::verdict words them, the figures behind them set to match.
    fn entry(late: f64, others: f64, steal: f64, reasons: &[&str]) -> RunEntry {
        RunEntry {
            scheme: "tcp:wigig".into(),
            seed: 1,
            scale: 0.9,
            faithful: reasons.is_empty(),
            datapath: "direct".into(),
            receive_steered: true,
            gso_unit_airtime_us: Some(250),
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            emulator_late_share: late,
            emulator_late_p99_ms: 0.0,
            emulator_drops: 0,
            emulator_cpu: 0.5,
            emulator_cpu_wait: 0.0,
            endpoints_cpu: 0.5,
            host_busy: 0.5,
            endpoint_idle_cores: 0.5,
            steal,
            others_cpu: others,
            delivered_over_configured: vec![0.99],
        }
    }

    const LATE: &str = "1.1% of packets released ≥ 1 ms late (p99 4.0 ms; limit 1.0%)";
    const OTHERS: &str = "other programs used 0.95 cores of the host (limit 0.30): the endpoints competed with them";

    fn tol() -> fbdt_emu::Tolerances {
        fbdt_emu::Tolerances::default()
    }

    #[test]
    fn the_emulator_blamed_lowers_the_scale() {
        let ok = entry(0.001, 0.0, 0.0, &[]);
        assert_eq!(blame(&[ok.clone(), ok.clone()], &tol()), Blame::Nobody);
        // tc-delay-wigig on a quiet host: WiGig alone 1.06 % late at the calibrated 0.9.
        let late = entry(0.0106, 0.02, 0.0, &[LATE]);
        assert_eq!(blame(&[ok.clone(), late], &tol()), Blame::Emulator);
        let drops = entry(0.0, 0.0, 0.0, &["emulator dropped 900 packets it did not read in time (0.50%; limit 0.10%)"]);
        assert_eq!(blame(&[drops], &tol()), Blame::Emulator);
        let saturated = entry(0.0, 0.0, 0.0, &["emulator CPU saturated (0.99 of 1 core(s))"]);
        assert_eq!(blame(&[saturated], &tol()), Blame::Emulator);
        assert_eq!(next_attempt(Blame::Emulator, true, 1, 0.9, 0), NextAttempt::Lower(0.6));
        // Rounded down to three digits, as every scale (0.6 / 1.5 is 0.3999… in binary).
        assert_eq!(next_attempt(Blame::Emulator, true, 2, 0.6, 0), NextAttempt::Lower(0.399));
    }

    #[test]
    fn a_busy_host_never_lowers_the_scale_but_gets_one_more_attempt() {
        // Other programs busy, with late packets beside them: the host's doing.
        let busy = entry(0.02, 0.95, 0.0, &[LATE, OTHERS]);
        assert_eq!(blame(&[busy], &tol()), Blame::Host);
        let stolen = entry(
            0.03,
            0.0,
            0.12,
            &[LATE, "12.0% of CPU time stolen by the hypervisor (limit 5.0%)"],
        );
        // One stolen run among emulator-late ones still blames the host.
        let late = entry(0.0106, 0.0, 0.0, &[LATE]);
        assert_eq!(blame(&[late, stolen], &tol()), Blame::Host);
        let endpoints = entry(
            0.0,
            0.0,
            0.0,
            &["the endpoints' CPUs were busy: 0.05 core idle over the run (limit 0.10): the ends may have been short of CPU"],
        );
        assert_eq!(blame(&[endpoints], &tol()), Blame::Endpoints);
        for b in [Blame::Nobody, Blame::Endpoints] {
            assert_eq!(next_attempt(b, true, 1, 0.9, 0), NextAttempt::Keep, "{b:?}");
        }
        // A disturbed host gets its scenario once more at the same scale, then keeps it.
        assert_eq!(next_attempt(Blame::Host, true, 1, 0.9, 0), NextAttempt::Again);
        assert_eq!(next_attempt(Blame::Host, true, 2, 0.9, HOST_REPEATS), NextAttempt::Keep);
        // After a lower scale, too (the repeat is counted apart from the scale's attempts).
        assert_eq!(next_attempt(Blame::Host, true, AUTO_SCALE_TRIES, 0.4, 0), NextAttempt::Again);
    }

    #[test]
    fn no_repeat_without_rescaling_or_attempts_left() {
        for b in [Blame::Emulator, Blame::Host] {
            assert_eq!(next_attempt(b, false, 1, 0.9, 0), NextAttempt::Keep, "{b:?}");
        }
        assert_eq!(next_attempt(Blame::Emulator, true, AUTO_SCALE_TRIES, 0.4, 0), NextAttempt::Keep);
    }
}
