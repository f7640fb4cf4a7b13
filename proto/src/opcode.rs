//! Wire codes: opcodes, NACK syndromes and rendezvous protocols.

use core::fmt;

use crate::flags::Flags;

enum_with_unknown! {
    /// What a packet is (byte 1 of the common header).
    ///
    /// Codes `0x30..=0x3f` belong to the NIC-offloaded reduction (REDUCE)
    /// kinds; `0x33..=0x3f` are still free and parse as `Unknown`.
    #[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
    pub enum Opcode(u8) {
        /// RDMA WRITE data; FIRST/LAST flags give its place in the operation.
        Write = 0x01,
        /// RDMA READ request (asks the responder for a range of its memory).
        ReadRequest = 0x02,
        /// RDMA READ response data, flowing back to the requester.
        ReadResponse = 0x03,
        /// SEND data, consumed by a posted receive buffer.
        Send = 0x04,
        /// Per-packet acknowledgement of the packet named by op number and
        /// segment index.
        Ack = 0x10,
        /// Coalesced selective acknowledgement: message id + base + 64-bit
        /// bitmap.
        SelectiveAck = 0x11,
        /// Negative acknowledgement with a syndrome.
        Nack = 0x12,
        /// Completion notice: the receiver's registry saw every packet of the
        /// operation.
        Completion = 0x13,
        /// Data-arrived notification: sender tells the receiver that data
        /// has landed at a given place (WRITE-with-notify).
        DataArrived = 0x14,
        /// CREDIT / NOOP: carries only the piggybacked credit update.
        Credit = 0x20,
        /// Rendezvous request-to-send.
        Rts = 0x21,
        /// Rendezvous clear-to-send (ok-to-send).
        Cts = 0x22,
        /// Rendezvous finish.
        Fin = 0x23,
        /// HELLO: a peer introduces itself and announces a memory region
        /// (address, length, rkey); the answer is a HELLO with the reply bit.
        Hello = 0x24,
        /// DEMAND: a sender under a receiver-credit controller tells the
        /// receiver how many bytes it wants to send (cumulative).
        Demand = 0x25,
        /// GRANT: a receiver gives a sender credit to send (cumulative).
        Grant = 0x26,
        /// Reduce data going up a reduction tree: a child's combined
        /// operand for one chunk of one collective.
        Reduce = 0x30,
        /// The result of a reduction going down the tree (broadcast).
        ReduceBcast = 0x31,
        /// Acknowledges one REDUCE or REDUCE_BCAST packet.
        ReduceAck = 0x32,
    }
}

impl Opcode {
    /// Every known opcode, in code order.
    pub const ALL: [Opcode; 19] = [
        Opcode::Write,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Send,
        Opcode::Ack,
        Opcode::SelectiveAck,
        Opcode::Nack,
        Opcode::Completion,
        Opcode::DataArrived,
        Opcode::Credit,
        Opcode::Rts,
        Opcode::Cts,
        Opcode::Fin,
        Opcode::Hello,
        Opcode::Demand,
        Opcode::Grant,
        Opcode::Reduce,
        Opcode::ReduceBcast,
        Opcode::ReduceAck,
    ];

    /// Length of this opcode's extension header (the fixed fields between
    /// the common header and the payload); `None` for unknown opcodes.
    pub const fn ext_len(self) -> Option<usize> {
        match self {
            Opcode::Write | Opcode::ReadRequest | Opcode::DataArrived => Some(16),
            Opcode::ReadResponse | Opcode::Send => Some(8),
            Opcode::Ack | Opcode::Credit => Some(0),
            Opcode::SelectiveAck => Some(12),
            Opcode::Nack | Opcode::Completion | Opcode::Grant => Some(8),
            Opcode::Demand => Some(16),
            Opcode::Fin => Some(12),
            Opcode::Rts | Opcode::Cts => Some(32),
            Opcode::Hello => Some(48),
            Opcode::Reduce | Opcode::ReduceBcast => Some(16),
            Opcode::ReduceAck => Some(8),
            Opcode::Unknown(_) => None,
        }
    }

    /// Whether packets of this opcode carry a data payload.
    pub const fn carries_data(self) -> bool {
        matches!(
            self,
            Opcode::Write
                | Opcode::ReadResponse
                | Opcode::Send
                | Opcode::Reduce
                | Opcode::ReduceBcast
                | Opcode::Unknown(_)
        )
    }

    /// Whether this is a control kind: an acknowledgement or a flow-control
    /// message (ACK, SACK, NACK, COMPLETION, CREDIT, DEMAND, GRANT,
    /// REDUCE_ACK) that belongs to no operation of its own and carries no
    /// data. A switch with a two-level queue serves these first (as htsim's
    /// composite queue and NDP/UET switches do).
    pub const fn is_control(self) -> bool {
        matches!(
            self,
            Opcode::Ack
                | Opcode::SelectiveAck
                | Opcode::Nack
                | Opcode::Completion
                | Opcode::Credit
                | Opcode::Demand
                | Opcode::Grant
                | Opcode::ReduceAck
        )
    }

    /// Upper-case name as decoders print it (`WRITE`, `SACK`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Opcode::Write => "WRITE",
            Opcode::ReadRequest => "READ_REQ",
            Opcode::ReadResponse => "READ_RESP",
            Opcode::Send => "SEND",
            Opcode::Ack => "ACK",
            Opcode::SelectiveAck => "SACK",
            Opcode::Nack => "NACK",
            Opcode::Completion => "COMPLETION",
            Opcode::DataArrived => "DATA_ARRIVED",
            Opcode::Credit => "CREDIT",
            Opcode::Rts => "RTS",
            Opcode::Cts => "CTS",
            Opcode::Fin => "FIN",
            Opcode::Hello => "HELLO",
            Opcode::Demand => "DEMAND",
            Opcode::Grant => "GRANT",
            Opcode::Reduce => "REDUCE",
            Opcode::ReduceBcast => "REDUCE_BCAST",
            Opcode::ReduceAck => "REDUCE_ACK",
            Opcode::Unknown(_) => "UNKNOWN",
        }
    }
}

impl Opcode {
    /// The kind name decoders print: the opcode, with the position the
    /// FIRST/LAST flags give for data kinds (`WRITE_FIRST`, `SEND_ONLY`),
    /// `UNKNOWN(0x..)` for unknown codes.
    pub fn kind_name(self, flags: Flags) -> String {
        match self {
            Opcode::Unknown(_) => self.to_string(),
            Opcode::Reduce | Opcode::ReduceBcast => self.name().to_string(),
            op if op.carries_data() => {
                format!("{}_{}", op.name(), Position::from_flags(flags).name())
            }
            op => op.name().to_string(),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Opcode::Unknown(code) => write!(f, "UNKNOWN({code:#04x})"),
            known => f.write_str(known.name()),
        }
    }
}

/// Where a data packet sits in its operation, from its FIRST and LAST flags.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Position {
    /// FIRST set, LAST clear.
    First,
    /// Neither set.
    Middle,
    /// LAST set, FIRST clear.
    Last,
    /// Both set: a one-packet operation.
    Only,
}

impl Position {
    /// The position the FIRST and LAST bits of `flags` describe.
    pub const fn from_flags(flags: Flags) -> Position {
        match (flags.contains(Flags::FIRST), flags.contains(Flags::LAST)) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }

    /// The FIRST/LAST bits of this position.
    pub const fn flags(self) -> Flags {
        match self {
            Position::First => Flags::FIRST,
            Position::Middle => Flags::empty(),
            Position::Last => Flags::LAST,
            Position::Only => Flags::FIRST.with(Flags::LAST),
        }
    }

    /// `FIRST`, `MIDDLE`, `LAST` or `ONLY`.
    pub const fn name(self) -> &'static str {
        match self {
            Position::First => "FIRST",
            Position::Middle => "MIDDLE",
            Position::Last => "LAST",
            Position::Only => "ONLY",
        }
    }
}

enum_with_unknown! {
    /// Why a NACK rejected a packet (first byte of the NACK extension).
    #[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
    pub enum Syndrome(u8) {
        /// The target region exists but forbids this access.
        RemoteAccess = 0x01,
        /// The address range falls outside the registered region.
        OutOfBounds = 0x02,
        /// No region is registered under this rkey.
        BadRkey = 0x03,
        /// Registry full / receiver not ready: retry later.
        ReceiverNotReady = 0x04,
        /// The request is malformed or inconsistent (e.g. segment index
        /// beyond the segment count).
        InvalidRequest = 0x05,
        /// The receiver does not know the packet's opcode.
        UnknownOpcode = 0x06,
        /// A switch trimmed the packet's payload on a full queue and
        /// forwarded its header: send it again now (NDP/UET trimming).
        /// `detail` [`TRIMMED_AHEAD`]: a go-back-N receiver discarded it
        /// out of sequence, so it is news of congestion only.
        Trimmed = 0x07,
        /// Go-back-N: the packet is ahead of the next one the receiver
        /// expects of its operation and was discarded; `detail` names the
        /// expected segment (RoCE's NAK sequence error).
        SequenceError = 0x08,
    }
}

/// The `detail` of a `TRIMMED` NACK from a go-back-N receiver for a
/// packet it would have discarded whole (ahead of the segment it expects
/// next, or one it holds): the sender's controller hears the full queue,
/// and nothing is resent, since the go-back from the expected segment
/// resends it. `detail` 0 asks for the packet again.
pub const TRIMMED_AHEAD: u32 = 1;

/// The `detail` of a `RNR` NACK from a receiver that lost the packet's
/// operation (its registry entry expired holding packets it had
/// acknowledged): only the whole operation again, in its next incarnation
/// ([`Flags::INCARNATION`]), can complete it. `detail` 0 is back-pressure
/// (no receive buffer, a full registry): the same packet later.
pub const RNR_LOST: u32 = 1;

impl Syndrome {
    /// Every known syndrome, in code order.
    pub const ALL: [Syndrome; 8] = [
        Syndrome::RemoteAccess,
        Syndrome::OutOfBounds,
        Syndrome::BadRkey,
        Syndrome::ReceiverNotReady,
        Syndrome::InvalidRequest,
        Syndrome::UnknownOpcode,
        Syndrome::Trimmed,
        Syndrome::SequenceError,
    ];
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Syndrome::RemoteAccess => "REMOTE_ACCESS",
            Syndrome::OutOfBounds => "OUT_OF_BOUNDS",
            Syndrome::BadRkey => "BAD_RKEY",
            Syndrome::ReceiverNotReady => "RNR",
            Syndrome::InvalidRequest => "INVALID_REQUEST",
            Syndrome::UnknownOpcode => "UNKNOWN_OPCODE",
            Syndrome::Trimmed => "TRIMMED",
            Syndrome::SequenceError => "SEQUENCE_ERROR",
            Syndrome::Unknown(code) => return write!(f, "UNKNOWN({code:#04x})"),
        };
        f.write_str(name)
    }
}

enum_with_unknown! {
    /// The rendezvous protocol an RTS, CTS or FIN belongs to.
    #[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
    pub enum Protocol(u8) {
        /// RTS → CTS → data copied through vbufs.
        R3 = 0x01,
        /// The receiver RDMA-READs from the address the RTS carries.
        Rget = 0x02,
        /// The sender RDMA-WRITEs to the address the CTS carries, then FIN.
        Rput = 0x03,
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protocol::R3 => f.write_str("R3"),
            Protocol::Rget => f.write_str("RGET"),
            Protocol::Rput => f.write_str("RPUT"),
            Protocol::Unknown(code) => write!(f, "UNKNOWN({code:#04x})"),
        }
    }
}

enum_with_unknown! {
    /// The ALU operation of a REDUCE packet (byte 0 of its extension).
    #[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
    pub enum ReduceOp(u8) {
        /// Sum (floats: IEEE 754 addition; integers wrap).
        Sum = 0x01,
        /// Minimum.
        Min = 0x02,
        /// Maximum.
        Max = 0x03,
        /// Minimum with the location (rank) that holds it.
        MinLoc = 0x04,
        /// Maximum with the location (rank) that holds it.
        MaxLoc = 0x05,
        /// Logical AND (nonzero is true; the result is 0 or 1).
        Land = 0x06,
        /// Logical OR.
        Lor = 0x07,
        /// Logical exclusive OR.
        Lxor = 0x08,
        /// Bitwise AND.
        Band = 0x09,
        /// Bitwise OR.
        Bor = 0x0a,
        /// Bitwise exclusive OR.
        Bxor = 0x0b,
    }
}

impl ReduceOp {
    /// Every known operation, in code order.
    pub const ALL: [ReduceOp; 11] = [
        ReduceOp::Sum,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::MinLoc,
        ReduceOp::MaxLoc,
        ReduceOp::Land,
        ReduceOp::Lor,
        ReduceOp::Lxor,
        ReduceOp::Band,
        ReduceOp::Bor,
        ReduceOp::Bxor,
    ];

    /// Whether packets of this operation carry a 32-bit location per
    /// element after the values.
    pub const fn has_locations(self) -> bool {
        matches!(self, ReduceOp::MinLoc | ReduceOp::MaxLoc)
    }

    /// Whether the operation is defined on `ty` (logical and bitwise
    /// operations are for integers only).
    pub const fn applies_to(self, ty: ReduceType) -> bool {
        match self {
            ReduceOp::Unknown(_) => false,
            ReduceOp::Sum | ReduceOp::Min | ReduceOp::Max | ReduceOp::MinLoc | ReduceOp::MaxLoc => {
                ty.width().is_some()
            }
            _ => ty.is_integer(),
        }
    }

    /// Lower-case name as scenario files and decoders write it (`sum`,
    /// `minloc`, `bxor`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::MinLoc => "minloc",
            ReduceOp::MaxLoc => "maxloc",
            ReduceOp::Land => "land",
            ReduceOp::Lor => "lor",
            ReduceOp::Lxor => "lxor",
            ReduceOp::Band => "band",
            ReduceOp::Bor => "bor",
            ReduceOp::Bxor => "bxor",
            ReduceOp::Unknown(_) => "unknown",
        }
    }

    /// The operation called `name` (see [`ReduceOp::name`]).
    pub fn from_name(name: &str) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|o| o.name() == name)
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceOp::Unknown(code) => write!(f, "UNKNOWN({code:#04x})"),
            known => f.write_str(known.name()),
        }
    }
}

enum_with_unknown! {
    /// The element type of a REDUCE packet (byte 1 of its extension).
    #[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
    pub enum ReduceType(u8) {
        /// IEEE 754 binary32.
        F32 = 0x01,
        /// IEEE 754 binary64.
        F64 = 0x02,
        /// Two's-complement signed 32-bit integer.
        I32 = 0x03,
        /// Two's-complement signed 64-bit integer.
        I64 = 0x04,
        /// Unsigned 32-bit integer.
        U32 = 0x05,
        /// Unsigned 64-bit integer.
        U64 = 0x06,
    }
}

impl ReduceType {
    /// Every known type, in code order.
    pub const ALL: [ReduceType; 6] = [
        ReduceType::F32,
        ReduceType::F64,
        ReduceType::I32,
        ReduceType::I64,
        ReduceType::U32,
        ReduceType::U64,
    ];

    /// Bytes per element on the wire; `None` for unknown types.
    pub const fn width(self) -> Option<usize> {
        match self {
            ReduceType::F32 | ReduceType::I32 | ReduceType::U32 => Some(4),
            ReduceType::F64 | ReduceType::I64 | ReduceType::U64 => Some(8),
            ReduceType::Unknown(_) => None,
        }
    }

    /// Whether it is an integer type.
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            ReduceType::I32 | ReduceType::I64 | ReduceType::U32 | ReduceType::U64
        )
    }

    /// Lower-case name (`f64`, `u32`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceType::F32 => "f32",
            ReduceType::F64 => "f64",
            ReduceType::I32 => "i32",
            ReduceType::I64 => "i64",
            ReduceType::U32 => "u32",
            ReduceType::U64 => "u64",
            ReduceType::Unknown(_) => "unknown",
        }
    }

    /// The type called `name` (see [`ReduceType::name`]).
    pub fn from_name(name: &str) -> Option<ReduceType> {
        ReduceType::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for ReduceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceType::Unknown(code) => write!(f, "UNKNOWN({code:#04x})"),
            known => f.write_str(known.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknowns_stay_values() {
        for op in Opcode::ALL {
            assert_eq!(Opcode::from(u8::from(op)), op);
            assert!(op.ext_len().is_some());
        }
        assert_eq!(Opcode::from(0x33), Opcode::Unknown(0x33));
        assert_eq!(u8::from(Opcode::Unknown(0x7f)), 0x7f);
        assert_eq!(Opcode::Unknown(0x7f).to_string(), "UNKNOWN(0x7f)");
        for s in Syndrome::ALL {
            assert_eq!(Syndrome::from(u8::from(s)), s);
        }
        assert_eq!(Protocol::from(9), Protocol::Unknown(9));
        for o in ReduceOp::ALL {
            assert_eq!(ReduceOp::from(u8::from(o)), o);
            assert_eq!(ReduceOp::from_name(o.name()), Some(o));
        }
        for t in ReduceType::ALL {
            assert_eq!(ReduceType::from(u8::from(t)), t);
            assert_eq!(ReduceType::from_name(t.name()), Some(t));
        }
        assert!(!ReduceOp::Band.applies_to(ReduceType::F64));
        assert!(ReduceOp::MaxLoc.applies_to(ReduceType::F32));
        assert!(!ReduceOp::Sum.applies_to(ReduceType::Unknown(9)));
    }

    #[test]
    fn position_matches_flags() {
        for p in [
            Position::First,
            Position::Middle,
            Position::Last,
            Position::Only,
        ] {
            assert_eq!(Position::from_flags(p.flags() | Flags::ACK_REQ), p);
        }
    }
}
