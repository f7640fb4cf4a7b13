//! The file and its keys: what a scenario says, before anything is built
//! from it.
//!
//! Children, from the bottom up:
//! - [`units`]: sizes, times and rates written as strings (`"4KiB"`,
//!   `"2us"`, `"100Gbps"`);
//! - [`cdf`]: a flow workload's size distribution, its points or the
//!   name of a published one;
//! - [`schema`]: the TOML document, every table and key with its default;
//! - [`keys`]: which keys each workload kind and fault model takes;
//! - [`edit`]: dotted-path edits (`fault.loss.p`), for sweeps and `--set`;
//! - [`source`]: a parsed scenario (`Scenario`: its text, path and file)
//!   and errors that point at the line and key they are about;
//! - [`checks`]: the names of the checks a run makes;
//! - [`applies`]: refuses a key its workload's kind or fault's model does
//!   not take.

pub mod applies;
pub mod cdf;
pub mod checks;
pub mod edit;
pub mod keys;
pub mod schema;
pub mod source;
pub mod units;
