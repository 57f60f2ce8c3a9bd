//! minRTT, Linux MPTCP's default scheduler before v1: the lowest-srtt subflow that has room
//! in its congestion window. Opportunistic reinjection and penalisation of the subflow that
//! blocks the window live in the meta layer (they apply whenever the window blocks), as in
//! the kernel where `mptcp_rcv_buf_optimization` sits in the common `next_segment` path.

use super::{Scheduler, View};
use crate::path::PathId;

#[derive(Clone)]
pub struct MinRtt;

impl Scheduler for MinRtt {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        v.fastest_with_space().map(|p| p.id)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{path, view};
    use super::*;

    #[test]
    fn picks_the_lowest_rtt_path_with_space() {
        // (paths, expected)
        let cases = [
            (vec![path(0, 10.0, 100_000, 0), path(1, 2.0, 100_000, 0)], Some(1)),
            // fast path full → slow path
            (vec![path(0, 10.0, 100_000, 0), path(1, 2.0, 100_000, 100_000)], Some(0)),
            // both full → wait
            (vec![path(0, 10.0, 20_000, 20_000), path(1, 2.0, 20_000, 20_000)], None),
            // equal RTT → lowest index
            (vec![path(0, 5.0, 100_000, 0), path(1, 5.0, 100_000, 0)], Some(0)),
        ];
        for (paths, want) in cases {
            let got = MinRtt.select(&view(&paths, 1 << 20, 1 << 20)).map(|p| p.0);
            assert_eq!(got, want, "{paths:?}");
        }
    }
}
