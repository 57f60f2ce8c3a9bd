//! BLEST (Ferlin et al., IFIP Networking 2016): blocking estimation. The fast path (lowest
//! srtt) is used whenever it has space. Before sending on a slower path, estimate how many
//! bytes the fast path could send during one RTT of the slow path:
//!   X = cwnd_f · n + n·(n−1)/2 · MSS,  n = rtt_s / rtt_f
//! (its cwnd grows by one MSS per RTT in congestion avoidance). If λ·X plus the segment does
//! not fit in the shared receive window left, sending on the slow path would block the fast
//! one: wait instead.
//!
//! λ adapts as in the authors' Linux implementation: it starts at 1.2 and, at most once per
//! slow-path RTT, rises by 0.04 if the meta layer had to send something again since the last
//! update (the window blocked anyway: be more careful) or falls by 0.01 otherwise, within
//! [1.0, 1.3]. Their signal is an outstanding meta-level retransmission; ours is the meta
//! layer's reinjected-bytes counter having grown.

use super::{Scheduler, View};
use crate::path::PathId;
use crate::time::Instant;

/// TCP MSS used for the cwnd-growth term.
const MSS: f64 = 1448.0;
const LAMBDA_INITIAL: f64 = 1.2;
const LAMBDA_MIN: f64 = 1.0;
const LAMBDA_MAX: f64 = 1.3;
const LAMBDA_BAD: f64 = 0.04;
const LAMBDA_GOOD: f64 = 0.01;

#[derive(Clone)]
pub struct Blest {
    pub lambda: f64,
    /// Adapt λ (off: λ stays where it is set).
    pub adapt: bool,
    last_update: Option<Instant>,
    reinjected_at_update: u64,
}

impl Default for Blest {
    fn default() -> Self {
        Blest {
            lambda: LAMBDA_INITIAL,
            adapt: true,
            last_update: None,
            reinjected_at_update: 0,
        }
    }
}

impl Blest {
    /// Bytes the fast path `f` sends during one RTT of the slow path `s`.
    pub fn fast_bytes_during(rtt_f: f64, cwnd_f: f64, rtt_s: f64) -> f64 {
        let n = if rtt_f > 0.0 { rtt_s / rtt_f } else { 1.0 };
        cwnd_f * n + n * (n - 1.0).max(0.0) / 2.0 * MSS
    }

    fn update_lambda(&mut self, v: &View<'_>, slow_srtt_s: f64) {
        if !self.adapt {
            return;
        }
        if let Some(t) = self.last_update {
            if v.now.saturating_since(t).as_secs_f64() < slow_srtt_s {
                return;
            }
        }
        let step = if v.reinjected > self.reinjected_at_update {
            LAMBDA_BAD
        } else {
            -LAMBDA_GOOD
        };
        self.lambda = (self.lambda + step).clamp(LAMBDA_MIN, LAMBDA_MAX);
        self.last_update = Some(v.now);
        self.reinjected_at_update = v.reinjected;
    }
}

impl Scheduler for Blest {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        let fast = v.fastest()?;
        if fast.has_space(v.seg) {
            return Some(fast.id);
        }
        let slow = v.fastest_with_space()?;
        self.update_lambda(v, slow.srtt_s);
        let x = Self::fast_bytes_during(fast.srtt_s, fast.cwnd as f64, slow.srtt_s);
        if self.lambda * x + v.seg as f64 > v.window_left as f64 {
            None
        } else {
            Some(slow.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{path, view};
    use super::*;

    #[test]
    fn slow_path_only_when_the_fast_one_cannot_fill_the_window() {
        let fast_full = path(1, 2.0, 200_000, 200_000);
        let slow = path(0, 20.0, 200_000, 0);
        // Fast path has space → fast.
        let paths = [slow, path(1, 2.0, 200_000, 0)];
        assert_eq!(
            Blest::default().select(&view(&paths, 1 << 20, 1 << 20)),
            Some(PathId(1))
        );
        // Fast full, 10 fast RTTs per slow RTT ≈ 2 MB + growth > 1 MiB window left → wait.
        let paths = [slow, fast_full];
        assert_eq!(Blest::default().select(&view(&paths, 1 << 20, 1 << 20)), None);
        // Same with 64 MiB window left → slow path.
        assert_eq!(
            Blest::default().select(&view(&paths, 64 << 20, 1 << 20)),
            Some(PathId(0))
        );
        // Similar RTTs: X ≈ cwnd_f → slow path fits in 1 MiB.
        let paths = [path(0, 2.5, 200_000, 0), fast_full];
        assert_eq!(
            Blest::default().select(&view(&paths, 1 << 20, 1 << 20)),
            Some(PathId(0))
        );
    }

    #[test]
    fn lambda_rises_after_reinjections_and_decays_otherwise_once_per_slow_rtt() {
        let paths = [path(0, 20.0, 200_000, 0), path(1, 2.0, 200_000, 200_000)];
        let mut b = Blest::default();
        let mut v = view(&paths, 64 << 20, 1 << 20);
        let step = |b: &mut Blest, v: &View<'_>| {
            b.select(v);
            b.lambda
        };
        assert!((step(&mut b, &v) - 1.19).abs() < 1e-9, "no reinjection: −0.01");
        // Within the slow path's 20 ms RTT: unchanged, whatever happened.
        v.reinjected = 10_000;
        v.now = Instant::from_micros(10_000);
        assert!((step(&mut b, &v) - 1.19).abs() < 1e-9);
        v.now = Instant::from_micros(21_000);
        assert!((step(&mut b, &v) - 1.23).abs() < 1e-9, "reinjected since: +0.04");
        for k in 0..20 {
            v.now = Instant::from_micros(50_000 + 30_000 * k);
            v.reinjected += 1;
            step(&mut b, &v);
        }
        assert!((b.lambda - 1.3).abs() < 1e-9, "capped at 1.3");
        for k in 0..100 {
            v.now = Instant::from_micros(1_000_000 + 30_000 * k);
            step(&mut b, &v);
        }
        assert!((b.lambda - 1.0).abs() < 1e-9, "floored at 1.0");
        // The fast path alone does not touch λ.
        let fast_free = [path(0, 20.0, 200_000, 0), path(1, 2.0, 200_000, 0)];
        let mut v = view(&fast_free, 64 << 20, 1 << 20);
        v.now = Instant::from_micros(9_000_000);
        assert_eq!(b.select(&v), Some(PathId(1)));
        assert!((b.lambda - 1.0).abs() < 1e-9);
    }
}
