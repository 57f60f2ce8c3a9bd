use super::*;

#[test]
fn bandwidths_are_set_per_representation() {
    let mpd =
        "<AdaptationSet>\n<Representation id=\"0\" mimeType=\"video/webm\" bandwidth=\"30000\" width=\"1\">\n\
               <Representation id=\"1\" bandwidth=\"75000\">\n</AdaptationSet>";
    let out = set_bandwidths(mpd, &[1_000_000, 2_500_000]).unwrap();
    assert!(
        out.contains("id=\"0\" mimeType=\"video/webm\" bandwidth=\"1000000\" width"),
        "{out}"
    );
    assert!(out.contains("id=\"1\" bandwidth=\"2500000\">"), "{out}");
    assert!(set_bandwidths(mpd, &[1, 2, 3]).is_err());
}

#[test]
fn padding_reaches_the_size_with_a_void_element() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("s.webm");
    std::fs::write(&f, [0x1F, 0x43, 0xB6, 0x75]).unwrap();
    pad(&f, 100).unwrap();
    let b = std::fs::read(&f).unwrap();
    assert_eq!(b.len(), 100);
    assert_eq!(&b[4..6], &[0xEC, 0x01]);
    assert_eq!(
        u64::from_be_bytes([0, b[6], b[7], b[8], b[9], b[10], b[11], b[12]]),
        100 - 4 - 9
    );
    assert!(pad(&f, 105).is_err(), "already larger than 105 - 9");
}

/// A ladder of two segments on disk (rung sizes 100 … 600 bytes) and a page record of a
/// playback that got both at rung 1 and 2 with one 0.5-s stall.
fn played() -> (tempfile::TempDir, Ladder, PageState) {
    let dir = tempfile::tempdir().unwrap();
    let ladder = Ladder {
        dir: dir.path().to_path_buf(),
        segments: 2,
        bytes: [100, 200, 300, 400, 500, 600],
    };
    for r in 0..6 {
        for n in 1..=2 {
            std::fs::write(ladder.segment(r, n), vec![0; ladder.bytes[r] as usize]).unwrap();
        }
    }
    let seg = |url: &str, bytes: f64| PageSegment {
        url: format!("http://10.0.0.1:8080/v/{url}"),
        bytes: Some(bytes),
        request_ms: Some(1100.0),
        first_byte_ms: None,
        end_ms: 1200.0,
        failed: false,
    };
    let state = PageState {
        t0: Some(1000.0),
        playing: Some(1250.0),
        ended: Some(6000.0),
        error: None,
        duration: Some(4.0),
        current_time: 4.0,
        version: Some(DASHJS_VERSION.into()),
        segments: vec![seg("seg-1-1.webm", 200.0), seg("seg-2-2.webm", 300.0)],
        stalls: vec![Stall {
            start_ms: 3000.0,
            end_ms: 3500.0,
        }],
    };
    (dir, ladder, state)
}

#[test]
fn a_whole_playback_gives_pensieves_metrics() {
    let (_dir, ladder, state) = played();
    let p = judge(&state, &ladder, 1.0, 7).unwrap();
    assert_eq!(p.rungs, [1, 2]);
    assert!((p.startup_s - 0.25).abs() < 1e-9);
    assert!((p.rebuffer_s - 0.5).abs() < 1e-9);
    assert!((p.rebuffer_ratio - 0.5 / 4.5).abs() < 1e-9);
    // 0.75 + 1.2 − 4.3 × 0.5 − 0.45
    assert!((p.qoe_lin - (1.95 - 2.15 - 0.45)).abs() < 1e-9, "{}", p.qoe_lin);
    assert!((p.qoe_lin_per_chunk - p.qoe_lin / 2.0).abs() < 1e-12);
    assert_eq!(p.switches, 1);
    assert_eq!(p.segments[1].request_ms, Some(100.0));
}

#[test]
fn a_short_segment_or_playback_is_an_error_not_a_zero() {
    let (_dir, ladder, mut state) = played();
    state.segments[1].bytes = Some(299.0);
    let e = judge(&state, &ladder, 1.0, 7).unwrap_err().to_string();
    assert!(e.contains("299 bytes arrived, 300 served"), "{e}");
    let (_dir, ladder, mut state) = played();
    state.segments.pop();
    let e = judge(&state, &ladder, 1.0, 7).unwrap_err().to_string();
    assert!(e.contains("segments [2] never arrived"), "{e}");
    let (_dir, ladder, mut state) = played();
    state.ended = None;
    state.current_time = 2.5;
    let e = judge(&state, &ladder, 1.0, 7).unwrap_err().to_string();
    assert!(e.contains("playback stopped at 2.5 s"), "{e}");
}

#[test]
fn segment_urls_name_rung_and_number() {
    assert_eq!(rung_and_number("http://10.0.0.1:8080/v/seg-5-12.webm"), Some((5, 12)));
    assert_eq!(rung_and_number("http://x/v/init-5.webm"), None);
    // The ladder as the simulator's player sends it: 0.3 Mbit/s × 400 × 0.01 for 2 s.
    assert_eq!(segment_bytes(0.01)[0], 300_000);
}
