//! The lab as a user runs it: exit codes, messages, and the stable JSON fields.

use std::process::Command;

fn lab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
}

#[test]
fn run_writes_the_stable_json_fields() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("x.json");
    let out = lab()
        .args([
            "run",
            "mobility",
            "--backend",
            "sim",
            "--schemes",
            "fbdt,tcp:wifi,tcp:wigig",
            "--duration",
            "2",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("fbdt") && stdout.contains("tcp:wigig"), "{stdout}");

    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["scenario"], "mobility");
    assert_eq!(v["backend"], "sim");
    assert_eq!(v["duration_s"], 2.0);
    // The simulator's paths have no congestion control, whatever the scenario names.
    assert_eq!(v["congestion_control"], "none (ideal pipe)");
    assert_eq!(v["scenario_def"]["congestion_control"], "cubic");
    for k in ["seed", "scale", "capacity_mbps"] {
        assert!(v[k].is_number(), "{k}");
    }
    let results = v["results"].as_array().unwrap();
    let names: Vec<&str> = results.iter().map(|r| r["scheme"].as_str().unwrap()).collect();
    assert_eq!(names, ["fbdt", "tcp:wifi", "tcp:wigig"]);
    for r in results {
        for k in [
            "goodput_mbps",
            "goodput_p10_mbps",
            "goodput_p50_mbps",
            "goodput_p90_mbps",
            "bytes_delivered",
            "redundant_bytes",
        ] {
            assert!(r[k].is_number(), "{k} in {r}");
        }
        assert!(r["per_path_bytes"]["wifi"].is_u64() && r["per_path_bytes"]["wigig"].is_u64());
        let series = r["series"].as_array().unwrap();
        assert_eq!(series.len(), 20, "100 ms samples over 2 s");
        assert!(series[0]["t"].is_number() && series[0]["mbps"].is_number());
    }
    // Physical limit: nobody beats the capacity.
    let cap = v["capacity_mbps"].as_f64().unwrap();
    for r in results {
        assert!(r["goodput_mbps"].as_f64().unwrap() <= cap * 1.0001);
    }
    // Bytes delivered agree with the goodput over the run.
    let fbdt = &results[0];
    let from_bytes = fbdt["bytes_delivered"].as_f64().unwrap() * 8.0 / 2.0 / 1e6;
    assert!((from_bytes - fbdt["goodput_mbps"].as_f64().unwrap()).abs() < 1e-6);
}

/// The pipe's time grain is explicit: named in the run header and the JSON, refused under
/// the TCP model; every byte still arrives checked (the run fails otherwise).
#[test]
fn a_time_grain_is_named_in_the_header_and_the_json() {
    let dir = tempfile::tempdir().unwrap();
    let run = |grain: &str, json: &std::path::Path| {
        lab()
            .args(["run", "los", "--schemes", "fbdt", "--duration", "1", "--grain", grain])
            .arg("--json")
            .arg(json)
            .output()
            .unwrap()
    };
    let (exact, grained) = (dir.path().join("g0.json"), dir.path().join("g250.json"));
    let out0 = run("0", &exact);
    let out = run("250", &grained);
    assert!(
        out0.status.success() && out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let header = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    };
    assert!(header(&out).contains("grain 250 µs"), "{}", header(&out));
    assert!(!header(&out0).contains("grain"), "{}", header(&out0));
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (v0, v) = (read(&exact), read(&grained));
    assert_eq!(v0["meta"]["sim"]["grain_us"], 0.0);
    assert_eq!(v["meta"]["sim"]["grain_us"], 250.0);
    let bytes = |v: &serde_json::Value| v["results"][0]["bytes_delivered"].as_u64().unwrap();
    assert!(bytes(&v) > 0 && bytes(&v0) > 0);

    let refused = lab()
        .args(["run", "los", "--model", "tcp", "--duration", "1", "--grain", "250"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--grain"));
}

#[test]
fn bad_input_gets_a_clear_message_and_a_failing_exit() {
    let cases: &[(&[&str], &str)] = &[
        (&["run", "no-such-scenario"], "no-such-scenario"),
        (&["run", "los", "--schemes", "tcp:lte"], "no path `lte`"),
        (&["run", "los", "--schemes", "fbdt+window=1"], "window"),
        (&["run", "los", "--duration=-1"], "--duration"),
        (&["run", "los", "--repeat", "0"], "--repeat"),
        (&["run", "/nonexistent/x.toml"], "x.toml"),
    ];
    for (args, needle) in cases {
        let out = lab().args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_scenario_file_with_an_error_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.toml");
    std::fs::write(
        &f,
        "duration_s = 5\n\n[[path]]\nname = \"wifi\"\ndelay_ms = 1.0\nrate = { model = \"constant\", mbps = -3 }\n",
    )
    .unwrap();
    let out = lab().arg("run").arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.toml:6"), "{err}");
}

#[test]
fn scenarios_lists_the_builtins() {
    let out = lab().arg("scenarios").output().unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for name in [
        "los",
        "nlos",
        "mobility",
        "blockage",
        "tc-normal",
        "tc-loss-wigig",
        "tc-delay-wigig",
        "rats4",
    ] {
        assert!(s.contains(name), "{name} missing from:\n{s}");
    }
}

#[test]
fn an_emulated_run_measures_every_kind_of_scheme() {
    if let Some(why) = fbdt_emu::skip_reason() {
        eprintln!("SKIP: the emulated testbed needs root: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("emu.json");
    let out = lab()
        .args([
            "run",
            "los",
            "--backend",
            "emu",
            "--schemes",
            "tcp:wifi,mptcp,fbdt,mp:minrtt,fbdt+tls",
            "--duration",
            "3",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["backend"], "emu");
    let scale = v["scale"].as_f64().unwrap();
    assert!(scale > 0.0 && scale <= 1.0);
    let cap = v["capacity_mbps"].as_f64().unwrap();
    for r in v["results"].as_array().unwrap() {
        let g = r["goodput_mbps"].as_f64().unwrap();
        assert!(g > 0.0 && g <= cap * 1.01, "{}: {g} vs capacity {cap}", r["scheme"]);
    }
    // Kernel MPTCP, FBDT and the userspace meta layer used both paths; TCP only its own.
    let results = v["results"].as_array().unwrap();
    for r in &results[1..] {
        let used = |p: &str| r["per_path_bytes"][p].as_u64().unwrap();
        assert!(
            used("wifi") > 100_000 && used("wigig") > 100_000,
            "{}: {}",
            r["scheme"],
            r["per_path_bytes"]
        );
    }
    assert!(results[0]["per_path_bytes"]["wigig"].as_u64().unwrap() < 100_000);
    // The session-based schemes report their protocol counters.
    assert!(results[2]["counters"]["windows_loaded"].as_u64().unwrap() > 0);
    assert!(results[2]["counters"]["acks_sent"].as_u64().unwrap() > 0);
    assert!(results[3]["reinjected_bytes"].is_u64());
    // Two paths of different delays: the meta layer's shared buffer held something, and never
    // more than the kernel sockets' ceiling it was given (64 MiB).
    let held = results[3]["recv_buffer_max_bytes"].as_u64().unwrap();
    assert!(held > 0 && held <= 64 << 20, "{held}");
    // `+tls` ran the session over TLS 1.3 on both paths, and the results say which did.
    let encryption: Vec<&str> = results.iter().map(|r| r["encryption"].as_str().unwrap()).collect();
    assert_eq!(encryption, ["none", "none", "none", "none", "tls13"]);
    assert_eq!(v["encryption"], "mixed");
    assert!(results[4]["counters"]["windows_loaded"].as_u64().unwrap() > 0);
}

#[test]
fn an_emulated_fbdt_session_takes_a_path_that_joins_late() {
    if let Some(why) = fbdt_emu::skip_reason() {
        eprintln!("SKIP: the emulated testbed needs root: {why}");
        return;
    }
    // WiGig's 1 s round trip brings its JOIN long after the HELLO on WiFi: the server must
    // still be listening then (it once dropped its listener on the first accept, and every
    // late JOIN and every re-join after a stall was refused).
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("late.json");
    let out = lab()
        .args(["run", "tc-delay-wigig", "--backend", "emu", "--schemes", "fbdt"])
        .args(["--duration", "4", "--scale", "0.02", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let bytes = &v["results"][0]["per_path_bytes"];
    assert!(bytes["wigig"].as_u64().unwrap() > 100_000, "{bytes}");
}

/// `agree` against a "testbed" suite that is itself a TCP-model run (its MPTCP renamed
/// `mptcp`, its backend `emu`): the same scenario, scale, duration and seed give the same
/// goodputs, so every ratio matches exactly and the scenario agrees. A directory without
/// testbed results is an error that says so.
#[test]
fn agree_compares_the_simulator_with_a_testbed_suite() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tc-loss-wigig.json");
    let out = lab()
        .args([
            "run",
            "tc-loss-wigig",
            "--backend",
            "sim",
            "--model",
            "tcp",
            "--scale",
            "0.5",
        ])
        .args([
            "--schemes",
            "fbdt,mp:kernel,tcp:wifi,tcp:wigig",
            "--duration",
            "2",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    v["backend"] = "emu".into();
    for r in v["results"].as_array_mut().unwrap() {
        if r["scheme"] == "mp:kernel" {
            r["scheme"] = "mptcp".into();
        }
    }
    std::fs::write(&json, serde_json::to_vec(&v).unwrap()).unwrap();
    std::fs::write(dir.path().join("summary.json"), b"{}").unwrap();

    let table = dir.path().join("agree.json");
    let out = lab()
        .args(["agree", "--mptcp", "mp:kernel", "--jobs", "2", "--testbed"])
        .arg(dir.path())
        .arg("--json")
        .arg(&table)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("mp:kernel at scale testbed: 1 of 1"), "{stdout}");
    let t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&table).unwrap()).unwrap();
    let row = &t["rows"][0];
    assert_eq!(row["scenario"], "tc-loss-wigig");
    assert_eq!(row["scale"], 0.5);
    assert_eq!(row["seeds"], serde_json::json!([1]));
    assert_eq!(row["fbdt_over_sum_sim"], row["fbdt_over_sum_testbed"]);
    let c = &row["comparisons"][0];
    assert_eq!(c["fbdt_over_mptcp_sim"], c["fbdt_over_mptcp_testbed"]);
    assert_eq!(c["agree"], true);

    let empty = tempfile::tempdir().unwrap();
    let out = lab().args(["agree", "--testbed"]).arg(empty.path()).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no testbed scenario results"), "{stderr}");
}
