//! The High combinations' coefficients (`HighCode`): systematic Highs are the source packets
//! themselves; Cauchy Highs are dense. Either way a cohort decodes from its Highs alone and,
//! when Highs are lost, from the Highs left and the Lows.

use cotag::wire::{self, CodedPacket, Priority};
use cotag::{Decoder, Gateway, GatewayConfig, HighCode, Insert};

const T: u64 = 1_000;

/// One cohort of `n` packets of different lengths, closed at T, and everything the gateway
/// sends for it in [T, 2T), links alternating.
fn cohort(code: HighCode, n: usize) -> (Vec<Vec<u8>>, Vec<CodedPacket>) {
    let mut g = Gateway::new(GatewayConfig {
        period_us: T,
        low_factor: 1.0,
        high_code: code,
        ..GatewayConfig::default()
    })
    .unwrap();
    let packets: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8 ^ 0x5a; 40 + 13 * i]).collect();
    for p in &packets {
        g.handle_packet(p, 0).unwrap();
    }
    g.handle_timeout(T);
    let mut coded = Vec::new();
    for link in [0, 1].into_iter().cycle().take(8 * n) {
        if let Some(b) = g.poll_transmit(link, T).unwrap() {
            coded.push(CodedPacket::parse(&b).unwrap());
        }
    }
    (packets, coded)
}

fn decode(coded: &[&CodedPacket]) -> Option<Vec<Vec<u8>>> {
    let first = coded.first()?;
    let mut d = Decoder::new(first.coeffs.len(), first.payload.len());
    for c in coded {
        d.insert(&c.coeffs, &c.payload);
    }
    let symbols = d.into_symbols()?;
    symbols.iter().map(|s| wire::from_symbol(s).map(<[u8]>::to_vec)).collect()
}

#[test]
fn systematic_highs_are_the_source_packets_in_order() {
    let (packets, coded) = cohort(HighCode::Systematic, 9);
    let highs: Vec<&CodedPacket> = coded.iter().filter(|c| c.priority == Priority::High).collect();
    assert_eq!(highs.len(), 9);
    for (i, h) in highs.iter().enumerate() {
        let unit: Vec<u8> = (0..9).map(|j| u8::from(j == i)).collect();
        assert_eq!(h.coeffs, unit, "High {i}");
        assert_eq!(wire::from_symbol(&h.payload), Some(&packets[i][..]), "High {i}");
    }
    // The Lows are still dense: every coefficient non-zero.
    let lows: Vec<&CodedPacket> = coded.iter().filter(|c| c.priority == Priority::Low).collect();
    assert!(!lows.is_empty());
    assert!(lows.iter().all(|l| l.coeffs.iter().all(|&c| c != 0)));
}

#[test]
fn cauchy_highs_are_dense() {
    let (_, coded) = cohort(HighCode::Cauchy, 9);
    let highs: Vec<&CodedPacket> = coded.iter().filter(|c| c.priority == Priority::High).collect();
    assert_eq!(highs.len(), 9);
    assert!(highs.iter().all(|h| h.coeffs.iter().all(|&c| c != 0)));
}

#[test]
fn either_code_decodes_from_its_highs_alone_and_with_highs_lost() {
    for code in [HighCode::Systematic, HighCode::Cauchy] {
        for n in [1, 2, 17, 64, 128] {
            let (packets, coded) = cohort(code, n);
            let highs: Vec<&CodedPacket> = coded.iter().filter(|c| c.priority == Priority::High).collect();
            assert_eq!(decode(&highs).as_ref(), Some(&packets), "{code:?}, n {n}: Highs alone");
            // Every third High lost; the Lows, arriving first, make up for them.
            let lows = coded.iter().filter(|c| c.priority == Priority::Low);
            let kept = highs.iter().copied().enumerate().filter(|(i, _)| i % 3 != 1).map(|(_, h)| h);
            let mixed: Vec<&CodedPacket> = lows.chain(kept).collect();
            assert_eq!(decode(&mixed).as_ref(), Some(&packets), "{code:?}, n {n}: Highs lost");
        }
    }
}

#[test]
fn a_systematic_high_after_full_rank_is_not_innovative() {
    let (_, coded) = cohort(HighCode::Systematic, 12);
    let first = &coded[0];
    let mut d = Decoder::new(first.coeffs.len(), first.payload.len());
    let mut innovative = 0;
    for c in &coded {
        if d.insert(&c.coeffs, &c.payload) == Insert::Innovative {
            innovative += 1;
        }
    }
    assert_eq!(innovative, 12);
    assert!(d.is_complete());
}
