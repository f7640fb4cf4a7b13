//! `udrma-sim`: what a researcher's own tests depend on to run host
//! software on simulated hosts over virtual time and check what must hold
//! for any app. It is the simulated fabric ([`Sim`]), the app surface
//! ([`App`], [`from_fn`]), fault rules ([`Model`], [`Target`]), hosts and
//! work requests ([`NodeAddr`], [`Transfer`], [`WorkRequest`]) and the
//! checks ([`Outcome`]), and nothing of the CLI, the UDP bridge, sweeps or
//! scenario files: no clap, tokio, quinn-udp, ring or rayon in its tree
//! (`.ci/run` builds a crate outside the workspace on it and looks).
//!
//! ```
//! use udrma_sim::{from_fn, Access, Event, Model, Sim, Target, Transfer};
//!
//! let mut sim = Sim::builder()
//!     .fault("loss", Target::any(), Model::Loss { p: 0.05, correlation: 0.0 })
//!     .build()
//!     .unwrap();
//! let src = sim.nic_mut("h0").unwrap().register(0x1000, 8192, Access::ALL);
//! let dst = sim.nic_mut("h1").unwrap().register(0x9000, 8192, Access::ALL);
//! let mut landed = 0;
//! sim.add_app("h1", from_fn(move |_now, _nic, event| {
//!     if let Event::WriteReceived { .. } = event {
//!         landed += 1;
//!     }
//! }))
//! .unwrap();
//! let write = Transfer {
//!     peer: udrma_sim::NodeAddr(1),
//!     local: src,
//!     local_addr: 0x1000,
//!     remote: dst,
//!     remote_addr: 0x9000,
//!     len: 8192,
//! };
//! sim.post("h0", write.write()).unwrap();
//! sim.run().assert_invariants();
//! ```
//!
//! The crates it is made of are re-exported whole ([`fabric`], [`nic`],
//! [`faults`], [`proto`]) for what the names above do not cover.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use udrma_app::{from_fn, App};
pub use udrma_fabric::routing::Policy;
pub use udrma_fabric::sim::{Host, Outcome, Sim, SimBuilder};
pub use udrma_fabric::topology::{LinkParams, Topology};
pub use udrma_fabric::FabricError;
pub use udrma_faults::{Direction, Model, Target};
pub use udrma_nic::{
    Access, Event, MrKey, Nic, NicConfig, Transfer, WcError, WorkRequest, WrId, WrKind,
};
pub use udrma_proto::{Duration, Instant, NodeAddr};

pub use udrma_fabric as fabric;
pub use udrma_faults as faults;
pub use udrma_nic as nic;
pub use udrma_proto as proto;
