//! The bridge owns the only clock: OS monotonic time, converted to the
//! engine's picosecond [`Instant`] at the edge.

use udrma_nic::{Duration, Instant};

/// Monotonic OS time since the bridge started, as engine time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    /// A clock whose zero is now.
    pub fn start() -> Clock {
        Clock {
            origin: std::time::Instant::now(),
        }
    }

    /// Engine time now.
    pub fn now(&self) -> Instant {
        self.to_engine(std::time::Instant::now())
    }

    /// An OS instant as engine time (instants before the origin map to 0).
    pub fn to_engine(&self, t: std::time::Instant) -> Instant {
        let d = t.saturating_duration_since(self.origin);
        Instant::ZERO + Duration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// An engine deadline as an OS instant.
    pub fn to_os(&self, t: Instant) -> std::time::Instant {
        self.origin + std::time::Duration::from_nanos(t.as_nanos())
    }
}

/// A boot epoch for a new life of this host: milliseconds since the Unix
/// epoch, truncated to 32 bits. Two lives started more than a millisecond
/// apart get different epochs, and serial-number comparison orders lives
/// started less than about 24 days apart.
pub fn boot_epoch() -> u32 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    (ms as u32).max(1)
}
