//! The reduce unit's state inside one NIC: per-chunk counters and operand
//! slots, the descriptors posted, reduce packets awaiting acknowledgement,
//! and the memory of finished chunks that keeps late duplicates out.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use udrma_proto::time::{Duration, Instant};
use udrma_proto::{NodeAddr, Opcode, ReduceHeader, ReduceOp, ReduceType};

use super::{Operand, ReducePost};
use crate::wr::WrId;

/// One chunk of one collective at one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct ChunkKey {
    /// Endpoint.
    pub ep: u16,
    /// Tree id.
    pub tree: u16,
    /// Collective sequence number.
    pub seq: u32,
    /// Chunk index.
    pub chunk: u32,
}

/// A reduce packet this NIC sends and retransmits until acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct OutKey {
    /// Destination.
    pub to: NodeAddr,
    /// REDUCE_BCAST (down) rather than REDUCE (up).
    pub down: bool,
    /// Its chunk.
    pub key: ChunkKey,
}

/// What every packet of one chunk must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(crate) struct Shape {
    pub op: ReduceOp,
    pub ty: ReduceType,
    pub count: u8,
    pub first: u32,
    pub chunks: u32,
}

/// Counter, operand slots and result of one chunk.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(crate) struct ChunkState {
    /// The collective posted here, once the host has posted it.
    pub wr: Option<WrId>,
    pub shape: Option<Shape>,
    /// Children's operands by branch (the counter's events).
    pub slots: Vec<Option<Operand>>,
    /// The counter: distinct children's operands held.
    pub counter: u32,
    /// When the ALU is done with the operands counted so far (it combines
    /// each as it arrives, one at a time).
    pub alu_free: Instant,
    /// The up descriptor has fired.
    pub fired: bool,
    /// The result, once known here.
    pub result: Option<Operand>,
    /// The result was written to host memory (or not needed here).
    pub delivered: bool,
    /// Counted toward its collective's completion.
    pub done: bool,
    /// Packets of this chunk awaiting acknowledgement.
    pub pending_out: u32,
    /// Expiry of a chunk that arrivals created before any post.
    pub expire_at: Option<Instant>,
}

/// One posted collective.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(crate) struct Coll {
    pub post: ReducePost,
    pub chunks: u32,
    pub per_chunk: usize,
    pub chunks_done: u32,
    pub chunks_retired: u32,
    pub completed: bool,
}

impl Coll {
    /// Elements `[first, first + n)` of chunk `c`.
    pub fn range(&self, c: u32) -> core::ops::Range<usize> {
        let first = c as usize * self.per_chunk;
        first..(first + self.per_chunk).min(self.post.count as usize)
    }
}

/// A reduce packet awaiting acknowledgement.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(crate) struct Outgoing {
    pub wr: WrId,
    pub hdr: ReduceHeader,
    pub chunks: u32,
    pub operand: Operand,
    pub sent_at: Instant,
    pub retries: u32,
    pub retransmitted: bool,
    pub deadline: Option<Instant>,
    /// NIC time its first transmission costs (trigger, ALU, fetch).
    pub work: Duration,
}

/// A REDUCE_ACK owed to a peer.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(crate) struct AckOut {
    pub to: NodeAddr,
    pub src_ep: u16,
    pub dst_ep: u16,
    pub seq: u32,
    pub chunk: u32,
    pub chunks: u32,
    pub acked: Opcode,
    pub branch: u8,
    pub tree: u16,
}

/// Everything the reduce unit holds.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(crate) struct ReduceState {
    pub chunks: BTreeMap<ChunkKey, ChunkState>,
    pub peak: usize,
    pub colls: BTreeMap<WrId, Coll>,
    pub by_coll: BTreeMap<(u16, u16, u32), WrId>,
    pub out: BTreeMap<OutKey, Outgoing>,
    pub tx: VecDeque<OutKey>,
    pub acks: VecDeque<AckOut>,
    /// Finished chunks, oldest first forgotten.
    pub finished: BTreeSet<ChunkKey>,
    pub finished_order: VecDeque<ChunkKey>,
    /// Whether any reduce packet was ever posted or received.
    pub used: bool,
}

impl ReduceState {
    /// Remembers a finished chunk, forgetting the oldest beyond `cap`.
    pub fn finish(&mut self, key: ChunkKey, cap: usize) {
        if self.finished.insert(key) {
            self.finished_order.push_back(key);
        }
        while self.finished_order.len() > cap {
            if let Some(old) = self.finished_order.pop_front() {
                self.finished.remove(&old);
            }
        }
    }

    /// Whether nothing is in progress.
    pub fn is_idle(&self) -> bool {
        self.chunks.is_empty() && self.out.is_empty() && self.acks.is_empty()
    }
}
