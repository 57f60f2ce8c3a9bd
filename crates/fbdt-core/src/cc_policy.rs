//! Which congestion controller a path's TCP connection should run in `auto` mode: the
//! session's default one (Cubic on the papers' testbeds) or a loss-tolerant one (BBR).
//!
//! A pure state machine, told the time like [`crate::path_policy`]: the runtime feeds it
//! TCP_INFO samples ([`CcSample`]) and switches the socket's controller when
//! [`AutoCc::on_sample`] answers differently.
//!
//! The signal: a loss-based controller halves its window on every loss. That is right when
//! the loss is a full queue — and then the round trip has grown, because the queue filled
//! before it overflowed. A radio that drops packets at random loses them with the queue
//! empty: retransmissions without RTT inflation. Such a path is moved to the loss-tolerant
//! controller, and back once its losses come with an inflated RTT again (BBR keeps its
//! queue short, so inflation under BBR means something else is filling the queue).
//!
//! Except where BBR itself queues. On slow lossy paths (issue 40, `rats4-loss2` at scale
//! 0.1: 94 Mbit/s at 1 ms) the choice flapped — 20 switches per 10 s on one path, half the
//! time on each controller, a quarter of the goodput lost — most likely (inferred, not
//! traced) because on a path of a few packets' BDP Linux's BBR keeps its window floor and
//! quantization budget in flight, well over a BDP, so the RTT inflates under BBR and not
//! under a collapsed Cubic. So each return to the default controller doubles the windows
//! the next return needs: a real change of the path still moves it back, a flap dies out.

use crate::time::{Duration, Instant};

/// A controller class; the runtime maps them to names ("cubic", "bbr").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CcClass {
    /// The session's default controller (loss-based).
    #[default]
    Default,
    /// A controller that does not read random loss as congestion.
    LossTolerant,
}

/// What TCP_INFO says about one connection, as far as the controller choice goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcSample {
    /// Segments retransmitted on the connection so far (`tcpi_total_retrans`).
    pub total_retrans: u32,
    /// Smoothed RTT (`tcpi_rtt`).
    pub srtt: Duration,
    /// The lowest RTT the connection saw (`tcpi_min_rtt`): the path without a queue.
    pub min_rtt: Duration,
}

/// Shortest evaluation window: a few tens of TCP_INFO samples at the runtime's 10 ms, so
/// one window holds enough retransmissions on a 5 %-loss path to be a verdict.
const WINDOW_MIN: Duration = Duration::from_millis(250);
/// ... or this many minimum RTTs on long paths (a queue takes RTTs to build).
const WINDOW_RTTS: u64 = 8;
/// Fewer retransmissions than this in a window say nothing (a single loss can be either).
const MIN_RETRANS: u32 = 3;
/// The mean smoothed RTT over a window counts as inflated above this multiple of the
/// minimum RTT ... Cubic at a full drop-tail queue of one BDP doubles the RTT; BBR's own
/// probing adds up to ~25 %. 1.5 is between the two.
const INFLATION: f64 = 1.5;
/// ... plus this much, because on sub-millisecond paths the timer and scheduling noise of
/// the endpoints is as large as the RTT itself.
const INFLATION_SLACK: Duration = Duration::from_millis(1);
/// Windows in a row that must point to the other controller before it is switched to: a
/// switch restarts the controller's estimates, so it should not flap on one noisy window.
const STREAK: u32 = 2;
/// Returns from the loss-tolerant controller to the default double the streak the next
/// return needs, up to this many times (2 × 2⁴ windows: 8 s at the shortest window).
const MAX_RETURN_DOUBLINGS: u32 = 4;

/// The `auto` choice for one connection.
#[derive(Clone, Debug, Default)]
pub struct AutoCc {
    current: CcClass,
    window: Option<Window>,
    /// Consecutive windows whose verdict pointed away from `current`.
    streak: u32,
    switches: u32,
    /// Switches from the loss-tolerant controller back to the default so far.
    returns: u32,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    start: Instant,
    retrans_at_start: u32,
    srtt_sum_us: u64,
    samples: u64,
}

impl AutoCc {
    /// The class the connection should run now.
    pub fn current(&self) -> CcClass {
        self.current
    }

    /// Times the choice changed.
    pub fn switches(&self) -> u32 {
        self.switches
    }

    /// One TCP_INFO sample at `now`; returns the class the connection should run (changed
    /// only at the end of an evaluation window).
    pub fn on_sample(&mut self, s: &CcSample, now: Instant) -> CcClass {
        if s.min_rtt == Duration::ZERO || s.srtt == Duration::ZERO {
            return self.current;
        }
        let w = self.window.get_or_insert(Window {
            start: now,
            retrans_at_start: s.total_retrans,
            srtt_sum_us: 0,
            samples: 0,
        });
        w.srtt_sum_us += s.srtt.as_micros();
        w.samples += 1;
        let length = WINDOW_MIN.max(Duration::from_micros(s.min_rtt.as_micros() * WINDOW_RTTS));
        if now.saturating_since(w.start) < length {
            return self.current;
        }
        let w = self.window.take().expect("set above");
        let retrans = s.total_retrans.wrapping_sub(w.retrans_at_start);
        let verdict = if retrans < MIN_RETRANS {
            None
        } else {
            let mean_srtt_us = w.srtt_sum_us as f64 / w.samples as f64;
            let limit_us = s.min_rtt.as_micros() as f64 * INFLATION + INFLATION_SLACK.as_micros() as f64;
            Some(if mean_srtt_us > limit_us {
                CcClass::Default
            } else {
                CcClass::LossTolerant
            })
        };
        match verdict {
            Some(v) if v != self.current => {
                self.streak += 1;
                if self.streak >= self.streak_to_leave() {
                    if self.current == CcClass::LossTolerant {
                        self.returns += 1;
                    }
                    self.current = v;
                    self.streak = 0;
                    self.switches += 1;
                }
            }
            // Agreement, or a window without losses: nothing argues for a switch.
            Some(_) | None => self.streak = 0,
        }
        self.current
    }

    /// Windows in a row that must point away from the current class to leave it.
    fn streak_to_leave(&self) -> u32 {
        match self.current {
            CcClass::Default => STREAK,
            CcClass::LossTolerant => STREAK << self.returns.min(MAX_RETURN_DOUBLINGS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds samples every 10 ms for `secs`, each from `f(t_ms)` = (cumulative retrans,
    /// srtt ms, min rtt ms); returns the class at the end and the time of the first switch.
    fn run(c: &mut AutoCc, from_ms: u64, secs: f64, f: impl Fn(u64) -> (u32, f64, f64)) -> (CcClass, Option<u64>) {
        let before = c.current();
        let mut first = None;
        let end = from_ms + (secs * 1000.0) as u64;
        for t in (from_ms..end).step_by(10) {
            let (r, srtt, min) = f(t);
            let s = CcSample {
                total_retrans: r,
                srtt: Duration::from_secs_f64(srtt / 1000.0),
                min_rtt: Duration::from_secs_f64(min / 1000.0),
            };
            let got = c.on_sample(&s, Instant::from_micros(t * 1000));
            if got != before && first.is_none() {
                first = Some(t);
            }
        }
        (c.current(), first)
    }

    #[test]
    fn random_loss_without_inflation_moves_to_the_loss_tolerant_controller() {
        let mut c = AutoCc::default();
        // 5 retransmissions every 100 ms, RTT steady at 4 ms over a 4 ms minimum.
        let (class, at) = run(&mut c, 0, 2.0, |t| ((t / 100 * 5) as u32, 4.0, 4.0));
        assert_eq!(class, CcClass::LossTolerant);
        // Two windows of 250 ms make the verdict.
        assert!(at.is_some_and(|t| (500..=600).contains(&t)), "{at:?}");
        assert_eq!(c.switches(), 1);
    }

    #[test]
    fn losses_at_a_full_queue_keep_the_default() {
        let mut c = AutoCc::default();
        // Cubic's saw-tooth: RTT 2.5× its minimum, a loss burst each 200 ms.
        let (class, at) = run(&mut c, 0, 3.0, |t| ((t / 200 * 4) as u32, 10.0, 4.0));
        assert_eq!((class, at), (CcClass::Default, None));
    }

    #[test]
    fn no_losses_no_switch() {
        let mut c = AutoCc::default();
        let (class, at) = run(&mut c, 0, 3.0, |_| (0, 4.0, 4.0));
        assert_eq!((class, at), (CcClass::Default, None));
    }

    #[test]
    fn goes_back_when_losses_come_with_inflation_again() {
        let mut c = AutoCc::default();
        run(&mut c, 0, 1.0, |t| ((t / 100 * 5) as u32, 4.0, 4.0));
        assert_eq!(c.current(), CcClass::LossTolerant);
        // A competing flow fills the queue: RTT triples, losses go on.
        let (class, at) = run(&mut c, 1000, 2.0, |t| ((t / 100 * 5) as u32, 12.0, 4.0));
        assert_eq!(class, CcClass::Default);
        assert!(at.is_some_and(|t| t < 1700), "{at:?}");
        assert_eq!(c.switches(), 2);
    }

    #[test]
    fn one_odd_window_does_not_flap() {
        let mut c = AutoCc::default();
        // Random loss throughout; one 250-ms stretch of inflated RTT in the middle.
        let (class, _) = run(&mut c, 0, 3.0, |t| {
            let srtt = if (1500..1750).contains(&t) { 12.0 } else { 4.0 };
            ((t / 100 * 5) as u32, srtt, 4.0)
        });
        assert_eq!(class, CcClass::LossTolerant);
        assert_eq!(c.switches(), 1);
    }

    /// A path whose RTT inflates under BBR itself (as Linux's BBR may on a path of a few
    /// packets' BDP) and falls back once Cubic has collapsed, losses throughout.
    /// Returns `(switches, ms on the loss-tolerant class)` over 30 s; `forget` clears the
    /// count of returns before every sample (the rule without damping).
    fn self_inflating(forget: bool) -> (u32, u64) {
        let mut c = AutoCc::default();
        let mut on_bbr_ms = 0;
        for t in (0..30_000u64).step_by(10) {
            let bbr = c.current() == CcClass::LossTolerant;
            let s = CcSample {
                total_retrans: (t / 20) as u32,
                srtt: Duration::from_micros(if bbr { 6000 } else { 1200 }),
                min_rtt: Duration::from_millis(1),
            };
            if forget {
                c.returns = 0;
            }
            c.on_sample(&s, Instant::from_micros(t * 1000));
            on_bbr_ms += if bbr { 10 } else { 0 };
        }
        (c.switches(), on_bbr_ms)
    }

    #[test]
    fn a_controller_that_inflates_the_rtt_itself_does_not_make_it_flap() {
        // Undamped: two windows each way, a switch every half second, half the time on BBR.
        let (switches, on_bbr) = self_inflating(true);
        assert!(switches >= 55 && (14_000..16_000).contains(&on_bbr), "{switches} {on_bbr}");
        // Damped: 0.5 s to BBR, then 1, 2, 4, 8, 8 s on it between half-second visits to
        // Cubic.
        let (switches, on_bbr) = self_inflating(false);
        assert!(switches <= 14, "{switches} switches");
        assert!(on_bbr >= 25_000, "{on_bbr} ms of 30 s on BBR");
    }

    #[test]
    fn sub_millisecond_paths_get_the_absolute_slack() {
        let mut c = AutoCc::default();
        // 0.3 ms minimum, 1 ms smoothed: scheduling noise, not a queue.
        let (class, _) = run(&mut c, 0, 2.0, |t| ((t / 50 * 3) as u32, 1.0, 0.3));
        assert_eq!(class, CcClass::LossTolerant);
    }

    #[test]
    fn no_rtt_sample_no_verdict() {
        let mut c = AutoCc::default();
        let (class, _) = run(&mut c, 0, 2.0, |t| ((t / 10) as u32, 0.0, 0.0));
        assert_eq!(class, CcClass::Default);
    }
}
