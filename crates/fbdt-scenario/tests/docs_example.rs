//! The complete example in docs/scenarios.md must stay valid.

use fbdt_scenario::Scenario;

#[test]
fn docs_example_parses_and_schedules() {
    let doc = include_str!("../../../docs/scenarios.md");
    let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let text = &doc[start..start + doc[start..].find("```").expect("closed block")];
    let dir = std::env::temp_dir().join(format!("fbdt-scenario-docs-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    let lines: Vec<String> = (1..=100).map(|t| t.to_string()).collect();
    std::fs::write(dir.join("traces/lte.down"), lines.join("\n")).unwrap();
    let file = dir.join("example.toml");
    std::fs::write(&file, text).unwrap();
    let result = Scenario::load(file.to_str().unwrap()).and_then(|s| s.schedule(1.0).map(|sch| (s, sch)));
    let _ = std::fs::remove_dir_all(&dir);
    let (s, sched) = result.unwrap();
    assert_eq!(s.name, "example");
    assert_eq!(s.paths.len(), 4);
    assert_eq!(s.events.len(), 3);
    let wifi = sched.path("wifi").unwrap();
    assert!(wifi.at(12.0).scan);
    assert_eq!(wifi.at(22.0).rate_mbps, 250.0);
    let wigig = sched.path("wigig").unwrap();
    assert_eq!(wigig.at(18.5).rate_mbps, 0.0);
    assert!(wigig.at(22.5).rate_mbps > 0.0, "outages stop at until_s");
    // 100 opportunities per 100 ms = 12 Mbit/s.
    assert!((sched.path("cell").unwrap().at(3.0).rate_mbps - 12.0).abs() < 1e-9);
}

#[test]
fn docs_error_examples_are_real() {
    let base = "[[path]]\nname = \"wifi\"\nrate = { model = \"constant\", mbps = 1 }\ndelay_ms = 1\n";
    let e = Scenario::from_toml_str(&format!("{base}bandwidth = 3\n"), "my.toml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "my.toml:5: unknown field `bandwidth`, expected one of `name`, `rate`, `delay_ms`, `loss`, `queue_packets`, `radio`, `bursts`"
    );
}
