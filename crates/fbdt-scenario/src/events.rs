//! Expanding events (repeats, `until_s`) into concrete instances on one path.

use crate::limits::MAX_STEPS_PER_PATH;
use crate::model::{Event, EventKind};

/// One occurrence of an event: its effect holds in `[start, end)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Instance {
    /// Index of the event in `Scenario::events` (file order).
    pub event: usize,
    pub start: f64,
    pub end: f64,
    pub kind: EventKind,
}

/// Instances of every event on `path` that start before `duration_s`, in file order then
/// time. Errors (as a message) when an event would repeat more than the step budget allows.
pub(crate) fn expand(events: &[Event], path: &str, duration_s: f64) -> Result<Vec<Instance>, (usize, String)> {
    let mut out = Vec::new();
    for (i, ev) in events.iter().enumerate().filter(|(_, e)| e.path == path) {
        let until = ev.until_s.unwrap_or(f64::INFINITY);
        let stop = until.min(duration_s);
        let span = ev.kind.duration_s();
        let mut k: usize = 0;
        loop {
            // Multiply rather than accumulate so repeats do not drift.
            let start = ev.at_s + k as f64 * ev.every_s.unwrap_or(0.0);
            if start >= stop {
                break;
            }
            let end = match span {
                Some(d) => (start + d).min(until),
                None => until,
            };
            out.push(Instance {
                event: i,
                start,
                end,
                kind: ev.kind,
            });
            if ev.every_s.is_none() {
                break;
            }
            k += 1;
            if k > MAX_STEPS_PER_PATH {
                return Err((
                    i,
                    format!("repeats more than {MAX_STEPS_PER_PATH} times within the run; use a larger every_s"),
                ));
            }
        }
    }
    Ok(out)
}
