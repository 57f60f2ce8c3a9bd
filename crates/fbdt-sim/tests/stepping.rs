//! The stepping machine driven by hand: time never goes back, every wake-up is honoured,
//! and the outcome is the one `run` returns.

use fbdt_core::Config;
use fbdt_scenario::Scenario;
use fbdt_sim::{run, Sim, SimParams, SimScheme};

#[test]
fn stepping_by_hand_matches_run() {
    let mut s = Scenario::load("blockage").unwrap();
    s.duration_s = 2.0;
    let schedule = s.schedule(1.0).unwrap();
    let scheme = SimScheme::Session(Config::default());
    let params = SimParams::default();

    let mut sim = Sim::new(&schedule, &scheme, &params).unwrap();
    let mut steps = 0u64;
    loop {
        sim.step().unwrap();
        steps += 1;
        if sim.is_over() {
            break;
        }
        let (now, wake) = (sim.now(), sim.next_wake());
        sim.advance().unwrap();
        assert_eq!(sim.now(), wake.max(now), "advance jumps to the next wake-up");
        assert!(sim.now() >= now, "time never goes back");
    }
    let by_hand = sim.finish();
    let by_run = run(&schedule, &scheme, &params, |_| {}).unwrap();
    assert_eq!(by_hand.steps, steps);
    assert_eq!(by_hand.steps, by_run.steps);
    assert_eq!(by_hand.log, by_run.log);
    assert_eq!(by_hand.series, by_run.series);
    assert_eq!(by_hand.bytes_delivered, by_run.bytes_delivered);
}

#[test]
fn a_tcp_scheme_on_a_missing_path_is_an_error() {
    let s = Scenario::load("los").unwrap();
    let schedule = s.schedule(1.0).unwrap();
    let scheme = SimScheme::Tcp(9);
    let params = SimParams::default();
    assert!(Sim::new(&schedule, &scheme, &params).is_err());
}

#[test]
fn a_window_ack_rounded_up_to_now_is_taken_not_left_pending() {
    // This run once ended in the livelock guard at t = 9.528842 s: `next_event` rounded an
    // ACK up to the current µs, `advance` compared in seconds and left it pending.
    let mut s = Scenario::load("tc-delay-wigig").unwrap();
    s.duration_s = 10.0;
    let schedule = s.schedule(1.0).unwrap();
    let mut cfg = Config::meta(fbdt_core::SchedulerKind::Musher);
    cfg.recv_buffer = 32 * 1024 * 1024;
    let out = run(&schedule, &SimScheme::Session(cfg), &SimParams::default(), |_| {}).unwrap();
    assert!(out.bytes_delivered > 0);
}
