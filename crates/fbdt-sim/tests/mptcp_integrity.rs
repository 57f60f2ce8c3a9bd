//! Every meta-layer scheduler delivers exactly the bytes sent, in order, once — whatever the
//! paths do (random rates, delays, outages, connection kills while path 0 lives). The
//! client checks every byte against the sender's pattern.

use fbdt_core::{Config, SchedulerKind};
use fbdt_sim::{run, SimScheme};
use proptest::prelude::*;

mod common;
use common::{path_plan, setup, PathPlan};

fn scheduler() -> impl Strategy<Value = SchedulerKind> {
    prop_oneof![
        Just(SchedulerKind::MinRtt),
        Just(SchedulerKind::Blest),
        Just(SchedulerKind::Ecf),
        Just(SchedulerKind::RoundRobin),
        Just(SchedulerKind::Redundant),
        (0u8..=100).prop_map(SchedulerKind::Fixed),
        Just(SchedulerKind::Amuse),
        Just(SchedulerKind::Musher),
    ]
}

fn config(kind: SchedulerKind, seg: usize, rcvbuf: usize, seed: u64) -> Config {
    let mut c = Config::meta(kind);
    c.segment_size = seg;
    c.recv_buffer = rcvbuf.max(2 * seg);
    c.seed = seed;
    c
}

fn check(
    plans: Vec<PathPlan>,
    kills: Vec<(f64, usize, Option<f64>)>,
    size: u64,
    cfg: Config,
) -> Result<(), TestCaseError> {
    let (schedule, params) = setup(&plans, kills, size, 300.0);
    let out = run(&schedule, &SimScheme::Session(cfg.clone()), &params, |_| {})
        .map_err(|e| TestCaseError::fail(format!("{:?}: {e}", cfg.meta_config().map(|m| &m.scheduler))))?;
    prop_assert!(
        out.completed_at_s.is_some(),
        "{:?}: transfer of {} bytes did not complete: delivered {}",
        cfg.meta_config().map(|m| &m.scheduler),
        size,
        out.bytes_delivered
    );
    prop_assert_eq!(out.bytes_delivered, size);
    let client = out.client.expect("stats");
    prop_assert_eq!(client.receiver.bytes_delivered, size);
    prop_assert_eq!(client.receiver.bytes_read, size);
    let server = out.server.expect("stats");
    prop_assert_eq!(
        server.sender.bytes_sent,
        size,
        "each byte's first transmission is counted once"
    );
    prop_assert_eq!(server.sender.bytes_acked, size);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn every_scheduler_delivers_every_byte_once_in_order(
        plans in prop::collection::vec(path_plan(), 1..=4),
        kills in prop::collection::vec((0.0f64..3.0, 0usize..4, prop::option::of(0.0f64..1.0)), 0..3),
        size in prop_oneof![Just(0u64), 1u64..100_000, 100_000u64..8_000_000],
        kind in scheduler(),
        seg in prop_oneof![Just(1448usize), Just(16384), 1usize..70_000],
        rcvbuf in prop_oneof![Just(256 * 1024usize), Just(6 << 20), 1usize..4_000_000],
        seed in any::<u64>(),
    ) {
        check(plans, kills, size, config(kind, seg, rcvbuf, seed))?;
    }
}

/// Each scheduler once on a fixed hard case: two paths, both with outages, one killed and
/// reconnected, a small shared window.
#[test]
fn each_scheduler_survives_outages_and_a_kill() {
    let kinds = [
        SchedulerKind::MinRtt,
        SchedulerKind::Blest,
        SchedulerKind::Ecf,
        SchedulerKind::RoundRobin,
        SchedulerKind::Redundant,
        SchedulerKind::Fixed(77),
        SchedulerKind::Fixed(0),
        SchedulerKind::Fixed(100),
        SchedulerKind::Amuse,
        SchedulerKind::Musher,
    ];
    for kind in kinds {
        let plans = vec![
            PathPlan {
                rate_mbps: 500.0,
                delay_ms: 3.0,
                outages: vec![(0.3, 0.5)],
            },
            PathPlan {
                rate_mbps: 1600.0,
                delay_ms: 1.0,
                outages: vec![(0.1, 0.4), (1.0, 1.0)],
            },
            PathPlan {
                rate_mbps: 50.0,
                delay_ms: 20.0,
                outages: vec![],
            },
        ];
        check(
            plans,
            vec![(0.5, 1, Some(0.2)), (0.7, 2, None)],
            60_000_000,
            config(kind.clone(), 16384, 1 << 20, 1),
        )
        .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
    }
}
