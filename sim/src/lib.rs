//! `udrma-sim`: what a researcher's own tests depend on to run host
//! software on simulated hosts over virtual time and check what must hold
//! for any app. It is the simulated fabric ([`Sim`]), the app surface
//! ([`App`], [`from_fn`]), fault rules ([`Model`], [`Target`]), hosts and
//! work requests ([`NodeAddr`], [`Transfer`], [`WorkRequest`]) and the
//! checks ([`Outcome`]), and nothing of the CLI, the UDP bridge, sweeps or
//! scenario files: no clap, tokio, quinn-udp, ring or rayon in its tree
//! (`.ci/run` builds a crate outside the workspace on it and looks).
//!
//! The program below is the README's (`tests/readme_followed.rs` keeps the
//! two equal, so the README shows code this doctest compiles and runs):
//! the whole `src/main.rs` of a crate that depends on `udrma-sim`. The
//! guide to this API is `docs/library.md`.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//!
//! use udrma_sim::{
//!     from_fn, Access, Event, LinkParams, Model, NodeAddr, Sim, Target, Topology, Transfer,
//! };
//!
//! fn main() {
//!     // Four hosts h0..h3 on one switch s0 (links h0-s0 .. h3-s0: 100 Gb/s,
//!     // 1 us, the LinkParams defaults); every link loses 2 % of its packets.
//!     let mut sim = Sim::builder()
//!         .topology(Topology::star(4, LinkParams::default()))
//!         .seed(42)
//!         .fault("loss", Target::any(), Model::Loss { p: 0.02, correlation: 0.0 })
//!         .build()
//!         .expect("the fault rule is valid");
//!
//!     // 64 KiB on h0, filled with 0xab, and 64 KiB on h3 to receive it.
//!     let len = 64 << 10;
//!     let src = sim.nic_mut("h0").unwrap().register(0x1000, len, Access::ALL);
//!     let dst = sim.nic_mut("h3").unwrap().register(0x9000, len, Access::ALL);
//!     let h0 = sim.nic_mut("h0").unwrap();
//!     h0.memory_mut().region_mut(src).unwrap().bytes.fill(0xab);
//!
//!     // h3's app notes who wrote to it. Apps must be Send: results leave
//!     // a closure through an Arc<Mutex<_>>.
//!     let writers = Arc::new(Mutex::new(Vec::new()));
//!     let seen = Arc::clone(&writers);
//!     let on_h3 = from_fn(move |_now, _nic, event| {
//!         if let Event::WriteReceived { from, .. } = event {
//!             seen.lock().unwrap().push(from);
//!         }
//!     });
//!     sim.add_app("h3", on_h3).unwrap();
//!
//!     // h0 WRITEs its region into h3's.
//!     let write = Transfer {
//!         peer: NodeAddr(3),
//!         local: src,
//!         local_addr: 0x1000,
//!         remote: dst,
//!         remote_addr: 0x9000,
//!         len: len as u64,
//!     };
//!     sim.post("h0", write.write()).unwrap();
//!
//!     // Run to the end; panic if an invariant failed or a request did.
//!     let outcome = sim.run();
//!     outcome.assert_invariants();
//!     assert_eq!(*writers.lock().unwrap(), [NodeAddr(0)]);
//!     let landed = &sim.world().nic(NodeAddr(3)).memory().region(dst).unwrap().bytes;
//!     assert!(landed.iter().all(|b| *b == 0xab));
//!     println!("done at {}, trace {:016x}", outcome.now, outcome.trace_hash);
//! }
//! ```
//!
//! A second program, from `docs/library.md` (kept equal to it by the same
//! test): an app written as a struct, a fat tree, and a link that goes
//! down for a while.
//!
//! ```
//! use udrma_sim::{
//!     Access, App, Duration, Event, Instant, LinkParams, Model, MrKey, Nic, NodeAddr, Policy, Sim,
//!     Target, Topology, Transfer,
//! };
//!
//! /// h0's app: READs `len` bytes from h15 when it starts, and keeps the time
//! /// the READ took.
//! struct Reader {
//!     local: MrKey,
//!     remote: MrKey,
//!     len: u64,
//!     took: Option<Duration>,
//! }
//!
//! impl App for Reader {
//!     fn start(&mut self, now: Instant, nic: &mut Nic) {
//!         let read = Transfer {
//!             peer: NodeAddr(15),
//!             local: self.local,
//!             local_addr: 0,
//!             remote: self.remote,
//!             remote_addr: 0,
//!             len: self.len,
//!         };
//!         nic.post(now, read.read()).expect("the OP table has room");
//!     }
//!
//!     fn handle_event(&mut self, now: Instant, _nic: &mut Nic, event: Event) {
//!         if let Event::Completed { result: Ok(()), .. } = event {
//!             self.took = Some(now - Instant::ZERO);
//!         }
//!     }
//!
//!     fn is_done(&self) -> bool {
//!         self.took.is_some()
//!     }
//! }
//!
//! fn main() {
//!     // A k=4 fat tree (16 hosts; links h0-e0, e0-a0, a0-c0, ...) with 2 us
//!     // links, packets sprayed over every shortest path, and h0's own link
//!     // down from 5 us to 60 us.
//!     let links = LinkParams { latency: Duration::from_micros(2), ..LinkParams::default() };
//!     let down = Target::any().links(&["h0-e0"]).window(
//!         Instant::ZERO + Duration::from_micros(5),
//!         Instant::ZERO + Duration::from_micros(60),
//!     );
//!     let mut sim = Sim::builder()
//!         .topology(Topology::fat_tree(4, links).expect("k is even"))
//!         .routing(Policy::Spray)
//!         .fault("flap", down, Model::Down)
//!         .time_limit(Duration::from_millis(10))
//!         .build()
//!         .expect("h0-e0 is a link of the tree");
//!
//!     let len = 256 << 10;
//!     let local = sim.nic_mut("h0").unwrap().register(0, len, Access::ALL);
//!     let remote = sim.nic_mut("h15").unwrap().register(0, len, Access::ALL);
//!     let reader = Reader { local, remote, len: len as u64, took: None };
//!     sim.add_app("h0", reader).unwrap();
//!
//!     let outcome = sim.run();
//!     assert!(outcome.passed(), "{:?}", outcome.violations);
//!     let took = sim.app::<Reader>("h0").unwrap().took.unwrap();
//!     let stats = sim.world().nic(NodeAddr(0)).stats();
//!     println!("256 KiB read in {took}, {} retransmits", stats.retransmits);
//!     assert!(took > Duration::from_micros(60), "the READ waited for the link");
//! }
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
