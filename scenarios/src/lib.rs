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
//!
//! A scenario file run from Rust, the whole `src/main.rs` of a crate that
//! depends on `udrma-scenarios` (`docs/library.md` shows this program; a
//! test at the workspace root keeps the two equal):
//!
//! ```
//! use udrma_scenarios::{run, RunOptions, Scenario, DEMO};
//!
//! fn main() {
//!     // The file named on the command line, or the built-in demo.
//!     let (path, text) = match std::env::args().nth(1) {
//!         Some(path) => match std::fs::read_to_string(&path) {
//!             Ok(text) => (path, text),
//!             Err(e) => {
//!                 eprintln!("error: {path}: {e}");
//!                 std::process::exit(2);
//!             }
//!         },
//!         None => ("<demo>".to_string(), DEMO.to_string()),
//!     };
//!     // Parse and validate (errors say file:line:column), then run it in
//!     // the simulated fabric, as `udrma run` does.
//!     let report = Scenario::parse(&path, &text)
//!         .and_then(|scenario| run(&scenario, RunOptions::default()));
//!     match report {
//!         Ok(report) => {
//!             print!("{}", report.table());
//!             std::process::exit(if report.passed() { 0 } else { 1 });
//!         }
//!         Err(e) => {
//!             eprintln!("error: {e}");
//!             std::process::exit(2);
//!         }
//!     }
//! }
//! ```

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
pub use report::timeline::Timeline;
pub use report::Report;
pub use run::{
    host_part, run, run_host, run_plan, BackendKind, HostError, HostOptions, RankOptions,
    RunOptions,
};

/// The built-in demo (also `scenarios/examples/demo.toml`).
pub const DEMO: &str = include_str!("../examples/demo.toml");
