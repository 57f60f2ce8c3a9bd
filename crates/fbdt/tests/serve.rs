//! `fbdt serve --forward` on loopback: sessions reach a TCP echo service through the
//! tunnel's server side, bytes come back unchanged, the server goes on serving; a forward
//! address without a port is refused with a clear message.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

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

/// Starts `fbdt serve` on two ephemeral loopback ports; returns it and the two addresses.
fn start_serve(forward: &str) -> (Server, Vec<String>) {
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
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
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
    (Server(child), addrs)
}

/// One session over two paths: writes `n` random bytes, reads the echo, compares.
async fn echo_through(addrs: &[String], n: usize, seed: u64) {
    let paths = vec![
        format!("127.0.0.2={}", addrs[0]).parse().unwrap(),
        format!("127.0.0.3={}", addrs[1]).parse().unwrap(),
    ];
    let session = fbdt_net::connect(paths, fbdt_net::NetConfig::default()).await.unwrap();
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
    let (_server, addrs) = start_serve(&format!("127.0.0.1:{port}"));
    // Two sessions at once, then one more: the server keeps serving.
    let a = echo_through(&addrs, 8 << 20, 1);
    let b = echo_through(&addrs, 1 << 20, 2);
    tokio::join!(a, b);
    echo_through(&addrs, 100_000, 3).await;
}

#[test]
fn a_forward_address_without_a_port_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["serve", "--listen", "127.0.0.1:0", "--forward", "localhost"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected HOST:PORT"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
