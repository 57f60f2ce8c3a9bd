use fbdt_scenario::{builtin, builtin_names, Scenario, Schedule};

fn check_invariants(s: &Schedule) {
    for p in &s.paths {
        assert!(!p.steps.is_empty(), "{}: no steps", p.name);
        assert_eq!(p.steps[0].t_s, 0.0, "{}: first step not at 0", p.name);
        for w in p.steps.windows(2) {
            assert!(w[0].t_s < w[1].t_s, "{}: steps not strictly sorted: {:?}", p.name, w);
            let (a, b) = (w[0], w[1]);
            assert!(
                a.rate_mbps != b.rate_mbps || a.delay_ms != b.delay_ms || a.loss != b.loss || a.scan != b.scan,
                "{}: consecutive duplicate steps {:?}",
                p.name,
                w
            );
        }
        for st in &p.steps {
            assert!(st.t_s < s.duration_s, "{}: step after the end", p.name);
            assert!(st.rate_mbps.is_finite() && st.rate_mbps >= 0.0);
            assert!(st.delay_ms.is_finite() && st.delay_ms >= 0.0);
            assert!((0.0..1.0).contains(&st.loss));
            assert!(!st.scan || st.rate_mbps == 0.0);
        }
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * b.abs().max(1.0)
}

#[test]
fn every_builtin_parses_schedules_and_keeps_invariants() {
    let names = builtin_names();
    assert_eq!(names.len(), 18);
    for name in names {
        let s = builtin(name).expect(name);
        assert_eq!(s.name, name);
        assert_eq!(s.duration_s, 30.0);
        assert_eq!(s.seed, 1);
        assert_eq!(s.congestion_control, "cubic");
        assert!(!s.description.is_empty(), "{name}: no description");
        let sched = s.schedule(1.0).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(sched.paths.len(), s.paths.len());
        check_invariants(&sched);
        let loaded = Scenario::load(name).expect(name);
        assert_eq!(loaded, s);
    }
}

#[test]
fn builtins_load_from_their_files_too() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios");
    for name in builtin_names() {
        let from_file = Scenario::load(&format!("{dir}/{name}.toml")).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(from_file.name, name);
        assert_eq!(from_file.paths, builtin(name).unwrap().paths);
    }
}

#[test]
fn constant_capacities_are_the_sum_of_rates() {
    for (name, cap) in [
        ("tc-normal", 2430.0),
        ("tc-loss-wigig", 2430.0),
        ("tc-delay-wigig", 2430.0),
        ("rats4", 3730.0),
        ("rats4-loss1", 3730.0),
        ("rats4-loss2", 3730.0),
    ] {
        let sched = builtin(name).unwrap().schedule(1.0).unwrap();
        assert!(close(sched.capacity_mbps(), cap), "{name}: {}", sched.capacity_mbps());
        let half = builtin(name).unwrap().schedule(0.5).unwrap();
        assert!(close(half.capacity_mbps(), cap * 0.5));
        assert_eq!(half.scale, 0.5);
    }
}

#[test]
fn blockage_capacity_by_hand() {
    // WiGig out in [2,4), [6,8), ..., [26,28): 7 outages of 2 s, up 16 of 30 s.
    let sched = builtin("blockage").unwrap().schedule(1.0).unwrap();
    let expect = 450.0 + 1400.0 * 16.0 / 30.0;
    assert!(close(sched.capacity_mbps(), expect), "{}", sched.capacity_mbps());
    let wigig = sched.path("wigig").unwrap();
    assert_eq!(wigig.steps.len(), 15);
    assert_eq!(wigig.at(1.99).rate_mbps, 1400.0);
    assert_eq!(wigig.at(2.0).rate_mbps, 0.0);
    assert_eq!(wigig.at(3.999).rate_mbps, 0.0);
    assert_eq!(wigig.at(4.0).rate_mbps, 1400.0);
    assert_eq!(wigig.at(27.0).rate_mbps, 0.0);
    assert_eq!(wigig.at(29.0).rate_mbps, 1400.0);
    assert_eq!(wigig.next_change_after(2.0), Some(4.0));
    assert_eq!(wigig.next_change_after(28.0), None);
}

#[test]
fn scan_and_contention_by_hand() {
    let scan = builtin("scan-wifi").unwrap().schedule(1.0).unwrap();
    assert!(close(scan.capacity_mbps(), 450.0 * 24.0 / 30.0 + 1400.0));
    let wifi = scan.path("wifi").unwrap();
    assert!(wifi.at(12.0).scan && wifi.at(12.0).rate_mbps == 0.0);
    assert!(!wifi.at(16.0).scan && wifi.at(16.0).rate_mbps == 450.0);

    let c = builtin("contention-wifi").unwrap().schedule(1.0).unwrap();
    let expect = (590.0 * 20.0 + 250.0 * 10.0) / 30.0 + (1650.0 * 20.0 + 1200.0 * 10.0) / 30.0;
    assert!(close(c.capacity_mbps(), expect), "{}", c.capacity_mbps());
    assert_eq!(c.path("wifi").unwrap().at(15.0).rate_mbps, 250.0);
    assert_eq!(c.path("wifi").unwrap().at(20.0).rate_mbps, 590.0);
}

#[test]
fn random_models_hit_their_calibration() {
    let mean = |name: &str, path: &str| {
        let sched = builtin(name).unwrap().schedule(1.0).unwrap();
        sched.path(path).unwrap().mean_rate_mbps(sched.duration_s)
    };
    let within = |v: f64, target: f64, tol: f64| (v - target).abs() <= tol;
    assert!(within(mean("los", "wifi"), 476.0, 10.0));
    assert!(within(mean("los", "wigig"), 1390.0, 40.0));
    assert!(within(mean("nlos", "wigig"), 700.0, 70.0));
    assert!(
        within(mean("mobility", "wigig"), 1060.0, 50.0),
        "{}",
        mean("mobility", "wigig")
    );
    assert!(within(mean("mobility", "wifi"), 465.0, 10.0));
}

#[test]
fn mobility_alternates() {
    let sched = builtin("mobility").unwrap().schedule(1.0).unwrap();
    let wigig = sched.path("wigig").unwrap();
    for lap in 0..4 {
        let t0 = lap as f64 * 7.5;
        for dt in [0.0, 1.2, 4.4] {
            let r = wigig.at(t0 + dt).rate_mbps;
            assert!((1400.0..=1600.0).contains(&r), "LoS at {}: {r}", t0 + dt);
        }
        for dt in [4.5, 6.0, 7.4] {
            let r = wigig.at(t0 + dt).rate_mbps;
            assert!((100.0..=700.0).contains(&r), "nLoS at {}: {r}", t0 + dt);
        }
    }
}

#[test]
fn schedules_are_deterministic_and_seeded() {
    for name in builtin_names() {
        let s = builtin(name).unwrap();
        assert_eq!(s.schedule(0.25).unwrap(), s.schedule(0.25).unwrap(), "{name}");
    }
    let mut a = builtin("los").unwrap();
    let one = a.schedule(1.0).unwrap();
    a.seed = 2;
    let two = a.schedule(1.0).unwrap();
    assert_ne!(one, two);
    // Paths draw from separate streams: the two WiFi/WiGig sample sequences differ in shape.
    assert_ne!(one.paths[0].steps.len(), 0);
}

#[test]
fn bad_scale_is_an_error() {
    let s = builtin("tc-normal").unwrap();
    for scale in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(s.schedule(scale), Err(fbdt_scenario::ScenarioError::Scale(_))),
            "{scale}"
        );
    }
}

#[test]
fn shortened_run_clips_events() {
    let mut s = builtin("blockage").unwrap();
    s.duration_s = 5.0;
    let sched = s.schedule(1.0).unwrap();
    assert!(close(sched.capacity_mbps(), 450.0 + 1400.0 * 3.0 / 5.0));
}

#[test]
fn unknown_name_lists_builtins() {
    let e = Scenario::load("no-such-scenario").unwrap_err().to_string();
    assert!(e.contains("no-such-scenario") && e.contains("mobility"), "{e}");
}

#[test]
fn scenario_serialises_like_its_toml() {
    let s = builtin("blockage").unwrap();
    let text = toml::to_string(&s).unwrap();
    let back = Scenario::from_toml_str(&text, "blockage.toml").unwrap();
    assert_eq!(back, s);
}

#[test]
fn scenario_and_schedule_round_trip_through_json() {
    for name in builtin_names() {
        let s = builtin(name).unwrap();
        let back: Scenario = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s, "{name}");
        let sched = s.schedule(0.5).unwrap();
        let back: Schedule = serde_json::from_str(&serde_json::to_string(&sched).unwrap()).unwrap();
        // serde_json's default float parser may be off by one ulp; the shape must be exact.
        assert_eq!(back.paths.len(), sched.paths.len());
        for (a, b) in back.paths.iter().zip(&sched.paths) {
            assert_eq!(a.steps.len(), b.steps.len(), "{name}");
            for (x, y) in a.steps.iter().zip(&b.steps) {
                assert!(
                    x.t_s == y.t_s && x.scan == y.scan && close(x.rate_mbps, y.rate_mbps),
                    "{name}"
                );
            }
        }
    }
}

/// Correlation of the two paths' rates over the run (one sample per 100 ms step).
fn rate_correlation(a: &fbdt_scenario::PathTimeline, b: &fbdt_scenario::PathTimeline, duration_s: f64) -> f64 {
    let ts: Vec<f64> = (0..(duration_s * 10.0) as usize)
        .map(|k| k as f64 / 10.0 + 0.05)
        .collect();
    let xa: Vec<f64> = ts.iter().map(|&t| a.at(t).rate_mbps).collect();
    let xb: Vec<f64> = ts.iter().map(|&t| b.at(t).rate_mbps).collect();
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let (ma, mb) = (mean(&xa), mean(&xb));
    let cov: f64 = xa.iter().zip(&xb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = xa.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = xb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

#[test]
fn cotag_channels_have_their_capacity_and_correlation_sign() {
    for (name, sign) in [
        ("cotag-corr-pos", 1.0),
        ("cotag-corr-zero", 0.0),
        ("cotag-corr-neg", -1.0),
    ] {
        let mut s = builtin(name).unwrap();
        // 30 s is 300 steps of a chain with mean dwell 1 s: too short to pin the mean or the
        // correlation down, so look at a long run of the same model.
        s.duration_s = 3_000.0;
        let sched = s.schedule(1.0).unwrap();
        let cap = sched.capacity_mbps();
        assert!((cap - 1300.0).abs() < 40.0, "{name}: {cap}");
        let (a, b) = (sched.path("ap1").unwrap(), sched.path("ap2").unwrap());
        let c = rate_correlation(a, b, s.duration_s);
        // States correlate with ±0.34; the Gaussian spread within a state dilutes the rate
        // correlation to 0.34 · 350² / (350² + (100² + 30²)/2) ≈ 0.32.
        assert!((c - 0.32 * sign).abs() < 0.08, "{name}: rate correlation {c}");
        for st in a.steps.iter().chain(&b.steps) {
            assert!((0.0..=2000.0).contains(&st.rate_mbps), "{name}: {}", st.rate_mbps);
        }
    }
}
