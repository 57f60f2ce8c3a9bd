//! The verdict of one of the paper's targets: [`Check`] and its [`Status`].

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "MISS")]
    Miss,
    /// A scheme the target needs did not run (or its run failed).
    #[serde(rename = "N/A")]
    NotMeasured,
    /// A scheme the target needs ran on an emulator out of tolerance: neither PASS nor MISS.
    #[serde(rename = "UNFAITHFUL")]
    Unfaithful,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Miss => "MISS",
            Status::NotMeasured => "N/A",
            Status::Unfaithful => "UNFAITHFUL",
        }
    }
}

/// One target: `value ≥ threshold`, where value is one of the scenario's ratios.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Check {
    pub scenario: String,
    /// Human-readable, e.g. "FBDT ≥ 0.95 × Σ standalone".
    pub target: String,
    pub value: Option<f64>,
    pub threshold: f64,
    /// The same ratio from the paper's numbers, when it gives them.
    pub paper_value: Option<f64>,
    pub status: Status,
    /// With `--repeat`: the same ratio in each repetition (seed order), where it can be
    /// formed per run. `value` is the ratio of the means.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<f64>,
}

impl Check {
    /// Repetitions on both sides of the threshold: the verdict is within run-to-run spread.
    pub fn runs_straddle(&self) -> bool {
        self.runs.iter().any(|&x| x >= self.threshold) && self.runs.iter().any(|&x| x < self.threshold)
    }

    /// "runs 0.981–1.012, on both sides of 1", for the terminal and the page.
    pub fn runs_note(&self) -> Option<String> {
        if self.runs.len() < 2 {
            return None;
        }
        let (lo, hi) = self
            .runs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            });
        Some(format!(
            "{} runs {lo:.3}–{hi:.3}{}",
            self.runs.len(),
            if self.runs_straddle() {
                format!(", on both sides of {}", self.threshold)
            } else {
                String::new()
            }
        ))
    }
}
