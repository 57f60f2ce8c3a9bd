//! Every validation error names the file, the line and what is wrong.

use fbdt_scenario::{Scenario, ScenarioError};

const GOOD: &str = r#"description = "two paths"
duration_s = 30
seed = 7

[[path]]
name = "wifi"
rate = { model = "constant", mbps = 450 }
delay_ms = 2

[[path]]
name = "wigig"
rate = { model = "random", min_mbps = 1250, max_mbps = 1530, step_s = 1.0 }
delay_ms = 1
loss = 0.01
queue_packets = 500

[[event]]
at_s = 2
path = "wigig"
kind = "outage"
duration_s = 2
every_s = 4

[reference]
"tcp:wifi" = 450
"#;

/// GOOD with the line that starts with `old` replaced by `new`.
fn edit(old: &str, new: &str) -> String {
    assert!(GOOD.lines().any(|l| l.starts_with(old)), "no line {old}");
    GOOD.lines()
        .map(|l| {
            if l.starts_with(old) {
                new.to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn line_of(text: &str, needle: &str) -> usize {
    let at = text.find(needle).expect(needle);
    text[..at].matches('\n').count() + 1
}

/// Parses `text`; asserts it fails on the line containing `at` with a message containing `what`.
fn fails(text: &str, at: &str, what: &str) {
    let err = Scenario::from_toml_str(text, "dir/test.toml").expect_err(what);
    let msg = err.to_string();
    let line = line_of(text, at);
    assert_eq!(err.line(), Some(line), "wrong line for `{what}`: {msg}");
    assert!(msg.starts_with(&format!("dir/test.toml:{line}:")), "{msg}");
    assert!(msg.contains(what), "expected `{what}` in: {msg}");
}

#[test]
fn good_file_parses() {
    let s = Scenario::from_toml_str(GOOD, "dir/test.toml").unwrap();
    assert_eq!(s.name, "test");
    assert_eq!(s.seed, 7);
    assert_eq!(s.congestion_control, "cubic");
    assert_eq!(s.paths[0].queue_packets, 1000);
    assert_eq!(s.paths[0].loss, 0.0);
    assert_eq!(s.paths[1].queue_packets, 500);
    assert_eq!(s.path_index("wigig"), Some(1));
    assert_eq!(s.reference["tcp:wifi"], 450.0);
}

#[test]
fn syntax_and_schema_errors() {
    fails(&edit("seed = 7", "seed = 7\nsede = 3"), "sede", "unknown field `sede`");
    fails(
        &edit("delay_ms = 2", "delay_ms = 2\nbandwidth = 3"),
        "bandwidth",
        "unknown field `bandwidth`",
    );
    fails(
        &edit(
            "rate = { model = \"constant\"",
            "rate = { model = \"constant\", mbps = 450, foo = 1 }",
        ),
        "foo",
        "unknown field `foo`",
    );
    fails(
        &edit(
            "rate = { model = \"constant\"",
            "rate = { model = \"fixed\", mbps = 450 }",
        ),
        "fixed",
        "unknown variant `fixed`",
    );
    fails(&edit("delay_ms = 2", "delay_ms = \"2\""), "\"2\"", "invalid type");
    fails(&edit("seed = 7", "seed = -7"), "seed", "invalid value");
    fails(&edit("seed = 7", "seed = = 7"), "seed", "");
}

#[test]
fn scenario_level_errors() {
    fails(
        &edit("duration_s = 30", "duration_s = 0"),
        "duration_s = 0",
        "`duration_s` must be > 0",
    );
    fails(&edit("duration_s = 30", "duration_s = 86401"), "duration_s", "86401");
    fails(&edit("duration_s = 30", "duration_s = nan"), "duration_s", "NaN");
    fails(&edit("duration_s = 30", "duration_s = -inf"), "duration_s", "-inf");
    fails(
        &edit("seed = 7", "seed = 7\ncongestion_control = \"Cubic!\""),
        "congestion_control",
        "congestion-control name",
    );
    fails(
        &edit("seed = 7", "seed = 7\nname = \"a b\""),
        "name = \"a b\"",
        "scenario name",
    );
}

#[test]
fn path_errors() {
    fails(
        &edit("name = \"wigig\"", "name = \"wifi\""),
        "name = \"wifi\"\nrate = { model = \"random\"",
        "duplicate path name `wifi`",
    );
    fails(
        &edit("name = \"wigig\"", "name = \"wigig-with-a-long-name\""),
        "wigig-with",
        "path name",
    );
    fails(
        &edit("delay_ms = 1", "delay_ms = -1"),
        "delay_ms = -1",
        "`delay_ms` must be in [0, 10000]",
    );
    fails(
        &edit("loss = 0.01", "loss = 1.0"),
        "loss = 1.0",
        "`loss` must be in [0, 1)",
    );
    fails(&edit("loss = 0.01", "loss = nan"), "loss = nan", "finite");
    fails(
        &edit("queue_packets = 500", "radio = { idle_timeout_ms = 0, wake_ms = 5 }"),
        "radio",
        "`idle_timeout_ms` must be",
    );
    fails(
        &edit("queue_packets = 500", "radio = { idle_timeout_ms = 100, wake_ms = -1 }"),
        "radio",
        "`wake_ms` must be in [0, 60000]",
    );
    fails(
        &edit(
            "queue_packets = 500",
            "radio = { idle_timeout_ms = 100, wake_ms = 5, sleep = 1 }",
        ),
        "radio",
        "unknown field `sleep`",
    );
    fails(
        &edit("queue_packets = 500", "bursts = { every_ms = 10, hold_ms = 10 }"),
        "bursts",
        "`hold_ms` (10) must be shorter than `every_ms` (10)",
    );
    fails(
        &edit("queue_packets = 500", "bursts = { every_ms = 0, hold_ms = 3 }"),
        "bursts",
        "`every_ms` must be",
    );
    fails(
        &edit("queue_packets = 500", "bursts = { every_ms = 10, hold_ms = -3 }"),
        "bursts",
        "`hold_ms` must be",
    );
    fails(
        &edit("queue_packets = 500", "bursts = { every_ms = 10 }"),
        "bursts",
        "missing field `hold_ms`",
    );
    fails(
        &edit("queue_packets = 500", "queue_packets = 0"),
        "queue_packets",
        "`queue_packets` must be in [1,",
    );
    fails(
        &edit(
            "rate = { model = \"constant\"",
            "rate = { model = \"constant\", mbps = 100001 }",
        ),
        "100001",
        "`mbps` must be in [0, 100000]",
    );
    fails(
        &edit(
            "rate = { model = \"constant\"",
            "rate = { model = \"constant\", mbps = inf }",
        ),
        "mbps = inf",
        "finite",
    );
    fails(
        &edit(
            "rate = { model = \"random\"",
            "rate = { model = \"random\", min_mbps = 5, max_mbps = 4, step_s = 1 }",
        ),
        "min_mbps = 5",
        "is below",
    );
    fails(
        &edit(
            "rate = { model = \"random\"",
            "rate = { model = \"random\", min_mbps = 1, max_mbps = 4, step_s = 0 }",
        ),
        "step_s = 0",
        "`step_s`",
    );
    fails(
        &edit(
            "rate = { model = \"random\"",
            "rate = { model = \"steps\", steps = [{ at_s = 1, mbps = 5 }] }",
        ),
        "steps",
        "first step must be at_s = 0",
    );
    fails(
        &edit(
            "rate = { model = \"random\"",
            "rate = { model = \"steps\", steps = [{ at_s = 0, mbps = 5 }, { at_s = 2, mbps = 1 }], period_s = 2 }",
        ),
        "period_s",
        "must exceed the last step",
    );
    fails(
        &edit(
            "rate = { model = \"random\"",
            "rate = { model = \"trace\", file = \"no-such.trace\" }",
        ),
        "no-such.trace",
        "cannot read trace",
    );
}

#[test]
fn too_many_paths() {
    let mut text = String::from("duration_s = 10\n");
    for i in 0..17 {
        text.push_str(&format!(
            "\n[[path]]\nname = \"p{i}\"\nrate = {{ model = \"constant\", mbps = 1 }}\ndelay_ms = 1\n"
        ));
    }
    fails(&text, "name = \"p16\"", "more than 16 paths");
}

#[test]
fn no_paths() {
    let err = Scenario::from_toml_str("duration_s = 10\n", "empty.toml").unwrap_err();
    assert!(err.to_string().starts_with("empty.toml: no paths"), "{err}");
}

#[test]
fn event_errors() {
    fails(
        &edit("path = \"wigig\"", "path = \"wigog\""),
        "wigog",
        "unknown path `wigog`",
    );
    fails(
        &edit("kind = \"outage\"", "kind = \"blackout\""),
        "blackout",
        "unknown event kind `blackout`",
    );
    fails(
        &edit("kind = \"outage\"", "kind = \"rate\""),
        "kind = \"rate\"",
        "a `rate` event needs `mbps`",
    );
    fails(
        &edit("kind = \"outage\"", "kind = \"rate\"\nmbps = 3"),
        "duration_s = 2\nevery",
        "does not apply to a `rate` event",
    );
    fails(
        &edit("every_s = 4", "every_s = 2"),
        "every_s = 2",
        "must exceed `duration_s`",
    );
    fails(
        &edit("at_s = 2", "at_s = 30"),
        "at_s = 30",
        "at or after the end of the run",
    );
    fails(&edit("at_s = 2", "at_s = -1"), "at_s = -1", "`at_s` must be in [0,");
    fails(
        &edit("every_s = 4", "every_s = 4\nuntil_s = 1"),
        "until_s = 1",
        "must be after `at_s`",
    );
    fails(
        &edit("duration_s = 2", "duration_s = 0"),
        "duration_s = 0",
        "`duration_s` must be > 0",
    );
    fails(&edit("at_s = 2", "at_s = 2\nat = 3"), "at = 3", "unknown field `at`");
}

#[test]
fn overlapping_events() {
    let text = format!("{GOOD}\n[[event]]\nat_s = 7\npath = \"wigig\"\nkind = \"outage\"\nduration_s = 0.5\n");
    let text = text.replace("[reference]\n\"tcp:wifi\" = 450\n", "");
    fails(&text, "at_s = 7", "overlaps the one from event #1 (6 s to 8 s)");
    // Different kinds may overlap, and so may level events.
    let ok = text.replace(
        "at_s = 7\npath = \"wigig\"\nkind = \"outage\"\nduration_s = 0.5",
        "at_s = 7\npath = \"wigig\"\nkind = \"rate\"\nmbps = 3",
    );
    Scenario::from_toml_str(&ok, "ok.toml").unwrap();
}

#[test]
fn repeating_a_level_event_is_refused() {
    let text =
        edit("kind = \"outage\"", "kind = \"loss\"\nloss = 0.1").replace("duration_s = 2\nevery_s = 4", "every_s = 4");
    fails(&text, "every_s = 4", "cannot repeat");
}

#[test]
fn reference_errors() {
    fails(
        &edit("\"tcp:wifi\" = 450", "\"tcp:wifi\" = -450"),
        "-450",
        "must be in [0,",
    );
    fails(
        &edit("\"tcp:wifi\" = 450", "\"tcp:wifi\" = \"fast\""),
        "fast",
        "invalid type",
    );
}

#[test]
fn load_reports_missing_file() {
    let err = Scenario::load("/nonexistent/dir/x.toml").unwrap_err();
    assert!(matches!(err, ScenarioError::Io { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/dir/x.toml"));
}

#[test]
fn code_built_scenarios_are_checked_by_schedule() {
    let mut s = Scenario::from_toml_str(GOOD, "t.toml").unwrap();
    s.paths[0].loss = 2.0;
    let err = s.schedule(1.0).unwrap_err().to_string();
    assert!(err.contains("path `wifi`, `loss`") && err.contains("[0, 1)"), "{err}");
    assert!(s.validate().is_err());
}

/// GOOD with both paths replaced by a paired Markov channel; `wifi` and `wigig` get the
/// given rate tables.
fn markov(wifi: &str, wigig: &str) -> String {
    edit(
        "rate = { model = \"constant\"",
        &format!("rate = {{ model = \"markov\", {wifi} }}"),
    )
    .replace(
        "rate = { model = \"random\", min_mbps = 1250, max_mbps = 1530, step_s = 1.0 }",
        &format!("rate = {{ model = \"markov\", {wigig} }}"),
    )
}

const RATES: &str = "high_mean_mbps = 1000, high_sd_mbps = 100, low_mean_mbps = 300, low_sd_mbps = 30";

#[test]
fn markov_errors() {
    let ok_wifi = format!("{RATES}, flip_p = 0.1, correlation = 0.34, pair = \"wigig\"");
    let ok_wigig = format!("{RATES}, flip_p = 0.1, correlation = 0.34, pair = \"wifi\"");
    let s = Scenario::from_toml_str(&markov(&ok_wifi, &ok_wigig), "dir/test.toml").unwrap();
    assert_eq!(s.schedule(1.0).unwrap().paths.len(), 2);
    // One unpaired chain on its own is fine too.
    let alone = format!("{RATES}, flip_p = 0.2");
    Scenario::from_toml_str(&markov(&alone, &alone), "dir/test.toml").unwrap();

    let bad_wifi = |wifi: &str, at: &str, what: &str| fails(&markov(wifi, &ok_wigig), at, what);
    bad_wifi(
        &format!("{RATES}, flip_p = 0.6, correlation = 0.34, pair = \"wigig\""),
        "flip_p = 0.6",
        "`flip_p` must be in [0, 0.5]",
    );
    bad_wifi(
        &format!("{RATES}, flip_p = 0.1, correlation = 1.5, pair = \"wigig\""),
        "correlation = 1.5",
        "`correlation` must be in [-1, 1]",
    );
    bad_wifi(
        &format!("{RATES}, flip_p = 0.1, correlation = 0.34, pair = \"wigig\", step_s = 0"),
        "step_s = 0",
        "`step_s` must be in",
    );
    bad_wifi(
        "high_mean_mbps = -1, high_sd_mbps = 1, low_mean_mbps = 1, low_sd_mbps = 1, flip_p = 0.1, correlation = 0.34, pair = \"wigig\"",
        "high_mean_mbps = -1",
        "`high_mean_mbps` must be in",
    );
    bad_wifi(
        &format!("{RATES}, flip_p = 0.1, correlation = 0.34, pair = \"cell\""),
        "pair = \"cell\"",
        "`pair` names unknown path `cell`",
    );
    bad_wifi(
        &format!("{RATES}, flip_p = 0.1, correlation = 0.34, pair = \"wifi\""),
        "pair = \"wifi\"",
        "`pair` names the path itself",
    );
    bad_wifi(
        &format!("{RATES}, flip_p = 0.2, correlation = 0.34, pair = \"wigig\""),
        "pair = \"wigig\"",
        "must be equal",
    );
    bad_wifi(
        &format!("{RATES}, flip_p = 0.1, correlation = 0.34"),
        "correlation = 0.34",
        "needs `pair`",
    );
    // The partner must name this path back.
    fails(
        &markov(&ok_wifi, &format!("{RATES}, flip_p = 0.1")),
        "pair = \"wigig\"",
        "that path must be a `markov` model with `pair` = \"wifi\"",
    );
    bad_wifi(
        &format!("{RATES}, flip_p = 0.1, correlation = 0.34, pair = \"wigig\", q = 1"),
        "q = 1",
        "unknown field `q`",
    );
}

#[test]
fn contention_errors() {
    let contention = |fields: &str| edit("kind = \"outage\"", &format!("kind = \"contention\"\n{fields}"));
    fails(
        &contention("load = 0.2"),
        "kind = \"contention\"",
        "a `contention` event needs `stations`",
    );
    fails(
        &contention("stations = 0\nload = 0.2"),
        "stations = 0",
        "stations must be a whole number in 1..=64",
    );
    fails(
        &contention("stations = 2.5\nload = 0.2"),
        "stations = 2.5",
        "whole number",
    );
    fails(&contention("stations = 65\nload = 0.2"), "stations = 65", "1..=64");
    fails(
        &contention("stations = 3\nload = 1.5"),
        "load = 1.5",
        "`load` must be in",
    );
    fails(
        &contention("stations = 3\nload = 0.2\ntxop_ms = 50"),
        "txop_ms = 50",
        "`txop_ms` must be in",
    );
    fails(
        &edit("kind = \"outage\"", "kind = \"outage\"\ntxop_ms = 2"),
        "txop_ms = 2",
        "`txop_ms` does not apply to a `outage` event",
    );
}

/// Rate and delay change together while the other stations are on the channel, and come
/// back when they leave.
#[test]
fn contention_cuts_rate_and_adds_delay_together() {
    let text = r#"duration_s = 10
[[path]]
name = "wifi"
rate = { model = "constant", mbps = 500 }
delay_ms = 2

[[event]]
at_s = 4
path = "wifi"
kind = "contention"
stations = 3
load = 0.2
txop_ms = 2
duration_s = 3
"#;
    let s = Scenario::from_toml_str(text, "c.toml").unwrap();
    let steps = &s.schedule(1.0).unwrap().paths[0].steps;
    let at = |t: f64| steps.iter().rev().find(|x| x.t_s <= t).unwrap();
    // 3 × 0.2 of the airtime is the others': the path keeps 40%, and waits 2 · 0.6 / 0.4 / 2.
    assert_eq!((at(1.0).rate_mbps, at(1.0).delay_ms), (500.0, 2.0));
    let during = at(5.0);
    assert!((during.rate_mbps - 200.0).abs() < 1e-9, "{during:?}");
    assert!((during.delay_ms - 3.5).abs() < 1e-9, "{during:?}");
    assert_eq!((at(8.0).rate_mbps, at(8.0).delay_ms), (500.0, 2.0));
}

#[test]
fn radio_sleep_is_optional_and_reaches_the_schedule() {
    let s = Scenario::from_toml_str(
        &edit("queue_packets = 500", "radio = { idle_timeout_ms = 200, wake_ms = 30 }"),
        "t.toml",
    )
    .unwrap();
    let sched = s.schedule(1.0).unwrap();
    assert_eq!(sched.paths[0].radio, None);
    let radio = sched.paths[1].radio.expect("wigig sleeps");
    assert_eq!((radio.idle_timeout_ms, radio.wake_ms), (200.0, 30.0));
}

#[test]
fn bursts_are_optional_and_reach_the_schedule_unscaled() {
    let s = Scenario::from_toml_str(&edit("queue_packets = 500", "bursts = { every_ms = 10, hold_ms = 3 }"), "t.toml")
        .unwrap();
    let sched = s.schedule(0.1).unwrap();
    assert_eq!(sched.paths[0].bursts, None);
    let b = sched.paths[1].bursts.expect("wigig delivers in bursts");
    assert_eq!((b.every_ms, b.hold_ms), (10.0, 3.0));
}
