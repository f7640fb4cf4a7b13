//! `Repr`: the typed form of a udrma packet, with `parse`, `emit` and
//! `buffer_len`.
//!
//! Children:
//! - `ext`: Byte ranges inside each opcode's extension header (offsets from the end of the common header)

use core::fmt;

use crate::error::{EmitError, Error};
use crate::flags::Flags;
use crate::icrc::{icrc, icrc_zeros};
use crate::opcode::{Opcode, Protocol, ReduceOp, ReduceType, Syndrome};
use crate::packet::{Packet, HEADER_LEN, ICRC_LEN, VERSION};

pub mod ext;

/// The fields of an RTS or CTS.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Rendezvous {
    /// Protocol the sender proposes (RTS) or the receiver accepts (CTS).
    pub protocol: Protocol,
    /// Message tag.
    pub tag: u32,
    /// Message length in bytes.
    pub length: u64,
    /// Buffer address offered for RDMA (0 when none).
    pub addr: u64,
    /// Remote key of that buffer (0 when none).
    pub rkey: u32,
    /// The sending side's message sequence number: the same in the RTS,
    /// the CTS that answers it and the FIN that ends it.
    pub seq: u32,
}

/// The fields of a HELLO: who a peer is and which region it offers.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Hello {
    /// This HELLO answers one.
    pub reply: bool,
    /// The sender's largest data payload per packet.
    pub max_payload: u16,
    /// Chosen by the asker, echoed by the reply.
    pub nonce: u32,
    /// Address of the announced region (0 with no region).
    pub region_addr: u64,
    /// Length of the announced region (0 with no region).
    pub region_len: u64,
    /// Remote key of the announced region (0 with no region).
    pub rkey: u32,
    /// How many consecutive UDP source ports, starting at this HELLO's
    /// own, the sender's datagrams may come from (multipath entropy over
    /// real sockets; 0 or 1: this port only).
    pub ports: u16,
    /// A reply that admits no one yet: the asker must ask again with
    /// `cookie` echoed (stateless address validation, as QUIC's Retry).
    pub retry: bool,
    /// A reply that refuses: the answering host's peer table is full.
    pub full: bool,
    /// The admission cookie (all zeros: none): the one to echo in a
    /// retry, the one echoed in an ask.
    pub cookie: [u8; 16],
}

impl Hello {
    /// An ask or a reply with every optional field empty.
    pub fn new(reply: bool, max_payload: u16, nonce: u32) -> Hello {
        Hello {
            reply,
            max_payload,
            nonce,
            region_addr: 0,
            region_len: 0,
            rkey: 0,
            ports: 0,
            retry: false,
            full: false,
            cookie: [0; 16],
        }
    }
}

/// The fixed fields of a REDUCE or REDUCE_BCAST packet. The header's
/// `msg_id` carries the collective's sequence number on its tree,
/// `seg_index`/`seg_count` the chunk (one descriptor's worth of data) and
/// the number of chunks.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct ReduceHeader {
    /// ALU operation.
    pub op: ReduceOp,
    /// Element type.
    pub ty: ReduceType,
    /// Elements in this packet.
    pub count: u8,
    /// REDUCE: the sender's index among its parent's children;
    /// REDUCE_BCAST: the receiving child's index.
    pub branch: u8,
    /// Children of the parent.
    pub fan_in: u16,
    /// Reduction tree id.
    pub tree: u16,
    /// The sender's height in the tree (0 = leaf).
    pub level: u8,
    /// Index of the first element carried.
    pub first: u32,
}

impl ReduceHeader {
    /// Payload bytes `count` elements take: the values, then a 32-bit
    /// location per element for MINLOC/MAXLOC. `None` for an unknown type.
    pub fn payload_len(&self) -> Option<usize> {
        let w = self.ty.width()?;
        let loc = if self.op.has_locations() { 4 } else { 0 };
        Some(usize::from(self.count) * (w + loc))
    }
}

/// The opcode-specific part of a packet.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Body<'a> {
    /// RDMA WRITE data.
    Write {
        /// Receiver address of this packet's first payload byte.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Whole operation length, or 0 when not described.
        total_len: u32,
        /// Data.
        data: &'a [u8],
    },
    /// RDMA READ request.
    ReadRequest {
        /// Responder address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Bytes to read.
        length: u32,
    },
    /// RDMA READ response data.
    ReadResponse {
        /// Offset within the read.
        offset: u32,
        /// Whole read length.
        total_len: u32,
        /// Data.
        data: &'a [u8],
    },
    /// SEND data.
    Send {
        /// Offset within the message.
        offset: u32,
        /// Whole message length.
        total_len: u32,
        /// Data.
        data: &'a [u8],
    },
    /// Per-packet ACK (the header names the packet).
    Ack,
    /// Coalesced selective ACK for the header's message id.
    SelectiveAck {
        /// Segment index of bitmap bit 0.
        base: u32,
        /// Received segments.
        bitmap: u64,
    },
    /// Negative acknowledgement.
    Nack {
        /// Why.
        syndrome: Syndrome,
        /// Syndrome-specific detail.
        detail: u32,
    },
    /// Receiver-side completion notice.
    Completion {
        /// 0 = success, otherwise a syndrome code.
        status: u8,
        /// Bytes placed.
        length: u32,
    },
    /// Data-arrived notification.
    DataArrived {
        /// Where the data starts at the receiver.
        addr: u64,
        /// How many bytes.
        length: u32,
        /// Immediate value.
        immediate: u32,
    },
    /// CREDIT / NOOP (the credits are in the header).
    Credit,
    /// Request-to-send.
    Rts(Rendezvous),
    /// Clear-to-send.
    Cts(Rendezvous),
    /// Rendezvous finish.
    Fin {
        /// Protocol being finished.
        protocol: Protocol,
        /// Message tag.
        tag: u32,
        /// Message sequence number of the RTS it finishes.
        seq: u32,
    },
    /// HELLO: introduction and region announcement.
    Hello(Hello),
    /// DEMAND: what a sender under a receiver-credit controller wants.
    Demand {
        /// Bytes it has wanted to send to this receiver (cumulative).
        wanted: u64,
        /// Of those, bytes sent unscheduled (cumulative).
        free: u64,
    },
    /// GRANT: credit a receiver gives a sender.
    Grant {
        /// Bytes granted to this sender (cumulative).
        granted: u64,
    },
    /// Reduce data going up a tree.
    Reduce {
        /// Fixed fields.
        hdr: ReduceHeader,
        /// `count` big-endian values, then (MINLOC/MAXLOC) `count`
        /// big-endian 32-bit locations.
        data: &'a [u8],
    },
    /// A reduction's result going down a tree.
    ReduceBcast {
        /// Fixed fields.
        hdr: ReduceHeader,
        /// As for [`Body::Reduce`].
        data: &'a [u8],
    },
    /// Acknowledges one REDUCE or REDUCE_BCAST (named by the header's
    /// `msg_id` and `seg_index` and these fields).
    ReduceAck {
        /// Opcode of the packet acknowledged.
        acked: Opcode,
        /// Its branch field.
        branch: u8,
        /// Its tree id.
        tree: u16,
    },
}

impl<'a> Body<'a> {
    /// The opcode of this body.
    pub const fn opcode(&self) -> Opcode {
        match self {
            Body::Write { .. } => Opcode::Write,
            Body::ReadRequest { .. } => Opcode::ReadRequest,
            Body::ReadResponse { .. } => Opcode::ReadResponse,
            Body::Send { .. } => Opcode::Send,
            Body::Ack => Opcode::Ack,
            Body::SelectiveAck { .. } => Opcode::SelectiveAck,
            Body::Nack { .. } => Opcode::Nack,
            Body::Completion { .. } => Opcode::Completion,
            Body::DataArrived { .. } => Opcode::DataArrived,
            Body::Credit => Opcode::Credit,
            Body::Rts(_) => Opcode::Rts,
            Body::Cts(_) => Opcode::Cts,
            Body::Fin { .. } => Opcode::Fin,
            Body::Hello(_) => Opcode::Hello,
            Body::Demand { .. } => Opcode::Demand,
            Body::Grant { .. } => Opcode::Grant,
            Body::Reduce { .. } => Opcode::Reduce,
            Body::ReduceBcast { .. } => Opcode::ReduceBcast,
            Body::ReduceAck { .. } => Opcode::ReduceAck,
        }
    }

    /// The data payload (empty for kinds without data).
    pub const fn data(&self) -> &'a [u8] {
        match self {
            Body::Write { data, .. }
            | Body::ReadResponse { data, .. }
            | Body::Send { data, .. }
            | Body::Reduce { data, .. }
            | Body::ReduceBcast { data, .. } => data,
            _ => &[],
        }
    }
}

/// A parsed udrma packet.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Repr<'a> {
    /// Header flags.
    pub flags: Flags,
    /// Source endpoint (VI).
    pub src_ep: u16,
    /// Destination endpoint (VI).
    pub dst_ep: u16,
    /// DMA OP table number.
    pub op_num: u32,
    /// Message id.
    pub msg_id: u32,
    /// Packet index within the operation.
    pub seg_index: u32,
    /// Packets in the operation.
    pub seg_count: u32,
    /// Piggybacked credit update.
    pub credits: u16,
    /// Sender's boot epoch.
    pub epoch: u32,
    /// Opcode-specific fields and payload.
    pub body: Body<'a>,
}

impl Repr<'static> {
    /// A HELLO from a sender in `epoch`: every other header field is zero
    /// (a HELLO belongs to no endpoint, operation or message).
    pub fn hello(epoch: u32, hello: Hello) -> Repr<'static> {
        Repr {
            flags: Flags::empty(),
            src_ep: 0,
            dst_ep: 0,
            op_num: 0,
            msg_id: 0,
            seg_index: 0,
            seg_count: 0,
            credits: 0,
            epoch,
            body: Body::Hello(hello),
        }
    }
}

fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[r]);
    u16::from_be_bytes(a)
}

fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_be_bytes(a)
}

fn be64(b: &[u8], r: core::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[r]);
    u64::from_be_bytes(a)
}

fn parse_rendezvous(e: &[u8]) -> Rendezvous {
    use ext::rendezvous as f;
    Rendezvous {
        protocol: Protocol::from(e[f::PROTOCOL]),
        tag: be32(e, f::TAG),
        length: be64(e, f::LENGTH),
        addr: be64(e, f::ADDR),
        rkey: be32(e, f::RKEY),
        seq: be32(e, f::SEQ),
    }
}

fn emit_rendezvous(e: &mut [u8], r: &Rendezvous) {
    use ext::rendezvous as f;
    e[f::PROTOCOL] = r.protocol.into();
    e[f::TAG].copy_from_slice(&r.tag.to_be_bytes());
    e[f::LENGTH].copy_from_slice(&r.length.to_be_bytes());
    e[f::ADDR].copy_from_slice(&r.addr.to_be_bytes());
    e[f::RKEY].copy_from_slice(&r.rkey.to_be_bytes());
    e[f::SEQ].copy_from_slice(&r.seq.to_be_bytes());
}

fn parse_reduce(e: &[u8]) -> ReduceHeader {
    use ext::reduce as f;
    ReduceHeader {
        op: ReduceOp::from(e[f::OP]),
        ty: ReduceType::from(e[f::TYPE]),
        count: e[f::COUNT],
        branch: e[f::BRANCH],
        fan_in: be16(e, f::FAN_IN),
        tree: be16(e, f::TREE),
        level: e[f::LEVEL],
        first: be32(e, f::FIRST),
    }
}

fn emit_reduce(e: &mut [u8], h: &ReduceHeader) {
    use ext::reduce as f;
    e[f::OP] = h.op.into();
    e[f::TYPE] = h.ty.into();
    e[f::COUNT] = h.count;
    e[f::BRANCH] = h.branch;
    e[f::FAN_IN].copy_from_slice(&h.fan_in.to_be_bytes());
    e[f::TREE].copy_from_slice(&h.tree.to_be_bytes());
    e[f::LEVEL] = h.level;
    e[f::FIRST].copy_from_slice(&h.first.to_be_bytes());
}

impl<'a> Repr<'a> {
    /// Parses a packet view. The view is checked again (cheap next to the
    /// ICRC it recomputes), so an unchecked view is safe to pass. Fails for
    /// everything [`Packet::check`] rejects, for unknown opcodes, for a
    /// payload on a kind that carries none, and for a REDUCE payload that
    /// does not hold exactly `count` elements of a known type.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>, Error> {
        packet.check()?;
        let (e, data) = packet.ext_and_payload();
        Repr::decode(packet, e, data)
    }

    /// The fields of a checked packet: the common header from `packet`,
    /// the extension `e` and the payload `data` (which an elided datagram
    /// does not hold in its buffer).
    pub(crate) fn decode<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        e: &'a [u8],
        data: &'a [u8],
    ) -> Result<Repr<'a>, Error> {
        let opcode = packet.opcode();
        if let Opcode::Unknown(code) = opcode {
            return Err(Error::UnknownOpcode(code));
        }
        if !opcode.carries_data() && packet.payload_len() != 0 {
            return Err(Error::UnexpectedPayload {
                opcode: opcode.into(),
                payload_len: packet.payload_len(),
            });
        }
        let body = match opcode {
            Opcode::Write => Body::Write {
                remote_addr: be64(e, ext::write::REMOTE_ADDR),
                rkey: be32(e, ext::write::RKEY),
                total_len: be32(e, ext::write::TOTAL_LEN),
                data,
            },
            Opcode::ReadRequest => Body::ReadRequest {
                remote_addr: be64(e, ext::read_request::REMOTE_ADDR),
                rkey: be32(e, ext::read_request::RKEY),
                length: be32(e, ext::read_request::LENGTH),
            },
            Opcode::ReadResponse => Body::ReadResponse {
                offset: be32(e, ext::stream::OFFSET),
                total_len: be32(e, ext::stream::TOTAL_LEN),
                data,
            },
            Opcode::Send => Body::Send {
                offset: be32(e, ext::stream::OFFSET),
                total_len: be32(e, ext::stream::TOTAL_LEN),
                data,
            },
            Opcode::Ack => Body::Ack,
            Opcode::SelectiveAck => Body::SelectiveAck {
                base: be32(e, ext::sack::BASE),
                bitmap: be64(e, ext::sack::BITMAP),
            },
            Opcode::Nack => Body::Nack {
                syndrome: Syndrome::from(e[ext::nack::SYNDROME]),
                detail: be32(e, ext::nack::DETAIL),
            },
            Opcode::Completion => Body::Completion {
                status: e[ext::completion::STATUS],
                length: be32(e, ext::completion::LENGTH),
            },
            Opcode::DataArrived => Body::DataArrived {
                addr: be64(e, ext::data_arrived::ADDR),
                length: be32(e, ext::data_arrived::LENGTH),
                immediate: be32(e, ext::data_arrived::IMMEDIATE),
            },
            Opcode::Credit => Body::Credit,
            Opcode::Rts => Body::Rts(parse_rendezvous(e)),
            Opcode::Cts => Body::Cts(parse_rendezvous(e)),
            Opcode::Fin => Body::Fin {
                protocol: Protocol::from(e[ext::fin::PROTOCOL]),
                tag: be32(e, ext::fin::TAG),
                seq: be32(e, ext::fin::SEQ),
            },
            Opcode::Hello => Body::Hello(Hello {
                reply: e[ext::hello::PHASE] & 1 == 1,
                retry: e[ext::hello::PHASE] & ext::hello::RETRY_BIT != 0,
                full: e[ext::hello::PHASE] & ext::hello::FULL_BIT != 0,
                cookie: e[ext::hello::COOKIE].try_into().unwrap_or([0; 16]),
                max_payload: be16(e, ext::hello::MAX_PAYLOAD),
                nonce: be32(e, ext::hello::NONCE),
                region_addr: be64(e, ext::hello::REGION_ADDR),
                region_len: be64(e, ext::hello::REGION_LEN),
                rkey: be32(e, ext::hello::RKEY),
                ports: be16(e, ext::hello::PORTS),
            }),
            Opcode::Reduce | Opcode::ReduceBcast => {
                let hdr = parse_reduce(e);
                if let Some(expected) = hdr.payload_len() {
                    if expected != data.len() {
                        return Err(Error::BadReduceLength {
                            count: hdr.count,
                            expected,
                            actual: data.len(),
                        });
                    }
                }
                if opcode == Opcode::Reduce {
                    Body::Reduce { hdr, data }
                } else {
                    Body::ReduceBcast { hdr, data }
                }
            }
            Opcode::Demand => Body::Demand {
                wanted: be64(e, ext::demand::WANTED),
                free: be64(e, ext::demand::FREE),
            },
            Opcode::Grant => Body::Grant {
                granted: be64(e, ext::grant::GRANTED),
            },
            Opcode::ReduceAck => Body::ReduceAck {
                acked: Opcode::from(e[ext::reduce_ack::ACKED]),
                branch: e[ext::reduce_ack::BRANCH],
                tree: be16(e, ext::reduce_ack::TREE),
            },
            Opcode::Unknown(code) => return Err(Error::UnknownOpcode(code)),
        };
        Ok(Repr {
            flags: packet.flags(),
            src_ep: packet.src_ep(),
            dst_ep: packet.dst_ep(),
            op_num: packet.op_num(),
            msg_id: packet.msg_id(),
            seg_index: packet.seg_index(),
            seg_count: packet.seg_count(),
            credits: packet.credits(),
            epoch: packet.epoch(),
            body,
        })
    }

    /// Checks and parses raw datagram bytes in one step.
    pub fn parse_bytes(bytes: &'a [u8]) -> Result<Repr<'a>, Error> {
        Repr::parse(&Packet::new_unchecked(bytes))
    }

    /// The opcode.
    pub const fn opcode(&self) -> Opcode {
        self.body.opcode()
    }

    /// Bytes [`Repr::emit`] writes: header, extension, payload and ICRC.
    pub fn buffer_len(&self) -> usize {
        let ext = self.opcode().ext_len().unwrap_or(0);
        HEADER_LEN + ext + self.body.data().len() + ICRC_LEN
    }

    /// Writes the packet, ICRC included, to the front of `buf` and returns
    /// how many bytes it wrote. Reserved bytes are written as zero.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        self.emit_inner(buf, false)
    }

    /// [`Repr::emit`], leaving the payload out when `elide` (it must then be
    /// all zeros: the ICRC is computed as if it were there).
    pub(crate) fn emit_inner(&self, buf: &mut [u8], elide: bool) -> Result<usize, EmitError> {
        let data = self.body.data();
        let payload_len =
            u16::try_from(data.len()).map_err(|_| EmitError::PayloadTooLarge(data.len()))?;
        let held = if elide { &[][..] } else { data };
        let need = self.buffer_len() - (data.len() - held.len());
        if buf.len() < need {
            return Err(EmitError::BufferTooSmall {
                have: buf.len(),
                need,
            });
        }
        let buf = &mut buf[..need];
        // Payload and ICRC are written in full below; only the header and
        // extension hold reserved bytes that must be zero.
        let ext_end = need - held.len() - ICRC_LEN;
        buf[..ext_end].fill(0);
        buf[ext_end..ext_end + held.len()].copy_from_slice(held);
        let mut p = Packet::new_unchecked(&mut *buf);
        p.set_version(VERSION);
        p.set_opcode(self.opcode());
        p.set_flags(self.flags);
        p.set_src_ep(self.src_ep);
        p.set_dst_ep(self.dst_ep);
        p.set_op_num(self.op_num);
        p.set_msg_id(self.msg_id);
        p.set_seg_index(self.seg_index);
        p.set_seg_count(self.seg_count);
        p.set_credits(self.credits);
        p.set_payload_len(payload_len);
        p.set_epoch(self.epoch);
        self.emit_ext(&mut buf[HEADER_LEN..ext_end]);
        let crc = icrc_zeros(icrc(&buf[..need - ICRC_LEN]), data.len() - held.len());
        buf[need - ICRC_LEN..].copy_from_slice(&crc.to_be_bytes());
        Ok(need)
    }

    /// Writes the body's extension header into `e` (zeroed, its length
    /// the opcode's).
    fn emit_ext(&self, e: &mut [u8]) {
        match &self.body {
            Body::Write {
                remote_addr,
                rkey,
                total_len,
                ..
            } => {
                e[ext::write::REMOTE_ADDR].copy_from_slice(&remote_addr.to_be_bytes());
                e[ext::write::RKEY].copy_from_slice(&rkey.to_be_bytes());
                e[ext::write::TOTAL_LEN].copy_from_slice(&total_len.to_be_bytes());
            }
            Body::ReadRequest {
                remote_addr,
                rkey,
                length,
            } => {
                e[ext::read_request::REMOTE_ADDR].copy_from_slice(&remote_addr.to_be_bytes());
                e[ext::read_request::RKEY].copy_from_slice(&rkey.to_be_bytes());
                e[ext::read_request::LENGTH].copy_from_slice(&length.to_be_bytes());
            }
            Body::ReadResponse {
                offset, total_len, ..
            }
            | Body::Send {
                offset, total_len, ..
            } => {
                e[ext::stream::OFFSET].copy_from_slice(&offset.to_be_bytes());
                e[ext::stream::TOTAL_LEN].copy_from_slice(&total_len.to_be_bytes());
            }
            Body::Ack | Body::Credit => {}
            Body::SelectiveAck { base, bitmap } => {
                e[ext::sack::BASE].copy_from_slice(&base.to_be_bytes());
                e[ext::sack::BITMAP].copy_from_slice(&bitmap.to_be_bytes());
            }
            Body::Nack { syndrome, detail } => {
                e[ext::nack::SYNDROME] = (*syndrome).into();
                e[ext::nack::DETAIL].copy_from_slice(&detail.to_be_bytes());
            }
            Body::Completion { status, length } => {
                e[ext::completion::STATUS] = *status;
                e[ext::completion::LENGTH].copy_from_slice(&length.to_be_bytes());
            }
            Body::DataArrived {
                addr,
                length,
                immediate,
            } => {
                e[ext::data_arrived::ADDR].copy_from_slice(&addr.to_be_bytes());
                e[ext::data_arrived::LENGTH].copy_from_slice(&length.to_be_bytes());
                e[ext::data_arrived::IMMEDIATE].copy_from_slice(&immediate.to_be_bytes());
            }
            Body::Rts(r) | Body::Cts(r) => emit_rendezvous(e, r),
            Body::Fin { protocol, tag, seq } => {
                e[ext::fin::PROTOCOL] = (*protocol).into();
                e[ext::fin::TAG].copy_from_slice(&tag.to_be_bytes());
                e[ext::fin::SEQ].copy_from_slice(&seq.to_be_bytes());
            }
            Body::Hello(h) => {
                e[ext::hello::PHASE] = u8::from(h.reply)
                    | if h.retry { ext::hello::RETRY_BIT } else { 0 }
                    | if h.full { ext::hello::FULL_BIT } else { 0 };
                e[ext::hello::COOKIE].copy_from_slice(&h.cookie);
                e[ext::hello::MAX_PAYLOAD].copy_from_slice(&h.max_payload.to_be_bytes());
                e[ext::hello::NONCE].copy_from_slice(&h.nonce.to_be_bytes());
                e[ext::hello::REGION_ADDR].copy_from_slice(&h.region_addr.to_be_bytes());
                e[ext::hello::REGION_LEN].copy_from_slice(&h.region_len.to_be_bytes());
                e[ext::hello::RKEY].copy_from_slice(&h.rkey.to_be_bytes());
                e[ext::hello::PORTS].copy_from_slice(&h.ports.to_be_bytes());
            }
            Body::Reduce { hdr, .. } | Body::ReduceBcast { hdr, .. } => emit_reduce(e, hdr),
            Body::Demand { wanted, free } => {
                e[ext::demand::WANTED].copy_from_slice(&wanted.to_be_bytes());
                e[ext::demand::FREE].copy_from_slice(&free.to_be_bytes());
            }
            Body::Grant { granted } => {
                e[ext::grant::GRANTED].copy_from_slice(&granted.to_be_bytes());
            }
            Body::ReduceAck {
                acked,
                branch,
                tree,
            } => {
                e[ext::reduce_ack::ACKED] = (*acked).into();
                e[ext::reduce_ack::BRANCH] = *branch;
                e[ext::reduce_ack::TREE].copy_from_slice(&tree.to_be_bytes());
            }
        }
    }

    /// Emits into `out`, replacing its contents.
    pub fn emit_vec(&self, out: &mut Vec<u8>) -> Result<usize, EmitError> {
        out.clear();
        out.resize(self.buffer_len(), 0);
        let n = self.emit(out)?;
        Ok(n)
    }

    /// Emits into a new vector.
    pub fn to_vec(&self) -> Result<Vec<u8>, EmitError> {
        let mut out = Vec::new();
        self.emit_vec(&mut out)?;
        Ok(out)
    }

    /// Short kind name: the opcode, with the position for data kinds
    /// (`WRITE_FIRST`, `SEND_ONLY`, `READ_RESP_LAST`, ...).
    pub fn kind_name(&self) -> String {
        self.opcode().kind_name(self.flags)
    }
}

/// The opcode-specific fields of a packet as `key=value` pairs
/// (see [`Repr::detail`]).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Detail<'r, 'a>(&'r Body<'a>);

impl fmt::Display for Detail<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Body::Write {
                remote_addr,
                rkey,
                total_len,
                ..
            } => write!(f, "addr={remote_addr:#x} rkey={rkey:#x} total={total_len}"),
            Body::ReadRequest {
                remote_addr,
                rkey,
                length,
            } => write!(f, "addr={remote_addr:#x} rkey={rkey:#x} read={length}"),
            Body::ReadResponse {
                offset, total_len, ..
            }
            | Body::Send {
                offset, total_len, ..
            } => write!(f, "off={offset} total={total_len}"),
            Body::Ack | Body::Credit => Ok(()),
            Body::SelectiveAck { base, bitmap } => write!(f, "base={base} bitmap={bitmap:#018x}"),
            Body::Nack { syndrome, detail } => write!(f, "syndrome={syndrome} detail={detail:#x}"),
            Body::Completion { status, length } => write!(f, "status={status} bytes={length}"),
            Body::DataArrived {
                addr,
                length,
                immediate,
            } => write!(f, "addr={addr:#x} bytes={length} imm={immediate:#x}"),
            Body::Rts(r) | Body::Cts(r) => write!(
                f,
                "proto={} tag={} seq={} msglen={} addr={:#x} rkey={:#x}",
                r.protocol, r.tag, r.seq, r.length, r.addr, r.rkey
            ),
            Body::Fin { protocol, tag, seq } => write!(f, "proto={protocol} tag={tag} seq={seq}"),
            Body::Demand { wanted, free } => write!(f, "wanted={wanted} free={free}"),
            Body::Grant { granted } => write!(f, "granted={granted}"),
            Body::Hello(h) => write!(
                f,
                "{}{} nonce={:#x} mtu={} region={:#x}+{} rkey={:#x} ports={}",
                match (h.reply, h.retry, h.full) {
                    (false, ..) => "ask",
                    (true, true, _) => "retry",
                    (true, _, true) => "full",
                    _ => "reply",
                },
                if h.cookie != [0; 16] { " cookie" } else { "" },
                h.nonce,
                h.max_payload,
                h.region_addr,
                h.region_len,
                h.rkey,
                h.ports.max(1)
            ),
            Body::Reduce { hdr, data } | Body::ReduceBcast { hdr, data } => {
                write!(
                    f,
                    "tree={} {} {} n={} first={} branch={}/{} level={}",
                    hdr.tree,
                    hdr.op,
                    hdr.ty,
                    hdr.count,
                    hdr.first,
                    hdr.branch,
                    hdr.fan_in,
                    hdr.level
                )?;
                write_reduce_values(f, hdr, data)
            }
            Body::ReduceAck {
                acked,
                branch,
                tree,
            } => write!(f, "acks={} tree={tree} branch={branch}", acked.name()),
        }
    }
}

/// ` vals=[..]` (and ` locs=[..]`) of a REDUCE payload whose type is known.
fn write_reduce_values(f: &mut fmt::Formatter<'_>, hdr: &ReduceHeader, data: &[u8]) -> fmt::Result {
    let Some(w) = hdr.ty.width() else {
        return Ok(());
    };
    let n = usize::from(hdr.count);
    if hdr.payload_len() != Some(data.len()) {
        return Ok(());
    }
    f.write_str(" vals=[")?;
    for (i, c) in data[..n * w].chunks_exact(w).enumerate() {
        let bits = c.iter().fold(0u64, |a, b| a << 8 | u64::from(*b));
        if i > 0 {
            f.write_str(",")?;
        }
        match hdr.ty {
            ReduceType::F32 => write!(f, "{}", f32::from_bits(bits as u32))?,
            ReduceType::F64 => write!(f, "{}", f64::from_bits(bits))?,
            ReduceType::I32 => write!(f, "{}", bits as u32 as i32)?,
            ReduceType::I64 => write!(f, "{}", bits as i64)?,
            _ => write!(f, "{bits}")?,
        }
    }
    f.write_str("]")?;
    if hdr.op.has_locations() {
        f.write_str(" locs=[")?;
        for (i, c) in data[n * w..].chunks_exact(4).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", u32::from_be_bytes([c[0], c[1], c[2], c[3]]))?;
        }
        f.write_str("]")?;
    }
    Ok(())
}

impl Repr<'_> {
    /// The opcode-specific fields, for one-line displays.
    pub fn detail(&self) -> Detail<'_, '_> {
        Detail(&self.body)
    }
}

/// One line: kind, endpoints, message, segment, op number, flags, credits,
/// payload length, then the kind's own fields.
impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ep={}->{} msg={} seg={}/{} op={:#010x} flags={} cr={} len={} {}",
            self.kind_name(),
            self.src_ep,
            self.dst_ep,
            self.msg_id,
            self.seg_index,
            self.seg_count,
            self.op_num,
            self.flags,
            self.credits,
            self.body.data().len(),
            self.detail(),
        )
    }
}
