//! The `direct` datapath: the same per-direction stages as rattan's chain (radio → rate with
//! a drop-tail queue → delay → lateness probe → loss), but computed in one real-time thread
//! on logical times, with no async runtime and no channel between stages. Frames are read
//! from the emulator's AF_PACKET sockets in batches (`recvmmsg`) and written in batches
//! (`sendmmsg`); the thread sleeps in `epoll_pwait2` until a socket has frames, a control
//! changed, or the next stage is due.
//!
//! Why: rattan-core moves every packet through one tokio task and channel per cell (six hops
//! per direction) and one `recvfrom`/`sendto` each; on 2 cores that per-packet cost, not the
//! link model, set the testbed's ceiling (docs/testbed.md, limits).
//!
//! Logical times make the model independent of when the thread gets to run: a frame's
//! departure from the rate stage is computed from its arrival and the link's previous
//! departure, its release from that departure and the delay, so a late wake-up delays the
//! release (measured as lateness) but not the schedule of the frames behind it.

use std::{
    collections::VecDeque,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use rand010::{rngs::StdRng, RngExt, SeedableRng};

use rattan_env::veth::VethCell;

use super::host_io::{self, grow_socket_buffers};
use super::offload::{self, VNET_HDR_LEN};
use super::ring::{self, RxRing, StampClock};
use crate::error::{Error, Result};
use crate::probe::Lateness;
use crate::radio::RadioClock;
use crate::spec::{bps, PathStep};

mod frames;
mod shared;
use frames::{admit, serialisation, Frame, Pool, Timed, ETH};
use shared::Shared;
pub(crate) use shared::SharedSetup;

/// Frames read or written per system call.
const BATCH: usize = 64;
/// Reads of [`BATCH`] frames per socket before the stages run again.
const BATCHES_PER_WAKE: usize = 4;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, Linux ≥ 4.20): the socket does not see the
/// frames it sends itself.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// Longest sleep without a reason to wake, so a stop request is never missed for long.
const IDLE_WAKE: Duration = Duration::from_millis(100);

/// One path's settings in force, written by [`PathControl::apply`] and read by the loop.
#[derive(Debug)]
pub(crate) struct Knobs {
    /// Rate towards the client and towards the server, bit/s.
    rate_bps: [AtomicU64; 2],
    delay_ns: AtomicU64,
    /// Loss probability per direction, as f64 bits.
    loss: [AtomicU64; 2],
    /// Bumped on every change, so the loop re-times a frame in service at the new rate.
    generation: AtomicU64,
    wake: Arc<OwnedFd>,
}

impl Knobs {
    fn new(rate_bps: u64, delay: Duration, wake: Arc<OwnedFd>) -> Self {
        Self {
            rate_bps: [AtomicU64::new(rate_bps), AtomicU64::new(rate_bps)],
            delay_ns: AtomicU64::new(delay.as_nanos() as u64),
            loss: [AtomicU64::new(0), AtomicU64::new(0)],
            generation: AtomicU64::new(0),
            wake,
        }
    }

    /// Sets everything at once and wakes the loop.
    pub(super) fn set(&self, rate_bps: [u64; 2], delay: Duration, loss: [f64; 2]) {
        for i in 0..2 {
            self.rate_bps[i].store(rate_bps[i], Ordering::Relaxed);
            self.loss[i].store(loss[i].clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
        }
        self.delay_ns.store(delay.as_nanos() as u64, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
        poke(&self.wake);
    }
}

/// Wakes the loop (an eventfd write; a full counter means it is awake anyway).
fn poke(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: an 8-byte write from a valid u64 to an eventfd this emulator owns.
    unsafe { libc::write(fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
}

/// What the loop needs of one path besides its sockets.
pub(super) struct PathSetup {
    pub knobs: Arc<Knobs>,
    pub queue_packets: usize,
    pub radio: Option<crate::radio::Doze>,
    pub bursts: Option<fbdt_scenario::Bursts>,
    pub lateness: [Arc<Lateness>; 2],
    pub radio_rate_bps: Arc<AtomicU64>,
    pub radio_wakeups: [Arc<AtomicU64>; 2],
    pub seeds: [u64; 2],
}

/// The loop's handles for the emulator: how to stop it and which sockets it counts.
pub(super) struct Running {
    pub stop: Arc<AtomicBool>,
    pub wake: Arc<OwnedFd>,
    pub packet_fds: Vec<i32>,
    /// Frames the kernel refused when the loop wrote them (see `Batcher::send`).
    pub send_drops: Arc<AtomicU64>,
}

/// An eventfd for [`Knobs`] and the stop request.
pub(super) fn wake_fd() -> Result<Arc<OwnedFd>> {
    // SAFETY: eventfd with valid flags; the fd is owned from here on.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::Emulator(format!("eventfd: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: fd was just returned by eventfd and is not owned elsewhere.
    Ok(Arc::new(unsafe { OwnedFd::from_raw_fd(fd) }))
}

pub(super) fn knobs(initial: &PathStep, wake: &Arc<OwnedFd>) -> Arc<Knobs> {
    Arc::new(Knobs::new(
        bps(initial.rate_mbps),
        Duration::from_secs_f64(initial.delay_ms / 1e3),
        wake.clone(),
    ))
}

/// An AF_PACKET socket bound to one emulator-side veth.
struct Port {
    /// Declared before `fd`: unmapped before the socket closes.
    ring: Option<RxRing>,
    fd: OwnedFd,
    /// The lane fed by frames arriving here.
    feeds: usize,
}

/// How the `direct` datapath's sockets receive and send, besides the socket buffers.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PortMode {
    /// Receive through a TPACKET_V3 ring of frames up to this many bytes ([`super::ring`]).
    pub ring_frame: Option<usize>,
    /// `PACKET_QDISC_BYPASS`: written frames go straight to the veth's transmit routine,
    /// skipping the (noqueue) qdisc layer.
    pub qdisc_bypass: bool,
    /// `PACKET_VNET_HDR`: frames are read and written with their `virtio_net_hdr`, so GSO
    /// units pass whole ([`super::offload`]).
    pub vnet_hdr: bool,
}

/// `PACKET_QDISC_BYPASS` (linux/if_packet.h, Linux ≥ 3.14).
const PACKET_QDISC_BYPASS: libc::c_int = 20;

fn open_port(ifindex: u32, buffer: Option<i32>, mode: PortMode) -> Result<(OwnedFd, Option<RxRing>)> {
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket() with constant arguments; the fd is owned right after.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            i32::from(proto),
        )
    };
    if raw < 0 {
        return Err(Error::Emulator(format!(
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: raw is a fresh socket fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if let Err(e) = host_io::set_int_option(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1) {
        return Err(Error::Emulator(format!(
            "PACKET_IGNORE_OUTGOING (Linux ≥ 4.20 needed for the direct datapath): {e}"
        )));
    }
    if let Some(bytes) = buffer {
        grow_socket_buffers(raw, bytes);
    }
    if mode.vnet_hdr {
        if let Err(e) = host_io::set_int_option(raw, libc::SOL_PACKET, offload::PACKET_VNET_HDR, 1) {
            return Err(Error::Emulator(format!("PACKET_VNET_HDR: {e}")));
        }
    }
    if mode.qdisc_bypass {
        if let Err(e) = host_io::set_int_option(raw, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1) {
            return Err(Error::Emulator(format!("PACKET_QDISC_BYPASS: {e}")));
        }
    }
    // The ring before bind: frames that arrived in between would sit in the socket's queue,
    // which the ring's reader never looks at.
    let ring = match mode.ring_frame {
        Some(max_frame) => {
            // As much ring as the socket buffer would have been (the same burst room).
            let total = buffer.map_or(4 << 20, |b| b.max(0) as usize);
            Some(
                RxRing::attach(raw, max_frame, total, ring::RETIRE_MS)
                    .map_err(|e| Error::Emulator(format!("PACKET_RX_RING (TPACKET_V3): {e}")))?,
            )
        }
        None => None,
    };
    // SAFETY: a zeroed sockaddr_ll is a valid starting value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: bind with a correctly sized sockaddr_ll.
    let rc = unsafe {
        libc::bind(
            raw,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(Error::Emulator(format!(
            "bind AF_PACKET to ifindex {ifindex}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok((fd, ring))
}

/// One direction of one path.
struct Lane {
    knobs: Arc<Knobs>,
    /// 0: towards the client (data), 1: towards the server (ACKs).
    dir: usize,
    /// Port the lane writes to, and the MACs it writes (source, destination).
    out_port: usize,
    macs: [[u8; 6]; 2],
    radio: Option<RadioClock>,
    radio_rate_bps: Arc<AtomicU64>,
    wakeups: Arc<AtomicU64>,
    /// The drop-tail queue's size and content, in packets (a GSO unit counts its segments).
    queue_limit: usize,
    queued: usize,
    /// The rate stage: frames waiting for the link, the head in service.
    waiting: VecDeque<Timed>,
    /// When the head finishes on the link, and the rate it was timed at.
    head_done: Option<(Instant, u64)>,
    link_free: Instant,
    /// The delay line: frames and their release times, in order.
    line: VecDeque<Timed>,
    /// Releases wait for the end of the path's hold, counted from `start`.
    bursts: Option<(Instant, fbdt_scenario::Bursts)>,
    last_release: Instant,
    generation: u64,
    rng: StdRng,
    /// Scratch: which segments of the frame being released are lost.
    lost: Vec<bool>,
    lateness: Arc<Lateness>,
}

impl Lane {
    fn rate(&self) -> u64 {
        self.knobs.rate_bps[self.dir].load(Ordering::Relaxed)
    }

    /// When a frame that reaches the lane's end at `at` leaves it: at the end of the hold
    /// if the path holds then (`Bursts`), else at once.
    fn after_hold(&self, at: Instant) -> Instant {
        match self.bursts {
            Some((start, b)) => {
                let t_s = at.saturating_duration_since(start).as_secs_f64();
                at + Duration::from_secs_f64((b.release_s(t_s) - t_s).max(0.0))
            }
            None => at,
        }
    }

    /// Addresses a frame to the lane's far end and queues it for writing.
    fn emit(&self, mut frame: Frame, out: &mut Vec<(usize, Frame)>) {
        let eth = frame.eth_mut();
        eth[..6].copy_from_slice(&self.macs[1]);
        eth[6..12].copy_from_slice(&self.macs[0]);
        out.push((self.out_port, frame));
    }

    /// A frame read at `now` enters the lane; given back if the queue was full (dropped). Of
    /// a GSO unit only the segments that fit are queued, as a drop-tail queue of packets
    /// would (the unit is given back once they are taken out).
    fn arrive(&mut self, frame: Frame, now: Instant, pool: &mut Pool) -> Result<(), Frame> {
        let mut parts = Vec::new();
        match admit(frame, self.queue_limit.saturating_sub(self.queued), pool, |f| parts.push(f)) {
            Ok(frame) => self.enqueue(frame, now),
            Err(frame) => {
                parts.into_iter().for_each(|f| self.enqueue(f, now));
                return Err(frame);
            }
        }
        Ok(())
    }

    /// Queues an admitted frame for the link (after the radio's wake-up, if it dozes).
    fn enqueue(&mut self, frame: Frame, now: Instant) {
        self.queued += frame.segments();
        let at = match &mut self.radio {
            Some(r) => {
                let rate = self.radio_rate_bps.load(Ordering::Relaxed);
                let at = r
                    .release(tokio::time::Instant::from_std(now), frame.l3() as usize, rate)
                    .into_std();
                self.wakeups.store(r.wakeups(), Ordering::Relaxed);
                at
            }
            None => now,
        };
        self.waiting.push_back(Timed { frame, at });
    }

    /// A control changed: the frame on the link finishes its remaining bits at the new rate.
    fn retime(&mut self, now: Instant) {
        let g = self.knobs.generation.load(Ordering::Acquire);
        if g == self.generation {
            return;
        }
        self.generation = g;
        let new = self.rate();
        if let Some((done, old)) = self.head_done {
            if old != new && done > now {
                let left = (done - now).as_nanos() * u128::from(old) / u128::from(new.max(1));
                self.head_done = Some((now + Duration::from_nanos(left as u64), new));
            }
        }
    }

    /// Moves everything due by `now` through the stages; frames to send go to `out`,
    /// dropped frames to `spare`. Returns when the lane is next due.
    fn advance(
        &mut self,
        now: Instant,
        out: &mut Vec<(usize, Frame)>,
        spare: &mut Vec<Frame>,
        pool: &mut Pool,
    ) -> Option<Instant> {
        self.retime(now);
        loop {
            let (done, _) = match self.head_done {
                Some(h) => h,
                None => {
                    let Some(head) = self.waiting.front() else { break };
                    let rate = self.rate();
                    let start = self.link_free.max(head.at);
                    let h = (start + serialisation(head.frame.l3(), rate), rate);
                    self.head_done = Some(h);
                    h
                }
            };
            if done > now {
                break;
            }
            let head = self.waiting.pop_front().expect("a head is in service");
            self.queued -= head.frame.segments();
            self.head_done = None;
            self.link_free = done;
            let delay = Duration::from_nanos(self.knobs.delay_ns.load(Ordering::Relaxed));
            let release = self.after_hold(done + delay).max(self.last_release);
            self.last_release = release;
            self.line.push_back(Timed {
                frame: head.frame,
                at: release,
            });
        }
        let loss = f64::from_bits(self.knobs.loss[self.dir].load(Ordering::Relaxed));
        while self.line.front().is_some_and(|t| t.at <= now) {
            let Timed { frame, at } = self.line.pop_front().expect("checked");
            self.lateness
                .record((now - at).as_micros() as u64, frame.l3(), frame.segments() as u64);
            if loss > 0.0 {
                // Loss is per packet: a unit that loses a segment goes on as its survivors.
                let n = frame.segments();
                self.lost.clear();
                for _ in 0..n {
                    let l = self.rng.random::<f64>() < loss;
                    self.lost.push(l);
                }
                if self.lost.contains(&true) {
                    if n > 1 && frame.divisible() {
                        let lost = &self.lost;
                        frame.split(pool, |i| !lost[i as usize], |f| self.emit(f, out));
                    }
                    spare.push(frame);
                    continue;
                }
            }
            self.emit(frame, out);
        }
        let line = self.line.front().map(|t| t.at);
        let link = self.head_done.map(|(d, _)| d);
        // (A unit whose segments are all lost is spare above; one that cannot be cut is lost
        // whole — only units of a kind the testbed never makes, see `offload::unit`.)
        match (line, link) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Reads and writes frames in batches.
struct Batcher {
    /// Frames the kernel refused to queue.
    send_drops: Arc<AtomicU64>,
    bufs: Vec<Box<[u8]>>,
    iov: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
    hdrs: Vec<libc::mmsghdr>,
}

impl Batcher {
    fn new(pool: &mut Pool, send_drops: Arc<AtomicU64>) -> Self {
        Self {
            send_drops,
            bufs: (0..BATCH).map(|_| pool.take()).collect(),
            // SAFETY: zeroed iovec/sockaddr_ll/mmsghdr are valid (null pointers, zero lengths)
            // and are filled in before each call.
            iov: vec![unsafe { std::mem::zeroed() }; BATCH],
            addrs: vec![unsafe { std::mem::zeroed() }; BATCH],
            hdrs: vec![unsafe { std::mem::zeroed() }; BATCH],
        }
    }

    /// Reads up to [`BATCH`] frames; calls `take` with each unicast frame that fits (`head`:
    /// the bytes of `virtio_net_hdr` in front of each, 0 without).
    fn receive(
        &mut self,
        fd: i32,
        head: usize,
        pool: &mut Pool,
        mut take: impl FnMut(Frame, &mut Pool),
    ) -> std::io::Result<usize> {
        for i in 0..BATCH {
            self.iov[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr() as *mut libc::c_void,
                iov_len: self.bufs[i].len(),
            };
            let h = &mut self.hdrs[i];
            h.msg_hdr.msg_name = &mut self.addrs[i] as *mut libc::sockaddr_ll as *mut libc::c_void;
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iov[i];
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: every header points at a live buffer, iovec and address of this batcher.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = n as usize;
        for i in 0..n {
            let len = self.hdrs[i].msg_len as usize;
            let kind = self.addrs[i].sll_pkttype;
            let whole = self.hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC == 0;
            // As rattan: only frames addressed to a host pass (broadcast and multicast stay
            // in their namespace; neighbours are static).
            let unicast = kind == libc::PACKET_HOST || kind == libc::PACKET_OTHERHOST;
            if whole && unicast && len > head + ETH {
                let buf = if len <= pool.small && pool.small < pool.size {
                    let mut b = pool.take_for(len);
                    b[..len].copy_from_slice(&self.bufs[i][..len]);
                    b
                } else {
                    std::mem::replace(&mut self.bufs[i], pool.take())
                };
                take(Frame::new(buf, len, head), pool);
            }
        }
        Ok(n)
    }

    /// Writes `frames` (all for `fd`) with as few calls as possible; gives their buffers back.
    fn send(&mut self, fd: i32, frames: &mut Vec<Frame>, pool: &mut Pool) {
        for chunk in frames.chunks(BATCH) {
            for (i, f) in chunk.iter().enumerate() {
                self.iov[i] = libc::iovec {
                    iov_base: f.buf.as_ptr() as *mut libc::c_void,
                    iov_len: f.len,
                };
                let h = &mut self.hdrs[i];
                h.msg_hdr.msg_name = std::ptr::null_mut();
                h.msg_hdr.msg_namelen = 0;
                h.msg_hdr.msg_iov = &mut self.iov[i];
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
                h.msg_hdr.msg_flags = 0;
            }
            let mut sent = 0;
            while sent < chunk.len() {
                // SAFETY: headers [sent, len) point at the frames of this chunk, alive until
                // the call returns.
                let n = unsafe {
                    libc::sendmmsg(
                        fd,
                        self.hdrs[sent..].as_mut_ptr(),
                        (chunk.len() - sent) as libc::c_uint,
                        libc::MSG_DONTWAIT,
                    )
                };
                if n <= 0 {
                    // The frame at `sent` could not be queued (the receiving side's backlog
                    // is full): lost, as on a NIC, and counted as a drop the scenario did
                    // not ask for; the rest of the batch still goes.
                    self.send_drops.fetch_add(1, Ordering::Relaxed);
                    sent += 1;
                    continue;
                }
                sent += n as usize;
            }
        }
        for f in frames.drain(..) {
            pool.give(f.buf);
        }
    }
}

/// A frame read at `at` for `lane`: across the shared link first if the lane crosses it.
fn enter(
    lanes: &mut [Lane],
    shared: &mut Option<Shared>,
    lane: usize,
    frame: Frame,
    at: Instant,
    pool: &mut Pool,
) -> Result<(), Frame> {
    match shared {
        Some(s) if s.carries(lane) => s.arrive(frame, at, lane, pool),
        _ => lanes[lane].arrive(frame, at, pool),
    }
}

/// Moves what leaves the shared link by `now` into the lanes, at its departure time; frames
/// a lane's queue refused go to `spare`. Returns when the next frame departs.
fn leave_shared(
    shared: &mut Shared,
    now: Instant,
    lanes: &mut [Lane],
    spare: &mut Vec<Frame>,
    pool: &mut Pool,
) -> Option<Instant> {
    shared.advance(now, |lane, frame, at| {
        if let Err(f) = lanes[lane].arrive(frame, at, pool) {
            spare.push(f);
        }
    })
}

/// Monotonic-clock conversion for `epoll_pwait2`'s relative timeout.
fn timeout(until: Option<Instant>, now: Instant, idle: Duration) -> libc::timespec {
    let d = until.map_or(idle, |u| u.saturating_duration_since(now).min(idle));
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// Opens the sockets and returns the loop to run and its handles. `veths[i]` are path i's
/// emulator-side cells (towards the client, towards the server); `macs[i]` their peers'
/// addresses: (emu_c, cli, emu_s, srv). `shared`: a link some paths' data direction
/// crosses first.
pub(super) fn prepare(
    veths: &[(Arc<VethCell>, Arc<VethCell>)],
    paths: Vec<PathSetup>,
    shared: Option<SharedSetup>,
    mtu: u32,
    buffer: Option<i32>,
    mode: PortMode,
    wake: Arc<OwnedFd>,
) -> Result<(Loop, Running)> {
    let start = Instant::now();
    let mut ports = Vec::new();
    let mut lanes = Vec::new();
    for ((to_cli, to_srv), p) in veths.iter().zip(paths) {
        let (c, s) = (ports.len(), ports.len() + 1);
        // Frames from the client (port c) feed the lane towards the server, and back.
        let (down, up) = (lanes.len(), lanes.len() + 1);
        for (veth, feeds) in [(to_cli, up), (to_srv, down)] {
            let (fd, ring) = open_port(veth.index, buffer, mode)?;
            ports.push(Port { ring, fd, feeds });
        }
        for (dir, out_port, from, to) in [(0, c, to_cli, to_cli.peer()), (1, s, to_srv, to_srv.peer())] {
            let asleep = p.radio.map(|d| {
                let t = tokio::time::Instant::from_std(start);
                RadioClock::new(d, t.checked_sub(d.idle_timeout).unwrap_or(t))
            });
            lanes.push(Lane {
                knobs: p.knobs.clone(),
                dir,
                out_port,
                macs: [from.mac_addr.bytes(), to.mac_addr.bytes()],
                radio: asleep,
                radio_rate_bps: p.radio_rate_bps.clone(),
                wakeups: p.radio_wakeups[dir].clone(),
                queue_limit: p.queue_packets.max(1),
                queued: 0,
                waiting: VecDeque::new(),
                head_done: None,
                link_free: start,
                line: VecDeque::new(),
                bursts: p.bursts.map(|b| (start, b)),
                last_release: start,
                generation: u64::MAX,
                rng: StdRng::seed_from_u64(p.seeds[dir]),
                lost: Vec::new(),
                lateness: p.lateness[dir].clone(),
            });
        }
    }
    // Path i's lanes are 2i (towards the client: the data direction) and 2i + 1.
    let shared = shared.map(|s| Shared::new(s, lanes.len(), |path| 2 * path, start));
    let packet_fds = ports.iter().map(|p| p.fd.as_raw_fd()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let send_drops = Arc::new(AtomicU64::new(0));
    let running = Running {
        stop: stop.clone(),
        wake: wake.clone(),
        packet_fds,
        send_drops: send_drops.clone(),
    };
    // Room for the largest frame of the MTU with its header (and a VLAN tag to spare), or
    // for the largest GSO unit (an IP packet of 64 KB) with its `virtio_net_hdr`.
    let head = if mode.vnet_hdr { VNET_HDR_LEN } else { 0 };
    let small = head + mtu as usize + ETH + 4;
    // Free buffers for a few batches are kept; the rest are in flight in the lanes.
    let pool = Pool::new(
        if mode.vnet_hdr { head + 65_535 + ETH + 4 } else { small },
        small,
        8 * BATCH,
    );
    Ok((
        Loop {
            ports,
            lanes,
            shared,
            pool,
            head,
            wake,
            stop,
            send_drops,
        },
        running,
    ))
}

/// The emulator thread's work.
pub(super) struct Loop {
    ports: Vec<Port>,
    lanes: Vec<Lane>,
    shared: Option<Shared>,
    pool: Pool,
    /// Bytes of `virtio_net_hdr` in front of every frame read and written.
    head: usize,
    wake: Arc<OwnedFd>,
    stop: Arc<AtomicBool>,
    send_drops: Arc<AtomicU64>,
}

impl Loop {
    pub(super) fn run(mut self) -> Result<()> {
        // SAFETY: epoll_create1 with a valid flag; owned right after.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(Error::Emulator(format!("epoll: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: ep was just created and is owned by nobody else.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let wake_token = self.ports.len() as u64;
        let fds: Vec<i32> = self.ports.iter().map(|p| p.fd.as_raw_fd()).collect();
        for (token, fd) in fds
            .iter()
            .copied()
            .enumerate()
            .chain([(wake_token as usize, self.wake.as_raw_fd())])
        {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: token as u64,
            };
            // SAFETY: registering an fd we own with a valid event.
            if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
                return Err(Error::Emulator(format!(
                    "epoll_ctl: {}",
                    std::io::Error::last_os_error()
                )));
            }
        }
        let mut batcher = Batcher::new(&mut self.pool, self.send_drops.clone());
        let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; fds.len() + 1];
        let mut out: Vec<(usize, Frame)> = Vec::new();
        let mut per_port: Vec<Vec<Frame>> = (0..fds.len()).map(|_| Vec::new()).collect();
        let mut spare: Vec<Frame> = Vec::new();
        let mut next: Option<Instant> = None;
        // With rings, a lost wake-up (see below) is found at the next wake-up; an idle loop
        // wakes every block timeout so that is never long.
        let idle = if self.ports.iter().any(|p| p.ring.is_some()) {
            Duration::from_millis(u64::from(ring::RETIRE_MS))
        } else {
            IDLE_WAKE
        };
        while !self.stop.load(Ordering::Relaxed) {
            let ts = timeout(next, Instant::now(), idle);
            // SAFETY: events has room for every registered fd; ts is a valid timespec.
            let n = unsafe {
                libc::epoll_pwait2(
                    ep.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as libc::c_int,
                    &ts,
                    std::ptr::null(),
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::Emulator(format!("epoll_pwait2: {e}")));
            }
            let now = Instant::now();
            let mut stamps: Option<StampClock> = None;
            for ev in &events[..n as usize] {
                let token = ev.u64 as usize;
                if token == wake_token as usize {
                    let mut v: u64 = 0;
                    // SAFETY: an 8-byte read into a u64 from our eventfd.
                    unsafe { libc::read(self.wake.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
                    continue;
                }
                let lane = self.ports[token].feeds;
                if self.ports[token].ring.is_some() {
                    // Read below, with every ring's.
                    continue;
                }
                // Read what is there, up to a bound so a flood on one socket cannot hold
                // back the releases: a level-triggered fd with frames left wakes us again.
                for _ in 0..BATCHES_PER_WAKE {
                    let (lanes, shared, pool) = (&mut self.lanes, &mut self.shared, &mut self.pool);
                    let got = batcher.receive(fds[token], self.head, pool, |f, pool| {
                        if let Err(f) = enter(lanes, shared, lane, f, now, pool) {
                            spare.push(f);
                        }
                    });
                    if !matches!(got, Ok(k) if k == BATCH) {
                        break;
                    }
                }
            }
            // Rings are looked at on every wake-up, whatever epoll said: the kernel signals a
            // handed-over block before it moves on to the next, so a poll in between finds
            // no block ready and the wake-up is lost (the frame would wait for the socket's
            // next block). One load per ring finds it instead.
            for port in &mut self.ports {
                let lane = port.feeds;
                let Some(ring) = &mut port.ring else { continue };
                if !ring.ready() {
                    continue;
                }
                // Each frame is timed by the kernel's receive stamp: the time it waited in
                // its block counts against the path's delay, as on the wire.
                let clock = stamps.get_or_insert_with(|| StampClock::new(now));
                let (lanes, shared, pool) = (&mut self.lanes, &mut self.shared, &mut self.pool);
                ring.drain(BATCH * BATCHES_PER_WAKE, |rf| {
                    // As `Batcher::receive`: whole unicast frames that fit a buffer.
                    let unicast = rf.pkttype == libc::PACKET_HOST || rf.pkttype == libc::PACKET_OTHERHOST;
                    if rf.truncated || !unicast || rf.data.len() <= ETH || rf.data.len() > pool.size {
                        return;
                    }
                    let mut buf = pool.take();
                    buf[..rf.data.len()].copy_from_slice(rf.data);
                    let f = Frame::new(buf, rf.data.len(), 0);
                    if let Err(f) = enter(lanes, shared, lane, f, clock.arrival(rf.stamp), pool) {
                        spare.push(f);
                    }
                });
            }
            // Stages, then writes; repeat while writing took long enough for more to fall due.
            loop {
                let now = Instant::now();
                next = None;
                // The shared link first: what leaves it by `now` is due at its lanes.
                if let Some(s) = &mut self.shared {
                    next = leave_shared(s, now, &mut self.lanes, &mut spare, &mut self.pool);
                }
                for lane in &mut self.lanes {
                    if let Some(t) = lane.advance(now, &mut out, &mut spare, &mut self.pool) {
                        next = Some(next.map_or(t, |n: Instant| n.min(t)));
                    }
                }
                for f in spare.drain(..) {
                    self.pool.give(f.buf);
                }
                if out.is_empty() {
                    break;
                }
                for (port, f) in out.drain(..) {
                    per_port[port].push(f);
                }
                for (port, frames) in per_port.iter_mut().enumerate() {
                    if !frames.is_empty() {
                        batcher.send(fds[port], frames, &mut self.pool);
                    }
                }
                if next.is_none_or(|t| t > Instant::now()) {
                    break;
                }
            }
        }
        Ok(())
    }
}

impl Running {
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        poke(&self.wake);
    }
}

#[cfg(test)]
mod tests;
