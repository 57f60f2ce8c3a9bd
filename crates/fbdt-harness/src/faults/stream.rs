//! What a testbed fault run sends and what its receiver records: a byte pattern that names
//! every byte's stream offset (so a hole or a duplicate handed to the application shows as
//! a mismatch), and the receiver's in-order arrivals at 1 ms resolution, from which the
//! run's longest gap, its tail and its goodput in an interval are read.

/// The stream's byte at `offset`: byte `offset mod 8` (little-endian) of the 8-byte word
/// number `offset / 8`. Any shift of the stream (a hole, a duplicate, a reordering) changes
/// some word's number, hence some byte, within the next 8 bytes of a shifted range.
pub fn pattern_byte(offset: u64) -> u8 {
    ((offset >> 3) >> ((offset & 7) * 8)) as u8
}

/// `len` bytes of the pattern from `offset`.
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern_byte(offset + i)).collect()
}

/// The index in `buf` (read from stream `offset` on) of the first byte that is not the
/// pattern's, if any.
pub fn first_mismatch(offset: u64, buf: &[u8]) -> Option<usize> {
    buf.iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern_byte(offset + i as u64))
        .map(|(i, _)| i)
}

/// In-order bytes the receiving application got, by millisecond since the run's start.
#[derive(Clone, Debug, Default)]
pub struct Arrivals {
    /// (ms, cumulative bytes by the end of that ms), one entry per ms with a delivery.
    by_ms: Vec<(u64, u64)>,
    total: u64,
}

impl Arrivals {
    /// `bytes` more arrived at `ms` (calls in time order).
    pub fn saw(&mut self, ms: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.total += bytes;
        match self.by_ms.last_mut() {
            Some(last) if last.0 >= ms => last.1 = self.total,
            _ => self.by_ms.push((ms, self.total)),
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes delivered by the end of ms `ms`.
    pub fn by(&self, ms: u64) -> u64 {
        let n = self.by_ms.partition_point(|&(t, _)| t <= ms);
        n.checked_sub(1).map_or(0, |i| self.by_ms[i].1)
    }

    /// The longest time between two deliveries at or before `end_ms`, and from the last one
    /// to `end_ms`, counted from the first delivery: (gap ms, when it began ms). `None`
    /// when nothing arrived by `end_ms`.
    pub fn max_gap(&self, end_ms: u64) -> Option<(u64, u64)> {
        let mut times = self.by_ms.iter().map(|&(t, _)| t).take_while(|&t| t <= end_ms);
        let mut last = times.next()?;
        let mut best = (0, last);
        for t in times.chain(std::iter::once(end_ms)) {
            if t - last > best.0 {
                best = (t - last, last);
            }
            last = t;
        }
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_shows_holes_and_duplicates() {
        let p = pattern(0, 64 * 1024);
        assert_eq!(first_mismatch(0, &p), None);
        assert_eq!(first_mismatch(100, &pattern(100, 5000)), None);
        // A hole of one byte, of a word, of a 2 KiB block; a duplicate of 8 bytes.
        for skip in [1usize, 8, 2048] {
            let mut got = p[..1000].to_vec();
            got.extend_from_slice(&p[1000 + skip..3000 + skip]);
            let m = first_mismatch(0, &got).expect("a hole shows");
            assert!((1000..1008).contains(&m), "hole of {skip} found at {m}");
        }
        let mut dup = p[..1000].to_vec();
        dup.extend_from_slice(&p[992..3000]);
        assert!(first_mismatch(0, &dup).is_some_and(|m| (1000..1008).contains(&m)));
    }

    #[test]
    fn gaps_tail_and_totals() {
        let mut a = Arrivals::default();
        assert_eq!(a.max_gap(100), None);
        a.saw(10, 100);
        a.saw(10, 50);
        a.saw(12, 10);
        a.saw(40, 10);
        a.saw(45, 0);
        a.saw(50, 10);
        assert_eq!(a.total(), 180);
        assert_eq!(a.by(9), 0);
        assert_eq!(a.by(10), 150);
        assert_eq!(a.by(45), 170);
        // 12 → 40 is the longest while deliveries go on; silence to the end counts too.
        assert_eq!(a.max_gap(60), Some((28, 12)));
        assert_eq!(a.max_gap(100), Some((50, 50)));
        // Deliveries after the end are not part of the run.
        assert_eq!(a.max_gap(30), Some((18, 12)));
    }
}
