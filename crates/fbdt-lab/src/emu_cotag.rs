//! COTAG (`cotag[+T=<ms>][+n=<count>]`) and uncoded dual connectivity (`dual-rr`) on the
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
}

/// Parses the options after `cotag`: `T=<ms>` (0.1–100), `n=<count>` (4–128).
pub fn parse(name: &str, opts: std::str::Split<'_, char>) -> Result<CotagScheme> {
    let mut s = CotagScheme {
        period_ms: 1.0,
        max_cohort: None,
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
            _ => bail!("scheme `{name}`: unknown option `{key}` (known for cotag: T, n)"),
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
        c.gateway_queue_dropped = stats.server.cotag_gateway.as_ref().map_or(0, |g| g.queue_dropped);
        c
    }
}

/// The runtime mode of a parsed scheme on this testbed (`None`: dual-rr).
pub fn mode(scheme: Option<&CotagScheme>, tb: &Testbed) -> Mode {
    match scheme {
        None => Mode::DualRr,
        Some(s) => {
            let t_us = (s.period_ms * 1e3).round() as u64;
            let p = match s.max_cohort {
                Some(n) => CotagParams::new(t_us, n),
                None => CotagParams::for_capacity(t_us, tb.spec().peak_total_mbps() * 1e6),
            };
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
        assert_eq!(
            p("cotag").unwrap(),
            CotagScheme {
                period_ms: 1.0,
                max_cohort: None
            }
        );
        let s = p("cotag+T=2+n=32").unwrap();
        assert_eq!((s.period_ms, s.max_cohort), (2.0, Some(32)));
        for bad in [
            "cotag+T=0",
            "cotag+T=x",
            "cotag+n=200",
            "cotag+n=2",
            "cotag+q=1",
            "cotag+T",
        ] {
            let e = p(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("scheme `{bad}`")), "{bad}: {e}");
        }
    }
}
