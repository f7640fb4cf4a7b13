//! The messaging layer: MVICH-like tagged send/receive over the engine.
//!
//! A [`Messenger`] is one host's MPI-style point-to-point layer. It drives
//! a [`Nic`] it is handed on every call (sans-IO like the engine: no clock,
//! no socket; time comes in as `now`), and offers:
//!
//! - [`Messenger::send`] / [`Messenger::recv`]: tagged messages with
//!   wildcards for source and tag on the receive side, matched through a
//!   posted-receive queue and an unexpected queue, in MPI's non-overtaking
//!   order per (source, tag) even though the transport delivers out of
//!   order;
//! - vbufs and credit flow control: `vbufs_per_peer` receive buffers of
//!   `vbuf_size` bytes pre-posted per peer on a per-peer VI, a
//!   `remote_credit` per peer, credit counts piggybacked on every packet,
//!   NOOPs when the count is not getting through, `credit_preserve`, and a
//!   backlog that drains as credits return;
//! - four protocols: Eager (data through vbufs), R3 (RTS → CTS → data
//!   through vbufs), RGET (RTS with the sender's buffer; the receiver
//!   RDMA-READs; FIN) and RPUT (CTS with the receiver's buffer; the sender
//!   RDMA-WRITEs; FIN), with the fallbacks of docs/design.md §1.
//!
//! The rules are in `docs/messaging.md`, with a worked credit exchange.
//!
//! # Driving it
//! Call [`Messenger::connect`] for every peer (both sides must), then feed
//! it every event of its NIC with [`Messenger::handle_event`] and call
//! [`Messenger::handle_timeout`] at [`Messenger::poll_timeout`]. Results
//! come out of [`Messenger::poll_event`].

use std::collections::{BTreeMap, VecDeque};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use thiserror::Error;
use udrma_proto::time::{Duration, Instant};
use udrma_proto::{NodeAddr, Protocol, Rendezvous};

use udrma_nic::cost::Serial;
use udrma_nic::{Access, Control, Event, MrKey, Nic, WcError, WorkRequest, WrId};

use crate::via::{CqId, Via};

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

    fn chunk_payload(&self) -> u64 {
        u64::from(self.vbuf_size) - CHUNK_HEADER as u64
    }

    /// Chunks (vbufs) a message of `len` bytes takes through vbufs.
    pub fn chunks(&self, len: u64) -> u64 {
        len.div_ceil(self.chunk_payload()).max(1)
    }
}

/// A send's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SendId(pub u64);
/// A receive's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecvId(pub u64);

/// Why a message failed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
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
    fn from_wire(p: Protocol) -> Option<MsgProtocol> {
        match p {
            Protocol::R3 => Some(MsgProtocol::R3),
            Protocol::Rget => Some(MsgProtocol::Rget),
            Protocol::Rput => Some(MsgProtocol::Rput),
            _ => None,
        }
    }

    fn wire(self) -> Protocol {
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

#[derive(Debug, Clone)]
struct Peer {
    ep: u16,
    /// vbufs the peer has posted for us that we have not used.
    remote_credit: u32,
    /// Newest cumulative count the peer advertised.
    credits_seen: u16,
    /// vbufs we re-posted for the peer (cumulative, mod 2^16).
    reposted: u16,
    /// Re-posts held back while too many unexpected bytes are held.
    deferred: u32,
    /// Our next sequence number toward the peer.
    next_seq: u32,
    /// The next sequence number we expect from the peer.
    expect_seq: u32,
    /// Messages from the peer waiting for earlier ones.
    reorder: BTreeMap<u32, Arrival>,
    /// Chunks waiting for a credit, oldest first.
    backlog: VecDeque<Chunk>,
    /// When a NOOP check is due (if one is armed).
    noop_at: Option<Instant>,
    /// NOOPs sent since the peer last sent us a chunk or control (their
    /// repeats back off exponentially; see `handle_timeout`).
    noop_streak: u32,
}

#[derive(Debug, Clone)]
enum ArrivalKind {
    Eager(Vec<u8>),
    Rts(Rendezvous),
}

#[derive(Debug, Clone)]
struct Arrival {
    from: NodeAddr,
    seq: u32,
    tag: u32,
    len: u64,
    kind: ArrivalKind,
}

#[derive(Debug, Clone)]
struct Posted {
    id: RecvId,
    src: Option<NodeAddr>,
    tag: Option<u32>,
    max_len: u64,
}

/// A chunk to send through vbufs.
#[derive(Debug, Clone)]
struct Chunk {
    send: SendId,
    dst: NodeAddr,
    kind: u8,
    index: u16,
    seq: u32,
    tag: u32,
    total: u32,
    data_off: u64,
    data_len: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendState {
    /// Chunks in flight (eager, or R3 after the CTS).
    Chunks,
    /// RTS sent; waiting for a CTS (R3, RPUT) or a FIN (RGET).
    AwaitPeer,
    /// RPUT WRITE in flight.
    Writing,
    /// FIN in flight (RPUT).
    Finishing,
}

#[derive(Debug, Clone)]
struct SendMsg {
    dst: NodeAddr,
    tag: u32,
    seq: u32,
    data: Vec<u8>,
    protocol: MsgProtocol,
    state: SendState,
    chunks_left: u64,
    region: Option<MrKey>,
}

#[derive(Debug, Clone)]
struct RecvMsg {
    id: RecvId,
    tag: u32,
    len: u64,
    max_len: u64,
    protocol: MsgProtocol,
    /// R3: assembled bytes and chunks still to come.
    data: Vec<u8>,
    chunks_left: u64,
    got: Vec<bool>,
    region: Option<MrKey>,
}

/// What an outstanding NIC request of ours is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// A vbuf pre-posted for `peer` (index into the vbuf region).
    Vbuf { peer: NodeAddr, slot: u32 },
    /// A chunk leaving from send vbuf `slot`.
    Chunk { send: SendId, slot: u32 },
    /// An RTS, CTS or FIN (no completion work beyond errors).
    Control {
        send: Option<SendId>,
        recv: Option<(NodeAddr, u32)>,
    },
    /// The RPUT WRITE of a send.
    Write(SendId),
    /// The RPUT FIN of a send (its completion ends the send).
    Fin(SendId),
    /// The RGET READ of a receive.
    Read(NodeAddr, u32),
}

/// An eager message being put together: bytes, chunks seen, tag, length.
type Assembly = (Vec<u8>, Vec<bool>, u32, u64);

/// Host work that finishes later (cost model).
#[derive(Debug, Clone)]
enum Deferred {
    /// A chunk copied into its send vbuf: post the SEND.
    PostChunk(Chunk, u32),
    /// A vbuf emptied by the host: post it again.
    Repost(NodeAddr, u32),
    /// A message copied out of vbufs: it enters matching.
    Arrived(Arrival),
    /// An R3 receive's last chunk copied out: deliver it.
    R3Done(NodeAddr, u32),
}

/// One host's messaging layer. See the module docs.
#[derive(Debug)]
pub struct Messenger {
    cfg: MsgConfig,
    /// The VI number our peers use for us (their receive endpoint).
    my_ep: u16,
    via: Via,
    cq: CqId,
    peers: BTreeMap<NodeAddr, Peer>,
    /// vbuf memory: one region per peer (vbufs_per_peer × vbuf_size).
    vbuf_regions: BTreeMap<NodeAddr, (MrKey, u64)>,
    /// Send vbufs: one region, free slots.
    send_region: Option<(MrKey, u64)>,
    send_free: Vec<u32>,
    /// Chunks that have a credit and wait for a send vbuf.
    vbuf_wait: VecDeque<Chunk>,
    purposes: BTreeMap<WrId, Purpose>,
    sends: BTreeMap<SendId, SendMsg>,
    /// Sends by (peer, seq), for CTS and FIN.
    send_by_seq: BTreeMap<(NodeAddr, u32), SendId>,
    recvs: BTreeMap<(NodeAddr, u32), RecvMsg>,
    /// Eager messages being assembled: (peer, seq) → (bytes, chunks seen).
    assembling: BTreeMap<(NodeAddr, u32), Assembly>,
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Arrival>,
    unexpected_bytes: u64,
    deferred: BTreeMap<(Instant, u64), Deferred>,
    deferred_seq: u64,
    cpu: Serial,
    next_send: u64,
    next_recv: u64,
    next_addr: u64,
    events: VecDeque<MsgEvent>,
    stats: MsgStats,
    rng: ChaCha8Rng,
}

impl Messenger {
    /// A messenger for the host of `nic`. Fails when the configuration
    /// does not fit the NIC's.
    pub fn new(cfg: MsgConfig, nic: &Nic) -> Result<Messenger, MsgConfigError> {
        cfg.validate(nic.config())?;
        let mut via = Via::new();
        let cq = via.create_cq();
        let rng = ChaCha8Rng::seed_from_u64(
            cfg.seed ^ 0x6d65_7373_656e_6765 ^ u64::from(nic.addr().0) << 32,
        );
        let my_ep = peer_ep(nic.addr()).ok_or_else(|| MsgConfigError::Field {
            field: "host",
            why: format!("{}: node ids above 65534 have no endpoint", nic.addr()),
        })?;
        Ok(Messenger {
            my_ep,
            via,
            cq,
            peers: BTreeMap::new(),
            vbuf_regions: BTreeMap::new(),
            send_region: None,
            send_free: Vec::new(),
            vbuf_wait: VecDeque::new(),
            purposes: BTreeMap::new(),
            sends: BTreeMap::new(),
            send_by_seq: BTreeMap::new(),
            recvs: BTreeMap::new(),
            assembling: BTreeMap::new(),
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            deferred: BTreeMap::new(),
            deferred_seq: 0,
            cpu: Serial::default(),
            next_send: 1,
            next_recv: 1,
            next_addr: MSG_BASE,
            events: VecDeque::new(),
            stats: MsgStats {
                min_credit: u64::from(cfg.vbufs_per_peer),
                ..MsgStats::default()
            },
            rng,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MsgConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &MsgStats {
        &self.stats
    }

    /// Credits toward `peer` (vbufs it has posted for us, unused).
    pub fn remote_credit(&self, peer: NodeAddr) -> Option<u32> {
        self.peers.get(&peer).map(|p| p.remote_credit)
    }

    /// Messages waiting in the unexpected queue, and their eager bytes.
    pub fn unexpected(&self) -> (usize, u64) {
        (self.unexpected.len(), self.unexpected_bytes)
    }

    /// Whether nothing is in progress: no send, no receive, no chunk, no
    /// deferred host work (posted receives that wait for a message do not
    /// count).
    pub fn is_quiet(&self) -> bool {
        self.sends.is_empty()
            && self.recvs.is_empty()
            && self.deferred.is_empty()
            && self.vbuf_wait.is_empty()
            && self.peers.values().all(|p| p.backlog.is_empty())
    }

    /// Sends in progress.
    pub fn sends_in_progress(&self) -> usize {
        self.sends.len()
    }

    fn alloc(&mut self, len: u64) -> u64 {
        let a = self.next_addr;
        // Keep regions apart and aligned.
        self.next_addr += len.max(1).div_ceil(4096) * 4096 + 4096;
        a
    }

    /// Connects to `peer`: creates its VI and pre-posts `vbufs_per_peer`
    /// vbufs for it. Both sides must connect (as a VIA connection does);
    /// each then starts with `vbufs_per_peer` credits.
    pub fn connect(&mut self, now: Instant, nic: &mut Nic, peer: NodeAddr) -> Result<(), MsgError> {
        if self.peers.contains_key(&peer) {
            return Ok(());
        }
        let ep = peer_ep(peer).ok_or_else(|| {
            MsgError::Refused(format!(
                "peer {peer}: node ids above 65534 have no endpoint"
            ))
        })?;
        if self.send_region.is_none() {
            let len = u64::from(self.cfg.send_vbufs) * u64::from(self.cfg.vbuf_size);
            let base = self.alloc(len);
            let key = nic.register(base, len as usize, Access::LOCAL);
            self.send_region = Some((key, base));
            self.send_free = (0..u32::from(self.cfg.send_vbufs)).rev().collect();
        }
        self.via
            .create_vi(ep, self.cq, self.cq)
            .map_err(|e| MsgError::Refused(e.to_string()))?;
        let n = u64::from(self.cfg.vbufs_per_peer);
        let len = n * u64::from(self.cfg.vbuf_size);
        let base = self.alloc(len);
        let key = nic.register(base, len as usize, Access::LOCAL);
        self.vbuf_regions.insert(peer, (key, base));
        self.peers.insert(
            peer,
            Peer {
                ep,
                remote_credit: u32::from(self.cfg.vbufs_per_peer),
                credits_seen: 0,
                reposted: 0,
                deferred: 0,
                next_seq: 0,
                expect_seq: 0,
                reorder: BTreeMap::new(),
                backlog: VecDeque::new(),
                noop_at: None,
                noop_streak: 0,
            },
        );
        for slot in 0..n as u32 {
            self.post_vbuf(now, nic, peer, slot)?;
        }
        Ok(())
    }

    fn post_vbuf(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        peer: NodeAddr,
        slot: u32,
    ) -> Result<(), MsgError> {
        let (key, base) = self.vbuf_regions[&peer];
        let ep = self.peers[&peer].ep;
        let addr = base + u64::from(slot) * u64::from(self.cfg.vbuf_size);
        let id = self
            .via
            .post_recv(now, nic, ep, key, addr, u64::from(self.cfg.vbuf_size))
            .map_err(|e| MsgError::Refused(e.to_string()))?;
        self.purposes.insert(id, Purpose::Vbuf { peer, slot });
        Ok(())
    }

    /// Sends `data` to `dst` with `tag`. Completes with
    /// [`MsgEvent::SendDone`].
    pub fn send(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        dst: NodeAddr,
        tag: u32,
        data: Vec<u8>,
    ) -> Result<SendId, MsgError> {
        let len = data.len() as u64;
        let chunks = self.cfg.chunks(len);
        let preserve = u64::from(self.cfg.credit_preserve);
        let threshold = self.cfg.rendezvous_threshold;
        let rendezvous = self.cfg.rendezvous;
        let peer = self
            .peers
            .get_mut(&dst)
            .ok_or(MsgError::NotConnected(dst))?;
        if len > u64::from(u32::MAX) {
            return Err(MsgError::Refused(format!(
                "{len} B: messages are limited to 4 GiB - 1"
            )));
        }
        let id = SendId(self.next_send);
        self.next_send += 1;
        let seq = peer.next_seq;
        peer.next_seq = peer.next_seq.wrapping_add(1);
        let eager_fits = len <= threshold;
        let credits_ok =
            peer.backlog.is_empty() && u64::from(peer.remote_credit) >= chunks + preserve;
        let mut protocol = if eager_fits && credits_ok {
            MsgProtocol::Eager
        } else {
            if eager_fits {
                self.stats.fallbacks += 1;
                self.stats.fallback_credits += 1;
            }
            MsgProtocol::from_wire(rendezvous).unwrap_or(MsgProtocol::R3)
        };
        let mut region = None;
        let mut addr = 0;
        if matches!(protocol, MsgProtocol::Rget | MsgProtocol::Rput) {
            match self.register(now, nic, len, Access::ALL) {
                Some((key, a)) => {
                    if let Some(r) = nic.memory_mut().region_mut(key) {
                        r.bytes.copy_from_slice(&data);
                    }
                    region = Some(key);
                    addr = a;
                }
                None => {
                    self.stats.fallbacks += 1;
                    self.stats.fallback_registration += 1;
                    protocol = MsgProtocol::R3;
                }
            }
        }
        match protocol {
            MsgProtocol::Eager => self.stats.eager += 1,
            MsgProtocol::R3 => self.stats.r3 += 1,
            MsgProtocol::Rget => self.stats.rget += 1,
            MsgProtocol::Rput => self.stats.rput += 1,
        }
        self.sends.insert(
            id,
            SendMsg {
                dst,
                tag,
                seq,
                data,
                protocol,
                state: if protocol == MsgProtocol::Eager {
                    SendState::Chunks
                } else {
                    SendState::AwaitPeer
                },
                chunks_left: chunks,
                region,
            },
        );
        self.send_by_seq.insert((dst, seq), id);
        if protocol == MsgProtocol::Eager {
            self.queue_chunks(now, nic, id, CHUNK_EAGER);
        } else {
            let rkey = region.map_or(0, |k| k.0);
            let rts = Rendezvous {
                protocol: protocol.wire(),
                tag,
                length: len,
                addr: if protocol == MsgProtocol::Rget {
                    addr
                } else {
                    0
                },
                rkey: if protocol == MsgProtocol::Rget {
                    rkey
                } else {
                    0
                },
                seq,
            };
            self.control(now, nic, dst, Control::Rts(rts), Some(id), None);
        }
        Ok(id)
    }

    /// Posts a receive for a message from `src` (any source when `None`)
    /// with `tag` (any tag when `None`) of at most `max_len` bytes.
    /// Completes with [`MsgEvent::RecvDone`].
    pub fn recv(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        src: Option<NodeAddr>,
        tag: Option<u32>,
        max_len: u64,
    ) -> RecvId {
        let id = RecvId(self.next_recv);
        self.next_recv += 1;
        let p = Posted {
            id,
            src,
            tag,
            max_len,
        };
        // The unexpected queue first, in arrival order.
        if let Some(i) = self
            .unexpected
            .iter()
            .position(|a| src.is_none_or(|s| s == a.from) && tag.is_none_or(|t| t == a.tag))
        {
            let a = self.unexpected.remove(i).expect("found");
            if let ArrivalKind::Eager(d) = &a.kind {
                self.unexpected_bytes -= d.len() as u64;
                self.release_deferred(now, nic);
            }
            self.matched(now, nic, p, a);
        } else {
            self.posted.push_back(p);
        }
        id
    }

    /// The next result, oldest first.
    pub fn poll_event(&mut self) -> Option<MsgEvent> {
        self.events.pop_front()
    }

    /// When [`Messenger::handle_timeout`] is due (deferred host work and
    /// NOOP checks).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let d = self.deferred.keys().next().map(|(t, _)| *t);
        let n = self.peers.values().filter_map(|p| p.noop_at).min();
        [d, n].into_iter().flatten().min()
    }

    /// Does the host work due at `now` and sends the NOOPs owed.
    pub fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(entry) = self.deferred.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let d = entry.remove();
            self.run_deferred(now, nic, d);
        }
        let due: Vec<NodeAddr> = self
            .peers
            .iter()
            .filter(|(_, p)| p.noop_at.is_some_and(|t| t <= now))
            .map(|(a, _)| *a)
            .collect();
        for peer in due {
            let Some(p) = self.peers.get_mut(&peer) else {
                continue;
            };
            p.noop_at = None;
            // A NOOP is not acknowledged. While the peer stays silent after
            // one, repeat it with backoff (a lost NOOP must not starve a
            // sender whose credits it carried), at most NOOP_REPEATS times.
            let repeat = p.noop_streak > 0 && p.noop_streak < NOOP_REPEATS;
            if self.unadvertised(nic, peer) > 0 || repeat {
                self.noop(nic, peer);
                let p = self.peers.get_mut(&peer).expect("present");
                let backoff = 1u64 << p.noop_streak.min(6);
                p.noop_at = Some(now + self.cfg.noop_interval.saturating_mul(backoff));
            }
        }
    }

    /// Feeds one NIC event (every event of the host's NIC must come here).
    pub fn handle_event(&mut self, now: Instant, nic: &mut Nic, e: Event) {
        if let Some(e) = self.via.dispatch(e) {
            match e {
                Event::Control { from, control, .. } => self.on_control(now, nic, from, control),
                Event::Credits {
                    from, cumulative, ..
                } => self.on_credits(now, nic, from, cumulative),
                // Completions of requests not posted through our VIs, and
                // RDMA arrivals, belong to someone else.
                _ => {}
            }
        }
        while let Some(c) = self.via.poll_cq(self.cq) {
            let Some(purpose) = self.purposes.remove(&c.wr) else {
                continue;
            };
            self.on_completion(now, nic, purpose, c.len, c.result);
        }
    }

    // ------------------------------------------------------------ sending

    fn queue_chunks(&mut self, now: Instant, nic: &mut Nic, id: SendId, kind: u8) {
        let Some(s) = self.sends.get(&id) else {
            return;
        };
        let len = s.data.len() as u64;
        let cap = self.cfg.chunk_payload();
        let n = self.cfg.chunks(len);
        let (dst, seq, tag) = (s.dst, s.seq, s.tag);
        let peer = self.peers.get_mut(&dst).expect("connected");
        for i in 0..n {
            let off = i * cap;
            peer.backlog.push_back(Chunk {
                send: id,
                dst,
                kind,
                index: i as u16,
                seq,
                tag,
                total: len as u32,
                data_off: off,
                data_len: cap.min(len - off.min(len)),
            });
        }
        self.drain(now, nic, dst);
        // Chunks of this message that must wait for a credit.
        let waiting = self.peers[&dst]
            .backlog
            .iter()
            .filter(|c| c.send == id)
            .count();
        self.stats.credit_stalls += waiting as u64;
    }

    /// Moves chunks with a credit toward the send vbufs, then sends what
    /// has a vbuf.
    fn drain(&mut self, now: Instant, nic: &mut Nic, dst: NodeAddr) {
        if let Some(peer) = self.peers.get_mut(&dst) {
            while peer.remote_credit > 0 {
                let Some(c) = peer.backlog.pop_front() else {
                    break;
                };
                peer.remote_credit -= 1;
                self.stats.min_credit = self.stats.min_credit.min(u64::from(peer.remote_credit));
                self.vbuf_wait.push_back(c);
            }
        }
        while !self.vbuf_wait.is_empty() {
            let Some(slot) = self.send_free.pop() else {
                self.stats.send_vbuf_stalls += 1;
                break;
            };
            let c = self.vbuf_wait.pop_front().expect("not empty");
            // The host copies the chunk into the vbuf, then posts it.
            let done = self.cpu.take(now, nic.config().cost.copy(c.data_len));
            self.defer(now, nic, done, Deferred::PostChunk(c, slot));
        }
    }

    fn defer(&mut self, now: Instant, nic: &mut Nic, at: Instant, d: Deferred) {
        if at <= now {
            self.run_deferred(now, nic, d);
        } else {
            self.deferred_seq += 1;
            self.deferred.insert((at, self.deferred_seq), d);
        }
    }

    fn run_deferred(&mut self, now: Instant, nic: &mut Nic, d: Deferred) {
        match d {
            Deferred::PostChunk(c, slot) => self.post_chunk(now, nic, c, slot),
            Deferred::Repost(peer, slot) => self.repost(now, nic, peer, slot),
            Deferred::Arrived(a) => self.arrived(now, nic, a),
            Deferred::R3Done(peer, seq) => self.finish_r3_recv(now, peer, seq),
        }
    }

    fn post_chunk(&mut self, now: Instant, nic: &mut Nic, c: Chunk, slot: u32) {
        let Some(s) = self.sends.get(&c.send) else {
            self.send_free.push(slot);
            return;
        };
        let (key, base) = self.send_region.expect("connected");
        let addr = base + u64::from(slot) * u64::from(self.cfg.vbuf_size);
        let mut bytes = Vec::with_capacity(CHUNK_HEADER + c.data_len as usize);
        bytes.push(c.kind);
        bytes.push(0);
        bytes.extend_from_slice(&c.index.to_be_bytes());
        bytes.extend_from_slice(&c.seq.to_be_bytes());
        bytes.extend_from_slice(&c.tag.to_be_bytes());
        bytes.extend_from_slice(&c.total.to_be_bytes());
        let from = c.data_off as usize;
        bytes.extend_from_slice(&s.data[from..from + c.data_len as usize]);
        if let Some(r) = nic.memory_mut().region_mut(key) {
            let at = (addr - r.base) as usize;
            r.bytes[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        let ep = self.peers[&c.dst].ep;
        let wr = WorkRequest::send(c.dst, key, addr, bytes.len() as u64).endpoints(ep, self.my_ep);
        match self.via.post_send(now, nic, ep, wr) {
            Ok(id) => {
                self.purposes
                    .insert(id, Purpose::Chunk { send: c.send, slot });
            }
            Err(e) => {
                self.send_free.push(slot);
                self.fail_send(now, nic, c.send, MsgError::Refused(e.to_string()));
            }
        }
    }

    fn control(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        dst: NodeAddr,
        c: Control,
        send: Option<SendId>,
        recv: Option<(NodeAddr, u32)>,
    ) {
        let ep = self.peers[&dst].ep;
        let wr = WorkRequest::control(dst, c).endpoints(ep, self.my_ep);
        let purpose = match (c, send) {
            (Control::Fin { .. }, Some(s)) => Purpose::Fin(s),
            _ => Purpose::Control { send, recv },
        };
        match self.via.post_send(now, nic, ep, wr) {
            Ok(id) => {
                self.purposes.insert(id, purpose);
            }
            Err(e) => {
                let err = MsgError::Refused(e.to_string());
                if let Some(s) = send {
                    self.fail_send(now, nic, s, err);
                } else if let Some((p, seq)) = recv {
                    self.fail_recv(now, nic, p, seq, err);
                }
            }
        }
    }

    /// Registers `len` bytes, or fails as configured.
    fn register(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        len: u64,
        access: Access,
    ) -> Option<(MrKey, u64)> {
        let p = self.cfg.registration_failure;
        let in_window = self
            .cfg
            .registration_failure_window
            .is_none_or(|(a, b)| now >= a && now < b);
        if p > 0.0 && in_window {
            let u = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            if u < p {
                self.stats.registration_failures += 1;
                return None;
            }
        }
        let addr = self.alloc(len);
        Some((nic.register(addr, len as usize, access), addr))
    }

    fn on_completion(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        p: Purpose,
        len: u64,
        result: Result<(), WcError>,
    ) {
        match p {
            Purpose::Vbuf { peer, slot } => {
                if result.is_ok() {
                    self.on_vbuf(now, nic, peer, slot, len);
                }
                // A failed receive descriptor (deregistered memory) is
                // not re-posted: it only happens when tearing down.
            }
            Purpose::Chunk { send, slot } => {
                self.send_free.push(slot);
                match result {
                    Ok(()) => {
                        if let Some(s) = self.sends.get_mut(&send) {
                            s.chunks_left -= 1;
                            if s.chunks_left == 0 {
                                self.finish_send(now, nic, send, Ok(()));
                            }
                        }
                    }
                    Err(e) => self.fail_send(now, nic, send, MsgError::Transport(e)),
                }
                // The freed vbuf may let a waiting chunk go.
                if let Some(dst) = self.vbuf_wait.front().map(|c| c.dst) {
                    self.drain(now, nic, dst);
                }
            }
            Purpose::Control { send, recv } => {
                if let Err(e) = result {
                    if let Some(s) = send {
                        self.fail_send(now, nic, s, MsgError::Transport(e));
                    } else if let Some((peer, seq)) = recv {
                        self.fail_recv(now, nic, peer, seq, MsgError::Transport(e));
                    }
                }
            }
            Purpose::Write(send) => match result {
                Ok(()) => {
                    let Some(s) = self.sends.get_mut(&send) else {
                        return;
                    };
                    s.state = SendState::Finishing;
                    let (dst, tag, seq) = (s.dst, s.tag, s.seq);
                    self.control(
                        now,
                        nic,
                        dst,
                        Control::Fin {
                            protocol: Protocol::Rput,
                            tag,
                            seq,
                        },
                        Some(send),
                        None,
                    );
                }
                Err(e) => self.fail_send(now, nic, send, MsgError::Transport(e)),
            },
            Purpose::Fin(send) => match result {
                Ok(()) => self.finish_send(now, nic, send, Ok(())),
                Err(e) => self.fail_send(now, nic, send, MsgError::Transport(e)),
            },
            Purpose::Read(peer, seq) => match result {
                Ok(()) => {
                    let Some(r) = self.recvs.get(&(peer, seq)) else {
                        return;
                    };
                    let tag = r.tag;
                    self.control(
                        now,
                        nic,
                        peer,
                        Control::Fin {
                            protocol: Protocol::Rget,
                            tag,
                            seq,
                        },
                        None,
                        Some((peer, seq)),
                    );
                    self.finish_region_recv(now, nic, peer, seq);
                }
                Err(e) => self.fail_recv(now, nic, peer, seq, MsgError::Transport(e)),
            },
        }
    }

    fn finish_send(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        id: SendId,
        result: Result<(), MsgError>,
    ) {
        let Some(s) = self.sends.remove(&id) else {
            return;
        };
        self.send_by_seq.remove(&(s.dst, s.seq));
        if let Some(k) = s.region {
            nic.memory_mut().deregister(k);
        }
        if result.is_ok() {
            self.stats.sends_done += 1;
        } else {
            self.stats.failed += 1;
        }
        self.events.push_back(MsgEvent::SendDone {
            id,
            protocol: s.protocol,
            result,
            at: now,
        });
    }

    fn fail_send(&mut self, now: Instant, nic: &mut Nic, id: SendId, err: MsgError) {
        if let Some(s) = self.sends.get(&id) {
            let dst = s.dst;
            if let Some(p) = self.peers.get_mut(&dst) {
                p.backlog.retain(|c| c.send != id);
            }
            self.vbuf_wait.retain(|c| c.send != id);
        }
        self.finish_send(now, nic, id, Err(err));
    }

    // ------------------------------------------------------------ credits

    fn on_credits(&mut self, now: Instant, nic: &mut Nic, from: NodeAddr, cumulative: u16) {
        let max = u32::from(self.cfg.vbufs_per_peer);
        let Some(p) = self.peers.get_mut(&from) else {
            self.stats.bad_messages += 1;
            return;
        };
        let delta = cumulative.wrapping_sub(p.credits_seen);
        if delta == 0 || delta >= 0x8000 {
            return;
        }
        p.credits_seen = cumulative;
        let new = p.remote_credit + u32::from(delta);
        if new > max {
            self.stats.credit_overflow += 1;
            p.remote_credit = max;
        } else {
            p.remote_credit = new;
        }
        self.drain(now, nic, from);
    }

    fn unadvertised(&self, nic: &Nic, peer: NodeAddr) -> u16 {
        let Some(p) = self.peers.get(&peer) else {
            return 0;
        };
        p.reposted
            .wrapping_sub(nic.credits_carried(peer).unwrap_or(0))
    }

    fn noop(&mut self, nic: &mut Nic, peer: NodeAddr) {
        let p = self.peers.get_mut(&peer).expect("connected");
        p.noop_streak += 1;
        let ep = p.ep;
        nic.send_noop(peer, ep, self.my_ep);
        self.stats.noops += 1;
    }

    /// The peer spoke: it has been hearing us.
    fn heard_from(&mut self, peer: NodeAddr) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.noop_streak = 0;
        }
    }

    fn repost(&mut self, now: Instant, nic: &mut Nic, peer: NodeAddr, slot: u32) {
        if self.unexpected_bytes > self.cfg.unexpected_bytes {
            // Hold the vbuf back: the peer runs out of credits and goes
            // rendezvous until the application catches up.
            if let Some(p) = self.peers.get_mut(&peer) {
                p.deferred += 1;
            }
            self.stats.reposts_deferred += 1;
            return;
        }
        if self.post_vbuf(now, nic, peer, slot).is_err() {
            return;
        }
        let threshold = self.cfg.credit_notify_threshold;
        let interval = self.cfg.noop_interval;
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        p.reposted = p.reposted.wrapping_add(1);
        nic.advertise_credits(peer, p.reposted);
        if self.unadvertised(nic, peer) >= threshold {
            self.noop(nic, peer);
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            if p.noop_at.is_none() {
                p.noop_at = Some(now + interval);
            }
        }
    }

    /// Re-posts held-back vbufs once the unexpected bytes fell below the
    /// limit again.
    fn release_deferred(&mut self, now: Instant, nic: &mut Nic) {
        if self.unexpected_bytes > self.cfg.unexpected_bytes {
            return;
        }
        let peers: Vec<(NodeAddr, u32)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.deferred > 0)
            .map(|(a, p)| (*a, p.deferred))
            .collect();
        for (peer, n) in peers {
            // The slots are interchangeable: the region has vbufs_per_peer
            // of them and exactly `n` are not posted.
            let posted: Vec<u32> = self
                .purposes
                .values()
                .filter_map(|p| match p {
                    Purpose::Vbuf { peer: q, slot } if *q == peer => Some(*slot),
                    _ => None,
                })
                .collect();
            let free: Vec<u32> = (0..u32::from(self.cfg.vbufs_per_peer))
                .filter(|s| !posted.contains(s))
                .take(n as usize)
                .collect();
            if let Some(p) = self.peers.get_mut(&peer) {
                p.deferred = 0;
            }
            for slot in free {
                self.repost(now, nic, peer, slot);
            }
        }
    }

    // ------------------------------------------------------------ receiving

    fn on_vbuf(&mut self, now: Instant, nic: &mut Nic, peer: NodeAddr, slot: u32, len: u64) {
        self.heard_from(peer);
        let (key, base) = self.vbuf_regions[&peer];
        let addr = base + u64::from(slot) * u64::from(self.cfg.vbuf_size);
        let bytes = match nic.memory().region(key) {
            Some(r) => {
                let at = (addr - r.base) as usize;
                r.bytes[at..at + len as usize].to_vec()
            }
            None => Vec::new(),
        };
        // The host copies the payload out, then re-posts the vbuf.
        let done = self.cpu.take(now, nic.config().cost.copy(len));
        self.defer(now, nic, done, Deferred::Repost(peer, slot));
        if bytes.len() < CHUNK_HEADER {
            self.stats.bad_messages += 1;
            return;
        }
        let kind = bytes[0];
        let index = u16::from_be_bytes([bytes[2], bytes[3]]);
        let seq = u32::from_be_bytes(bytes[4..8].try_into().expect("4"));
        let tag = u32::from_be_bytes(bytes[8..12].try_into().expect("4"));
        let total = u64::from(u32::from_be_bytes(bytes[12..16].try_into().expect("4")));
        let data = &bytes[CHUNK_HEADER..];
        let cap = self.cfg.chunk_payload();
        let n = self.cfg.chunks(total);
        let off = u64::from(index) * cap;
        let expect_len = if u64::from(index) < n {
            cap.min(total - off)
        } else {
            u64::MAX
        };
        if data.len() as u64 != expect_len {
            self.stats.bad_messages += 1;
            return;
        }
        match kind {
            CHUNK_EAGER => {
                let behind = seq.wrapping_sub(self.peers[&peer].expect_seq);
                let max_eager = self.cfg.rendezvous_threshold.max(cap);
                // A message being assembled has a chunk in flight, which
                // holds a credit: a peer has at most vbufs_per_peer of them.
                let partial = self.assembling.range((peer, 0)..=(peer, u32::MAX)).count();
                let known = self.assembling.contains_key(&(peer, seq));
                if total > max_eager || (!known && partial >= usize::from(self.cfg.vbufs_per_peer))
                {
                    self.stats.bad_messages += 1;
                    return;
                }
                if behind >= REORDER_WINDOW {
                    // Already delivered (a duplicate) or absurdly far ahead.
                    self.stats.bad_messages += 1;
                    return;
                }
                let entry = self.assembling.entry((peer, seq)).or_insert_with(|| {
                    (vec![0; total as usize], vec![false; n as usize], tag, total)
                });
                if entry.3 != total || entry.2 != tag || entry.1[index as usize] {
                    self.stats.bad_messages += 1;
                    return;
                }
                entry.0[off as usize..(off + data.len() as u64) as usize].copy_from_slice(data);
                entry.1[index as usize] = true;
                if entry.1.iter().all(|g| *g) {
                    let (d, _, _, _) = self.assembling.remove(&(peer, seq)).expect("present");
                    let a = Arrival {
                        from: peer,
                        seq,
                        tag,
                        len: total,
                        kind: ArrivalKind::Eager(d),
                    };
                    self.defer(now, nic, done, Deferred::Arrived(a));
                }
            }
            CHUNK_R3 => {
                let Some(r) = self.recvs.get_mut(&(peer, seq)) else {
                    self.stats.bad_messages += 1;
                    return;
                };
                if r.protocol != MsgProtocol::R3
                    || r.len != total
                    || r.got.get(index as usize) != Some(&false)
                {
                    self.stats.bad_messages += 1;
                    return;
                }
                r.got[index as usize] = true;
                // A truncated receive keeps only what fits.
                let keep = (r.data.len() as u64)
                    .saturating_sub(off)
                    .min(data.len() as u64);
                if keep > 0 {
                    r.data[off as usize..(off + keep) as usize]
                        .copy_from_slice(&data[..keep as usize]);
                }
                r.chunks_left -= 1;
                if r.chunks_left == 0 {
                    self.defer(now, nic, done, Deferred::R3Done(peer, seq));
                }
            }
            _ => self.stats.bad_messages += 1,
        }
    }

    /// A whole message (eager) or an envelope (RTS) from `a.from`: it
    /// enters matching once every earlier message from that peer has.
    fn arrived(&mut self, now: Instant, nic: &mut Nic, a: Arrival) {
        let Some(p) = self.peers.get_mut(&a.from) else {
            self.stats.bad_messages += 1;
            return;
        };
        let ahead = a.seq.wrapping_sub(p.expect_seq);
        if ahead >= REORDER_WINDOW {
            self.stats.out_of_window += 1;
            return;
        }
        if p.reorder.contains_key(&a.seq) {
            self.stats.bad_messages += 1;
            return;
        }
        let from = a.from;
        p.reorder.insert(a.seq, a);
        loop {
            let p = self.peers.get_mut(&from).expect("checked");
            let Some(a) = p.reorder.remove(&p.expect_seq) else {
                break;
            };
            p.expect_seq = p.expect_seq.wrapping_add(1);
            self.enter_matching(now, nic, a);
        }
    }

    fn enter_matching(&mut self, now: Instant, nic: &mut Nic, a: Arrival) {
        if let Some(i) = self
            .posted
            .iter()
            .position(|p| p.src.is_none_or(|s| s == a.from) && p.tag.is_none_or(|t| t == a.tag))
        {
            let p = self.posted.remove(i).expect("found");
            self.matched(now, nic, p, a);
        } else {
            self.stats.unexpected += 1;
            if let ArrivalKind::Eager(d) = &a.kind {
                self.unexpected_bytes += d.len() as u64;
                self.stats.unexpected_bytes_peak =
                    self.stats.unexpected_bytes_peak.max(self.unexpected_bytes);
            }
            self.unexpected.push_back(a);
        }
    }

    fn matched(&mut self, now: Instant, nic: &mut Nic, p: Posted, a: Arrival) {
        match a.kind {
            ArrivalKind::Eager(mut data) => {
                let result = truncate(&mut data, p.max_len);
                self.deliver(MsgEvent::RecvDone {
                    id: p.id,
                    src: a.from,
                    tag: a.tag,
                    seq: a.seq,
                    data,
                    result,
                    at: now,
                });
            }
            ArrivalKind::Rts(rts) => {
                let mut wanted = MsgProtocol::from_wire(rts.protocol).unwrap_or(MsgProtocol::R3);
                // A message that will not fit: RGET reads what fits; RPUT
                // cannot offer a short buffer, so it goes R3 (truncated).
                if a.len > p.max_len && wanted == MsgProtocol::Rput {
                    wanted = MsgProtocol::R3;
                }
                let reg_len = a.len.min(p.max_len);
                let mut r = RecvMsg {
                    id: p.id,
                    tag: a.tag,
                    len: a.len,
                    max_len: p.max_len,
                    protocol: wanted,
                    data: Vec::new(),
                    chunks_left: 0,
                    got: Vec::new(),
                    region: None,
                };
                if matches!(wanted, MsgProtocol::Rget | MsgProtocol::Rput) {
                    match self.register(now, nic, reg_len, Access::ALL) {
                        Some((key, addr)) => {
                            r.region = Some(key);
                            if wanted == MsgProtocol::Rget {
                                self.recvs.insert((a.from, a.seq), r);
                                let wr = WorkRequest::read(
                                    a.from, key, addr, reg_len, rts.rkey, rts.addr,
                                );
                                let ep = self.peers[&a.from].ep;
                                match self
                                    .via
                                    .post_send(now, nic, ep, wr.endpoints(ep, self.my_ep))
                                {
                                    Ok(id) => {
                                        self.purposes.insert(id, Purpose::Read(a.from, a.seq));
                                    }
                                    Err(e) => self.fail_recv(
                                        now,
                                        nic,
                                        a.from,
                                        a.seq,
                                        MsgError::Refused(e.to_string()),
                                    ),
                                }
                                return;
                            }
                            self.recvs.insert((a.from, a.seq), r);
                            self.cts(now, nic, &a, Protocol::Rput, addr, key.0);
                            return;
                        }
                        None => {
                            // Fall back to R3: the CTS says so.
                            self.stats.fallbacks += 1;
                            self.stats.fallback_registration += 1;
                            r.protocol = MsgProtocol::R3;
                        }
                    }
                }
                // R3: the data comes through vbufs after our CTS.
                let n = self.cfg.chunks(a.len);
                r.protocol = MsgProtocol::R3;
                r.data = vec![0; a.len.min(p.max_len) as usize];
                r.chunks_left = n;
                r.got = vec![false; n as usize];
                self.recvs.insert((a.from, a.seq), r);
                self.cts(now, nic, &a, Protocol::R3, 0, 0);
            }
        }
    }

    /// Answers the RTS of `a` with a CTS for `protocol` (RPUT: with our
    /// buffer's address and rkey).
    fn cts(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        a: &Arrival,
        protocol: Protocol,
        addr: u64,
        rkey: u32,
    ) {
        let cts = Rendezvous {
            protocol,
            tag: a.tag,
            length: a.len,
            addr,
            rkey,
            seq: a.seq,
        };
        let recv = Some((a.from, a.seq));
        self.control(now, nic, a.from, Control::Cts(cts), None, recv);
    }

    fn deliver(&mut self, e: MsgEvent) {
        self.stats.recvs_done += 1;
        self.events.push_back(e);
    }

    fn finish_r3_recv(&mut self, now: Instant, peer: NodeAddr, seq: u32) {
        let Some(r) = self.recvs.remove(&(peer, seq)) else {
            return;
        };
        let result = fits(r.len, r.max_len);
        self.deliver(MsgEvent::RecvDone {
            id: r.id,
            src: peer,
            tag: r.tag,
            seq,
            data: r.data,
            result,
            at: now,
        });
    }

    /// RGET (READ done) or RPUT (FIN received): the bytes are in the
    /// registered region.
    fn finish_region_recv(&mut self, now: Instant, nic: &mut Nic, peer: NodeAddr, seq: u32) {
        let Some(r) = self.recvs.remove(&(peer, seq)) else {
            return;
        };
        let mut data = r
            .region
            .and_then(|k| nic.memory_mut().deregister(k))
            .map(|reg| reg.bytes)
            .unwrap_or_default();
        data.truncate(r.len as usize);
        let result = fits(r.len, r.max_len);
        self.deliver(MsgEvent::RecvDone {
            id: r.id,
            src: peer,
            tag: r.tag,
            seq,
            data,
            result,
            at: now,
        });
    }

    fn fail_recv(&mut self, now: Instant, nic: &mut Nic, peer: NodeAddr, seq: u32, err: MsgError) {
        let Some(r) = self.recvs.remove(&(peer, seq)) else {
            return;
        };
        if let Some(k) = r.region {
            nic.memory_mut().deregister(k);
        }
        self.stats.failed += 1;
        self.events.push_back(MsgEvent::RecvDone {
            id: r.id,
            src: peer,
            tag: r.tag,
            data: Vec::new(),
            seq,
            result: Err(err),
            at: now,
        });
    }

    fn on_control(&mut self, now: Instant, nic: &mut Nic, from: NodeAddr, c: Control) {
        if !self.peers.contains_key(&from) {
            self.stats.bad_messages += 1;
            return;
        }
        self.heard_from(from);
        match c {
            Control::Rts(rts) => {
                if MsgProtocol::from_wire(rts.protocol).is_none()
                    || rts.length > u64::from(u32::MAX)
                {
                    self.stats.bad_messages += 1;
                    return;
                }
                let a = Arrival {
                    from,
                    seq: rts.seq,
                    tag: rts.tag,
                    len: rts.length,
                    kind: ArrivalKind::Rts(rts),
                };
                self.arrived(now, nic, a);
            }
            Control::Cts(cts) => {
                let Some(&id) = self.send_by_seq.get(&(from, cts.seq)) else {
                    self.stats.bad_messages += 1;
                    return;
                };
                let s = self.sends.get_mut(&id).expect("indexed");
                if s.state != SendState::AwaitPeer || s.protocol == MsgProtocol::Eager {
                    self.stats.bad_messages += 1;
                    return;
                }
                match cts.protocol {
                    Protocol::Rput if s.protocol == MsgProtocol::Rput => {
                        let Some(key) = s.region else {
                            self.stats.bad_messages += 1;
                            return;
                        };
                        s.state = SendState::Writing;
                        let len = s.data.len() as u64;
                        let local = nic.memory().region(key).map_or(0, |r| r.base);
                        let ep = self.peers[&from].ep;
                        let wr = WorkRequest::write(from, key, local, len, cts.rkey, cts.addr)
                            .endpoints(ep, self.my_ep);
                        match self.via.post_send(now, nic, ep, wr) {
                            Ok(w) => {
                                self.purposes.insert(w, Purpose::Write(id));
                            }
                            Err(e) => {
                                self.fail_send(now, nic, id, MsgError::Refused(e.to_string()))
                            }
                        }
                    }
                    Protocol::R3 => {
                        // R3 from the start, or the receiver fell back.
                        if s.protocol != MsgProtocol::R3 {
                            self.stats.r3 += 1;
                            match s.protocol {
                                MsgProtocol::Rget => self.stats.rget -= 1,
                                MsgProtocol::Rput => self.stats.rput -= 1,
                                _ => {}
                            }
                            s.protocol = MsgProtocol::R3;
                            if let Some(k) = s.region.take() {
                                nic.memory_mut().deregister(k);
                            }
                        }
                        s.state = SendState::Chunks;
                        s.chunks_left = self.cfg.chunks(s.data.len() as u64);
                        self.queue_chunks(now, nic, id, CHUNK_R3);
                    }
                    _ => self.stats.bad_messages += 1,
                }
            }
            Control::Fin { protocol, seq, .. } => match protocol {
                Protocol::Rget => {
                    let Some(&id) = self.send_by_seq.get(&(from, seq)) else {
                        self.stats.bad_messages += 1;
                        return;
                    };
                    if self.sends[&id].protocol != MsgProtocol::Rget {
                        self.stats.bad_messages += 1;
                        return;
                    }
                    self.finish_send(now, nic, id, Ok(()));
                }
                Protocol::Rput => {
                    match self.recvs.get(&(from, seq)) {
                        Some(r) if r.protocol == MsgProtocol::Rput => {}
                        _ => {
                            self.stats.bad_messages += 1;
                            return;
                        }
                    }
                    self.finish_region_recv(now, nic, from, seq);
                }
                _ => self.stats.bad_messages += 1,
            },
        }
    }

    /// Checks the invariants a property test wants after every step:
    /// credits within `0..=vbufs_per_peer` (they are unsigned, so "never
    /// negative" is "never decremented at zero", which `drain` guarantees)
    /// and every peer's posted vbufs accounted for.
    pub fn check(&self) -> Result<(), String> {
        for (addr, p) in &self.peers {
            if p.remote_credit > u32::from(self.cfg.vbufs_per_peer) {
                return Err(format!(
                    "credit toward {addr} is {} > vbufs_per_peer {}",
                    p.remote_credit, self.cfg.vbufs_per_peer
                ));
            }
            let posted = self.via.queue_depths(p.ep).map_or(0, |(_, r)| r);
            if posted > usize::from(self.cfg.vbufs_per_peer) {
                return Err(format!(
                    "{posted} vbufs posted for {addr}, more than vbufs_per_peer"
                ));
            }
        }
        Ok(())
    }
}

/// `Truncated` when a message of `len` bytes met a receive of `max`.
fn fits(len: u64, max: u64) -> Result<(), MsgError> {
    if len > max {
        Err(MsgError::Truncated { len, max })
    } else {
        Ok(())
    }
}

fn truncate(data: &mut Vec<u8>, max: u64) -> Result<(), MsgError> {
    let len = data.len() as u64;
    if len > max {
        data.truncate(max as usize);
        Err(MsgError::Truncated { len, max })
    } else {
        Ok(())
    }
}
