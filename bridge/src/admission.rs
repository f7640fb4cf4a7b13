//! Admission of strangers: stateless address validation and a bounded
//! per-source rate limit, so that HELLOs from addresses the endpoint does
//! not know cost it no memory.
//!
//! An ask from an unknown address without a valid cookie is answered with
//! a HELLO retry carrying a cookie, and nothing is stored (QUIC's Retry,
//! DTLS's HelloVerifyRequest). The cookie is 16 bytes: 4 of issue time (in
//! seconds of the endpoint's clock) and the first 12 of an HMAC-SHA256,
//! under a secret drawn from the OS at start, of that time and the source
//! address. Only an ask that echoes a cookie minted for its own address in
//! the last [`COOKIE_LIFETIME_S`] seconds may create a peer (HMAC and the
//! secret's generator from `ring`). The retry is
//! no larger than the ask, so the endpoint amplifies nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// How long a cookie stays valid, in seconds.
pub const COOKIE_LIFETIME_S: u32 = 60;

/// Source addresses whose HELLO rate is tracked (the least recently heard
/// is forgotten first: a flood from many addresses churns this table, it
/// never grows it, and never touches an address it does not hold).
pub const RATE_SOURCES: usize = 4096;

/// HELLOs a source may send per second, sustained.
pub const HELLO_RATE: f64 = 8.0;

/// HELLOs a source may send at once.
pub const HELLO_BURST: f64 = 16.0;

/// A token bucket of one source.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The admission state: a secret, and the rate of recent sources.
pub struct Admission {
    secret: hmac::Key,
    buckets: BTreeMap<SocketAddr, Bucket>,
    /// `buckets` by when each was last heard, oldest first.
    by_age: BTreeSet<(Instant, SocketAddr)>,
}

impl core::fmt::Debug for Admission {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the secret.
        f.debug_struct("Admission")
            .field("sources", &self.buckets.len())
            .finish()
    }
}

impl Admission {
    /// A fresh secret from the operating system's generator.
    pub fn new() -> std::io::Result<Admission> {
        let mut secret = [0u8; 32];
        SystemRandom::new()
            .fill(&mut secret)
            .map_err(|_| std::io::Error::other("the OS random generator failed"))?;
        Ok(Admission::with_secret(secret))
    }

    /// With a given secret (tests).
    pub fn with_secret(secret: [u8; 32]) -> Admission {
        Admission {
            secret: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            buckets: BTreeMap::new(),
            by_age: BTreeSet::new(),
        }
    }

    fn mac(&self, from: SocketAddr, issued: u32) -> [u8; 12] {
        let mut m = hmac::Context::with_key(&self.secret);
        m.update(b"udrma admission cookie v1");
        m.update(&issued.to_be_bytes());
        match from.ip() {
            IpAddr::V4(a) => m.update(&a.octets()),
            IpAddr::V6(a) => m.update(&a.octets()),
        }
        m.update(&from.port().to_be_bytes());
        let tag = m.sign();
        let mut out = [0u8; 12];
        out.copy_from_slice(&tag.as_ref()[..12]);
        out
    }

    /// The cookie for `from` at `now_s` (seconds of the endpoint's clock).
    pub fn cookie(&self, from: SocketAddr, now_s: u32) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[..4].copy_from_slice(&now_s.to_be_bytes());
        c[4..].copy_from_slice(&self.mac(from, now_s));
        c
    }

    /// Whether `cookie` was minted for `from` by this endpoint within the
    /// last [`COOKIE_LIFETIME_S`] seconds (compared in constant time).
    pub fn check(&self, from: SocketAddr, cookie: &[u8; 16], now_s: u32) -> bool {
        let issued = u32::from_be_bytes([cookie[0], cookie[1], cookie[2], cookie[3]]);
        if issued > now_s || now_s - issued > COOKIE_LIFETIME_S {
            return false;
        }
        let want = self.mac(from, issued);
        want.iter()
            .zip(&cookie[4..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// Whether a HELLO from `from` may be handled now (a token bucket per
    /// source, [`HELLO_RATE`] per second, bursts of [`HELLO_BURST`]).
    pub fn allow(&mut self, from: SocketAddr, now: Instant) -> bool {
        let mut b = match self.buckets.get(&from) {
            Some(b) => {
                self.by_age.remove(&(b.last, from));
                *b
            }
            None => {
                if self.buckets.len() >= RATE_SOURCES {
                    if let Some(oldest) = self.by_age.pop_first() {
                        self.buckets.remove(&oldest.1);
                    }
                }
                Bucket {
                    tokens: HELLO_BURST,
                    last: now,
                }
            }
        };
        let elapsed = now.saturating_duration_since(b.last).as_secs_f64();
        b.tokens = (b.tokens + elapsed * HELLO_RATE).min(HELLO_BURST);
        b.last = now;
        let ok = b.tokens >= 1.0;
        if ok {
            b.tokens -= 1.0;
        }
        self.buckets.insert(from, b);
        self.by_age.insert((now, from));
        ok
    }

    /// Sources whose rate is tracked now (at most [`RATE_SOURCES`]).
    pub fn sources(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_cookie_checks_for_its_own_address_only_and_expires() {
        let adm = Admission::with_secret([7; 32]);
        let c = adm.cookie(a("127.0.0.2:4000"), 100);
        assert!(adm.check(a("127.0.0.2:4000"), &c, 100));
        assert!(adm.check(a("127.0.0.2:4000"), &c, 100 + COOKIE_LIFETIME_S));
        assert!(!adm.check(a("127.0.0.2:4000"), &c, 101 + COOKIE_LIFETIME_S));
        assert!(
            !adm.check(a("127.0.0.2:4000"), &c, 99),
            "issued in the future"
        );
        assert!(!adm.check(a("127.0.0.2:4001"), &c, 100), "another port");
        assert!(!adm.check(a("127.0.0.3:4000"), &c, 100), "another address");
        // Any flipped bit, in the time or the tag, fails.
        for i in 0..16 {
            let mut bad = c;
            bad[i] ^= 1;
            assert!(!adm.check(a("127.0.0.2:4000"), &bad, 100), "byte {i}");
        }
        // Two changed bytes whose differences would cancel in a careless
        // comparison (XOR-folded rather than OR-folded) still fail.
        let mut two = c;
        two[5] ^= 1;
        two[6] ^= 1;
        assert!(!adm.check(a("127.0.0.2:4000"), &two, 100));
        // Another endpoint's secret: another cookie.
        let other = Admission::with_secret([8; 32]);
        assert!(!other.check(a("127.0.0.2:4000"), &c, 100));
        assert!(!adm.check(a("127.0.0.2:4000"), &[0; 16], 0));
    }

    #[test]
    fn each_source_gets_its_burst_then_its_rate() {
        let mut adm = Admission::with_secret([1; 32]);
        let t0 = Instant::now();
        let x = a("10.0.0.1:1");
        let allowed = (0..40).filter(|_| adm.allow(x, t0)).count();
        assert_eq!(allowed, HELLO_BURST as usize);
        // Another source is not touched by the first one's flood.
        assert!(adm.allow(a("10.0.0.2:1"), t0));
        // One second later, the rate's worth again.
        let t1 = t0 + std::time::Duration::from_secs(1);
        let again = (0..40).filter(|_| adm.allow(x, t1)).count();
        assert_eq!(again, HELLO_RATE as usize);
    }

    #[test]
    fn a_flood_of_sources_churns_a_bounded_table() {
        let mut adm = Admission::with_secret([1; 32]);
        let t0 = Instant::now();
        let honest = a("127.0.0.1:9");
        assert!(adm.allow(honest, t0));
        for i in 0..(3 * RATE_SOURCES as u32) {
            let t = t0 + std::time::Duration::from_micros(u64::from(i) + 1);
            let from = SocketAddr::new(IpAddr::V4((0x0a00_0000 + i).into()), 1);
            assert!(adm.allow(from, t), "a new source gets its burst");
        }
        assert_eq!(adm.sources(), RATE_SOURCES);
        // The honest source was forgotten, so it starts afresh: never
        // penalised for the flood.
        let later = t0 + std::time::Duration::from_secs(1);
        assert!((0..HELLO_BURST as usize).all(|_| adm.allow(honest, later)));
    }
}
