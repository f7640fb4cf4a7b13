//! Byte ranges inside each opcode's extension header (offsets from the end
//! of the common header). Bytes not named are reserved: zero on emit,
//! ignored on parse.

use crate::packet::field::Field;

/// WRITE (16 B).
pub mod write {
    use super::Field;
    /// Target address of this packet's first byte at the receiver.
    pub const REMOTE_ADDR: Field = 0..8;
    /// Remote key of the target region.
    pub const RKEY: Field = 8..12;
    /// Length of the whole operation; 0 = not described (non-FIRST
    /// packets in FIRST-only registration mode).
    pub const TOTAL_LEN: Field = 12..16;
}
/// READ request (16 B).
pub mod read_request {
    use super::Field;
    /// Responder address to read from.
    pub const REMOTE_ADDR: Field = 0..8;
    /// Remote key of the responder's region.
    pub const RKEY: Field = 8..12;
    /// Bytes to read.
    pub const LENGTH: Field = 12..16;
}
/// READ response and SEND (8 B).
pub mod stream {
    use super::Field;
    /// Offset of this packet's payload within the operation.
    pub const OFFSET: Field = 0..4;
    /// Length of the whole operation.
    pub const TOTAL_LEN: Field = 4..8;
}
/// Selective ACK (12 B).
pub mod sack {
    use super::Field;
    /// Segment index that bit 0 of the bitmap stands for.
    pub const BASE: Field = 0..4;
    /// Bit i set: segment `base + i` received.
    pub const BITMAP: Field = 4..12;
}
/// NACK (8 B).
pub mod nack {
    use super::Field;
    /// Syndrome byte.
    pub const SYNDROME: usize = 0;
    /// Syndrome-specific detail (e.g. the offending rkey).
    pub const DETAIL: Field = 4..8;
}
/// Completion notice (8 B).
pub mod completion {
    use super::Field;
    /// 0 = success, otherwise a NACK syndrome code.
    pub const STATUS: usize = 0;
    /// Bytes the receiver placed.
    pub const LENGTH: Field = 4..8;
}
/// Data-arrived notification (16 B).
pub mod data_arrived {
    use super::Field;
    /// Receiver address where the data starts.
    pub const ADDR: Field = 0..8;
    /// Bytes that arrived.
    pub const LENGTH: Field = 8..12;
    /// 32-bit immediate value for the receiver's event.
    pub const IMMEDIATE: Field = 12..16;
}
/// RTS and CTS (32 B).
pub mod rendezvous {
    use super::Field;
    /// Protocol byte (R3/RGET/RPUT).
    pub const PROTOCOL: usize = 0;
    /// Message tag.
    pub const TAG: Field = 4..8;
    /// Message length.
    pub const LENGTH: Field = 8..16;
    /// Buffer address (sender's for RGET in the RTS, receiver's for RPUT
    /// in the CTS; 0 otherwise).
    pub const ADDR: Field = 16..24;
    /// Remote key of that buffer (0 when no address is offered).
    pub const RKEY: Field = 24..28;
    /// The sender's message sequence number (ties RTS, CTS and FIN
    /// of one message together).
    pub const SEQ: Field = 28..32;
}
/// HELLO (48 B).
pub mod hello {
    use super::Field;
    /// Bit 0: this HELLO answers one (the reply); bit 1: the answer is
    /// "echo this cookie first" (retry); bit 2: "my peer table is full";
    /// other bits reserved.
    pub const PHASE: usize = 0;
    /// Bit 1 of `PHASE`.
    pub const RETRY_BIT: u8 = 0x02;
    /// Bit 2 of `PHASE`.
    pub const FULL_BIT: u8 = 0x04;
    /// The sender's largest data payload per packet.
    pub const MAX_PAYLOAD: Field = 2..4;
    /// Chosen by the asker, echoed by the reply.
    pub const NONCE: Field = 4..8;
    /// Address of the announced region (0 with no region).
    pub const REGION_ADDR: Field = 8..16;
    /// Length of the announced region in bytes (0 with no region).
    pub const REGION_LEN: Field = 16..24;
    /// Remote key of the announced region (0 with no region).
    pub const RKEY: Field = 24..28;
    /// How many consecutive UDP source ports, from this HELLO's own, the
    /// sender's datagrams may come from (0 or 1: this one only).
    pub const PORTS: Field = 28..30;
    /// The admission cookie: in a retry, the one to echo; in an ask, the
    /// one echoed (zeros: none).
    pub const COOKIE: Field = 32..48;
}
/// REDUCE and REDUCE_BCAST (16 B).
pub mod reduce {
    use super::Field;
    /// ALU operation code.
    pub const OP: usize = 0;
    /// Element type code.
    pub const TYPE: usize = 1;
    /// Elements in this packet.
    pub const COUNT: usize = 2;
    /// REDUCE: the sender's index among its parent's children;
    /// REDUCE_BCAST: the receiving child's index.
    pub const BRANCH: usize = 3;
    /// Children of the parent (the parent checks it against its own).
    pub const FAN_IN: Field = 4..6;
    /// Reduction tree id.
    pub const TREE: Field = 6..8;
    /// The sender's height in the tree (0 = leaf).
    pub const LEVEL: usize = 8;
    /// Index of the first element this packet carries.
    pub const FIRST: Field = 12..16;
}
/// REDUCE_ACK (8 B).
pub mod reduce_ack {
    use super::Field;
    /// Opcode of the packet acknowledged (REDUCE or REDUCE_BCAST).
    pub const ACKED: usize = 0;
    /// Branch field of the packet acknowledged.
    pub const BRANCH: usize = 1;
    /// Tree id of the packet acknowledged.
    pub const TREE: Field = 2..4;
}
/// DEMAND (16 B).
pub mod demand {
    use super::Field;
    /// Bytes the sender has wanted to send to this receiver since they
    /// met (cumulative).
    pub const WANTED: Field = 0..8;
    /// Of those, bytes it sent unscheduled, without a grant
    /// (cumulative).
    pub const FREE: Field = 8..16;
}
/// GRANT (8 B).
pub mod grant {
    use super::Field;
    /// Bytes the receiver has granted this sender since they met
    /// (cumulative).
    pub const GRANTED: Field = 0..8;
}
/// FIN (12 B).
pub mod fin {
    use super::Field;
    /// Protocol byte.
    pub const PROTOCOL: usize = 0;
    /// Message tag.
    pub const TAG: Field = 4..8;
    /// The message sequence number of the RTS it finishes.
    pub const SEQ: Field = 8..12;
}
