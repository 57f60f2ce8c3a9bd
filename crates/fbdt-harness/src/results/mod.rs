//! The results JSON (docs/results.md) as plain data: what a backend fills and the lab
//! prints, plots and reads back. The top-level and per-result fields listed in DESIGN.md are
//! stable; the rest are additions other tools may ignore. Nothing here runs a backend.

pub mod activity;
pub mod bottleneck;
pub mod bursts;
pub mod cotag;
pub mod fidelity;
pub mod stats;

use std::collections::BTreeMap;

use fbdt_scenario::Scenario;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunReport {
    pub scenario: String,
    pub backend: String,
    pub duration_s: f64,
    pub seed: u64,
    pub scale: f64,
    pub congestion_control: String,
    /// `"none"`, `"tls13"`, or `"mixed"` when only some results used TLS (see each
    /// result's `encryption`). The lab runs plaintext (paper-faithful: the schemes it
    /// compares carry no encryption either) unless a scheme says `+tls`; results written
    /// before the field existed read back as `"none"`.
    #[serde(default = "plaintext")]
    pub encryption: String,
    /// Time-averaged sum of the configured path rates (at scale): the physical limit.
    pub capacity_mbps: f64,
    pub results: Vec<SchemeResult>,
    /// Σ of the `tcp:<path>` goodputs, when every path was run alone.
    pub sum_standalone_mbps: Option<f64>,
    pub meta: Meta,
    /// The scenario as run (after --duration/--seed overrides).
    pub scenario_def: Scenario,
    /// Emulated runs: what the emulator's fidelity monitors saw (see docs/testbed.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<fidelity::RunFidelity>,
}

fn plaintext() -> String {
    "none".into()
}

/// The run's `encryption`: what every result used, or `"mixed"`.
pub fn run_encryption(results: &[SchemeResult]) -> String {
    let mut labels = results.iter().map(|r| r.encryption.as_str());
    match labels.next() {
        None => plaintext(),
        Some(first) if labels.all(|l| l == first) => first.to_string(),
        Some(_) => "mixed".into(),
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SchemeResult {
    pub scheme: String,
    /// `"tls13"` for a session scheme run with `+tls` (testbed only), else `"none"`.
    #[serde(default = "plaintext")]
    pub encryption: String,
    pub goodput_mbps: f64,
    pub goodput_p10_mbps: f64,
    pub goodput_p50_mbps: f64,
    pub goodput_p90_mbps: f64,
    pub bytes_delivered: u64,
    pub redundant_bytes: u64,
    pub per_path_bytes: BTreeMap<String, u64>,
    pub series: Vec<Sample>,
    /// One entry per repetition (seed) when `--repeat` > 1; the figures above are means
    /// (goodput) or pooled over every repetition's one-second samples (percentiles).
    pub runs: Vec<RunSummary>,
    /// Protocol counters of the sending side (FBDT only).
    pub counters: Option<Counters>,
    /// Wall-clock seconds this scheme took (all repetitions).
    pub wall_s: f64,
    /// `mp:*` schemes: peak occupancy of the shared receive (reorder) buffer, bytes (max
    /// over repetitions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_buffer_max_bytes: Option<u64>,
    /// `mp:*` schemes: bytes sent again by the meta layer (window-blocking reinjections,
    /// reinjections after a subflow timeout or death, redundant copies), summed over
    /// repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reinjected_bytes: Option<u64>,
    /// Emulated runs: whether every run of this scheme was within the emulator's
    /// tolerances. An unfaithful scheme's numbers say nothing about the protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faithful: Option<bool>,
    /// Emulated runs: CPU of the endpoints (the lab process's threads but the emulator's:
    /// both ends' user-space side and the kernel work booked to it), in cores, mean over
    /// repetitions (`fidelity.runs[].endpoints_cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_cpu_cores: Option<f64>,
    /// Emulated runs: the whole host's busy cores less the emulator's and other programs'
    /// — both ends and all the kernel's work for them wherever it was booked (softirq work
    /// lands on whatever task it interrupts, so `endpoint_cpu_cores` charges a busy end for
    /// packets a sleeping one leaves to the idle task), mean over repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_cpu_cores: Option<f64>,
    /// Emulated session schemes (`fbdt`, `mp:*`): wake-ups of both ends' session tasks per
    /// second of transfer, mean over repetitions. Not measured for kernel schemes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wakeups_per_s: Option<f64>,
    /// Emulated session schemes: what each end's task did per second (wake-ups, timer
    /// fires, reads, write batches, low-water marks, TCP_INFO reads), mean over repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_activity_per_s: Option<activity::SessionActivity>,
    /// Session schemes, both backends: ACK frames the receiving end sent per MB delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_frames_per_mb: Option<f64>,
    /// In-order delivery delay: from a byte's first transmission to its in-order delivery
    /// to the receiving application, sampled every 16 KiB of the stream, pooled over the
    /// repetitions (docs/results.md). `null` when no sample was taken; absent in results
    /// written before it existed.
    #[serde(default)]
    pub delivery_delay_ms: Option<DeliveryDelay>,
    /// Goodput per 100 ms (in-order bytes delivered to the application), first repetition:
    /// `series` without the times.
    #[serde(default)]
    pub series_100ms_mbps: Vec<f64>,
    /// `cotag` / `dual-rr`: TCP retransmissions and the coding counters, summed over
    /// repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cotag: Option<cotag::CotagCounters>,
    /// `--traffic bursts` (testbed): paper 003's ten flows in 2-s bursts — per-burst
    /// throughput, time to a fixed volume, link utilisation, retransmissions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursts: Option<bursts::BurstStats>,
    /// `--backend sim --model tcp`: each path's TCP-level model counters (data direction),
    /// summed over repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_per_path: Option<BTreeMap<String, TcpPathCounters>>,
    /// Testbed, session schemes: per path, the congestion controller(s) in force and what
    /// TCP did (data sender's side), summed over repetitions (docs/congestion.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_transport: Option<BTreeMap<String, PathTransport>>,
    /// Testbed, kernel schemes run with `+cc=<name>`: that controller (the run's top-level
    /// `congestion_control` is the scenario's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_control: Option<String>,
    /// A scenario with a shared bottleneck (simulator's TCP model, testbed): each flow's share of
    /// the link and Jain's index between the scheme and the competing TCPs, pooled over
    /// repetitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<bottleneck::BottleneckShares>,
}

/// One path's transport-level record (docs/congestion.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathTransport {
    /// Share of the time each controller was in force (sums to 1 when any was seen).
    pub congestion_control: BTreeMap<String, f64>,
    /// Segments TCP retransmitted (`tcpi_total_retrans`).
    pub retransmits: u64,
    /// Retransmission timeouts (`tcpi_total_rto`, kernel ≥ 6.7; `null` before).
    pub rto_count: Option<u64>,
    /// Connections opened for the path after the first.
    pub reconnects: u64,
    /// `auto`: controller switches.
    pub cc_switches: u64,
    /// Coupled mode (`+coupled`): pacing ceilings the data sender set on the path (each a
    /// setsockopt of SO_MAX_PACING_RATE); 0 uncoupled.
    #[serde(default)]
    pub pacing_updates: u64,
    /// Coupled mode: share of the path's time it was coupled (1 with `+coupled` on a
    /// loss-based controller; with `+coupled=shared` the time a shared bottleneck was
    /// detected); 0 uncoupled. Seconds until [`PathTransport::normalise`].
    #[serde(default)]
    pub coupled: f64,
}

impl PathTransport {
    /// Adds another run's record; `seconds` are that run's seconds per controller, kept in
    /// `congestion_control` until [`PathTransport::normalise`] turns them into shares.
    pub fn add(&mut self, o: &PathTransport) {
        for (k, v) in &o.congestion_control {
            *self.congestion_control.entry(k.clone()).or_default() += v;
        }
        self.retransmits += o.retransmits;
        self.rto_count = match (self.rto_count, o.rto_count) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.reconnects += o.reconnects;
        self.cc_switches += o.cc_switches;
        self.pacing_updates += o.pacing_updates;
        self.coupled += o.coupled;
    }

    pub fn normalise(&mut self) {
        let total: f64 = self.congestion_control.values().sum();
        if total > 0.0 {
            self.congestion_control.values_mut().for_each(|v| *v /= total);
            self.coupled = (self.coupled / total).min(1.0);
        }
    }
}

impl Default for SchemeResult {
    /// An empty result: no bytes, no samples, plaintext (as results without the field read).
    fn default() -> Self {
        SchemeResult {
            scheme: String::new(),
            encryption: plaintext(),
            goodput_mbps: 0.0,
            goodput_p10_mbps: 0.0,
            goodput_p50_mbps: 0.0,
            goodput_p90_mbps: 0.0,
            bytes_delivered: 0,
            redundant_bytes: 0,
            per_path_bytes: BTreeMap::new(),
            series: Vec::new(),
            runs: Vec::new(),
            counters: None,
            wall_s: 0.0,
            recv_buffer_max_bytes: None,
            reinjected_bytes: None,
            faithful: None,
            endpoint_cpu_cores: None,
            stack_cpu_cores: None,
            wakeups_per_s: None,
            session_activity_per_s: None,
            ack_frames_per_mb: None,
            delivery_delay_ms: None,
            series_100ms_mbps: Vec::new(),
            cotag: None,
            bursts: None,
            tcp_per_path: None,
            path_transport: None,
            congestion_control: None,
            bottleneck: None,
        }
    }
}

/// One path's TCP-level model counters (docs/results.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpPathCounters {
    pub loss_events: u64,
    pub timeouts: u64,
}

impl SchemeResult {
    /// Sets `ack_frames_per_mb` from the counters (session schemes) and the bytes delivered.
    pub fn fill_ack_rate(&mut self) {
        let mb = self.bytes_delivered as f64 / 1e6;
        self.ack_frames_per_mb = self
            .counters
            .as_ref()
            .filter(|_| mb > 0.0)
            .map(|c| c.acks_sent as f64 / mb);
    }

    /// Standard deviation of the 100 ms goodput series (Mbit/s), the whole run; None for
    /// fewer than two bins.
    pub fn sd_100ms_mbps(&self) -> Option<f64> {
        let v = &self.series_100ms_mbps;
        if v.len() < 2 {
            return None;
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        Some((v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt())
    }
}

/// The distribution of the in-order delivery delay, ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryDelay {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    /// Samples the figures above come from (undelivered ones included).
    pub samples: u64,
    /// Samples first sent but not delivered by the end of the run: they enter the figures
    /// with their age at the end of the run (a lower bound of their delay).
    pub undelivered_samples: u64,
}

impl DeliveryDelay {
    /// From every sample in ms (undelivered ones already capped at the run's end); None
    /// without samples.
    pub fn from_ms(mut samples_ms: Vec<f64>, undelivered_samples: u64) -> Option<Self> {
        if samples_ms.is_empty() {
            return None;
        }
        let [p50, p90, p99, max] = percentiles_by_selection(&mut samples_ms, [0.5, 0.9, 0.99, 1.0]);
        Some(DeliveryDelay {
            p50,
            p90,
            p99,
            max,
            samples: samples_ms.len() as u64,
            undelivered_samples,
        })
    }
}

/// Delay samples of several runs of one scheme, pooled (bounded: see `SampleSet`).
#[derive(Clone, Debug, Default)]
pub struct DelayPool {
    us: fbdt_core::delay_probe::SampleSet,
    undelivered: u64,
}

impl DelayPool {
    /// Adds one run's samples.
    pub fn add(&mut self, s: &fbdt_core::delay_probe::DelaySamples) {
        s.capped_us().for_each(|us| self.us.push(us));
        self.undelivered += s.undelivered_age_us.len() as u64;
    }

    pub fn summary(self) -> Option<DeliveryDelay> {
        let ms = self.us.values().iter().map(|&us| us as f64 / 1e3).collect();
        DeliveryDelay::from_ms(ms, self.undelivered)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub t: f64,
    pub mbps: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunSummary {
    pub seed: u64,
    pub goodput_mbps: f64,
    pub redundant_bytes: u64,
    /// A shared bottleneck: this run's scheme rate across it over the mean competing flow's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck_scheme_to_tcp: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Counters {
    pub windows_loaded: u64,
    pub realignments: u64,
    pub window_stalls: u64,
    pub path_stalls: u64,
    pub forward_changes: u64,
    /// Absent from results written before the arrival rule.
    #[serde(default)]
    pub arrival_yields: u64,
    pub redundant_bytes_received: u64,
    pub max_out_of_order_bytes: u64,
    pub acks_sent: u64,
}

impl Counters {
    /// Adds one run: the sending side's counters and the receiving side's.
    pub fn add(&mut self, sender: &fbdt_core::SenderStats, receiver: &fbdt_core::ReceiverStats) {
        self.windows_loaded += sender.windows_loaded;
        self.realignments += sender.realignments;
        self.window_stalls += sender.window_stalls;
        self.path_stalls += sender.path_stalls;
        self.forward_changes += sender.forward_changes;
        self.arrival_yields += sender.arrival_yields;
        self.redundant_bytes_received += receiver.redundant_bytes_received;
        self.max_out_of_order_bytes = self.max_out_of_order_bytes.max(receiver.max_out_of_order_bytes);
        self.acks_sent += receiver.acks_sent;
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    pub tool: String,
    pub version: String,
    pub git_revision: String,
    pub command_line: Vec<String>,
    /// Simulator parameters (sim backend).
    pub sim: Option<BTreeMap<String, f64>>,
}

impl Meta {
    pub fn here() -> Self {
        Meta {
            tool: "fbdt-lab".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            git_revision: env!("FBDT_GIT_REV").into(),
            command_line: std::env::args().collect(),
            sim: None,
        }
    }
}


/// Linear-interpolated percentile of `values` (`q` in 0..=1); 0 for no values.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    percentile_sorted(&v, q)
}

/// [`percentile`] at each of `qs` (ascending), by selection rather than a full sort: the
/// same values (the order statistics either side of each position), in linear time — a
/// run's delay samples number in the hundreds of thousands. Reorders `v`.
pub fn percentiles_by_selection<const N: usize>(v: &mut [f64], qs: [f64; N]) -> [f64; N] {
    debug_assert!(qs.windows(2).all(|w| w[0] <= w[1]), "ascending: {qs:?}");
    let mut out = [0.0; N];
    if v.is_empty() {
        return out;
    }
    // Everything before `done` is at most everything from it on.
    let mut done = 0;
    for (o, q) in out.iter_mut().zip(qs) {
        let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
        let lo = (pos.floor() as usize).max(done);
        // Unstable is exact here: values equal under `total_cmp` are the same bits.
        v[done..].select_nth_unstable_by(lo - done, f64::total_cmp);
        let low = v[lo];
        let high = if pos.ceil() as usize > lo {
            v[lo + 1..].iter().copied().min_by(f64::total_cmp).unwrap_or(low)
        } else {
            low
        };
        *o = low + (high - low) * (pos - pos.floor());
        done = lo;
    }
    out
}

/// [`percentile`] of values already sorted ascending.
pub fn percentile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_gives_what_sorting_gives() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [1usize, 2, 3, 7, 100, 1001] {
            let v: Vec<f64> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 500) as f64 / 7.0
                })
                .collect();
            let qs = [0.0, 0.1, 0.5, 0.9, 0.99, 1.0];
            let want = qs.map(|q| percentile(&v, q));
            let got = percentiles_by_selection(&mut v.clone(), qs);
            assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits), "n = {n}");
        }
    }

    #[test]
    fn percentiles_interpolate() {
        let v = [4.0, 1.0, 3.0, 2.0, 5.0];
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 5.0);
        assert!((percentile(&v, 0.1) - 1.4).abs() < 1e-12);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn delay_quantiles_of_a_known_distribution() {
        // 1..=1000 ms, shuffled: p50 = 500.5, p90 = 900.1, p99 = 990.01 (interpolated).
        let v: Vec<f64> = (0..1000).map(|i| ((i * 7919) % 1000 + 1) as f64).collect();
        let d = DeliveryDelay::from_ms(v, 3).unwrap();
        assert!((d.p50 - 500.5).abs() < 1e-9, "{d:?}");
        assert!((d.p90 - 900.1).abs() < 1e-9, "{d:?}");
        assert!((d.p99 - 990.01).abs() < 1e-9, "{d:?}");
        assert_eq!(d.max, 1000.0);
        assert_eq!((d.samples, d.undelivered_samples), (1000, 3));
        assert_eq!(DeliveryDelay::from_ms(Vec::new(), 0), None);
    }

    #[test]
    fn results_without_the_delay_fields_still_read() {
        let old = r#"{"scheme":"fbdt","goodput_mbps":1.0,"goodput_p10_mbps":1.0,
            "goodput_p50_mbps":1.0,"goodput_p90_mbps":1.0,"bytes_delivered":1,
            "redundant_bytes":0,"per_path_bytes":{},"series":[],"runs":[],
            "counters":null,"wall_s":0.1}"#;
        let r: SchemeResult = serde_json::from_str(old).unwrap();
        assert_eq!(r.delivery_delay_ms, None);
        assert!(r.series_100ms_mbps.is_empty());
        assert_eq!(r.sd_100ms_mbps(), None);
    }

    #[test]
    fn the_default_result_is_empty_and_plaintext() {
        let r = SchemeResult::default();
        assert_eq!((r.encryption.as_str(), r.bytes_delivered), ("none", 0));
        let json = serde_json::to_value(&r).unwrap();
        // Optional additions stay out of the JSON until a backend fills them.
        for k in ["cotag", "bursts", "faithful", "tcp_per_path", "reinjected_bytes"] {
            assert!(json.get(k).is_none(), "{k}");
        }
    }

    #[test]
    fn sd_of_the_100ms_series() {
        let mut r: SchemeResult = serde_json::from_str(
            r#"{"scheme":"x","goodput_mbps":1.0,"goodput_p10_mbps":1.0,"goodput_p50_mbps":1.0,
            "goodput_p90_mbps":1.0,"bytes_delivered":1,"redundant_bytes":0,"per_path_bytes":{},
            "series":[],"runs":[],"counters":null,"wall_s":0.1}"#,
        )
        .unwrap();
        r.series_100ms_mbps = vec![2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(r.sd_100ms_mbps(), Some(2.0));
    }
}

/// Writes `value` as pretty JSON (and a final newline) to `path`.
pub fn write_json(path: &std::path::Path, value: &impl Serialize) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}
