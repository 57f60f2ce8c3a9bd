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

/// A client-side state with streams 1, 3, … opened (their OPENs taken out of `control`).
fn opened(n: usize) -> State {
    let mut st = State::new(MuxConfig::default(), true);
    for _ in 0..n {
        st.open(Bytes::new()).unwrap();
    }
    st.control.clear();
    st
}

/// Queues `n` bytes on `id` as a write does (credit permitting), then a FIN if `fin`.
fn queue(st: &mut State, id: u32, n: usize, fin: bool) {
    let s = st.streams.get_mut(&id).unwrap();
    assert!(n as u64 <= s.credit);
    s.out.push_back(Bytes::from(vec![0u8; n]));
    s.out_len += n;
    s.credit -= n as u64;
    s.fin_queued = fin;
    st.mark_sendable(id);
}

/// The frames of one batch: kind, stream, payload length.
fn frames(mut batch: &[u8]) -> Vec<(Kind, u32, usize)> {
    let mut out = Vec::new();
    while !batch.is_empty() {
        let h = Header::decode(batch[..crate::frame::HEADER_LEN].try_into().unwrap()).unwrap();
        out.push((h.kind, h.stream, h.payload_len()));
        batch = &batch[crate::frame::HEADER_LEN + h.payload_len()..];
    }
    out
}

/// Every frame `fill_batch` sends, in order, taking batches of `max` bytes until nothing
/// is left.
fn drain(st: &mut State, max: usize) -> Vec<(Kind, u32, usize)> {
    let mut all = Vec::new();
    loop {
        let mut batch = BytesMut::new();
        st.fill_batch(&mut batch, max);
        if batch.is_empty() {
            return all;
        }
        all.extend(frames(&batch));
    }
}

/// The index of stream `id`'s FIN among `frames`.
fn fin_at(frames: &[(Kind, u32, usize)], id: u32) -> usize {
    frames.iter().position(|f| f.0 == Kind::Fin && f.1 == id).unwrap()
}

#[test]
fn a_short_answer_queued_behind_a_long_one_finishes_first() {
    let mut st = opened(2);
    // A long answer (a send buffer's worth) is queued first, a 20 kB one right behind it.
    queue(&mut st, 1, 128 * 1024, true);
    queue(&mut st, 3, 20_000, true);
    let sent = drain(&mut st, MAX_DATA);
    let short_done = fin_at(&sent, 3);
    let long_frames_before = sent[..short_done].iter().filter(|f| f.1 == 1).count();
    assert_eq!(
        long_frames_before, 0,
        "the short answer waited for {long_frames_before} frames of the long one: {sent:?}"
    );
    // Both complete, each byte once.
    for (id, n) in [(1, 128 * 1024), (3, 20_000)] {
        let bytes: usize = sent
            .iter()
            .filter(|f| f.0 == Kind::Data && f.1 == id)
            .map(|f| f.2)
            .sum();
        assert_eq!(bytes, n, "stream {id}");
    }
    assert!(fin_at(&sent, 1) > short_done);
}

#[test]
fn a_long_stream_keeps_its_turns_among_short_ones() {
    // Stream 1 keeps a send buffer queued; a new short answer arrives before every batch.
    let mut st = opened(1);
    queue(&mut st, 1, 128 * 1024, false);
    let mut long = 0;
    for _ in 0..40 {
        let id = st.open(Bytes::new()).unwrap();
        st.control.clear();
        queue(&mut st, id, 4_000, true);
        let mut batch = BytesMut::new();
        st.fill_batch(&mut batch, MAX_DATA);
        long += frames(&batch).iter().filter(|f| f.1 == 1).map(|f| f.2).sum::<usize>();
        let s = st.streams.get_mut(&1).unwrap();
        let topup = 128 * 1024 - s.out_len;
        s.credit += topup as u64;
        queue(&mut st, 1, topup, false);
    }
    // It waits for at most its own queued bytes of others between turns: over 40 × 4 kB of
    // short answers it still had at least one frame.
    assert!(long >= MAX_DATA, "the long stream sent {long} bytes");
}

#[test]
fn two_long_streams_alternate_in_runs() {
    let mut st = opened(2);
    queue(&mut st, 1, 64 * 1024, true);
    queue(&mut st, 3, 64 * 1024, true);
    let sent = drain(&mut st, MAX_DATA);
    let order: Vec<u32> = sent.iter().filter(|f| f.0 == Kind::Data).map(|f| f.1).collect();
    // Nearest to done first: the first one runs to its end, then the other.
    assert_eq!(order, [1, 1, 1, 1, 3, 3, 3, 3]);
}

#[test]
fn a_dropped_handle_sends_its_data_then_rst() {
    let mut st = opened(1);
    queue(&mut st, 1, 1000, false);
    st.drop_handle(1, false);
    let sent = drain(&mut st, 1 << 20);
    assert_eq!(sent, [(Kind::Data, 1, 1000), (Kind::Rst, 1, 0)]);
    assert!(st.streams.is_empty(), "the stream is gone once its RST went out");
}
