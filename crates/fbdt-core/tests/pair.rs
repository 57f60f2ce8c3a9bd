//! Two connections joined by in-memory paths (after quinn-proto's `Pair`): fixed latency and
//! rate per path, bytes delivered in random-sized pieces (TCP is a byte stream), virtual
//! time that jumps to the next event, and a bounded drive that fails on livelock.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use fbdt_core::wire::{self, Frame, FrameBuf};
use fbdt_core::{
    AckSilence, Config, Connection, ConnectionStats, Duration, Event, Instant, PathBinding, PathId, PathStats,
    ProtocolError, SchedulerKind,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone)]
struct Pipe {
    latency: Duration,
    /// Bytes per microsecond.
    rate: u64,
    /// The pipe is serialising until then; nothing more is taken before.
    busy_until: Instant,
    queue: VecDeque<(Instant, Vec<u8>)>,
}

impl Pipe {
    fn new(latency_us: u64, rate: u64) -> Pipe {
        Pipe {
            latency: Duration::from_micros(latency_us),
            rate,
            busy_until: Instant::ZERO,
            queue: VecDeque::new(),
        }
    }
}

/// `Clone`: a fork of the whole pair, pipes and byte-cutting randomness included.
#[derive(Clone)]
struct Pair {
    client: Connection,
    server: Connection,
    /// `[path] -> (client→server, server→client)`
    pipes: Vec<(Pipe, Pipe)>,
    now: Instant,
    rng: ChaCha8Rng,
    client_errors: Vec<ProtocolError>,
    server_errors: Vec<ProtocolError>,
    /// The client receives through `handle_recv_buf` (one read buffer per path) and both
    /// sides transmit through `poll_transmit_buf`, as fbdt-net does.
    buffers: bool,
    client_rbufs: Vec<BytesMut>,
    /// Frames travel whole and are received through `handle_recv_split`, a DATA or
    /// MP_DATA payload apart from its head (as the simulator carries them).
    split: bool,
}

/// Hands one whole frame to `conn` as `handle_recv_split` takes it: head and payload apart
/// for DATA and MP_DATA, the whole frame as the head otherwise.
fn recv_split(conn: &mut Connection, path: usize, frame: &[u8], now: Instant) -> Result<(), ProtocolError> {
    let head = match frame.first() {
        Some(3) => wire::Data::OVERHEAD,
        Some(7) => wire::MpData::OVERHEAD,
        _ => frame.len(),
    }
    .min(frame.len());
    let payload = Bytes::copy_from_slice(&frame[head..]);
    conn.handle_recv_split(PathId::slot(path), &frame[..head], &payload, now)
}

const ROOM: usize = 512 * 1024;

impl Pair {
    fn new(paths: usize, cfg: Config) -> Pair {
        let mut client = Connection::client(cfg.clone()).unwrap();
        let mut server = Connection::server(cfg).unwrap();
        let now = Instant::ZERO;
        let mut pipes = Vec::new();
        for p in 0..paths {
            client.add_path(PathId::slot(p), now).unwrap();
            server.add_path(PathId::slot(p), now).unwrap();
            // 200 µs / 900 µs / 1.6 ms; 100, 50, 33 bytes/µs (800, 400, 267 Mbit/s).
            let (latency, rate) = (200 + 700 * p as u64, 100 / (p as u64 + 1));
            pipes.push((Pipe::new(latency, rate), Pipe::new(latency, rate)));
        }
        Pair {
            client,
            server,
            pipes,
            now,
            rng: ChaCha8Rng::seed_from_u64(7),
            client_errors: vec![],
            server_errors: vec![],
            buffers: false,
            client_rbufs: (0..paths).map(|_| BytesMut::new()).collect(),
            split: false,
        }
    }

    fn pump(&mut self) {
        for (p, (up, down)) in self.pipes.iter_mut().enumerate() {
            for (conn, pipe) in [(&mut self.client, &mut *up), (&mut self.server, &mut *down)] {
                while pipe.busy_until <= self.now {
                    let mut out = Vec::new();
                    let n = if self.buffers {
                        let mut fb = FrameBuf::new();
                        let n = conn.poll_transmit_buf(PathId::slot(p), ROOM, self.now, &mut fb);
                        assert_eq!(fb.len(), n);
                        out = fb.to_vec();
                        n
                    } else {
                        conn.poll_transmit(PathId::slot(p), ROOM, self.now, &mut out)
                    };
                    if n == 0 {
                        break;
                    }
                    pipe.busy_until =
                        pipe.busy_until.max(self.now) + Duration::from_micros((n as u64).div_ceil(pipe.rate));
                    let arrival = pipe.busy_until + pipe.latency;
                    if self.split {
                        pipe.queue.push_back((arrival, out));
                        continue;
                    }
                    // Re-cut the byte stream at random points, as TCP may.
                    while !out.is_empty() {
                        let cut = self.rng.gen_range(1..=out.len());
                        let rest = out.split_off(cut);
                        pipe.queue.push_back((arrival, out));
                        out = rest;
                    }
                }
            }
        }
    }

    /// Delivers everything due, fires timers, pumps. Returns whether anything happened.
    fn step(&mut self) -> bool {
        self.pump();
        let mut next: Option<Instant> = None;
        for (up, down) in &self.pipes {
            for pipe in [up, down] {
                if let Some(&(t, _)) = pipe.queue.front() {
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
                if pipe.busy_until > self.now {
                    next = Some(next.map_or(pipe.busy_until, |n| n.min(pipe.busy_until)));
                }
            }
        }
        for t in [self.client.poll_timeout(), self.server.poll_timeout()]
            .into_iter()
            .flatten()
        {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
        let Some(t) = next else { return false };
        self.now = self.now.max(t);
        self.pump();
        for p in 0..self.pipes.len() {
            while self.pipes[p].0.queue.front().is_some_and(|&(t, _)| t <= self.now) {
                let (_, bytes) = self.pipes[p].0.queue.pop_front().unwrap();
                let r = if self.split {
                    recv_split(&mut self.server, p, &bytes, self.now)
                } else {
                    self.server.handle_recv(PathId::slot(p), &bytes, self.now)
                };
                if let Err(e) = r {
                    self.server_errors.push(e);
                }
            }
            while self.pipes[p].1.queue.front().is_some_and(|&(t, _)| t <= self.now) {
                let (_, bytes) = self.pipes[p].1.queue.pop_front().unwrap();
                let r = if self.split {
                    recv_split(&mut self.client, p, &bytes, self.now)
                } else if self.buffers {
                    // As a socket read would: into the spare room of the path's buffer.
                    let buf = &mut self.client_rbufs[p];
                    let mut rest = &bytes[..];
                    let mut r = Ok(());
                    while !rest.is_empty() && r.is_ok() {
                        wire::prepare_recv_buf(buf);
                        let n = rest.len().min(buf.capacity() - buf.len());
                        buf.extend_from_slice(&rest[..n]);
                        rest = &rest[n..];
                        r = self.client.handle_recv_buf(PathId::slot(p), buf, self.now);
                    }
                    r
                } else {
                    self.client.handle_recv(PathId::slot(p), &bytes, self.now)
                };
                if let Err(e) = r {
                    self.client_errors.push(e);
                }
            }
        }
        if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
            self.client.handle_timeout(self.now);
        }
        if self.server.poll_timeout().is_some_and(|t| t <= self.now) {
            self.server.handle_timeout(self.now);
        }
        true
    }

    /// Steps until `done` or nothing is left to do; panics after `max` steps (livelock).
    fn drive_bounded(&mut self, max: usize, mut done: impl FnMut(&mut Pair) -> bool) {
        for _ in 0..max {
            if done(self) || !self.step() {
                return;
            }
        }
        panic!("no quiescence after {max} steps at {}", self.now);
    }

    /// Injects raw bytes as if the client had sent them on `path`.
    fn inject_to_server(&mut self, path: usize, bytes: Vec<u8>) {
        self.pipes[path].0.queue.push_back((self.now, bytes));
    }
}

/// Reads everything `conn` has in order into `into`.
fn read_all(conn: &mut Connection, into: &mut Vec<u8>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = conn.read(&mut buf);
        if n == 0 {
            return;
        }
        into.extend_from_slice(&buf[..n]);
    }
}

/// Writes as much of `data[*off..]` as fits; finishes the stream once all is written.
fn write_some(conn: &mut Connection, data: &[u8], off: &mut usize) {
    *off += conn.write(&data[*off..]);
    if *off == data.len() {
        conn.finish();
    }
}

fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

/// Writes `a_data` from the client and `b_data` from the server, both finish; returns what
/// each side read.
fn exchange(pair: &mut Pair, a_data: &[u8], b_data: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut a_off, mut b_off) = (0, 0);
    let (mut at_server, mut at_client) = (Vec::new(), Vec::new());
    pair.drive_bounded(2_000_000, |p| {
        write_some(&mut p.client, a_data, &mut a_off);
        write_some(&mut p.server, b_data, &mut b_off);
        read_all(&mut p.server, &mut at_server);
        read_all(&mut p.client, &mut at_client);
        p.client.is_recv_finished() && p.server.is_recv_finished() && p.client.is_send_done() && p.server.is_send_done()
    });
    (at_server, at_client)
}

/// Both directions through the `Bytes` APIs (`write_bytes`, `poll_transmit_buf`,
/// `handle_recv_buf`, `read_bytes`) on one side and the slice APIs on the other: FBDT with
/// a receive buffer small enough that the receiver's pinned-memory budget runs out and it
/// falls back to copying, FBDT with a large one, and the meta layer (whose sender frames
/// slices of its `SendBuf`): every byte arrives, in order.
#[test]
fn the_bytes_apis_carry_both_directions() {
    let small = Config {
        recv_buffer: 2 * wire::MAX_SEGMENT,
        ..Config::default()
    };
    let large = Config {
        recv_buffer: 8 << 20,
        ..Config::default()
    };
    for cfg in [small, large, Config::meta(SchedulerKind::MinRtt)] {
        let recv_buffer = cfg.recv_buffer;
        let mut pair = Pair::new(3, cfg);
        pair.buffers = true;
        let (a, b) = (data(3 << 20, 11), data(5 << 20, 12));
        let (a_chunks, b_bytes) = (Bytes::from(a.clone()), Bytes::from(b.clone()));
        let (mut a_off, mut b_off) = (0usize, 0usize);
        let (mut at_server, mut at_client) = (Vec::new(), Vec::new());
        pair.drive_bounded(2_000_000, |p| {
            // The client writes `Bytes` in 100 KiB pieces, the server copies slices.
            while a_off < a.len() {
                let piece = a_chunks.slice(a_off..(a_off + 100_000).min(a.len()));
                let n = p.client.write_bytes(&piece);
                a_off += n;
                if n < piece.len() {
                    break;
                }
            }
            if a_off == a.len() {
                p.client.finish();
            }
            write_some(&mut p.server, &b_bytes, &mut b_off);
            read_all(&mut p.server, &mut at_server);
            while let Some(c) = p.client.read_bytes(70_000) {
                assert!(!c.is_empty() && c.len() <= 70_000);
                at_client.extend_from_slice(&c);
            }
            p.client.is_recv_finished()
                && p.server.is_recv_finished()
                && p.client.is_send_done()
                && p.server.is_send_done()
        });
        assert!(pair.client_errors.is_empty() && pair.server_errors.is_empty());
        assert!(at_server == a, "client → server differs (recv_buffer {recv_buffer})");
        assert!(at_client == b, "server → client differs (recv_buffer {recv_buffer})");
    }
}

/// Whole frames received through `handle_recv_split` (payload apart from its head), FBDT
/// and the meta layer, both directions: every byte arrives, in order. A split frame in the
/// middle of a partial one is refused.
#[test]
fn split_frames_carry_both_directions() {
    for cfg in [Config::default(), Config::meta(SchedulerKind::MinRtt)] {
        let mut pair = Pair::new(3, cfg);
        pair.split = true;
        let (a, b) = (data(2 << 20, 21), data(3 << 20, 22));
        let (at_server, at_client) = exchange(&mut pair, &a, &b);
        assert!(pair.client_errors.is_empty() && pair.server_errors.is_empty());
        assert!(at_server == a && at_client == b);
    }
    let mut pair = Pair::new(1, Config::default());
    pair.drive_bounded(1000, |p| p.client.is_established() && p.server.is_established());
    let now = pair.now;
    let mut head = Vec::new();
    wire::Data::emit_header(fbdt_core::seq::Seq(0), false, 4, &mut head);
    // Half a header, then a split frame: refused, not parsed as a continuation.
    pair.server.handle_recv(PathId(0), &head[..4], now).unwrap();
    let e = pair
        .server
        .handle_recv_split(PathId(0), &head, &Bytes::from_static(b"abcd"), now)
        .unwrap_err();
    assert!(matches!(e, ProtocolError::Unexpected { .. }), "{e:?}");
}

/// A clone of a connection is an independent copy of its whole state (the fuzz targets set
/// an established pair up once and give every input a clone of it): a pair forked
/// mid-transfer — data in flight both ways on three paths, unread bytes held, timers armed
/// — and the original, driven alike, read the same bytes at the same virtual times, count
/// the same and report the same events and errors; driving one leaves the other untouched.
/// FBDT through the slice and the `Bytes` APIs, and the meta layer with MuSher (the
/// scheduler with the most state).
#[test]
fn a_pair_cloned_mid_transfer_carries_on_as_the_original() {
    let cases = [
        (Config::default(), false),
        (Config::default(), true),
        (Config::meta(SchedulerKind::Musher), false),
    ];
    for (cfg, buffers) in cases {
        let mut pair = Pair::new(3, cfg);
        pair.buffers = buffers;
        let (a, b) = (data(2 << 20, 41), data(2 << 20, 42));
        assert_eq!(pair.client.write(&a), a.len());
        assert_eq!(pair.server.write(&b), b.len());
        pair.client.finish();
        pair.server.finish();
        pair.drive_bounded(1_000_000, |p| p.server.readable() >= 512 << 10 && p.client.readable() >= 512 << 10);
        assert!(!pair.server.is_recv_finished() && !pair.client.is_recv_finished(), "forked too late");
        let mut twin = pair.clone();
        let ours = run_to_the_end(&mut pair);
        let theirs = run_to_the_end(&mut twin);
        assert!(ours.at_server == a && ours.at_client == b, "the original lost bytes (buffers {buffers})");
        assert!(
            theirs.at_server == ours.at_server && theirs.at_client == ours.at_client,
            "the clone read other bytes (buffers {buffers})"
        );
        assert_eq!(theirs.end, ours.end);
        assert_eq!(theirs.stats, ours.stats);
        assert_eq!(theirs.events, ours.events);
        assert_eq!(theirs.errors, ours.errors);
        assert!(ours.errors.0.is_empty() && ours.errors.1.is_empty(), "{:?}", ours.errors);
    }
}

/// What a pair did from some point to the end of its exchange.
struct RunEnd {
    at_server: Vec<u8>,
    at_client: Vec<u8>,
    end: Instant,
    stats: (ConnectionStats, ConnectionStats),
    events: (Vec<Event>, Vec<Event>),
    errors: (Vec<ProtocolError>, Vec<ProtocolError>),
}

/// Drives `pair` until both directions are finished and acknowledged, reading everything.
fn run_to_the_end(pair: &mut Pair) -> RunEnd {
    let (mut at_server, mut at_client) = (Vec::new(), Vec::new());
    pair.drive_bounded(2_000_000, |p| {
        read_all(&mut p.server, &mut at_server);
        read_all(&mut p.client, &mut at_client);
        p.client.is_recv_finished() && p.server.is_recv_finished() && p.client.is_send_done() && p.server.is_send_done()
    });
    RunEnd {
        at_server,
        at_client,
        end: pair.now,
        stats: (pair.client.stats(), pair.server.stats()),
        events: (
            std::iter::from_fn(|| pair.client.poll_event()).collect(),
            std::iter::from_fn(|| pair.server.poll_event()).collect(),
        ),
        errors: (pair.client_errors.clone(), pair.server_errors.clone()),
    }
}

#[test]
fn handshake_then_both_directions_over_three_paths() {
    let mut pair = Pair::new(
        3,
        Config {
            segment_size: 4096,
            recv_buffer: 1 << 20,
            send_buffer: 1 << 20,
            ..Config::default()
        },
    );
    let a = data(3_000_000, 1);
    let b = data(2_000_000, 2);
    let (at_server, at_client) = exchange(&mut pair, &a, &b);
    assert!(
        pair.client_errors.is_empty() && pair.server_errors.is_empty(),
        "{:?} {:?}",
        pair.client_errors,
        pair.server_errors
    );
    assert_eq!(at_server, a);
    assert_eq!(at_client, b);
    let events: Vec<Event> = std::iter::from_fn(|| pair.server.poll_event()).collect();
    assert!(events.contains(&Event::Connected));
    assert!(events.contains(&Event::PathJoined(PathId(1))) && events.contains(&Event::PathJoined(PathId(2))));
    let s = pair.server.stats();
    assert!(
        s.sender.per_path_bytes_sent.iter().all(|&b| b > 0),
        "every path carried data: {:?}",
        s.sender.per_path_bytes_sent
    );
}

#[test]
fn an_idle_connection_has_no_timer_and_nothing_to_send() {
    let mut pair = Pair::new(2, Config::default());
    let (a, b) = exchange(&mut pair, b"ping", b"pong");
    assert_eq!((a.as_slice(), b.as_slice()), (&b"ping"[..], &b"pong"[..]));
    // Let the final ACKs land, then everything must be quiet: no spinning timer, no frame.
    pair.drive_bounded(10_000, |_| false);
    assert_eq!(pair.client.poll_timeout(), None);
    assert_eq!(pair.server.poll_timeout(), None);
    for p in 0..2 {
        let mut out = Vec::new();
        assert_eq!(pair.client.poll_transmit(PathId(p), ROOM, pair.now, &mut out), 0);
        assert_eq!(pair.server.poll_transmit(PathId(p), ROOM, pair.now, &mut out), 0);
    }
}

fn established(paths: usize) -> Pair {
    let mut pair = Pair::new(paths, Config::default());
    pair.drive_bounded(10_000, |p| {
        p.client.is_established() && p.server.is_established() && p.server.stats().receiver.acks_sent > 0
    });
    pair
}

#[test]
fn garbage_ends_the_session_with_a_clear_error_and_a_close() {
    let mut pair = established(2);
    pair.inject_to_server(1, vec![0x42; 64]);
    pair.drive_bounded(10_000, |p| p.client.is_closed());
    assert!(
        matches!(
            pair.server_errors.as_slice(),
            [ProtocolError::Wire {
                source: wire::Error::UnknownType(0x42),
                ..
            }]
        ),
        "{:?}",
        pair.server_errors
    );
    assert!(pair.server.is_closed());
    assert!(pair.client.is_closed(), "the client got the CLOSE");
    assert!(
        matches!(
            pair.client_errors.as_slice(),
            [ProtocolError::PeerClosed { code: 1, .. }]
        ),
        "{:?}",
        pair.client_errors
    );
}

#[test]
fn an_oversized_frame_is_refused_before_its_body() {
    let mut pair = established(1);
    let mut huge = vec![wire::FrameType::Data as u8, 0, 0, 0];
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    pair.inject_to_server(0, huge);
    pair.drive_bounded(10_000, |_| false);
    assert!(
        matches!(
            pair.server_errors.as_slice(),
            [ProtocolError::Wire {
                source: wire::Error::TooLong { .. },
                ..
            }]
        ),
        "{:?}",
        pair.server_errors
    );
}

#[test]
fn a_frame_split_across_reads_waits_for_its_rest() {
    let mut server = Connection::server(Config::default()).unwrap();
    server.add_path(PathId(0), Instant::ZERO).unwrap();
    let mut client = Connection::client(Config::default()).unwrap();
    client.add_path(PathId(0), Instant::ZERO).unwrap();
    let mut hello = Vec::new();
    assert!(client.poll_transmit(PathId(0), ROOM, Instant::ZERO, &mut hello) > 0);
    let (head, tail) = hello.split_at(hello.len() / 2);
    server.handle_recv(PathId(0), head, Instant::ZERO).unwrap();
    assert!(!server.is_established() && !server.is_closed());
    server.handle_recv(PathId(0), tail, Instant::ZERO).unwrap();
    assert!(server.is_established());
}

#[test]
fn a_join_with_a_wrong_hmac_drops_only_that_path() {
    let mut pair = Pair::new(1, Config::default());
    pair.drive_bounded(10_000, |p| p.server.is_established() && p.client.is_established());
    // A third party opens path 1 with a forged JOIN.
    let token = pair.server.token().unwrap();
    pair.server.add_path(PathId(1), pair.now).unwrap();
    pair.pipes.push((Pipe::new(100, 100), Pipe::new(100, 100)));
    let mut join = Vec::new();
    Frame::Join(wire::Join {
        token,
        path_index: 1,
        epoch: 0,
        hmac: [0; 32],
    })
    .emit(&mut join);
    pair.inject_to_server(1, join);
    let a = data(200_000, 3);
    let (at_server, _) = exchange(&mut pair, &a, b"");
    assert!(
        matches!(
            pair.server_errors.as_slice(),
            [ProtocolError::BadJoin { path: PathId(1) }]
        ),
        "{:?}",
        pair.server_errors
    );
    assert_eq!(at_server, a, "the session carried on over path 0");
}

#[test]
fn a_server_can_check_a_join_before_it_replaces_a_path() {
    let mut pair = Pair::new(2, Config::default());
    pair.drive_bounded(10_000, |p| p.server.is_established() && p.client.is_established());
    let token = pair.server.token().unwrap();
    let mut forged = Vec::new();
    Frame::Join(wire::Join {
        token,
        path_index: 1,
        epoch: 0,
        hmac: [7; 32],
    })
    .emit(&mut forged);
    assert!(!pair.server.accepts_join(&forged, &[0; 32]));
    assert!(!pair.server.accepts_join(b"garbage", &[0; 32]));
    // The client's real JOIN for path 1, as a fresh connection would start with it.
    pair.client.path_down(PathId(1), pair.now);
    pair.client.add_path(PathId(1), pair.now).unwrap();
    let mut real = Vec::new();
    assert!(pair.client.poll_transmit(PathId(1), ROOM, pair.now, &mut real) > 0);
    assert!(pair.server.accepts_join(&real, &[0; 32]));
    assert!(
        !pair.server.accepts_join(&real, &[1; 32]),
        "the same JOIN on another connection"
    );
}

#[test]
fn an_unknown_version_is_refused() {
    let mut server = Connection::server(Config::default()).unwrap();
    server.add_path(PathId(0), Instant::ZERO).unwrap();
    let mut client = Connection::client(Config::default()).unwrap();
    client.add_path(PathId(0), Instant::ZERO).unwrap();
    let mut hello = Vec::new();
    assert!(client.poll_transmit(PathId(0), ROOM, Instant::ZERO, &mut hello) > 0);
    hello[wire::HEADER_LEN + 4] = 99;
    let err = server.handle_recv(PathId(0), &hello, Instant::ZERO).unwrap_err();
    assert_eq!(
        err,
        ProtocolError::Wire {
            path: PathId(0),
            source: wire::Error::UnsupportedVersion(99)
        }
    );
    assert!(err.to_string().contains("unsupported protocol version 99"));
    assert!(server.is_closed());
}

#[test]
fn data_before_the_handshake_and_beyond_the_window_are_violations() {
    let mut server = Connection::server(Config::default()).unwrap();
    server.add_path(PathId(0), Instant::ZERO).unwrap();
    let mut d = Vec::new();
    Frame::Data(wire::Data {
        seq: fbdt_core::seq::Seq(0),
        fin: false,
        payload: b"x",
    })
    .emit(&mut d);
    assert!(matches!(
        server.handle_recv(PathId(0), &d, Instant::ZERO),
        Err(ProtocolError::Unexpected { .. })
    ));

    let mut pair = established(1);
    let cfg = Config::default();
    // The client's ISN is not known to the test, but any sequence number lands within
    // ±2^31 of the receiver's reference; one 2^30 + window bytes ahead is past the window.
    let client_isn = pair.client.local_isn();
    let far = client_isn.wrapping_add(cfg.recv_buffer as u32 + 1);
    let mut d = Vec::new();
    Frame::Data(wire::Data {
        seq: fbdt_core::seq::Seq(far),
        fin: false,
        payload: b"x",
    })
    .emit(&mut d);
    pair.inject_to_server(0, d);
    pair.drive_bounded(10_000, |_| false);
    assert!(
        matches!(pair.server_errors.as_slice(), [ProtocolError::FlowControl { .. }]),
        "{:?}",
        pair.server_errors
    );
}

#[test]
fn an_ack_for_unsent_data_is_a_violation() {
    let mut pair = established(1);
    let server_isn = pair.server.local_isn();
    let mut a = Vec::new();
    Frame::Ack(wire::Ack {
        cum: fbdt_core::seq::Seq(server_isn.wrapping_add(1000)),
        window: 1 << 20,
        ..Default::default()
    })
    .emit(&mut a);
    // The server has sent nothing yet: an ACK for 1000 bytes is a lie.
    pair.inject_to_server(0, a);
    pair.drive_bounded(10_000, |_| false);
    assert!(
        matches!(pair.server_errors.as_slice(), [ProtocolError::AckOfUnsent]),
        "{:?}",
        pair.server_errors
    );
}

#[test]
fn a_path_that_dies_mid_transfer_loses_nothing() {
    let mut pair = Pair::new(
        3,
        Config {
            segment_size: 8192,
            ..Config::default()
        },
    );
    let a = data(4_000_000, 9);
    let mut off = 0;
    let mut got = Vec::new();
    let mut killed = false;
    pair.drive_bounded(2_000_000, |p| {
        write_some(&mut p.client, &a, &mut off);
        read_all(&mut p.server, &mut got);
        let on_path_2 = p.client.stats().sender.per_path_bytes_sent.get(2).copied().unwrap_or(0);
        if !killed && on_path_2 > 0 && !p.pipes[2].0.queue.is_empty() {
            // Path 2's connection breaks while it carries data: both ends see it, and
            // what it held is gone.
            killed = true;
            p.client.path_down(PathId(2), p.now);
            p.server.path_down(PathId(2), p.now);
            p.pipes[2].0.queue.clear();
            p.pipes[2].1.queue.clear();
        }
        p.server.is_recv_finished()
    });
    assert!(killed);
    assert_eq!(got, a);
    assert!(
        pair.client.stats().sender.redundant_bytes_sent > 0,
        "the dead path's data was re-sent"
    );
}

#[test]
fn a_path_that_goes_silent_is_reported_stalled_once_and_loses_nothing() {
    let mut pair = Pair::new(
        2,
        Config {
            segment_size: 8192,
            ..Config::default()
        },
    );
    let a = data(6_000_000, 11);
    let mut off = 0;
    let mut got = Vec::new();
    let mut frozen_at = None;
    let mut stalled = Vec::new();
    pair.drive_bounded(2_000_000, |p| {
        write_some(&mut p.client, &a, &mut off);
        read_all(&mut p.server, &mut got);
        while let Some(e) = p.client.poll_event() {
            if let Event::PathStalled(path) = e {
                stalled.push((path, p.now));
            }
        }
        let on_path_1 = p.client.stats().sender.per_path_bytes_sent.get(1).copied().unwrap_or(0);
        if frozen_at.is_none() && on_path_1 > 0 {
            // A blockage: what path 1 sends from now on sits in the air for 2 s.
            frozen_at = Some(p.now);
            p.pipes[1].0.latency = Duration::from_millis(2000);
        }
        p.server.is_recv_finished()
    });
    assert_eq!(got, a);
    let frozen_at = frozen_at.expect("path 1 carried data");
    assert_eq!(stalled.len(), 1, "one report per stall: {stalled:?}");
    let (path, at) = stalled[0];
    assert_eq!(path, PathId(1));
    assert!(
        at > frozen_at && at < frozen_at + Duration::from_millis(2000),
        "{at} vs {frozen_at}"
    );
    assert_eq!(pair.client.stats().sender.path_stalls, 1);
}

/// Path 1 goes silent mid-transfer (a blackhole) with 10 ms of latency each way: when is
/// it reported stalled, and what was reported before? `stall_late` None is the RTT rule
/// alone; with `tell_silence` the driver reports the transport's silence from the freeze
/// on, as TCP_INFO would show it.
fn silent_path_stalls(stall_late: Option<Duration>, tell_silence: bool) -> (Instant, Vec<(PathId, Instant)>) {
    let mut cfg = Config {
        segment_size: 8192,
        ..Config::default()
    };
    cfg.fbdt_mut().expect("fbdt").stall_late = stall_late;
    let mut pair = Pair::new(2, cfg);
    for (up, down) in &mut pair.pipes {
        up.latency = Duration::from_millis(10);
        down.latency = Duration::from_millis(10);
    }
    let a = data(40_000_000, 13);
    let (mut off, mut got) = (0, Vec::new());
    let (mut frozen_at, mut stalled) = (None, Vec::new());
    pair.drive_bounded(4_000_000, |p| {
        write_some(&mut p.client, &a, &mut off);
        read_all(&mut p.server, &mut got);
        while let Some(e) = p.client.poll_event() {
            if let Event::PathStalled(path) = e {
                stalled.push((path, p.now));
            }
        }
        if frozen_at.is_none() && p.now >= Instant::from_micros(100_000) {
            frozen_at = Some(p.now);
            p.pipes[1].0.latency = Duration::from_millis(5000);
        }
        if let Some(since) = frozen_at.filter(|_| tell_silence) {
            let until = p.now;
            let report = PathStats {
                ack_silence: Some(AckSilence { since, until }),
                ..PathStats::default()
            };
            p.client.path_stats(PathId(1), report);
        }
        p.server.is_recv_finished()
    });
    assert_eq!(got, a);
    (frozen_at.expect("the transfer outlasted 100 ms"), stalled)
}

/// Issue 41: a silent path is found by how overdue its oldest copy's ACK is — once it is
/// overdue by the lateness floor (10 ms) and the path was quiet for 1.5 ACK RTTs — well
/// before the RTT rule's 3 ACK RTTs, and no steady path is reported stalled before.
#[test]
fn a_silent_path_is_found_by_its_overdue_copy_before_the_rtt_rule() {
    let rtt = Duration::from_millis(20);
    let (frozen, late) = silent_path_stalls(Some(fbdt_core::FbdtConfig::default().stall_late.unwrap()), false);
    let (frozen_rtt, by_rtt) = silent_path_stalls(None, false);
    assert_eq!(frozen, frozen_rtt, "the same run up to the freeze");
    for s in [&late, &by_rtt] {
        assert!(s.iter().all(|&(p, at)| p == PathId(1) && at > frozen), "{s:?} vs {frozen}");
        assert_eq!(s.len(), 1, "one report per stall: {s:?}");
    }
    let (t_late, t_rtt) = (late[0].1, by_rtt[0].1);
    // The RTT rule waits 3 × the (at least 20 ms) ACK RTT after the last progress, which
    // came after the freeze; the lateness rule at least its floor after the freeze.
    assert!(t_rtt >= frozen + rtt.mul_f64(3.0), "RTT rule at {t_rtt} vs {frozen}");
    assert!(t_late >= frozen + Duration::from_millis(10), "{t_late} vs {frozen}");
    assert!(t_late < t_rtt, "lateness rule at {t_late}, RTT rule at {t_rtt}");
}

/// Issue 15 items 4 and 5: path 1's connection is replaced mid-transfer. The old one is
/// aborted: what it still carried reaches the server only after the server took the path
/// down, and is ignored there. ACKs that left before the reconnect, carrying path 1's old
/// counter, still travel on path 0. The new connection counts from 0 under epoch 1, and
/// every byte arrives exactly once, in order.
#[test]
fn a_replaced_connection_with_late_bytes_and_acks_loses_nothing() {
    let mut pair = Pair::new(
        2,
        Config {
            segment_size: 8192,
            ..Config::default()
        },
    );
    let a = data(6_000_000, 13);
    let mut off = 0;
    let mut got = Vec::new();
    let mut replaced = false;
    let mut late_bytes = 0;
    pair.drive_bounded(2_000_000, |p| {
        write_some(&mut p.client, &a, &mut off);
        read_all(&mut p.server, &mut got);
        let on_path_1 = p.client.stats().sender.per_path_bytes_sent.get(1).copied().unwrap_or(0);
        let acks_in_flight = !p.pipes[0].1.queue.is_empty();
        if !replaced && on_path_1 > 1_000_000 && acks_in_flight && !p.pipes[1].0.queue.is_empty() {
            replaced = true;
            let old: Vec<Vec<u8>> = p.pipes[1].0.queue.drain(..).map(|(_, b)| b).collect();
            p.pipes[1].1.queue.clear();
            p.client.path_down(PathId(1), p.now);
            p.server.path_down(PathId(1), p.now);
            for bytes in old {
                late_bytes += bytes.len();
                p.server.handle_recv(PathId(1), &bytes, p.now).unwrap();
            }
            let epoch_1 = PathBinding {
                epoch: 1,
                ..PathBinding::default()
            };
            p.client.add_path_bound(PathId(1), epoch_1, p.now).unwrap();
            p.server.add_path(PathId(1), p.now).unwrap();
        }
        p.server.is_recv_finished()
    });
    assert!(replaced && late_bytes > 0);
    assert!(got == a, "every byte once, in order");
    assert_eq!(pair.server.path_epoch(PathId(1)), Some(1));
    assert!(pair.server_errors.is_empty() && pair.client_errors.is_empty());
}

/// An ACK that is due when the path has no room for it is sent at the next chance, not
/// taken and dropped (the peer would otherwise wait for a later ACK or its timer).
#[test]
fn an_ack_that_does_not_fit_is_sent_at_the_next_chance() {
    let mut pair = established(1);
    assert_eq!(pair.client.write(b"needs an ack"), 12);
    let mut frames = Vec::new();
    while pair.client.poll_transmit(PathId(0), ROOM, pair.now, &mut frames) > 0 {}
    pair.server.handle_recv(PathId(0), &frames, pair.now).unwrap();
    // Past any delayed-ACK timer: the ACK is due now.
    let later = pair.now + Duration::from_millis(500);
    pair.server.handle_timeout(later);
    let mut out = Vec::new();
    assert_eq!(pair.server.poll_transmit(PathId(0), 4, later, &mut out), 0, "no room");
    let n = pair.server.poll_transmit(PathId(0), ROOM, later, &mut out);
    assert!(n > 0, "the ACK still goes out");
    assert!(matches!(Frame::parse(&out).unwrap().0, Frame::Ack(_)), "{out:?}");
}

/// Connection epochs only grow: once a path's connection of epoch 2 was accepted, the JOIN
/// of its epoch-1 connection (delayed, or its connection dialled earlier and slower) is
/// refused, and so is epoch 2's JOIN replayed; only that connection is dropped.
#[test]
fn a_join_older_than_the_accepted_connection_is_refused() {
    let mut pair = established(2);
    let join_of = |pair: &mut Pair, epoch: u32| {
        pair.client.path_down(PathId(1), pair.now);
        let binding = PathBinding {
            epoch,
            ..PathBinding::default()
        };
        pair.client.add_path_bound(PathId(1), binding, pair.now).unwrap();
        let mut join = Vec::new();
        assert!(pair.client.poll_transmit(PathId(1), ROOM, pair.now, &mut join) > 0);
        join
    };
    let old = join_of(&mut pair, 1);
    let new = join_of(&mut pair, 2);
    assert!(pair.server.accepts_join(&new, &[0; 32]));
    pair.server.path_down(PathId(1), pair.now);
    pair.server.add_path(PathId(1), pair.now).unwrap();
    pair.server.handle_recv(PathId(1), &new, pair.now).unwrap();
    assert_eq!(pair.server.path_epoch(PathId(1)), Some(2));
    assert!(!pair.server.accepts_join(&old, &[0; 32]), "epoch 1 after epoch 2");
    pair.server.path_down(PathId(1), pair.now);
    pair.server.add_path(PathId(1), pair.now).unwrap();
    let err = pair.server.handle_recv(PathId(1), &old, pair.now).unwrap_err();
    assert!(
        matches!(err, ProtocolError::StaleJoin { epoch: 1, last: 2, .. }),
        "{err:?}"
    );
    assert!(err.is_path_local(), "only that connection goes");
    // The same epoch again is a replay (issue 42: under --plaintext nothing else binds a
    // JOIN to its connection): refused, and only that connection goes.
    assert!(!pair.server.accepts_join(&new, &[0; 32]), "an equal epoch is a replay");
    pair.server.path_down(PathId(1), pair.now);
    pair.server.add_path(PathId(1), pair.now).unwrap();
    let err = pair.server.handle_recv(PathId(1), &new, pair.now).unwrap_err();
    assert!(
        matches!(err, ProtocolError::StaleJoin { epoch: 2, last: 2, .. }),
        "{err:?}"
    );
    assert!(err.is_path_local());
    // The next connection (epoch 3) joins.
    let next = join_of(&mut pair, 3);
    assert!(pair.server.accepts_join(&next, &[0; 32]));
}

/// Issue 42: a client sends nothing but its JOIN on a further path until the server's answer
/// (JOIN_OK, made with the session key for that connection) verifies. A forged answer, a
/// reflected JOIN, a CLOSE or garbage in its place drops only that connection; the real
/// answer puts the path up and data flows on it.
#[test]
fn a_joining_path_carries_nothing_before_the_servers_answer() {
    let mut pair = Pair::new(1, Config::default());
    pair.drive_bounded(10_000, |p| p.server.is_established() && p.client.is_established());
    assert_eq!(pair.client.write(&data(100_000, 5)), 100_000);
    let t = pair.now;
    let try_answer = |pair: &mut Pair, epoch: u32, answer: Vec<u8>| {
        pair.client.path_down(PathId(1), t);
        let binding = PathBinding {
            exporter: [4; 32],
            epoch,
        };
        pair.client.add_path_bound(PathId(1), binding, t).unwrap();
        assert!(pair.client.is_path_joining(PathId(1)) && pair.client.joining_since(PathId(1)).is_none());
        let mut out = Vec::new();
        assert!(pair.client.poll_transmit(PathId(1), ROOM, t, &mut out) > 0);
        let Ok((Frame::Join(join), used)) = Frame::parse(&out) else {
            panic!("the first frame is the JOIN: {out:?}")
        };
        assert_eq!(used, out.len());
        assert_eq!(pair.client.joining_since(PathId(1)), Some(t));
        for _ in 0..3 {
            assert_eq!(pair.client.poll_transmit(PathId(1), ROOM, t, &mut out), 0, "nothing after the JOIN");
        }
        assert!(!pair.client.poll_idle(PathId(1), ROOM, t));
        assert!(!pair.client.is_path_up(PathId(1)));
        let answer = if answer.is_empty() {
            // The JOIN's own HMAC reflected as an answer.
            let mut v = Vec::new();
            Frame::JoinOk(wire::JoinOk {
                path_index: 1,
                epoch,
                hmac: join.hmac,
            })
            .emit(&mut v);
            v
        } else {
            answer
        };
        let r = pair.client.handle_recv(PathId(1), &answer, t);
        (join, r)
    };
    let forged = |epoch: u32| {
        let mut v = Vec::new();
        Frame::JoinOk(wire::JoinOk {
            path_index: 1,
            epoch,
            hmac: [0; 32],
        })
        .emit(&mut v);
        v
    };
    let mut close = Vec::new();
    Frame::Close(wire::Close {
        code: 9,
        reason: "injected".into(),
    })
    .emit(&mut close);
    for (epoch, answer) in [(0, forged(0)), (1, Vec::new()), (2, close), (3, vec![0x42; 64])] {
        let (_, r) = try_answer(&mut pair, epoch, answer);
        let err = r.unwrap_err();
        assert!(
            matches!(err, ProtocolError::BadJoinAnswer { path: PathId(1), .. }),
            "epoch {epoch}: {err:?}"
        );
        assert!(err.is_path_local());
        assert!(!pair.client.is_closed(), "epoch {epoch}: the session lives on");
        assert!(!pair.client.is_path_up(PathId(1)) && pair.client.joining_since(PathId(1)).is_none());
    }
    // The real server: it accepts the JOIN on its end of the connection and answers first.
    let (join, _) = try_answer(&mut pair, 4, forged(3));
    let mut join_bytes = Vec::new();
    Frame::Join(join).emit(&mut join_bytes);
    pair.client.path_down(PathId(1), t);
    let binding = PathBinding {
        exporter: [4; 32],
        epoch: 4,
    };
    pair.client.add_path_bound(PathId(1), binding, t).unwrap();
    let mut out = Vec::new();
    assert!(pair.client.poll_transmit(PathId(1), ROOM, t, &mut out) > 0);
    let server_side = PathBinding {
        exporter: [4; 32],
        epoch: 0,
    };
    pair.server.add_path_bound(PathId(1), server_side, t).unwrap();
    pair.server.handle_recv(PathId(1), &out, t).unwrap();
    assert!(pair.server.is_path_up(PathId(1)));
    let mut answer = Vec::new();
    assert!(pair.server.poll_transmit(PathId(1), ROOM, t, &mut answer) > 0);
    assert!(matches!(Frame::parse(&answer), Ok((Frame::JoinOk(_), _))), "{answer:?}");
    let events: Vec<Event> = std::iter::from_fn(|| pair.client.poll_event()).collect();
    assert!(!events.contains(&Event::PathJoined(PathId(1))), "{events:?}");
    // The answer and whatever follows it in the same read.
    pair.client.handle_recv(PathId(1), &answer, t).unwrap();
    assert!(pair.client.is_path_up(PathId(1)) && pair.client.joining_since(PathId(1)).is_none());
    assert!(std::iter::from_fn(|| pair.client.poll_event()).any(|e| e == Event::PathJoined(PathId(1))));
    let mut out = Vec::new();
    assert!(pair.client.poll_transmit(PathId(1), ROOM, t, &mut out) > 0, "data flows once answered");
    // A second answer on a path that is up is a violation.
    let err = pair.client.handle_recv(PathId(1), &answer, t).unwrap_err();
    assert!(matches!(err, ProtocolError::Unexpected { .. }), "{err:?}");
}

/// Issue 41: when the driver says the path's transport has heard nothing since the freeze
/// (TCP_INFO's last ACK), that silence stands for the 1.5 ACK RTTs of quiet: the path is
/// reported stalled once its copy is overdue and the silence has lasted the lateness
/// floor — sooner than without the report, never before the floor.
#[test]
fn a_silent_transport_makes_the_overdue_copy_a_stall_sooner() {
    let floor = fbdt_core::FbdtConfig::default().stall_late.unwrap();
    let (frozen, told) = silent_path_stalls(Some(floor), true);
    let (frozen_untold, untold) = silent_path_stalls(Some(floor), false);
    assert_eq!(frozen, frozen_untold, "the same run up to the freeze");
    for s in [&told, &untold] {
        assert!(s.iter().all(|&(p, at)| p == PathId(1) && at > frozen), "{s:?} vs {frozen}");
        assert_eq!(s.len(), 1, "one report per stall: {s:?}");
    }
    let (t_told, t_untold) = (told[0].1, untold[0].1);
    assert!(t_told >= frozen + floor, "{t_told} vs {frozen}");
    assert!(t_told < t_untold, "told at {t_told}, untold at {t_untold}");
}

/// A download whose path 1 goes silent server→client: the server's stall report crosses
/// path 0 as a STALLED frame and the client hears of it as `PeerStalled(1)` for the
/// path's current connection; with `report_stalls` off it hears nothing. Returns the
/// freeze, the client's events about paths, the server's stall events and both ends'
/// report counters (server's, client's).
fn download_with_a_silent_path(report_stalls: bool) -> (Instant, Vec<(Event, Instant)>, Vec<(PathId, Instant)>, [u64; 2]) {
    let cfg = Config {
        segment_size: 8192,
        report_stalls,
        ..Config::default()
    };
    let mut pair = Pair::new(2, cfg);
    let a = data(6_000_000, 17);
    let (mut off, mut got) = (0, Vec::new());
    let (mut frozen_at, mut heard, mut stalled) = (None, Vec::new(), Vec::new());
    pair.drive_bounded(2_000_000, |p| {
        write_some(&mut p.server, &a, &mut off);
        read_all(&mut p.client, &mut got);
        while let Some(e) = p.server.poll_event() {
            if let Event::PathStalled(path) = e {
                stalled.push((path, p.now));
            }
        }
        while let Some(e) = p.client.poll_event() {
            if matches!(e, Event::PeerStalled(_) | Event::PathStalled(_)) {
                heard.push((e, p.now));
            }
        }
        let on_path_1 = p.server.stats().sender.per_path_bytes_sent.get(1).copied().unwrap_or(0);
        if frozen_at.is_none() && on_path_1 > 0 {
            frozen_at = Some(p.now);
            p.pipes[1].1.latency = Duration::from_millis(2000);
        }
        p.client.is_recv_finished()
    });
    assert_eq!(got, a);
    let counted = [pair.server.stats().stall_reports, pair.client.stats().stall_reports];
    (frozen_at.expect("path 1 carried data"), heard, stalled, counted)
}

#[test]
fn the_server_tells_the_client_which_path_stalls_its_data() {
    let (frozen, heard, stalled, counted) = download_with_a_silent_path(true);
    assert_eq!(counted, [1, 1]);
    assert_eq!(stalled.len(), 1, "{stalled:?}");
    let (path, at) = stalled[0];
    assert_eq!(path, PathId(1));
    assert!(at > frozen);
    assert_eq!(heard.len(), 1, "{heard:?}");
    let (event, heard_at) = &heard[0];
    assert_eq!(*event, Event::PeerStalled(PathId(1)));
    // Path 0 carries the report: one way, 200 µs, behind what path 0 had queued.
    assert!(*heard_at > at && *heard_at < at + Duration::from_millis(20), "{heard_at} vs {at}");

    let (_, heard, stalled, counted) = download_with_a_silent_path(false);
    assert_eq!(counted, [0, 0]);
    assert_eq!(stalled.len(), 1, "the stall itself is found either way: {stalled:?}");
    assert!(heard.is_empty(), "{heard:?}");
}

#[test]
fn a_stall_report_is_refused_from_a_client_and_ignored_for_another_connection() {
    // From the client: a protocol violation, the session ends.
    let mut pair = established(2);
    let mut frame = Vec::new();
    Frame::Stalled(wire::Stalled { path_index: 1, epoch: 0 }).emit(&mut frame);
    pair.inject_to_server(0, frame);
    pair.drive_bounded(10_000, |p| p.server.is_closed());
    assert!(pair.server.is_closed());
    assert!(
        pair.server_errors.iter().any(|e| e.to_string().contains("STALLED")),
        "{:?}",
        pair.server_errors
    );

    // From the server, about a path's earlier connection (another epoch), or about a path
    // the session never had: the first is stale and ignored, the second a violation.
    let mut pair = established(2);
    pair.drive_bounded(10_000, |p| p.client.is_path_up(PathId(1)));
    while pair.client.poll_event().is_some() {}
    let epoch = pair.client.path_epoch(PathId(1)).unwrap();
    let mut stale = Vec::new();
    Frame::Stalled(wire::Stalled { path_index: 1, epoch: epoch.wrapping_add(1) }).emit(&mut stale);
    pair.client.handle_recv(PathId(0), &stale, pair.now).unwrap();
    let mut current = Vec::new();
    Frame::Stalled(wire::Stalled { path_index: 1, epoch }).emit(&mut current);
    pair.client.handle_recv(PathId(0), &current, pair.now).unwrap();
    let mut events = Vec::new();
    while let Some(e) = pair.client.poll_event() {
        events.push(e);
    }
    assert_eq!(events, vec![Event::PeerStalled(PathId(1))]);
    let mut unknown = Vec::new();
    Frame::Stalled(wire::Stalled { path_index: 5, epoch: 0 }).emit(&mut unknown);
    let err = pair.client.handle_recv(PathId(0), &unknown, pair.now).unwrap_err();
    assert!(err.to_string().contains("never added"), "{err}");
}
