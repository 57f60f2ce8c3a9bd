//! What links of the TCP model share: one bottleneck several paths' traffic joins
//! ([`SharedLink`], a scenario's `[bottleneck]`) and the coupling of one connection's
//! per-path windows ([`Coupler`], RFC 6356's Linked Increases, LIA).
//!
//! Both are plain objects the member links write their state into and read the others'
//! from (one thread, so `Cell`s): a link publishes after every change it makes, and sees
//! the others as of their last move, which within one simulator step is at most that
//! step old. The simulator advances links in a fixed order, so runs repeat bit for bit.

use std::cell::Cell;

/// Bisection rounds of [`SharedLink::solve`]: the queue delay to 2⁻⁶⁰ of its bound.
const SOLVE_ROUNDS: u32 = 60;

/// One member's state as the shared link sees it.
#[derive(Clone, Copy, Debug, Default)]
struct Member {
    /// Bytes sent and not yet acknowledged (in the queue or on the wire).
    in_flight: f64,
    /// Round trip without queueing (s).
    base_rtt_s: f64,
    /// The rate of the member's own (access) link, bytes/s; 0 while down.
    access: f64,
}

/// A drop-tail link of `rate` bytes/s with a queue of `queue_bytes`, crossed by every
/// member's data direction, modelled as a fluid FIFO queue: with windows `w_j` in flight
/// over base round trips `d_j`, the queue holds `q` seconds of traffic where
/// `Σ_j min(access_j, w_j / (d_j + q)) = rate` (0 when the windows do not fill the link).
/// Every member's bytes meet the same queueing delay `q`; member `k` drains at
/// `min(access_k, w_k / (d_k + q))`, its share; a chunk is dropped when `q · rate` exceeds
/// the queue. The members' own access links are not queues of their own here (the model
/// assumes them faster than their share of the shared link, as in `shared-bottleneck`).
#[derive(Debug)]
pub struct SharedLink {
    rate: f64,
    queue_bytes: f64,
    members: Vec<Cell<Member>>,
}

/// What a member meets at the shared link now ([`SharedLink::solve`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharedState {
    /// Queueing delay (s), the same for every member.
    pub queue_s: f64,
    /// The member's drain rate (bytes/s).
    pub rate: f64,
    /// The queue overflows: a chunk sent now is dropped.
    pub overflow: bool,
}

impl SharedLink {
    /// A link of `rate` bytes/s and `queue_bytes` for `members` flows.
    pub fn new(rate: f64, queue_bytes: u64, members: usize) -> Self {
        SharedLink {
            rate,
            queue_bytes: queue_bytes as f64,
            members: vec![Cell::new(Member::default()); members],
        }
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Member `k` now has `in_flight` bytes out over a base round trip `base_rtt_s`, its
    /// own link carrying `access` bytes/s.
    pub fn publish(&self, k: usize, in_flight: f64, base_rtt_s: f64, access: f64) {
        if let Some(m) = self.members.get(k) {
            m.set(Member {
                in_flight,
                base_rtt_s,
                access,
            });
        }
    }

    /// The queue and member `k`'s share with `in_flight` bytes of its own out (the others
    /// as last published).
    pub fn solve(&self, k: usize, in_flight: f64, base_rtt_s: f64, access: f64) -> SharedState {
        let members: Vec<Member> = self
            .members
            .iter()
            .enumerate()
            .map(|(j, m)| {
                if j == k {
                    Member {
                        in_flight,
                        base_rtt_s,
                        access,
                    }
                } else {
                    m.get()
                }
            })
            .collect();
        // A zero base round trip would make a window's rate infinite: a microsecond.
        let rate_of = |m: &Member, q: f64| {
            if m.access <= 0.0 || m.in_flight <= 0.0 {
                0.0
            } else {
                m.access.min(m.in_flight / (m.base_rtt_s.max(1e-6) + q))
            }
        };
        let total = |q: f64| members.iter().map(|m| rate_of(m, q)).sum::<f64>();
        let mut queue_s = 0.0;
        if self.rate > 0.0 && total(0.0) > self.rate {
            // Σ w_j / (d_j + q) ≤ Σ w_j / q: at q = Σ w / rate the sum is at most the rate.
            let mut hi = members.iter().map(|m| m.in_flight).sum::<f64>() / self.rate;
            let mut lo = 0.0;
            for _ in 0..SOLVE_ROUNDS {
                let mid = 0.5 * (lo + hi);
                if total(mid) > self.rate {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            queue_s = hi;
        }
        let own = members.get(k).map_or(0.0, |m| rate_of(m, queue_s));
        SharedState {
            queue_s,
            rate: own,
            overflow: queue_s * self.rate > self.queue_bytes,
        }
    }
}

/// One connection's per-path windows, coupled by RFC 6356's Linked Increases Algorithm:
/// each member's window increase is scaled by [`lia_factor`] of the members' current
/// windows and round trips (members without a round-trip sample yet, or down, count as
/// absent).
#[derive(Debug)]
pub struct Coupler {
    members: Vec<Cell<Option<(f64, f64)>>>,
}

impl Coupler {
    pub fn new(members: usize) -> Self {
        Coupler {
            members: vec![Cell::new(None); members],
        }
    }

    /// Member `k`'s window (bytes) and smoothed round trip (s), or `None` when it carries
    /// nothing (down, not connected).
    pub fn publish(&self, k: usize, state: Option<(f64, f64)>) {
        if let Some(m) = self.members.get(k) {
            m.set(state);
        }
    }

    /// The factor member `k`'s increase is scaled by, with its own window and round trip
    /// given (the others as last published).
    pub fn factor(&self, k: usize, cwnd: f64, rtt_s: f64) -> f64 {
        let mut windows = Vec::with_capacity(self.members.len());
        let mut own = 0;
        for (j, m) in self.members.iter().enumerate() {
            if j == k {
                own = windows.len();
                windows.push((cwnd, rtt_s));
            } else if let Some(w) = m.get() {
                windows.push(w);
            }
        }
        lia_factor(&windows, own)
    }
}

pub use fbdt_core::coupling::{lia_alpha, lia_factor, lia_increase};

/// Jain's fairness index of `rates`: `(Σx)² / (n · Σx²)`, 1 when all are equal, 1/n when
/// one takes everything. `None` without rates or when all are zero.
pub fn jain_index(rates: &[f64]) -> Option<f64> {
    let sum: f64 = rates.iter().sum();
    let squares: f64 = rates.iter().map(|x| x * x).sum();
    (!rates.is_empty() && squares > 0.0).then(|| sum * sum / (rates.len() as f64 * squares))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fluid queue: two windows of 1.5 BDP each over a link of rate R and base round
    /// trip d hold 2 BDP in the queue (q = 2d), and each drains at R/2; a window of half a
    /// BDP makes no queue and drains at its window's rate.
    #[test]
    fn the_shared_queue_splits_the_rate_by_window() {
        let (rate, d) = (25e6, 0.004);
        let bdp = rate * d;
        let link = SharedLink::new(rate, 10 * 1_000_000, 2);
        link.publish(1, 1.5 * bdp, d, 1e12);
        let s = link.solve(0, 1.5 * bdp, d, 1e12);
        assert!((s.queue_s - 2.0 * d).abs() < 1e-9, "{s:?}");
        assert!((s.rate - rate / 2.0).abs() < 1.0, "{s:?}");
        assert!(!s.overflow);
        link.publish(1, 0.0, d, 1e12);
        let alone = link.solve(0, 0.5 * bdp, d, 1e12);
        assert_eq!(alone.queue_s, 0.0);
        assert!((alone.rate - rate / 2.0).abs() < 1.0);
        // A queue of one BDP overflows with 2 BDP queued.
        let small = SharedLink::new(rate, bdp as u64, 2);
        small.publish(1, 1.5 * bdp, d, 1e12);
        assert!(small.solve(0, 1.5 * bdp, d, 1e12).overflow);
    }

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_a_monopoly() {
        assert_eq!(jain_index(&[5.0, 5.0]), Some(1.0));
        assert!((jain_index(&[1.0, 0.0, 0.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        // Two shares to one: 9 / (2 · 5) = 0.9.
        assert!((jain_index(&[2.0, 1.0]).unwrap() - 0.9).abs() < 1e-12);
        assert_eq!(jain_index(&[]), None);
    }
}
