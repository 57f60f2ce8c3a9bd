use super::*;

const MS: Duration = Duration::from_millis(1);

/// A lane at `rate_bps` with `delay` and a queue of `queue` frames, its clock at `t0`.
fn lane(rate_bps: u64, delay: Duration, queue: usize, t0: Instant) -> Lane {
    let knobs = Arc::new(Knobs::new(rate_bps, delay, wake_fd().unwrap()));
    Lane {
        knobs,
        dir: 0,
        out_port: 0,
        macs: [[2; 6], [3; 6]],
        radio: None,
        bursts: None,
        radio_rate_bps: Arc::new(AtomicU64::new(rate_bps)),
        wakeups: Arc::default(),
        queue_limit: queue,
        queued: 0,
        waiting: VecDeque::new(),
        head_done: None,
        link_free: t0,
        line: VecDeque::new(),
        last_release: t0,
        generation: u64::MAX,
        rng: StdRng::seed_from_u64(1),
        lost: Vec::new(),
        lateness: Arc::default(),
    }
}

/// A frame of `l3` IP bytes.
fn frame(l3: usize) -> Frame {
    Frame::new(vec![0u8; l3 + ETH].into_boxed_slice(), l3 + ETH, 0)
}

fn pool() -> Pool {
    Pool::new(1 << 17, 2048, 8 * BATCH)
}

/// Runs the lane at every `step` from `from` to `to`; the instants at which frames left.
fn drive(l: &mut Lane, from: Instant, to: Instant, step: Duration) -> Vec<Instant> {
    let (mut out, mut spare, mut left) = (Vec::new(), Vec::new(), Vec::new());
    let mut t = from;
    while t <= to {
        l.advance(t, &mut out, &mut spare, &mut pool());
        left.extend(out.drain(..).map(|_| t));
        t += step;
    }
    left
}

#[test]
fn frames_leave_after_their_serialisation_and_the_delay_with_macs_rewritten() {
    let t0 = Instant::now();
    // 12 Mbit/s: 1500 IP bytes take 1 ms on the link; 5 ms delay.
    let mut l = lane(12_000_000, 5 * MS, 100, t0);
    for _ in 0..3 {
        assert!(l.arrive(frame(1500), t0, &mut pool()).is_ok());
    }
    let (mut out, mut spare) = (Vec::new(), Vec::new());
    // Due at 6, 7 and 8 ms (logical times, whenever the loop runs).
    assert_eq!(
        l.advance(t0 + 5 * MS, &mut out, &mut spare, &mut pool()),
        Some(t0 + 6 * MS)
    );
    assert!(out.is_empty());
    l.advance(t0 + 7 * MS, &mut out, &mut spare, &mut pool());
    assert_eq!(out.len(), 2);
    let (_, f) = &out[0];
    assert_eq!(&f.buf[..6], &[3; 6], "destination: the peer");
    assert_eq!(&f.buf[6..12], &[2; 6], "source: the emulator's veth");
    // Released late by the loop: the lateness probe sees it, the schedule does not move.
    assert_eq!(l.advance(t0 + 20 * MS, &mut out, &mut spare, &mut pool()), None);
    assert_eq!(out.len(), 3);
    let late = l.lateness.snapshot();
    assert_eq!((late.packets, late.max_us), (3, 12_000));
}

#[test]
fn a_full_queue_drops_the_newcomer() {
    let t0 = Instant::now();
    let mut l = lane(12_000_000, MS, 2, t0);
    assert!(l.arrive(frame(1500), t0, &mut pool()).is_ok());
    assert!(l.arrive(frame(1500), t0, &mut pool()).is_ok());
    assert!(l.arrive(frame(1500), t0, &mut pool()).is_err());
}

#[test]
fn a_rate_change_retimes_the_frame_on_the_link() {
    let t0 = Instant::now();
    // A scan: the hold rate (1 kbit/s) would keep a 1500-byte frame 12 s on the link.
    let mut l = lane(1_000, Duration::ZERO, 10, t0);
    assert!(l.arrive(frame(1500), t0, &mut pool()).is_ok());
    let left = drive(&mut l, t0, t0 + 100 * MS, MS);
    assert!(left.is_empty());
    // Back up at 12 Mbit/s after 100 ms: the remaining bits go at the new rate (< 1 ms).
    l.knobs.set([12_000_000; 2], Duration::ZERO, [0.0; 2]);
    let left = drive(&mut l, t0 + 100 * MS, t0 + 110 * MS, MS);
    assert_eq!(left, vec![t0 + 101 * MS]);
}

#[test]
fn a_shorter_delay_never_reorders() {
    let t0 = Instant::now();
    let mut l = lane(1_000_000_000, 50 * MS, 10, t0);
    assert!(l.arrive(frame(100), t0, &mut pool()).is_ok());
    let (mut out, mut spare) = (Vec::new(), Vec::new());
    l.advance(t0 + MS, &mut out, &mut spare, &mut pool());
    l.knobs.set([1_000_000_000; 2], 5 * MS, [0.0; 2]);
    assert!(l.arrive(frame(100), t0 + 2 * MS, &mut pool()).is_ok());
    // The second would be due at 7 ms but waits for the first (50 ms): FIFO, like a link.
    assert_eq!(
        l.advance(t0 + 10 * MS, &mut out, &mut spare, &mut pool()),
        Some(t0 + 50 * MS + Duration::from_nanos(800))
    );
    assert!(out.is_empty());
}

#[test]
fn a_shared_link_paces_two_lanes_together_and_counts_each() {
    let t0 = Instant::now();
    // Two paths of 120 Mbit/s (0.1 ms per 1500 bytes) behind one 12 Mbit/s link (1 ms),
    // 2 ms delay each; lanes 0 and 2 are their data directions.
    let mut lanes = vec![
        lane(120_000_000, 2 * MS, 100, t0),
        lane(120_000_000, 2 * MS, 100, t0),
        lane(120_000_000, 2 * MS, 100, t0),
    ];
    let counts = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let setup = SharedSetup {
        members: vec![0, 1],
        rate_bps: 12_000_000,
        queue_packets: 3,
        crossed: counts.to_vec(),
    };
    let mut shared = Some(Shared::new(setup, 4, |p| 2 * p, t0));
    let mut p = pool();
    assert!(shared.as_ref().unwrap().carries(2) && !shared.as_ref().unwrap().carries(1));
    // Two frames for path 0, one for path 1, one more than the queue holds; a frame of
    // the ACK direction (lane 1) does not cross.
    for lane_ in [0, 2, 0] {
        assert!(enter(&mut lanes, &mut shared, lane_, frame(1500), t0, &mut p).is_ok());
    }
    assert!(enter(&mut lanes, &mut shared, 2, frame(1500), t0, &mut p).is_err(), "the shared queue is full");
    assert!(enter(&mut lanes, &mut shared, 1, frame(1500), t0, &mut p).is_ok());
    let s = shared.as_mut().unwrap();
    let (mut out, mut spare) = (Vec::new(), Vec::new());
    // They leave the shared link at 1, 2 and 3 ms in arrival order (FIFO across paths)...
    assert_eq!(leave_shared(s, t0 + 2 * MS, &mut lanes, &mut spare, &mut p), Some(t0 + 3 * MS));
    assert_eq!(counts.each_ref().map(|c| c.load(Ordering::Relaxed)), [1500, 1500]);
    assert_eq!(leave_shared(s, t0 + 10 * MS, &mut lanes, &mut spare, &mut p), None);
    assert_eq!(counts.each_ref().map(|c| c.load(Ordering::Relaxed)), [3000, 1500]);
    assert!(spare.is_empty());
    // ...and each then takes its own link (0.1 ms) and delay (2 ms) from its departure,
    // logical times whenever the loop ran: path 0 at 3.1 and 5.1 ms, path 1 at 4.1 ms.
    let us = |d: Instant| (d - t0).as_micros();
    assert_eq!(lanes[0].advance(t0 + 3 * MS, &mut out, &mut spare, &mut p).map(us), Some(3_100));
    assert_eq!(lanes[2].advance(t0 + 3 * MS, &mut out, &mut spare, &mut p).map(us), Some(4_100));
    lanes[0].advance(t0 + 20 * MS, &mut out, &mut spare, &mut p);
    assert_eq!(out.len(), 2);
    assert_eq!(lanes[0].lateness.snapshot().max_us, 20_000 - 3_100);
}

/// A namespace of our own with a veth pair `ringa` ↔ `ringb`, removed on drop.
struct VethNs(String);

impl VethNs {
    fn new(mtu: u32) -> Self {
        let ns = VethNs(format!("{}ringtest-{}", crate::NS_PREFIX, std::process::id()));
        crate::ns::ip(None, &["netns", "add", &ns.0]).unwrap();
        let mtu = mtu.to_string();
        for args in [
            &[
                "link",
                "add",
                "name",
                "ringa",
                "address",
                "02:00:00:00:00:0a",
                "type",
                "veth",
                "peer",
                "name",
                "ringb",
                "address",
                "02:00:00:00:00:0b",
            ][..],
            &["link", "set", "ringa", "mtu", &mtu, "up"],
            &["link", "set", "ringb", "mtu", &mtu, "up"],
        ] {
            crate::ns::ip(Some(&ns.0), args).unwrap();
        }
        // No IPv6 (its neighbour discovery would add frames of its own).
        let _ = crate::ns::sysctl(&ns.0, "net.ipv6.conf.all.disable_ipv6", "1");
        ns
    }
}

impl Drop for VethNs {
    fn drop(&mut self) {
        crate::ns::destroy(&self.0);
    }
}

fn ifindex(name: &str) -> u32 {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid C string; returns 0 when there is no such interface.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(i, 0, "no interface {name}");
    i
}

/// A frame to ringb's MAC with a local-experimental EtherType and a numbered payload.
fn test_frame(seq: u32, l3: usize) -> Vec<u8> {
    let mut f = vec![0u8; ETH + l3];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(31).wrapping_add(seq) as u8;
    }
    f
}

fn ours(f: &[u8]) -> bool {
    f.len() > ETH && f[12..14] == 0x88b5u16.to_be_bytes()
}

/// Frames written on `ringa` come out of `ringb`'s ring byte for byte and in order, every size
/// from a minimal frame to the MTU, and a lone frame is handed over by the block timer.
#[test]
fn rx_ring_delivers_frames_byte_identical_and_in_order() {
    if let Some(why) = crate::skip_reason() {
        eprintln!("SKIP: {why}");
        return;
    }
    let mtu = 1500u32;
    let ns = VethNs::new(mtu);
    let (waits, got) = crate::ns::run_in(&ns.0, || {
        let mode = PortMode {
            ring_frame: Some(mtu as usize + 18),
            ..PortMode::default()
        };
        // A small ring, 1 MiB: the 6000 frames below take over 5 MB of slots, so the
        // test goes round it several times.
        let (_rx_fd, ring) = open_port(ifindex("ringb"), Some(1 << 20), mode).unwrap();
        let mut ring = ring.expect("a ring was asked for");
        let (tx, _) = open_port(ifindex("ringa"), None, PortMode::default()).unwrap();
        let send = |f: &[u8]| {
            // SAFETY: writes one frame from a live buffer on a bound AF_PACKET socket.
            let n = unsafe { libc::send(tx.as_raw_fd(), f.as_ptr() as *const libc::c_void, f.len(), 0) };
            assert_eq!(n, f.len() as isize, "{}", std::io::Error::last_os_error());
        };
        let mut got: Vec<Vec<u8>> = Vec::new();
        let collect = |ring: &mut RxRing, got: &mut Vec<Vec<u8>>, want: usize| {
            let until = Instant::now() + Duration::from_secs(5);
            while got.len() < want && Instant::now() < until {
                ring.drain(usize::MAX, |rf| {
                    // Only ours: the kernel may send its own (IPv6 multicast) frames.
                    if ours(rf.data) {
                        assert!(!rf.truncated);
                        assert_eq!(rf.pkttype, libc::PACKET_HOST);
                        got.push(rf.data.to_vec());
                    }
                });
                std::thread::sleep(Duration::from_micros(200));
            }
        };
        // Sizes from 46 to the MTU, in bursts of 64 (more than a block's worth).
        let sent: Vec<Vec<u8>> = (0..6000u32)
            .map(|i| test_frame(i, 46 + (i as usize * 97) % (mtu as usize - 45)))
            .collect();
        for burst in sent.chunks(64) {
            for f in burst {
                send(f);
            }
            let want = got.len() + burst.len();
            collect(&mut ring, &mut got, want);
        }
        assert_eq!(got.len(), sent.len());
        for (i, (g, s)) in got.iter().zip(&sent).enumerate() {
            assert!(g == s, "frame {i} differs ({} vs {} bytes)", g.len(), s.len());
        }
        // Lone frames: each waits in its block until the retire timer hands it over.
        let mut waits = Vec::new();
        for i in 0..20u32 {
            std::thread::sleep(Duration::from_millis(3));
            let f = test_frame(100_000 + i, 64);
            send(&f);
            let sent_at = Instant::now();
            let mut seen = None;
            while seen.is_none() && sent_at.elapsed() < Duration::from_secs(1) {
                if ring.ready() {
                    seen = Some(sent_at.elapsed());
                    let now = Instant::now();
                    let clock = StampClock::new(now);
                    ring.drain(usize::MAX, |rf| {
                        if !ours(rf.data) {
                            return;
                        }
                        assert_eq!(rf.data, &f[..]);
                        // The kernel stamped it in real time, so the loop times it
                        // from its arrival, not from when the block was handed over.
                        assert!(clock.arrival(rf.stamp) < now, "{:?}", rf.stamp);
                    });
                }
                std::hint::spin_loop();
            }
            waits.push(seen.expect("the block timer handed the frame over"));
        }
        waits.sort();
        (waits, got.len())
    })
    .unwrap();
    eprintln!(
        "{got} frames identical and in order; a lone frame waited {:?} (median), {:?} (max) for its block",
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    // The timeout is 1 ms; the kernel's timer may round it up, not to tens of ms.
    assert!(waits[waits.len() / 2] < Duration::from_millis(10), "{waits:?}");
}

/// A GSO unit of `segments` × 1448 payload bytes, read with its `virtio_net_hdr`.
fn unit(segments: usize) -> Frame {
    let eth = offload::tcp_frame(segments * 1448, 1, 0x18);
    let mut buf = vec![0u8; VNET_HDR_LEN + eth.len()];
    offload::gso(1448).write(&mut buf);
    buf[VNET_HDR_LEN..].copy_from_slice(&eth);
    let len = buf.len();
    Frame::new(buf.into_boxed_slice(), len, VNET_HDR_LEN)
}

#[test]
fn a_unit_takes_its_segments_airtime_and_queue_room() {
    let t0 = Instant::now();
    // 12 Mbit/s: four segments of 1448 + 52 header bytes (6000 IP bytes) take 4 ms.
    let mut l = lane(12_000_000, 5 * MS, 10, t0);
    let mut p = pool();
    assert!(l.arrive(unit(4), t0, &mut p).is_ok());
    assert_eq!(l.queued, 4);
    // Six more packets fit: a unit of eight is cut and its first six queued.
    let whole = l
        .arrive(unit(8), t0, &mut p)
        .expect_err("the unit itself is not queued");
    assert_eq!(whole.segments(), 8);
    assert_eq!(l.queued, 10);
    assert_eq!(l.waiting.len(), 7);
    assert!(l.arrive(frame(100), t0, &mut p).is_err(), "full");
    let (mut out, mut spare) = (Vec::new(), Vec::new());
    assert_eq!(l.advance(t0 + 8 * MS, &mut out, &mut spare, &mut p), Some(t0 + 9 * MS));
    assert!(
        out.is_empty(),
        "the unit leaves the link whole, at 4 ms, and arrives at 9 ms"
    );
    l.advance(t0 + 9 * MS, &mut out, &mut spare, &mut p);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.segments(), 4);
    assert_eq!(l.queued, 1, "the six segments behind it took 1 ms each from 4 ms on");
    let late = l.lateness.snapshot();
    assert_eq!((late.packets, late.bytes), (4, 6000), "counted as its four packets");
}

#[test]
fn loss_cuts_a_unit_into_its_surviving_segments() {
    let t0 = Instant::now();
    let mut l = lane(10_000_000_000, Duration::ZERO, 100_000, t0);
    l.knobs.set([10_000_000_000; 2], Duration::ZERO, [0.05, 0.0]);
    let mut p = pool();
    for _ in 0..1000 {
        assert!(l.arrive(unit(10), t0, &mut p).is_ok());
    }
    let (mut out, mut spare) = (Vec::new(), Vec::new());
    l.advance(t0 + 100 * MS, &mut out, &mut spare, &mut p);
    let delivered: usize = out.iter().map(|(_, f)| f.segments()).sum();
    let whole = out.iter().filter(|(_, f)| f.segments() == 10).count();
    assert!(out.iter().all(|(_, f)| f.segments() == 10 || f.segments() == 1));
    let lost = 1.0 - delivered as f64 / 10_000.0;
    assert!((0.04..0.06).contains(&lost), "{lost}");
    // A unit survives whole with probability 0.95^10 ≈ 0.60.
    assert!((550..650).contains(&whole), "{whole}");
    // Every surviving segment carries its own 1448 bytes and its own headers.
    for (_, f) in out.iter().filter(|(_, f)| f.segments() == 1) {
        assert_eq!(f.l3(), 1500);
        assert_eq!(&f.buf[f.head..f.head + 6], &[3; 6], "addressed like any frame");
    }
    assert_eq!(l.lateness.snapshot().packets, 10_000);
}

#[test]
fn loss_drops_its_share_at_release() {
    let t0 = Instant::now();
    let mut l = lane(10_000_000_000, Duration::ZERO, 10_000, t0);
    l.knobs.set([10_000_000_000; 2], Duration::ZERO, [0.05, 0.0]);
    for _ in 0..10_000 {
        assert!(l.arrive(frame(100), t0, &mut pool()).is_ok());
    }
    let (mut out, mut spare) = (Vec::new(), Vec::new());
    l.advance(t0 + 10 * MS, &mut out, &mut spare, &mut pool());
    assert_eq!(out.len() + spare.len(), 10_000);
    let lost = spare.len() as f64 / 10_000.0;
    assert!((0.04..0.06).contains(&lost), "{lost}");
}
