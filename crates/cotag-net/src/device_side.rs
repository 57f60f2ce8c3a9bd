//! The client end: the device in the client namespace. Datagrams from both paths go to the
//! decoder (COTAG; original packets leave it in cohort order) or straight into the TUN
//! device in arrival order (`dual-rr`). Everything the client's kernel sends (TCP ACKs) is
//! read from the TUN device and sent uncoded over path 1.

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cotag::{Device, LINKS};

use crate::gso::Coalescer;
use crate::io::{drain, udp, wait_readable, Clock};
use crate::stats::{SideStats, LABEL_LOG_CAP};
use crate::tun::Tun;
use crate::{Error, Mode, SideSetup, MAX_WAIT_US};

const BATCH: usize = 64;

pub(crate) struct DeviceSide {
    tun: Tun,
    down: [UdpSocket; LINKS],
    up: UdpSocket,
    device: Option<Device>,
    /// Joins the segments handed to the TUN device in one turn (GRO's merge).
    coalescer: Coalescer,
    clock: Clock,
    stats: SideStats,
}

impl DeviceSide {
    pub(crate) fn new(setup: &SideSetup, tun: Tun) -> Result<DeviceSide, Error> {
        let [d0, d1] = [0, 1].map(|i| udp(setup.down[i].client, None));
        let up = udp(setup.up.client, Some(setup.up.server))?;
        let device = match &setup.mode {
            Mode::Cotag(p) => {
                let mut d = Device::new(p.device.clone())?;
                d.record_failures(LABEL_LOG_CAP);
                Some(d)
            }
            Mode::DualRr => None,
        };
        Ok(DeviceSide {
            tun,
            down: [d0?, d1?],
            up,
            device,
            coalescer: Coalescer::default(),
            clock: setup.clock,
            stats: SideStats::default(),
        })
    }

    pub(crate) fn run(mut self, stop: Arc<AtomicBool>) -> Result<SideStats, Error> {
        let mut buf = vec![0u8; 65_536];
        let fds = [self.down[0].as_raw_fd(), self.down[1].as_raw_fd(), self.tun.as_raw_fd()];
        let mut wanted = None;
        let started = self.clock.now_us();
        while !stop.load(Ordering::Relaxed) {
            let now = self.clock.now_us();
            self.stats.wake(wanted, now);
            let mut backlog = false;
            for link in 0..LINKS {
                backlog |= self.downlink(link, &mut buf, now)?;
            }
            if let Some(d) = &mut self.device {
                // The liveness timeout only once both links' sockets are read empty: after
                // the thread was held up (turns of up to 14 ms measured), a timeout between
                // two batches gave up cohorts whose combinations were still queued.
                if !backlog {
                    d.handle_timeout(now);
                }
                while let Some(p) = d.poll_packet() {
                    deliver(&self.tun, &mut self.coalescer, &p, &mut self.stats);
                }
            }
            flush(&self.tun, &mut self.coalescer, &mut self.stats);
            self.uplink(&mut buf)?;
            let wake = self.device.as_ref().and_then(|d| d.poll_timeout());
            let before = self.clock.now_us();
            self.stats.turn(now, before);
            let timeout = wake.map_or(MAX_WAIT_US, |t| t.saturating_sub(before).min(MAX_WAIT_US));
            // Lateness counts against the wake-up the core asked for, not the 2-ms poll.
            wanted = wake.map(|t| t.max(before));
            if timeout > 0 {
                wait_readable(&fds, Some(timeout))?;
            }
        }
        self.stats.tun_merged_writes = self.coalescer.merged_writes;
        self.stats.tun_merged_segments = self.coalescer.merged_segments;
        self.stats.loop_cpu_us = crate::io::thread_cpu_us();
        self.stats.loop_wall_us = self.clock.now_us().saturating_sub(started);
        if let Some(d) = &self.device {
            self.stats.cotag_device = Some(d.stats().clone());
            self.stats.records.failed = d.failures().cloned().collect();
        }
        Ok(self.stats)
    }

    /// Reads one batch of `link`'s datagrams; true if more may be queued.
    fn downlink(&mut self, link: usize, buf: &mut [u8], now: u64) -> Result<bool, Error> {
        let (tun, stats, device, coalescer) = (&self.tun, &mut self.stats, &mut self.device, &mut self.coalescer);
        drain(
            buf,
            BATCH,
            |b| self.down[link].recv(b),
            |datagram| {
                stats.packets_in[link] += 1;
                stats.bytes_in[link] += datagram.len() as u64;
                match device {
                    Some(d) => {
                        // Malformed datagrams are counted by the device.
                        let _ = d.handle_recv(link, datagram, now);
                        while let Some(p) = d.poll_packet() {
                            deliver(tun, coalescer, &p, stats);
                        }
                    }
                    None => deliver(tun, coalescer, datagram, stats),
                }
            },
        )
        .map_err(|e| Error::Io("receiving downlink datagrams", e))
    }

    /// Everything the client's kernel sends (ACKs) → path 1, uncoded.
    fn uplink(&mut self, buf: &mut [u8]) -> Result<(), Error> {
        let (up, stats) = (&self.up, &mut self.stats);
        drain(
            buf,
            BATCH,
            |b| self.tun.recv(b),
            |packet| {
                stats.uplink_packets += 1;
                // Whole packets behind an all-zero header: the device has no offloads on.
                if up.send(packet.get(Tun::HEADER_LEN..).unwrap_or_default()).is_err() {
                    stats.send_dropped += 1;
                }
            },
        )
        .map(drop)
        .map_err(|e| Error::Io("reading the client's TUN device", e))
    }
}

/// Hands one decoded (or, for dual-rr, received) IP packet towards the client's TCP: into
/// the current run of segments, or written with the run before it.
fn deliver(tun: &Tun, coalescer: &mut Coalescer, packet: &[u8], stats: &mut SideStats) {
    stats.tun_packets_out += 1;
    stats.tun_bytes_out += packet.len() as u64;
    coalescer.push(packet, &mut |hdr, p| write(tun, hdr, p, stats));
}

/// Writes the run of segments the coalescer holds: at the end of every batch, so a packet
/// waits for no more than the rest of its turn.
fn flush(tun: &Tun, coalescer: &mut Coalescer, stats: &mut SideStats) {
    coalescer.flush(&mut |hdr, p| write(tun, hdr, p, stats));
}

fn write(tun: &Tun, hdr: &[u8; Tun::HEADER_LEN], packet: &[u8], stats: &mut SideStats) {
    if tun.send_with_header(hdr, packet).is_err() {
        stats.tun_write_errors += 1;
    }
}
