//! [`run`]: the loop over the stepping machine ([`crate::Sim`]); what it is given and
//! returns is in [`crate::params`].

use fbdt_scenario::Schedule;

use crate::error::SimError;
use crate::params::{SimOutcome, SimParams, SimScheme};
use crate::sim::Sim;

/// Runs `scheme` over `schedule` for `schedule.duration_s` seconds. `progress` is called
/// with the simulated time at every sample.
pub fn run(
    schedule: &Schedule,
    scheme: &SimScheme,
    params: &SimParams,
    mut progress: impl FnMut(f64),
) -> Result<SimOutcome, SimError> {
    let mut sim = Sim::new(schedule, scheme, params)?;
    loop {
        let shown = sim.series().len();
        sim.step()?;
        sim.series()[shown..].iter().for_each(|&(t, _)| progress(t));
        if sim.is_over() {
            return Ok(sim.finish());
        }
        sim.advance()?;
    }
}
