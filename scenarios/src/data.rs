//! The bytes workloads move: every region starts with a known pattern, so
//! checks can tell which bytes came from where.

/// Bytes every host's regions start with, and what reuse writes.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ (seed as u8).wrapping_mul(31)
        })
        .collect()
}
