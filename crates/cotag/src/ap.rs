//! An AP: one incoming link from the gateway, one outgoing link to the device.
//!
//! Rules (paper §4.3 and Fig. 9, as in our spec):
//! 1. **Hold** cohort k until the first packet of a higher label arrives (normally k+1).
//! 2. **Forward** cohort k from then on, until the first packet of a label higher than the
//!    one that released it arrives (normally k+2); then **flush** what is left of k. Labels
//!    below the one being forwarded are gone by construction; a packet of a label below the
//!    highest seen is late (per-link FIFO makes that a protocol anomaly) and dropped.
//! 3. **High first**: unsent High combinations of k go out as received; after them, Low
//!    combinations re-encoded from everything still held of k. The AP never sends more
//!    combinations of a label than it accepted into its buffer for that label.
//! 4. **Buffer full** (`buffer_packets`): an incoming Low is dropped; an incoming High is
//!    dropped only if the buffer holds only High packets, otherwise the most recently received
//!    Low in the buffer is evicted to make room.
//! 5. **Liveness**: a cohort held for `liveness_us` without a higher label (the gateway went
//!    quiet, or sends nothing on this link) is released as if a higher label had arrived; it
//!    is then flushed by the first label above the first higher label to arrive. The driver
//!    may say sooner that no higher label is coming for now ([`Ap::handle_idle`], from the
//!    gateway's [`crate::Gateway::poll_idle`]): held cohorts are then released the same way.
//!
//! A label whose every allowed combination has been sent keeps only its counters, so its
//! packets do not occupy the buffer until the flush.
//!
//! `forward_labels` = w (default 1, the paper's rule 2) widens the forwarding window: cohort k
//! is flushed by the first label at least w above the one that released it (normally k+1+w);
//! older labels still go first. For measuring what the one-label window costs: the spec fixes
//! it at one label.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;

use crate::wire::{CodedPacket, Priority};
use crate::{gf, Error, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApConfig {
    /// Buffer size in coded packets.
    pub buffer_packets: usize,
    /// How long a cohort is held at most without a higher label, µs.
    pub liveness_us: u64,
    /// Labels a cohort is forwarded for after the one that released it (1: the paper's
    /// "until the first k+2 packet").
    pub forward_labels: u32,
    pub seed: u64,
}

impl Default for ApConfig {
    fn default() -> Self {
        ApConfig {
            // Two cohorts of 64 packets with as many Low extras, twice over.
            buffer_packets: 512,
            // 3 × the default period: a cohort is normally released one period after it
            // arrives; three leave room for jitter before declaring the gateway quiet.
            liveness_us: 3_000,
            forward_labels: 1,
            seed: 2,
        }
    }
}

impl ApConfig {
    pub fn validate(&self) -> Result<(), Error> {
        if self.buffer_packets == 0 {
            return Err(Error::Config("buffer_packets must be > 0".into()));
        }
        if self.liveness_us == 0 {
            return Err(Error::Config("liveness_us must be > 0".into()));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ApStats {
    pub received: u64,
    pub malformed: u64,
    /// Label below the highest seen (or already flushed).
    pub late: u64,
    /// n_k or payload length differ from the label's first packet.
    pub mismatched: u64,
    pub full_dropped_low: u64,
    pub full_dropped_high: u64,
    pub full_evicted_low: u64,
    /// Packets still buffered when their label was flushed.
    pub flushed: u64,
    pub forwarded_high: u64,
    pub forwarded_low: u64,
    /// Cohorts released by the liveness timeout rather than a higher label.
    pub liveness_releases: u64,
    /// Cohorts released because the gateway fell idle ([`Ap::handle_idle`]).
    pub idle_releases: u64,
}

/// What one AP did with one label ([`Ap::record_labels`]): the testbed joins these with the
/// gateway's and the device's records to say where a failed cohort lost its rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ApLabelRecord {
    pub label: u32,
    pub accepted_high: u32,
    pub accepted_low: u32,
    /// Incoming packets dropped, or buffered Lows evicted, with the buffer full.
    pub full_dropped_high: u32,
    pub full_dropped_low: u32,
    pub forwarded_high: u32,
    pub forwarded_low: u32,
    /// At the flush: Highs still unsent, and combinations the AP was still allowed to send
    /// (accepted − sent, Lows re-encoded included).
    pub flushed_high: u32,
    pub flushed_allowed: u32,
    /// Released without a higher label: by the liveness timeout or the gateway's idle signal.
    pub liveness_release: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for a higher label since the first packet arrived.
    Held { since: Instant },
    /// Being forwarded; flushed when a label above `released_by` arrives. `None`: released
    /// by the liveness timeout, no higher label seen yet.
    Forwarding { released_by: Option<u32> },
}

#[derive(Debug)]
struct Buffered {
    packet: CodedPacket,
    sent: bool,
    /// Arrival order, to find the most recent Low.
    seq: u64,
}

#[derive(Debug)]
struct Label {
    state: State,
    n: usize,
    symbol_len: usize,
    packets: Vec<Buffered>,
    accepted: usize,
    sent: usize,
}

#[derive(Debug)]
pub struct Ap {
    cfg: ApConfig,
    rng: ChaCha8Rng,
    labels: BTreeMap<u32, Label>,
    max_label: Option<u32>,
    buffered: usize,
    seq: u64,
    now: Instant,
    stats: ApStats,
    /// Per-label records, up to `log_cap` labels (off when 0).
    log: BTreeMap<u32, ApLabelRecord>,
    log_cap: usize,
}

impl Ap {
    pub fn new(cfg: ApConfig) -> Result<Ap, Error> {
        cfg.validate()?;
        Ok(Ap {
            rng: crate::rng(cfg.seed, 1),
            cfg,
            labels: BTreeMap::new(),
            max_label: None,
            buffered: 0,
            seq: 0,
            now: 0,
            stats: ApStats::default(),
            log: BTreeMap::new(),
            log_cap: 0,
        })
    }

    /// Keeps an [`ApLabelRecord`] for each of the first `cap` labels seen.
    pub fn record_labels(&mut self, cap: usize) {
        self.log_cap = cap;
    }

    /// The records, in label order.
    pub fn label_records(&self) -> impl Iterator<Item = &ApLabelRecord> {
        self.log.values()
    }

    fn note(&mut self, label: u32, f: impl FnOnce(&mut ApLabelRecord)) {
        if self.log.len() >= self.log_cap && !self.log.contains_key(&label) {
            return;
        }
        f(self.log.entry(label).or_insert_with(|| ApLabelRecord {
            label,
            ..ApLabelRecord::default()
        }));
    }

    pub fn stats(&self) -> &ApStats {
        &self.stats
    }

    /// Coded packets in the buffer.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// `(held, accepted, sent)` combinations of `label`, while the label is known.
    pub fn label_counts(&self, label: u32) -> Option<(usize, usize, usize)> {
        self.labels.get(&label).map(|l| (l.packets.len(), l.accepted, l.sent))
    }

    /// A coded packet arrives from the gateway. Malformed input is counted and returned as an
    /// error; every other drop is a rule and only counted.
    pub fn handle_recv(&mut self, bytes: &[u8], now: Instant) -> Result<(), Error> {
        self.now = self.now.max(now);
        let packet = CodedPacket::parse(bytes).inspect_err(|_| self.stats.malformed += 1)?;
        self.stats.received += 1;
        self.expire();
        let label = packet.label;
        if self.max_label.is_some_and(|m| label < m) {
            self.stats.late += 1;
            return Ok(());
        }
        if self.max_label.is_none_or(|m| label > m) {
            self.higher_label(label);
        }
        if let Some(l) = self.labels.get(&label) {
            if l.n != packet.coeffs.len() || l.symbol_len != packet.payload.len() {
                self.stats.mismatched += 1;
                return Ok(());
            }
        }
        if self.buffered >= self.cfg.buffer_packets && !self.make_room(packet.priority) {
            let high = packet.priority == Priority::High;
            self.note(label, |r| {
                if high {
                    r.full_dropped_high += 1
                } else {
                    r.full_dropped_low += 1
                }
            });
            return Ok(());
        }
        let high = packet.priority == Priority::High;
        self.note(label, |r| {
            if high {
                r.accepted_high += 1
            } else {
                r.accepted_low += 1
            }
        });
        let now = self.now;
        let entry = self.labels.entry(label).or_insert_with(|| Label {
            state: State::Held { since: now },
            n: packet.coeffs.len(),
            symbol_len: packet.payload.len(),
            packets: Vec::new(),
            accepted: 0,
            sent: 0,
        });
        entry.accepted += 1;
        entry.packets.push(Buffered {
            packet,
            sent: false,
            seq: self.seq,
        });
        self.seq += 1;
        self.buffered += 1;
        Ok(())
    }

    /// The next packet for the device, if the link may take one at `now`.
    pub fn poll_transmit(&mut self, now: Instant) -> Result<Option<Vec<u8>>, Error> {
        self.now = self.now.max(now);
        self.expire();
        let open =
            |l: &Label| matches!(l.state, State::Forwarding { .. }) && l.sent < l.accepted && !l.packets.is_empty();
        // Highs of every label being forwarded before any Low, oldest label first: with a
        // window of more than one label, an older cohort's Lows would otherwise delay the
        // next one's Highs (with one label there is only one being forwarded).
        let with_high = self.labels.iter().find_map(|(&k, l)| {
            (open(l) && l.packets.iter().any(|b| b.packet.priority == Priority::High && !b.sent)).then_some(k)
        });
        let Some(label) = with_high.or_else(|| self.labels.iter().find_map(|(&k, l)| open(l).then_some(k))) else {
            return Ok(None);
        };
        let Some(l) = self.labels.get_mut(&label) else {
            return Ok(None);
        };
        let mut high = false;
        let out = if let Some(b) = l
            .packets
            .iter_mut()
            .find(|b| b.packet.priority == Priority::High && !b.sent)
        {
            b.sent = true;
            high = true;
            self.stats.forwarded_high += 1;
            b.packet.to_bytes()?
        } else {
            // Σ r_i · (coeffs_i ‖ payload_i) over everything held of this label. Every packet
            // of a label has n coefficients and symbol_len payload bytes (checked on
            // receipt), so the two parts combine separately to the same bytes, without
            // copying each held packet into a concatenation for every Low sent.
            let mult: Vec<u8> = l.packets.iter().map(|_| gf::nonzero(&mut self.rng)).collect();
            let coeff_rows: Vec<&[u8]> = l.packets.iter().map(|b| b.packet.coeffs.as_slice()).collect();
            let payload_rows: Vec<&[u8]> = l.packets.iter().map(|b| b.packet.payload.as_slice()).collect();
            let combo = gf::combine_with(&mult, &coeff_rows);
            let payload = gf::combine_with(&mult, &payload_rows);
            self.stats.forwarded_low += 1;
            CodedPacket {
                label,
                priority: Priority::Low,
                coeffs: combo,
                payload,
            }
            .to_bytes()?
        };
        l.sent += 1;
        if l.sent >= l.accepted {
            // Nothing more may go out for this label: keep the counters, free the buffer.
            self.buffered -= l.packets.len();
            l.packets.clear();
        }
        self.note(label, |r| {
            if high {
                r.forwarded_high += 1
            } else {
                r.forwarded_low += 1
            }
        });
        Ok(Some(out))
    }

    /// The earliest liveness release.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.labels
            .values()
            .filter_map(|l| match l.state {
                State::Held { since } => Some(since.saturating_add(self.cfg.liveness_us)),
                State::Forwarding { .. } => None,
            })
            .min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.expire();
    }

    /// The gateway closed no cohort at the last period boundary (it has nothing to send for
    /// now): every held cohort is released at once, as by the liveness timeout — forwarded
    /// from now on and flushed by the first label above the next higher label — instead of
    /// waiting `liveness_us` for a label that is not coming.
    pub fn handle_idle(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let mut released = Vec::new();
        for (&k, l) in self.labels.iter_mut() {
            if let State::Held { .. } = l.state {
                l.state = State::Forwarding { released_by: None };
                self.stats.idle_releases += 1;
                released.push(k);
            }
        }
        for k in released {
            self.note(k, |r| r.liveness_release = true);
        }
    }

    /// Releases held cohorts whose liveness timeout passed.
    fn expire(&mut self) {
        let (now, live) = (self.now, self.cfg.liveness_us);
        let mut released = Vec::new();
        for (&k, l) in self.labels.iter_mut() {
            if let State::Held { since } = l.state {
                if now >= since.saturating_add(live) {
                    l.state = State::Forwarding { released_by: None };
                    self.stats.liveness_releases += 1;
                    released.push(k);
                }
            }
        }
        for k in released {
            self.note(k, |r| r.liveness_release = true);
        }
    }

    /// A packet of label `m`, above every label seen so far, arrives.
    fn higher_label(&mut self, m: u32) {
        self.max_label = Some(m);
        let mut flush = Vec::new();
        for (&k, l) in self.labels.range_mut(..m) {
            match l.state {
                State::Held { .. } | State::Forwarding { released_by: None } => {
                    l.state = State::Forwarding { released_by: Some(m) }
                }
                // Flushed by the first label more than `forward_labels` above the releasing
                // one (normally k+2).
                State::Forwarding { released_by: Some(j) }
                    if u64::from(m) >= u64::from(j) + u64::from(self.cfg.forward_labels) =>
                {
                    flush.push(k)
                }
                State::Forwarding { .. } => {}
            }
        }
        for k in flush {
            if let Some(l) = self.labels.remove(&k) {
                let unsent = l.packets.iter().filter(|b| !b.sent).count();
                self.stats.flushed += unsent as u64;
                self.buffered -= l.packets.len();
                let unsent_high = l
                    .packets
                    .iter()
                    .filter(|b| !b.sent && b.packet.priority == Priority::High)
                    .count() as u32;
                let allowed = l.accepted.saturating_sub(l.sent) as u32;
                self.note(k, |r| {
                    r.flushed_high = unsent_high;
                    r.flushed_allowed = allowed;
                });
            }
        }
    }

    /// The buffer is full and a packet of `incoming` priority arrives: true if it may be
    /// enqueued (after evicting the most recent Low), false if it is dropped.
    fn make_room(&mut self, incoming: Priority) -> bool {
        if incoming == Priority::Low {
            self.stats.full_dropped_low += 1;
            return false;
        }
        let newest_low = self
            .labels
            .iter()
            .flat_map(|(&k, l)| {
                l.packets
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.packet.priority == Priority::Low)
                    .map(move |(i, b)| (b.seq, k, i))
            })
            .max();
        let Some((_, k, i)) = newest_low else {
            self.stats.full_dropped_high += 1;
            return false;
        };
        if let Some(l) = self.labels.get_mut(&k) {
            l.packets.remove(i);
            self.buffered -= 1;
            self.stats.full_evicted_low += 1;
            self.note(k, |r| r.full_dropped_low += 1);
        }
        true
    }
}
