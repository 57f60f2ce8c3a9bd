//! Independent simulator runs spread over cores: the work of `sweep` and `workload`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Result};
use indicatif::ProgressBar;

/// The `--jobs` of a simulator command: as asked, else one per CPU; at most 1024.
pub fn jobs(requested: Option<usize>) -> Result<usize> {
    let jobs = requested.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if jobs == 0 || jobs > 1024 {
        bail!("--jobs must be in 1..=1024");
    }
    Ok(jobs)
}

/// Runs `one` on every item with `jobs` threads, ticking `bar` once per item; the results
/// come back in the items' order (the first error, in that order, wins).
pub fn map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    bar: &ProgressBar,
    one: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<R>>>> = Mutex::new(items.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(items.len()) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(k) else { break };
                let r = one(item);
                results.lock().expect("no panics while held")[k] = Some(r);
                bar.inc(1);
            });
        }
    });
    results
        .into_inner()
        .expect("no panics while held")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}
