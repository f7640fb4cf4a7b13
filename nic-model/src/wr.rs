//! Work requests the host posts, and the events the engine raises.

use core::fmt;

use thiserror::Error;
use udrma_proto::{NodeAddr, Syndrome};

use crate::ids::MrKey;
use crate::sgl::Sgl;
use udrma_proto::time::Instant;

/// Names a posted request; unique per NIC, increasing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct WrId(pub u64);

impl fmt::Display for WrId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wr{}", self.0)
    }
}

/// Which kind of request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum WrKind {
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE followed by a data-arrived notification.
    WriteNotify,
    /// RDMA READ.
    Read,
    /// SEND.
    Send,
    /// A posted receive buffer.
    Recv,
    /// A messaging control message (RTS, CTS or FIN), delivered reliably.
    Control,
    /// A collective's descriptor ([`crate::reduce::ReducePost`]): completes
    /// when this node's part is done (see `docs/collectives.md`).
    Reduce,
}

/// A control message of the messaging layer, carried by one reliable
/// packet (RTS, CTS or FIN on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Control {
    /// Request-to-send.
    Rts(udrma_proto::Rendezvous),
    /// Clear-to-send.
    Cts(udrma_proto::Rendezvous),
    /// Rendezvous finished.
    Fin {
        /// Protocol being finished.
        protocol: udrma_proto::Protocol,
        /// Message tag.
        tag: u32,
        /// Message sequence number of the RTS it finishes.
        seq: u32,
    },
}

/// One RDMA transfer between a local and a remote region, by name:
///
/// ```
/// use udrma_nic::{MrKey, Transfer, WorkRequest};
/// use udrma_proto::NodeAddr;
///
/// let t = Transfer {
///     peer: NodeAddr(1),
///     local: MrKey(1),
///     local_addr: 0x1000,
///     remote: MrKey(2),
///     remote_addr: 0x9000,
///     len: 8192,
/// };
/// // The positional forms take the same values, the remote key as a u32.
/// let positional = WorkRequest::write(NodeAddr(1), MrKey(1), 0x1000, 8192, 2, 0x9000);
/// assert_eq!(t.write(), positional);
/// let positional = WorkRequest::read(NodeAddr(1), MrKey(1), 0x1000, 8192, 2, 0x9000);
/// assert_eq!(t.read(), positional);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Transfer {
    /// The other host.
    pub peer: NodeAddr,
    /// This host's region (source of a WRITE, destination of a READ).
    pub local: MrKey,
    /// Where in it the bytes start.
    pub local_addr: u64,
    /// The peer's region (its key, as the peer registered it).
    pub remote: MrKey,
    /// Where in it the bytes start.
    pub remote_addr: u64,
    /// Bytes.
    pub len: u64,
}

impl Transfer {
    /// This transfer as an RDMA WRITE (local → peer).
    pub fn write(self) -> WorkRequest {
        WorkRequest::transfer(WrKind::Write, self)
    }

    /// This transfer as an RDMA READ (peer → local).
    pub fn read(self) -> WorkRequest {
        WorkRequest::transfer(WrKind::Read, self)
    }
}

/// A request for the NIC: move `len` bytes between local memory
/// (`local`, `local_addr`, or the scatter-gather list `sgl`) and the peer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct WorkRequest {
    /// What to do.
    pub kind: WrKind,
    /// Peer host.
    pub dst: NodeAddr,
    /// Local endpoint.
    pub src_ep: u16,
    /// Peer endpoint.
    pub dst_ep: u16,
    /// Local region (source of WRITE/SEND, destination of READ).
    pub local: MrKey,
    /// Local address.
    pub local_addr: u64,
    /// Bytes.
    pub len: u64,
    /// Peer's region key (WRITE/READ).
    pub rkey: u32,
    /// Peer address (WRITE/READ).
    pub remote_addr: u64,
    /// Immediate value of WRITE-with-notify.
    pub immediate: u32,
    /// The control message of a `Control` request.
    pub control: Option<Control>,
    /// Local bytes as a scatter-gather list instead of (`local`,
    /// `local_addr`): a WRITE or SEND gathers from it, a READ scatters into
    /// it, without host copies. At most `NicConfig::max_sge` entries.
    pub sgl: Option<Sgl>,
}

impl WorkRequest {
    fn new(kind: WrKind, dst: NodeAddr, local: MrKey, local_addr: u64, len: u64) -> WorkRequest {
        WorkRequest {
            kind,
            dst,
            src_ep: 0,
            dst_ep: 0,
            local,
            local_addr,
            len,
            rkey: 0,
            remote_addr: 0,
            immediate: 0,
            control: None,
            sgl: None,
        }
    }

    /// A control message to endpoint `dst_ep` of `dst`, delivered reliably
    /// and exactly once (with tombstones on) as [`Event::Control`].
    pub fn control(dst: NodeAddr, c: Control) -> WorkRequest {
        WorkRequest {
            control: Some(c),
            ..WorkRequest::new(WrKind::Control, dst, MrKey(0), 0, 0)
        }
    }

    /// An RDMA WRITE or READ between two regions, by named fields (see
    /// [`Transfer`]); the positional forms below take the same values.
    pub fn transfer(kind: WrKind, t: Transfer) -> WorkRequest {
        WorkRequest {
            rkey: t.remote.0,
            remote_addr: t.remote_addr,
            ..WorkRequest::new(kind, t.peer, t.local, t.local_addr, t.len)
        }
    }

    /// RDMA WRITE of `len` local bytes to `remote_addr` under `rkey` at `dst`.
    pub fn write(
        dst: NodeAddr,
        local: MrKey,
        local_addr: u64,
        len: u64,
        rkey: u32,
        remote_addr: u64,
    ) -> WorkRequest {
        WorkRequest {
            rkey,
            remote_addr,
            ..WorkRequest::new(WrKind::Write, dst, local, local_addr, len)
        }
    }

    /// RDMA WRITE whose receiver gets a data-arrived event with `immediate`
    /// once every byte is acknowledged.
    pub fn write_notify(
        dst: NodeAddr,
        local: MrKey,
        local_addr: u64,
        len: u64,
        rkey: u32,
        remote_addr: u64,
        immediate: u32,
    ) -> WorkRequest {
        WorkRequest {
            kind: WrKind::WriteNotify,
            immediate,
            ..WorkRequest::write(dst, local, local_addr, len, rkey, remote_addr)
        }
    }

    /// RDMA READ of `len` bytes at `remote_addr` under `rkey` at `dst` into
    /// local memory.
    pub fn read(
        dst: NodeAddr,
        local: MrKey,
        local_addr: u64,
        len: u64,
        rkey: u32,
        remote_addr: u64,
    ) -> WorkRequest {
        WorkRequest {
            rkey,
            remote_addr,
            ..WorkRequest::new(WrKind::Read, dst, local, local_addr, len)
        }
    }

    /// SEND of `len` local bytes into a receive buffer posted at `dst`.
    pub fn send(dst: NodeAddr, local: MrKey, local_addr: u64, len: u64) -> WorkRequest {
        WorkRequest::new(WrKind::Send, dst, local, local_addr, len)
    }

    /// The same request with its local bytes in the scatter-gather list
    /// `sgl` (its length becomes the list's).
    #[must_use]
    pub fn gather(mut self, sgl: Sgl) -> WorkRequest {
        self.local = MrKey(0);
        self.local_addr = 0;
        self.len = sgl.len();
        self.sgl = Some(sgl);
        self
    }

    /// The same request between other endpoints.
    #[must_use]
    pub fn endpoints(mut self, src_ep: u16, dst_ep: u16) -> WorkRequest {
        self.src_ep = src_ep;
        self.dst_ep = dst_ep;
        self
    }
}

/// Why a request was refused at `post` (nothing was queued).
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum PostError {
    /// The command queue (or a receive queue) is at its capacity.
    #[error("queue full ({0} requests outstanding)")]
    QueueFull(usize),
    /// The local buffer fails its memory check.
    #[error("local buffer rejected: {0}")]
    LocalAccess(Syndrome),
    /// A SEND longer than one operation may be.
    #[error("SEND of {len} bytes exceeds the {max}-byte limit of one operation")]
    TooLong {
        /// Requested length.
        len: u64,
        /// Largest allowed.
        max: u64,
    },
    /// Posting a receive through `post` (use `post_recv`).
    #[error("receive buffers are posted with post_recv")]
    NotARequest,
    /// A reduce descriptor that cannot work, and why.
    #[error("reduce descriptor refused: {0}")]
    BadReduce(&'static str),
    /// A scatter-gather list longer than the NIC takes in one request.
    #[error("{sges} scatter-gather entries exceed the NIC's max_sge of {max}")]
    TooManySges {
        /// Entries given.
        sges: usize,
        /// The limit.
        max: usize,
    },
}

/// Why a request completed in error.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum WcError {
    /// A packet went unacknowledged through every retry.
    #[error("retries exhausted")]
    RetryExceeded,
    /// The peer refused the operation.
    #[error("remote error: {0}")]
    Remote(Syndrome),
    /// Local memory became unusable while the request ran.
    #[error("local access error: {0}")]
    LocalAccess(Syndrome),
    /// The peer restarted (a newer boot epoch) while the request ran: the
    /// memory it named belongs to the peer's previous life.
    #[error("peer restarted")]
    PeerRestarted,
}

/// What the engine tells its host. Drain with `Nic::poll_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Event {
    /// A posted request (or receive buffer) finished: exactly once per
    /// [`WrId`].
    Completed {
        /// Which request.
        wr: WrId,
        /// Its kind.
        kind: WrKind,
        /// Bytes moved (for receives: bytes received).
        len: u64,
        /// Success or why not.
        result: Result<(), WcError>,
        /// When it completed.
        at: Instant,
    },
    /// Receiver side: every packet of a peer's WRITE has landed (the
    /// registry mask is full). Raised before the sender can know.
    WriteReceived {
        /// Writing host.
        from: NodeAddr,
        /// The endpoint the WRITE addressed (hosts may give endpoints
        /// meanings: the UDP bridge echoes WRITEs to endpoint 1).
        ep: u16,
        /// Its message id.
        msg_id: u32,
        /// Lowest address written.
        addr: u64,
        /// Bytes written.
        len: u64,
        /// When.
        at: Instant,
    },
    /// A peer's control message (RTS, CTS or FIN), once per message.
    Control {
        /// Sending host.
        from: NodeAddr,
        /// Its endpoint.
        src_ep: u16,
        /// The endpoint addressed here.
        dst_ep: u16,
        /// The message.
        control: Control,
        /// When.
        at: Instant,
    },
    /// A peer advertised more receive buffers: its cumulative count of
    /// re-posted buffers (mod 2^16), raised only when it moves forward.
    Credits {
        /// Advertising host.
        from: NodeAddr,
        /// Cumulative count, modulo 2^16.
        cumulative: u16,
        /// When.
        at: Instant,
    },
    /// A peer's HELLO (an ask, already answered, or the reply to ours):
    /// its maximum payload and the region it announces.
    Hello {
        /// The peer.
        from: NodeAddr,
        /// What it said.
        hello: udrma_proto::Hello,
        /// When.
        at: Instant,
    },
    /// A peer showed a newer boot epoch: it restarted. Its unfinished
    /// operations here were dropped and requests toward it failed.
    PeerRestarted {
        /// The peer.
        peer: NodeAddr,
        /// Its new epoch.
        epoch: u32,
        /// When.
        at: Instant,
    },
    /// Receiver side: a WRITE-with-notify's notification arrived.
    DataArrived {
        /// Writing host.
        from: NodeAddr,
        /// Where the data starts.
        addr: u64,
        /// Bytes.
        len: u64,
        /// The immediate value.
        immediate: u32,
        /// When.
        at: Instant,
    },
}
