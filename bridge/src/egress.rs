//! Faults on the datagrams this process sends, with the same rules the
//! simulator applies to its links (`udrma-faults`: loss, Gilbert-Elliott,
//! duplication, reordering, delay with jitter, corruption, rate, down,
//! partitions; targeting by link, direction, flow, opcode, flags, every
//! n-th packet and time window). One fault vocabulary for both backends.
//!
//! A datagram from host `s` to host `d` crosses, in simulator terms, the
//! links of a path; [`Crossings`] says which (for a star: `s`'s link
//! forward, then `d`'s link in reverse; for a plain endpoint talking to
//! anyone: one pseudo-link, index 0). The rules judge each crossing in
//! turn: a drop anywhere loses the datagram, copies and delays add up,
//! corruptions flip bits. Delayed datagrams wait in a bounded hold queue.
//!
//! Decisions come from each rule's seeded stream, so the same seed makes
//! the same decisions for the same sequence of datagrams; which datagrams
//! those are still depends on real timing.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use udrma_faults::{Direction, Model, PacketCtx, Rule, RuleSet, Target, Verdict};
use udrma_proto::{Duration, Flags, Instant, NodeAddr, Packet, HEADER_LEN};

/// Most datagrams held back at once; beyond, held datagrams go out at once
/// (counted), so memory stays bounded whatever the rate.
pub const MAX_HELD: usize = 16_384;

/// The links a datagram to each destination crosses: (link index,
/// direction), in order. Destinations not listed cross link 0 forward.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Crossings {
    by_dst: BTreeMap<NodeAddr, Vec<(u32, Direction)>>,
}

impl Crossings {
    /// Datagrams to `dst` cross `path`.
    pub fn set(&mut self, dst: NodeAddr, path: Vec<(u32, Direction)>) {
        self.by_dst.insert(dst, path);
    }

    fn path(&self, dst: NodeAddr) -> &[(u32, Direction)] {
        const DIRECT: &[(u32, Direction)] = &[(0, Direction::Forward)];
        self.by_dst.get(&dst).map_or(DIRECT, Vec::as_slice)
    }
}

/// The rules of an endpoint's egress, built before it binds.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// The rules, in the order they apply (link names already resolved).
    pub rules: RuleSet,
    /// Which links each destination's datagrams cross.
    pub crossings: Crossings,
}

impl FaultPlan {
    /// The `udrma bridge`/`perf` flags as rules on the one pseudo-link:
    /// `loss` and `dup` probabilities, and `reorder`, the probability that
    /// a datagram is held `reorder_delay` (netem's reorder with
    /// `1 − reorder` sent at once). The error names the flag.
    pub fn from_flags(
        loss: f64,
        dup: f64,
        reorder: f64,
        reorder_delay: std::time::Duration,
        seed: u64,
    ) -> Result<FaultPlan, String> {
        for (name, p) in [("--loss", loss), ("--dup", dup), ("--reorder", reorder)] {
            if !(0.0..1.0).contains(&p) {
                return Err(format!("{name} {p}: must be a probability in [0, 1)"));
            }
        }
        let mut rules = RuleSet::new();
        let mut add = |name: &str, model: Model| -> Result<(), String> {
            let rule = Rule::new(seed, name, Target::any(), model).map_err(|e| e.to_string())?;
            rules.push(rule);
            Ok(())
        };
        if loss > 0.0 {
            add(
                "loss",
                Model::Loss {
                    p: loss,
                    correlation: 0.0,
                },
            )?;
        }
        if dup > 0.0 {
            add(
                "dup",
                Model::Duplicate {
                    p: dup,
                    copies: 1,
                    correlation: 0.0,
                },
            )?;
        }
        if reorder > 0.0 {
            add(
                "reorder",
                Model::Reorder {
                    p: 1.0 - reorder,
                    correlation: 0.0,
                    gap: 1,
                    delay: Duration::from_nanos(
                        u64::try_from(reorder_delay.as_nanos()).unwrap_or(u64::MAX),
                    ),
                    limit: None,
                },
            )?;
        }
        Ok(FaultPlan {
            rules,
            crossings: Crossings::default(),
        })
    }

    /// Whether any rule is installed.
    pub fn is_active(&self) -> bool {
        !self.rules.is_empty()
    }
}

/// Counters of what the egress rules did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EgressStats {
    /// Datagrams dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Datagrams held back (delayed or reordered).
    pub delayed: u64,
    /// Datagrams with bits flipped.
    pub corrupted: u64,
    /// Datagrams sent at once because the hold queue was full.
    pub hold_overflow: u64,
}

/// What to do with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fate {
    /// Copies to send (0: dropped).
    pub copies: u32,
    /// Hold them this long first.
    pub delay: Duration,
}

/// The egress stage: the rules and the datagrams they hold back.
#[derive(Debug)]
pub struct Egress {
    plan: FaultPlan,
    held: BTreeMap<(std::time::Instant, u64), (SocketAddr, usize, Vec<u8>)>,
    seq: u64,
    stats: EgressStats,
}

impl Egress {
    /// An egress stage applying `plan`.
    pub fn new(plan: FaultPlan) -> Egress {
        Egress {
            plan,
            held: BTreeMap::new(),
            seq: 0,
            stats: EgressStats::default(),
        }
    }

    /// Whether any rule is installed.
    pub fn is_active(&self) -> bool {
        self.plan.is_active()
    }

    /// Counters.
    pub fn stats(&self) -> EgressStats {
        self.stats
    }

    /// The rules, each with its own counters (what each dropped).
    pub fn rules(&self) -> &RuleSet {
        &self.plan.rules
    }

    /// Judges one datagram from `src` to `dst` at engine time `now`,
    /// flipping bits in `bytes` if a rule corrupts it.
    pub fn judge(&mut self, now: Instant, src: NodeAddr, dst: NodeAddr, bytes: &mut [u8]) -> Fate {
        let (opcode, flags) = if bytes.len() >= HEADER_LEN {
            let p = Packet::new_unchecked(&*bytes);
            (Some(p.opcode()), p.flags())
        } else {
            (None, Flags::empty())
        };
        let mut fate = Fate {
            copies: 1,
            delay: Duration::ZERO,
        };
        let path: Vec<(u32, Direction)> = self.plan.crossings.path(dst).to_vec();
        for (link, direction) in path {
            let ctx = PacketCtx {
                now,
                link,
                direction,
                src,
                dst,
                opcode,
                flags,
                len: bytes.len() as u32,
            };
            match self.plan.rules.judge(&ctx) {
                (Verdict::Pass, _) => {}
                (Verdict::Drop, _) => {
                    self.stats.dropped += 1;
                    return Fate {
                        copies: 0,
                        delay: Duration::ZERO,
                    };
                }
                (Verdict::Duplicate(n), _) => {
                    self.stats.duplicated += u64::from(n);
                    fate.copies += n;
                }
                (Verdict::Delay(d), _) => {
                    fate.delay = fate.delay + d;
                }
                (Verdict::Corrupt(bits), Some(i)) => {
                    self.stats.corrupted += 1;
                    self.plan.rules.corrupt(i, bytes, bits);
                }
                (Verdict::Corrupt(_), None) => {}
            }
        }
        fate
    }

    /// Holds a datagram to `to` (leaving from socket `path`) until `at`;
    /// gives it back (and counts it) when the hold queue is full and it
    /// should go now.
    pub fn hold(
        &mut self,
        at: std::time::Instant,
        to: SocketAddr,
        path: usize,
        bytes: Vec<u8>,
    ) -> Result<(), Vec<u8>> {
        self.hold_for_nic(at, to, path, bytes)?;
        self.stats.delayed += 1;
        Ok(())
    }

    /// Holds a datagram until `at`, when the engine counts it as leaving
    /// its NIC (`Transmit::leaves_in`: a gather's work, or a packet ahead
    /// of it still gathering). Not a fault: `delayed` does not count it.
    /// Gives it back when the hold queue is full (counted), to go now.
    pub fn hold_for_nic(
        &mut self,
        at: std::time::Instant,
        to: SocketAddr,
        path: usize,
        bytes: Vec<u8>,
    ) -> Result<(), Vec<u8>> {
        if self.held.len() >= MAX_HELD {
            self.stats.hold_overflow += 1;
            return Err(bytes);
        }
        self.seq += 1;
        self.held.insert((at, self.seq), (to, path, bytes));
        Ok(())
    }

    /// When the next held datagram is due.
    pub fn next_release(&self) -> Option<std::time::Instant> {
        self.held.keys().next().map(|(t, _)| *t)
    }

    /// The next held datagram due by `now`.
    pub fn release(&mut self, now: std::time::Instant) -> Option<(SocketAddr, usize, Vec<u8>)> {
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
    fn flags_become_rules_and_bad_flags_are_named() {
        let plan =
            FaultPlan::from_flags(0.1, 0.0, 0.2, std::time::Duration::from_micros(500), 1).unwrap();
        let names: Vec<&str> = plan.rules.rules().iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["loss", "reorder"]);
        let e = FaultPlan::from_flags(1.5, 0.0, 0.0, std::time::Duration::ZERO, 1).unwrap_err();
        assert_eq!(e, "--loss 1.5: must be a probability in [0, 1)");
    }

    #[test]
    fn a_drop_on_any_crossing_loses_the_datagram() {
        // Link 1 is down in reverse: datagrams to h1 cross it, others not.
        let mut rules = RuleSet::new();
        let target = Target::any()
            .links(&["h1-s0"])
            .direction(Direction::Reverse);
        rules.push(Rule::new(1, "down", target, Model::Down).unwrap());
        let names = ["h0-s0", "h1-s0", "h2-s0"];
        rules
            .resolve(
                |n| names.iter().position(|x| *x == n).map(|i| i as u32),
                &names,
            )
            .unwrap();
        let mut crossings = Crossings::default();
        crossings.set(
            NodeAddr(1),
            vec![(0, Direction::Forward), (1, Direction::Reverse)],
        );
        crossings.set(
            NodeAddr(2),
            vec![(0, Direction::Forward), (2, Direction::Reverse)],
        );
        let mut e = Egress::new(FaultPlan { rules, crossings });
        let mut bytes = vec![0u8; 64];
        assert_eq!(
            e.judge(Instant::ZERO, NodeAddr(0), NodeAddr(1), &mut bytes)
                .copies,
            0
        );
        assert_eq!(
            e.judge(Instant::ZERO, NodeAddr(0), NodeAddr(2), &mut bytes)
                .copies,
            1
        );
        assert_eq!(e.stats().dropped, 1);
    }

    #[test]
    fn datagrams_held_for_their_nic_keep_their_order_and_are_not_faults() {
        let mut e = Egress::new(FaultPlan::default());
        let to: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let t0 = std::time::Instant::now();
        let at = t0 + std::time::Duration::from_micros(50);
        // Two datagrams due at the same instant are both kept, in order.
        e.hold_for_nic(at, to, 0, vec![1]).unwrap();
        e.hold_for_nic(at, to, 0, vec![2]).unwrap();
        assert_eq!(e.next_release(), Some(at));
        assert!(e.release(t0).is_none(), "not before it is due");
        assert_eq!(e.release(at).map(|h| h.2), Some(vec![1]));
        assert_eq!(e.release(at).map(|h| h.2), Some(vec![2]));
        assert_eq!(e.stats(), EgressStats::default());
        // A full hold queue gives the datagram back to go now, counted.
        for i in 0..MAX_HELD {
            e.hold_for_nic(at, to, 0, vec![i as u8]).unwrap();
        }
        assert_eq!(e.hold_for_nic(at, to, 0, vec![7]), Err(vec![7]));
        assert_eq!(e.stats().hold_overflow, 1);
        assert_eq!(e.stats().delayed, 0);
    }
}
