use std::path::PathBuf;

use fbdt_scenario::{mahimahi, Scenario, ScenarioError};

/// A scratch directory unique to this test, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("fbdt-scenario-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn trace_err(text: &str) -> (Option<usize>, String) {
    match mahimahi::parse(text, "t.trace") {
        Err(e @ ScenarioError::Trace { .. }) => (e.line(), e.to_string()),
        other => panic!("expected a trace error, got {other:?}"),
    }
}

#[test]
fn good_traces_parse() {
    assert_eq!(mahimahi::parse("1\n1\n2\n5\n", "t").unwrap(), vec![1, 1, 2, 5]);
    assert_eq!(mahimahi::parse("0\n3", "t").unwrap(), vec![0, 3]);
    assert_eq!(mahimahi::parse("1\r\n2\r\n", "t").unwrap(), vec![1, 2]);
}

#[test]
fn bad_traces_name_file_and_line() {
    let (line, msg) = trace_err("");
    assert_eq!(line, None);
    assert!(msg.contains("t.trace") && msg.contains("empty trace"), "{msg}");
    let (line, msg) = trace_err("1\n2\nx3\n");
    assert_eq!(line, Some(3));
    assert!(msg.starts_with("t.trace:3:") && msg.contains("`x3`"), "{msg}");
    let (line, msg) = trace_err("1\n5\n4\n");
    assert_eq!(line, Some(3));
    assert!(msg.contains("before the previous one"), "{msg}");
    let (line, msg) = trace_err("0\n0\n");
    assert_eq!(line, Some(2));
    assert!(msg.contains("zero-length"), "{msg}");
    let (line, _) = trace_err("1\n\n2\n");
    assert_eq!(line, Some(2));
    let (line, _) = trace_err("1\n-2\n");
    assert_eq!(line, Some(2));
    let (line, _) = trace_err("1\n2.5\n");
    assert_eq!(line, Some(2));
    let (line, msg) = trace_err("1\n99999999999999999999999\n");
    assert_eq!(line, Some(2));
    assert!(msg.contains("exceeds"), "{msg}");
}

#[test]
fn binning() {
    // One opportunity per ms for 200 ms = 12 Mbit/s; bins of 100 ms.
    let ts: Vec<u64> = (1..=200).collect();
    let (period, bins) = mahimahi::bin(&ts, 100.0, "t").unwrap();
    assert_eq!(period, 0.2);
    assert_eq!(bins.len(), 2);
    for (_, mbps) in &bins {
        assert!((mbps - 12.0).abs() < 1e-9, "{mbps}");
    }
    // A period that is not a multiple of the bin: the short last bin keeps the right rate.
    let ts: Vec<u64> = (1..=150).collect();
    let (_, bins) = mahimahi::bin(&ts, 100.0, "t").unwrap();
    assert_eq!(bins.len(), 2);
    assert!((bins[1].1 - 12.0).abs() < 1e-9, "{:?}", bins);
}

#[test]
fn trace_scenario_relative_to_its_file() {
    let dir = TempDir::new("trace");
    // 10 ms period with 5 opportunities in the first half: 6 Mbit/s average, looped.
    let mut lines: Vec<String> = (1..=5).map(|t| t.to_string()).collect();
    lines.push("10".into());
    dir.write("link.trace", &(lines.join("\n") + "\n"));
    let scen = dir.write(
        "s.toml",
        "duration_s = 1\n[[path]]\nname = \"cell\"\nrate = { model = \"trace\", file = \"link.trace\", bin_ms = 10 }\ndelay_ms = 20\n",
    );
    let s = Scenario::load(scen.to_str().unwrap()).unwrap();
    let sched = s.schedule(2.0).unwrap();
    let cell = &sched.paths[0];
    // 6 opportunities per 10 ms loop = 7.2 Mbit/s, times scale 2.
    assert_eq!(cell.steps.len(), 1);
    assert!((sched.capacity_mbps() - 14.4).abs() < 1e-9, "{}", sched.capacity_mbps());

    let bad = dir.write("bad.trace", "5\n3\n");
    let text = format!(
        "duration_s = 1\n[[path]]\nname = \"cell\"\nrate = {{ model = \"trace\", file = \"{}\" }}\ndelay_ms = 20\n",
        bad.display()
    );
    let err = Scenario::from_toml_str(&text, "x.toml").unwrap_err().to_string();
    assert!(
        err.contains("bad.trace:2:") && err.contains("before the previous"),
        "{err}"
    );
}

#[test]
fn trace_bins_vary() {
    let dir = TempDir::new("bins");
    // 100 opportunities in [0,100) ms, none in [100,200): 12 then 0 Mbit/s.
    let mut lines: Vec<String> = (0..100).map(|t| t.to_string()).collect();
    lines.push("200".into());
    dir.write("burst.trace", &lines.join("\n"));
    let scen = dir.write(
        "s.toml",
        "duration_s = 1\n[[path]]\nname = \"cell\"\nrate = { model = \"trace\", file = \"burst.trace\" }\ndelay_ms = 20\n",
    );
    let sched = Scenario::load(scen.to_str().unwrap()).unwrap().schedule(1.0).unwrap();
    let cell = &sched.paths[0];
    // The opportunity at 200 ms is the first instant of the next loop (bin 0): 101 in bin 0.
    assert!((cell.at(0.05).rate_mbps - 12.12).abs() < 1e-9, "{:?}", cell.steps);
    assert_eq!(cell.at(0.15).rate_mbps, 0.0);
    assert!((cell.at(0.25).rate_mbps - 12.12).abs() < 1e-9);
    assert_eq!(cell.steps.len(), 10);
}
