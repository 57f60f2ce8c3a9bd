//! Is the emulator doing what the scenario asks? Monitors read during every run.
//!
//! What is measured (see docs/testbed.md):
//! - **lateness**: a probe cell after each delay cell compares the time a packet is
//!   released with the time rattan scheduled it for (see [`crate::probe`]);
//! - **unasked drops**: packets the kernel dropped on the emulator's AF_PACKET sockets
//!   because the emulator did not read them in time (PACKET_STATISTICS). Tail drops of the
//!   configured queue and configured loss are the scenario's and not counted;
//! - **CPU**: the emulator's threads (run time and run-queue wait from
//!   `/proc/self/task/*/schedstat`), the rest of this process (the endpoints' user-space
//!   side), the host's busy and steal shares (`/proc/stat`);
//! - **per path** what the rate stage released (IP bytes, data direction) over what was
//!   configured during the interval. Informative only: a scheme need not fill every path.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::probe::LatenessSnapshot;

/// Limits a faithful run stays within.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerances {
    /// A packet released this much after its scheduled time counts as late, ms.
    pub late_ms: f64,
    /// At most this share of packets late.
    pub max_late_share: f64,
    /// At most this share of the packets offered to the emulator dropped by its sockets.
    pub max_drop_share: f64,
    /// The emulator's threads may use at most this share of their cores (saturation).
    pub max_emulator_cpu_per_thread: f64,
    /// At most this share of the host's CPU time stolen by the hypervisor.
    pub max_steal: f64,
    /// Other programs on the host may use at most this many cores (crate::others).
    #[serde(default = "default_max_others_cpu")]
    pub max_others_cpu: f64,
    /// The CPUs left to the endpoints must have had at least this many cores idle over the
    /// run ([`Fidelity::endpoint_idle_cores`]); less, and the ends (FBDT's user-space side,
    /// the kernel's TCP work) may have been held back by the host rather than the paths.
    #[serde(default = "default_min_endpoint_idle_cores")]
    pub min_endpoint_idle_cores: f64,
}

/// A quiet host's background (an idle desktop, a shell) stays well below a third of a core;
/// one busy program takes a whole one.
fn default_max_others_cpu() -> f64 {
    0.3
}

/// A tenth of a core: below it the endpoints' CPUs were busy more than 90 % of the time
/// (one CPU on a 2-core host with the emulator pinned to the other).
fn default_min_endpoint_idle_cores() -> f64 {
    0.1
}

impl Default for Tolerances {
    fn default() -> Self {
        Self {
            late_ms: 1.0,
            max_late_share: 0.01,
            max_drop_share: 0.001,
            max_emulator_cpu_per_thread: 0.95,
            max_steal: 0.05,
            max_others_cpu: default_max_others_cpu(),
            min_endpoint_idle_cores: default_min_endpoint_idle_cores(),
        }
    }
}

/// One path over the interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathFidelity {
    pub name: String,
    /// Time-averaged configured rate over the interval, Mbit/s (IP layer).
    pub configured_mbps: f64,
    /// What the rate and delay stages released in the data direction, Mbit/s (IP layer,
    /// before configured loss).
    pub delivered_mbps: f64,
    pub delivered_over_configured: f64,
    /// Share of this path's packets (both directions) released ≥ `late_ms` late.
    pub late_share: f64,
    pub late_p99_ms: f64,
}

/// What the monitors saw over one interval (normally: one run, from `play()`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fidelity {
    /// Every monitor within tolerance.
    pub faithful: bool,
    /// Where the rate limit ran: "rattan" or "kernel-rate" ([`crate::Datapath`]).
    pub datapath: String,
    /// The endpoints' receive work was steered off the emulator's core
    /// ([`crate::TestbedOptions::steer_receive`]).
    pub receive_steered: bool,
    /// GSO units of at most this airtime, µs ([`crate::TestbedOptions::gso_unit_airtime_us`]);
    /// `None`: one MTU packet per frame.
    pub gso_unit_airtime_us: Option<u32>,
    /// Why not, one line per monitor out of tolerance.
    pub reasons: Vec<String>,
    pub secs: f64,
    /// Packets released by the emulator (all paths, both directions).
    pub packets: u64,
    /// Share of them released ≥ `tolerances.late_ms` after their scheduled time.
    pub emulator_late_share: f64,
    /// 99th percentile of the lateness, ms (upper edge of its histogram bucket).
    pub emulator_late_p99_ms: f64,
    pub emulator_late_max_ms: f64,
    /// Packets the emulator's sockets dropped (not read in time) and their share.
    pub emulator_drops: u64,
    pub emulator_drop_share: f64,
    /// CPU used by the emulator's threads, in cores (1.0 = one core busy all the time).
    pub emulator_cpu: f64,
    pub emulator_threads: usize,
    /// Time the emulator's threads were runnable but waited for a core, in cores.
    pub emulator_cpu_wait: f64,
    /// CPU of the rest of this process (the endpoints' user-space side), in cores.
    pub endpoints_cpu: f64,
    /// Whole host: busy share of all cores, and share stolen by the hypervisor.
    pub host_busy: f64,
    /// Idle cores the endpoints could have used: those of every CPU this process may use but
    /// the emulator's when it is pinned (receive steering).
    pub endpoint_idle_cores: f64,
    pub steal: f64,
    /// CPU used by programs that are not this run (not this process or its descendants),
    /// in cores, outside interrupt and softirq time.
    pub others_cpu: f64,
    /// The whole host's busy cores less the emulator's and other programs': both ends'
    /// processes and all the kernel's work for them, wherever it was booked. This kernel
    /// charges softirq work to whatever task it interrupts (no IRQ time accounting), so a
    /// busy endpoint is charged for packets a sleeping one leaves to the idle task:
    /// `endpoints_cpu` alone favours ends that block in `read`, this figure does not.
    pub stack_cpu: f64,
    pub paths: Vec<PathFidelity>,
    pub tolerances: Tolerances,
}

impl Fidelity {
    /// A run every monitor passed (tests).
    #[cfg(test)]
    pub(crate) fn quiet() -> Fidelity {
        Fidelity {
            faithful: true,
            datapath: "rattan".into(),
            receive_steered: false,
            gso_unit_airtime_us: None,
            reasons: Vec::new(),
            secs: 1.0,
            packets: 1000,
            emulator_late_share: 0.0,
            emulator_late_p99_ms: 0.1,
            emulator_late_max_ms: 0.2,
            emulator_drops: 0,
            emulator_drop_share: 0.0,
            emulator_cpu: 0.3,
            emulator_threads: 1,
            emulator_cpu_wait: 0.0,
            endpoints_cpu: 0.2,
            host_busy: 0.3,
            endpoint_idle_cores: 1.0,
            steal: 0.0,
            others_cpu: 0.05,
            stack_cpu: 0.25,
            paths: Vec::new(),
            tolerances: Tolerances::default(),
        }
    }
}

/// CPU counters at one instant.
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuSnapshot {
    /// (tid, run ns, wait ns) of the emulator's threads.
    emu: Vec<(i32, u64, u64)>,
    /// This process, user + system, seconds.
    process_s: f64,
    /// /proc/stat "cpu" line: (busy, steal, total) jiffies.
    host: (u64, u64, u64),
    /// The same per CPU ("cpu0", "cpu1", … in order).
    per_cpu: Vec<(u64, u64, u64)>,
    /// (host task time, this run's task time), seconds (crate::others).
    tasks_s: (f64, f64),
}

impl CpuSnapshot {
    pub fn now() -> Self {
        Self {
            emu: emulator_threads(),
            process_s: process_cpu_s(),
            host: host_cpu_jiffies(),
            per_cpu: per_cpu(),
            tasks_s: crate::others::snapshot(),
        }
    }
}

/// Thread ids of the emulator's runtime threads in this process (all testbeds), e.g. to
/// pin or renice them.
pub fn emulator_tids() -> Vec<i32> {
    emulator_threads().into_iter().map(|(t, _, _)| t).collect()
}

fn emulator_threads() -> Vec<(i32, u64, u64)> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc/self/task") else {
        return v;
    };
    for e in rd.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(crate::emu::EMU_THREAD) {
            continue;
        }
        let ss = std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
        let f: Vec<u64> = ss.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if f.len() >= 2 {
            v.push((tid, f[0], f[1]));
        }
    }
    v
}

fn process_cpu_s() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at field 3.
    let Some(rest) = s.rfind(')').map(|i| &s[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // utime, stime are fields 14, 15 (1-based) = 11, 12 here.
    (get(11) + get(12)) / crate::others::clk_tck()
}

/// (busy, steal, total) jiffies of the host's "cpu" line.
pub(crate) fn parse_proc_stat(text: &str) -> (u64, u64, u64) {
    text.lines()
        .find(|l| l.starts_with("cpu "))
        .map_or((0, 0, 0), parse_cpu_line)
}

/// (busy, steal, total) jiffies of each "cpuN" line, in order.
pub(crate) fn parse_proc_stat_per_cpu(text: &str) -> Vec<(u64, u64, u64)> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(parse_cpu_line)
        .collect()
}

fn parse_cpu_line(line: &str) -> (u64, u64, u64) {
    let f: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let g = |i: usize| f.get(i).copied().unwrap_or(0);
    let total: u64 = (0..8).map(g).sum();
    let idle = g(3) + g(4);
    (total - idle, g(7), total)
}

/// The whole host's (busy, steal, total) jiffies from /proc/stat; all zero where it cannot
/// be read. Also for tools that quote the hypervisor's steal beside a timing (`bench sim`).
pub fn host_cpu_jiffies() -> (u64, u64, u64) {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
}

fn per_cpu() -> Vec<(u64, u64, u64)> {
    parse_proc_stat_per_cpu(&std::fs::read_to_string("/proc/stat").unwrap_or_default())
}

/// Everything the monitors count at one instant.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    pub at: Instant,
    pub cpu: CpuSnapshot,
    /// Per path (data direction, ACK direction).
    pub lateness: Vec<(LatenessSnapshot, LatenessSnapshot)>,
    pub packets: crate::emu::PacketStats,
    /// With the rate in the kernel: per path, IP-layer bytes the emulator's veth towards
    /// the client sent (after the qdisc: what the rate stage delivered). `None` with the
    /// rate in rattan, where the lateness probe after the rate and delay stages counts them.
    pub egress_ip_bytes: Option<Vec<u64>>,
}

/// Per-path input to [`assess`].
pub(crate) struct PathInput {
    pub name: String,
    pub configured_mbps: f64,
}

/// Compares two marks.
/// `endpoint_cpus`: the CPUs whose idle time the endpoints can use — the allowed ones but
/// the emulator's when it is pinned there (a real-time thread preempts them on it); empty =
/// the whole host. `/proc/stat`'s cpuN lines are taken in order as CPUs 0, 1, … (all online).
pub(crate) fn assess(a: &Mark, b: &Mark, paths: &[PathInput], tol: &Tolerances, endpoint_cpus: &[usize]) -> Fidelity {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-6);
    let late_us = (tol.late_ms * 1e3).round() as u64;
    let mut all = LatenessSnapshot::default();
    let mut out_paths = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let (Some((d1, u1)), Some((d0, u0))) = (b.lateness.get(i), a.lateness.get(i)) else {
            continue;
        };
        let down = d1.since(d0);
        let mut both = down.clone();
        both.add(&u1.since(u0));
        all.add(&both);
        let bytes = match (&b.egress_ip_bytes, &a.egress_ip_bytes) {
            (Some(e1), Some(e0)) => e1
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(e0.get(i).copied().unwrap_or(0)),
            _ => down.bytes,
        };
        let delivered = bytes as f64 * 8.0 / secs / 1e6;
        out_paths.push(PathFidelity {
            name: p.name.clone(),
            configured_mbps: p.configured_mbps,
            delivered_mbps: delivered,
            delivered_over_configured: if p.configured_mbps > 0.0 {
                delivered / p.configured_mbps
            } else {
                0.0
            },
            late_share: both.share_late(late_us),
            late_p99_ms: both.quantile_us(0.99) as f64 / 1e3,
        });
    }
    let (mut run_ns, mut wait_ns) = (0u64, 0u64);
    for (tid, r1, w1) in &b.cpu.emu {
        let (r0, w0) = a
            .cpu
            .emu
            .iter()
            .find(|(t, _, _)| t == tid)
            .map_or((0, 0), |(_, r, w)| (*r, *w));
        run_ns += r1.saturating_sub(r0);
        wait_ns += w1.saturating_sub(w0);
    }
    let emulator_cpu = run_ns as f64 / 1e9 / secs;
    let emulator_threads = b.cpu.emu.len();
    let process = (b.cpu.process_s - a.cpu.process_s).max(0.0) / secs;
    let (busy, steal, total) = (
        b.cpu.host.0.saturating_sub(a.cpu.host.0),
        b.cpu.host.1.saturating_sub(a.cpu.host.1),
        b.cpu.host.2.saturating_sub(a.cpu.host.2),
    );
    let share = |x: u64| if total > 0 { x as f64 / total as f64 } else { 0.0 };
    let idle_of = |cpu: usize| match (a.cpu.per_cpu.get(cpu), b.cpu.per_cpu.get(cpu)) {
        (Some(x), Some(y)) if y.2 > x.2 => 1.0 - y.0.saturating_sub(x.0) as f64 / (y.2 - x.2) as f64,
        _ => 0.0,
    };
    let endpoint_idle_cores = if !endpoint_cpus.is_empty() && endpoint_cpus.iter().all(|&c| c < b.cpu.per_cpu.len()) {
        endpoint_cpus.iter().map(|&c| idle_of(c)).sum::<f64>()
    } else {
        (1.0 - share(busy)) * b.cpu.per_cpu.len().max(1) as f64
    };
    let received = b.packets.received.saturating_sub(a.packets.received);
    let drops = b.packets.dropped.saturating_sub(a.packets.dropped);
    let mut f = Fidelity {
        datapath: String::new(),
        receive_steered: false,
        gso_unit_airtime_us: None,
        faithful: true,
        reasons: Vec::new(),
        secs,
        packets: all.packets,
        emulator_late_share: all.share_late(late_us),
        emulator_late_p99_ms: all.quantile_us(0.99) as f64 / 1e3,
        emulator_late_max_ms: all.max_us as f64 / 1e3,
        emulator_drops: drops,
        emulator_drop_share: if received > 0 {
            drops as f64 / received as f64
        } else {
            0.0
        },
        emulator_cpu,
        emulator_threads,
        emulator_cpu_wait: wait_ns as f64 / 1e9 / secs,
        endpoints_cpu: (process - emulator_cpu).max(0.0),
        host_busy: share(busy),
        endpoint_idle_cores: endpoint_idle_cores.max(0.0),
        steal: share(steal),
        others_cpu: ((b.cpu.tasks_s.0 - a.cpu.tasks_s.0) - (b.cpu.tasks_s.1 - a.cpu.tasks_s.1)).max(0.0) / secs,
        stack_cpu: 0.0,
        paths: out_paths,
        tolerances: *tol,
    };
    f.stack_cpu = (f.host_busy * b.cpu.per_cpu.len().max(1) as f64 - emulator_cpu - f.others_cpu).max(0.0);
    f.reasons = verdict(&f);
    f.faithful = f.reasons.is_empty();
    f
}

/// The monitors out of tolerance, one line each.
pub fn verdict(f: &Fidelity) -> Vec<String> {
    let t = &f.tolerances;
    let mut r = Vec::new();
    if f.emulator_late_share > t.max_late_share {
        r.push(format!(
            "{:.1}% of packets released ≥ {} ms late (p99 {:.1} ms; limit {:.1}%)",
            f.emulator_late_share * 100.0,
            t.late_ms,
            f.emulator_late_p99_ms,
            t.max_late_share * 100.0
        ));
    }
    if f.emulator_drop_share > t.max_drop_share {
        r.push(format!(
            "emulator dropped {} packets it did not read in time ({:.2}%; limit {:.2}%)",
            f.emulator_drops,
            f.emulator_drop_share * 100.0,
            t.max_drop_share * 100.0
        ));
    }
    let threads = f.emulator_threads.max(1) as f64;
    if f.emulator_cpu > t.max_emulator_cpu_per_thread * threads {
        r.push(format!(
            "emulator CPU saturated ({:.2} of {} core(s))",
            f.emulator_cpu, f.emulator_threads
        ));
    }
    if f.steal > t.max_steal {
        r.push(format!(
            "{:.1}% of CPU time stolen by the hypervisor (limit {:.1}%)",
            f.steal * 100.0,
            t.max_steal * 100.0
        ));
    }
    if f.endpoint_idle_cores < t.min_endpoint_idle_cores {
        r.push(format!(
            "the endpoints' CPUs were busy: {:.2} core idle over the run (limit {:.2}): the ends may have been short of CPU",
            f.endpoint_idle_cores, t.min_endpoint_idle_cores
        ));
    }
    if f.others_cpu > t.max_others_cpu {
        r.push(format!(
            "other programs used {:.2} cores of the host (limit {:.2}): the endpoints competed with them",
            f.others_cpu, t.max_others_cpu
        ));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;


    #[test]
    fn other_programs_past_the_limit_are_a_reason() {
        let mut f = Fidelity::quiet();
        assert!(verdict(&f).is_empty());
        f.others_cpu = 0.9;
        let r = verdict(&f);
        assert_eq!(r.len(), 1);
        assert!(r[0].contains("other programs used 0.90 cores"), "{r:?}");
    }

    #[test]
    fn endpoints_without_idle_cpu_are_a_reason() {
        let mut f = Fidelity::quiet();
        f.endpoint_idle_cores = 0.04;
        let r = verdict(&f);
        assert_eq!(r.len(), 1);
        assert!(r[0].contains("endpoints' CPUs were busy: 0.04 core idle"), "{r:?}");
        f.tolerances.min_endpoint_idle_cores = 0.0;
        assert!(verdict(&f).is_empty());
    }

    #[test]
    fn proc_stat_line() {
        let t = "cpu  100 0 50 800 50 0 0 10 0 0\ncpu0 1 2 3\n";
        assert_eq!(parse_proc_stat(t), (160, 10, 1010));
        let t = "cpu  9 9 9 9\ncpu0 10 0 5 80 5 0 0 0\ncpu1 50 0 0 50 0 0 0 0\nintr 1\n";
        assert_eq!(parse_proc_stat_per_cpu(t), vec![(15, 0, 100), (50, 0, 100)]);
    }
}
