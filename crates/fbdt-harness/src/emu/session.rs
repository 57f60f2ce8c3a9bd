//! FBDT and the userspace MPTCP meta layer (`mp:*`) on the emulated testbed: the fbdt-net
//! runtime on one thread in each namespace. A current-thread tokio runtime keeps every
//! socket — including the re-dials after an outage — in the namespace of the thread that
//! created it (a multi-threaded runtime's workers would be, too, but its blocking pool
//! threads need not be).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use fbdt_core::delay_probe::{DelayJoin, DelayMark, DelaySamples};
use fbdt_emu::perf::Transfer;
use fbdt_emu::{Side, Testbed};
use fbdt_net::{
    DelayMarks, LocalBind, NetConfig, PathSpec, Security, ServerIdentity, SessionStats, TlsClient, TlsServer, Trust,
};

use crate::scheme::Encryption;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Cumulative-bytes samples are taken this often, as `fbdt_emu::perf::download` does.
const SAMPLE: Duration = Duration::from_millis(100);
const CHUNK: usize = 256 * 1024;
/// Time the server waits for the client's session after it started listening.
pub const ACCEPT_LIMIT: Duration = Duration::from_secs(15);
/// After the sending time, how long the sender may wait for its last bytes to be
/// acknowledged and the receiver may keep reading.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// One download over the session plus both ends' counters at the end.
pub struct SessionTransfer {
    pub transfer: Transfer,
    pub server: SessionStats,
    pub client: SessionStats,
    /// In-order delivery delay of the download: the server's first transmissions joined
    /// with the client's in-order deliveries.
    pub delay: DelaySamples,
}

/// Joins one end's first-transmission marks with the other's deliveries; offsets still
/// undelivered at `end` are aged to it. Both ends ran in this process: one clock.
fn join_marks(sent: &DelayMarks, delivered: &DelayMarks, origin: Instant, end: Instant) -> DelaySamples {
    let at = |t: Instant| fbdt_core::Instant::from_micros(t.saturating_duration_since(origin).as_micros() as u64);
    let mark = |&(offset, t): &(u64, Instant)| DelayMark { offset, at: at(t) };
    let mut join = DelayJoin::new();
    sent.sent.iter().map(mark).for_each(|m| join.sent(m));
    delivered.delivered.iter().map(mark).for_each(|m| join.delivered(m));
    join.finish(at(end))
}

/// Each end's security for one run: plaintext, or TLS 1.3 with a server key made for this
/// run and pinned by the client (as `fbdt` runs by default, without a token).
pub struct Ends {
    pub server: Security,
    pub client: Security,
}

impl Ends {
    pub fn new(encryption: Encryption) -> Result<Self> {
        Ok(match encryption {
            Encryption::None => Ends {
                server: Security::Plaintext,
                client: Security::Plaintext,
            },
            Encryption::Tls13 => {
                // The key is generated into a directory that lives only as long as this
                // call: the identity is held in memory from then on.
                let dir = tempfile::tempdir().context("a directory for the run's server key")?;
                let identity = ServerIdentity::load_or_generate(dir.path()).context("generating a server key")?;
                let pin = fbdt_net::secure::parse_fingerprint(&identity.fingerprint()).map_err(|e| anyhow!(e))?;
                let server = TlsServer::new(identity, None).context("TLS server configuration")?;
                let client = TlsClient::new(Trust::Pins(vec![pin]), None).context("TLS client configuration")?;
                Ends {
                    server: Security::Server(Arc::new(server)),
                    client: Security::Client(Arc::new(client)),
                }
            }
        })
    }
}

/// Listens on `listen_on`, tells `addr_tx` where, and takes the first session within
/// [`ACCEPT_LIMIT`]. Runs in the server namespace. The listener comes back with the session
/// and must live as long as it: dropping it also refuses the session's later JOINs (a slow
/// path's first connection, every re-join after a stall).
pub async fn accept_one(
    listen_on: &[std::net::SocketAddr],
    net: NetConfig,
    addr_tx: std::sync::mpsc::Sender<Vec<std::net::SocketAddr>>,
) -> Result<(fbdt_net::Listener, fbdt_net::Session)> {
    let mut listener = fbdt_net::listen(listen_on, net).await?;
    let _ = addr_tx.send(listener.local_addrs().to_vec());
    let session = tokio::time::timeout(ACCEPT_LIMIT, listener.accept())
        .await
        .map_err(|_| anyhow!("no session arrived within {ACCEPT_LIMIT:?}"))?
        .ok_or_else(|| anyhow!("the listener ended before a session arrived"))?;
    Ok((listener, session))
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building a tokio runtime")
}

/// The server (in the server namespace) sends for `secs` seconds over a session with one
/// TCP connection per emulated path; the client (client namespace, path i bound to path i's
/// client address) reads and samples. `progress(t)` is called on every sample.
pub fn download(
    tb: &Testbed,
    net: NetConfig,
    ends: Ends,
    secs: f64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<SessionTransfer> {
    let net = NetConfig {
        delay_marks: true,
        security: ends.client,
        ..net
    };
    let origin = Instant::now();
    let listen_on: Vec<std::net::SocketAddr> = tb
        .paths()
        .iter()
        .map(|p| std::net::SocketAddr::from((p.server_ip, 0)))
        .collect();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server_net = NetConfig {
        security: ends.server,
        ..net.clone()
    };
    let send_for = Duration::from_secs_f64(secs);
    let server = tb.spawn_in(Side::Server, move || -> Result<(SessionStats, DelayMarks)> {
        runtime()?.block_on(async move {
            let (_listener, session) = accept_one(&listen_on, server_net, addr_tx).await?;
            let stats = session.stats_handle();
            let mut session = session;
            // One buffer handed over by reference, as an application holding `Bytes` would:
            // the kernel copies from it, nothing else does (issue 37).
            let chunk = bytes::Bytes::from(vec![0x5au8; CHUNK]);
            let started = Instant::now();
            while started.elapsed() < send_for {
                // A write blocks while every path is stalled; the deadline still holds.
                let left = send_for.saturating_sub(started.elapsed());
                match tokio::time::timeout(left, session.write_chunk(chunk.clone())).await {
                    Ok(r) => r.context("sending")?,
                    Err(_) => break,
                }
            }
            // The receiver stops reading DRAIN_LIMIT after the sending time; waiting longer
            // for acknowledgements would only hold the testbed.
            let _ = tokio::time::timeout(DRAIN_LIMIT, session.shutdown()).await;
            let mut rest = [0u8; 64];
            let _ = tokio::time::timeout(Duration::from_millis(200), session.read(&mut rest)).await;
            drop(session);
            // The driver adds its last marks when the session ends; give it a moment.
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok((stats.stats(), stats.take_delay_marks()))
        })
    })?;
    let addrs = match addr_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(a) => a,
        // The server thread dropped its end: it ended, with an error.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            let why = match server.join() {
                Ok(Ok(Err(e))) => e,
                Ok(Err(e)) => anyhow!("entering the server namespace: {e}"),
                Err(_) => anyhow!("the FBDT server thread panicked"),
                Ok(Ok(Ok(_))) => anyhow!("the FBDT server ended before listening"),
            };
            return Err(why.context("starting the FBDT server"));
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => bail!("the FBDT server did not start listening within 10 s"),
    };
    let specs = client_paths(tb, &addrs);
    let client = tb.run_in(
        Side::Client,
        || -> Result<(Transfer, SessionStats, DelayMarks, Instant)> {
            runtime()?.block_on(receive(specs, net, secs, progress))
        },
    )?;
    let server = server
        .join()
        .map_err(|_| anyhow!("the FBDT server thread panicked"))?
        .map_err(|e| anyhow!("entering the server namespace: {e}"))?;
    let (transfer, client, delivered, end) = client.context("FBDT client")?;
    let (server, sent) = server.context("FBDT server")?;
    Ok(SessionTransfer {
        transfer,
        server,
        client,
        delay: join_marks(&sent, &delivered, origin, end),
    })
}

/// The client's paths: path i from path i's client address to the server's address `addrs[i]`.
pub fn client_paths(tb: &Testbed, addrs: &[std::net::SocketAddr]) -> Vec<PathSpec> {
    tb.paths()
        .iter()
        .zip(addrs)
        .map(|(p, &remote)| PathSpec {
            local: Some(LocalBind::Addr(p.client_ip.into())),
            remote,
        })
        .collect()
}

async fn receive(
    specs: Vec<PathSpec>,
    net: NetConfig,
    secs: f64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<(Transfer, SessionStats, DelayMarks, Instant)> {
    let mut session = fbdt_net::connect(specs, net).await.context("connecting")?;
    let stats = session.stats_handle();
    let mut series = vec![(0.0, 0u64)];
    // The session hands over its received slices: no second copy of every byte (issue 37).
    let total = fbdt_net::sample::read_sampled_from(
        &mut session,
        SAMPLE,
        Some(Duration::from_secs_f64(secs) + DRAIN_LIMIT),
        |t, b| {
            series.push((t, b));
            progress(t);
        },
    )
    .await
    .context("receiving")?;
    let ended = Instant::now();
    let (bytes, secs_total) = (total.bytes, total.secs);
    series.push((secs_total, bytes));
    let _ = tokio::time::timeout(Duration::from_millis(500), session.shutdown()).await;
    // At the duration exactly (fbdt_emu::perf::bytes_by): the samples fall a little after
    // their marks, so the last one before the end may be just past it.
    let in_time = fbdt_emu::perf::bytes_by(&series, secs);
    if bytes == 0 {
        bail!(
            "no data arrived ({})",
            stats.error().unwrap_or_else(|| "no session error".into())
        );
    }
    let transfer = Transfer {
        bytes,
        secs: secs_total,
        goodput_mbps: in_time as f64 * 8.0 / secs / 1e6,
        series,
    };
    drop(session);
    // The driver adds its last marks when the session ends; give it a moment.
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok((transfer, stats.stats(), stats.take_delay_marks(), ended))
}
