//! `fbdt serve --forward` on loopback: sessions reach a TCP echo service through the
//! tunnel's server side, bytes come back unchanged, the server goes on serving; a forward
//! address without a port is refused with a clear message.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

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

/// Starts `fbdt serve` (TLS, its key generated in `key_dir`) on two ephemeral loopback
/// ports; returns it, the two addresses and the key's fingerprint.
fn start_serve(forward: &str, key_dir: &std::path::Path) -> (Server, Vec<String>, String) {
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
        .args(["--token", TOKEN])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
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
    (Server(child), addrs, pin)
}

fn key_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fbdt-serve-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// One session over two paths: writes `n` random bytes, reads the echo, compares.
async fn echo_through(addrs: &[String], pin: &str, n: usize, seed: u64) {
    let paths = vec![
        format!("127.0.0.2={}", addrs[0]).parse().unwrap(),
        format!("127.0.0.3={}", addrs[1]).parse().unwrap(),
    ];
    let pin = fbdt_net::secure::parse_fingerprint(pin).unwrap();
    let trust = fbdt_net::Trust::Pins(vec![pin]);
    let cfg = fbdt_net::NetConfig {
        security: fbdt_net::Security::Client(std::sync::Arc::new(
            fbdt_net::TlsClient::new(trust, Some(TOKEN.as_bytes().to_vec())).unwrap(),
        )),
        ..fbdt_net::NetConfig::default()
    };
    let session = fbdt_net::connect(paths, cfg).await.unwrap();
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
    assert!(err.contains("--token") && err.contains("--allow-anyone"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}
