//! The sender's two write paths (copying and sharing `Bytes`) emit the same frames.

use bytes::Bytes;

use super::*;
use crate::fbdt::config::WindowConfig;
use crate::time::Duration;
use crate::wire::{Ack, Data, PathRx, MAX_SEGMENT};

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
            path_rx: s
                .paths
                .iter()
                .map(|t| PathRx {
                    epoch: t.epoch,
                    bytes: t.sent,
                })
                .collect(),
            ranges: Default::default(),
        };
        copying.on_ack(PathId(0), &ack, now).unwrap();
        sharing.on_ack(PathId(0), &ack, now).unwrap();
        if sharing.is_all_acked() && sharing.stream.is_finished() {
            break;
        }
    }
    assert!(copying.is_all_acked() && sharing.is_all_acked() && sharing.stream.is_finished());
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

/// A sender over `paths` paths with the paper's 1448-byte segments and 64 KiB windows,
/// `n` bytes written and handed out in turn (path 0 first) until nothing is left to send.
fn loaded_sender(paths: u8, n: usize, now: Instant) -> FbdtSender {
    let params = crate::Config::paper().stream_params();
    let mut s = FbdtSender::new(&FbdtConfig::paper(), params, 0, 64 << 20);
    for p in 0..paths {
        s.path_up(PathId(p), now);
    }
    assert_eq!(s.write(&data(n)), n);
    let mut busy = true;
    while busy {
        busy = false;
        for p in 0..paths {
            busy |= s.poll_transmit(PathId(p), 64 * 1024, now, &mut Vec::new()) > 0;
        }
    }
    s
}

fn ack(s: &FbdtSender, path_rx: Vec<PathRx>) -> Ack {
    Ack {
        cum: s.space.seq(s.stream.una()),
        window: 64 << 20,
        fin: false,
        path_rx: path_rx.into(),
        ranges: Default::default(),
    }
}

/// Issue 15 item 3: with no ranges at all (far more than 32 holes outstanding), the
/// per-path counters alone tell which copies arrived: nothing they passed is re-sent,
/// however late, and only the copies beyond them are.
#[test]
fn copies_a_counter_passed_count_as_delivered_without_ranges() {
    let now = Instant::ZERO;
    let mut s = loaded_sender(2, 2 << 20, now);
    let (sent0, sent1) = (s.paths[0].sent, s.paths[1].sent);
    assert!(sent0 > 0 && sent1 > 0);
    // Path 0 delivered everything it was handed, path 1 all but its last 10 segments.
    let short = 10 * 1448;
    let counters = vec![
        PathRx { epoch: 0, bytes: sent0 },
        PathRx {
            epoch: 0,
            bytes: sent1 - short,
        },
    ];
    let later = now + Duration::from_millis(10);
    s.on_ack(PathId(0), &ack(&s, counters.clone()), later).unwrap();
    let unacked: u64 = s
        .segs
        .iter()
        .filter(|g| g.state != SegState::Acked)
        .map(|g| u64::from(g.len))
        .sum();
    assert_eq!(unacked, short, "exactly path 1's undelivered copies are outstanding");
    // Long after every deadline, path 0 re-sends only those.
    let late = later + Duration::from_millis(5000);
    s.handle_timeout(late);
    let mut resent = 0;
    while s.poll_transmit(PathId(0), 64 * 1024, late, &mut Vec::new()) > 0 {
        s.on_ack(PathId(0), &ack(&s, counters.clone()), late).unwrap();
        resent = s.stats().redundant_bytes_sent;
    }
    assert_eq!(resent, short);
}

/// Issue 15 item 4: a path's counters restart with each connection epoch; an ACK still
/// carrying the previous connection's counter (sent before the reconnect, on another path)
/// neither counts as delivery on the new connection nor marks its copies delivered.
#[test]
fn a_counter_of_an_earlier_connection_is_ignored() {
    let now = Instant::ZERO;
    let mut s = loaded_sender(2, 1 << 20, now);
    let old_sent = s.paths[1].sent;
    s.path_down(PathId(1), now);
    s.set_path_epoch(PathId(1), 1);
    s.path_up(PathId(1), now);
    assert_eq!((s.paths[1].sent, s.paths[1].rx, s.paths[1].epoch), (0, 0, 1));
    // Path 1's new connection re-sends what the old one held.
    let later = now + Duration::from_millis(1);
    while s.poll_transmit(PathId(1), 64 * 1024, later, &mut Vec::new()) > 0 {}
    let new_sent = s.paths[1].sent;
    assert!(new_sent > 0);
    let outstanding = |s: &FbdtSender| s.segs.iter().filter(|g| g.state != SegState::Acked).count();
    let before = outstanding(&s);
    // A late ACK: path 1's old connection had delivered everything it was handed.
    let path_1_counter = |epoch, bytes| vec![PathRx::default(), PathRx { epoch, bytes }];
    s.on_ack(PathId(0), &ack(&s, path_1_counter(0, old_sent)), later)
        .unwrap();
    assert_eq!(s.paths[1].rx, 0);
    assert_eq!(s.paths[1].in_flight(), new_sent);
    assert_eq!(outstanding(&s), before);
    // The new connection's own counter is taken.
    s.on_ack(PathId(0), &ack(&s, path_1_counter(1, new_sent)), later)
        .unwrap();
    assert_eq!(s.paths[1].in_flight(), 0);
    assert!(outstanding(&s) < before);
}

/// A reconnect under the same epoch (a driver that numbers no connections) keeps the
/// counters running, and then they no longer prove delivery: the old connection's bytes
/// may be in them.
#[test]
fn a_reconnect_under_the_same_epoch_keeps_counting_but_proves_nothing() {
    let now = Instant::ZERO;
    let mut s = loaded_sender(2, 1 << 20, now);
    s.path_down(PathId(1), now);
    s.path_up(PathId(1), now);
    assert!(!s.paths[1].counter_exact && s.paths[0].counter_exact);
}

/// Issue 15 item 2: a late copy is re-sent only in the head window, only if its holder
/// stopped moving or the re-send would arrive sooner, and only under the cap; a copy whose
/// holder died is rescued whatever the cap.
#[test]
fn redundancy_only_where_it_helps() {
    let start = Instant::ZERO;
    let mut s = loaded_sender(2, 1 << 20, start);
    assert!(s.windows.len() > 2);
    let late = start + Duration::from_millis(5000);
    let head = s.windows[0].seg_lo..s.windows[0].seg_hi;
    // Path 1 is moving fast: its late copies will be through before path 0's would.
    s.paths[1].est.rate = Some(1e12);
    s.paths[1].last_progress = late;
    assert_eq!(s.rescue_segment(PathId(0), late), None);
    // Path 1 stopped moving: path 0 re-sends its copies, the head window's only.
    s.paths[1].last_progress = start;
    let (idx, why) = s.rescue_segment(PathId(0), late).expect("a late copy is re-sent");
    assert_eq!(why, Resend::Redundant);
    assert!(head.contains(&idx), "{idx} outside the head window {head:?}");
    // Over the cap: nothing more.
    s.optional_resent = s.stream.una() + (1 << 20);
    assert_eq!(s.rescue_segment(PathId(0), late), None);
    // A dead holder's copies are rescued all the same.
    s.path_down(PathId(1), late);
    assert!(matches!(s.rescue_segment(PathId(0), late), Some((_, Resend::Rescue))));
}

/// The budget window: Σ rate × budget, at least two segments per flowing path, at most
/// `max`; a zero budget is refused.
#[test]
fn the_budget_window_follows_rate_times_budget() {
    let params = crate::Config::default().stream_params();
    let cfg = FbdtConfig {
        window: WindowConfig::Budget {
            delay: Duration::from_millis(50),
            max: 16 << 20,
        },
        ..FbdtConfig::default()
    };
    assert!(cfg.validate(&params).is_ok());
    let mut s = FbdtSender::new(&cfg, params, 0, 64 << 20);
    s.path_up(PathId(0), Instant::ZERO);
    s.path_up(PathId(1), Instant::ZERO);
    s.paths[0].est.rate = Some(75e6);
    s.paths[1].est.rate = Some(25e6);
    assert_eq!(s.target_window(), 5_000_000);
    s.paths[0].est.rate = Some(1.0);
    s.paths[1].est.rate = Some(1.0);
    assert_eq!(s.target_window(), 2 * 2 * params.segment_size);
    s.paths[0].est.rate = Some(1e12);
    assert_eq!(s.target_window(), 16 << 20);
    let zero = FbdtConfig {
        window: WindowConfig::Budget {
            delay: Duration::ZERO,
            max: 16 << 20,
        },
        ..FbdtConfig::default()
    };
    assert!(zero.validate(&params).is_err());
}

/// The send limit is a number of TCP windows: below one the pipe runs dry between ACKs.
#[test]
fn the_send_limit_is_at_least_one_tcp_window() {
    let params = crate::Config::default().stream_params();
    for bad in [0.5, f64::NAN, f64::INFINITY] {
        let cfg = FbdtConfig {
            send_limit_windows: bad,
            ..FbdtConfig::default()
        };
        assert!(cfg.validate(&params).is_err(), "{bad}");
    }
    let mut s = FbdtSender::new(&FbdtConfig::default(), params, 0, 64 << 20);
    s.path_up(PathId(0), Instant::ZERO);
    assert_eq!(s.path_send_limit(PathId(0)), None, "unlimited until the driver reports");
    s.paths[0].est.driver.cwnd_bytes = Some(400_000);
    // Without a transport report, plus one ACK's worth of bytes (a whole number of
    // segments by default).
    let between_acks = params.ack_bytes as u64;
    assert_eq!(s.path_send_limit(PathId(0)), Some(500_000 + between_acks));
}

/// With `in_flight_from_transport` (issue 37), bytes the transport reports acknowledged stop
/// counting against a path's send limit before FBDT's sparse ACK says they arrived, the
/// limit no longer adds the bytes between two ACKs, and a new connection forgets the old
/// one's report.
#[test]
fn the_transport_report_frees_the_send_limit_before_fbdts_ack() {
    let params = crate::Config {
        ack_bytes: 128 << 10,
        ..crate::Config::default()
    }
    .stream_params();
    let cfg = FbdtConfig {
        in_flight_from_transport: true,
        ..FbdtConfig::default()
    };
    let mut s = FbdtSender::new(&cfg, params, 0, 64 << 20);
    let now = Instant::ZERO;
    s.path_up(PathId(0), now);
    let stats = |unacked| PathStats {
        cwnd_bytes: Some(256 << 10),
        unacked_bytes: unacked,
        ..PathStats::default()
    };
    s.path_stats(PathId(0), stats(None));
    let sparse = s.path_send_limit(PathId(0)).unwrap();
    assert_eq!(s.write(&data(8 << 20)), 8 << 20);
    let send_all = |s: &mut FbdtSender| {
        let mut n = 0;
        while s.poll_transmit(PathId(0), 256 << 10, now, &mut Vec::new()) > 0 {
            n += 1;
            assert!(n < 1000, "the send limit never held");
        }
        s.paths[0].sent
    };
    let held = send_all(&mut s);
    assert!(held <= sparse && held + (64 << 10) > sparse, "{held} of {sparse}");
    assert_eq!(
        s.transport_report_wanted(PathId(0)),
        None,
        "no report yet: only FBDT's ACKs can free the limit"
    );
    // The transport says all but 64 KiB were acknowledged: the limit, now counted from
    // the transport and without the sparse ACKs' allowance, lets the path send more.
    s.path_stats(PathId(0), stats(Some(64 << 10)));
    let tight = s.path_send_limit(PathId(0)).unwrap();
    assert!(tight < sparse, "{tight} vs {sparse}");
    assert_eq!(s.paths[0].limited_in_flight(), 64 << 10);
    let more = send_all(&mut s) - held;
    assert!(more > 0 && (64 << 10) + more <= tight, "{more} more under {tight}");
    assert_eq!(s.paths[0].limited_in_flight(), (64 << 10) + more);
    // Held back again, the sender asks for a fresh report when the bytes it lacks should
    // have drained at the path's rate: no sooner than an eighth of the RTT (also when no
    // rate is known), no later than one RTT.
    let rtt = s.paths[0].est.rtt();
    let eighth = Duration::from_micros(rtt.as_micros() / 8);
    let wanted = |s: &mut FbdtSender, bytes_per_s: f64| {
        s.paths[0].est.driver.delivery_rate_bps = Some(bytes_per_s * 8.0);
        s.transport_report_wanted(PathId(0)).expect("the limit waits on the transport")
    };
    let lacking = s.paths[0].limit_shortfall as f64;
    assert!(lacking > 0.0);
    assert_eq!(wanted(&mut s, lacking / (rtt.as_secs_f64() / 2.0)), Duration::from_micros(rtt.as_micros() / 2));
    assert_eq!(wanted(&mut s, 1.0), rtt);
    assert_eq!(wanted(&mut s, 1e15), eighth);
    s.paths[0].est.driver.delivery_rate_bps = None;
    assert_eq!(s.transport_report_wanted(PathId(0)), Some(eighth));
    // A report never counts more than FBDT's own ACKs leave outstanding.
    s.path_stats(PathId(0), stats(Some(1 << 30)));
    assert_eq!(s.paths[0].limited_in_flight(), s.paths[0].in_flight());
    // A poll that sends clears the request.
    s.path_stats(PathId(0), stats(Some(0)));
    assert!(s.poll_transmit(PathId(0), 256 << 10, now, &mut Vec::new()) > 0);
    assert_eq!(s.transport_report_wanted(PathId(0)), None);
    // A new connection (a new epoch) starts without a report.
    s.path_stats(PathId(0), stats(Some(0)));
    s.path_down(PathId(0), now);
    s.path_up(PathId(0), now);
    assert!(s.paths[0].transport_unacked.is_none());
    // Off (the paper's rule), the report is ignored.
    let acks_only = FbdtConfig {
        in_flight_from_transport: false,
        ..FbdtConfig::default()
    };
    let mut off = FbdtSender::new(&acks_only, params, 0, 64 << 20);
    off.path_up(PathId(0), now);
    off.path_stats(PathId(0), stats(Some(0)));
    assert!(off.paths[0].transport_unacked.is_none());
    assert_eq!(off.path_send_limit(PathId(0)), Some(sparse));
}

/// Hysteresis in time (issue 15): a path that outscores the forward one by the factor at a
/// single window load does not take the forward lane; one that keeps doing so for
/// `forward_hold` does, and a forward path that stalls is replaced at once.
#[test]
fn the_forward_path_changes_only_after_a_sustained_lead() {
    let cfg = FbdtConfig::default();
    let params = crate::Config::default().stream_params();
    let mut s = FbdtSender::new(&cfg, params, 7, 1 << 20);
    let t0 = Instant::ZERO;
    for p in [PathId(0), PathId(1)] {
        s.path_up(p, t0);
    }
    let rates = |s: &mut FbdtSender, a: f64, b: f64| {
        s.paths[0].est.rate = Some(a);
        s.paths[1].est.rate = Some(b);
    };
    let first = |s: &mut FbdtSender, now| s.ranked_paths(PathId(0), None, now)[0].0;
    rates(&mut s, 100e6, 50e6);
    assert_eq!(first(&mut s, t0), PathId(0));
    // Path 1 leads by 3× for one load, then falls back: no change.
    rates(&mut s, 100e6, 300e6);
    assert_eq!(first(&mut s, t0 + Duration::from_millis(10)), PathId(0));
    rates(&mut s, 100e6, 50e6);
    assert_eq!(first(&mut s, t0 + Duration::from_millis(20)), PathId(0));
    // A lead below the factor never counts.
    rates(&mut s, 100e6, 110e6);
    assert_eq!(first(&mut s, t0 + Duration::from_millis(200)), PathId(0));
    // A sustained lead: kept until `forward_hold` has passed since it began.
    rates(&mut s, 100e6, 300e6);
    let lead = t0 + Duration::from_millis(300);
    assert_eq!(first(&mut s, lead), PathId(0));
    assert_eq!(
        first(&mut s, lead + cfg.forward_hold - Duration::from_millis(1)),
        PathId(0)
    );
    assert_eq!(first(&mut s, lead + cfg.forward_hold), PathId(1));
    assert_eq!(s.stats.forward_changes, 1);
    // The forward path stalls: the other one takes over at the next load, no hold.
    s.paths[1].stalled = true;
    assert_eq!(
        first(&mut s, lead + cfg.forward_hold + Duration::from_millis(1)),
        PathId(0)
    );
}

/// A driver may call `finish` at every step after its last write: only the first call
/// changes the sender, so a path's idle-poll memory survives the others.
#[test]
fn finishing_again_keeps_the_idle_poll_memory() {
    let params = crate::Config::default().stream_params();
    let mut s = FbdtSender::new(&FbdtConfig::default(), params, 7, 1 << 20);
    let now = Instant::ZERO;
    s.path_up(PathId(0), now);
    // A window of 64 KiB: the path's send limit holds it after a few segments.
    s.paths[0].est.driver.cwnd_bytes = Some(64 * 1024);
    let data = vec![7u8; 1 << 20];
    assert_eq!(s.write(&data), data.len());
    s.finish();
    let mut sent = 0;
    while s.poll_transmit(PathId(0), 64 * 1024, now, &mut Vec::new()) > 0 {
        sent += 1;
        assert!(sent < 100, "the send limit never held");
    }
    assert!(
        s.poll_idle(PathId(0), 64 * 1024, now),
        "a path at its send limit is remembered"
    );
    s.finish();
    assert!(
        s.poll_idle(PathId(0), 64 * 1024, now),
        "a second finish voided the memory"
    );
}

/// Issue 37: one DATA frame carries several adjacent segments of one lane end, and each
/// stays a copy of its own — its state, its end in the path's byte count, its ACK by the
/// path's counter.
#[test]
fn a_frame_of_several_segments_keeps_them_apart() {
    const SEG: usize = 16 * 1024;
    let params = StreamParams {
        send_buffer: 8 << 20,
        ..crate::Config::default().stream_params()
    };
    let mut s = FbdtSender::new(&FbdtConfig::default(), params, 0, 32 << 20);
    let now = Instant::ZERO;
    s.path_up(PathId(0), now);
    // 500 MB/s: 250 µs of it is 7 segments.
    s.paths[0].est.set_rate(500e6);
    s.paths[0].est.rtt_sample(Duration::from_millis(2), now);
    s.write(&vec![1u8; 4 << 20]);
    let k = s.frame_segments(PathId(0));
    assert_eq!(k, 7);
    let mut out = Vec::new();
    // The first frame is DATA (the window's ALIGN is queued by loading it, sent next).
    let n = s.poll_transmit(PathId(0), 1 << 20, now, &mut out);
    assert_eq!(out[0], 3, "a DATA frame");
    let segs = (n - Data::OVERHEAD) / SEG;
    assert_eq!(n, Data::OVERHEAD + segs * SEG);
    assert!(segs >= 2 && segs as u64 <= k, "{segs} segments in one frame");
    assert_eq!(s.paths[0].copies.len(), segs);
    for (i, g) in s.segs.iter().take(segs).enumerate() {
        match g.state {
            SegState::Sent {
                holders, end, copies, ..
            } => {
                assert_eq!((holders, end, copies), (1, ((i + 1) * SEG) as u64, 1));
            }
            other => panic!("segment {i}: {other:?}"),
        }
    }
    // The counter passing two segments' bytes acknowledges those two, not the frame.
    let ack = Ack {
        cum: s.space.seq(0),
        window: 32 << 20,
        fin: false,
        path_rx: [PathRx {
            epoch: s.paths[0].epoch,
            bytes: 2 * SEG as u64,
        }]
        .into_iter()
        .collect(),
        ranges: Default::default(),
    };
    s.on_ack(PathId(0), &ack, now + Duration::from_millis(2)).unwrap();
    // (Acknowledged segments at the front leave the table.)
    assert_eq!((s.seg_base, s.stream.una()), (2, 2 * SEG as u64));
    assert!(s
        .segs
        .iter()
        .take(segs - 2)
        .all(|g| matches!(g.state, SegState::Sent { .. })));
    assert_eq!(s.paths[0].copies.len(), segs - 2);
}

/// `unsent_budget` (issue 39): written bytes wait outside any window only up to what the
/// paths drain in the budget (at least two windows); once a window loads, more may come.
#[test]
fn unsent_bytes_are_bounded_by_the_budget_and_make_room_as_windows_load() {
    let params = crate::Config::default().stream_params();
    let cfg = FbdtConfig {
        unsent_budget: Some(Duration::from_millis(5)),
        ..FbdtConfig::default()
    };
    let mut s = FbdtSender::new(&cfg, params, 0, 64 << 20);
    let now = Instant::ZERO;
    s.path_up(PathId(0), now);
    s.path_stats(
        PathId(0),
        PathStats {
            delivery_rate_bps: Some(8e9),
            srtt: Some(Duration::from_millis(1)),
            ..PathStats::default()
        },
    );
    let allowance = s.unsent_allowance();
    assert!(allowance >= 5_000_000 - 2 * params.segment_size as u64, "1 GB/s × 5 ms: {allowance}");
    assert!(allowance < 8 << 20, "far below the send buffer: {allowance}");
    assert_eq!(s.write(&data(32 << 20)) as u64, allowance, "no more than the budget waits");
    assert_eq!(s.send_room(), 0);
    assert!(s.poll_transmit(PathId(0), 256 << 10, now, &mut Vec::new()) > 0);
    let loaded = s.loaded;
    assert!(loaded > 0 && s.send_room() as u64 == loaded.min(allowance), "room {} after {loaded} loaded", s.send_room());
    // Off, the whole send buffer may fill.
    let mut off = FbdtSender::new(&FbdtConfig::default(), params, 0, 64 << 20);
    off.path_up(PathId(0), now);
    assert_eq!(off.write(&data(8 << 20)), 8 << 20);
}

/// A path whose drain rate fills more than one frame in the frame budget (the kernel's
/// delivery rate on loopback reads tens of Gbit/s) sends full frames, one after the
/// other: it does not wait, with data in flight, for room for a frame no frame can be.
#[test]
fn a_path_faster_than_one_frame_per_budget_sends_full_frames() {
    let params = StreamParams {
        send_buffer: 32 << 20,
        ..crate::Config::default().stream_params()
    };
    let mut s = FbdtSender::new(&FbdtConfig::default(), params, 0, 64 << 20);
    let now = Instant::ZERO;
    s.path_up(PathId(0), now);
    // 5 GB/s: 250 µs of it is 76 segments, a frame carries 16.
    s.paths[0].est.set_rate(5e9);
    s.paths[0].est.driver.cwnd_bytes = Some(64 << 20);
    s.paths[0].est.rtt_sample(Duration::from_millis(1), now);
    s.write(&data(16 << 20));
    let full = MAX_SEGMENT / params.segment_size;
    assert_eq!(s.frame_segments(PathId(0)), full as u64);
    let mut frames = 0;
    for _ in 0..8 {
        let mut out = Vec::new();
        let n = s.poll_transmit(PathId(0), crate::wire::MAX_FRAME_LEN, now, &mut out);
        if out.first() == Some(&3) {
            assert_eq!(n, Data::OVERHEAD + MAX_SEGMENT, "a full DATA frame");
            frames += 1;
        }
    }
    assert!(frames >= 4, "{frames} full frames in 8 polls");
    assert!(s.paths[0].in_flight() >= 4 * MAX_SEGMENT as u64);
}

/// A sender with the default configuration over two paths, polled once at `start` (the
/// session's radios are awake then).
fn default_sender(start: Instant) -> FbdtSender {
    let params = crate::Config::default().stream_params();
    let mut s = FbdtSender::new(&FbdtConfig::default(), params, 0, 64 << 20);
    for p in 0..2 {
        s.path_up(PathId(p), start);
        assert_eq!(s.poll_transmit(PathId(p), 1 << 20, start, &mut Vec::new()), 0);
    }
    s
}

/// Issue 39: the first ACK of a wake episode shows one radio awake, not the other: the
/// awake path goes on copying what only the silent one holds (a transfer longer than one
/// round of the first path to wake is not left behind a radio still asleep), and nothing
/// once both have answered.
#[test]
fn after_the_first_ack_the_awake_path_copies_what_the_silent_one_holds() {
    let start = Instant::ZERO;
    let mut s = default_sender(start);
    let idle = start + Duration::from_millis(1000);
    let seg = crate::Config::default().stream_params().segment_size as usize;
    let len = 4 * seg;
    assert_eq!(s.write(&data(len)), len);
    // Path 1 takes what its lane gives it; path 0, with room for one frame, sends one
    // segment (its own or a copy) before its ACK.
    assert!(s.poll_transmit(PathId(1), 1 << 20, idle, &mut Vec::new()) > 0);
    assert!(s.poll_transmit(PathId(0), seg + Data::OVERHEAD, idle, &mut Vec::new()) > 0);
    let held_by = |s: &FbdtSender, p: u8| -> Vec<u64> {
        (s.seg_base..s.seg_base + s.segs.len() as u64)
            .filter(|&i| matches!(s.seg(i).state, SegState::Sent { holders, .. } if holders == PathId(p).bit()))
            .collect()
    };
    let silent_only = held_by(&s, 1);
    assert!(!silent_only.is_empty(), "path 1 holds segments no other path has");

    // Path 0's ACK (nothing new delivered yet): path 0 is awake, path 1 not heard from.
    let woke = idle + Duration::from_millis(6);
    s.on_ack(PathId(0), &ack(&s, vec![PathRx { epoch: 0, bytes: 0 }; 2]), woke).unwrap();
    let copied = s.stats.wake_copy_bytes;
    for _ in 0..8 {
        s.poll_transmit(PathId(0), 1 << 20, woke, &mut Vec::new());
    }
    assert!(held_by(&s, 1).is_empty(), "path 0 copied {silent_only:?}");
    assert!(s.stats.wake_copy_bytes > copied);

    // Path 1 answers too: the episode is over, a further write goes out once.
    let both = woke + Duration::from_millis(1);
    s.on_ack(PathId(1), &ack(&s, vec![PathRx { epoch: 0, bytes: 0 }; 2]), both).unwrap();
    assert!(s.wake_episode.is_none());
    let redundant = s.stats.redundant_bytes_sent;
    assert_eq!(s.write(&data(1700)), 1700);
    for _ in 0..3 {
        for p in 0..2 {
            s.poll_transmit(PathId(p), 1 << 20, both, &mut Vec::new());
        }
    }
    assert_eq!(s.stats.bytes_sent, len as u64 + 1700);
    assert_eq!(s.stats.redundant_bytes_sent, redundant, "sent once");
}

/// Issue 39: a short transfer after every path was idle goes out on a second path too, at
/// once (the first radio to wake delivers it); once it is acknowledged, or when the
/// transfer is long, or after a short gap, nothing is copied.
#[test]
fn a_short_transfer_from_idle_is_copied_to_a_second_path_until_it_is_acknowledged() {
    let start = Instant::ZERO;
    let mut s = default_sender(start);
    let idle = start + Duration::from_millis(1000);
    assert_eq!(s.write(&data(1700)), 1700);
    let (mut first, mut copy) = (Vec::new(), Vec::new());
    assert!(s.poll_transmit(PathId(1), 1 << 20, idle, &mut first) > 0);
    // The other path, polled in the same instant (or at the timeout asked for), copies it.
    assert!(s.poll_timeout().is_some_and(|t| t <= idle + Duration::from_millis(1)));
    // (An ALIGN frame the layout change queued may go first.)
    for _ in 0..2 {
        copy.clear();
        if s.poll_transmit(PathId(0), 1 << 20, idle, &mut copy) == first.len() {
            break;
        }
    }
    assert_eq!(first, copy, "the copy is the same DATA frame");
    assert_eq!((s.stats.wake_episodes, s.stats.wake_copy_bytes), (1, 1700));
    assert_eq!(s.poll_transmit(PathId(0), 1 << 20, idle, &mut Vec::new()), 0);

    // The copy's ACK, which covers the whole transfer, ends the episode: the next write
    // goes out once.
    let acked = idle + Duration::from_millis(6);
    let a = Ack {
        cum: s.space.seq(1700),
        ..ack(&s, vec![PathRx { epoch: 0, bytes: 1700 }; 2])
    };
    s.on_ack(PathId(0), &a, acked).unwrap();
    assert_eq!(s.write(&data(1700)), 1700);
    let redundant = s.stats.redundant_bytes_sent;
    for _ in 0..3 {
        for p in 0..2 {
            s.poll_transmit(PathId(p), 1 << 20, acked, &mut Vec::new());
        }
    }
    assert_eq!(s.stats.bytes_sent, 3400);
    assert_eq!(s.stats.redundant_bytes_sent, redundant, "sent once");
    assert_eq!((s.stats.wake_episodes, s.stats.wake_copy_bytes), (1, 1700));

    // A long transfer after idleness: no episode (its wake-up is a fraction of it).
    let mut s = default_sender(start);
    assert_eq!(s.write(&data(1 << 20)), 1 << 20);
    s.poll_transmit(PathId(1), 1 << 20, idle, &mut Vec::new());
    assert_eq!(s.stats.wake_episodes, 0);

    // A short gap: the radios are taken to be awake.
    let mut s = default_sender(start);
    assert_eq!(s.write(&data(1700)), 1700);
    let soon = start + Duration::from_millis(10);
    s.poll_transmit(PathId(1), 1 << 20, soon, &mut Vec::new());
    for _ in 0..2 {
        s.poll_transmit(PathId(0), 1 << 20, soon, &mut Vec::new());
    }
    assert_eq!((s.stats.wake_episodes, s.stats.redundant_bytes_sent), (0, 0));
}

/// Issue 37: a transport report that moves one path's send limit and arrival estimate is
/// no change of everything: `poll_timeout`'s answer stays, another path's idle memory stays
/// unless that path's poll read the moved estimate, and a memory of a poll held by its
/// send limit alone stays while it still would be — each one a full poll would make again.
#[test]
fn a_transport_report_voids_only_the_memories_that_read_its_path() {
    let params = StreamParams {
        send_buffer: 64 << 20,
        ..crate::Config::default().stream_params()
    };
    let cfg = FbdtConfig::default();
    assert!(cfg.in_flight_from_transport);
    let mut s = FbdtSender::new(&cfg, params, 0, 64 << 20);
    assert!(s.meets_by_arrival());
    let now = Instant::ZERO;
    let report = |unacked| PathStats {
        cwnd_bytes: Some(1 << 20),
        unacked_bytes: Some(unacked),
        ..PathStats::default()
    };
    for p in 0..2 {
        s.path_up(PathId(p), now);
        s.paths[p as usize].est.rtt_sample(Duration::from_millis(10), now);
        s.path_stats(PathId(p), report(0));
    }
    // Path 0 has no rate yet: with bytes in flight its arrival is unknown, so its arrival
    // checks end before they look at path 1. Path 1's look at path 0's.
    s.paths[1].est.set_rate(100e6);
    assert!(s.write(&data(8 << 20)) > 0);
    let room = 256 << 10;
    let poll = |s: &mut FbdtSender, p: u8| s.poll_transmit(PathId(p), room, now, &mut Vec::new());
    let settle = |s: &mut FbdtSender| {
        let mut frames = 0;
        while poll(s, 0) + poll(s, 1) > 0 {
            frames += 1;
            assert!(frames < 1000, "the send limits never held");
        }
        assert!(s.poll_idle(PathId(0), room, now) && s.poll_idle(PathId(1), room, now));
    };
    // Whether a full poll of `p` would send or change anything now.
    let busy = |s: &FbdtSender, p: u8| {
        let mut full = s.clone();
        full.changes += 1;
        let marks = full.poll_marks(PathId(p));
        poll(&mut full, p) > 0 || full.poll_marks(PathId(p)) != marks
    };
    settle(&mut s);
    let seg = params.segment_size as u64;
    let (changes, timeout) = (s.changes, s.poll_timeout());
    let sent = s.paths[1].sent;
    s.path_stats(PathId(1), report(sent - seg));
    assert_eq!(s.changes, changes, "a moved estimate is no change of everything");
    assert_eq!(s.timeout_memo.get(), Some((changes, timeout)), "poll_timeout's answer stays");
    assert!(s.paths[1].idle.is_none(), "path 1's own memory goes");
    assert!(s.poll_idle(PathId(0), room, now), "path 0 never read path 1's estimate");
    assert!(!busy(&s, 0));
    // A report that frees less than path 1's frame lacks keeps its memory too: its one
    // arrival check answers the same, the limit still holds it, by a byte less.
    settle(&mut s);
    let (in_flight, lacking) = (s.paths[1].limited_in_flight(), s.paths[1].limit_shortfall);
    assert!(lacking > 1);
    s.path_stats(PathId(1), report(in_flight - 1));
    assert!(s.paths[1].idle.is_some(), "still held by its send limit");
    assert_eq!(s.paths[1].limit_shortfall, lacking - 1, "as a full poll would note it");
    assert!(!busy(&s, 1));
    // Path 0's report frees a whole segment, its frame: its memory goes. Path 1's check
    // read path 0's estimate (unknown, so it answers the same) and stays.
    let sent = s.paths[0].sent;
    s.path_stats(PathId(0), report(sent - seg));
    for p in 0..2 {
        assert_eq!(s.paths[p as usize].idle.is_some(), !busy(&s, p), "path {p}");
    }
    assert!(s.paths[0].idle.is_none() && s.paths[1].idle.is_some());
}

/// A sender with path 0 up at `now`, 1 MiB written and sent, an ACK RTT of `ack_rtt`
/// learnt, and its oldest copy due at `due`.
fn with_a_copy_due(cfg: &FbdtConfig, now: Instant, ack_rtt: Duration, due: Instant) -> FbdtSender {
    let params = crate::Config::default().stream_params();
    let mut s = FbdtSender::new(cfg, params, 0, 64 << 20);
    s.path_up(PathId(0), now);
    assert_eq!(s.write(&data(1 << 20)), 1 << 20);
    assert!(s.poll_transmit(PathId(0), 1 << 20, now, &mut Vec::new()) > 0);
    s.paths[0].est.rtt_sample(ack_rtt, now);
    s.paths[0].copies.front_mut().expect("a copy in flight").due = due;
    s
}

/// Issue 41: the transport's silence stands for the lateness rule's quiet time once it
/// has lasted `stall_late` after the path's last progress. A silence from before it (an
/// idle path's last ACK is old) counts from the progress on; an ACK heard again, or the
/// option off, gives the quiet time of 1.5 ACK RTTs back.
#[test]
fn transport_silence_after_the_last_progress_stands_for_the_quiet_time() {
    let ms = Duration::from_millis;
    let now = Instant::from_micros(1_000_000);
    let p = PathId(0);
    // The oldest copy was due at once: overdue by the floor 10 ms on, before the quiet
    // time (30 ms) or the RTT rule (60 ms).
    let mut s = with_a_copy_due(&FbdtConfig::default(), now, ms(20), now);
    let floor = s.cfg.stall_late.expect("the lateness rule is on by default");
    assert_eq!(s.paths[0].est.overdue_margin(floor), floor);
    let quiet = s.stall_deadline(p);
    assert_eq!(quiet, now + ms(30), "1.5 × the 20-ms ACK RTT");
    let silence = |since, until| PathStats {
        ack_silence: Some(AckSilence { since, until }),
        ..PathStats::default()
    };
    // Each report is followed by `poll_timeout`, whose memory must notice the move.
    s.path_stats(p, silence(now - ms(500), now + ms(9)));
    assert_eq!((s.stall_deadline(p), s.poll_timeout().is_some()), (quiet, true));
    s.path_stats(p, silence(now - ms(500), now + ms(10)));
    assert_eq!(s.stall_deadline(p), now + floor);
    assert_eq!(s.poll_timeout(), s.next_timeout());
    s.path_stats(p, silence(now + ms(8), now + ms(12)));
    assert_eq!((s.stall_deadline(p), s.poll_timeout()), (quiet, s.next_timeout()));

    let cfg = FbdtConfig {
        stall_on_ack_silence: AckSilenceUse::Off,
        ..FbdtConfig::default()
    };
    let mut off = with_a_copy_due(&cfg, now, ms(20), now);
    off.path_stats(p, silence(now - ms(500), now + ms(40)));
    assert_eq!(off.stall_deadline(p), quiet);
}

/// Issue 41, round 11: on a long path TCP's ACKs pause between FBDT's bursts (the
/// delay-gap sweep's 290-ms path: 20-ms pauses, each a false stall, 5 % redundant bytes);
/// a silence stands for the lateness rule's quiet time only once it has lasted an eighth
/// of TCP's round trip as well as the floor.
#[test]
fn a_long_paths_short_ack_pause_is_no_quiet_time() {
    let ms = Duration::from_millis;
    let now = Instant::from_micros(1_000_000);
    let p = PathId(0);
    let mut s = with_a_copy_due(&FbdtConfig::default(), now, ms(150), now);
    let quiet = s.stall_deadline(p);
    assert_eq!(quiet, now + ms(225), "1.5 × the 150-ms ACK RTT");
    let silent_until = |until| PathStats {
        srtt: Some(ms(290)),
        ack_silence: Some(AckSilence { since: now - ms(500), until }),
        ..PathStats::default()
    };
    s.path_stats(p, silent_until(now + ms(20)));
    assert_eq!(s.stall_deadline(p), quiet, "20 ms of a 290-ms round trip: a pause");
    s.path_stats(p, silent_until(now + ms(36)));
    assert_eq!(s.stall_deadline(p), quiet, "a millisecond short of an eighth");
    s.path_stats(p, silent_until(now + ms(37)));
    let floor = s.cfg.stall_late.expect("the lateness rule is on by default");
    assert_eq!(s.stall_deadline(p), now + floor, "overdue by the floor, and silent long enough");
}

/// Issue 41, round 9: a silence longer than TCP's round trip + the ACK delay +
/// `stall_late` after the last progress is a stall by itself, even when the oldest copy
/// is not yet due (its due time counted the bytes ahead at a drain rate an earlier outage
/// pulled down); shorter, or with the silence used for the quiet time only, it is not.
#[test]
fn a_silence_past_a_round_trip_is_a_stall_whatever_the_due_times() {
    let ms = Duration::from_millis;
    let now = Instant::from_micros(1_000_000);
    let params = crate::Config::default().stream_params();
    let loaded = |using| {
        let cfg = FbdtConfig {
            stall_on_ack_silence: using,
            ..FbdtConfig::default()
        };
        with_a_copy_due(&cfg, now, ms(20), now + ms(500))
    };
    let silent_until = |until| PathStats {
        srtt: Some(ms(15)),
        ack_silence: Some(AckSilence { since: now - ms(500), until }),
        ..PathStats::default()
    };
    let by_rtt = now + ms(60);
    let proof = now + ms(15) + params.max_ack_delay + ms(10);

    let mut s = loaded(AckSilenceUse::Proof);
    assert_eq!(s.stall_deadline(PathId(0)), by_rtt, "3 × the 20-ms ACK RTT");
    s.path_stats(PathId(0), silent_until(proof - ms(1)));
    assert_eq!(s.stall_deadline(PathId(0)), by_rtt, "a millisecond short of the proof");
    s.path_stats(PathId(0), silent_until(proof + ms(3)));
    assert_eq!(s.stall_deadline(PathId(0)), proof);
    assert_eq!(s.poll_timeout(), Some(proof), "the memory noticed the proof");
    s.handle_timeout(proof + ms(3));
    assert_eq!(s.poll_stalled_path(), Some(PathId(0)));

    let mut quiet_only = loaded(AckSilenceUse::QuietTime);
    quiet_only.path_stats(PathId(0), silent_until(proof + ms(3)));
    assert_eq!(quiet_only.stall_deadline(PathId(0)), by_rtt, "the copy is not overdue");
}

/// Issue 41, round 12: a TCP repair holds the copies in flight for about a round trip,
/// and their lateness is the quiet time's business, not the path's usual spread: a
/// margin that learned it stayed 30–40 ms wide for tens of milliseconds after each of
/// Cubic's losses on the testbed, and a blockage that came then was found that much
/// later. Copies in flight when the transport's retransmission count grows, or when a
/// stall ends, teach the margin nothing; copies handed after that do.
#[test]
fn a_repairs_or_an_outages_lateness_does_not_widen_the_stall_margin() {
    let ms = Duration::from_millis;
    let start = Instant::from_micros(1_000_000);
    let p = PathId(0);
    let floor = FbdtConfig::default().stall_late.expect("the lateness rule is on by default");
    let hand_two = |s: &mut FbdtSender, at: Instant| {
        for _ in 0..2 {
            assert!(s.poll_transmit(p, MAX_SEGMENT as usize, at, &mut Vec::new()) > 0);
        }
    };
    // Acknowledges every copy handed so far, each `late` past its due time.
    let deliver_late = |s: &mut FbdtSender, late: Duration| {
        let due = s.paths[0].copies.back().expect("copies in flight").due;
        for c in s.paths[0].copies.iter_mut() {
            c.due = due;
        }
        let counters = vec![PathRx { epoch: 0, bytes: s.paths[0].sent }];
        s.on_ack(p, &ack(s, counters), due + late).unwrap();
        due + late
    };
    let fresh = || {
        let params = crate::Config::default().stream_params();
        let mut s = FbdtSender::new(&FbdtConfig::default(), params, 0, 64 << 20);
        s.path_up(p, start);
        assert_eq!(s.write(&data(1 << 20)), 1 << 20);
        s.path_stats(p, PathStats { retransmits: Some(0), ..PathStats::default() });
        hand_two(&mut s, start);
        s
    };

    let mut learned = fresh();
    deliver_late(&mut learned, ms(30));
    assert!(learned.paths[0].est.overdue_margin(floor) > ms(30), "30 ms late is learned");

    let mut repaired = fresh();
    repaired.path_stats(p, PathStats { retransmits: Some(2), ..PathStats::default() });
    let now = deliver_late(&mut repaired, ms(30));
    assert_eq!(repaired.paths[0].est.overdue_margin(floor), floor, "held by the repair");
    hand_two(&mut repaired, now);
    deliver_late(&mut repaired, ms(30));
    assert!(repaired.paths[0].est.overdue_margin(floor) > ms(30), "handed after the report");

    let mut outage = fresh();
    hand_two(&mut outage, start);
    outage.update_stalls(start + ms(500));
    assert!(outage.paths[0].stalled);
    // The stall ends with the first copy; the others sat through it too.
    let first = outage.paths[0].copies[0].end;
    outage.on_ack(p, &ack(&outage, vec![PathRx { epoch: 0, bytes: first }]), start + ms(600)).unwrap();
    assert!(!outage.paths[0].stalled);
    deliver_late(&mut outage, ms(30));
    assert_eq!(outage.paths[0].est.overdue_margin(floor), floor, "sat through the outage");
}
