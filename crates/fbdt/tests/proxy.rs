//! `fbdt proxy` → `fbdt serve` on loopback (TLS, token, two paths), with real clients:
//! curl through SOCKS5 (names resolved at the server) and as an HTTP proxy (absolute URI
//! and CONNECT), content checked by SHA-256; refusals answered in each protocol; 200
//! concurrent connections; a stalled reader beside busy ones; `fbdt status --json`; a pool
//! of two sessions.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{pin_of, random, Proc, TempDir, TOKEN};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

struct Rig {
    serve: Proc,
    proxy: Proc,
    proxy_addr: String,
    control: String,
    origin: u16,
    _dir: TempDir,
}

/// An HTTP origin: `GET /N/SEED` answers N pseudo-random bytes made from SEED.
async fn origin() -> u16 {
    serve_origin(TcpListener::bind("127.0.0.1:0").await.unwrap())
}

/// The origin's service on `l`; its port.
fn serve_origin(l: TcpListener) -> u16 {
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let Some(head) = read_head(&mut s).await else {
                    return;
                };
                let text = String::from_utf8_lossy(&head).into_owned();
                let path = text.split(' ').nth(1).unwrap_or("/").to_string();
                let mut parts = path.trim_start_matches('/').split('/');
                let n: usize = parts.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                let seed: u64 = parts.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                let body = random(n, seed);
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\nConnection: close\r\n\r\n");
                if s.write_all(head.as_bytes()).await.is_ok() && s.write_all(&body).await.is_ok() {
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    port
}

/// Reads a request head up to its blank line and returns its first 8 KiB (the request line
/// is all the origin uses). An endless head (the probing test's upload) costs neither memory
/// nor time: only the bytes just read and the three before them can complete the blank line.
async fn read_head(s: &mut TcpStream) -> Option<Vec<u8>> {
    const KEPT: usize = 8 * 1024;
    let mut kept = Vec::new();
    let mut recent = Vec::new();
    let mut b = vec![0u8; 64 * 1024];
    loop {
        let n = match s.read(&mut b).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => n,
        };
        let room = KEPT - kept.len();
        kept.extend_from_slice(&b[..n.min(room)]);
        recent.drain(..recent.len().saturating_sub(3));
        recent.extend_from_slice(&b[..n]);
        if recent.windows(4).any(|w| w == b"\r\n\r\n") {
            return Some(kept);
        }
    }
}

async fn rig(tag: &str) -> Rig {
    rig_with(tag, &[]).await
}

/// A rig whose proxy gets `extra` options too.
async fn rig_with(tag: &str, extra: &[&str]) -> Rig {
    let dir = TempDir::new(&format!("proxy-{tag}"));
    let keys = dir.path("keys");
    let serve = Proc::start(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--key-dir",
            &keys,
            "--token",
            TOKEN,
            "--allow",
            "127.0.0.1",
        ],
        |l| l.starts_with("listening on"),
    );
    let line = serve
        .lines()
        .into_iter()
        .find(|l| l.starts_with("listening on"))
        .unwrap();
    let addrs: Vec<String> = line["listening on ".len()..]
        .split(" dialling")
        .next()
        .unwrap()
        .split(' ')
        .map(String::from)
        .collect();
    assert_eq!(addrs.len(), 2, "{line}");
    let pin = pin_of(&serve);
    let control = dir.path("control.sock");
    let (p0, p1) = (format!("127.0.0.2={}", addrs[0]), format!("127.0.0.3={}", addrs[1]));
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--path",
        &p0,
        "--path",
        &p1,
        "--pin",
        &pin,
        "--token",
        TOKEN,
        "--control",
        &control,
    ];
    args.extend_from_slice(extra);
    let proxy = Proc::start(&args, |l| l.starts_with("proxy listening on"));
    let line = proxy
        .lines()
        .into_iter()
        .find(|l| l.starts_with("proxy listening on"))
        .unwrap();
    let proxy_addr = line.split_whitespace().nth(3).unwrap().to_string();
    Rig {
        serve,
        proxy,
        proxy_addr,
        control,
        origin: origin().await,
        _dir: dir,
    }
}

/// Runs curl with `args`; returns its exit code and stdout.
async fn curl(args: Vec<String>) -> (i32, Vec<u8>) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new("curl")
            .args(["-s", "--max-time", "60"])
            .args(&args)
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), out.stdout)
    })
    .await
    .unwrap()
}

fn have_curl() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

/// A SOCKS5 CONNECT to `host:port` by name (as socks5h does); the reply code and the
/// connection.
async fn socks_connect(proxy: &str, host: &str, port: u16) -> (u8, TcpStream) {
    socks_handshake(TcpStream::connect(proxy).await.unwrap(), host, port).await
}

/// The SOCKS5 exchange of [`socks_connect`] on a connection to the proxy.
async fn socks_handshake(mut s: TcpStream, host: &str, port: u16) -> (u8, TcpStream) {
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0]);
    let mut req = vec![5, 1, 0, 3, host.len() as u8];
    req.extend_from_slice(host.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    (reply[1], s)
}

/// GET /N/SEED over an established tunnel; checks the body.
async fn get_through(mut s: TcpStream, n: usize, seed: u64) {
    s.write_all(format!("GET /{n}/{seed} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).await.unwrap();
    let at = all.windows(4).position(|w| w == b"\r\n\r\n").expect("no response head") + 4;
    assert!(
        all[at..] == random(n, seed)[..],
        "body of /{n}/{seed} differs ({} bytes)",
        all.len() - at
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_fetches_intact_content_through_socks5h_and_the_http_proxy() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let r = rig("curl").await;
    let n = 3_000_000;
    let want = Sha256::digest(random(n, 7));
    // localhost is resolved at the server (socks5h), where only 127.0.0.1 is allowed.
    let url = format!("http://localhost:{}/{n}/7", r.origin);
    let forms = [
        vec!["--socks5-hostname".to_string(), r.proxy_addr.clone(), url.clone()],
        vec!["-x".into(), format!("http://{}", r.proxy_addr), url.clone()],
        vec![
            "-p".into(),
            "-x".into(),
            format!("http://{}", r.proxy_addr),
            url.clone(),
        ],
    ];
    for args in forms {
        let (code, body) = curl(args.clone()).await;
        assert_eq!(code, 0, "curl {args:?}");
        assert_eq!(Sha256::digest(&body), want, "curl {args:?}: content differs");
    }
    assert!(r.serve.said("connected to localhost:"), "{:?}", r.serve.lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_get_each_protocols_reply_and_the_session_goes_on() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed");
        return;
    }
    let r = rig("refusals").await;
    // Outside the allow-list: SOCKS 0x02, HTTP 403.
    let (code, _) = socks_connect(&r.proxy_addr, "127.0.0.9", r.origin).await;
    assert_eq!(code, 0x02);
    let (_, body) = curl(vec![
        "-w".into(),
        "%{http_code}".into(),
        "-x".into(),
        format!("http://{}", r.proxy_addr),
        format!("http://10.255.255.1:{}/1/1", r.origin),
    ])
    .await;
    assert!(body.ends_with(b"403"), "{}", String::from_utf8_lossy(&body));
    // Allowed but nothing listens: SOCKS 0x05, HTTP 502.
    let (code, _) = socks_connect(&r.proxy_addr, "127.0.0.1", 1).await;
    assert_eq!(code, 0x05);
    let (_, body) = curl(vec![
        "-w".into(),
        "%{http_code}".into(),
        "-x".into(),
        format!("http://{}", r.proxy_addr),
        "http://127.0.0.1:1/".into(),
    ])
    .await;
    assert!(body.ends_with(b"502"), "{}", String::from_utf8_lossy(&body));
    // Malformed: a SOCKS request with a bad address type, an HTTP request in origin form,
    // bytes that are neither.
    let mut s = TcpStream::connect(&r.proxy_addr).await.unwrap();
    s.write_all(&[5, 1, 0, 5, 1, 0, 9, 0, 0]).await.unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await.unwrap();
    assert_eq!(reply[..4], [5, 0, 5, 0x08], "address type not supported");
    let mut s = TcpStream::connect(&r.proxy_addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await.unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 400 "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let mut s = TcpStream::connect(&r.proxy_addr).await.unwrap();
    s.write_all(&[0x16, 3, 1, 0, 0]).await.unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply).await;
    assert!(reply.is_empty());
    // The session is untouched: a fetch still works.
    let (code, body) = curl(vec![
        "--socks5-hostname".into(),
        r.proxy_addr.clone(),
        format!("http://127.0.0.1:{}/100000/3", r.origin),
    ])
    .await;
    assert_eq!(code, 0);
    assert!(body == random(100_000, 3));
    // Each refusal left a line in a log.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for needle in [
        "outside the allow-list",
        "Connection refused",
        "address type 9",
        "HTTP 400",
        "neither SOCKS5 nor HTTP",
    ] {
        assert!(
            r.proxy.said(needle) || r.serve.said(needle),
            "no log line with {needle:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_replies_carry_intact_content_and_a_refusal_resets_the_connection() {
    let r = rig_with("early", &["--early-reply"]).await;
    let (code, s) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    get_through(s, 3_000_000, 21).await;
    if have_curl() {
        // HTTP CONNECT answered at once, the tunnelled request right behind it.
        let args = vec![
            "-p".to_string(),
            "-x".into(),
            format!("http://{}", r.proxy_addr),
            format!("http://127.0.0.1:{}/1000000/23", r.origin),
        ];
        let (code, body) = curl(args).await;
        assert_eq!(code, 0);
        assert!(
            body == random(1_000_000, 23),
            "CONNECT with --early-reply: content differs"
        );
    }
    // Told "connected" at once; the server then cannot connect (nothing listens on port
    // 1): the client's request was sent, and its connection is reset, not answered.
    let (code, mut s) = socks_connect(&r.proxy_addr, "127.0.0.1", 1).await;
    assert_eq!(code, 0, "--early-reply answers before the server does");
    let wrote = s.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").await;
    let mut rest = Vec::new();
    let got = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest))
        .await
        .expect("the refused connection hung");
    // The RST is reported once: to the write if it came first, else to the read.
    let reset = |e: Option<&std::io::Error>| {
        e.is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            )
        })
    };
    assert!(
        reset(wrote.as_ref().err()) || reset(got.as_ref().err()),
        "no reset: write {wrote:?}, read {got:?}"
    );
    assert!(rest.is_empty(), "read {} bytes", rest.len());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(r.proxy.said("Connection refused"), "no log line for the refusal");
    // The session goes on.
    let (code, s) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    get_through(s, 100_000, 22).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_connections_carry_intact_content() {
    let r = rig("concurrent").await;
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let (proxy, origin) = (r.proxy_addr.clone(), r.origin);
        tasks.push(tokio::spawn(async move {
            let (code, s) = socks_connect(&proxy, "127.0.0.1", origin).await;
            assert_eq!(code, 0, "connection {i}");
            get_through(s, 50_000 + i as usize * 997, i).await;
        }));
    }
    for t in tasks {
        let done = tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("a connection hung");
        // (Failed once in a CI run with a reset before the SOCKS method reply, not since:
        // the proxy's and the server's own account of it is what to look at.)
        if let Err(e) = done {
            panic!(
                "{e}\nproxy said:\n{}\nserver said:\n{}",
                r.proxy.lines().join("\n"),
                r.serve.lines().join("\n")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_does_not_block_the_other_connections() {
    let r = rig("stalled").await;
    // Asks for 200 MB and never reads past the reply.
    let (code, mut stalled) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    stalled
        .write_all(b"GET /200000000/1 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 1];
    stalled.read_exact(&mut first).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..20u64 {
        let (proxy, origin) = (r.proxy_addr.clone(), r.origin);
        tasks.push(tokio::spawn(async move {
            let (code, s) = socks_connect(&proxy, "127.0.0.1", origin).await;
            assert_eq!(code, 0);
            get_through(s, 2_000_000, 100 + i).await;
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("a connection hung")
            .unwrap();
    }
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_every_path_and_the_open_streams() {
    let r = rig("status").await;
    let (code, s) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    get_through(s, 5_000_000, 9).await;
    let (code, held) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&r.control).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "control socket mode {mode:o}");
    // The status is sampled once a second.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["status", "--json", "--control", &r.control])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["connected"], true);
    assert_eq!(v["streams_open"], 1, "{v}");
    assert!(v["bytes_received"].as_u64().unwrap() >= 5_000_000, "{v}");
    let paths = v["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2);
    for p in paths {
        assert_eq!(p["state"], "up", "{p}");
        for k in [
            "send_rate_bps",
            "receive_rate_bps",
            "srtt_ms",
            "bytes_sent",
            "bytes_received",
            "reconnects",
        ] {
            assert!(p.get(k).is_some(), "{k} missing in {p}");
        }
    }
    let text = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["status", "--control", &r.control])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("streams open: 1"));
    drop(held);
}

/// Each session's open streams, as `fbdt status --json` lists them.
fn streams_per_session(control: &str) -> Vec<u64> {
    let v = status_json(control);
    v["each_session"]
        .as_array()
        .unwrap_or_else(|| panic!("no each_session in {v}"))
        .iter()
        .map(|s| s["streams_open"].as_u64().unwrap())
        .collect()
}

async fn until_streams(control: &str, want: &[u64]) {
    for _ in 0..100 {
        if streams_per_session(control) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("streams per session {:?}, want {want:?}", streams_per_session(control));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_sessions_a_new_connection_avoids_the_busy_one() {
    let r = rig_with("pool", &["--sessions", "2"]).await;
    assert_eq!(status_json(&r.control)["sessions"], 2);
    // From idle, connections spread by their count: one on each session.
    let (code, first) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    let (code, idle) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    until_streams(&r.control, &[1, 1]).await;
    drop(first);
    until_streams(&r.control, &[0, 1]).await;

    // A download read at a steady ≈ 64 MB/s opens on the session without a stream...
    let (code, mut bulk) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    bulk.write_all(b"GET /200000000/5 HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let reader = tokio::spawn(async move {
        let mut b = vec![0u8; 64 * 1024];
        while let Ok(n) = bulk.read(&mut b).await {
            if n == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    until_streams(&r.control, &[1, 1]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // ...and with one stream on each, the next connection goes by bytes moved, not by
    // count or order: to the idle stream's session. Its content is intact.
    let (code, small) = socks_connect(&r.proxy_addr, "127.0.0.1", r.origin).await;
    assert_eq!(code, 0);
    assert_eq!(streams_per_session(&r.control), [1, 2]);
    get_through(small, 1_000_000, 3).await;
    // (Counters are refreshed every 10 ms by each session's driver.)
    let mut v = status_json(&r.control);
    for _ in 0..40 {
        if v["each_session"][1]["bytes_received"].as_u64().unwrap() >= 1_000_000 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        v = status_json(&r.control);
    }
    assert!(v["each_session"][1]["bytes_received"].as_u64().unwrap() >= 1_000_000, "{v}");
    assert!(!reader.is_finished(), "the download ended before the check: it proves nothing");
    reader.abort();
    drop(idle);
}

#[test]
fn a_config_file_sets_the_options_and_its_errors_name_file_and_line() {
    let dir = TempDir::new("config");
    let bad = dir.path("bad.toml");
    std::fs::write(
        &bad,
        "listen = [\"127.0.0.1:0\"]\nallow = [\"10.0.0.0/33\"]\nallow_anyone = true\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["serve", "--config", &bad, "--plaintext"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("{bad}:2:")) && err.contains("10.0.0.0/33"),
        "{err}"
    );
    let good = dir.path("good.toml");
    let keys = dir.path("keys");
    std::fs::write(
        &good,
        format!(
            "listen = [\"127.0.0.1:0\"]\nallow = [\"127.0.0.1\", \"public\"]\nkey_dir = \"{keys}\"\ntoken = \"config-file-token\"\n"
        ),
    )
    .unwrap();
    let serve = Proc::start(&["serve", "--config", &good], |l| l.starts_with("listening on"));
    assert!(serve.said("allowed: 127.0.0.1/32, public"), "{:?}", serve.lines());
}

/// Two network namespaces for `--auto-paths` (ppf-c…: the proxy's, ppf-s…: the server's),
/// deleted (with their interfaces) when dropped.
struct Netns {
    client: String,
    server: String,
}

impl Netns {
    fn ip(args: &str) -> bool {
        Command::new("ip")
            .args(args.split_whitespace())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// A veth pair `cN` (client) – `sN` (server) on 10.77.N.0/24 with a route from the
    /// client to the server's 10.77.9.1 through it (metric N).
    fn link(&self, n: u8) {
        let (c, s) = (&self.client, &self.server);
        for cmd in [
            format!("link add c{n} netns {c} type veth peer name s{n} netns {s}"),
            format!("-n {c} addr add 10.77.{n}.2/24 dev c{n}"),
            format!("-n {s} addr add 10.77.{n}.1/24 dev s{n}"),
            format!("-n {c} link set c{n} up"),
            format!("-n {s} link set s{n} up"),
            format!("-n {c} route add 10.77.9.1/32 via 10.77.{n}.1 dev c{n} metric {n}"),
        ] {
            assert!(Netns::ip(&cmd), "ip {cmd}");
        }
    }

    /// Runs `f` on a thread inside namespace `ns` (sockets it makes stay in `ns`).
    fn within<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{ns}");
        std::thread::spawn(move || {
            use std::os::fd::AsRawFd as _;
            let fd = std::fs::File::open(&path).unwrap();
            // SAFETY: setns on this thread only, with a namespace file descriptor we hold.
            assert_eq!(
                unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) },
                0,
                "setns {path}"
            );
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        Netns::ip(&format!("netns del {}", self.client));
        Netns::ip(&format!("netns del {}", self.server));
    }
}

/// Waits up to 10 s for `p` to log `needle`.
async fn wait_said(p: &Proc, needle: &str) {
    for _ in 0..100 {
        if p.said(needle) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {needle:?} in {:?}", p.lines());
}

impl Netns {
    /// Two fresh namespaces (ppf-c…, ppf-s…) with loopback up and the server's address
    /// 10.77.9.1; `None` without root or `ip netns`.
    fn create(tag: &str) -> Option<Netns> {
        let id = std::process::id();
        let ns = Netns {
            client: format!("ppf-c{tag}{id}"),
            server: format!("ppf-s{tag}{id}"),
        };
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 || !Netns::ip(&format!("netns add {}", ns.client)) {
            return None;
        }
        assert!(Netns::ip(&format!("netns add {}", ns.server)));
        for (n, cmd) in [
            (&ns.client, "link set lo up"),
            (&ns.server, "link set lo up"),
            (&ns.server, "addr add 10.77.9.1/32 dev lo"),
        ] {
            assert!(Netns::ip(&format!("-n {n} {cmd}")), "{cmd}");
        }
        Some(ns)
    }

    /// `fbdt serve` on 10.77.9.1:5400 and the origin on 10.77.9.1:8000, in the server
    /// namespace; the server's process, its key's pin, the origin's port.
    fn serve(&self, dir: &TempDir) -> (Proc, String, u16) {
        let keys = dir.path("keys");
        let serve = Proc::start_in(
            &self.server,
            &[
                "serve",
                "--listen",
                "10.77.9.1:5400",
                "--key-dir",
                &keys,
                "--token",
                TOKEN,
                "--allow",
                "10.77.9.1",
            ],
            |l| l.starts_with("listening on"),
        );
        let pin = pin_of(&serve);
        let l = Netns::within(&self.server, || std::net::TcpListener::bind("10.77.9.1:8000").unwrap());
        l.set_nonblocking(true).unwrap();
        (serve, pin, serve_origin(TcpListener::from_std(l).unwrap()))
    }

    /// `fbdt proxy` on 127.0.0.1:1080 in the client namespace, with `paths` (its path
    /// options).
    fn proxy(&self, pin: &str, control: &str, paths: &[&str]) -> Proc {
        let mut args = vec![
            "proxy",
            "--listen",
            "127.0.0.1:1080",
            "--pin",
            pin,
            "--token",
            TOKEN,
            "--control",
            control,
        ];
        args.extend_from_slice(paths);
        Proc::start_in(&self.client, &args, |l| l.starts_with("proxy listening on"))
    }

    /// A SOCKS connection to the origin through the proxy on 127.0.0.1:1080 of the client
    /// namespace (connected from a thread inside it).
    async fn socks(&self, origin: u16) -> TcpStream {
        let s = Netns::within(&self.client, || std::net::TcpStream::connect("127.0.0.1:1080").unwrap());
        s.set_nonblocking(true).unwrap();
        let (code, s) = socks_handshake(TcpStream::from_std(s).unwrap(), "10.77.9.1", origin).await;
        assert_eq!(code, 0);
        s
    }
}

/// `fbdt status --json` of the proxy on `control`.
fn status_json(control: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["status", "--json", "--control", control])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_paths_follow_the_interfaces_that_reach_the_server() {
    let Some(ns) = Netns::create("a") else {
        eprintln!("skipped: needs root and ip netns");
        return;
    };
    // An interface with an address but no route to the server: never a path.
    for cmd in [
        "link add d0 type veth peer name d1",
        "addr add 10.77.50.2/24 dev d0",
        "link set d1 up",
        "link set d0 up",
    ] {
        assert!(Netns::ip(&format!("-n {} {cmd}", ns.client)), "{cmd}");
    }
    ns.link(1);
    ns.link(2);
    let dir = TempDir::new("autopaths");
    let (serve, pin, origin) = ns.serve(&dir);
    let control = dir.path("control.sock");
    // c1 and c2 reach the server but c2 is excluded; d0 has no route to the server.
    let proxy = ns.proxy(&pin, &control, &["--auto-paths", "10.77.9.1:5400", "--exclude", "c2"]);
    assert!(proxy.said("auto paths: c1"), "{:?}", proxy.lines());
    // Woken by the kernel's link/address/route messages, not by a timer.
    wait_said(&proxy, "changes (netlink)").await;
    let fetch = |seed: u64| {
        let s = ns.socks(origin);
        async move { get_through(s.await, 2_000_000, seed).await }
    };
    fetch(1).await;
    // A new interface that reaches the server joins; a held connection stays intact.
    let held = ns.socks(origin).await;
    ns.link(3);
    wait_said(&proxy, "auto paths: interfaces now c1, c3").await;
    fetch(2).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let paths = status_json(&control)["paths"].as_array().unwrap().len();
    assert_eq!(paths, 2, "c1 and c3");
    // The connection opened on the old session still works.
    get_through(held, 1_000_000, 3).await;
    // An interface that goes away leaves.
    assert!(Netns::ip(&format!("-n {} link del c1", ns.client)));
    wait_said(&proxy, "auto paths: interfaces now c3").await;
    fetch(4).await;
    drop(proxy);
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_path_whose_link_went_silent_as_probing() {
    let Some(ns) = Netns::create("p") else {
        eprintln!("skipped: needs root and ip netns");
        return;
    };
    ns.link(1);
    ns.link(2);
    let dir = TempDir::new("probing");
    let (serve, pin, origin) = ns.serve(&dir);
    let control = dir.path("control.sock");
    let proxy = ns.proxy(
        &pin,
        &control,
        &["--path", "%c1=10.77.9.1:5400", "--path", "%c2=10.77.9.1:5400"],
    );
    // An upload the origin keeps reading (a request head that never ends), so the client
    // always has data on both paths.
    let mut up = ns.socks(origin).await;
    let writer = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 * 1024];
        while up.write_all(&chunk).await.is_ok() {}
    });
    // A path with nothing outstanding cannot be seen to stall: cut path 0 only once the
    // status shows it carrying the upload.
    let sent_on_0 = |v: &serde_json::Value| v["paths"][0]["bytes_sent"].as_u64().unwrap_or(0);
    let mut before = sent_on_0(&status_json(&control));
    let mut carrying = false;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = sent_on_0(&status_json(&control));
        if before > 0 && now > before {
            carrying = true;
            break;
        }
        before = now;
    }
    assert!(carrying, "path 0 never carried the upload: {}", status_json(&control));
    // Path 0's link goes silent (its far end down: no RST, no ACK): the runtime probes it
    // with fresh connections while the old one still stands. Not for long: path 1 carries
    // the upload meanwhile, and once path 0's oldest copy is 512 MiB behind, the core
    // declares it failed (under a second at loopback rates), so look often.
    assert!(Netns::ip(&format!("-n {} link set s1 down", ns.server)));
    let mut states = Vec::new();
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let v = status_json(&control);
        states.push(v["paths"][0]["state"].as_str().unwrap_or("?").to_string());
        if states.last().is_some_and(|s| s == "probing") {
            break;
        }
    }
    assert_eq!(
        states.last().map(String::as_str),
        Some("probing"),
        "states seen: {states:?}; proxy said {:?}",
        proxy.lines()
    );
    writer.abort();
    drop(proxy);
    drop(serve);
}
