//! MPI collectives as schedules: which bytes each rank sends to whom, in
//! which step, and what it does with what it receives, for the
//! algorithms MPI libraries use (MPICH's, step for step).
//!
//! A schedule is one rank's list of [`Step`]s over its own buffer (its
//! "arena": the collective's input and output and any scratch room, laid
//! out as [`Plan`] says). In a step the rank first makes its local copies,
//! then posts its sends (each reads the buffer as it is then) and waits
//! for its receives, which land in order: copied, or folded into what the
//! buffer holds (`received ⊕ held`, MPICH's `MPIR_Reduce_local(in,
//! inout)`). Messages between two ranks match in the order they were
//! posted, as MPI's do. Nothing here moves a byte over a network: a
//! backend (the fabric's apps) or the [`run`] interpreter carries the
//! steps out.
//!
//! Children:
//! - `reduce`: allreduce (recursive doubling, Rabenseifner, ring),
//!   reduce (binomial, Rabenseifner's) and reduce-scatter (recursive
//!   halving, pairwise exchange).
//! - `spread`: broadcast (binomial; scatter, then a recursive-doubling
//!   or ring allgather), allgather (recursive doubling, ring, Bruck),
//!   all-to-all (pairwise exchange, Bruck, scattered) and barrier
//!   (dissemination).
//! - [`auto`]: the algorithm MPICH 4.0.2 picks by default.
//! - [`run`]: an interpreter that carries out every rank's schedule in
//!   memory, the reference the others are checked against.
//! - `tests`: every algorithm on 1 to 17 ranks against the collectives'
//!   definitions.

pub mod auto;
mod reduce;
pub mod run;
mod spread;

use std::fmt;

/// A run of bytes in a rank's arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub at: u64,
    /// Bytes.
    pub len: u64,
}

impl Span {
    /// `len` bytes from `at`.
    pub const fn new(at: u64, len: u64) -> Span {
        Span { at, len }
    }

    /// One past the last byte.
    pub const fn end(&self) -> u64 {
        self.at + self.len
    }
}

/// One message: to or from `peer`, its bytes gathered from (or scattered
/// to) `spans` in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    /// The other rank.
    pub peer: u32,
    /// Where its bytes come from or go, in order.
    pub spans: Vec<Span>,
}

impl Msg {
    /// A message of one span.
    pub fn one(peer: u32, span: Span) -> Msg {
        Msg {
            peer,
            spans: vec![span],
        }
    }

    /// Its bytes.
    pub fn bytes(&self) -> u64 {
        self.spans.iter().map(|s| s.len).sum()
    }
}

/// What a received message does to the bytes it lands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Land {
    /// It replaces them.
    Copy,
    /// It is folded into them element by element: `received ⊕ held`.
    Fold,
}

/// One step of one rank: local copies, then sends, then receives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// Local copies `(from, to)`, in order, before anything is sent.
    pub copies: Vec<(Span, Span)>,
    /// Messages sent, in the order posted.
    pub sends: Vec<Msg>,
    /// Messages received, in the order posted, and what each does.
    pub recvs: Vec<(Msg, Land)>,
}

/// A collective operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Collective {
    /// Every rank gets the reduction of every rank's vector.
    Allreduce,
    /// The root gets the reduction of every rank's vector.
    Reduce,
    /// Every rank gets the root's vector.
    Broadcast,
    /// Every rank gets every rank's block, in rank order.
    Allgather,
    /// Rank `i`'s block `j` goes to rank `j`'s block `i`.
    Alltoall,
    /// Every rank gets the reduction of every rank's block for it
    /// (`MPI_Reduce_scatter_block`).
    ReduceScatter,
    /// No rank leaves before every rank has entered.
    Barrier,
}

/// An algorithm, named as MPICH names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Algorithm {
    /// Binomial tree (broadcast, reduce).
    Binomial,
    /// Recursive doubling: every step exchanges the whole vector
    /// (allreduce), or all a rank has gathered (allgather), with the rank
    /// `2^k` away.
    RecursiveDoubling,
    /// Rabenseifner's allreduce: reduce-scatter by recursive halving,
    /// then allgather by recursive doubling.
    Rabenseifner,
    /// Rabenseifner's reduce: reduce-scatter by recursive halving, then a
    /// binomial gather of the pieces to the root.
    ReduceScatterGather,
    /// Ring: reduce-scatter around the ring, then a ring allgather
    /// (allreduce); blocks passed around the ring (allgather).
    Ring,
    /// Broadcast as a binomial scatter, then an allgather by recursive
    /// doubling.
    ScatterDoublingAllgather,
    /// Broadcast as a binomial scatter, then a ring allgather.
    ScatterRingAllgather,
    /// Bruck's algorithm (allgather, all-to-all): `⌈log2 p⌉` steps.
    Bruck,
    /// Recursive halving (reduce-scatter): farthest first, each step
    /// swaps half of what is still in play.
    RecursiveHalving,
    /// Pairwise exchange (all-to-all, reduce-scatter): `p − 1` steps, one
    /// peer each.
    Pairwise,
    /// Scattered (all-to-all): every send and receive posted at once, in
    /// batches of 32 peers.
    Scattered,
    /// Dissemination (barrier): `⌈log2 p⌉` rounds of empty messages.
    Dissemination,
}

impl Algorithm {
    /// The name scenario files and tables use.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Binomial => "binomial",
            Algorithm::RecursiveDoubling => "recursive_doubling",
            Algorithm::Rabenseifner => "reduce_scatter_allgather",
            Algorithm::ReduceScatterGather => "reduce_scatter_gather",
            Algorithm::Ring => "ring",
            Algorithm::ScatterDoublingAllgather => "scatter_recursive_doubling_allgather",
            Algorithm::ScatterRingAllgather => "scatter_ring_allgather",
            Algorithm::Bruck => "brucks",
            Algorithm::RecursiveHalving => "recursive_halving",
            Algorithm::Pairwise => "pairwise",
            Algorithm::Scattered => "scattered",
            Algorithm::Dissemination => "dissemination",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Collective {
    /// Every collective, in the order the docs list them.
    pub const ALL: [Collective; 7] = [
        Collective::Allreduce,
        Collective::Reduce,
        Collective::Broadcast,
        Collective::Allgather,
        Collective::Alltoall,
        Collective::ReduceScatter,
        Collective::Barrier,
    ];

    /// The name scenario files and tables use.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Reduce => "reduce",
            Collective::Broadcast => "broadcast",
            Collective::Allgather => "allgather",
            Collective::Alltoall => "alltoall",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Barrier => "barrier",
        }
    }

    /// The algorithms this crate schedules it with.
    pub fn algorithms(self) -> &'static [Algorithm] {
        use Algorithm::*;
        match self {
            Collective::Allreduce => &[RecursiveDoubling, Rabenseifner, Ring],
            Collective::Reduce => &[Binomial, ReduceScatterGather],
            Collective::Broadcast => &[Binomial, ScatterDoublingAllgather, ScatterRingAllgather],
            Collective::Allgather => &[RecursiveDoubling, Ring, Bruck],
            Collective::Alltoall => &[Pairwise, Bruck, Scattered],
            Collective::ReduceScatter => &[RecursiveHalving, Pairwise],
            Collective::Barrier => &[Dissemination],
        }
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One collective call, as every rank makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// Which collective.
    pub collective: Collective,
    /// Which algorithm.
    pub algorithm: Algorithm,
    /// Ranks taking part.
    pub ranks: u32,
    /// Elements: of each rank's vector (allreduce, reduce, broadcast), of
    /// each rank's block (allgather, reduce-scatter: each rank gives `p`
    /// such blocks), of each block one rank sends another (all-to-all).
    /// Ignored by a barrier.
    pub count: u64,
    /// Bytes of one element.
    pub elem: u64,
    /// The root of a rooted collective (reduce, broadcast).
    pub root: u32,
    /// Most bytes per message of the ring allgatherv's pipeline (the
    /// allgather half of the ring allreduce): MPICH's
    /// `MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE`, [`Spec::PIPELINE`] by
    /// default.
    pub pipeline: u64,
}

/// Why a collective cannot be scheduled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The algorithm does not do this collective.
    #[error("{algorithm} does not do {collective} (it does: {})", names(collective.algorithms()))]
    NotFor {
        /// The collective asked for.
        collective: Collective,
        /// The algorithm asked for.
        algorithm: Algorithm,
    },
    /// No ranks, a rank or root outside the communicator, or an element
    /// of no bytes.
    #[error("{0}")]
    Bad(String),
}

fn names(algs: &[Algorithm]) -> String {
    algs.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
}

/// One rank's part of a collective: its arena's size, where its input
/// starts and its result ends up, and its steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Bytes of the rank's arena.
    pub arena: u64,
    /// Where the rank's own contribution is before the first step (for a
    /// broadcast, the root's vector; empty at other ranks).
    pub input: Span,
    /// Where the result is after the last step (empty at a reduce's
    /// other ranks and in a barrier).
    pub output: Span,
    /// Its steps.
    pub steps: Vec<Step>,
}

impl Spec {
    /// MPICH's default pipeline piece of the ring allgatherv, 32 KiB
    /// (`MPIR_CVAR_ALLGATHERV_PIPELINE_MSG_SIZE`, MPICH 4.1).
    pub const PIPELINE: u64 = 32768;

    /// Rank `rank`'s plan.
    pub fn plan(&self, rank: u32) -> Result<Plan, ScheduleError> {
        use Algorithm::*;
        use Collective::*;
        let p = self.ranks;
        if p == 0 || rank >= p || self.root >= p || self.elem == 0 {
            return Err(ScheduleError::Bad(format!(
                "rank {rank} and root {} of {p} ranks, elements of {} bytes: \
                 ranks and root must be below the ranks, and elements at least a byte",
                self.root, self.elem
            )));
        }
        if !self.collective.algorithms().contains(&self.algorithm) {
            return Err(ScheduleError::NotFor {
                collective: self.collective,
                algorithm: self.algorithm,
            });
        }
        // MPICH returns from a collective of no elements before any
        // algorithm runs: nothing is sent (recorded with MPICH 4.0.2 on 4
        // ranks for every collective but the barrier, which has no count).
        if self.count == 0 && self.collective != Barrier {
            return Ok(Plan {
                arena: 0,
                input: Span::new(0, 0),
                output: Span::new(0, 0),
                steps: Vec::new(),
            });
        }
        let s = self;
        Ok(match (self.collective, self.algorithm) {
            (Allreduce, RecursiveDoubling) => reduce::recursive_doubling(s, rank),
            (Allreduce, Rabenseifner) => reduce::rabenseifner(s, rank),
            (Allreduce, Ring) => reduce::ring(s, rank),
            (Reduce, Binomial) => reduce::binomial(s, rank),
            (Reduce, ReduceScatterGather) => reduce::rabenseifner_reduce(s, rank),
            (Broadcast, Binomial) => spread::bcast_binomial(s, rank),
            (Broadcast, ScatterRingAllgather) => spread::bcast_scatter_ring(s, rank),
            (Broadcast, ScatterDoublingAllgather) => spread::bcast_scatter_doubling(s, rank),
            (Allgather, RecursiveDoubling) => spread::allgather_recursive_doubling(s, rank),
            (Allgather, Ring) => spread::allgather_ring(s, rank),
            (Allgather, Bruck) => spread::allgather_bruck(s, rank),
            (Alltoall, Pairwise) => spread::alltoall_pairwise(s, rank),
            (Alltoall, Bruck) => spread::alltoall_bruck(s, rank),
            (Alltoall, Scattered) => spread::alltoall_scattered(s, rank),
            (ReduceScatter, RecursiveHalving) => reduce::reduce_scatter_halving(s, rank),
            (ReduceScatter, Pairwise) => reduce::reduce_scatter_pairwise(s, rank),
            (Barrier, Dissemination) => spread::barrier(s, rank),
            (collective, algorithm) => {
                return Err(ScheduleError::NotFor {
                    collective,
                    algorithm,
                })
            }
        })
    }

    /// Bytes of each rank's vector, block or block per pair.
    pub fn bytes(&self) -> u64 {
        self.count * self.elem
    }
}

/// The largest power of two at most `p` (`p` ≥ 1).
pub(crate) fn pof2(p: u32) -> u32 {
    1 << (31 - p.leading_zeros())
}

#[cfg(test)]
mod tests;
