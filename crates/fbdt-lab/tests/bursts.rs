//! `fbdt-lab run --traffic bursts`: paper 003's ten flows in 2-s bursts. The simulator
//! refuses it; on the testbed (root) every kind of transport carries the ten flows whole
//! and the burst metrics stay within what the links can carry.

use std::process::Command;

use serde_json::Value;

fn lab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
}

#[test]
fn bursts_need_the_testbed() {
    let out = lab()
        .args(["run", "cotag-corr-pos", "--traffic", "bursts", "--duration", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--backend emu"), "{err}");
}

/// One 2-s burst per scheme through the COTAG link (coded and uncoded), a kernel socket and
/// ten FBDT sessions.
#[test]
fn ten_flows_arrive_whole_through_every_kind_of_scheme() {
    if let Some(why) = fbdt_emu::skip_reason() {
        eprintln!("SKIP: the emulated testbed needs root: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let scale = 0.05;
    let schemes = ["cotag", "dual-rr", "tcp:ap1", "fbdt"];
    let out = lab()
        .args(["run", "cotag-corr-pos", "--backend", "emu", "--traffic", "bursts"])
        .args([
            "--duration",
            "2",
            "--scale",
            &scale.to_string(),
            "--schemes",
            &schemes.join(","),
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // Each path's High state is 1000 Mbit/s with sd 100 unscaled: 1400 is four sd above.
    let ceiling = 2.0 * 1400.0 * scale;
    for r in v["results"].as_array().unwrap() {
        let b = &r["bursts"];
        assert_eq!(b["flows"], 10, "{r}");
        assert_eq!(b["flows_intact"], true, "{}", r["scheme"]);
        let bursts = b["burst_mbps"].as_array().unwrap();
        assert_eq!(bursts.len(), 1, "{}", r["scheme"]);
        let m = bursts[0].as_f64().unwrap();
        assert!(m > 0.0 && m < ceiling, "{}: {m} Mbit/s", r["scheme"]);
        assert_eq!(b["volume_bytes"], (5e9 * scale / 8.0) as u64);
        // Counted in the server's namespace, so for every kind of scheme.
        assert!(b["tcp_retransmissions"].as_u64().is_some(), "{r}");
        for (path, u) in b["link_utilisation"].as_object().unwrap() {
            let u = u.as_f64().unwrap();
            assert!((0.0..1.1).contains(&u), "{} {path}: {u}", r["scheme"]);
        }
    }
    let cotag = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["scheme"] == "cotag")
        .unwrap();
    assert!(cotag["cotag"]["cohorts_decoded"].as_u64().unwrap() > 0, "{cotag}");
    assert!(cotag["cotag"]["coding_overhead"].as_f64().is_some(), "{cotag}");
    assert!(cotag["bursts"]["tcp_retransmissions"].as_u64().is_some(), "{cotag}");
}
