//! The sender's two write paths (copying and sharing `Bytes`) emit the same frames.

use bytes::Bytes;

use super::*;
use crate::time::Duration;
use crate::wire::Ack;

/// Feeds `data` to one sender through `write` (copies) and to another through
/// `write_bytes` in pieces of `sizes` (cycled), drives both over two paths with
/// cumulative ACKs in between, and checks that they emit the same frames. Returns the
/// payload bytes the `Bytes` sender emitted and how many of them were slices of `data`
/// itself (no copy).
fn run_both(data: &Bytes, sizes: &[usize]) -> (u64, u64) {
    let params = StreamParams {
        send_buffer: 256 * 1024,
        ..crate::Config::default().stream_params()
    };
    let cfg = FbdtConfig::default();
    let mut copying = FbdtSender::new(&cfg, params, 7, 1 << 20);
    let mut sharing = FbdtSender::new(&cfg, params, 7, 1 << 20);
    let mut now = Instant::ZERO;
    for s in [&mut copying, &mut sharing] {
        s.path_up(PathId(0), now);
        s.path_up(PathId(1), now);
    }
    let app = data.as_ptr_range();
    let (mut off, mut shared) = (0usize, 0u64);
    let mut sizes = sizes.iter().cycle();
    for _ in 0..10_000 {
        while off < data.len() {
            let piece = data.slice(off..(off + sizes.next().unwrap()).min(data.len()));
            let n = copying.write(&piece);
            assert_eq!(sharing.write_bytes(&piece), n);
            off += n;
            if n < piece.len() {
                break;
            }
        }
        if off == data.len() {
            copying.finish();
            sharing.finish();
        }
        for p in [PathId(0), PathId(1)].into_iter().cycle().take(200) {
            let (mut v, mut fb) = (Vec::new(), FrameBuf::new());
            let n = copying.poll_transmit(p, 64 * 1024, now, &mut v);
            assert_eq!(sharing.poll_transmit_buf(p, 64 * 1024, now, &mut fb), n);
            assert_eq!(v, fb.to_vec());
            shared += fb
                .chunks_from(0)
                .filter(|c| app.contains(&c.as_ptr()))
                .map(|c| c.len() as u64)
                .sum::<u64>();
        }
        now = now + Duration::from_millis(1);
        // Acknowledge everything up to the first segment not sent yet.
        let s = &sharing;
        let cum = s
            .segs
            .iter()
            .find(|g| g.state == SegState::Unsent)
            .map_or(s.loaded, |g| g.off);
        let ack = Ack {
            cum: s.space.seq(cum),
            window: 1 << 20,
            fin: s.fin_loaded && cum == s.loaded && s.segs.iter().all(|g| g.state != SegState::Unsent),
            path_rx: s.paths.iter().map(|t| t.sent).collect(),
            ranges: Vec::new(),
        };
        copying.on_ack(PathId(0), &ack, now).unwrap();
        sharing.on_ack(PathId(0), &ack, now).unwrap();
        if sharing.is_all_acked() && sharing.finished {
            break;
        }
    }
    assert!(copying.is_all_acked() && sharing.is_all_acked() && sharing.finished);
    assert_eq!(copying.stats().bytes_acked, data.len() as u64);
    let st = sharing.stats();
    (st.bytes_sent + st.redundant_bytes_sent, shared)
}

fn data(n: usize) -> Bytes {
    (0..n).map(|i| (i * 31 % 251) as u8).collect::<Vec<u8>>().into()
}

/// Large writes: every payload byte goes out as a slice of the application's memory.
#[test]
fn bytes_writes_go_out_as_slices_of_the_applications_memory() {
    let d = data(3 << 20);
    let (payload, shared) = run_both(&d, &[100_000, 250_000, 8192]);
    assert!(payload >= d.len() as u64);
    assert_eq!(shared, payload);
}

/// Small writes are gathered (copied) into the buffer's tail; frames then straddle
/// shared chunks and the tail, and still match the copying path byte for byte.
#[test]
fn mixed_writes_frame_like_the_copying_path() {
    let d = data(2 << 20);
    let (payload, shared) = run_both(&d, &[1, 5000, 300, 70_000, 4095, 4096, 17]);
    assert!(payload >= d.len() as u64 && shared > 0 && shared < payload);
}
