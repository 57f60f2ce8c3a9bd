//! Where a scheme runs: the one interface of the simulator ([`crate::sim::SimBackend`]) and
//! the emulated testbed ([`crate::emu::Emu`]), and the one way their runs become a
//! [`SchemeResult`].
//!
//! A backend runs one scheme once ([`Backend::run`]) and says what it measured
//! ([`Outcome`]); the repetitions of a scheme are pooled by [`aggregate`], whichever
//! backend ran them. (Not a `SchemeResult` per run: percentiles and delays pool the runs'
//! samples, which a result no longer holds.)

use std::collections::BTreeMap;

use fbdt_core::delay_probe::DelaySamples;
use fbdt_core::{ReceiverStats, SenderStats};
use fbdt_scenario::Scenario;

use crate::error::HarnessError;
use crate::results::bursts::BurstStats;
use crate::results::cotag::CotagCounters;
use crate::results::{percentile, Counters, DelayPool, PathTransport, RunSummary, Sample, SchemeResult, TcpPathCounters};
use crate::scheme::Encryption;
use crate::traffic::Traffic;

/// Which backend a command runs on (`--backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// Deterministic simulator driving the protocol core over modelled paths.
    Sim,
    /// Emulated radios in network namespaces (real TCP stacks).
    Emu,
}

/// Runs one scheme over a scenario.
pub trait Backend: Sync {
    /// One run of `scheme` (its name as users type it: `fbdt+…`, `mp:*`, `tcp:<path>`, …)
    /// over `scenario` with `seed` (the scenario's random models and the protocol's).
    fn run(&self, scenario: &Scenario, scheme: &str, traffic: Traffic, seed: u64) -> Result<Outcome, HarnessError>;
}

/// What one run of one scheme measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub goodput_mbps: f64,
    /// Bytes the application got in order within the duration.
    pub bytes: u64,
    /// Bytes received more than once.
    pub redundant_bytes: u64,
    /// Goodput per 100 ms (the sample interval).
    pub series: Vec<Sample>,
    /// One-second goodputs.
    pub seconds: Vec<f64>,
    pub per_path_bytes: BTreeMap<String, u64>,
    /// The simulator's TCP-level model: per path (empty over ideal pipes and on the testbed).
    pub tcp_per_path: Vec<(String, TcpPathCounters)>,
    /// Testbed session schemes: per path, controllers (seconds each) and TCP's counters.
    pub path_transport: Vec<(String, PathTransport)>,
    /// Testbed kernel schemes run with `+cc=<name>`: that controller.
    pub kernel_congestion: Option<String>,
    /// Session-based schemes: the data sender's and the data receiver's counters.
    pub counters: Option<(SenderStats, ReceiverStats)>,
    /// Session wake-ups per second of transfer (testbed, session-based schemes).
    pub wakeups_per_s: Option<f64>,
    /// What the wake-ups found, per end (testbed, session-based schemes).
    pub activity: Option<crate::results::activity::SessionActivity>,
    /// CPU cores the endpoints used (testbed).
    pub endpoint_cpu_cores: Option<f64>,
    /// The host's busy cores but the emulator's and other programs' (testbed).
    pub stack_cpu_cores: Option<f64>,
    /// In-order delivery delay samples.
    pub delay: DelaySamples,
    pub cotag: Option<CotagCounters>,
    /// `--traffic bursts`: the burst metrics.
    pub bursts: Option<BurstStats>,
    /// What the testbed's fidelity monitors saw (testbed only).
    pub fidelity: Option<fbdt_emu::Fidelity>,
    /// A shared bottleneck's bytes per flow (simulator's TCP model, testbed).
    pub bottleneck: Option<fbdt_sim::BottleneckOutcome>,
}

/// Means over the repetitions (goodput), pooled one-second samples (percentiles), sums
/// (bytes); the series is the first repetition's. `runs` are (seed, outcome) in order.
pub fn aggregate(name: &str, encryption: Encryption, runs: Vec<(u64, Outcome)>, wall_s: f64) -> SchemeResult {
    let seconds: Vec<f64> = runs.iter().flat_map(|(_, r)| r.seconds.iter().copied()).collect();
    let mut per_path_bytes: BTreeMap<String, u64> = BTreeMap::new();
    let mut tcp_per_path: Option<BTreeMap<String, TcpPathCounters>> = None;
    let mut counters: Option<Counters> = None;
    let mut reinjected: Option<u64> = None;
    let mut recv_buffer_max: Option<u64> = None;
    let mut redundant = 0;
    let mut delays = DelayPool::default();
    let mut cotag: Option<CotagCounters> = None;
    let mut bursts: Option<BurstStats> = None;
    let mut path_transport: Option<BTreeMap<String, PathTransport>> = None;
    for (_, r) in &runs {
        for (p, t) in &r.path_transport {
            path_transport
                .get_or_insert_with(BTreeMap::new)
                .entry(p.clone())
                .or_default()
                .add(t);
        }
        delays.add(&r.delay);
        if let Some(b) = &r.bursts {
            match &mut bursts {
                Some(all) => all.add(b),
                None => bursts = Some(b.clone()),
            }
        }
        if let Some(c) = &r.cotag {
            cotag.get_or_insert_with(Default::default).add(c);
        }
        for (p, b) in &r.per_path_bytes {
            *per_path_bytes.entry(p.clone()).or_default() += b;
        }
        for (p, c) in &r.tcp_per_path {
            let t = tcp_per_path
                .get_or_insert_with(BTreeMap::new)
                .entry(p.clone())
                .or_default();
            t.loss_events += c.loss_events;
            t.timeouts += c.timeouts;
        }
        redundant += r.redundant_bytes;
        if let Some((sender, receiver)) = &r.counters {
            counters.get_or_insert_with(Counters::default).add(sender, receiver);
            if name.starts_with("mp:") {
                *reinjected.get_or_insert(0) += sender.redundant_bytes_sent;
                let m = recv_buffer_max.get_or_insert(0);
                *m = (*m).max(receiver.max_buffered_bytes);
            }
        }
    }
    let summaries: Vec<RunSummary> = runs
        .iter()
        .map(|(seed, r)| RunSummary {
            seed: *seed,
            goodput_mbps: r.goodput_mbps,
            redundant_bytes: r.redundant_bytes,
            bottleneck_scheme_to_tcp: r
                .bottleneck
                .as_ref()
                .and_then(|b| crate::results::bottleneck::BottleneckShares::pool([b]))
                .and_then(|s| s.scheme_to_tcp),
        })
        .collect();
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let endpoint_cpu_cores = mean(runs.iter().filter_map(|(_, r)| r.endpoint_cpu_cores).collect());
    let stack_cpu_cores = mean(runs.iter().filter_map(|(_, r)| r.stack_cpu_cores).collect());
    let wakeups_per_s = mean(runs.iter().filter_map(|(_, r)| r.wakeups_per_s).collect());
    let session_activity_per_s =
        crate::results::activity::SessionActivity::mean(runs.iter().filter_map(|(_, r)| r.activity.as_ref()));
    let kernel_congestion = runs.iter().find_map(|(_, r)| r.kernel_congestion.clone());
    let bottleneck = crate::results::bottleneck::BottleneckShares::pool(runs.iter().filter_map(|(_, r)| r.bottleneck.as_ref()));
    let mut result = SchemeResult {
        scheme: name.to_string(),
        encryption: encryption.label().to_string(),
        goodput_mbps: summaries.iter().map(|r| r.goodput_mbps).sum::<f64>() / summaries.len().max(1) as f64,
        goodput_p10_mbps: percentile(&seconds, 0.1),
        goodput_p50_mbps: percentile(&seconds, 0.5),
        goodput_p90_mbps: percentile(&seconds, 0.9),
        bytes_delivered: runs.iter().map(|(_, r)| r.bytes).sum(),
        redundant_bytes: redundant,
        per_path_bytes,
        series_100ms_mbps: runs
            .first()
            .map(|(_, r)| r.series.iter().map(|s| s.mbps).collect())
            .unwrap_or_default(),
        series: runs.into_iter().next().map(|(_, r)| r.series).unwrap_or_default(),
        runs: if summaries.len() > 1 { summaries } else { Vec::new() },
        counters,
        recv_buffer_max_bytes: recv_buffer_max,
        reinjected_bytes: reinjected,
        wall_s,
        delivery_delay_ms: delays.summary(),
        cotag,
        bursts,
        endpoint_cpu_cores,
        stack_cpu_cores,
        wakeups_per_s,
        session_activity_per_s,
        tcp_per_path,
        congestion_control: kernel_congestion,
        bottleneck,
        path_transport: path_transport.map(|mut m| {
            m.values_mut().for_each(PathTransport::normalise);
            m
        }),
        ..SchemeResult::default()
    };
    result.fill_ack_rate();
    result
}
