//! Resolving a scenario into what a run needs: each piece built once
//! from the file, each error located in it.
//!
//! Children, from the bottom up:
//! - [`profile`]: hardware profiles (link defaults, cost model, NIC limits);
//! - [`build`]: topology, PFC, and (in `build/nic.rs`, `build/faults.rs`,
//!   `build/msg.rs`) the NIC configuration, the fault rules and pauses,
//!   and the messaging layer's configuration;
//! - one planner per workload family: [`ncplan`] (the non-contiguous
//!   ping-pong's layouts and method), [`collplan`] (the collective
//!   study's trees and iterations), [`schedplan`] (a collective by one
//!   of MPI's algorithms: sizes, ranks, iterations), [`flows`] (sizes and starts of the
//!   flow workload, and its figures), [`rdma`] (every operation of the
//!   RDMA workloads), [`messaging`] (the OSU-shaped loops);
//! - [`resolved`]: the one pass from a scenario to what a run needs:
//!   [`resolved::resolve`] (profile, topology, NIC configuration, fault
//!   rules, pauses, messaging configuration), which validation takes, and
//!   [`resolved::plan`], which adds every workload planned and what the
//!   runner reads (checks, outputs, time limit) for one backend: the
//!   [`resolved::Plan`] every run takes;
//! - [`validate`]: the one validation pass (resolution, then what needs
//!   it: host names, sizes, keys a kind does not take);
//! - [`scenario`]: `Scenario::parse`, text to a validated scenario;
//! - [`filled`]: the scenario as it runs, every key filled in (`udrma
//!   validate`).

pub mod build;
pub mod collplan;
pub mod filled;
pub mod flows;
pub mod messaging;
pub mod ncplan;
pub mod profile;
pub mod rdma;
pub mod resolved;
pub mod scenario;
pub mod schedplan;
pub mod validate;
