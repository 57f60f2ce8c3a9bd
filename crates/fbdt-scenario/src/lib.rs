//! The scenario model shared by the simulator (fbdt-sim), the emulator (fbdt-emu) and the
//! lab (fbdt-lab).
//!
//! A [`Scenario`] is what a user writes (one TOML file): paths with a rate model, delay, loss
//! and queue, plus a timeline of events. [`Scenario::schedule`] resolves it — models sampled
//! with the scenario's seed, traces read, events applied, every rate multiplied by `scale` —
//! into a [`Schedule`]: per path, a sorted list of piecewise-constant [`Step`]s. Both backends
//! consume only the schedule, so they replay exactly the same links.
//!
//! The TOML schema, the limits and the built-ins are documented in docs/scenarios.md.

// CONTRACT (fbdt-sim, fbdt-emu and fbdt-lab depend on these public items; keep their
// names and meaning):
//   Scenario { name, description, duration_s, seed, congestion_control, paths, events, reference, bottleneck }
//   PathSpec { name, delay_ms, loss, queue_packets, .. }
//   Scenario::load(name_or_path) -> Result<Scenario, ScenarioError>
//   Scenario::from_toml_str(text, origin) -> Result<Scenario, ScenarioError>
//   builtin_names() -> Vec<&'static str>;   builtin(name) -> Option<Scenario>
//   Scenario::schedule(&self, scale) -> Result<Schedule, ScenarioError>
//   Schedule { duration_s, scale, paths: Vec<PathTimeline>, bottleneck: Option<SharedLink> }, Schedule::capacity_mbps()
//   PathTimeline { name, steps: Vec<Step>, radio: Option<RadioSleep>, bursts: Option<Bursts> },
//   PathTimeline::at(t_s) -> Step,
//   PathTimeline::mean_rate_mbps(duration_s)
//   Step { t_s, rate_mbps, delay_ms, loss, scan }

mod builtins;
pub mod contention;
mod error;
mod events;
pub mod limits;
pub mod mahimahi;
mod model;
mod parse;
mod sample;
mod schedule;
mod validate;

use std::path::Path;

pub use builtins::{builtin, builtin_names, builtin_text};
pub use error::{Origin, ScenarioError};
pub use model::{Bottleneck, Bursts, Event, EventKind, PathSpec, RadioSleep, RateSpec, RateStep, Scenario};
pub use schedule::{PathTimeline, Schedule, SharedLink, Step};

impl Scenario {
    /// A built-in name (see [`builtin_names`]) or a path to a `.toml` file. Anything with a
    /// `/` or ending in `.toml` is a file, so a stray file named like a built-in is not
    /// picked up by accident.
    pub fn load(name_or_path: &str) -> Result<Scenario, ScenarioError> {
        let looks_like_file = name_or_path.ends_with(".toml")
            || name_or_path.contains(std::path::MAIN_SEPARATOR)
            || name_or_path.contains('/');
        if !looks_like_file {
            if let Some(s) = builtin(name_or_path) {
                return Ok(s);
            }
        }
        let path = Path::new(name_or_path);
        if looks_like_file || path.is_file() {
            return parse::from_file(path);
        }
        Err(ScenarioError::Unknown {
            name: name_or_path.to_string(),
            known: builtin_names().join(", "),
        })
    }

    /// Parses and validates scenario TOML. `origin` names the text in messages; a relative
    /// trace path is resolved against `origin`'s directory.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        parse::from_toml_str(text, origin)
    }

    /// Checks a scenario built or edited in code against the same rules as a file (events
    /// after `duration_s` are allowed: a shortened run just clips them).
    pub fn validate(&self) -> Result<(), ScenarioError> {
        validate::validate(self, false).map_err(|e| ScenarioError::Invalid {
            at: Origin {
                file: self.name.clone(),
                line: None,
            },
            message: format!("{}: {}", schedule::describe(self, &e.loc), e.message),
        })
    }

    /// Resolves models (seeded by `seed` and the path index), traces and events over
    /// `[0, duration_s)` and multiplies every rate by `scale`. Deterministic.
    pub fn schedule(&self, scale: f64) -> Result<Schedule, ScenarioError> {
        schedule::build(self, scale)
    }
}
