//! The egress log: every packet presented to the fault rules at a port,
//! in the order the rules judge them (`udrma check` enumerates faults over
//! it: a rule's n-th packet is the n-th entry its target matches).

use super::*;

/// One packet as the fault rules saw it where it entered a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Egress {
    /// When it was judged.
    pub t: Instant,
    /// Link index (as the topology numbers them).
    pub link: u32,
    /// Which way it crosses the link.
    pub direction: Direction,
    /// Flow source host.
    pub src: NodeAddr,
    /// Flow destination host.
    pub dst: NodeAddr,
    /// Opcode, if the packet parses.
    pub opcode: Option<Opcode>,
    /// Header flags.
    pub flags: Flags,
    /// Message id.
    pub msg: u32,
    /// Segment index.
    pub seg: u32,
}

/// The state fingerprints a run took (`World::log_fingerprints`, feature
/// `fingerprint`; `udrma check --merge-states` reads them beside the
/// egress log): before each event, the number of packets the fault
/// rules had judged, the event's time (ps) and the 128-bit fingerprint
/// of the state the event starts from (times relative to the event's;
/// 0: none taken).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FingerprintLog {
    /// (packets judged before the event, its time in ps, fingerprint).
    pub taken: Vec<(u32, u64, u128)>,
    /// Why fingerprints stopped (a part of the state that cannot say), if
    /// they did.
    pub refused: Option<String>,
    /// Events that begin before this many packets were judged are entered
    /// with fingerprint 0, "none" (the search reads no decision there).
    pub from: u32,
}

impl World {
    /// From now on, records every packet presented to the fault rules
    /// (with or without rules installed); see [`World::egress_log`].
    pub fn log_egress(&mut self) {
        self.egress_log.get_or_insert_with(Vec::new);
    }

    /// The packets presented to the fault rules since
    /// [`World::log_egress`], in judging order (`None` when not asked).
    pub fn egress_log(&self) -> Option<&[Egress]> {
        self.egress_log.as_deref()
    }

    /// Records `pkt` entering the link of `port`, if asked.
    #[inline]
    pub(super) fn note_egress(&mut self, port: PortId, pkt: &Pkt) {
        if let Some(log) = self.egress_log.as_mut() {
            let p = &self.ports[port as usize].hot;
            log.push(Egress {
                t: self.now,
                link: p.link,
                direction: p.direction,
                src: pkt.src,
                dst: pkt.dst,
                opcode: pkt.head.opcode,
                flags: pkt.head.flags,
                msg: pkt.head.msg,
                seg: pkt.head.seg,
            });
        }
    }
}
