//! Workloads as host apps: the scenario workloads, one [`App`] per host.
//!
//! A scenario file describes what every host does; its runner plans that
//! once (the same plan in every process, from the file and the seed) and
//! gives each host an app that carries out its own part: posting at its
//! times, reacting to its own completions and landings, and recording
//! what it saw. The runner then reads the records of the hosts it drives
//! and checks them. Nothing here knows whether the hosts are simulated or
//! on sockets, or whether the peer runs in the same process.
//!
//! - [`rdma`]: RDMA WRITE, READ and SEND workloads (timed, windowed,
//!   ping-pong, buffer reuse).
//! - [`noncontig`]: the non-contiguous ping-pong (pack, scatter-gather
//!   lists or indirect keys).
//! - [`msg`]: the OSU-shaped messaging workloads over the
//!   [`messaging`](crate::messaging) layer.
//!
//! [`App`]: crate::App

pub mod msg;
pub mod noncontig;
pub mod rdma;

/// The byte at offset `i` of a region that starts with pattern `seed`.
fn pattern_byte(i: u64, seed: u32) -> u8 {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8 ^ (seed as u8).wrapping_mul(31)
}

/// The bytes every workload region starts with: byte `i` depends on `i`
/// and `seed`, so checks can tell which bytes came from where.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    pattern_at(seed, 0, len)
}

/// Bytes `offset .. offset + len` of [`pattern`] with `seed`, without
/// making the bytes before them.
pub fn pattern_at(seed: u32, offset: u64, len: usize) -> Vec<u8> {
    (offset..offset + len as u64)
        .map(|i| pattern_byte(i, seed))
        .collect()
}

/// Whether `bytes` are bytes `offset ..` of [`pattern`] with `seed`.
pub fn is_pattern(bytes: &[u8], seed: u32, offset: u64) -> bool {
    bytes
        .iter()
        .zip(offset..)
        .all(|(b, i)| *b == pattern_byte(i, seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_of_the_pattern_is_the_pattern_at_its_offset() {
        let whole = pattern(1000, 7);
        assert_eq!(pattern_at(7, 300, 200), whole[300..500]);
        assert!(is_pattern(&whole[300..500], 7, 300));
        assert!(!is_pattern(&whole[300..500], 7, 301));
        assert!(!is_pattern(&whole[300..500], 8, 300));
    }
}
