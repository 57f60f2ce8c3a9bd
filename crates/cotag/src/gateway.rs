//! The gateway: cohorts of period T, n_k High combinations round-robin over the two links,
//! then Low extras while a link asks for more ("taking").
//!
//! Cohorts and labels. Packets arriving in `[jT, (j+1)T)` form one cohort; it closes at
//! `(j+1)T` and is sent in the next interval, `[(j+1)T, (j+2)T)`. A cohort takes at most
//! `max_cohort` packets (bounding header and decoding cost); the rest wait for the next
//! boundary, so cohorts always close on period boundaries — the APs' hold/forward/flush
//! rhythm depends on labels arriving one period apart (an early-closed cohort left its
//! predecessor almost no forwarding time at the APs, measured in the harness). Labels count
//! closed cohorts 0, 1, 2, … — a period with no packets gets no label, so the APs and the
//! device never wait for a label that does not exist.
//!
//! Discard window: a cohort is discarded at the end of its send interval, one period after
//! it was formed — its boundary, or later when the driver comes late (the paper's
//! Fig. 8, "discard packets which arrived in [(k−2)T, (k−1)T)" during interval k, i.e. one
//! interval of sending; the text's (k+2)T would let cohort k's extras compete with cohort
//! k+1's High combinations for a whole further interval). High combinations not sent by then
//! are given up and counted: the cohort can still decode if Low extras on the other link made
//! up for them.
//!
//! Coefficients ([`HighCode`]): the n_k High combinations are any n_k independent rows, so a
//! cohort whose Highs all arrive always decodes (with uniformly random rows, n_k combinations
//! are dependent about once in 255 cohorts, which the harness saw as lost cohorts on loss-free
//! links). By default they are the unit rows — High `i` is source packet `i` itself, a
//! systematic code: encoding a High is a copy and a device that gets every High has nothing
//! to eliminate. The alternative is the rows of a random Cauchy matrix (every entry
//! non-zero), at n_k multiply-adds per High and per High decoded. Either way each AP holds an
//! n_k/2-dimensional span of Highs and the Lows are what cover a shortfall, so which cohorts
//! decode is the same. Low extras are uniform non-zero random combinations. A cohort holds at
//! most 128 packets (Cauchy's 2·n_k distinct elements; the header's n_k coefficient bytes).
//!
//! Round-robin: High combination `i` of label `k` goes to link `(k + i) mod 2`, so an odd
//! cohort does not always favour link 0. A link that has sent its share of Highs sends Low
//! extras, at most `low_factor · n_k` per cohort (shared by both links), High before Low across
//! cohorts, and never a label below the last one sent on that link (labels on a link do not
//! decrease — the APs and the device rely on it):
//! the paper bounds taking only by link capacity; on a fast wired hop that would be unbounded.
//! The Low budget is split between the links like the Highs: shared first-come, a driver that
//! drains link 0 before link 1 at the same instant (the testbed's in-memory hop) handed every
//! Low to link 0, so AP2 never held more than its half of the span and could not make up for
//! AP1's shortfall.
//!
//! Link budgets (optional, [`Gateway::set_link_budget`]): the driver may tell the gateway how
//! many coded packets each link carries in one period (the testbed's APs read it from the
//! schedule). With [`CohortSize::Budget`] a cohort takes at most what both links carry in one
//! period — a bigger one cannot be forwarded within its interval and the APs flush the rest,
//! which loses it whole — and the rest waits in the queue, where an overflow drops single
//! packets (a loss TCP recovers from cheaply). With [`HighSplit::Budget`] the Highs are split
//! in proportion to the links' budgets instead of alternating.

use std::collections::VecDeque;

use rand_chacha::ChaCha8Rng;

use crate::gf::{self, Cauchy};
use crate::wire::{self, CodedPacket, Priority};
use crate::{Error, Instant, LinkId, LINKS};

#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// The cohort period T, µs. The paper leaves it open; sweep it.
    pub period_us: u64,
    /// A cohort takes at most this many packets (1..=`gf::MAX_CAUCHY`); the rest wait for
    /// the next period. This caps the scheme at `max_cohort` packets per T.
    pub max_cohort: usize,
    /// Packets waiting for a cohort at most; beyond it arrivals are dropped (and counted).
    pub queue_packets: usize,
    /// Low extras per cohort, as a multiple of n_k (0 disables taking at the gateway).
    pub low_factor: f64,
    /// How a cohort's size is bounded besides `max_cohort`.
    pub cohort_size: CohortSize,
    /// How a cohort's High combinations are divided between the links.
    pub high_split: HighSplit,
    /// The coefficients of the High combinations.
    pub high_code: HighCode,
    /// With link budgets: carry each link's fraction of a packet from period to period, so
    /// a link carrying 2.4 packets per period is given 2, 2, 3, 2, 3, … (2.4 on average)
    /// rather than 2 every time. Without it ([`Gateway::set_link_budget`]'s floors) a slow
    /// link loses up to a packet per period: 17 % of a 2.4-packet link.
    pub budget_carry: bool,
    pub seed: u64,
}

/// The bound on a cohort's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CohortSize {
    /// `max_cohort` only (the paper: every packet of the period).
    #[default]
    MaxCohort,
    /// Also at most what both links carry in one period, as last set by
    /// [`Gateway::set_link_budget`] (at least one packet), minus `margin` packets left for
    /// Low extras; and each link's Lows at most the room its budget leaves after its Highs.
    Budget { margin: usize },
}

/// How the High combinations of a cohort are divided between the links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HighSplit {
    /// Alternating, starting with link `label mod 2` (the paper's example).
    #[default]
    RoundRobin,
    /// In proportion to the links' budgets (round-robin while no budget is set).
    Budget,
}

/// The coefficients of a cohort's n_k High combinations: both are n_k independent rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HighCode {
    /// Unit rows: High `i` is source packet `i` (a copy to encode, nothing to decode when
    /// every High arrives). At the paper's rate dense Highs cost the server loop a coding
    /// pass of n_k² · L multiply-adds at each boundary (docs/cotag.md, "Round 5").
    #[default]
    Systematic,
    /// Rows of a random Cauchy matrix: every coefficient non-zero.
    Cauchy,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            // 1 ms: at 1 Gbit/s of 1500-byte packets, ~83 packets per period.
            period_us: 1_000,
            // 128 coefficients: 136 header bytes + 2 length bytes, 9% of a 1500-byte packet;
            // 1.5 Gbit/s of 1500-byte packets at T = 1 ms.
            max_cohort: 128,
            queue_packets: 1_024,
            low_factor: 1.0,
            cohort_size: CohortSize::MaxCohort,
            high_split: HighSplit::RoundRobin,
            high_code: HighCode::Systematic,
            budget_carry: false,
            seed: 1,
        }
    }
}

impl GatewayConfig {
    pub fn validate(&self) -> Result<(), Error> {
        if self.period_us == 0 {
            return Err(Error::Config("period_us must be > 0".into()));
        }
        if self.max_cohort == 0 || self.max_cohort > gf::MAX_CAUCHY {
            return Err(Error::Config(format!(
                "max_cohort must be in 1..={}, got {}",
                gf::MAX_CAUCHY,
                self.max_cohort
            )));
        }
        if self.queue_packets < self.max_cohort {
            return Err(Error::Config(format!(
                "queue_packets ({}) must be at least max_cohort ({})",
                self.queue_packets, self.max_cohort
            )));
        }
        if !(self.low_factor.is_finite() && (0.0..=16.0).contains(&self.low_factor)) {
            return Err(Error::Config(format!(
                "low_factor must be in [0, 16], got {}",
                self.low_factor
            )));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GatewayStats {
    pub packets_in: u64,
    /// Arrivals dropped because `queue_packets` were waiting.
    pub queue_dropped: u64,
    pub bytes_in: u64,
    pub cohorts: u64,
    pub high_sent: u64,
    pub low_sent: u64,
    /// High combinations still unsent when their cohort was discarded.
    pub high_given_up: u64,
    /// Cohorts formed a period or more after their boundary (the driver came late): each
    /// got its send interval from the moment it was formed.
    pub late_closes: u64,
    /// Coded bytes sent, headers included.
    pub bytes_out: u64,
    /// Cohorts closed smaller than the queue allowed because of the links' budget.
    pub cohorts_budget_capped: u64,
    /// Period boundaries that closed no cohort after one that did ([`Gateway::poll_idle`]).
    pub idle_boundaries: u64,
}

/// What the gateway did with one cohort, per link (`GatewayConfig`'s log, see
/// [`Gateway::record_labels`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct GatewayLabelRecord {
    pub label: u32,
    pub n: u32,
    pub high_quota: [u32; LINKS],
    pub high_sent: [u32; LINKS],
    pub low_sent: [u32; LINKS],
    /// High combinations still unsent at the discard.
    pub high_given_up: [u32; LINKS],
}

#[derive(Debug)]
struct Cohort {
    label: u32,
    symbols: Vec<Vec<u8>>,
    /// Coefficients of the High combinations (`None`: systematic, unit rows).
    high: Option<Cauchy>,
    send_from: Instant,
    discard_at: Instant,
    high_quota: [usize; LINKS],
    high_sent: [usize; LINKS],
    /// Low extras each link may send: the cohort's budget split like the Highs.
    low_quota: [usize; LINKS],
    low_sent: [usize; LINKS],
}

impl Cohort {
    fn rows(&self) -> Vec<&[u8]> {
        self.symbols.iter().map(Vec::as_slice).collect()
    }
}

#[derive(Debug)]
pub struct Gateway {
    cfg: GatewayConfig,
    rng: ChaCha8Rng,
    /// Arrived packets not yet in a cohort.
    queue: VecDeque<Vec<u8>>,
    /// When the next cohort closes (a period boundary), while packets wait.
    boundary: Option<Instant>,
    /// The boundary after a cohort closed with the queue empty: if nothing arrives before
    /// it, no cohort closes there and the gateway is idle ([`Gateway::poll_idle`]).
    quiet_at: Option<Instant>,
    idle_pending: bool,
    ready: VecDeque<Cohort>,
    next_label: u32,
    /// The last label sent on each link.
    last_label: [Option<u32>; LINKS],
    now: Instant,
    stats: GatewayStats,
    /// Coded packets each link carries in one period, if the driver said.
    budget: Option<[f64; LINKS]>,
    /// Each link's fraction of a packet carried to the next cohort (`budget_carry`), [0, 1).
    credit: [f64; LINKS],
    /// Per-cohort records of discarded cohorts, up to `log_cap` (off when 0).
    log: Vec<GatewayLabelRecord>,
    log_cap: usize,
}

impl Gateway {
    pub fn new(cfg: GatewayConfig) -> Result<Gateway, Error> {
        cfg.validate()?;
        Ok(Gateway {
            rng: crate::rng(cfg.seed, 0),
            cfg,
            queue: VecDeque::new(),
            boundary: None,
            quiet_at: None,
            idle_pending: false,
            ready: VecDeque::new(),
            next_label: 0,
            last_label: [None; LINKS],
            now: 0,
            stats: GatewayStats::default(),
            budget: None,
            credit: [0.0; LINKS],
            log: Vec::new(),
            log_cap: 0,
        })
    }

    /// Keeps a [`GatewayLabelRecord`] of each of the next `cap` discarded cohorts (the
    /// testbed joins them with the APs' and the device's to say why a cohort failed).
    pub fn record_labels(&mut self, cap: usize) {
        self.log_cap = cap;
    }

    pub fn label_records(&self) -> &[GatewayLabelRecord] {
        &self.log
    }

    /// How many coded packets each link carries in one period from now on (fractions
    /// allowed; negative or non-finite counts as 0). Used by [`CohortSize::Budget`] and
    /// [`HighSplit::Budget`] at the next cohort closed.
    pub fn set_link_budget(&mut self, per_period: [f64; LINKS]) {
        self.budget = Some(per_period.map(|b| if b.is_finite() { b.max(0.0) } else { 0.0 }));
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &GatewayStats {
        &self.stats
    }

    /// Packets waiting for a cohort (the gateway's queue).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Cohorts closed and not yet discarded.
    pub fn cohorts_pending(&self) -> usize {
        self.ready.len()
    }

    /// A packet of the flow arrives at `now` (µs, non-decreasing; an earlier `now` counts as
    /// the latest one seen).
    pub fn handle_packet(&mut self, packet: &[u8], now: Instant) -> Result<(), Error> {
        if packet.is_empty() || packet.len() > wire::MAX_PACKET {
            return Err(Error::PacketLen(packet.len()));
        }
        self.advance(now);
        // Before `quiet_at` (advance cleared it otherwise): a cohort closes there after all.
        self.quiet_at = None;
        if self.queue.len() >= self.cfg.queue_packets {
            self.stats.queue_dropped += 1;
            return Ok(());
        }
        self.queue.push_back(packet.to_vec());
        self.stats.packets_in += 1;
        self.stats.bytes_in += packet.len() as u64;
        let t = self.cfg.period_us;
        self.boundary.get_or_insert((self.now / t + 1) * t);
        Ok(())
    }

    /// The next coded packet for `link` if it has one to send at `now`: a High combination of
    /// the oldest cohort still owing this link its share, else a Low extra. `None` when there
    /// is nothing (ask again after the next input or timeout).
    pub fn poll_transmit(&mut self, link: LinkId, now: Instant) -> Result<Option<Vec<u8>>, Error> {
        if link >= LINKS {
            return Err(Error::Link(link));
        }
        self.advance(now);
        let now = self.now;
        // Labels on one link never decrease: APs and the device read a higher label as "the
        // previous cohort is over on this link".
        let floor = self.last_label[link];
        let sendable = |c: &Cohort| c.send_from <= now && now < c.discard_at && floor.is_none_or(|f| c.label >= f);
        let pick = self
            .ready
            .iter()
            .position(|c| sendable(c) && c.high_sent[link] < c.high_quota[link])
            .map(|i| (i, Priority::High))
            .or_else(|| {
                self.ready
                    .iter()
                    .position(|c| {
                        sendable(c) && c.high_sent[link] >= c.high_quota[link] && c.low_sent[link] < c.low_quota[link]
                    })
                    .map(|i| (i, Priority::Low))
            });
        let Some((i, priority)) = pick else {
            return Ok(None);
        };
        let c = &mut self.ready[i];
        self.last_label[link] = Some(c.label);
        let (coeffs, payload) = match priority {
            Priority::High => {
                let i: usize = c.high_sent.iter().sum();
                c.high_sent[link] += 1;
                match &c.high {
                    Some(cauchy) => {
                        let coeffs = cauchy.row(i);
                        let payload = gf::combine_with(&coeffs, &c.rows());
                        (coeffs, payload)
                    }
                    None => {
                        let mut coeffs = vec![0; c.symbols.len()];
                        coeffs[i] = 1;
                        (coeffs, c.symbols[i].clone())
                    }
                }
            }
            Priority::Low => {
                c.low_sent[link] += 1;
                gf::combine(&mut self.rng, &c.rows())
            }
        };
        let bytes = CodedPacket {
            label: c.label,
            priority,
            coeffs,
            payload,
        }
        .to_bytes()?;
        match priority {
            Priority::High => self.stats.high_sent += 1,
            Priority::Low => self.stats.low_sent += 1,
        }
        self.stats.bytes_out += bytes.len() as u64;
        Ok(Some(bytes))
    }

    /// True once for each stretch of silence: a period boundary passed that closed no cohort
    /// although the one before did (nothing arrived in the period). No label follows the
    /// last one sent until packets arrive again, so an AP holding that label would wait for
    /// its liveness timeout (rule 5, the paper's gap) — the driver tells the APs at once
    /// ([`crate::Ap::handle_idle`]), at the time the next label would have reached them.
    /// Without it a window-limited TCP flow, which goes quiet after each flight until its
    /// ACKs return, had the last cohort of every flight held for the whole liveness timeout.
    #[must_use]
    pub fn poll_idle(&mut self) -> bool {
        std::mem::take(&mut self.idle_pending)
    }

    /// When the gateway next needs `handle_timeout` (a period ends, a cohort's send interval
    /// starts or it is discarded, the gateway falls idle). Links should be polled again at
    /// that time too.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let cohorts = self.ready.iter().map(|c| {
            if c.send_from > self.now {
                c.send_from
            } else {
                c.discard_at
            }
        });
        self.boundary.into_iter().chain(self.quiet_at).chain(cohorts).min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
    }

    /// The next period boundary, where a cohort closes (`None` while the queue is empty).
    pub fn next_boundary(&self) -> Option<Instant> {
        self.boundary
    }

    /// Forms cohorts at the period boundaries passed and discards cohorts whose send interval
    /// has ended.
    fn advance(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let t = self.cfg.period_us;
        while let Some(b) = self.boundary.filter(|&b| self.now >= b) {
            // A driver that comes late (a real-time loop held up for more than a period)
            // finds boundaries long passed: the cohort is formed now, gets its one period of
            // sending from now, and the boundaries passed meanwhile close nothing more — a
            // cohort closed with its send interval already over was discarded unsent, all
            // of it lost, and several closed at once flushed each other at the APs.
            let late = self.now >= b + t;
            self.close(b, self.now.max(b) + t);
            if late {
                self.stats.late_closes += 1;
            }
            let next = if late { (self.now / t + 1) * t } else { b + t };
            self.boundary = (!self.queue.is_empty()).then_some(next);
            self.quiet_at = self.boundary.is_none().then_some(next);
        }
        if self.quiet_at.is_some_and(|q| self.now >= q) {
            self.quiet_at = None;
            self.idle_pending = true;
            self.stats.idle_boundaries += 1;
        }
        while let Some(c) = self.ready.front() {
            if c.discard_at > self.now {
                break;
            }
            let unsent: usize = (0..LINKS).map(|l| c.high_quota[l] - c.high_sent[l]).sum();
            self.stats.high_given_up += unsent as u64;
            if self.log.len() < self.log_cap {
                let u32s = |a: [usize; LINKS]| a.map(|x| x as u32);
                self.log.push(GatewayLabelRecord {
                    label: c.label,
                    n: c.symbols.len() as u32,
                    high_quota: u32s(c.high_quota),
                    high_sent: u32s(c.high_sent),
                    low_sent: u32s(c.low_sent),
                    high_given_up: u32s([0, 1].map(|l| c.high_quota[l] - c.high_sent[l])),
                });
            }
            self.ready.pop_front();
        }
    }

    /// Cohort of up to `max_cohort` queued packets, sent from `send_from` until `discard_at`.
    fn close(&mut self, send_from: Instant, discard_at: Instant) {
        let mut n = self.queue.len().min(self.cfg.max_cohort);
        let budget = self.period_budget();
        if let (CohortSize::Budget { margin }, Some(b)) = (self.cfg.cohort_size, budget) {
            // At least one packet, so a link that reads 0 (an outage) cannot stop the flow
            // for good: the liveness timeouts and TCP deal with what it loses.
            // Whole packets per link: an AP forwards only whole packets in its window, so
            // 7.6 + 8.9 carry 15, not 16 (on the testbed the 16th was flushed every ~10th
            // period, each time losing a cohort).
            let whole: usize = b.iter().map(|x| x.floor() as usize).sum();
            let fits = whole.saturating_sub(margin).max(1);
            if fits < n {
                n = fits;
                self.stats.cohorts_budget_capped += 1;
            }
        }
        if n == 0 {
            return;
        }
        let high = match self.cfg.high_code {
            HighCode::Systematic => None,
            HighCode::Cauchy => match Cauchy::random(&mut self.rng, n) {
                Some(c) => Some(c),
                None => return, // n <= max_cohort <= MAX_CAUCHY: not reached
            },
        };
        let packets: Vec<Vec<u8>> = self.queue.drain(..n).collect();
        let symbol_len = packets.iter().map(Vec::len).max().unwrap_or(0) + wire::LEN_PREFIX;
        // Every packet is at most MAX_PACKET long (checked on input), so each fits.
        let symbols: Vec<Vec<u8>> = packets.iter().filter_map(|p| wire::to_symbol(p, symbol_len)).collect();
        let label = self.next_label;
        self.next_label = self.next_label.wrapping_add(1);
        let high_quota = self.split(label, n, budget);
        let low_budget = (self.cfg.low_factor * n as f64) as usize;
        // Lows follow the Highs' split: a link's AP re-encodes from what it holds, so each
        // needs full-span Lows of its own to cover the other's shortfall.
        let mut low_quota = [
            low_budget * high_quota[0] / n,
            low_budget - low_budget * high_quota[0] / n,
        ];
        if let (CohortSize::Budget { .. }, Some(b)) = (self.cfg.cohort_size, budget) {
            // "Taking" is sending extras with the capacity left: with the links' budgets
            // known, a link gets no more Lows than its window has room for after its Highs.
            // Lows beyond that are flushed unsent by the AP, after costing the gateway (and
            // the AP re-encoding them) a coding pass each — on the testbed's 2 cores that
            // cost delayed the pacers and lost cohorts.
            for l in 0..LINKS {
                let spare = (b[l].floor() as usize).saturating_sub(high_quota[l]);
                low_quota[l] = low_quota[l].min(spare);
            }
        }
        self.stats.cohorts += 1;
        self.ready.push_back(Cohort {
            label,
            symbols,
            high,
            send_from,
            discard_at,
            high_quota,
            high_sent: [0; LINKS],
            // floor: a budget of 1.0 × n_k never exceeds n_k extras.
            low_quota,
            low_sent: [0; LINKS],
        });
    }

    /// What each link carries in the period of the cohort being closed: the budget the
    /// driver set or, with `budget_carry`, whole packets out of the budget plus the fraction
    /// left from the cohorts before (the fraction left over is kept, whole packets a cohort
    /// did not use are not: an idle link banks no more than one packet).
    fn period_budget(&mut self) -> Option<[f64; LINKS]> {
        let b = self.budget?;
        if !self.cfg.budget_carry {
            return Some(b);
        }
        let mut whole = [0.0; LINKS];
        for l in 0..LINKS {
            let c = self.credit[l] + b[l];
            whole[l] = c.floor();
            self.credit[l] = c - whole[l];
        }
        Some(whole)
    }

    /// High combinations per link for a cohort of `n` with `label`, given the links' budgets
    /// for its period.
    fn split(&self, label: u32, n: usize, budget: Option<[f64; LINKS]>) -> [usize; LINKS] {
        let mut quota = [0; LINKS];
        match (self.cfg.high_split, budget) {
            (HighSplit::Budget, Some(b)) if b.iter().sum::<f64>() > 0.0 => {
                // In proportion to the whole packets each link carries, so a cohort that
                // fits (n ≤ Σ⌊b_l⌋) never gives a link more than ⌊b_l⌋; by the fractions
                // while neither carries a whole one. Largest remainder; a tie goes to link
                // label mod 2, so equal budgets alternate like round-robin.
                let whole = b.map(f64::floor);
                let b = if whole.iter().sum::<f64>() > 0.0 { whole } else { b };
                let total: f64 = b.iter().sum();
                let exact = b.map(|x| n as f64 * x / total);
                quota = exact.map(|x| x.floor() as usize);
                let left = n - quota.iter().sum::<usize>();
                if left > 0 {
                    let first = label as usize % LINKS;
                    let other = 1 - first;
                    let frac = |l: usize| exact[l] - quota[l] as f64;
                    let pick = if frac(other) > frac(first) { other } else { first };
                    quota[pick] += left;
                }
            }
            _ => {
                for i in 0..n {
                    quota[(label as usize + i) % LINKS] += 1;
                }
            }
        }
        quota
    }
}
