//! Sleep-aware arrival (issue 39): what a transfer after idleness costs on a path, learned
//! from what the path shows, with no radio model. A radio in power save holds the first
//! packet after an idle gap until it has woken up; the sender sees that as a first round
//! trip after the gap longer than the path's base RTT. Per path this keeps the excess of
//! such round trips and the least idle gap seen to cause one; the arrival estimate of a
//! path idle at least that long adds the excess (`FbdtSender::estimates`), so a small
//! transfer from idle goes to the path that is awake soonest, not to the one that is
//! nearest once awake.
//!
//! Only the first segment sent with nothing in flight is a sample: a round trip of a
//! segment sent behind others includes their queue, which is no wake-up.

use crate::time::{Duration, Instant};

/// Weight of a new sample (EWMA). One half: a wake-up's cost hardly varies, and an idle
/// path gives one sample per idle gap, so the estimate must settle in a few.
const GAIN: f64 = 0.5;
/// Least excess that counts as a wake-up, beside half the base RTT: below a millisecond
/// the first frame's serialisation and the hosts' scheduling explain it.
const FLOOR: Duration = Duration::from_millis(1);

#[derive(Clone, Copy, Debug)]
struct Probe {
    /// When the first segment after the gap was handed to the path.
    at: Instant,
    /// How long the path had been idle (no segment sent or acknowledged).
    gap: Duration,
    /// How long the receiver may hold its ACK (not a wake-up).
    ack_allowance: Duration,
}

#[derive(Clone, Debug, Default)]
pub(super) struct WakeCost {
    /// The last time a segment was handed to the path or acknowledged on it.
    last_active: Option<Instant>,
    /// The first segment sent with nothing in flight, until its round trip is in.
    probe: Option<Probe>,
    /// Excess over the base RTT of a first round trip after a triggering gap (s, EWMA).
    cost: f64,
    /// The least idle gap seen to cost `cost`; `None` until a wake-up was seen. A path
    /// idle half as long is expected asleep (`asleep_after`).
    trigger: Option<Duration>,
}

impl WakeCost {
    /// A segment was handed to the path at `now`; `idle`: nothing was in flight on it.
    /// `ack_allowance` is how long the receiver may hold an ACK.
    pub fn on_send(&mut self, now: Instant, idle: bool, ack_allowance: Duration) {
        if idle {
            if let Some(last) = self.last_active {
                self.probe = Some(Probe {
                    at: now,
                    gap: now.saturating_since(last),
                    ack_allowance,
                });
            }
        }
        self.last_active = Some(self.last_active.map_or(now, |t| t.max(now)));
    }

    /// A round-trip sample `rtt` of a segment acknowledged at `now`; `base` is the path's
    /// base RTT before this sample.
    pub fn on_rtt(&mut self, rtt: Duration, now: Instant, base: Duration) {
        self.last_active = Some(self.last_active.map_or(now, |t| t.max(now)));
        let Some(p) = self.probe else { return };
        let sent = now.saturating_since(p.at);
        if sent != rtt {
            // Another segment's sample: one sent after the probe means the probe's own
            // (acknowledged through a copy on another path) will not come.
            if rtt < sent {
                self.probe = None;
            }
            return;
        }
        self.probe = None;
        let excess = rtt.as_secs_f64() - base.as_secs_f64() - p.ack_allowance.as_secs_f64();
        self.learn(p.gap, excess, base);
    }

    fn learn(&mut self, gap: Duration, excess: f64, base: Duration) {
        let floor = (base.as_secs_f64() / 2.0).max(FLOOR.as_secs_f64());
        if excess > floor {
            self.cost = match self.trigger {
                Some(_) => self.cost + GAIN * (excess - self.cost),
                None => excess,
            };
            self.trigger = Some(self.trigger.map_or(gap, |t| t.min(gap)));
        } else if self.asleep_after().is_some_and(|t| gap >= t) {
            // This gap cost nothing: the path stays awake at least this long.
            self.trigger = Some(Duration::from_micros(2 * gap.as_micros() + 2));
        }
    }

    /// The idle time after which the path is expected asleep: half the least gap seen to
    /// cost a wake-up. That gap says only that the radio dozes somewhere below it, and
    /// gaps are measured from the last send or ACK, so the next one of "the same" length
    /// may come out shorter by an ACK's delay (the simulator's `--radio defaults`: a 1 s
    /// pause measured 998 ms, the next 996 ms); half of it still covers every radio that
    /// sleeps after half its idle gap, and a gap that costs nothing raises it (`learn`).
    fn asleep_after(&self) -> Option<Duration> {
        self.trigger.map(|t| Duration::from_micros(t.as_micros() / 2))
    }

    /// Seconds a byte handed to the path at `now` waits for the path to wake up: while
    /// idle for at least `asleep_after`, one direction's share of the learned excess
    /// (half: a round trip after idleness wakes both directions, the data's and the
    /// ACK's, and only the first delays the data); while the first segment after such a
    /// gap is on its way, what is left of it. Zero before any wake-up was seen.
    pub fn delay(&self, now: Instant, in_flight: u64) -> f64 {
        let Some(trigger) = self.asleep_after() else { return 0.0 };
        let one_way = self.cost / 2.0;
        if in_flight == 0 {
            let idle = self.last_active.map_or(Duration::ZERO, |t| now.saturating_since(t));
            return if idle >= trigger { one_way } else { 0.0 };
        }
        match self.probe {
            Some(p) if p.gap >= trigger => (one_way - now.saturating_since(p.at).as_secs_f64()).max(0.0),
            _ => 0.0,
        }
    }

    /// The first instant after `now` at which [`WakeCost::delay`] may change with time
    /// alone (None: only an input changes it): when an idle path reaches `asleep_after`;
    /// while a wake-up is under way it changes all along (`now`).
    pub fn changes_after(&self, now: Instant, in_flight: u64) -> Option<Instant> {
        let after = self.asleep_after()?;
        if in_flight == 0 {
            let at = self.last_active? + after;
            return (at > now).then_some(at);
        }
        let p = self.probe.filter(|p| p.gap >= after)?;
        (p.at + Duration::from_secs_f64(self.cost / 2.0) > now).then_some(now)
    }

    /// The learned excess of a first round trip after idleness and the least idle gap that
    /// triggers it, once a wake-up was seen.
    #[cfg(test)]
    pub fn learned(&self) -> Option<(Duration, Duration)> {
        self.trigger.map(|t| (Duration::from_secs_f64(self.cost), t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(2);
    const ACK_DELAY: Duration = Duration::from_millis(2);

    fn at(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// Sends a segment at `sent_ms` (`idle`: nothing in flight) and takes its ACK `rtt_ms`
    /// later.
    fn exchange(w: &mut WakeCost, sent_ms: u64, idle: bool, rtt_ms: u64) {
        w.on_send(at(sent_ms), idle, ACK_DELAY);
        w.on_rtt(Duration::from_millis(rtt_ms), at(sent_ms + rtt_ms), BASE);
    }

    #[test]
    fn the_wake_up_cost_is_learned_after_idle_gaps() {
        let mut w = WakeCost::default();
        // Busy at first: no sample, nothing learned.
        exchange(&mut w, 0, false, 2);
        assert_eq!(w.learned(), None);
        // After 1 s idle the first round trip takes 22 ms: 20 ms over the base RTT, less
        // the 2 ms the receiver may hold its ACK.
        exchange(&mut w, 1_002, true, 22);
        let (cost, trigger) = w.learned().expect("a wake-up was seen");
        assert_eq!(cost, Duration::from_millis(18));
        assert_eq!(trigger, Duration::from_millis(1_000));
        // Idle half that long or more: half the excess (the data's direction) is added to
        // the arrival; a short pause costs nothing, a busy path nothing.
        assert!(close(w.delay(at(3_000), 0), 0.009));
        assert!(close(w.delay(at(1_100), 0), 0.0));
        assert!(close(w.delay(at(1_600), 0), 0.009));
        // A poll that found nothing to do holds until the path dozes off.
        assert_eq!(w.changes_after(at(1_100), 0), Some(at(1_524)));
        assert_eq!(w.changes_after(at(1_600), 0), None);
        assert!(close(w.delay(at(3_000), 10_000), 0.0));
        // A second wake-up after a shorter gap lowers the trigger and moves the cost.
        exchange(&mut w, 1_500, true, 26);
        let (cost, trigger) = w.learned().unwrap();
        assert_eq!(cost, Duration::from_millis(20));
        assert_eq!(trigger, Duration::from_millis(476));
        // The first segment after a triggering gap is on its way: the rest of the wake-up.
        w.on_send(at(2_600), true, ACK_DELAY);
        assert!(close(w.delay(at(2_604), 1500), 0.006));
        assert!(close(w.delay(at(2_620), 1500), 0.0));
    }

    #[test]
    fn queueing_delay_is_not_learned_as_a_wake_up() {
        let mut w = WakeCost::default();
        exchange(&mut w, 0, true, 2);
        // A queue builds: round trips grow to 50 ms, every segment sent behind others.
        for i in 1..100 {
            exchange(&mut w, i * 3, false, 2 + i / 2);
        }
        assert_eq!(w.learned(), None);
        // Idle gaps whose first round trip is the base RTT (within the ACK delay): no
        // wake-up either.
        exchange(&mut w, 2_000, true, 4);
        exchange(&mut w, 4_000, true, 2);
        assert_eq!(w.learned(), None);
        assert!(close(w.delay(at(9_000), 0), 0.0));
    }

    #[test]
    fn a_gap_that_costs_nothing_raises_the_trigger() {
        let mut w = WakeCost::default();
        exchange(&mut w, 0, true, 2);
        exchange(&mut w, 100, true, 22);
        assert_eq!(w.learned().unwrap().1, Duration::from_millis(98));
        // 300 ms idle and no excess: the path stays awake that long (it is expected asleep
        // after half the trigger, now just over 300 ms).
        exchange(&mut w, 422, true, 2);
        assert_eq!(w.learned().unwrap().1, Duration::from_micros(600_002));
        assert!(close(w.delay(at(624), 0), 0.0));
        assert!(w.delay(at(800), 0) > 0.0);
    }
}
