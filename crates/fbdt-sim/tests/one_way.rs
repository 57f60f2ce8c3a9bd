//! One-direction outages (`SimParams::one_way_outages`): a radio that loses only its uplink
//! or only its downlink. The session must carry on over the other path, deliver every byte
//! once, and use the path again once both directions are back.

use fbdt_core::Config;
use fbdt_scenario::{PathTimeline, Schedule, Step};
use fbdt_sim::{run, Direction, OneWayOutage, PathModel, SimError, SimParams, SimScheme};

fn schedule() -> Schedule {
    let path = |name: &str, delay_ms| PathTimeline {
        name: name.into(),
        steps: vec![Step {
            t_s: 0.0,
            rate_mbps: 40.0,
            delay_ms,
            loss: 0.0,
            scan: false,
        }],
        radio: None,
        bursts: None,
    };
    Schedule {
        duration_s: 20.0,
        scale: 1.0,
        bottleneck: None,
        paths: vec![path("a", 2.0), path("b", 1.0)],
    }
}

/// A 12 MB transfer (about 1.2 s on both paths, 2.4 s on one) with `cut`, both models.
fn transfer(cut: OneWayOutage) {
    for model in PathModel::ALL {
        let params = SimParams {
            model,
            transfer_bytes: Some(12_000_000),
            one_way_outages: vec![cut],
            ..SimParams::default()
        };
        let out = run(&schedule(), &SimScheme::Session(Config::default()), &params, |_| {}).unwrap();
        assert!(out.completed_at_s.is_some(), "{model}: {cut:?}: transfer did not complete");
        assert_eq!(out.bytes_delivered, 12_000_000, "{model}: {cut:?}");
        let v = out.verified;
        assert_eq!(v.by_identity + v.compared, 12_000_000, "{model}: {cut:?}: bytes unchecked");
        assert!(out.log.iter().any(|l| l.contains(" cut")), "{model}: the cut was not applied");
    }
}

#[test]
fn uplink_outage_on_either_path() {
    for path in 0..2 {
        transfer(OneWayOutage {
            path,
            direction: Direction::Up,
            at_s: 0.3,
            duration_s: 1.0,
        });
    }
}

#[test]
fn downlink_outage_on_either_path() {
    for path in 0..2 {
        transfer(OneWayOutage {
            path,
            direction: Direction::Down,
            at_s: 0.3,
            duration_s: 1.0,
        });
    }
}

/// An outage from the first instant: path 0 carries the handshake, and loses its uplink
/// before it is done.
#[test]
fn uplink_outage_during_the_handshake() {
    transfer(OneWayOutage {
        path: 0,
        direction: Direction::Up,
        at_s: 0.0,
        duration_s: 0.5,
    });
}

#[test]
fn an_outage_on_a_missing_path_is_an_error() {
    let params = SimParams {
        one_way_outages: vec![OneWayOutage {
            path: 2,
            direction: Direction::Down,
            at_s: 1.0,
            duration_s: 1.0,
        }],
        ..SimParams::default()
    };
    let err = run(&schedule(), &SimScheme::Session(Config::default()), &params, |_| {}).err();
    assert!(matches!(err, Some(SimError::NoSuchPath(2, 2))), "{err:?}");
}

/// With its uplink cut, a path's connection gets no ACKs: it stops once its window is full
/// (no trickle), FBDT sees the path stall and the stream goes on over the other path. (The
/// campaign's defect behind this, issue 41, needed tc-normal's rates and queues to show:
/// its regression test is fbdt-harness/tests/faults.rs; this one pins the behaviour on a
/// plain two-path schedule.)
#[test]
fn an_uplink_cut_stops_the_path_and_the_stream_goes_on() {
    let schedule = Schedule {
        duration_s: 4.0,
        ..schedule()
    };
    let params = SimParams {
        model: PathModel::Tcp,
        queue_bytes: vec![50 * 1500; 2],
        one_way_outages: vec![OneWayOutage {
            path: 0,
            direction: Direction::Up,
            at_s: 1.0,
            duration_s: 2.0,
        }],
        ..SimParams::default()
    };
    let scheme = SimScheme::Session(Config::default());
    let mut sim = fbdt_sim::Sim::new(&schedule, &scheme, &params).unwrap();
    let (mut arrived_at_2s, mut delivered_at_2s) = (None, 0);
    loop {
        sim.step().unwrap();
        let t = sim.now().as_secs_f64();
        if t >= 2.0 && arrived_at_2s.is_none() {
            arrived_at_2s = Some(sim.data_arrived()[0]);
            delivered_at_2s = sim.bytes_delivered();
        }
        if t >= 2.9 {
            break;
        }
        sim.advance().unwrap();
    }
    let (arrived, delivered) = (sim.data_arrived()[0], sim.bytes_delivered());
    assert_eq!(Some(arrived), arrived_at_2s, "the cut path kept carrying without ACKs");
    // 0.9 s on the other path alone (40 Mbit/s): well over a megabyte, not a trickle.
    assert!(delivered - delivered_at_2s > 2_000_000, "the stream stalled behind the cut path");
    let out = sim.finish();
    assert!(
        out.log.iter().any(|l| l.contains("PathStalled(PathId(0))")),
        "FBDT never saw the cut path stall"
    );
}
