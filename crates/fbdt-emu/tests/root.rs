//! Root tests: real namespaces, real kernel (MPTCP, TCP), the emulator in between (the
//! `direct` datapath by default; rattan-core and kernel-rate where named). They
//! SKIP with a printed reason without root/CAP_NET_ADMIN (like the kernel selftests).
//! Assertions are on bytes, packets and namespaces, never on wall-clock speed. Tests run
//! one at a time (a lock) so they do not compete for the CPU.

use std::{
    net::{SocketAddr, UdpSocket},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use fbdt_emu::{ns, perf, Datapath, PathPlan, PathStep, Side, Testbed, TestbedOptions, TestbedSpec};

static SERIAL: Mutex<()> = Mutex::new(());

macro_rules! root_or_skip {
    () => {{
        if let Some(r) = fbdt_emu::skip_reason() {
            eprintln!("SKIP: {r}");
            return;
        }
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }};
}

/// The same test on two datapaths: `$rattan` on rattan-core, `$direct` on `direct`.
macro_rules! on_rattan_and_direct {
    ($rattan:ident, $direct:ident, $body:ident) => {
        #[test]
        fn $rattan() {
            let _g = root_or_skip!();
            $body(&rattan());
        }

        #[test]
        fn $direct() {
            let _g = root_or_skip!();
            $body(&direct());
        }
    };
}

fn spec(paths: Vec<PathPlan>) -> TestbedSpec {
    TestbedSpec {
        name: "test".into(),
        congestion_control: "cubic".into(),
        duration_s: 10.0,
        scale: 1.0,
        seed: 7,
        paths,
        bottleneck: None,
    }
}

/// From `t_s` on: up at `rate_mbps`, 1 ms delay, no loss.
fn up_at(t_s: f64, rate_mbps: f64) -> PathStep {
    PathStep {
        t_s,
        rate_mbps,
        delay_ms: 1.0,
        loss: 0.0,
        scan: false,
        one_way_outage: None,
    }
}

fn names(tb: &Testbed) -> Vec<String> {
    tb.namespaces().iter().map(|s| s.to_string()).collect()
}

fn assert_gone(names: &[String]) {
    for n in names {
        assert!(!ns::exists(n), "namespace {n} still exists");
    }
}

/// Server sends `count` UDP datagrams of `size` bytes to the client on path `path`, paced
/// at `pps`; returns the arrival times (seconds since the sender's first packet) of those
/// the client received, by sequence number order of arrival.
fn udp_blast(tb: &Testbed, path: usize, count: u32, size: usize, pps: u32) -> Vec<(u32, f64)> {
    let p = tb.paths()[path].clone();
    let rx = tb
        .run_in(Side::Client, || {
            UdpSocket::bind(SocketAddr::new(p.client_ip.into(), 0)).unwrap()
        })
        .unwrap();
    let dst = rx.local_addr().unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let t0 = Arc::new(Mutex::new(None::<Instant>));
    let t0s = t0.clone();
    let src = p.server_ip;
    let sender = tb
        .spawn_in(Side::Server, move || {
            let s = UdpSocket::bind(SocketAddr::new(src.into(), 0)).unwrap();
            let start = Instant::now();
            *t0s.lock().unwrap() = Some(start);
            let mut buf = vec![0u8; size];
            for i in 0..count {
                let due = start + Duration::from_secs_f64(i as f64 / pps as f64);
                if let Some(d) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                buf[..4].copy_from_slice(&i.to_be_bytes());
                let _ = s.send_to(&buf, dst);
            }
        })
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let limit = Instant::now() + Duration::from_secs_f64(count as f64 / pps as f64 + 3.0);
    let mut quiet_since = None;
    while Instant::now() < limit {
        match rx.recv(&mut buf) {
            Ok(n) if n >= 4 => {
                let start = t0.lock().unwrap().unwrap_or_else(Instant::now);
                got.push((
                    u32::from_be_bytes(buf[..4].try_into().unwrap()),
                    start.elapsed().as_secs_f64(),
                ));
                quiet_since = None;
            }
            _ => {
                if sender.is_finished() {
                    let q = *quiet_since.get_or_insert_with(Instant::now);
                    if q.elapsed() > Duration::from_millis(500) {
                        break;
                    }
                }
            }
        }
    }
    sender.join().unwrap().unwrap();
    got
}

on_rattan_and_direct!(
    kernel_mptcp_uses_both_paths_and_packets_are_mtu_sized,
    direct_kernel_mptcp_uses_both_paths_and_packets_are_mtu_sized,
    mptcp_on
);

fn mptcp_on(opts: &TestbedOptions) {
    let tb = Testbed::start(
        &spec(vec![
            PathPlan::constant("wifi", 20.0, 2.0, 0.0),
            PathPlan::constant("wigig", 30.0, 1.0, 0.0),
        ]),
        opts,
    )
    .unwrap();
    let ns_names = names(&tb);
    assert_eq!(tb.paths()[0].client_if, "wifi");
    assert_eq!(
        ns::sysctl_get(tb.netns(Side::Client), "net.ipv4.tcp_congestion_control").unwrap(),
        "cubic"
    );
    assert_eq!(
        ns::sysctl_get(tb.netns(Side::Server), "net.ipv4.tcp_congestion_control").unwrap(),
        "cubic"
    );
    let before = tb.path_counters().unwrap();
    let t = perf::download(&tb, 0, 0, perf::Proto::Mptcp, 3.0, 1.0, None).unwrap();
    let after = tb.path_counters().unwrap();
    let d: Vec<u64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.client.rx_bytes - b.client.rx_bytes)
        .collect();
    let pk: Vec<u64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.client.rx_packets - b.client.rx_packets)
        .collect();
    eprintln!(
        "mptcp: {} bytes received; per path rx bytes {d:?}, packets {pk:?}",
        t.bytes
    );
    assert!(t.bytes > 0);
    // Each path carried a real share of the connection (its rate share is 40% / 60%).
    for (i, b) in d.iter().enumerate() {
        assert!(
            *b as f64 > 0.15 * t.bytes as f64,
            "path {i} carried {b} of {} bytes",
            t.bytes
        );
    }
    // Per-packet emulation: no offloaded super-packets reached the client (MTU 1500 + 14 B
    // Ethernet header). With GSO units they did where a unit's airtime at the path's rate
    // holds two segments (20 Mbit/s: from 1.16 ms; at the default 250 µs TCP sends single
    // segments on these paths).
    let units_form = opts
        .gso_units()
        .is_some_and(|us| 20e6 / 8.0 * f64::from(us) / 1e6 >= 2.0 * 1448.0);
    for i in 0..2 {
        let per_frame = d[i] / pk[i].max(1);
        if units_form {
            assert!(per_frame > 1514, "path {i}: {per_frame} bytes per frame");
        } else {
            assert!(per_frame <= 1514, "path {i}: {per_frame} bytes per packet");
        }
    }
    // The client's kernel has both endpoints.
    let eps = ns::ip(Some(tb.netns(Side::Client)), &["mptcp", "endpoint", "show"]).unwrap();
    assert!(eps.contains("10.200.1.1") && eps.contains("10.200.2.1"), "{eps}");
    drop(tb);
    assert_gone(&ns_names);
}

#[test]
fn kernel_rate_outage_stops_delivery_and_it_resumes() {
    let _g = root_or_skip!();
    outage_on(&kernel_rate());
}

fn rattan() -> TestbedOptions {
    TestbedOptions {
        datapath: Datapath::Rattan,
        ..TestbedOptions::default()
    }
}

on_rattan_and_direct!(
    outage_stops_delivery_and_it_resumes,
    direct_outage_stops_delivery_and_it_resumes,
    outage_on
);

fn direct() -> TestbedOptions {
    TestbedOptions {
        datapath: Datapath::Direct,
        ..TestbedOptions::default()
    }
}

fn kernel_rate() -> TestbedOptions {
    TestbedOptions {
        datapath: Datapath::KernelRate,
        ..TestbedOptions::default()
    }
}

fn outage_on(opts: &TestbedOptions) {
    let mut b = PathPlan::constant("wigig", 20.0, 1.0, 0.0);
    b.steps.push(up_at(1.0, 0.0));
    b.steps.push(up_at(2.0, 20.0));
    let tb = Testbed::start(&spec(vec![PathPlan::constant("wifi", 20.0, 1.0, 0.0), b]), opts).unwrap();
    let ns_names = names(&tb);
    tb.play().unwrap();
    // 1000 datagrams/s of 500 B (4 Mbit/s, far below the rate) for 3 s; the player and the
    // sender start together, so t is (almost) schedule time.
    let got = udp_blast(&tb, 1, 3000, 500, 1000);
    let count_in = |a: f64, z: f64| got.iter().filter(|(_, t)| *t >= a && *t < z).count();
    let (before, during, after) = (count_in(0.1, 0.9), count_in(1.1, 1.9), count_in(2.1, 2.9));
    eprintln!("outage: delivered before {before}, during {during}, after {after}");
    assert!(before > 600, "before the outage: {before}");
    assert_eq!(during, 0, "packets delivered during the outage");
    assert!(after > 600, "after the outage: {after}");
    let applied = tb.applied_steps();
    assert!(
        applied.iter().any(|a| a.path == "wigig" && a.step.rate_mbps == 0.0),
        "{applied:?}"
    );
    drop(tb);
    assert_gone(&ns_names);
}

on_rattan_and_direct!(
    scan_holds_packets_instead_of_dropping,
    direct_scan_holds_packets_instead_of_dropping,
    scan_on
);

/// Not on kernel-rate: HTB at the hold rate charges the first held packet seconds of
/// deficit and keeps the class blocked that long after the scan (docs/testbed.md, datapath).
fn scan_on(opts: &TestbedOptions) {
    let mut a = PathPlan::constant("wifi", 20.0, 1.0, 0.0);
    a.steps.push(PathStep {
        t_s: 0.5,
        rate_mbps: 0.0,
        delay_ms: 1.0,
        loss: 0.0,
        scan: true,
        one_way_outage: None,
    });
    a.steps.push(up_at(1.0, 20.0));
    let tb = Testbed::start(&spec(vec![a]), opts).unwrap();
    tb.play().unwrap();
    // 1.5 s at 400 datagrams/s: ~200 sent during the scan, below the 1000-packet queue.
    let got = udp_blast(&tb, 0, 600, 500, 400);
    let during = got.iter().filter(|(_, t)| *t >= 0.6 && *t < 0.95).count();
    eprintln!("scan: {} of 600 delivered, {during} during the scan", got.len());
    assert_eq!(during, 0, "packets delivered during the scan");
    assert_eq!(got.len(), 600, "a scan must hold, not drop");
}

on_rattan_and_direct!(
    five_percent_loss_path_drops_four_to_six_percent,
    direct_five_percent_loss_path_drops_four_to_six_percent,
    loss_on
);

fn loss_on(opts: &TestbedOptions) {
    let tb = Testbed::start(
        &spec(vec![
            PathPlan::constant("wifi", 50.0, 1.0, 0.0),
            PathPlan::constant("lossy", 50.0, 1.0, 0.05),
        ]),
        opts,
    )
    .unwrap();
    let ns_names = names(&tb);
    let n = 6000u32;
    let before = tb.path_counters().unwrap();
    let got = udp_blast(&tb, 1, n, 1000, 3000);
    let after = tb.path_counters().unwrap();
    let lost = 1.0 - got.len() as f64 / n as f64;
    let sent = after[1].server.tx_packets - before[1].server.tx_packets;
    let recv = after[1].client.rx_packets - before[1].client.rx_packets;
    eprintln!(
        "loss: app saw {:.2}% lost; path counters: server tx {sent}, client rx {recv}",
        lost * 100.0
    );
    assert!((0.04..=0.06).contains(&lost), "lost {lost}");
    let path_loss = 1.0 - recv as f64 / sent as f64;
    assert!((0.04..=0.06).contains(&path_loss), "path counters say {path_loss}");
    // The clean path loses nothing.
    let clean = udp_blast(&tb, 0, 1000, 1000, 3000);
    assert_eq!(clean.len(), 1000);
    drop(tb);
    assert_gone(&ns_names);
}

#[test]
fn namespaces_gone_after_panic_inside_closure() {
    let _g = root_or_skip!();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen2 = seen.clone();
    let child_slot: Arc<Mutex<Option<std::process::Child>>> = Arc::default();
    let child_slot2 = child_slot.clone();
    let r = std::panic::catch_unwind(move || {
        let tb = Testbed::start(
            &spec(vec![PathPlan::constant("wifi", 10.0, 1.0, 0.0)]),
            &TestbedOptions::default(),
        )
        .unwrap();
        *seen2.lock().unwrap() = names(&tb);
        for n in tb.namespaces() {
            assert!(ns::exists(n));
        }
        // A process left running in the namespace must be killed too.
        let child = tb.command(Side::Server, "sleep").arg("30").spawn().unwrap();
        *child_slot2.lock().unwrap() = Some(child);
        std::thread::sleep(Duration::from_millis(200));
        tb.run_in(Side::Client, || panic!("boom inside the client namespace"))
            .unwrap();
    });
    assert!(r.is_err(), "the panic must propagate");
    let v = seen.lock().unwrap().clone();
    assert_eq!(v.len(), 3, "{v:?}");
    assert_gone(&v);
    // `ip netns exec` execs sleep (same pid): the cleanup must have killed it (SIGKILL),
    // so this wait returns at once instead of after 30 s.
    let mut child = child_slot.lock().unwrap().take().expect("child spawned");
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status:?}");
}

fn fidelity_spec(rate_mbps: f64) -> TestbedSpec {
    spec(vec![PathPlan::constant("a", rate_mbps, 1.0, 0.0)])
}

#[test]
fn monitors_pass_a_quiet_emulator() {
    let _g = root_or_skip!();
    // A light load: the emulator has CPU to spare even next to other builds. The emulator is
    // judged here, not the host: other programs (builds next to the test) are allowed. A
    // hypervisor that steals CPU is not the emulator's fault either, but it does make packets
    // late, so "quiet" can only be asserted over a run the hypervisor (nearly) left alone: up
    // to three tries for one; a try stolen from beyond the limit must say so.
    let tolerances = fbdt_emu::fidelity::Tolerances {
        max_others_cpu: f64::INFINITY,
        min_endpoint_idle_cores: 0.0,
        ..Default::default()
    };
    let mut stolen_runs = Vec::new();
    let f = loop {
        let tb = Testbed::start(&fidelity_spec(20.0), &TestbedOptions::default()).unwrap();
        tb.reset_monitors();
        perf::download(&tb, 0, 0, perf::Proto::Tcp, 2.0, 0.5, None).unwrap();
        let f = tb.fidelity_with(&tolerances);
        drop(tb);
        // Steal comes in bursts: near the limit a run may be late without crossing it.
        if f.faithful || f.steal <= tolerances.max_steal / 2.0 {
            break f;
        }
        if f.steal > tolerances.max_steal {
            assert!(
                f.reasons.iter().any(|r| r.contains("stolen")),
                "{:.1}% stolen but not flagged: {:?}",
                f.steal * 100.0,
                f.reasons
            );
        }
        stolen_runs.push(f.steal);
        if stolen_runs.len() == 3 {
            eprintln!(
                "quiet case not testable here: the hypervisor stole {stolen_runs:?} of the CPU \
                 in every try (limit {})",
                tolerances.max_steal
            );
            return;
        }
    };
    assert!(f.packets > 1000, "{f:?}");
    assert!(f.faithful, "{:?}", f.reasons);
    assert_eq!(f.emulator_threads, 1);
    assert!(f.emulator_cpu > 0.0, "emulator CPU counted: {f:?}");
    // What the rate stage released vs configured, over an interval that includes slow start.
    let p = &f.paths[0];
    assert!(
        p.delivered_over_configured > 0.5 && p.delivered_over_configured < 1.1,
        "{p:?}"
    );
}

/// Busy-loops on `core` until `stop` is set.
fn hog(core: usize, stop: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        pin(0, core);
        let mut x = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    })
}

/// Pins thread `tid` (0 = the calling thread) to `core`.
fn pin(tid: i32, core: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; sched_setaffinity
    // only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[test]
fn monitors_flag_a_starved_emulator() {
    let _g = root_or_skip!();
    // Normal scheduling (not the default real-time priority), so it can be starved: its
    // threads pinned to core 0 at the lowest priority, next to two busy loops on the same
    // core. It gets a few percent of one core.
    let opts = TestbedOptions {
        emu_rt_priority: None,
        ..TestbedOptions::default()
    };
    let tb = Testbed::start(&fidelity_spec(400.0), &opts).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hogs: Vec<_> = (0..2).map(|_| hog(0, stop.clone())).collect();
    let tids = fbdt_emu::fidelity::emulator_tids();
    assert!(!tids.is_empty());
    for &t in &tids {
        pin(t, 0);
        // SAFETY: setpriority on a thread id of this process.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, t as libc::id_t, 19) };
    }
    std::thread::sleep(Duration::from_millis(200));
    tb.reset_monitors();
    let r = perf::download(&tb, 0, 0, perf::Proto::Tcp, 3.0, 0.5, None);
    let f = tb.fidelity();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    drop(tb);
    r.unwrap();
    assert!(!f.faithful, "a starved emulator must be flagged: {f:?}");
    assert!(
        f.emulator_late_share > f.tolerances.max_late_share || f.emulator_drops > 0,
        "{f:?}"
    );
}

/// A busy program next to the run — not this process or one of its descendants — makes the
/// run unfaithful although the real-time emulator keeps up: the endpoints competed with it.
#[test]
fn monitors_flag_another_program_using_the_cpu() {
    let _g = root_or_skip!();
    let tb = Testbed::start(&fidelity_spec(20.0), &TestbedOptions::default()).unwrap();
    // The busy loop runs in a subshell whose parent exits at once: it is reparented away
    // from this process, so it is another program. Killed by its pid below.
    let out = std::process::Command::new("sh")
        .args(["-c", "(while :; do :; done) >/dev/null 2>&1 & echo $!"])
        .output()
        .expect("sh");
    let pid: i32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("pid of the busy loop");
    std::thread::sleep(Duration::from_millis(200));
    tb.reset_monitors();
    let r = perf::download(&tb, 0, 0, perf::Proto::Tcp, 2.0, 0.5, None);
    let f = tb.fidelity();
    // SAFETY: kill(2) on the pid of the busy loop this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    r.unwrap();
    // The premise is a loop that gets most of a core. When the hypervisor steals more than
    // the monitors tolerate and the loop did not get it (a fresh-clone CI check at 38 %
    // steal: 0.28 core), the host cannot set the test up: say so rather than fail or pass.
    if f.steal > f.tolerances.max_steal && f.others_cpu <= 0.5 {
        eprintln!(
            "SKIP: the hypervisor stole {:.0}% of the CPU and the busy loop got {:.2} core; this host cannot run the test",
            f.steal * 100.0,
            f.others_cpu
        );
        return;
    }
    assert!(f.others_cpu > 0.5, "one busy loop is most of a core: {f:?}");
    assert!(!f.faithful, "{f:?}");
    assert!(
        f.reasons.iter().any(|r| r.contains("other programs")),
        "{:?}",
        f.reasons
    );
}

#[test]
fn kernel_rate_follows_a_rate_step() {
    let _g = root_or_skip!();
    rate_step_on(&kernel_rate());
}

#[test]
fn direct_follows_a_rate_step() {
    let _g = root_or_skip!();
    rate_step_on(&direct());
}

/// `direct` reading through its TPACKET_V3 ring: the same rate step and an MPTCP download
/// over two paths (lone handshake frames wait for their block's timer).
#[test]
fn direct_ring_follows_a_rate_step() {
    let _g = root_or_skip!();
    rate_step_on(&direct_ring());
}

#[test]
fn direct_ring_carries_mptcp_over_both_paths() {
    let _g = root_or_skip!();
    mptcp_on(&direct_ring());
}

#[test]
fn direct_gso_units_carry_mptcp_over_both_paths() {
    let _g = root_or_skip!();
    // 2 ms: units of 3 segments at 20 Mbit/s, 5 at 30 (250 µs would be single segments).
    mptcp_on(&TestbedOptions {
        gso_unit_airtime_us: Some(2000),
        ..direct()
    });
}

fn direct_ring() -> TestbedOptions {
    TestbedOptions {
        packet_rx_ring: true,
        ..direct()
    }
}

fn rate_step_on(opts: &TestbedOptions) {
    // One TCP download at 40 Mbit/s, then the rate steps down to 10: what the rate stage
    // delivered follows the configured rate within the monitors' tolerance. The testbed's
    // promise is a right figure or a flagged run: a try the monitors flagged (a hypervisor
    // stealing the CPU makes the emulator late) only has to say why, and is tried again, up
    // to three times; an unflagged figure out of tolerance fails at once.
    let mut flagged = Vec::new();
    while flagged.len() < 3 {
        match rate_step_try(opts) {
            Ok(()) => return,
            Err(reasons) => flagged.push(reasons),
        }
    }
    eprintln!("rate step not testable here: every try was flagged unfaithful: {flagged:?}");
}

/// `Err(reasons)`: a stage out of tolerance that the monitors flagged.
fn rate_step_try(opts: &TestbedOptions) -> Result<(), Vec<String>> {
    let mut plan = PathPlan::constant("a", 40.0, 1.0, 0.0);
    plan.steps.push(up_at(3.0, 10.0));
    let tb = Testbed::start(&spec(vec![plan]), opts).unwrap();
    let ns_names = names(&tb);
    if opts.datapath == Datapath::KernelRate {
        let mut tc = std::process::Command::new("tc");
        tc.args(["-n", tb.emulator_netns(), "qdisc", "show"]);
        let qdiscs = ns::run(&mut tc).unwrap();
        assert!(qdiscs.contains("htb") && qdiscs.contains("pfifo"), "{qdiscs}");
    }
    tb.play().unwrap();
    let mut seen = Vec::new();
    let mut outcome = Ok(());
    for (rate, from_s) in [(40.0, 0.0), (10.0, 3.2)] {
        while tb.elapsed_s().unwrap() < from_s {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Warm-up outside the monitored interval: slow start is not the emulator's doing.
        perf::download(&tb, 0, 0, perf::Proto::Tcp, 0.5, 0.0, None).unwrap();
        tb.reset_monitors();
        perf::download(&tb, 0, 0, perf::Proto::Tcp, 2.0, 0.0, None).unwrap();
        let f = tb.fidelity();
        assert_eq!(f.datapath, opts.datapath.name());
        let p = &f.paths[0];
        eprintln!(
            "{} at {rate} Mbit/s: delivered {:.2} Mbit/s, flagged for {:?}",
            f.datapath, p.delivered_mbps, f.reasons
        );
        if (p.configured_mbps - rate).abs() > 1e-9 {
            // The interval ran into the step: only a host the monitors flag is that slow
            // (a CI run under 35-41 % steal took the 40-Mbit/s interval past 3 s).
            assert!(!f.faithful, "{rate} Mbit/s interval crossed the step, not flagged: {p:?}");
            outcome = Err(f.reasons.clone());
            break;
        }
        let within = p.delivered_over_configured > 0.85 && p.delivered_over_configured < 1.05;
        if !within {
            assert!(!f.faithful, "{rate} Mbit/s, not flagged: {p:?}");
            assert!(!f.reasons.is_empty(), "flagged without a reason: {f:?}");
            outcome = Err(f.reasons.clone());
            break;
        }
        seen.push(p.delivered_mbps);
    }
    if outcome.is_ok() {
        assert!(seen[1] < 0.5 * seen[0], "{seen:?}");
    }
    drop(tb);
    assert_gone(&ns_names);
    outcome
}

/// A UDP socket in the client namespace (reads time out after 3 s) and one in the server
/// namespace, on the addresses of the testbed's first path.
fn udp_over_first_path(tb: &Testbed) -> (UdpSocket, UdpSocket) {
    let p = tb.paths()[0].clone();
    let rx = tb
        .run_in(Side::Client, || {
            UdpSocket::bind(SocketAddr::new(p.client_ip.into(), 0)).unwrap()
        })
        .unwrap();
    let tx = tb
        .run_in(Side::Server, || {
            UdpSocket::bind(SocketAddr::new(p.server_ip.into(), 0)).unwrap()
        })
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    (rx, tx)
}

on_rattan_and_direct!(
    a_dozing_radio_holds_the_first_packet_after_idle,
    direct_a_dozing_radio_holds_the_first_packet_after_idle,
    radio_on
);

fn radio_on(opts: &TestbedOptions) {
    // 5 ms each way; asleep after 200 ms without traffic, 100 ms to wake.
    let mut a = PathPlan::constant("wifi", 20.0, 5.0, 0.0);
    a.radio = Some(fbdt_scenario::RadioSleep {
        idle_timeout_ms: 200.0,
        wake_ms: 100.0,
    });
    let tb = Testbed::start(&spec(vec![a]), opts).unwrap();
    tb.play().unwrap();
    let (rx, tx) = udp_over_first_path(&tb);
    let dst = rx.local_addr().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        for _ in 0..4 {
            let (n, _) = rx.recv_from(&mut buf).expect("every datagram arrives");
            got.push((buf[0], n, Instant::now()));
        }
        got
    });
    // Send datagram `i` at `at` after `start`; its one-way delay, ms.
    let start = Instant::now() + Duration::from_millis(300);
    let mut sent = Vec::new();
    let mut send = |i: u8, at_ms: u64| {
        let due = start + Duration::from_millis(at_ms);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        sent.push(Instant::now());
        tx.send_to(&[i; 200], dst).unwrap();
    };
    // 0: after 300 ms of silence (asleep since the start); 1: during its wake-up;
    // 2: 150 ms after the wake-up, awake; 3: after 600 ms of silence again.
    send(0, 0);
    send(1, 20);
    send(2, 250);
    send(3, 850);
    let mut delay_ms = [0.0; 4];
    for (i, n, at) in receiver.join().unwrap() {
        let i = usize::from(i);
        assert!(n == 200 && i < 4);
        delay_ms[i] = at.duration_since(sent[i]).as_secs_f64() * 1e3;
    }
    eprintln!("one-way delays with a dozing radio, ms: {delay_ms:.1?}");
    // Held: the 5 ms delay plus the 100 ms wake-up (a held packet cannot arrive early).
    assert!(delay_ms[0] >= 104.0, "{delay_ms:?}");
    // Queued behind it: leaves when the radio is awake, with the first, not 100 ms later.
    assert!(delay_ms[1] >= 84.0 && delay_ms[1] < delay_ms[0] + 50.0, "{delay_ms:?}");
    // Awake: the path's own delay; far below a wake-up.
    assert!(delay_ms[2] >= 4.5 && delay_ms[2] < 55.0, "{delay_ms:?}");
    assert!(delay_ms[3] >= 104.0, "{delay_ms:?}");
    // The server → client direction woke twice; nothing went the other way.
    assert_eq!(tb.path_counters().unwrap()[0].radio_wakeups, [2, 0]);
}

/// GSO units through `direct`: a TCP stream over a lossy path arrives byte for byte, in units
/// larger than the MTU (so they passed whole), with lost segments repaired by TCP as on a
/// per-packet link.
#[test]
fn direct_gso_units_carry_a_lossy_tcp_stream_intact() {
    let _g = root_or_skip!();
    // 2 ms of airtime at 200 Mbit/s: units up to 50 kB.
    let opts = TestbedOptions {
        gso_unit_airtime_us: Some(2000),
        ..direct()
    };
    let tb = Testbed::start(&spec(vec![PathPlan::constant("lossy", 200.0, 2.0, 0.01)]), &opts).unwrap();
    let ns_names = names(&tb);
    tb.play().unwrap();
    let p = tb.paths()[0].clone();
    let listener = tb
        .run_in(Side::Server, || std::net::TcpListener::bind((p.server_ip, 0)).unwrap())
        .unwrap();
    let at = listener.local_addr().unwrap();
    let client = tb
        .run_in(Side::Client, || std::net::TcpStream::connect(at).unwrap())
        .unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let byte = |i: u64| (i.wrapping_mul(2_654_435_761) >> 11) as u8;
    const TOTAL: u64 = 24 << 20;
    let retrans_before = ns::tcp_retransmitted_segments(tb.netns(Side::Server)).unwrap();
    let before = tb.path_counters().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let mut buf = vec![0u8; 64 << 10];
        let mut off = 0u64;
        while off < TOTAL {
            let n = buf.len().min((TOTAL - off) as usize);
            for (k, b) in buf[..n].iter_mut().enumerate() {
                *b = byte(off + k as u64);
            }
            server.write_all(&buf[..n]).unwrap();
            off += n as u64;
        }
    });
    let started = Instant::now();
    let mut client = client;
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let mut off = 0u64;
    while off < TOTAL {
        use std::io::Read;
        let n = client.read(&mut buf).expect("the stream keeps coming");
        assert!(n > 0, "closed at {off} of {TOTAL}");
        for (k, b) in buf[..n].iter().enumerate() {
            assert_eq!(*b, byte(off + k as u64), "byte {}", off + k as u64);
        }
        off += n as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    writer.join().unwrap();
    let after = tb.path_counters().unwrap();
    let retrans = ns::tcp_retransmitted_segments(tb.netns(Side::Server)).unwrap() - retrans_before;
    let rx = after[0].client.rx_bytes - before[0].client.rx_bytes;
    let pk = after[0].client.rx_packets - before[0].client.rx_packets;
    let segments = TOTAL / 1448;
    eprintln!(
        "gso units: {TOTAL} bytes intact in {secs:.2} s ({:.0} Mbit/s); client rx {rx} bytes in {pk} frames ({} per frame); {retrans} segments retransmitted of ≈ {segments}",
        TOTAL as f64 * 8.0 / secs / 1e6,
        rx / pk.max(1)
    );
    // Split to the MTU, no frame would exceed 1514 bytes (1500 + Ethernet header). A
    // loss-limited Cubic (10–40 Mbit/s here, host-dependent) sends units of TCP's minimum of
    // two segments (`tcp_min_tso_segs`, ≈ 2960 bytes a frame), retransmissions one each: most
    // frames carrying two or more segments puts the mean well above 1.5 MTU-sized frames.
    const MTU_FRAME: u64 = 1514;
    assert!(
        rx / pk.max(1) > MTU_FRAME * 3 / 2,
        "units arrived whole: {} bytes per frame",
        rx / pk.max(1)
    );
    // 1 % of segments lost, each repaired at least once (a lost retransmission twice).
    let share = retrans as f64 / segments as f64;
    assert!(
        (0.005..0.03).contains(&share),
        "retransmitted {share:.4} of the segments"
    );
    drop(tb);
    assert_gone(&ns_names);
}

/// A shared link of `rate_mbps` that `paths` join, with `competing` flows of 2 ms one way.
fn shared_link(paths: Vec<usize>, rate_mbps: f64, queue_packets: usize, competing: u32) -> fbdt_emu::SharedPlan {
    fbdt_emu::SharedPlan {
        paths,
        rate_mbps,
        queue_packets,
        competing_tcp: competing,
        competing_delay_ms: 2.0,
    }
}

#[test]
fn a_shared_bottleneck_carries_its_members_and_the_competitor_and_no_more() {
    let _g = root_or_skip!();
    // Path 0 is disjoint (16 Mbit/s of its own); path 1 (60 Mbit/s) joins a 12 Mbit/s link
    // that one competing flow crosses too.
    let mut s = spec(vec![
        PathPlan::constant("eth", 16.0, 2.0, 0.0),
        PathPlan::constant("wigig", 60.0, 1.0, 0.0),
    ]);
    s.bottleneck = Some(shared_link(vec![1], 12.0, 100, 1));
    let tb = Testbed::start(&s, &direct()).unwrap();
    let ns_names = names(&tb);
    let comp = tb.competitors();
    assert_eq!(comp.len(), 1);
    assert_eq!((comp[0].name.as_str(), comp[0].client_if.as_str()), ("tcp#1", "comp1"));
    assert_eq!(comp[0].client_ip.to_string(), "10.200.3.1");
    let comp = comp[0].clone();
    // Nothing of kernel MPTCP's on the competitor's path.
    let eps = ns::ip(Some(tb.netns(Side::Client)), &["mptcp", "endpoint", "show"]).unwrap();
    assert!(!eps.contains("10.200.3.1"), "{eps}");
    let from = tb.bottleneck_bytes().unwrap();
    let t0 = Instant::now();
    let secs = 3.0;
    let (own, joined, other) = std::thread::scope(|sc| {
        let tb = &tb;
        let own = sc.spawn(move || perf::download(tb, 0, 0, perf::Proto::Tcp, secs, 0.0, None).unwrap());
        let joined = sc.spawn(move || perf::download(tb, 1, 1, perf::Proto::Tcp, secs, 0.0, None).unwrap());
        let other = perf::download_over(tb, &comp, secs).unwrap();
        (own.join().unwrap(), joined.join().unwrap(), other)
    });
    let crossed = tb.bottleneck_bytes().unwrap().since(&from);
    let elapsed = t0.elapsed().as_secs_f64();
    eprintln!(
        "shared bottleneck: received eth {} wigig {} tcp#1 {} bytes; crossed {crossed:?} in {elapsed:.2} s",
        own.bytes, joined.bytes, other.bytes
    );
    // The link's logical clock: never more than its rate over the time it ran, plus the
    // frame on the link.
    let total = crossed.scheme + crossed.competing[0];
    assert!(
        (total as f64) <= 12e6 / 8.0 * elapsed + 1500.0,
        "{total} bytes crossed a 12 Mbit/s link in {elapsed:.2} s"
    );
    // Everything the two flows behind it received crossed it (payload ≤ IP bytes).
    assert!(joined.bytes <= crossed.scheme && other.bytes <= crossed.competing[0]);
    // Both flows got through it, and the disjoint path was not held to its rate.
    assert!(joined.bytes > 0 && other.bytes > 0);
    assert!(
        own.bytes > total,
        "the disjoint 16 Mbit/s path carried {} bytes, less than the 12 Mbit/s link's {total}",
        own.bytes
    );
    drop(tb);
    assert_gone(&ns_names);
}

#[test]
fn a_shared_bottleneck_needs_the_direct_datapath() {
    let _g = root_or_skip!();
    let mut s = spec(vec![PathPlan::constant("a", 10.0, 1.0, 0.0)]);
    s.bottleneck = Some(shared_link(vec![0], 5.0, 10, 0));
    let e = Testbed::start(&s, &rattan()).err().expect("rattan has no shared link").to_string();
    assert!(e.contains("direct datapath"), "{e}");
}

/// A path that delivers in bursts (`bursts = { every_ms, hold_ms }`, direct datapath): a
/// steady stream of datagrams arrives in bunches with gaps as long as the hold, none lost and
/// none reordered; the other datapaths refuse such a path.
#[test]
fn direct_a_bursty_path_holds_deliveries_and_releases_them_together() {
    let _g = root_or_skip!();
    // 5 ms each way; nothing is delivered for the first 100 ms of every 200 ms.
    let mut a = PathPlan::constant("wifi", 20.0, 5.0, 0.0);
    a.bursts = Some(fbdt_scenario::Bursts {
        every_ms: 200.0,
        hold_ms: 100.0,
    });
    let refused = Testbed::start(&spec(vec![a.clone()]), &rattan()).err().expect("rattan refuses bursts");
    assert!(refused.to_string().contains("needs the direct datapath"), "{refused}");
    let tb = Testbed::start(&spec(vec![a]), &direct()).unwrap();
    let ns_names = names(&tb);
    tb.play().unwrap();
    let (rx, tx) = udp_over_first_path(&tb);
    let dst = rx.local_addr().unwrap();
    const N: usize = 80;
    let receiver = std::thread::spawn(move || {
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        for _ in 0..N {
            let (n, _) = rx.recv_from(&mut buf).expect("every datagram arrives");
            assert_eq!(n, 200);
            got.push((buf[0], Instant::now()));
        }
        got
    });
    // One datagram every 10 ms for 800 ms: four holds.
    let start = Instant::now();
    for i in 0..N {
        std::thread::sleep((start + Duration::from_millis(10 * i as u64)).saturating_duration_since(Instant::now()));
        tx.send_to(&[i as u8; 200], dst).unwrap();
    }
    let got = receiver.join().unwrap();
    let order: Vec<usize> = got.iter().map(|&(i, _)| usize::from(i)).collect();
    assert_eq!(order, (0..N).collect::<Vec<_>>(), "in order, none lost");
    let gaps_ms: Vec<f64> = got.windows(2).map(|w| (w[1].1 - w[0].1).as_secs_f64() * 1e3).collect();
    let long = gaps_ms.iter().filter(|&&g| g >= 80.0).count();
    let bunched = gaps_ms.iter().filter(|&&g| g < 2.0).count();
    eprintln!("gaps between arrivals, ms: {gaps_ms:.1?}");
    // Sent every 10 ms, a path without holds leaves no gap near 80 ms and bunches none.
    // With a hold the ~10 datagrams that reach the end during it arrive together when it ends.
    assert!(long >= 3, "{long} gaps ≥ 80 ms: {gaps_ms:.1?}");
    assert!(bunched >= 3 * 7, "{bunched} arrivals within 2 ms of the one before: {gaps_ms:.1?}");
    drop(tb);
    assert_gone(&ns_names);
}
