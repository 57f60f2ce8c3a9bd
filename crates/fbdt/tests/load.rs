//! `fbdt load` against a `fbdt perf --server` on loopback (bounded: 20 sessions, 1 s):
//! every session is held and completes, the server's RSS is read, fairness is reported; and
//! a `perf --zero-copy` download from the same kind of server.

mod common;

use std::process::Command;

/// A plaintext `fbdt perf --server` on an ephemeral loopback port, and its FBDT address.
fn perf_server() -> (common::Proc, String) {
    let (server, fbdt, _) = common::perf_server(&[], &["--max-sessions", "32"]);
    (server, fbdt.to_string())
}

#[test]
fn load_holds_every_session_and_reports_json() {
    let (server, addr) = perf_server();
    let pid = server.id().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args([
            "load",
            "--plaintext",
            "--server",
            &addr,
            "--server-pid",
            &pid,
            "--sessions",
            "20",
            "--paths",
            "2",
            "--time",
            "1",
            "--bulk",
            "4",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["sessions_held"], 20, "{doc}");
    assert_eq!(doc["sessions_completed"], 20, "{doc}");
    assert!(doc["rss_per_session_bytes"].is_u64(), "{doc}");
    let j = doc["jain_fairness"].as_f64().expect("fairness over the bulk sessions");
    assert!(j > 0.0 && j <= 1.0 + 1e-9);
}

/// `perf --zero-copy`: the server hands its session one shared buffer again and again; the
/// client gets exactly the bytes asked for, over both paths.
#[test]
fn zero_copy_download_delivers_every_byte_once() {
    let (_server, addr) = perf_server();
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["perf", "--plaintext", "--zero-copy", "--bytes", "64M", "--json"])
        .args([
            "--path",
            &format!("127.0.0.2={addr}"),
            "--path",
            &format!("127.0.0.3={addr}"),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &doc["results"][0];
    assert_eq!(r["bytes_delivered"], 64u64 << 20, "{doc}");
    let per_path = r["per_path_bytes"].as_object().unwrap();
    assert_eq!(per_path.len(), 2, "{doc}");
    let refused = Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(["perf", "--zero-copy", "--transport", "tcp", "--path", &addr])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--zero-copy is for FBDT"));
}
