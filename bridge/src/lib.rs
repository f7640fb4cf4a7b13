//! `udrma-bridge`: the unchanged udrma engine ([`udrma_nic::Nic`]) over real
//! UDP sockets, so what was tested in simulation runs between processes
//! and hosts.
//!
//! - [`Endpoint`] is the driver: one engine, one socket, one task. It owns
//!   the only clock (OS monotonic time converted to the engine's
//!   picosecond `Instant` at the edge), batches datagrams with quinn-udp
//!   (GSO/GRO and `recvmmsg` where the kernel offers them), admits peers by
//!   their in-band HELLO, and optionally damages its own traffic with the
//!   simulator's fault rules ([`egress`]).
//! - [`tools`] holds what the `udrma bridge` and `udrma perf` commands do:
//!   serve a region, put/get with verification, and OSU-style latency and
//!   bandwidth runs.
//!
//! Nothing here is deterministic in time (real sockets are not); the
//! engine underneath is the same one the simulator drives.
//!
//! # Example: two endpoints on loopback
//!
//! ```no_run
//! # async fn demo() -> Result<(), udrma_bridge::BridgeError> {
//! use udrma_bridge::{tools, BridgeConfig, Endpoint};
//! let mut server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), BridgeConfig::default()).await?;
//! let addr = server.local_addr();
//! let stop = std::sync::atomic::AtomicBool::new(false);
//! let serving = tools::serve(&mut server, tools::ServeOptions::default(), &stop, |_| {});
//! let mut client = Endpoint::bind("127.0.0.1:0".parse().unwrap(), BridgeConfig::default()).await?;
//! let putting = tools::put(&mut client, addr, 1 << 20, true, 7);
//! # let _ = (serving, putting);
//! # Ok(())
//! # }
//! ```
//!
//! Children not named above:
//! - `admission`: Admission of strangers
//! - `cluster`: The hosts of a scenario on real UDP sockets, named like the scenario's hosts
//! - `endpoint`: [`Endpoint`]
//! - `secure`: The authenticated mode (`--key FILE`)

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod clock;
pub mod cluster;
pub mod egress;
pub mod endpoint;
pub mod peers;
pub mod secure;
pub mod sockets;
pub mod tools;

use std::net::SocketAddr;

pub use cluster::Cluster;
pub use egress::{EgressStats, FaultPlan};
pub use endpoint::{BridgeConfig, BridgeStats, Endpoint};
pub use peers::{Peer, RemoteRegion};

/// Why a bridge command failed.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The socket could not be set up.
    #[error("cannot bind UDP socket at {addr}: {source}")]
    Bind {
        /// Address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A socket error the driver cannot ride out.
    #[error("socket error: {0}")]
    Io(std::io::Error),
    /// A flag or setting that cannot work.
    #[error("{0}")]
    BadInput(String),
    /// The peer table is full.
    #[error("peer table full")]
    PeersFull,
    /// The peer answered that its peer table is full.
    #[error("peer {0} is full: it answered that its peer table holds as many peers as it admits (try again when its idle peers have left, or ask its operator to raise --max-peers)")]
    ServerFull(SocketAddr),
    /// No HELLO reply came back.
    #[error("peer {addr} is unreachable: no answer to {tries} HELLOs over {:.1} s (is {program} running there, is UDP allowed through, and does it need --key, or this side a different one?)", waited.as_secs_f64())]
    Unreachable {
        /// The peer.
        addr: SocketAddr,
        /// HELLOs sent.
        tries: u32,
        /// Time spent.
        waited: std::time::Duration,
        /// What should be running there (`BridgeConfig::peer_program`).
        program: &'static str,
    },
    /// The peer answered but announced no region.
    #[error("peer {0} announces no memory region")]
    NoRegion(SocketAddr),
    /// The transfer does not fit the peer's region.
    #[error("--size {size} B does not fit the peer's region of {region} B (start the server with a larger --region)")]
    TooLarge {
        /// Bytes asked for.
        size: u64,
        /// Bytes the peer offers.
        region: u64,
    },
    /// The engine refused a request.
    #[error("request refused: {0}")]
    Post(#[from] udrma_nic::PostError),
    /// A request completed in error.
    #[error("{what} failed: {error}")]
    Transfer {
        /// Which request.
        what: String,
        /// Why.
        error: udrma_nic::WcError,
    },
    /// Verification found different bytes.
    #[error("verification failed: {count} bytes differ, the first at offset {offset} (expected {expected:#04x}, got {got:#04x})")]
    Mismatch {
        /// First differing offset.
        offset: u64,
        /// Bytes that differ.
        count: u64,
        /// What should be there.
        expected: u8,
        /// What is there.
        got: u8,
    },
}

impl BridgeError {
    /// The process exit code for this error: 2 for bad input, 1 for
    /// everything else (unreachable peer, failed transfer, mismatch).
    pub fn exit_code(&self) -> i32 {
        match self {
            BridgeError::BadInput(_) | BridgeError::TooLarge { .. } | BridgeError::Bind { .. } => 2,
            _ => 1,
        }
    }
}
