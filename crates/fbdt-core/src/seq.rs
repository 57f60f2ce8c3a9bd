//! 32-bit FBDT sequence numbers (journal paper sec. IV-B): one per byte, a random initial
//! value agreed at setup, wrapping at 2^32.
//!
//! Internally both ends count stream offsets as `u64` (they never wrap); the wire carries
//! `isn + offset mod 2^32`. A receiver turns a wire number back into an offset relative to a
//! reference it already knows (its next expected offset), which is unambiguous as long as
//! every offset in flight lies within 2^31 bytes of the reference. Flow control bounds the
//! span in flight by the receive buffer, which is capped far below that (`MAX_RECV_BUFFER`).

/// A sequence number as carried on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

/// Maps stream offsets to wire sequence numbers for one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqSpace {
    isn: u32,
}

impl SeqSpace {
    pub fn new(isn: u32) -> Self {
        SeqSpace { isn }
    }
    pub fn isn(&self) -> u32 {
        self.isn
    }
    /// The wire number of the byte at `offset`.
    pub fn seq(&self, offset: u64) -> Seq {
        Seq(self.isn.wrapping_add(offset as u32))
    }
    /// The stream offset of `seq`, chosen as the one nearest `reference` (within ±2^31).
    /// Returns `None` if that offset would be negative.
    pub fn offset(&self, seq: Seq, reference: u64) -> Option<u64> {
        let ref_seq = self.seq(reference).0;
        let diff = seq.0.wrapping_sub(ref_seq) as i32 as i64;
        let off = reference as i128 + diff as i128;
        u64::try_from(off).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_2_pow_32() {
        let s = SeqSpace::new(u32::MAX - 1);
        assert_eq!(s.seq(0), Seq(u32::MAX - 1));
        assert_eq!(s.seq(2), Seq(0));
        assert_eq!(s.offset(Seq(0), 1), Some(2));
        assert_eq!(s.offset(Seq(u32::MAX), 3), Some(1));
    }

    #[test]
    fn negative_offsets_are_rejected() {
        let s = SeqSpace::new(100);
        assert_eq!(s.offset(Seq(99), 0), None);
    }

    proptest! {
        #[test]
        fn roundtrip_near_reference(isn: u32, reference in 0u64..(1 << 40), delta in -(1i64 << 30)..(1i64 << 30)) {
            let s = SeqSpace::new(isn);
            let off = reference as i64 + delta;
            prop_assume!(off >= 0);
            let off = off as u64;
            prop_assert_eq!(s.offset(s.seq(off), reference), Some(off));
        }
    }
}
