//! A deterministic end-to-end harness: a packet source → [`Gateway`] → two links → two
//! [`Ap`]s → two links → [`Device`], in virtual time (earliest event first, fixed tie-break
//! order: arrivals, source, timeouts, then link 0 before link 1), so a run repeats bit for bit.
//!
//! Each link is a serialiser (rate, one-way delay, seeded Bernoulli loss) that asks its sender
//! for a packet whenever it is idle — that is how "spare capacity" reaches the gateway and the
//! APs. Every source packet starts with its sequence number (u64, big-endian) and is checked
//! byte for byte when delivered.

use std::collections::VecDeque;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::{
    Ap, ApConfig, ApStats, Device, DeviceConfig, DeviceStats, Error, Gateway, GatewayConfig, GatewayStats, Instant,
    LINKS,
};

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkModel {
    pub rate_bps: f64,
    pub delay_us: u64,
    /// Drop probability per packet, [0, 1).
    pub loss: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub gateway: GatewayConfig,
    /// AP i uses `ap` with its seed offset by i.
    pub ap: ApConfig,
    pub device: DeviceConfig,
    /// Gateway → AP i.
    pub uplinks: [LinkModel; LINKS],
    /// AP i → device.
    pub downlinks: [LinkModel; LINKS],
    /// Source packets, sent back to back at `source_rate_bps`.
    pub packets: usize,
    pub source_rate_bps: f64,
    /// Packet lengths, uniform in this inclusive range (at least 8: the sequence number).
    pub min_len: usize,
    pub max_len: usize,
    /// Seeds packet contents, lengths and link losses.
    pub seed: u64,
    /// Events processed at most (catches livelock).
    pub max_events: usize,
}

impl Default for Setup {
    fn default() -> Self {
        let fast = LinkModel {
            rate_bps: 10e9,
            delay_us: 50,
            loss: 0.0,
        };
        let radio = LinkModel {
            rate_bps: 1e9,
            delay_us: 100,
            loss: 0.0,
        };
        Setup {
            gateway: GatewayConfig::default(),
            ap: ApConfig::default(),
            device: DeviceConfig::default(),
            uplinks: [fast; LINKS],
            downlinks: [radio; LINKS],
            packets: 10_000,
            source_rate_bps: 1e9,
            min_len: 64,
            max_len: 1400,
            seed: 1,
            max_events: 10_000_000,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub sent: usize,
    pub source_bytes: u64,
    /// Sequence numbers in delivery order.
    pub delivered: Vec<u64>,
    /// Delivered packets whose bytes differ from what was sent.
    pub corrupted: usize,
    /// Source-to-delivery delay of each delivered packet, µs, in delivery order.
    pub delays_us: Vec<u64>,
    /// Coded bytes put on each AP → device link (headers included).
    pub downlink_bytes: [u64; LINKS],
    pub end_us: Instant,
    /// False when `max_events` ran out first.
    pub finished: bool,
    pub gateway: GatewayStats,
    pub aps: [ApStats; LINKS],
    pub device: DeviceStats,
}

impl Report {
    /// Each sent packet delivered once, in sending order, intact.
    pub fn exactly_once_in_order(&self) -> bool {
        self.corrupted == 0
            && self.delivered.len() == self.sent
            && self.delivered.iter().enumerate().all(|(i, &s)| s == i as u64)
    }

    /// Delivered sequence numbers strictly increase (gaps allowed, no reordering or copies).
    pub fn in_order(&self) -> bool {
        self.delivered.windows(2).all(|w| w[0] < w[1])
    }

    /// The `q`-quantile (0..=1) of the delivery delay, µs; 0 when nothing was delivered.
    pub fn delay_quantile_us(&self, q: f64) -> u64 {
        let mut d = self.delays_us.clone();
        d.sort_unstable();
        let i = ((d.len().saturating_sub(1)) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        d.get(i).copied().unwrap_or(0)
    }

    /// Bytes on the radio links per original byte delivered, minus one.
    pub fn overhead_ratio(&self) -> f64 {
        let air: u64 = self.downlink_bytes.iter().sum();
        air as f64 / self.device.bytes_delivered.max(1) as f64 - 1.0
    }
}

#[derive(Debug, Default)]
struct Wire {
    busy_until: Instant,
    in_flight: VecDeque<(Instant, Vec<u8>)>,
    bytes: u64,
}

impl Wire {
    fn send(&mut self, m: &LinkModel, bytes: Vec<u8>, now: Instant, rng: &mut ChaCha8Rng) {
        // ceil, and at least 1 µs, so an idle link's next chance is always in the future.
        let ser_us = ((bytes.len() as f64 * 8.0 * 1e6 / m.rate_bps).ceil() as u64).max(1);
        self.busy_until = now + ser_us;
        self.bytes += bytes.len() as u64;
        if rng.gen::<f64>() >= m.loss {
            self.in_flight.push_back((self.busy_until + m.delay_us, bytes));
        }
    }

    fn due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.in_flight.front().is_some_and(|(t, _)| *t <= now) {
            self.in_flight.pop_front().map(|(_, b)| b)
        } else {
            None
        }
    }

    fn next_event(&self, now: Instant) -> impl Iterator<Item = Instant> {
        let busy = (self.busy_until > now).then_some(self.busy_until);
        busy.into_iter().chain(self.in_flight.front().map(|(t, _)| *t))
    }
}

fn source_packet(seq: u64, rng: &mut ChaCha8Rng, min_len: usize, max_len: usize) -> Vec<u8> {
    let len = rng.gen_range(min_len.max(8)..=max_len.max(min_len).max(8));
    let mut p = vec![0u8; len];
    p[..8].copy_from_slice(&seq.to_be_bytes());
    rng.fill(&mut p[8..]);
    p
}

/// Runs `setup` to the end (every node quiet) or `max_events`.
pub fn run(setup: &Setup) -> Result<Report, Error> {
    let mut gateway = Gateway::new(setup.gateway.clone())?;
    let ap = |i: u64| {
        Ap::new(ApConfig {
            seed: setup.ap.seed.wrapping_add(i),
            ..setup.ap.clone()
        })
    };
    let mut aps = [ap(0)?, ap(1)?];
    let mut device = Device::new(setup.device.clone())?;
    let mut content_rng = crate::rng(setup.seed, 10);
    let mut loss_rng = crate::rng(setup.seed, 11);

    let mut up: [Wire; LINKS] = Default::default();
    let mut down: [Wire; LINKS] = Default::default();
    let mut sent: Vec<Vec<u8>> = Vec::with_capacity(setup.packets);
    let mut sent_at: Vec<Instant> = Vec::with_capacity(setup.packets);
    let mut report = Report::default();
    let mut next_src: Instant = 0;
    let mut now: Instant = 0;

    for _ in 0..setup.max_events {
        for i in 0..LINKS {
            while let Some(b) = up[i].due(now) {
                // Malformed input is impossible here; the AP counts it if it happened.
                let _ = aps[i].handle_recv(&b, now);
            }
            while let Some(b) = down[i].due(now) {
                let _ = device.handle_recv(i, &b, now);
            }
        }
        while sent.len() < setup.packets && next_src <= now {
            let p = source_packet(sent.len() as u64, &mut content_rng, setup.min_len, setup.max_len);
            gateway.handle_packet(&p, now)?;
            report.source_bytes += p.len() as u64;
            next_src += ((p.len() as f64 * 8.0 * 1e6 / setup.source_rate_bps).ceil() as u64).max(1);
            sent.push(p);
            sent_at.push(now);
        }
        gateway.handle_timeout(now);
        aps.iter_mut().for_each(|a| a.handle_timeout(now));
        device.handle_timeout(now);
        for i in 0..LINKS {
            if up[i].busy_until <= now {
                if let Some(b) = gateway.poll_transmit(i, now)? {
                    up[i].send(&setup.uplinks[i], b, now, &mut loss_rng);
                }
            }
            if down[i].busy_until <= now {
                if let Some(b) = aps[i].poll_transmit(now)? {
                    down[i].send(&setup.downlinks[i], b, now, &mut loss_rng);
                }
            }
        }
        while let Some(p) = device.poll_packet() {
            let seq = p
                .get(..8)
                .map_or(u64::MAX, |s| u64::from_be_bytes(s.try_into().unwrap_or([0xff; 8])));
            if sent.get(seq as usize) != Some(&p) {
                report.corrupted += 1;
            } else {
                report.delays_us.push(now - sent_at[seq as usize]);
            }
            report.delivered.push(seq);
        }

        let source = (sent.len() < setup.packets).then_some(next_src);
        let timers = [
            gateway.poll_timeout(),
            aps[0].poll_timeout(),
            aps[1].poll_timeout(),
            device.poll_timeout(),
        ];
        let next = source
            .into_iter()
            .chain(timers.into_iter().flatten())
            .chain(up.iter().chain(down.iter()).flat_map(|w| w.next_event(now)))
            .filter(|&t| t > now)
            .min();
        match next {
            Some(t) => now = t,
            None => {
                report.finished = true;
                break;
            }
        }
    }
    report.sent = sent.len();
    report.end_us = now;
    report.downlink_bytes = [down[0].bytes, down[1].bytes];
    report.gateway = gateway.stats().clone();
    report.aps = [aps[0].stats().clone(), aps[1].stats().clone()];
    report.device = device.stats().clone();
    Ok(report)
}
