//! udrma: a deterministic, packet-level testbed for a reliable,
//! connectionless RDMA-over-UDP protocol.
//!
//! This root crate holds the `udrma` command-line tool and re-exports the
//! workspace crates so a researcher's own harness needs one dependency:
//! the wire format ([`proto`]), the engine ([`nic`]), host software and
//! the app surface ([`host`]), fault rules ([`faults`]), the simulated
//! fabric ([`fabric`], with the Rust-built simulation [`sim`]), scenario
//! files ([`scenarios`]) and the UDP bridge ([`bridge`]). It adds what the
//! CLI shows people: [`decode`] turns captures into one line per packet.
//!
//! # Embedding the simulator in your own tests
//!
//! Add `udrma` as a dev-dependency, put your host logic in an
//! [`host::App`] (or a closure, [`host::app::from_fn`]), inject faults,
//! run, and assert the invariants:
//!
//! ```
//! use udrma::faults::{Model, Target};
//! use udrma::host::app::from_fn;
//! use udrma::nic::{Access, Event, WorkRequest};
//! use udrma::proto::NodeAddr;
//! use udrma::sim::Sim;
//!
//! let (h0, h1) = (NodeAddr(0), NodeAddr(1));
//! let mut sim = Sim::builder()
//!     .fault("dup", Target::any(), Model::Duplicate { p: 0.2, copies: 1, correlation: 0.0 })
//!     .build()
//!     .unwrap();
//! let src = sim.nic_mut(h0).unwrap().register(0x1000, 8192, Access::ALL);
//! let dst = sim.nic_mut(h1).unwrap().register(0x9000, 8192, Access::ALL);
//! // h1 answers every WRITE that lands with a WRITE of its own.
//! sim.add_app(h1, from_fn(move |now, nic, event| {
//!     if let Event::WriteReceived { from, len, .. } = event {
//!         let back = WorkRequest::write(from, dst, 0x9000, len, src.0, 0x1000);
//!         nic.post(now, back).unwrap();
//!     }
//! }))
//! .unwrap();
//! sim.post(h0, WorkRequest::write(h1, src, 0x1000, 8192, dst.0, 0x9000))
//!     .unwrap();
//! let outcome = sim.run();
//! outcome.assert_invariants();
//! ```
//!
//! `examples/custom_app.rs` is the longer version: a pingpong app written
//! as a struct, run under loss and duplication, with its own assertions.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod decode;

pub use udrma_bridge as bridge;
pub use udrma_fabric as fabric;
pub use udrma_fabric::sim;
pub use udrma_faults as faults;
pub use udrma_host as host;
pub use udrma_nic as nic;
pub use udrma_proto as proto;
pub use udrma_scenarios as scenarios;
