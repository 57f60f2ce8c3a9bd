//! COTAG's scheme options (`cotag[+T=<ms>][+n=<count>][+size=peak|rate][+margin=<packets>]
//! [+split=rr|rate][+fwd=<labels>][+low=<factor>][+burst=<packets>][+burstms=<ms>][+live=<ms>][+carry=0|1]
//! [+queue=<packets>][+idle=0|1][+code=sys|cauchy]`), as the
//! testbed's COTAG link takes them (fbdt-lab's `emu/cotag.rs` turns them into a link mode).

use anyhow::{anyhow, bail, Result};

/// The scheme string's COTAG options.
#[derive(Clone, Debug, PartialEq)]
pub struct CotagScheme {
    /// The cohort period T, ms; default (`None`): 1 ms, shorter where a period at the
    /// scenario's peak rate holds more than the largest cohort
    /// (`cotag_net::CotagParams::period_for_capacity`).
    pub period_ms: Option<f64>,
    /// Cohort cap n_k; default: what both paths carry in T at the scenario's peak rate.
    pub max_cohort: Option<usize>,
    /// `size=rate` (default, `Some(margin)`): each cohort also at most what both links carry
    /// in T at their current scheduled rate, less `margin=` packets left for Low extras
    /// (default `cotag_net::link::COHORT_MARGIN`);
    /// `size=peak` (`None`): only the cap.
    pub size_margin: Option<usize>,
    /// `split=rate` (default): Highs in proportion to the links' current rates; `rr`:
    /// alternating.
    pub split_by_rate: bool,
    /// `fwd=<w>`: an AP forwards a cohort for w labels after the one that released it.
    pub forward_labels: Option<u32>,
    /// `low=<factor>`: the gateway's Low extras per cohort, × n_k.
    pub low_factor: Option<f64>,
    /// `burst=<packets>`: the AP pacers' token-bucket depth in full-size packets, whatever
    /// the rate (before round 4 of issue 44: 8 packets).
    pub pace_burst_packets: Option<f64>,
    /// `burstms=<ms>`: the bucket holds this long at the link's current rate (default one
    /// period, `cotag_net::params::PACE_BURST_PERIODS`), at least 8 packets.
    pub pace_burst_ms: Option<f64>,
    /// `live=<ms>`: the device's liveness timeout.
    pub device_liveness_ms: Option<f64>,
    /// `carry=0|1`: carry each link's fraction of a packet per period to the next cohort
    /// (`cotag::GatewayConfig::budget_carry`).
    pub budget_carry: Option<bool>,
    /// `queue=<packets>`: the gateway's queue bound.
    pub gateway_queue: Option<usize>,
    /// `idle=0|1`: the APs release held cohorts when the gateway falls idle
    /// (`cotag_net::CotagParams::idle_release`).
    pub idle_release: Option<bool>,
    /// `code=sys|cauchy`: the High combinations' coefficients (`cotag::HighCode`; default
    /// systematic).
    pub high_code: Option<cotag::HighCode>,
}

impl Default for CotagScheme {
    fn default() -> Self {
        CotagScheme {
            period_ms: None,
            max_cohort: None,
            size_margin: Some(cotag_net::link::COHORT_MARGIN),
            split_by_rate: true,
            forward_labels: None,
            low_factor: None,
            pace_burst_packets: None,
            pace_burst_ms: None,
            device_liveness_ms: None,
            budget_carry: None,
            gateway_queue: None,
            idle_release: None,
            high_code: None,
        }
    }
}

/// Parses the options after `cotag`: `T=<ms>` (0.1–100; without it, see
/// [`CotagScheme::period_ms`]), `n=<count>` (4–128), `size=peak|rate`,
/// `margin=<packets>` (0–64, implies `size=rate`), `split=rr|rate`, `fwd=<labels>` (1–16),
/// `low=<factor>` (0–16), `burst=<packets>` (1–64), `burstms=<ms>` (0–100), `live=<ms>` (0.1–1000), `carry=0|1`,
/// `queue=<packets>` (128–65536), `idle=0|1`, `code=sys|cauchy`.
pub fn parse(name: &str, opts: std::str::Split<'_, char>) -> Result<CotagScheme> {
    let mut s = CotagScheme::default();
    let number = |value: &str| -> Result<f64> {
        value
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| anyhow!("scheme `{name}`: `{value}` is not a number"))
    };
    // A whole number of packets or labels in `lo..=hi`.
    let whole = |key: &str, value: &str, lo: u32, hi: u32| -> Result<u32> {
        let x = number(value)?;
        if !(f64::from(lo)..=f64::from(hi)).contains(&x) || x.fract() != 0.0 {
            bail!("scheme `{name}`: {key} must be a whole {lo}–{hi}, got {value}");
        }
        Ok(x as u32)
    };
    for opt in opts {
        let (key, value) = opt
            .split_once('=')
            .ok_or_else(|| anyhow!("scheme `{name}`: option `{opt}` must be key=value"))?;
        match key {
            "T" => {
                let t: f64 = value
                    .parse()
                    .map_err(|_| anyhow!("scheme `{name}`: T=`{value}` is not a number"))?;
                if !(0.1..=100.0).contains(&t) {
                    bail!("scheme `{name}`: T must be 0.1–100 ms, got {t}");
                }
                s.period_ms = Some(t);
            }
            "n" => {
                let n: usize = value
                    .parse()
                    .map_err(|_| anyhow!("scheme `{name}`: n=`{value}` is not a count"))?;
                if !(4..=cotag::gf::MAX_CAUCHY).contains(&n) {
                    bail!("scheme `{name}`: n must be 4–{}, got {n}", cotag::gf::MAX_CAUCHY);
                }
                s.max_cohort = Some(n);
            }
            "size" => match value {
                "peak" => s.size_margin = None,
                "rate" => s.size_margin = Some(s.size_margin.unwrap_or(cotag_net::link::COHORT_MARGIN)),
                _ => bail!("scheme `{name}`: size must be peak or rate, got `{value}`"),
            },
            "margin" => s.size_margin = Some(whole(key, value, 0, 64)? as usize),
            "split" => match value {
                "rr" => s.split_by_rate = false,
                "rate" => s.split_by_rate = true,
                _ => bail!("scheme `{name}`: split must be rr or rate, got `{value}`"),
            },
            "fwd" => s.forward_labels = Some(whole(key, value, 1, 16)?),
            "low" => {
                let f = number(value)?;
                if !(0.0..=16.0).contains(&f) {
                    bail!("scheme `{name}`: low must be 0–16, got {value}");
                }
                s.low_factor = Some(f);
            }
            "burst" => {
                let b = number(value)?;
                if !(1.0..=64.0).contains(&b) {
                    bail!("scheme `{name}`: burst must be 1–64 packets, got {value}");
                }
                s.pace_burst_packets = Some(b);
            }
            "burstms" => {
                let b = number(value)?;
                if !(0.0..=100.0).contains(&b) {
                    bail!("scheme `{name}`: burstms must be 0–100 ms, got {value}");
                }
                s.pace_burst_ms = Some(b);
            }
            "live" => {
                let l = number(value)?;
                if !(0.1..=1000.0).contains(&l) {
                    bail!("scheme `{name}`: live must be 0.1–1000 ms, got {value}");
                }
                s.device_liveness_ms = Some(l);
            }
            "carry" => match value {
                "0" => s.budget_carry = Some(false),
                "1" => s.budget_carry = Some(true),
                _ => bail!("scheme `{name}`: carry must be 0 or 1, got `{value}`"),
            },
            "idle" => match value {
                "0" => s.idle_release = Some(false),
                "1" => s.idle_release = Some(true),
                _ => bail!("scheme `{name}`: idle must be 0 or 1, got `{value}`"),
            },
            "code" => match value {
                "sys" => s.high_code = Some(cotag::HighCode::Systematic),
                "cauchy" => s.high_code = Some(cotag::HighCode::Cauchy),
                _ => bail!("scheme `{name}`: code must be sys or cauchy, got `{value}`"),
            },
            // At least the largest cohort (128), which the gateway requires.
            "queue" => s.gateway_queue = Some(whole(key, value, cotag::gf::MAX_CAUCHY as u32, 65_536)? as usize),
            _ => bail!("scheme `{name}`: unknown option `{key}` (known for cotag: T, n, size, margin, split, fwd, low, burst, burstms, live, carry, queue, idle, code)"),
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_period_and_cohort_cap() {
        let p = |s: &'static str| {
            let mut parts = s.split('+');
            parts.next();
            parse(s, parts)
        };
        assert_eq!(p("cotag").unwrap(), CotagScheme::default());
        let s = p("cotag+T=2+n=32").unwrap();
        assert_eq!((s.period_ms, s.max_cohort), (Some(2.0), Some(32)));
        let s = p("cotag+size=peak+split=rr+fwd=2+low=0.5+burst=3+live=3").unwrap();
        assert_eq!(
            (s.size_margin, s.split_by_rate, s.forward_labels, s.low_factor),
            (None, false, Some(2), Some(0.5))
        );
        assert_eq!((s.pace_burst_packets, s.device_liveness_ms), (Some(3.0), Some(3.0)));
        let s = p("cotag").unwrap();
        assert_eq!(
            (s.size_margin, s.split_by_rate),
            (Some(cotag_net::link::COHORT_MARGIN), true)
        );
        assert_eq!(p("cotag+margin=0").unwrap().size_margin, Some(0));
        assert_eq!(p("cotag+margin=2").unwrap().size_margin, Some(2));
        let s = p("cotag+carry=0+queue=256").unwrap();
        assert_eq!((s.budget_carry, s.gateway_queue), (Some(false), Some(256)));
        assert_eq!(p("cotag+carry=1").unwrap().budget_carry, Some(true));
        assert_eq!(p("cotag+idle=0").unwrap().idle_release, Some(false));
        assert_eq!(p("cotag+code=cauchy").unwrap().high_code, Some(cotag::HighCode::Cauchy));
        assert_eq!(p("cotag+code=sys").unwrap().high_code, Some(cotag::HighCode::Systematic));
        for bad in [
            "cotag+T=0",
            "cotag+T=x",
            "cotag+n=200",
            "cotag+n=2",
            "cotag+q=1",
            "cotag+T",
            "cotag+size=x",
            "cotag+split=x",
            "cotag+fwd=0",
            "cotag+fwd=1.5",
            "cotag+low=-1",
            "cotag+margin=100",
            "cotag+carry=2",
            "cotag+idle=yes",
            "cotag+code=dense",
            "cotag+queue=10",
            "cotag+queue=1e9",
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("scheme `{bad}`")), "{bad}: {e}");
        }
    }
}
