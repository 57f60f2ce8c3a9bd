use fbdt_scenario::{Event, EventKind, PathSpec, RateSpec, RateStep, Scenario};
use proptest::prelude::*;

fn scenario(paths: Vec<PathSpec>, events: Vec<Event>, duration_s: f64, seed: u64) -> Scenario {
    Scenario {
        name: "prop".into(),
        description: String::new(),
        duration_s,
        seed,
        congestion_control: "cubic".into(),
        paths,
        events,
        reference: Default::default(),
        bottleneck: None,
    }
}

/// Steps with increasing times starting at 0, as a user could write them.
fn steps() -> impl Strategy<Value = Vec<RateStep>> {
    prop::collection::vec((0.001f64..5.0, 0.0f64..2000.0), 1..20).prop_map(|v| {
        let mut t = 0.0;
        v.into_iter()
            .enumerate()
            .map(|(i, (gap, mbps))| {
                if i > 0 {
                    t += gap;
                }
                RateStep { at_s: t, mbps }
            })
            .collect()
    })
}

fn rate() -> impl Strategy<Value = RateSpec> {
    prop_oneof![
        (0.0f64..5000.0).prop_map(|mbps| RateSpec::Constant { mbps }),
        (steps(), prop::option::of(0.0f64..10.0)).prop_map(|(steps, extra)| {
            let last = steps.last().map_or(0.0, |s| s.at_s);
            RateSpec::Steps {
                steps,
                period_s: extra.map(|e| last + 0.01 + e),
            }
        }),
        (0.0f64..1000.0, 0.0f64..1000.0, 0.01f64..3.0).prop_map(|(a, b, step_s)| {
            RateSpec::Random {
                min_mbps: a.min(b),
                max_mbps: a.max(b),
                step_s,
            }
        }),
        (0.0f64..100.0, 0.01f64..5.0, 0.01f64..5.0, 0.01f64..2.0, any::<bool>()).prop_map(
            |(lo, high_s, low_s, step_s, start_low)| {
                RateSpec::Alternating {
                    high_min_mbps: 1000.0 + lo,
                    high_max_mbps: 1500.0,
                    high_s,
                    low_min_mbps: lo,
                    low_max_mbps: 500.0,
                    low_s,
                    step_s,
                    start_low,
                }
            }
        ),
    ]
}

fn event(path: String) -> impl Strategy<Value = Event> {
    let kind = prop_oneof![
        (0.01f64..3.0).prop_map(|d| EventKind::Outage { duration_s: d }),
        (0.0f64..3000.0).prop_map(|mbps| EventKind::Rate { mbps }),
        (0.0f64..0.5).prop_map(|loss| EventKind::Loss { loss }),
        (0.0f64..100.0).prop_map(|delay_ms| EventKind::Delay { delay_ms }),
        (1u32..=64, 0.01f64..1.0, 0.1f64..10.0, 0.01f64..3.0).prop_map(|(stations, load, txop_ms, duration_s)| {
            EventKind::Contention {
                stations,
                load,
                txop_ms,
                duration_s,
            }
        }),
    ];
    (
        0.0f64..20.0,
        kind,
        prop::option::of(3.5f64..8.0),
        prop::option::of(0.1f64..30.0),
    )
        .prop_map(move |(at_s, kind, every, until_extra)| Event {
            at_s,
            path: path.clone(),
            kind,
            every_s: if kind.duration_s().is_some() { every } else { None },
            until_s: until_extra.map(|u| at_s + u),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_valid_scenarios_schedule_with_invariants(
        rates in prop::collection::vec(rate(), 1..4),
        delays in prop::collection::vec(0.0f64..50.0, 4),
        ev in prop::option::of(event("p0".into())),
        duration_s in 0.5f64..40.0,
        seed in any::<u64>(),
        scale in 0.01f64..4.0,
    ) {
        let paths: Vec<PathSpec> = rates.into_iter().enumerate().map(|(i, rate)| PathSpec {
            name: format!("p{i}"), rate, delay_ms: delays[i], loss: 0.0, queue_packets: 1000, radio: None, bursts: None,
        }).collect();
        let s = scenario(paths, ev.into_iter().collect(), duration_s, seed);
        let sched = s.schedule(scale).unwrap();
        prop_assert_eq!(&sched, &s.schedule(scale).unwrap());
        let mut cap = 0.0;
        for p in &sched.paths {
            prop_assert!(!p.steps.is_empty());
            prop_assert_eq!(p.steps[0].t_s, 0.0);
            for w in p.steps.windows(2) {
                prop_assert!(w[0].t_s < w[1].t_s);
                prop_assert!(w[0].rate_mbps != w[1].rate_mbps || w[0].delay_ms != w[1].delay_ms
                    || w[0].loss != w[1].loss || w[0].scan != w[1].scan);
            }
            for st in &p.steps {
                prop_assert!(st.t_s < duration_s);
                prop_assert!(st.rate_mbps >= 0.0 && st.rate_mbps.is_finite());
                prop_assert!(st.rate_mbps <= 5000.0 * scale);
                prop_assert!((0.0..1.0).contains(&st.loss));
            }
            let m = p.mean_rate_mbps(duration_s);
            prop_assert!(m >= 0.0 && m.is_finite());
            cap += m;
            // at() agrees with the step list.
            for st in &p.steps {
                prop_assert_eq!(p.at(st.t_s), *st);
            }
        }
        prop_assert!((sched.capacity_mbps() - cap).abs() <= 1e-9 * cap.max(1.0));
    }

    #[test]
    fn scale_multiplies_capacity(rate in rate(), scale in 0.01f64..4.0) {
        let p = PathSpec { name: "a".into(), rate, delay_ms: 1.0, loss: 0.0, queue_packets: 10, radio: None, bursts: None };
        let s = scenario(vec![p], vec![], 10.0, 3);
        let one = s.schedule(1.0).unwrap().capacity_mbps();
        let k = s.schedule(scale).unwrap().capacity_mbps();
        prop_assert!((k - one * scale).abs() <= 1e-9 * (one * scale).max(1.0));
    }
}

proptest! {
    /// A hold delays by less than `hold_ms`, keeps order, and leaves what reaches the end
    /// after it alone.
    #[test]
    fn a_hold_delays_within_itself_and_keeps_order(
        every_ms in 0.1f64..100.0,
        hold_share in 0.01f64..0.99,
        t_s in 0.0f64..100.0,
        dt_s in 0.0f64..0.05,
    ) {
        let b = fbdt_scenario::Bursts { every_ms, hold_ms: every_ms * hold_share };
        let (r, later) = (b.release_s(t_s), b.release_s(t_s + dt_s));
        prop_assert!(r >= t_s && r - t_s <= b.hold_ms / 1e3 + 1e-9, "{t_s} released at {r}");
        prop_assert!(later >= r, "order: {t_s} → {r}, {} → {later}", t_s + dt_s);
        let phase_ms = (t_s * 1e3).rem_euclid(every_ms);
        if phase_ms > b.hold_ms + 1e-6 {
            prop_assert_eq!(r, t_s);
        } else if phase_ms + 1e-6 < b.hold_ms {
            let end_ms = (r * 1e3).rem_euclid(every_ms);
            prop_assert!((end_ms - b.hold_ms).abs() < 1e-6, "released at the hold's end, phase {end_ms} ms");
        }
    }
}
