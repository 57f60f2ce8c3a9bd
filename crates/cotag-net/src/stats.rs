//! Counters of both ends, serialisable for the results JSON.

use cotag::{ApStats, DeviceStats, GatewayStats, LINKS};
use serde::Serialize;

/// One end's runtime counters (which fields move depends on the end and the mode).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SideStats {
    /// IP packets read from the TUN device on the downlink (server end), and the reads that
    /// brought them (a TSO super-packet is one read of many packets).
    pub tun_packets_in: u64,
    pub tun_reads: u64,
    pub tun_bytes_in: u64,
    /// IP packets written into the TUN device (client end: delivered to TCP).
    pub tun_packets_out: u64,
    pub tun_bytes_out: u64,
    pub tun_write_errors: u64,
    /// Client end: writes that carried a run of merged segments, and the segments in them
    /// (`tun_packets_out` counts every IP packet delivered, merged or not).
    pub tun_merged_writes: u64,
    pub tun_merged_segments: u64,
    /// Datagrams sent / received per path (server sends, client receives the downlink).
    pub packets_out: [u64; LINKS],
    pub bytes_out: [u64; LINKS],
    pub packets_in: [u64; LINKS],
    pub bytes_in: [u64; LINKS],
    /// Datagrams a full socket buffer refused.
    pub send_dropped: u64,
    /// Loop turns that started more than [`LATE_WAKE_US`] after the time the loop asked to
    /// wake (the core's next timer or pacer slot): the thread waited for a CPU or spent the
    /// time coding. The largest such lag, µs.
    pub late_wakeups: u64,
    pub max_wake_lag_us: u64,
    /// Loop turns whose work (reading, coding, sending) took more than [`LATE_WAKE_US`]:
    /// meanwhile no pacer slot is served. The longest turn, µs.
    pub long_turns: u64,
    pub max_turn_us: u64,
    /// CPU time of the end's loop thread and the loop's wall time, µs: a ratio near 1 is a
    /// loop that never waits (CPU-bound); the share a busy host leaves it is below 1 too.
    pub loop_cpu_us: u64,
    pub loop_wall_us: u64,
    /// Server end: CPU time of the uplink thread (ACKs → TUN, incl. the kernel's TCP work
    /// those writes run), µs.
    pub uplink_cpu_us: u64,
    /// Packets the gateway refused (longer than the coding allows).
    pub rejected: u64,
    /// Uplink packets forwarded (client: read from TUN; server: written to TUN).
    pub uplink_packets: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cotag_gateway: Option<GatewayStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cotag_aps: Option<[ApStats; LINKS]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cotag_device: Option<DeviceStats>,
    /// Server end, COTAG: the gateway's queue and the APs' buffers every
    /// [`QUEUE_SAMPLE_US`] (at most [`QUEUE_SAMPLES_CAP`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queue_samples: Vec<QueueSample>,
    /// Per-label records for [`LinkStats::failures`] (not serialised: the breakdown is).
    #[serde(skip)]
    pub records: LabelRecords,
}

/// Both ends' counters after a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinkStats {
    pub server: SideStats,
    pub client: SideStats,
}

impl LinkStats {
    /// Failed cohorts by the rule that lost them; `None` without COTAG.
    pub fn failures(&self) -> Option<FailureBreakdown> {
        self.client.cotag_device.as_ref()?;
        let records = LabelRecords {
            gateway: self.server.records.gateway.clone(),
            aps: self.server.records.aps.clone(),
            failed: self.client.records.failed.clone(),
        };
        let mut b = records.breakdown();
        // Failures beyond the device's log are counted as untraced.
        let all = self.client.cotag_device.as_ref().map_or(0, |d| d.cohorts_failed);
        if all > b.cohorts_failed {
            *b.by_cause.entry(Cause::Untraced).or_default() += all - b.cohorts_failed;
            b.cohorts_failed = all;
        }
        Some(b)
    }

    /// Coded bytes the device received per original byte it delivered, minus one (headers,
    /// padding, extras and failed cohorts); `None` without COTAG or before any delivery.
    pub fn coding_overhead(&self) -> Option<f64> {
        let d = self.client.cotag_device.as_ref()?;
        (d.bytes_delivered > 0).then(|| d.bytes_received as f64 / d.bytes_delivered as f64 - 1.0)
    }
}

/// How full the server end's queues were at one moment.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct QueueSample {
    /// Milliseconds since the schedule started.
    pub t_ms: u32,
    /// Packets waiting for a cohort at the gateway.
    pub gateway: u32,
    /// Coded packets each AP holds.
    pub aps: [u32; LINKS],
}

/// The server end samples its queues this often (µs), at most [`QUEUE_SAMPLES_CAP`] times.
pub const QUEUE_SAMPLE_US: u64 = 10_000;
pub const QUEUE_SAMPLES_CAP: usize = 100_000;

/// A loop turn this late (µs) counts as a late wake-up: a quarter of the shortest period.
pub const LATE_WAKE_US: u64 = 250;

impl SideStats {
    /// A loop turn started at `now` after asking to wake at `wanted`.
    pub fn wake(&mut self, wanted: Option<u64>, now: u64) {
        if let Some(w) = wanted {
            let lag = now.saturating_sub(w);
            self.max_wake_lag_us = self.max_wake_lag_us.max(lag);
            self.late_wakeups += u64::from(lag > LATE_WAKE_US);
        }
    }

    /// A loop turn's work took from `start` to `end`.
    pub fn turn(&mut self, start: u64, end: u64) {
        let d = end.saturating_sub(start);
        self.max_turn_us = self.max_turn_us.max(d);
        self.long_turns += u64::from(d > LATE_WAKE_US);
    }
}

/// Per-label records the loops keep for the failure breakdown: enough for a long run at
/// T = 0.1 ms (a few MB), beyond it labels go unrecorded and their failures are `untraced`.
pub const LABEL_LOG_CAP: usize = 1 << 18;
/// Failed cohorts listed one by one in [`FailureBreakdown::cohorts`] (all are counted).
pub const LISTED_FAILURES: usize = 300;

/// Where one link lost the combinations of one failed cohort, from the gateway to the device.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LinkTrace {
    /// High combinations the gateway owed this link, and how many of them it gave up at the
    /// end of the send interval.
    pub high_quota: u32,
    pub gateway_high_sent: u32,
    pub gateway_given_up: u32,
    pub gateway_low_sent: u32,
    /// At the AP: dropped or evicted with the buffer full; forwarded (Highs + Lows); what it
    /// was still allowed to send when the next-but-one label flushed the cohort; whether the
    /// liveness timeout (not a higher label) released it.
    pub ap_full_dropped: u32,
    pub ap_forwarded_high: u32,
    pub ap_forwarded_low: u32,
    pub ap_flushed_allowed: u32,
    pub ap_flushed_high: u32,
    pub ap_liveness_release: bool,
    /// Forwarded by the AP but never at the device (the emulator's loss or a full socket).
    pub path_lost: u32,
    /// At the device: arrived before the cohort was dropped, of them innovative, and after.
    pub received: u32,
    pub innovative: u32,
    pub late: u32,
}

/// One failed cohort and the rule that lost it.
#[derive(Debug, Clone, Serialize)]
pub struct FailureTrace {
    pub label: u32,
    pub n: u32,
    pub rank: u32,
    pub device_reason: cotag::FailReason,
    pub cause: Cause,
    pub links: [LinkTrace; LINKS],
}

/// The rule that lost most of a failed cohort's combinations (ties go to the earliest stage).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The gateway discarded unsent Highs at the end of the send interval.
    GatewayDiscard,
    /// An AP dropped or evicted combinations with its buffer full.
    ApBuffer,
    /// An AP flushed the cohort at the next-but-one label; the other AP had sent everything
    /// it held of it (its span was used up: it could not make up the rest).
    ApFlushOneLink,
    /// Both APs flushed part of the cohort: the two links together could not carry it in
    /// the forwarding window.
    ApFlushBothLinks,
    /// Forwarded, not received: the emulated link lost it.
    PathLoss,
    /// The device gave it up (liveness) while combinations were still coming.
    DeviceLiveness,
    /// Nothing of it ever reached the device, and no stage lost anything on record.
    NeverSeen,
    /// Everything forwarded arrived and the rank was still short.
    RankDeficient,
    /// The APs' or the gateway's records did not cover the label (log full, or the run
    /// ended first).
    Untraced,
}

/// Failed cohorts by cause (the device's count, each joined with the gateway's and both APs'
/// records of its label).
#[derive(Debug, Clone, Default, Serialize)]
pub struct FailureBreakdown {
    pub cohorts_failed: u64,
    pub by_cause: std::collections::BTreeMap<Cause, u64>,
    /// Σ (n − rank) over failed cohorts, and per link Σ max(0, High quota − innovative
    /// received): which link's share went missing.
    pub missing_rank: u64,
    pub missing_by_link: [u64; LINKS],
    /// Cohorts where the liveness timeout (not a higher label) released the cohort at an AP.
    pub ap_liveness_released: u64,
    /// The first [`LISTED_FAILURES`] failed cohorts.
    pub cohorts: Vec<FailureTrace>,
}

impl FailureBreakdown {
    pub fn add(&mut self, other: &FailureBreakdown) {
        self.cohorts_failed += other.cohorts_failed;
        for (c, n) in &other.by_cause {
            *self.by_cause.entry(*c).or_default() += n;
        }
        self.missing_rank += other.missing_rank;
        for l in 0..LINKS {
            self.missing_by_link[l] += other.missing_by_link[l];
        }
        self.ap_liveness_released += other.ap_liveness_released;
        let room = LISTED_FAILURES.saturating_sub(self.cohorts.len());
        self.cohorts.extend(other.cohorts.iter().take(room).cloned());
    }
}

/// The per-label records both loops kept (server: gateway and APs; client: device).
#[derive(Debug, Clone, Default)]
pub struct LabelRecords {
    pub gateway: Vec<cotag::GatewayLabelRecord>,
    pub aps: [Vec<cotag::ApLabelRecord>; LINKS],
    pub failed: Vec<cotag::FailedCohort>,
}

impl LabelRecords {
    /// Joins each failed cohort with its label's records and names the rule that lost it.
    pub fn breakdown(&self) -> FailureBreakdown {
        use std::collections::HashMap;
        let gw: HashMap<u32, &cotag::GatewayLabelRecord> = self.gateway.iter().map(|r| (r.label, r)).collect();
        let aps: [HashMap<u32, &cotag::ApLabelRecord>; LINKS] =
            [0, 1].map(|l| self.aps[l].iter().map(|r| (r.label, r)).collect());
        let mut out = FailureBreakdown {
            cohorts_failed: self.failed.len() as u64,
            ..FailureBreakdown::default()
        };
        for f in &self.failed {
            let g = gw.get(&f.label);
            let links = [0, 1].map(|l| {
                let a = aps[l].get(&f.label);
                let mut t = LinkTrace {
                    received: f.received[l],
                    innovative: f.innovative[l],
                    late: f.late[l],
                    ..LinkTrace::default()
                };
                if let Some(g) = g {
                    t.high_quota = g.high_quota[l];
                    t.gateway_high_sent = g.high_sent[l];
                    t.gateway_given_up = g.high_given_up[l];
                    t.gateway_low_sent = g.low_sent[l];
                }
                if let Some(a) = a {
                    t.ap_full_dropped = a.full_dropped_high + a.full_dropped_low;
                    t.ap_forwarded_high = a.forwarded_high;
                    t.ap_forwarded_low = a.forwarded_low;
                    t.ap_flushed_allowed = a.flushed_allowed;
                    t.ap_flushed_high = a.flushed_high;
                    t.ap_liveness_release = a.liveness_release;
                    let forwarded = a.forwarded_high + a.forwarded_low;
                    t.path_lost = forwarded.saturating_sub(f.received[l] + f.late[l]);
                }
                t
            });
            // A link the gateway sent nothing of this label (its share was 0, or all of it
            // was given up) has no AP record, and needs none.
            let traced = g.is_some()
                && (0..LINKS).all(|l| {
                    aps[l].contains_key(&f.label) || links[l].gateway_high_sent + links[l].gateway_low_sent == 0
                });
            let cause = if traced { cause_of(f, &links) } else { Cause::Untraced };
            *out.by_cause.entry(cause).or_default() += 1;
            out.missing_rank += u64::from(f.n.saturating_sub(f.rank));
            for (l, t) in links.iter().enumerate() {
                out.missing_by_link[l] += u64::from(t.high_quota.saturating_sub(t.innovative));
            }
            out.ap_liveness_released += u64::from(links.iter().any(|t| t.ap_liveness_release));
            if out.cohorts.len() < LISTED_FAILURES {
                out.cohorts.push(FailureTrace {
                    label: f.label,
                    n: f.n,
                    rank: f.rank,
                    device_reason: f.reason,
                    cause,
                    links,
                });
            }
        }
        out
    }
}

/// The stage that lost the most of the cohort's combinations; ties go to the earliest.
fn cause_of(f: &cotag::FailedCohort, links: &[LinkTrace; LINKS]) -> Cause {
    let sum = |x: fn(&LinkTrace) -> u32| links.iter().map(x).sum::<u32>();
    let flushed_links = links.iter().filter(|t| t.ap_flushed_allowed > 0).count();
    let flush = if flushed_links > 1 {
        Cause::ApFlushBothLinks
    } else {
        Cause::ApFlushOneLink
    };
    let stages = [
        (Cause::GatewayDiscard, sum(|t| t.gateway_given_up)),
        (Cause::ApBuffer, sum(|t| t.ap_full_dropped)),
        (flush, sum(|t| t.ap_flushed_allowed)),
        (Cause::PathLoss, sum(|t| t.path_lost)),
        (Cause::DeviceLiveness, sum(|t| t.late)),
    ];
    let mut best = (Cause::RankDeficient, 0);
    for (c, lost) in stages {
        if lost > best.1 {
            best = (c, lost);
        }
    }
    if best.1 == 0 && f.n == 0 {
        return Cause::NeverSeen;
    }
    best.0
}
