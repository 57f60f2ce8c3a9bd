//! The bytes the simulated application sends: a function of the stream offset, so the
//! receiver can check every byte it gets — position included — without keeping a copy.
//!
//! Byte `i` = `BASE[i mod 4096] XOR k(i div 4096)[i mod 8]` with `k` a 64-bit mix of the
//! block number: any displacement by a whole number of blocks changes `k`, any other
//! displacement changes the `BASE` byte with probability 255/256 per byte.
//!
//! The zero-copy payload mode ([`crate::Payload::Shared`]) sends the same pattern one
//! period at a time: slices of one shared buffer ([`shared`]), checked by identity where
//! they come back as that buffer's own memory ([`check_shared`]).

const BLOCK: u64 = 4096;

fn mix(x: u64) -> u64 {
    // splitmix64 finaliser: a bijection with good avalanche.
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn base() -> &'static [u8; BLOCK as usize] {
    static BASE: std::sync::OnceLock<[u8; BLOCK as usize]> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let mut b = [0u8; BLOCK as usize];
        for (i, chunk) in b.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&mix(0xF0F0 + i as u64).to_le_bytes());
        }
        b
    })
}

/// Calls `f(block_key, base_slice, out_range)` for each block piece of `[offset, offset+len)`.
fn for_blocks(offset: u64, len: usize, mut f: impl FnMut([u8; 8], &[u8], std::ops::Range<usize>)) {
    let base = base();
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let block = pos / BLOCK;
        let in_block = (pos % BLOCK) as usize;
        let n = (BLOCK as usize - in_block).min(len - done);
        f(mix(block).to_le_bytes(), &base[in_block..in_block + n], done..done + n);
        done += n;
    }
}

/// Fills `buf` with the stream bytes at `offset`.
pub fn fill(offset: u64, buf: &mut [u8]) {
    for_blocks(offset, buf.len(), |key, base, range| {
        let start = range.start as u64 + offset;
        let out = &mut buf[range];
        // Word-at-a-time where the stream offset is 8-aligned (segments always are).
        let lead = ((8 - start % 8) % 8).min(out.len() as u64) as usize;
        for (k, (o, b)) in out[..lead].iter_mut().zip(base).enumerate() {
            *o = b ^ key[((start + k as u64) % 8) as usize];
        }
        let k64 = u64::from_le_bytes(key);
        let (out, base) = (&mut out[lead..], &base[lead..]);
        let words = out.len() / 8;
        for (o, b) in out.chunks_exact_mut(8).zip(base.chunks_exact(8)) {
            let w = u64::from_le_bytes(b.try_into().expect("8 bytes")) ^ k64;
            o.copy_from_slice(&w.to_le_bytes());
        }
        for (k, (o, b)) in out[words * 8..].iter_mut().zip(&base[words * 8..]).enumerate() {
            *o = b ^ key[k % 8];
        }
    });
}

/// True if `buf` holds exactly the stream bytes at `offset`.
pub fn check(offset: u64, buf: &[u8]) -> bool {
    let mut expected = [0u8; BLOCK as usize];
    let mut at = 0usize;
    while at < buf.len() {
        let n = (buf.len() - at).min(expected.len());
        fill(offset + at as u64, &mut expected[..n]);
        if buf[at..at + n] != expected[..n] {
            return false;
        }
        at += n;
    }
    true
}

/// The period of [`shared`]: stream byte `i` is `shared()[i mod PERIOD]`. Not a multiple
/// of any size the protocol or the simulator uses (4 KiB blocks, segments, chunks), so a
/// displacement is missed only if it is a multiple of this (≈ 8 MiB).
pub const PERIOD: usize = (8 << 20) + 8 * 997;

/// The stream as a `Bytes` of one period: `shared()[k]` = the stream byte at `k` (an
/// offset-keyed pattern, see [`fill`]), made once per process. The zero-copy payload mode
/// writes slices of it; a receiver that gets a slice of it back at the right position has
/// the right bytes without reading them.
pub fn shared() -> &'static bytes::Bytes {
    static SHARED: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let mut v = vec![0u8; PERIOD];
        fill(0, &mut v);
        bytes::Bytes::from(v)
    })
}

/// The shared-pattern bytes of `[offset, offset + len)` that fit before the period wraps
/// (at most `len`; at least 1 if `len` > 0), as a slice of [`shared`] (no copy).
pub fn shared_slice(offset: u64, len: usize) -> bytes::Bytes {
    let at = (offset % PERIOD as u64) as usize;
    shared().slice(at..at + len.min(PERIOD - at))
}

/// `part` as a slice of [`shared`] if it lies inside it (no copy), else `None`.
pub fn as_shared(part: &[u8]) -> Option<bytes::Bytes> {
    let s = shared();
    let base = s.as_ptr() as usize;
    let p = part.as_ptr() as usize;
    (!part.is_empty() && p >= base && p + part.len() <= base + s.len()).then(|| s.slice_ref(part))
}

/// How a received piece of the shared-pattern stream was found right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verified {
    /// It is the shared pattern's own memory at the offset's position: the same bytes,
    /// not read.
    Identity,
    /// A copy (the core copied it, or it was not zero-copy): compared byte by byte.
    Compared,
}

/// How `buf` was found to hold the shared-pattern stream's bytes at `offset` ([`shared`]
/// repeated with period [`PERIOD`]); `None` if it does not.
pub fn check_shared(offset: u64, buf: &[u8]) -> Option<Verified> {
    let s = shared();
    let at = (offset % PERIOD as u64) as usize;
    if buf.is_empty() || (buf.as_ptr() == s[at..].as_ptr() && buf.len() <= PERIOD - at) {
        return Some(Verified::Identity);
    }
    let (mut done, mut pos) = (0, at);
    while done < buf.len() {
        let n = (buf.len() - done).min(PERIOD - pos);
        if buf[done..done + n] != s[pos..pos + n] {
            return None;
        }
        done += n;
        pos = 0;
    }
    Some(Verified::Compared)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_at_any_offset_and_split() {
        let mut a = vec![0u8; 10_000];
        fill(12_345, &mut a);
        assert!(check(12_345, &a));
        let mut b = vec![0u8; 3_000];
        fill(12_345 + 7_000, &mut b);
        assert_eq!(&a[7_000..], &b[..]);
        assert!(!check(12_345 + 4096, &a));
        assert!(!check(12_346, &a));
        a[9_999] ^= 1;
        assert!(!check(12_345, &a));
    }

    #[test]
    fn shared_slices_check_by_identity_copies_by_content() {
        let at = PERIOD as u64 * 3 - 100;
        let s = shared_slice(at, 1000);
        assert_eq!(s.len(), 100, "cut at the period's end");
        assert_eq!(check_shared(at, &s), Some(Verified::Identity));
        assert_eq!(as_shared(&s[10..20]).map(|b| b.as_ptr()), Some(s[10..].as_ptr()));
        assert!(as_shared(&[1, 2, 3]).is_none());
        // A copy across the wrap is compared, and equals the offset-keyed pattern.
        let mut v = vec![0u8; 300];
        v[..100].copy_from_slice(&s);
        v[100..].copy_from_slice(&shared_slice(at + 100, 200));
        assert_eq!(check_shared(at, &v), Some(Verified::Compared));
        let mut expect = vec![0u8; 300];
        fill(PERIOD as u64 - 100, &mut expect[..100]);
        fill(0, &mut expect[100..]);
        assert_eq!(v, expect);
        // Displaced by anything but a multiple of the period, or changed: refused.
        assert_eq!(check_shared(at + 1, &v), None);
        assert_eq!(check_shared(at + 4096, &s), None, "same memory, wrong position");
        v[250] ^= 1;
        assert_eq!(check_shared(at, &v), None);
    }

    #[test]
    fn word_path_equals_byte_definition() {
        let byte_at = |i: u64| base()[(i % BLOCK) as usize] ^ mix(i / BLOCK).to_le_bytes()[(i % 8) as usize];
        for (off, len) in [(0u64, 9000usize), (3, 100), (4093, 20), (8191, 3), (1 << 33, 5000)] {
            let mut v = vec![0u8; len];
            fill(off, &mut v);
            assert!(
                v.iter().enumerate().all(|(k, &b)| b == byte_at(off + k as u64)),
                "offset {off}"
            );
        }
    }
}
