//! Simulated time: picosecond `Instant`s and `Duration`s of our own.
//!
//! The engine never reads a clock; every entry point takes `now`. The
//! simulator advances it from its event queue; the bridge converts the OS
//! clock at its edge.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in picoseconds since the start of the run.
#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Hash, Default)]
pub struct Instant(pub u64);

#[cfg(feature = "fingerprint")]
std::thread_local! {
    /// The time a fingerprint is taken at ([`fingerprint_origin`]).
    static ORIGIN: core::cell::Cell<Option<u64>> = const { core::cell::Cell::new(None) };
}

/// Runs `f` with every [`Instant`] it serialises written relative to
/// `now` (a fingerprint of a state: two states that differ only by a
/// shift in time serialise alike). `Instant::ZERO` and `u64::MAX` ps are
/// written as themselves (the engine's "never set" and "never"), so they
/// cannot meet a time that happens to be as far from `now`.
#[cfg(feature = "fingerprint")]
pub fn fingerprint_origin<R>(now: Instant, f: impl FnOnce() -> R) -> R {
    let before = ORIGIN.with(|o| o.replace(Some(now.0)));
    let r = f();
    ORIGIN.with(|o| o.set(before));
    r
}

#[cfg(feature = "fingerprint")]
impl serde::Serialize for Instant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self.0, ORIGIN.with(|o| o.get())) {
            (0, _) => s.serialize_newtype_variant("Instant", 0, "Zero", &()),
            (u64::MAX, _) => s.serialize_newtype_variant("Instant", 1, "Never", &()),
            (t, Some(now)) => s.serialize_newtype_variant(
                "Instant",
                2,
                "From",
                &(i128::from(t) - i128::from(now)),
            ),
            (t, None) => s.serialize_newtype_variant("Instant", 3, "At", &t),
        }
    }
}

/// Serialises an instant whose past values all act alike (a link or a
/// NIC free since then is free now) as `max(t, now)`: two states that
/// differ only in how long ago a resource became free fingerprint alike.
#[cfg(feature = "fingerprint")]
pub fn not_before_now<S: serde::Serializer>(t: &Instant, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    match ORIGIN.with(|o| o.get()) {
        Some(now) if t.0 <= now => s.serialize_newtype_variant("Instant", 2, "From", &0i128),
        _ => t.serialize(s),
    }
}

/// A span of time in picoseconds.
#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Hash, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Duration(pub u64);

impl Instant {
    /// The start of the run.
    pub const ZERO: Instant = Instant(0);

    /// Picoseconds since the start.
    pub const fn as_ps(self) -> u64 {
        self.0
    }

    /// Nanoseconds since the start (truncated).
    pub const fn as_nanos(self) -> u64 {
        self.0 / 1_000
    }

    /// Time since `earlier`, or zero if `earlier` is later.
    pub const fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

impl Duration {
    /// Zero length.
    pub const ZERO: Duration = Duration(0);

    /// From picoseconds.
    pub const fn from_ps(ps: u64) -> Duration {
        Duration(ps)
    }

    /// From nanoseconds (saturating).
    pub const fn from_nanos(ns: u64) -> Duration {
        Duration(ns.saturating_mul(1_000))
    }

    /// From microseconds (saturating).
    pub const fn from_micros(us: u64) -> Duration {
        Duration(us.saturating_mul(1_000_000))
    }

    /// From milliseconds (saturating).
    pub const fn from_millis(ms: u64) -> Duration {
        Duration(ms.saturating_mul(1_000_000_000))
    }

    /// Picoseconds.
    pub const fn as_ps(self) -> u64 {
        self.0
    }

    /// Nanoseconds (truncated).
    pub const fn as_nanos(self) -> u64 {
        self.0 / 1_000
    }

    /// `self * k`, saturating.
    pub const fn saturating_mul(self, k: u64) -> Duration {
        Duration(self.0.saturating_mul(k))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

fn human(ps: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match ps {
        0..1_000 => write!(f, "{ps}ps"),
        1_000..1_000_000 => write!(f, "{:.3}ns", ps as f64 / 1e3),
        1_000_000..1_000_000_000 => write!(f, "{:.3}us", ps as f64 / 1e6),
        1_000_000_000..1_000_000_000_000 => write!(f, "{:.3}ms", ps as f64 / 1e9),
        _ => write!(f, "{:.6}s", ps as f64 / 1e12),
    }
}

/// `shown` (a time as `Display` writes it), then the exact picoseconds
/// `ps` when that rounds (below its last digit something is left out):
/// `t=12.500us`, `t=12.500us (12500001 ps)`.
fn debug(shown: &dyn fmt::Display, ps: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let lost = match ps {
        0..1_000_000 => 0,
        1_000_000..1_000_000_000 => ps % 1_000,
        _ => ps % 1_000_000,
    };
    write!(f, "{shown}")?;
    if lost != 0 {
        write!(f, " ({ps} ps)")?;
    }
    Ok(())
}

/// As `Display` shows it, with the exact picoseconds when that rounds.
impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug(self, self.0, f)
    }
}

/// As `Display` shows it, with the exact picoseconds when that rounds.
impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug(self, self.0, f)
    }
}

/// `t=12.500us`.
impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("t=")?;
        human(self.0, f)
    }
}

/// `12.500us`.
impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        human(self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_displays() {
        let t = Instant::ZERO + Duration::from_micros(12) + Duration::from_nanos(500);
        assert_eq!(t.as_ps(), 12_500_000);
        assert_eq!(t.to_string(), "t=12.500us");
        assert_eq!(format!("{t:?}"), "t=12.500us");
        assert_eq!(
            format!("{:?}", Instant(12_500_001)),
            "t=12.500us (12500001 ps)"
        );
        assert_eq!(format!("{:?}", Duration(999)), "999ps");
        assert_eq!(format!("{:?}", Duration::from_millis(3)), "3.000ms");
        assert_eq!(Instant(5) - Instant(9), Duration::ZERO);
        assert_eq!(Instant(u64::MAX) + Duration(1), Instant(u64::MAX));
        assert_eq!(Duration::from_millis(2).to_string(), "2.000ms");
    }
}
