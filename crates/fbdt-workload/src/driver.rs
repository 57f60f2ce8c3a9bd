//! The simulator backend of every workload: an application asks for objects at times (or
//! when earlier ones complete), the server writes each into the session's byte stream when
//! its request arrives, and the client notes when each object's last byte was delivered in
//! order. One driver for every scheme the simulator runs (fbdt*, mp:*, tcp:<path>).
//!
//! The protocol cores carry one byte stream per session, so a session here is persistent,
//! as the proxy's will be: objects are appended to the one stream in request order and
//! complete in that order (no multiplexing of parallel responses; see docs/workloads.md).

use anyhow::{bail, Context, Result};
use fbdt_core::Instant;
use fbdt_harness::sim::SimBackend;
use fbdt_scenario::{Scenario, Schedule};
use fbdt_sim::{Sim, SimParams, SimScheme};
use serde::Serialize;

/// One object the client asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Request {
    pub bytes: u64,
    /// When the client sends the request (s); it reaches the server `request_delay_s` later.
    pub at_s: f64,
    /// Playback deadline (s): the driver records how many of the object's bytes had been
    /// delivered by then.
    pub deadline_s: Option<f64>,
}

/// What happened to one object: the workload timeline every metric is computed from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ObjectRecord {
    pub object: usize,
    pub bytes: u64,
    pub t_request_s: f64,
    /// When its last byte was delivered in order; `None` if not within the run.
    pub t_complete_s: Option<f64>,
    pub deadline_s: Option<f64>,
    /// Bytes of this object delivered by `deadline_s` (only with a deadline, once it passed).
    pub bytes_by_deadline: Option<u64>,
}

impl ObjectRecord {
    /// A hand-made record for tests of the metrics: `bytes` of which `by_deadline` had
    /// arrived by a deadline at 1 s.
    #[cfg(test)]
    pub fn hand_made(bytes: u64, by_deadline: Option<u64>, t_request_s: f64, t_complete_s: Option<f64>) -> Self {
        ObjectRecord {
            object: 0,
            bytes,
            t_request_s,
            t_complete_s,
            deadline_s: by_deadline.map(|_| 1.0),
            bytes_by_deadline: by_deadline,
        }
    }

    /// Request to last byte, in seconds.
    pub fn completion_s(&self) -> Option<f64> {
        self.t_complete_s.map(|t| t - self.t_request_s)
    }

    /// Share of the object delivered by its deadline (1 without a deadline if complete).
    pub fn fraction_by_deadline(&self) -> f64 {
        match (self.bytes_by_deadline, self.bytes) {
            (_, 0) => 1.0,
            (Some(b), n) => b as f64 / n as f64,
            (None, _) => 0.0,
        }
    }
}

/// The application side of a workload.
pub trait Application: Send {
    /// Called once at the start, at every instant objects completed and at `wake_at`, with the
    /// timeline so far: the requests the client makes from now on (`at_s` before `now_s`
    /// means now). They are appended to the stream in the order returned.
    fn requests(&mut self, now_s: f64, timeline: &[ObjectRecord]) -> Vec<Request>;
    /// No further requests will come: the run ends once every object completed.
    fn finished(&self) -> bool;
    /// A time (s) at which the application wants `requests` called even if nothing
    /// completes then (a live encoder deciding its next GoP). It must move on once called.
    fn wake_at(&self) -> Option<f64> {
        None
    }
}

/// A backend that drives an application: the simulator's [`SimBackend`] (here) and the
/// testbed's [`fbdt_harness::emu::Emu`] (emu.rs) — the backends `fbdt-lab run` uses, so a
/// workload runs wherever a bulk flow runs, through this one call.
pub trait Drive: Sync {
    /// One run of `app` for `scheme` over `scenario` with `seed`, until the application
    /// finished and every object arrived, or the scenario's duration passed.
    fn drive(&self, scenario: &Scenario, scheme: &str, seed: u64, app: &mut dyn Application) -> Result<Drove>;
}

/// What one run of an application produced.
pub struct Drove {
    pub records: Vec<ObjectRecord>,
    /// The testbed's fidelity verdict (none in the simulator).
    pub fidelity: Option<fbdt_emu::Fidelity>,
}

impl Drive for SimBackend {
    fn drive(&self, scenario: &Scenario, name: &str, seed: u64, app: &mut dyn Application) -> Result<Drove> {
        let run = self.prepare(scenario, name, seed)?;
        let delay = request_delay_s(&run.schedule, &run.scheme);
        Ok(Drove {
            records: drive(&run.schedule, &run.scheme, &run.params, delay, app)?,
            fidelity: None,
        })
    }
}

/// Most objects one run may request (bounds the timeline's memory; the testbed's server
/// refuses more).
pub const MAX_OBJECTS: usize = 1_000_000;

fn at(t_s: f64) -> Instant {
    Instant::from_micros((t_s * 1e6).round().max(0.0) as u64)
}

/// Objects requested so far and where each ends in the stream.
#[derive(Default)]
pub(super) struct Objects {
    pub(super) records: Vec<ObjectRecord>,
    /// Stream offset just past each object.
    pub(super) ends: Vec<u64>,
    /// When each object's request reaches the server (non-decreasing: the stream is FIFO).
    write_at_s: Vec<f64>,
    /// Objects with a deadline not yet passed, as (deadline, object), sorted.
    pub(super) deadlines: Vec<(f64, usize)>,
}

impl Objects {
    pub(super) fn add(&mut self, reqs: Vec<Request>, now_s: f64, request_delay_s: f64) -> Result<()> {
        for r in reqs {
            if self.records.len() >= MAX_OBJECTS {
                bail!("the workload asked for more than {MAX_OBJECTS} objects in one run");
            }
            let valid = |v: f64| v.is_finite() && v >= 0.0;
            if !valid(r.at_s) || r.deadline_s.is_some_and(|d| !valid(d)) {
                bail!("a request with a bad time: {r:?}");
            }
            let object = self.records.len();
            let t_request_s = r.at_s.max(now_s);
            let start = self.ends.last().copied().unwrap_or(0);
            let end = start.checked_add(r.bytes).context("stream offset overflow")?;
            let prev_write = self.write_at_s.last().copied().unwrap_or(0.0);
            self.write_at_s.push((t_request_s + request_delay_s).max(prev_write));
            self.ends.push(end);
            if let Some(d) = r.deadline_s {
                let k = self.deadlines.partition_point(|&(t, _)| t <= d);
                self.deadlines.insert(k, (d, object));
            }
            self.records.push(ObjectRecord {
                object,
                bytes: r.bytes,
                t_request_s,
                t_complete_s: None,
                deadline_s: r.deadline_s,
                bytes_by_deadline: None,
            });
        }
        Ok(())
    }

    /// Records what had arrived of each object whose deadline `passed`.
    pub(super) fn note_deadlines(&mut self, passed: impl Fn(f64) -> bool, delivered: u64) {
        while self.deadlines.first().is_some_and(|&(d, _)| passed(d)) {
            let (_, k) = self.deadlines.remove(0);
            let got = delivered.saturating_sub(self.start(k)).min(self.records[k].bytes);
            self.records[k].bytes_by_deadline = Some(got);
        }
    }

    fn start(&self, object: usize) -> u64 {
        if object == 0 {
            0
        } else {
            self.ends[object - 1]
        }
    }
}

/// One workload run: `scheme` over `schedule` until the application is finished and every
/// object arrived, or the schedule's end. `params.transfer_bytes` is ignored (the
/// application decides how much is sent).
pub fn drive(
    schedule: &Schedule,
    scheme: &SimScheme,
    params: &SimParams,
    request_delay_s: f64,
    app: &mut dyn Application,
) -> Result<Vec<ObjectRecord>> {
    let params = SimParams {
        transfer_bytes: None,
        ..params.clone()
    };
    let mut sim = Sim::new(schedule, scheme, &params)?;
    sim.set_app_limit(0);
    let mut objects = Objects::default();
    objects.add(app.requests(0.0, &[]), 0.0, request_delay_s)?;
    let (mut released, mut completed) = (0, 0);
    loop {
        let now = sim.now();
        let now_s = now.as_secs_f64();
        while objects.write_at_s.get(released).is_some_and(|&t| at(t) <= now) {
            sim.set_app_limit(objects.ends[released]);
            released += 1;
        }
        sim.step()?;
        let delivered = sim.bytes_delivered();
        objects.note_deadlines(|d| at(d) <= now, delivered);
        let before = completed;
        while objects.ends.get(completed).is_some_and(|&e| e <= delivered) {
            objects.records[completed].t_complete_s = Some(now_s);
            completed += 1;
        }
        let woken = app.wake_at().is_some_and(|w| at(w) <= now);
        if completed > before || woken {
            let more = app.requests(now_s, &objects.records);
            objects.add(more, now_s, request_delay_s)?;
        }
        if (completed == objects.records.len() && app.finished()) || sim.is_over() {
            return Ok(objects.records);
        }
        let next_write = objects.write_at_s.get(released).copied();
        let next_deadline = objects.deadlines.first().map(|&(d, _)| d);
        let next_app = [next_write, next_deadline, app.wake_at()]
            .into_iter()
            .flatten()
            .reduce(f64::min);
        sim.advance_until(next_app.map(at))?;
    }
}

/// How long a request takes to reach the server: one way on the fastest path the scheme
/// uses, at time 0 (requests are small; their serialisation is not modelled).
pub fn request_delay_s(schedule: &Schedule, scheme: &SimScheme) -> f64 {
    let one_way = |i: usize| schedule.paths[i].at(0.0).delay_ms / 1e3;
    match scheme {
        SimScheme::Tcp(p) => one_way(*p),
        SimScheme::Session(_) => (0..schedule.paths.len()).map(one_way).fold(f64::INFINITY, f64::min),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fbdt_scenario::{PathTimeline, Step};

    /// One constant 80 Mbit/s path (10 MB/s), 10 ms one way.
    fn one_path(duration_s: f64) -> Schedule {
        Schedule {
            duration_s,
            scale: 1.0,
            bottleneck: None,
            paths: vec![PathTimeline {
                name: "p0".into(),
                steps: vec![Step {
                    t_s: 0.0,
                    rate_mbps: 80.0,
                    delay_ms: 10.0,
                    loss: 0.0,
                    scan: false,
                }],
                radio: None,
                bursts: None,
            }],
        }
    }

    /// Asks for the given requests at the start, then nothing.
    struct Fixed(Vec<Request>, bool);

    impl Application for Fixed {
        fn requests(&mut self, _now_s: f64, _timeline: &[ObjectRecord]) -> Vec<Request> {
            self.1 = true;
            std::mem::take(&mut self.0)
        }
        fn finished(&self) -> bool {
            self.1
        }
    }

    fn req(bytes: u64, at_s: f64, deadline_s: Option<f64>) -> Request {
        Request {
            bytes,
            at_s,
            deadline_s,
        }
    }

    #[test]
    fn objects_complete_in_order_after_their_requests_on_every_scheme() {
        let schedule = one_path(10.0);
        for scheme in [
            SimScheme::Tcp(0),
            SimScheme::Session(fbdt_core::Config::default()),
            SimScheme::meta(fbdt_core::SchedulerKind::MinRtt),
        ] {
            let mut app = Fixed(
                vec![
                    req(1_000_000, 0.0, None),
                    req(10, 0.5, Some(0.6)),
                    req(2_000_000, 1.0, Some(1.1)),
                ],
                false,
            );
            let delay = request_delay_s(&schedule, &scheme);
            assert_eq!(delay, 0.01);
            let t = drive(&schedule, &scheme, &SimParams::default(), delay, &mut app).unwrap();
            assert_eq!(t.len(), 3);
            let done: Vec<f64> = t.iter().map(|o| o.t_complete_s.unwrap()).collect();
            // 1 MB at 10 MB/s: ≥ 0.1 s to serialise plus the request's and the data's way.
            assert!(done[0] >= 0.12, "{scheme:?}: {done:?}");
            // The small object was asked for at 0.5 s when the line was idle.
            assert!(done[1] >= 0.52 && done[1] < 0.6, "{scheme:?}: {done:?}");
            assert_eq!(t[1].bytes_by_deadline, Some(10));
            // 2 MB cannot arrive within 0.1 s of its request: the deadline saw part of it.
            let by = t[2].bytes_by_deadline.unwrap();
            assert!(by > 0 && by < 2_000_000, "{scheme:?}: {by}");
            assert!(done[2] >= 1.0 + 0.01 + 0.2 + 0.01, "{scheme:?}: {done:?}");
        }
    }

    /// Requests each next object when the previous completed.
    struct Chain {
        left: usize,
    }

    impl Application for Chain {
        fn requests(&mut self, now_s: f64, _timeline: &[ObjectRecord]) -> Vec<Request> {
            if self.left == 0 {
                return Vec::new();
            }
            self.left -= 1;
            vec![req(100_000, now_s, None)]
        }
        fn finished(&self) -> bool {
            self.left == 0
        }
    }

    #[test]
    fn closed_loop_requests_wait_for_completions_and_a_short_run_leaves_objects_incomplete() {
        let schedule = one_path(10.0);
        let t = drive(
            &schedule,
            &SimScheme::Tcp(0),
            &SimParams::default(),
            0.01,
            &mut Chain { left: 5 },
        )
        .unwrap();
        assert_eq!(t.len(), 5);
        for w in t.windows(2) {
            assert_eq!(Some(w[1].t_request_s), w[0].t_complete_s);
        }
        // Each: 10 ms request, 10 ms serialisation, 10 ms to arrive.
        let c = t[4].completion_s().unwrap();
        assert!((c - 0.03).abs() < 0.002, "{c}");

        let short = one_path(0.05);
        let t = drive(
            &short,
            &SimScheme::Tcp(0),
            &SimParams::default(),
            0.01,
            &mut Chain { left: 5 },
        )
        .unwrap();
        assert!(t.len() < 5 && t.last().unwrap().t_complete_s.is_none(), "{t:?}");
    }
}
