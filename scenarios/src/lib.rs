//! `udrma-scenarios`: one TOML file describes a whole experiment
//! (topology, NIC configuration, workloads, faults, pauses, checks); this
//! crate validates it, runs it in the fabric or over real sockets, checks the invariants of
//! `docs/design.md` and reports. It reads no files itself: the CLI hands
//! it the text.
//!
//! Modules, from the bottom up (each imports only those above it):
//! - the spec: [`units`], [`schema`], [`edit`] (dotted-path edits for
//!   sweeps), [`source`] (parsed text and located errors), [`checks`]
//!   (check names), [`applies`] (which keys each workload kind takes);
//! - the build: [`profile`] (hardware profiles, cost model, messaging
//!   configuration), [`build`] (topology, NICs, fault rules, pauses),
//!   [`resolved`] (the one pass from file to profile, topology and NIC
//!   configuration that validation and each run take),
//!   [`ncplan`] (the non-contiguous workload's layouts and method),
//!   [`flows`] (the flow workload's sizes and starts, and its figures),
//!   [`collplan`] (the collective study's trees and iterations),
//!   [`validate`] (the one validation pass), [`scenario`]
//!   (`Scenario::parse`: text to a validated scenario);
//! - the run: [`backend`] (the seam between what the hosts do and where
//!   the packets go: the simulated world or real sockets), [`report`],
//!   [`leftover`] (what a run left undone), [`svg`], [`ladder`], [`rdma`]
//!   [`messaging`], [`noncontig`] and [`collective`] (plan the workloads, install one app per host from
//!   `udrma_host::workload`, check what the apps recorded), [`run`] (the
//!   entry: build the backend, hand it to a runner).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod applies;
pub mod backend;
pub mod build;
pub mod checks;
pub mod collective;
pub mod collplan;
pub mod edit;
pub mod flows;
pub mod ladder;
pub mod leftover;
pub mod messaging;
pub mod ncplan;
pub mod noncontig;
pub mod profile;
pub mod rdma;
pub mod report;
pub mod resolved;
pub mod run;
pub mod scenario;
pub mod schema;
pub mod source;
pub mod svg;
pub mod units;
pub mod validate;

pub use ladder::Ladder;
pub use report::Report;
pub use resolved::Resolved;
pub use run::{run, run_host, BackendKind, HostError, HostOptions, RunOptions};
pub use schema::ScenarioFile;
pub use source::{Scenario, ScenarioError};

/// The built-in demo (also `scenarios/examples/demo.toml`).
pub const DEMO: &str = include_str!("../examples/demo.toml");
