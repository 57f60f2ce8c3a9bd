//! A driver that comes late: the testbed's server loop was held up for more than a period
//! (issue 44). The gateway forms the cohort when it is called and gives it its one period of
//! sending from then, instead of closing it with its send interval already over (discarded
//! unsent, every packet lost) or closing one cohort per passed boundary at once (the APs'
//! label rules then flush one with the next-but-one).

use cotag::wire::{CodedPacket, Priority};
use cotag::{Gateway, GatewayConfig};

const T: u64 = 1_000;

fn gateway(packets: usize, at: u64) -> Gateway {
    let mut g = Gateway::new(GatewayConfig {
        period_us: T,
        low_factor: 0.0,
        ..GatewayConfig::default()
    })
    .unwrap();
    for i in 0..packets {
        g.handle_packet(&[i as u8; 100], at).unwrap();
    }
    g
}

fn drain(g: &mut Gateway, t: u64) -> Vec<CodedPacket> {
    (0..2)
        .flat_map(|link| {
            let mut out = Vec::new();
            while let Some(b) = g.poll_transmit(link, t).unwrap() {
                out.push(CodedPacket::parse(&b).unwrap());
            }
            out
        })
        .collect()
}

#[test]
fn a_cohort_formed_late_is_sent_not_discarded() {
    // Packets arrive in [0, T): the cohort closes at T and would be sent in [T, 2T). The
    // driver's next call comes at 2.5 T, after that interval.
    let mut g = gateway(6, 10);
    let sent = drain(&mut g, 2 * T + T / 2);
    assert_eq!(sent.len(), 6, "all six Highs are sent");
    assert!(sent.iter().all(|c| c.label == 0 && c.priority == Priority::High));
    assert_eq!(g.stats().high_given_up, 0);
    assert_eq!(g.stats().late_closes, 1);
    assert_eq!(g.stats().cohorts, 1);
}

#[test]
fn a_late_cohort_keeps_one_period_of_sending_from_when_it_was_formed() {
    let mut g = gateway(4, 10);
    let formed = 3 * T + 100;
    g.handle_timeout(formed);
    // Sendable until formed + T, discarded then.
    g.handle_timeout(formed + T - 1);
    assert_eq!((g.cohorts_pending(), g.stats().high_given_up), (1, 0));
    g.handle_timeout(formed + T);
    assert_eq!(g.stats().high_given_up, 4, "unsent at the end of its own interval");
    assert_eq!(g.cohorts_pending(), 0);
}

#[test]
fn boundaries_passed_while_late_close_one_cohort_and_the_rest_waits_for_the_next() {
    // 200 packets, cohorts of at most 128: on time, 128 close at T and 72 at 2T. Called
    // first at 3.5 T, the gateway closes one cohort then and the rest at the next boundary
    // (4 T) — not two cohorts at once, whose labels would flush each other at the APs.
    let mut g = gateway(200, 10);
    g.handle_timeout(3 * T + T / 2);
    assert_eq!(g.stats().cohorts, 1);
    assert_eq!(g.queued(), 72);
    assert_eq!(g.poll_timeout(), Some(4 * T));
    g.handle_timeout(4 * T);
    assert_eq!(g.stats().cohorts, 2);
    assert_eq!(g.stats().late_closes, 1, "the second closed on its boundary");
}

#[test]
fn an_on_time_driver_sees_the_paper_s_interval() {
    // Called at every timeout it asks for: cohorts close on the boundary and are discarded
    // one period later, as before.
    let mut g = gateway(3, 10);
    assert_eq!(g.poll_timeout(), Some(T));
    g.handle_timeout(T);
    assert_eq!(g.poll_timeout(), Some(2 * T));
    g.handle_timeout(2 * T);
    assert_eq!(g.stats().high_given_up, 3);
    assert_eq!(g.stats().late_closes, 0);
}
