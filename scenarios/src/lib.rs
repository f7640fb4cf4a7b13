//! `udrma-scenarios`: one TOML file describes a whole experiment
//! (topology, NIC configuration, workloads, faults, pauses, checks); this
//! crate validates it, runs it in the fabric or over real sockets, checks the invariants of
//! `docs/design.md` and reports. It reads no files itself: the CLI hands
//! it the text.
//!
//! A scenario goes parse → validate → resolve → run → report. The
//! modules are those stages, each importing only the ones listed before
//! it (`tests/module_floors.rs`, at the workspace root, checks them and,
//! inside each folder, its files):
//! - [`file`]: the file and its keys (units, schema, edits, the parsed
//!   scenario and its located errors, check names, which keys apply);
//! - [`plan`]: resolving into what a run needs (profiles, topology, NICs,
//!   fault rules, pauses, one plan per workload family), validation, and
//!   `Scenario::parse`;
//! - [`backend`]: the seam between what the hosts do and where the
//!   packets go (the simulated world, or real sockets);
//! - [`report`]: what a run reports, read from a backend, and its
//!   pictures (ladders, SVG);
//! - [`run`]: the entry, which builds the backend, and one runner per
//!   workload family (RDMA, messaging, non-contiguous, collective), each
//!   filling a report.
//!
//! (So the report comes before the runners, though a run reaches it
//! last: the runners fill it, and it reads the backend.)

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod file;
pub mod plan;
pub mod report;
pub mod run;

pub use file::schema::ScenarioFile;
pub use file::source::{Locate, Locator, Scenario, ScenarioError};
pub use plan::resolved::{plan, Plan, Resolved};
pub use report::ladder::Ladder;
pub use report::Report;
pub use run::{
    host_part, run, run_host, run_plan, BackendKind, HostError, HostOptions, RankOptions,
    RunOptions,
};

/// The built-in demo (also `scenarios/examples/demo.toml`).
pub const DEMO: &str = include_str!("../examples/demo.toml");
