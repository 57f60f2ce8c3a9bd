//! GF(2^8) arithmetic and random linear combinations.
//!
//! The field tables and slice kernels come from `reed-solomon-erasure`'s `galois_8` (field
//! polynomial x^8 + x^4 + x^3 + x^2 + 1, the one its Reed–Solomon codec uses; any
//! irreducible polynomial serves RLNC as long as gateway, APs and device agree, and they all
//! link this module). Only the non-panicking parts are exposed: division by zero is ruled out
//! here, not left to the crate's `panic!`.

use rand::Rng;
use reed_solomon_erasure::galois_8;

pub fn mul(a: u8, b: u8) -> u8 {
    galois_8::mul(a, b)
}

/// Multiplicative inverse; `None` for 0.
pub fn inv(a: u8) -> Option<u8> {
    (a != 0).then(|| galois_8::div(1, a))
}

/// `out[i] ^= c · input[i]` over the common prefix of both slices.
pub fn axpy(c: u8, input: &[u8], out: &mut [u8]) {
    let n = input.len().min(out.len());
    match c {
        // The crate's SIMD kernel indexes element 0 unchecked-by-design: never hand it an
        // empty slice.
        _ if n == 0 => {}
        0 => {}
        1 => out[..n].iter_mut().zip(&input[..n]).for_each(|(o, i)| *o ^= i),
        _ => galois_8::mul_slice_xor(c, &input[..n], &mut out[..n]),
    }
}

/// `v[i] = c · v[i]`.
pub fn scale(c: u8, v: &mut [u8]) {
    if c != 1 {
        v.iter_mut().for_each(|x| *x = mul(c, *x));
    }
}

/// A uniform non-zero field element.
pub fn nonzero<R: Rng>(rng: &mut R) -> u8 {
    rng.gen_range(1..=255)
}

/// `Σ coeffs_i · rows_i` over the shortest row (rows of one cohort are equally long).
pub fn combine_with(coeffs: &[u8], rows: &[&[u8]]) -> Vec<u8> {
    let len = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    let mut out = vec![0; len];
    for (&c, row) in coeffs.iter().zip(rows) {
        axpy(c, row, &mut out);
    }
    out
}

/// A random combination of `rows` with uniform non-zero coefficients: `(coeffs, combination)`.
pub fn combine<R: Rng>(rng: &mut R, rows: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
    let coeffs: Vec<u8> = rows.iter().map(|_| nonzero(rng)).collect();
    let out = combine_with(&coeffs, rows);
    (coeffs, out)
}

/// Largest `n` for which [`Cauchy`] exists: it needs `2n` distinct field elements.
pub const MAX_CAUCHY: usize = 128;

/// A random `n × n` Cauchy matrix with scaled rows, `a_ij = s_i / (x_i + y_j)` with distinct
/// `x_1..x_n, y_1..y_n` and non-zero `s_i`: every entry is non-zero and every square
/// submatrix is invertible, so any set of its rows is linearly independent.
#[derive(Debug, Clone)]
pub struct Cauchy {
    xs: Vec<u8>,
    ys: Vec<u8>,
    scales: Vec<u8>,
}

impl Cauchy {
    /// `None` for `n` = 0 or above [`MAX_CAUCHY`].
    pub fn random<R: Rng>(rng: &mut R, n: usize) -> Option<Cauchy> {
        if n == 0 || n > MAX_CAUCHY {
            return None;
        }
        // A partial Fisher–Yates shuffle of the 256 elements: 2n distinct values.
        let mut all: Vec<u8> = (0..=255).collect();
        for i in 0..2 * n {
            let j = rng.gen_range(i..256);
            all.swap(i, j);
        }
        Some(Cauchy {
            xs: all[..n].to_vec(),
            ys: all[n..2 * n].to_vec(),
            scales: (0..n).map(|_| nonzero(rng)).collect(),
        })
    }

    /// Row `i`; empty when `i` is out of range.
    pub fn row(&self, i: usize) -> Vec<u8> {
        let (Some(&x), Some(&s)) = (self.xs.get(i), self.scales.get(i)) else {
            return Vec::new();
        };
        // x != y for every pair (distinct values), so x + y = x ^ y is never 0.
        self.ys.iter().map(|&y| inv(x ^ y).map_or(0, |v| mul(s, v))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_of_every_non_zero_element() {
        assert_eq!(inv(0), None);
        for a in 1..=255u8 {
            let b = inv(a).unwrap();
            assert_eq!(mul(a, b), 1, "{a}");
        }
    }

    #[test]
    fn cauchy_rows_are_non_zero_and_independent() {
        let mut rng = crate::rng(7, 0);
        for n in [1, 2, 17, MAX_CAUCHY] {
            let c = Cauchy::random(&mut rng, n).unwrap();
            let mut d = crate::Decoder::new(n, 0);
            for i in 0..n {
                let row = c.row(i);
                assert!(row.iter().all(|&v| v != 0));
                assert_eq!(d.insert(&row, &[]), crate::Insert::Innovative);
            }
        }
        assert!(Cauchy::random(&mut rng, MAX_CAUCHY + 1).is_none());
    }

    #[test]
    fn axpy_matches_scalar_products() {
        let input: Vec<u8> = (0..=255).collect();
        for c in [0u8, 1, 2, 0x53, 255] {
            let mut out = vec![7u8; 256];
            axpy(c, &input, &mut out);
            for (i, o) in out.iter().enumerate() {
                assert_eq!(*o, 7 ^ mul(c, i as u8));
            }
        }
    }
}
