//! udrma: a deterministic, packet-level testbed for a reliable,
//! connectionless RDMA-over-UDP protocol.
//!
//! This root crate holds the `udrma` command-line tool and re-exports the
//! workspace crates so a researcher's own harness needs one dependency.
//! The wire format lives in [`proto`]; this crate adds what the CLI shows
//! people: [`decode`] turns captures into one line per packet.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod decode;

pub use udrma_proto as proto;
