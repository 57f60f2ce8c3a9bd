//! Development aid: `cargo run --release -p fbdt-sim --example quick -- los 10`
use fbdt_core::Config;
use fbdt_scenario::Scenario;
use fbdt_sim::{run, SimParams, SimScheme};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("los", |s| s.as_str());
    let dur: f64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let mut sc = Scenario::load(name).expect("scenario");
    sc.duration_s = dur;
    let sched = sc.schedule(1.0).expect("schedule");
    println!("capacity {:.1}", sched.capacity_mbps());
    let params = SimParams::default();
    let mut schemes: Vec<(String, SimScheme)> = (0..sched.paths.len())
        .map(|i| (format!("tcp:{}", sched.paths[i].name), SimScheme::Tcp(i)))
        .collect();
    schemes.push(("fbdt".into(), SimScheme::Session(Config::default())));
    if std::env::var("PAPER").is_ok() {
        schemes.push(("fbdt-paper".into(), SimScheme::Session(Config::paper())));
    }
    for (n, s) in schemes {
        let t0 = std::time::Instant::now();
        match run(&sched, &s, &params, |_| {}) {
            Ok(o) => println!(
                "{n:12} {:8.1} Mbit/s red {:6.3}% paths {:?} steps {} wall {:.2}s stats {:?}",
                o.goodput_mbps,
                o.redundant_bytes as f64 * 100.0 / o.bytes_delivered.max(1) as f64,
                o.per_path_bytes,
                o.steps,
                t0.elapsed().as_secs_f64(),
                o.server.map(|s| (
                    s.sender.windows_loaded,
                    s.sender.realignments,
                    s.sender.window_stalls,
                    s.sender.path_stalls,
                    s.sender.forward_changes
                ))
            ),
            Err(e) => println!("{n:12} ERROR {e}"),
        }
    }
}
