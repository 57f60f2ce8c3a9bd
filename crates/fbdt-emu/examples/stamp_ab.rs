//! Does the delay stamping (fbdt_emu::stamp: time stamps in the stream, TCP_NOTSENT_LOWAT,
//! poll + non-blocking writes) change kernel goodput? Plain and stamped downloads of one
//! scenario alternate on fresh testbeds, so a drifting machine load hits both alike.
//! `cargo run --profile test -p fbdt-emu --example stamp_ab -- <scenario> <scale> <secs> <runs>`

use fbdt_emu::perf::{self, Proto, Transfer};
use fbdt_emu::{Testbed, TestbedOptions};
use fbdt_scenario::Scenario;

/// Mbit/s of what arrived within the sending time (as the lab counts it).
fn in_time_mbps(t: &Transfer, secs: f64) -> f64 {
    let bytes = t
        .series
        .iter()
        .take_while(|&&(at, _)| at <= secs + 1e-6)
        .last()
        .map_or(0, |&(_, b)| b);
    bytes as f64 * 8.0 / secs / 1e6
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, scale, secs, runs] = &args[..] else {
        anyhow::bail!("usage: stamp_ab <scenario> <scale> <secs> <runs>");
    };
    let (scale, secs, runs): (f64, f64, usize) = (scale.parse()?, secs.parse()?, runs.parse()?);
    let mut scenario = Scenario::load(name)?;
    scenario.duration_s = secs;
    let spec = fbdt_emu::spec_from_schedule(&scenario, &scenario.schedule(scale)?)?;
    println!("loadavg before: {}", std::fs::read_to_string("/proc/loadavg")?.trim());
    let schemes = [("tcp:path1", Proto::Tcp, 1usize), ("mptcp", Proto::Mptcp, 0)];
    for (label, proto, path) in schemes {
        let (mut plain, mut stamped) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            for with_stamps in [false, true] {
                let mut tb = Testbed::start(&spec, &TestbedOptions::default())?;
                tb.play()?;
                let mbps = if with_stamps {
                    let (t, d) = perf::download_with_delay(&tb, path, path, proto, secs, None)?;
                    let mut v = d.delays_us.clone();
                    v.sort_unstable();
                    let p = |q: f64| {
                        v.get(((v.len().max(1) - 1) as f64 * q) as usize)
                            .map_or(0.0, |&u| u as f64 / 1e3)
                    };
                    println!(
                        "  {label} stamped: p50 {:.1} ms p99 {:.1} ms ({} samples)",
                        p(0.5),
                        p(0.99),
                        v.len()
                    );
                    in_time_mbps(&t, secs)
                } else {
                    in_time_mbps(&perf::download(&tb, path, path, proto, secs, 0.0, None)?, secs)
                };
                tb.stop();
                println!(
                    "  {label} {}: {mbps:.1} Mbit/s",
                    if with_stamps { "stamped" } else { "plain" }
                );
                if with_stamps { &mut stamped } else { &mut plain }.push(mbps);
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        println!(
            "{label}: plain {:.1} Mbit/s, stamped {:.1} Mbit/s, ratio {:.3} ({runs} runs each)",
            mean(&plain),
            mean(&stamped),
            mean(&stamped) / mean(&plain)
        );
    }
    println!("loadavg after: {}", std::fs::read_to_string("/proc/loadavg")?.trim());
    Ok(())
}
