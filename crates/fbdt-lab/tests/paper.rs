//! `fbdt-lab paper` as a user runs it: a short simulated suite writes the per-scenario JSON,
//! summary.json, the figures and report.html; bad input fails with a clear message.

use std::process::Command;

fn lab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
}

fn json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `key` strings of the objects in array `v`.
fn strings<'a>(v: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    v.as_array().unwrap().iter().map(|x| x[key].as_str().unwrap()).collect()
}

/// `paper --backend sim --quick` over los and blockage into `out` with `notes`; must
/// succeed; returns its stderr.
fn quick_suite(out: &std::path::Path, notes: &std::path::Path, extra: &[&str]) -> String {
    let o = lab()
        .args(["paper", "--backend", "sim", "--quick", "--scenarios", "los,blockage"])
        .args(extra)
        .arg("--out")
        .arg(out)
        .arg("--notes")
        .arg(notes)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    stderr
}

#[test]
fn quick_simulated_suite_writes_json_summary_figures_and_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("paper");
    let notes = dir.path().join("notes.md");
    std::fs::write(&notes, "FBDT <beats> MPTCP & co").unwrap();
    let stderr = quick_suite(&out, &notes, &["--duration", "2", "--workload-scenarios", "los"]);
    // The overall progress line counts runs over the whole suite.
    assert!(
        stderr.contains("[1/8] los fbdt mp:blest tcp:wifi tcp:wigig"),
        "{stderr}"
    );
    assert!(stderr.contains("[5/8] blockage"), "{stderr}");

    for scenario in ["los", "blockage"] {
        let v = json(&out.join(format!("{scenario}.json")));
        assert_eq!(v["scenario"], scenario);
        assert_eq!(v["backend"], "sim");
        assert_eq!(v["duration_s"], 2.0);
        assert_eq!(
            strings(&v["results"], "scheme"),
            ["fbdt", "mp:blest", "tcp:wifi", "tcp:wigig"]
        );
    }

    let s = json(&out.join("summary.json"));
    assert_eq!(s["run"]["backend"], "sim");
    assert_eq!(s["run"]["baseline"], "mp:blest");
    assert_eq!(strings(&s["scenarios"], "scenario"), ["los", "blockage"]);
    let los = &s["scenarios"][0];
    // The ratio is the two goodputs of the run divided, and the paper's numbers come along.
    let fbdt = los["schemes"][0]["goodput_mbps"].as_f64().unwrap();
    let sum = los["sum_standalone_mbps"].as_f64().unwrap();
    let r = los["ratios"]["fbdt_over_sum_standalone"].as_f64().unwrap();
    assert!((r - fbdt / sum).abs() < 1e-9);
    assert_eq!(los["paper"]["reference"]["fbdt"], 1970.0);
    // los: two targets; blockage adds the capacity one. Each is PASS or MISS, never absent.
    // Then the nine application claims, measured over los only here: Fig. 10's needs the
    // mobility scenario, so it is not measured.
    let checks = s["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 5 + 9);
    for c in &checks[..5] {
        assert!(c["status"] == "PASS" || c["status"] == "MISS", "{c}");
    }
    for c in &checks[5..] {
        assert!(c["scenario"].as_str().unwrap().starts_with("workloads"), "{c}");
        let fig10 = c["target"].as_str().unwrap().starts_with("progressive");
        let expected: &[&str] = if fig10 { &["N/A"] } else { &["PASS", "MISS"] };
        assert!(expected.contains(&c["status"].as_str().unwrap()), "{c}");
    }
    let w = &s["workloads"];
    assert_eq!(w["backend"], "sim");
    let kinds: Vec<&str> = strings(&w["tables"], "kind");
    assert_eq!(kinds, ["file", "web", "progressive", "dash", "vr"]);
    let files = &w["tables"][0];
    assert_eq!(files["scenario"], "los");
    assert_eq!(files["rows"].as_array().unwrap().len(), 10, "5 sizes × busy/idle");
    assert!(s["failures"].as_array().unwrap().is_empty());
    assert!(stderr.contains("[workloads 1/5] File over los"), "{stderr}");

    for f in ["bars-fig8c", "cdf", "ts-los", "ts-blockage"] {
        for ext in ["png", "svg"] {
            let p = out.join(format!("{f}.{ext}"));
            assert!(std::fs::metadata(&p).is_ok_and(|m| m.len() > 1000), "{}", p.display());
        }
    }
    let png = std::fs::read(out.join("cdf.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");

    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("<img src=\"bars-fig8c.png\""));
    assert!(page.contains("FBDT &lt;beats&gt; MPTCP &amp; co"));
    assert!(page.contains("blockage") && page.contains("FBDT ≥ 0.85 × capacity"));
    assert!(page.contains("Application workloads") && page.contains("360° tiles: viewport PSNR"));

    // Notes written after looking at the results: the page is rebuilt from the JSON, nothing
    // runs again, the run's description (when, how long) is the measured one.
    std::fs::write(&notes, "second thoughts").unwrap();
    std::fs::remove_file(out.join("cdf.png")).unwrap();
    let before = std::fs::read_to_string(out.join("los.json")).unwrap();
    let stderr = quick_suite(&out, &notes, &["--render-only"]);
    assert!(!stderr.contains("[1/8]"), "nothing runs: {stderr}");
    assert_eq!(std::fs::read_to_string(out.join("los.json")).unwrap(), before);
    assert!(out.join("cdf.png").exists());
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("second thoughts"));
    let again = json(&out.join("summary.json"));
    assert_eq!(again["run"]["started"], s["run"]["started"]);
    assert_eq!(again["scenarios"][0]["ratios"], s["scenarios"][0]["ratios"]);
    assert_eq!(
        again["checks"], s["checks"],
        "the workloads come back from workloads.json"
    );

    // Without the scenarios' JSON there is nothing to render.
    let empty = dir.path().join("empty");
    let o = lab()
        .args(["paper", "--backend", "sim", "--scenarios", "los", "--render-only"])
        .arg("--out")
        .arg(&empty)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no scenario JSON"));
}

#[test]
fn bad_input_fails_clearly_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let unwritable = file.join("out");
    let out = dir.path().join("o");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--scenarios".into(), "los,no-such-scenario".into()],
            "no-such-scenario",
        ),
        (vec!["--out".into(), unwritable.display().to_string()], "--out"),
        (vec!["--schemes-extra".into(), "tcp:lte".into()], "lte"),
        (vec!["--schemes-extra".into(), "mptcp".into()], "emulated testbed"),
    ];
    for (extra, needle) in cases {
        let mut cmd = lab();
        cmd.args([
            "paper",
            "--backend",
            "sim",
            "--quick",
            "--duration",
            "1",
            "--scenarios",
            "los",
        ]);
        if !extra.iter().any(|a| a == "--out") {
            cmd.arg("--out").arg(&out);
        }
        let o = cmd.args(&extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {stderr}");
        assert!(stderr.contains(needle), "{extra:?}: {stderr}");
    }
    // Nothing ran for any of them.
    assert!(!out.join("los.json").exists());
}

#[test]
fn repetitions_out_of_range_are_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o");
    let paper = lab()
        .args([
            "paper",
            "--backend",
            "sim",
            "--quick",
            "--scenarios",
            "los",
            "--repeat",
            "0",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&paper.stderr);
    assert!(!paper.status.success() && stderr.contains("--repeat"), "{stderr}");
    assert!(!out.exists());
    for n in ["0", "101"] {
        let sweep = lab().args(["sweep", "--cotag", "--repeat", n]).output().unwrap();
        let stderr = String::from_utf8_lossy(&sweep.stderr);
        assert!(
            !sweep.status.success() && stderr.contains("--repeat must be in 1..=100"),
            "{n}: {stderr}"
        );
    }
}
