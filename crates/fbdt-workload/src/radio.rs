//! `--radio`: which paths' radios sleep when idle, and how (docs/scenarios.md, "Radio sleep
//! and wake-up"). Sweeping it is running the workload once per value.

use anyhow::{anyhow, bail, Result};
use fbdt_scenario::{RadioSleep, Scenario};

/// WiFi: a common driver power-save timeout (200 ms) and a short wake-up (2 ms).
pub const WIFI_DEFAULT: RadioSleep = RadioSleep {
    idle_timeout_ms: 200.0,
    wake_ms: 2.0,
};

/// WiGig: dozes sooner and wakes slower (beam re-training); 10 ms lies in the 6–17 ms range
/// that reproduces the paper's crossover (WiFi faster at 100 KB, slower from 1 MB).
pub const WIGIG_DEFAULT: RadioSleep = RadioSleep {
    idle_timeout_ms: 100.0,
    wake_ms: 10.0,
};

/// Applies `spec` to the scenario's paths: `scenario` (unchanged), `off`, `defaults`, or
/// `PATH=IDLE_MS:WAKE_MS[,…]` (other paths keep the scenario's setting).
pub fn apply(scenario: &mut Scenario, spec: &str) -> Result<()> {
    match spec.trim() {
        "scenario" => {}
        "off" => scenario.paths.iter_mut().for_each(|p| p.radio = None),
        "defaults" => {
            for p in &mut scenario.paths {
                match p.name.as_str() {
                    "wifi" => p.radio = Some(WIFI_DEFAULT),
                    "wigig" => p.radio = Some(WIGIG_DEFAULT),
                    _ => {}
                }
            }
        }
        list => {
            for item in list.split(',').map(str::trim) {
                let (path, values) = item
                    .split_once('=')
                    .ok_or_else(|| anyhow!("`{item}`: expected PATH=IDLE_MS:WAKE_MS"))?;
                let (idle, wake) = values
                    .split_once(':')
                    .ok_or_else(|| anyhow!("`{item}`: expected PATH=IDLE_MS:WAKE_MS"))?;
                let num = |v: &str| -> Result<f64> {
                    v.trim().parse().map_err(|_| anyhow!("`{item}`: `{v}` is not a number"))
                };
                let radio = RadioSleep {
                    idle_timeout_ms: num(idle)?,
                    wake_ms: num(wake)?,
                };
                let Some(p) = scenario.paths.iter_mut().find(|p| p.name == path) else {
                    let known: Vec<&str> = scenario.paths.iter().map(|p| p.name.as_str()).collect();
                    bail!("`{item}`: no path `{path}` (paths: {})", known.join(", "));
                };
                p.radio = Some(radio);
            }
        }
    }
    // The scenario's own checks bound the values.
    scenario.validate().map_err(|e| anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radio_specs_set_paths_and_bad_ones_say_why() {
        let base = fbdt_scenario::builtin("los").unwrap();
        let mut s = base.clone();
        apply(&mut s, "defaults").unwrap();
        assert_eq!(s.paths[0].radio, Some(WIFI_DEFAULT));
        assert_eq!(s.paths[1].radio, Some(WIGIG_DEFAULT));
        apply(&mut s, "wigig=50:20").unwrap();
        assert_eq!(s.paths[1].radio.unwrap().wake_ms, 20.0);
        assert_eq!(s.paths[0].radio, Some(WIFI_DEFAULT));
        apply(&mut s, "off").unwrap();
        assert!(s.paths.iter().all(|p| p.radio.is_none()));
        let err = |spec: &str| format!("{:#}", apply(&mut base.clone(), spec).unwrap_err());
        assert!(err("lte=1:1").contains("no path `lte`"));
        assert!(err("wigig=1").contains("PATH=IDLE_MS:WAKE_MS"));
        assert!(err("wigig=x:1").contains("not a number"));
        assert!(err("wigig=0:1").contains("idle_timeout_ms"));
        assert!(err("wigig=10:-1").contains("wake_ms"));
    }
}
