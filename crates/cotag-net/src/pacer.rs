//! Paces an AP's transmissions at its emulated link's current rate, so the AP's buffer — not
//! the emulator's queue — is where packets wait, and its hold / forward / flush rules act
//! where the queue is. The rate comes from the testbed's schedule (the AP is told its link's
//! capacity; a real AP knows its MCS), a token bucket turns it into send times.

/// Rate in bit/s from `t_s` (seconds since the schedule started) on, sorted by time.
pub type RateSteps = Vec<(f64, f64)>;

/// A token bucket whose fill rate follows a step schedule.
#[derive(Debug, Clone)]
pub struct Pacer {
    steps: RateSteps,
    /// Fraction of the scheduled rate to use: a little below 1 keeps the emulator's own
    /// queue empty despite timer jitter.
    factor: f64,
    /// What the bucket holds at most — the burst a late wake-up may send at once: this many
    /// bytes, or `burst_us` of the current rate if that is more.
    burst_bytes: f64,
    burst_us: f64,
    tokens: f64,
    last_us: u64,
}

impl Pacer {
    pub fn new(steps: RateSteps, factor: f64, burst_bytes: f64) -> Pacer {
        Pacer::with_burst_time(steps, factor, burst_bytes, 0.0)
    }

    /// A bucket that holds `burst_us` of the link's current rate, at least `burst_bytes`.
    pub fn with_burst_time(steps: RateSteps, factor: f64, burst_bytes: f64, burst_us: f64) -> Pacer {
        Pacer {
            steps,
            factor,
            burst_bytes,
            burst_us,
            tokens: 0.0,
            last_us: 0,
        }
    }

    /// The scheduled rate at `t_us` after the schedule's start, bit/s (0 before the first step).
    pub fn rate_bps(&self, t_us: u64) -> f64 {
        let t = t_us as f64 / 1e6;
        self.steps
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(0.0, |&(_, r)| r.max(0.0))
    }

    /// The fraction of the scheduled rate it sends at.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    fn refill(&mut self, now_us: u64) {
        if now_us > self.last_us {
            // The rate at `now` for the whole gap: steps are 100 ms apart, wake-ups ≤ 5 ms.
            let dt = (now_us - self.last_us) as f64 / 1e6;
            let bytes_per_s = self.rate_bps(now_us) * self.factor / 8.0;
            let cap = self.burst_bytes.max(bytes_per_s * self.burst_us / 1e6);
            self.tokens = (self.tokens + bytes_per_s * dt).min(cap);
            self.last_us = now_us;
        }
    }

    /// Whether a packet may go now (a packet may overdraw the bucket; the debt is repaid
    /// before the next one).
    pub fn ready(&mut self, now_us: u64) -> bool {
        self.refill(now_us);
        self.tokens > 0.0
    }

    /// Charges a sent packet of `ip_bytes` (what the emulator's rate stage counts).
    pub fn charge(&mut self, ip_bytes: usize) {
        self.tokens -= ip_bytes as f64;
    }

    /// When the bucket will be positive again, if it is not now; `None` while the rate is 0.
    pub fn ready_at(&self, now_us: u64) -> Option<u64> {
        if self.tokens > 0.0 {
            return Some(now_us);
        }
        let rate = self.rate_bps(now_us) * self.factor / 8.0 / 1e6; // bytes per µs
        (rate > 0.0).then(|| now_us + ((-self.tokens) / rate).ceil() as u64 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_at_the_scheduled_rate() {
        // 8 Mbit/s = 1 byte/µs for 1 s, then 0.
        let mut p = Pacer::new(vec![(0.0, 8e6), (1.0, 0.0)], 1.0, 3000.0);
        let (mut sent, mut now) = (0u64, 0u64);
        while now < 1_000_000 {
            if p.ready(now) {
                p.charge(1000);
                sent += 1000;
            } else {
                now = p.ready_at(now).unwrap().min(1_000_000);
            }
        }
        // 1 MB in 1 s, within one packet and the burst.
        assert!((995_000..=1_004_000).contains(&sent), "sent {sent}");
        // Rate 0: nothing more, and no wake-up time.
        now = 1_500_000;
        p.ready(now);
        assert!(p.tokens <= 0.0 || p.tokens < 1.0);
        p.tokens = -1.0;
        assert_eq!(p.ready_at(now), None);
    }

    #[test]
    fn a_timed_burst_follows_the_rate_but_never_falls_below_its_floor() {
        // 80 Mbit/s = 10 bytes/µs, then 8 Mbit/s from 1 s on; 1 ms of burst, at least 3,000 B.
        let mut p = Pacer::with_burst_time(vec![(0.0, 80e6), (1.0, 8e6)], 1.0, 3000.0, 1_000.0);
        assert!(p.ready(500_000));
        assert_eq!(p.tokens, 10_000.0, "1 ms at 10 bytes/µs");
        p.tokens = 0.0;
        assert!(p.ready(1_600_000));
        assert_eq!(p.tokens, 3_000.0, "1 ms at 1 byte/µs is below the floor");
    }

    #[test]
    fn burst_is_bounded() {
        let mut p = Pacer::new(vec![(0.0, 1e9)], 1.0, 3000.0);
        assert!(p.ready(10_000_000));
        assert_eq!(p.tokens, 3000.0);
        assert_eq!(p.rate_bps(0), 1e9);
        assert_eq!(Pacer::new(vec![(1.0, 5.0)], 1.0, 1.0).rate_bps(0), 0.0);
    }
}
