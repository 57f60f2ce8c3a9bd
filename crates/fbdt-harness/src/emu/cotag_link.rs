//! COTAG (`cotag[+T=<ms>][+n=<count>][+size=peak|rate][+margin=<packets>][+split=rr|rate]
//! [+fwd=<labels>][+low=<factor>][+burst=<packets>][+burstms=<ms>][+live=<ms>][+carry=0|1][+queue=<packets>][+idle=0|1][+code=sys|cauchy]`) and uncoded dual connectivity (`dual-rr`) on the
//! emulated testbed: one kernel TCP download (the scenario's congestion control) through
//! cotag-net's TUN link between the client and server namespaces. Testbed only, two paths.

use std::time::Instant;

use crate::results::cotag::{CotagCounters, TcpTrace};
use crate::scheme::cotag::CotagScheme;
use anyhow::{bail, Context, Result};
use cotag_net::transfer::{self, Amount};
use cotag_net::{CotagLink, CotagParams, LinkStats, Mode};
use fbdt_emu::perf::Transfer;
use fbdt_emu::Testbed;

/// A run's counters from the COTAG link's statistics (`results[].cotag`).
pub fn counters_from_run(stats: &LinkStats, retrans: u64, params: Option<&CotagParams>) -> CotagCounters {
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
    c.tun_packets_delivered = stats.client.tun_packets_out;
    c.tun_merged_writes = stats.client.tun_merged_writes;
    c.tun_merged_segments = stats.client.tun_merged_segments;
    c.uplink_packets = stats.client.uplink_packets;
    for (i, side) in [&stats.server, &stats.client].into_iter().enumerate() {
        c.loop_late_wakeups[i] = side.late_wakeups;
        c.loop_long_turns[i] = side.long_turns;
        c.loop_max_wake_lag_us[i] = side.max_wake_lag_us;
        c.loop_max_turn_us[i] = side.max_turn_us;
    }
    c
}

/// The runtime mode of a parsed scheme on this testbed (`None`: dual-rr).
pub fn mode(scheme: Option<&CotagScheme>, tb: &Testbed) -> Mode {
    match scheme {
        None => Mode::DualRr,
        Some(s) => {
            let peak_bps = tb.spec().peak_total_mbps() * 1e6;
            let t_us = match s.period_ms {
                Some(ms) => (ms * 1e3).round() as u64,
                None => CotagParams::period_for_capacity(peak_bps),
            };
            let mut p = match s.max_cohort {
                Some(n) => CotagParams::new(t_us, n),
                None => CotagParams::for_capacity(t_us, peak_bps),
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
            if let Some(c) = s.budget_carry {
                p.gateway.budget_carry = c;
            }
            if let Some(code) = s.high_code {
                p.gateway.high_code = code;
            }
            if let Some(i) = s.idle_release {
                p.idle_release = i;
            }
            if let Some(q) = s.gateway_queue {
                p.gateway.queue_packets = q;
            }
            if let Some(b) = s.pace_burst_packets {
                p.pace_burst_bytes = b * f64::from(tb.options().mtu);
                p.pace_burst_us = 0.0;
            }
            if let Some(ms) = s.pace_burst_ms {
                p.pace_burst_us = ms * 1e3;
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
    let mut counters = counters_from_run(&stats, u64::from(t.retransmissions), params.as_ref());
    counters
        .traces
        .push(TcpTrace::new(t.tcp_samples, stats.server.queue_samples.clone()));
    let transfer = Transfer {
        bytes: t.received,
        secs: t.secs,
        goodput_mbps: t.received as f64 * 8.0 / t.secs.max(1e-9) / 1e6,
        series: t.series,
    };
    Ok((transfer, counters))
}
