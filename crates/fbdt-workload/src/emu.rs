//! The testbed backend of every workload: the same applications as the simulator's driver
//! (driver.rs), over real stacks in the emulated namespaces. The client writes each request
//! (an object's size, 8 bytes little-endian) into its direction of one persistent stream
//! when the application asks; the server appends that many bytes of a known pattern to the
//! other direction in request order; the client checks every byte and notes when each
//! object's last byte arrived. One stream per run, as in the simulator: a kernel TCP or
//! MPTCP socket, or an fbdt-net session (FBDT or the `mp:*` meta layer).
//!
//! Time zero is when the client's stream is connected (the scenario started playing just
//! before the connection was opened).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use fbdt_emu::perf::Proto;
use fbdt_emu::{Side, Testbed, TestbedSpec};
use fbdt_net::{LocalBind, NetConfig, PathSpec};
use fbdt_scenario::Scenario;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::driver::{Application, Drive, Drove, ObjectRecord, Objects};
use fbdt_harness::emu::session::ACCEPT_LIMIT;
use fbdt_harness::emu::transport::{kernel_connect, kernel_listener, Transport};
use fbdt_harness::emu::Emu;

/// Largest object one request may ask for (the file workload's largest size).
const MAX_OBJECT_BYTES: u64 = 100_000_000_000;
/// The server's writes and the client's reads.
const CHUNK: usize = 64 * 1024;
/// The pattern's period: byte `o` of the response stream is `o % PERIOD`. A prime, so no
/// object size or chunk boundary lines up with it.
const PERIOD: usize = 251;

impl Drive for Emu {
    fn drive(&self, scenario: &Scenario, name: &str, seed: u64, app: &mut dyn Application) -> Result<Drove> {
        let (sc, _, spec) = self.prepare(scenario, seed)?;
        drive(&sc, &spec, &self.testbed, name, sc.duration_s, app)
    }
}

/// One run of `app` for `scheme_name` on a fresh testbed built from `spec`, until the
/// application is finished and every object arrived, or `max_s` seconds.
fn drive(
    scenario: &Scenario,
    spec: &TestbedSpec,
    testbed: &fbdt_emu::TestbedOptions,
    scheme_name: &str,
    max_s: f64,
    app: &mut dyn Application,
) -> Result<Drove> {
    let transport = fbdt_harness::emu::transport::transport(scheme_name, scenario)?;
    let mut tb = Testbed::start(spec, testbed).context("starting the testbed")?;
    tb.play()?;
    let records = match transport {
        Transport::Kernel(proto, path) => over_kernel_socket(&tb, proto, path, max_s, app),
        Transport::Session(mut core, encryption) => {
            fbdt_harness::scheme::buffer_parity(scheme_name, &mut core, testbed.tcp_buffer_max);
            let net = NetConfig {
                core: *core,
                ..NetConfig::default()
            };
            let ends = fbdt_harness::emu::session::Ends::new(encryption)?;
            over_session(&tb, net, ends, max_s, app)
        }
        Transport::CotagLink(_) => Err(anyhow!(
            "{scheme_name}: workloads over the COTAG link are not supported (it carries one \
             download; run it with `fbdt-lab run`)"
        )),
    };
    let fidelity = tb.fidelity();
    tb.stop();
    Ok(Drove {
        records: records?,
        fidelity: Some(fidelity),
    })
}

fn over_kernel_socket(
    tb: &Testbed,
    proto: Proto,
    path: usize,
    max_s: f64,
    app: &mut dyn Application,
) -> Result<Vec<ObjectRecord>> {
    let p = &tb.paths()[path];
    let (server_ip, client_ip) = (p.server_ip, p.client_ip);
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server = tb.spawn_in(Side::Server, move || -> Result<()> {
        fbdt_harness::emu::session::runtime()?.block_on(async move {
            let listener = kernel_listener(server_ip, proto)?;
            let _ = addr_tx.send(listener.local_addr()?);
            let (stream, _) = tokio::time::timeout(ACCEPT_LIMIT, listener.accept())
                .await
                .map_err(|_| anyhow!("no connection arrived within {ACCEPT_LIMIT:?}"))??;
            serve(stream).await
        })
    })?;
    let addr = addr_rx.recv_timeout(Duration::from_secs(10));
    let client = match addr {
        Ok(addr) => tb.run_in(Side::Client, || -> Result<Vec<ObjectRecord>> {
            fbdt_harness::emu::session::runtime()?.block_on(async {
                let stream = kernel_connect(client_ip, addr, proto)?;
                run_client(stream, app, max_s).await
            })
        })?,
        Err(_) => Err(anyhow!("the workload server did not start listening")),
    };
    finish(client, server)
}

fn over_session(
    tb: &Testbed,
    net: NetConfig,
    ends: fbdt_harness::emu::session::Ends,
    max_s: f64,
    app: &mut dyn Application,
) -> Result<Vec<ObjectRecord>> {
    let listen_on: Vec<SocketAddr> = tb.paths().iter().map(|p| SocketAddr::from((p.server_ip, 0))).collect();
    let server_net = NetConfig {
        security: ends.server.clone(),
        ..net.clone()
    };
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server = tb.spawn_in(Side::Server, move || -> Result<()> {
        fbdt_harness::emu::session::runtime()?.block_on(async move {
            let (_listener, session) = fbdt_harness::emu::session::accept_one(&listen_on, server_net, addr_tx).await?;
            serve(session).await
        })
    })?;
    let client = match addr_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(addrs) => {
            let specs: Vec<PathSpec> = tb
                .paths()
                .iter()
                .zip(addrs)
                .map(|(p, remote)| PathSpec {
                    local: Some(LocalBind::Addr(p.client_ip.into())),
                    remote,
                })
                .collect();
            let client_net = NetConfig {
                security: ends.client.clone(),
                ..net
            };
            tb.run_in(Side::Client, || -> Result<Vec<ObjectRecord>> {
                fbdt_harness::emu::session::runtime()?.block_on(async {
                    let session = fbdt_net::connect(specs, client_net).await.context("connecting")?;
                    run_client(session, app, max_s).await
                })
            })?
        }
        Err(_) => Err(anyhow!("the workload server did not start listening")),
    };
    finish(client, server)
}

/// The client's result decides; the server's error explains a client that failed.
fn finish(
    client: Result<Vec<ObjectRecord>>,
    server: std::thread::JoinHandle<fbdt_emu::Result<Result<()>>>,
) -> Result<Vec<ObjectRecord>> {
    let server = match server.join() {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(anyhow!("entering the server namespace: {e}")),
        Err(_) => Err(anyhow!("the workload server thread panicked")),
    };
    match (client, server) {
        (Ok(records), _) => Ok(records),
        (Err(c), Ok(())) => Err(c),
        (Err(c), Err(s)) => Err(c.context(format!("the server: {s:#}"))),
    }
}

/// Bytes `PERIOD` apart are equal: any stream offset's next `CHUNK` bytes are one slice.
fn pattern() -> Vec<u8> {
    (0..PERIOD + CHUNK).map(|i| (i % PERIOD) as u8).collect()
}

/// Reads 8-byte requests and answers each with that many pattern bytes, in order, until
/// the client closes its direction. A bad request (too large, too many) closes the stream.
async fn serve<S: AsyncRead + AsyncWrite>(stream: S) -> Result<()> {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let pattern = pattern();
    let mut queued: VecDeque<u64> = VecDeque::new();
    let (mut partial, mut have) = ([0u8; 8], 0usize);
    let mut offset = 0u64;
    let mut requests = 0usize;
    let mut buf = [0u8; 4096];
    loop {
        let start = (offset % PERIOD as u64) as usize;
        let len = queued.front().map_or(0, |&left| left.min(CHUNK as u64) as usize);
        tokio::select! {
            // Requests first: a waiting request must not sit behind a long write.
            biased;
            n = rd.read(&mut buf) => {
                let n = n.context("reading requests")?;
                if n == 0 {
                    return Ok(());
                }
                for &b in &buf[..n] {
                    partial[have] = b;
                    have += 1;
                    if have == 8 {
                        have = 0;
                        let bytes = u64::from_le_bytes(partial);
                        requests += 1;
                        if bytes > MAX_OBJECT_BYTES || requests > super::driver::MAX_OBJECTS {
                            bail!("bad request: object {requests} of {bytes} bytes");
                        }
                        if bytes > 0 {
                            queued.push_back(bytes);
                        }
                    }
                }
            }
            w = wr.write(&pattern[start..start + len]), if len > 0 => {
                let w = match w {
                    Ok(w) => w,
                    // The client has what it wanted and closed the stream.
                    Err(e) if matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    ) => return Ok(()),
                    Err(e) => return Err(anyhow!(e).context("writing responses")),
                };
                offset += w as u64;
                let front = queued.front_mut().expect("a write only with an object queued");
                *front -= w as u64;
                if *front == 0 {
                    queued.pop_front();
                }
            }
        }
    }
}

/// Seconds since `origin` as the driver's time.
fn secs(origin: Instant) -> f64 {
    origin.elapsed().as_secs_f64()
}

/// The application's side: sends requests when due, reads and checks the responses, notes
/// completions and deadlines, and asks the application for more at every completion and
/// wake-up.
async fn run_client<S: AsyncRead + AsyncWrite>(
    stream: S,
    app: &mut dyn Application,
    max_s: f64,
) -> Result<Vec<ObjectRecord>> {
    let (mut rd, mut wr) = tokio::io::split(stream);
    let origin = Instant::now();
    let mut objects = Objects::default();
    objects.add(app.requests(0.0, &[]), 0.0, 0.0)?;
    let (mut sent, mut completed, mut delivered) = (0usize, 0usize, 0u64);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let now_s = secs(origin);
        while sent < objects.records.len() && objects.records[sent].t_request_s <= now_s {
            wr.write_all(&objects.records[sent].bytes.to_le_bytes())
                .await
                .context("sending a request")?;
            sent += 1;
        }
        objects.note_deadlines(|d| d <= now_s, delivered);
        let woken = app.wake_at().is_some_and(|w| w <= now_s);
        if woken {
            let more = app.requests(now_s, &objects.records);
            objects.add(more, now_s, 0.0)?;
            continue;
        }
        if completed == objects.records.len() && app.finished() {
            break;
        }
        if now_s >= max_s {
            break;
        }
        let next = [
            objects.records.get(sent).map(|r| r.t_request_s),
            objects.deadlines.first().map(|&(d, _)| d),
            app.wake_at(),
            Some(max_s),
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min)
        .unwrap_or(max_s);
        let wait = Duration::from_secs_f64((next - now_s).max(0.0));
        tokio::select! {
            n = rd.read(&mut buf) => {
                let n = n.context("reading responses")?;
                if n == 0 {
                    bail!("the server closed the stream with {} of {} objects complete", completed, objects.records.len());
                }
                check_pattern(&buf[..n], delivered)?;
                delivered += n as u64;
                let now_s = secs(origin);
                objects.note_deadlines(|d| d <= now_s, delivered);
                let before = completed;
                while objects.ends.get(completed).is_some_and(|&e| e <= delivered) {
                    objects.records[completed].t_complete_s = Some(now_s);
                    completed += 1;
                }
                if delivered > objects.ends.last().copied().unwrap_or(0) {
                    bail!("the server sent more than was asked for");
                }
                if completed > before {
                    let more = app.requests(now_s, &objects.records);
                    objects.add(more, now_s, 0.0)?;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
    let _ = tokio::time::timeout(Duration::from_millis(500), wr.shutdown()).await;
    Ok(objects.records)
}

/// Every response byte at stream offset `o` is `o % PERIOD`.
fn check_pattern(got: &[u8], offset: u64) -> Result<()> {
    let start = (offset % PERIOD as u64) as usize;
    for (i, &b) in got.iter().enumerate() {
        if b != ((start + i) % PERIOD) as u8 {
            bail!("corrupt response byte at stream offset {}", offset + i as u64);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asks for the given requests at the start, then nothing.
    struct Fixed(Vec<super::super::driver::Request>, bool);

    impl Application for Fixed {
        fn requests(&mut self, _now_s: f64, _timeline: &[ObjectRecord]) -> Vec<super::super::driver::Request> {
            self.1 = true;
            std::mem::take(&mut self.0)
        }
        fn finished(&self) -> bool {
            self.1
        }
    }

    fn req(bytes: u64, at_s: f64, deadline_s: Option<f64>) -> super::super::driver::Request {
        super::super::driver::Request {
            bytes,
            at_s,
            deadline_s,
        }
    }

    /// Client and server over an in-memory duplex pipe: requests go out when due, the
    /// responses arrive in order with every byte checked, and deadlines see partial objects.
    #[test]
    fn client_and_server_over_a_pipe() {
        let rt = fbdt_harness::emu::session::runtime().unwrap();
        let records = rt.block_on(async {
            let (c, s) = tokio::io::duplex(16 * 1024);
            let server = tokio::spawn(serve(s));
            let mut app = Fixed(
                vec![req(300_000, 0.0, None), req(0, 0.0, None), req(1_000, 0.2, Some(5.0))],
                false,
            );
            let r = run_client(c, &mut app, 10.0).await.unwrap();
            server.await.unwrap().unwrap();
            r
        });
        assert_eq!(records.len(), 3);
        let done: Vec<f64> = records.iter().map(|r| r.t_complete_s.unwrap()).collect();
        assert!(done[2] >= 0.2, "{done:?}");
        assert!(done[0] <= done[1] && done[1] <= done[2], "{done:?}");
        assert_eq!(records[2].bytes_by_deadline, None, "the deadline had not passed");
    }

    #[test]
    fn a_corrupt_byte_is_caught() {
        let p = pattern();
        assert!(check_pattern(&p[7..1000], 7).is_ok());
        assert!(check_pattern(&p[7..1000], 8).is_err());
        let mut bad = p[..600].to_vec();
        bad[300] ^= 1;
        assert!(check_pattern(&bad, 0).is_err());
    }

    #[test]
    fn a_bad_request_closes_the_stream() {
        let rt = fbdt_harness::emu::session::runtime().unwrap();
        let err = rt.block_on(async {
            let (mut c, s) = tokio::io::duplex(1024);
            let server = tokio::spawn(serve(s));
            c.write_all(&(MAX_OBJECT_BYTES + 1).to_le_bytes()).await.unwrap();
            server.await.unwrap().unwrap_err()
        });
        assert!(err.to_string().contains("bad request"), "{err}");
    }
}
