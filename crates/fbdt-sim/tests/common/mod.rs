//! Random path behaviours shared by the integrity property tests.

use fbdt_scenario::{PathTimeline, Schedule, Step};
use fbdt_sim::{PathReset, SimParams};
use proptest::prelude::*;

#[derive(Clone, Debug)]
pub struct PathPlan {
    pub rate_mbps: f64,
    pub delay_ms: f64,
    /// (start s, length s) of outages.
    pub outages: Vec<(f64, f64)>,
}

pub fn timeline(i: usize, plan: &PathPlan) -> PathTimeline {
    let base = Step {
        t_s: 0.0,
        rate_mbps: plan.rate_mbps,
        delay_ms: plan.delay_ms,
        loss: 0.0,
        scan: false,
    };
    let mut steps = vec![base];
    let mut outages = plan.outages.clone();
    outages.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut last_end = 0.0;
    for (start, len) in outages {
        let start = f64::max(start, last_end + 0.01);
        steps.push(Step {
            t_s: start,
            rate_mbps: 0.0,
            ..base
        });
        steps.push(Step {
            t_s: start + len,
            ..base
        });
        last_end = start + len;
    }
    PathTimeline {
        name: format!("p{i}"),
        steps,
        radio: None,
        bursts: None,
    }
}

pub fn path_plan() -> impl Strategy<Value = PathPlan> {
    (
        1.0f64..2000.0,
        0.05f64..40.0,
        prop::collection::vec((0.0f64..4.0, 0.01f64..1.5), 0..3),
    )
        .prop_map(|(rate_mbps, delay_ms, outages)| PathPlan {
            rate_mbps,
            delay_ms,
            outages,
        })
}

/// The schedule of `plans` over `duration_s`, and a sized transfer of `size` bytes with the
/// connection kills of `kills` — path 0 is the survivor, kills only hit the others.
pub fn setup(
    plans: &[PathPlan],
    kills: Vec<(f64, usize, Option<f64>)>,
    size: u64,
    duration_s: f64,
) -> (Schedule, SimParams) {
    let n = plans.len();
    let schedule = Schedule {
        duration_s,
        scale: 1.0,
        bottleneck: None,
        paths: plans.iter().enumerate().map(|(i, p)| timeline(i, p)).collect(),
    };
    let path_resets: Vec<PathReset> = kills
        .into_iter()
        .filter(|&(_, p, _)| n > 1 && p % n != 0)
        .map(|(at_s, p, reconnect_after_s)| PathReset {
            at_s,
            path: p % n,
            reconnect_after_s,
        })
        .collect();
    let params = SimParams {
        transfer_bytes: Some(size),
        path_resets,
        ..SimParams::default()
    };
    (schedule, params)
}
