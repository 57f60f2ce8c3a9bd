//! Root tests: kernel TCP bulk transfers through COTAG (and dual-rr) on a 2-path testbed,
//! byte-for-byte (SHA-256). Skip cleanly without root. Run one at a time (each builds three
//! namespaces and an emulator).

use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use cotag_net::transfer::{self, Amount, TcpTransfer};
use cotag_net::{CotagLink, CotagParams, LinkStats, Mode};
use fbdt_emu::{PathPlan, Testbed, TestbedOptions, TestbedSpec};

static SERIAL: Mutex<()> = Mutex::new(());

/// The serial lock when this host can build namespaces; `None` (test skipped) otherwise.
fn root() -> Option<MutexGuard<'static, ()>> {
    match fbdt_emu::skip_reason() {
        Some(why) => {
            eprintln!("SKIP: {why}");
            None
        }
        None => Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner())),
    }
}

const BYTES: u64 = 30_000_000;
/// With loss the transfer is slow (whole cohorts lost, TCP backs off): less data.
const LOSSY_BYTES: u64 = 10_000_000;

/// Two paths of 100 Mbit/s, 2 ms one way; `loss` on the second path's data direction.
fn spec(loss: f64) -> TestbedSpec {
    TestbedSpec {
        name: "cotag-test".into(),
        congestion_control: "cubic".into(),
        duration_s: 0.0,
        scale: 1.0,
        seed: 7,
        paths: vec![
            PathPlan::constant("ap1", 100.0, 2.0, 0.0),
            PathPlan::constant("ap2", 100.0, 2.0, loss),
        ],
        bottleneck: None,
    }
}

/// One transfer of `BYTES` through `mode`; checks the namespaces are gone afterwards.
fn run(mode: Mode, loss: f64, bytes: u64) -> (TcpTransfer, LinkStats) {
    let tb = Testbed::start(&spec(loss), &TestbedOptions::default()).expect("testbed");
    let namespaces: Vec<String> = tb.namespaces().iter().map(|s| s.to_string()).collect();
    tb.play().expect("play");
    let link = CotagLink::start(&tb, mode, Instant::now()).expect("cotag link");
    let t = transfer::download(&tb, Amount::Bytes(bytes), 42, &|_| {}).expect("download");
    let stats = link.stop().expect("stop");
    drop(tb);
    let listed = String::from_utf8(
        std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    for ns in namespaces {
        assert!(!listed.contains(&ns), "namespace {ns} left behind");
    }
    eprintln!(
        "{} bytes in {:.2} s ({:.1} Mbit/s), {} retransmissions, overhead {:?}\n{:?}",
        t.received,
        t.secs,
        t.received as f64 * 8.0 / t.secs / 1e6,
        t.retransmissions,
        stats.coding_overhead(),
        stats
    );
    (t, stats)
}

fn cotag(t_us: u64) -> Mode {
    // Both paths: 200 Mbit/s.
    Mode::Cotag(Box::new(CotagParams::for_capacity(t_us, 200e6)))
}

#[test]
fn cotag_carries_a_kernel_tcp_download_intact() {
    let Some(_serial) = root() else { return };
    let (t, s) = run(cotag(1_000), 0.0, BYTES);
    assert!(
        t.intact(),
        "sent {} ({}) received {} ({})",
        t.sent,
        t.sent_sha256,
        t.received,
        t.received_sha256
    );
    let d = s.client.cotag_device.as_ref().expect("device counters");
    assert!(d.cohorts_decoded > 0);
    // Both paths carried coded packets.
    assert!(s.client.packets_in.iter().all(|&p| p > 0), "{:?}", s.client.packets_in);
    // The uplink carried the ACKs.
    assert!(s.server.uplink_packets > 0);
    // The offloads were in the path: TCP's super-packets cut at the server, runs of decoded
    // segments merged at the client — and the bytes above arrived intact through both.
    assert!(s.server.tun_reads < s.server.tun_packets_in, "{} reads, {} packets", s.server.tun_reads, s.server.tun_packets_in);
    assert!(s.client.tun_merged_segments > s.client.tun_merged_writes && s.client.tun_merged_writes > 0);
}

#[test]
fn cotag_with_loss_drops_cohorts_whole_and_tcp_recovers() {
    let Some(_serial) = root() else { return };
    let (t, s) = run(cotag(1_000), 0.02, LOSSY_BYTES);
    assert!(t.intact(), "sent {} received {}", t.sent, t.received);
    let d = s.client.cotag_device.as_ref().expect("device counters");
    assert!(d.cohorts_decoded > 0);
    // 2% loss on one path without enough extras loses some cohorts whole; TCP resent them.
    if d.cohorts_failed > 0 {
        assert!(t.retransmissions > 0, "cohorts failed but TCP retransmitted nothing");
    }
}

#[test]
fn dual_rr_carries_a_kernel_tcp_download_intact() {
    let Some(_serial) = root() else { return };
    let (t, s) = run(Mode::DualRr, 0.0, BYTES);
    assert!(t.intact());
    assert!(s.client.packets_in.iter().all(|&p| p > 0), "{:?}", s.client.packets_in);
    assert!(s.client.cotag_device.is_none());
}
