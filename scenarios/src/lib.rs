//! `udrma-scenarios`: one TOML file describes a whole experiment
//! (topology, NIC configuration, workloads, faults, pauses, checks); this
//! crate validates it, runs it in the fabric or over real sockets, checks the invariants of
//! `docs/design.md` and reports. It reads no files itself: the CLI hands
//! it the text.
//!
//! A scenario goes down one corridor: parse → validate → resolve → run →
//! report. The folders follow it, each importing only those before it:
//! - [`file`]: the file and its keys (units, schema, edits, the parsed
//!   scenario and its located errors, check names, which keys apply);
//! - [`plan`]: resolving into what a run needs (profiles, topology, NICs,
//!   fault rules, pauses, the workload families' plans), validation, and
//!   `Scenario::parse`;
//! - [`run`]: the entry and the backends, and one runner per workload
//!   family (RDMA, messaging, non-contiguous, collective);
//! - [`report`]: what a run reports, and its pictures (ladders, SVG).
//!
//! (The report sits after the runners that fill it; the runners import
//! it, not the other way: `report` reads a backend only through the
//! `backend` seam.)

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod file;
pub mod plan;
pub mod report;
pub mod run;

pub use file::schema::ScenarioFile;
pub use file::source::{Scenario, ScenarioError};
pub use plan::resolved::Resolved;
pub use report::ladder::Ladder;
pub use report::Report;
pub use run::{run, run_host, BackendKind, HostError, HostOptions, RunOptions};

/// The built-in demo (also `scenarios/examples/demo.toml`).
pub const DEMO: &str = include_str!("../examples/demo.toml");
