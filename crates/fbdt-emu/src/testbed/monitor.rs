//! The fidelity monitors' view of a running testbed: marks taken at `play()` /
//! `reset_monitors()` and judged against the schedule.

use super::*;

impl Testbed {
    pub(super) fn mark_now(&self) -> Mark {
        Mark {
            at: Instant::now(),
            cpu: CpuSnapshot::now(),
            lateness: self
                .controls
                .iter()
                .map(|c| (c.lateness_down.snapshot(), c.lateness_up.snapshot()))
                .collect(),
            packets: self.emu.as_ref().map_or(PacketStats::default(), |e| e.packet_stats()),
            egress_ip_bytes: match self.opts.datapath {
                Datapath::Rattan | Datapath::Direct => None,
                Datapath::KernelRate => self.egress_ip_bytes(),
            },
        }
    }

    /// Per path, IP-layer bytes the emulator's veth towards the client has sent (what the
    /// kernel's rate stage delivered); `None` if the counters cannot be read.
    fn egress_ip_bytes(&self) -> Option<Vec<u64>> {
        let all = ns::if_counters(&self.emu_ns).ok()?;
        Some(
            (1..=self.paths.len())
                .map(|n| {
                    let dev = emu_client_dev(n);
                    all.iter()
                        .find(|(k, _)| *k == dev)
                        .map_or(0, |(_, c)| c.tx_bytes.saturating_sub(14 * c.tx_packets))
                })
                .collect(),
        )
    }

    /// Monitors count from now ([`Testbed::play`] does this too).
    pub fn reset_monitors(&self) {
        let m = self.mark_now();
        *self.mark.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
    }

    /// What the fidelity monitors saw since the last [`Testbed::play`] or
    /// [`Testbed::reset_monitors`], judged with the default tolerances.
    pub fn fidelity(&self) -> Fidelity {
        self.fidelity_with(&Tolerances::default())
    }

    /// [`Testbed::fidelity`] with other tolerances.
    pub fn fidelity_with(&self, tol: &Tolerances) -> Fidelity {
        let b = self.mark_now();
        let a = self
            .mark
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| b.clone());
        // Interval in schedule time: relative to the player's start when playing, else
        // the first step holds throughout.
        let started = self
            .player
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|p| p.started);
        let rel = |t: Instant| started.map_or(0.0, |s| t.saturating_duration_since(s).as_secs_f64());
        let (from, to) = (rel(a.at), rel(b.at));
        // The competing flows' paths too: the lateness of every packet the emulator moves.
        let paths: Vec<PathInput> = self
            .spec
            .paths
            .iter()
            .chain(self.competitors.iter().map(|(_, plan)| plan))
            .map(|p| PathInput {
                name: p.name.clone(),
                // With the rate in the kernel the count is taken after the loss stage.
                configured_mbps: match self.opts.datapath {
                    Datapath::Rattan | Datapath::Direct => p.delivered_rate_between(from, to),
                    Datapath::KernelRate => p.delivered_after_loss_between(from, to),
                },
            })
            .collect();
        let endpoint_cpus = crate::emu::endpoint_cpus(self.opts.receive_steered());
        let mut f = fidelity::assess(&a, &b, &paths, tol, &endpoint_cpus);
        f.datapath = self.opts.datapath.name().into();
        f.receive_steered = self.opts.receive_steered();
        f.gso_unit_airtime_us = self.opts.gso_units();
        f
    }
}
