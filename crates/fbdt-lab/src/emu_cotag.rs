//! COTAG (`cotag[+T=<ms>][+n=<count>][+size=peak|rate][+margin=<packets>][+split=rr|rate]
//! [+fwd=<labels>][+low=<factor>][+burst=<packets>][+live=<ms>]`) and uncoded dual connectivity (`dual-rr`) on the
//! emulated testbed: one kernel TCP download (the scenario's congestion control) through
//! cotag-net's TUN link between the client and server namespaces. Testbed only, two paths.

use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use cotag_net::transfer::{self, Amount};
use cotag_net::{CotagLink, CotagParams, LinkStats, Mode};
use fbdt_emu::perf::Transfer;
use fbdt_emu::Testbed;
use serde::{Deserialize, Serialize};

/// The scheme string's COTAG options.
#[derive(Clone, Debug, PartialEq)]
pub struct CotagScheme {
    /// The cohort period T, ms (default 1).
    pub period_ms: f64,
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
    /// `burst=<packets>`: the AP pacers' token-bucket depth in full-size packets.
    pub pace_burst_packets: Option<f64>,
    /// `live=<ms>`: the device's liveness timeout.
    pub device_liveness_ms: Option<f64>,
}

impl Default for CotagScheme {
    fn default() -> Self {
        CotagScheme {
            period_ms: 1.0,
            max_cohort: None,
            size_margin: Some(cotag_net::link::COHORT_MARGIN),
            split_by_rate: true,
            forward_labels: None,
            low_factor: None,
            pace_burst_packets: None,
            device_liveness_ms: None,
        }
    }
}

/// Parses the options after `cotag`: `T=<ms>` (0.1–100), `n=<count>` (4–128), `size=peak|rate`,
/// `margin=<packets>` (0–64, implies `size=rate`), `split=rr|rate`, `fwd=<labels>` (1–16),
/// `low=<factor>` (0–16), `burst=<packets>` (1–64), `live=<ms>` (0.1–1000).
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
                s.period_ms = t;
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
            "live" => {
                let l = number(value)?;
                if !(0.1..=1000.0).contains(&l) {
                    bail!("scheme `{name}`: live must be 0.1–1000 ms, got {value}");
                }
                s.device_liveness_ms = Some(l);
            }
            _ => bail!("scheme `{name}`: unknown option `{key}` (known for cotag: T, n, size, margin, split, fwd, low, burst, live)"),
        }
    }
    Ok(s)
}

/// What a COTAG / dual-rr run adds to the results JSON (summed over repetitions; the
/// ratio is over all of them).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CotagCounters {
    /// The sender's kernel TCP retransmissions (TCP_INFO `tcpi_total_retrans`).
    pub tcp_retransmissions: u64,
    /// COTAG only: coded bytes received per original byte delivered, minus one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coding_overhead: Option<f64>,
    pub cohorts_decoded: u64,
    /// Cohorts the device dropped whole (decode failures).
    pub cohorts_failed: u64,
    /// Coded packets the APs flushed unsent (giving) and dropped with a full buffer.
    pub ap_flushed: u64,
    pub ap_full_dropped: u64,
    /// Packets the gateway dropped with its queue full (above max_cohort per T for long).
    pub gateway_queue_dropped: u64,
    pub max_cohort: Option<usize>,
    pub period_ms: Option<f64>,
    /// Coded bytes the device received and original bytes it delivered (the overhead's terms).
    pub bytes_received: u64,
    pub bytes_delivered: u64,
    /// High combinations the gateway gave up at the end of their send interval, and cohorts
    /// it closed smaller to fit the links' current rates (`size=rate`).
    #[serde(default)]
    pub gateway_high_given_up: u64,
    #[serde(default)]
    pub gateway_budget_capped: u64,
    /// The COTAG loops' timeliness, server (gateway + APs) and client (device): turns that
    /// woke > 250 µs late, turns that worked > 250 µs, the worst of each (µs; max over runs).
    #[serde(default)]
    pub loop_late_wakeups: [u64; 2],
    #[serde(default)]
    pub loop_long_turns: [u64; 2],
    #[serde(default)]
    pub loop_max_wake_lag_us: [u64; 2],
    #[serde(default)]
    pub loop_max_turn_us: [u64; 2],
    /// Failed cohorts by the rule that lost them (COTAG only).
    #[serde(default, skip_serializing_if = "Option::is_none", skip_deserializing)]
    pub failures: Option<cotag_net::FailureBreakdown>,
}

impl CotagCounters {
    pub fn add(&mut self, other: &CotagCounters) {
        self.tcp_retransmissions += other.tcp_retransmissions;
        self.cohorts_decoded += other.cohorts_decoded;
        self.cohorts_failed += other.cohorts_failed;
        self.ap_flushed += other.ap_flushed;
        self.ap_full_dropped += other.ap_full_dropped;
        self.gateway_queue_dropped += other.gateway_queue_dropped;
        self.bytes_received += other.bytes_received;
        self.bytes_delivered += other.bytes_delivered;
        self.gateway_high_given_up += other.gateway_high_given_up;
        self.gateway_budget_capped += other.gateway_budget_capped;
        for i in 0..2 {
            self.loop_late_wakeups[i] += other.loop_late_wakeups[i];
            self.loop_long_turns[i] += other.loop_long_turns[i];
            self.loop_max_wake_lag_us[i] = self.loop_max_wake_lag_us[i].max(other.loop_max_wake_lag_us[i]);
            self.loop_max_turn_us[i] = self.loop_max_turn_us[i].max(other.loop_max_turn_us[i]);
        }
        if let Some(f) = &other.failures {
            self.failures.get_or_insert_with(Default::default).add(f);
        }
        self.max_cohort = other.max_cohort;
        self.period_ms = other.period_ms;
        self.coding_overhead = (other.coding_overhead.is_some() && self.bytes_delivered > 0)
            .then(|| self.bytes_received as f64 / self.bytes_delivered as f64 - 1.0);
    }

    pub(crate) fn from_run(stats: &LinkStats, retrans: u64, params: Option<&CotagParams>) -> CotagCounters {
        let mut c = CotagCounters {
            tcp_retransmissions: retrans,
            coding_overhead: stats.coding_overhead(),
            max_cohort: params.map(|p| p.gateway.max_cohort),
            period_ms: params.map(|p| p.gateway.period_us as f64 / 1e3),
            ..CotagCounters::default()
        };
        if let Some(d) = &stats.client.cotag_device {
            c.cohorts_decoded = d.cohorts_decoded;
            c.cohorts_failed = d.cohorts_failed;
            c.bytes_received = d.bytes_received;
            c.bytes_delivered = d.bytes_delivered;
        }
        for ap in stats.server.cotag_aps.iter().flatten() {
            c.ap_flushed += ap.flushed;
            c.ap_full_dropped += ap.full_dropped_low + ap.full_dropped_high + ap.full_evicted_low;
        }
        if let Some(g) = &stats.server.cotag_gateway {
            c.gateway_queue_dropped = g.queue_dropped;
            c.gateway_high_given_up = g.high_given_up;
            c.gateway_budget_capped = g.cohorts_budget_capped;
        }
        c.failures = stats.failures();
        for (i, side) in [&stats.server, &stats.client].into_iter().enumerate() {
            c.loop_late_wakeups[i] = side.late_wakeups;
            c.loop_long_turns[i] = side.long_turns;
            c.loop_max_wake_lag_us[i] = side.max_wake_lag_us;
            c.loop_max_turn_us[i] = side.max_turn_us;
        }
        c
    }
}

/// The runtime mode of a parsed scheme on this testbed (`None`: dual-rr).
pub fn mode(scheme: Option<&CotagScheme>, tb: &Testbed) -> Mode {
    match scheme {
        None => Mode::DualRr,
        Some(s) => {
            let t_us = (s.period_ms * 1e3).round() as u64;
            let mut p = match s.max_cohort {
                Some(n) => CotagParams::new(t_us, n),
                None => CotagParams::for_capacity(t_us, tb.spec().peak_total_mbps() * 1e6),
            };
            p.gateway.cohort_size = match s.size_margin {
                Some(margin) => cotag::CohortSize::Budget { margin },
                None => cotag::CohortSize::MaxCohort,
            };
            p.gateway.high_split = if s.split_by_rate {
                cotag::HighSplit::Budget
            } else {
                cotag::HighSplit::RoundRobin
            };
            if let Some(w) = s.forward_labels {
                p.ap.forward_labels = w;
            }
            if let Some(f) = s.low_factor {
                p.gateway.low_factor = f;
            }
            if let Some(l) = s.device_liveness_ms {
                p.device.liveness_us = (l * 1e3).round() as u64;
            }
            if let Some(b) = s.pace_burst_packets {
                p.pace_burst_bytes = b * f64::from(tb.options().mtu);
            }
            Mode::Cotag(Box::new(p))
        }
    }
}

/// Downloads for `secs` through the link; `played` is when `tb.play()` started the schedule.
pub fn download(
    tb: &Testbed,
    mode: Mode,
    played: Instant,
    secs: f64,
    seed: u64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<(Transfer, CotagCounters)> {
    if tb.paths().len() != cotag::LINKS {
        bail!("cotag and dual-rr need a scenario with exactly two paths");
    }
    let params = match &mode {
        Mode::Cotag(p) => Some((**p).clone()),
        Mode::DualRr => None,
    };
    let link = CotagLink::start(tb, mode, played).context("starting the COTAG link")?;
    let t = transfer::download(tb, Amount::Secs(secs), seed, progress);
    let stats = link.stop().context("stopping the COTAG link")?;
    let t = t.context("the download through the COTAG link")?;
    if t.received > t.sent || (t.received == t.sent && !t.intact()) {
        bail!(
            "the download arrived corrupted ({} of {} bytes, hashes differ)",
            t.received,
            t.sent
        );
    }
    let counters = CotagCounters::from_run(&stats, u64::from(t.retransmissions), params.as_ref());
    let transfer = Transfer {
        bytes: t.received,
        secs: t.secs,
        goodput_mbps: t.received as f64 * 8.0 / t.secs.max(1e-9) / 1e6,
        series: t.series,
    };
    Ok((transfer, counters))
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
        assert_eq!((s.period_ms, s.max_cohort), (2.0, Some(32)));
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
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("scheme `{bad}`")), "{bad}: {e}");
        }
    }
}
