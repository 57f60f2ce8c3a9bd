//! The testbed fault campaign (root): FBDT through a blackhole and a reset of path 0 (the
//! path that carried the HELLO) on the emulated `tc-normal`. What is asserted does not
//! depend on the host's speed: the session survives, nothing is lost or duplicated, the
//! longest gap ends before the run does, and the path carries data again after its return.
//! The gap's size against the 50 ms bound is the campaign's figure, not a test (a busy
//! 2-core host stretches it; the monitors say so in `faithful`).

use fbdt_harness::faults::{EmuCampaign, FaultKind};
use fbdt_scenario::Scenario;

#[test]
fn fbdt_survives_a_blackhole_and_a_reset_of_path_0_on_the_testbed() {
    if let Some(why) = fbdt_emu::skip_reason() {
        eprintln!("SKIP: the emulated testbed needs root: {why}");
        return;
    }
    let mut scenario = Scenario::load("tc-normal").unwrap();
    scenario.duration_s = 6.0;
    let campaign = EmuCampaign {
        scenario: &scenario,
        scale: 0.05,
        testbed: fbdt_emu::TestbedOptions::default(),
        schemes: vec!["fbdt".into()],
        // Runs 0 and 1: kind i mod 2 on path (i div 2) mod 2 = path 0.
        kinds: vec![FaultKind::Blackhole, FaultKind::Reset],
        runs: 2,
        first: 0,
        seed: 1,
    };
    let runs = campaign.run(&indicatif::ProgressBar::hidden()).unwrap();
    assert_eq!(runs.len(), 2);
    let duration_ms = (scenario.duration_s * 1e3) as u64;
    for (r, kind) in runs.iter().zip([FaultKind::Blackhole, FaultKind::Reset]) {
        let f = &r.plan[0];
        assert_eq!((f.kind, f.path_index), (kind, 0), "{r:?}");
        assert_eq!(r.error, None, "{r:?}");
        assert!(r.survived, "{r:?}");
        assert_eq!((r.bytes_lost, r.bytes_duplicated), (0, 0), "{r:?}");
        assert!(r.bytes_delivered > 0, "{r:?}");
        // Finite: the stream went on after the gap, well before the run's end.
        let gap_end_ms = (r.max_gap_at_s * 1e3) as u64 + r.max_gap_ms;
        assert!(gap_end_ms < duration_ms, "{r:?}");
        assert!(r.reuse_after_return_ms.is_some(), "path 0 never carried again: {r:?}");
        assert!(r.faithful.is_some(), "{r:?}");
        assert_eq!(r.reset_took_ms.is_some(), kind == FaultKind::Reset, "{r:?}");
    }
}
