//! Resolving a scenario into what a run needs: each piece built once
//! from the file, each error located in it.
//!
//! Children, from the bottom up:
//! - [`profile`]: hardware profiles (cost model, messaging configuration);
//! - [`build`]: topology, NIC configuration, fabric configuration, fault
//!   rules, pauses, PFC, host names (with `build/nic.rs` and
//!   `build/faults.rs`);
//! - [`resolved`]: the one pass from a scenario to its profile, topology
//!   and NIC configuration that validation and every run take;
//! - one planner per workload family: [`flows`] (sizes and starts of the
//!   flow workload, and its figures), [`rdma`] (every operation of the
//!   RDMA workloads), [`messaging`] (the OSU-shaped loops), [`ncplan`]
//!   (the non-contiguous ping-pong's layouts and method), [`collplan`]
//!   (the collective study's trees and iterations);
//! - [`validate`]: the one validation pass (resolution, then what needs
//!   it: host names, sizes, keys a kind does not take);
//! - [`scenario`]: `Scenario::parse`, text to a validated scenario.

pub mod build;
pub mod collplan;
pub mod flows;
pub mod messaging;
pub mod ncplan;
pub mod profile;
pub mod rdma;
pub mod resolved;
pub mod scenario;
pub mod validate;
