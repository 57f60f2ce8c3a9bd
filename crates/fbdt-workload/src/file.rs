//! Q1, file downloads: per run one session fetches a warm-up object, then the file the
//! moment the warm-up arrived (a busy session: radios awake, windows open), then the same
//! file again after `--idle-gap` seconds of silence (an idle session: radios asleep if
//! modelled). Completion time = request to last byte.

use anyhow::{anyhow, bail, Result};
use serde::Serialize;

use super::driver::{Application, ObjectRecord, Request};
use super::metrics::{summarise, Summary};
use super::setup::{Setup, WorkloadArgs};

/// The warm-up object before the busy-session request: 10 MB × scale.
pub const WARMUP_BYTES: f64 = 10e6;

/// Parses `100k`, `1M`, `1G`, `2500` (decimal units: the paper's file sizes).
pub fn parse_size(text: &str) -> Result<f64> {
    let t = text.trim();
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| anyhow!("`{text}` is not a size (e.g. 100k, 1M, 1G)"))?;
    let bytes = v * mult;
    if !(1.0..=1e11).contains(&bytes) {
        bail!("`{text}`: sizes must be in [1 B, 100 GB]");
    }
    Ok(bytes)
}

/// Warm-up, then the file when the warm-up arrived, then the file again after the gap.
pub struct FileApp {
    warmup: u64,
    file: u64,
    idle_gap_s: f64,
    issued: usize,
}

impl FileApp {
    pub fn new(warmup: u64, file: u64, idle_gap_s: f64) -> Self {
        FileApp {
            warmup,
            file,
            idle_gap_s,
            issued: 0,
        }
    }
}

impl Application for FileApp {
    fn requests(&mut self, now_s: f64, _timeline: &[ObjectRecord]) -> Vec<Request> {
        let (bytes, at_s) = match self.issued {
            0 => (self.warmup, 0.0),
            1 => (self.file, now_s),
            2 => (self.file, now_s + self.idle_gap_s),
            _ => return Vec::new(),
        };
        self.issued += 1;
        vec![Request {
            bytes,
            at_s,
            deadline_s: None,
        }]
    }

    fn finished(&self) -> bool {
        self.issued == 3
    }
}

#[derive(Debug, Serialize)]
pub struct FileResult {
    pub scheme: String,
    pub size_bytes: u64,
    /// `busy` (right after the warm-up) or `idle` (after the idle gap).
    pub start: &'static str,
    /// Median completion time over the seeds (s).
    pub completion_s: f64,
    pub completion_p90_s: f64,
    pub summary: Summary,
    /// Every seed's completion time (null: not within --max-duration).
    pub runs_s: Vec<Option<f64>>,
}

pub fn run(setup: &Setup, args: &WorkloadArgs) -> Result<Vec<FileResult>> {
    if !(args.idle_gap.is_finite() && args.idle_gap >= 0.0 && args.idle_gap <= 3600.0) {
        bail!("--idle-gap must be in [0, 3600] s");
    }
    let scaled = |b: f64| (b * setup.scale).round().max(1.0) as u64;
    let sizes: Vec<u64> = args
        .sizes
        .iter()
        .map(|s| parse_size(s).map(scaled))
        .collect::<Result<_>>()?;
    let warmup = scaled(WARMUP_BYTES);
    let mut items = Vec::new();
    for scheme in &setup.schemes {
        for &size in &sizes {
            for &seed in &setup.seeds {
                items.push((scheme.as_str(), size, seed));
            }
        }
    }
    let timelines = setup.run_all(&items, |&(scheme, size, seed)| {
        let mut app = FileApp::new(warmup, size, args.idle_gap);
        let t = setup.run_one(scheme, seed, &mut app)?;
        let at = |k: usize| t.get(k).and_then(ObjectRecord::completion_s);
        Ok((at(1), at(2)))
    })?;
    let mut results = Vec::new();
    for (k, chunk) in timelines.chunks(setup.seeds.len()).enumerate() {
        let (scheme, size, _) = items[k * setup.seeds.len()];
        for (start, runs) in [
            ("busy", chunk.iter().map(|r| r.0).collect::<Vec<_>>()),
            ("idle", chunk.iter().map(|r| r.1).collect()),
        ] {
            let summary = summarise(&runs);
            results.push(FileResult {
                scheme: scheme.to_string(),
                size_bytes: size,
                start,
                completion_s: summary.median,
                completion_p90_s: summary.p90,
                summary,
                runs_s: runs,
            });
        }
    }
    print_table(setup, &sizes, &results);
    Ok(results)
}

fn print_table(setup: &Setup, sizes: &[u64], results: &[FileResult]) {
    println!(
        "file completion time, scenario {} (scale {}, {} seeds): median / p90 in ms",
        setup.scenario.name,
        setup.scale,
        setup.seeds.len()
    );
    for start in ["busy", "idle"] {
        print!("{start:<5} {:>10}", "size");
        for s in &setup.schemes {
            print!(" {s:>20}");
        }
        println!();
        for &size in sizes {
            print!("{:<5} {:>10}", "", size);
            for s in &setup.schemes {
                let r = results
                    .iter()
                    .find(|r| &r.scheme == s && r.size_bytes == size && r.start == start);
                let cell = r.map_or("-".to_string(), |r| {
                    let missing = if r.summary.incomplete > 0 {
                        format!(" ({} inc)", r.summary.incomplete)
                    } else {
                        String::new()
                    };
                    format!("{:.1}/{:.1}{missing}", r.completion_s * 1e3, r.completion_p90_s * 1e3)
                });
                print!(" {cell:>20}");
            }
            println!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_decimal_units_and_bad_ones_fail() {
        assert_eq!(parse_size("100k").unwrap(), 1e5);
        assert_eq!(parse_size("1M").unwrap(), 1e6);
        assert_eq!(parse_size("1G").unwrap(), 1e9);
        assert_eq!(parse_size("2500").unwrap(), 2500.0);
        assert!(parse_size("1T").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("1000G").is_err());
        assert!(parse_size("-1k").is_err());
    }

    #[test]
    fn the_app_asks_warm_up_then_busy_then_idle() {
        let mut app = FileApp::new(10, 20, 1.5);
        assert_eq!(app.requests(0.0, &[])[0].bytes, 10);
        let busy = app.requests(0.3, &[])[0];
        assert_eq!((busy.bytes, busy.at_s), (20, 0.3));
        assert!(!app.finished());
        let idle = app.requests(0.5, &[])[0];
        assert_eq!((idle.bytes, idle.at_s), (20, 2.0));
        assert!(app.finished());
        assert!(app.requests(3.0, &[]).is_empty());
    }
}
