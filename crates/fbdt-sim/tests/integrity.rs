//! The receiver delivers exactly the bytes sent, in order, once — whatever the paths do.
//!
//! Random path behaviours: 1–4 paths with random rates, delays, outages and connection
//! kills (one path, the survivor, is never killed, so some path always lives); random
//! transfer sizes, segment sizes, window modes, redundancy waits, ACK byte thresholds
//! (per frame, the default, up to 1 MiB: sparse ACKs), frame budgets (one segment per
//! frame, the default, up to 5 ms: frames of many segments), and initial sequence
//! numbers (some just below 2^32, so the wrap is crossed), and either payload mode. The
//! client checks every byte against the sender's pattern (by value, or by identity with
//! the shared pattern's memory); a wrong, missing, duplicated or reordered byte fails.

use fbdt_core::{Config, FbdtConfig, SchemeConfig, WindowConfig};
use fbdt_sim::{run, Payload, SimParams, SimScheme};
use proptest::prelude::*;

mod common;
use common::{path_plan, setup, PathPlan};

fn config() -> impl Strategy<Value = Config> {
    (
        prop_oneof![Just(1448usize), Just(4096), 1usize..70_000],
        prop_oneof![Just(None), Just(Some(u32::MAX - 5_000)), any::<u32>().prop_map(Some)],
        prop_oneof![Just(0.0f64), Just(0.5), Just(1.0), Just(2.0)],
        any::<bool>(),
        any::<u64>(),
        prop_oneof![
            Just(0usize),
            Just(fbdt_core::config::DEFAULT_ACK_BYTES),
            1usize..1 << 20
        ],
        prop_oneof![Just(0u64), Just(250), 1u64..5_000],
    )
        .prop_map(|(seg, isn, rto, paper, seed, ack_bytes, frame_us)| {
            let mut fbdt = FbdtConfig {
                redundancy_wait: rto,
                frame_budget: fbdt_core::time::Duration::from_micros(frame_us),
                ..FbdtConfig::default()
            };
            if paper {
                fbdt.window = WindowConfig::Fixed((64 * 1024).max(seg));
            }
            Config {
                segment_size: seg,
                initial_seq: isn,
                seed,
                ack_bytes,
                scheme: SchemeConfig::Fbdt(fbdt),
                ..Config::default()
            }
        })
}

fn check(
    plans: Vec<PathPlan>,
    kills: Vec<(f64, usize, Option<f64>)>,
    size: u64,
    cfg: Config,
    payload: Payload,
) -> Result<(), TestCaseError> {
    let (schedule, mut params) = setup(&plans, kills, size, 120.0);
    params.payload = payload;
    let out = run(&schedule, &SimScheme::Session(cfg), &params, |_| {}).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        out.completed_at_s.is_some(),
        "transfer of {} bytes did not complete: delivered {}",
        size,
        out.bytes_delivered
    );
    prop_assert_eq!(out.bytes_delivered, size);
    // Every byte was verified, by value in the exact mode.
    prop_assert_eq!(out.verified.by_identity + out.verified.compared, size);
    if payload == Payload::Exact {
        prop_assert_eq!(out.verified.compared, size);
    }
    let client = out.client.expect("fbdt stats");
    prop_assert_eq!(client.receiver.bytes_delivered, size);
    prop_assert_eq!(client.receiver.bytes_read, size);
    let server = out.server.expect("fbdt stats");
    prop_assert_eq!(
        server.sender.bytes_sent,
        size,
        "each byte's first transmission is counted once"
    );
    prop_assert_eq!(server.sender.bytes_acked, size);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn every_byte_arrives_once_in_order(
        plans in prop::collection::vec(path_plan(), 1..=4),
        kills in prop::collection::vec((0.0f64..3.0, 0usize..4, prop::option::of(0.0f64..1.0)), 0..3),
        size in prop_oneof![Just(0u64), 1u64..100_000, 100_000u64..8_000_000],
        cfg in config(),
        payload in prop_oneof![Just(Payload::Shared), Just(Payload::Exact)],
    ) {
        check(plans, kills, size, cfg, payload)?;
    }
}

#[test]
fn a_path_killed_for_good_loses_nothing() {
    let plans = vec![
        PathPlan {
            rate_mbps: 100.0,
            delay_ms: 5.0,
            outages: vec![],
        },
        PathPlan {
            rate_mbps: 900.0,
            delay_ms: 1.0,
            outages: vec![],
        },
    ];
    check(
        plans,
        vec![(0.05, 1, None)],
        20_000_000,
        Config::default(),
        Payload::Shared,
    )
    .unwrap();
}

/// Issue 37: frames of up to 16 segments (a 5 ms frame budget on fast paths), ACKs only
/// every 256 KiB per path, and two of three paths killed mid-transfer (one for good):
/// the copies they held, several to a frame, are re-sent segment by segment and every
/// byte still arrives once, in order.
#[test]
fn frames_of_many_segments_and_sparse_acks_survive_path_death() {
    let plan = |rate_mbps, delay_ms, outages: &[(f64, f64)]| PathPlan {
        rate_mbps,
        delay_ms,
        outages: outages.to_vec(),
    };
    let plans = vec![
        plan(400.0, 2.0, &[(0.3, 0.2)]),
        plan(1400.0, 1.0, &[]),
        plan(900.0, 0.5, &[]),
    ];
    let mut cfg = Config {
        ack_bytes: 256 << 10,
        ..Config::default()
    };
    cfg.fbdt_mut().unwrap().frame_budget = fbdt_core::time::Duration::from_millis(5);
    for payload in [Payload::Shared, Payload::Exact] {
        check(
            plans.clone(),
            vec![(0.1, 1, None), (0.15, 2, Some(0.1))],
            60_000_000,
            cfg.clone(),
            payload,
        )
        .unwrap();
    }
}

#[test]
fn the_sequence_space_wraps() {
    let plans = vec![
        PathPlan {
            rate_mbps: 400.0,
            delay_ms: 2.0,
            outages: vec![(0.2, 0.3)],
        },
        PathPlan {
            rate_mbps: 1400.0,
            delay_ms: 1.0,
            outages: vec![(0.5, 0.5)],
        },
    ];
    // 8 MB starting 5,000 bytes below 2^32: almost every byte lives past the wrap.
    let cfg = Config {
        initial_seq: Some(u32::MAX - 5_000),
        ..Config::default()
    };
    check(plans, vec![], 8_000_000, cfg, Payload::Exact).unwrap();
}

#[test]
fn same_inputs_give_bit_identical_runs() {
    let s = fbdt_scenario::Scenario::load("mobility").unwrap();
    let mut s = s;
    s.duration_s = 3.0;
    let schedule = s.schedule(1.0).unwrap();
    let params = SimParams::default();
    let a = run(&schedule, &SimScheme::Session(Config::default()), &params, |_| {}).unwrap();
    let b = run(&schedule, &SimScheme::Session(Config::default()), &params, |_| {}).unwrap();
    assert_eq!(a.series, b.series);
    assert_eq!(a.log, b.log);
    assert_eq!(a.per_path_bytes, b.per_path_bytes);
    assert_eq!(a.steps, b.steps);
    assert_eq!(a.server, b.server);
}

/// The zero-copy payload mode changes how bytes are carried, not what happens: for FBDT,
/// the meta layer and a lone TCP, under both path models, a run is the same step for step
/// as with every byte generated, copied and compared — and the shared mode verified most
/// bytes by identity (they travelled as the shared pattern's own memory).
#[test]
fn both_payload_modes_give_identical_runs() {
    let mut s = fbdt_scenario::Scenario::load("blockage").unwrap();
    s.duration_s = 3.0;
    let schedule = s.schedule(1.0).unwrap();
    let schemes = [
        SimScheme::Session(Config::default()),
        SimScheme::meta(fbdt_core::SchedulerKind::MinRtt),
        SimScheme::Tcp(1),
    ];
    for model in fbdt_sim::PathModel::ALL {
        for scheme in &schemes {
            let outcome = |payload| {
                let params = SimParams {
                    model,
                    payload,
                    ..SimParams::default()
                };
                run(&schedule, scheme, &params, |_| {}).unwrap()
            };
            let (shared, exact) = (outcome(Payload::Shared), outcome(Payload::Exact));
            let what = format!("{model} {scheme:?}");
            assert!(shared.bytes_delivered > 10_000_000, "{what}");
            assert_eq!(shared.bytes_delivered, exact.bytes_delivered, "{what}");
            assert_eq!(shared.series, exact.series, "{what}");
            assert_eq!(shared.log, exact.log, "{what}");
            assert_eq!(shared.steps, exact.steps, "{what}");
            assert_eq!(shared.per_path_bytes, exact.per_path_bytes, "{what}");
            assert_eq!(shared.server, exact.server, "{what}");
            assert_eq!(shared.delay, exact.delay, "{what}");
            assert_eq!(exact.verified.compared, exact.bytes_delivered, "{what}");
            let v = shared.verified;
            assert_eq!(v.by_identity + v.compared, shared.bytes_delivered, "{what}");
            assert!(v.by_identity > shared.bytes_delivered / 2, "{what}: {v:?}");
        }
    }
}
