use super::*;
use crate::seq::Seq;
use proptest::prelude::*;

fn encode(f: &Frame) -> Vec<u8> {
    let mut v = Vec::new();
    f.emit(&mut v);
    assert_eq!(v.len(), f.buffer_len());
    v
}

fn sample_frames() -> Vec<Frame<'static>> {
    vec![
        Frame::Hello(Hello {
            scheme: Scheme::Fbdt,
            isn: 0xdead_beef,
            recv_buffer: 1 << 25,
            segment_size: 16384,
            key: [7; 32],
        }),
        Frame::Join(Join {
            token: [1, 2, 3, 4, 5, 6, 7, 8],
            path_index: 3,
            epoch: 0x0102_0304,
            hmac: [9; 32],
        }),
        Frame::Data(Data {
            seq: Seq(u32::MAX),
            fin: true,
            payload: b"hello",
        }),
        Frame::Ack(Ack {
            cum: Seq(5),
            window: 1000,
            fin: true,
            path_rx: vec![
                PathRx { epoch: 0, bytes: 1 },
                PathRx {
                    epoch: u32::MAX,
                    bytes: u64::MAX,
                },
            ]
            .into(),
            ranges: vec![(Seq(10), Seq(20)), (Seq(30), Seq(40))].into(),
        }),
        Frame::Align(Align {
            window_id: 9,
            start: Seq(0),
            end: Seq(100),
            lanes: vec![LaneRepr {
                lo: Seq(0),
                hi: Seq(100),
                bottom: 0,
                top: NO_PATH,
            }],
        }),
        Frame::Close(Close {
            code: 2,
            reason: "flow control violated".into(),
        }),
        Frame::MpData(MpData {
            dsn: u64::MAX - 5,
            fin: true,
            payload: b"hello",
        }),
        Frame::MpData(MpData {
            dsn: 0,
            fin: false,
            payload: b"",
        }),
        Frame::DataAck(DataAck {
            data_ack: 1 << 40,
            window: 6 << 20,
            fin: true,
            path_rx: vec![
                PathRx { epoch: 0, bytes: 3 },
                PathRx {
                    epoch: u32::MAX,
                    bytes: u64::MAX,
                },
            ],
        }),
        Frame::Hello(Hello {
            scheme: Scheme::Meta,
            isn: 0,
            recv_buffer: 6 << 20,
            segment_size: 16384,
            key: [1; 32],
        }),
        Frame::JoinOk(JoinOk {
            path_index: 3,
            epoch: 0x0102_0304,
            hmac: [5; 32],
        }),
        Frame::Stalled(Stalled {
            path_index: 2,
            epoch: 0x0a0b_0c0d,
        }),
    ]
}

#[test]
fn every_frame_roundtrips() {
    for f in sample_frames() {
        let bytes = encode(&f);
        let (g, used) = Frame::parse(&bytes).expect("parse");
        assert_eq!(used, bytes.len());
        assert_eq!(f, g);
    }
}

#[test]
fn a_frame_followed_by_more_bytes_parses_alone() {
    for f in sample_frames() {
        let mut bytes = encode(&f);
        let len = bytes.len();
        bytes.extend_from_slice(&[0xAA; 100]);
        let (g, used) = Frame::parse(&bytes).expect("parse");
        assert_eq!((g, used), (f, len));
    }
}

#[test]
fn every_truncation_is_incomplete() {
    for f in sample_frames() {
        let bytes = encode(&f);
        for cut in 0..bytes.len() {
            match Frame::parse(&bytes[..cut]) {
                Err(Error::Incomplete { needed }) => {
                    assert!(needed > 0 && needed <= bytes.len() - cut)
                }
                other => panic!("{:?} cut at {cut}: {other:?}", f.kind()),
            }
        }
    }
}

#[test]
fn oversized_length_is_refused_from_the_header_alone() {
    let mut h = vec![FrameType::Data as u8, 0, 0, 0];
    h.extend_from_slice(&(u32::MAX).to_be_bytes());
    assert!(matches!(Frame::parse(&h), Err(Error::TooLong { .. })));
    let mut h = vec![FrameType::Hello as u8, 0, 0, 0];
    h.extend_from_slice(&57u32.to_be_bytes());
    assert!(matches!(Frame::parse(&h), Err(Error::TooLong { .. })));
}

#[test]
fn unknown_type_reserved_bytes_version_and_magic_are_errors() {
    assert_eq!(
        Frame::parse(&[0x7f, 0, 0, 0, 0, 0, 0, 0]),
        Err(Error::UnknownType(0x7f))
    );
    assert_eq!(Frame::parse(&[3, 0, 1, 0, 0, 0, 0, 4]), Err(Error::ReservedNonZero));
    let hello = encode(&sample_frames()[0]);
    // Version 1 carried the window mode and size; its HELLO is refused, not misread.
    let mut v1 = hello.clone();
    v1[HEADER_LEN + 4] = 1;
    assert_eq!(Frame::parse(&v1), Err(Error::UnsupportedVersion(1)));
    for at in [6, 7, 20, 23] {
        let mut reserved = hello.clone();
        reserved[HEADER_LEN + at] = 1;
        assert_eq!(Frame::parse(&reserved), Err(Error::ReservedNonZero));
    }
    let mut bad_magic = hello;
    bad_magic[HEADER_LEN] = b'X';
    assert_eq!(Frame::parse(&bad_magic), Err(Error::BadMagic));
}

#[test]
fn counts_that_disagree_with_length_are_malformed() {
    let mut ack = encode(&sample_frames()[3]);
    ack[HEADER_LEN + 9] = 3; // claims three ranges, carries two
    assert!(matches!(Frame::parse(&ack), Err(Error::Malformed { .. })));
    let mut align = encode(&sample_frames()[4]);
    align[HEADER_LEN + 12] = (MAX_LANES + 1) as u8;
    assert!(matches!(Frame::parse(&align), Err(Error::Malformed { .. })));
    let mut data = encode(&sample_frames()[2]);
    data[1] = 0x80; // unknown DATA flag
    assert!(matches!(Frame::parse(&data), Err(Error::Malformed { .. })));
    let mut close = encode(&sample_frames()[5]);
    let n = close.len();
    close[n - 1] = 0xff; // not UTF-8
    assert!(matches!(Frame::parse(&close), Err(Error::Malformed { .. })));
}

#[test]
fn close_reason_is_cut_on_a_char_boundary() {
    let f = Frame::Close(Close {
        code: 1,
        reason: "é".repeat(200),
    });
    let bytes = encode(&f);
    let (Frame::Close(c), _) = Frame::parse(&bytes).expect("parse") else {
        panic!("not a close")
    };
    assert!(c.reason.len() <= MAX_REASON);
    assert!(c.reason.chars().all(|ch| ch == 'é'));
}

proptest! {
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Frame::parse(&bytes);
    }

    #[test]
    fn garbage_after_a_valid_header_never_panics(kind in 1u8..=6, flags: u8, body in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut v = vec![kind, flags, 0, 0];
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(&body);
        if let Ok((f, used)) = Frame::parse(&v) {
            prop_assert_eq!(used, v.len());
            // Anything accepted re-encodes to the same bytes.
            prop_assert_eq!(encode(&f), v);
        }
    }

    #[test]
    fn data_roundtrips(seq: u32, fin: bool, payload in proptest::collection::vec(any::<u8>(), 0..3000)) {
        let f = Frame::Data(Data { seq: Seq(seq), fin, payload: &payload });
        let bytes = encode(&f);
        let mut via_header = Vec::new();
        Data::emit_header(Seq(seq), fin, payload.len(), &mut via_header);
        via_header.extend_from_slice(&payload);
        prop_assert_eq!(&via_header, &bytes);
        let (g, used) = Frame::parse(&bytes).unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(g, f);
    }

    #[test]
    fn ack_roundtrips(cum: u32, window: u32,
                      rx in proptest::collection::vec((any::<u32>(), any::<u64>()), 0..=MAX_PATHS),
                      ranges in proptest::collection::vec((any::<u32>(), any::<u32>()), 0..=MAX_ACK_RANGES)) {
        let f = Frame::Ack(Ack { cum: Seq(cum), window, fin: window % 2 == 0,
            path_rx: rx.into_iter().map(|(epoch, bytes)| PathRx { epoch, bytes }).collect(),
            ranges: ranges.into_iter().map(|(a, b)| (Seq(a), Seq(b))).collect() });
        let bytes = encode(&f);
        prop_assert_eq!(Frame::parse(&bytes).unwrap(), (f, bytes.len()));
    }
}

#[test]
fn meta_layer_frames_reject_garbage() {
    // MP_DATA whose DSN + length overflows u64.
    let mut v = Vec::new();
    MpData::emit_header(u64::MAX, false, 2, &mut v);
    v.extend_from_slice(b"xy");
    assert!(matches!(
        Frame::parse(&v),
        Err(Error::Malformed {
            kind: FrameType::MpData,
            ..
        })
    ));
    // MP_DATA with an unknown flag.
    let mut v = Vec::new();
    MpData::emit_header(7, false, 0, &mut v);
    v[1] = 0x02;
    assert!(matches!(Frame::parse(&v), Err(Error::Malformed { .. })));
    // MP_DATA body shorter than its DSN.
    let v = [7u8, 0, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4];
    assert!(matches!(Frame::parse(&v), Err(Error::Malformed { .. })));
    // DATA_ACK whose counter count does not match its length, too many counters, reserved bytes.
    let good = encode(&Frame::DataAck(DataAck {
        data_ack: 1,
        window: 2,
        fin: false,
        path_rx: vec![PathRx { epoch: 2, bytes: 5 }],
    }));
    let mut bad = good.clone();
    bad[HEADER_LEN + 12] = 2;
    assert!(matches!(Frame::parse(&bad), Err(Error::Malformed { .. })));
    let mut bad = good.clone();
    bad[HEADER_LEN + 12] = 200;
    assert!(matches!(Frame::parse(&bad), Err(Error::Malformed { .. })));
    let mut bad = good.clone();
    bad[HEADER_LEN + 15] = 1;
    assert_eq!(Frame::parse(&bad), Err(Error::ReservedNonZero));
    let mut bad = good;
    bad[HEADER_LEN + 13] = 0x80;
    assert!(matches!(Frame::parse(&bad), Err(Error::Malformed { .. })));
    // A DATA_ACK header announcing more than its bound is refused from the header alone.
    let hdr = [8u8, 0, 0, 0, 0, 0, 0x10, 0];
    assert!(matches!(Frame::parse(&hdr), Err(Error::TooLong { .. })));
}

#[test]
fn a_join_ok_has_one_length_and_zero_reserved_bytes() {
    let good = encode(&Frame::JoinOk(JoinOk {
        path_index: 1,
        epoch: 2,
        hmac: [3; 32],
    }));
    refuses_all_but_its_one_length_and_zero_reserved_bytes(&good);
}

/// `good`, a frame of a fixed-size type whose body begins with a path index and three
/// reserved bytes: any of those bytes set, flags set, a body a byte short (with the length
/// saying so) or a header announcing a byte more is refused.
fn refuses_all_but_its_one_length_and_zero_reserved_bytes(good: &[u8]) {
    for at in 1..4 {
        let mut bad = good.to_vec();
        bad[HEADER_LEN + at] = 1;
        assert_eq!(Frame::parse(&bad), Err(Error::ReservedNonZero));
    }
    let mut flags = good.to_vec();
    flags[1] = 1;
    assert!(matches!(Frame::parse(&flags), Err(Error::Malformed { .. })));
    // One byte short, with the length saying so: malformed, not a shorter frame.
    let body = (good.len() - HEADER_LEN) as u32;
    let mut short = good[..good.len() - 1].to_vec();
    short[4..8].copy_from_slice(&(body - 1).to_be_bytes());
    assert!(matches!(Frame::parse(&short), Err(Error::Malformed { .. })));
    // A header announcing more is refused from the header alone.
    let mut hdr = good[..HEADER_LEN].to_vec();
    hdr[4..8].copy_from_slice(&(body + 1).to_be_bytes());
    assert!(matches!(Frame::parse(&hdr), Err(Error::TooLong { .. })));
}

#[test]
fn a_stalled_report_has_one_length_and_zero_reserved_bytes() {
    let good = encode(&Frame::Stalled(Stalled { path_index: 1, epoch: 2 }));
    assert_eq!(good.len(), HEADER_LEN + 8);
    refuses_all_but_its_one_length_and_zero_reserved_bytes(&good);
}

proptest! {
    /// A DATA or MP_DATA frame split at its payload parses as the joined bytes do, errors
    /// included; any other split point, or any other frame, is refused (never a panic).
    #[test]
    fn a_split_frame_parses_as_the_joined_one(kind in prop_oneof![Just(3u8), Just(7u8), 1u8..=8],
                                              flags in prop_oneof![Just(0u8), Just(1u8), any::<u8>()],
                                              fixed in proptest::collection::vec(any::<u8>(), 8),
                                              payload in proptest::collection::vec(any::<u8>(), 0..600),
                                              cut in 0usize..24) {
        let fixed_len = if kind == 3 { 4 } else { 8 };
        let mut joined = vec![kind, flags, 0, 0];
        joined.extend_from_slice(&((fixed_len + payload.len()) as u32).to_be_bytes());
        joined.extend_from_slice(&fixed[..fixed_len]);
        let head_len = HEADER_LEN + fixed_len;
        joined.extend_from_slice(&payload);
        let whole = Frame::parse(&joined).map(|(f, _)| f);
        let split = Frame::parse_split(&joined[..head_len], &joined[head_len..]);
        if kind == 3 || kind == 7 {
            prop_assert_eq!(split, whole);
        } else {
            prop_assert!(split.is_err());
        }
        // A split elsewhere is malformed (or the header itself is bad), never accepted.
        let at = cut.min(joined.len());
        if at != head_len {
            prop_assert!(Frame::parse_split(&joined[..at], &joined[at..]).is_err());
        }
    }
}

#[test]
fn a_split_mp_data_whose_sequence_overflows_is_refused() {
    let mut head = Vec::new();
    MpData::emit_header(u64::MAX, false, 2, &mut head);
    assert!(matches!(
        Frame::parse_split(&head, b"xy"),
        Err(Error::Malformed {
            kind: FrameType::MpData,
            ..
        })
    ));
    assert!(
        Frame::parse_split(&head, b"x").is_err(),
        "length disagrees with the header"
    );
}
