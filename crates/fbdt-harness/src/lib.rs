//! The lab's harness: what every experiment shares, below the `fbdt-lab` commands.
//!
//! - [`scheme`]: scheme names as users type them, parsed against a scenario, with the
//!   testbed's limits passed in ([`TestbedLimits`]);
//! - [`results`]: the results JSON as plain data (`SchemeResult` and friends, the one
//!   [`results::fidelity::RunFidelity`]); nothing there runs a backend;
//! - [`traffic`]: what the flows of a run are (bulk, paper 003's bursts);
//! - [`sim`]: the simulator's parameters for a scenario;
//! - [`process`]: programs started around a testbed run.
//!
//! Dependencies point downward: the backends (fbdt-lab's `emu/`, the simulator driver) fill
//! these types; nothing here imports them.

pub mod process;
pub mod results;
pub mod scheme;
pub mod sim;
pub mod traffic;

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
