//! The window policy, frame by frame (no I/O).

use super::*;

fn frame(kind: Kind, stream: u32, payload: &[u8]) -> (Header, Bytes) {
    let length = payload.len() as u32;
    (Header { kind, stream, length }, Bytes::copy_from_slice(payload))
}

/// A server-side state with one stream the peer opened and filled to its window.
fn filled(cfg: MuxConfig) -> State {
    let mut st = State::new(cfg, false);
    let (h, p) = frame(Kind::Open, 1, b"");
    st.on_frame(h, p).unwrap();
    for _ in 0..INITIAL_WINDOW as usize / MAX_DATA {
        let (h, p) = frame(Kind::Data, 1, &[0u8; MAX_DATA]);
        st.on_frame(h, p).unwrap();
    }
    st.control.clear();
    st
}

fn window_grants(st: &State) -> Vec<u32> {
    st.control
        .iter()
        .filter(|c| c.header.kind == Kind::Window)
        .map(|c| c.header.length)
        .collect()
}

#[test]
fn blocked_with_a_reader_that_kept_up_doubles_the_window() {
    let mut st = filled(MuxConfig::default());
    st.on_read(1, INITIAL_WINDOW as usize);
    st.control.clear();
    st.streams.get_mut(&1).unwrap().consumed = 0;
    let (h, p) = frame(Kind::Blocked, 1, b"");
    st.on_frame(h, p).unwrap();
    assert_eq!(st.streams[&1].window, 2 * INITIAL_WINDOW);
    assert_eq!(window_grants(&st), [INITIAL_WINDOW as u32]);
    assert_eq!(st.granted, 2 * INITIAL_WINDOW);
}

#[test]
fn blocked_with_a_stalled_reader_grants_nothing() {
    let mut st = filled(MuxConfig::default());
    let (h, p) = frame(Kind::Blocked, 1, b"");
    st.on_frame(h, p).unwrap();
    assert_eq!(st.streams[&1].window, INITIAL_WINDOW);
    assert!(window_grants(&st).is_empty());
}

#[test]
fn growth_stops_at_the_maximum_and_at_the_budget() {
    for (cfg, expect) in [
        (
            MuxConfig {
                max_window: INITIAL_WINDOW,
                ..MuxConfig::default()
            },
            INITIAL_WINDOW,
        ),
        (
            MuxConfig {
                budget: INITIAL_WINDOW / 2,
                ..MuxConfig::default()
            },
            INITIAL_WINDOW,
        ),
    ] {
        let mut st = filled(cfg);
        st.on_read(1, INITIAL_WINDOW as usize);
        let (h, p) = frame(Kind::Blocked, 1, b"");
        st.on_frame(h, p).unwrap();
        assert_eq!(st.streams[&1].window, expect);
    }
}
