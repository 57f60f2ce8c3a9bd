//! From an `fbdt_scenario` scenario to a [`TestbedSpec`], and the default scale.

use crate::{
    error::{Error, Result},
    spec::{PathPlan, PathStep, SharedPlan, TestbedSpec},
};

/// The testbed spec of `scenario` replayed at `schedule` (rates already scaled).
pub fn spec_from_schedule(
    scenario: &fbdt_scenario::Scenario,
    schedule: &fbdt_scenario::Schedule,
) -> Result<TestbedSpec> {
    let paths = schedule
        .paths
        .iter()
        .map(|t| {
            let path = scenario
                .paths
                .iter()
                .find(|p| p.name == t.name)
                .ok_or_else(|| Error::path(&t.name, "in the schedule but not in the scenario"))?;
            Ok(PathPlan {
                name: t.name.clone(),
                queue_packets: path.queue_packets as usize,
                radio: t.radio,
                bursts: t.bursts,
                steps: t
                    .steps
                    .iter()
                    .map(|s| PathStep {
                        t_s: s.t_s,
                        rate_mbps: s.rate_mbps,
                        delay_ms: s.delay_ms,
                        loss: s.loss,
                        scan: s.scan,
                        one_way_outage: None,
                    })
                    .collect(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let spec = TestbedSpec {
        name: scenario.name.clone(),
        congestion_control: scenario.congestion_control.clone(),
        duration_s: schedule.duration_s,
        scale: schedule.scale,
        seed: scenario.seed,
        paths,
        bottleneck: schedule.bottleneck.as_ref().map(|b| SharedPlan {
            paths: b.paths.clone(),
            rate_mbps: b.rate_mbps,
            // The schedule keeps the queue in bytes of 1500-byte packets, as the scenario
            // gives it.
            queue_packets: (b.queue_bytes / 1500).max(1) as usize,
            competing_tcp: b.competing_tcp,
            competing_delay_ms: b.competing_delay_ms,
        }),
    };
    spec.validate()?;
    Ok(spec)
}

/// Aggregate rate (Mbit/s, summed over the paths at any instant) that the emulator carries
/// on this machine while each path's TCP still gets ≥ 95% of its configured rate (the most
/// TCP can get is 1448/1500 = 96.5% at MTU 1500), by online cores and link MTU.
///
/// Measured (examples/ceiling.rs, rattan-core 0.1.1, Cubic, one emulator thread) on a 2-core
/// Linux 6.18 VM shared with other builds: MTU 1500 — one TCP 0.965 of 200–300 Mbit/s,
/// 0.90 at 400; three paths in parallel 0.95 of 400 Mbit/s total, 0.70 of 800. MTU 9000 —
/// one TCP 0.994 up to 800 Mbit/s; 0.99 of 1000 total, 0.91 of 1600. The entries for 1 and
/// ≥ 3 cores are NOT measured: scaled by the cores left to the emulator (endpoints take
/// about one); measure there with examples/ceiling.rs and pass `--scale`.
pub fn rate_budget_mbps(cores: usize, mtu: u32) -> f64 {
    let base = match cores {
        0..=1 => 150.0,
        2 => 400.0,
        3 => 600.0,
        _ => 800.0,
    };
    if mtu >= 9000 {
        base * 2.5
    } else {
        base
    }
}

/// Online cores of this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A first guess at the scale for a scenario whose unscaled peak total rate (largest
/// instantaneous sum over its paths) is `peak_total_mbps`: 1 when it fits the budget, else
/// budget / peak, rounded down to 3 significant digits. Only the starting point of the
/// measured search ([`crate::calibrate::find_scale`]), which is what runs use.
pub fn default_scale(peak_total_mbps: f64, mtu: u32) -> f64 {
    let budget = rate_budget_mbps(cores(), mtu);
    if peak_total_mbps <= budget || peak_total_mbps <= 0.0 {
        return 1.0;
    }
    round_scale(budget / peak_total_mbps)
}

/// Rounds down to 3 significant digits (so results name a short number).
pub fn round_scale(s: f64) -> f64 {
    if s <= 0.0 || !s.is_finite() {
        return s;
    }
    let exp = s.log10().floor() as i32 - 2;
    let digits = (s / 10f64.powi(exp)).floor();
    // Through the decimal text, so 0.072 is the double nearest 0.072 (not 0.07200000000000001).
    format!("{digits}e{exp}").parse().unwrap_or(s)
}

/// Loads a scenario (built-in name or TOML path) and resolves it at `scale`, or at the
/// machine's [`default_scale`] (for links of `mtu`) when `None`.
pub fn load_spec(name_or_path: &str, scale: Option<f64>, mtu: u32) -> Result<(fbdt_scenario::Scenario, TestbedSpec)> {
    let scen_err = |source| Error::Scenario {
        name: name_or_path.to_string(),
        source,
    };
    let sc = fbdt_scenario::Scenario::load(name_or_path).map_err(scen_err)?;
    let scale = match scale {
        Some(s) if s > 0.0 && s.is_finite() => s,
        Some(s) => return Err(Error::Scale(s)),
        None => {
            let unscaled = spec_from_schedule(&sc, &sc.schedule(1.0).map_err(scen_err)?)?;
            default_scale(unscaled.peak_total_mbps(), mtu)
        }
    };
    let sched = sc.schedule(scale).map_err(scen_err)?;
    let spec = spec_from_schedule(&sc, &sched)?;
    Ok((sc, spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_scale_fits_budget() {
        let b = rate_budget_mbps(cores(), 1500);
        assert_eq!(default_scale(b / 2.0, 1500), 1.0);
        let s = default_scale(b * 5.5, 1500);
        assert!(s * b * 5.5 <= b + 1e-9 && s > 0.17, "{s}");
    }
}
