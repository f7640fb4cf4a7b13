//! `udrma-fabric`: the deterministic, discrete-event world the NIC engine
//! lives in.
//!
//! A [`World`] holds a [`Topology`] (hosts, switches, full-duplex links
//! with bandwidth, latency, MTU, egress queues and optional ECN marking),
//! one `udrma-nic` engine per host, a [`Router`] (shortest path, ECMP by
//! flow hash, or per-packet spraying), the fault rules of `udrma-faults`,
//! a [`Trace`] whose hash identifies the run, and an optional pcap tap.
//!
//! Determinism: one master seed; each fault rule and each switch draws
//! from its own ChaCha8 stream derived from (seed, name); events are
//! ordered by (time, insertion sequence), or in lookahead windows node by
//! node; no hash-map iteration. Same topology, configuration, posts and
//! seed give the same trace hash, and a run in windows gives it on any
//! number of threads ([`run_sharded`]).
//! Nothing here reads a file, a clock or the environment: sinks are
//! handed in by the caller.
//!
//! Modules, from the bottom up (each imports only those below it, so
//! there is no import circle): [`error`] (`FabricError`), [`matrix`]
//! (traffic matrices), `prefetch` and `queue` (the event queue), [`trace`],
//! [`topology`], [`routing`], [`world`] (the event loop; its children are
//! listed in its docs), [`shapes`] (worlds for benchmarks), [`sim`] (a
//! simulation built in Rust).

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod error;
pub mod matrix;
mod prefetch;
mod queue;
pub mod routing;
pub mod shapes;
pub mod sim;
pub mod topology;
pub mod trace;
pub mod world;

pub use routing::{Policy, Router};
pub use topology::{LinkParams, Topology};
pub use trace::{read_postcard, DropReason, Trace, TraceEvent, TraceFormat};
pub use world::{
    partition, run_ranked, run_sharded, Egress, EventOrder, Exchanged, FabricConfig, FabricError,
    FabricStats, FingerprintLog, HostEvent, Journey, LocalRanks, Packed, PfcConfig, PfcDeadlock,
    PfcError, PfcPortStats, Ran, RankedRun, RankedWorld, Ranks, ShardError, ShardedRun, SplitWorld,
    WindowError, World, MAX_SHARDS, PFC_WIRE_BYTES, WIRE_OVERHEAD,
};
