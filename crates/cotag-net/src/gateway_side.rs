//! The server end: the gateway and both APs' buffer disciplines, in the server namespace.
//!
//! Downlink IP packets the kernel routes into the TUN device go to the gateway (COTAG) or are
//! dealt round-robin to the two paths (`dual-rr`). COTAG's gateway → AP hop is in memory
//! (the paper's wired hop is fast); each AP sits at the ingress of its emulated link and is
//! paced at that link's scheduled rate, so its buffer is where the queue forms. Uplink
//! packets (the client's ACKs) arrive uncoded on path 1's socket and go into the TUN device.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use cotag::{Ap, Gateway, LINKS};

use crate::gso::split;
use crate::io::{drain, nothing_now, thread_cpu_us, udp, wait_readable, Clock};
use crate::pacer::Pacer;
use crate::stats::{QueueSample, SideStats, LABEL_LOG_CAP, QUEUE_SAMPLES_CAP, QUEUE_SAMPLE_US};
use crate::tun::Tun;
use crate::{Error, Mode, SideSetup, IP_UDP_HEADER, MAX_WAIT_US};

/// Packets read from one source per loop turn at most, so neither direction starves.
const BATCH: usize = 64;

enum Engine {
    Cotag(Box<CotagEnd>),
    DualRr { next: usize },
}

struct CotagEnd {
    gateway: Gateway,
    aps: [Ap; LINKS],
    pacers: [Pacer; LINKS],
    /// The cohort period and the IP bytes of a full-size coded datagram with a dense row:
    /// the links' budgets in packets per period. A systematic High is shorter by its
    /// unit-row index (n_k − 2 bytes); counting Highs at that size made cohorts fill the
    /// links exactly and doubled the failed cohorts in ten-flow bursts at scale 0.9 (APs
    /// flushing what a dip in the rate left unsent; docs/cotag.md, "Highs as indexes"), so
    /// those bytes stay slack for the APs' Lows.
    period_us: u64,
    datagram_bytes: usize,
    /// Tell the APs when the gateway falls idle ([`CotagParams::idle_release`]).
    idle_release: bool,
}

pub(crate) struct GatewaySide {
    tun: Arc<Tun>,
    down: [UdpSocket; LINKS],
    /// Taken by the uplink thread when the loop starts.
    up: Option<UdpSocket>,
    engine: Engine,
    /// Where [`split`] builds each segment of a super-packet.
    scratch: Vec<u8>,
    clock: Clock,
    stats: SideStats,
}

impl GatewaySide {
    pub(crate) fn new(setup: &SideSetup, tun: Tun) -> Result<GatewaySide, Error> {
        let down = [0, 1].map(|i| udp(setup.down[i].server, Some(setup.down[i].client)));
        let [d0, d1] = down;
        let down = [d0?, d1?];
        let up = udp(setup.up.server, None)?;
        let engine = match &setup.mode {
            Mode::Cotag(p) => {
                let ap = |i: u64| {
                    Ap::new(cotag::ApConfig {
                        seed: p.ap.seed.wrapping_add(i),
                        ..p.ap.clone()
                    })
                };
                let (burst, burst_us) = (p.pace_burst_bytes, p.pace_burst_us);
                let mut gateway = Gateway::new(p.gateway.clone())?;
                let mut aps = [ap(0)?, ap(1)?];
                gateway.record_labels(LABEL_LOG_CAP);
                for a in &mut aps {
                    a.record_labels(LABEL_LOG_CAP);
                }
                Engine::Cotag(Box::new(CotagEnd {
                    gateway,
                    aps,
                    pacers: [0, 1].map(|i| Pacer::with_burst_time(setup.rates[i].clone(), p.pace_factor, burst, burst_us)),
                    period_us: p.gateway.period_us,
                    datagram_bytes: setup.outer_mtu,
                    idle_release: p.idle_release,
                }))
            }
            Mode::DualRr => Engine::DualRr { next: 0 },
        };
        Ok(GatewaySide {
            tun: Arc::new(tun),
            down,
            up: Some(up),
            engine,
            scratch: Vec::with_capacity(2_048),
            clock: setup.clock,
            stats: SideStats::default(),
        })
    }

    /// Runs until `stop` is set; returns the counters.
    pub(crate) fn run(mut self, stop: Arc<AtomicBool>) -> Result<SideStats, Error> {
        // A vnet header and a 64-KiB super-packet.
        let mut buf = vec![0u8; 65_536 + 64];
        let fds = [self.tun.as_raw_fd()];
        let uplink = match self.up.take() {
            Some(up) => Some(spawn_uplink(up, self.tun.clone(), stop.clone())?),
            None => None,
        };
        let started = self.clock.now_us();
        let (mut wanted, mut next_sample) = (None, 0);
        while !stop.load(Ordering::Relaxed) {
            let now = self.clock.now_us();
            self.stats.wake(wanted, now);
            if let Engine::Cotag(c) = &mut self.engine {
                c.set_budget(now);
                if now >= next_sample && self.stats.queue_samples.len() < QUEUE_SAMPLES_CAP {
                    self.stats.queue_samples.push(c.queues(now));
                    next_sample = now - now % QUEUE_SAMPLE_US + QUEUE_SAMPLE_US;
                }
            }
            self.downlink_in(&mut buf, now)?;
            let wake = self.drive(self.clock.now_us())?;
            let before = self.clock.now_us();
            self.stats.turn(now, before);
            let timeout = wake.map_or(MAX_WAIT_US, |t| t.saturating_sub(before).min(MAX_WAIT_US));
            // Lateness counts against the wake-up the core asked for, not the 2-ms poll.
            wanted = wake.map(|t| t.max(before));
            if timeout > 0 {
                wait_readable(&fds, Some(timeout))?;
            }
        }
        self.stats.loop_cpu_us = thread_cpu_us();
        self.stats.loop_wall_us = self.clock.now_us().saturating_sub(started);
        if let Some(h) = uplink {
            let up = h
                .join()
                .map_err(|_| Error::Setup("the server's uplink thread panicked".into()))??;
            self.stats.uplink_packets = up.packets;
            self.stats.tun_write_errors += up.write_errors;
            self.stats.uplink_cpu_us = up.cpu_us;
        }
        if let Engine::Cotag(c) = &self.engine {
            let (gateway, aps) = (&c.gateway, &c.aps);
            self.stats.cotag_gateway = Some(gateway.stats().clone());
            self.stats.cotag_aps = Some([aps[0].stats().clone(), aps[1].stats().clone()]);
            self.stats.records.gateway = gateway.label_records().to_vec();
            self.stats.records.aps = [0, 1].map(|l| aps[l].label_records().cloned().collect());
        }
        Ok(self.stats)
    }

    /// TUN → gateway, or round-robin onto the paths: [`BATCH`] packets at most (the
    /// segments of a super-packet counted), so neither direction starves.
    fn downlink_in(&mut self, buf: &mut [u8], now: u64) -> Result<(), Error> {
        let (engine, stats, down, scratch) = (&mut self.engine, &mut self.stats, &self.down, &mut self.scratch);
        let mut handed = 0;
        while handed < BATCH {
            let n = match self.tun.recv(buf) {
                Ok(n) => n,
                Err(e) if nothing_now(&e) => break,
                Err(e) => return Err(Error::Io("reading the server's TUN device", e)),
            };
            stats.tun_reads += 1;
            handed += split(&buf[..n], scratch, |packet| {
                stats.tun_packets_in += 1;
                stats.tun_bytes_in += packet.len() as u64;
                match engine {
                    Engine::Cotag(c) => {
                        if c.gateway.handle_packet(packet, now).is_err() {
                            // Longer than the wire allows: the inner MTU prevents it.
                            stats.rejected += 1;
                        }
                    }
                    Engine::DualRr { next } => {
                        let link = *next;
                        *next = (link + 1) % LINKS;
                        send(&down[link], packet, link, stats);
                    }
                }
            });
        }
        Ok(())
    }

    /// Timers, gateway → APs, paced APs → paths. Returns when it next needs to run.
    fn drive(&mut self, now: u64) -> Result<Option<u64>, Error> {
        let Engine::Cotag(c) = &mut self.engine else {
            return Ok(None);
        };
        let (down, stats) = (&self.down, &mut self.stats);
        c.step(now, &mut |link, coded| send(&down[link], coded, link, stats))
    }
}

impl CotagEnd {
    /// Timers, gateway → APs, paced APs → `send(link, datagram)`. Returns when it next needs
    /// to run.
    fn step(&mut self, now: u64, send: &mut impl FnMut(usize, &[u8])) -> Result<Option<u64>, Error> {
        let CotagEnd {
            gateway,
            aps,
            pacers,
            idle_release,
            ..
        } = self;
        // A turn that comes late to a boundary first finishes the period before it: the
        // cohort the gateway closed meanwhile (reading the TUN device closes it) goes to the
        // APs, and the pacers' slots earned up to the boundary go to what the APs forward —
        // only then may the boundary close the next cohort, whose label flushes what came
        // before. In the other order a late turn handed two labels at once and both APs
        // flushed a whole cohort unsent (docs/cotag.md, "Round 4").
        if let Some(b) = gateway.next_boundary().filter(|&b| b <= now) {
            let before = b.saturating_sub(1);
            for (link, (ap, pacer)) in aps.iter_mut().zip(pacers.iter_mut()).enumerate() {
                hand_over(gateway, ap, link, before)?;
                pace(ap, pacer, link, before, send)?;
            }
        }
        gateway.handle_timeout(now);
        if gateway.poll_idle() && *idle_release {
            for ap in aps.iter_mut() {
                ap.handle_idle(now);
            }
        }
        for (link, ap) in aps.iter_mut().enumerate() {
            hand_over(gateway, ap, link, now)?;
        }
        let mut wake = gateway.poll_timeout();
        for (link, (ap, pacer)) in aps.iter_mut().zip(pacers.iter_mut()).enumerate() {
            pace(ap, pacer, link, now, send)?;
            let paced = (!pacer.ready(now) && ap.buffered() > 0)
                .then(|| pacer.ready_at(now))
                .flatten();
            wake = [wake, ap.poll_timeout(), paced].into_iter().flatten().min();
        }
        Ok(wake)
    }

    fn queues(&self, now: u64) -> QueueSample {
        QueueSample {
            t_ms: (now / 1_000) as u32,
            gateway: self.gateway.queued() as u32,
            aps: self.aps.each_ref().map(|a| a.buffered() as u32),
        }
    }

    /// Tells the gateway what each link carries in one period now: the pacer's rate (the
    /// schedule's, × the pace factor) in full-size datagrams. The gateway thus knows the
    /// links' current rates exactly and at once, as the APs' pacers do — a real gateway
    /// would learn them from the APs, late.
    fn set_budget(&mut self, now: u64) {
        let per_period = self
            .pacers
            .each_ref()
            .map(|p| p.rate_bps(now) * p.factor() * self.period_us as f64 / 1e6 / (8.0 * self.datagram_bytes as f64));
        self.gateway.set_link_budget(per_period);
    }
}

/// The gateway's coded packets for `link` up to `at`, into its AP.
fn hand_over(gateway: &mut Gateway, ap: &mut Ap, link: usize, at: u64) -> Result<(), Error> {
    ap.handle_timeout(at);
    while let Some(coded) = gateway.poll_transmit(link, at)? {
        // Only malformed input is an error here, and the gateway emits none.
        let _ = ap.handle_recv(&coded, at);
    }
    Ok(())
}

/// Sends what `ap` has for `link` while the pacer has slots up to `at`.
fn pace(ap: &mut Ap, pacer: &mut Pacer, link: usize, at: u64, send: &mut impl FnMut(usize, &[u8])) -> Result<(), Error> {
    while pacer.ready(at) {
        let Some(coded) = ap.poll_transmit(at)? else { break };
        pacer.charge(coded.len() + IP_UDP_HEADER);
        send(link, &coded);
    }
    Ok(())
}

/// Sends one datagram on `link`; a full socket buffer drops it (counted), like a full
/// transmit queue would.
fn send(sock: &UdpSocket, bytes: &[u8], link: usize, stats: &mut SideStats) {
    match sock.send(bytes) {
        Ok(_) => {
            stats.packets_out[link] += 1;
            stats.bytes_out[link] += bytes.len() as u64;
        }
        Err(_) => stats.send_dropped += 1,
    }
}

/// What the uplink thread did.
struct UplinkCounts {
    packets: u64,
    write_errors: u64,
    cpu_us: u64,
}

/// Uplink datagrams (uncoded IP packets from the client: TCP's ACKs) → TUN, on a thread of
/// their own. Writing an ACK into the TUN device runs the server kernel's TCP inside the
/// writing thread's syscall — the ACK's processing and the segments it releases, which come
/// back through the TUN device to the gateway. In the coding loop that work made turns of
/// several ms (issue 44: 2,200–5,300 turns > 250 µs per 10 s at scale 0.9), during which no
/// AP was paced and cohorts were flushed or discarded unsent; here it runs beside the loop.
/// Same real-time priority as the loops: ACKs are the flow's clock.
fn spawn_uplink(
    up: UdpSocket,
    tun: Arc<Tun>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<Result<UplinkCounts, Error>>, Error> {
    std::thread::Builder::new()
        .name("cotag-uplink".into())
        .spawn(move || {
            // Best effort, as for the loops.
            let _ = crate::io::make_realtime(crate::io::LOOP_RT_PRIORITY);
            let mut buf = vec![0u8; 65_536];
            let mut counts = UplinkCounts {
                packets: 0,
                write_errors: 0,
                cpu_us: 0,
            };
            let fds = [up.as_raw_fd()];
            while !stop.load(Ordering::Relaxed) {
                let more = drain(
                    &mut buf,
                    BATCH,
                    |b| up.recv(b),
                    |packet| {
                        counts.packets += 1;
                        if tun.send(packet).is_err() {
                            counts.write_errors += 1;
                        }
                    },
                )
                .map_err(|e| Error::Io("receiving uplink datagrams", e))?;
                if !more {
                    // Bounded, so `stop` is seen within one MAX_WAIT_US.
                    wait_readable(&fds, Some(MAX_WAIT_US))
                        .map_err(|e| Error::Io("waiting for uplink datagrams", e))?;
                }
            }
            counts.cpu_us = thread_cpu_us();
            Ok(counts)
        })
        .map_err(|e| Error::Io("starting the server's uplink thread", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::CotagParams;

    /// Two 200-Mbit/s links, T = 1 ms, cohorts of at most 32 packets, label records kept.
    fn end() -> CotagEnd {
        let p = CotagParams::new(1_000, 32);
        let mut aps = [0, 1].map(|i| {
            Ap::new(cotag::ApConfig {
                seed: i,
                ..p.ap.clone()
            })
            .expect("AP config")
        });
        for a in &mut aps {
            a.record_labels(1_000);
        }
        CotagEnd {
            gateway: Gateway::new(p.gateway.clone()).expect("gateway config"),
            aps,
            pacers: [0, 1].map(|_| Pacer::with_burst_time(vec![(0.0, 200e6)], p.pace_factor, p.pace_burst_bytes, p.pace_burst_us)),
            period_us: 1_000,
            datagram_bytes: 1_500,
            idle_release: true,
        }
    }

    #[test]
    fn a_turn_late_past_a_boundary_lets_the_aps_forward_the_cohort_before_the_next_label() {
        let mut c = end();
        let packet = vec![0x45u8; 1_200];
        let mut sent = 0u64;
        // On time: 10 packets every 100 µs, a turn right after each read.
        let mut t = 0;
        while t < 10_000 {
            c.set_budget(t);
            for _ in 0..10 {
                c.gateway.handle_packet(&packet, t).expect("packet");
            }
            c.step(t + 5, &mut |_, _| sent += 1).expect("step");
            t += 100;
        }
        // The loop is held up: the reads at 10,950 µs come before the boundary at 11,000 µs,
        // the read at 11,050 closes the cohort of that boundary, and the turn that hands it
        // to the APs runs only at 12,020 µs, past the next boundary (before the cohort's
        // send interval ends at 12,050).
        for _ in 0..10 {
            c.gateway.handle_packet(&packet, 10_950).expect("packet");
        }
        c.step(10_955, &mut |_, _| sent += 1).expect("step");
        for _ in 0..10 {
            c.gateway.handle_packet(&packet, 11_050).expect("packet");
        }
        c.step(12_020, &mut |_, _| sent += 1).expect("step");
        // Back on time until every label is over.
        let mut t = 12_100;
        while t < 20_000 {
            c.set_budget(t);
            c.step(t, &mut |_, _| sent += 1).expect("step");
            t += 100;
        }
        assert!(sent > 0);
        // The slots the late turn's pacers had earned carried the cohort it released: no
        // AP flushed anything (in the old order both flushed that cohort whole, unsent).
        for (i, ap) in c.aps.iter().enumerate() {
            assert!(ap.label_records().count() >= 10);
            for r in ap.label_records() {
                assert_eq!(r.flushed_allowed, 0, "AP {i}: label {} flushed ({r:?})", r.label);
            }
        }
    }
}
