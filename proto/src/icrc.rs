//! The ICRC: a CRC-32 (IEEE 802.3 polynomial, reflected, as in Ethernet and
//! zlib) over the common header, the extension header and the payload.
//!
//! It is carried big-endian in the last four bytes of every udrma datagram.
//! Any single bit flip anywhere in a packet (trailer included) makes the
//! check fail; `docs/wire-format.md` gives a known-answer value.
//!
//! [`icrc_zeros`] extends a CRC over zero bytes without reading them: the
//! simulator's phantom payloads (all zeros) are checked without 4 KB of
//! memory traffic per packet.

use std::cell::RefCell;

/// CRC-32 of `bytes` as the ICRC defines it.
pub fn icrc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The reflected IEEE polynomial.
const POLY: u32 = 0xEDB8_8320;

/// A linear map on the CRC register, as the images of its 32 bits.
type Operator = [u32; 32];

fn apply(op: &Operator, mut v: u32) -> u32 {
    let mut out = 0;
    let mut i = 0;
    while v != 0 {
        if v & 1 == 1 {
            out ^= op[i];
        }
        v >>= 1;
        i += 1;
    }
    out
}

/// `a` after `b`.
fn compose(a: &Operator, b: &Operator) -> Operator {
    let mut out = [0; 32];
    for (o, col) in out.iter_mut().zip(b) {
        *o = apply(a, *col);
    }
    out
}

/// The register map of `n` zero bytes, by squaring the one-bit map.
fn zeros_operator(n: usize) -> Operator {
    // One zero bit: shift right, folding the polynomial in on a carry.
    let mut step: Operator = [0; 32];
    step[0] = POLY;
    for (i, s) in step.iter_mut().enumerate().skip(1) {
        *s = 1 << (i - 1);
    }
    let mut result: Operator = core::array::from_fn(|i| 1 << i);
    let mut bits = (n as u64) * 8;
    while bits != 0 {
        if bits & 1 == 1 {
            result = compose(&step, &result);
        }
        step = compose(&step, &step);
        bits >>= 1;
    }
    result
}

/// An operator as four byte tables: its image of each byte value in each
/// byte position of the register (four loads apply it).
type Tables = [[u32; 256]; 4];

fn tables(op: &Operator) -> Box<Tables> {
    let mut t = Box::new([[0u32; 256]; 4]);
    for (k, table) in t.iter_mut().enumerate() {
        for b in 1..256usize {
            // The image of b: that of b without its lowest bit, plus the
            // lowest bit's column.
            table[b] = table[b & (b - 1)] ^ op[8 * k + b.trailing_zeros() as usize];
        }
    }
    t
}

/// Operators worked out lately, by length (phantom payloads come in a few
/// lengths: the MTU and the last segments).
const CACHED: usize = 8;

thread_local! {
    static OPERATORS: RefCell<Vec<(usize, Box<Tables>)>> = const { RefCell::new(Vec::new()) };
}

/// The ICRC of some bytes followed by `n` zero bytes, given `crc`, the
/// ICRC of those bytes alone. Equal to extending `crc` over `n` real zeros,
/// without touching memory: a CRC register is linear in the bits it
/// shifts, and zeros only shift.
pub fn icrc_zeros(crc: u32, n: usize) -> u32 {
    if n == 0 {
        return crc;
    }
    OPERATORS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let i = match cache.iter().position(|(len, _)| *len == n) {
            Some(i) => i,
            None => {
                if cache.len() == CACHED {
                    cache.remove(0);
                }
                cache.push((n, tables(&zeros_operator(n))));
                cache.len() - 1
            }
        };
        let t = &cache[i].1;
        // The register holds the complement of the published CRC.
        let r = !crc;
        !(t[0][(r & 0xff) as usize]
            ^ t[1][((r >> 8) & 0xff) as usize]
            ^ t[2][((r >> 16) & 0xff) as usize]
            ^ t[3][(r >> 24) as usize])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer() {
        // The standard CRC-32 check value.
        assert_eq!(icrc(b"123456789"), 0xCBF4_3926);
        assert_eq!(icrc(b""), 0);
    }

    #[test]
    fn zeros_extend_like_real_zeros() {
        let zeros = vec![0u8; 9000];
        for prefix in [&b""[..], b"123456789", &[0xff; 44]] {
            for n in [
                0, 1, 2, 3, 7, 8, 255, 256, 1000, 3999, 4000, 4001, 8192, 9000,
            ] {
                let mut whole = prefix.to_vec();
                whole.extend_from_slice(&zeros[..n]);
                assert_eq!(
                    icrc_zeros(icrc(prefix), n),
                    icrc(&whole),
                    "prefix {prefix:?}, {n} zeros"
                );
            }
        }
    }

    #[test]
    fn more_lengths_than_the_cache_holds() {
        let zeros = [0u8; 64];
        // Twice round, so evicted lengths are worked out again correctly.
        for _ in 0..2 {
            for n in 1..=2 * CACHED + 1 {
                assert_eq!(
                    icrc_zeros(icrc(b"ab"), n),
                    icrc(&[b"ab", &zeros[..n]].concat())
                );
            }
        }
    }
}
