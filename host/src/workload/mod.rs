//! Workloads as host apps: the scenario workloads, one [`App`] per host.
//!
//! A scenario file describes what every host does; its runner plans that
//! once (the same plan in every process, from the file and the seed) and
//! gives each host an app that carries out its own part: posting at its
//! times, reacting to its own completions and landings, and recording
//! what it saw. The runner then reads the records of the hosts it drives
//! and checks them. Nothing here knows whether the hosts are simulated or
//! on sockets, or whether the peer runs in the same process.
//!
//! - [`rdma`]: RDMA WRITE, READ and SEND workloads (timed, windowed,
//!   ping-pong, buffer reuse).
//! - [`noncontig`]: the non-contiguous ping-pong (pack, scatter-gather
//!   lists or indirect keys).
//! - [`msg`]: the OSU-shaped messaging workloads over the
//!   [`messaging`](crate::messaging) layer.
//! - `pattern`: the bytes every workload region starts with, and the
//!   test that bytes are a slice of them.
//!
//! [`App`]: crate::App

pub mod msg;
pub mod noncontig;
mod pattern;
pub mod rdma;

pub use pattern::{is_pattern, pattern, pattern_at};
