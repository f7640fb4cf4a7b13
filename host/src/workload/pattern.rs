//! The bytes every workload region starts with: byte `i` of pattern
//! `seed` is the top byte of `i × 0x9E3779B97F4A7C15`, XORed with a byte
//! of the seed, so checks can tell which bytes came from where.
//!
//! `udrma check` runs one scenario hundreds of thousands of times, and
//! every run fills its regions with patterns and checks them at the end,
//! a multiply per byte each way. The seed only XORs every byte with one
//! constant, so the first [`SHARED`] bytes of the unseeded pattern are
//! made once per process and shared: a fill is then an XOR of a copy,
//! and a check a comparison, both a word at a time.

use std::sync::OnceLock;

/// Bytes of the unseeded pattern made once and shared (beyond them, each
/// byte is computed).
pub const SHARED: usize = 256 * 1024;

/// Byte `i` of the unseeded pattern.
fn base_byte(i: u64) -> u8 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// What pattern `seed` XORs every byte with.
fn seed_byte(seed: u32) -> u8 {
    (seed as u8).wrapping_mul(31)
}

/// The first [`SHARED`] bytes of the unseeded pattern.
fn shared() -> &'static [u8] {
    static BASE: OnceLock<Box<[u8]>> = OnceLock::new();
    BASE.get_or_init(|| (0..SHARED as u64).map(base_byte).collect())
}

/// The bytes every workload region starts with: byte `i` depends on `i`
/// and `seed`, so checks can tell which bytes came from where.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    pattern_at(seed, 0, len)
}

/// Bytes `offset .. offset + len` of [`pattern`] with `seed`, without
/// making the bytes before them.
pub fn pattern_at(seed: u32, offset: u64, len: usize) -> Vec<u8> {
    let k = seed_byte(seed);
    let (shared_part, rest) = split(offset, len);
    let mut out: Vec<u8> = shared_part.iter().map(|b| b ^ k).collect();
    out.extend(rest.map(|i| base_byte(i) ^ k));
    out
}

/// Whether `bytes` are bytes `offset ..` of [`pattern`] with `seed`.
pub fn is_pattern(bytes: &[u8], seed: u32, offset: u64) -> bool {
    let k = seed_byte(seed);
    let (shared_part, rest) = split(offset, bytes.len());
    let (head, tail) = bytes.split_at(shared_part.len());
    // Every byte's difference ORed together (no early exit: the loop
    // runs a vector at a time).
    let differ = head
        .iter()
        .zip(shared_part)
        .fold(0u8, |acc, (b, s)| acc | (b ^ k ^ s));
    differ == 0 && tail.iter().zip(rest).all(|(b, i)| b ^ k == base_byte(i))
}

/// Of the unseeded bytes `offset .. offset + len`: the ones shared, and
/// the offsets of the ones past them.
fn split(offset: u64, len: usize) -> (&'static [u8], core::ops::Range<u64>) {
    let end = offset.saturating_add(len as u64);
    let shared = shared();
    let cut = end.min(SHARED as u64).max(offset.min(SHARED as u64));
    let part = &shared[offset.min(SHARED as u64) as usize..cut as usize];
    (part, offset + part.len() as u64..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pattern as its definition says, a byte at a time.
    fn slow(seed: u32, offset: u64, len: usize) -> Vec<u8> {
        (offset..offset + len as u64)
            .map(|i| base_byte(i) ^ seed_byte(seed))
            .collect()
    }

    #[test]
    fn a_slice_of_the_pattern_is_the_pattern_at_its_offset() {
        let whole = pattern(1000, 7);
        assert_eq!(pattern_at(7, 300, 200), whole[300..500]);
        assert!(is_pattern(&whole[300..500], 7, 300));
        assert!(!is_pattern(&whole[300..500], 7, 301));
        assert!(!is_pattern(&whole[300..500], 8, 300));
    }

    #[test]
    fn the_shared_bytes_and_the_computed_ones_are_one_pattern() {
        let s = SHARED as u64;
        for (offset, len) in [(0, 10), (s - 5, 10), (s, 7), (s + 3, 4), (s - 1, 1), (5, 0)] {
            let want = slow(9, offset, len);
            assert_eq!(pattern_at(9, offset, len), want, "{offset}+{len}");
            assert!(is_pattern(&want, 9, offset), "{offset}+{len}");
            if len > 0 {
                let mut bad = want.clone();
                bad[len - 1] ^= 1;
                assert!(!is_pattern(&bad, 9, offset), "{offset}+{len} last byte");
                bad[len - 1] ^= 1;
                bad[0] ^= 0x80;
                assert!(!is_pattern(&bad, 9, offset), "{offset}+{len} first byte");
            }
        }
        // Byte for byte as before the bytes were shared (fixtures and
        // trace hashes depend on them).
        assert_eq!(&pattern(4, 1)[..], &[0x1f, 0x81, 0x23, 0xc5]);
    }
}
