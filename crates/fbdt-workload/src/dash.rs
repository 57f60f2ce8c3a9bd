//! Q3b, adaptive streaming (the simulator's stand-in for dash.js): a ladder of six rungs,
//! 2-s chunks fetched one after another, each at the rung the throughput rule picks, a
//! playback buffer of at most `MAX_BUFFER_S`. QoE as Pensieve's QoE_lin.

use anyhow::Result;
use serde::Serialize;

use super::driver::{Application, ObjectRecord, Request};
use super::metrics::{delivery_rate, play_starts, playback};
use super::setup::{Setup, WorkloadArgs};

/// Pensieve's ladder (Mbit/s), the unit QoE_lin is computed in.
pub const LADDER_MBPS: [f64; 6] = [0.3, 0.75, 1.2, 1.85, 2.85, 4.3];
/// The ladder as sent: × 400 (120 Mbit/s … 1.72 Gbit/s: the top rung is the paper's 8K120
/// rate), × the run's scale.
pub const LADDER_FACTOR: f64 = 400.0;
pub const CHUNK_S: f64 = 2.0;
/// No new chunk is asked for while the buffer holds more than this minus one chunk.
pub const MAX_BUFFER_S: f64 = 10.0;
/// Pensieve's rebuffering penalty per second (the top rung in Mbit/s).
pub const REBUFFER_PENALTY: f64 = 4.3;
/// The throughput rule (dash.js's "throughput"): the highest rung at most this share of
/// the harmonic mean of the last `THROUGHPUT_CHUNKS` chunks' delivery rates.
pub const SAFETY: f64 = 0.9;
pub const THROUGHPUT_CHUNKS: usize = 3;

/// The highest rung whose sent rate (bytes/s) is at most `SAFETY × estimate`.
pub fn pick_rung(estimate_bytes_per_s: Option<f64>, scale: f64) -> usize {
    let Some(est) = estimate_bytes_per_s else { return 0 };
    (0..LADDER_MBPS.len())
        .rev()
        .find(|&r| LADDER_MBPS[r] * LADDER_FACTOR * scale * 1e6 / 8.0 <= SAFETY * est)
        .unwrap_or(0)
}

/// QoE_lin = Σ bitrate − 4.3 × rebuffer s − Σ |Δ bitrate| (Mbit/s of the ladder).
pub fn qoe_lin(rungs: &[usize], rebuffer_s: f64) -> f64 {
    let q: Vec<f64> = rungs.iter().map(|&r| LADDER_MBPS[r]).collect();
    let switches: f64 = q.windows(2).map(|w| (w[1] - w[0]).abs()).sum();
    q.iter().sum::<f64>() - REBUFFER_PENALTY * rebuffer_s - switches
}

pub struct DashPlayer {
    chunks: usize,
    scale: f64,
    /// The rung of each chunk asked for.
    pub rungs: Vec<usize>,
    wake_s: Option<f64>,
}

impl DashPlayer {
    pub fn new(chunks: usize, scale: f64) -> Self {
        DashPlayer {
            chunks,
            scale,
            rungs: Vec::new(),
            wake_s: None,
        }
    }

    /// Seconds of video in the buffer at `now_s`, given the chunks that arrived.
    fn buffer_s(arrived: &[Option<f64>], now_s: f64) -> f64 {
        let Some(Some(first)) = arrived.first() else { return 0.0 };
        let starts = play_starts(arrived, *first, f64::INFINITY, CHUNK_S);
        let played: f64 = starts.iter().map(|&s| (now_s - s).clamp(0.0, CHUNK_S)).sum();
        arrived.len() as f64 * CHUNK_S - played
    }

    fn ask(&mut self, now_s: f64, timeline: &[ObjectRecord]) -> Request {
        let recent = timeline.len().saturating_sub(THROUGHPUT_CHUNKS);
        // Harmonic mean of per-chunk rates (dash.js's estimate).
        let rates: Vec<f64> = timeline[recent..].iter().filter_map(|r| delivery_rate([r])).collect();
        let estimate = (!rates.is_empty()).then(|| rates.len() as f64 / rates.iter().map(|r| 1.0 / r).sum::<f64>());
        let rung = pick_rung(estimate, self.scale);
        self.rungs.push(rung);
        Request {
            bytes: (LADDER_MBPS[rung] * LADDER_FACTOR * self.scale * 1e6 / 8.0 * CHUNK_S).round() as u64,
            at_s: now_s,
            deadline_s: None,
        }
    }

    /// Rebuffering (after start-up) and start-up delay of a finished run.
    pub fn stalls(&self, timeline: &[ObjectRecord], end_s: f64) -> (f64, f64, f64) {
        let arrived: Vec<Option<f64>> = timeline.iter().map(|r| r.t_complete_s).collect();
        let startup = arrived.first().copied().flatten().unwrap_or(end_s);
        let starts = play_starts(&arrived, startup, end_s, CHUNK_S);
        let p = playback(&starts, startup, CHUNK_S);
        (p.stalled_s, p.pause_share, startup)
    }
}

impl Application for DashPlayer {
    fn requests(&mut self, now_s: f64, timeline: &[ObjectRecord]) -> Vec<Request> {
        self.wake_s = None;
        if self.rungs.len() >= self.chunks {
            return Vec::new();
        }
        // One chunk at a time: the last one asked for must have arrived.
        if timeline.last().is_some_and(|r| r.t_complete_s.is_none()) {
            return Vec::new();
        }
        let arrived: Vec<Option<f64>> = timeline.iter().map(|r| r.t_complete_s).collect();
        let over = Self::buffer_s(&arrived, now_s) - (MAX_BUFFER_S - CHUNK_S);
        if over > 1e-9 {
            // Playing drains the buffer 1 s per s: ask again once a chunk fits.
            self.wake_s = Some(now_s + over);
            return Vec::new();
        }
        vec![self.ask(now_s, timeline)]
    }

    fn finished(&self) -> bool {
        self.rungs.len() >= self.chunks
    }

    fn wake_at(&self) -> Option<f64> {
        self.wake_s
    }
}

#[derive(Debug, Serialize)]
pub struct DashResult {
    pub scheme: String,
    /// Means over seeds.
    pub qoe_lin: f64,
    /// QoE_lin ÷ chunks (Pensieve's average per chunk).
    pub qoe_lin_per_chunk: f64,
    pub rebuffer_ratio: f64,
    pub rebuffer_s: f64,
    pub startup_s: f64,
    /// Mean rung bitrate (Mbit/s as sent).
    pub bitrate_mbps: f64,
    pub switches: f64,
}

pub fn run(setup: &Setup, args: &WorkloadArgs) -> Result<Vec<DashResult>> {
    let video_s = setup.video_s(args, CHUNK_S)?;
    let chunks = (video_s / CHUNK_S).floor() as usize;
    let mut items = Vec::new();
    for scheme in &setup.schemes {
        for &seed in &setup.seeds {
            items.push((scheme.as_str(), seed));
        }
    }
    let runs = setup.run_all(&items, |&(scheme, seed)| {
        let mut player = DashPlayer::new(chunks, setup.scale);
        let t = setup.run_one(scheme, seed, &mut player)?;
        let (rebuffer_s, ratio, startup) = player.stalls(&t, setup.scenario.duration_s);
        let rungs = &player.rungs;
        let mean_rate = rungs
            .iter()
            .map(|&r| LADDER_MBPS[r] * LADDER_FACTOR * setup.scale)
            .sum::<f64>()
            / rungs.len().max(1) as f64;
        let switches = rungs.windows(2).filter(|w| w[0] != w[1]).count() as f64;
        Ok([
            qoe_lin(rungs, rebuffer_s),
            ratio,
            rebuffer_s,
            startup,
            mean_rate,
            switches,
        ])
    })?;
    let n = setup.seeds.len();
    let results: Vec<DashResult> = runs
        .chunks(n)
        .enumerate()
        .map(|(k, chunk)| {
            let mean = |i: usize| chunk.iter().map(|r| r[i]).sum::<f64>() / n as f64;
            DashResult {
                scheme: items[k * n].0.to_string(),
                qoe_lin: mean(0),
                qoe_lin_per_chunk: mean(0) / chunks.max(1) as f64,
                rebuffer_ratio: mean(1),
                rebuffer_s: mean(2),
                startup_s: mean(3),
                bitrate_mbps: mean(4),
                switches: mean(5),
            }
        })
        .collect();
    println!(
        "adaptive streaming (throughput rule, {chunks} × {CHUNK_S}-s chunks), scenario {} (scale {}, {n} seeds)",
        setup.scenario.name, setup.scale
    );
    print_table(&results);
    Ok(results)
}

/// The summary rows, one per scheme, as both players print them.
pub fn print_table<'a>(rows: impl IntoIterator<Item = &'a DashResult>) {
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "scheme", "QoE/chunk", "QoE_lin", "rebuf %", "Mbit/s", "startup", "switches"
    );
    for r in rows {
        println!(
            "{:<26} {:>9.2} {:>9.2} {:>9.2} {:>10.1} {:>9.3} {:>9.1}",
            r.scheme,
            r.qoe_lin_per_chunk,
            r.qoe_lin,
            r.rebuffer_ratio * 100.0,
            r.bitrate_mbps,
            r.startup_s,
            r.switches
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qoe_lin_of_a_hand_made_session() {
        // 1.2, 1.85, 1.85, 0.75 Mbit/s; 2 s of rebuffering; switches 0.65 + 0 + 1.1.
        let q = qoe_lin(&[2, 3, 3, 1], 2.0);
        assert!((q - (5.65 - 8.6 - 1.75)).abs() < 1e-9, "{q}");
        assert_eq!(qoe_lin(&[], 0.0), 0.0);
    }

    #[test]
    fn the_throughput_rule_picks_the_highest_safe_rung() {
        assert_eq!(pick_rung(None, 1.0), 0);
        // 1 Gbit/s measured: 0.9 Gbit/s usable → 740 Mbit/s (1.85 × 400) fits, 1140 not.
        assert_eq!(pick_rung(Some(1e9 / 8.0), 1.0), 3);
        assert_eq!(pick_rung(Some(1.0), 1.0), 0);
        assert_eq!(pick_rung(Some(1e12), 1.0), 5);
    }

    #[test]
    fn the_player_waits_for_room_in_its_buffer() {
        let mut p = DashPlayer::new(10, 1.0);
        let mut t = Vec::new();
        let first = p.requests(0.0, &t);
        assert_eq!(first[0].bytes, (120e6 / 8.0 * 2.0) as u64);
        // Nothing more while the chunk is in flight.
        t.push(ObjectRecord::hand_made(first[0].bytes, None, 0.0, None));
        assert!(p.requests(0.05, &t).is_empty());
        // Chunks arrive quickly: the buffer fills to 10 s, then the player waits.
        for k in 0..5 {
            let now = 0.1 * (k + 1) as f64;
            t.last_mut().unwrap().t_complete_s = Some(now);
            let r = p.requests(now, &t);
            if k < 4 {
                t.push(ObjectRecord::hand_made(r[0].bytes, None, now, None));
            } else {
                assert!(r.is_empty(), "buffer full at {now}");
                let wake = p.wake_at().unwrap();
                assert!(wake > now && wake < now + CHUNK_S + 0.5, "{wake}");
            }
        }
        // Fast deliveries raise the rung.
        assert!(p.rungs.last() > p.rungs.first());
        // Stall accounting: 5 chunks played from 0.1 s, all there: no rebuffering.
        let (rebuffer, ratio, startup) = p.stalls(&t, 100.0);
        assert_eq!((rebuffer, ratio), (0.0, 0.0));
        assert!((startup - 0.1).abs() < 1e-12);
    }
}
