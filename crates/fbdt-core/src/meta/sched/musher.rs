//! MuSher ([M] sec. IV, Algorithm 1): a ratio scheduler (the FixedRatio pattern) whose
//! ratio r is searched for online, plus SCAN handling (the meta layer asks `scan_aware`);
//! BLOCKAGE handling — a subflow usable again as soon as it makes progress — is the meta
//! layer's rule for every scheduler, as in both kernels (meta/sender.rs `on_data_ack`).
//!
//! Every τ2 the monitor takes one sample: total throughput (Σ bytes the receiver got on each
//! subflow over τ2, from the DATA_ACK counters) and each subflow's send-queue occupancy
//! (bytes sent and not yet received). It triggers a search when
//! - throughput is more than ω below the reference for α samples in a row (capacity drop),
//!   or
//! - a subflow's send queue is more than β below its reference for λ samples in a row while
//!   throughput stays within ω of the reference (capacity rise), or
//! - `periodic` has passed since the last search.
//!
//! The search: T(r) over τ1, then probe r+δ and r−δ for τ1 each; walk in the better
//! direction in steps of δ while throughput improves by more than `margin`; then one probe
//! of δ/2 either side of the best; keep the best. Afterwards the references (and ω = 0.15 ·
//! throughput, β = 0.1 · buffer) are re-armed from the next sample.
//!
//! VAGUE items decided (all in [`MusherParams`]): initial r = 50; init_tput and init buffer =
//! the mean of the first 5 samples, then a first search; r clamped to [5, 95]; counters reset
//! after a search; no triggers within 2 s of the last search (the authors' code), periodic
//! searches excepted; comparison margin 5 Mbit/s (the authors' code). The slow-start guard is
//! not modelled: the simulator's subflows have no slow start.

use super::fixed::RatioPattern;
use super::{Scheduler, View};
use crate::path::PathId;
use crate::time::{Duration, Instant};

#[derive(Clone, Debug, PartialEq)]
pub struct MusherParams {
    pub tau1: Duration,
    pub tau2: Duration,
    pub delta: u8,
    pub alpha: u32,
    pub lambda: u32,
    pub omega_frac: f64,
    pub beta_frac: f64,
    pub periodic: Duration,
    pub quiet_after_search: Duration,
    pub margin_bps: f64,
    pub r_min: u8,
    pub r_max: u8,
    pub initial_r: u8,
    pub init_samples: u32,
}

impl Default for MusherParams {
    fn default() -> Self {
        MusherParams {
            tau1: Duration::from_millis(200),
            tau2: Duration::from_millis(100),
            delta: 10,
            alpha: 3,
            lambda: 3,
            omega_frac: 0.15,
            beta_frac: 0.1,
            periodic: Duration::from_millis(3000),
            quiet_after_search: Duration::from_millis(2000),
            margin_bps: 5e6,
            r_min: 5,
            r_max: 95,
            initial_r: 50,
            init_samples: 5,
        }
    }
}

/// One monitor sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub tput_bps: f64,
    pub queues: Vec<u64>,
}

/// The trigger logic alone (testable on synthetic samples).
#[derive(Clone, Debug, PartialEq)]
pub struct Monitor {
    pub ref_tput: f64,
    pub ref_queues: Vec<u64>,
    pub omega: f64,
    pub beta: f64,
    pub drops: u32,
    pub rises: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    CapacityDrop,
    CapacityRise,
}

impl Monitor {
    /// Re-arms from `s`: references, ω and β, counters.
    pub fn arm(p: &MusherParams, s: &Sample) -> Self {
        let buf = s.queues.iter().copied().max().unwrap_or(0);
        Monitor {
            ref_tput: s.tput_bps,
            ref_queues: s.queues.clone(),
            omega: p.omega_frac * s.tput_bps,
            beta: p.beta_frac * buf as f64,
            drops: 0,
            rises: 0,
        }
    }

    pub fn feed(&mut self, p: &MusherParams, s: &Sample) -> Option<Trigger> {
        if self.ref_tput - s.tput_bps > self.omega {
            self.drops += 1;
        } else {
            self.drops = 0;
        }
        let steady = (s.tput_bps - self.ref_tput).abs() <= self.omega;
        let queue_fell = s
            .queues
            .iter()
            .zip(&self.ref_queues)
            .any(|(&q, &r)| r as f64 - q as f64 > self.beta && self.beta > 0.0);
        if steady && queue_fell {
            self.rises += 1;
        } else {
            self.rises = 0;
        }
        if self.drops >= p.alpha {
            Some(Trigger::CapacityDrop)
        } else if self.rises >= p.lambda {
            Some(Trigger::CapacityRise)
        } else {
            None
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    /// Measuring T(r) at the current best.
    Base,
    /// Probing best ± δ; `up` tried first.
    Probe { up: bool },
    /// Walking in `dir` in steps of δ.
    Walk { dir: i8 },
    /// Fine probes of δ/2, `up` first.
    Fine { up: bool },
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Search {
    stage: Stage,
    best_r: u8,
    best_t: f64,
    /// Results of the ±δ probes.
    probe_up: f64,
    /// Best r when the fine probes began.
    centre: u8,
    /// The r being measured and since when.
    trying: u8,
    since: Instant,
    bytes_at_start: u64,
}

#[derive(Clone)]
enum Phase {
    Init {
        n: u32,
        tput: f64,
        queues: Vec<u64>,
    },
    Monitor(Monitor),
    Search(Search),
    /// Waiting for the first sample after a search to re-arm.
    Rearm,
}

#[derive(Clone)]
pub struct Musher {
    p: MusherParams,
    pattern: RatioPattern,
    phase: Phase,
    next_tick: Instant,
    last_search: Instant,
    /// Σ delivered counters at the last tick (per path, to survive counter resets).
    last_delivered: Vec<u64>,
    total_delivered: u64,
    /// `total_delivered` at the last sample.
    tick_mark: u64,
    last_tick_at: Instant,
    /// Searches started (for logs/tests).
    pub searches: u32,
}

impl Musher {
    pub fn new(p: MusherParams, now: Instant) -> Self {
        Musher {
            pattern: RatioPattern { r: p.initial_r, pos: 0 },
            next_tick: now + p.tau2,
            last_search: now,
            last_delivered: Vec::new(),
            total_delivered: 0,
            tick_mark: 0,
            last_tick_at: now,
            phase: Phase::Init {
                n: 0,
                tput: 0.0,
                queues: Vec::new(),
            },
            p,
            searches: 0,
        }
    }

    fn clamp(&self, r: i32) -> Option<u8> {
        (i32::from(self.p.r_min)..=i32::from(self.p.r_max))
            .contains(&r)
            .then_some(r as u8)
    }

    fn set_r(&mut self, r: u8) {
        self.pattern.r = r;
        self.pattern.pos = 0;
    }

    fn start_search(&mut self, now: Instant) {
        self.searches += 1;
        let r = self.pattern.r;
        self.phase = Phase::Search(Search {
            stage: Stage::Base,
            best_r: r,
            best_t: 0.0,
            probe_up: f64::NEG_INFINITY,
            centre: r,
            trying: r,
            since: now,
            bytes_at_start: self.total_delivered,
        });
    }

    /// Starts measuring best (or centre) + `off`, or returns false when out of range.
    fn try_rel(&mut self, s: &mut Search, from_centre: bool, off: i32, now: Instant) -> bool {
        let base = if from_centre { s.centre } else { s.best_r };
        self.try_r(s, i32::from(base) + off, now)
    }

    /// Starts measuring `r`, or returns false when it is out of range.
    fn try_r(&mut self, s: &mut Search, r: i32, now: Instant) -> bool {
        let Some(r) = self.clamp(r) else { return false };
        s.trying = r;
        s.since = now;
        s.bytes_at_start = self.total_delivered;
        self.set_r(r);
        true
    }

    fn finish_search(&mut self, best: u8, now: Instant) {
        self.set_r(best);
        self.last_search = now;
        self.phase = Phase::Rearm;
    }

    /// Advances the search with throughput `t` measured at `s.trying`.
    fn step_search(&mut self, mut s: Search, t: f64, now: Instant) {
        let better = t > s.best_t + self.p.margin_bps;
        let d = i32::from(self.p.delta);
        let half = i32::from(self.p.delta / 2).max(1);
        match s.stage {
            Stage::Base => {
                s.best_t = t;
                s.stage = Stage::Probe { up: true };
                if !self.try_rel(&mut s, false, d, now) {
                    s.stage = Stage::Probe { up: false };
                    if !self.try_rel(&mut s, false, -(d), now) {
                        return self.finish_search(s.best_r, now);
                    }
                }
            }
            Stage::Probe { up: true } => {
                s.probe_up = t;
                s.stage = Stage::Probe { up: false };
                if !self.try_rel(&mut s, false, -(d), now) {
                    return self.after_probes(s, f64::NEG_INFINITY, now);
                }
            }
            Stage::Probe { up: false } => return self.after_probes(s, t, now),
            Stage::Walk { dir } => {
                if better {
                    s.best_r = s.trying;
                    s.best_t = t;
                    if self.try_rel(&mut s, false, i32::from(dir) * d, now) {
                        self.phase = Phase::Search(s);
                        return;
                    }
                }
                return self.start_fine(s, now);
            }
            Stage::Fine { up } => {
                if better {
                    s.best_r = s.trying;
                    s.best_t = t;
                }
                if up {
                    s.stage = Stage::Fine { up: false };
                    if self.try_rel(&mut s, true, -(half), now) {
                        self.phase = Phase::Search(s);
                        return;
                    }
                }
                return self.finish_search(s.best_r, now);
            }
        }
        self.phase = Phase::Search(s);
    }

    fn after_probes(&mut self, mut s: Search, down_t: f64, now: Instant) {
        let d = i32::from(self.p.delta);
        let m = self.p.margin_bps;
        let dir: Option<i8> = if s.probe_up > s.best_t + m && s.probe_up >= down_t {
            Some(1)
        } else if down_t > s.best_t + m {
            Some(-1)
        } else {
            None
        };
        if let Some(dir) = dir {
            s.best_r = (i32::from(s.best_r) + i32::from(dir) * d) as u8;
            s.best_t = if dir > 0 { s.probe_up } else { down_t };
            s.stage = Stage::Walk { dir };
            if self.try_rel(&mut s, false, i32::from(dir) * d, now) {
                self.phase = Phase::Search(s);
                return;
            }
        }
        self.start_fine(s, now);
    }

    /// One probe of δ/2 either side of the best so far.
    fn start_fine(&mut self, mut s: Search, now: Instant) {
        let half = i32::from(self.p.delta / 2).max(1);
        s.centre = s.best_r;
        s.stage = Stage::Fine { up: true };
        if self.try_rel(&mut s, true, half, now) {
            self.phase = Phase::Search(s);
            return;
        }
        s.stage = Stage::Fine { up: false };
        if self.try_rel(&mut s, true, -(half), now) {
            self.phase = Phase::Search(s);
            return;
        }
        self.finish_search(s.best_r, now);
    }
}

impl Scheduler for Musher {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        self.pattern.select(v)
    }
    fn on_sent(&mut self, _path: PathId, len: u64) {
        self.pattern.advance(len);
    }
    fn scan_aware(&self) -> bool {
        true
    }
    fn next_tick(&self) -> Option<Instant> {
        Some(self.next_tick)
    }
    fn ratio(&self) -> Option<u8> {
        Some(self.pattern.r)
    }

    fn on_tick(&mut self, v: &View<'_>) {
        let now = v.now;
        if now < self.next_tick {
            return;
        }
        self.next_tick = now + self.p.tau2;
        self.last_delivered.resize(v.paths.len(), 0);
        for (p, last) in v.paths.iter().zip(self.last_delivered.iter_mut()) {
            // A reconnected subflow's counter restarts at 0.
            self.total_delivered += p.delivered.saturating_sub(*last);
            *last = p.delivered;
        }
        let dt = now.saturating_since(self.last_tick_at).as_secs_f64().max(1e-6);
        self.last_tick_at = now;
        let queues: Vec<u64> = v.paths.iter().map(|p| p.in_flight).collect();
        let phase = std::mem::replace(&mut self.phase, Phase::Rearm);
        match phase {
            Phase::Init { n, tput, queues: q } => {
                let t = self.tick_tput(dt);
                let n = n + 1;
                let tput = tput + t;
                let q: Vec<u64> = if q.is_empty() {
                    queues
                } else {
                    q.iter().zip(&queues).map(|(a, b)| a + b).collect()
                };
                if n >= self.p.init_samples {
                    // init_tput / init buffer: the mean of the first samples arms the
                    // monitor the search will re-arm anyway.
                    let _ = (tput / f64::from(n), q);
                    self.start_search(now);
                } else {
                    self.phase = Phase::Init { n, tput, queues: q };
                }
            }
            Phase::Rearm => {
                let t = self.tick_tput(dt);
                self.phase = Phase::Monitor(Monitor::arm(&self.p, &Sample { tput_bps: t, queues }));
            }
            Phase::Monitor(mut m) => {
                let t = self.tick_tput(dt);
                let trig = m.feed(&self.p, &Sample { tput_bps: t, queues });
                let quiet = now.saturating_since(self.last_search) < self.p.quiet_after_search;
                let periodic = now.saturating_since(self.last_search) >= self.p.periodic;
                if periodic || (trig.is_some() && !quiet) {
                    self.start_search(now);
                } else {
                    self.phase = Phase::Monitor(m);
                }
            }
            Phase::Search(s) => {
                let _ = self.tick_tput(dt);
                if now.saturating_since(s.since) >= self.p.tau1 {
                    let secs = now.saturating_since(s.since).as_secs_f64().max(1e-6);
                    let t = (self.total_delivered - s.bytes_at_start) as f64 * 8.0 / secs;
                    self.step_search(s, t, now);
                } else {
                    self.phase = Phase::Search(s);
                }
            }
        }
    }
}

impl Musher {
    /// Throughput of the last tick interval; consumes the interval's bytes.
    fn tick_tput(&mut self, dt: f64) -> f64 {
        let t = (self.total_delivered - self.tick_mark) as f64 * 8.0 / dt;
        self.tick_mark = self.total_delivered;
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(mbps: f64, q0: u64, q1: u64) -> Sample {
        Sample {
            tput_bps: mbps * 1e6,
            queues: vec![q0, q1],
        }
    }

    #[test]
    fn a_capacity_drop_triggers_after_alpha_samples() {
        let p = MusherParams::default();
        let mut m = Monitor::arm(&p, &sample(2000.0, 1_000_000, 1_000_000));
        // ω = 300 Mbit/s: a 200 Mbit/s dip never triggers.
        for _ in 0..10 {
            assert_eq!(m.feed(&p, &sample(1800.0, 1_000_000, 1_000_000)), None);
        }
        // 1500 (drop of 500 > ω): triggers on the third in a row, not before.
        assert_eq!(m.feed(&p, &sample(1500.0, 1_000_000, 1_000_000)), None);
        assert_eq!(m.feed(&p, &sample(1500.0, 1_000_000, 1_000_000)), None);
        assert_eq!(
            m.feed(&p, &sample(1500.0, 1_000_000, 1_000_000)),
            Some(Trigger::CapacityDrop)
        );
    }

    #[test]
    fn an_interrupted_drop_restarts_the_count() {
        let p = MusherParams::default();
        let mut m = Monitor::arm(&p, &sample(2000.0, 0, 0));
        for mbps in [1500.0, 1500.0, 1990.0, 1500.0, 1500.0] {
            assert_eq!(m.feed(&p, &sample(mbps, 0, 0)), None);
        }
        assert_eq!(m.feed(&p, &sample(1500.0, 0, 0)), Some(Trigger::CapacityDrop));
    }

    #[test]
    fn a_draining_queue_at_steady_throughput_is_a_capacity_rise() {
        let p = MusherParams::default();
        let mut m = Monitor::arm(&p, &sample(1000.0, 2_000_000, 500_000));
        // β = 0.1 · 2 MB = 200 kB. Queue of path 0 falls by 500 kB, throughput steady.
        assert_eq!(m.feed(&p, &sample(1010.0, 1_500_000, 500_000)), None);
        assert_eq!(m.feed(&p, &sample(990.0, 1_500_000, 500_000)), None);
        assert_eq!(
            m.feed(&p, &sample(1000.0, 1_500_000, 500_000)),
            Some(Trigger::CapacityRise)
        );
        // Throughput changing at the same time is not a rise.
        let mut m = Monitor::arm(&p, &sample(1000.0, 2_000_000, 500_000));
        for _ in 0..5 {
            assert_ne!(
                m.feed(&p, &sample(1500.0, 1_500_000, 500_000)),
                Some(Trigger::CapacityRise)
            );
        }
    }

    /// Drives a search with a synthetic throughput curve T(r) (peaked at `peak`).
    fn search_converges_to(peak: f64, start: u8) -> u8 {
        let p = MusherParams::default();
        let mut m = Musher::new(p.clone(), Instant::ZERO);
        m.set_r(start);
        let mut now = Instant::ZERO;
        m.start_search(now);
        for _ in 0..100 {
            let Phase::Search(s) = m.phase else { break };
            now = now + p.tau1;
            let r = f64::from(s.trying);
            let t = (2000.0 - 30.0 * (r - peak).abs()) * 1e6;
            m.total_delivered += (t / 8.0 * p.tau1.as_secs_f64()) as u64;
            m.step_search(s, t, now);
        }
        assert!(matches!(m.phase, Phase::Rearm), "search ended");
        m.pattern.r
    }

    #[test]
    fn probe_and_walk_finds_the_peak_within_a_fine_step() {
        assert_eq!(search_converges_to(77.0, 50), 75);
        assert_eq!(search_converges_to(23.0, 50), 25);
        assert_eq!(search_converges_to(50.0, 50), 50);
        assert_eq!(search_converges_to(99.0, 50), 95, "clamped to r_max");
    }
}
