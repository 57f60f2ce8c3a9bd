//! A reference log (after picoquic's multipath tests): 6 s of `blockage` — schedule changes,
//! protocol events, per-second goodput and the sender's counters. Any behaviour change shows
//! up as a diff; when the change is intended, regenerate with `UPDATE_GOLDEN=1 cargo test
//! -p fbdt-sim --test golden` and review the diff in the commit.

use fbdt_core::Config;
use fbdt_scenario::Scenario;
use fbdt_sim::{run, SimParams, SimScheme};

#[test]
fn blockage_matches_the_golden_log() {
    let mut s = Scenario::load("blockage").unwrap();
    s.duration_s = 6.0;
    let schedule = s.schedule(1.0).unwrap();
    let out = run(
        &schedule,
        &SimScheme::Session(Config::default()),
        &SimParams::default(),
        |_| {},
    )
    .unwrap();
    let mut log = out.log.join("\n");
    for (i, mbps) in out.per_second_mbps.iter().enumerate() {
        log.push_str(&format!("\nsecond {i}: {mbps:.1} Mbit/s"));
    }
    let st = out.server.unwrap().sender;
    log.push_str(&format!(
        "\nwindows {} realignments {} stalls {} path_stalls {} forward_changes {} redundant {} per_path {:?}\n",
        st.windows_loaded,
        st.realignments,
        st.window_stalls,
        st.path_stalls,
        st.forward_changes,
        st.redundant_bytes_sent,
        st.per_path_bytes_sent
    ));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/blockage-6s.log");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(path, &log).unwrap();
    }
    let golden = std::fs::read_to_string(path).expect("golden log missing: run with UPDATE_GOLDEN=1");
    assert_eq!(
        log, golden,
        "behaviour changed; if intended, regenerate with UPDATE_GOLDEN=1"
    );
}
