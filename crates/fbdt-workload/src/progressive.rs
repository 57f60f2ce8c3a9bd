//! Q3, the paper's progressive 8K player (Fig. 10): a variable-bit-rate video in 1-s GoPs,
//! downloaded in order into a circular buffer of `--buffer-gops` GoPs. Playback starts at
//! 1 s; each GoP is checked one second after the previous one started; a GoP short at its
//! check stalls playback until it arrived (a pause). "% pauses" is the share of viewing
//! time stalled: that is what the paper's table measures — its WiFi column is 1 − r/v
//! for a path of r ≈ 590 Mbit/s at every video rate v (docs/workloads.md).

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::driver::{Application, ObjectRecord, Request};
use super::metrics::{play_starts, playback, Playback};
use super::setup::{Setup, WorkloadArgs};

/// Playback starts (the first GoP is checked) this long after the request.
pub const STARTUP_S: f64 = 1.0;
/// Spread of GoP sizes around the nominal rate: a log-normal of mean 1 and this
/// coefficient of variation (our assumption for a VBR encode; the paper gives none).
pub const GOP_SIZE_CV: f64 = 0.25;

/// Fig. 10 (paper 001, mobility): (rate Mbit/s, [(pause share, PSNR dB)] for WiFi, WiGig,
/// MPTCP, FBDT).
pub const PAPER_FIG10: [(f64, [(f64, f64); 4]); 4] = [
    (425.0, [(0.0, 55.0), (0.0, 55.0), (0.0, 55.0), (0.0, 55.0)]),
    (900.0, [(0.33, 42.0), (0.0, 55.0), (0.0, 55.0), (0.0, 55.0)]),
    (1300.0, [(0.55, 34.0), (0.07, 52.0), (0.0, 55.0), (0.0, 55.0)]),
    (1700.0, [(0.67, 30.0), (0.30, 44.0), (0.24, 46.0), (0.04, 53.5)]),
];

/// The schemes standing for the paper's columns in the simulator (it has no kernel MPTCP:
/// the meta layer with minRTT plays MPTCP).
pub const PAPER_COLUMNS: [(&str, &str); 4] = [
    ("WiFi", "tcp:wifi"),
    ("WiGig", "tcp:wigig"),
    ("MPTCP", "mp:minrtt"),
    ("FBDT", "fbdt"),
];

/// GoP sizes in bytes: `n` seconds at `rate_mbps`, each GoP log-normal around the rate.
pub fn gop_sizes(rate_mbps: f64, n: usize, seed: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6f70_5f73_697a_6573);
    let sigma2 = (1.0 + GOP_SIZE_CV * GOP_SIZE_CV).ln();
    let (mu, sigma) = (-sigma2 / 2.0, sigma2.sqrt());
    (0..n)
        .map(|_| {
            let factor = (mu + sigma * standard_normal(&mut rng)).exp();
            (rate_mbps * 1e6 / 8.0 * factor).round().max(1.0) as u64
        })
        .collect()
}

/// One N(0, 1) sample (Box–Muller).
pub fn standard_normal(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The player: GoPs 0..B are requested at once; GoP k ≥ B when GoP k − B starts playing
/// (its buffer slot is freed), which depends on when earlier GoPs arrived.
pub struct Player {
    sizes: Vec<u64>,
    buffer_gops: usize,
    asked: usize,
}

impl Player {
    pub fn new(sizes: Vec<u64>, buffer_gops: usize) -> Self {
        Player {
            sizes,
            buffer_gops,
            asked: 0,
        }
    }

    /// When each GoP arrived so far, in order (stops at the first still missing).
    fn arrivals(timeline: &[ObjectRecord]) -> Vec<Option<f64>> {
        timeline.iter().map_while(|o| o.t_complete_s.map(Some)).collect()
    }

    /// The playback of a finished run; GoPs missing at `end_s` count as arriving then.
    pub fn playback(&self, timeline: &[ObjectRecord], end_s: f64) -> Playback {
        let complete: Vec<Option<f64>> = (0..self.sizes.len())
            .map(|k| timeline.get(k).and_then(|o| o.t_complete_s))
            .collect();
        playback(&play_starts(&complete, STARTUP_S, end_s, 1.0), STARTUP_S, 1.0)
    }
}

impl Application for Player {
    fn requests(&mut self, _now_s: f64, timeline: &[ObjectRecord]) -> Vec<Request> {
        let starts = play_starts(&Self::arrivals(timeline), STARTUP_S, f64::INFINITY, 1.0);
        let mut out = Vec::new();
        while self.asked < self.sizes.len() {
            let at_s = match self.asked.checked_sub(self.buffer_gops) {
                None => 0.0,
                Some(freed_by) => match starts.get(freed_by) {
                    Some(&t) => t,
                    None => break,
                },
            };
            out.push(Request {
                bytes: self.sizes[self.asked],
                at_s,
                deadline_s: None,
            });
            self.asked += 1;
        }
        out
    }

    fn finished(&self) -> bool {
        self.asked == self.sizes.len()
    }
}

#[derive(Debug, Serialize)]
pub struct ProgressiveResult {
    pub scheme: String,
    /// Nominal video rate (scaled), Mbit/s.
    pub rate_mbps: f64,
    /// Share of viewing time stalled, mean over seeds.
    pub pause_share: f64,
    /// Time-weighted PSNR (55 dB playing, frozen while stalled), mean over seeds.
    pub psnr_db: f64,
    /// Share of 1-s checks that found their GoP short, mean over seeds.
    pub short_checks_share: f64,
    pub runs: Vec<Playback>,
    /// Fig. 10's (pause share, PSNR) for this scheme's column and rate, if any.
    pub paper: Option<(f64, f64)>,
}

pub fn run(setup: &Setup, args: &WorkloadArgs) -> Result<Vec<ProgressiveResult>> {
    let video_s = setup.video_s(args, 1.0)?;
    if args.buffer_gops == 0 || args.buffer_gops > 600 {
        bail!("--buffer-gops must be in 1..=600");
    }
    if args
        .rates
        .iter()
        .any(|r| !(r.is_finite() && *r > 0.0 && *r <= 100_000.0))
    {
        bail!("--rates must be in (0, 100000] Mbit/s");
    }
    let gops = video_s.floor() as usize;
    let mut items = Vec::new();
    for scheme in &setup.schemes {
        for &rate in &args.rates {
            for &seed in &setup.seeds {
                items.push((scheme.as_str(), rate, seed));
            }
        }
    }
    let runs = setup.run_all(&items, |&(scheme, rate, seed)| {
        let sizes = gop_sizes(rate * setup.scale, gops, seed);
        let mut player = Player::new(sizes, args.buffer_gops as usize);
        let t = setup.run_one(scheme, seed, &mut player)?;
        Ok(player.playback(&t, setup.scenario.duration_s))
    })?;
    let n = setup.seeds.len();
    let results: Vec<ProgressiveResult> = runs
        .chunks(n)
        .enumerate()
        .map(|(k, chunk)| {
            let (scheme, rate, _) = items[k * n];
            let column = PAPER_COLUMNS.iter().position(|&(_, s)| s == scheme);
            let paper = PAPER_FIG10
                .iter()
                .find(|(r, _)| *r == rate)
                .zip(column)
                .map(|((_, cols), c)| cols[c]);
            ProgressiveResult {
                scheme: scheme.to_string(),
                rate_mbps: rate * setup.scale,
                pause_share: chunk.iter().map(|r| r.pause_share).sum::<f64>() / n as f64,
                psnr_db: chunk.iter().map(|r| r.psnr_db).sum::<f64>() / n as f64,
                short_checks_share: chunk.iter().map(|r| r.short_checks_share).sum::<f64>() / n as f64,
                runs: chunk.to_vec(),
                paper,
            }
        })
        .collect();
    print_fig10(setup, &args.rates, &results);
    Ok(results)
}

/// Fig. 10's table: per rate, every scheme's pauses / PSNR, the paper's beside ours.
fn print_fig10(setup: &Setup, rates: &[f64], results: &[ProgressiveResult]) {
    println!(
        "progressive 8K (Fig. 10), scenario {} (scale {}, {} seeds): pauses % / PSNR dB, ours [paper, mobility]",
        setup.scenario.name,
        setup.scale,
        setup.seeds.len()
    );
    print!("{:>10}", "Mbit/s");
    for s in &setup.schemes {
        print!(" {s:>22}");
    }
    println!();
    for &rate in rates {
        print!("{:>10}", rate * setup.scale);
        for s in &setup.schemes {
            let cell = results
                .iter()
                .find(|r| &r.scheme == s && r.rate_mbps == rate * setup.scale)
                .map_or("-".to_string(), |r| {
                    let ours = format!("{:.0}/{:.1}", r.pause_share * 100.0, r.psnr_db);
                    match r.paper {
                        Some((p, q)) => format!("{ours} [{:.0}/{q}]", p * 100.0),
                        None => ours,
                    }
                });
            print!(" {cell:>22}");
        }
        println!();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gop_sizes_average_the_rate_and_repeat_per_seed() {
        let sizes = gop_sizes(800.0, 4000, 3);
        let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        assert!((mean / 100e6 - 1.0).abs() < 0.02, "{mean}");
        let sd = (sizes.iter().map(|&s| (s as f64 - mean).powi(2)).sum::<f64>() / sizes.len() as f64).sqrt();
        assert!((sd / mean - GOP_SIZE_CV).abs() < 0.02, "{}", sd / mean);
        assert_eq!(sizes, gop_sizes(800.0, 4000, 3));
        assert_ne!(sizes, gop_sizes(800.0, 4000, 4));
    }

    fn arrived(t: f64) -> ObjectRecord {
        ObjectRecord::hand_made(10, None, 0.0, Some(t))
    }

    #[test]
    fn the_player_refills_a_slot_when_a_gop_starts_playing() {
        let mut p = Player::new(vec![10; 6], 3);
        let first: Vec<f64> = p.requests(0.0, &[]).iter().map(|r| r.at_s).collect();
        assert_eq!(first, vec![0.0, 0.0, 0.0]);
        // GoP 0 arrived at 0.4: it plays at 1 s, when GoP 3 may be asked for.
        let mut t = vec![arrived(0.4)];
        let next = p.requests(0.4, &t);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].at_s, 1.0);
        // GoP 1 arrives late (2.5 > its check at 2): GoP 4 is asked for when it plays.
        t.push(arrived(2.5));
        assert_eq!(p.requests(2.5, &t)[0].at_s, 2.5);
        assert!(!p.finished());
        let pb = p.playback(&t, 10.0);
        assert!(pb.stalled_s > 0.5);
    }
}
