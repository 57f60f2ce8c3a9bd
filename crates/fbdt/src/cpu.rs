//! What a perf run cost in CPU, at both ends: CPU-seconds per second of run (user +
//! system, whole process) and per Gbit/s moved.
//!
//! The server's share comes from the server itself: the client asks the perf server's
//! TCP port (the first listen port + 1, where the TCP/MPTCP baselines go) for the server
//! process's CPU time just before and just after the run, on a short connection secured
//! as the run is. Every session the server carries in that time counts (a shared server
//! reports more than one run's cost), and the closing query's own handshake (under a
//! millisecond of CPU) is inside the window.

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The first four bytes of a CPU query (a perf request begins "FBPF").
pub(crate) const QUERY_MAGIC: &[u8; 4] = b"FBPQ";
/// A query is as long as a perf request, so the server reads both the same way.
pub(crate) const QUERY_LEN: usize = 24;
/// Longest answer a client reads.
const MAX_ANSWER: usize = 4096;

/// This process's user and system CPU time so far, in seconds, and its peak RSS in KiB.
pub(crate) fn rusage() -> (f64, f64, u64) {
    // SAFETY: getrusage fills the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime), ru.ru_maxrss as u64)
}

/// User + system CPU time of this process so far, in seconds.
pub(crate) fn process_cpu_s() -> f64 {
    let (user, sys, _) = rusage();
    user + sys
}

/// What the server answers: its process's CPU time so far.
#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    cpu_s: f64,
}

pub(crate) fn query() -> [u8; QUERY_LEN] {
    let mut b = [0u8; QUERY_LEN];
    b[..4].copy_from_slice(QUERY_MAGIC);
    b[4] = 1;
    b
}

/// Server: answers a CPU query (the 24 bytes already read) with a length and JSON.
pub(crate) async fn answer(mut w: impl AsyncWrite + Unpin) -> anyhow::Result<()> {
    let json = serde_json::to_vec(&Answer { cpu_s: process_cpu_s() })?;
    w.write_all(&(json.len() as u32).to_be_bytes()).await?;
    w.write_all(&json).await?;
    w.shutdown().await?;
    Ok(())
}

/// Client: the server's CPU time so far, asked on a new connection to `addr` (the perf
/// server's TCP port), secured as `cfg` says.
pub(crate) async fn ask(path: &fbdt_net::PathSpec, addr: SocketAddr, cfg: &fbdt_net::NetConfig) -> anyhow::Result<f64> {
    let mut p = path.clone();
    p.remote = addr;
    let tcp = fbdt_net::dial_tcp(&p, cfg, false).await?;
    let mut s = fbdt_net::secure::connect(tcp, &p, &cfg.security).await?;
    s.write_all(&query()).await?;
    s.flush().await?;
    read_answer(&mut s).await
}

async fn read_answer(mut r: impl AsyncRead + Unpin) -> anyhow::Result<f64> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.context("reading the server's CPU time")?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_ANSWER {
        bail!("the server's CPU answer is too long ({len} bytes)");
    }
    let mut json = vec![0u8; len];
    r.read_exact(&mut json).await?;
    let a: Answer = serde_json::from_slice(&json).context("the server's CPU answer")?;
    if !a.cpu_s.is_finite() || a.cpu_s < 0.0 {
        bail!("the server's CPU answer is not a time: {}", a.cpu_s);
    }
    Ok(a.cpu_s)
}

/// CPU of both ends over one run, as `fbdt perf --json` prints it.
#[derive(Debug, Default, Serialize, PartialEq)]
pub(crate) struct CpuUse {
    /// CPU-seconds per second of run (user + system, whole process).
    pub client_cores: f64,
    /// `None` when the server could not be asked (an older server, a refused connection).
    pub server_cores: Option<f64>,
    pub cores_per_gbit: PerEnd,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub(crate) struct PerEnd {
    pub client: Option<f64>,
    pub server: Option<f64>,
}

/// One end's CPU time at the start of a run, to be closed by [`Window::close`].
pub(crate) struct Window {
    wall: Instant,
    client_s: f64,
    server_s: Option<f64>,
}

impl Window {
    pub fn open(server_s: Option<f64>) -> Window {
        Window {
            wall: Instant::now(),
            client_s: process_cpu_s(),
            server_s,
        }
    }

    /// The run moved `bytes`; `server_s` is the server's CPU time now, if known.
    pub fn close(self, server_s: Option<f64>, bytes: u64) -> CpuUse {
        let secs = self.wall.elapsed().as_secs_f64().max(1e-9);
        let gbit_per_s = bytes as f64 * 8.0 / secs / 1e9;
        let per_gbit = |cores: f64| (gbit_per_s > 0.0).then(|| cores / gbit_per_s);
        let client_cores = (process_cpu_s() - self.client_s).max(0.0) / secs;
        let server_cores = match (self.server_s, server_s) {
            (Some(a), Some(b)) => Some((b - a).max(0.0) / secs),
            _ => None,
        };
        CpuUse {
            client_cores,
            server_cores,
            cores_per_gbit: PerEnd {
                client: per_gbit(client_cores),
                server: server_cores.and_then(per_gbit),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_round_trip_and_bad_ones_are_refused() {
        let (a, b) = tokio::io::duplex(1024);
        answer(a).await.unwrap();
        let cpu = read_answer(b).await.unwrap();
        assert!(cpu >= 0.0);
        let (mut a, b) = tokio::io::duplex(1024);
        a.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
        drop(a);
        assert!(read_answer(b).await.unwrap_err().to_string().contains("too long"));
        let (mut a, b) = tokio::io::duplex(1024);
        let bad = br#"{"cpu_s":-1.0}"#;
        a.write_all(&(bad.len() as u32).to_be_bytes()).await.unwrap();
        a.write_all(bad).await.unwrap();
        drop(a);
        assert!(read_answer(b).await.is_err());
    }

    #[test]
    fn a_window_divides_by_wall_time_and_rate() {
        let w = Window {
            wall: Instant::now() - std::time::Duration::from_secs(2),
            client_s: process_cpu_s(),
            server_s: Some(10.0),
        };
        let u = w.close(Some(11.0), 250_000_000); // 2 Gbit in 2 s = 1 Gbit/s
        let s = u.server_cores.unwrap();
        assert!((s - 0.5).abs() < 0.01, "{s}");
        let per = u.cores_per_gbit.server.unwrap();
        assert!((per - 0.5).abs() < 0.01, "{per}");
        let none = Window {
            server_s: None,
            ..Window::open(None)
        }
        .close(Some(1.0), 0);
        assert_eq!(none.server_cores, None);
        assert_eq!(none.cores_per_gbit.client, None, "nothing moved: no rate to divide by");
    }
}
