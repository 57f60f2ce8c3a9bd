//! `fbdt serve --forward` on loopback: sessions reach a TCP echo service through the
//! tunnel's server side, bytes come back unchanged, the server goes on serving; a forward
//! address without a port is refused with a clear message; with `--client-ca` only clients
//! with a certificate from that CA get through, and the log names them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The token the test's server requires and its clients prove.
const TOKEN: &str = "serve-test-token";

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP echo service; returns its port.
async fn echo_service() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    port
}

/// Starts `fbdt serve` (TLS, its key generated in `key_dir`, clients need the token) on two
/// ephemeral loopback ports; returns it, the two addresses and the key's fingerprint.
fn start_serve(forward: &str, key_dir: &std::path::Path) -> (Server, Vec<String>, String) {
    let (server, addrs, pin, _log) = start_serve_with(forward, key_dir, &["--token", TOKEN]);
    (server, addrs, pin)
}

/// As [`start_serve`], with `auth` as the access options; also returns the rest of its log.
fn start_serve_with(
    forward: &str,
    key_dir: &std::path::Path,
    auth: &[&str],
) -> (Server, Vec<String>, String, BufReader<std::process::ChildStderr>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--forward",
            forward,
        ])
        .arg("--key-dir")
        .arg(key_dir)
        .args(auth)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    // Killed however this ends, a failed parse below included.
    let server = Server(child);
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let pin = line
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("no fingerprint in {line:?}"))
        .to_string();
    line.clear();
    err.read_line(&mut line).unwrap();
    let rest = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    let addrs: Vec<String> = rest
        .split(" forwarding")
        .next()
        .unwrap()
        .split(' ')
        .map(String::from)
        .collect();
    assert_eq!(addrs.len(), 2, "{line}");
    (server, addrs, pin, err)
}

fn key_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fbdt-serve-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A client pinning `pin`, proving `token` and showing `cert` when given.
fn client_cfg(pin: &str, token: Option<&str>, cert: Option<fbdt_net::ClientCert>) -> fbdt_net::NetConfig {
    let pin = fbdt_net::secure::parse_fingerprint(pin).unwrap();
    let trust = fbdt_net::Trust::Pins(vec![pin]);
    let token = token.map(|t| t.as_bytes().to_vec());
    fbdt_net::NetConfig {
        security: fbdt_net::Security::Client(std::sync::Arc::new(
            fbdt_net::TlsClient::with_cert(trust, token, cert).unwrap(),
        )),
        ..fbdt_net::NetConfig::default()
    }
}

fn two_paths(addrs: &[String]) -> Vec<fbdt_net::PathSpec> {
    vec![
        format!("127.0.0.2={}", addrs[0]).parse().unwrap(),
        format!("127.0.0.3={}", addrs[1]).parse().unwrap(),
    ]
}

/// One session over two paths: writes `n` random bytes, reads the echo, compares.
async fn echo_through(addrs: &[String], pin: &str, n: usize, seed: u64) {
    echo_with(addrs, client_cfg(pin, Some(TOKEN), None), n, seed).await
}

async fn echo_with(addrs: &[String], cfg: fbdt_net::NetConfig, n: usize, seed: u64) {
    echo_over(two_paths(addrs), cfg, n, seed).await
}

/// How long an echo may take before the test calls it hung: minutes beyond what a few MiB
/// need on loopback, so only a session that stopped moving reaches it.
const HANG: std::time::Duration = std::time::Duration::from_secs(120);

async fn echo_over(paths: Vec<fbdt_net::PathSpec>, cfg: fbdt_net::NetConfig, n: usize, seed: u64) {
    let session = fbdt_net::connect(paths, cfg).await.unwrap();
    let stats = session.stats_handle();
    if tokio::time::timeout(HANG, echo_session(session, n, seed))
        .await
        .is_err()
    {
        panic!(
            "echo of {n} bytes hung for {HANG:?}: error {:?}, {:#?}",
            stats.error(),
            stats.stats()
        );
    }
}

async fn echo_session(session: fbdt_net::Session, n: usize, seed: u64) {
    let (mut r, mut w) = tokio::io::split(session);
    let mut rng = rand_chacha_like(seed);
    let data: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
    let sent = Sha256::digest(&data);
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut back = Vec::with_capacity(n);
    r.read_to_end(&mut back).await.unwrap();
    writer.await.unwrap();
    assert_eq!(back.len(), n);
    assert_eq!(Sha256::digest(&back), sent, "the echo differs from what was sent");
}

fn rand_chacha_like(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_spliced_to_the_forward_service() {
    let port = echo_service().await;
    let dir = key_dir("splice");
    let (server, addrs, pin) = start_serve(&format!("127.0.0.1:{port}"), &dir);
    // Two sessions at once, then one more: the server keeps serving.
    let a = echo_through(&addrs, &pin, 8 << 20, 1);
    let b = echo_through(&addrs, &pin, 1 << 20, 2);
    tokio::join!(a, b);
    echo_through(&addrs, &pin, 100_000, 3).await;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TCP relay to `target` whose first connection is cut (both sides closed) once
/// `cut_after` bytes crossed it either way; later connections are relayed whole. Returns
/// its address and how many connections it took.
async fn cutting_relay(target: String, cut_after: u64) -> (String, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let taken = Arc::new(AtomicUsize::new(0));
    let count = taken.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = l.accept().await {
            let limit = if count.fetch_add(1, Ordering::SeqCst) == 0 {
                cut_after
            } else {
                u64::MAX
            };
            let target = target.clone();
            tokio::spawn(async move {
                let Ok(outbound) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                let crossed = Arc::new(AtomicU64::new(0));
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                // Either direction ending, or the cut, ends both.
                tokio::select! {
                    () = relay_one_way(ri, wo, crossed.clone(), limit) => {}
                    () = relay_one_way(ro, wi, crossed, limit) => {}
                }
            });
        }
    });
    (addr, taken)
}

async fn relay_one_way(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    crossed: Arc<AtomicU64>,
    limit: u64,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        if crossed.fetch_add(n as u64, Ordering::SeqCst) + n as u64 >= limit {
            return;
        }
    }
}

/// `fbdt serve` with its stderr closed (the reader gone, as under a supervisor that went
/// away) loses one of a session's connections mid-transfer: the server logs the loss — a
/// write that fails — and keeps the session; the client dials the path again and the echo
/// comes back whole. (A failed log write once panicked the session's task: the server
/// dropped the session and the client waited on re-JOINs it refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_outlives_a_lost_connection_while_the_servers_stderr_is_closed() {
    let port = echo_service().await;
    let dir = key_dir("stderr");
    // start_serve drops the reader of the server's stderr once it has read the address.
    let (server, addrs, pin) = start_serve(&format!("127.0.0.1:{port}"), &dir);
    let (relay, taken) = cutting_relay(addrs[1].clone(), 256 * 1024).await;
    let paths = vec![
        format!("127.0.0.2={}", addrs[0]).parse().unwrap(),
        format!("127.0.0.3={relay}").parse().unwrap(),
    ];
    echo_over(paths, client_cfg(&pin, Some(TOKEN), None), 8 << 20, 4).await;
    assert!(
        taken.load(Ordering::SeqCst) >= 2,
        "the path through the relay was not dialled again after its cut"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_forward_address_without_a_port_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--forward",
            "localhost",
            "--plaintext",
            "--allow-anyone",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected HOST:PORT"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn serve_without_a_token_needs_allow_anyone() {
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--forward",
            "127.0.0.1:9",
            "--plaintext",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--token") && err.contains("--client-ca") && err.contains("--allow-anyone"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// A CA (rcgen) in `dir` as `ca.pem`, and a client certificate it issued
/// (`client-cert.pem`, `client-key.pem`); returns the client certificate's fingerprint.
fn make_ca_and_client(dir: &std::path::Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, "serve test CA");
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = p.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let mut p = rcgen::CertificateParams::new(vec!["alice.fbdt.test".to_string()]).unwrap();
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join("client-cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("client-key.pem"), key.serialize_pem()).unwrap();
    fbdt_net::ClientCert::from_pem_files(&dir.join("client-cert.pem"), &dir.join("client-key.pem"))
        .unwrap()
        .fingerprint()
}

/// `serve --forward --client-ca` without a token: a client with a certificate from the CA
/// reaches the service, bytes intact, and the log line names its address, that it was
/// admitted by certificate, and the certificate's fingerprint; a client without one is
/// refused with an error saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_client_ca_forwards_only_certified_clients_and_logs_them() {
    let port = echo_service().await;
    let dir = key_dir("clientca");
    let fp = make_ca_and_client(&dir.join("pki"));
    let ca = dir.join("pki/ca.pem");
    let (server, addrs, pin, log) = start_serve_with(
        &format!("127.0.0.1:{port}"),
        &dir,
        &["--client-ca", ca.to_str().unwrap()],
    );
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = lines.clone();
    std::thread::spawn(move || {
        for l in log.lines().map_while(Result::ok) {
            seen.lock().unwrap().push(l);
        }
    });

    let refused = match fbdt_net::connect(two_paths(&addrs), client_cfg(&pin, None, None)).await {
        Ok(_) => panic!("a client without a certificate was served"),
        Err(e) => e.to_string(),
    };
    assert!(refused.contains("requires a client certificate"), "{refused}");

    let cert = fbdt_net::ClientCert::from_pem_files(&dir.join("pki/client-cert.pem"), &dir.join("pki/client-key.pem"))
        .unwrap();
    echo_with(&addrs, client_cfg(&pin, None, Some(cert)), 1 << 20, 7).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let logged = loop {
        let found = lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("from 127.0.0.2:"))
            .cloned();
        match found {
            Some(l) => break l,
            None if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(20)),
            None => panic!("no session line in the log: {:?}", lines.lock().unwrap()),
        }
    };
    assert!(
        logged.contains("(client certificate ") && logged.contains(&fp),
        "{logged}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
