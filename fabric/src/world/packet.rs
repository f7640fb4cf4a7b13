//! A packet on the fabric: the datagram (or its header, with a phantom
//! payload elided) and what the world knows about it.

use super::*;

#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Pkt {
    /// Numbers packets in sending order; draws ECN marks
    /// (`port_state::ecn_marks`), so a fingerprint keeps it only where ports
    /// mark.
    #[cfg_attr(
        feature = "fingerprint",
        serde(serialize_with = "super::fingerprint::serial")
    )]
    pub(super) serial: u64,
    pub(super) src: NodeAddr,
    pub(super) dst: NodeAddr,
    pub(super) src_port: u16,
    /// The datagram, or with a phantom payload: header, extension and
    /// ICRC only.
    #[cfg_attr(
        feature = "fingerprint",
        serde(serialize_with = "super::fingerprint::as_bytes")
    )]
    pub(super) bytes: Vec<u8>,
    /// Zero bytes of payload left out of `bytes` (phantom payloads).
    pub(super) elided: u16,
    /// Extra NIC time the sending host's DMA needs for this packet
    /// (gathers, indirect-key translation), in picoseconds, saturating.
    pub(super) nic_work_ps: u32,
    /// A queue above its ECN threshold marked it Congestion Experienced.
    pub(super) ce: bool,
    /// A trimming switch cut its payload off (only the header is left).
    pub(super) trimmed: bool,
    /// The header fields faults and the trace look at, read once while
    /// the bytes are hot in cache (and again after a corruption).
    pub(super) head: Head,
}

/// The header fields faults, the trace and the ladder journal read.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Head {
    pub(super) opcode: Option<Opcode>,
    pub(super) flags: Flags,
    pub(super) msg: u32,
    pub(super) seg: u32,
}

impl Head {
    /// Reads them (all empty when the datagram is shorter than a header).
    pub(super) fn of(bytes: &[u8]) -> Head {
        if bytes.len() < HEADER_LEN {
            return Head {
                opcode: None,
                flags: Flags::empty(),
                msg: 0,
                seg: 0,
            };
        }
        let p = Packet::new_unchecked(bytes);
        Head {
            opcode: Some(p.opcode()),
            flags: p.flags(),
            msg: p.msg_id(),
            seg: p.seg_index(),
        }
    }
}

impl Pkt {
    /// What a switch routes it by: source, destination, UDP source port.
    pub(super) fn route_key(&self) -> (NodeAddr, NodeAddr, u16) {
        (self.src, self.dst, self.src_port)
    }

    /// Length on the wire.
    pub(super) fn len(&self) -> u64 {
        self.bytes.len() as u64 + u64::from(self.elided)
    }

    /// Whether the NIC moves anything of it over PCIe: not for a control
    /// packet (an acknowledgement, NACK, completion notice, credit, demand
    /// or grant: the NIC reads its header and updates its own tables), a
    /// trimmed header or a runt. Data, and the requests and rendezvous
    /// messages host software reads, do cost a DMA.
    pub(super) fn carries_payload(&self) -> bool {
        !self.trimmed && self.head.opcode.is_some_and(|o| !o.is_control())
    }

    /// The NIC's own time for it at `len` bytes, either way: with DMA when
    /// it carries a payload, firmware (and sealing) alone when not.
    pub(super) fn nic_time(&self, cost: &udrma_nic::CostModel, len: u64) -> Duration {
        if self.carries_payload() {
            cost.packet(len as usize)
        } else {
            cost.control(len as usize)
        }
    }

    /// The datagram as the NIC takes it: bytes, and zeros left out.
    pub(super) fn as_datagram(&self) -> Datagram<'_> {
        Datagram {
            bytes: &self.bytes,
            zeros: self.elided,
        }
    }

    /// The whole datagram: `bytes` itself, or rebuilt into `scratch`.
    pub(super) fn datagram<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        if self.elided == 0 {
            return &self.bytes;
        }
        self.as_datagram().write_to(scratch);
        scratch
    }

    /// Puts an elided payload back (before bits are flipped in it).
    pub(super) fn materialise(&mut self) {
        if self.elided > 0 {
            let mut full = Vec::new();
            self.datagram(&mut full);
            self.bytes = full;
            self.elided = 0;
        }
    }

    /// Leaves out an all-zero payload, keeping header, extension and ICRC
    /// in a small buffer; returns the big one for reuse.
    pub(super) fn elide_zero_payload(&mut self) -> Option<Vec<u8>> {
        static ZEROS: [u8; 65_536] = [0; 65_536];
        if self.bytes.len() < HEADER_LEN + udrma_proto::ICRC_LEN {
            return None;
        }
        let payload_len = usize::from(Packet::new_unchecked(&self.bytes[..]).payload_len());
        let end = self.bytes.len() - udrma_proto::ICRC_LEN;
        let start = end.checked_sub(payload_len)?;
        if payload_len == 0 || start < HEADER_LEN || self.bytes[start..end] != ZEROS[..payload_len]
        {
            return None;
        }
        let mut small = Vec::with_capacity(start + udrma_proto::ICRC_LEN);
        small.extend_from_slice(&self.bytes[..start]);
        small.extend_from_slice(&self.bytes[end..]);
        self.elided = payload_len as u16;
        Some(std::mem::replace(&mut self.bytes, small))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram of `len` bytes of kind `op` whose header says
    /// `payload` bytes of payload (the rest of the header zero).
    fn pkt(op: Opcode, len: usize, payload: u16) -> Pkt {
        let mut bytes = vec![0u8; len];
        if len >= HEADER_LEN {
            let mut p = Packet::new_unchecked(&mut bytes[..]);
            p.set_opcode(op);
            p.set_payload_len(payload);
        }
        Pkt {
            serial: 1,
            src: NodeAddr(0),
            dst: NodeAddr(1),
            src_port: 0,
            head: Head::of(&bytes),
            bytes,
            elided: 0,
            nic_work_ps: 0,
            ce: false,
            trimmed: false,
        }
    }

    /// A control packet (an acknowledgement), a trimmed header and a runt
    /// cost the firmware's time alone; data, a phantom payload (elided)
    /// and a rendezvous message host software reads cost their DMA.
    #[test]
    fn only_a_packet_with_a_payload_costs_a_dma() {
        let cost = udrma_nic::CostModel {
            nic_per_packet: Duration::from_nanos(50),
            dma_setup: Duration::from_nanos(50),
            dma_ps_per_byte: 40,
            ..udrma_nic::CostModel::ZERO
        };
        let ack = pkt(Opcode::Ack, HEADER_LEN + 4, 0);
        assert!(!ack.carries_payload());
        assert_eq!(ack.nic_time(&cost, 36), Duration::from_nanos(50));
        let data = pkt(Opcode::Write, HEADER_LEN + 16 + 4096 + 4, 4096);
        assert!(data.carries_payload());
        assert_eq!(
            data.nic_time(&cost, 4148),
            Duration::from_ps(100_000 + 40 * 4148)
        );
        let mut trimmed = pkt(Opcode::Write, HEADER_LEN, 4096);
        trimmed.trimmed = true;
        assert!(!trimmed.carries_payload());
        assert!(!pkt(Opcode::Write, HEADER_LEN - 1, 0).carries_payload());
        assert!(pkt(Opcode::Rts, HEADER_LEN + 32 + 4, 0).carries_payload());
        let mut phantom = pkt(Opcode::Write, HEADER_LEN + 16 + 4, 4096);
        phantom.elided = 4096;
        assert!(phantom.carries_payload());
    }
}
