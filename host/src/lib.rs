//! `udrma-host`: host software above the engine, as sans-IO state machines
//! that any backend drives.
//!
//! The engine (`udrma-nic`) is one host's network interface. What runs on
//! the host — an MPI-like messaging layer, a benchmark loop, a collective,
//! a researcher's own logic — lives here, one floor up, with the same
//! shape as the engine: it is handed `now` and the host's [`Nic`], reacts
//! to each engine [`Event`], reports its next deadline and handles
//! timeouts, and never reads a clock, a socket or an unseeded random
//! source. The [`App`] trait is that surface; the simulated fabric
//! (`udrma-fabric`) and the UDP bridge (`udrma-bridge`) are the backends
//! that drive it, and neither the app nor the engine knows which one it
//! runs in.
//!
//! - [`app`]: the [`App`] trait, closures as apps ([`app::from_fn`]).
//! - [`datatype`]: MPI derived datatypes, flattened to block lists, with
//!   packing and unpacking (non-contiguous data in host software).
//! - [`noncontig`]: moving non-contiguous data by packing, scatter-gather
//!   lists or indirect keys, and estimating which is fastest.
//! - [`messaging`]: the MVICH-like messaging layer (credits, eager, R3,
//!   RGET, RPUT, tag matching in MPI order).
//! - [`via`]: VIA endpoints (VIs with send and receive queues, shared
//!   completion queues) over a [`Nic`].
//!
//! [`Nic`]: udrma_nic::Nic
//! [`Event`]: udrma_nic::Event
//!
//! Children not named above:
//! - `workload`: Workloads as host apps: the scenario workloads, one [`App`] per host

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use udrma_app as app;
pub mod collective;
pub mod datatype;
pub mod messaging;
pub mod noncontig;
pub mod via;
pub mod workload;

pub use app::App;
