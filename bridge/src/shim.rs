//! An in-process fault shim: loss, duplication and reordering of the
//! datagrams this process sends, for quick experiments without root (the
//! kernel damages traffic only under `tc`/nftables, see
//! `scripts/netns-test.sh`).
//!
//! Decisions come from a ChaCha8 stream seeded by the caller, so the same
//! seed makes the same decisions for the same sequence of datagrams; which
//! datagrams those are still depends on real timing.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

/// What the shim does to outgoing datagrams (all probabilities in 0..=1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShimConfig {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is sent twice.
    pub dup: f64,
    /// Probability that a datagram is held back and sent `reorder_delay`
    /// later, behind datagrams sent after it (netem's reorder).
    pub reorder: f64,
    /// How long a reordered datagram is held.
    pub reorder_delay: std::time::Duration,
    /// Seed of the decision stream.
    pub seed: u64,
}

impl Default for ShimConfig {
    fn default() -> Self {
        ShimConfig {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_delay: std::time::Duration::from_micros(500),
            seed: 0,
        }
    }
}

impl ShimConfig {
    /// Whether the shim does anything.
    pub fn is_active(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0
    }

    /// Checks the probabilities; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("--loss", self.loss),
            ("--dup", self.dup),
            ("--reorder", self.reorder),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(format!("{name} {p}: must be a probability in [0, 1)"));
            }
        }
        Ok(())
    }
}

/// What happens to one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Send it now.
    Send,
    /// Drop it.
    Drop,
    /// Send it now and once more.
    Duplicate,
    /// Hold it back.
    Hold,
}

/// Most datagrams held back at once; beyond, held datagrams go out at once
/// (counted), so the shim's memory stays bounded whatever the rate.
pub const MAX_HELD: usize = 16_384;

/// Counters of what the shim did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShimStats {
    /// Datagrams dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Datagrams held back (reordered).
    pub reordered: u64,
    /// Datagrams sent at once because the hold queue was full.
    pub hold_overflow: u64,
}

/// The shim: decisions plus the queue of held datagrams.
#[derive(Debug)]
pub struct Shim {
    cfg: ShimConfig,
    rng: ChaCha8Rng,
    held: BTreeMap<(std::time::Instant, u64), (SocketAddr, Vec<u8>)>,
    seq: u64,
    stats: ShimStats,
}

impl Shim {
    /// A shim with its own decision stream.
    pub fn new(cfg: ShimConfig) -> Shim {
        Shim {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5348_494d),
            cfg,
            held: BTreeMap::new(),
            seq: 0,
            stats: ShimStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> ShimStats {
        self.stats
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }

    /// Decides the fate of the next datagram.
    pub fn decide(&mut self) -> Fate {
        if self.chance(self.cfg.loss) {
            self.stats.dropped += 1;
            Fate::Drop
        } else if self.chance(self.cfg.dup) {
            self.stats.duplicated += 1;
            Fate::Duplicate
        } else if self.chance(self.cfg.reorder) {
            if self.held.len() >= MAX_HELD {
                self.stats.hold_overflow += 1;
                return Fate::Send;
            }
            self.stats.reordered += 1;
            Fate::Hold
        } else {
            Fate::Send
        }
    }

    /// Holds a datagram until `now + reorder_delay`.
    pub fn hold(&mut self, now: std::time::Instant, to: SocketAddr, bytes: Vec<u8>) {
        self.seq += 1;
        self.held
            .insert((now + self.cfg.reorder_delay, self.seq), (to, bytes));
    }

    /// When the next held datagram is due.
    pub fn next_release(&self) -> Option<std::time::Instant> {
        self.held.keys().next().map(|(t, _)| *t)
    }

    /// The next held datagram due by `now`.
    pub fn release(&mut self, now: std::time::Instant) -> Option<(SocketAddr, Vec<u8>)> {
        let entry = self.held.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        Some(entry.remove())
    }

    /// Datagrams held now.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_hold_over_a_long_run_and_the_seed_decides() {
        let cfg = ShimConfig {
            loss: 0.05,
            dup: 0.05,
            reorder: 0.2,
            seed: 9,
            ..ShimConfig::default()
        };
        let mut s = Shim::new(cfg);
        let fates: Vec<Fate> = (0..100_000).map(|_| s.decide()).collect();
        let count = |f| fates.iter().filter(|x| **x == f).count() as f64 / 1e5;
        assert!((count(Fate::Drop) - 0.05).abs() < 0.004);
        // Duplicate and hold are decided among the survivors.
        assert!((count(Fate::Duplicate) - 0.95 * 0.05).abs() < 0.004);
        assert!((count(Fate::Hold) - 0.95 * 0.95 * 0.2).abs() < 0.006);
        let mut again = Shim::new(cfg);
        assert!(fates.iter().all(|f| *f == again.decide()));
    }

    #[test]
    fn held_datagrams_leave_in_deadline_order() {
        let mut s = Shim::new(ShimConfig::default());
        let t = std::time::Instant::now();
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        s.hold(t, a, vec![1]);
        s.hold(t + std::time::Duration::from_micros(1), a, vec![2]);
        assert_eq!(s.release(t), None);
        let late = t + std::time::Duration::from_secs(1);
        assert_eq!(s.release(late).unwrap().1, vec![1]);
        assert_eq!(s.release(late).unwrap().1, vec![2]);
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn probabilities_out_of_range_are_refused_by_name() {
        let bad = ShimConfig {
            dup: 1.5,
            ..ShimConfig::default()
        };
        assert!(bad.validate().unwrap_err().starts_with("--dup 1.5"));
    }
}
