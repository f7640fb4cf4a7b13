//! `udrma-faults`: what the simulated network does wrong, as data.
//!
//! A [`Rule`] pairs a [`Target`] (which packets: link, direction, flow,
//! opcode, flags, time window, every n-th match) with a [`Model`] (netem's
//! vocabulary: random and Gilbert-Elliott loss, duplication, reordering,
//! delay with uniform/normal/pareto jitter, bit corruption, rate shaping
//! with a queue limit, link down, partitions) and a ChaCha8 stream of its
//! own derived from (master seed, rule name); a rule without memory can
//! also draw by packet from a key ([`Rule::judge_keyed`]), which the
//! fabric does in lookahead windows. A [`RuleSet`] applies rules
//! in install order; the first verdict other than `Pass` wins, so install
//! losses before delays to have both.
//!
//! Host pauses are timeline events ([`HostPause`]) that the fabric
//! carries out; they do not judge packets.
//!
//! This crate depends on `udrma-proto` only and never reads a clock or an
//! unseeded random source.
//!
//! Children not named above:
//! - `ruleset`: A rule set: rules in install order, the first verdict other than `Pass` wins

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Seeded streams (they live in `udrma-proto`, where every crate can use
/// them; re-exported here for the fault rules' users).
pub use udrma_proto::rng;
pub mod rule;
pub mod ruleset;

pub use rule::{
    closest, Direction, FaultError, Jitter, Model, Nth, PacketCtx, Rule, RuleCounters, Target,
    Verdict,
};
pub use ruleset::RuleSet;

use udrma_proto::{Instant, NodeAddr};

/// A host's NIC stops processing (no receive, no transmit, no timers)
/// from `from` until `until`; packets that arrive meanwhile wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct HostPause {
    /// Which host.
    pub host: NodeAddr,
    /// Start.
    pub from: Instant,
    /// End.
    pub until: Instant,
}
