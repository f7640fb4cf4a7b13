//! Priority Flow Control frames (IEEE 802.1Qbb): the PAUSE and RESUME a
//! lossless Ethernet link sends upstream, per priority, so that a full
//! ingress buffer stops its sender instead of dropping.
//!
//! A PFC frame is an Ethernet MAC Control frame (EtherType `0x8808`) with
//! opcode `0x0101`, sent to the reserved multicast address
//! `01-80-C2-00-00-01`. After the opcode come a class-enable vector (two
//! bytes; the high byte is reserved and zero, bit `i` of the low byte
//! says whether priority `i`'s time is meant) and eight two-byte pause
//! times, one per priority, in quanta of 512 bit times at the link's
//! speed. A time of zero for an enabled priority resumes it (XON); the
//! largest, `0xFFFF`, pauses it until told otherwise, in practice (XOFF).
//! The frame is padded to Ethernet's 60-byte minimum (64 with the FCS,
//! which captures here leave out). Wireshark decodes it natively, as
//! "MAC Control" with a CBFC class-enable vector (`macc.cbfc.*`).
//!
//! udrma's packets are UDP datagrams; these frames are the one thing on a
//! simulated link that is not (docs/wire-format.md, "PFC frames").

use crate::time::Duration;

/// The MAC Control EtherType.
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// The MAC Control opcode of a PFC frame.
pub const OPCODE_PFC: u16 = 0x0101;
/// Where every PFC frame is sent (a reserved multicast address no bridge
/// forwards).
pub const PFC_DST: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];
/// A PFC frame's bytes on the wire, padded, without the FCS.
pub const FRAME_LEN: usize = 60;
/// The bytes that carry meaning: Ethernet header (14), opcode (2),
/// class-enable vector (2), eight pause times (16). The rest is padding.
pub const MIN_LEN: usize = 34;
/// The longest pause a frame can ask for, in quanta (the XOFF value).
pub const XOFF_QUANTA: u16 = 0xFFFF;
/// Bit times in one pause quantum.
pub const QUANTUM_BITS: u64 = 512;

/// Why bytes are not a PFC frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum PfcError {
    /// Fewer than [`MIN_LEN`] bytes.
    #[error("{0} bytes: a PFC frame has at least 34")]
    Truncated(usize),
    /// Another EtherType than MAC Control.
    #[error("EtherType {0:#06x}: a PFC frame is MAC Control (0x8808)")]
    NotMacControl(u16),
    /// A MAC Control frame with another opcode (`0x0001` is the older,
    /// whole-link PAUSE of 802.3x).
    #[error("MAC Control opcode {0:#06x}: a PFC frame has opcode 0x0101")]
    NotPfc(u16),
    /// The class-enable vector's reserved high byte is not zero.
    #[error("class-enable vector {0:#06x}: its high byte is reserved and must be 0")]
    ReservedBits(u16),
}

/// One PFC frame: who sent it and, per priority, the pause it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct PfcRepr {
    /// The sender's MAC address.
    pub src: [u8; 6],
    /// Bit `i`: priority `i`'s time below is meant.
    pub enabled: u8,
    /// Pause time per priority, in quanta of 512 bit times (0 resumes).
    pub quanta: [u16; 8],
}

impl PfcRepr {
    /// XOFF: pause `priority` (0..=7; higher bits are ignored) for the
    /// longest time a frame can say.
    pub fn pause(src: [u8; 6], priority: u8) -> PfcRepr {
        PfcRepr::one(src, priority, XOFF_QUANTA)
    }

    /// XON: let `priority` (0..=7) send again.
    pub fn resume(src: [u8; 6], priority: u8) -> PfcRepr {
        PfcRepr::one(src, priority, 0)
    }

    fn one(src: [u8; 6], priority: u8, quanta: u16) -> PfcRepr {
        let p = usize::from(priority & 7);
        let mut q = [0; 8];
        q[p] = quanta;
        PfcRepr {
            src,
            enabled: 1 << p,
            quanta: q,
        }
    }

    /// The pause asked for `priority`, if the frame speaks of it: zero
    /// resumes it.
    pub fn quanta_for(&self, priority: u8) -> Option<u16> {
        let p = priority & 7;
        (self.enabled & (1 << p) != 0).then(|| self.quanta[usize::from(p)])
    }

    /// Reads a frame (Ethernet header first; padding and anything after
    /// the 34 meaningful bytes are ignored). The destination address is
    /// not checked: a receiver that takes the frame has decided it is
    /// for it.
    pub fn parse(bytes: &[u8]) -> Result<PfcRepr, PfcError> {
        if bytes.len() < MIN_LEN {
            return Err(PfcError::Truncated(bytes.len()));
        }
        let be = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        let ethertype = be(12);
        if ethertype != ETHERTYPE_MAC_CONTROL {
            return Err(PfcError::NotMacControl(ethertype));
        }
        let opcode = be(14);
        if opcode != OPCODE_PFC {
            return Err(PfcError::NotPfc(opcode));
        }
        let vector = be(16);
        if vector > 0xFF {
            return Err(PfcError::ReservedBits(vector));
        }
        let mut src = [0; 6];
        src.copy_from_slice(&bytes[6..12]);
        let mut quanta = [0; 8];
        for (i, q) in quanta.iter_mut().enumerate() {
            *q = be(18 + 2 * i);
        }
        Ok(PfcRepr {
            src,
            enabled: vector as u8,
            quanta,
        })
    }

    /// The frame's [`FRAME_LEN`] bytes, padding zeroed.
    pub fn to_bytes(&self) -> [u8; FRAME_LEN] {
        let mut b = [0; FRAME_LEN];
        b[..6].copy_from_slice(&PFC_DST);
        b[6..12].copy_from_slice(&self.src);
        b[12..14].copy_from_slice(&ETHERTYPE_MAC_CONTROL.to_be_bytes());
        b[14..16].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        b[16..18].copy_from_slice(&u16::from(self.enabled).to_be_bytes());
        for (i, q) in self.quanta.iter().enumerate() {
            b[18 + 2 * i..20 + 2 * i].copy_from_slice(&q.to_be_bytes());
        }
        b
    }
}

/// How long `quanta` pause quanta last on a link of `bits_per_sec`
/// (512 bit times each; rounded up to the picosecond). Zero for a link
/// of no speed.
pub fn pause_time(quanta: u16, bits_per_sec: u64) -> Duration {
    if bits_per_sec == 0 {
        return Duration::ZERO;
    }
    let bits = u128::from(quanta) * u128::from(QUANTUM_BITS);
    let ps = (bits * 1_000_000_000_000).div_ceil(u128::from(bits_per_sec));
    Duration::from_ps(u64::try_from(ps).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x07];

    /// XOFF on priority 3, byte for byte: header, opcode, vector 0x0008,
    /// 0xFFFF in the fourth time slot, zero padding to 60 bytes.
    #[test]
    fn a_pause_on_priority_three_is_these_bytes() {
        let b = PfcRepr::pause(SRC, 3).to_bytes();
        #[rustfmt::skip]
        let want: [u8; 34] = [
            0x01, 0x80, 0xC2, 0x00, 0x00, 0x01,
            0x02, 0x00, 0x00, 0x00, 0x00, 0x07,
            0x88, 0x08,
            0x01, 0x01,
            0x00, 0x08,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(b[..34], want);
        assert!(b[34..].iter().all(|x| *x == 0));
        assert_eq!(b.len(), 60);
    }

    #[test]
    fn frames_read_back_as_written_and_say_which_priorities_they_mean() {
        let off = PfcRepr::pause(SRC, 3);
        let on = PfcRepr::resume(SRC, 3);
        assert_eq!(PfcRepr::parse(&off.to_bytes()), Ok(off));
        assert_eq!(PfcRepr::parse(&on.to_bytes()), Ok(on));
        assert_eq!(off.quanta_for(3), Some(XOFF_QUANTA));
        assert_eq!(on.quanta_for(3), Some(0));
        // Priority 2's time is zero in both, but neither speaks of it.
        assert_eq!(off.quanta_for(2), None);
        // Two priorities in one frame.
        let both = PfcRepr {
            src: SRC,
            enabled: 0b1000_0001,
            quanta: [5, 0, 0, 0, 0, 0, 0, 9],
        };
        let back = PfcRepr::parse(&both.to_bytes()).unwrap();
        assert_eq!((back.quanta_for(0), back.quanta_for(7)), (Some(5), Some(9)));
        // Every priority at once (vector 0x00FF, the largest allowed).
        let all = PfcRepr {
            src: SRC,
            enabled: 0xFF,
            quanta: [XOFF_QUANTA; 8],
        };
        assert_eq!(PfcRepr::parse(&all.to_bytes()), Ok(all));
    }

    #[test]
    fn bytes_that_are_not_a_pfc_frame_say_why() {
        let good = PfcRepr::pause(SRC, 0).to_bytes();
        assert_eq!(PfcRepr::parse(&good[..33]), Err(PfcError::Truncated(33)));
        // The 34 meaningful bytes are enough; padding is not required.
        assert_eq!(PfcRepr::parse(&good[..MIN_LEN]), Ok(PfcRepr::pause(SRC, 0)));
        let mut ip = good;
        ip[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(PfcRepr::parse(&ip), Err(PfcError::NotMacControl(0x0800)));
        let mut link_pause = good;
        link_pause[14..16].copy_from_slice(&[0x00, 0x01]);
        assert_eq!(PfcRepr::parse(&link_pause), Err(PfcError::NotPfc(0x0001)));
        let mut reserved = good;
        reserved[16] = 0x01;
        assert_eq!(
            PfcRepr::parse(&reserved),
            Err(PfcError::ReservedBits(0x0101))
        );
        assert_eq!(
            PfcError::NotPfc(1).to_string(),
            "MAC Control opcode 0x0001: a PFC frame has opcode 0x0101"
        );
        // Any prefix of any bytes: an answer, never a panic.
        for n in 0..=good.len() {
            let _ = PfcRepr::parse(&good[..n]);
        }
    }

    #[test]
    fn a_quantum_is_512_bit_times_at_the_links_speed() {
        // 512 bits at 100 Gb/s: 5.12 ns.
        assert_eq!(pause_time(1, 100_000_000_000), Duration::from_ps(5_120));
        // The longest pause at 100 Gb/s: 65,535 × 5.12 ns = 335.5392 us.
        assert_eq!(
            pause_time(XOFF_QUANTA, 100_000_000_000),
            Duration::from_ps(335_539_200)
        );
        // At 10 Gb/s, ten times as long; at 3 b/s, rounded up.
        assert_eq!(pause_time(1, 10_000_000_000), Duration::from_ps(51_200));
        assert_eq!(pause_time(1, 3), Duration::from_ps(170_666_666_666_667));
        assert_eq!(pause_time(7, 0), Duration::ZERO);
    }
}
