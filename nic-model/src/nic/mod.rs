//! `Nic`: the sans-IO protocol engine of one host.
//!
//! It owns the sender (command queue, large-transfer cutting, DMA OP table,
//! retransmission), the receiver (receive registry, escape channel,
//! tombstones, posted receive buffers) and registered memory. It never
//! reads a clock or a socket: the caller passes `now` to every method and
//! moves datagrams in and out.
//!
//! # Driving it
//!
//! After every [`Nic::post`], [`Nic::post_recv`], [`Nic::handle_datagram`]
//! and [`Nic::handle_timeout`], the caller drains [`Nic::poll_transmit`]
//! (until `None`) and [`Nic::poll_event`] (until `None`), then sleeps until
//! [`Nic::poll_timeout`] or the next datagram, whichever comes first, and
//! calls [`Nic::handle_timeout`] when that deadline passes.
//!
//! # Where things are
//!
//! This file holds the engine's state and the calls every driver makes;
//! one `impl Nic` block per concern sits beside it: `post` (descriptor
//! ring, receive buffers), `send` (cutting, OP table, retransmits,
//! requester completions), `receive` (datagram checks, receive registry,
//! escape channel, tombstones, READ service), `replies` (ACKs, SACK
//! coalescing, NACKs, completion notices, both ways), `loss` (timeouts,
//! fast retransmission, go-back-N, receiver-not-ready waits), `parked`
//! (packets refused before their operation registered wait for its first
//! packet), `peers` (credits,
//! NOOPs, HELLO, control messages, boot epochs), `window` (the sender's
//! per-peer window that lets the receiver's tombstones stay bounded),
//! `flow` (the send gate: congestion state and bytes in flight per peer;
//! its unit tests are `flow_tests`), `loss_window` (less out toward a peer
//! after a loss that congestion caused; its unit tests are
//! `loss_window_tests`), `grants` (receiver
//! credit), `probe`
//! (tail loss probes), `timeout_hold` (one timeout at a time toward a
//! silent peer; its unit tests are `timeout_hold_tests`), `timers` (the deadlines), `local` (where a
//! request's bytes are, and the DMA work of touching them) and
//! `collective` (the reduce unit at work). `local`'s unit tests are
//! `local_tests`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use udrma_proto::{
    Body, Datagram, Error as WireError, Flags, NodeAddr, Packet, Repr, Syndrome, RNR_LOST,
    TRIMMED_AHEAD,
};

use crate::cc::{AckSample, CongestionControl, LossCause};
use crate::config::{AckMode, Multipath, NicConfig, RegistrationMode, RetransmitMode};
use crate::cost::Serial;
use crate::mask::Mask;
use crate::memory::{Access, MemoryTable, MrKey, Use};
use crate::optable::{OpNumber, OpTable};
use crate::peermap::PeerMap;
use crate::registry::{Entry, EscapeChannel, Escaped, OpKey, ReceiveRegistry, Target};
use crate::rtt::RttEstimator;
use crate::stats::{Occupancy, Stats};
use crate::tombstones::Tombstones;
use crate::translation::TranslationCache;
use crate::wr::{Control, Event, PostError, WcError, WorkRequest, WrId, WrKind};
use local::Local;
use loss_window::CutCause;
use udrma_proto::time::Instant;

mod collective;
mod flow;
mod grants;
mod local;
mod loss;
mod loss_window;
mod parked;
mod peers;
mod post;
mod probe;
mod receive;
mod replies;
mod send;
mod timeout_hold;
mod timers;
mod window;

pub use loss::TIMEOUT_LOG_CAP;
pub use peers::{epoch_newer, first_msg_id, CREDIT_REPAIRS, MAX_CREDIT_PEERS, MAX_PEERS};

/// A datagram [`Nic::poll_transmit`] wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Transmit {
    /// Destination host.
    pub dst: NodeAddr,
    /// Bytes written to the buffer.
    pub len: usize,
    /// Zero bytes of payload left out of the buffer, just before its ICRC
    /// (only after [`Nic::set_elide_zeros`]; see [`udrma_proto::elide`]).
    /// The datagram on the wire is `len + elided` bytes.
    pub elided: u16,
    /// UDP source port suggested for the datagram.
    pub src_port: u16,
    /// NIC time this packet's DMA takes beyond the per-packet cost of the
    /// cost model: a setup per extra block it gathers and the translation
    /// of indirect-key table lines. Zero for a contiguous buffer.
    pub nic_work: udrma_proto::time::Duration,
    /// How long after `now` the engine counts the datagram as leaving:
    /// `nic_work`, or longer for a data packet handed out behind one that
    /// leaves later (the NIC sends data in the order it hands it out). A
    /// data packet's retransmit deadline and round-trip sample count from
    /// then, so a driver should not send it sooner: the fabric's port
    /// keeps that order and adds the work, and the bridge holds the
    /// datagram this long.
    pub leaves_in: udrma_proto::time::Duration,
}

/// What the network says about a received datagram besides its bytes (as
/// quinn-proto's receive call takes an ECN codepoint with each datagram).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct RxMeta {
    /// The IP header's ECN field as it arrived.
    pub ecn: Ecn,
    /// A switch cut the payload off on a full queue and forwarded the
    /// header (NDP/UET trimming; real switches say so in the DSCP field).
    /// Only the first [`udrma_proto::HEADER_LEN`] bytes are meaningful.
    pub trimmed: bool,
    /// The datagram's UDP source port, when the caller knows it (0 if
    /// not): its entropy. With multipath on, replies leave from it.
    pub src_port: u16,
}

/// The two ECN bits of the IP header (RFC 3168).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Ecn {
    /// Not ECN-capable transport (or unknown: a socket that cannot read it).
    #[default]
    NotEct,
    /// ECN-capable, codepoint ECT(0).
    Ect0,
    /// ECN-capable, codepoint ECT(1).
    Ect1,
    /// Congestion Experienced: a queue on the path marked it.
    Ce,
}

impl Ecn {
    /// What a simulated wire delivers: CE if a queue marked the packet,
    /// else nothing known.
    pub fn marked(ce: bool) -> Ecn {
        if ce {
            Ecn::Ce
        } else {
            Ecn::NotEct
        }
    }
}

/// Everything in the one ordered deadline set (`timers.rs`: packets'
/// deadlines in a fast lane, the rest in a tree). Each owner remembers
/// the deadline its timer is filed under, so cancelling is exact. A registry entry's timer is
/// filed lazily: progress moves the entry's deadline, not its timer, which
/// when it fires early is filed again (so it may wake the driver once per
/// `registry_timeout` for nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Timer {
    /// An outstanding packet's retransmit deadline.
    Retransmit(OpNumber),
    /// A packet NACKed as receiver-not-ready is due again.
    RnrRetry(OpNumber),
    /// An escape channel entry expires.
    Escape(u64),
    /// A registry entry saw no progress for `registry_timeout`.
    Registry(OpKey),
    /// Coalesced selective ACKs for an operation are due.
    Sack(OpKey),
    /// The NIC has fetched a request's descriptor: it joins the command
    /// queue (only with a nonzero cost model).
    Fetch(WrId),
    /// The host's interrupt handler refills the descriptor ring.
    Refill,
    /// A reduce packet's retransmit deadline.
    ReduceRetransmit(crate::reduce::state::OutKey),
    /// A reduce chunk created by arrivals, never posted here, expires.
    ReduceExpire(crate::reduce::state::ChunkKey),
    /// A paced flow may send again (wakes the driver; nothing else).
    Pace,
    /// The receiver-credit pacer may grant again.
    Grant,
    /// An operation's tail loss probe is due (`tail_probe`).
    Probe(u32),
    /// A peer's echo was behind the credit count carried to it: unless a
    /// later echo has caught up by now, that count is sent again.
    CreditCheck(NodeAddr),
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Request {
    req: WorkRequest,
    /// Bytes already cut into operations.
    cut: u64,
    /// Whether cutting has finished (a zero-length request is one op).
    cut_done: bool,
    /// Operations of this request not yet finished.
    open_ops: u32,
    /// Whether it holds a descriptor ring slot (else it waits in the host
    /// overflow ring).
    in_ring: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum OpKind {
    Write,
    Send,
    ReadRequest,
    Notify,
    Control,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum PktState {
    Unsent,
    InFlight(OpNumber),
    Acked,
}

/// One segment operation: a message id with its packets.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Op {
    wr: WrId,
    kind: OpKind,
    dst: NodeAddr,
    /// Offset of this operation within its request.
    offset: u64,
    len: u64,
    seg_count: u32,
    next_unsent: u32,
    pkts: Vec<PktState>,
    /// Every packet before this one is acknowledged: scans for overtaken
    /// packets start here, not at 0 (they ran once per ACK, so a long
    /// operation cost its length squared).
    first_unacked: u32,
    /// When each segment was first handed to `send_packet`, in segment
    /// order (so nondecreasing): a lower bound of its copies' send times
    /// that lets the overtaken scan stop where no older packet can be.
    first_sent: Vec<Instant>,
    acked: u32,
    last_segment: bool,
    /// READ: which response packets have arrived.
    read_mask: Option<Mask>,
    /// READ: when each segment whose response arrived trimmed was last
    /// asked for again by itself (`Nic::read_response_trimmed`), and how
    /// many times it was: at most one entry a segment.
    asked_again: Vec<(u32, Instant, u32)>,
    /// READ: the round trip of the first trimmed response heard, since
    /// the latest ask for its segment (a bound from below: the trim may
    /// answer an older copy). It judges copies of trimmed responses
    /// while the path has no whole round trip sampled
    /// (`Nic::read_response_trimmed`). It does not feed the RTO: a
    /// trimmed header does not queue as a whole response does.
    trim_rtt: Option<udrma_proto::time::Duration>,
    /// When the latest-sent packet acknowledged so far left (first copies
    /// only): packets sent well before it and still unacknowledged are
    /// lost.
    acked_sent: Option<Instant>,
    /// Tail loss probing (`tail_probe`): when the operation last sent a
    /// packet or had one acknowledged, the instant its probe timer is
    /// filed at (if it is), and how many probes went unanswered since.
    probe: probe::ProbeState,
    /// Times the whole operation went again because its receiver had lost
    /// its registration (`window.rs`).
    restarts: u32,
    /// First-only registration: packets the receiver refused because the
    /// operation was not registered yet (its first packet unacknowledged),
    /// by segment. They wait until a packet of the operation is
    /// acknowledged, or one RTO at most, then go again
    /// (`Nic::park_for_first`).
    parked: Vec<u32>,
}

/// An OP table entry: one outstanding packet.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Inflight {
    msg_id: u32,
    seg: u32,
    sent_at: Instant,
    retries: u32,
    /// Times the receiver said it was not ready (counted apart).
    rnr_retries: u32,
    retransmitted: bool,
    /// Its latest copy went because a later packet was acknowledged first.
    fast: bool,
    /// Its latest copy is a tail loss probe.
    probe: bool,
    /// Bytes the packet counts in flight toward its peer (the datagram; a
    /// READ request counts the response bytes it asks for).
    bytes: u32,
    /// The entropy (source port offset) its last copy went with.
    entropy: u16,
    /// `None` while waiting in the retransmit queue.
    deadline: Option<Instant>,
    /// Judged lost and not yet sent again, under a controller: its bytes
    /// no longer count in flight toward its peer, and its copy goes
    /// through the send gate as new data does (`Nic::next_retransmit`).
    lost: bool,
}

impl Inflight {
    /// The bytes it counts in flight now (none while judged lost).
    fn in_flight(&self) -> u32 {
        if self.lost {
            0
        } else {
            self.bytes
        }
    }
}

/// A posted receive buffer.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct RecvBuf {
    wr: WrId,
    at: Local,
    len: u64,
}

/// Whether an ACK reports its packet as a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Dup {
    /// A first arrival's acknowledgement.
    No,
    /// The packet had arrived before (flag `DUP`). `answered` (flag
    /// `RETX`): this duplicate is a copy sent again after that arrival had
    /// been acknowledged, which may answer a lost acknowledgement rather
    /// than a late packet.
    Reported { answered: bool },
}

/// What a NOOP (CREDIT packet) is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Noop {
    /// Carries a credit advertisement nothing else would carry.
    Advertise,
    /// Carries again a count whose echo never came, and asks (`ACK_REQ`)
    /// for one NOOP back that echoes it: a quiet peer says nothing else.
    Repair,
    /// The answer to a `Repair`: echoes the newest count seen
    /// (`CREDITS_ECHO`) and asks for nothing.
    Echo,
}

#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum ReplyBody {
    /// `ece`: the acknowledged packet arrived CE-marked. `dup`: whether
    /// this copy of it was a duplicate, reported (flag `DUP`).
    Ack {
        ece: bool,
        dup: Dup,
    },
    Sack {
        base: u32,
        bitmap: u64,
        ece: bool,
    },
    Nack {
        syndrome: Syndrome,
        detail: u32,
    },
    /// `acks`: it also acknowledges the operation's one packet (sent in
    /// place of its ACK or SACK; flag `ACKS`), and `ece` says that packet
    /// arrived CE-marked.
    Completion {
        len: u32,
        acks: bool,
        ece: bool,
    },
    ReadResponse {
        rkey: u32,
        addr: u64,
        total_len: u32,
    },
    /// A READ request asking again for the segments the reply names (its
    /// `seg_index` and `seg_count`; flags `PARTIAL` and `RETRANSMIT`):
    /// sent by the requester when one of its responses was trimmed.
    ReadAgain {
        rkey: u32,
        addr: u64,
        length: u32,
    },
    /// A NOOP: see [`Noop`].
    Credit(Noop),
    Hello {
        reply: bool,
        nonce: u32,
        /// The admission cookie an ask echoes (zeros: none).
        cookie: [u8; 16],
    },
    Demand {
        wanted: u64,
        free: u64,
    },
    Grant {
        granted: u64,
    },
}

/// A packet the receive side owes a peer (built at transmit time).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Reply {
    /// UDP source port to send it from (0: the NIC's own): with
    /// multipath on, a reply leaves from the port (entropy) the packet it
    /// answers came from, so its path changes with the data's.
    port: u16,
    to: NodeAddr,
    src_ep: u16,
    dst_ep: u16,
    op_num: u32,
    msg_id: u32,
    seg_index: u32,
    seg_count: u32,
    body: ReplyBody,
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct PendingSack {
    src_ep: u16,
    seg_count: u32,
    indices: BTreeSet<u32>,
    /// Those of `indices` that arrived CE-marked.
    marked: BTreeSet<u32>,
    deadline: Instant,
}

/// The protocol engine of one host. See the module docs for how to drive it.
///
/// Laid out in this order (`repr(C)`): what the engine reads for every
/// packet it sends or takes in (timers, the OP table, the operations, the
/// queues of replies and events, the registry, the per-peer state) comes
/// first, in the struct's first [`Nic::HOT_BYTES`] (1,136 today), and
/// the large parts that a packet reads a little of or nothing (counters,
/// congestion state, configuration, the reduce unit) after it, so that a
/// simulator that asks for a host's first lines ahead of its events asks
/// for the lines the engine will read (Rust's own order had spread them
/// over all 56 lines of the struct). A field every packet reads belongs
/// before `stats`.
#[derive(Debug)]
#[repr(C)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Nic {
    timers: timers::TimerSet,
    addr: NodeAddr,
    next_msg: u32,
    /// The UDP source port of the datagram being handled (0: unknown).
    rx_port: u16,
    /// Whether the datagram being handled arrived CE-marked.
    rx_ce: bool,
    /// The backend carries all-zero payloads elided (a simulator).
    elide_zeros: bool,
    /// Whether a scatter-gather list was ever posted (so receive work is
    /// worth computing).
    lists_posted: bool,
    /// Whether a refill interrupt is pending.
    refill_pending: bool,
    op_table: OpTable<Inflight>,
    ops: BTreeMap<u32, Op>,
    sendable: VecDeque<u32>,
    retransmit_queue: VecDeque<OpNumber>,
    replies: VecDeque<Reply>,
    events: VecDeque<Event>,
    registry: ReceiveRegistry,
    escape: EscapeChannel,
    sacks: BTreeMap<OpKey, PendingSack>,
    tombstones: Tombstones,
    memory: MemoryTable,
    rtt: PeerMap<RttEstimator, 1>,
    /// The pacing wake-up armed, if any.
    pace_at: Option<Instant>,
    /// When the last data packet handed out leaves, once gathered: the
    /// NIC sends in the order it hands packets out, so no packet leaves
    /// before the one handed out ahead of it (the timer rule,
    /// docs/engine.md).
    #[cfg_attr(
        feature = "fingerprint",
        serde(serialize_with = "udrma_proto::not_before_now")
    )]
    tx_frontier: Instant,
    /// Peers that said "receiver not ready": no new packet goes to them
    /// before the time given (back-pressure, as an RNR NAK stops a queue
    /// pair for its RNR timer). Entries leave once they pass.
    rnr_hold: PeerMap<Instant, 1>,
    /// Flows with a loss window (`loss_window`): while any has one,
    /// the gate decides what goes next.
    windowed_flows: usize,
    /// Credit count advertised to each peer on every packet.
    advertised: PeerMap<u16, 2>,
    /// Newest credit count each peer advertised.
    credits_seen: PeerMap<u16, 2>,
    /// Newest credit count that really left toward each peer on a packet.
    credits_carried: PeerMap<u16, 2>,
    /// Boot epoch each peer last showed (at most [`MAX_PEERS`] peers).
    peer_epochs: PeerMap<u32, 2>,
    /// Receiver credit: the grant scheduler for senders that ask.
    grants: grants::Grants,
    /// The peer the send gate served last (peers take turns).
    rr_last: Option<NodeAddr>,
    replies_peak: usize,
    /// Descriptor ring slots in use, and their peak.
    ring_used: usize,
    stats: Stats,
    /// Go-back-N: peers whose copies the gate held back at the last look
    /// (`next_retransmit`); no new packet goes to them before those. Read
    /// only while the gate decides, so after `stats`.
    copies_held: Vec<NodeAddr>,
    /// Data packets whose placing work the receive side has booked
    /// (`receive_work`) and that are not handled yet: a copy of one that
    /// arrives meanwhile costs no placing work, since the first sets its
    /// bit before the copy is looked at. At most [`PLACING_CAP`]. Filled
    /// only by a costed backend (`receive_work`); other backends test
    /// only that it is empty, once a datagram, so after `stats`.
    placing: BTreeSet<(NodeAddr, u16, u32, u32)>,
    // The credit echo's state: read only by messaging, which advertises
    // credits, so after the hot part (an RDMA run never touches it).
    /// Newest echo of our count each peer sent.
    credits_echoed: PeerMap<u16, 2>,
    /// Per peer, the carried count a stale echo put in doubt, when its
    /// `CreditCheck` timer fires, and how many NOOPs it has drawn.
    credits_doubted: PeerMap<(u16, Instant, u32), 2>,
    /// Peers whose next packet echoes their count rather than advertising
    /// ours (the two take turns while ours keeps changing).
    echo_next: PeerMap<bool, 2>,
    /// Congestion state toward each peer this NIC sends to.
    flows: PeerMap<flow::Flow, 1>,
    cfg: NicConfig,
    /// The reduce unit (counters, triggered descriptors, ALU).
    reduce: crate::reduce::state::ReduceState,
    /// The indirect keys' translation cache.
    translation: TranslationCache,
    requests: BTreeMap<WrId, Request>,
    requests_peak: usize,
    command_queue: VecDeque<WrId>,
    /// Requests waiting in the host overflow ring, oldest first.
    overflow: VecDeque<WrId>,
    /// Go-back-N: operations not registered yet (first packet missing) whose
    /// gap was NACKed already, oldest first, at most `escape_capacity` (the
    /// escape channel they would otherwise use is idle in this mode). As
    /// RoCE's responder, the gap is NACKed once; later copies are dropped
    /// quietly until the first packet arrives, so a path that keeps losing
    /// the first packet costs the sender timeouts that back off, not a NACK
    /// per round trip that spends its retry budget in microseconds.
    gap_naks: VecDeque<OpKey>,
    /// Operations whose registry entry expired (holding the packets it had
    /// acknowledged, the registering one at least), oldest first, at most
    /// `registry_capacity`. A later packet of one registers nothing: under
    /// self-describing registration the new entry would wait for the
    /// packets its sender saw acknowledged and never sends again, and its
    /// host would never hear the data landed; under first-only it would
    /// wait in the escape channel for a first packet that is not coming.
    /// It is refused at once instead (`RNR` with detail `RNR_LOST`), its
    /// first packet too, which tells the sender to send the whole
    /// operation again (`window.rs`) in its next incarnation; a packet of
    /// that incarnation registers it and ends the record. Kept with the
    /// incarnation lost.
    lost_registrations: VecDeque<(OpKey, bool)>,
    lost_registrations_peak: usize,
    recv_queues: BTreeMap<u16, VecDeque<RecvBuf>>,
    /// Receive buffers a SEND in the registry is filling.
    bound: BTreeMap<WrId, RecvBuf>,
    /// Gather buffer for packets whose bytes span blocks.
    scratch: Vec<u8>,
    /// Builds a controller for a new peer, when the host supplied one.
    factory: flow::Factory,
    /// The NIC's descriptor fetch unit.
    fetch_unit: Serial,
    /// The region HELLOs announce, if any.
    announced: Option<MrKey>,
    ring_peak: usize,
    next_wr: u64,
    /// Per peer, the operations opened from the oldest unfinished one on
    /// (`window.rs`; only with `tombstone_mode = "window"`).
    send_windows: BTreeMap<NodeAddr, window::SendWindow>,
    /// When each retransmit timer expired, and for which message, once a
    /// caller asked ([`Nic::record_timeouts`]; a timeline): at most
    /// [`TIMEOUT_LOG_CAP`]. Not the engine's state: a fingerprint leaves
    /// it out.
    #[cfg_attr(feature = "fingerprint", serde(skip))]
    timeout_log: Option<Vec<(Instant, u32)>>,
}

/// At most this many packets are remembered as booked for placing and not
/// yet handled (`Nic::receive_work`); past it a copy is charged its
/// placing work again, as before the set existed.
pub const PLACING_CAP: usize = 4096;

fn div_ceil_nonzero(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

impl Nic {
    /// Bytes at the start of a `Nic` that the engine reads for nearly
    /// every packet it sends or takes in (its layout puts them first): a
    /// simulator that asks for a host's state ahead of its events asks
    /// for these lines. Everything after them is read a little at a time
    /// (counters, congestion state, configuration) or rarely.
    pub const HOT_BYTES: usize = std::mem::offset_of!(Nic, stats);

    /// A NIC for host `addr`. Fails if the configuration cannot work.
    pub fn new(addr: NodeAddr, cfg: NicConfig) -> Result<Nic, crate::config::ConfigError> {
        cfg.validate()?;
        Ok(Nic {
            addr,
            memory: MemoryTable::new(),
            next_wr: 1,
            next_msg: first_msg_id(cfg.epoch),
            requests: BTreeMap::new(),
            requests_peak: 0,
            command_queue: VecDeque::new(),
            ops: BTreeMap::new(),
            sendable: VecDeque::new(),
            op_table: OpTable::new(cfg.op_table_capacity),
            retransmit_queue: VecDeque::new(),
            rtt: PeerMap::new(),
            registry: ReceiveRegistry::new(cfg.registry_capacity),
            escape: EscapeChannel::new(cfg.escape_capacity, cfg.escape_bytes),
            gap_naks: VecDeque::new(),
            lost_registrations: VecDeque::new(),
            lost_registrations_peak: 0,
            tombstones: Tombstones::new(
                cfg.tombstone_capacity,
                cfg.tombstones,
                cfg.tombstone_mode,
                MAX_PEERS,
            ),
            recv_queues: BTreeMap::new(),
            bound: BTreeMap::new(),
            sacks: BTreeMap::new(),
            replies: VecDeque::new(),
            replies_peak: 0,
            events: VecDeque::new(),
            timers: timers::TimerSet::default(),
            stats: Stats::default(),
            advertised: PeerMap::new(),
            credits_seen: PeerMap::new(),
            credits_carried: PeerMap::new(),
            echo_next: PeerMap::new(),
            credits_echoed: PeerMap::new(),
            credits_doubted: PeerMap::new(),
            peer_epochs: PeerMap::new(),
            announced: None,
            ring_used: 0,
            ring_peak: 0,
            send_windows: BTreeMap::new(),
            timeout_log: None,
            overflow: VecDeque::new(),
            refill_pending: false,
            fetch_unit: Serial::default(),
            translation: TranslationCache::new(cfg.translation),
            lists_posted: false,
            scratch: Vec::new(),
            reduce: Default::default(),
            flows: PeerMap::new(),
            factory: flow::Factory::default(),
            pace_at: None,
            tx_frontier: Instant::ZERO,
            rr_last: None,
            rnr_hold: PeerMap::new(),
            windowed_flows: 0,
            copies_held: Vec::new(),
            placing: BTreeSet::new(),
            grants: grants::Grants::default(),
            rx_ce: false,
            rx_port: 0,
            elide_zeros: false,
            cfg,
        })
    }

    /// This host.
    pub fn addr(&self) -> NodeAddr {
        self.addr
    }

    /// The configuration.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Registered memory.
    pub fn memory(&self) -> &MemoryTable {
        &self.memory
    }

    /// Registered memory, for the host to register, fill, reuse and
    /// deregister regions.
    pub fn memory_mut(&mut self) -> &mut MemoryTable {
        &mut self.memory
    }

    /// Registers `len` zeroed bytes at `base`; shorthand for
    /// `memory_mut().register(..)`.
    pub fn register(&mut self, base: u64, len: usize, access: Access) -> MrKey {
        self.memory.register(base, len, access)
    }

    /// RTT state toward `peer`, once it has been talked to.
    pub fn rtt(&self, peer: NodeAddr) -> Option<&RttEstimator> {
        self.rtt.get(&peer)
    }

    /// Bounded state now, at its peak, and its limits.
    pub fn occupancy(&self) -> Occupancy {
        let c = &self.cfg;
        Occupancy {
            registry: (
                self.registry.len(),
                self.registry.peak(),
                c.registry_capacity,
            ),
            escape_entries: (
                self.escape.len(),
                self.escape.peak_entries(),
                c.escape_capacity,
            ),
            escape_bytes: (
                self.escape.bytes(),
                self.escape.peak_bytes(),
                c.escape_bytes,
            ),
            op_table: (
                self.op_table.len(),
                self.op_table.peak(),
                usize::from(c.op_table_capacity),
            ),
            tombstones: (
                self.tombstones.len(),
                self.tombstones.peak(),
                self.tombstones.limit(),
            ),
            transmit_queue: (
                self.replies.len(),
                self.replies_peak,
                c.transmit_queue_capacity,
            ),
            requests: (
                self.requests.len(),
                self.requests_peak,
                c.command_queue_capacity,
            ),
            descriptor_ring: (self.ring_used, self.ring_peak, c.descriptor_ring),
            reduce_chunks: self.reduce_occupancy(),
            lost_registrations: (
                self.lost_registrations.len(),
                self.lost_registrations_peak,
                c.registry_capacity.max(1),
            ),
        }
    }

    /// Lets [`Nic::poll_transmit`] leave payloads read from phantom memory
    /// (all zeros) out of the buffer, saying how many bytes it left out in
    /// [`Transmit::elided`]. Only for a backend that hands such datagrams
    /// back elided ([`Nic::handle_elided`]) or rebuilds them
    /// ([`udrma_proto::Datagram::write_to`]): a simulator. Off by default;
    /// the behaviour and every trace are the same either way.
    pub fn set_elide_zeros(&mut self, on: bool) {
        self.elide_zeros = on;
    }

    /// Whether nothing is outstanding: no request, no queued packet, no
    /// registry entry, no escaped packet and no pending timer.
    pub fn is_idle(&self) -> bool {
        self.requests.is_empty()
            && self.replies.is_empty()
            && self.registry.is_empty()
            && self.escape.is_empty()
            && self.timers.is_empty()
            && self.reduce.is_idle()
    }

    /// The next event for the host (completions, arrivals), oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest deadline at which [`Nic::handle_timeout`] must be
    /// called, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // (Fetch and refill timers live here too.)
        self.timers.first().map(|(t, _)| t)
    }

    /// Fires every deadline at or before `now`: retransmissions, escape
    /// channel expiry, registry eviction, coalesced ACKs.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some((t, timer)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Retransmit(opn) => self.on_retransmit_timeout(now, opn),
                Timer::RnrRetry(opn) => {
                    if let Some(inf) = self.op_table.get_mut(opn) {
                        inf.deadline = None;
                        self.queue_retransmit(opn);
                    }
                }
                Timer::Escape(id) => {
                    if let Some(e) = self.escape.remove(id) {
                        self.stats.escape_expired += 1;
                        self.escape_expired(e);
                    }
                }
                Timer::Registry(key) => self.expire_registry(now, key),
                Timer::Sack(key) => self.flush_sack(key),
                Timer::Fetch(id) => {
                    if self.requests.contains_key(&id) {
                        self.command_queue.push_back(id);
                    }
                }
                Timer::Refill => {
                    self.refill_pending = false;
                    self.refill(now);
                }
                Timer::ReduceRetransmit(key) => self.on_reduce_timeout(now, key),
                Timer::ReduceExpire(key) => self.on_reduce_expire(key),
                Timer::Pace => self.pace_at = None,
                Timer::Grant => self.grant_tick(now),
                Timer::Probe(msg_id) => self.on_probe_timeout(now, t, msg_id),
                Timer::CreditCheck(peer) => self.check_echo(now, peer),
            }
        }
    }
}
