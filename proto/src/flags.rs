//! The 16-bit flags field of the common header.

use core::fmt;

/// Header flags (bit set, carried big-endian at bytes 2..4).
///
/// Bits not named here are reserved: sent as zero, kept (and shown) on
/// receipt so a newer sender's bits are never silently lost.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Hash, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Flags(pub u16);

impl Flags {
    /// The sender wants this packet acknowledged.
    pub const ACK_REQ: Flags = Flags(1 << 0);
    /// First packet of an operation: it registers the operation in the
    /// receiver's registry (the patent's type field).
    pub const FIRST: Flags = Flags(1 << 1);
    /// Last packet of an operation.
    pub const LAST: Flags = Flags(1 << 2);
    /// Last segment of a large transfer: its completion is the one local
    /// completion of the original request.
    pub const LAST_SEGMENT: Flags = Flags(1 << 3);
    /// This packet is a retransmission (Karn's rule: no RTT sample from it).
    pub const RETRANSMIT: Flags = Flags(1 << 4);
    /// The `credits` header field carries a piggybacked credit update.
    pub const CREDITS_VALID: Flags = Flags(1 << 5);
    /// The receiver should raise an event on arrival (solicited event).
    pub const SOLICITED: Flags = Flags(1 << 6);
    /// ECN echo, on an acknowledgement (ACK, SACK, READ response): the data
    /// packets it acknowledges arrived with Congestion Experienced in their
    /// IP header. A coalesced SACK never mixes marked and unmarked packets,
    /// so a sender can count exactly the fraction of its bytes that were
    /// marked (a receiver splits its bitmap in two when it must).
    pub const ECE: Flags = Flags(1 << 7);
    /// On a READ request: only the response segments `seg_index ..
    /// seg_index + seg_count` are wanted (a retry after some arrived);
    /// without it, the whole range. Other kinds send it as zero.
    pub const PARTIAL: Flags = Flags(1 << 8);
    /// On a COMPLETION of a one-packet operation: it is also that packet's
    /// acknowledgement (the receiver sends no ACK or SACK for it), so the
    /// sender takes a round-trip sample from it; with `ECE`, the packet
    /// arrived CE-marked. Other kinds send it as zero.
    pub const ACKS: Flags = Flags(1 << 9);
    /// On an ACK: the packet it acknowledges had arrived before, and this
    /// copy was dropped as a duplicate (after TCP's DSACK, RFC 2883). The
    /// sender learns that a copy it sent again was not needed, when the
    /// copy itself overtook the late first one and timing alone cannot
    /// tell. Other kinds send it as zero.
    pub const DUP: Flags = Flags(1 << 10);
    /// The `credits` header field echoes the newest credit count the
    /// sender has seen from the receiver, instead of advertising its own
    /// (never set together with `CREDITS`). A peer whose newest count rode
    /// on a packet the wire lost learns it from the echo and sends it
    /// again (docs/wire-format.md, "Credit echo").
    pub const CREDITS_ECHO: Flags = Flags(1 << 11);
    /// On a WRITE or SEND packet: the operation's incarnation, which flips
    /// each time its sender sends the whole operation again because the
    /// receiver lost its registration (a `RNR` NACK with detail
    /// [`RNR_LOST`](crate::RNR_LOST)). A receiver that lost an
    /// operation's registration refuses every later packet of the
    /// incarnation it lost, its first packet too, and registers the next
    /// one's. Other kinds send it as zero.
    pub const INCARNATION: Flags = Flags(1 << 12);

    /// Every named flag with its short name, in bit order.
    pub const NAMED: [(Flags, &'static str); 13] = [
        (Flags::ACK_REQ, "ACK_REQ"),
        (Flags::FIRST, "FIRST"),
        (Flags::LAST, "LAST"),
        (Flags::LAST_SEGMENT, "LAST_SEG"),
        (Flags::RETRANSMIT, "RETX"),
        (Flags::CREDITS_VALID, "CREDITS"),
        (Flags::SOLICITED, "SOLICITED"),
        (Flags::ECE, "ECE"),
        (Flags::PARTIAL, "PARTIAL"),
        (Flags::ACKS, "ACKS"),
        (Flags::DUP, "DUP"),
        (Flags::CREDITS_ECHO, "ECHO"),
        (Flags::INCARNATION, "INC"),
    ];

    /// No flag set.
    pub const fn empty() -> Flags {
        Flags(0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// `self` with the bits of `other` set.
    #[must_use]
    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// `self` with the bits of `other` cleared.
    #[must_use]
    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }

    /// Sets or clears the bits of `other`.
    pub fn set(&mut self, other: Flags, on: bool) {
        *self = if on {
            self.with(other)
        } else {
            self.without(other)
        };
    }
}

impl core::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.with(rhs)
    }
}

impl core::ops::BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        *self = self.with(rhs);
    }
}

/// `FIRST|ACK_REQ`, `-` when empty, unknown bits as `0x....`.
impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("-");
        }
        let mut rest = self.0;
        let mut first = true;
        for (flag, name) in Flags::NAMED {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !flag.0;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{rest:#06x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_known_and_unknown_bits() {
        assert_eq!(Flags::empty().to_string(), "-");
        assert_eq!((Flags::FIRST | Flags::ACK_REQ).to_string(), "ACK_REQ|FIRST");
        assert_eq!(Flags(0x8002).to_string(), "FIRST|0x8000");
        assert_eq!(Flags(0x1002).to_string(), "FIRST|INC");
    }

    #[test]
    fn set_and_clear() {
        let mut f = Flags::empty();
        f.set(Flags::LAST, true);
        assert!(f.contains(Flags::LAST));
        f.set(Flags::LAST, false);
        assert_eq!(f, Flags::empty());
    }
}
