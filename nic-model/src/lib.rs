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

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod mask;
pub mod memory;
pub mod nic;
pub mod optable;
pub mod pair;
pub mod registry;
pub mod rtt;
pub mod stats;
pub mod time;
pub mod wr;

pub use config::{AckMode, ConfigError, NicConfig, RegistrationMode, RetransmitMode};
pub use memory::{Access, MemoryTable, MrKey};
pub use nic::{Nic, Transmit};
pub use stats::{Occupancy, Stats};
pub use time::{Duration, Instant};
pub use wr::{Event, PostError, WcError, WorkRequest, WrId, WrKind};
