//! The `[bottleneck]` table (issue 40): parsed, resolved at scale, and refused with the
//! file's line when it is wrong.

use fbdt_scenario::Scenario;

const PATHS: &str = r#"
duration_s = 10

[[path]]
name = "wifi"
rate = { model = "constant", mbps = 400 }
delay_ms = 2

[[path]]
name = "wigig"
rate = { model = "constant", mbps = 1600 }
delay_ms = 1
"#;

fn with(table: &str) -> Result<Scenario, fbdt_scenario::ScenarioError> {
    Scenario::from_toml_str(&format!("{PATHS}\n[bottleneck]\n{table}"), "test.toml")
}

#[test]
fn the_builtin_joins_both_radios_with_one_competing_tcp() {
    let s = Scenario::load("shared-bottleneck").unwrap();
    let b = s.bottleneck.as_ref().expect("a bottleneck");
    assert_eq!(b.paths, ["wifi", "wigig"]);
    assert_eq!((b.rate_mbps, b.competing_tcp), (200.0, 1));
    let sched = s.schedule(0.5).unwrap();
    let link = sched.bottleneck.expect("resolved");
    assert_eq!(link.paths, [0, 1]);
    assert_eq!(link.rate_mbps, 100.0, "scaled as every rate");
    assert_eq!(link.queue_bytes, 1000 * 1500);
    assert_eq!(link.competing_delay_ms, 2.0);
}

#[test]
fn defaults_and_no_table() {
    let s = with("paths = [\"wigig\"]\nrate_mbps = 100").unwrap();
    let link = s.schedule(1.0).unwrap().bottleneck.unwrap();
    assert_eq!((link.competing_tcp, link.queue_bytes), (0, 1000 * 1500));
    // The competing flows' delay defaults to the least of the joined paths'.
    assert_eq!(link.competing_delay_ms, 1.0);
    let none = Scenario::from_toml_str(PATHS, "test.toml").unwrap();
    assert!(none.bottleneck.is_none() && none.schedule(1.0).unwrap().bottleneck.is_none());
}

#[test]
fn a_wrong_table_is_refused_on_its_line() {
    let cases = [
        ("paths = []\nrate_mbps = 100", "at least one path"),
        ("paths = [\"lte\"]\nrate_mbps = 100", "unknown path `lte`"),
        ("paths = [\"wifi\", \"wifi\"]\nrate_mbps = 100", "names `wifi` twice"),
        ("paths = [\"wifi\"]\nrate_mbps = 0", "`rate_mbps` must be > 0"),
        ("paths = [\"wifi\"]\nrate_mbps = 100\nqueue_packets = 0", "`queue_packets`"),
        ("paths = [\"wifi\"]\nrate_mbps = 100\ncompeting_tcp = 17", "at most 16"),
        ("paths = [\"wifi\"]\nrate_mbps = 100\ncompeting_delay_ms = -1", "competing_delay_ms"),
        ("paths = [\"wifi\"]\nrate_mbps = 100\nflows = 2", "unknown field"),
    ];
    let table_line = PATHS.lines().count() + 2;
    for (table, want) in cases {
        let e = with(table).expect_err(table);
        assert!(e.to_string().contains(want), "{table}: {e}");
        let line = e.line().expect("a line");
        assert!(line >= table_line, "{table}: line {line}, the table starts at {table_line}");
    }
}
