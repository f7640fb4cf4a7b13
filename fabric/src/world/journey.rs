//! Packet journeys between two watched hosts, for ladder diagrams.

use super::*;

/// One packet between two watched hosts, from creation to its fate (for
/// ladder diagrams).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Journey {
    /// Packet serial.
    pub serial: u64,
    /// Sender.
    pub src: NodeAddr,
    /// Receiver.
    pub dst: NodeAddr,
    /// When the NIC sent it.
    pub sent: Instant,
    /// Opcode byte (0 if unreadable).
    pub opcode: u8,
    /// Header flags.
    pub flags: u16,
    /// Message id.
    pub msg: u32,
    /// Segment index.
    pub seg: u32,
    /// When it reached the receiver's NIC.
    pub arrived: Option<Instant>,
    /// Dropped: when and why.
    pub dropped: Option<(Instant, DropReason)>,
    /// A fault's copy of this packet serial.
    pub copy_of: Option<u64>,
    /// A fault flipped bits in it.
    pub corrupted: bool,
}

impl World {
    /// Records the journey of every packet between `a` and `b` (either
    /// way) from now on; see [`World::journeys`].
    pub fn watch(&mut self, a: NodeAddr, b: NodeAddr) {
        self.watch = Some((a, b));
    }

    /// The journeys recorded since [`World::watch`], in send order.
    pub fn journeys(&self) -> &[Journey] {
        &self.journal
    }

    pub(super) fn watched(&self, src: NodeAddr, dst: NodeAddr) -> bool {
        self.watch
            .is_some_and(|(a, b)| (src == a && dst == b) || (src == b && dst == a))
    }

    pub(super) fn journal_new(&mut self, pkt: &Pkt, copy_of: Option<u64>) {
        if !self.watched(pkt.src, pkt.dst) {
            return;
        }
        let Head {
            opcode,
            flags,
            msg,
            seg,
        } = pkt.head;
        self.journal_index.insert(pkt.serial, self.journal.len());
        self.journal.push(Journey {
            serial: pkt.serial,
            src: pkt.src,
            dst: pkt.dst,
            sent: self.now,
            opcode: opcode.map_or(0, u8::from),
            flags: flags.bits(),
            msg,
            seg,
            arrived: None,
            dropped: None,
            copy_of,
            corrupted: false,
        });
    }

    pub(super) fn journal_mut(&mut self, serial: u64) -> Option<&mut Journey> {
        let i = *self.journal_index.get(&serial)?;
        self.journal.get_mut(i)
    }
}
