//! A pass-through rattan cell that measures the emulator's lateness.
//!
//! rattan-core carries on every packet the *logical* time at which it should leave the
//! previous cell (the rate cell sets its departure time, the delay cell adds the delay
//! and sleeps until then). Placed right after the delay cell, this cell sees each packet
//! when the emulator actually got round to releasing it, so `now − packet timestamp` is
//! how late the release was: 0 on a machine with CPU to spare, growing when the emulator's
//! thread waits for a core. Nothing else is changed.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use async_trait::async_trait;
use rattan_core::{
    cells::{Cell, ControlInterface, Egress, Ingress, Packet},
    error::Error as RattanError,
};
use serde::Serialize;
use tokio::sync::mpsc;

/// Upper edges of the lateness histogram's buckets, µs (the last bucket is open).
pub const BUCKETS_US: [u64; 12] = [
    50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 1_000_000,
];

/// Lateness counters of one direction of one path, shared with the monitor.
#[derive(Debug, Default)]
pub struct Lateness {
    packets: AtomicU64,
    bytes: AtomicU64,
    /// Sum of lateness, µs.
    sum_us: AtomicU64,
    max_us: AtomicU64,
    hist: [AtomicU64; BUCKETS_US.len() + 1],
}

/// A snapshot of [`Lateness`]; differences of two snapshots describe an interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LatenessSnapshot {
    pub packets: u64,
    /// IP-layer bytes released.
    pub bytes: u64,
    pub sum_us: u64,
    /// Largest lateness since the start (not differenced).
    pub max_us: u64,
    pub hist: Vec<u64>,
}

impl Lateness {
    /// `packets` frames of `l3_bytes` in all released `late_us` late (a GSO unit is as many
    /// packets as it has segments).
    pub(crate) fn record(&self, late_us: u64, l3_bytes: u64, packets: u64) {
        self.packets.fetch_add(packets, Ordering::Relaxed);
        self.bytes.fetch_add(l3_bytes, Ordering::Relaxed);
        self.sum_us.fetch_add(late_us, Ordering::Relaxed);
        self.max_us.fetch_max(late_us, Ordering::Relaxed);
        let b = BUCKETS_US.iter().position(|&e| late_us < e).unwrap_or(BUCKETS_US.len());
        self.hist[b].fetch_add(packets, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LatenessSnapshot {
        LatenessSnapshot {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            sum_us: self.sum_us.load(Ordering::Relaxed),
            max_us: self.max_us.load(Ordering::Relaxed),
            hist: self.hist.iter().map(|h| h.load(Ordering::Relaxed)).collect(),
        }
    }
}

impl LatenessSnapshot {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &LatenessSnapshot) -> LatenessSnapshot {
        LatenessSnapshot {
            packets: self.packets.saturating_sub(earlier.packets),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            sum_us: self.sum_us.saturating_sub(earlier.sum_us),
            max_us: self.max_us,
            hist: self
                .hist
                .iter()
                .zip(earlier.hist.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
        }
    }

    /// Adds another interval's counts (e.g. of another path).
    pub fn add(&mut self, o: &LatenessSnapshot) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.sum_us += o.sum_us;
        self.max_us = self.max_us.max(o.max_us);
        if self.hist.len() < o.hist.len() {
            self.hist.resize(o.hist.len(), 0);
        }
        for (a, b) in self.hist.iter_mut().zip(&o.hist) {
            *a += b;
        }
    }

    /// Share of packets released at least `threshold_us` late. The threshold is rounded
    /// to the histogram's bucket edges (use one of [`BUCKETS_US`]).
    pub fn share_late(&self, threshold_us: u64) -> f64 {
        if self.packets == 0 {
            return 0.0;
        }
        let first = BUCKETS_US
            .iter()
            .position(|&e| e > threshold_us)
            .unwrap_or(BUCKETS_US.len());
        let late: u64 = self.hist.iter().skip(first).sum();
        late as f64 / self.packets as f64
    }

    /// Quantile `q` of the lateness, µs: the upper edge of the bucket it falls in (an
    /// upper bound; the open last bucket reports the maximum).
    pub fn quantile_us(&self, q: f64) -> u64 {
        if self.packets == 0 {
            return 0;
        }
        let want = (q * self.packets as f64).ceil().max(1.0) as u64;
        let mut acc = 0;
        for (i, h) in self.hist.iter().enumerate() {
            acc += h;
            if acc >= want {
                return BUCKETS_US
                    .get(i)
                    .copied()
                    .unwrap_or(self.max_us)
                    .min(self.max_us.max(1));
            }
        }
        self.max_us
    }
}

pub struct ProbeIngress<P> {
    tx: mpsc::UnboundedSender<P>,
}

impl<P: Packet + Send> Ingress<P> for ProbeIngress<P> {
    fn enqueue(&self, packet: P) -> Result<(), RattanError> {
        self.tx
            .send(packet)
            .map_err(|_| RattanError::ChannelError("probe cell closed".into()))
    }
}

pub struct ProbeEgress<P> {
    rx: mpsc::UnboundedReceiver<P>,
    counters: Arc<Lateness>,
    /// With the rate stage after this cell (in the kernel): its rate, bit/s, and when the
    /// link would be free again if every packet had been released on time.
    link: Option<(Arc<AtomicU64>, tokio::time::Instant)>,
}

#[async_trait]
impl<P: Packet + Send + Sync> Egress<P> for ProbeEgress<P> {
    async fn dequeue(&mut self) -> Option<P> {
        let p = self.rx.recv().await?;
        let now = tokio::time::Instant::now();
        let due = p.get_timestamp();
        // A rate stage after this cell queues a burst anyway: a packet is late only when it
        // reaches the link after the link would have started sending it (the time it is
        // due, or when the packets before it would have been sent), so lateness that
        // the queue absorbs is not counted.
        let start = match &mut self.link {
            None => due,
            Some((rate, free)) => {
                let start = due.max(*free);
                let bps = rate.load(Ordering::Relaxed).max(1);
                *free = start + std::time::Duration::from_nanos(p.length() as u64 * 8 * 1_000_000_000 / bps);
                start
            }
        };
        let late = now.saturating_duration_since(start);
        self.counters.record(
            late.as_micros().min(u128::from(u64::MAX)) as u64,
            p.l3_length() as u64,
            1,
        );
        Some(p)
    }
}

/// Nothing to configure.
pub struct ProbeControl;

impl ControlInterface for ProbeControl {
    type Config = ();
    fn set_config(&self, _: ()) -> Result<(), RattanError> {
        Ok(())
    }
}

pub struct ProbeCell<P> {
    ingress: Arc<ProbeIngress<P>>,
    egress: ProbeEgress<P>,
    control: Arc<ProbeControl>,
}

impl<P: Packet + Send + Sync + 'static> ProbeCell<P> {
    /// `link_rate_bps`: the rate of a rate stage after this cell (see [`ProbeEgress`]);
    /// `None` when the rate stage is before the delay cell.
    pub fn new(counters: Arc<Lateness>, link_rate_bps: Option<Arc<AtomicU64>>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            ingress: Arc::new(ProbeIngress { tx }),
            egress: ProbeEgress {
                rx,
                counters,
                link: link_rate_bps.map(|r| (r, tokio::time::Instant::now())),
            },
            control: Arc::new(ProbeControl),
        }
    }
}

impl<P: Packet + Send + Sync + 'static> Cell<P> for ProbeCell<P> {
    type IngressType = ProbeIngress<P>;
    type EgressType = ProbeEgress<P>;
    type ControlInterfaceType = ProbeControl;

    fn sender(&self) -> Arc<Self::IngressType> {
        self.ingress.clone()
    }
    fn receiver(&mut self) -> &mut Self::EgressType {
        &mut self.egress
    }
    fn into_receiver(self) -> Self::EgressType {
        self.egress
    }
    fn control_interface(&self) -> Arc<Self::ControlInterfaceType> {
        self.control.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_and_shares() {
        let l = Lateness::default();
        for _ in 0..98 {
            l.record(10, 1500, 1);
        }
        l.record(1_500, 1500, 1);
        l.record(30_000, 1500, 1);
        let s = l.snapshot().since(&LatenessSnapshot::default());
        assert_eq!(s.packets, 100);
        assert_eq!(s.quantile_us(0.5), 50);
        assert_eq!(s.quantile_us(0.99), 2_000);
        assert!((s.share_late(1_000) - 0.02).abs() < 1e-12);
        assert_eq!(s.max_us, 30_000);
    }
}
