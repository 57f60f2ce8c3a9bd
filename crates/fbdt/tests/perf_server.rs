//! Issue 42: `fbdt perf --server`'s kernel-TCP port has a connection cap and a handshake
//! deadline. A server limited to 1024 file descriptors (as a default `ulimit -n` is) takes
//! 2,000 idle connections on its TCP port and its FBDT listener still serves a client.

mod common;

use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

#[test]
fn idle_connections_on_the_tcp_port_leave_the_fbdt_listener_serving() {
    let (_server, fbdt, tcp) = common::perf_server(&["prlimit", "--nofile=1024:1024"], &[]);
    let mut idle = Vec::new();
    for _ in 0..2000 {
        if let Ok(s) = TcpStream::connect_timeout(&tcp, Duration::from_secs(2)) {
            idle.push(s);
        }
    }
    assert!(idle.len() >= 1000, "only {} connections were made", idle.len());
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["perf", "--plaintext", "--time", "0.5", "--json", "--path"])
        .arg(fbdt.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["results"][0]["bytes_delivered"].as_u64().unwrap_or(0) > 0, "{doc}");
    drop(idle);
}

/// The server's resident memory, in MiB.
fn rss_mib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// Issue 42's "stuck downloads" attack as a measurement: 64 sessions (4 source addresses)
/// ask a plaintext perf server for an hour-long download and never read. Prints the
/// server's RSS every 2 s for 40 s: it climbs while the buffers fill, then falls back
/// once `send_stall_timeout` (20 s) closed the sessions.
/// `cargo test -p fbdt --test perf_server -- --ignored --nocapture`.
#[test]
#[ignore]
fn stuck_downloads_release_their_memory() {
    let (server, addr, _) = common::perf_server(&[], &[]);
    let pid = server.id();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let idle = rss_mib(pid);
    let _sessions = rt.block_on(async {
        let mut v = Vec::new();
        for i in 0..64 {
            let spec: fbdt_net::PathSpec = format!("127.0.0.{}={addr}", 2 + i % 4).parse().unwrap();
            let mut s = fbdt_net::connect(vec![spec], fbdt_net::NetConfig::default())
                .await
                .unwrap();
            // A perf request: magic, version 1, download, no byte count, 3,600,000 ms.
            let mut req = [0u8; 24];
            req[..4].copy_from_slice(b"FBPF");
            req[4] = 1;
            req[16..24].copy_from_slice(&3_600_000u64.to_be_bytes());
            tokio::io::AsyncWriteExt::write_all(&mut s, &req).await.unwrap();
            v.push(s);
        }
        v
    });
    let mut line = format!("server RSS (MiB): idle {idle}");
    for t in (2..=40).step_by(2) {
        std::thread::sleep(Duration::from_secs(2));
        line += &format!(", {t} s: {}", rss_mib(pid));
    }
    eprintln!("{line}");
}
