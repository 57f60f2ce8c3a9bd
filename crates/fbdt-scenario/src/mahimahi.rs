//! mahimahi link traces: one line per 1500-byte delivery opportunity, integer milliseconds,
//! non-decreasing; the trace loops with period = its last timestamp. Parsed strictly, as
//! mahimahi's own link_queue does, because a silently mangled trace corrupts every result.

use std::io::Read;
use std::path::Path;

use crate::error::{Origin, ScenarioError};
use crate::limits::{MAX_STEPS_PER_PATH, MAX_TRACE_BYTES, MAX_TRACE_LINES, MAX_TRACE_MS};

/// Bits carried by one delivery opportunity.
const BITS_PER_OPPORTUNITY: f64 = 1500.0 * 8.0;

fn err(file: &str, line: Option<usize>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Trace {
        at: Origin {
            file: file.to_string(),
            line,
        },
        message: message.into(),
    }
}

/// Timestamps (ms) of a trace's delivery opportunities. `file` is only used in messages.
pub fn parse(text: &str, file: &str) -> Result<Vec<u64>, ScenarioError> {
    let mut out = Vec::new();
    let mut prev = 0u64;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if line > MAX_TRACE_LINES {
            return Err(err(file, Some(line), format!("more than {MAX_TRACE_LINES} lines")));
        }
        let s = raw.trim();
        if s.is_empty() {
            return Err(err(file, Some(line), "empty line (expected a timestamp in ms)"));
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(
                file,
                Some(line),
                format!("`{s}` is not a non-negative integer timestamp in ms"),
            ));
        }
        let t: u64 = match s.parse() {
            Ok(t) if t <= MAX_TRACE_MS => t,
            _ => {
                return Err(err(
                    file,
                    Some(line),
                    format!("timestamp {s} exceeds {MAX_TRACE_MS} ms (one day)"),
                ))
            }
        };
        if t < prev {
            return Err(err(
                file,
                Some(line),
                format!("timestamp {t} is before the previous one ({prev})"),
            ));
        }
        prev = t;
        out.push(t);
    }
    match out.last() {
        None => Err(err(file, None, "empty trace (no delivery opportunities)")),
        Some(0) => Err(err(
            file,
            Some(out.len()),
            "zero-length trace: the last timestamp (the loop period) is 0",
        )),
        Some(_) => Ok(out),
    }
}

/// Reads and parses a trace file, refusing files over `MAX_TRACE_BYTES`.
pub fn read(path: &Path) -> Result<Vec<u64>, ScenarioError> {
    let name = path.display().to_string();
    let io = |source| ScenarioError::Io {
        path: path.to_path_buf(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    f.take(MAX_TRACE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_TRACE_BYTES {
        return Err(err(&name, None, format!("file is larger than {MAX_TRACE_BYTES} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        let good = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
        err(&name, Some(line), "not UTF-8 text")
    })?;
    parse(&text, &name)
}

/// One period of the trace as `(offset_s, mbps)` bins of `bin_ms` (the last bin may be
/// shorter when the period is not a multiple of `bin_ms`). Unscaled.
pub fn bin(timestamps: &[u64], bin_ms: f64, file: &str) -> Result<(f64, Vec<(f64, f64)>), ScenarioError> {
    let period = match timestamps.last() {
        Some(&p) if p > 0 => p as f64,
        _ => return Err(err(file, None, "zero-length trace")),
    };
    let nbins = (period / bin_ms).ceil() as usize;
    if nbins > MAX_STEPS_PER_PATH {
        return Err(err(
            file,
            None,
            format!("{period} ms / bin_ms {bin_ms} gives more than {MAX_STEPS_PER_PATH} bins"),
        ));
    }
    let mut counts = vec![0u64; nbins];
    for &t in timestamps {
        // An opportunity at exactly the period is the first instant of the next loop.
        let t = (t as f64) % period;
        let k = ((t / bin_ms) as usize).min(nbins - 1);
        counts[k] += 1;
    }
    let bins = counts
        .iter()
        .enumerate()
        .map(|(k, &c)| {
            let start = k as f64 * bin_ms;
            let len_ms = (start + bin_ms).min(period) - start;
            (start / 1000.0, c as f64 * BITS_PER_OPPORTUNITY / (len_ms * 1000.0))
        })
        .collect();
    Ok((period / 1000.0, bins))
}
