//! The device: collects coded packets from both links, decodes each cohort and releases the
//! original packets in label order.
//!
//! Combinations go into an incremental Gaussian elimination as they arrive (non-innovative
//! ones are counted and dropped). Cohort k — the next label to release — is:
//! * **released** as soon as its rank is full (the paper waits for a higher label on both
//!   links before decoding; with an incremental decoder full rank is final, so waiting would
//!   only add delay — the packets delivered are the same);
//! * **dropped whole** when a packet of a higher label has arrived on *each* link (per-link
//!   FIFO: nothing more of k can come) and the rank is short, or when nothing of k has arrived
//!   for `liveness_us` (one link carries nothing, or the flow went quiet) — for a label never
//!   seen at all, `liveness_us` after the first packet of a higher label.
//!
//! Labels are consecutive (the gateway numbers non-empty cohorts), so a label that never
//! arrives is noticed and given up like an undecodable one. Nothing is released out of label
//! order, and nothing of a label is released unless the whole cohort decoded.

use std::collections::{BTreeMap, VecDeque};

use crate::decoder::{Decoder, Insert};
use crate::wire::{self, CodedPacket};
use crate::{Error, Instant, LinkId, LINKS};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// How long the next cohort may wait for more combinations, µs.
    pub liveness_us: u64,
    /// Rows (innovative combinations) held across pending cohorts at most.
    pub max_rows: usize,
    /// Labels accepted ahead of the next one to release (bounds memory against a bad label).
    pub max_ahead: u32,
    /// The first label the gateway will use.
    pub first_label: u32,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            liveness_us: 3_000,
            max_rows: 4_096,
            max_ahead: 1_024,
            first_label: 0,
        }
    }
}

impl DeviceConfig {
    pub fn validate(&self) -> Result<(), Error> {
        if self.liveness_us == 0 || self.max_rows == 0 || self.max_ahead == 0 {
            return Err(Error::Config("liveness_us, max_rows and max_ahead must be > 0".into()));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DeviceStats {
    pub received: u64,
    pub malformed: u64,
    pub innovative: u64,
    pub non_innovative: u64,
    /// Label already released or given up.
    pub late: u64,
    /// n_k or payload length differ from the label's first packet.
    pub mismatched: u64,
    /// Dropped because `max_rows` were held or the label was too far ahead.
    pub dropped_full: u64,
    pub cohorts_decoded: u64,
    /// Cohorts dropped whole (rank short, never seen, or a decoded length that does not fit).
    pub cohorts_failed: u64,
    pub packets_delivered: u64,
    pub bytes_delivered: u64,
    /// Every coded byte received, headers included.
    pub bytes_received: u64,
    pub header_bytes_received: u64,
}

/// Why the device dropped a cohort whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum FailReason {
    /// A higher label arrived on each link with the rank short: nothing more could come.
    #[default]
    RankShort,
    /// Nothing of it arrived for `liveness_us` (or, never seen, since a later label).
    Liveness,
    /// Full rank, but a decoded length did not fit its symbol.
    BadLength,
}

/// One cohort the device dropped whole ([`Device::record_failures`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct FailedCohort {
    pub label: u32,
    /// Cohort size from the header (0: nothing of it ever arrived).
    pub n: u32,
    pub rank: u32,
    pub reason: FailReason,
    /// Combinations received per link before the cohort was dropped, and how many of those
    /// were innovative.
    pub received: [u32; LINKS],
    pub innovative: [u32; LINKS],
    /// Combinations of it that arrived per link after it was dropped.
    pub late: [u32; LINKS],
}

impl DeviceStats {
    /// Coded bytes received beyond the original bytes delivered: headers, length prefixes,
    /// padding, redundancy and whatever belonged to failed cohorts.
    pub fn overhead_bytes(&self) -> u64 {
        self.bytes_received.saturating_sub(self.bytes_delivered)
    }
}

#[derive(Debug)]
struct Pending {
    decoder: Decoder,
    last_arrival: Instant,
    received: [u32; LINKS],
    innovative: [u32; LINKS],
}

#[derive(Debug)]
pub struct Device {
    cfg: DeviceConfig,
    next: u32,
    pending: BTreeMap<u32, Pending>,
    /// Highest label seen per link.
    max_on_link: [Option<u32>; LINKS],
    rows: usize,
    out: VecDeque<Vec<u8>>,
    now: Instant,
    stats: DeviceStats,
    /// Failed cohorts, up to `log_cap` (off when 0).
    failures: BTreeMap<u32, FailedCohort>,
    log_cap: usize,
}

impl Device {
    pub fn new(cfg: DeviceConfig) -> Result<Device, Error> {
        cfg.validate()?;
        Ok(Device {
            next: cfg.first_label,
            cfg,
            pending: BTreeMap::new(),
            max_on_link: [None; LINKS],
            rows: 0,
            out: VecDeque::new(),
            now: 0,
            stats: DeviceStats::default(),
            failures: BTreeMap::new(),
            log_cap: 0,
        })
    }

    /// Keeps a [`FailedCohort`] record of each of the first `cap` cohorts dropped whole.
    pub fn record_failures(&mut self, cap: usize) {
        self.log_cap = cap;
    }

    /// The records, in label order.
    pub fn failures(&self) -> impl Iterator<Item = &FailedCohort> {
        self.failures.values()
    }

    pub fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// The next label to release.
    pub fn next_label(&self) -> u32 {
        self.next
    }

    pub fn handle_recv(&mut self, link: LinkId, bytes: &[u8], now: Instant) -> Result<(), Error> {
        if link >= LINKS {
            return Err(Error::Link(link));
        }
        self.now = self.now.max(now);
        let packet = CodedPacket::parse(bytes).inspect_err(|_| self.stats.malformed += 1)?;
        self.stats.received += 1;
        self.stats.bytes_received += bytes.len() as u64;
        self.stats.header_bytes_received += packet.header_bytes() as u64;
        self.accept(link, packet);
        // Only what arrived decides here; the liveness timeout waits for `handle_timeout`,
        // so a driver that reads a backlog (several datagrams at one `now`, after its thread
        // was held up) does not give up a cohort whose combinations are next in line on the
        // other link — on the testbed that lost 100–250 cohorts per 3 runs whose
        // combinations all arrived.
        self.resolve(false);
        Ok(())
    }

    fn accept(&mut self, link: LinkId, packet: CodedPacket) {
        let label = packet.label;
        if label < self.next {
            self.stats.late += 1;
            if let Some(f) = self.failures.get_mut(&label) {
                f.late[link] += 1;
            }
            return;
        }
        if label - self.next > self.cfg.max_ahead {
            self.stats.dropped_full += 1;
            return;
        }
        // Only labels within reach count as "seen on this link", so one absurd label cannot
        // make the device give up the next 2^32 cohorts.
        self.max_on_link[link] = Some(self.max_on_link[link].map_or(label, |m| m.max(label)));
        let now = self.now;
        let p = self.pending.entry(label).or_insert_with(|| Pending {
            decoder: Decoder::new(packet.coeffs.len(), packet.payload.len()),
            last_arrival: now,
            received: [0; LINKS],
            innovative: [0; LINKS],
        });
        p.last_arrival = now;
        p.received[link] += 1;
        if p.decoder.is_complete() {
            self.stats.non_innovative += 1;
            return;
        }
        if self.rows >= self.cfg.max_rows {
            self.stats.dropped_full += 1;
            return;
        }
        match p.decoder.insert(&packet.coeffs, &packet.payload) {
            Insert::Innovative => {
                self.stats.innovative += 1;
                p.innovative[link] += 1;
                self.rows += 1;
            }
            Insert::NonInnovative => self.stats.non_innovative += 1,
            Insert::Mismatch => self.stats.mismatched += 1,
        }
    }

    /// The next original packet, in order.
    #[must_use]
    pub fn poll_packet(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// When the next cohort will be given up if nothing more arrives.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.resolve(true);
    }

    fn deadline(&self) -> Option<Instant> {
        let basis = match self.pending.get(&self.next) {
            Some(p) => p.last_arrival,
            // Not seen yet: counted from the first packet of any later label.
            None => self.pending.values().map(|p| p.last_arrival).min()?,
        };
        Some(basis.saturating_add(self.cfg.liveness_us))
    }

    /// Releases or gives up cohorts at the head, in label order, while it can; the liveness
    /// timeout counts only with `timeouts`.
    fn resolve(&mut self, timeouts: bool) {
        loop {
            let head = self.next;
            let complete = self.pending.get(&head).is_some_and(|p| p.decoder.is_complete());
            let passed_on_every_link = self.max_on_link.iter().all(|m| m.is_some_and(|m| m > head));
            let timed_out = timeouts && self.deadline().is_some_and(|d| self.now >= d);
            if !(complete || passed_on_every_link || timed_out) {
                return;
            }
            let reason = if passed_on_every_link {
                FailReason::RankShort
            } else {
                FailReason::Liveness
            };
            match self.pending.remove(&head) {
                Some(p) => {
                    let rank = p.decoder.rank();
                    self.rows -= rank;
                    let mut failed = FailedCohort {
                        label: head,
                        n: p.decoder.cohort_size() as u32,
                        rank: rank as u32,
                        reason,
                        received: p.received,
                        innovative: p.innovative,
                        late: [0; LINKS],
                    };
                    match p.decoder.into_symbols() {
                        Some(symbols) => {
                            if !self.release(symbols) {
                                failed.reason = FailReason::BadLength;
                                self.log_failure(failed);
                            }
                        }
                        None => {
                            self.stats.cohorts_failed += 1;
                            self.log_failure(failed);
                        }
                    }
                }
                None => {
                    self.stats.cohorts_failed += 1;
                    self.log_failure(FailedCohort {
                        label: head,
                        reason,
                        ..FailedCohort::default()
                    });
                }
            }
            self.next = self.next.wrapping_add(1);
            if self.pending.is_empty() && !passed_on_every_link {
                return;
            }
        }
    }

    fn log_failure(&mut self, f: FailedCohort) {
        if self.failures.len() < self.log_cap {
            self.failures.insert(f.label, f);
        }
    }

    /// A decoded cohort: every symbol must carry a length that fits, or the cohort is dropped
    /// whole (false).
    fn release(&mut self, symbols: Vec<Vec<u8>>) -> bool {
        let packets: Option<Vec<&[u8]>> = symbols.iter().map(|s| wire::from_symbol(s)).collect();
        let Some(packets) = packets else {
            self.stats.cohorts_failed += 1;
            return false;
        };
        self.stats.cohorts_decoded += 1;
        for p in packets {
            self.stats.packets_delivered += 1;
            self.stats.bytes_delivered += p.len() as u64;
            self.out.push_back(p.to_vec());
        }
        true
    }
}
