//! What users feel, computed from object timelines: percentiles, the video rate–distortion
//! model (docs/workloads.md), pauses and PSNR of a progressive player.

use serde::Serialize;

use super::driver::ObjectRecord;

use fbdt_harness::results::percentile;

/// Median and 90th percentile of some samples, with how many there were and how many runs
/// never finished (those are not in the percentiles: they are reported, not hidden).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub median: f64,
    pub p90: f64,
    pub samples: usize,
    pub incomplete: usize,
}

/// Summarises `values`, `None` meaning that run did not finish.
pub fn summarise(values: &[Option<f64>]) -> Summary {
    let done: Vec<f64> = values.iter().flatten().copied().collect();
    Summary {
        median: percentile(&done, 0.5),
        p90: percentile(&done, 0.9),
        samples: done.len(),
        incomplete: values.len() - done.len(),
    }
}

/// PSNR of a frame decoded at the stream's full rate (the paper's 55 dB).
pub const PSNR_FULL_DB: f64 = 55.0;
/// PSNR of what is on screen while playback is stalled or a tile missed its deadline: the
/// last good frame, frozen. Fig. 10's pause/PSNR pairs fit PSNR ≈ 55 − 0.38 × pause %,
/// i.e. a paused second counts as ≈ 15.5 dB.
pub const PSNR_FROZEN_DB: f64 = 15.0;
/// Frames in a 1-s GoP.
pub const FRAMES_PER_GOP: u32 = 30;

/// A player's playback of segments of `segment_s` seconds (GoPs, chunks) whose last bytes
/// arrived at `complete_s` (`None`: never; counted as arriving at `end_s`): segment 0 is
/// due at `startup_s`, each next one when the previous one has played. A segment not there
/// when due stalls playback until it arrives (the player waits, as a progressive download
/// or a DASH player does). Returns when each segment started playing.
pub fn play_starts(complete_s: &[Option<f64>], startup_s: f64, end_s: f64, segment_s: f64) -> Vec<f64> {
    let mut starts = Vec::with_capacity(complete_s.len());
    let mut due = startup_s;
    for c in complete_s {
        let start = due.max(c.unwrap_or(end_s));
        starts.push(start);
        due = start + segment_s;
    }
    starts
}

/// Bytes per second at which `records` (in stream order, all complete) were delivered,
/// counting only the time each was in transit — not the gaps between requests.
pub fn delivery_rate<'a>(records: impl IntoIterator<Item = &'a ObjectRecord>) -> Option<f64> {
    let (mut bytes, mut busy, mut prev) = (0.0, 0.0, f64::NEG_INFINITY);
    for rec in records {
        let done = rec.t_complete_s?;
        busy += done - rec.t_request_s.max(prev);
        bytes += rec.bytes as f64;
        prev = done;
    }
    (busy > 0.0).then(|| bytes / busy)
}

/// What a stalling player shows: the share of viewing time spent stalled, the share of
/// checks that found their GoP short, and the time-weighted PSNR (full quality while
/// playing, frozen while stalled) — the paper's "% pauses" and PSNR.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Playback {
    pub pause_share: f64,
    pub short_checks_share: f64,
    pub stalled_s: f64,
    pub psnr_db: f64,
}

pub fn playback(starts: &[f64], startup_s: f64, segment_s: f64) -> Playback {
    let n = starts.len() as f64 * segment_s;
    let (mut stalled_s, mut short, mut check) = (0.0, 0.0, startup_s);
    for &start in starts {
        if start > check + 1e-9 {
            stalled_s += start - check;
            short += 1.0;
        }
        check = start + segment_s;
    }
    let total = n + stalled_s;
    if n == 0.0 {
        return Playback {
            pause_share: 0.0,
            short_checks_share: 0.0,
            stalled_s: 0.0,
            psnr_db: 0.0,
        };
    }
    Playback {
        pause_share: stalled_s / total,
        short_checks_share: short / starts.len() as f64,
        stalled_s,
        psnr_db: (n * PSNR_FULL_DB + stalled_s * PSNR_FROZEN_DB) / total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalling_player_waits_for_late_gops() {
        // GoP 0 arrives at 0.5 (plays at 1), GoP 1 at 3.5 (checked at 2: stalls 1.5 s),
        // GoP 2 at 4 (checked at 4.5: plays on time), GoP 3 never (counted at 10).
        let starts = play_starts(&[Some(0.5), Some(3.5), Some(4.0), None], 1.0, 10.0, 1.0);
        assert_eq!(starts, vec![1.0, 3.5, 4.5, 10.0]);
        let p = playback(&starts, 1.0, 1.0);
        assert!((p.stalled_s - (1.5 + 4.5)).abs() < 1e-9);
        assert!((p.pause_share - 6.0 / 10.0).abs() < 1e-9);
        assert_eq!(p.short_checks_share, 0.5);
        assert!((p.psnr_db - (4.0 * 55.0 + 6.0 * 15.0) / 10.0).abs() < 1e-9);
        // Never short: no pauses, full quality.
        let p = playback(&play_starts(&[Some(0.1), Some(0.2)], 1.0, 10.0, 1.0), 1.0, 1.0);
        assert_eq!((p.pause_share, p.psnr_db), (0.0, 55.0));
        assert_eq!(playback(&[], 1.0, 1.0).psnr_db, 0.0);
    }

    #[test]
    fn a_download_at_a_fraction_of_the_video_rate_pauses_the_rest_of_the_time() {
        // Every GoP takes 1.5 s to download (a path at 2/3 of the video rate): the stall
        // share tends to 1 − 2/3, as the paper's WiFi column does (1 − r/v).
        let complete: Vec<Option<f64>> = (1..=300).map(|k| Some(1.5 * k as f64)).collect();
        let p = playback(&play_starts(&complete, 1.0, 1e9, 1.0), 1.0, 1.0);
        assert!((p.pause_share - 1.0 / 3.0).abs() < 0.01, "{p:?}");
    }

    #[test]
    fn delivery_rate_ignores_idle_gaps_between_requests() {
        // 1000 B in 0.1 s, idle until 1.0, then 1000 B in 0.1 s; then one in the queue
        // behind it (requested at 1.0, its transit counted from the previous arrival).
        let recs = [
            ObjectRecord::hand_made(1000, None, 0.0, Some(0.1)),
            ObjectRecord::hand_made(1000, None, 1.0, Some(1.1)),
            ObjectRecord::hand_made(2000, None, 1.0, Some(1.3)),
        ];
        assert!((delivery_rate(&recs).unwrap() - 4000.0 / 0.4).abs() < 1e-6);
        assert_eq!(delivery_rate(&[ObjectRecord::hand_made(1, None, 0.0, None)]), None);
    }

    #[test]
    fn summaries_count_unfinished_runs_apart() {
        let s = summarise(&[Some(1.0), Some(2.0), None, Some(3.0), Some(4.0), Some(5.0)]);
        assert_eq!((s.median, s.samples, s.incomplete), (3.0, 5, 1));
        assert!((s.p90 - 4.6).abs() < 1e-9);
    }
}
