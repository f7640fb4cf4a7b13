//! The messaging layer's public vocabulary: constants, configuration,
//! ids, events, errors and counters.

use thiserror::Error;
use udrma_nic::WcError;
use udrma_proto::time::{Duration, Instant};
use udrma_proto::{NodeAddr, Protocol};

/// Bytes of the messaging header at the start of every vbuf payload.
pub const CHUNK_HEADER: usize = 16;
/// Chunk kind: a piece of an eager message.
pub const CHUNK_EAGER: u8 = 1;
/// Chunk kind: a piece of an R3 message (after its CTS).
pub const CHUNK_R3: u8 = 2;
/// How far ahead of the next expected sequence number a peer's messages
/// may be held for reordering; beyond it they are dropped and counted.
pub const REORDER_WINDOW: u32 = 65_536;
/// Where the messenger's memory starts in the host's address space.
pub const MSG_BASE: u64 = 0x4000_0000_0000;
/// NOOPs repeated (with backoff) while the peer stays silent after one.
pub const NOOP_REPEATS: u32 = 16;

/// The VI (endpoint number) that carries traffic with `peer`: one per
/// peer, so one peer can only consume the vbufs posted for it.
pub fn peer_ep(peer: NodeAddr) -> Option<u16> {
    u16::try_from(peer.0 + 1).ok()
}

/// Messaging knobs (MVICH's names where it has them).
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct MsgConfig {
    /// Bytes per vbuf (receive buffer), header included.
    pub vbuf_size: u32,
    /// vbufs pre-posted for each peer; also each side's initial
    /// `remote_credit`.
    pub vbufs_per_peer: u16,
    /// Send-side vbufs (bounce buffers for eager and R3 chunks), shared by
    /// all peers.
    pub send_vbufs: u16,
    /// A NOOP goes out as soon as this many re-posted vbufs have not been
    /// carried to the peer on any packet.
    pub credit_notify_threshold: u16,
    /// Credits an eager send must leave unused; below, it goes rendezvous.
    pub credit_preserve: u16,
    /// Largest eager message (bytes); larger ones go rendezvous.
    pub rendezvous_threshold: u64,
    /// The rendezvous protocol to use (R3, RGET or RPUT).
    pub rendezvous: Protocol,
    /// A NOOP goes out when re-posted vbufs have waited this long without
    /// reaching the peer.
    pub noop_interval: Duration,
    /// Unexpected eager bytes held before vbufs stop being re-posted (the
    /// sender then runs out of credits and goes rendezvous).
    pub unexpected_bytes: u64,
    /// Probability that a memory registration fails (0 = never, 1 =
    /// always); RGET and RPUT then fall back to R3.
    pub registration_failure: f64,
    /// The time window in which registrations may fail (`None`: always).
    pub registration_failure_window: Option<(Instant, Instant)>,
    /// Seed of the registration-failure draws.
    pub seed: u64,
}

impl Default for MsgConfig {
    fn default() -> Self {
        MsgConfig {
            vbuf_size: 8192,
            vbufs_per_peer: 32,
            send_vbufs: 256,
            credit_notify_threshold: 8,
            credit_preserve: 2,
            rendezvous_threshold: 5000,
            rendezvous: Protocol::Rput,
            noop_interval: Duration::from_micros(20),
            unexpected_bytes: 4 << 20,
            registration_failure: 0.0,
            registration_failure_window: None,
            seed: 0,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, Error, Clone, PartialEq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum MsgConfigError {
    /// A field is out of range.
    #[error("{field}: {why}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

impl MsgConfig {
    /// Checks the configuration against the NIC's.
    pub fn validate(&self, nic: &udrma_nic::NicConfig) -> Result<(), MsgConfigError> {
        let bad = |field, why: String| Err(MsgConfigError::Field { field, why });
        if (self.vbuf_size as usize) <= CHUNK_HEADER {
            return bad(
                "vbuf_size",
                format!(
                    "{} B leaves no room after the {CHUNK_HEADER}-byte header",
                    self.vbuf_size
                ),
            );
        }
        if u64::from(self.vbuf_size) > nic.max_op_bytes() {
            return bad(
                "vbuf_size",
                format!(
                    "{} B is more than one SEND can carry ({} B)",
                    self.vbuf_size,
                    nic.max_op_bytes()
                ),
            );
        }
        if self.vbufs_per_peer == 0 || usize::from(self.vbufs_per_peer) > nic.recv_queue_capacity {
            return bad(
                "vbufs_per_peer",
                format!(
                    "{} must be 1..={} (the NIC's recv_queue_capacity)",
                    self.vbufs_per_peer, nic.recv_queue_capacity
                ),
            );
        }
        if self.vbufs_per_peer > 0x7fff {
            return bad("vbufs_per_peer", "must be below 32768".into());
        }
        if self.send_vbufs == 0 {
            return bad("send_vbufs", "must be at least 1".into());
        }
        if self.credit_preserve >= self.vbufs_per_peer {
            return bad(
                "credit_preserve",
                format!(
                    "{} must be below vbufs_per_peer ({}), or eager could never be chosen",
                    self.credit_preserve, self.vbufs_per_peer
                ),
            );
        }
        if self.credit_notify_threshold == 0 {
            return bad("credit_notify_threshold", "must be at least 1".into());
        }
        if !matches!(
            self.rendezvous,
            Protocol::R3 | Protocol::Rget | Protocol::Rput
        ) {
            return bad("rendezvous", "must be r3, rget or rput".into());
        }
        if !(0.0..=1.0).contains(&self.registration_failure) {
            return bad(
                "registration_failure",
                "must be a probability in 0..=1".into(),
            );
        }
        if self.noop_interval == Duration::ZERO {
            return bad("noop_interval", "must be positive".into());
        }
        Ok(())
    }

    pub(super) fn chunk_payload(&self) -> u64 {
        u64::from(self.vbuf_size) - CHUNK_HEADER as u64
    }

    /// Chunks (vbufs) a message of `len` bytes takes through vbufs.
    pub fn chunks(&self, len: u64) -> u64 {
        len.div_ceil(self.chunk_payload()).max(1)
    }
}

/// A send's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct SendId(pub u64);
/// A receive's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct RecvId(pub u64);

/// Why a message failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum MsgError {
    /// The NIC failed an operation the message needed.
    #[error("transport: {0}")]
    Transport(WcError),
    /// The message was longer than the receive buffer; the first
    /// `max_len` bytes were delivered.
    #[error("message of {len} B truncated to the {max} B receive buffer")]
    Truncated {
        /// Message length.
        len: u64,
        /// Receive buffer length.
        max: u64,
    },
    /// The peer was never connected.
    #[error("peer {0} is not connected")]
    NotConnected(NodeAddr),
    /// The NIC refused to take the request.
    #[error("refused by the NIC: {0}")]
    Refused(String),
}

/// What the messenger reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum MsgEvent {
    /// A send finished (its buffer may be reused).
    SendDone {
        /// The send.
        id: SendId,
        /// The protocol it went by.
        protocol: MsgProtocol,
        /// Outcome.
        result: Result<(), MsgError>,
        /// When.
        at: Instant,
    },
    /// A receive finished.
    RecvDone {
        /// The receive.
        id: RecvId,
        /// Who sent it.
        src: NodeAddr,
        /// Its tag.
        tag: u32,
        /// The bytes (at most the receive's `max_len`).
        data: Vec<u8>,
        /// The sender's sequence number (for order checks).
        seq: u32,
        /// Outcome (`Truncated` still delivers data).
        result: Result<(), MsgError>,
        /// When.
        at: Instant,
    },
}

/// The protocol a message went by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum MsgProtocol {
    /// Data through vbufs without a handshake.
    Eager,
    /// RTS → CTS → data through vbufs.
    R3,
    /// RTS with the sender's buffer; the receiver READs; FIN.
    Rget,
    /// CTS with the receiver's buffer; the sender WRITEs; FIN.
    Rput,
}

impl MsgProtocol {
    pub(super) fn from_wire(p: Protocol) -> Option<MsgProtocol> {
        match p {
            Protocol::R3 => Some(MsgProtocol::R3),
            Protocol::Rget => Some(MsgProtocol::Rget),
            Protocol::Rput => Some(MsgProtocol::Rput),
            _ => None,
        }
    }

    pub(super) fn wire(self) -> Protocol {
        match self {
            MsgProtocol::Eager | MsgProtocol::R3 => Protocol::R3,
            MsgProtocol::Rget => Protocol::Rget,
            MsgProtocol::Rput => Protocol::Rput,
        }
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            MsgProtocol::Eager => "eager",
            MsgProtocol::R3 => "r3",
            MsgProtocol::Rget => "rget",
            MsgProtocol::Rput => "rput",
        }
    }
}

/// Counters of the messaging layer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct MsgStats {
    /// Messages sent eagerly.
    pub eager: u64,
    /// Messages sent by R3 (including fallbacks).
    pub r3: u64,
    /// Messages sent by RGET.
    pub rget: u64,
    /// Messages sent by RPUT.
    pub rput: u64,
    /// NOOP credit messages sent.
    pub noops: u64,
    /// Chunks that had to wait for a credit.
    pub credit_stalls: u64,
    /// Chunks that had to wait for a send vbuf.
    pub send_vbuf_stalls: u64,
    /// Protocol fallbacks: eager → rendezvous for lack of credits, plus
    /// RGET/RPUT → R3 after a failed registration.
    pub fallbacks: u64,
    /// Of those, eager → rendezvous for lack of credits.
    pub fallback_credits: u64,
    /// Of those, RGET/RPUT → R3 after a failed registration.
    pub fallback_registration: u64,
    /// Registrations that failed.
    pub registration_failures: u64,
    /// Messages that arrived before a matching receive was posted.
    pub unexpected: u64,
    /// Most unexpected eager bytes held at once.
    pub unexpected_bytes_peak: u64,
    /// vbuf re-posts deferred because too many unexpected bytes were held.
    pub reposts_deferred: u64,
    /// Chunks, controls or credits that made no sense (unknown message,
    /// bad header, duplicate) and were dropped.
    pub bad_messages: u64,
    /// Messages dropped because their sequence number was too far ahead.
    pub out_of_window: u64,
    /// Credit advertisements that would have raised a peer's credit above
    /// `vbufs_per_peer` (clamped; a hostile or broken peer).
    pub credit_overflow: u64,
    /// Sends completed successfully.
    pub sends_done: u64,
    /// Receives completed (successfully or truncated).
    pub recvs_done: u64,
    /// Sends or receives failed.
    pub failed: u64,
    /// Lowest `remote_credit` seen toward any peer.
    pub min_credit: u64,
}
