//! Coding throughput per core: the GF(2^8) work COTAG does for each cohort of n_k packets,
//! once per row kernel, alternated, so a busy host slows every kernel alike.
//!
//! * encode — n_k dense coded packets, each `gf::combine_with` of the n_k source symbols
//!   with its own non-zero coefficients: the gateway's Lows (and its Highs with
//!   `HighCode::Cauchy`; systematic Highs are copies);
//! * decode — a fresh `Decoder` fed random combinations until its rank is full (n_k, now
//!   and then one or two more), as the device does;
//! * pipeline — all of COTAG on one thread: `cotag::sim` with gateway, both APs and the
//!   device, 1400-byte packets at the rate that fills a T = 1 ms cohort with n_k packets
//!   (n_k ≤ 128, the gateway's limit), each radio link 0.75 × that rate, 20 cohorts, default
//!   extras (the gateway's Lows, the APs' re-encoded Lows in spare capacity). Its Gbit/s is
//!   delivered source data per CPU-second, the event loop's own cost included. Its Highs are
//!   systematic (the gateway's default); `pipeline-cauchy` is the same run with dense Cauchy
//!   Highs (`cotag+code=cauchy`).
//!
//! Throughput is source data (n_k × packet bytes, not symbols or headers) per second of this
//! thread's CPU time (so a shared host's other programs do not count against it; the JSON
//! also gives the median share of wall time the thread was on a core). Each repetition measures every kernel once, in turn, for at least `--min-ms`; the
//! speed-up is taken per repetition against the scalar kernel measured beside it, and the
//! median of those is reported.
//!
//! ```text
//! cargo run --release -p cotag --example codec_speed -- [--json] [--reps 5] [--min-ms 200]
//!     [--n 10,50,100,200] [--len 1400] [--kernels scalar,ssse3,avx2]
//!     [--ops encode,decode,pipeline,pipeline-cauchy]
//! ```

use std::time::Instant;

use cotag::gf::{self, Kernel};
use cotag::{wire, Decoder};
use rand::{Rng, SeedableRng};

struct Args {
    json: bool,
    reps: usize,
    min_ms: u64,
    sizes: Vec<usize>,
    len: usize,
    kernels: Vec<Kernel>,
    ops: Vec<&'static str>,
}

const OPS: [&str; 4] = ["encode", "decode", "pipeline", "pipeline-cauchy"];

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        json: false,
        reps: 5,
        min_ms: 200,
        sizes: vec![10, 50, 100, 200],
        len: 1400,
        kernels: Kernel::ALL.into_iter().filter(|k| k.is_supported()).collect(),
        ops: OPS.to_vec(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            a.json = true;
            continue;
        }
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--reps" => a.reps = num(&v)?.max(1),
            "--min-ms" => a.min_ms = num(&v)? as u64,
            "--len" => a.len = num(&v)?.clamp(1, wire::MAX_PACKET),
            "--n" => a.sizes = v.split(',').map(num).collect::<Result<_, _>>()?,
            "--kernels" => {
                a.kernels = v
                    .split(',')
                    .map(|name| {
                        Kernel::ALL
                            .into_iter()
                            .find(|k| k.name() == name)
                            .filter(|k| k.is_supported())
                            .ok_or(format!("kernel {name}: unknown or not supported by this CPU"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--ops" => {
                a.ops = v
                    .split(',')
                    .map(|op| {
                        OPS.into_iter()
                            .find(|o| *o == op)
                            .ok_or(format!("op {op}: one of {}", OPS.join(", ")))
                    })
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.sizes.contains(&0) {
        return Err("n_k must be at least 1".into());
    }
    Ok(a)
}

/// One cohort's data and the combinations the measurements use.
struct Cohort {
    n: usize,
    symbols: Vec<Vec<u8>>,
    /// n coefficient rows for encoding.
    enc_coeffs: Vec<Vec<u8>>,
    /// Coded packets for decoding: n + spare, in case a few random ones are dependent.
    coded: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Cohort {
    fn new(rng: &mut impl Rng, n: usize, len: usize) -> Cohort {
        let symbols: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let p: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                wire::to_symbol(&p, len + wire::LEN_PREFIX).expect("len <= MAX_PACKET")
            })
            .collect();
        let coeff_row = |rng: &mut dyn rand::RngCore| (0..n).map(|_| rng.gen_range(1..=255u8)).collect::<Vec<u8>>();
        let enc_coeffs = (0..n).map(|_| coeff_row(rng)).collect();
        let rows: Vec<&[u8]> = symbols.iter().map(Vec::as_slice).collect();
        // 16 spare combinations: all n + 16 rank-deficient has probability below 256^-16.
        let coded = (0..n + 16)
            .map(|_| {
                let c = coeff_row(rng);
                let p = gf::combine_with(&c, &rows);
                (c, p)
            })
            .collect();
        Cohort {
            n,
            symbols,
            enc_coeffs,
            coded,
        }
    }

    fn encode(&self) -> usize {
        let rows: Vec<&[u8]> = self.symbols.iter().map(Vec::as_slice).collect();
        let mut sink = 0usize;
        for c in &self.enc_coeffs {
            let p = gf::combine_with(c, &rows);
            // Keeps the work observable so the optimiser cannot drop it.
            sink = sink.wrapping_add(usize::from(p[p.len() / 2]));
        }
        sink
    }

    fn decode(&self) -> usize {
        let mut d = Decoder::new(self.n, self.symbols[0].len());
        for (c, p) in &self.coded {
            d.insert(c, p);
            if d.is_complete() {
                break;
            }
        }
        let out = d.into_symbols().expect("n + 16 random combinations reach full rank");
        assert_eq!(out, self.symbols, "decoded symbols differ");
        out.len()
    }
}

/// The simulated gateway → APs → device run for the pipeline op; `None` above the gateway's
/// cohort limit.
fn pipeline_setup(n: usize, len: usize, code: cotag::HighCode) -> Option<cotag::sim::Setup> {
    if n > gf::MAX_CAUCHY {
        return None;
    }
    let period_us = 1_000;
    // n packets of len bytes per period.
    let rate = (n * len * 8) as f64 * 1e6 / period_us as f64;
    let mut setup = cotag::sim::Setup {
        min_len: len,
        max_len: len,
        packets: 20 * n,
        source_rate_bps: rate,
        ..Default::default()
    };
    setup.gateway.period_us = period_us;
    setup.gateway.max_cohort = n;
    setup.gateway.high_code = code;
    for l in &mut setup.downlinks {
        l.rate_bps = 0.75 * rate;
    }
    Some(setup)
}

/// Source bits delivered by one pipeline run.
fn pipeline(setup: &cotag::sim::Setup) -> usize {
    let r = cotag::sim::run(setup).expect("a valid setup");
    assert!(r.exactly_once_in_order(), "the loss-free pipeline must deliver everything");
    (r.source_bytes * 8) as usize
}

/// This thread's CPU time in seconds: unlike wall time it does not count the moments other
/// programs on a shared host held the core.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return f64::NAN;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// (CPU seconds, wall seconds) per call of `f`, over at least `min_ms` of this thread's CPU
/// time of repeated calls.
fn time_per_call(min_ms: u64, mut f: impl FnMut() -> usize) -> (f64, f64) {
    let mut calls = 0u64;
    let mut sink = 0usize;
    let (c0, t0) = (thread_cpu_s(), Instant::now());
    loop {
        sink = sink.wrapping_add(f());
        calls += 1;
        let cpu = thread_cpu_s() - c0;
        // A NaN clock (never on Linux) falls back to wall time.
        let spent = if cpu.is_nan() { t0.elapsed().as_secs_f64() } else { cpu };
        if spent * 1e3 >= min_ms as f64 {
            std::hint::black_box(sink);
            let n = calls as f64;
            return (spent / n, t0.elapsed().as_secs_f64() / n);
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn json_str(s: &str) -> String {
    let mut o = String::from('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

struct Row {
    n: usize,
    op: &'static str,
    kernel: Kernel,
    gbps: Vec<f64>,
    /// Per repetition: this kernel's speed over scalar's in the same repetition.
    ratio: Vec<f64>,
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("codec_speed: {e}");
            std::process::exit(2);
        }
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut rows: Vec<Row> = Vec::new();
    // CPU time over wall time of each measurement: how much of a core the host let us have.
    let mut wall_share: Vec<f64> = Vec::new();
    for &n in &args.sizes {
        let cohort = Cohort::new(&mut rng, n, args.len);
        for &op in &args.ops {
            let setup = match op {
                "pipeline" => pipeline_setup(n, args.len, cotag::HighCode::Systematic),
                "pipeline-cauchy" => pipeline_setup(n, args.len, cotag::HighCode::Cauchy),
                _ => None,
            };
            let bits = match (op, &setup) {
                (_, Some(s)) => pipeline(s) as f64,
                ("pipeline" | "pipeline-cauchy", None) => continue,
                _ => (n * args.len * 8) as f64,
            };
            let mut per_kernel: Vec<Vec<f64>> = vec![Vec::new(); args.kernels.len()];
            for _ in 0..args.reps {
                for (k, out) in args.kernels.iter().zip(per_kernel.iter_mut()) {
                    gf::set_kernel(*k);
                    let (cpu, wall) = match (op, &setup) {
                        ("encode", _) => time_per_call(args.min_ms, || cohort.encode()),
                        (_, Some(s)) => time_per_call(args.min_ms, || pipeline(s)),
                        _ => time_per_call(args.min_ms, || cohort.decode()),
                    };
                    out.push(bits / cpu / 1e9);
                    wall_share.push(cpu / wall);
                }
            }
            let scalar = args.kernels.iter().position(|k| *k == Kernel::Scalar);
            for (k, gbps) in args.kernels.iter().zip(&per_kernel) {
                let ratio = scalar
                    .map(|s| gbps.iter().zip(&per_kernel[s]).map(|(g, b)| g / b).collect())
                    .unwrap_or_default();
                rows.push(Row {
                    n,
                    op,
                    kernel: *k,
                    gbps: gbps.clone(),
                    ratio,
                });
            }
        }
    }
    gf::set_kernel(Kernel::detect());

    // One list of facts about the run, printed as JSON fields or as a header line.
    let meta: Vec<(&str, String)> = vec![
        ("bench", json_str("cotag codec_speed")),
        ("cpu", json_str(&cpu_model())),
        ("threads_online", std::thread::available_parallelism().map_or(0, |n| n.get()).to_string()),
        ("detected_kernel", json_str(Kernel::detect().name())),
        ("packet_bytes", args.len.to_string()),
        ("reps", args.reps.to_string()),
        ("min_ms_cpu", args.min_ms.to_string()),
        ("unit", json_str("Gbit/s of source data per second of this thread's CPU time")),
        ("cpu_share_median", format!("{:.3}", median(&wall_share))),
    ];
    if args.json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                let list = |v: &[f64]| v.iter().map(|x| format!("{x:.4}")).collect::<Vec<_>>().join(",");
                let ratio = if r.ratio.is_empty() { "null".to_string() } else { format!("{:.3}", median(&r.ratio)) };
                let (n, op, kernel, med) = (r.n, r.op, r.kernel.name(), median(&r.gbps));
                let (gbps, ratios) = (list(&r.gbps), list(&r.ratio));
                format!(
                    "{{\"n_k\":{n},\"op\":\"{op}\",\"kernel\":\"{kernel}\",\"gbit_per_s\":[{gbps}],\"median_gbit_per_s\":{med:.4},\"ratio_vs_scalar\":[{ratios}],\"median_ratio_vs_scalar\":{ratio}}}"
                )
            })
            .collect();
        let fields: Vec<String> = meta.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        println!("{{{},\"results\":[{}]}}", fields.join(","), items.join(","));
    } else {
        let fields: Vec<String> = meta.iter().map(|(k, v)| format!("{k}: {}", v.trim_matches('"'))).collect();
        println!("{} | kernels alternated in each rep", fields.join(" | "));
        println!("{:>5} {:>15} {:>7} {:>26} {:>10}", "n_k", "op", "kernel", "Gbit/s median [min-max]", "x scalar");
        for r in &rows {
            let (lo, hi) = r.gbps.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
            let ratio = if r.ratio.is_empty() { "-".to_string() } else { format!("{:.2}", median(&r.ratio)) };
            let (n, op, kernel, med) = (r.n, r.op, r.kernel.name(), median(&r.gbps));
            println!("{n:>5} {op:>15} {kernel:>7} {med:>10.3} [{lo:.3}-{hi:.3}] {ratio:>10}");
        }
    }
}
