//! Issue 14, finding 10: ordinary mistakes end with one clear line naming the file or
//! value, a non-zero exit, no stack trace (even with RUST_BACKTRACE set), before anything
//! waits on the network.

use std::process::{Command, Output};

fn fbdt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fbdt"))
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap()
}

/// The command failed with exactly one line on stderr that contains `what`.
fn fails_naming(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status {:?}, stderr {err}", out.status);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(lines[0].contains(what), "{:?} does not name {what:?}", lines[0]);
    assert!(!err.contains("stack backtrace") && !err.contains("Caused by"), "{err}");
}

#[test]
fn recv_into_a_missing_directory_fails_at_start() {
    let out = fbdt(&[
        "recv",
        "--listen",
        "127.0.0.1:0",
        "--output",
        "/nonexistent-dir/x/out.bin",
        "--allow-anyone",
    ]);
    fails_naming(&out, "/nonexistent-dir/x/out.bin");
    // The OS error appears once.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn recv_without_a_token_needs_allow_anyone() {
    let out = fbdt(&["recv", "--listen", "127.0.0.1:0", "--output", "/tmp/never-written"]);
    fails_naming(&out, "--allow-anyone");
    assert!(!std::path::Path::new("/tmp/never-written").exists());
}

#[test]
fn sending_a_directory_fails_before_connecting() {
    let dir = std::env::temp_dir();
    let d = dir.to_str().unwrap();
    // Nothing listens on the port: reaching the network would fail differently.
    let out = fbdt(&["send", d, "--path", "127.0.0.1:9"]);
    fails_naming(&out, "is a directory");
}

#[test]
fn perf_times_that_are_not_positive_are_refused() {
    for t in ["-3", "nan", "0", "inf"] {
        let out = fbdt(&["perf", "--path", "127.0.0.1:9", &format!("--time={t}")]);
        fails_naming(&out, "--time");
    }
}

#[test]
fn a_forward_port_of_zero_is_refused() {
    let out = fbdt(&["serve", "--listen", "127.0.0.1:0", "--forward", "127.0.0.1:0"]);
    fails_naming(&out, "127.0.0.1:0");
}

#[test]
fn missing_client_certificate_files_are_named() {
    let tmp = std::env::temp_dir().join(format!("fbdt-cli-clientcert-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let file = tmp.join("payload");
    std::fs::write(&file, b"x").unwrap();
    let pin = format!("sha256:{}", "0".repeat(64));
    let out = fbdt(&[
        "send",
        file.to_str().unwrap(),
        "--path",
        "127.0.0.1:9",
        "--pin",
        &pin,
        "--client-cert",
        "/nonexistent-dir/client.pem",
        "--client-key",
        "/nonexistent-dir/client-key.pem",
    ]);
    fails_naming(&out, "/nonexistent-dir/client.pem");
    let out = fbdt(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--forward",
        "127.0.0.1:9",
        "--key-dir",
        tmp.join("keys").to_str().unwrap(),
        "--client-ca",
        "/nonexistent-dir/ca.pem",
    ]);
    fails_naming(&out, "/nonexistent-dir/ca.pem");
    let _ = std::fs::remove_dir_all(&tmp);
}
