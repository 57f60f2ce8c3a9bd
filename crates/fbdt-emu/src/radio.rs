//! A rattan cell for a radio that dozes when idle (the scenario's `radio`: 802.11 power
//! save, a WiGig chipset dropping its beam), first in each direction of a path, before the
//! rate stage: once the link has had nothing to send for `idle_timeout`, the next packet is
//! held `wake` before it reaches the link; packets that come while the radio wakes queue
//! behind it and pay no second wake-up. The same rule as the simulator's link
//! (fbdt-sim/src/link.rs), so both backends doze alike.
//!
//! "Nothing to send" is judged where the simulator judges it, at the link: the cell keeps
//! when the link would have finished the packets it let through (at the rate in force,
//! shared with the path's controls), not merely when the last one arrived, so a queue that
//! drains for longer than the timeout does not put the radio to sleep behind it.
//!
//! Times are rattan's logical packet timestamps: a held packet leaves stamped with the end
//! of the wake-up, so the rate stage after it starts sending then, however late this cell's
//! task was scheduled.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};
use std::time::Duration;

use async_trait::async_trait;
use rattan_core::{
    cells::{Cell, ControlInterface, Egress, Ingress, Packet},
    error::Error as RattanError,
};
use tokio::{sync::mpsc, time::Instant};

/// When a path's radio sleeps and how long it takes to wake.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Doze {
    pub idle_timeout: Duration,
    pub wake: Duration,
}

impl From<fbdt_scenario::RadioSleep> for Doze {
    fn from(r: fbdt_scenario::RadioSleep) -> Self {
        Self {
            idle_timeout: Duration::from_secs_f64(r.idle_timeout_ms / 1e3),
            wake: Duration::from_secs_f64(r.wake_ms / 1e3),
        }
    }
}

/// The decision, apart from the cell's channels: when a packet that reached the radio at
/// `arrival` may go on to the link.
#[derive(Debug)]
pub struct RadioClock {
    doze: Doze,
    /// When the link would have sent everything let through so far.
    link_free: Instant,
    /// The end of the wake-up in progress, if any.
    awake_at: Option<Instant>,
    wakeups: u64,
}

impl RadioClock {
    /// A radio whose link was last busy at `start`.
    pub fn new(doze: Doze, start: Instant) -> Self {
        Self {
            doze,
            link_free: start,
            awake_at: None,
            wakeups: 0,
        }
    }

    /// When a packet of `bytes` that reached the radio at `arrival` leaves for the link,
    /// with the link's rate `rate_bps` in force. Call in arrival order.
    pub fn release(&mut self, arrival: Instant, bytes: usize, rate_bps: u64) -> Instant {
        let waking = self.awake_at.filter(|&w| w > arrival);
        let release = match waking {
            Some(w) => w,
            None if arrival.saturating_duration_since(self.link_free) >= self.doze.idle_timeout => {
                self.wakeups += 1;
                let w = arrival + self.doze.wake;
                self.awake_at = Some(w);
                w
            }
            None => arrival,
        };
        let send = Duration::from_nanos(bytes as u64 * 8 * 1_000_000_000 / rate_bps.max(1));
        self.link_free = self.link_free.max(release) + send;
        release
    }

    pub fn wakeups(&self) -> u64 {
        self.wakeups
    }
}

pub struct RadioIngress<P> {
    tx: mpsc::UnboundedSender<P>,
}

impl<P: Packet + Send> Ingress<P> for RadioIngress<P> {
    fn enqueue(&self, packet: P) -> Result<(), RattanError> {
        self.tx
            .send(packet)
            .map_err(|_| RattanError::ChannelError("radio cell closed".into()))
    }
}

pub struct RadioEgress<P> {
    rx: mpsc::UnboundedReceiver<P>,
    clock: RadioClock,
    rate_bps: Arc<AtomicU64>,
    wakeups: Arc<AtomicU64>,
}

#[async_trait]
impl<P: Packet + Send + Sync> Egress<P> for RadioEgress<P> {
    async fn dequeue(&mut self) -> Option<P> {
        let mut p = self.rx.recv().await?;
        let release = self
            .clock
            .release(p.get_timestamp(), p.l3_length(), self.rate_bps.load(Ordering::Relaxed));
        if release > p.get_timestamp() {
            self.wakeups.store(self.clock.wakeups(), Ordering::Relaxed);
            tokio::time::sleep_until(release).await;
            p.delay_until(release);
        }
        Some(p)
    }
}

/// Nothing to configure at run time (the rate comes through the shared atomic).
pub struct RadioControl;

impl ControlInterface for RadioControl {
    type Config = ();
    fn set_config(&self, _: ()) -> Result<(), RattanError> {
        Ok(())
    }
}

pub struct RadioCell<P> {
    ingress: Arc<RadioIngress<P>>,
    egress: RadioEgress<P>,
    control: Arc<RadioControl>,
}

impl<P: Packet + Send + Sync + 'static> RadioCell<P> {
    /// `rate_bps`: the link's rate in force, kept current by the path's controls;
    /// `wakeups`: where the cell counts its wake-ups.
    pub fn new(doze: Doze, rate_bps: Arc<AtomicU64>, wakeups: Arc<AtomicU64>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            ingress: Arc::new(RadioIngress { tx }),
            egress: RadioEgress {
                rx,
                // Asleep from the start, as the simulator's radio.
                clock: RadioClock::new(doze, asleep_since(doze)),
                rate_bps,
                wakeups,
            },
            control: Arc::new(RadioControl),
        }
    }
}

fn asleep_since(doze: Doze) -> Instant {
    let now = Instant::now();
    now.checked_sub(doze.idle_timeout).unwrap_or(now)
}

impl<P: Packet + Send + Sync + 'static> Cell<P> for RadioCell<P> {
    type IngressType = RadioIngress<P>;
    type EgressType = RadioEgress<P>;
    type ControlInterfaceType = RadioControl;

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

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_first_packet_after_idle_waits_and_those_behind_it_do_not_wait_again() {
        let t0 = Instant::now();
        let doze = Doze {
            idle_timeout: 100 * MS,
            wake: 30 * MS,
        };
        // 12 Mbit/s: a 1500-byte packet takes 1 ms on the link.
        let rate = 12_000_000;
        let mut r = RadioClock::new(doze, t0);
        // Asleep since t0: the first packet at 200 ms waits 30 ms.
        assert_eq!(r.release(t0 + 200 * MS, 1500, rate), t0 + 230 * MS);
        // Queued during the wake-up: leaves with the first.
        assert_eq!(r.release(t0 + 210 * MS, 1500, rate), t0 + 230 * MS);
        // Awake and recently busy: straight through.
        assert_eq!(r.release(t0 + 300 * MS, 1500, rate), t0 + 300 * MS);
        // 100 ms after the link went quiet (301 ms): asleep again.
        assert_eq!(r.release(t0 + 401 * MS, 1500, rate), t0 + 431 * MS);
        assert_eq!(r.wakeups(), 2);
    }

    #[test]
    fn a_draining_queue_keeps_the_radio_awake() {
        let t0 = Instant::now();
        let doze = Doze {
            idle_timeout: 50 * MS,
            wake: 10 * MS,
        };
        // 1.2 Mbit/s: 1500 bytes take 10 ms; 20 packets at once keep the link busy 200 ms.
        let rate = 1_200_000;
        let mut r = RadioClock::new(doze, t0);
        for _ in 0..20 {
            assert_eq!(r.release(t0, 1500, rate), t0);
        }
        // 150 ms after the burst arrived, the link is still sending it: no sleep.
        assert_eq!(r.release(t0 + 150 * MS, 1500, rate), t0 + 150 * MS);
        // The link is free at 210 ms: 49 ms later the radio is still awake (free at 269)…
        assert_eq!(r.release(t0 + 259 * MS, 1500, rate), t0 + 259 * MS);
        // …61 ms after that it sleeps.
        assert_eq!(r.release(t0 + 330 * MS, 1500, rate), t0 + 340 * MS);
        assert_eq!(r.wakeups(), 1);
    }
}
