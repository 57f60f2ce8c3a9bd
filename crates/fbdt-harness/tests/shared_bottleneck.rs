//! Issue 40: the shared bottleneck and coupled congestion control, in the simulator's TCP
//! model (deterministic: what `fbdt-lab run shared-bottleneck --model tcp` measures, the
//! built-in as it is — at a tenth of the rates its 1000-packet queue is 600 ms and coupling
//! no longer holds a scheme to 1.1 × the TCP's share, docs/simulator.md). The bounds are
//! the targets and the measured figures' order; docs/simulator.md has the figures.

use fbdt_harness::backend::{Backend, Outcome};
use fbdt_harness::results::bottleneck::BottleneckShares;
use fbdt_harness::sim::{sim_params, SimBackend};
use fbdt_harness::traffic::Traffic;
use fbdt_harness::TestbedLimits;
use fbdt_scenario::Scenario;
use fbdt_sim::PathModel;

fn backend(scenario: &Scenario, model: PathModel, scale: f64) -> SimBackend {
    let limits = TestbedLimits {
        tcp_buffer_max: fbdt_emu::TestbedOptions::default().tcp_buffer_max,
    };
    SimBackend {
        params: sim_params(scenario, model, 0, &limits),
        scale,
        limits,
        bar: indicatif::ProgressBar::hidden(),
    }
}

fn shared_bottleneck() -> Scenario {
    Scenario::load("shared-bottleneck").unwrap()
}

/// The scheme's and the competing TCP's shares over one run.
fn shares(scheme: &str) -> BottleneckShares {
    let s = shared_bottleneck();
    let out = backend(&s, PathModel::Tcp, 1.0).run(&s, scheme, Traffic::Bulk, 1).unwrap();
    BottleneckShares::pool(out.bottleneck.as_ref()).expect("a shared bottleneck reports shares")
}

/// Two single-path Cubic TCPs through one drop-tail link share it: the shared queue is one
/// queue (the check of the model itself).
#[test]
fn two_tcps_share_the_link_fairly() {
    let s = shares("tcp:wifi");
    assert_eq!(s.flows.len(), 2);
    assert!(s.jain_index >= 0.95, "{s:?}");
    // Together they fill the 200 Mbit/s link, less slow start.
    let total: f64 = s.flows.iter().map(|f| f.mbps).sum();
    assert!(total > 0.9 * 200.0 && total <= 200.0 * 1.001, "{total}");
}

/// Uncoupled, a two-path scheme whose paths are window-limited (the meta layer) runs two
/// Cubic flows and takes more than the competing TCP's share (1.88 × measured); coupled, the
/// issue's target is no more than 1.1 × the TCP's and Jain's index ≥ 0.95.
#[test]
#[ignore = "issue 40, open: against the competing Cubic no coupling reaches 1.1 x over 30 s. Round 5 (after the \
            model fixes: one reduction per loss episode, growth only while cwnd-limited, drops out of the queue, \
            the shared link's rate in TCP_INFO): mp:minrtt 2.37 x uncoupled, +coupled (LIA) 2.17 (Jain 0.880), \
            +coupled=cubic (coupled Cubic with HyStart) 1.71 (0.936); fbdt+window=paper+coupled 2.64, \
            =cubic 3.21; round 4's LIA: 2.88 (0.810). Over 120 s LIA gives 0.91 (0.998), coupled Cubic 1.86: \
            the 30-s excess is the start. docs/simulator.md, round 5"]
fn coupling_gives_back_what_two_uncoupled_paths_take() {
    let free = shares("mp:minrtt");
    let coupled = shares("mp:minrtt+coupled");
    let ratio = |s: &BottleneckShares| s.scheme_to_tcp.unwrap();
    assert!(ratio(&free) > 1.3, "uncoupled: {free:?}");
    assert!(ratio(&coupled) <= 1.1, "coupled: {coupled:?}");
    assert!(coupled.jain_index >= 0.95, "coupled: {coupled:?}");
}

/// On RFC 6356's own terms (every flow Reno: the scenario's `congestion_control = "reno"`,
/// the competitor's too), coupling should give back most of what two uncoupled paths take:
/// measured 2.02 × the TCP's share uncoupled, 1.09 coupled (round 4; 1.31 in round 3),
/// Jain 0.897 → 0.998. The bounds stay that order (coupled below uncoupled, Jain ≥ 0.95).
/// Round 5's model fixes (docs/simulator.md) moved both: uncoupled 1.67 (Jain 0.940), coupled
/// 1.90 (0.913) — the 30-s figure is set by the start, not by LIA's increase.
#[test]
#[ignore = "issue 40, open: after round 5's model fixes LIA against Reno takes 1.90 x the TCP's share over 30 s \
            (Jain 0.913), uncoupled 1.67 (0.940); round 4 measured 1.09 / 2.02 on the unfixed model. docs/simulator.md"]
fn coupling_gives_back_most_against_a_reno_competitor() {
    let mut s = shared_bottleneck();
    s.congestion_control = "reno".to_string();
    let b = backend(&s, PathModel::Tcp, 1.0);
    let shares = |scheme: &str| {
        let out = b.run(&s, scheme, Traffic::Bulk, 1).unwrap();
        BottleneckShares::pool(out.bottleneck.as_ref()).expect("a shared bottleneck reports shares")
    };
    let free = shares("mp:minrtt");
    let coupled = shares("mp:minrtt+coupled");
    let ratio = |s: &BottleneckShares| s.scheme_to_tcp.unwrap();
    assert!(ratio(&free) > 1.3, "uncoupled: {free:?}");
    assert!(ratio(&coupled) < ratio(&free), "coupled {coupled:?} uncoupled {free:?}");
    assert!(coupled.jain_index >= 0.95, "coupled: {coupled:?}");
}

/// On disjoint paths nothing is shared: coupling keeps at least 0.95 of the uncoupled
/// goodput (los, a tenth of the rates, 10 s).
#[test]
fn coupling_costs_little_on_disjoint_paths() {
    let mut s = Scenario::load("los").unwrap();
    s.duration_s = 10.0;
    let b = backend(&s, PathModel::Tcp, 0.1);
    let run = |scheme: &str| -> Outcome { b.run(&s, scheme, Traffic::Bulk, 1).unwrap() };
    for scheme in ["fbdt", "mp:minrtt"] {
        let free = run(scheme).goodput_mbps;
        let coupled = run(&format!("{scheme}+coupled"));
        assert!(coupled.bottleneck.is_none());
        assert!(coupled.goodput_mbps >= 0.95 * free, "{scheme}: {} of {free}", coupled.goodput_mbps);
    }
}

/// What cannot carry the shared link or the coupling says so.
#[test]
fn what_cannot_model_it_refuses_it() {
    let s = shared_bottleneck();
    let pipe = backend(&s, PathModel::Pipe, 0.1).run(&s, "fbdt", Traffic::Bulk, 1);
    let msg = format!("{:#}", anyhow::Error::from(pipe.unwrap_err()));
    assert!(msg.contains("--model tcp"), "{msg}");
    let los = Scenario::load("los").unwrap();
    let tcp = backend(&los, PathModel::Tcp, 0.1).run(&los, "tcp:wifi+coupled", Traffic::Bulk, 1);
    let msg = format!("{:#}", anyhow::Error::from(tcp.unwrap_err()));
    assert!(msg.contains("fbdt and mp:*"), "{msg}");
    let bad = fbdt_harness::scheme::runtime_options("fbdt+coupled=olia", &los).unwrap_err();
    assert!(format!("{bad:#}").contains("expected lia, shared, cubic or off"), "{bad:#}");
    // The simulator has no shared-bottleneck detector: `+coupled=shared` is the testbed's.
    let shared = backend(&s, PathModel::Tcp, 0.1).run(&s, "fbdt+coupled=shared", Traffic::Bulk, 1);
    let msg = format!("{:#}", anyhow::Error::from(shared.unwrap_err()));
    assert!(msg.contains("`+coupled=shared` run only on the emulated testbed"), "{msg}");
}
