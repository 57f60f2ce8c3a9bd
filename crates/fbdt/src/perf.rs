//! `fbdt perf`: iperf3-shaped throughput test over FBDT, plain TCP or kernel MPTCP.
//!
//! The client sends a 24-byte request ("FBPF", version, flags, bytes, milliseconds); then
//! one side streams and the other measures. Download (server → client, what the papers
//! measure) is the default; `--reverse` uploads. After an upload the server sends its
//! measurement back (u32 length + JSON), so the client always prints the receiver's view.
//! The server takes FBDT on every `--listen` address and TCP/MPTCP on the first address's
//! port + 1 (one MPTCP listening socket serves both).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use fbdt_net::sample::Copying;

use crate::net_args::NetArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Fbdt,
    Tcp,
    Mptcp,
}

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  fbdt perf --server --listen 127.0.0.1:5201 --listen 127.0.0.1:5211
  fbdt perf --path 127.0.0.2=127.0.0.1:5201 --path 127.0.0.3=127.0.0.1:5211 --time 10
  fbdt perf --path 127.0.0.2=127.0.0.1:5201 --path 127.0.0.3=127.0.0.1:5201 --bytes 1G --reverse
  fbdt perf --path %wlan0=10.0.0.1:5201 --path %eth0=10.0.0.1:5201 --congestion bbr --json
  fbdt perf --path 127.0.0.2=127.0.0.1:5201 --transport tcp      # kernel TCP on the first path
  fbdt perf --path 10.0.0.2=10.0.0.1:5201 --transport mptcp      # kernel MPTCP (server port + 1)")]
pub struct PerfArgs {
    /// Run the server (with --listen).
    #[arg(long)]
    server: bool,
    /// Server: address to accept FBDT paths on (repeat); TCP/MPTCP use the first one's port + 1.
    #[arg(long, value_name = "IP:PORT", required_if_eq("server", "true"))]
    listen: Vec<SocketAddr>,
    /// Client: one path per interface, [LOCAL_IP=|%IFACE=]SERVER_IP:PORT; path i = i-th.
    #[arg(long = "path", value_name = "PATH", required_unless_present = "server")]
    paths: Vec<fbdt_net::PathSpec>,
    /// Seconds to send (default 10).
    #[arg(long, value_name = "S", conflicts_with = "bytes")]
    time: Option<f64>,
    /// Bytes to send instead of a time (suffixes K, M, G = KiB, MiB, GiB).
    #[arg(long, value_name = "N", value_parser = parse_bytes)]
    bytes: Option<u64>,
    /// Upload (client → server) instead of the default download (server → client).
    #[arg(long)]
    reverse: bool,
    /// Download over FBDT: the server hands its session one shared 256 KiB buffer again and
    /// again (`Session::write_chunk`, frames carry slices of it, no copy) instead of writing
    /// through AsyncWrite, as iperf3 reuses one buffer.
    #[arg(long, conflicts_with = "reverse")]
    zero_copy: bool,
    /// fbdt over all paths, tcp = one kernel TCP connection on the first path, mptcp = kernel
    /// MPTCP from the first path (the kernel adds subflows per its endpoints).
    #[arg(long, value_enum, default_value = "fbdt")]
    transport: Transport,
    /// Seconds between report lines.
    #[arg(long, value_name = "S", default_value = "1")]
    interval: f64,
    /// Print one JSON document (the stable goodput fields) instead of lines.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    net: NetArgs,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("bad byte count {s:?} (e.g. 100M, 1G)"))
}

const MAGIC: &[u8; 4] = b"FBPF";
const UPLOAD: u8 = 1;
const ZERO_COPY: u8 = 2;
/// Receiver samples per second (interval lines and 1-s percentiles are cut from these).
const SAMPLE: Duration = Duration::from_millis(100);
const CHUNK: usize = 256 * 1024;
/// Longest run a perf server serves (a request for more is refused).
pub const MAX_TIME_S: u64 = 3600;
/// Most bytes a perf server sends or accepts in one run (a request for more is refused).
pub const MAX_BYTES: u64 = 1 << 40;
/// Time a perf client has to send its request once its session is open.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// After a download's last byte, the longest the server waits for the client to finish.
const END_TIMEOUT: Duration = Duration::from_secs(30);
/// Most connections the server's TCP/MPTCP port holds at once; more are closed at accept,
/// so idle connections there cannot take the descriptors the FBDT listener needs (a TCP
/// baseline run uses one).
pub const MAX_TCP_CONNECTIONS: usize = 64;
/// Time a TCP/MPTCP connection has for its TLS handshake and token proof.
const TCP_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub upload: bool,
    /// A download the server sends with `write_chunk` (FBDT sessions; TCP ignores it).
    pub zero_copy: bool,
    pub bytes: u64,
    pub time_ms: u64,
}

impl Request {
    pub fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..4].copy_from_slice(MAGIC);
        b[4] = 1;
        b[5] = if self.upload { UPLOAD } else { 0 } | if self.zero_copy { ZERO_COPY } else { 0 };
        b[8..16].copy_from_slice(&self.bytes.to_be_bytes());
        b[16..24].copy_from_slice(&self.time_ms.to_be_bytes());
        b
    }
    fn decode(b: &[u8; 24]) -> anyhow::Result<Request> {
        if &b[..4] != MAGIC || b[4] != 1 {
            bail!("not an fbdt perf request");
        }
        let u = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().expect("8 bytes"));
        let req = Request {
            upload: b[5] & UPLOAD != 0,
            zero_copy: b[5] & ZERO_COPY != 0,
            bytes: u(8..16),
            time_ms: u(16..24),
        };
        if req.bytes > MAX_BYTES || req.time_ms > MAX_TIME_S * 1000 {
            bail!(
                "perf request refused: {} bytes / {} ms is more than this server serves ({MAX_BYTES} bytes, {MAX_TIME_S} s)",
                req.bytes,
                req.time_ms
            );
        }
        Ok(req)
    }

    /// Bytes to send next (at most `CHUNK`; 0 when done), `sent` so far since `start`.
    fn next_chunk(&self, start: Instant, sent: u64) -> usize {
        if self.bytes > 0 {
            (self.bytes - sent).min(CHUNK as u64) as usize
        } else if start.elapsed() >= Duration::from_millis(self.time_ms) {
            0
        } else {
            CHUNK
        }
    }

    /// The longest the transfer may take before the server gives up on a peer that does
    /// not read (a byte count is given the whole time limit).
    fn deadline(&self) -> Duration {
        let t = if self.bytes > 0 {
            MAX_TIME_S * 1000
        } else {
            self.time_ms
        };
        Duration::from_millis(t) + END_TIMEOUT
    }
}

/// What the receiving FBDT session did per byte.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct ReceiverCost {
    wakeups_per_s: f64,
    lowat_fallbacks: u64,
    ack_frames_per_mb: f64,
}

/// The receiver's view of a run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Measure {
    pub duration_s: f64,
    pub bytes: u64,
    redundant_bytes: u64,
    /// FBDT's receiving end: how often its session task woke, its receive low-water marks
    /// that had to fall back, and the ACK frames it sent (absent from older servers).
    #[serde(default)]
    session: Option<ReceiverCost>,
    /// (t, cumulative bytes, cumulative bytes per path), every `SAMPLE` and at the end.
    samples: Vec<(f64, u64, Vec<u64>)>,
}

pub(crate) async fn send_data(mut w: impl AsyncWrite + Unpin, req: Request) -> anyhow::Result<u64> {
    let buf = vec![0x5au8; CHUNK];
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let n = req.next_chunk(start, sent);
        if n == 0 {
            break;
        }
        w.write_all(&buf[..n]).await?;
        sent += n as u64;
    }
    w.shutdown().await.context("finishing the stream")?;
    Ok(sent)
}

/// A stream that can take a shared buffer without copying it.
pub(crate) trait SendChunk: AsyncWrite + Unpin {
    async fn send_chunk(&mut self, b: Bytes) -> std::io::Result<()> {
        self.write_all(&b).await
    }
}

impl SendChunk for fbdt_net::Session {
    async fn send_chunk(&mut self, b: Bytes) -> std::io::Result<()> {
        self.write_chunk(b).await
    }
}

impl SendChunk for fbdt_net::PathStream {}

/// [`send_data`] handing over one shared buffer again and again.
async fn send_data_shared(w: &mut impl SendChunk, req: Request) -> anyhow::Result<u64> {
    let buf = Bytes::from(vec![0x5au8; CHUNK]);
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let n = req.next_chunk(start, sent);
        if n == 0 {
            break;
        }
        w.send_chunk(buf.slice(..n)).await?;
        sent += n as u64;
    }
    w.shutdown().await.context("finishing the stream")?;
    Ok(sent)
}

/// Reads to EOF, sampling cumulative bytes (and per path, from FBDT's counters).
async fn receive(
    r: impl fbdt_net::sample::ByteSource,
    stats: Option<fbdt_net::StatsHandle>,
    mut live: impl FnMut(&Measure),
) -> anyhow::Result<Measure> {
    let mut m = Measure::default();
    let per_path = |stats: &Option<fbdt_net::StatsHandle>, total: u64| -> (Vec<u64>, u64) {
        match stats {
            Some(h) => {
                let s = h.stats();
                (
                    s.paths.iter().map(|p| p.bytes_received).collect(),
                    s.redundant_bytes_received,
                )
            }
            None => (vec![total], 0),
        }
    };
    let total = fbdt_net::sample::read_sampled_from(r, SAMPLE, None, |t, bytes| {
        let (pp, _) = per_path(&stats, bytes);
        m.bytes = bytes;
        m.samples.push((t, bytes, pp));
        live(&m);
    })
    .await?;
    m.bytes = total.bytes;
    m.duration_s = total.secs;
    // FBDT counters are refreshed every 10 ms: wait one refresh for the final ones.
    if stats.is_some() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (pp, red) = per_path(&stats, m.bytes);
    m.redundant_bytes = red;
    m.session = stats.as_ref().map(|h| {
        let s = h.stats();
        ReceiverCost {
            wakeups_per_s: s.wakeups as f64 / m.duration_s.max(1e-9),
            lowat_fallbacks: s.lowat_fallbacks,
            ack_frames_per_mb: s.core.receiver.acks_sent as f64 / (m.bytes as f64 / 1e6).max(1e-9),
        }
    });
    m.samples.push((m.duration_s, m.bytes, pp));
    Ok(m)
}

pub async fn run(a: PerfArgs) -> anyhow::Result<()> {
    if a.server {
        return server(a).await;
    }
    client(a).await
}

// ---------------------------------------------------------------- server

async fn server(a: PerfArgs) -> anyhow::Result<()> {
    let cfg = a.net.server_config()?;
    let security = cfg.security.clone();
    let mut fl = fbdt_net::listen(&a.listen, cfg).await?;
    let first = a.listen[0];
    let tcp_addr = SocketAddr::new(first.ip(), fl.local_addrs()[0].port().wrapping_add(1));
    let (tl, kind) = tcp_listener(tcp_addr)?;
    eprintln!(
        "fbdt perf server: FBDT on {:?}, TCP{} on {}",
        fl.local_addrs(),
        if kind { "/MPTCP" } else { "" },
        tl.local_addr()?
    );
    let tcp_slots = Arc::new(tokio::sync::Semaphore::new(MAX_TCP_CONNECTIONS));
    loop {
        tokio::select! {
            s = fl.accept() => {
                let Some(s) = s else { bail!("FBDT listener ended") };
                let h = s.stats_handle();
                tokio::spawn(async move {
                    if let Err(e) = serve_one(s, Some(h)).await {
                        log!("fbdt session: {e:#}");
                        give_back_freed_memory();
                    }
                });
            }
            c = tl.accept() => {
                let (s, peer) = match c {
                    Ok(x) => x,
                    Err(e) => {
                        // EMFILE and friends: back off, never end the server.
                        log!("tcp accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = tcp_slots.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "tcp: refused at accept: {MAX_TCP_CONNECTIONS} connections already held");
                    continue;
                };
                let _ = s.set_nodelay(true);
                let security = security.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    // The TCP baseline is secured as the FBDT paths are (TLS unless --plaintext).
                    let secured = tokio::time::timeout(TCP_HANDSHAKE_TIMEOUT, fbdt_net::secure::accept(s, &security));
                    let s = match secured.await {
                        Ok(Ok(s)) => s,
                        Ok(Err(r)) => return log!("tcp {peer}: {}", r.why),
                        Err(_) => return log!("tcp {peer}: no TLS handshake within {TCP_HANDSHAKE_TIMEOUT:?}"),
                    };
                    if let Err(e) = serve_one(s, None).await {
                        log!("tcp {peer}: {e:#}");
                    }
                });
            }
        }
    }
}

/// Hands the allocator's free pages back to the kernel. `main` tells glibc to keep freed
/// buffers (cheaper for a running transfer), so after sessions that failed holding full
/// buffers — a peer that stopped reading, closed after `send_stall_timeout` — the server's
/// RSS stayed at its peak (1.4 GiB after 64 such sessions freed 2.1 GiB). Failed sessions
/// only: a normal run's end keeps the cheap path.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// An MPTCP listening socket (it also accepts plain TCP) or, without kernel MPTCP, TCP.
fn tcp_listener(addr: SocketAddr) -> anyhow::Result<(tokio::net::TcpListener, bool)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let (sock, mptcp) = match Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(Protocol::from(libc::IPPROTO_MPTCP)),
    ) {
        Ok(s) => (s, true),
        Err(_) => (
            Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?,
            false,
        ),
    };
    sock.set_reuse_address(true)?;
    sock.bind(&addr.into()).with_context(|| format!("listen on {addr}"))?;
    sock.listen(128)?;
    sock.set_nonblocking(true)?;
    Ok((tokio::net::TcpListener::from_std(sock.into())?, mptcp))
}

async fn serve_one<S: SendChunk + AsyncRead + Send + 'static>(
    s: S,
    stats: Option<fbdt_net::StatsHandle>,
) -> anyhow::Result<()> {
    let (mut r, mut w) = tokio::io::split(s);
    let mut hdr = [0u8; 24];
    tokio::time::timeout(REQUEST_TIMEOUT, r.read_exact(&mut hdr))
        .await
        .context("no perf request in time")?
        .context("reading the request")?;
    if &hdr[..4] == crate::cpu::QUERY_MAGIC {
        return crate::cpu::answer(w).await;
    }
    let req = Request::decode(&hdr)?;
    let deadline = req.deadline();
    if req.upload {
        let m = tokio::time::timeout(deadline, receive(Copying::new(&mut r), stats, |_| {}))
            .await
            .context("upload ran past its time limit")??;
        let json = serde_json::to_vec(&m)?;
        w.write_all(&(json.len() as u32).to_be_bytes()).await?;
        w.write_all(&json).await?;
        w.shutdown().await?;
    } else {
        // A client that stops reading is dropped once the run's time is up.
        let mut s = r.unsplit(w);
        let sent = if req.zero_copy {
            tokio::time::timeout(deadline, send_data_shared(&mut s, req)).await
        } else {
            tokio::time::timeout(deadline, send_data(&mut s, req)).await
        };
        sent.context("the client stopped reading")??;
        // Nothing more is expected from the client: wait for its end, reading nothing.
        let mut rest = [0u8; 1];
        let _ = tokio::time::timeout(END_TIMEOUT, s.read(&mut rest)).await;
    }
    Ok(())
}

// ---------------------------------------------------------------- client

async fn client(a: PerfArgs) -> anyhow::Result<()> {
    if let Some(t) = a.time {
        if !t.is_finite() || t <= 0.0 || t > MAX_TIME_S as f64 {
            bail!("--time {t}: expected seconds in (0, {MAX_TIME_S}]");
        }
    }
    if a.bytes.is_some_and(|b| b == 0 || b > MAX_BYTES) {
        bail!("--bytes: expected 1..={MAX_BYTES}");
    }
    if a.zero_copy && a.transport != Transport::Fbdt {
        bail!("--zero-copy is for FBDT sessions (the TCP baselines write through the socket)");
    }
    let req = Request {
        upload: a.reverse,
        zero_copy: a.zero_copy,
        bytes: a.bytes.unwrap_or(0),
        time_ms: if a.bytes.is_some() {
            0
        } else {
            (a.time.unwrap_or(10.0) * 1000.0) as u64
        },
    };
    if a.interval.is_nan() || a.interval <= 0.0 {
        bail!("--interval must be > 0");
    }
    let cc = a.net.congestion.as_ref().map_or_else(system_cc, |p| p.to_string());
    let cfg = a.net.client_config()?;
    // The server's CPU time is asked on its TCP port just before and after the run.
    let mut cpu_port = a.paths[0].remote;
    cpu_port.set_port(cpu_port.port().wrapping_add(1));
    let server_cpu = || async {
        match crate::cpu::ask(&a.paths[0], cpu_port, &cfg).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::info!("the server's CPU time is not known: {e:#}");
                None
            }
        }
    };
    let window = crate::cpu::Window::open(server_cpu().await);
    let (m, scheme, npaths) = match a.transport {
        Transport::Fbdt => {
            let s = fbdt_net::connect(a.paths.clone(), cfg.clone()).await?;
            let h = s.stats_handle();
            let n = a.paths.len();
            (exchange_session(s, h, req, &a, n).await?, "fbdt", n)
        }
        Transport::Tcp | Transport::Mptcp => {
            let mptcp = a.transport == Transport::Mptcp;
            let mut p = a.paths[0].clone();
            p.remote.set_port(p.remote.port().wrapping_add(1));
            let mut cfg = cfg.clone();
            cfg.notsent_lowat = u32::MAX; // the kernel default: a plain TCP baseline
            let s = fbdt_net::dial_tcp(&p, &cfg, mptcp)
                .await
                .with_context(|| format!("connecting to {} (the perf server's port + 1)", p.remote))?;
            let s = fbdt_net::secure::connect(s, &p, &cfg.security)
                .await
                .with_context(|| format!("securing the connection to {}", p.remote))?;
            (
                exchange(s, None, req, &a, 1).await?,
                if mptcp { "mptcp" } else { "tcp" },
                1,
            )
        }
    };
    let cpu = window.close(server_cpu().await, m.bytes);
    report(&a, &m, scheme, npaths, &cc, req, &cpu);
    Ok(())
}

async fn exchange<S: AsyncRead + AsyncWrite + Send + 'static>(
    s: S,
    stats: Option<fbdt_net::StatsHandle>,
    req: Request,
    a: &PerfArgs,
    npaths: usize,
) -> anyhow::Result<Measure> {
    let (mut r, mut w) = tokio::io::split(s);
    w.write_all(&req.encode()).await?;
    if req.upload {
        send_data(&mut w, req).await?;
        read_measure(&mut r).await
    } else {
        let m = receive(Copying::new(&mut r), stats, live_lines(a, npaths)).await?;
        w.shutdown().await?;
        Ok(m)
    }
}

/// [`exchange`] over an FBDT session: a download is read as the received slices, without
/// the copy `AsyncRead` makes (what an application holding `Bytes` saves).
async fn exchange_session(
    mut s: fbdt_net::Session,
    stats: fbdt_net::StatsHandle,
    req: Request,
    a: &PerfArgs,
    npaths: usize,
) -> anyhow::Result<Measure> {
    if req.upload {
        return exchange(s, Some(stats), req, a, npaths).await;
    }
    s.write_all(&req.encode()).await?;
    let m = receive(&mut s, Some(stats), live_lines(a, npaths)).await?;
    s.shutdown().await?;
    Ok(m)
}

/// Prints a line per `--interval` while a download runs (unless `--json`).
fn live_lines(a: &PerfArgs, npaths: usize) -> impl FnMut(&Measure) {
    let every = (a.interval / SAMPLE.as_secs_f64()).round().max(1.0) as usize;
    let json = a.json;
    if !json {
        header();
    }
    move |m| {
        if !json && m.samples.len() % every == 0 {
            let k = m.samples.len();
            let prev = if k > every {
                Some(&m.samples[k - every - 1])
            } else {
                None
            };
            line(prev, &m.samples[k - 1], npaths);
        }
    }
}

/// The server's measurement of an upload (a length, then JSON).
pub(crate) async fn read_measure(mut r: impl AsyncRead + Unpin) -> anyhow::Result<Measure> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)
        .await
        .context("reading the server's measurement")?;
    let len = u32::from_be_bytes(len) as usize;
    if len > 64 << 20 {
        bail!("server measurement too large");
    }
    let mut json = vec![0u8; len];
    r.read_exact(&mut json).await?;
    Ok(serde_json::from_slice(&json)?)
}

fn header() {
    println!("[ ID] Interval           Transfer     Bitrate");
}

fn line(prev: Option<&(f64, u64, Vec<u64>)>, cur: &(f64, u64, Vec<u64>), npaths: usize) {
    let (t0, b0, p0) = prev.map_or((0.0, 0, Vec::new()), |p| (p.0, p.1, p.2.clone()));
    let dt = (cur.0 - t0).max(1e-9);
    let fmt = |id: &str, bytes: u64| {
        println!(
            "[{id:>3}] {t0:6.2}-{:<6.2} sec {:>7.1} MBytes {:>8.1} Mbits/sec",
            cur.0,
            bytes as f64 / (1 << 20) as f64,
            bytes as f64 * 8.0 / dt / 1e6
        )
    };
    fmt("SUM", cur.1 - b0);
    if npaths > 1 {
        for (i, b) in cur.2.iter().enumerate() {
            fmt(&i.to_string(), b - p0.get(i).copied().unwrap_or(0));
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn system_cc() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn report(a: &PerfArgs, m: &Measure, scheme: &str, npaths: usize, cc: &str, req: Request, cpu: &crate::cpu::CpuUse) {
    let goodput = m.bytes as f64 * 8.0 / m.duration_s.max(1e-9) / 1e6;
    // 1-s samples: every 10th sample (SAMPLE = 100 ms); whole seconds only.
    let per_s = (1.0 / SAMPLE.as_secs_f64()).round() as usize;
    let mut secs: Vec<f64> = Vec::new();
    let mut prev = 0u64;
    for (k, s) in m.samples.iter().enumerate() {
        if (k + 1) % per_s == 0 && k + 1 < m.samples.len() {
            secs.push((s.1 - prev) as f64 * 8.0 / 1e6);
            prev = s.1;
        }
    }
    if secs.is_empty() {
        secs.push(goodput);
    }
    secs.sort_by(f64::total_cmp);
    let every = (a.interval / SAMPLE.as_secs_f64()).round().max(1.0) as usize;
    let mut series = Vec::new();
    let mut last = (0.0, 0u64);
    for (k, s) in m.samples.iter().enumerate() {
        if (k + 1) % every == 0 || k + 1 == m.samples.len() {
            let dt = (s.0 - last.0).max(1e-9);
            series.push(serde_json::json!({ "t": (s.0 * 1000.0).round() / 1000.0, "mbps": (s.1 - last.1) as f64 * 8.0 / dt / 1e6 }));
            last = (s.0, s.1);
        }
    }
    let final_pp = m.samples.last().map(|s| s.2.clone()).unwrap_or_default();
    let per_path: serde_json::Map<String, serde_json::Value> = final_pp
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("path{i}"), (*b).into()))
        .collect();
    let (ut, st, rss) = crate::cpu::rusage();
    if a.json {
        let doc = serde_json::json!({
            "tool": "fbdt perf",
            "direction": if req.upload { "upload" } else { "download" },
            "duration_s": m.duration_s,
            "congestion_control": cc,
            "encryption": a.net.security.encryption(),
            "paths": a.paths.iter().map(|p| format!("{}", p.remote)).collect::<Vec<_>>(),
            "client_cpu_user_s": ut, "client_cpu_sys_s": st, "client_max_rss_kib": rss,
            "cpu": cpu,
            "results": [{
                "scheme": scheme,
                "goodput_mbps": goodput,
                "goodput_p10_mbps": percentile(&secs, 0.1),
                "goodput_p50_mbps": percentile(&secs, 0.5),
                "goodput_p90_mbps": percentile(&secs, 0.9),
                "bytes_delivered": m.bytes,
                "redundant_bytes": m.redundant_bytes,
                "per_path_bytes": per_path,
                "series": series,
                "receiver": m.session,
            }]
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return;
    }
    if req.upload {
        header();
        for k in (every - 1..m.samples.len()).step_by(every) {
            let prev = if k >= every { Some(&m.samples[k - every]) } else { None };
            line(prev, &m.samples[k], npaths);
        }
    }
    println!("- - - - - - - - - - - - - - - - - - - - - - - - -");
    line(None, m.samples.last().expect("final sample"), npaths);
    let server_cores = cpu.server_cores.map_or("unknown".into(), |c| format!("{c:.2}"));
    println!(
        "{scheme} {} ({cc}): {goodput:.1} Mbit/s in {:.2} s, 1-s p10/p50/p90 {:.1}/{:.1}/{:.1} Mbit/s, redundant {} bytes; CPU cores client {:.2}, server {server_cores}; client CPU {:.2}s user {:.2}s sys, max RSS {} KiB",
        if req.upload { "upload" } else { "download" },
        m.duration_s,
        percentile(&secs, 0.1),
        percentile(&secs, 0.5),
        percentile(&secs, 0.9),
        m.redundant_bytes,
        cpu.client_cores,
        ut,
        st,
        rss
    );
}
