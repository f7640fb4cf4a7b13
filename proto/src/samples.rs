//! One packet of every kind, with plausible field values: the content of
//! the `all_packets` example capture, the CLI's wire demo and the decoder
//! tests (Wireshark dissector included).

use crate::flags::Flags;
use crate::opcode::{Protocol, Syndrome};
use crate::repr::{Body, Rendezvous, Repr};

const DATA: &[u8] = b"udrma: RDMA over UDP, one packet at a time.";

fn header(flags: Flags, seg_index: u32, seg_count: u32, body: Body<'static>) -> Repr<'static> {
    Repr {
        flags,
        src_ep: 1,
        dst_ep: 2,
        op_num: 0x0001_0003,
        msg_id: 7,
        seg_index,
        seg_count,
        credits: 0,
        epoch: 0x2a,
        body,
    }
}

fn write(flags: Flags, seg_index: u32, total_len: u32) -> Repr<'static> {
    header(
        flags | Flags::ACK_REQ,
        seg_index,
        4,
        Body::Write {
            remote_addr: 0x10_0000 + u64::from(seg_index) * DATA.len() as u64,
            rkey: 0x11,
            total_len,
            data: DATA,
        },
    )
}

/// Every packet kind (data kinds at each position, every NACK syndrome,
/// every rendezvous protocol), in a fixed order.
pub fn every_kind() -> Vec<Repr<'static>> {
    let total = 4 * DATA.len() as u32;
    let rdv = |protocol, addr, rkey| Rendezvous {
        protocol,
        tag: 99,
        length: 65_536,
        addr,
        rkey,
    };
    let mut v = vec![
        write(Flags::FIRST, 0, total),
        write(Flags::empty(), 1, 0),
        write(Flags::LAST, 3, 0).with_flags(Flags::RETRANSMIT),
        Repr {
            seg_count: 1,
            ..write(
                Flags::FIRST | Flags::LAST | Flags::LAST_SEGMENT | Flags::SOLICITED,
                0,
                DATA.len() as u32,
            )
        },
        header(
            Flags::FIRST | Flags::LAST | Flags::ACK_REQ,
            0,
            1,
            Body::ReadRequest {
                remote_addr: 0x20_0000,
                rkey: 0x22,
                length: 4096,
            },
        ),
        header(
            Flags::FIRST | Flags::LAST,
            0,
            1,
            Body::ReadResponse {
                offset: 0,
                total_len: DATA.len() as u32,
                data: DATA,
            },
        ),
        header(
            Flags::FIRST | Flags::LAST | Flags::ACK_REQ | Flags::CREDITS_VALID,
            0,
            1,
            Body::Send {
                offset: 0,
                total_len: DATA.len() as u32,
                data: DATA,
            },
        )
        .with_credits(3),
        header(Flags::empty(), 2, 4, Body::Ack),
        header(
            Flags::empty(),
            0,
            4,
            Body::SelectiveAck {
                base: 0,
                bitmap: 0b1011,
            },
        ),
    ];
    for (i, syndrome) in Syndrome::ALL.into_iter().enumerate() {
        v.push(header(
            Flags::empty(),
            i as u32,
            4,
            Body::Nack {
                syndrome,
                detail: 0x11,
            },
        ));
    }
    v.extend([
        header(
            Flags::empty(),
            0,
            4,
            Body::Completion {
                status: 0,
                length: total,
            },
        ),
        header(
            Flags::SOLICITED,
            0,
            1,
            Body::DataArrived {
                addr: 0x10_0000,
                length: total,
                immediate: 0xfeed,
            },
        ),
        header(Flags::CREDITS_VALID, 0, 0, Body::Credit).with_credits(16),
        header(
            Flags::CREDITS_VALID,
            0,
            1,
            Body::Rts(rdv(Protocol::R3, 0, 0)),
        )
        .with_credits(1),
        header(
            Flags::empty(),
            0,
            1,
            Body::Rts(rdv(Protocol::Rget, 0x30_0000, 0x33)),
        ),
        header(
            Flags::empty(),
            0,
            1,
            Body::Cts(rdv(Protocol::Rput, 0x40_0000, 0x44)),
        ),
        header(
            Flags::empty(),
            0,
            1,
            Body::Fin {
                protocol: Protocol::Rput,
                tag: 99,
            },
        ),
    ]);
    v
}

impl Repr<'_> {
    /// `self` with `flags` added.
    #[must_use]
    pub fn with_flags(mut self, flags: Flags) -> Self {
        self.flags |= flags;
        self
    }

    /// `self` with the credits field set.
    #[must_use]
    pub fn with_credits(mut self, credits: u16) -> Self {
        self.credits = credits;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::Opcode;

    #[test]
    fn every_opcode_is_sampled_and_round_trips() {
        let all = every_kind();
        for op in Opcode::ALL {
            assert!(all.iter().any(|r| r.opcode() == op), "{op} missing");
        }
        for r in &all {
            let bytes = r.to_vec().unwrap();
            assert_eq!(Repr::parse_bytes(&bytes).unwrap(), *r);
        }
    }
}
