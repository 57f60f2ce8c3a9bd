//! Round-robin (the kernel's `roundrobin` scheduler, non-strict): paths take turns; a path
//! without space is skipped, so the turn passes to the next one with space.

use super::{Scheduler, View};
use crate::path::PathId;

#[derive(Clone, Default)]
pub struct RoundRobin {
    /// Index of the path whose turn it is.
    next: usize,
}

impl Scheduler for RoundRobin {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        let n = v.paths.len();
        (0..n)
            .map(|k| &v.paths[(self.next + k) % n])
            .find(|p| p.has_space(v.seg))
            .map(|p| p.id)
    }

    fn on_sent(&mut self, path: PathId, _len: u64) {
        self.next = path.index() + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{path, view};
    use super::*;

    #[test]
    fn alternates_and_skips_full_paths() {
        let paths = [
            path(0, 10.0, 1 << 20, 0),
            path(1, 2.0, 1 << 20, 0),
            path(2, 5.0, 1 << 20, 1 << 20),
        ];
        let mut rr = RoundRobin::default();
        let mut got = Vec::new();
        for _ in 0..4 {
            let p = rr.select(&view(&paths, 1 << 30, 1 << 30)).unwrap();
            rr.on_sent(p, 16384);
            got.push(p.0);
        }
        assert_eq!(got, vec![0, 1, 0, 1], "path 2 is full and skipped");
    }
}
