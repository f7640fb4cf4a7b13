//! Every packet a run lost, by cause: each fault rule by name, tail drops
//! at full queues, a costed NIC's full receive lane, PFC headroom, a
//! paused host's hold buffer, the MTU, a missing route, and the corrupted
//! packets the receiving NICs refused. The causes add up to the total, so
//! a user can tell the drops they asked for from congestion.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::backend::{DropCounts, NicSums};

/// How many packets one fault rule dropped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuleDrops {
    /// The rule's name (`name = ...` in the file, else `fault<i>`).
    pub rule: String,
    /// Packets it dropped.
    pub dropped: u64,
}

/// Every packet lost, by cause (the JSON's `lost`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Drops {
    /// Lost in all: the fabric's drops (`packets.dropped`) and the
    /// malformed datagrams the NICs refused.
    pub total: u64,
    /// Each fault rule, in the file's order, with what it dropped (0 for
    /// a rule that dropped nothing).
    pub faults: Vec<RuleDrops>,
    /// Tail drops at a full egress queue.
    pub queue_full: u64,
    /// A costed NIC's receive lane was full: packets a port sent ahead
    /// of its queue (trimmed headers, control under priority).
    pub nic_lane: u64,
    /// A lossless ingress past its XOFF threshold and headroom (PFC).
    pub pfc_headroom: u64,
    /// A paused host's hold buffer was full.
    pub paused_overflow: u64,
    /// Larger than a link's MTU.
    pub mtu: u64,
    /// No route to the destination (a link down).
    pub no_route: u64,
    /// Delivered, then refused by the receiving NIC because the ICRC,
    /// the version or the length did not hold: corrupted on the way.
    pub refused_corrupt: u64,
}

impl Drops {
    /// The backend's drops by cause and the NICs' refusals.
    pub(crate) fn of(d: DropCounts, nic: &NicSums) -> Drops {
        let mut x = Drops {
            total: 0,
            faults: d
                .by_rule
                .into_iter()
                .map(|(rule, dropped)| RuleDrops { rule, dropped })
                .collect(),
            queue_full: d.queue_full,
            nic_lane: d.nic_lane,
            pfc_headroom: d.pfc_headroom,
            paused_overflow: d.paused_overflow,
            mtu: d.mtu,
            no_route: d.no_route,
            refused_corrupt: nic.refused_malformed,
        };
        x.total = x.causes().map(|(_, n)| n).sum();
        x
    }

    /// Every cause with its count, fault rules first (by name, quoted).
    pub fn causes(&self) -> impl Iterator<Item = (String, u64)> + '_ {
        let rules = self
            .faults
            .iter()
            .map(|r| (format!("fault {:?}", r.rule), r.dropped));
        let fixed = [
            ("queue full", self.queue_full),
            ("NIC lane full", self.nic_lane),
            ("PFC headroom", self.pfc_headroom),
            ("paused host full", self.paused_overflow),
            ("over MTU", self.mtu),
            ("no route", self.no_route),
            ("corrupt, refused by the NIC", self.refused_corrupt),
        ];
        rules.chain(fixed.into_iter().map(|(c, n)| (c.to_string(), n)))
    }

    /// Fault drops, over every rule.
    pub fn by_faults(&self) -> u64 {
        self.faults.iter().map(|r| r.dropped).sum()
    }

    /// The summary's line, when anything was lost: the total and each
    /// cause that lost a packet.
    pub(crate) fn line(&self, s: &mut String) {
        if self.total == 0 {
            return;
        }
        let parts: Vec<String> = self
            .causes()
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        let _ = writeln!(s, "lost        {} = {}", self.total, parts.join(" + "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts() -> DropCounts {
        DropCounts {
            by_rule: vec![("loss".into(), 120), ("reorder".into(), 0)],
            queue_full: 13,
            nic_lane: 2,
            pfc_headroom: 0,
            paused_overflow: 0,
            mtu: 1,
            no_route: 0,
        }
    }

    /// The causes add up to the total, the NICs' refusals included, and
    /// the line names only the causes that lost a packet.
    #[test]
    fn causes_add_up_and_the_line_names_each_that_lost_one() {
        let nic = NicSums {
            refused_malformed: 5,
            ..NicSums::default()
        };
        let d = Drops::of(counts(), &nic);
        assert_eq!(d.total, 120 + 13 + 2 + 1 + 5);
        assert_eq!(d.by_faults(), 120);
        let mut s = String::new();
        d.line(&mut s);
        assert_eq!(
            s,
            "lost        141 = fault \"loss\" 120 + queue full 13 + NIC lane full 2 + over MTU 1 + corrupt, refused by the NIC 5\n"
        );
    }

    /// Nothing lost: no line.
    #[test]
    fn nothing_lost_prints_nothing() {
        let d = Drops::of(DropCounts::default(), &NicSums::default());
        let mut s = String::new();
        d.line(&mut s);
        assert_eq!((d.total, s.as_str()), (0, ""));
    }
}
