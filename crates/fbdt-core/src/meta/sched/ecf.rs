//! ECF, Earliest Completion First (Lim et al., CoNEXT 2017). With the fast path f full and a
//! slower path s free, and k bytes waiting in the meta send queue:
//!   n = 1 + k / cwnd_f  (fast-path rounds to send everything)
//!   if n·rtt_f < (1 + waiting·β)·(rtt_s + δ):        waiting for f finishes earlier…
//!       if (k / cwnd_s)·rtt_s ≥ 2·rtt_f + δ: wait (waiting = 1)   …and s would be slower
//!       else use s
//!   else use s (waiting = 0)
//! β = 0.25 (the paper's hysteresis), δ = max(rttvar_f, rttvar_s) — 0 here, the simulator's
//! RTTs have no variance and the driver reports no rttvar.

use super::{Scheduler, View};
use crate::path::PathId;

#[derive(Clone)]
pub struct Ecf {
    pub beta: f64,
    pub delta_s: f64,
    waiting: bool,
}

impl Default for Ecf {
    fn default() -> Self {
        Ecf {
            beta: 0.25,
            delta_s: 0.0,
            waiting: false,
        }
    }
}

impl Scheduler for Ecf {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        let fast = v.fastest()?;
        if fast.has_space(v.seg) {
            return Some(fast.id);
        }
        let slow = v.fastest_with_space()?;
        let k = (v.unsent.max(v.seg)) as f64;
        let cwnd_f = (fast.cwnd.max(1)) as f64;
        let cwnd_s = (slow.cwnd.max(1)) as f64;
        let n = 1.0 + k / cwnd_f;
        let w = if self.waiting { 1.0 } else { 0.0 };
        if n * fast.srtt_s < (1.0 + w * self.beta) * (slow.srtt_s + self.delta_s) {
            if k / cwnd_s * slow.srtt_s >= 2.0 * fast.srtt_s + self.delta_s {
                self.waiting = true;
                return None;
            }
            Some(slow.id)
        } else {
            self.waiting = false;
            Some(slow.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{path, view};
    use super::*;

    #[test]
    fn waits_for_the_fast_path_when_that_finishes_first() {
        let fast_full = path(1, 2.0, 1_000_000, 1_000_000);
        let slow = path(0, 40.0, 100_000, 0);
        // Little backlog: the fast path finishes it in 1 round (2 ms) < 40 ms → wait.
        let paths = [slow, fast_full];
        assert_eq!(Ecf::default().select(&view(&paths, 1 << 30, 100_000)), None);
        // Huge backlog: 101 fast rounds > 40 ms → use the slow path too.
        assert_eq!(
            Ecf::default().select(&view(&paths, 1 << 30, 100_000_000)),
            Some(PathId(0))
        );
        // Fast path has space → fast.
        let paths = [slow, path(1, 2.0, 1_000_000, 0)];
        assert_eq!(Ecf::default().select(&view(&paths, 1 << 30, 100_000)), Some(PathId(1)));
        // Similar RTTs: the slow path would not be slower → use it.
        let paths = [path(0, 2.5, 1_000_000, 0), fast_full];
        assert_eq!(Ecf::default().select(&view(&paths, 1 << 30, 100_000)), Some(PathId(0)));
    }
}
