//! One packet of every kind, with plausible field values: the content of
//! the `all_packets` example capture, the CLI's wire demo and the decoder
//! tests (Wireshark dissector included).

use std::io::Write;

use crate::addr::NodeAddr;
use crate::encap::{encapsulate, UdpEndpoint};
use crate::flags::Flags;
use crate::opcode::{Opcode, Protocol, ReduceOp, ReduceType, Syndrome};
use crate::packet::ICRC_LEN;
use crate::pcap::{CaptureError, PcapSink};
use crate::repr::{Body, ReduceHeader, Rendezvous, Repr};
use crate::DEFAULT_UDP_PORT;

/// UDP source port of every sample frame.
pub const SAMPLE_SRC_PORT: u16 = 49_152;
/// Gap between consecutive sample frames in the capture.
pub const SAMPLE_SPACING_NS: u64 = 1_000;

const DATA: &[u8] = b"udrma: RDMA over UDP, one packet at a time.";

/// Six big-endian doubles: 1.5, 2.5, -3.0, 0.25, 1000.0, 42.0 (48 B, one
/// descriptor's worth).
const REDUCE_F64: &[u8] = &[
    0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x40, 0x04, 0, 0, 0, 0, 0, 0, 0xc0, 0x08, 0, 0, 0, 0, 0, 0, 0x3f,
    0xd0, 0, 0, 0, 0, 0, 0, 0x40, 0x8f, 0x40, 0, 0, 0, 0, 0, 0x40, 0x45, 0, 0, 0, 0, 0, 0,
];
/// Two i32 values (-7, 12), then their locations (3, 9).
const REDUCE_MAXLOC: &[u8] = &[
    0xff, 0xff, 0xff, 0xf9, 0, 0, 0, 0x0c, 0, 0, 0, 3, 0, 0, 0, 9,
];

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
    let mut v = data_kinds(total);
    for (i, syndrome) in Syndrome::ALL.into_iter().enumerate() {
        v.push(header(
            Flags::empty(),
            i as u32 % 4,
            4,
            Body::Nack {
                syndrome,
                detail: 0x11,
            },
        ));
    }
    v.extend(messaging_kinds(total));
    v.extend(reduce_kinds());
    // Distinct op numbers (slot = position, generation 1) so a decoder that
    // reads the wrong packet's field is caught.
    for (slot, r) in v.iter_mut().enumerate() {
        r.op_num = 0x0001_0000 | slot as u32;
    }
    v
}

/// The data kinds at each position of a message, READ, SEND and the
/// acknowledgements (`total`: a message's length).
fn data_kinds(total: u32) -> Vec<Repr<'static>> {
    vec![
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
    ]
}

/// Completions, credits, rendezvous of each protocol, the socket
/// handshake and the grants (`total`: a message's length).
fn messaging_kinds(total: u32) -> Vec<Repr<'static>> {
    let rdv = |protocol, addr, rkey| Rendezvous {
        protocol,
        tag: 99,
        length: 65_536,
        addr,
        rkey,
        seq: 5,
    };
    vec![
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
                seq: 5,
            },
        ),
        header(
            Flags::empty(),
            0,
            1,
            Body::Hello(crate::Hello {
                reply: false,
                max_payload: 4096,
                nonce: 0x0bad_cafe,
                region_addr: 0x50_0000,
                region_len: 1 << 26,
                rkey: 0x55,
                ports: 4,
                retry: false,
                full: false,
                cookie: [0xc0; 16],
            }),
        ),
        header(
            Flags::empty(),
            0,
            1,
            Body::Demand {
                wanted: 1 << 20,
                free: 2 * 4214,
            },
        ),
        header(Flags::empty(), 0, 1, Body::Grant { granted: 3 * 4214 }),
    ]
}

/// The reduction kinds: operands of two types, a broadcast, an ACK.
fn reduce_kinds() -> Vec<Repr<'static>> {
    let reduce = |op, ty, count, first| ReduceHeader {
        op,
        ty,
        count,
        branch: 2,
        fan_in: 3,
        tree: 1,
        level: 0,
        first,
    };
    vec![
        header(
            Flags::empty(),
            0,
            2,
            Body::Reduce {
                hdr: reduce(ReduceOp::Sum, ReduceType::F64, 6, 0),
                data: REDUCE_F64,
            },
        ),
        header(
            Flags::empty(),
            1,
            2,
            Body::Reduce {
                hdr: reduce(ReduceOp::MaxLoc, ReduceType::I32, 2, 6),
                data: REDUCE_MAXLOC,
            },
        ),
        header(
            Flags::empty(),
            0,
            2,
            Body::ReduceBcast {
                hdr: ReduceHeader {
                    level: 1,
                    ..reduce(ReduceOp::Sum, ReduceType::F64, 6, 0)
                },
                data: REDUCE_F64,
            },
        ),
        header(
            Flags::empty(),
            0,
            2,
            Body::ReduceAck {
                acked: Opcode::Reduce,
                branch: 2,
                tree: 1,
            },
        ),
    ]
}

/// Which way a sample travels: requests and data from `h0` to `h1`,
/// responses and acknowledgements back.
pub fn direction(repr: &Repr<'_>) -> (NodeAddr, NodeAddr) {
    match repr.opcode() {
        Opcode::ReadResponse
        | Opcode::Ack
        | Opcode::SelectiveAck
        | Opcode::Nack
        | Opcode::Completion
        | Opcode::Cts
        | Opcode::Grant
        | Opcode::ReduceBcast
        | Opcode::ReduceAck => (NodeAddr(1), NodeAddr(0)),
        _ => (NodeAddr(0), NodeAddr(1)),
    }
}

/// One frame of the sample capture.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct SampleFrame {
    /// The packet (for the corrupted frame: the packet before corruption).
    pub repr: Repr<'static>,
    /// Whether the ICRC of this frame was deliberately broken.
    pub corrupted: bool,
}

/// Writes [`every_kind`] as Ethernet/IPv4/UDP frames to a nanosecond pcap,
/// 1 µs apart, followed by one WRITE whose ICRC is deliberately wrong, and
/// returns what it wrote in order.
pub fn write_capture<W: Write>(out: W) -> Result<Vec<SampleFrame>, CaptureError> {
    let mut frames: Vec<SampleFrame> = every_kind()
        .into_iter()
        .map(|repr| SampleFrame {
            repr,
            corrupted: false,
        })
        .collect();
    frames.push(SampleFrame {
        repr: frames[0].repr,
        corrupted: true,
    });
    let mut sink = PcapSink::new(out)?;
    let mut datagram = Vec::new();
    let mut frame = Vec::new();
    for (i, sample) in frames.iter().enumerate() {
        sample
            .repr
            .emit_vec(&mut datagram)
            .expect("sample packets fit the wire format");
        if sample.corrupted {
            let n = datagram.len();
            datagram[n - ICRC_LEN] ^= 0xff;
        }
        let (from, to) = direction(&sample.repr);
        encapsulate(
            &UdpEndpoint::node(from, SAMPLE_SRC_PORT),
            &UdpEndpoint::node(to, DEFAULT_UDP_PORT),
            &datagram,
            &mut frame,
        )
        .expect("sample packets fit one IPv4 packet");
        sink.write_frame((i as u64 + 1) * SAMPLE_SPACING_NS, &frame)?;
    }
    Ok(frames)
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
    fn capture_holds_every_sample_and_one_corrupted_frame() {
        let mut bytes = Vec::new();
        let frames = write_capture(&mut bytes).unwrap();
        let read: Vec<_> = crate::pcap::PcapSource::new(&bytes[..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(read.len(), frames.len());
        let bad: Vec<_> = read
            .iter()
            .filter(|f| {
                let d = crate::encap::decapsulate(&f.data).unwrap();
                Repr::parse_bytes(d.payload).is_err()
            })
            .collect();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].time_ns, read.len() as u64 * SAMPLE_SPACING_NS);
    }

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
