//! Fairness and summary statistics.

use serde::Serialize;

/// Jain's fairness index (Σx)² / (N·Σx²). All-zero input (nobody got anything) is
/// defined as 1: equal shares of nothing. Empty input → NaN (no clients, no index).
pub fn jain_index(x: &[f64]) -> f64 {
    if x.is_empty() {
        return f64::NAN;
    }
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if s2 == 0.0 {
        return 1.0;
    }
    s * s / (x.len() as f64 * s2)
}

/// Two-sided 97.5% Student-t quantile for `df` degrees of freedom (table to 30, then
/// interpolated towards the normal 1.960).
pub fn t_975(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::NAN,
        1..=30 => T[df - 1],
        31..=60 => 2.042 + (2.000 - 2.042) * (df - 30) as f64 / 30.0,
        61..=120 => 2.000 + (1.980 - 2.000) * (df - 60) as f64 / 60.0,
        _ => 1.960,
    }
}

/// Mean and 95% confidence interval of the mean over independent realizations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub mean: f64,
    pub ci95_low: f64,
    pub ci95_high: f64,
    pub n: usize,
}

impl Summary {
    /// t-based interval; a single sample gives a zero-width interval (reported as such).
    pub fn of(samples: &[f64]) -> Self {
        let n = samples.len();
        if n == 0 {
            return Self {
                mean: f64::NAN,
                ci95_low: f64::NAN,
                ci95_high: f64::NAN,
                n,
            };
        }
        let mean = samples.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Self {
                mean,
                ci95_low: mean,
                ci95_high: mean,
                n,
            };
        }
        let var = samples.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = t_975(n - 1) * (var / n as f64).sqrt();
        Self {
            mean,
            ci95_low: mean - half,
            ci95_high: mean + half,
            n,
        }
    }

    pub fn half_width(&self) -> f64 {
        (self.ci95_high - self.ci95_low) / 2.0
    }
}

/// Good-beam brackets of thesis Fig. 3.5a ([1–6] … [31–36]) plus "0" (no decodable beam).
pub const BRACKET_LABELS: [&str; 7] = ["0", "1-6", "7-12", "13-18", "19-24", "25-30", "31-36"];

/// Bracket index of a good-beam count (width 6, as in the thesis).
pub fn bracket_of(good_beams: usize) -> usize {
    if good_beams == 0 {
        0
    } else {
        ((good_beams - 1) / 6 + 1).min(BRACKET_LABELS.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_hand_values() {
        assert_eq!(jain_index(&[1.0, 1.0, 1.0, 1.0]), 1.0);
        // One of four gets everything → 1/4.
        assert_eq!(jain_index(&[1.0, 0.0, 0.0, 0.0]), 0.25);
        // (1+2+3)² / (3·(1+4+9)) = 36/42.
        assert!((jain_index(&[1.0, 2.0, 3.0]) - 36.0 / 42.0).abs() < 1e-12);
        // Scale invariant.
        assert!((jain_index(&[10.0, 20.0, 30.0]) - 36.0 / 42.0).abs() < 1e-12);
        assert_eq!(jain_index(&[0.0, 0.0]), 1.0);
        assert!(jain_index(&[]).is_nan());
    }

    #[test]
    fn summary_ci() {
        let s = Summary::of(&[1.0, 2.0, 3.0]);
        assert_eq!(s.mean, 2.0);
        // s = 1, t(2) = 4.303 → half-width 4.303/√3 = 2.4843.
        assert!((s.half_width() - 2.4843).abs() < 1e-3);
        let one = Summary::of(&[5.0]);
        assert_eq!((one.ci95_low, one.ci95_high), (5.0, 5.0));
    }

    #[test]
    fn brackets() {
        assert_eq!(bracket_of(0), 0);
        assert_eq!(bracket_of(1), 1);
        assert_eq!(bracket_of(6), 1);
        assert_eq!(bracket_of(7), 2);
        assert_eq!(bracket_of(36), 6);
    }
}
