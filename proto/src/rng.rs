//! Seeded random streams: one ChaCha8 stream per component, derived from
//! (master seed, component id), so adding a rule never changes the draws of
//! another. They live in the bottom crate so that every floor (fault
//! rules, host software, workloads, the bridge's shim) seeds the same way
//! without importing the fault crate.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// SplitMix64 finaliser: a good 64-bit mix for deriving seeds.
pub const fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a over a component name: a stable id across platforms and runs.
pub fn component_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The stream of component `name` under master seed `seed`.
pub fn stream(seed: u64, name: &str) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(mix(seed ^ mix(component_id(name))))
}

/// Uniform in [0, 1) with 53 random bits.
pub fn unit(rng: &mut impl Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Standard normal (Box-Muller; one draw per call, the pair's twin unused
/// so the stream position depends only on the call count).
pub fn normal(rng: &mut impl Rng) -> f64 {
    let u1 = unit(rng).max(f64::MIN_POSITIVE);
    let u2 = unit(rng);
    (-2.0 * u1.ln()).sqrt() * (2.0 * core::f64::consts::PI * u2).cos()
}

/// Uniform integer in `0..n` (n > 0), by rejection (no modulo bias).
pub fn below(rng: &mut impl Rng, n: u64) -> u64 {
    below_from(|| rng.next_u64(), n)
}

/// [`below`] over any source of 64-bit draws (`next`), for a stream that
/// is not an [`Rng`] itself.
pub fn below_from(mut next: impl FnMut() -> u64, n: u64) -> u64 {
    loop {
        if let Some(x) = accept_below(next(), n) {
            return x;
        }
    }
}

/// What [`below`] makes of the draw `v` for `n` (n > 0): `v % n`, or
/// `None` when it rejects `v` and draws again (`v` in the top
/// `u64::MAX % n + 1` values, which would bias the low results). For a
/// caller that looks at a draw before taking it.
pub fn accept_below(v: u64, n: u64) -> Option<u64> {
    let zone = u64::MAX - (u64::MAX % n);
    (v < zone).then_some(v % n)
}

/// netem-style correlated draw: `next = (1 - c)·U + c·last`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Correlated {
    last: f64,
}

impl Correlated {
    /// The next draw in [0, 1) with correlation `c` to the previous one.
    pub fn next(&mut self, rng: &mut impl Rng, c: f64) -> f64 {
        let u = unit(rng);
        let v = if c <= 0.0 {
            u
        } else {
            (1.0 - c) * u + c * self.last
        };
        self.last = v;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_stable_and_independent() {
        let a: Vec<u64> = (0..3)
            .map(|_| 0)
            .scan(stream(7, "rule:0"), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..3)
            .map(|_| 0)
            .scan(stream(7, "rule:0"), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..3)
            .map(|_| 0)
            .scan(stream(7, "rule:1"), |r, _| Some(r.next_u64()))
            .collect();
        let d: Vec<u64> = (0..3)
            .map(|_| 0)
            .scan(stream(8, "rule:0"), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
    }

    #[test]
    fn unit_and_below_stay_in_range() {
        let mut r = stream(1, "t");
        for _ in 0..10_000 {
            let u = unit(&mut r);
            assert!((0.0..1.0).contains(&u));
            assert!(below(&mut r, 7) < 7);
        }
    }

    /// `below` reaches every value of its range, about equally often.
    #[test]
    fn below_covers_its_range() {
        let mut r = stream(2, "t");
        let mut seen = [0u32; 7];
        for _ in 0..7_000 {
            seen[below(&mut r, 7) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }

    /// The rejection zone: for n = 10, `u64::MAX % 10` is 5, so the six
    /// draws from `u64::MAX - 5` up are rejected (they would make 0..=5
    /// a little likelier than 6..=9); every draw below is kept as `v % n`.
    #[test]
    fn accept_below_rejects_exactly_the_biased_top() {
        assert_eq!(accept_below(12_345, 10), Some(5));
        assert_eq!(accept_below(u64::MAX - 6, 10), Some((u64::MAX - 6) % 10));
        assert_eq!(accept_below(u64::MAX - 5, 10), None);
        assert_eq!(accept_below(u64::MAX, 10), None);
        // Where n divides 2^64 nothing would be biased, yet the top n
        // draws (one whole cycle) are rejected: more than needed, and
        // kept, since every seeded run's values depend on it.
        assert_eq!(accept_below(u64::MAX - 8, 8), Some(7));
        assert_eq!(accept_below(u64::MAX - 7, 8), None);
    }
}
