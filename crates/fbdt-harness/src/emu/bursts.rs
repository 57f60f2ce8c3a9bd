//! `fbdt-lab run --backend emu --traffic bursts`: paper 003's traffic (§5.2) on the
//! testbed — ten TCP flows that send in 2-second bursts — through any scheme.
//!
//! The model (docs/cotag.md, "Traffic"; the numbers in `crate::traffic`): `FLOWS`
//! connections are opened before the first burst; burst `b` starts at
//! `b × (BURST_S + GAP_S)` after a common start and lasts `BURST_S`; in it every flow writes as fast as its transport takes the bytes (the paper's
//! per-flow offered rate of 0.6–2 Gbit/s, ten times over, is above both links at any scale we
//! run, so the flows are saturating). Between bursts the flows stay open and idle for
//! `GAP_S`, so queues drain and each burst starts from an idle connection. As many bursts
//! as fit in the run's duration, at least one.
//!
//! Kernel flows set `TCP_NOTSENT_LOWAT` so a flow's unsent backlog stays small and a burst
//! ends on the wire about when the application stops writing; an FBDT session's send buffer
//! is cut to [`FBDT_BURST_SEND_BUFFER`] for the same reason. Schemes: `tcp:<path>` and
//! `mptcp` (ten kernel sockets), `cotag`/`dual-rr` (ten kernel TCP flows through the COTAG
//! link), FBDT and `mp:*` (ten sessions, each over every path).
//!
//! Integrity as the bulk path: every flow's bytes are a seeded stream hashed by both ends;
//! more bytes received than sent, or equal counts with different hashes, is an error.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use fbdt_emu::perf::{Proto, Transfer};
use fbdt_emu::{Side, Testbed};
use fbdt_net::{LocalBind, NetConfig, PathSpec};
use rand::{RngCore, SeedableRng};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::results::bursts::{mean, BurstStats};
use crate::traffic::{Plan, PAPER_VOLUME_BITS};

use crate::emu::transport::Transport;

/// Unsent bytes a kernel flow may hold beyond what is in flight.
const NOTSENT_LOWAT: u32 = 128 * 1024;
/// An FBDT session's send buffer in bursts (written and not yet acknowledged at FBDT's
/// level): the scaled links' bandwidth-delay product with full 1000-packet queues is about
/// 2 × 1.5 MB, shared by ten sessions; 512 KiB each keeps every session able to fill it.
pub const FBDT_BURST_SEND_BUFFER: usize = 512 * 1024;
const CHUNK: usize = 64 * 1024;
/// Cumulative bytes (all flows) are sampled this often.
const SAMPLE: Duration = Duration::from_millis(10);
/// After the last burst, how long the receivers keep reading.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// The common start is this far after the last flow connected (both ends learn it first).
const START_LEAD: Duration = Duration::from_millis(100);
const CONNECT_LIMIT: Duration = Duration::from_secs(15);

/// Cumulative bytes at `t` from samples `(t_s, bytes)` sorted by time (linear in between;
/// the last value after the end, 0 before the start).
fn bytes_at(samples: &[(f64, u64)], t: f64) -> f64 {
    let i = samples.partition_point(|&(ts, _)| ts <= t);
    match (i.checked_sub(1).map(|j| samples[j]), samples.get(i)) {
        (None, _) => 0.0,
        (Some((_, b)), None) => b as f64,
        (Some((t0, b0)), Some(&(t1, b1))) => {
            b0 as f64 + (b1 as f64 - b0 as f64) * ((t - t0) / (t1 - t0).max(1e-12)).clamp(0.0, 1.0)
        }
    }
}

/// Every burst's throughput (Mbit/s) and the burst time until `volume` bytes had arrived.
pub fn burst_metrics(samples: &[(f64, u64)], plan: &Plan, volume: u64) -> (Vec<f64>, Option<f64>) {
    let mut mbps = Vec::new();
    let (mut got, mut on_s, mut to_volume) = (0.0, 0.0, None);
    for b in 0..plan.bursts {
        let (s, e) = (plan.start_s(b), plan.start_s(b) + plan.burst_s);
        let (at_s, at_e) = (bytes_at(samples, s), bytes_at(samples, e));
        mbps.push((at_e - at_s) * 8.0 / plan.burst_s / 1e6);
        if to_volume.is_none() && got + (at_e - at_s) >= volume as f64 {
            let need = volume as f64 - got + at_s;
            // The first sample in the burst at which the volume was in; between samples,
            // linear (samples are 10 ms apart).
            let mut prev = (s, at_s);
            for &(t, bytes) in samples.iter().filter(|&&(t, _)| t > s && t <= e) {
                if bytes as f64 >= need {
                    let frac = (need - prev.1) / (bytes as f64 - prev.1).max(1e-12);
                    to_volume = Some(on_s + (prev.0 - s) + frac.clamp(0.0, 1.0) * (t - prev.0));
                    break;
                }
                prev = (t, bytes as f64);
            }
            to_volume = to_volume.or(Some(on_s + plan.burst_s));
        }
        got += at_e - at_s;
        on_s += plan.burst_s;
    }
    (mbps, to_volume)
}

/// What one burst run produced: the transfer as the bulk path reports it (cumulative bytes
/// every 100 ms from the common start), the burst metrics and the senders' retransmissions.
pub struct BurstRun {
    pub transfer: Transfer,
    pub stats: BurstStats,
}

/// A flow's stream: a kernel TCP or MPTCP socket, or an FBDT session.
trait Flow: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Flow for T {}

/// What a sender wrote: bytes, SHA-256.
type Sent = (u64, String);
/// What a receiver read: bytes, SHA-256.
type Got = (u64, String);

/// Runs the bursts over `transport` on a playing testbed. `played` is when the schedule
/// started; `link_bytes` is filled by the caller (path counters). The COTAG link, if any,
/// must already run.
pub fn run(
    tb: &Testbed,
    transport: &Transport,
    net: Option<NetConfig>,
    ends: Option<crate::emu::session::Ends>,
    plan: Plan,
    seed: u64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<BurstRun> {
    let (start_tx, start_rx) = oneshot::channel::<Instant>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<Vec<SocketAddr>>();
    let retransmitted = || fbdt_emu::ns::tcp_retransmitted_segments(tb.netns(Side::Server)).ok();
    let retrans_before = retransmitted();
    let (server, client) = match transport {
        Transport::Kernel(proto, path) => {
            let p = &tb.paths()[*path];
            kernel_ends(
                tb,
                *proto,
                p.server_ip,
                p.client_ip,
                plan,
                seed,
                start_rx,
                start_tx,
                addr_tx,
                progress,
            )?
        }
        Transport::CotagLink(_) => kernel_ends(
            tb,
            Proto::Tcp,
            cotag_net::link::SERVER_ADDR,
            cotag_net::link::CLIENT_ADDR,
            plan,
            seed,
            start_rx,
            start_tx,
            addr_tx,
            progress,
        )?,
        Transport::Session(..) => {
            let net = net.ok_or_else(|| anyhow!("an FBDT burst run needs its configuration"))?;
            let ends = ends.ok_or_else(|| anyhow!("an FBDT burst run needs its security"))?;
            session_ends(tb, net, ends, plan, seed, start_rx, start_tx, addr_tx, progress)?
        }
    };
    let client_out = match addr_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(addrs) => client(addrs),
        Err(_) => Err(anyhow!("the burst server did not start listening")),
    };
    let server_out = match server.join() {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(anyhow!("entering the server namespace: {e}")),
        Err(_) => Err(anyhow!("the burst server thread panicked")),
    };
    let (samples, got) = match (client_out, server_out.as_ref()) {
        (Ok(c), _) => c,
        (Err(c), Ok(_)) => return Err(c),
        (Err(c), Err(s)) => return Err(c.context(format!("the server: {s:#}"))),
    };
    let sent = server_out.context("the burst server")?;
    let retrans = retransmitted().zip(retrans_before).map(|(a, b)| a.saturating_sub(b));
    finish(samples, &got, &sent, retrans, plan, tb.spec().scale)
}

/// Checks every flow's bytes and computes the metrics.
fn finish(
    samples: Vec<(f64, u64)>,
    got: &[Got],
    sent: &[Sent],
    retrans: Option<u64>,
    plan: Plan,
    scale: f64,
) -> Result<BurstRun> {
    let mut intact = got.len() == sent.len();
    for (i, ((g, gh), (s, sh))) in got.iter().zip(sent).enumerate() {
        if g > s || (g == s && gh != sh) {
            bail!("flow {i} arrived corrupted ({g} of {s} bytes, hashes differ)");
        }
        intact &= g == s;
    }
    let volume = (PAPER_VOLUME_BITS * scale / 8.0).round() as u64;
    let (burst_mbps, to_volume) = burst_metrics(&samples, &plan, volume);
    let series: Vec<(f64, u64)> = samples
        .iter()
        .step_by((0.1 / SAMPLE.as_secs_f64()).round() as usize)
        .copied()
        .chain(samples.last().copied())
        .collect();
    let (secs, bytes) = samples.last().copied().unwrap_or((0.0, 0));
    let stats = BurstStats {
        flows: plan.flows,
        burst_s: plan.burst_s,
        gap_s: plan.gap_s,
        burst_mean_mbps: mean(&burst_mbps),
        burst_mbps,
        volume_bytes: volume,
        time_to_volume_s: vec![to_volume],
        link_utilisation: BTreeMap::new(),
        tcp_retransmissions: retrans,
        flows_intact: intact,
    };
    Ok(BurstRun {
        transfer: Transfer {
            bytes,
            secs,
            goodput_mbps: bytes as f64 * 8.0 / secs.max(1e-9) / 1e6,
            series,
        },
        stats,
    })
}

type ServerThread = std::thread::JoinHandle<fbdt_emu::Result<Result<Vec<Sent>>>>;
type ClientFn<'a> = Box<dyn FnOnce(Vec<SocketAddr>) -> Result<(Vec<(f64, u64)>, Vec<Got>)> + 'a>;

#[allow(clippy::too_many_arguments)]
fn kernel_ends<'a>(
    tb: &'a Testbed,
    proto: Proto,
    server_ip: Ipv4Addr,
    client_ip: Ipv4Addr,
    plan: Plan,
    seed: u64,
    start_rx: oneshot::Receiver<Instant>,
    start_tx: oneshot::Sender<Instant>,
    addr_tx: std::sync::mpsc::Sender<Vec<SocketAddr>>,
    progress: &'a (dyn Fn(f64) + Sync),
) -> Result<(ServerThread, ClientFn<'a>)> {
    let server = tb.spawn_in(Side::Server, move || -> Result<Vec<Sent>> {
        crate::emu::session::runtime()?.block_on(async move {
            let listener = crate::emu::transport::kernel_listener(server_ip, proto)?;
            let _ = addr_tx.send(vec![listener.local_addr()?]);
            let mut flows = Vec::new();
            for _ in 0..plan.flows {
                let (s, _) = tokio::time::timeout(CONNECT_LIMIT, listener.accept())
                    .await
                    .map_err(|_| anyhow!("a flow did not connect within {CONNECT_LIMIT:?}"))??;
                // Best effort: a kernel that refuses it only lets the burst's tail run longer.
                let _ = fbdt_emu::stamp::set_notsent_lowat(&s, NOTSENT_LOWAT);
                flows.push(s);
            }
            send_all(flows, start_rx, plan, seed).await
        })
    })?;
    let client: ClientFn<'a> = Box::new(move |addrs: Vec<SocketAddr>| {
        tb.run_in(Side::Client, move || {
            crate::emu::session::runtime()?.block_on(async move {
                let addr = addrs[0];
                let mut flows = Vec::new();
                for _ in 0..plan.flows {
                    flows.push(crate::emu::transport::kernel_connect(client_ip, addr, proto)?);
                }
                receive_all(flows, start_tx, plan, progress).await
            })
        })?
    });
    Ok((server, client))
}

#[allow(clippy::too_many_arguments)]
fn session_ends<'a>(
    tb: &'a Testbed,
    net: NetConfig,
    ends: crate::emu::session::Ends,
    plan: Plan,
    seed: u64,
    start_rx: oneshot::Receiver<Instant>,
    start_tx: oneshot::Sender<Instant>,
    addr_tx: std::sync::mpsc::Sender<Vec<SocketAddr>>,
    progress: &'a (dyn Fn(f64) + Sync),
) -> Result<(ServerThread, ClientFn<'a>)> {
    let listen_on: Vec<SocketAddr> = tb.paths().iter().map(|p| SocketAddr::from((p.server_ip, 0))).collect();
    let server_net = NetConfig {
        security: ends.server.clone(),
        ..net.clone()
    };
    let server = tb.spawn_in(Side::Server, move || -> Result<Vec<Sent>> {
        crate::emu::session::runtime()?.block_on(async move {
            let mut listener = fbdt_net::listen(&listen_on, server_net).await?;
            let _ = addr_tx.send(listener.local_addrs().to_vec());
            let mut flows = Vec::new();
            for _ in 0..plan.flows {
                let s = tokio::time::timeout(CONNECT_LIMIT, listener.accept())
                    .await
                    .map_err(|_| anyhow!("a session did not arrive within {CONNECT_LIMIT:?}"))?
                    .ok_or_else(|| anyhow!("the listener ended before every session arrived"))?;
                flows.push(s);
            }
            send_all(flows, start_rx, plan, seed).await
        })
    })?;
    let client_ips: Vec<Ipv4Addr> = tb.paths().iter().map(|p| p.client_ip).collect();
    let client_net = NetConfig {
        security: ends.client,
        ..net
    };
    let client: ClientFn<'a> = Box::new(move |addrs: Vec<SocketAddr>| {
        let specs: Vec<PathSpec> = client_ips
            .iter()
            .zip(addrs)
            .map(|(ip, remote)| PathSpec {
                local: Some(LocalBind::Addr((*ip).into())),
                remote,
            })
            .collect();
        tb.run_in(Side::Client, move || {
            crate::emu::session::runtime()?.block_on(async move {
                let mut flows = Vec::new();
                for _ in 0..plan.flows {
                    flows.push(
                        fbdt_net::connect(specs.clone(), client_net.clone())
                            .await
                            .context("connecting a session")?,
                    );
                }
                receive_all(flows, start_tx, plan, progress).await
            })
        })?
    });
    Ok((server, client))
}

/// The server: waits for the common start, then every flow sends its bursts.
async fn send_all<S: Flow>(
    flows: Vec<S>,
    start: oneshot::Receiver<Instant>,
    plan: Plan,
    seed: u64,
) -> Result<Vec<Sent>> {
    let t0 = tokio::time::timeout(CONNECT_LIMIT, start)
        .await
        .map_err(|_| anyhow!("the client never set the start"))?
        .map_err(|_| anyhow!("the client ended before the start"))?;
    let mut set = tokio::task::JoinSet::new();
    for (i, s) in flows.into_iter().enumerate() {
        set.spawn(async move {
            (
                i,
                send_flow(s, t0, plan, seed.wrapping_mul(1_000).wrapping_add(i as u64)).await,
            )
        });
    }
    let mut out: Vec<Option<Sent>> = vec![None; plan.flows];
    while let Some(r) = set.join_next().await {
        let (i, r) = r.map_err(|e| anyhow!("a sender task failed: {e}"))?;
        out[i] = Some(r.with_context(|| format!("flow {i}"))?);
    }
    out.into_iter()
        .map(|s| s.ok_or_else(|| anyhow!("a sender did not report")))
        .collect()
}

async fn send_flow<S: Flow>(mut s: S, t0: Instant, plan: Plan, seed: u64) -> Result<Sent> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let (mut hash, mut chunk, mut sent) = (Sha256::new(), vec![0u8; CHUNK], 0u64);
    for b in 0..plan.bursts {
        let start = t0 + Duration::from_secs_f64(plan.start_s(b));
        let end = tokio::time::Instant::from_std(start + Duration::from_secs_f64(plan.burst_s));
        tokio::time::sleep_until(tokio::time::Instant::from_std(start)).await;
        'burst: while tokio::time::Instant::now() < end {
            rng.fill_bytes(&mut chunk);
            let mut off = 0;
            while off < CHUNK {
                // A write that is still waiting at the burst's end wrote nothing (cancel-safe).
                match tokio::time::timeout_at(end, s.write(&chunk[off..])).await {
                    Ok(Ok(0)) => bail!("the flow closed while sending"),
                    Ok(Ok(n)) => {
                        hash.update(&chunk[off..off + n]);
                        off += n;
                        sent += n as u64;
                    }
                    Ok(Err(e)) => return Err(e).context("sending"),
                    Err(_) => break 'burst,
                }
            }
        }
    }
    let _ = tokio::time::timeout(DRAIN_LIMIT, s.shutdown()).await;
    // Wait for the reader's close so the last bytes are acknowledged before the socket goes.
    let mut rest = [0u8; 64];
    let _ = tokio::time::timeout(DRAIN_LIMIT, s.read(&mut rest)).await;
    Ok((sent, hex(&hash.finalize())))
}

/// The client: sets the common start, reads every flow, samples the total every 10 ms.
async fn receive_all<S: Flow>(
    flows: Vec<S>,
    start: oneshot::Sender<Instant>,
    plan: Plan,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<(Vec<(f64, u64)>, Vec<Got>)> {
    let t0 = Instant::now() + START_LEAD;
    start
        .send(t0)
        .map_err(|_| anyhow!("the server ended before the start"))?;
    let hard_stop = tokio::time::Instant::from_std(t0 + Duration::from_secs_f64(plan.end_s()) + DRAIN_LIMIT);
    let total = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for (i, mut s) in flows.into_iter().enumerate() {
        let (total, done) = (total.clone(), done.clone());
        set.spawn(async move {
            let (mut hash, mut buf, mut bytes) = (Sha256::new(), vec![0u8; 256 * 1024], 0u64);
            let r = loop {
                match tokio::time::timeout_at(hard_stop, s.read(&mut buf)).await {
                    Ok(Ok(0)) | Err(_) => break Ok(()),
                    Ok(Ok(n)) => {
                        hash.update(&buf[..n]);
                        bytes += n as u64;
                        total.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => break Err(e),
                }
            };
            // Closing our side tells the sender every byte was read.
            let _ = tokio::time::timeout(Duration::from_millis(500), s.shutdown()).await;
            done.fetch_add(1, Ordering::Relaxed);
            (i, r.map(|()| (bytes, hex(&hash.finalize()))))
        });
    }
    let n = plan.flows;
    tokio::time::sleep_until(tokio::time::Instant::from_std(t0)).await;
    let mut samples = vec![(0.0, total.load(Ordering::Relaxed))];
    let mut tick = tokio::time::interval_at(tokio::time::Instant::from_std(t0) + SAMPLE, SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_progress = 0.0;
    while done.load(Ordering::Relaxed) < n && tokio::time::Instant::now() < hard_stop {
        tick.tick().await;
        let t = t0.elapsed().as_secs_f64();
        samples.push((t, total.load(Ordering::Relaxed)));
        if t - last_progress >= 0.1 {
            progress(t);
            last_progress = t;
        }
    }
    let mut got: Vec<Option<Got>> = vec![None; n];
    while let Some(r) = set.join_next().await {
        let (i, r) = r.map_err(|e| anyhow!("a reader task failed: {e}"))?;
        got[i] = Some(r.with_context(|| format!("receiving flow {i}"))?);
    }
    samples.push((t0.elapsed().as_secs_f64(), total.load(Ordering::Relaxed)));
    let got = got
        .into_iter()
        .map(|g| g.ok_or_else(|| anyhow!("a reader did not report")))
        .collect::<Result<_>>()?;
    Ok((samples, got))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_metrics_count_only_burst_time() {
        let plan = Plan {
            flows: 10,
            burst_s: 2.0,
            gap_s: 1.0,
            bursts: 2,
        };
        // 1 MB/s during the bursts, plus 0.5 MB drained in the first gap.
        let mut samples = Vec::new();
        for k in 0..=600 {
            let t = k as f64 * 0.01;
            let b = if t <= 2.0 {
                t * 1e6
            } else if t <= 3.0 {
                2e6 + 0.5e6 * (t - 2.0)
            } else if t <= 5.0 {
                2.5e6 + (t - 3.0) * 1e6
            } else {
                4.5e6
            };
            samples.push((t, b.round() as u64));
        }
        let (mbps, to_volume) = burst_metrics(&samples, &plan, 3_000_000);
        assert_eq!(mbps.len(), 2);
        assert!(mbps.iter().all(|m| (m - 8.0).abs() < 1e-6), "{mbps:?}");
        // 2 MB in the first burst, the third MB one second into the second: 3 s of burst time.
        assert!((to_volume.unwrap() - 3.0).abs() < 0.011, "{to_volume:?}");
        assert_eq!(burst_metrics(&samples, &plan, 5_000_000).1, None);
    }
}
