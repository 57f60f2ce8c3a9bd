use std::collections::BTreeMap;

use super::claims::beats;
use super::*;

fn fid() -> RunFidelity {
    RunFidelity::from_runs(
        &[],
        Vec::new(),
        0.1,
        &fbdt_emu::calibrate::ScaleSource::Given,
        Vec::new(),
    )
}

fn point(corr: &str, lat: f64, v: &[(&str, f64, bool)]) -> Point {
    Point {
        correlation: corr.into(),
        per: 0.0,
        latency_ms: lat,
        load_avg: None,
        capacity_mbps: 100.0,
        schemes: v
            .iter()
            .map(|&(s, m, f)| PointScheme {
                scheme: s.into(),
                faithful: f,
                unfaithful_reasons: Vec::new(),
                goodput_mbps: m,
                burst_mbps: None,
                time_to_volume_s: None,
                link_utilisation: BTreeMap::new(),
                tcp_retransmissions: None,
                coding_overhead: None,
                cohorts_failed: None,
                seed: 0,
                runs: Vec::new(),
            })
            .collect(),
        fidelity: fid(),
    }
}

#[test]
fn unfaithful_points_are_never_judged() {
    let pts = vec![
        point(
            "neg",
            0.0,
            &[
                ("cotag+T=1", 50.0, true),
                ("dual-rr", 40.0, true),
                ("mptcp", 60.0, false),
            ],
        ),
        point(
            "zero",
            0.0,
            &[
                ("cotag+T=1", 50.0, false),
                ("dual-rr", 90.0, true),
                ("mptcp", 60.0, true),
            ],
        ),
    ];
    let c = claims(&pts);
    assert_eq!((c[0].verdict, c[0].judged, c[0].unfaithful), (Verdict::Pass, 1, 1));
    assert_eq!(
        (c[1].verdict, c[1].judged, c[1].unfaithful),
        (Verdict::Unfaithful, 0, 2)
    );
    assert_eq!(c[2].verdict, Verdict::Unfaithful);
}

#[test]
fn best_period_wins_and_trends_are_judged() {
    let pts = vec![
        point(
            "neg",
            0.0,
            &[
                ("cotag+T=1", 40.0, true),
                ("cotag+T=2", 45.0, true),
                ("dual-rr", 50.0, true),
                ("mptcp", 80.0, true),
            ],
        ),
        point(
            "zero",
            0.0,
            &[
                ("cotag+T=1", 50.0, true),
                ("dual-rr", 50.0, true),
                ("mptcp", 80.0, true),
            ],
        ),
        point(
            "pos",
            0.0,
            &[
                ("cotag+T=1", 60.0, true),
                ("dual-rr", 50.0, true),
                ("mptcp", 80.0, true),
            ],
        ),
        point(
            "pos",
            5.0,
            &[
                ("cotag+T=1", 54.0, true),
                ("dual-rr", 25.0, true),
                ("mptcp", 40.0, true),
            ],
        ),
    ];
    let c = claims(&pts);
    assert_eq!(c[0].verdict, Verdict::Miss);
    assert!(c[0].detail.contains("2 of 4"), "{}", c[0].detail);
    assert_eq!(c[2].verdict, Verdict::Pass, "{}", c[2].detail);
    assert_eq!((c[3].verdict, c[3].judged), (Verdict::Pass, 1), "{}", c[3].detail);
}

fn run(seed: u64, mbps: f64, faithful: bool) -> PointScheme {
    PointScheme {
        scheme: "dual-rr".into(),
        faithful,
        unfaithful_reasons: if faithful { Vec::new() } else { vec!["late".into()] },
        goodput_mbps: mbps / 2.0,
        burst_mbps: Some(mbps),
        time_to_volume_s: None,
        link_utilisation: BTreeMap::from([("ap1".to_string(), mbps / 100.0)]),
        tcp_retransmissions: Some(seed * 10),
        coding_overhead: None,
        cohorts_failed: None,
        seed,
        runs: Vec::new(),
    }
}

#[test]
fn repeated_runs_count_when_most_are_faithful_and_only_those_are_averaged() {
    let c = PointScheme::combine(vec![run(1, 80.0, true), run(2, 20.0, false), run(3, 100.0, true)]);
    assert!(c.faithful);
    assert_eq!(c.faithful_runs(), (2, 3));
    assert_eq!(c.mbps(), 90.0);
    assert_eq!(c.goodput_mbps, 45.0);
    assert_eq!(c.tcp_retransmissions, Some(20));
    assert_eq!(c.time_to_volume_s, None, "no counted run delivered the volume");
    assert!((c.link_utilisation["ap1"] - 0.9).abs() < 1e-12);
    assert_eq!(c.unfaithful_reasons, vec!["seed 2: late".to_string()]);
    assert_eq!(c.runs.len(), 3);

    let timed = |seed, t: Option<f64>, faithful| PointScheme {
        time_to_volume_s: t,
        ..run(seed, 50.0, faithful)
    };
    let c = PointScheme::combine(vec![
        timed(1, Some(3.0), true),
        timed(2, None, false),
        timed(3, Some(4.0), true),
    ]);
    assert_eq!(c.time_to_volume_s, Some(3.5), "the unfaithful run is not counted");
    let c = PointScheme::combine(vec![
        timed(1, Some(3.0), true),
        timed(2, None, true),
        timed(3, Some(4.0), true),
    ]);
    assert_eq!(c.time_to_volume_s, None, "one counted run never delivered the volume");

    let c = PointScheme::combine(vec![run(1, 80.0, true), run(2, 20.0, false)]);
    assert!(!c.faithful, "one of two is not a majority");
    assert_eq!(c.mbps(), 50.0, "an unfaithful cell shows the mean of all its runs");

    let cotag = |seed, mbps, faithful| PointScheme {
        scheme: "cotag+T=1".into(),
        ..run(seed, mbps, faithful)
    };
    let mut p = point("pos", 1.0, &[]);
    p.schemes = vec![
        PointScheme::combine(vec![cotag(1, 90.0, true), cotag(2, 50.0, true), cotag(3, 95.0, true)]),
        PointScheme::combine(vec![run(1, 80.0, true), run(2, 60.0, true), run(3, 10.0, false)]),
    ];
    let c = beats(&[p], "dual-rr");
    assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
    assert!(c.detail.ends_with("in 1 of 2 paired faithful runs"), "{}", c.detail);

    let single = PointScheme::combine(vec![run(7, 33.0, true)]);
    assert!(single.runs.is_empty());
    assert_eq!((single.seed, single.faithful_runs()), (7, (1, 1)));
}
