//! Every row kernel this CPU runs gives the bytes of the plain per-byte product, for every
//! coefficient, odd lengths and unaligned starts; kernels the CPU lacks are never reached.

use cotag::gf::{self, Kernel};
use proptest::prelude::*;

fn kernels() -> Vec<Kernel> {
    Kernel::ALL.into_iter().filter(|k| k.is_supported()).collect()
}

/// `out ^= c · input`, one byte at a time through `gf::mul`: the reference.
fn axpy_ref(c: u8, input: &[u8], out: &mut [u8]) {
    for (o, &x) in out.iter_mut().zip(input) {
        *o ^= gf::mul(c, x);
    }
}

/// Bytes that are different at every position and offset.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

/// Lengths around every vector width and block boundary, and a full symbol.
const LENS: [usize; 16] = [0, 1, 15, 16, 17, 31, 32, 33, 63, 127, 128, 129, 255, 257, 1401, 1402];

#[test]
fn axpy_and_scale_match_the_reference_for_every_coefficient() {
    for k in kernels() {
        for c in 0..=255u8 {
            for len in LENS {
                for (in_off, out_off) in [(0, 0), (1, 0), (0, 3), (5, 7)] {
                    let input = pattern(len + in_off, c);
                    let mut out = pattern(len + out_off, c ^ 0x5a);
                    let mut want = out.clone();
                    axpy_ref(c, &input[in_off..], &mut want[out_off..]);
                    k.axpy(c, &input[in_off..], &mut out[out_off..]);
                    assert_eq!(out, want, "{} axpy c={c} len={len} off=({in_off},{out_off})", k.name());

                    let mut v = input.clone();
                    let want: Vec<u8> = input
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| if i < in_off { x } else { gf::mul(c, x) })
                        .collect();
                    k.scale(c, &mut v[in_off..]);
                    assert_eq!(v, want, "{} scale c={c} len={len} off={in_off}", k.name());
                }
            }
        }
    }
}

#[test]
fn combine_into_matches_the_reference_at_every_boundary() {
    for k in kernels() {
        for len in LENS {
            for m in [1usize, 2, 7] {
                let rows: Vec<Vec<u8>> = (0..m).map(|j| pattern(len + 3, j as u8)).collect();
                // Unaligned starts, as symbols inside received datagrams are.
                let refs: Vec<&[u8]> = rows.iter().enumerate().map(|(j, r)| &r[j % 4..][..len]).collect();
                for c0 in [0u8, 1, 2, 0x1d, 0x80, 255] {
                    let coeffs: Vec<u8> = (0..m).map(|j| c0.wrapping_add(j as u8 * 37)).collect();
                    let mut out = pattern(len, 0xc3);
                    let mut want = out.clone();
                    for (&c, r) in coeffs.iter().zip(&refs) {
                        axpy_ref(c, r, &mut want);
                    }
                    k.combine_into(&coeffs, &refs, &mut out);
                    assert_eq!(out, want, "{} combine len={len} rows={m} c0={c0}", k.name());
                }
            }
        }
    }
}

#[test]
fn axpy_stops_at_the_shorter_slice() {
    for k in kernels() {
        let input = pattern(100, 1);
        let mut out = vec![9u8; 40];
        k.axpy(0x8e, &input, &mut out);
        let mut want = vec![9u8; 40];
        axpy_ref(0x8e, &input, &mut want);
        assert_eq!(out, want, "{}", k.name());

        let mut long = vec![9u8; 100];
        k.axpy(0x8e, &input[..33], &mut long);
        assert!(long[33..].iter().all(|&b| b == 9), "{}", k.name());
    }
}

#[test]
fn a_kernel_the_cpu_lacks_is_refused() {
    for k in Kernel::ALL {
        if !k.is_supported() {
            assert!(!gf::set_kernel(k), "{}", k.name());
        }
    }
    assert!(gf::set_kernel(Kernel::Scalar));
    assert!(gf::set_kernel(Kernel::detect()));
    assert_eq!(gf::kernel(), Kernel::detect());
}

proptest! {
    /// A whole combination — rows of unequal length, zero and one among the coefficients,
    /// a coefficient without a row — equals the sum of reference products.
    #[test]
    fn combine_into_matches_the_reference(
        rows in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..400), 0..12),
        coeffs in prop::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..14),
        out0 in prop::collection::vec(any::<u8>(), 0..420),
        off in 0usize..4,
    ) {
        let refs: Vec<&[u8]> = rows.iter().map(|r| &r[off.min(r.len())..]).collect();
        let mut want = out0.clone();
        for (&c, r) in coeffs.iter().zip(&refs) {
            axpy_ref(c, r, &mut want);
        }
        for k in kernels() {
            let mut out = out0.clone();
            k.combine_into(&coeffs, &refs, &mut out);
            prop_assert_eq!(&out, &want, "{}", k.name());
        }
    }
}
