//! Shared-bottleneck detection from what each path's TCP shows (RFC 8382's idea — paths
//! behind one queue see one queueing delay — on the signals a user-space sender has).
//!
//! Coupled congestion control is the right thing where paths share a bottleneck and a loss
//! of throughput where they do not (docs/congestion.md round 7: up to 47 % on tc-normal).
//! RFC 8382 groups flows by summary statistics of their one-way delay over ~17 s; a sender
//! over kernel TCP sees only each connection's smoothed RTT, every 10 ms. This detector asks
//! of two paths, over the last [`WINDOW_BINS`] bins of [`BIN`] (each bin the median of its
//! samples, so a spike that delays every path at once — the sender's or a router's CPU
//! busy for a few ms — does not look like a queue):
//! - both carry a queue (mean queueing delay, srtt − min RTT, at least [`MIN_QUEUE`]);
//! - the queues are the same size: a FIFO both paths cross shows both the same delay, while
//!   disjoint links have their own buffers, rates and sawtooths (mean |q₁ − q₂| at most
//!   [`MAX_MISMATCH`] of the mean queue);
//! - they move together (Pearson correlation of the binned queueing delays at least
//!   [`MIN_CORRELATION`]; a queue that moves by less than 0.1 ms has none).
//!
//! A path is *shared* while it meets all three with some other path, and stays so until the
//! test has failed for [`RELEASE`] (a coupled path paces itself below its share, and the
//! queue a competing flow keeps may dip). A false positive corrects itself: coupled disjoint
//! paths are paced below their links' rates, their queues drain, and the first test fails.
//! All coupled paths form one group (two separate shared bottlenecks are coupled as one:
//! more conservative than needed, never less).

use std::collections::VecDeque;

use crate::time::{Duration, Instant};

/// The time bin over which a path's queueing delay is averaged.
pub const BIN: Duration = Duration::from_millis(50);
/// Bins compared (2 s).
pub const WINDOW_BINS: usize = 40;
/// Bins two paths must both have in the window before they are compared.
const MIN_COMMON_BINS: usize = WINDOW_BINS / 2;
/// A queue smaller than this (mean over the window) is no evidence of a bottleneck.
pub const MIN_QUEUE: Duration = Duration::from_millis(1);
/// Most mean |q₁ − q₂| as a fraction of the mean queue.
pub const MAX_MISMATCH: f64 = 0.3;
/// Least correlation of the binned queueing delays.
pub const MIN_CORRELATION: f64 = 0.5;
/// A series whose standard deviation is below this has no correlation with anything.
const MIN_MOVEMENT: Duration = Duration::from_micros(100);
/// A shared path stays shared until the test has failed this long.
pub const RELEASE: Duration = Duration::from_millis(1000);

/// Samples kept per bin (more are ignored): five at the runtime's 10-ms tick.
const MAX_BIN_SAMPLES: usize = 32;

/// One path's binned queueing delay.
#[derive(Clone, Debug, Default)]
struct Series {
    /// The bin being filled: its index and samples (s).
    open: Option<(u64, Vec<f64>)>,
    /// Closed bins, oldest first: (bin index, mean queueing delay in s).
    bins: VecDeque<(u64, f64)>,
    /// Last instant the test passed with some other path.
    passed_at: Option<Instant>,
}

/// The median of `v` (not empty), which it sorts.
fn median(v: &mut [f64]) -> f64 {
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Which paths share a bottleneck, from samples of each path's smoothed and minimum RTT.
/// Deterministic and clock-free: `now` is an input.
#[derive(Clone, Debug, Default)]
pub struct SharedBottleneck {
    paths: Vec<Option<Series>>,
}

/// What the test found for one pair of paths over the window (for traces and tests).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairTest {
    pub common_bins: usize,
    /// Mean queueing delay of each path (s).
    pub mean_queue: (f64, f64),
    /// Mean |q₁ − q₂| over the mean queue.
    pub mismatch: f64,
    pub correlation: f64,
}

impl PairTest {
    pub fn shared(&self) -> bool {
        let min = MIN_QUEUE.as_secs_f64();
        self.common_bins >= MIN_COMMON_BINS
            && self.mean_queue.0 >= min
            && self.mean_queue.1 >= min
            && self.mismatch <= MAX_MISMATCH
            && self.correlation >= MIN_CORRELATION
    }
}

impl SharedBottleneck {
    pub fn new() -> Self {
        Self::default()
    }

    /// Path `i`'s TCP showed smoothed RTT `srtt` and minimum RTT `min_rtt` at `now`.
    /// Samples without an RTT are ignored.
    pub fn on_sample(&mut self, i: usize, srtt: Duration, min_rtt: Duration, now: Instant) {
        if srtt == Duration::ZERO || min_rtt == Duration::ZERO {
            return;
        }
        if self.paths.len() <= i {
            self.paths.resize(i + 1, None);
        }
        let queue = srtt.as_micros().saturating_sub(min_rtt.as_micros()) as f64 / 1e6;
        let bin = now.as_micros() / BIN.as_micros();
        let s = self.paths[i].get_or_insert_with(Series::default);
        match &mut s.open {
            Some((b, samples)) if *b == bin => {
                if samples.len() < MAX_BIN_SAMPLES {
                    samples.push(queue);
                }
                return;
            }
            Some((b, samples)) => {
                s.bins.push_back((*b, median(samples)));
                while s.bins.front().is_some_and(|&(old, _)| old + WINDOW_BINS as u64 <= bin) {
                    s.bins.pop_front();
                }
                samples.clear();
                samples.push(queue);
                *b = bin;
            }
            None => {
                s.open = Some((bin, vec![queue]));
                return;
            }
        }
        // A bin of path i closed: test it against every other path.
        let partners: Vec<usize> = (0..self.paths.len())
            .filter(|&j| j != i && self.test(i, j).is_some_and(|t| t.shared()))
            .collect();
        if !partners.is_empty() {
            for k in partners.into_iter().chain([i]) {
                if let Some(s) = self.paths[k].as_mut() {
                    s.passed_at = Some(now);
                }
            }
        }
    }

    /// Path `i` has no connection: its series starts over.
    pub fn leave(&mut self, i: usize) {
        if let Some(s) = self.paths.get_mut(i) {
            *s = None;
        }
    }

    /// Path `i` shares a bottleneck with another path (passed the test within [`RELEASE`]).
    pub fn shared(&self, i: usize, now: Instant) -> bool {
        self.paths
            .get(i)
            .and_then(Option::as_ref)
            .and_then(|s| s.passed_at)
            .is_some_and(|t| now.saturating_since(t) < RELEASE)
    }

    /// The test of paths `i` and `j` over their closed bins; `None` if either has none.
    pub fn test(&self, i: usize, j: usize) -> Option<PairTest> {
        let a = self.paths.get(i)?.as_ref()?;
        let b = self.paths.get(j)?.as_ref()?;
        let newest = a.bins.back()?.0.min(b.bins.back()?.0);
        let from = (newest + 1).saturating_sub(WINDOW_BINS as u64);
        let pairs: Vec<(f64, f64)> = a
            .bins
            .iter()
            .filter(|&&(k, _)| k >= from && k <= newest)
            .filter_map(|&(k, qa)| b.bins.iter().find(|&&(l, _)| l == k).map(|&(_, qb)| (qa, qb)))
            .collect();
        let n = pairs.len() as f64;
        if pairs.is_empty() {
            return None;
        }
        let ma = pairs.iter().map(|p| p.0).sum::<f64>() / n;
        let mb = pairs.iter().map(|p| p.1).sum::<f64>() / n;
        let mean = (ma + mb) / 2.0;
        let mismatch = if mean > 0.0 {
            pairs.iter().map(|p| (p.0 - p.1).abs()).sum::<f64>() / n / mean
        } else {
            f64::INFINITY
        };
        let cov: f64 = pairs.iter().map(|p| (p.0 - ma) * (p.1 - mb)).sum();
        let va: f64 = pairs.iter().map(|p| (p.0 - ma).powi(2)).sum();
        let vb: f64 = pairs.iter().map(|p| (p.1 - mb).powi(2)).sum();
        // A queue that does not move says nothing of whose it is.
        let still = |v: f64| (v / n).sqrt() < MIN_MOVEMENT.as_secs_f64();
        let correlation = if still(va) || still(vb) { 0.0 } else { cov / (va * vb).sqrt() };
        Some(PairTest {
            common_bins: pairs.len(),
            mean_queue: (ma, mb),
            mismatch,
            correlation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK_MS: u64 = 10;
    const BASE: Duration = Duration::from_millis(4);

    fn at_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    /// Feeds each path's queueing delay (ms, from `queue(path, ms)`) every 10 ms for `ms`.
    fn feed(d: &mut SharedBottleneck, paths: usize, from_ms: u64, ms: u64, queue: impl Fn(usize, u64) -> f64) {
        for t in (from_ms..from_ms + ms).step_by(TICK_MS as usize) {
            for i in 0..paths {
                let q = Duration::from_micros((queue(i, t) * 1000.0) as u64);
                d.on_sample(i, BASE + q, BASE, at_ms(t));
            }
        }
    }

    /// A drop-tail queue's sawtooth: fills over `period` ms from `low` to `high` ms, drops back.
    fn sawtooth(t: u64, period: u64, low: f64, high: f64) -> f64 {
        low + (high - low) * (t % period) as f64 / period as f64
    }

    /// Two paths behind one queue see the same sawtooth (plus their own small jitter).
    #[test]
    fn one_queue_crossed_by_two_paths_is_shared() {
        let mut d = SharedBottleneck::new();
        feed(&mut d, 2, 0, 3000, |i, t| sawtooth(t, 700, 10.0, 50.0) + if (t / 10 + i as u64) % 3 == 0 { 0.4 } else { 0.0 });
        let t = d.test(0, 1).unwrap();
        assert!(t.shared(), "{t:?}");
        assert!(t.correlation > 0.95 && t.mismatch < 0.05, "{t:?}");
        assert!(d.shared(0, at_ms(3000)) && d.shared(1, at_ms(3000)));
    }

    /// Disjoint links: each its own buffer and sawtooth period; the test fails, whether the
    /// queues differ in size or only in phase.
    #[test]
    fn disjoint_queues_are_not_shared() {
        let mut d = SharedBottleneck::new();
        feed(&mut d, 2, 0, 3000, |i, t| if i == 0 { sawtooth(t, 900, 2.0, 19.0) } else { sawtooth(t, 300, 1.0, 6.7) });
        let t = d.test(0, 1).unwrap();
        assert!(!t.shared() && t.mismatch > MAX_MISMATCH, "{t:?}");
        assert!(!d.shared(0, at_ms(3000)) && !d.shared(1, at_ms(3000)));
        // Same size, different periods: neither moves with the other.
        let mut d = SharedBottleneck::new();
        feed(&mut d, 2, 0, 3000, |i, t| if i == 0 { sawtooth(t, 430, 2.0, 20.0) } else { sawtooth(t + 200, 610, 2.0, 20.0) });
        let t = d.test(0, 1).unwrap();
        assert!(!t.shared() && t.correlation < MIN_CORRELATION, "{t:?}");
    }

    /// Disjoint paths whose samples are all delayed at once now and then (one CPU stalls
    /// both): a 10-ms spike every 200 ms on both is not taken for a shared queue.
    #[test]
    fn common_short_spikes_are_not_a_shared_queue() {
        let mut d = SharedBottleneck::new();
        let spike = |t: u64| if t % 200 == 0 { 10.0 } else { 0.0 };
        feed(&mut d, 2, 0, 3000, |i, t| spike(t) + if i == 0 { sawtooth(t, 900, 2.0, 19.0) } else { sawtooth(t, 300, 1.0, 6.7) });
        let t = d.test(0, 1).unwrap();
        assert!(!t.shared(), "{t:?}");
        // Two steady 1-ms queues with the same spikes: with a mean per bin, every fourth
        // bin of both would read 3 ms, and the series would be one.
        let mut d = SharedBottleneck::new();
        feed(&mut d, 2, 0, 3000, |_, t| spike(t) + 1.0);
        assert!(!d.test(0, 1).unwrap().shared());
    }

    /// Empty queues (paths below their links' rates, e.g. paced by coupling) are no
    /// evidence, however well they agree.
    #[test]
    fn empty_queues_are_no_evidence() {
        let mut d = SharedBottleneck::new();
        feed(&mut d, 2, 0, 3000, |_, t| if t % 50 == 0 { 0.3 } else { 0.0 });
        assert!(!d.test(0, 1).unwrap().shared());
        assert!(!d.shared(0, at_ms(3000)));
    }

    /// A shared path stays shared for RELEASE after the evidence stops, then is released;
    /// a third, disjoint path never joins.
    #[test]
    fn sharing_is_released_a_second_after_the_evidence_ends() {
        let mut d = SharedBottleneck::new();
        let shared_then_apart = |i: usize, t: u64| match i {
            2 => sawtooth(t, 300, 1.0, 6.0),
            _ if t < 3000 => sawtooth(t, 700, 10.0, 50.0),
            0 => sawtooth(t, 430, 2.0, 30.0),
            _ => 0.0,
        };
        feed(&mut d, 3, 0, 3000, shared_then_apart);
        assert!(d.shared(0, at_ms(2990)) && d.shared(1, at_ms(2990)));
        assert!(!d.shared(2, at_ms(2990)));
        feed(&mut d, 3, 3000, 600, shared_then_apart);
        // The window still holds mostly shared bins, or the last pass is within RELEASE.
        assert!(d.shared(0, at_ms(3590)));
        feed(&mut d, 3, 3600, 3000, shared_then_apart);
        assert!(!d.shared(0, at_ms(6590)) && !d.shared(1, at_ms(6590)));
    }

    #[test]
    fn a_path_that_leaves_starts_over_and_one_path_alone_is_never_shared() {
        let mut d = SharedBottleneck::new();
        feed(&mut d, 1, 0, 3000, |_, t| sawtooth(t, 700, 10.0, 50.0));
        assert!(!d.shared(0, at_ms(3000)));
        assert!(d.test(0, 1).is_none());
        feed(&mut d, 2, 3000, 3000, |_, t| sawtooth(t, 700, 10.0, 50.0));
        assert!(d.shared(1, at_ms(6000)));
        d.leave(1);
        assert!(!d.shared(1, at_ms(6000)));
        assert!(d.test(0, 1).is_none());
        // No RTT yet: ignored.
        d.on_sample(3, Duration::ZERO, Duration::ZERO, at_ms(6000));
        assert!(d.test(0, 3).is_none());
    }
}
