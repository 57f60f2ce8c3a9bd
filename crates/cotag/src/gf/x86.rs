//! SSSE3 and AVX2 row kernels: GF(2^8) multiply by a constant as two 16-entry table
//! look-ups, one per nibble, done 16 or 32 bytes at a time by the byte shuffle.
//!
//! Multiplying by a constant `c` is linear over GF(2), so `c·x = c·(x & 0x0f) ^ c·(x & 0xf0)`;
//! each half takes one of 16 values, a table small enough for one vector register, and
//! `pshufb` looks up every byte of a vector in it at once. This works for any field
//! polynomial, so the kernels give exactly the bytes of the scalar table kernel.
//!
//! Every function here is `unsafe` for one reason only: it must run on a CPU with the target
//! feature it is compiled for. `Kernel::checked` in the parent module guarantees that.

use std::arch::x86_64::*;

/// Product in GF(2^8) mod x^8 + x^4 + x^3 + x^2 + 1 (0x11d, `galois_8`'s polynomial), by
/// shift and add; only used to build [`TABLES`] at compile time.
const fn mul_slow(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            // x^8 = x^4 + x^3 + x^2 + 1 in this field.
            a ^= 0x1d;
        }
        b >>= 1;
    }
    p
}

/// `TABLES[c] = [c·x for x in 0..16, c·(x << 4) for x in 0..16]`: 8 KiB, built at compile time.
static TABLES: [[[u8; 16]; 2]; 256] = {
    let mut t = [[[0u8; 16]; 2]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 16 {
            t[c][0][x] = mul_slow(c as u8, x as u8);
            t[c][1][x] = mul_slow(c as u8, (x as u8) << 4);
            x += 1;
        }
        c += 1;
    }
    t
};

/// `c · x` by the two nibble tables, for the bytes no vector covers.
fn mul_tab(t: &[[u8; 16]; 2], x: u8) -> u8 {
    t[0][usize::from(x & 0x0f)] ^ t[1][usize::from(x >> 4)]
}

#[target_feature(enable = "ssse3")]
#[inline]
unsafe fn mul128(x: __m128i, lo: __m128i, hi: __m128i) -> __m128i {
    let mask = _mm_set1_epi8(0x0f);
    let l = _mm_and_si128(x, mask);
    // A 64-bit shift moves bits across byte boundaries; the mask drops them.
    let h = _mm_and_si128(_mm_srli_epi64::<4>(x), mask);
    _mm_xor_si128(_mm_shuffle_epi8(lo, l), _mm_shuffle_epi8(hi, h))
}

#[target_feature(enable = "avx2")]
#[inline]
unsafe fn mul256(x: __m256i, lo: __m256i, hi: __m256i) -> __m256i {
    let mask = _mm256_set1_epi8(0x0f);
    let l = _mm256_and_si256(x, mask);
    let h = _mm256_and_si256(_mm256_srli_epi64::<4>(x), mask);
    // vpshufb looks up within each 128-bit lane, hence the tables broadcast to both lanes.
    _mm256_xor_si256(_mm256_shuffle_epi8(lo, l), _mm256_shuffle_epi8(hi, h))
}

#[target_feature(enable = "ssse3")]
#[inline]
unsafe fn tables128(c: u8) -> (__m128i, __m128i) {
    let t = &TABLES[usize::from(c)];
    // SAFETY: each table half is exactly 16 readable bytes; loadu has no alignment need.
    unsafe {
        (
            _mm_loadu_si128(t[0].as_ptr().cast()),
            _mm_loadu_si128(t[1].as_ptr().cast()),
        )
    }
}

#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tables256(c: u8) -> (__m256i, __m256i) {
    // SAFETY: AVX2 implies SSSE3, and this function runs only where AVX2 does.
    let (lo, hi) = unsafe { tables128(c) };
    (_mm256_broadcastsi128_si256(lo), _mm256_broadcastsi128_si256(hi))
}

/// `dst[i] ^= c · src[i]` (`XOR`) or `dst[i] = c · src[i]` for `i < n`: the loop that
/// `axpy` and `scale` share.
///
/// # Safety
/// The CPU must support SSSE3; `src` must be readable and `dst` writable for `n` bytes, and
/// they must be the same pointer or not overlap.
#[target_feature(enable = "ssse3")]
unsafe fn mul_ssse3<const XOR: bool>(c: u8, src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY (whole body): the caller guarantees SSSE3 and n valid bytes at both pointers;
    // every access is at an index below n; unaligned access is allowed; each vector is read
    // before it is written, so src == dst is fine.
    unsafe {
        let (lo, hi) = tables128(c);
        let mut i = 0;
        while i + 16 <= n {
            let p = mul128(_mm_loadu_si128(src.add(i).cast()), lo, hi);
            let p = if XOR { _mm_xor_si128(p, _mm_loadu_si128(dst.add(i).cast())) } else { p };
            _mm_storeu_si128(dst.add(i).cast(), p);
            i += 16;
        }
        let t = &TABLES[usize::from(c)];
        while i < n {
            let p = mul_tab(t, *src.add(i));
            *dst.add(i) = if XOR { *dst.add(i) ^ p } else { p };
            i += 1;
        }
    }
}

/// For the last 32-byte window of a run whose first `32 - rem` bytes an earlier vector
/// already did: all-ones in the last `rem` bytes (1..=32), zero elsewhere. Neither XOR nor
/// scaling is idempotent, so the overlap must be masked rather than redone.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tail_mask(rem: usize) -> __m256i {
    let idx = _mm256_setr_epi8(
        0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
        29, 30, 31,
    );
    // Byte k is selected iff k > 31 - rem; 31 - rem is in -1..=30, so it fits an i8.
    let last_kept = (31 - rem.clamp(1, 32) as i32) as i8;
    _mm256_cmpgt_epi8(idx, _mm256_set1_epi8(last_kept))
}

/// The AVX2 form of [`mul_ssse3`], same contract with AVX2 for SSSE3.
#[target_feature(enable = "avx2")]
unsafe fn mul_avx2<const XOR: bool>(c: u8, src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY (whole body): as in `mul_ssse3`; the last window starts at n - 32 >= 0, and AVX2
    // implies SSSE3 for runs under 32 bytes.
    unsafe {
        if n < 32 {
            return mul_ssse3::<XOR>(c, src, dst, n);
        }
        let (lo, hi) = tables256(c);
        let mut i = 0;
        while i + 32 <= n {
            let p = mul256(_mm256_loadu_si256(src.add(i).cast()), lo, hi);
            let p = if XOR { _mm256_xor_si256(p, _mm256_loadu_si256(dst.add(i).cast())) } else { p };
            _mm256_storeu_si256(dst.add(i).cast(), p);
            i += 32;
        }
        if i < n {
            let w = n - 32;
            let old = _mm256_loadu_si256(dst.add(w).cast());
            let p = mul256(_mm256_loadu_si256(src.add(w).cast()), lo, hi);
            let p = if XOR { _mm256_xor_si256(p, old) } else { p };
            _mm256_storeu_si256(dst.add(w).cast(), _mm256_blendv_epi8(old, p, tail_mask(n - i)));
        }
    }
}

/// `out[i] ^= c · input[i]` over the common prefix.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn axpy_ssse3(c: u8, input: &[u8], out: &mut [u8]) {
    let n = input.len().min(out.len());
    // SAFETY: SSSE3 by the caller; n bytes in both; distinct borrows do not overlap.
    unsafe { mul_ssse3::<true>(c, input.as_ptr(), out.as_mut_ptr(), n) }
}

/// `out[i] ^= c · input[i]` over the common prefix.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn axpy_avx2(c: u8, input: &[u8], out: &mut [u8]) {
    let n = input.len().min(out.len());
    // SAFETY: AVX2 by the caller; n bytes in both; distinct borrows do not overlap.
    unsafe { mul_avx2::<true>(c, input.as_ptr(), out.as_mut_ptr(), n) }
}

/// `v[i] = c · v[i]`.
///
/// # Safety
/// The CPU must support SSSE3.
#[target_feature(enable = "ssse3")]
pub(super) unsafe fn scale_ssse3(c: u8, v: &mut [u8]) {
    let p = v.as_mut_ptr();
    // SAFETY: SSSE3 by the caller; v.len() bytes; in place (src == dst).
    unsafe { mul_ssse3::<false>(c, p, p, v.len()) }
}

/// `v[i] = c · v[i]`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn scale_avx2(c: u8, v: &mut [u8]) {
    let p = v.as_mut_ptr();
    // SAFETY: AVX2 by the caller; v.len() bytes; in place (src == dst).
    unsafe { mul_avx2::<false>(c, p, p, v.len()) }
}

/// Bytes of `out` one pass over the rows keeps in registers: four 32-byte accumulators leave
/// registers for the two tables, the mask and the loaded row vectors (16 ymm in all).
const BLOCK: usize = 128;

/// `out[i] ^= Σ_j coeffs_j · rows_j[i]`, each row over its common prefix with `out`.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn combine_avx2(coeffs: &[u8], rows: &[&[u8]], out: &mut [u8]) {
    let m = coeffs.len().min(rows.len());
    let (coeffs, rows) = (&coeffs[..m], &rows[..m]);
    // Blocks only where every row has bytes; the rest goes row by row below.
    let common = rows.iter().map(|r| r.len()).min().unwrap_or(0).min(out.len());
    let mut i = 0;
    while i + BLOCK <= common {
        // SAFETY: i + BLOCK <= common <= out.len(); unaligned access is allowed.
        let mut acc = unsafe {
            let o = out.as_ptr().add(i);
            [
                _mm256_loadu_si256(o.cast()),
                _mm256_loadu_si256(o.add(32).cast()),
                _mm256_loadu_si256(o.add(64).cast()),
                _mm256_loadu_si256(o.add(96).cast()),
            ]
        };
        for (&c, row) in coeffs.iter().zip(rows) {
            if c == 0 {
                continue;
            }
            // SAFETY: the caller guarantees AVX2; i + BLOCK <= common <= row.len(), so the
            // four 32-byte loads are in bounds.
            unsafe {
                let (lo, hi) = tables256(c);
                let r = row.as_ptr().add(i);
                for (k, a) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_si256(r.add(32 * k).cast());
                    *a = _mm256_xor_si256(*a, mul256(x, lo, hi));
                }
            }
        }
        // SAFETY: as for the loads above; `out` is not borrowed by any row.
        unsafe {
            let o = out.as_mut_ptr().add(i);
            for (k, a) in acc.iter().enumerate() {
                _mm256_storeu_si256(o.add(32 * k).cast(), *a);
            }
        }
        i += BLOCK;
    }
    // What is left of the common part, one vector at a time, the last one overlapping.
    while i < common && common >= 32 {
        let (w, mask) = if i + 32 <= common {
            (i, _mm256_set1_epi8(-1))
        } else {
            // SAFETY: the caller guarantees AVX2; 0 < common - i < 32.
            (common - 32, unsafe { tail_mask(common - i) })
        };
        // SAFETY: w + 32 <= common <= out.len() and every row's length; unaligned access is
        // allowed.
        unsafe {
            let o = _mm256_loadu_si256(out.as_ptr().add(w).cast());
            let mut acc = o;
            for (&c, row) in coeffs.iter().zip(rows) {
                if c != 0 {
                    let (lo, hi) = tables256(c);
                    let x = _mm256_loadu_si256(row.as_ptr().add(w).cast());
                    acc = _mm256_xor_si256(acc, mul256(x, lo, hi));
                }
            }
            _mm256_storeu_si256(out.as_mut_ptr().add(w).cast(), _mm256_blendv_epi8(o, acc, mask));
        }
        i = w + 32;
    }
    // Rows longer than the common part (and a common part under 32 bytes), row by row.
    for (&c, row) in coeffs.iter().zip(rows) {
        if c != 0 && i < row.len() && i < out.len() {
            // SAFETY: the caller guarantees AVX2.
            unsafe { axpy_avx2(c, &row[i..], &mut out[i..]) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_time_tables_match_galois_8() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul_slow(a, b), super::super::mul(a, b), "{a}·{b}");
            }
            let t = &TABLES[usize::from(a)];
            for x in 0..=255u8 {
                assert_eq!(mul_tab(t, x), super::super::mul(a, x), "{a}·{x}");
            }
        }
    }
}
