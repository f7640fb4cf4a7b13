//! `udrma-nic`: the sans-IO protocol engine of udrma.
//!
//! One [`Nic`] is one host's network interface: it segments large
//! transfers, tracks every outstanding packet in a DMA OP table with
//! adaptive retransmit deadlines, and on the receive side keeps the receive
//! registry (with the patent's bitmask), the escape channel and the
//! tombstones. It holds registered memory whose bytes are really stored.
//!
//! The engine never reads a clock, a socket, the environment or an
//! unseeded random number generator: time is [`Instant`] (picoseconds),
//! passed in by the caller; datagrams go in through
//! [`Nic::handle_datagram`] and out through [`Nic::poll_transmit`]. The
//! simulated fabric and the UDP bridge are two such callers; [`pair::Pair`]
//! is a third, for tests: two NICs over a perfect wire that tests can damage
//! packet by packet.
//!
//! Every structure that a peer can make grow is bounded (see
//! [`NicConfig`] and [`Nic::occupancy`]); every packet dropped or refused is
//! counted by reason in [`Stats`].
//!
//! # Example: a WRITE whose FIRST packet is lost
//!
//! ```
//! use udrma_nic::pair::{Pair, Verdict};
//! use udrma_nic::{Access, Event, NicConfig, WorkRequest};
//! use udrma_proto::NodeAddr;
//!
//! let mut pair = Pair::new(NicConfig { mtu_payload: 1024, ..NicConfig::default() });
//! let src = pair.nics[0].register(0x1000, 8192, Access::ALL);
//! pair.nics[0].memory_mut().region_mut(src).unwrap().bytes.fill(0xab);
//! let dst = pair.nics[1].register(0x9000, 8192, Access::ALL);
//!
//! // Lose the first FIRST packet on the wire.
//! let mut lost = false;
//! pair.set_filter(move |w| match w.repr {
//!     Some(r) if !lost && r.kind_name() == "WRITE_FIRST" => { lost = true; Verdict::Drop }
//!     _ => Verdict::Deliver,
//! });
//! let wr = pair.nics[0]
//!     .post(pair.now, WorkRequest::write(NodeAddr(1), src, 0x1000, 4096, dst.0, 0x9000))
//!     .unwrap();
//! pair.run();
//!
//! // Exactly one completion, and the bytes arrived.
//! let done: Vec<_> = pair.events_of(0).filter(|e| matches!(e, Event::Completed { .. })).collect();
//! assert!(matches!(done[..], [Event::Completed { wr: w, result: Ok(()), .. }] if *w == wr));
//! assert!(pair.nics[1].memory().region(dst).unwrap().bytes[..4096].iter().all(|b| *b == 0xab));
//! // The three packets behind the lost FIRST waited in the escape channel.
//! assert_eq!(pair.nics[1].stats().escape_buffered, 3);
//! ```
//!
//! Children not named above:
//! - `cc`: Congestion control: the seam between the send gate and a controller
//! - `config`: `NicConfig`: every knob of the engine, with defaults and validation
//! - `cost`: The cost model: how long host and NIC work takes in simulated time
//! - `ids`: Identifiers shared by the modules that hold memory and the ones that name it
//! - `mask`: `Mask`: the receive registry's bitmask (the patent's barrel-shifter rule)
//! - `optable`: `OpTable`: the DMA OP table
//! - `peermap`: A map from peers to what a NIC keeps about each, its first few entries inline
//! - `reduce`: NIC-offloaded reductions: counters, triggered descriptors and an ALU
//! - `rtt`: `RttEstimator`, the adaptive retransmission timeout of RFC 6298
//! - `sgl`: Scatter-gather lists: one logical run of bytes made of blocks in registered memory
//! - `translation`: The NIC's address translation cache for indirect keys

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cc;
pub mod config;
pub mod cost;
pub mod ids;
pub mod mask;
pub mod memory;
pub mod nic;
pub mod optable;
pub mod pair;
pub(crate) mod peermap;
pub mod reduce;
pub mod registry;
pub mod rtt;
pub mod sgl;
pub mod stats;
pub mod tombstones;
pub mod translation;
pub mod wr;

pub use cc::{CcAlgorithm, CcConfig, CongestionControl};
pub use config::{
    AckMode, ConfigError, Multipath, NicConfig, RegistrationMode, RetransmitMode, TombstoneMode,
};
pub use cost::CostModel;
pub use memory::{Access, MemoryTable, MrKey};
pub use nic::{Ecn, Nic, RxMeta, Transmit};
pub use sgl::{Sge, Sgl};
pub use stats::{Occupancy, Stats};
pub use udrma_proto::time::{self, Duration, Instant};
pub use wr::{Control, Event, PostError, Transfer, WcError, WorkRequest, WrId, WrKind};
