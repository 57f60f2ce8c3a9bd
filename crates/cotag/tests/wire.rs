//! The header's parse/emit contract: round trips, and malformed input is an error, never a
//! panic.

use cotag::wire::{self, CodedPacket, Error, Priority};
use proptest::prelude::*;

fn sample() -> CodedPacket {
    CodedPacket {
        label: 0x0102_0304,
        priority: Priority::High,
        coeffs: vec![1, 2, 3],
        payload: vec![0, 2, 0xaa, 0xbb, 0],
    }
}

#[test]
fn layout_is_as_documented() {
    let b = sample().to_bytes().unwrap();
    assert_eq!(b, [1, 1, 1, 2, 3, 4, 0, 3, 1, 2, 3, 0, 2, 0xaa, 0xbb, 0]);
    assert_eq!(sample().buffer_len(), wire::FIXED_HEADER + 3 + 5);
    let low = CodedPacket {
        priority: Priority::Low,
        ..sample()
    };
    assert_eq!(low.to_bytes().unwrap()[1], 0);
}

#[test]
fn malformed_headers_are_errors() {
    let good = sample().to_bytes().unwrap();
    for cut in 0..wire::FIXED_HEADER {
        assert!(
            matches!(CodedPacket::parse(&good[..cut]), Err(Error::Truncated { .. })),
            "{cut}"
        );
    }
    // Coefficients cut short.
    assert!(matches!(
        CodedPacket::parse(&good[..10]),
        Err(Error::Truncated { need: 11, have: 10 })
    ));
    // Payload too short to hold a length.
    assert_eq!(CodedPacket::parse(&good[..13]), Err(Error::PayloadLen(2)));
    let with = |i: usize, v: u8| {
        let mut b = good.clone();
        b[i] = v;
        CodedPacket::parse(&b)
    };
    assert_eq!(with(0, 2), Err(Error::Version(2)));
    assert_eq!(with(0, 0), Err(Error::Version(0)));
    assert_eq!(with(1, 0x04), Err(Error::Flags(0x04)));
    // The unit-row flag on a dense row: its first two coefficients read as index 0x0102.
    assert_eq!(with(1, 0x03), Err(Error::UnitIndex { index: 0x0102, n: 3 }));
    assert_eq!(with(1, 0x81), Err(Error::Flags(0x81)));
    // n_k = 0 and n_k above the limit.
    let mut b = good.clone();
    b[6..8].copy_from_slice(&0u16.to_be_bytes());
    assert_eq!(CodedPacket::parse(&b), Err(Error::CohortSize(0)));
    b[6..8].copy_from_slice(&1025u16.to_be_bytes());
    assert_eq!(CodedPacket::parse(&b), Err(Error::CohortSize(1025)));
    b[6..8].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(CodedPacket::parse(&b), Err(Error::CohortSize(65535)));
    // n_k claims more coefficients than the packet has.
    b[6..8].copy_from_slice(&100u16.to_be_bytes());
    assert!(matches!(
        CodedPacket::parse(&b),
        Err(Error::Truncated { need: 108, .. })
    ));
    // A payload above the largest symbol.
    let mut big = good[..11].to_vec();
    big.resize(11 + wire::MAX_SYMBOL + 1, 0);
    assert_eq!(CodedPacket::parse(&big), Err(Error::PayloadLen(wire::MAX_SYMBOL + 1)));
}

#[test]
fn emit_checks_its_buffer_and_fields() {
    let p = sample();
    let mut short = [0u8; 15];
    assert_eq!(p.emit(&mut short), Err(Error::BufferTooSmall { need: 16, have: 15 }));
    let empty = CodedPacket {
        coeffs: vec![],
        ..sample()
    };
    assert_eq!(empty.to_bytes(), Err(Error::CohortSize(0)));
    let tiny = CodedPacket {
        payload: vec![0, 0],
        ..sample()
    };
    assert_eq!(tiny.to_bytes(), Err(Error::PayloadLen(2)));
}

#[test]
fn symbols_carry_their_length() {
    let s = wire::to_symbol(b"abc", 8).unwrap();
    assert_eq!(s, [0, 3, b'a', b'b', b'c', 0, 0, 0]);
    assert_eq!(wire::from_symbol(&s), Some(&b"abc"[..]));
    assert_eq!(wire::to_symbol(b"abc", 4), None);
    // A length that points past the symbol is refused, not sliced out of bounds.
    assert_eq!(wire::from_symbol(&[0, 9, 1, 2]), None);
    assert_eq!(wire::from_symbol(&[0]), None);
}

proptest! {
    #[test]
    fn round_trip(label: u32, high: bool, coeffs in prop::collection::vec(any::<u8>(), 1..64),
                  payload in prop::collection::vec(any::<u8>(), 3..300)) {
        let p = CodedPacket { label, priority: if high { Priority::High } else { Priority::Low }, coeffs, payload };
        let b = p.to_bytes().unwrap();
        prop_assert_eq!(b.len(), p.buffer_len());
        prop_assert_eq!(CodedPacket::parse(&b).unwrap(), p);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(p) = CodedPacket::parse(&bytes) {
            prop_assert_eq!(&p.to_bytes().unwrap(), &bytes);
        }
        let _ = wire::from_symbol(&bytes);
    }
}

fn unit(n: usize, i: usize) -> CodedPacket {
    let mut coeffs = vec![0; n];
    coeffs[i] = 1;
    CodedPacket {
        label: 7,
        priority: Priority::High,
        coeffs,
        payload: vec![0, 3, 1, 2, 3],
    }
}

#[test]
fn a_unit_row_travels_as_its_index() {
    let p = unit(95, 42);
    let b = p.to_bytes().unwrap();
    assert_eq!(b.len(), wire::FIXED_HEADER + wire::UNIT_INDEX + 5);
    assert_eq!((b[1], &b[6..10]), (0x03, &[0, 95, 0, 42][..]));
    assert_eq!(p.header_bytes(), wire::FIXED_HEADER + wire::UNIT_INDEX);
    assert_eq!(CodedPacket::parse(&b).unwrap(), p);
    // A Low with a unit row is as short; the flag is the row's, not the priority's.
    let low = CodedPacket { priority: Priority::Low, ..unit(3, 2) };
    assert_eq!(low.to_bytes().unwrap()[1], 0x02);
    assert_eq!(CodedPacket::parse(&low.to_bytes().unwrap()).unwrap(), low);
}

#[test]
fn rows_the_index_would_not_shorten_or_could_not_say_stay_dense() {
    // n_k <= 2: the row is no longer than the index.
    for n in 1..=2 {
        let b = unit(n, n - 1).to_bytes().unwrap();
        assert_eq!((b[1], b.len()), (0x01, wire::FIXED_HEADER + n + 5), "n_k = {n}");
    }
    // One non-zero coefficient other than 1, and two non-zero ones.
    let mut p = unit(5, 1);
    p.coeffs[1] = 7;
    assert_eq!(p.to_bytes().unwrap()[1], 0x01);
    let mut p = unit(5, 1);
    p.coeffs[4] = 1;
    assert_eq!(p.to_bytes().unwrap().len(), wire::FIXED_HEADER + 5 + 5);
}

#[test]
fn malformed_unit_rows_are_errors() {
    let good = unit(10, 9).to_bytes().unwrap();
    // The index cut short.
    assert_eq!(
        CodedPacket::parse(&good[..wire::FIXED_HEADER + 1]),
        Err(Error::Truncated { need: wire::FIXED_HEADER + wire::UNIT_INDEX, have: wire::FIXED_HEADER + 1 })
    );
    // An index past the cohort.
    let mut b = good.clone();
    b[8..10].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(CodedPacket::parse(&b), Err(Error::UnitIndex { index: 10, n: 10 }));
    // One encoding per packet: an index where the row is as short, a row where the index is
    // shorter.
    let mut b = unit(2, 1).to_bytes().unwrap();
    b[1] |= 0x02;
    b.remove(wire::FIXED_HEADER);
    b[wire::FIXED_HEADER] = 0;
    b.insert(wire::FIXED_HEADER + 1, 1);
    assert_eq!(CodedPacket::parse(&b), Err(Error::NonCanonical(2)));
    let mut dense = vec![1, 1, 0, 0, 0, 0, 0, 3, 0, 0, 1];
    dense.extend([0, 3, 1, 2, 3]);
    assert_eq!(CodedPacket::parse(&dense), Err(Error::NonCanonical(3)));
}
