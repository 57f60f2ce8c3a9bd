//! Coding speed on this machine: how many original bits per second one core can encode
//! (n_k High combinations of a cohort) and decode (Gauss–Jordan of n_k combinations).
//!
//! `cargo run --release -p cotag --example codec_speed`

use std::time::Instant;

use cotag::gf::{self, Cauchy};
use cotag::{wire, Decoder};
use rand::{Rng, SeedableRng};

fn main() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let len = 1400;
    for n in [8usize, 16, 36, 64, 128] {
        let symbols: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let p: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                wire::to_symbol(&p, len + wire::LEN_PREFIX).unwrap()
            })
            .collect();
        let rows: Vec<&[u8]> = symbols.iter().map(Vec::as_slice).collect();
        // Enough cohorts for ~0.5 s of work at the slowest size.
        let cohorts = (4_000 / n).max(20);
        let t0 = Instant::now();
        let mut coded = Vec::new();
        for _ in 0..cohorts {
            let c = Cauchy::random(&mut rng, n).unwrap();
            coded = (0..n)
                .map(|i| {
                    let coeffs = c.row(i);
                    let payload = gf::combine_with(&coeffs, &rows);
                    (coeffs, payload)
                })
                .collect();
        }
        let enc = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        for _ in 0..cohorts {
            let mut d = Decoder::new(n, len + wire::LEN_PREFIX);
            for (c, p) in &coded {
                d.insert(c, p);
            }
            assert!(d.is_complete());
        }
        let dec = t1.elapsed().as_secs_f64();
        let bits = (cohorts * n * len * 8) as f64;
        println!(
            "n_k {n:>3}: encode {:>7.0} Mbit/s, decode {:>7.0} Mbit/s (original data, one core)",
            bits / enc / 1e6,
            bits / dec / 1e6
        );
    }
}
