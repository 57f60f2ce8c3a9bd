//! The end-to-end harness: gateway → two APs → device in virtual time.

use cotag::sim::{run, Setup};

fn show(name: &str, r: &cotag::sim::Report) {
    eprintln!(
        "{name}: {}/{} delivered, overhead {:.3}, cohorts {} decoded {} failed {}, innovative {} non-innovative {} late {}, ap flushed {}/{}, ap low {}/{}",
        r.delivered.len(),
        r.sent,
        r.overhead_ratio(),
        r.gateway.cohorts,
        r.device.cohorts_decoded,
        r.device.cohorts_failed,
        r.device.innovative,
        r.device.non_innovative,
        r.device.late,
        r.aps[0].flushed,
        r.aps[1].flushed,
        r.aps[0].forwarded_low,
        r.aps[1].forwarded_low,
    );
}

#[test]
fn full_size_packets_with_room_arrive_once_in_order() {
    let setup = Setup {
        min_len: 1400,
        max_len: 1400,
        ..Setup::default()
    };
    let r = run(&setup).unwrap();
    show("full-size", &r);
    assert!(r.finished);
    assert!(r.exactly_once_in_order());
}

#[test]
fn mixed_lengths_with_room_arrive_once_in_order() {
    let setup = Setup {
        source_rate_bps: 400e6,
        ..Setup::default()
    };
    let r = run(&setup).unwrap();
    show("mixed", &r);
    assert!(r.finished);
    assert!(r.exactly_once_in_order());
}

fn full_size(packets: usize, source_bps: f64) -> Setup {
    Setup {
        min_len: 1400,
        max_len: 1400,
        packets,
        source_rate_bps: source_bps,
        ..Setup::default()
    }
}

#[test]
fn low_extras_repair_radio_loss() {
    let mut setup = full_size(5_000, 600e6);
    for l in &mut setup.downlinks {
        l.loss = 0.05;
    }
    let r = run(&setup).unwrap();
    show("5% loss", &r);
    assert!(r.exactly_once_in_order());
    assert!(r.aps[0].forwarded_low + r.aps[1].forwarded_low > 0);

    // Without taking, a lost High leaves its cohort short: dropped whole, the rest in order.
    setup.gateway.low_factor = 0.0;
    let r = run(&setup).unwrap();
    show("5% loss, no extras", &r);
    assert!(r.device.cohorts_failed > 0);
    assert!(r.in_order() && r.corrupted == 0);
    assert_eq!(r.delivered.len() as u64, r.device.packets_delivered);
}

#[test]
fn a_dead_link_is_survived_with_extras_and_liveness() {
    let mut setup = full_size(3_000, 300e6);
    setup.downlinks[1].loss = 1.0;
    setup.gateway.low_factor = 2.0;
    let r = run(&setup).unwrap();
    show("dead link, extras", &r);
    assert!(r.finished);
    assert!(r.exactly_once_in_order());

    // Without extras half of every cohort is on the dead link: every cohort is given up (by
    // the liveness timeout, since link 1 never shows a higher label), nothing is released.
    setup.gateway.low_factor = 0.0;
    let r = run(&setup).unwrap();
    show("dead link, no extras", &r);
    assert!(r.finished);
    assert_eq!(r.device.cohorts_decoded, 0);
    assert_eq!(r.device.cohorts_failed, r.gateway.cohorts);
    assert!(r.delivered.is_empty());
}

#[test]
fn runs_repeat_bit_for_bit() {
    let setup = Setup {
        packets: 2_000,
        ..full_size(2_000, 800e6)
    };
    assert_eq!(run(&setup).unwrap(), run(&setup).unwrap());
}

/// Not an assertion: prints the coding overhead for the docs (run with --nocapture).
#[test]
fn overhead_table() {
    for (name, min, max, low, period_us) in [
        ("full-size, no extras, T=1ms", 1400, 1400, 0.0, 1_000),
        ("full-size, extras 1.0, T=1ms", 1400, 1400, 1.0, 1_000),
        ("full-size, extras 1.0, T=0.25ms", 1400, 1400, 1.0, 250),
        ("full-size, extras 1.0, T=3ms", 1400, 1400, 1.0, 3_000),
        ("mixed 64-1400, no extras, T=1ms", 64, 1400, 0.0, 1_000),
    ] {
        let mut setup = full_size(5_000, 400e6);
        setup.gateway.period_us = period_us;
        // Liveness scales with T (3 T, the defaults' ratio).
        setup.ap.liveness_us = 3 * period_us;
        setup.device.liveness_us = 3 * period_us;
        setup.min_len = min;
        setup.max_len = max;
        setup.gateway.low_factor = low;
        let r = run(&setup).unwrap();
        assert!(r.exactly_once_in_order(), "{name}");
        let n = r.gateway.packets_in as f64 / r.gateway.cohorts as f64;
        eprintln!(
            "{name}: mean n_k {n:.1}, header bytes/packet {:.1}, radio bytes / delivered bytes {:.3}, delay p50 {} us p99 {} us",
            r.device.header_bytes_received as f64 / r.device.received as f64,
            r.overhead_ratio() + 1.0,
            r.delay_quantile_us(0.5),
            r.delay_quantile_us(0.99),
        );
    }
}
