//! BLEST (Ferlin et al., IFIP Networking 2016): blocking estimation. The fast path (lowest
//! srtt) is used whenever it has space. Before sending on a slower path, estimate how many
//! bytes the fast path could send during one RTT of the slow path:
//!   X = cwnd_f · n + n·(n−1)/2 · MSS,  n = rtt_s / rtt_f
//! (its cwnd grows by one MSS per RTT in congestion avoidance). If λ·X plus the segment does
//! not fit in the shared receive window left, sending on the slow path would block the fast
//! one: wait instead. The paper adapts λ (raise it when the window blocks anyway, lower it
//! slowly otherwise); we keep λ = 1 (`Blest::lambda`, public so it can be set) — the
//! adaptation's step sizes are not given precisely enough to copy.

use super::{Scheduler, View};
use crate::path::PathId;

/// TCP MSS used for the cwnd-growth term.
const MSS: f64 = 1448.0;

pub struct Blest {
    pub lambda: f64,
}

impl Default for Blest {
    fn default() -> Self {
        Blest { lambda: 1.0 }
    }
}

impl Blest {
    /// Bytes the fast path `f` sends during one RTT of the slow path `s`.
    pub fn fast_bytes_during(rtt_f: f64, cwnd_f: f64, rtt_s: f64) -> f64 {
        let n = if rtt_f > 0.0 { rtt_s / rtt_f } else { 1.0 };
        cwnd_f * n + n * (n - 1.0).max(0.0) / 2.0 * MSS
    }
}

impl Scheduler for Blest {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        let fast = v.fastest()?;
        if fast.has_space(v.seg) {
            return Some(fast.id);
        }
        let slow = v.fastest_with_space()?;
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
        assert_eq!(Blest::default().select(&view(&paths, 1 << 20, 1 << 20)), Some(PathId(1)));
        // Fast full, 10 fast RTTs per slow RTT ≈ 2 MB + growth > 1 MiB window left → wait.
        let paths = [slow, fast_full];
        assert_eq!(Blest::default().select(&view(&paths, 1 << 20, 1 << 20)), None);
        // Same with 64 MiB window left → slow path.
        assert_eq!(Blest::default().select(&view(&paths, 64 << 20, 1 << 20)), Some(PathId(0)));
        // Similar RTTs: X ≈ cwnd_f → slow path fits in 1 MiB.
        let paths = [path(0, 2.5, 200_000, 0), fast_full];
        assert_eq!(Blest::default().select(&view(&paths, 1 << 20, 1 << 20)), Some(PathId(0)));
    }
}
