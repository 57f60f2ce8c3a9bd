//! `fbdt-lab plan`, `case` and `merge`: a lab command split into cases, one process each,
//! merged into the report the one-process command writes (fbdt_harness::campaign holds the
//! manifest and result files; docs/campaigns.md).

mod case;
pub(crate) mod local;
mod merge;
mod plan;

pub use case::{case, CaseArgs};
pub(crate) use case::run_one;
pub(crate) use merge::{paper_parts, stamp};
pub use merge::{merge, MergeArgs};
pub(crate) use plan::paper_campaign;
pub use plan::{plan, PlanArgs};

/// Parses `3`, `0-9`, `1,4,7-9` into indices (each at most once, in the order given).
pub fn parse_indices(text: &str) -> anyhow::Result<Vec<usize>> {
    let num = |s: &str| -> anyhow::Result<usize> {
        s.trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--index: `{s}` is not a case index"))
    };
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if b < a || b - a > 10_000_000 {
            anyhow::bail!("--index: `{part}` is not a range A-B with A <= B");
        }
        for i in a..=b {
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }
    if out.is_empty() {
        anyhow::bail!("--index is empty");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_lists_and_ranges() {
        assert_eq!(parse_indices("3").unwrap(), [3]);
        assert_eq!(parse_indices("0-2,5,1").unwrap(), [0, 1, 2, 5]);
        assert!(parse_indices("2-1").is_err());
        assert!(parse_indices("x").is_err());
        assert!(parse_indices(",").is_err());
    }
}
