//! GF(2^8) arithmetic and random linear combinations.
//!
//! The field tables and the scalar slice kernel come from `reed-solomon-erasure`'s `galois_8`
//! (field polynomial x^8 + x^4 + x^3 + x^2 + 1, the one its Reed–Solomon codec uses; any
//! irreducible polynomial serves RLNC as long as gateway, APs and device agree, and they all
//! link this module). Only the non-panicking parts are exposed: division by zero is ruled out
//! here, not left to the crate's `panic!`.
//!
//! Whole-row multiply-adds — all that coding and elimination are made of — run on the fastest
//! [`Kernel`] the CPU has, chosen at run time (no `-march` needed): on x86_64 AVX2, else
//! SSSE3, else the scalar table kernel. Every kernel computes the same bytes.

use std::sync::atomic::{AtomicU8, Ordering};

use rand::Rng;
use reed_solomon_erasure::galois_8;

#[cfg(target_arch = "x86_64")]
mod x86;

pub fn mul(a: u8, b: u8) -> u8 {
    galois_8::mul(a, b)
}

/// Multiplicative inverse; `None` for 0.
pub fn inv(a: u8) -> Option<u8> {
    (a != 0).then(|| galois_8::div(1, a))
}

/// An implementation of the row operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `reed-solomon-erasure`'s 64 KiB product table, one byte at a time; runs anywhere.
    Scalar,
    /// 16-byte split-nibble table shuffles (`pshufb`), x86_64 with SSSE3.
    Ssse3,
    /// The same over 32 bytes, x86_64 with AVX2.
    Avx2,
}

impl Kernel {
    pub const ALL: [Kernel; 3] = [Kernel::Scalar, Kernel::Ssse3, Kernel::Avx2];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Ssse3 => "ssse3",
            Kernel::Avx2 => "avx2",
        }
    }

    /// Whether this CPU can run it.
    pub fn is_supported(self) -> bool {
        match self {
            Kernel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Ssse3 => std::arch::is_x86_feature_detected!("ssse3"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Ssse3 | Kernel::Avx2 => false,
        }
    }

    /// The fastest kernel this CPU supports.
    pub fn detect() -> Kernel {
        [Kernel::Avx2, Kernel::Ssse3]
            .into_iter()
            .find(|k| k.is_supported())
            .unwrap_or(Kernel::Scalar)
    }

    fn code(self) -> u8 {
        match self {
            Kernel::Scalar => 1,
            Kernel::Ssse3 => 2,
            Kernel::Avx2 => 3,
        }
    }

    fn from_code(code: u8) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.code() == code)
    }

    /// `out[i] ^= c · input[i]` over the common prefix of both slices.
    pub fn axpy(self, c: u8, input: &[u8], out: &mut [u8]) {
        let n = input.len().min(out.len());
        let (input, out) = (&input[..n], &mut out[..n]);
        match c {
            _ if n == 0 => {}
            0 => {}
            1 => out.iter_mut().zip(input).for_each(|(o, i)| *o ^= i),
            _ => match self.checked() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY (all x86 arms here): `checked` returns a SIMD kernel only when
                // `is_supported` saw its feature on this CPU.
                Kernel::Ssse3 => unsafe { x86::axpy_ssse3(c, input, out) },
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => unsafe { x86::axpy_avx2(c, input, out) },
                _ => galois_8::mul_slice_xor(c, input, out),
            },
        }
    }

    /// `v[i] = c · v[i]`.
    pub fn scale(self, c: u8, v: &mut [u8]) {
        match c {
            1 => {}
            0 => v.fill(0),
            _ => match self.checked() {
                #[cfg(target_arch = "x86_64")]
                Kernel::Ssse3 => unsafe { x86::scale_ssse3(c, v) },
                #[cfg(target_arch = "x86_64")]
                Kernel::Avx2 => unsafe { x86::scale_avx2(c, v) },
                _ => v.iter_mut().for_each(|x| *x = mul(c, *x)),
            },
        }
    }

    /// `out[i] ^= Σ_j coeffs_j · rows_j[i]` over `out`'s length; rows shorter than `out` (and
    /// coefficients without a row) contribute nothing beyond their end.
    pub fn combine_into(self, coeffs: &[u8], rows: &[&[u8]], out: &mut [u8]) {
        match self.checked() {
            // Keeping the output in registers across all rows saves one load and one store
            // of it per row and vector; only worth it where whole vectors exist.
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `axpy`.
            Kernel::Avx2 => unsafe { x86::combine_avx2(coeffs, rows, out) },
            k => {
                for (&c, row) in coeffs.iter().zip(rows) {
                    k.axpy(c, row, out);
                }
            }
        }
    }

    /// `self` if this CPU runs it, else scalar: a kernel named by a caller (a benchmark, a
    /// test) must never reach an instruction the CPU lacks.
    fn checked(self) -> Kernel {
        if self == Kernel::Scalar || self.is_supported() {
            self
        } else {
            Kernel::Scalar
        }
    }
}

/// The kernel in use, as a [`Kernel::code`]; 0 = not chosen yet.
static KERNEL: AtomicU8 = AtomicU8::new(0);

/// The kernel the row operations below use: [`Kernel::detect`] unless [`set_kernel`] chose
/// another.
pub fn kernel() -> Kernel {
    if let Some(k) = Kernel::from_code(KERNEL.load(Ordering::Relaxed)) {
        return k;
    }
    // Two threads racing here detect the same kernel, so either store is right.
    let k = Kernel::detect();
    KERNEL.store(k.code(), Ordering::Relaxed);
    k
}

/// Use `k` for every row operation in this process from now on (for benchmarks: the same
/// bytes result whatever the kernel). `false`, and nothing changed, if this CPU lacks it.
pub fn set_kernel(k: Kernel) -> bool {
    if !k.is_supported() {
        return false;
    }
    KERNEL.store(k.code(), Ordering::Relaxed);
    true
}

/// `out[i] ^= c · input[i]` over the common prefix of both slices.
pub fn axpy(c: u8, input: &[u8], out: &mut [u8]) {
    kernel().axpy(c, input, out);
}

/// `v[i] = c · v[i]`.
pub fn scale(c: u8, v: &mut [u8]) {
    kernel().scale(c, v);
}

/// `out[i] ^= Σ_j coeffs_j · rows_j[i]`, each row over its common prefix with `out`.
pub fn combine_into(coeffs: &[u8], rows: &[&[u8]], out: &mut [u8]) {
    kernel().combine_into(coeffs, rows, out);
}

/// A uniform non-zero field element.
pub fn nonzero<R: Rng>(rng: &mut R) -> u8 {
    rng.gen_range(1..=255)
}

/// `Σ coeffs_i · rows_i` over the shortest row (rows of one cohort are equally long).
pub fn combine_with(coeffs: &[u8], rows: &[&[u8]]) -> Vec<u8> {
    let len = rows.iter().map(|r| r.len()).min().unwrap_or(0);
    let mut out = vec![0; len];
    kernel().combine_into(coeffs, rows, &mut out);
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
