//! Collectives: reduce, allreduce and broadcast over a tree of hosts, done
//! two ways in the same study so they compare on equal terms.
//!
//! - [`offload::OffloadApp`] posts one [`ReducePost`] per collective at
//!   every node and lets the NICs run the tree (counters, triggered
//!   descriptors, the ALU); the host only learns of the result.
//! - [`hostbased::HostApp`] does the same collective in host software over
//!   the [messaging layer](crate::messaging): a binomial tree, each step an
//!   eager message paying the profile's host and NIC costs, each combine a
//!   pass over the data by the host CPU.
//!
//! - [`schedule`]: MPI's collective algorithms (recursive doubling,
//!   Rabenseifner, ring, binomial, Bruck, pairwise exchange,
//!   dissemination) as per-rank schedules, and an interpreter.
//! - [`scheduled::ScheduledApp`] runs one rank's schedule over the
//!   messaging layer, or as RDMA WRITEs into registered slots (its child
//!   `direct`).
//!
//! The first two follow a [`CollectivePlan`]: the operation, element type and
//! count, the tree, the iterations and their common start times. Node
//! `i`'s operand in iteration `j` is a fixed function of the plan's seed,
//! so the [reference](reference) result, folded in the same tree order
//! outside any NIC, can be compared bit for bit with what every node got.

pub mod hostbased;
pub mod offload;
pub mod reference;
pub mod schedule;
pub mod scheduled;
pub mod tree;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use udrma_nic::reduce::{CollectiveKind, Operand, ReducePost};
use udrma_nic::MrKey;
use udrma_proto::{Duration, Instant, NodeAddr, ReduceOp, ReduceType};

pub use tree::Tree;

/// Where each node's results land in its memory (iteration `j` at
/// `RESULT_BASE + j × result_bytes`, rounded up to 64 B).
pub const RESULT_BASE: u64 = 0x4000_0000;

/// Everything a collective study's hosts agree on.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct CollectivePlan {
    /// Which collective.
    pub kind: CollectiveKind,
    /// ALU operation.
    pub op: ReduceOp,
    /// Element type.
    pub ty: ReduceType,
    /// Elements per node.
    pub count: u32,
    /// Nodes taking part: hosts `0..nodes`.
    pub nodes: u32,
    /// Radix of the offload's k-nomial tree.
    pub radix: u32,
    /// The offload's tree.
    pub tree: Tree,
    /// The host baseline's tree (binomial).
    pub host_tree: Tree,
    /// Collectives run, one after the other.
    pub iterations: u32,
    /// When the first starts.
    pub start: Instant,
    /// Time between common starts.
    pub interval: Duration,
    /// Seed of the operands.
    pub seed: u64,
    /// Endpoint the NIC tree uses.
    pub ep: u16,
    /// Tree id the NIC tree uses.
    pub tree_id: u16,
}

impl CollectivePlan {
    /// Bytes of one result in host memory (values, then locations).
    pub fn result_bytes(&self) -> u64 {
        let w = self.ty.width().unwrap_or(8) as u64;
        let loc = if self.op.has_locations() { 4 } else { 0 };
        u64::from(self.count) * (w + loc)
    }

    /// Where iteration `iter`'s result lands.
    pub fn result_addr(&self, iter: u32) -> u64 {
        RESULT_BASE + u64::from(iter) * self.result_bytes().div_ceil(64) * 64
    }

    /// Bytes of result memory each node registers.
    pub fn result_region(&self) -> u64 {
        self.result_addr(self.iterations).max(RESULT_BASE + 64) - RESULT_BASE
    }

    /// Common start of iteration `iter`.
    pub fn start_of(&self, iter: u32) -> Instant {
        self.start + self.interval.saturating_mul(u64::from(iter))
    }

    /// Whether `node` gives an operand (every node, but only the root in
    /// a broadcast).
    pub fn contributes(&self, node: u32) -> bool {
        self.kind != CollectiveKind::Broadcast || node == 0
    }

    /// Whether `node` ends up holding the result.
    pub fn gets_result(&self, node: u32) -> bool {
        self.kind != CollectiveKind::Reduce || node == 0
    }

    /// Node `node`'s operand in iteration `iter`.
    pub fn operand(&self, node: u32, iter: u32) -> Operand {
        if !self.contributes(node) {
            return Operand::default();
        }
        let mut rng = ChaCha8Rng::seed_from_u64(
            self.seed ^ u64::from(node) << 24 ^ u64::from(iter) << 48 ^ 0x636f_6c6c,
        );
        let values = (0..self.count)
            .map(|_| {
                let r = rng.next_u64();
                let small = (r % 2001) as i64 - 1000;
                match self.ty {
                    // Magnitudes over 12 decades, so a float sum's order
                    // shows in its bits.
                    ReduceType::F64 => {
                        (small as f64 * 10f64.powi(((r >> 32) % 12) as i32 - 6)).to_bits()
                    }
                    ReduceType::F32 => {
                        u64::from((small as f32 * 10f32.powi(((r >> 32) % 8) as i32 - 4)).to_bits())
                    }
                    // Logical operations want zeros too.
                    _ if matches!(self.op, ReduceOp::Land | ReduceOp::Lor | ReduceOp::Lxor) => {
                        r % 3
                    }
                    ReduceType::I32 | ReduceType::U32 => r & 0xffff_ffff,
                    _ => r,
                }
            })
            .collect();
        let locs = if self.op.has_locations() {
            vec![node; self.count as usize]
        } else {
            Vec::new()
        };
        Operand { values, locs }
    }

    /// The result of iteration `iter` over `tree`, folded outside any NIC
    /// in the tree's order (own operand, then each child's subtree in
    /// branch order).
    pub fn reference(&self, tree: &Tree, iter: u32) -> Operand {
        if self.kind == CollectiveKind::Broadcast {
            return self.operand(0, iter);
        }
        // Children have higher ranks: fold from the last node up.
        let n = self.nodes as usize;
        let mut sub: Vec<Option<Operand>> = vec![None; n];
        for i in (0..n).rev() {
            let mut acc = self.operand(i as u32, iter);
            for c in &tree.children[i] {
                let x = sub[c.0 as usize].take().expect("children come later");
                acc = reference::fold(self.op, self.ty, &acc, &x);
            }
            sub[i] = Some(acc);
        }
        sub[0].take().expect("the root")
    }

    /// Node `node`'s descriptor for iteration `iter` (results at
    /// `result`).
    pub fn post(&self, node: u32, iter: u32, result: MrKey) -> ReducePost {
        let i = node as usize;
        ReducePost {
            kind: self.kind,
            ep: self.ep,
            tree: self.tree_id,
            seq: iter + 1,
            op: self.op,
            ty: self.ty,
            count: self.count,
            operand: self.operand(node, iter),
            parent: self.tree.parent[i],
            children: self.tree.children[i].clone(),
            level: self.tree.level[i],
            result: Some((result, self.result_addr(iter))),
        }
    }
}

/// What one node saw of one collective.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Outcome {
    /// Iteration.
    pub iter: u32,
    /// When this node's part finished (it holds the result, or, in a
    /// reduce, its operand was delivered), or why it failed.
    pub done: Result<Instant, String>,
}

/// Decodes host-memory result bytes (little-endian values, then
/// locations) into an operand of `count` elements.
pub fn from_host_bytes(op: ReduceOp, ty: ReduceType, count: u32, bytes: &[u8]) -> Operand {
    let w = ty.width().unwrap_or(8);
    let n = count as usize;
    let values = bytes[..n * w]
        .chunks_exact(w)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect();
    let locs = if op.has_locations() {
        bytes[n * w..n * (w + 4)]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    } else {
        Vec::new()
    };
    Operand { values, locs }
}

/// Every node from `0..n` as an address.
pub fn nodes(n: u32) -> impl Iterator<Item = NodeAddr> {
    (0..n).map(NodeAddr)
}
