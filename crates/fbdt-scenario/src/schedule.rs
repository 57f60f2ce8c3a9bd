//! Scenario → Schedule: the base rate series of each path overlaid with its events, every
//! rate scaled, merged into one list of piecewise-constant steps.

use serde::{Deserialize, Serialize};

use crate::error::{Origin, ScenarioError};
use crate::events::{self, Instance};
use crate::model::{Bursts, EventKind, PathSpec, RadioSleep, Scenario};
use crate::sample;
use crate::validate;

/// The link state from `t_s` until the next step (the last one until the end of the run).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub t_s: f64,
    /// Scaled; 0.0 during an outage or a scan.
    pub rate_mbps: f64,
    /// One-way, each direction.
    pub delay_ms: f64,
    pub loss: f64,
    /// The path is off-channel scanning (rate is 0); announced so schedulers can prepare.
    pub scan: bool,
}

impl Step {
    fn same_state(&self, o: &Step) -> bool {
        self.rate_mbps == o.rate_mbps && self.delay_ms == o.delay_ms && self.loss == o.loss && self.scan == o.scan
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathTimeline {
    pub name: String,
    /// Sorted by `t_s`, `steps[0].t_s == 0.0`, times distinct, no two consecutive equal states.
    pub steps: Vec<Step>,
    /// The path's radio power saving, if modelled (not scaled: it is a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub radio: Option<RadioSleep>,
    /// The path's delivery in bursts, if modelled (not scaled: it is a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursts: Option<Bursts>,
}

impl PathTimeline {
    /// The step in force at `t_s` (the first step for t < 0).
    pub fn at(&self, t_s: f64) -> Step {
        let i = self.steps.partition_point(|s| s.t_s <= t_s).saturating_sub(1);
        // A hand-built empty timeline reads as a dead link rather than a panic.
        self.steps.get(i).copied().unwrap_or(Step {
            t_s: 0.0,
            rate_mbps: 0.0,
            delay_ms: 0.0,
            loss: 0.0,
            scan: false,
        })
    }

    /// Start of the first step after `t_s`, if any: when a backend must next update the link.
    pub fn next_change_after(&self, t_s: f64) -> Option<f64> {
        let i = self.steps.partition_point(|s| s.t_s <= t_s);
        self.steps.get(i).map(|s| s.t_s)
    }

    /// Time-averaged rate over `[0, duration_s]`. For a non-positive duration, the rate at 0.
    pub fn mean_rate_mbps(&self, duration_s: f64) -> f64 {
        if duration_s.is_nan() || duration_s <= 0.0 {
            return self.at(0.0).rate_mbps;
        }
        let mut sum = 0.0;
        for (i, s) in self.steps.iter().enumerate() {
            if s.t_s >= duration_s {
                break;
            }
            let end = self.steps.get(i + 1).map_or(duration_s, |n| n.t_s.min(duration_s));
            sum += s.rate_mbps * (end - s.t_s);
        }
        sum / duration_s
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub duration_s: f64,
    pub scale: f64,
    pub paths: Vec<PathTimeline>,
    /// The scenario's shared bottleneck at scale (`None`: disjoint paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<SharedLink>,
}

/// A scenario's [`crate::Bottleneck`] resolved: path indices, the rate at scale, the queue in
/// bytes and the competing flows' delay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedLink {
    /// Indices into `Schedule::paths`, in the order the scenario names them.
    pub paths: Vec<usize>,
    pub rate_mbps: f64,
    pub queue_bytes: u64,
    pub competing_tcp: u32,
    pub competing_delay_ms: f64,
}

impl Schedule {
    /// Time-averaged sum of the path rates over the run, at scale: the physical limit.
    pub fn capacity_mbps(&self) -> f64 {
        self.paths.iter().map(|p| p.mean_rate_mbps(self.duration_s)).sum()
    }

    pub fn path(&self, name: &str) -> Option<&PathTimeline> {
        self.paths.iter().find(|p| p.name == name)
    }
}

/// A piecewise-constant series with a cursor, read at increasing times.
struct Cursor<'a, T> {
    points: &'a [(f64, T)],
    i: usize,
}

impl<'a, T: Copy> Cursor<'a, T> {
    fn new(points: &'a [(f64, T)]) -> Self {
        Cursor { points, i: 0 }
    }
    fn at(&mut self, t: f64) -> T {
        while self.i + 1 < self.points.len() && self.points[self.i + 1].0 <= t {
            self.i += 1;
        }
        self.points[self.i].1
    }
}

/// Pushes a point, replacing one already at the same time (a later rule wins).
fn push<T>(v: &mut Vec<(f64, T)>, t: f64, x: T) {
    match v.last_mut() {
        Some(last) if last.0 == t => last.1 = x,
        _ => v.push((t, x)),
    }
}

/// Non-overlapping interval instances → `value` while active, `None` otherwise.
fn intervals(inst: &[&Instance], value: impl Fn(&EventKind) -> f64) -> Vec<(f64, Option<f64>)> {
    let mut sorted: Vec<&&Instance> = inst.iter().collect();
    sorted.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut out = vec![(0.0, None)];
    for x in sorted {
        push(&mut out, x.start, Some(value(&x.kind)));
        push(&mut out, x.end, None);
    }
    out
}

/// Level overrides: at any time the most recently started active instance wins.
fn levels(inst: &[&Instance], value: impl Fn(&EventKind) -> f64) -> Vec<(f64, Option<f64>)> {
    let mut times: Vec<f64> = std::iter::once(0.0)
        .chain(inst.iter().flat_map(|x| [x.start, x.end]))
        .filter(|t| t.is_finite())
        .collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut out = Vec::new();
    for t in times {
        let winner = inst
            .iter()
            .filter(|x| x.start <= t && t < x.end)
            .max_by(|a, b| a.start.total_cmp(&b.start).then(a.event.cmp(&b.event)));
        push(&mut out, t, winner.map(|x| value(&x.kind)));
    }
    out
}

fn timeline(s: &Scenario, idx: usize, p: &PathSpec, scale: f64) -> Result<PathTimeline, ScenarioError> {
    let dur = s.duration_s;
    let pair = match &p.rate {
        crate::model::RateSpec::Markov { pair: Some(other), .. } => s.path_index(other),
        _ => None,
    };
    let base = sample::base_rate(&p.rate, s.seed, idx, pair, dur)?;
    let inst =
        events::expand(&s.events, &p.name, dur).map_err(|(j, m)| invalid(s, format!("event #{}: {m}", j + 1)))?;
    let of = |name: &str| -> Vec<&Instance> { inst.iter().filter(|x| x.kind.name() == name).collect() };
    let outage = intervals(&of("outage"), |_| 1.0);
    let scan = intervals(&of("scan"), |_| 1.0);
    let factor = intervals(&of("rate_factor"), |k| {
        if let EventKind::RateFactor { factor, .. } = k {
            *factor
        } else {
            1.0
        }
    });
    let contention = of("contention");
    let airtime = intervals(&contention, |k| match *k {
        EventKind::Contention { stations, load, .. } => crate::contention::airtime_share(stations, load),
        _ => 1.0,
    });
    let access_delay = intervals(&contention, |k| match *k {
        EventKind::Contention {
            stations,
            load,
            txop_ms,
            ..
        } => crate::contention::access_delay_ms(stations, load, txop_ms),
        _ => 0.0,
    });
    let rate = levels(
        &of("rate"),
        |k| {
            if let EventKind::Rate { mbps } = k {
                *mbps
            } else {
                0.0
            }
        },
    );
    let loss = levels(
        &of("loss"),
        |k| {
            if let EventKind::Loss { loss } = k {
                *loss
            } else {
                0.0
            }
        },
    );
    let delay = levels(&of("delay"), |k| {
        if let EventKind::Delay { delay_ms } = k {
            *delay_ms
        } else {
            0.0
        }
    });

    let mut times: Vec<f64> = base.iter().map(|x| x.0).collect();
    for series in [&outage, &scan, &factor, &airtime, &access_delay, &rate, &loss, &delay] {
        times.extend(series.iter().map(|x| x.0));
    }
    times.retain(|&t| t < dur);
    times.sort_by(f64::total_cmp);
    times.dedup();

    let (mut cb, mut co, mut cs, mut cf) = (
        Cursor::new(&base),
        Cursor::new(&outage),
        Cursor::new(&scan),
        Cursor::new(&factor),
    );
    let (mut cr, mut cl, mut cd) = (Cursor::new(&rate), Cursor::new(&loss), Cursor::new(&delay));
    let (mut ca, mut cw) = (Cursor::new(&airtime), Cursor::new(&access_delay));
    let mut steps: Vec<Step> = Vec::with_capacity(times.len());
    for t in times {
        let scanning = cs.at(t).is_some();
        let blocked = co.at(t).is_some() || scanning;
        let mbps = cr.at(t).unwrap_or(cb.at(t)) * cf.at(t).unwrap_or(1.0) * ca.at(t).unwrap_or(1.0);
        let step = Step {
            t_s: t,
            rate_mbps: if blocked { 0.0 } else { mbps * scale },
            delay_ms: (cd.at(t).unwrap_or(p.delay_ms) + cw.at(t).unwrap_or(0.0)).min(crate::limits::MAX_DELAY_MS),
            loss: cl.at(t).unwrap_or(p.loss),
            scan: scanning,
        };
        if steps.last().is_none_or(|last| !last.same_state(&step)) {
            steps.push(step);
        }
    }
    Ok(PathTimeline {
        name: p.name.clone(),
        steps,
        radio: p.radio,
        bursts: p.bursts,
    })
}

fn invalid(s: &Scenario, message: String) -> ScenarioError {
    ScenarioError::Invalid {
        at: Origin {
            file: s.name.clone(),
            line: None,
        },
        message,
    }
}

pub(crate) fn build(s: &Scenario, scale: f64) -> Result<Schedule, ScenarioError> {
    if !(scale.is_finite() && scale > 0.0) {
        return Err(ScenarioError::Scale(scale));
    }
    validate::validate(s, false).map_err(|e| invalid(s, format!("{}: {}", describe(s, &e.loc), e.message)))?;
    let paths = s
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| timeline(s, i, p, scale))
        .collect::<Result<Vec<_>, _>>()?;
    let bottleneck = s.bottleneck.as_ref().map(|b| {
        let idx: Vec<usize> = b.paths.iter().filter_map(|n| s.path_index(n)).collect();
        let least_delay = idx.iter().map(|&i| s.paths[i].delay_ms).fold(f64::INFINITY, f64::min);
        SharedLink {
            paths: idx,
            rate_mbps: b.rate_mbps * scale,
            queue_bytes: u64::from(b.queue_packets) * 1500,
            competing_tcp: b.competing_tcp,
            competing_delay_ms: b.competing_delay_ms.unwrap_or(least_delay),
        }
    });
    Ok(Schedule {
        duration_s: s.duration_s,
        scale,
        paths,
        bottleneck,
    })
}

/// Where a problem is, in words, when there is no file to point into.
pub(crate) fn describe(s: &Scenario, loc: &validate::Loc) -> String {
    use validate::Loc;
    match loc {
        Loc::Top(k) => format!("`{k}`"),
        Loc::Path(i, k) => match s.paths.get(*i) {
            Some(p) => format!("path `{}`, `{k}`", p.name),
            None => format!("path #{}", i + 1),
        },
        Loc::Event(j, k) => format!("event #{}, `{k}`", j + 1),
        Loc::Reference(k) => format!("reference `{k}`"),
        Loc::Bottleneck(k) => format!("bottleneck `{k}`"),
    }
}
