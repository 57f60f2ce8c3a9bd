//! One fault run in the simulator: the plan written into the scenario and the simulator's
//! parameters, the stepping machine driven by hand so that every in-order delivery and
//! every path's data arrivals are seen with their simulated time.

use anyhow::Result;
use fbdt_core::Instant;
use fbdt_scenario::{Event, EventKind, Scenario};
use fbdt_sim::{Direction, OneWayOutage, PathReset, Sim, SimError, SimParams};

use super::plan::{Fault, FaultKind, TAIL_S};
use super::result::RunResult;
use crate::scheme;
use crate::TestbedLimits;

/// A blocked path keeps this share of its rate ([`FaultKind::Blockage`]).
pub const BLOCKAGE_FACTOR: f64 = 1e-3;

/// Writes `plan` into a copy of `scenario` (outages, rate factors) and of `params`
/// (resets, one-way outages).
pub fn apply(plan: &[Fault], scenario: &Scenario, params: &SimParams) -> (Scenario, SimParams) {
    let sc = scenario_events(plan, scenario);
    let mut p = params.clone();
    for f in plan {
        match f.kind {
            FaultKind::Reset => p.path_resets.push(PathReset {
                at_s: f.start_s,
                path: f.path_index,
                reconnect_after_s: Some(reconnect_s(scenario, f)),
            }),
            FaultKind::Uplink | FaultKind::Downlink => p.one_way_outages.push(OneWayOutage {
                path: f.path_index,
                direction: if f.kind == FaultKind::Uplink {
                    Direction::Up
                } else {
                    Direction::Down
                },
                at_s: f.start_s,
                duration_s: f.duration_s,
            }),
            _ => {}
        }
    }
    (sc, p)
}

/// The part of `plan` that is a scenario event (both backends play them): outages (cuts,
/// blackholes, flaps, a reset's link) and a blockage's rate factor. One-way outages and a
/// reset's connection failure are the backend's own.
pub fn scenario_events(plan: &[Fault], scenario: &Scenario) -> Scenario {
    let mut sc = scenario.clone();
    for f in plan {
        let event = |kind| Event {
            at_s: f.start_s,
            path: f.path.clone(),
            kind,
            every_s: None,
            until_s: None,
        };
        let outage = EventKind::Outage {
            duration_s: f.duration_s,
        };
        match f.kind {
            FaultKind::Cut | FaultKind::Blackhole | FaultKind::Flap | FaultKind::Reset => sc.events.push(event(outage)),
            FaultKind::Blockage => sc.events.push(event(EventKind::RateFactor {
                factor: BLOCKAGE_FACTOR,
                duration_s: f.duration_s,
            })),
            FaultKind::Uplink | FaultKind::Downlink => {}
        }
    }
    sc
}

/// A reset path's reconnect time: one round trip of its base delay (the SYN and SYN/ACK;
/// the simulator folds the JOIN into it).
pub fn reconnect_s(scenario: &Scenario, f: &Fault) -> f64 {
    scenario.paths.get(f.path_index).map_or(0.0, |p| 2.0 * p.delay_ms / 1e3)
}

/// Runs `scheme` under `plan` (a fault-free copy of `scenario`, its `params`) and measures
/// what the receiver saw; returns the simulator's time-stamped log of schedule and protocol
/// events beside it.
pub fn run_traced(
    scenario: &Scenario,
    scale: f64,
    params: &SimParams,
    limits: &TestbedLimits,
    scheme_name: &str,
    seed: u64,
    plan: &[Fault],
) -> Result<(RunResult, Vec<String>)> {
    let (mut sc, mut params) = apply(plan, scenario, params);
    sc.seed = seed;
    params.seed = seed;
    let schedule = sc.schedule(scale)?;
    let sim_scheme = scheme::parse_sim(scheme_name, &sc, seed, limits)?;
    let mut sim = Sim::new(&schedule, &sim_scheme, &params)?;
    let mut watch = Watch::new(plan, scenario.duration_s);
    let error = loop {
        if let Err(e) = sim.step() {
            break Some(e);
        }
        watch.saw(sim.now(), sim.bytes_delivered(), sim.data_arrived());
        if sim.is_over() {
            break None;
        }
        if let Err(e) = sim.advance() {
            break Some(e);
        }
    };
    let end = sim.now();
    let mut outcome = sim.finish();
    let r = watch.result(end, &outcome, error);
    Ok((r, std::mem::take(&mut outcome.log)))
}

/// What the receiver saw, step by step.
struct Watch {
    /// Last in-order delivery, ms (the receiver's timestamps at 1 ms resolution).
    last_ms: Option<u64>,
    delivered: u64,
    max_gap_ms: u64,
    max_gap_at_s: f64,
    /// The path that returns, when it returns, its data arrivals by then, and when it
    /// carried data again.
    ret: Option<(usize, Instant, Option<u64>, Option<Instant>)>,
    /// Bytes delivered in the run's last [`TAIL_S`] (after every return, after a cut's
    /// start): the session still carries.
    in_tail: u64,
    tail_from: Instant,
}

impl Watch {
    fn new(plan: &[Fault], duration_s: f64) -> Self {
        let last = plan.iter().max_by(|a, b| a.end_s().total_cmp(&b.end_s()));
        let ret = last.filter(|f| f.kind != FaultKind::Cut).map(|f| {
            // A reset path carries again only after its reconnect; the reuse time counts
            // from the link's return and includes it (the "1 RTT + reconnect").
            (f.path_index, at_s(f.end_s()), None, None)
        });
        Watch {
            last_ms: None,
            delivered: 0,
            max_gap_ms: 0,
            max_gap_at_s: 0.0,
            ret,
            in_tail: 0,
            tail_from: at_s(duration_s - TAIL_S),
        }
    }

    fn saw(&mut self, now: Instant, delivered: u64, arrived: &[u64]) {
        if delivered > self.delivered {
            let ms = now.as_micros() / 1000;
            self.gap_to(ms);
            self.last_ms = Some(ms);
            if now >= self.tail_from {
                self.in_tail += delivered - self.delivered;
            }
            self.delivered = delivered;
        }
        if let Some((path, back, base, first)) = &mut self.ret {
            let got = arrived.get(*path).copied().unwrap_or(0);
            if now >= *back && first.is_none() {
                match base {
                    None => *base = Some(got),
                    Some(b) if got > *b => *first = Some(now),
                    Some(_) => {}
                }
            }
        }
    }

    fn gap_to(&mut self, ms: u64) {
        if let Some(last) = self.last_ms {
            if ms - last > self.max_gap_ms {
                self.max_gap_ms = ms - last;
                self.max_gap_at_s = last as f64 / 1e3;
            }
        }
    }

    fn result(mut self, end: Instant, out: &fbdt_sim::SimOutcome, error: Option<SimError>) -> RunResult {
        // A stream still silent at the end is a gap too.
        self.gap_to(end.as_micros() / 1000);
        let (acked, received, path_stalls) = match (&out.server, &out.client) {
            (Some(s), Some(c)) => (s.sender.bytes_acked, c.receiver.bytes_delivered, Some(s.sender.path_stalls)),
            _ => (0, 0, None),
        };
        // The sender freed bytes the receiver never had: lost. The receiver checks every
        // byte's value at its stream offset (`Payload::Shared`), so a duplicate or a hole
        // handed to the application ends the run with a corrupt range, counted as lost.
        let mut bytes_lost = acked.saturating_sub(received);
        let bytes_duplicated = 0;
        if let Some(SimError::Endpoint {
            source: fbdt_sim::EndpointError::Corrupt { from, to },
            ..
        }) = &error
        {
            bytes_lost += to - from;
        }
        let reuse_after_return_ms = self.ret.and_then(|(_, back, _, first)| {
            first.map(|t| (t.as_micros() - back.as_micros()) as f64 / 1e3)
        });
        RunResult {
            max_gap_ms: self.max_gap_ms,
            max_gap_at_s: self.max_gap_at_s,
            reuse_after_return_ms,
            bytes_delivered: out.bytes_delivered,
            bytes_lost,
            bytes_duplicated,
            survived: error.is_none() && self.in_tail > 0,
            error: error.map(|e| e.to_string()),
            path_stalls,
            ..RunResult::default()
        }
    }
}

fn at_s(t: f64) -> Instant {
    Instant::from_micros((t * 1e6).round().max(0.0) as u64)
}
