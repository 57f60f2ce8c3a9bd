//! The AP's rules as table tests: at t, feed X, expect Y.

use cotag::wire::{CodedPacket, Priority};
use cotag::{Ap, ApConfig, Decoder, Error, Insert};

const LIVE: u64 = 1_000;

fn ap(buffer: usize) -> Ap {
    Ap::new(ApConfig {
        buffer_packets: buffer,
        liveness_us: LIVE,
        seed: 5,
        ..ApConfig::default()
    })
    .unwrap()
}

/// A combination of a 2-packet cohort; `tag` makes packets distinguishable.
fn pkt(label: u32, prio: Priority, tag: u8) -> Vec<u8> {
    CodedPacket {
        label,
        priority: prio,
        coeffs: vec![tag, tag.wrapping_add(1).max(1)],
        payload: vec![tag; 6],
    }
    .to_bytes()
    .unwrap()
}

use Priority::{High as H, Low as L};

fn out(ap: &mut Ap, t: u64) -> Option<CodedPacket> {
    ap.poll_transmit(t).unwrap().map(|b| CodedPacket::parse(&b).unwrap())
}

/// Everything the AP would send at `t`.
fn drain(ap: &mut Ap, t: u64) -> Vec<CodedPacket> {
    std::iter::from_fn(|| out(ap, t)).collect()
}

#[test]
fn holds_a_cohort_until_the_next_label() {
    let mut a = ap(10);
    a.handle_recv(&pkt(0, H, 1), 0).unwrap();
    a.handle_recv(&pkt(0, H, 2), 5).unwrap();
    assert_eq!(out(&mut a, 10), None, "held: no label 1 yet");
    a.handle_recv(&pkt(1, H, 3), 20).unwrap();
    let sent = drain(&mut a, 20);
    assert_eq!(sent.len(), 2, "both Highs of label 0, nothing of label 1");
    assert!(sent.iter().all(|p| p.label == 0 && p.priority == H));
    assert_eq!(sent[0].to_bytes().unwrap(), pkt(0, H, 1), "Highs go out as received");
    assert_eq!(sent[1].to_bytes().unwrap(), pkt(0, H, 2));
}

#[test]
fn forwards_until_the_label_after_next_then_flushes() {
    let mut a = ap(10);
    for tag in 1..=3 {
        a.handle_recv(&pkt(0, H, tag), 0).unwrap();
    }
    a.handle_recv(&pkt(1, H, 9), 10).unwrap();
    assert_eq!(out(&mut a, 10).unwrap().label, 0);
    // Label 2 arrives: what is left of 0 is flushed, 1 is released.
    a.handle_recv(&pkt(2, H, 7), 20).unwrap();
    assert_eq!(a.stats().flushed, 2);
    let sent = drain(&mut a, 20);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].label, 1);
    assert_eq!(a.label_counts(0), None);
}

#[test]
fn high_first_then_low_re_encoded_from_what_is_held() {
    let mut a = ap(10);
    a.handle_recv(&pkt(0, L, 1), 0).unwrap();
    a.handle_recv(&pkt(0, H, 2), 1).unwrap();
    a.handle_recv(&pkt(0, L, 3), 2).unwrap();
    a.handle_recv(&pkt(1, H, 4), 3).unwrap();
    let sent = drain(&mut a, 3);
    assert_eq!(sent.len(), 3, "never more than received for the label");
    assert_eq!(sent[0].priority, H);
    assert!(sent[1..].iter().all(|p| p.priority == L && p.label == 0));
    // Each Low is a combination of what came in: not innovative against it.
    let mut d = Decoder::new(2, 6);
    for tag in 1..=3 {
        let p = CodedPacket::parse(&pkt(0, L, tag)).unwrap();
        d.insert(&p.coeffs, &p.payload);
    }
    for p in &sent[1..] {
        assert_eq!(d.clone().insert(&p.coeffs, &p.payload), Insert::NonInnovative);
        assert_ne!(p.to_bytes().unwrap(), pkt(0, L, 1));
    }
    assert_eq!(a.label_counts(0), Some((0, 3, 3)), "a spent label frees its buffer");
}

#[test]
fn buffer_full_drops_low_first() {
    // Full of Highs: an incoming Low is dropped, and so is an incoming High.
    let mut a = ap(2);
    a.handle_recv(&pkt(0, H, 1), 0).unwrap();
    a.handle_recv(&pkt(0, H, 2), 0).unwrap();
    a.handle_recv(&pkt(0, L, 3), 0).unwrap();
    a.handle_recv(&pkt(0, H, 4), 0).unwrap();
    assert_eq!(a.stats().full_dropped_low, 1);
    assert_eq!(a.stats().full_dropped_high, 1);
    assert_eq!(a.label_counts(0), Some((2, 2, 0)));

    // A High finds a Low in the buffer: the most recent Low is evicted for it.
    let mut a = ap(3);
    a.handle_recv(&pkt(0, L, 1), 0).unwrap();
    a.handle_recv(&pkt(0, H, 2), 0).unwrap();
    a.handle_recv(&pkt(1, L, 3), 0).unwrap();
    a.handle_recv(&pkt(1, H, 4), 0).unwrap();
    assert_eq!(a.stats().full_evicted_low, 1);
    assert_eq!(a.buffered(), 3);
    assert_eq!(a.label_counts(1), Some((1, 2, 0)), "label 1's Low was the most recent");
    assert_eq!(a.label_counts(0), Some((2, 2, 0)));
}

#[test]
fn labels_below_the_highest_seen_are_late() {
    let mut a = ap(10);
    a.handle_recv(&pkt(3, H, 1), 0).unwrap();
    a.handle_recv(&pkt(2, H, 2), 1).unwrap();
    assert_eq!(a.stats().late, 1);
    a.handle_recv(&pkt(5, H, 3), 2).unwrap();
    a.handle_recv(&pkt(6, H, 3), 3).unwrap();
    assert_eq!(
        a.label_counts(3),
        None,
        "3 flushed once a label above its releaser (5) came"
    );
    a.handle_recv(&pkt(4, H, 4), 4).unwrap();
    assert_eq!(a.stats().late, 2);
}

#[test]
fn a_skipped_label_still_gets_one_forwarding_interval() {
    // Label 1 went entirely to the other AP: 2 releases 0, 3 flushes it.
    let mut a = ap(10);
    a.handle_recv(&pkt(0, H, 1), 0).unwrap();
    a.handle_recv(&pkt(0, H, 2), 0).unwrap();
    a.handle_recv(&pkt(2, H, 3), 10).unwrap();
    assert_eq!(out(&mut a, 10).unwrap().label, 0);
    a.handle_recv(&pkt(3, H, 4), 20).unwrap();
    assert_eq!(a.stats().flushed, 1);
    assert_eq!(out(&mut a, 20).unwrap().label, 2);
}

#[test]
fn liveness_releases_a_cohort_when_nothing_higher_comes() {
    let mut a = ap(10);
    a.handle_recv(&pkt(0, H, 1), 100).unwrap();
    assert_eq!(a.poll_timeout(), Some(100 + LIVE));
    a.handle_timeout(100 + LIVE - 1);
    assert_eq!(out(&mut a, 100 + LIVE - 1), None);
    a.handle_timeout(100 + LIVE);
    assert_eq!(a.stats().liveness_releases, 1);
    assert_eq!(out(&mut a, 100 + LIVE).unwrap().label, 0);
    assert_eq!(a.poll_timeout(), None);
    // More of label 0 may still come and be forwarded; label 1 does not flush it, label 2 does.
    a.handle_recv(&pkt(0, H, 2), 1200).unwrap();
    a.handle_recv(&pkt(1, H, 3), 1201).unwrap();
    assert_eq!(out(&mut a, 1201).unwrap().label, 0);
    a.handle_recv(&pkt(0, H, 4), 1202).unwrap();
    assert_eq!(a.stats().late, 1);
    a.handle_recv(&pkt(2, H, 5), 1203).unwrap();
    assert_eq!(a.label_counts(0), None);
    assert_eq!(out(&mut a, 1203).unwrap().label, 1);
}

#[test]
fn mismatched_and_malformed_input_is_counted() {
    let mut a = ap(10);
    a.handle_recv(&pkt(0, H, 1), 0).unwrap();
    let other_n = CodedPacket {
        label: 0,
        priority: H,
        coeffs: vec![1, 2, 3],
        payload: vec![0; 6],
    };
    a.handle_recv(&other_n.to_bytes().unwrap(), 0).unwrap();
    assert_eq!(a.stats().mismatched, 1);
    assert!(matches!(a.handle_recv(&[1, 0, 0], 0), Err(Error::Wire(_))));
    assert_eq!(a.stats().malformed, 1);
    assert_eq!(a.label_counts(0), Some((1, 1, 0)));
}

#[test]
fn bad_config_is_an_error() {
    assert!(Ap::new(ApConfig {
        buffer_packets: 0,
        ..ApConfig::default()
    })
    .is_err());
    assert!(Ap::new(ApConfig {
        liveness_us: 0,
        ..ApConfig::default()
    })
    .is_err());
}

#[test]
fn the_gateways_idle_signal_releases_a_held_cohort_at_once() {
    let mut a = ap(10);
    a.handle_recv(&pkt(0, H, 1), 0).unwrap();
    a.handle_recv(&pkt(0, H, 2), 0).unwrap();
    assert_eq!(out(&mut a, 10), None, "held");
    // Long before the liveness timeout (LIVE): the gateway says nothing closed.
    a.handle_idle(20);
    assert_eq!(drain(&mut a, 20).len(), 1 + 1, "both Highs forwarded at once");
    assert_eq!((a.stats().idle_releases, a.stats().liveness_releases), (1, 0));
    // Released without a higher label, like a liveness release: the next higher label does
    // not flush it, the one after does.
    a.handle_recv(&pkt(0, L, 3), 30).unwrap();
    a.handle_recv(&pkt(1, H, 4), 40).unwrap();
    assert_eq!(a.stats().flushed, 0);
    a.handle_recv(&pkt(2, H, 5), 50).unwrap();
    assert_eq!(a.stats().flushed, 1, "label 0's unsent Low, flushed by label 2");
    // With nothing held, the signal changes nothing.
    let mut b = ap(10);
    b.handle_idle(0);
    assert_eq!((out(&mut b, 0), b.stats().idle_releases), (None, 0));
}
