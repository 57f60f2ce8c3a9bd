//! The lab's harness: what every experiment shares, below the `fbdt-lab` commands.
//!
//! - [`scheme`]: scheme names as users type them, parsed against a scenario, with the
//!   testbed's limits passed in ([`TestbedLimits`]);
//! - [`results`]: the results JSON as plain data (`SchemeResult` and friends, the one
//!   [`results::fidelity::RunFidelity`]); nothing there runs a backend;
//! - [`traffic`]: what the flows of a run are (bulk, paper 003's bursts);
//! - [`sim`]: the simulator's parameters for a scenario;
//! - [`process`]: programs started around a testbed run;
//! - [`backend`]: the [`backend::Backend`] trait — one scheme, one run — with the
//!   simulator's implementation in [`sim`] and the testbed's in [`emu`], and the one
//!   [`backend::aggregate`] of repetitions into a result; [`error::HarnessError`] is what
//!   they fail with;
//! - [`campaign`]: a command's cases as a manifest, one result file per case, merged;
//! - [`faults`]: the fault campaign (seeded plans, the simulator's runs, their summary);
//! - [`progress`]: progress bars that log when stderr is not a terminal; [`parallel`]:
//!   independent simulator runs spread over cores.
//! - [`agree`]: `fbdt-lab agree`, the simulator's TCP-level model against a testbed
//!   suite (the command's arguments and its work; fbdt-lab only mounts it).
//! - [`cotag_grid`]: paper 003's grid on the testbed (`fbdt-lab sweep --cotag`, the COTAG
//!   section of `fbdt-lab paper`): its settings and points as data, the runs that fill
//!   them, the paper's claims judged over them; the arguments stay in fbdt-lab.
//!
//! Dependencies point downward: the results model imports no backend; the backends fill it.

pub mod agree;
pub mod backend;
pub mod campaign;
pub mod cotag_grid;
pub mod emu;
pub mod error;
pub mod faults;
pub mod parallel;
pub mod process;
pub mod progress;
pub mod results;
pub mod scheme;
pub mod sim;
pub mod traffic;

pub use backend::{Backend, BackendKind, Outcome};
pub use error::HarnessError;

/// What the testbed lets every kernel socket grow to, passed to whatever must match it (the
/// simulator's windows, FBDT's and the meta layer's buffers): a scheme is then one
/// configuration on both backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestbedLimits {
    /// `tcp_rmem`/`tcp_wmem` maximum on the testbed, bytes (`None`: the kernel's default).
    pub tcp_buffer_max: Option<u64>,
}

impl From<&fbdt_emu::TestbedOptions> for TestbedLimits {
    fn from(o: &fbdt_emu::TestbedOptions) -> Self {
        TestbedLimits {
            tcp_buffer_max: o.tcp_buffer_max,
        }
    }
}

/// Overrides the scenario's duration (`--duration`), checked.
pub fn set_duration(scenario: &mut fbdt_scenario::Scenario, duration: Option<f64>) -> anyhow::Result<()> {
    if let Some(d) = duration {
        if !(d.is_finite() && d > 0.0 && d <= 86_400.0) {
            anyhow::bail!("--duration must be in (0, 86400] seconds, got {d}");
        }
        scenario.duration_s = d;
    }
    Ok(())
}
