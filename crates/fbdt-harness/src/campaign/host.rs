//! Where a case ran: stamped into its result, so a merged campaign says which machine
//! measured what.

use serde::{Deserialize, Serialize};

/// The host of one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostStamp {
    pub hostname: String,
    /// `model name` of the first CPU.
    pub cpu_model: String,
    /// Online cores.
    pub cores: usize,
    /// `uname -r`.
    pub kernel: String,
    /// The Slurm job and array task, when the case ran under Slurm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job: Option<String>,
    /// Testbed cases: the rate scale the host emulated and where it came from (the host's
    /// cached calibration, the command line, or measured for this run) — the reference the
    /// case's numbers are relative to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub testbed_reference: Option<String>,
}

impl HostStamp {
    pub fn current() -> Self {
        let key = fbdt_emu::HostKey::current();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_or_else(|_| "unknown".into(), |s| s.trim().to_string());
        let slurm_job = match (
            std::env::var("SLURM_ARRAY_JOB_ID"),
            std::env::var("SLURM_ARRAY_TASK_ID"),
        ) {
            (Ok(j), Ok(t)) => Some(format!("{j}_{t}")),
            _ => std::env::var("SLURM_JOB_ID").ok(),
        };
        HostStamp {
            hostname,
            cpu_model: key.cpu_model,
            cores: key.cores,
            kernel: key.kernel,
            slurm_job,
            testbed_reference: None,
        }
    }
}
