//! `fbdt-lab run shared-bottleneck --backend emu` (root): the competing flow runs beside
//! each scheme, and the shares the emulator counted at the shared link reach the results
//! (docs/testbed.md, "Shared bottleneck").

use std::process::Command;

use serde_json::Value;

#[test]
fn the_testbed_reports_what_each_flow_took_at_the_shared_link() {
    if let Some(why) = fbdt_emu::skip_reason() {
        eprintln!("SKIP: the emulated testbed needs root: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    // The built-in's 200 Mbit/s link at 0.05: 10 Mbit/s, shared by the scheme's two paths
    // and one competing Cubic flow.
    let (scale, duration) = (0.05, 3.0);
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
        .args(["run", "shared-bottleneck", "--backend", "emu", "--schemes", "tcp:wifi,fbdt"])
        .args(["--duration", &duration.to_string(), "--scale", &scale.to_string()])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("shared bottleneck:"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let link_mbps = 200.0 * scale;
    for r in v["results"].as_array().unwrap() {
        let b = &r["bottleneck"];
        let flows = b["flows"].as_array().unwrap_or_else(|| panic!("no shares: {r}"));
        let names: Vec<&str> = flows.iter().map(|f| f["flow"].as_str().unwrap()).collect();
        assert_eq!(names, ["scheme", "tcp#1"], "{}", r["scheme"]);
        let rates: Vec<f64> = flows.iter().map(|f| f["mbps"].as_f64().unwrap()).collect();
        // Both got through; together never more than the link carries (the rate is over
        // the time counted, a frame of slack).
        assert!(rates.iter().all(|&m| m > 0.0), "{}: {rates:?}", r["scheme"]);
        let total: f64 = rates.iter().sum();
        assert!(total <= link_mbps * 1.01, "{}: {total} Mbit/s across a {link_mbps} Mbit/s link", r["scheme"]);
        let shares: f64 = flows.iter().map(|f| f["bottleneck_share"].as_f64().unwrap()).sum();
        assert!((shares - 1.0).abs() < 1e-9);
        let jain = b["jain_index"].as_f64().unwrap();
        assert!((0.5..=1.0).contains(&jain), "{jain}");
        // The scheme's goodput crossed the link too: it cannot exceed the link's rate.
        let goodput = r["goodput_mbps"].as_f64().unwrap();
        assert!(goodput <= link_mbps * 1.01, "{}: {goodput}", r["scheme"]);
    }
}
