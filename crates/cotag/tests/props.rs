//! Properties: decoding, the AP's bound on what it forwards, and the device's all-or-nothing,
//! in-order release.

use std::collections::BTreeMap;

use cotag::gf;
use cotag::wire::{self, CodedPacket, Priority};
use cotag::{Ap, ApConfig, Decoder, Device, DeviceConfig, Gateway, GatewayConfig, HighCode, Insert};
use proptest::prelude::*;

fn packets(max_n: usize) -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 1..120), 1..=max_n)
}

/// Symbols of a cohort, padded to its longest packet.
fn symbols(pk: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = pk.iter().map(Vec::len).max().unwrap() + wire::LEN_PREFIX;
    pk.iter().map(|p| wire::to_symbol(p, len).unwrap()).collect()
}

/// An invertible n × n matrix: the identity under random elementary row operations.
fn invertible(n: usize, ops: &[(usize, usize, u8)]) -> Vec<Vec<u8>> {
    let mut m: Vec<Vec<u8>> = (0..n).map(|i| (0..n).map(|j| u8::from(i == j)).collect()).collect();
    for &(a, b, c) in ops {
        let (a, b) = (a % n, b % n);
        if a == b {
            // Scale a row by a non-zero element.
            gf::scale(c.max(1), &mut m[a]);
        } else {
            let src = m[b].clone();
            gf::axpy(c, &src, &mut m[a]);
        }
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any n_k linearly independent combinations decode the cohort byte for byte, whatever the
    /// packets' lengths; dependent combinations in between change nothing.
    #[test]
    fn independent_combinations_decode_byte_for_byte(
        pk in packets(24),
        ops in prop::collection::vec((any::<usize>(), any::<usize>(), any::<u8>()), 0..200),
        extra in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let n = pk.len();
        let sym = symbols(&pk);
        let rows: Vec<&[u8]> = sym.iter().map(Vec::as_slice).collect();
        let m = invertible(n, &ops);
        let mut d = Decoder::new(n, sym[0].len());
        for (i, coeffs) in m.iter().enumerate() {
            let payload = gf::combine_with(coeffs, &rows);
            prop_assert_eq!(d.insert(coeffs, &payload), Insert::Innovative);
            // A combination of the rows given so far is never innovative.
            if let Some(&c) = extra.get(i) {
                let dep: Vec<u8> = (0..n).map(|j| gf::mul(c, m[0][j]) ^ coeffs[j]).collect();
                let dep_payload = gf::combine_with(&dep, &rows);
                let before = d.rank();
                let r = d.insert(&dep, &dep_payload);
                prop_assert!(r == Insert::NonInnovative || (i == 0 && before == 1));
            }
        }
        let out = d.into_symbols().unwrap();
        for (s, p) in out.iter().zip(&pk) {
            prop_assert_eq!(wire::from_symbol(s).unwrap(), p.as_slice());
        }
    }

    /// Whatever arrives, in whatever order, with whatever buffer, an AP never sends more
    /// combinations of a label than it received, and each is a combination of what it received.
    #[test]
    fn ap_never_forwards_more_than_it_received(
        buffer in 1usize..12,
        steps in prop::collection::vec((0u8..6, 0u32..6, any::<bool>(), 1u8..=255, 0u64..400), 1..120),
    ) {
        let mut ap = Ap::new(ApConfig { buffer_packets: buffer, liveness_us: 500, seed: 3, ..ApConfig::default() }).unwrap();
        let mut received: BTreeMap<u32, (usize, Decoder)> = BTreeMap::new();
        let mut forwarded: BTreeMap<u32, usize> = BTreeMap::new();
        let mut now = 0u64;
        for (what, label, high, c, dt) in steps {
            now += dt;
            match what {
                0..=2 => {
                    // Each label's cohort: 3 packets of 5 payload bytes.
                    let p = CodedPacket {
                        label,
                        priority: if high { Priority::High } else { Priority::Low },
                        coeffs: vec![c, c.wrapping_mul(3), 1],
                        payload: vec![c; 5],
                    };
                    ap.handle_recv(&p.to_bytes().unwrap(), now).unwrap();
                    let e = received.entry(label).or_insert_with(|| (0, Decoder::new(3, 5)));
                    e.0 += 1;
                    e.1.insert(&p.coeffs, &p.payload);
                }
                3 => ap.handle_timeout(now),
                _ => {
                    while let Some(b) = ap.poll_transmit(now).unwrap() {
                        let p = CodedPacket::parse(&b).unwrap();
                        let f = forwarded.entry(p.label).or_default();
                        *f += 1;
                        let (count, span) = &received[&p.label];
                        prop_assert!(*f <= *count, "label {}: {} forwarded, {} received", p.label, f, count);
                        prop_assert_eq!(span.clone().insert(&p.coeffs, &p.payload), Insert::NonInnovative);
                    }
                }
            }
        }
    }

    /// Cohorts reach the device with arbitrary losses over two links: every cohort is either
    /// released whole and intact or not at all, and releases follow label order.
    #[test]
    fn device_releases_whole_cohorts_in_label_order(
        cohorts in prop::collection::vec((1usize..10, prop::collection::vec(any::<bool>(), 0..24)), 1..12),
        systematic in any::<bool>(),
    ) {
        let high_code = if systematic { HighCode::Systematic } else { HighCode::Cauchy };
        let mut gw = Gateway::new(GatewayConfig { period_us: 1_000, low_factor: 1.0, high_code, ..GatewayConfig::default() }).unwrap();
        let mut dev = Device::new(DeviceConfig { liveness_us: 5_000, ..DeviceConfig::default() }).unwrap();
        let mut sent: Vec<Vec<Vec<u8>>> = Vec::new();
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut highest = None;
        for (k, (n, keep)) in cohorts.iter().enumerate() {
            // Cohort k: n packets "k:i" padded to different lengths, inside period k.
            let t0 = k as u64 * 1_000;
            let pk: Vec<Vec<u8>> = (0..*n).map(|i| {
                let mut p = vec![k as u8, i as u8];
                p.resize(2 + (i * 7) % 30, 0xee);
                p
            }).collect();
            for p in &pk {
                gw.handle_packet(p, t0).unwrap();
            }
            sent.push(pk);
            // Sent during period k+1: everything the gateway has, both links; `keep` decides
            // which arrive (missing entries: lost).
            let t1 = t0 + 1_000;
            gw.handle_timeout(t1);
            let mut j = 0;
            for link in [0, 1, 0, 1].into_iter().cycle().take(4 * 20) {
                if let Some(b) = gw.poll_transmit(link, t1).unwrap() {
                    if keep.get(j).copied().unwrap_or(false) {
                        highest = Some(k);
                        dev.handle_recv(link, &b, t1).unwrap();
                    }
                    j += 1;
                }
            }
            got.extend(std::iter::from_fn(|| dev.poll_packet()));
        }
        dev.handle_timeout(u64::MAX / 2);
        got.extend(std::iter::from_fn(|| dev.poll_packet()));

        // Split what came out back into cohorts by the first byte; each must be whole.
        let mut labels_seen = Vec::new();
        let mut i = 0;
        while i < got.len() {
            let k = got[i][0] as usize;
            let n = sent[k].len();
            prop_assert!(i + n <= got.len(), "cohort {k} cut short");
            prop_assert_eq!(&got[i..i + n], &sent[k][..]);
            labels_seen.push(k);
            i += n;
        }
        prop_assert!(labels_seen.windows(2).all(|w| w[0] < w[1]), "{:?}", labels_seen);
        let s = dev.stats();
        prop_assert_eq!(s.cohorts_decoded as usize, labels_seen.len());
        // Every label up to the highest that reached the device is resolved one way or the
        // other (labels after it are invisible to the device).
        prop_assert_eq!((s.cohorts_decoded + s.cohorts_failed) as usize, highest.map_or(0, |h| h + 1));
    }
}

fn arbitrary_packet() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Raw bytes: mostly malformed.
        prop::collection::vec(any::<u8>(), 0..40),
        // Well-formed headers with arbitrary labels, sizes and contents.
        (
            any::<u32>(),
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 1..5),
            prop::collection::vec(any::<u8>(), 3..12)
        )
            .prop_map(|(label, high, coeffs, payload)| {
                let label = label % 8; // mostly near each other, so rules interact
                CodedPacket {
                    label,
                    priority: if high { Priority::High } else { Priority::Low },
                    coeffs,
                    payload,
                }
                .to_bytes()
                .unwrap()
            }),
        (any::<u32>(), prop::collection::vec(any::<u8>(), 3..12)).prop_map(|(label, payload)| {
            CodedPacket {
                label,
                priority: Priority::Low,
                coeffs: vec![1],
                payload,
            }
            .to_bytes()
            .unwrap()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Hostile input: nothing panics, the device still releases only whole decoded cohorts of
    /// symbols whose carried length fits, in label order.
    #[test]
    fn hostile_input_never_panics(
        input in prop::collection::vec((0usize..3, arbitrary_packet(), 0u64..3_000), 0..80),
    ) {
        let mut ap = Ap::new(ApConfig { buffer_packets: 6, liveness_us: 1_000, seed: 1, ..ApConfig::default() }).unwrap();
        let mut dev = Device::new(DeviceConfig { liveness_us: 1_000, max_rows: 16, max_ahead: 4, first_label: 0 }).unwrap();
        let mut now = 0;
        for (link, bytes, dt) in input {
            now += dt;
            // Errors are fine (and counted); panics are not.
            let _ = ap.handle_recv(&bytes, now);
            let _ = dev.handle_recv(link, &bytes, now);
            while let Ok(Some(b)) = ap.poll_transmit(now) {
                let _ = dev.handle_recv(link % 2, &b, now);
            }
            ap.handle_timeout(now);
            dev.handle_timeout(now);
            while dev.poll_packet().is_some() {}
        }
        let s = dev.stats();
        prop_assert!(dev.next_label() as u64 >= s.cohorts_decoded + s.cohorts_failed);
    }

    /// quinn-proto's rule: when the gateway has nothing for a link, it has nothing until its
    /// `poll_timeout` (or new input).
    #[test]
    fn gateway_timeout_is_when_work_appears(
        arrivals in prop::collection::vec((0u64..2_500, 1usize..40), 1..30),
        low_factor in 0.0f64..2.0,
    ) {
        let mut gw = Gateway::new(GatewayConfig { period_us: 500, low_factor, ..GatewayConfig::default() }).unwrap();
        let mut now = 0;
        for (dt, len) in arrivals {
            now += dt;
            gw.handle_packet(&vec![7u8; len], now).unwrap();
            for link in 0..2 {
                while gw.poll_transmit(link, now).unwrap().is_some() {}
            }
            if let Some(t) = gw.poll_timeout() {
                prop_assert!(t > now, "timeout {} not after now {}", t, now);
                for link in 0..2 {
                    prop_assert!(gw.poll_transmit(link, t - 1).unwrap().is_none());
                }
            }
        }
    }
}
