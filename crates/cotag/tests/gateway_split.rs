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

/// Cohorts sized and split by the links' budgets, T = 1 ms.
fn budgeted(margin: usize, low_factor: f64, budget_carry: bool) -> GatewayConfig {
    GatewayConfig {
        period_us: 1_000,
        low_factor,
        cohort_size: CohortSize::Budget { margin },
        high_split: HighSplit::Budget,
        budget_carry,
        ..GatewayConfig::default()
    }
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
        budgeted(0, 0.0, false),
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
        budgeted(2, 1.0, false),
        40,
    );
    // 6.5 + 6.5 carry 12: a cohort of 10 (margin 2), 5 Highs and 1 Low per link.
    g.set_link_budget([6.5, 6.5]);
    let [l0, l1] = drain_in_order(&mut g, 1_000);
    for l in [&l0, &l1] {
        assert_eq!((count(l, Priority::High), count(l, Priority::Low)), (5, 1));
    }
}

#[test]
fn budget_carry_gives_each_link_its_fractions_over_the_periods() {
    let cfg = |carry| budgeted(0, 0.0, carry);
    // 8.1 and 2.4 packets per period for 20 periods: 162 and 48 on average. Floors give
    // 8 and 2 every period (160, 40); carrying the fractions gives 2 or 3 on the slow link.
    for carry in [false, true] {
        let mut g = gateway(cfg(carry), 1_000);
        g.set_link_budget([8.1, 2.4]);
        let mut total = [0, 0];
        for period in 1..=20u64 {
            let [l0, l1] = drain_in_order(&mut g, period * 1_000);
            assert!((8..=9).contains(&l0.len()) && (2..=3).contains(&l1.len()), "period {period}");
            total[0] += l0.len();
            total[1] += l1.len();
        }
        if carry {
            // Within one packet of the rate (the fractions are summed in floating point).
            assert!((161..=162).contains(&total[0]) && (47..=48).contains(&total[1]), "{total:?}");
        } else {
            assert_eq!(total, [160, 40]);
        }
    }
}

#[test]
fn budget_carry_banks_no_whole_packets_while_the_queue_is_short() {
    let mut g = gateway(
        budgeted(0, 0.0, true),
        2,
    );
    g.set_link_budget([4.5, 4.5]);
    // Periods of 2 packets each use little of the 9 the links carry ...
    for period in 1..=5u64 {
        let [l0, l1] = drain_in_order(&mut g, period * 1_000);
        assert_eq!(l0.len() + l1.len(), 2);
        for i in 0..2 {
            g.handle_packet(&[i as u8; 100], period * 1_000 + 10).unwrap();
        }
    }
    // ... and a full queue afterwards still gets at most what one period carries plus the
    // fraction: 4 or 5 per link, never the unused slots of the periods before.
    for i in 0..100 {
        g.handle_packet(&[i as u8; 100], 5_500).unwrap();
    }
    let [l0, l1] = drain_in_order(&mut g, 6_000);
    assert!(l0.len() <= 5 && l1.len() <= 5 && l0.len() + l1.len() <= 10, "{} + {}", l0.len(), l1.len());
}

#[test]
fn the_gateway_signals_idle_once_when_a_boundary_closes_nothing() {
    let mut g = gateway(
        GatewayConfig {
            period_us: 1_000,
            ..GatewayConfig::default()
        },
        3,
    );
    // Cohort 0 closes at 1 000; nothing arrives in [1 000, 2 000).
    g.handle_timeout(1_000);
    assert!(!g.poll_idle(), "a cohort closed at 1 000");
    assert_eq!(g.poll_timeout(), Some(2_000), "the send interval ends and the next boundary");
    g.handle_timeout(1_999);
    assert!(!g.poll_idle());
    g.handle_timeout(2_000);
    assert!(g.poll_idle(), "no cohort at 2 000");
    assert!(!g.poll_idle(), "once per quiet stretch");
    g.handle_timeout(5_000);
    assert!(!g.poll_idle());
    assert_eq!(g.stats().idle_boundaries, 1);
    // A packet in the period after a cohort closes means the next boundary closes one.
    g.handle_packet(&[1; 100], 5_100).unwrap();
    g.handle_timeout(6_000);
    g.handle_packet(&[2; 100], 6_500).unwrap();
    g.handle_timeout(7_000);
    assert!(!g.poll_idle(), "cohorts closed at 6 000 and 7 000");
    g.handle_timeout(8_000);
    assert!(g.poll_idle(), "nothing arrived in [7 000, 8 000)");
}
