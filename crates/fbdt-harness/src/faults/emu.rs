//! One fault run on the testbed (fbdt-emu, root): the plan's outages and rate factors are
//! scenario events the emulator's player applies; a one-way outage is a spliced-in step
//! that drops one direction at the path's loss stage; a reset is `ss -K` on the path's
//! connections in both namespaces at the fault's start (beside the link's outage). The
//! server sends a pattern that names every byte's offset for the run's duration; the
//! client reads, checks every byte and stamps its in-order arrivals at 1 ms.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use fbdt_emu::{Direction, Side, Testbed, TestbedOptions};
use fbdt_net::NetConfig;
use fbdt_scenario::Scenario;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::plan::{Fault, FaultKind, TAIL_S};
use super::result::RunResult;
use super::sim::scenario_events;
use super::stream::{first_mismatch, pattern, Arrivals};
use crate::emu::session;
use crate::emu::transport::{kernel_connect, kernel_listener, transport, Transport};
use crate::scheme;

/// Bytes per write of the sender.
const CHUNK: usize = 64 * 1024;
/// The smallest scaled queue, packets (as the simulator campaign's 10 × 1500 bytes).
const QUEUE_FLOOR_PACKETS: usize = 10;
/// After the sending time, how long the receiver keeps reading (and the sender waits for
/// its last bytes to be acknowledged).
const DRAIN: Duration = Duration::from_secs(3);
/// A returned path carries payload again in the first 1-ms sample in which its client
/// interface received at least this much: more than any burst of handshake, ACK or probe
/// packets in 1 ms (a SYN/ACK is 74 bytes on the wire), less than one full data packet.
pub const DATA_BYTES_PER_SAMPLE: u64 = 1000;

/// What the sender did.
#[derive(Default)]
struct Sent {
    written: u64,
    /// Bytes the sender was told were delivered (FBDT-level acknowledgements); kernel
    /// sockets do not say.
    acked: Option<u64>,
    /// Sessions: the core's stall count, and when it grew (s since `played`).
    path_stalls: Option<u64>,
    stalls_at_s: Vec<f64>,
    error: Option<String>,
}

/// What the receiving application got.
#[derive(Default)]
struct Received {
    arrivals: Arrivals,
    /// Stream offset of the first byte that was not the pattern's.
    corrupt_from: Option<u64>,
    /// The stream ended (the sender's shutdown arrived).
    eof: bool,
    /// Sessions: connections dialled after each path's first.
    reconnects: Option<u64>,
    error: Option<String>,
}

/// The testbed's spec for `scenario` under `plan` at `scale`: queues scaled as the rates
/// (as the simulator campaign's), one-way outages spliced in.
pub fn spec(scenario: &Scenario, scale: f64, plan: &[Fault]) -> Result<fbdt_emu::TestbedSpec> {
    let sc = scenario_events(plan, scenario);
    let schedule = sc.schedule(scale)?;
    let mut spec = fbdt_emu::spec_from_schedule(&sc, &schedule)?;
    for p in &mut spec.paths {
        p.queue_packets = ((p.queue_packets as f64 * scale).round() as usize).max(QUEUE_FLOOR_PACKETS);
    }
    for f in plan {
        let dir = match f.kind {
            FaultKind::Uplink => Direction::Up,
            FaultKind::Downlink => Direction::Down,
            _ => continue,
        };
        let path = spec.paths.get_mut(f.path_index).ok_or_else(|| {
            anyhow!(
                "fault on path #{} of a {}-path scenario",
                f.path_index,
                scenario.paths.len()
            )
        })?;
        path.cut_one_way(dir, f.start_s, f.end_s())?;
    }
    Ok(spec)
}

/// Runs `scheme_name` under `plan` on a fresh testbed and measures what the receiver saw
/// (run, scheme, seed, plan and bound are the caller's to fill).
pub fn run_one(
    scenario: &Scenario,
    scale: f64,
    testbed: &TestbedOptions,
    scheme_name: &str,
    seed: u64,
    plan: &[Fault],
) -> Result<RunResult> {
    let mut sc = scenario.clone();
    sc.seed = seed;
    let mut spec = spec(&sc, scale, plan)?;
    let transport = transport(scheme_name, &sc)?;
    let (_, opts) = scheme::runtime_options(scheme_name, &sc)?;
    if let Some(cc) = opts
        .kernel_congestion()
        .filter(|_| matches!(transport, Transport::Kernel(..)))
    {
        spec.congestion_control = cc.to_string();
    }
    let duration = Duration::from_secs_f64(sc.duration_s);
    let returns = returning(plan);
    let mut tb = Testbed::start(&spec, testbed).context("starting the testbed")?;
    tb.play()?;
    // t = 0 is the player's: the plan's times are on its clock.
    let played = Instant::now() - Duration::from_secs_f64(tb.elapsed_s().unwrap_or(0.0));
    let end = played + duration;
    let (traffic, resets, reuse) = std::thread::scope(|s| {
        let resets = s.spawn(|| reset_at(&tb, plan, played));
        let reuse = s.spawn(|| first_data_after(&tb, returns, played, end + DRAIN));
        let traffic = match transport {
            Transport::Session(core, encryption) => {
                let mut core = *core;
                scheme::buffer_parity(scheme_name, &mut core, testbed.tcp_buffer_max);
                let mut net = NetConfig {
                    core,
                    ..NetConfig::default()
                };
                opts.apply(&mut net);
                session_traffic(&tb, net, encryption, played, end)
            }
            Transport::Kernel(proto, path) => kernel_traffic(&tb, proto, path, played, end),
            Transport::CotagLink(_) => Err(anyhow!(
                "{scheme_name}: the fault campaign runs FBDT, mp:*, kernel MPTCP and TCP"
            )),
        };
        let panicked = || anyhow!("a helper thread panicked");
        let resets = resets.join().unwrap_or_else(|_| Err(panicked()));
        let reuse = reuse.join().unwrap_or_else(|_| Err(panicked()));
        (traffic, resets, reuse)
    });
    let fidelity = tb.fidelity();
    tb.stop();
    let (sent, got) = traffic?;
    let reset_took_ms = resets.context("resetting the path's connections")?;
    let reuse_after_return_ms = reuse.context("watching the returned path")?;

    let dur_ms = duration.as_millis() as u64;
    let a = &got.arrivals;
    let (max_gap_ms, gap_at_ms) = a.max_gap(dur_ms).unwrap_or((dur_ms, 0));
    let tail_ms = (TAIL_S * 1e3) as u64;
    let in_tail = a.by(dur_ms) - a.by(dur_ms.saturating_sub(tail_ms));
    let good = got.corrupt_from.unwrap_or(a.total());
    let corrupt = a.total() - good;
    let bytes_lost = corrupt
        + match sent.acked {
            Some(acked) => acked.saturating_sub(good),
            // Kernel sockets: what was written and never arrived, when the stream ended
            // as the sender ended it (a failed connection is a lost session instead).
            None if got.eof && sent.error.is_none() => sent.written.saturating_sub(good),
            None => 0,
        };
    let error = sent
        .error
        .map(|e| format!("sender: {e}"))
        .or(got.error.map(|e| format!("receiver: {e}")))
        .or(got
            .corrupt_from
            .map(|o| format!("the stream is not the pattern from offset {o}")));
    let (fault_goodput_mbps, surviving_capacity_mbps) = match plan {
        [f] => {
            let (from, to) = (f.start_s, f.end_s().min(sc.duration_s));
            let bytes = a.by((to * 1e3) as u64) - a.by((from * 1e3) as u64);
            let cap: f64 = spec
                .paths
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != f.path_index)
                .map(|(_, p)| p.delivered_rate_between(from, to))
                .sum();
            (Some(bytes as f64 * 8.0 / (to - from).max(1e-3) / 1e6), Some(cap))
        }
        _ => (None, None),
    };
    Ok(RunResult {
        max_gap_ms,
        max_gap_at_s: gap_at_ms as f64 / 1e3,
        reuse_after_return_ms,
        bytes_delivered: a.total(),
        bytes_lost,
        bytes_duplicated: 0,
        survived: error.is_none() && in_tail > 0,
        error,
        fault_goodput_mbps,
        surviving_capacity_mbps,
        reset_took_ms,
        faithful: Some(fidelity.faithful),
        unfaithful_reasons: fidelity.reasons.clone(),
        endpoint_cpu_cores: Some(fidelity.endpoints_cpu),
        stack_cpu_cores: Some(fidelity.stack_cpu),
        path_stalls: sent.path_stalls,
        reconnects: got.reconnects,
        stalls_at_s: sent.stalls_at_s,
        ..RunResult::default()
    })
}

/// The path of the plan's last outage that returns, and when it returns (s); `None` when
/// the last is a cut.
fn returning(plan: &[Fault]) -> Option<(usize, f64)> {
    let last = plan.iter().max_by(|a, b| a.end_s().total_cmp(&b.end_s()))?;
    (last.kind != FaultKind::Cut).then_some((last.path_index, last.end_s()))
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// Each reset of the plan at its start: both ends' connections on the path fail. Returns
/// the longest time from a reset's start to both ends' sockets destroyed, ms.
fn reset_at(tb: &Testbed, plan: &[Fault], played: Instant) -> Result<Option<f64>> {
    let mut took: Option<f64> = None;
    for f in plan.iter().filter(|f| f.kind == FaultKind::Reset) {
        let at = played + Duration::from_secs_f64(f.start_s);
        let armed = tb.arm_reset(f.path_index)?;
        sleep_until(at);
        armed.fire()?;
        let ms = at.elapsed().as_secs_f64() * 1e3;
        took = Some(took.map_or(ms, |t| t.max(ms)));
    }
    Ok(took)
}

/// From the path's return on, the time (ms) to the first 1-ms sample in which its client
/// interface received [`DATA_BYTES_PER_SAMPLE`] or more; `None` if none did by `until`.
fn first_data_after(
    tb: &Testbed,
    returns: Option<(usize, f64)>,
    played: Instant,
    until: Instant,
) -> Result<Option<f64>> {
    let Some((path, back_s)) = returns else {
        return Ok(None);
    };
    let ifname = tb
        .paths()
        .get(path)
        .map(|p| p.client_if.clone())
        .ok_or_else(|| anyhow!("no path #{path}"))?;
    let back = played + Duration::from_secs_f64(back_s);
    tb.run_in(Side::Client, move || -> Result<Option<f64>> {
        sleep_until(back);
        let mut prev = rx_bytes(&ifname)?;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
            let now = rx_bytes(&ifname)?;
            if now.saturating_sub(prev) >= DATA_BYTES_PER_SAMPLE {
                return Ok(Some(Instant::now().saturating_duration_since(back).as_secs_f64() * 1e3));
            }
            prev = now;
        }
        Ok(None)
    })?
}

/// Bytes received by interface `ifname` of this thread's namespace.
fn rx_bytes(ifname: &str) -> Result<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").context("reading /proc/thread-self/net/dev")?;
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim() == ifname)
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| anyhow!("no counters of {ifname} in /proc/net/dev"))
}

/// Reads until the stream ends, fails or `until`, checking every byte against the pattern
/// and stamping arrivals in ms since `played`.
async fn receive(mut r: impl AsyncRead + Unpin, played: Instant, until: Instant) -> Received {
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = Received::default();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, r.read(&mut buf)).await {
            Err(_) => break,
            Ok(Ok(0)) => {
                got.eof = true;
                break;
            }
            Ok(Ok(n)) => {
                let ms = played.elapsed().as_millis() as u64;
                let off = got.arrivals.total();
                if got.corrupt_from.is_none() {
                    got.corrupt_from = first_mismatch(off, &buf[..n]).map(|i| off + i as u64);
                }
                got.arrivals.saw(ms, n as u64);
            }
            Ok(Err(e)) => {
                got.error = Some(e.to_string());
                break;
            }
        }
    }
    got
}

/// Waits for the server thread's listening address; if it ended instead, its error.
fn addresses<T>(
    rx: std::sync::mpsc::Receiver<T>,
    server: std::thread::JoinHandle<fbdt_emu::Result<Result<Sent>>>,
) -> Result<(T, std::thread::JoinHandle<fbdt_emu::Result<Result<Sent>>>)> {
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(a) => Ok((a, server)),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(match server.join() {
            Ok(Ok(Err(e))) => e.context("starting the server"),
            Ok(Err(e)) => anyhow!("entering the server namespace: {e}"),
            Err(_) => anyhow!("the server thread panicked"),
            Ok(Ok(Ok(_))) => anyhow!("the server ended before listening"),
        }),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => bail!("the server did not start listening within 10 s"),
    }
}

fn joined(server: std::thread::JoinHandle<fbdt_emu::Result<Result<Sent>>>) -> Result<Sent> {
    server
        .join()
        .map_err(|_| anyhow!("the server thread panicked"))?
        .map_err(|e| anyhow!("entering the server namespace: {e}"))?
}

/// FBDT or `mp:*` over fbdt-net: one connection per path, the server sends until `end`.
fn session_traffic(
    tb: &Testbed,
    net: NetConfig,
    encryption: crate::scheme::Encryption,
    played: Instant,
    end: Instant,
) -> Result<(Sent, Received)> {
    let ends = session::Ends::new(encryption)?;
    let listen_on: Vec<SocketAddr> = tb.paths().iter().map(|p| SocketAddr::from((p.server_ip, 0))).collect();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server_net = NetConfig {
        security: ends.server,
        ..net.clone()
    };
    let client_net = NetConfig {
        security: ends.client,
        ..net
    };
    let server = tb.spawn_in(Side::Server, move || -> Result<Sent> {
        session::runtime()?.block_on(async move {
            let every = server_net.stats_interval / 2;
            let (_listener, mut s) = session::accept_one(&listen_on, server_net, addr_tx).await?;
            let stats = s.stats_handle();
            let stall_times = Arc::new(Mutex::new(Vec::new()));
            let watch = tokio::spawn(watch_stalls(stats.clone(), every, played, stall_times.clone()));
            let mut sent = Sent::default();
            while Instant::now() < end {
                let chunk = bytes::Bytes::from(pattern(sent.written, CHUNK));
                let left = end.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, s.write_chunk(chunk)).await {
                    Ok(Ok(())) => sent.written += CHUNK as u64,
                    Ok(Err(e)) => {
                        sent.error = Some(e.to_string());
                        break;
                    }
                    Err(_) => break,
                }
            }
            let _ = tokio::time::timeout(DRAIN, s.shutdown()).await;
            let mut rest = [0u8; 64];
            let _ = tokio::time::timeout(Duration::from_millis(200), s.read(&mut rest)).await;
            let last = stats.stats();
            sent.acked = Some(last.bytes_acked);
            sent.path_stalls = Some(last.core.sender.path_stalls);
            watch.abort();
            sent.stalls_at_s = stall_times.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default();
            Ok(sent)
        })
    })?;
    let (addrs, server) = addresses(addr_rx, server)?;
    let specs = session::client_paths(tb, &addrs);
    let got = tb.run_in(Side::Client, || -> Result<Received> {
        session::runtime()?.block_on(async {
            let s = fbdt_net::connect(specs, client_net).await.context("connecting")?;
            let stats = s.stats_handle();
            let mut got = receive(s, played, end + DRAIN).await;
            got.reconnects = Some(stats.stats().paths.iter().map(|p| u64::from(p.reconnects)).sum());
            Ok(got)
        })
    })?;
    let sent = joined(server)?;
    Ok((sent, got?))
}

/// Appends to `times` when the session's count of stalls grew (s since `played`), read
/// `every`, until aborted. The session publishes its counters every
/// `NetConfig::stats_interval` (10 ms), so a time is up to that much late.
async fn watch_stalls(stats: fbdt_net::StatsHandle, every: Duration, played: Instant, times: Arc<Mutex<Vec<f64>>>) {
    let mut seen = 0;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let count = stats.stats().core.sender.path_stalls;
        if count > seen {
            let at = played.elapsed().as_secs_f64();
            if let Ok(mut t) = times.lock() {
                t.extend(std::iter::repeat_n(at, (count - seen) as usize));
            }
            seen = count;
        }
    }
}

/// Kernel TCP or MPTCP from path `path`'s client address: the server sends until `end`.
fn kernel_traffic(
    tb: &Testbed,
    proto: fbdt_emu::perf::Proto,
    path: usize,
    played: Instant,
    end: Instant,
) -> Result<(Sent, Received)> {
    let p = tb
        .paths()
        .get(path)
        .cloned()
        .ok_or_else(|| anyhow!("no path #{path}"))?;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server_ip = p.server_ip;
    let server = tb.spawn_in(Side::Server, move || -> Result<Sent> {
        session::runtime()?.block_on(async move {
            let l = kernel_listener(server_ip, proto)?;
            let _ = addr_tx.send(l.local_addr()?);
            let (mut s, _) = tokio::time::timeout(session::ACCEPT_LIMIT, l.accept())
                .await
                .map_err(|_| anyhow!("no connection within {:?}", session::ACCEPT_LIMIT))??;
            let mut sent = Sent::default();
            let mut chunk = pattern(0, CHUNK);
            let mut at = 0;
            while Instant::now() < end {
                if at == chunk.len() {
                    chunk = pattern(sent.written, CHUNK);
                    at = 0;
                }
                let left = end.saturating_duration_since(Instant::now());
                match tokio::time::timeout(left, s.write(&chunk[at..])).await {
                    Ok(Ok(n)) => {
                        at += n;
                        sent.written += n as u64;
                    }
                    Ok(Err(e)) => {
                        sent.error = Some(e.to_string());
                        break;
                    }
                    Err(_) => break,
                }
            }
            if sent.error.is_none() {
                let _ = tokio::time::timeout(DRAIN, s.shutdown()).await;
            }
            Ok(sent)
        })
    })?;
    let (addr, server) = addresses(addr_rx, server)?;
    let got = tb.run_in(Side::Client, || -> Result<Received> {
        session::runtime()?.block_on(async {
            let s = kernel_connect(p.client_ip, addr, proto)?;
            Ok(receive(s, played, end + DRAIN).await)
        })
    })?;
    let sent = joined(server)?;
    Ok((sent, got?))
}
