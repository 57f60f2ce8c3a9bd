//! fbdt-emu: the multi-radio testbed.
//!
//! A client namespace with one interface per radio, a server namespace, and between them
//! N paths emulated in userspace by rattan-core (rate, delay, loss, outages, scans) in a
//! third namespace. Policy routing sends each client address over its own path; kernel
//! MPTCP endpoints make an IPPROTO_MPTCP socket use every path. The same links carry FBDT,
//! kernel MPTCP and single-path TCP.
//!
//! ```text
//!  client ns (fbdt-<pid>-<n>-cli)     emulator ns (…-emu)              server ns (…-srv)
//!  wifi  10.200.1.1 ──veth── ec1 ⇄ [rate→delay→loss] ⇄ es1 ──veth── wifi  10.200.1.2
//!  wigig 10.200.2.1 ──veth── ec2 ⇄ [rate→delay→loss] ⇄ es2 ──veth── wigig 10.200.2.2
//! ```
//!
//! Start with [`Testbed::start`]; see docs/testbed.md.

pub mod calibrate;
mod cleanup;
pub mod emu;
pub mod error;
pub mod fidelity;
pub mod hostcache;
pub mod ns;
mod others;
pub mod perf;
pub mod probe;
pub mod radio;
pub mod reaper;
pub mod scenario;
pub mod spec;
pub mod stamp;
mod testbed;

pub use calibrate::{calibrate, find_scale, CalibrationReport, PathCalibration, ScaleSearch};
pub use cleanup::{clean_leftovers, cleanup_registered, install_signal_handler, CleanReport};
pub use error::{Error, Result};
pub use fidelity::{Fidelity, PathFidelity, Tolerances};
pub use hostcache::{HostKey, ScaleCache};
pub use ns::{IfCounters, NS_PREFIX};
pub use scenario::{default_scale, load_spec, spec_from_schedule};
pub use spec::{Direction, LinkMode, PathPlan, PathStep, SharedPlan, TestbedSpec};
pub use testbed::{
    AppliedStep, ArmedReset, BottleneckBytes, Datapath, PathCounters, PathInfo, Side, Testbed, TestbedOptions, DEFAULT_GSO_UNIT_AIRTIME_US,
};

/// Why root tests must be skipped here, if they must (not root / no CAP_NET_ADMIN / no `ip`).
pub fn skip_reason() -> Option<String> {
    match ns::privileged() {
        Ok(()) => None,
        Err(Error::NotPrivileged { reason }) => Some(reason),
        Err(e) => Some(e.to_string()),
    }
}
