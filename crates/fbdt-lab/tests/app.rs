//! `fbdt-lab app` as a user runs it (root): curl through `fbdt proxy` and `fbdt serve` over
//! two emulated radios, then over each radio alone; the file arrives intact every time, the
//! proxied download uses both radios; headless Chromium and ffmpeg through the proxy get
//! what was served; no namespace is left behind.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Process ids of the `fbdt-lab app` runs: their testbeds' namespaces are `fbdt-<pid>-…`,
/// the only ones this test may judge (other testbeds may run beside it).
static RUNS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn fbdt_next_to_lab() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fbdt-lab")).with_file_name("fbdt")
}

/// `fbdt-lab app los --app APP` at a small scale; must succeed; its JSON.
fn run_app(app: &str, fbdt: &std::path::Path, dir: &std::path::Path) -> serde_json::Value {
    let json = dir.join(format!("{app}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
        .args([
            "app",
            "los",
            "--app",
            app,
            "--seconds",
            "1",
            "--scale",
            "0.05",
            "--fbdt",
        ])
        .arg(fbdt)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    RUNS.lock().unwrap().push(out.id());
    let out = out.wait_with_output().unwrap();
    assert!(out.status.success(), "{app}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn curl_through_the_proxy_over_two_radios_gets_the_file_intact() {
    if let Some(why) = fbdt_emu::skip_reason() {
        eprintln!("SKIP: the emulated testbed needs root: {why}");
        return;
    }
    let fbdt = fbdt_next_to_lab();
    for (program, what) in [("curl", "curl"), ("python3", "python3")] {
        if Command::new(program).arg("--version").output().is_err() {
            eprintln!("SKIP: {what} is not installed");
            return;
        }
    }
    assert!(
        fbdt.is_file(),
        "{} missing: `cargo test --workspace` builds it (or cargo build -p fbdt)",
        fbdt.display()
    );
    let dir = tempfile::tempdir().unwrap();
    for app in ["curl-socks", "curl-http"] {
        let v = run_app(app, &fbdt, dir.path());
        assert_eq!(v["encryption"], "tls13");
        let size = v["file_bytes"].as_u64().unwrap();
        assert!(size >= 1 << 20);
        let proxy = &v["proxy"];
        assert_eq!(proxy["sha256_ok"], true, "{app}");
        assert_eq!(proxy["bytes"].as_u64().unwrap(), size);
        for radio in ["wifi", "wigig"] {
            assert!(
                proxy["per_path_bytes"][radio].as_u64().unwrap() > 64 * 1024,
                "{app}: the proxied download used {radio}: {}",
                proxy["per_path_bytes"]
            );
        }
        let direct = v["direct"].as_array().unwrap();
        assert_eq!(direct.len(), 2);
        for d in direct {
            assert_eq!(d["sha256_ok"], true);
            assert_eq!(d["bytes"].as_u64().unwrap(), size);
            let own = d["per_path_bytes"][d["path"].as_str().unwrap()].as_u64().unwrap();
            assert!(own >= size, "{}: the file came over its own radio", d["path"]);
        }
        // The baseline the proxy is held to: fbdt perf, as many bytes, the same radios.
        let perf = &v["perf"];
        assert_eq!(perf["bytes"].as_u64().unwrap(), size, "{app}");
        for radio in ["wifi", "wigig"] {
            assert!(
                perf["per_path_bytes"][radio].as_u64().unwrap() > 64 * 1024,
                "{app}: fbdt perf used {radio}: {}",
                perf["per_path_bytes"]
            );
        }
        assert!(v["proxy_over_perf"].as_f64().unwrap() > 0.0);
    }
    // A browser and a player, each checked against what was served, both radios carrying
    // their traffic (a direct connection would take one).
    for (app, program) in [("chromium", "chromium"), ("ffmpeg", "ffmpeg")] {
        if Command::new(program).arg("--version").output().is_err() {
            eprintln!("SKIP {app}: {program} is not installed");
            continue;
        }
        let v = run_app(app, &fbdt, dir.path());
        let c = &v["client"];
        assert_eq!(c["program"], app);
        assert_eq!(c["content_ok"], true, "{app}: {}", c["detail"]);
        for radio in ["wifi", "wigig"] {
            assert!(
                c["per_path_bytes"][radio].as_u64().unwrap() > 16 * 1024,
                "{app} went through the proxy on {radio}: {}",
                c["per_path_bytes"]
            );
        }
    }
    // An application with no proxy setting, redirected into the proxy by its nft rule.
    if Command::new("nft").arg("--version").output().is_ok() {
        let v = run_app("transparent", &fbdt, dir.path());
        let d = &v["proxy"];
        assert_eq!(d["sha256_ok"], true);
        assert_eq!(d["bytes"], v["file_bytes"]);
        for radio in ["wifi", "wigig"] {
            assert!(
                d["per_path_bytes"][radio].as_u64().unwrap() > 64 * 1024,
                "{}",
                d["per_path_bytes"]
            );
        }
    } else {
        eprintln!("SKIP transparent: nft is not installed");
    }
    // 100 small requests through the proxy and over each radio alone, every body intact.
    let v = run_app("small", &fbdt, dir.path());
    let routes: Vec<&str> = v["small"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert_eq!(routes, ["proxy", "wifi", "wigig"]);
    for r in v["small"].as_array().unwrap() {
        assert_eq!(
            (r["requests"].as_u64(), &r["content_ok"]),
            (Some(100), &serde_json::json!(true)),
            "{r}"
        );
    }
    assert!(v["small_proxy_over_best_direct"].as_f64().unwrap() > 0.0);
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&ns.stdout);
    let ours: Vec<String> = RUNS.lock().unwrap().iter().map(|pid| format!("fbdt-{pid}-")).collect();
    assert!(
        !left.lines().any(|l| ours.iter().any(|o| l.starts_with(o))),
        "namespaces left: {left}"
    );
}
