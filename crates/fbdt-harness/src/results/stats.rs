//! Small statistics the result types share; a leaf module, so any of them may use it.

/// The mean of `values`; None for none (a figure not measured is not a zero).
pub fn mean_of(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.into_iter().fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}
