//! What the sender learns about each path from FBDT ACKs: delivery rate, delivered/sent
//! ratio, ACK round-trip time, stalls. Measured at the FBDT level so the simulator and the
//! runtime see the same quantities; driver statistics (TCP_INFO) only seed them.

use super::wake::WakeCost;
use crate::path::PathStats;
use crate::time::{Duration, Instant};

/// Rate and ratio samples are taken at most this often; shorter intervals are too noisy
/// at ACK granularity.
pub(super) const SAMPLE_INTERVAL: Duration = Duration::from_millis(10);
/// Weight of a new rate/ratio sample (EWMA); 1/4 follows a blockage within ~4 samples.
const RATE_GAIN: f64 = 0.25;
/// Weight of a new RTT sample, as TCP's srtt (RFC 6298).
const RTT_GAIN: f64 = 0.125;
/// RTT assumed before any sample or driver estimate.
pub(super) const DEFAULT_RTT: Duration = Duration::from_millis(50);
/// A stall halves a path's reliability score for this long (spec decision 8).
const OUTAGE_MEMORY: Duration = Duration::from_millis(5000);
/// The base RTT is the least ACK RTT seen within this long (as BBR's min_rtt filter):
/// long enough to see a queue drain, short enough to follow a route that got longer.
const BASE_RTT_WINDOW: Duration = Duration::from_millis(10_000);
/// A burst is remembered for at least this many base RTTs, and this long: the pauses of a
/// busy host or a radio's scheduler come tens of milliseconds apart, and a send limit that
/// forgot them between two would throttle the path again.
const BURST_MEMORY_RTTS: f64 = 5.0;
const BURST_MEMORY: Duration = Duration::from_millis(100);

#[derive(Clone, Debug)]
pub(super) struct PathEstimate {
    /// Delivered payload bytes per second (EWMA), once measured.
    pub rate: Option<f64>,
    /// The same, averaged over at least one base RTT: a path delivers in bursts of its
    /// window per round trip, so on a long path `rate` swings with them.
    smooth_rate: Option<f64>,
    /// Delivered / sent bytes over recent samples (EWMA), 1 when unknown.
    pub ratio: f64,
    /// Time from handing a segment to the path until its FBDT ACK (EWMA).
    pub ack_rtt: Option<Duration>,
    /// The least ACK RTT within [`BASE_RTT_WINDOW`], and when it was seen: the path's
    /// round trip without queueing.
    base_rtt: Option<(Duration, Instant)>,
    /// Mean deviation of ACK times from their expectation (EWMA of |ACK − expected|).
    lateness_dev: Option<f64>,
    /// The stall rule's view of the same (`FbdtConfig::stall_late`): how late (s, signed)
    /// a copy's delivery comes to the sender against its due time, and the mean deviation
    /// from that, as TCP's srtt and rttvar (RFC 6298).
    overdue: Option<(f64, f64)>,
    pub driver: PathStats,
    pub last_outage: Option<Instant>,
    /// What a transfer after idleness costs (sleep-aware arrival).
    pub wake: WakeCost,
    burst: Burst,
    sample_rx: u64,
    sample_sent: u64,
}

impl PathEstimate {
    pub fn new() -> Self {
        PathEstimate {
            rate: None,
            smooth_rate: None,
            ratio: 1.0,
            ack_rtt: None,
            base_rtt: None,
            lateness_dev: None,
            overdue: None,
            driver: PathStats::default(),
            last_outage: None,
            wake: WakeCost::default(),
            burst: Burst::default(),
            sample_rx: 0,
            sample_sent: 0,
        }
    }

    /// Folds in one sampling interval ending with cumulative counters `rx`, `sent`.
    pub fn sample(&mut self, rx: u64, sent: u64, dt: Duration) {
        let secs = dt.as_secs_f64();
        let drx = rx.saturating_sub(self.sample_rx) as f64;
        let dsent = sent.saturating_sub(self.sample_sent) as f64;
        if secs > 0.0 {
            let r = drx / secs;
            self.rate = Some(match self.rate {
                Some(old) => old + RATE_GAIN * (r - old),
                None => r,
            });
            let gain = RATE_GAIN.min(secs / (secs + self.base_rtt().as_secs_f64()));
            self.smooth_rate = Some(match self.smooth_rate {
                Some(old) => old + gain * (r - old),
                None => r,
            });
        }
        if dsent > 0.0 {
            let q = (drx / dsent).min(1.0);
            self.ratio += RATE_GAIN * (q - self.ratio);
        }
        self.sample_rx = rx;
        self.sample_sent = sent;
    }

    /// Sets both rate estimates, as a long steady measurement would.
    #[cfg(test)]
    pub fn set_rate(&mut self, bytes_per_sec: f64) {
        self.rate = Some(bytes_per_sec);
        self.smooth_rate = Some(bytes_per_sec);
    }

    /// Restarts sampling from the current counters (after a path comes back).
    pub fn rebase(&mut self, rx: u64, sent: u64) {
        self.sample_rx = rx;
        self.sample_sent = sent;
    }

    pub fn rtt_sample(&mut self, rtt: Duration, now: Instant) {
        self.wake.on_rtt(rtt, now, self.base_rtt());
        if self
            .base_rtt
            .is_none_or(|(min, at)| rtt <= min || now.saturating_since(at) > BASE_RTT_WINDOW)
        {
            self.base_rtt = Some((rtt, now));
        }
        self.ack_rtt = Some(match self.ack_rtt {
            Some(old) => {
                Duration::from_secs_f64(old.as_secs_f64() + RTT_GAIN * (rtt.as_secs_f64() - old.as_secs_f64()))
            }
            None => rtt,
        });
    }

    /// A copy's ACK came `error_secs` after (positive) or before its expected time.
    pub fn lateness_sample(&mut self, error_secs: f64) {
        let e = error_secs.abs();
        self.lateness_dev = Some(match self.lateness_dev {
            Some(old) => old + RATE_GAIN * (e - old),
            None => e,
        });
    }

    /// A copy's delivery reached the sender `late_secs` after (positive) or before its
    /// due time (`FbdtSender::ack_due_in`).
    pub fn overdue_sample(&mut self, late_secs: f64) {
        self.overdue = Some(match self.overdue {
            Some((mean, dev)) => (
                mean + RTT_GAIN * (late_secs - mean),
                dev + RATE_GAIN * ((late_secs - mean).abs() - dev),
            ),
            None => (late_secs, late_secs.abs() / 2.0),
        });
    }

    /// How long past its due time a copy's delivery may come before the path counts as
    /// stalled: its usual lateness + 4 × the deviation (as TCP's RTO), at least `floor`.
    pub fn overdue_margin(&self, floor: Duration) -> Duration {
        let (mean, dev) = self.overdue.unwrap_or((0.0, 0.0));
        Duration::from_secs_f64((mean.max(0.0) + 4.0 * dev).min(60.0)).max(floor)
    }

    /// How far ACKs stray from their expected time, typically (0 before any sample).
    pub fn lateness_dev(&self) -> Duration {
        Duration::from_secs_f64(self.lateness_dev.unwrap_or(0.0))
    }

    /// Best available RTT: measured at FBDT level, else the driver's, else a default.
    pub fn rtt(&self) -> Duration {
        self.ack_rtt.or(self.driver.srtt).unwrap_or(DEFAULT_RTT)
    }

    /// The round trip without queueing: the least of the recent ACK RTTs and the
    /// driver's srtt, else a default.
    pub fn base_rtt(&self) -> Duration {
        let measured = self.base_rtt.map(|(d, _)| d);
        match (measured, self.driver.srtt) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(DEFAULT_RTT),
        }
    }

    /// Best available rate in bytes/s, if anything is known.
    pub fn rate_bps(&self) -> Option<f64> {
        self.rate.or(self.driver.delivery_rate_bps.map(|b| b / 8.0))
    }

    /// The rate the path drains its queue at, bytes/s: the higher of the measured (over
    /// at least one base RTT) and the driver's (a measurement taken while the
    /// application sent little underestimates it). None until something is known.
    pub fn drain_rate_bps(&self) -> Option<f64> {
        let driver = self.driver.delivery_rate_bps.map(|b| b / 8.0);
        match (self.smooth_rate, driver) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
        .filter(|&r| r > 0.0)
    }

    /// The transport acknowledged `bytes` more by `now` (its report's time): how far its
    /// deliveries run ahead of the drain rate is a burst (`burst_bytes`).
    pub fn transport_acked(&mut self, bytes: u64, now: Instant) {
        let Some(rate) = self.drain_rate_bps() else {
            return;
        };
        let base = self.base_rtt();
        let memory = base.mul_f64(BURST_MEMORY_RTTS).max(BURST_MEMORY);
        self.burst.delivered(bytes, now, rate, base, memory);
    }

    /// The most bytes the path recently delivered ahead of its drain rate in one round
    /// trip (as BBR's `extra_acked`): a path that delivers in bursts — a radio's aggregation
    /// and scheduling, a host that pauses — holds that much more undelivered than its rate
    /// × base RTT while it runs at its rate.
    pub fn burst_bytes(&self) -> u64 {
        self.burst.max()
    }

    /// Reliability score (spec decision 8): rate × delivered ratio, halved after an outage.
    pub fn score(&self, now: Instant) -> f64 {
        let penalty = match self.last_outage {
            Some(t) if now.saturating_since(t) < OUTAGE_MEMORY => 0.5,
            _ => 1.0,
        };
        self.rate_bps().unwrap_or(1.0) * self.ratio * penalty
    }
}

/// Deliveries ahead of the drain rate (`PathEstimate::burst_bytes`), from the transport's
/// cumulative reports: what a report adds arrived after the one before. An epoch
/// starts when deliveries fall behind the rate and lasts at most a base RTT (a burst comes
/// within one; a rate estimate that lags a ramp-up must not add up for longer). What an
/// epoch ran ahead is kept, the largest of the current and the previous memory span.
#[derive(Clone, Debug, Default)]
struct Burst {
    epoch: Option<(Instant, u64)>,
    last_report: Option<Instant>,
    span_start: Option<Instant>,
    current: u64,
    previous: u64,
}

impl Burst {
    fn delivered(&mut self, bytes: u64, now: Instant, rate: f64, base_rtt: Duration, memory: Duration) {
        // The first report's bytes arrived over a time unknown.
        let Some(last_report) = self.last_report.replace(now) else {
            return;
        };
        let expected = |start: Instant| rate * now.saturating_since(start).as_secs_f64();
        let (start, sum) = match self.epoch {
            Some((start, sum)) if (sum as f64) > expected(start) && now.saturating_since(start) <= base_rtt => {
                (start, sum + bytes)
            }
            // The report's bytes arrived since the one before.
            _ => (last_report.min(now), bytes),
        };
        self.epoch = Some((start, sum));
        let ahead = (sum as f64 - expected(start)).max(0.0) as u64;
        let span_start = *self.span_start.get_or_insert(now);
        let elapsed = now.saturating_since(span_start);
        if elapsed >= memory {
            self.previous = if elapsed >= memory + memory { 0 } else { self.current };
            self.current = 0;
            self.span_start = Some(now);
        }
        self.current = self.current.max(ahead);
    }

    fn max(&self) -> u64 {
        self.current.max(self.previous)
    }
}
