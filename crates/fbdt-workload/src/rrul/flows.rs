//! The rrul client in the client namespace: one bulk download that keeps every path busy,
//! and beside it a ping-pong flow (a 64-byte answer every interval) and a 100 kB fetch every
//! second, each on its own connection, all through the same route (the proxy for `fbdt`).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fbdt_emu::perf::Proto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::origin::{pattern, request, ENDLESS};

/// How long the last request of a flow may still take after the measured span: its answer
/// counts (a slow answer is a result); only one not in by then is unanswered. Far above
/// any answer's time on a working route (the worst seen: 0.6 s), so a busy host does not
/// turn a slow answer into a missing one.
const GRACE: Duration = Duration::from_secs(10);

/// Where a scheme's connections go.
#[derive(Clone, Copy, Debug)]
pub enum Dial {
    /// SOCKS5 through `fbdt proxy` at `proxy` to `origin`.
    Socks { proxy: SocketAddr, origin: SocketAddr },
    /// A kernel socket from `from` straight to `origin` (TCP over one radio, or MPTCP).
    Kernel { from: Ipv4Addr, origin: SocketAddr, proto: Proto },
}

impl Dial {
    async fn connect(self) -> Result<TcpStream> {
        match self {
            Dial::Socks { proxy, origin } => socks5_connect(proxy, origin).await,
            Dial::Kernel { from, origin, proto } => {
                fbdt_harness::emu::transport::kernel_connect(from, origin, proto)
            }
        }
    }
}

/// The plan of one run.
#[derive(Clone, Copy, Debug)]
pub struct FlowPlan {
    pub dial: Dial,
    /// Bulk alone before the interactive flows start (the paths fill up).
    pub warmup: Duration,
    /// How long the interactive flows run beside the bulk.
    pub measure: Duration,
    pub ping_interval: Duration,
    pub ping_bytes: u64,
    pub fetch_interval: Duration,
    pub fetch_bytes: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Each ping's round trip (ms), in order.
    pub ping_ms: Vec<f64>,
    /// Pings sent whose answer did not come within [`GRACE`] after the measured span.
    pub pings_unanswered: usize,
    /// Each fetch's time from request to last byte (ms).
    pub fetch_ms: Vec<f64>,
    pub fetches_unfinished: usize,
    /// Bulk bytes received while the interactive flows ran, and over how long (s).
    pub bulk_bytes: u64,
    pub bulk_s: f64,
}

/// Runs the three flows per `plan` (inside the client namespace).
pub async fn run(plan: FlowPlan) -> Result<Measured> {
    let mut bulk = plan.dial.connect().await.context("the bulk connection")?;
    bulk.write_all(&request(ENDLESS, 0)).await?;
    let (count_tx, count_rx) = tokio::sync::watch::channel(0u64);
    let reader: tokio::task::JoinHandle<Result<()>> = tokio::spawn(async move {
        let mut buf = vec![0u8; 256 * 1024];
        let mut total = 0u64;
        loop {
            match bulk.read(&mut buf).await {
                Ok(0) => return Err(anyhow::anyhow!("the bulk download ended early")),
                Ok(n) => {
                    total += n as u64;
                    count_tx.send_replace(total);
                }
                Err(e) => return Err(anyhow::Error::new(e).context("the bulk download")),
            }
        }
    });
    tokio::time::sleep(plan.warmup).await;
    if reader.is_finished() {
        return Err(reader.await?.expect_err("the reader ends only on errors"));
    }
    let (mut ping, mut fetch) = (
        plan.dial.connect().await.context("the ping connection")?,
        plan.dial.connect().await.context("the fetch connection")?,
    );
    let start_bytes = *count_rx.borrow();
    let start = Instant::now();
    let end = start + plan.measure;
    let pinger = exchanges(&mut ping, plan.ping_bytes, plan.ping_interval, end);
    let fetcher = exchanges(&mut fetch, plan.fetch_bytes, plan.fetch_interval, end);
    let (pings, fetches) = tokio::join!(pinger, fetcher);
    let (ping_ms, pings_unanswered) = pings.context("the ping flow")?;
    let (fetch_ms, fetches_unfinished) = fetches.context("the fetch flow")?;
    let bulk_bytes = *count_rx.borrow() - start_bytes;
    let bulk_s = start.elapsed().as_secs_f64();
    if reader.is_finished() {
        return Err(reader.await?.expect_err("the reader ends only on errors"));
    }
    reader.abort();
    Ok(Measured {
        ping_ms,
        pings_unanswered,
        fetch_ms,
        fetches_unfinished,
        bulk_bytes,
        bulk_s,
    })
}

/// Requests `bytes` on `s` every `interval` until `end` (the next request goes when both
/// the interval has passed and the previous answer is in), each with its own tag, and
/// checks every answer byte against the tag's pattern: a wrong, shifted or mixed-up answer
/// fails the run. Each answer's time in ms, and whether the last request was still
/// unanswered [`GRACE`] after `end`.
async fn exchanges(s: &mut TcpStream, bytes: u64, interval: Duration, end: Instant) -> Result<(Vec<f64>, usize)> {
    let mut times = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut next = Instant::now();
    let mut tag = 0u64;
    while next < end {
        tokio::time::sleep_until(next.into()).await;
        tag += 1;
        let sent = Instant::now();
        s.write_all(&request(bytes, tag)).await?;
        let answer = async {
            let mut got = 0u64;
            while got < bytes {
                let want = (bytes - got).min(buf.len() as u64) as usize;
                let n = s.read(&mut buf[..want]).await?;
                if n == 0 {
                    bail!("the origin closed the connection after {got} of {bytes} bytes of answer {tag}");
                }
                if let Some(i) = (0..n).find(|&i| buf[i] != pattern(tag, got + i as u64)) {
                    bail!("answer {tag} ({bytes} bytes) is not the one asked for: byte {} differs", got + i as u64);
                }
                got += n as u64;
            }
            Ok(())
        };
        match tokio::time::timeout_at((end + GRACE).into(), answer).await {
            Ok(r) => r?,
            Err(_) => return Ok((times, 1)),
        }
        times.push(sent.elapsed().as_secs_f64() * 1e3);
        next += interval;
        if next < Instant::now() {
            next = Instant::now();
        }
    }
    Ok((times, 0))
}

/// A connection to `origin` through the SOCKS5 proxy at `proxy` (no authentication).
async fn socks5_connect(proxy: SocketAddr, origin: SocketAddr) -> Result<TcpStream> {
    let SocketAddr::V4(v4) = origin else {
        bail!("the rrul origin has an IPv4 address");
    };
    let mut s = TcpStream::connect(proxy)
        .await
        .with_context(|| format!("connecting to the proxy at {proxy}"))?;
    s.set_nodelay(true)?;
    s.write_all(&[5, 1, 0]).await?;
    let mut hello = [0u8; 2];
    s.read_exact(&mut hello).await?;
    if hello != [5, 0] {
        bail!("the proxy refused SOCKS5 without authentication ({hello:?})");
    }
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&v4.ip().octets());
    req.extend_from_slice(&v4.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut reply = [0u8; 4];
    s.read_exact(&mut reply).await?;
    if reply[1] != 0 {
        bail!("the proxy could not reach {origin} (SOCKS5 reply {})", reply[1]);
    }
    // The bound address the reply carries (port included), unused.
    let bound = match reply[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        3 => usize::from(s.read_u8().await?) + 2,
        t => bail!("the proxy's SOCKS5 reply has address type {t}"),
    };
    let mut skip = vec![0u8; bound];
    s.read_exact(&mut skip).await?;
    Ok(s)
}
