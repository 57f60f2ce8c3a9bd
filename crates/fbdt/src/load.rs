//! `fbdt load`: a load generator for a `fbdt perf --server` on loopback. It opens
//! `--sessions` sessions of `--paths` paths each (every path from its own loopback source
//! address, as distinct clients would be, so the server's per-source caps do not apply),
//! holds them, measures the server's memory, then lets `--bulk` of them upload for
//! `--time` seconds while the rest stay idle, and reports sessions held, server RSS per
//! session, CPU and Jain's fairness index over the bulk sessions' goodput.
//!
//! The server's numbers need its PID (`--server-pid`): the generator reads its RSS and
//! CPU time from /proc/<pid>/. Without it those fields are null.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::AsyncWriteExt;
use tokio::sync::{watch, Semaphore};

use crate::perf::{read_measure, send_data, Request};
use crate::net_args::NetArgs;

/// Most sessions or paths the generator opens (bounded, loopback only).
const MAX_SESSIONS: usize = 4096;
/// Sessions connecting at once.
const CONNECTING: usize = 32;
/// Wait after the last session is held before the server's RSS is read.
const SETTLE: Duration = Duration::from_secs(1);

#[derive(clap::Args)]
#[command(after_help = "\
Example:
  fbdt perf --server --listen 127.0.0.1:5201 --max-sessions 1100 & pid=$!
  fbdt load --server 127.0.0.1:5201 --server-pid $pid --sessions 1000 --paths 2 --time 10 --bulk 100 --json")]
pub struct LoadArgs {
    /// The perf server's FBDT address (loopback).
    #[arg(long, value_name = "IP:PORT")]
    server: SocketAddr,
    /// The server's process id, to read its RSS and CPU from /proc.
    #[arg(long, value_name = "PID")]
    server_pid: Option<u32>,
    /// Sessions to open and hold.
    #[arg(long, value_name = "N", default_value = "100")]
    sessions: usize,
    /// Paths per session.
    #[arg(long, value_name = "N", default_value = "2")]
    paths: usize,
    /// Seconds the sessions are held (the bulk ones upload during it).
    #[arg(long, value_name = "S", default_value = "10")]
    time: f64,
    /// How many of the sessions upload as fast as they can (the others stay idle).
    #[arg(long, value_name = "N", default_value = "0")]
    bulk: usize,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    net: NetArgs,
}

/// Loopback source address of path `p` of session `s`: one per (session, path), and
/// consecutive sessions in different /24s (the server caps sessions per /24 too: 64 by
/// default), so up to 16,384 sessions stay under its per-prefix caps.
fn source(s: usize, p: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 1 + p as u8, (s % 256) as u8, (s / 256) as u8 + 2))
}

/// Resident set size of process `pid`, bytes.
fn rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("process {pid}"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

/// User + system CPU seconds of process `pid`.
fn cpu_s(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("process {pid}"))?;
    // Fields after the command name (which may hold spaces) : state is field 3.
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15: indexes 11 and 12 after the ')'.
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((ticks(11) + ticks(12)) as f64 / hz)
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one takes everything.
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    (!x.is_empty() && sq > 0.0).then(|| sum * sum / (x.len() as f64 * sq))
}

/// What one session reports: whether it was held, and a bulk session's goodput (bit/s).
enum Outcome {
    Failed(String),
    Done { goodput_bps: Option<f64> },
}

pub async fn run(a: LoadArgs) -> anyhow::Result<()> {
    if a.sessions == 0 || a.sessions > MAX_SESSIONS {
        bail!("--sessions {}: expected 1..={MAX_SESSIONS}", a.sessions);
    }
    if a.paths == 0 || a.paths > 8 {
        bail!("--paths {}: expected 1..=8", a.paths);
    }
    if !a.time.is_finite() || a.time <= 0.0 || a.time > crate::perf::MAX_TIME_S as f64 {
        bail!(
            "--time {}: expected seconds in (0, {}]",
            a.time,
            crate::perf::MAX_TIME_S
        );
    }
    if a.bulk > a.sessions {
        bail!("--bulk {} is more than --sessions {}", a.bulk, a.sessions);
    }
    if !a.server.ip().is_loopback() {
        bail!("--server {}: the load generator runs on loopback only", a.server);
    }
    let time = Duration::from_secs_f64(a.time);
    let rss0 = a.server_pid.map(rss).transpose()?;
    let (go_tx, go_rx) = watch::channel(false);
    let (held_tx, mut held_rx) = tokio::sync::mpsc::channel::<bool>(a.sessions);
    let gate = Arc::new(Semaphore::new(CONNECTING));
    let net = a.net.client_config()?;
    let mut tasks = Vec::new();
    for s in 0..a.sessions {
        let specs: Vec<fbdt_net::PathSpec> = (0..a.paths)
            .map(|p| fbdt_net::PathSpec {
                local: Some(fbdt_net::LocalBind::Addr(source(s, p))),
                remote: a.server,
            })
            .collect();
        let (cfg, gate, held, mut go) = (net.clone(), gate.clone(), held_tx.clone(), go_rx.clone());
        let bulk = s < a.bulk;
        tasks.push(tokio::spawn(async move {
            let session = {
                let _slot = gate.acquire().await;
                fbdt_net::connect(specs, cfg).await
            };
            let session = match session {
                Ok(x) => x,
                Err(e) => {
                    let _ = held.send(false).await;
                    return Outcome::Failed(e.to_string());
                }
            };
            let (mut r, mut w) = tokio::io::split(session);
            let req = Request {
                upload: true,
                zero_copy: false,
                bytes: 0,
                time_ms: time.as_millis() as u64,
            };
            if let Err(e) = w.write_all(&req.encode()).await {
                let _ = held.send(false).await;
                return Outcome::Failed(e.to_string());
            }
            let _ = held.send(true).await;
            while !*go.borrow() {
                if go.changed().await.is_err() {
                    break;
                }
            }
            let r = async {
                if bulk {
                    send_data(&mut w, req).await?;
                } else {
                    tokio::time::sleep(time).await;
                    w.shutdown().await?;
                }
                read_measure(&mut r).await
            }
            .await;
            match r {
                Ok(m) => Outcome::Done {
                    goodput_bps: bulk.then(|| m.bytes as f64 * 8.0 / m.duration_s.max(1e-9)),
                },
                Err(e) => Outcome::Failed(format!("{e:#}")),
            }
        }));
    }
    drop(held_tx);
    let t0 = Instant::now();
    let mut held = 0usize;
    // Every task reports once (held or failed) and then waits for `go`.
    for _ in 0..a.sessions {
        match held_rx.recv().await {
            Some(ok) => held += ok as usize,
            None => break,
        }
    }
    let connect_s = t0.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    let rss_held = a.server_pid.map(rss).transpose()?;
    let cpu0 = a.server_pid.map(cpu_s).transpose()?;
    let own0 = crate::cpu::process_cpu_s();
    let run0 = Instant::now();
    let _ = go_tx.send(true);
    let mut goodputs = Vec::new();
    let mut errors = Vec::new();
    let mut done = 0usize;
    for t in tasks {
        match t.await {
            Ok(Outcome::Done { goodput_bps }) => {
                done += 1;
                goodputs.extend(goodput_bps);
            }
            Ok(Outcome::Failed(e)) => errors.push(e),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let run_s = run0.elapsed().as_secs_f64();
    let cpu1 = a.server_pid.map(cpu_s).transpose()?;
    let server_cpu = cpu0.zip(cpu1).map(|(a, b)| b - a);
    let rss_per_session = rss0
        .zip(rss_held)
        .filter(|_| held > 0)
        .map(|(r0, r1)| r1.saturating_sub(r0) / held as u64);
    let fairness = jain(&goodputs);
    let total_bps = goodputs.iter().fold(0.0, |a, b| a + b);
    errors.sort();
    errors.dedup();
    let doc = serde_json::json!({
        "server": a.server.to_string(),
        "server_pid": a.server_pid,
        "sessions_requested": a.sessions,
        "paths": a.paths,
        "sessions_held": held,
        "sessions_completed": done,
        "connect_s": connect_s,
        "time_s": a.time,
        "run_s": run_s,
        "bulk_sessions": a.bulk,
        "server_rss_before_bytes": rss0,
        "server_rss_held_bytes": rss_held,
        "rss_per_session_bytes": rss_per_session,
        "server_cpu_s": server_cpu,
        "server_cpu_util": server_cpu.map(|c| c / run_s.max(1e-9)),
        "generator_cpu_s": crate::cpu::process_cpu_s() - own0,
        "bulk_goodput_mbps_total": total_bps / 1e6,
        "jain_fairness": fairness,
        "errors": errors.iter().take(5).collect::<Vec<_>>(),
        "distinct_errors": errors.len(),
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "held {held}/{} sessions ({} paths each) in {connect_s:.1} s; server RSS/session {}; server CPU {}; bulk {} sessions {:.1} Mbit/s total, Jain {}",
            a.sessions,
            a.paths,
            rss_per_session.map_or("n/a".into(), |b| format!("{} KiB", b / 1024)),
            server_cpu.map_or("n/a".into(), |c| format!("{c:.2} s")),
            a.bulk,
            total_bps / 1e6,
            fairness.map_or("n/a".into(), |f| format!("{f:.3}")),
        );
        for e in errors.iter().take(5) {
            eprintln!("error: {e}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), Some(1.0));
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[]), None);
    }

    #[test]
    fn sources_are_distinct_per_session_and_path() {
        let mut seen = std::collections::HashSet::new();
        for s in 0..MAX_SESSIONS {
            for p in 0..2 {
                assert!(seen.insert(source(s, p)));
            }
        }
    }
}
