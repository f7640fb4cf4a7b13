//! Why a world could not be built or a request not posted: one error
//! type for the fabric, below every module that returns it (the
//! topology's names, the world, the shapes, `sim`).

use udrma_faults::FaultError;
use udrma_nic::PostError;
use udrma_proto::pcap::CaptureError;

/// Why a world could not be built or a request not posted.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A fault rule is invalid or names an unknown link.
    #[error(transparent)]
    Fault(#[from] FaultError),
    /// The NIC configuration is invalid.
    #[error("nic: {0}")]
    Nic(#[from] udrma_nic::ConfigError),
    /// A host index beyond the topology.
    #[error("no host h{0} (the topology has {1})")]
    NoHost(u32, usize),
    /// A host name that is not `h` and a number (`h0`, `h12`).
    #[error("no host named {0:?}: hosts are named h0, h1, ...")]
    HostName(String),
    /// A link name the topology lacks; `known` lists the names it has (a
    /// closest match first, when one is near).
    #[error("unknown link {name:?}; {known}")]
    NoLink {
        /// The name asked for.
        name: String,
        /// What the topology offers, for the message.
        known: String,
    },
    /// The topology's shape is impossible (e.g. a fat tree of odd arity).
    #[error("topology: {0}")]
    Topology(String),
    /// The NIC refused a request.
    #[error("post on h{0}: {1}")]
    Post(u32, PostError),
    /// Writing a capture failed.
    #[error(transparent)]
    Capture(#[from] CaptureError),
}
