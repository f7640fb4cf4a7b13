//! Congestion control: the seam between the send gate and a controller.
//!
//! The engine keeps one controller per peer it sends to. The controller
//! sees every acknowledgement (bytes, an RTT sample when Karn's rule
//! allows one, whether the receiver echoed a Congestion Experienced mark),
//! every loss signal (a retransmit timeout, a NACK) and every first
//! transmission, and answers two questions the send gate asks before a new
//! data packet leaves: how many bytes may be in flight toward the peer
//! ([`CongestionControl::window`]) and when the next packet may go
//! ([`CongestionControl::next_send_time`], for pacing). Retransmissions are
//! not gated: their bytes are already counted in flight.
//!
//! Four controllers ship: [`Unlimited`] (`cc = "none"`, the OP table is
//! the only window, as before congestion control existed), [`Nscc`] (a
//! sender window driven by delay and ECN, after Ultra Ethernet's NSCC),
//! [`Dcqcn`] (an ECN-driven rate controller, the RoCE baseline) and
//! [`Rccc`] (receivers grant credit, after Ultra Ethernet's RCCC; the
//! receiver half is the engine's grant scheduler). A
//! researcher adds another by implementing the trait and handing the engine
//! a factory ([`crate::Nic::set_controller_factory`]); the crate's
//! `custom_cc` example does it in a few dozen lines.
//!
//! Controllers read no clock: `now` comes with every call, so a run stays
//! deterministic.
//!
//! Children:
//! - `dcqcn`: `Dcqcn`: an ECN-driven rate controller, after DCQCN
//! - `nscc`: `Nscc`: a sender window driven by queueing delay and ECN, after Ultra Ethernet's sender-based controller
//! - `rccc`: `rccc`: a receiver-credit controller, after Ultra Ethernet's RCCC and the pull-based designs it draws on

use core::fmt::Debug;

use udrma_proto::time::{Duration, Instant};

mod dcqcn;
mod nscc;
mod rccc;

pub use dcqcn::Dcqcn;
pub use nscc::Nscc;
pub use rccc::Rccc;

/// One acknowledged data packet, as the controller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct AckSample {
    /// Bytes the packet carried on the wire (header and payload).
    pub bytes: u64,
    /// Its round trip, when it was sent once (Karn's rule) and acknowledged
    /// by an ACK or SACK (a completion notice gives none).
    pub rtt: Option<Duration>,
    /// The receiver echoed a Congestion Experienced mark for it.
    pub ce: bool,
    /// Bytes still in flight toward the peer once this one is counted
    /// off (a window far above it is not what limits the flow).
    pub inflight: u64,
}

/// Why the engine thinks a packet was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum LossCause {
    /// Its retransmit timer expired.
    Timeout,
    /// The receiver NACKed it as out of sequence.
    Nack,
    /// A switch trimmed it to its header on a full queue, and the
    /// receiver NACKed the header: a loss that is also a congestion
    /// notification.
    Trimmed,
    /// A packet sent well after it was acknowledged first (selective-ACK
    /// loss detection, before any timer).
    Overtaken,
}

/// A congestion controller for the packets one NIC sends to one peer.
///
/// Every method gets the current time; none may read a clock. The engine
/// calls [`on_send`](Self::on_send) for each first transmission,
/// [`on_ack`](Self::on_ack) for each acknowledged packet and
/// [`on_loss`](Self::on_loss) for each loss signal, and asks
/// [`window`](Self::window) and [`next_send_time`](Self::next_send_time)
/// before each new packet. A packet always goes when nothing is in flight
/// toward the peer, so a window below one packet cannot stall a flow.
pub trait CongestionControl: Debug + Send {
    /// A new data packet of `bytes` left at `now`.
    fn on_send(&mut self, now: Instant, bytes: u64);
    /// A packet was acknowledged.
    fn on_ack(&mut self, now: Instant, ack: AckSample);
    /// A packet of `bytes` is thought lost.
    fn on_loss(&mut self, now: Instant, bytes: u64, cause: LossCause);
    /// Bytes that may be in flight toward the peer (`u64::MAX`: no limit).
    fn window(&self) -> u64;
    /// Earliest time the next new packet may leave (pacing); `None` when
    /// the controller does not pace.
    fn next_send_time(&self) -> Option<Instant>;
    /// A short name for reports (`"nscc"`).
    fn name(&self) -> &'static str;

    /// The controller's whole state, for `udrma check`'s fingerprint of a
    /// world (docs/check.md); `None`, the default: a controller that
    /// cannot say, and a search over it does not merge states.
    #[cfg(feature = "fingerprint")]
    fn snapshot(&self) -> Option<CcSnapshot> {
        None
    }

    /// A receiver-credit controller's answer to "may a new packet go?":
    /// the bytes it may still send before the receiver grants more
    /// (checked even with nothing in flight). `None`, the default: not
    /// credit-based.
    fn credit(&self) -> Option<u64> {
        None
    }
    /// The receiver has granted `granted` bytes in all (cumulative; a
    /// GRANT may repeat or arrive after a larger one).
    fn on_grant(&mut self, _now: Instant, _granted: u64) {}
    /// The flow is out of credit with `backlog` new bytes waiting: the
    /// `(wanted, free)` of a DEMAND to send the receiver (cumulative bytes
    /// wanted, and of them bytes sent unscheduled), or `None` when the
    /// receiver already knows.
    fn demand(&mut self, _now: Instant, _backlog: u64) -> Option<(u64, u64)> {
        None
    }
    /// When a blocked flow should ask again if no grant came (the engine
    /// wakes then).
    fn demand_due(&self) -> Option<Instant> {
        None
    }
}

/// Which controller the engine builds for each peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum CcAlgorithm {
    /// No controller: the OP table is the only window.
    #[default]
    None,
    /// [`Nscc`]: sender window from delay and ECN, paced.
    Nscc,
    /// [`Dcqcn`]: ECN-driven rate control.
    Dcqcn,
    /// [`Rccc`]: receivers grant credit; a first window goes unscheduled.
    Rccc,
}

impl CcAlgorithm {
    /// Every algorithm, in the order reports list them.
    pub const ALL: [CcAlgorithm; 4] = [
        CcAlgorithm::None,
        CcAlgorithm::Nscc,
        CcAlgorithm::Dcqcn,
        CcAlgorithm::Rccc,
    ];

    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            CcAlgorithm::None => "none",
            CcAlgorithm::Nscc => "nscc",
            CcAlgorithm::Dcqcn => "dcqcn",
            CcAlgorithm::Rccc => "rccc",
        }
    }

    /// The algorithm named `s`, if any.
    pub fn parse(s: &str) -> Option<CcAlgorithm> {
        CcAlgorithm::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// What the network looks like to a controller, and which one to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct CcConfig {
    /// The controller.
    pub algorithm: CcAlgorithm,
    /// The host's line rate in bits per second.
    pub line_rate_bps: u64,
    /// The unloaded round trip to a far peer (the controllers also learn
    /// the smallest RTT they see, per peer).
    pub base_rtt: Duration,
    /// Queueing delay a delay-based controller aims for (zero: one
    /// `base_rtt`, see [`CcConfig::target`]).
    pub target_delay: Duration,
    /// Largest packet on the wire, bytes (the smallest window).
    pub mtu_bytes: u64,
    /// Bytes a receiver-credit sender may send before any grant (zero: an
    /// eighth of the bandwidth-delay product, see
    /// [`CcConfig::unscheduled_bytes`]).
    pub unscheduled: u64,
    /// How far behind its schedule a pacer may catch up at once (zero in
    /// the simulator, whose timers fire on time; over real sockets a
    /// timer fires up to a millisecond late, and a pacer that restarts
    /// its schedule from the late wake-up sends at a fraction of its
    /// rate). See [`pace_from`].
    pub pace_slack: Duration,
}

impl Default for CcConfig {
    fn default() -> Self {
        CcConfig {
            algorithm: CcAlgorithm::None,
            line_rate_bps: 100_000_000_000,
            base_rtt: Duration::from_micros(12),
            target_delay: Duration::ZERO,
            mtu_bytes: 4096 + 64,
            unscheduled: 0,
            pace_slack: Duration::ZERO,
        }
    }
}

impl CcConfig {
    /// The bandwidth-delay product in bytes.
    pub fn bdp(&self) -> u64 {
        let bits =
            u128::from(self.line_rate_bps) * u128::from(self.base_rtt.as_ps()) / 1_000_000_000_000;
        ((bits / 8) as u64).max(self.mtu_bytes)
    }

    /// The queueing delay target: `target_delay`, or one base RTT when
    /// that is zero (UET's reference NSCC aims for the network's RTT).
    pub fn target(&self) -> Duration {
        if self.target_delay.0 > 0 {
            self.target_delay
        } else {
            self.base_rtt
        }
    }

    /// The unscheduled window of a receiver-credit sender: `unscheduled`,
    /// or an eighth of the bandwidth-delay product (at least one packet)
    /// when that is zero.
    pub fn unscheduled_bytes(&self) -> u64 {
        if self.unscheduled > 0 {
            self.unscheduled
        } else {
            (self.bdp() / 8).max(self.mtu_bytes)
        }
    }

    /// A fresh controller of the configured algorithm.
    pub fn build(&self) -> Box<dyn CongestionControl> {
        match self.algorithm {
            CcAlgorithm::None => Box::new(Unlimited),
            CcAlgorithm::Nscc => Box::new(Nscc::new(self)),
            CcAlgorithm::Dcqcn => Box::new(Dcqcn::new(self)),
            CcAlgorithm::Rccc => Box::new(Rccc::new(self)),
        }
    }
}

/// A controller's state as its fingerprint reads it
/// ([`CongestionControl::snapshot`]).
#[cfg(feature = "fingerprint")]
#[derive(Debug, Clone, serde::Serialize)]
pub enum CcSnapshot {
    /// No control.
    Unlimited,
    /// NSCC.
    Nscc(Nscc),
    /// DCQCN.
    Dcqcn(Dcqcn),
    /// Receiver credit.
    Rccc(Rccc),
}

/// A boxed controller serialised as its snapshot; refused (so no state
/// is merged) when it has none.
#[cfg(feature = "fingerprint")]
#[allow(clippy::borrowed_box)] // serde's `serialize_with` passes the field.
pub fn serialize_controller<S: serde::Serializer>(
    cc: &Box<dyn CongestionControl>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    match cc.snapshot() {
        Some(snap) => snap.serialize(s),
        None => Err(serde::ser::Error::custom(format!(
            "the congestion controller {:?} has no snapshot",
            cc.name()
        ))),
    }
}

/// No congestion control: an unlimited window, no pacing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unlimited;

impl CongestionControl for Unlimited {
    fn on_send(&mut self, _: Instant, _: u64) {}
    fn on_ack(&mut self, _: Instant, _: AckSample) {}
    fn on_loss(&mut self, _: Instant, _: u64, _: LossCause) {}
    fn window(&self) -> u64 {
        u64::MAX
    }
    fn next_send_time(&self) -> Option<Instant> {
        None
    }
    fn name(&self) -> &'static str {
        "none"
    }
    #[cfg(feature = "fingerprint")]
    fn snapshot(&self) -> Option<CcSnapshot> {
        Some(CcSnapshot::Unlimited)
    }
}

/// Where a pacer's next gap starts when a packet leaves at `now`: its own
/// schedule (`scheduled`, the previous packet's earliest time) when that
/// is at most `slack` behind, so packets owed while a late timer slept
/// go at once; else `now` minus `slack`.
pub fn pace_from(scheduled: Option<Instant>, now: Instant, slack: Duration) -> Instant {
    let floor = Instant(now.0.saturating_sub(slack.0));
    scheduled.map_or(now, |t| t.max(floor)).min(now)
}

/// The time `bytes` take at `rate_bps`.
pub fn serialization(bytes: u64, rate_bps: u64) -> Duration {
    let rate = u128::from(rate_bps.max(1));
    Duration((u128::from(bytes) * 8 * 1_000_000_000_000 / rate) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_are_named_as_scenario_files_name_them() {
        for a in CcAlgorithm::ALL {
            assert_eq!(CcAlgorithm::parse(a.name()), Some(a));
            assert_eq!(
                a.name(),
                CcConfig {
                    algorithm: a,
                    ..CcConfig::default()
                }
                .build()
                .name()
            );
        }
        let names: Vec<&str> = CcAlgorithm::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(names, ["none", "nscc", "dcqcn", "rccc"]);
        assert_eq!(CcAlgorithm::parse("NSCC"), None);
        assert_eq!(CcAlgorithm::parse(""), None);
    }

    #[test]
    fn targets_and_windows_follow_the_network() {
        // 100 Gb/s × 12 µs = 150,000 B.
        let c = CcConfig::default();
        assert_eq!(c.bdp(), 150_000);
        assert_eq!(c.target(), c.base_rtt, "zero target: one base RTT");
        let set = CcConfig {
            target_delay: Duration::from_nanos(1),
            ..c
        };
        assert_eq!(set.target(), Duration::from_nanos(1));
        assert_eq!(c.unscheduled_bytes(), 150_000 / 8);
        assert_eq!(
            CcConfig {
                unscheduled: 1,
                ..c
            }
            .unscheduled_bytes(),
            1
        );
        // A tiny network: the floors are one packet.
        let tiny = CcConfig {
            line_rate_bps: 1_000_000,
            base_rtt: Duration::from_micros(1),
            ..c
        };
        assert_eq!(tiny.bdp(), tiny.mtu_bytes);
        assert_eq!(tiny.unscheduled_bytes(), tiny.mtu_bytes);
        assert_eq!(
            serialization(1250, 10_000_000_000),
            Duration::from_nanos(1000)
        );
    }

    #[test]
    fn no_controller_never_limits_and_a_window_controller_asks_no_credit() {
        let mut u = Unlimited;
        u.on_send(Instant::ZERO, 1 << 40);
        u.on_loss(Instant::ZERO, 1, LossCause::Timeout);
        assert_eq!(u.window(), u64::MAX);
        assert_eq!(u.next_send_time(), None);
        assert_eq!(u.name(), "none");
        assert_eq!(u.credit(), None);
        // The trait's defaults: no credit scheme, nothing to demand.
        let mut n = CcConfig {
            algorithm: CcAlgorithm::Nscc,
            ..CcConfig::default()
        }
        .build();
        assert_eq!(n.demand(Instant::ZERO, 1 << 20), None);
        assert_eq!(n.demand_due(), None);
        assert_eq!(n.credit(), None);
    }
}
