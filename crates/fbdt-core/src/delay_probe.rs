//! A sampled probe of the in-order delivery delay: the time from a byte's *first*
//! transmission to its in-order delivery to the receiving application (docs/results.md).
//!
//! Only every `step`-th stream offset (a *boundary*: 0, step, 2·step, …) is followed, so the
//! memory is bounded by what is in flight, not by the stream's length:
//! - the sending side ([`DelayProbe::on_emit`]) marks a boundary the first time a frame
//!   covering it is emitted; later copies (retransmissions, redundant copies) are ignored.
//!   It remembers which boundaries were emitted only between the lowest one not yet
//!   emitted and the highest one emitted — flow control bounds that span by the receive
//!   buffer — and forgets every boundary below a fully emitted prefix;
//! - the receiving side ([`DelayProbe::on_in_order`]) marks a boundary when the in-order
//!   point passes it (byte `b` is readable by the application).
//!
//! Both sides queue marks until the driver takes them ([`DelayProbe::take_sent`],
//! [`DelayProbe::take_delivered`]); a driver that never takes them loses the newest (counted
//! in [`DelayProbe::lost_marks`]) rather than growing without bound. The two ends of a
//! stream are usually two `Connection`s: whoever owns both clocks (the simulator; the lab,
//! whose emulated endpoints share one machine's monotonic clock) joins their marks by
//! offset with a [`DelayJoin`].

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::seq::{Seq, SeqSpace};
use crate::time::Instant;
use crate::wire::{Data, FrameType, Header, MpData, HEADER_LEN};

/// Bytes of an emitted frame [`StreamProbe::on_frame`] needs: the header and the largest
/// sequence field (MP_DATA's 64-bit data sequence number).
pub const FRAME_HEAD_LEN: usize = MpData::OVERHEAD;

/// Distance between followed offsets, bytes: one FBDT segment by default, so even a small
/// transfer yields samples (a 1 MB object: 64) while a 30 s run at 1.5 Gbit/s keeps ~340 k.
pub const DEFAULT_STEP: u64 = 16 * 1024;
/// Most marks a side queues for the driver.
pub const MAX_QUEUED_MARKS: usize = 1 << 16;
/// Most boundaries the sending side tracks above its lowest unsent one (at the default step,
/// 1 GiB: past any receive buffer a session may have).
pub const MAX_TRACKED_SPAN: usize = 1 << 16;

/// A followed offset and when it was first sent or delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DelayMark {
    pub offset: u64,
    pub at: Instant,
}

/// Marks of one endpoint: first transmissions of its own stream, in-order deliveries of
/// the peer's.
#[derive(Clone, Debug)]
pub struct DelayProbe {
    step: u64,
    /// Index (offset / step) of the lowest boundary not yet emitted.
    unsent_floor: u64,
    /// Whether boundary `unsent_floor + i` was emitted.
    emitted: VecDeque<bool>,
    sent: VecDeque<DelayMark>,
    /// Index of the next boundary the in-order point has to pass.
    next_delivery: u64,
    delivered: VecDeque<DelayMark>,
    lost: u64,
}

impl DelayProbe {
    /// A probe following every `step`-th offset (`step` ≥ 1).
    pub fn new(step: u64) -> Self {
        DelayProbe {
            step: step.max(1),
            unsent_floor: 0,
            emitted: VecDeque::new(),
            sent: VecDeque::new(),
            next_delivery: 0,
            delivered: VecDeque::new(),
            lost: 0,
        }
    }

    pub fn step(&self) -> u64 {
        self.step
    }

    /// A frame carrying stream bytes `offset .. offset + len` was emitted at `now`.
    pub fn on_emit(&mut self, offset: u64, len: u64, now: Instant) {
        let end = offset.saturating_add(len);
        let first = offset.div_ceil(self.step).max(self.unsent_floor);
        let last = end.div_ceil(self.step); // exclusive
        for index in first..last {
            let Ok(slot) = usize::try_from(index - self.unsent_floor) else {
                self.lost += 1;
                continue;
            };
            if slot >= MAX_TRACKED_SPAN {
                self.lost += 1;
                continue;
            }
            if self.emitted.len() <= slot {
                self.emitted.resize(slot + 1, false);
            }
            if !self.emitted[slot] {
                self.emitted[slot] = true;
                let mark = DelayMark {
                    offset: index * self.step,
                    at: now,
                };
                Self::queue(&mut self.sent, &mut self.lost, mark);
            }
        }
        while self.emitted.front() == Some(&true) {
            self.emitted.pop_front();
            self.unsent_floor += 1;
        }
    }

    /// The receiver's in-order point (bytes readable or read so far) is `point` at `now`.
    pub fn on_in_order(&mut self, point: u64, now: Instant) {
        while self.next_delivery.saturating_mul(self.step) < point {
            let mark = DelayMark {
                offset: self.next_delivery * self.step,
                at: now,
            };
            Self::queue(&mut self.delivered, &mut self.lost, mark);
            self.next_delivery += 1;
        }
    }

    fn queue(q: &mut VecDeque<DelayMark>, lost: &mut u64, mark: DelayMark) {
        if q.len() < MAX_QUEUED_MARKS {
            q.push_back(mark);
        } else {
            *lost += 1;
        }
    }

    /// Whether `take_sent` or `take_delivered` would yield anything.
    pub fn has_marks(&self) -> bool {
        !self.sent.is_empty() || !self.delivered.is_empty()
    }

    /// First transmissions marked since the last call.
    pub fn take_sent(&mut self) -> impl Iterator<Item = DelayMark> + '_ {
        self.sent.drain(..)
    }

    /// In-order deliveries marked since the last call.
    pub fn take_delivered(&mut self) -> impl Iterator<Item = DelayMark> + '_ {
        self.delivered.drain(..)
    }

    /// Marks dropped because the driver did not take them in time, or because a frame
    /// lay further than [`MAX_TRACKED_SPAN`] boundaries above the lowest unsent one.
    pub fn lost_marks(&self) -> u64 {
        self.lost
    }

    /// Boundaries whose emission state is tracked now (memory in use).
    pub fn tracked_span(&self) -> usize {
        self.emitted.len()
    }
}

/// A [`DelayProbe`] that reads the stream range of each frame an endpoint emits (the hook
/// in `Connection::poll_transmit`): DATA's 32-bit sequence numbers become offsets near the
/// highest one seen, MP_DATA's data sequence numbers are offsets already.
#[derive(Clone, Debug)]
pub struct StreamProbe {
    pub marks: DelayProbe,
    seq: SeqSpace,
    highest: u64,
}

impl StreamProbe {
    /// For the stream whose first byte has sequence number `isn`.
    pub fn new(step: u64, isn: u32) -> Self {
        StreamProbe {
            marks: DelayProbe::new(step),
            seq: SeqSpace::new(isn),
            highest: 0,
        }
    }

    /// `head` holds the first bytes (up to [`FRAME_HEAD_LEN`]) of a frame just emitted at
    /// `now`; frames that carry no stream bytes are ignored.
    pub fn on_frame(&mut self, head: &[u8], now: Instant) {
        let Ok(h) = Header::parse(head) else { return };
        let field = |range: std::ops::Range<usize>| {
            head.get(range)
                .map(|b| b.iter().fold(0u64, |a, &x| a << 8 | u64::from(x)))
        };
        let (offset, len) = match h.kind {
            FrameType::Data => {
                let Some(seq) = field(HEADER_LEN..Data::OVERHEAD) else {
                    return;
                };
                let Some(offset) = self.seq.offset(Seq(seq as u32), self.highest) else {
                    return;
                };
                (offset, h.body_len.saturating_sub(Data::OVERHEAD - HEADER_LEN))
            }
            FrameType::MpData => {
                let Some(dsn) = field(HEADER_LEN..MpData::OVERHEAD) else {
                    return;
                };
                (dsn, h.body_len.saturating_sub(MpData::OVERHEAD - HEADER_LEN))
            }
            _ => return,
        };
        let len = len as u64;
        self.highest = self.highest.max(offset.saturating_add(len));
        self.marks.on_emit(offset, len, now);
    }
}

/// Most delay samples a [`SampleSet`] keeps: 4 Mi (32 MB), a 30 s run at 1.5 Gbit/s
/// needs a tenth of it.
pub const MAX_SAMPLES: usize = 1 << 22;

/// Delay samples (µs) in bounded memory: once [`MAX_SAMPLES`] are held, every other one
/// is dropped and from then on only every 2nd (then 4th, …) arriving one is kept —
/// systematic sampling, so a very long run keeps an evenly spread subset rather than
/// growing without bound or keeping only its start.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleSet {
    values: Vec<u64>,
    stride: u64,
    seen: u64,
    cap: usize,
}

impl Default for SampleSet {
    fn default() -> Self {
        Self::with_cap(MAX_SAMPLES)
    }
}

impl SampleSet {
    /// A set keeping at most `cap` (≥ 2) samples.
    pub fn with_cap(cap: usize) -> Self {
        SampleSet {
            values: Vec::new(),
            stride: 1,
            seen: 0,
            cap: cap.max(2),
        }
    }

    pub fn push(&mut self, us: u64) {
        if self.seen % self.stride == 0 {
            self.values.push(us);
            if self.values.len() >= self.cap {
                let mut index = 0;
                self.values.retain(|_| {
                    index += 1;
                    index % 2 == 1
                });
                self.stride *= 2;
            }
        }
        self.seen += 1;
    }

    /// The samples kept, in arrival order.
    pub fn values(&self) -> &[u64] {
        &self.values
    }

    /// Samples pushed (kept or not).
    pub fn seen(&self) -> u64 {
        self.seen
    }
}

/// Joins first-transmission marks with delivery marks by offset into delays.
#[derive(Clone, Debug, Default)]
pub struct DelayJoin {
    /// Sent, not yet delivered. Unordered: `finish` sorts what is left by offset.
    /// (FxHash: the join is looked up twice per followed offset; SipHash or a B-tree
    /// cost more.)
    in_flight: FxHashMap<u64, Instant>,
    delays_us: SampleSet,
    /// Delivery marks with no first-transmission mark (a lost mark).
    unmatched: u64,
}

/// What a [`DelayJoin`] measured over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DelaySamples {
    /// The delay of every followed offset that was delivered, µs, in delivery order (an
    /// evenly spread subset past [`MAX_SAMPLES`]: see [`SampleSet`]).
    pub delays_us: Vec<u64>,
    /// Followed offsets delivered (≥ `delays_us.len()`).
    pub delivered: u64,
    /// Followed offsets sent but not delivered by the end of the run: their age then, µs
    /// (a lower bound of their delay).
    pub undelivered_age_us: Vec<u64>,
    /// Delivery marks that had no first-transmission mark (left out).
    pub unmatched: u64,
}

impl DelaySamples {
    /// Every sample, µs: the undelivered ones capped at the end of the run, so a stuck byte
    /// shows in the tail instead of vanishing.
    pub fn capped_us(&self) -> impl Iterator<Item = u64> + '_ {
        self.delays_us.iter().chain(&self.undelivered_age_us).copied()
    }
}

impl DelayJoin {
    pub fn new() -> Self {
        Self::default()
    }

    /// A first transmission. Give a side's sent marks before its delivered ones of the
    /// same instant.
    pub fn sent(&mut self, mark: DelayMark) {
        self.in_flight.entry(mark.offset).or_insert(mark.at);
    }

    pub fn delivered(&mut self, mark: DelayMark) {
        match self.in_flight.remove(&mark.offset) {
            Some(sent) => self.delays_us.push(mark.at.saturating_since(sent).as_micros()),
            None => self.unmatched += 1,
        }
    }

    /// The samples at the end of a run (`end`): what is still in flight is undelivered,
    /// with its age at `end`.
    pub fn finish(self, end: Instant) -> DelaySamples {
        // In offset order, as the samples have always been listed.
        let mut left: Vec<(u64, Instant)> = self.in_flight.into_iter().collect();
        left.sort_unstable_by_key(|&(offset, _)| offset);
        DelaySamples {
            undelivered_age_us: left
                .into_iter()
                .map(|(_, sent)| end.saturating_since(sent).as_micros())
                .collect(),
            delivered: self.delays_us.seen(),
            delays_us: self.delays_us.values,
            unmatched: self.unmatched,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    fn offsets(marks: impl Iterator<Item = DelayMark>) -> Vec<(u64, u64)> {
        marks.map(|m| (m.offset, m.at.as_micros() / 1000)).collect()
    }

    #[test]
    fn only_the_first_transmission_of_a_boundary_counts() {
        let mut p = DelayProbe::new(100);
        p.on_emit(0, 150, t(1)); // covers 0 and 100
        p.on_emit(0, 150, t(5)); // a retransmission: nothing new
        p.on_emit(150, 50, t(6)); // 150..200: no boundary
        p.on_emit(100, 101, t(7)); // 100..201: 200 is new, 100 is not
        assert_eq!(offsets(p.take_sent()), vec![(0, 1), (100, 1), (200, 7)]);
        assert_eq!(p.take_sent().count(), 0, "taking empties the queue");
    }

    #[test]
    fn backward_emission_marks_out_of_order_and_forgets_the_emitted_prefix() {
        let mut p = DelayProbe::new(100);
        // A window's end first (FBDT's backward lane), then its front.
        p.on_emit(900, 100, t(1));
        p.on_emit(700, 200, t(2));
        assert_eq!(
            p.tracked_span(),
            10,
            "boundaries 0..=900 tracked while 0..600 are unsent"
        );
        p.on_emit(0, 700, t(3));
        assert_eq!(p.tracked_span(), 0, "a fully emitted prefix is forgotten");
        assert_eq!(
            offsets(p.take_sent()),
            vec![
                (900, 1),
                (700, 2),
                (800, 2),
                (0, 3),
                (100, 3),
                (200, 3),
                (300, 3),
                (400, 3),
                (500, 3),
                (600, 3)
            ]
        );
        // A late copy of forgotten boundaries is still a retransmission.
        p.on_emit(0, 1000, t(9));
        assert_eq!(p.take_sent().count(), 0);
    }

    #[test]
    fn delivery_marks_every_boundary_the_in_order_point_passes() {
        let mut p = DelayProbe::new(100);
        p.on_in_order(0, t(1));
        p.on_in_order(100, t(2)); // byte 0 delivered, byte 100 not yet
        p.on_in_order(350, t(3)); // 100, 200, 300
        p.on_in_order(350, t(4));
        assert_eq!(offsets(p.take_delivered()), vec![(0, 2), (100, 3), (200, 3), (300, 3)]);
    }

    #[test]
    fn memory_stays_bounded_on_a_huge_stream() {
        let mut p = DelayProbe::new(DEFAULT_STEP);
        // 64 GiB in 1 MiB frames, the driver taking marks every 64 frames.
        let mut sent = 0u64;
        let frames = (1u64 << 36) / (1 << 20);
        for k in 0..frames {
            p.on_emit(k << 20, 1 << 20, t(k));
            p.on_in_order((k + 1) << 20, t(k + 1));
            if k % 64 == 0 {
                sent += p.take_sent().count() as u64;
                p.take_delivered().for_each(drop);
            }
            assert!(p.tracked_span() <= 1);
        }
        sent += p.take_sent().count() as u64;
        assert_eq!(sent, (1u64 << 36) / DEFAULT_STEP);
        assert_eq!(p.lost_marks(), 0);
        // A driver that never takes marks: the queue stops at its cap and counts the rest.
        let mut q = DelayProbe::new(1);
        q.on_emit(0, MAX_QUEUED_MARKS as u64 * 2, t(0));
        assert_eq!(q.take_sent().count(), MAX_QUEUED_MARKS);
        assert_eq!(q.lost_marks(), MAX_QUEUED_MARKS as u64);
        // A frame absurdly far ahead is not tracked (and counted).
        let mut r = DelayProbe::new(1);
        r.on_emit(u64::MAX - 10, 5, t(0));
        assert_eq!(r.tracked_span(), 0);
        assert_eq!(r.lost_marks(), 5);
    }

    #[test]
    fn join_pairs_by_offset_and_caps_what_never_arrived() {
        let mut j = DelayJoin::new();
        for (off, ms) in [(0, 0), (100, 1), (200, 2), (300, 3)] {
            j.sent(DelayMark { offset: off, at: t(ms) });
        }
        j.sent(DelayMark { offset: 0, at: t(50) }); // a later copy: the first time stays
                                                    // Delivered out of sending order is fine (the join is by offset).
        j.delivered(DelayMark { offset: 100, at: t(21) });
        j.delivered(DelayMark { offset: 0, at: t(30) });
        j.delivered(DelayMark { offset: 999, at: t(30) }); // never sent: unmatched
        let s = j.finish(t(103));
        assert_eq!(s.delays_us, vec![20_000, 30_000]);
        assert_eq!(s.undelivered_age_us, vec![101_000, 100_000]);
        assert_eq!(
            s.capped_us().collect::<Vec<_>>(),
            vec![20_000, 30_000, 101_000, 100_000]
        );
        assert_eq!(s.unmatched, 1);
        assert_eq!(s.delivered, 2);
    }

    /// The join keeps what is in flight unordered (a hash map): the undelivered ages must
    /// still come out in offset order, whatever order the boundaries were sent in.
    #[test]
    fn undelivered_ages_are_listed_by_offset() {
        let mut j = DelayJoin::new();
        let step = DEFAULT_STEP;
        // Boundaries sent from both ends of windows, as FBDT's lanes do: 0, 99, 1, 98, …
        let order: Vec<u64> = (0..50).flat_map(|k| [k, 99 - k]).collect();
        for (i, &k) in order.iter().enumerate() {
            j.sent(DelayMark {
                offset: k * step,
                at: Instant::from_micros(i as u64),
            });
        }
        for k in (0..100).filter(|k| k % 3 == 0) {
            j.delivered(DelayMark {
                offset: k * step,
                at: t(1),
            });
        }
        let end = t(10);
        let s = j.finish(end);
        let sent_at = |k: u64| order.iter().position(|&o| o == k).unwrap() as u64;
        let expected: Vec<u64> = (0..100)
            .filter(|k| k % 3 != 0)
            .map(|k| end.as_micros() - sent_at(k))
            .collect();
        assert_eq!(s.undelivered_age_us, expected);
        assert_eq!(s.delivered, 34);
    }

    #[test]
    fn a_sample_set_thins_out_evenly_past_its_cap() {
        let mut s = SampleSet::with_cap(8);
        for v in 0..7 {
            s.push(v);
        }
        assert_eq!(s.values(), &[0, 1, 2, 3, 4, 5, 6]);
        for v in 7..40 {
            s.push(v);
        }
        // At 8 kept: every 2nd; at 8 again: every 4th; then every 8th…
        assert!(s.values().len() < 8);
        let stride = s.values()[1] - s.values()[0];
        assert!(s.values().windows(2).all(|w| w[1] - w[0] == stride), "{:?}", s.values());
        assert_eq!(s.values()[0], 0);
        assert_eq!(s.seen(), 40);
        // Bounded however long it runs.
        let mut big = SampleSet::with_cap(1000);
        (0..1_000_000u64).for_each(|v| big.push(v));
        assert!(big.values().len() < 1000);
        let mean = big.values().iter().sum::<u64>() as f64 / big.values().len() as f64;
        assert!((mean - 500_000.0).abs() < 5_000.0, "evenly spread: mean {mean}");
    }
}
