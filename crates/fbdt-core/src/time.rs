//! The core's own notion of time. The core never reads a clock: every input carries `now`.

use std::fmt;
use std::ops::{Add, Sub};

/// A point in time, in microseconds since an origin chosen by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

/// A span of time in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Duration(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_micros(us: u64) -> Self {
        Instant(us)
    }
    pub const fn as_micros(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// Time elapsed since `earlier`, zero if `earlier` is in the future.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    pub const ZERO: Duration = Duration(0);

    pub const fn from_micros(us: u64) -> Self {
        Duration(us)
    }
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms * 1000)
    }
    pub const fn as_micros(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// Rounded to the nearest microsecond (halves away from zero); 0 for a negative,
    /// zero or non-finite `s`.
    pub fn from_secs_f64(s: f64) -> Self {
        if !(s.is_finite() && s > 0.0) {
            return Duration(0);
        }
        Duration(round_us(s * 1e6))
    }
    pub fn mul_f64(self, k: f64) -> Self {
        Duration::from_secs_f64(self.as_secs_f64() * k)
    }
}

/// Below this every `f64` may have a fraction; from it on each is a whole number.
const FRACTIONS_END: f64 = (1u64 << 52) as f64;

/// `us.round() as u64` for a positive `us`, without the call: `f64::round` is a library
/// call on the baseline x86-64 target (no SSE4.1), and the simulator converts times ≈ 170 000
/// times a simulated second. Below 2^52 the cast truncates, and `us − truncated` is exact
/// (Sterbenz: truncated ≤ us < 2 × truncated once us ≥ 1), so a fraction of one half or
/// more rounds up as `round` does; from 2^52 on `us` is whole (the cast saturates as
/// `round() as u64` does).
#[inline]
fn round_us(us: f64) -> u64 {
    if us < FRACTIONS_END {
        let whole = us as u64;
        whole + u64::from(us - whole as f64 >= 0.5)
    } else {
        us as u64
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(d.0))
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}s", self.as_secs_f64())
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}ms", self.0 as f64 / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The call-free rounding gives `round`'s answer: halves, their neighbours one ulp
    /// apart, whole numbers, the 2^52 edge, huge and tiny values, and a sweep of times.
    #[test]
    fn from_secs_f64_rounds_as_round_does() {
        let reference = |s: f64| {
            if s.is_finite() && s > 0.0 {
                (s * 1e6).round() as u64
            } else {
                0
            }
        };
        let mut cases = vec![
            0.0, -0.0, -1.0, 1e-300, 5e-7, 4.999_999_999_999_999e-7, 1.5e-6, 2.5e-6, 0.123_456_5,
            1.0, 4_503_599_627.370_495_5, 4_503_599_627.370_496, 4_503_599_627.370_497, 1e13, 1.8e13, 1e19,
            1e300, f64::MAX, f64::MIN_POSITIVE, f64::NAN, f64::INFINITY, f64::NEG_INFINITY,
        ];
        for k in 0..2000u64 {
            let us = k as f64 + 0.5;
            cases.extend([us / 1e6, f64::from_bits((us / 1e6).to_bits() + 1), f64::from_bits((us / 1e6).to_bits() - 1)]);
        }
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            cases.push((x >> 11) as f64 / (1u64 << 53) as f64 * 10f64.powi((x % 12) as i32 - 3));
        }
        for s in cases {
            assert_eq!(Duration::from_secs_f64(s).as_micros(), reference(s), "{s:e}");
        }
    }
}
