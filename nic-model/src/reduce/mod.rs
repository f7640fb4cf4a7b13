//! NIC-offloaded reductions: counters, triggered descriptors and an ALU.
//!
//! The model follows the Tianhe-style offload (docs/collectives.md): the
//! host posts, ahead of time, one descriptor per collective at every node
//! of a reduction tree ([`ReducePost`]): its own operand, its parent (and
//! its branch there), its children, and where the result goes in host
//! memory. From then on the NICs run the tree without the hosts:
//!
//! 1. Every REDUCE packet a child sends increments the parent's counter for
//!    that chunk (Portals 4 would say: a counting event). A duplicate does
//!    not: the parent remembers which branches it holds, as the receive
//!    registry's bitmask remembers packets.
//! 2. When the counter reaches the descriptor's threshold (the number of
//!    children) the descriptor fires: the ALU folds the node's own operand
//!    and then its children's, in branch order, and the NIC sends the
//!    result to the parent, or, at the root, keeps it. For timing the ALU
//!    works on each operand as it arrives (`alu_per_operand` each, one at
//!    a time), as the hardware does; only the fold's order is fixed, so
//!    that float results never depend on arrival order.
//! 3. The root's result fires the broadcast descriptor: REDUCE_BCAST to
//!    each child, which writes it to host memory and forwards it to its own
//!    children.
//!
//! Every REDUCE and REDUCE_BCAST is acknowledged (REDUCE_ACK) and
//! retransmitted with the engine's RTO until it is; lost packets cost
//! time, duplicates are re-acknowledged and never combined twice.
//!
//! A descriptor carries at most `NicConfig::reduce_data_limit` bytes of
//! reduce data (48 on the Tianhe NIC); a longer vector is cut into chunks,
//! one descriptor and one packet per chunk per tree edge.
//!
//! [`alu`] holds the element-wise operations and their exact semantics.
//!
//! Children not named above:
//! - `state`: The reduce unit's state inside one NIC

pub mod alu;
pub(crate) mod state;

use udrma_proto::{NodeAddr, ReduceOp, ReduceType};

use crate::memory::MrKey;
pub use alu::Operand;

/// Which collective a descriptor belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum CollectiveKind {
    /// Combine every node's operand at the root.
    Reduce,
    /// Combine at the root, then broadcast the result to every node.
    Allreduce,
    /// The root's operand to every node.
    Broadcast,
}

impl CollectiveKind {
    /// Lower-case name (`reduce`, `allreduce`, `broadcast`).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::Reduce => "reduce",
            CollectiveKind::Allreduce => "allreduce",
            CollectiveKind::Broadcast => "broadcast",
        }
    }

    /// Whether operands travel up the tree.
    pub fn goes_up(self) -> bool {
        self != CollectiveKind::Broadcast
    }

    /// Whether the result travels down the tree.
    pub fn goes_down(self) -> bool {
        self != CollectiveKind::Reduce
    }
}

/// Where a node's combined operand goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Parent {
    /// The parent node.
    pub addr: NodeAddr,
    /// This node's index among the parent's children.
    pub branch: u8,
    /// How many children the parent has (carried in every REDUCE; the
    /// parent checks it against its own descriptor).
    pub fan_in: u16,
}

/// One node's descriptor for one collective (all its chunks).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct ReducePost {
    /// Which collective.
    pub kind: CollectiveKind,
    /// Endpoint the tree's packets use (the same at every node).
    pub ep: u16,
    /// Tree id.
    pub tree: u16,
    /// The collective's sequence number on its tree (a new one for each
    /// collective; the same at every node).
    pub seq: u32,
    /// ALU operation.
    pub op: ReduceOp,
    /// Element type.
    pub ty: ReduceType,
    /// Elements in the vector.
    pub count: u32,
    /// This node's operand (`count` elements). A broadcast's non-root
    /// nodes give none (empty).
    pub operand: Operand,
    /// This node's parent; `None` at the root.
    pub parent: Option<Parent>,
    /// Children, in branch order (branch `i` is `children[i]`), nearest
    /// first, as k-nomial trees list them: the NIC broadcasts the result
    /// to the last first, taking it to head the largest subtree.
    pub children: Vec<NodeAddr>,
    /// This node's height in the tree (0 = leaf), carried for decoders.
    pub level: u8,
    /// Where the NIC writes the result in host memory (little-endian
    /// elements, then locations), if this node receives one.
    pub result: Option<(MrKey, u64)>,
}

impl ReducePost {
    /// Whether this node gets the result.
    pub fn gets_result(&self) -> bool {
        self.kind.goes_down() || self.parent.is_none()
    }
}

/// Most children one node may have (the branch field is one byte).
pub const MAX_FAN_IN: usize = 255;

/// Elements of `ty` one descriptor carries when it may hold `limit` bytes
/// (values, and locations for MINLOC/MAXLOC); at least one.
pub fn elements_per_chunk(op: ReduceOp, ty: ReduceType, limit: usize) -> usize {
    let per = ty.width().unwrap_or(8) + if op.has_locations() { 4 } else { 0 };
    (limit / per).clamp(1, 255)
}
