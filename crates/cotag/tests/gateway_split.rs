//! How the gateway divides a cohort between the links when a driver drains one link before
//! the other at the same instant (the testbed's in-memory gateway → AP hop does).

use cotag::wire::{CodedPacket, Priority};
use cotag::{CohortSize, Gateway, GatewayConfig, HighSplit};

/// Everything the gateway sends on each link at `t`, link 0 drained first.
fn drain_in_order(g: &mut Gateway, t: u64) -> [Vec<CodedPacket>; 2] {
    [0, 1].map(|link| {
        std::iter::from_fn(|| g.poll_transmit(link, t).unwrap())
            .map(|b| CodedPacket::parse(&b).unwrap())
            .collect()
    })
}

fn count(ps: &[CodedPacket], p: Priority) -> usize {
    ps.iter().filter(|c| c.priority == p).count()
}

fn gateway(cfg: GatewayConfig, packets: usize) -> Gateway {
    let mut g = Gateway::new(cfg).unwrap();
    for i in 0..packets {
        g.handle_packet(&[i as u8; 100], 10).unwrap();
    }
    g
}

#[test]
fn low_extras_go_to_both_links_when_link_0_is_drained_first() {
    // One cohort of 8, closed at 1 000 µs; 1.0 × n_k = 8 Lows.
    let mut g = gateway(
        GatewayConfig {
            period_us: 1_000,
            low_factor: 1.0,
            ..GatewayConfig::default()
        },
        8,
    );
    let [l0, l1] = drain_in_order(&mut g, 1_000);
    assert_eq!((count(&l0, Priority::High), count(&l1, Priority::High)), (4, 4));
    // Each AP re-encodes only from what it holds: without Lows of its own, AP2 holds half
    // the span and cannot make up for anything AP1 loses.
    assert_eq!(
        (count(&l0, Priority::Low), count(&l1, Priority::Low)),
        (4, 4),
        "Lows split like the Highs"
    );
}

#[test]
fn budget_bounds_the_cohort_and_splits_the_highs() {
    let mut g = gateway(
        GatewayConfig {
            period_us: 1_000,
            low_factor: 0.0,
            cohort_size: CohortSize::Budget { margin: 0 },
            high_split: HighSplit::Budget,
            ..GatewayConfig::default()
        },
        60,
    );
    // 8.1 and 2.4 packets per period: a cohort of 10, 8 + 2.
    g.set_link_budget([8.1, 2.4]);
    let [l0, l1] = drain_in_order(&mut g, 1_000);
    assert_eq!((l0.len(), l1.len()), (8, 2));
    assert!(l0.iter().chain(&l1).all(|c| c.label == 0 && c.coeffs.len() == 10));
    assert_eq!(g.stats().cohorts_budget_capped, 1);
    // The rest waits for the next periods, one cohort of 10 each.
    let [l0, l1] = drain_in_order(&mut g, 2_000);
    assert_eq!((l0.len(), l1.len()), (8, 2));
    assert!(l0.iter().all(|c| c.label == 1));
    // Whole packets per link: 7.6 + 8.9 carry 7 + 8 = 15 in a period, not ⌊16.5⌋ = 16,
    // and neither link gets more than it carries.
    g.set_link_budget([7.6, 8.9]);
    let [l0, l1] = drain_in_order(&mut g, 3_000);
    assert_eq!((l0.len(), l1.len()), (7, 8));
    // An outage (budget 0) still lets one packet through per period, on the live link.
    g.set_link_budget([0.0, 3.0]);
    let [l0, l1] = drain_in_order(&mut g, 4_000);
    assert_eq!((l0.len(), l1.len()), (0, 3));
}

#[test]
fn round_robin_ignores_the_budget_unless_asked() {
    let mut g = gateway(
        GatewayConfig {
            period_us: 1_000,
            low_factor: 0.0,
            ..GatewayConfig::default()
        },
        30,
    );
    g.set_link_budget([8.1, 2.4]);
    let [l0, l1] = drain_in_order(&mut g, 1_000);
    assert_eq!((l0.len(), l1.len()), (15, 15));
}

#[test]
fn with_a_budget_lows_only_fill_the_room_left() {
    let mut g = gateway(
        GatewayConfig {
            period_us: 1_000,
            low_factor: 1.0,
            cohort_size: CohortSize::Budget { margin: 2 },
            high_split: HighSplit::Budget,
            ..GatewayConfig::default()
        },
        40,
    );
    // 6.5 + 6.5 carry 12: a cohort of 10 (margin 2), 5 Highs and 1 Low per link.
    g.set_link_budget([6.5, 6.5]);
    let [l0, l1] = drain_in_order(&mut g, 1_000);
    for l in [&l0, &l1] {
        assert_eq!((count(l, Priority::High), count(l, Priority::Low)), (5, 1));
    }
}
