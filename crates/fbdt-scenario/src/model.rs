//! The scenario as a user writes it. Field names equal the TOML keys, so a `Scenario`
//! serialised into a result file reads like the file it came from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One scenario: paths, a timeline of events, and the paper's numbers to compare with.
///
/// `Deserialize` reads back what `Serialize` wrote (e.g. the scenario embedded in a result
/// JSON) without checks; user files go through [`Scenario::from_toml_str`] / [`Scenario::load`],
/// which validate and report lines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub duration_s: f64,
    pub seed: u64,
    /// Linux congestion-control name; the papers ran Cubic, this kernel defaults to BBR.
    pub congestion_control: String,
    #[serde(rename = "path")]
    pub paths: Vec<PathSpec>,
    #[serde(rename = "event", default)]
    pub events: Vec<Event>,
    /// The paper's numbers in Mbit/s keyed by scheme name ("tcp:wifi", "mptcp", "fbdt").
    #[serde(default)]
    pub reference: BTreeMap<String, f64>,
    /// A link the named paths' traffic joins (absent: every path is disjoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<Bottleneck>,
}

/// A shared bottleneck: the data direction of every path in `paths` passes one more link
/// of `rate_mbps` with one drop-tail queue of `queue_packets`, and `competing_tcp`
/// single-path TCP flows (the scenario's congestion control, backlogged for the whole run)
/// pass it too, with a one-way delay of `competing_delay_ms`. The simulator's TCP model and
/// the testbed carry it (docs/scenarios.md); the pipe model refuses it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bottleneck {
    /// Names of the paths that join the link (at least one, each once).
    pub paths: Vec<String>,
    /// The shared link's rate, unscaled (the run's scale multiplies it as every rate).
    pub rate_mbps: f64,
    /// The shared queue in 1500-byte packets.
    #[serde(default = "default_queue_packets")]
    pub queue_packets: u32,
    /// Single-path TCP flows through the same link, besides the scheme's.
    #[serde(default)]
    pub competing_tcp: u32,
    /// One-way delay of each competing flow (default: the least of the joined paths').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub competing_delay_ms: Option<f64>,
}

/// One emulated link between client and server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathSpec {
    pub name: String,
    pub rate: RateSpec,
    /// One-way delay, applied in each direction.
    pub delay_ms: f64,
    /// Per-packet drop probability on the data (server → client) direction.
    #[serde(default)]
    pub loss: f64,
    /// Bottleneck queue in 1500-byte packets.
    #[serde(default = "default_queue_packets")]
    pub queue_packets: u32,
    /// Radio power saving (off when absent): see [`RadioSleep`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radio: Option<RadioSleep>,
    /// Delivery in bursts (off when absent): see [`Bursts`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursts: Option<Bursts>,
}

/// A path that delivers in bursts, as a radio's frame aggregation or scheduler slots or a
/// host that is paused now and then make it: for the first `hold_ms` of every `every_ms`
/// (counted from the start of the run) the path delivers nothing, in either direction, and
/// what reached its end in that time is delivered together when the hold ends. The rate is
/// unchanged: a hold adds delay (at most `hold_ms`), it takes no capacity away.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bursts {
    /// The period, > 0.
    pub every_ms: f64,
    /// The hold at the start of each period, > 0 and < `every_ms`.
    pub hold_ms: f64,
}

impl Bursts {
    /// When something that reaches the path's end `t_s` after the start is delivered.
    pub fn release_s(&self, t_s: f64) -> f64 {
        let (every, hold) = (self.every_ms / 1e3, self.hold_ms / 1e3);
        let phase = t_s.rem_euclid(every);
        if phase < hold { t_s - phase + hold } else { t_s }
    }
}

/// A radio that dozes when idle (802.11 power save; a WiGig chipset also drops its beam):
/// once nothing has been sent on a direction of the path for `idle_timeout_ms`, the next
/// packet waits `wake_ms` before it is sent. Each direction sleeps on its own.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RadioSleep {
    /// Idle time after which the radio sleeps, > 0.
    pub idle_timeout_ms: f64,
    /// What the first packet after a sleep waits, ≥ 0.
    pub wake_ms: f64,
}

pub(crate) fn default_queue_packets() -> u32 {
    // 1000 packets = 1.5 MB: 6.7 ms at 1.8 Gbit/s, 27 ms at 450 Mbit/s — enough for Cubic to
    // fill the link without bufferbloat dominating the RTT.
    1000
}

pub(crate) fn default_bin_ms() -> f64 {
    100.0
}

/// The Markov channel of paper 003 steps every 100 ms.
pub(crate) fn default_markov_step_s() -> f64 {
    0.1
}

/// How a path's rate evolves before events are applied. All rates in Mbit/s, unscaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum RateSpec {
    /// A fixed rate.
    Constant { mbps: f64 },
    /// Piecewise-constant steps; `steps[0].at_s` must be 0. With `period_s` the pattern
    /// repeats (every `period_s`, which must exceed the last `at_s`), otherwise the last step
    /// holds to the end.
    Steps {
        steps: Vec<RateStep>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        period_s: Option<f64>,
    },
    /// A new uniform sample in `[min_mbps, max_mbps]` every `step_s` (seeded).
    Random { min_mbps: f64, max_mbps: f64, step_s: f64 },
    /// Line-of-sight / blocked alternation (a robot turning): `high_s` seconds drawn from the
    /// high range, then `low_s` seconds from the low range, resampled every `step_s`, repeated.
    Alternating {
        high_min_mbps: f64,
        high_max_mbps: f64,
        high_s: f64,
        low_min_mbps: f64,
        low_max_mbps: f64,
        low_s: f64,
        step_s: f64,
        /// Start in the low (nLoS) phase instead of the high one.
        #[serde(default)]
        start_low: bool,
    },
    /// Paper 003's mmWave channel: the path is High or Low, a Markov chain stepped every
    /// `step_s` that flips with probability `flip_p`; in each step the rate is a Gaussian
    /// sample of the state's mean and standard deviation (clamped at 0). With `pair`, two
    /// paths share one joint chain whose High/Low states have cross-correlation
    /// `correlation` (both paths must name each other and agree on `flip_p`, `correlation`
    /// and `step_s`).
    Markov {
        high_mean_mbps: f64,
        high_sd_mbps: f64,
        low_mean_mbps: f64,
        low_sd_mbps: f64,
        flip_p: f64,
        #[serde(default)]
        correlation: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pair: Option<String>,
        #[serde(default = "default_markov_step_s")]
        step_s: f64,
    },
    /// A mahimahi trace (one line per 1500-byte delivery opportunity, ms), looped and binned
    /// into `bin_ms` steps. A relative `file` is relative to the scenario file.
    Trace {
        file: String,
        #[serde(default = "default_bin_ms")]
        bin_ms: f64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateStep {
    pub at_s: f64,
    pub mbps: f64,
}

/// Something that happens to one path. The effect lives in `[at_s, until_s)`; with
/// `every_s` an outage / scan / rate_factor repeats at `at_s + k·every_s` while that start is
/// before `until_s` (and before the end of the run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at_s: f64,
    pub path: String,
    #[serde(flatten)]
    pub kind: EventKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_s: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// The path carries nothing (blockage) for `duration_s`; data in flight waits.
    Outage { duration_s: f64 },
    /// Replace the model's rate from `at_s` (until `until_s`, or for good).
    Rate { mbps: f64 },
    /// Replace the path's loss from `at_s` (until `until_s`, or for good).
    Loss { loss: f64 },
    /// Replace the path's one-way delay from `at_s` (until `until_s`, or for good).
    Delay { delay_ms: f64 },
    /// WiFi off-channel scan: rate 0 for `duration_s`, but flagged (`Step::scan`) so a
    /// scan-aware scheduler (MuSher SCAN) can be told in advance.
    Scan { duration_s: f64 },
    /// Multiply the rate by `factor` for `duration_s` (contention from other stations).
    RateFactor { factor: f64, duration_s: f64 },
    /// `stations` other stations, each wanting `load` of the channel's airtime, share the
    /// path's channel for `duration_s`: rate and delay change together (crate::contention).
    Contention {
        stations: u32,
        load: f64,
        txop_ms: f64,
        duration_s: f64,
    },
}

impl EventKind {
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Outage { .. } => "outage",
            EventKind::Rate { .. } => "rate",
            EventKind::Loss { .. } => "loss",
            EventKind::Delay { .. } => "delay",
            EventKind::Scan { .. } => "scan",
            EventKind::RateFactor { .. } => "rate_factor",
            EventKind::Contention { .. } => "contention",
        }
    }

    /// Interval events last `duration_s`; the others set a level until `until_s`.
    pub fn duration_s(&self) -> Option<f64> {
        match *self {
            EventKind::Outage { duration_s }
            | EventKind::Scan { duration_s }
            | EventKind::RateFactor { duration_s, .. }
            | EventKind::Contention { duration_s, .. } => Some(duration_s),
            EventKind::Rate { .. } | EventKind::Loss { .. } | EventKind::Delay { .. } => None,
        }
    }
}

impl Scenario {
    pub fn path_index(&self, name: &str) -> Option<usize> {
        self.paths.iter().position(|p| p.name == name)
    }
}
