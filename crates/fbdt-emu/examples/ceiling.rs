//! Measures the emulator's rate ceiling on this machine: one TCP over one path at a list of
//! rates, and kernel MPTCP over two equal paths (aggregate = the same list).
//! `cargo run --release -p fbdt-emu --example ceiling -- [--datapath D] [--threads N] [--mtu M] [--secs S] [--steer] [--ring] [--qdisc-bypass] [--mtu-frames] 200 400 600`
//! (`--ring`: the direct datapath receives through a TPACKET_V3 ring; `--qdisc-bypass`:
//! its sockets write past the qdisc layer; `--mtu-frames`: one MTU packet per frame instead
//! of GSO units.)
//! Unlike `fbdt-lab bench emu` it runs on a busy host too: the fidelity columns say what
//! the monitors saw (share of packets ≥ 1 ms late, emulator CPU).

use fbdt_emu::{perf, Datapath, PathPlan, Testbed, TestbedOptions, TestbedSpec};

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut opt = |name: &str, default: f64| -> f64 {
        if let Some(i) = args.iter().position(|a| a == name) {
            let v = args[i + 1].parse().unwrap();
            args.drain(i..i + 2);
            v
        } else {
            default
        }
    };
    let threads = opt("--threads", 1.0) as usize;
    let mtu = opt("--mtu", 1500.0) as u32;
    let secs = opt("--secs", 4.0);
    let datapath: Datapath = match args.iter().position(|a| a == "--datapath") {
        Some(i) => {
            let d = args[i + 1].parse().map_err(anyhow::Error::msg)?;
            args.drain(i..i + 2);
            d
        }
        None => Datapath::default(),
    };
    let mut flag = |name: &str| match args.iter().position(|a| a == name) {
        Some(i) => {
            args.remove(i);
            true
        }
        None => false,
    };
    let steer_receive = flag("--steer");
    let packet_rx_ring = flag("--ring");
    let qdisc_bypass = flag("--qdisc-bypass");
    // One MTU packet per frame instead of GSO units (the lab's `--gso-units 0`).
    let gso_unit_airtime_us = (!flag("--mtu-frames")).then_some(fbdt_emu::DEFAULT_GSO_UNIT_AIRTIME_US);
    let rates: Vec<f64> = args.iter().map(|a| a.parse().unwrap()).collect();
    let opts = TestbedOptions {
        emu_threads: threads,
        mtu,
        datapath,
        steer_receive,
        packet_rx_ring,
        qdisc_bypass,
        gso_unit_airtime_us,
        ..Default::default()
    };
    println!(
        "datapath={datapath} threads={threads} mtu={mtu} secs={secs} steer={steer_receive} ring={packet_rx_ring} qdisc_bypass={qdisc_bypass} gso_units={gso_unit_airtime_us:?} cores={}",
        fbdt_emu::scenario::cores()
    );
    println!(
        "{:>10} {:>12} {:>7} {:>8} {:>6} {:>14} {:>7} {:>8} {:>6}",
        "rate", "tcp 1 path", "ratio", "late%", "cpu", "mptcp 2 paths", "ratio", "late%", "cpu"
    );
    for r in rates {
        let spec = TestbedSpec {
            name: "ceiling".into(),
            congestion_control: "cubic".into(),
            duration_s: 0.0,
            scale: 1.0,
            seed: 1,
            paths: vec![
                PathPlan::constant("a", r, 1.0, 0.0),
                PathPlan::constant("b", r / 2.0, 1.0, 0.0),
                PathPlan::constant("c", r / 2.0, 1.0, 0.0),
            ],
            bottleneck: None,
        };
        let tb = Testbed::start(&spec, &opts)?;
        tb.reset_monitors();
        let t = perf::download(&tb, 0, 0, perf::Proto::Tcp, secs, 1.0, None)?;
        let ft = tb.fidelity();
        tb.reset_monitors();
        let m = perf::download(&tb, 1, 1, perf::Proto::Mptcp, secs, 1.0, None)?;
        let fm = tb.fidelity();
        let c = tb.path_counters()?;
        println!(
            "{r:>10.0} {:>12.1} {:>7.3} {:>8.2} {:>6.2} {:>14.1} {:>7.3} {:>8.2} {:>6.2}   (mptcp bytes b={} c={})",
            t.goodput_mbps,
            t.goodput_mbps / r,
            ft.emulator_late_share * 100.0,
            ft.emulator_cpu,
            m.goodput_mbps,
            m.goodput_mbps / r,
            fm.emulator_late_share * 100.0,
            fm.emulator_cpu,
            c[1].client.rx_bytes,
            c[2].client.rx_bytes
        );
    }
    Ok(())
}
