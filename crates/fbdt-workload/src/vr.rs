//! Q4, 360° tiled video (paper 001 sec. VI-C): a live stream of 1-s GoPs (30 frames), each
//! frame an equirectangular panorama cut into 6 × 4 tiles coded independently at one of
//! five quality levels. GoP k is encoded and sent at t = k, must have arrived by k + 1 and is
//! shown during [k + 1, k + 2) while the viewer's head moves (a synthetic trace). Each GoP
//! gets the same byte budget in both allocations — min(--vr-rate, 0.8 × the rate the last
//! 24 tiles to arrive were delivered at):
//! - FIX: every tile at the one level that fits the budget, sent in raster order;
//! - optimised: tiles ranked by viewing probability and sent in that order, levels by a
//!   greedy marginal-utility optimiser (most expected viewport PSNR per byte first).
//!
//! Viewport PSNR of a frame: the tiles in view weighted by the share of the viewport they
//! cover, a tile at its level's PSNR if it arrived whole by the deadline, else frozen.

use anyhow::{bail, Result};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::driver::{Application, ObjectRecord, Request};
use super::metrics::{delivery_rate, FRAMES_PER_GOP, PSNR_FROZEN_DB, PSNR_FULL_DB};
use super::progressive::standard_normal;
use super::setup::{Setup, WorkloadArgs};

pub const TILE_COLS: usize = 6;
pub const TILE_ROWS: usize = 4;
pub const TILES: usize = TILE_COLS * TILE_ROWS;
/// Viewport (degrees): a headset's field of view.
pub const VIEW_YAW_DEG: f64 = 100.0;
pub const VIEW_PITCH_DEG: f64 = 90.0;
/// Each level's share of the top level's rate; PSNR drops 3 dB per halving (our
/// rate–distortion assumption): 43, 46, 49, 52, 55 dB.
pub const LEVEL_SHARE: [f64; 5] = [1.0 / 16.0, 1.0 / 8.0, 0.25, 0.5, 1.0];
pub const DB_PER_HALVING: f64 = 3.0;
/// The whole panorama at the top level is twice the --vr-rate budget: FIX fits level 3.
pub const TOP_RATE_PER_BUDGET: f64 = 2.0;
/// The optimiser's uncertainty about where the head will be 1–2 s ahead (degrees).
pub const PREDICT_SD_YAW_DEG: f64 = 45.0;
pub const PREDICT_SD_PITCH_DEG: f64 = 15.0;

pub fn level_psnr_db(level: usize) -> f64 {
    PSNR_FULL_DB + DB_PER_HALVING * LEVEL_SHARE[level].log2()
}

/// Head orientation per frame (30 per second): yaw velocity an Ornstein–Uhlenbeck process
/// (time constant 0.5 s, sd 45°/s), pitch a slow 20° swing every 8 s plus a little noise.
pub fn head_trace(seconds: usize, seed: u64) -> Vec<(f64, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6865_6164_5f74_7261);
    let dt = 1.0 / f64::from(FRAMES_PER_GOP);
    let a = (-dt / 0.5f64).exp();
    let b = 45.0 * (1.0 - a * a).sqrt();
    let (mut yaw, mut v) = (0.0f64, 0.0f64);
    (0..seconds * FRAMES_PER_GOP as usize)
        .map(|i| {
            let t = i as f64 * dt;
            v = a * v + b * standard_normal(&mut rng);
            yaw = (yaw + v * dt + 180.0).rem_euclid(360.0) - 180.0;
            let pitch = 20.0 * (std::f64::consts::TAU * t / 8.0).sin() + 2.0 * standard_normal(&mut rng);
            (yaw, pitch.clamp(-45.0, 45.0))
        })
        .collect()
}

/// Overlap of [a0, a1) and [b0, b1) on a 360° circle.
fn circular_overlap(a0: f64, a1: f64, b0: f64, b1: f64) -> f64 {
    [-360.0, 0.0, 360.0]
        .iter()
        .map(|s| (a1.min(b1 + s) - a0.max(b0 + s)).max(0.0))
        .sum()
}

/// Share of the viewport centred at (yaw, pitch) that each tile covers (sums to 1).
pub fn viewport_weights(yaw: f64, pitch: f64) -> [f64; TILES] {
    let (tw, th) = (360.0 / TILE_COLS as f64, 180.0 / TILE_ROWS as f64);
    let mut w = [0.0; TILES];
    for (i, wi) in w.iter_mut().enumerate() {
        let (c, r) = ((i % TILE_COLS) as f64, (i / TILE_COLS) as f64);
        let horizontal = circular_overlap(
            -180.0 + c * tw,
            -180.0 + (c + 1.0) * tw,
            yaw - VIEW_YAW_DEG / 2.0,
            yaw + VIEW_YAW_DEG / 2.0,
        );
        let (p0, p1) = (-90.0 + r * th, -90.0 + (r + 1.0) * th);
        let vertical = (p1.min(pitch + VIEW_PITCH_DEG / 2.0) - p0.max(pitch - VIEW_PITCH_DEG / 2.0)).max(0.0);
        *wi = horizontal * vertical / (VIEW_YAW_DEG * VIEW_PITCH_DEG);
    }
    w
}

/// Expected viewport share of each tile when the head is around (yaw, pitch) with the
/// prediction's Gaussian uncertainty (a 13 × 7 grid over ±3 sd).
pub fn viewing_probability(yaw: f64, pitch: f64) -> [f64; TILES] {
    let mut p = [0.0; TILES];
    let mut total = 0.0;
    for i in -6..=6 {
        for j in -3..=3 {
            let (dy, dp) = (f64::from(i) / 2.0, f64::from(j));
            let g = (-(dy * dy + dp * dp) / 2.0).exp();
            let w = viewport_weights(
                yaw + dy * PREDICT_SD_YAW_DEG,
                (pitch + dp * PREDICT_SD_PITCH_DEG).clamp(-45.0, 45.0),
            );
            p.iter_mut().zip(w).for_each(|(p, w)| *p += g * w);
            total += g;
        }
    }
    p.map(|x| x / total)
}

/// Levels that spend at most `budget` bytes: all at one level (FIX) …
pub fn fix_levels(budget: f64, top_tile_bytes: f64) -> [usize; TILES] {
    let fits = |l: usize| TILES as f64 * LEVEL_SHARE[l] * top_tile_bytes <= budget;
    [(0..LEVEL_SHARE.len()).rev().find(|&l| fits(l)).unwrap_or(0); TILES]
}

/// … or greedily: start every tile at the lowest level, then repeatedly upgrade the tile
/// with the largest gain in expected viewport PSNR per extra byte while the budget allows
/// (optimal on the convex hull of these concave rate–distortion steps).
pub fn optimised_levels(prob: &[f64; TILES], budget: f64, top_tile_bytes: f64) -> [usize; TILES] {
    let mut levels = [0usize; TILES];
    let bytes = |l: usize| LEVEL_SHARE[l] * top_tile_bytes;
    let mut spent = TILES as f64 * bytes(0);
    loop {
        let best = (0..TILES)
            .filter(|&i| levels[i] + 1 < LEVEL_SHARE.len())
            .map(|i| {
                let (l, extra) = (levels[i], bytes(levels[i] + 1) - bytes(levels[i]));
                (i, extra, prob[i] * (level_psnr_db(l + 1) - level_psnr_db(l)) / extra)
            })
            .filter(|&(_, extra, gain)| spent + extra <= budget && gain > 0.0)
            .max_by(|a, b| a.2.total_cmp(&b.2));
        let Some((i, extra, _)) = best else { return levels };
        levels[i] += 1;
        spent += extra;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Allocation {
    Fix,
    Optimised,
}

/// The live encoder: at each whole second decides the next GoP's tiles.
pub struct TiledStream {
    allocation: Allocation,
    head: Vec<(f64, f64)>,
    gops: usize,
    rate_cap_bytes: f64,
    /// Per GoP sent: each tile's (object index, tile, level), in sending order.
    pub sent: Vec<Vec<(usize, usize, usize)>>,
    next_object: usize,
}

impl TiledStream {
    pub fn new(allocation: Allocation, head: Vec<(f64, f64)>, gops: usize, rate_mbps: f64) -> Self {
        TiledStream {
            allocation,
            head,
            gops,
            rate_cap_bytes: rate_mbps * 1e6 / 8.0,
            sent: Vec::new(),
            next_object: 0,
        }
    }
}

impl Application for TiledStream {
    fn requests(&mut self, now_s: f64, timeline: &[ObjectRecord]) -> Vec<Request> {
        let k = self.sent.len();
        if k >= self.gops || now_s + 1e-9 < k as f64 {
            return Vec::new();
        }
        // The last tiles that arrived (a late GoP's first tiles count: waiting for it to
        // finish would keep spending the cap while the stream falls behind).
        let arrived = timeline.iter().take_while(|o| o.t_complete_s.is_some()).count();
        let budget = delivery_rate(&timeline[arrived.saturating_sub(TILES)..arrived])
            .map_or(self.rate_cap_bytes, |t| (0.8 * t).min(self.rate_cap_bytes));
        let top_tile_bytes = TOP_RATE_PER_BUDGET * self.rate_cap_bytes / TILES as f64;
        let (yaw, pitch) = self.head[(k * FRAMES_PER_GOP as usize).min(self.head.len() - 1)];
        let prob = viewing_probability(yaw, pitch);
        let (levels, order): ([usize; TILES], Vec<usize>) = match self.allocation {
            Allocation::Fix => (fix_levels(budget, top_tile_bytes), (0..TILES).collect()),
            Allocation::Optimised => {
                let mut order: Vec<usize> = (0..TILES).collect();
                order.sort_by(|&a, &b| prob[b].total_cmp(&prob[a]));
                (optimised_levels(&prob, budget, top_tile_bytes), order)
            }
        };
        let mut gop = Vec::new();
        let reqs = order
            .into_iter()
            .map(|tile| {
                gop.push((self.next_object, tile, levels[tile]));
                self.next_object += 1;
                Request {
                    bytes: (LEVEL_SHARE[levels[tile]] * top_tile_bytes).round().max(1.0) as u64,
                    at_s: k as f64,
                    deadline_s: Some(k as f64 + 1.0),
                }
            })
            .collect();
        self.sent.push(gop);
        reqs
    }

    fn finished(&self) -> bool {
        self.sent.len() >= self.gops
    }

    fn wake_at(&self) -> Option<f64> {
        (self.sent.len() < self.gops).then_some(self.sent.len() as f64)
    }
}

/// Mean viewport PSNR over every frame shown: GoP k's frames use the head during [k+1, k+2).
pub fn viewport_psnr_db(stream: &TiledStream, timeline: &[ObjectRecord]) -> f64 {
    let mut sum = 0.0;
    let mut frames = 0.0;
    let per_gop = FRAMES_PER_GOP as usize;
    for (k, gop) in stream.sent.iter().enumerate() {
        let mut tile_db = [PSNR_FROZEN_DB; TILES];
        for &(o, tile, level) in gop {
            if timeline.get(o).is_some_and(|r| r.fraction_by_deadline() >= 1.0) {
                tile_db[tile] = level_psnr_db(level);
            }
        }
        for f in 0..per_gop {
            let Some(&(yaw, pitch)) = stream.head.get((k + 1) * per_gop + f) else {
                break;
            };
            let w = viewport_weights(yaw, pitch);
            sum += w.iter().zip(tile_db).map(|(w, db)| w * db).sum::<f64>() / w.iter().sum::<f64>();
            frames += 1.0;
        }
    }
    if frames > 0.0 {
        sum / frames
    } else {
        0.0
    }
}

#[derive(Debug, Serialize)]
pub struct VrResult {
    pub scheme: String,
    pub allocation: Allocation,
    /// Mean over frames and seeds.
    pub viewport_psnr_db: f64,
    pub runs_db: Vec<f64>,
}

pub fn run(setup: &Setup, args: &WorkloadArgs) -> Result<Vec<VrResult>> {
    let video_s = setup.video_s(args, 2.0)?;
    if !(args.vr_rate.is_finite() && args.vr_rate > 0.0 && args.vr_rate <= 100_000.0) {
        bail!("--vr-rate must be in (0, 100000] Mbit/s");
    }
    // The last GoP is shown during [gops, gops + 1): the head trace covers it.
    let gops = video_s.floor() as usize - 1;
    let mut items = Vec::new();
    for scheme in &setup.schemes {
        for allocation in [Allocation::Fix, Allocation::Optimised] {
            for &seed in &setup.seeds {
                items.push((scheme.as_str(), allocation, seed));
            }
        }
    }
    let runs = setup.run_all(&items, |&(scheme, allocation, seed)| {
        let head = head_trace(gops + 1, seed);
        let mut stream = TiledStream::new(allocation, head, gops, args.vr_rate * setup.scale);
        let t = setup.run_one(scheme, seed, &mut stream)?;
        Ok(viewport_psnr_db(&stream, &t))
    })?;
    let n = setup.seeds.len();
    let results: Vec<VrResult> = runs
        .chunks(n)
        .enumerate()
        .map(|(k, chunk)| {
            let (scheme, allocation, _) = items[k * n];
            VrResult {
                scheme: scheme.to_string(),
                allocation,
                viewport_psnr_db: chunk.iter().sum::<f64>() / n as f64,
                runs_db: chunk.to_vec(),
            }
        })
        .collect();
    println!(
        "360° tiles, scenario {} (budget {} Mbit/s, scale {}, {n} seeds): viewport PSNR dB",
        setup.scenario.name, args.vr_rate, setup.scale
    );
    println!("{:<26} {:>8} {:>10}", "scheme", "FIX", "optimised");
    for s in &setup.schemes {
        let get = |a| {
            results
                .iter()
                .find(|r| &r.scheme == s && r.allocation == a)
                .map_or(f64::NAN, |r| r.viewport_psnr_db)
        };
        println!(
            "{s:<26} {:>8.2} {:>10.2}",
            get(Allocation::Fix),
            get(Allocation::Optimised)
        );
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viewport_weights_cover_the_view_and_wrap_around() {
        let w = viewport_weights(0.0, 0.0);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // Looking at the seam (yaw 180°) sees the first and the last column equally.
        let w = viewport_weights(180.0, 0.0);
        let col = |c: usize| (0..TILE_ROWS).map(|r| w[r * TILE_COLS + c]).sum::<f64>();
        assert!((col(0) - col(TILE_COLS - 1)).abs() < 1e-9 && col(0) > 0.4);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let p = viewing_probability(0.0, 0.0);
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-6);
        // Tiles in front are likelier than those behind.
        assert!(p[TILE_COLS + 2] > 10.0 * p[TILE_COLS]);
    }

    #[test]
    fn allocations_stay_within_the_budget_and_the_optimiser_favours_likely_tiles() {
        let top = 1000.0;
        assert_eq!(level_psnr_db(4), 55.0);
        assert_eq!(level_psnr_db(0), 43.0);
        // Budget for every tile at half rate: FIX is level 3 everywhere.
        let budget = TILES as f64 * 500.0;
        assert_eq!(fix_levels(budget, top), [3; TILES]);
        assert_eq!(fix_levels(1.0, top), [0; TILES]);
        let prob = viewing_probability(0.0, 0.0);
        let opt = optimised_levels(&prob, budget, top);
        let spent: f64 = opt.iter().map(|&l| LEVEL_SHARE[l] * top).sum();
        assert!(spent <= budget);
        let expected = |lv: &[usize; TILES]| (0..TILES).map(|i| prob[i] * level_psnr_db(lv[i])).sum::<f64>();
        assert!(expected(&opt) > expected(&[3; TILES]) + 1.0);
        let best = (0..TILES).max_by(|&a, &b| prob[a].total_cmp(&prob[b])).unwrap();
        assert_eq!(opt[best], 4);
    }

    fn arrived(bytes: u64, whole: bool) -> ObjectRecord {
        ObjectRecord::hand_made(bytes, Some(if whole { bytes } else { 0 }), 0.0, None)
    }

    #[test]
    fn viewport_psnr_counts_missing_tiles_as_frozen() {
        // Head fixed at (0, 0); one GoP, every tile at the top level.
        let head = vec![(0.0, 0.0); 2 * FRAMES_PER_GOP as usize];
        let mut s = TiledStream::new(Allocation::Fix, head, 1, 100.0);
        s.sent = vec![(0..TILES).map(|t| (t, t, 4)).collect()];
        let all: Vec<ObjectRecord> = (0..TILES).map(|_| arrived(10, true)).collect();
        assert!((viewport_psnr_db(&s, &all) - 55.0).abs() < 1e-9);
        // Only the tiles out of view arrived: the view is frozen.
        let w = viewport_weights(0.0, 0.0);
        let outside: Vec<ObjectRecord> = (0..TILES).map(|t| arrived(10, w[t] == 0.0)).collect();
        assert!((viewport_psnr_db(&s, &outside) - PSNR_FROZEN_DB).abs() < 1e-9);
    }

    #[test]
    fn the_head_trace_is_seeded_and_bounded() {
        let h = head_trace(10, 1);
        assert_eq!(h.len(), 300);
        assert_eq!(h, head_trace(10, 1));
        assert_ne!(h, head_trace(10, 2));
        assert!(h
            .iter()
            .all(|&(y, p)| (-180.0..180.0).contains(&y) && (-45.0..=45.0).contains(&p)));
    }
}
