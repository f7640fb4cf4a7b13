//! `World`: the discrete-event simulation of a fabric of NICs.
//!
//! Events are ordered by (time, insertion sequence), so equal times keep
//! the order they were scheduled in. Each host's NIC engine is driven as
//! its contract asks: after every datagram, timeout or post the world
//! drains its events and, when the host's link is free, pulls its next
//! datagram, so a NIC transmits at line rate and never floods its own
//! queue. NIC timers are cancelled lazily: the world keeps one scheduled
//! wake-up per host and schedules a new one only when the deadline moves
//! earlier; a wake-up whose time is no longer the host's is skipped.
//!
//! Faults are applied where a packet enters a link's egress queue (as
//! netem does on a qdisc): drop, duplicate, delay (the packet enters the
//! queue later, so others overtake it), corrupt.
//!
//! Egress queues are FIFO with a known service time, so a packet's
//! transmission start is computed when it is enqueued (`max(now, port
//! free)`) and only its arrival at the far end is scheduled: one event per
//! hop. The bytes still waiting (for tail drop and ECN) are the packets
//! whose start lies in the future. Host ports also schedule a "free" event
//! so the NIC is pulled for its next datagram at line rate.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;

use rand_chacha::ChaCha8Rng;
use udrma_faults::rng::stream;
use udrma_faults::{Direction, FaultError, HostPause, PacketCtx, RuleSet, Verdict};
use udrma_host::App;
use udrma_nic::{Event, Nic, NicConfig, PostError, WorkRequest, WrId};
use udrma_proto::encap::{encapsulate, UdpEndpoint, FRAME_OVERHEAD};
use udrma_proto::pcap::{CaptureError, PcapSink};
use udrma_proto::{
    Duration, Flags, Instant, NodeAddr, Opcode, Packet, DEFAULT_UDP_PORT, HEADER_LEN,
};

mod apps;

use crate::queue::EventQueue;
use crate::routing::{Policy, Router};
use crate::topology::{LinkId, NodeId, NodeKind, PortId, Topology};
use crate::trace::{DropReason, Trace, TraceEvent, TraceFormat};

/// Bytes a frame occupies on the wire beyond the datagram: Ethernet, IPv4
/// and UDP headers, FCS, preamble and inter-frame gap.
pub const WIRE_OVERHEAD: u64 = FRAME_OVERHEAD as u64 + 4 + 8 + 12;

/// Most packets a paused host holds; more are dropped and counted.
pub const PAUSE_HOLD_LIMIT: usize = 1 << 20;

/// Everything that describes a world besides its topology.
#[derive(Debug, Clone)]
pub struct FabricConfig {
    /// Master seed: every random stream derives from it.
    pub seed: u64,
    /// Next-hop choice.
    pub routing: Policy,
    /// Every host's NIC configuration.
    pub nic: NicConfig,
    /// Phantom payloads: an all-zero payload (what phantom memory holds) is
    /// not carried through the fabric; packets keep their header, their
    /// real ICRC and the payload's length, and are rebuilt only where a
    /// NIC, a corruption fault or the pcap tap needs the bytes. Timing,
    /// queueing and MTU use the full length.
    pub phantom_payload: bool,
    /// Bytes every packet carries on the wire beyond its own: the
    /// authenticated mode's security header and tag less the ICRC (36), or
    /// 0. They count in queues and serialization, not in the packet.
    pub seal_bytes: u64,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            seed: 1,
            routing: Policy::Ecmp,
            nic: NicConfig::default(),
            phantom_payload: false,
            seal_bytes: 0,
        }
    }
}

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

/// Counters of the fabric (the NICs keep their own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Events processed.
    pub events: u64,
    /// Packets that crossed a link (one link crossing = one hop).
    pub packet_hops: u64,
    /// Datagrams handed to a destination NIC.
    pub delivered: u64,
    /// Datagrams the NICs sent.
    pub sent: u64,
    /// Dropped, by reason.
    pub dropped: BTreeMap<DropReason, u64>,
    /// Extra copies made by duplicate faults.
    pub duplicated: u64,
    /// Packets delayed by a fault (including netem reordering).
    pub delayed: u64,
    /// Packets corrupted by a fault.
    pub corrupted: u64,
    /// Packets ECN-marked at a queue above its threshold.
    pub ecn_marked: u64,
    /// Packets whose payload a trimming switch cut off on a full queue
    /// (not counted in `dropped`: their headers went on).
    pub trimmed: u64,
    /// Deepest egress queue seen, in bytes.
    pub max_queue_bytes: u64,
    /// Most events pending at once (bounded by ports + hosts + delayed
    /// packets: lazy timer cancellation leaves at most a few per host).
    pub max_event_queue: u64,
    /// Datagrams delivered after one sent later on the same (source,
    /// destination) flow had already been delivered.
    pub reordered: u64,
}

impl FabricStats {
    /// Every drop, whatever the reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.values().sum()
    }
}

#[derive(Debug)]
struct Pkt {
    serial: u64,
    src: NodeAddr,
    dst: NodeAddr,
    src_port: u16,
    /// The datagram, or with a phantom payload: header, extension and
    /// ICRC only.
    bytes: Vec<u8>,
    /// Zero bytes of payload left out of `bytes` (phantom payloads).
    elided: u32,
    /// Extra NIC time the sending host's DMA needs for this packet
    /// (gathers, indirect-key translation), in picoseconds, saturating.
    nic_work_ps: u32,
    /// A queue above its ECN threshold marked it Congestion Experienced.
    ce: bool,
    /// A trimming switch cut its payload off (only the header is left).
    trimmed: bool,
    /// The header fields faults and the trace look at, read once while
    /// the bytes are hot in cache (and again after a corruption).
    head: Head,
}

/// The header fields faults, the trace and the ladder journal read.
#[derive(Debug, Clone, Copy)]
struct Head {
    opcode: Option<Opcode>,
    flags: Flags,
    msg: u32,
    seg: u32,
}

impl Head {
    /// Reads them (all empty when the datagram is shorter than a header).
    fn of(bytes: &[u8]) -> Head {
        if bytes.len() < HEADER_LEN {
            return Head {
                opcode: None,
                flags: Flags::empty(),
                msg: 0,
                seg: 0,
            };
        }
        let p = Packet::new_unchecked(bytes);
        Head {
            opcode: Some(p.opcode()),
            flags: p.flags(),
            msg: p.msg_id(),
            seg: p.seg_index(),
        }
    }
}

impl Pkt {
    /// Length on the wire.
    fn len(&self) -> u64 {
        self.bytes.len() as u64 + u64::from(self.elided)
    }

    /// The whole datagram: `bytes` itself, or rebuilt into `scratch`.
    fn datagram<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        if self.elided == 0 {
            return &self.bytes;
        }
        let icrc_at = self.bytes.len() - udrma_proto::ICRC_LEN;
        scratch.clear();
        scratch.extend_from_slice(&self.bytes[..icrc_at]);
        scratch.resize(icrc_at + self.elided as usize, 0);
        scratch.extend_from_slice(&self.bytes[icrc_at..]);
        scratch
    }

    /// Puts an elided payload back (before bits are flipped in it).
    fn materialise(&mut self) {
        if self.elided > 0 {
            let mut full = Vec::new();
            self.datagram(&mut full);
            self.bytes = full;
            self.elided = 0;
        }
    }

    /// Leaves out an all-zero payload, keeping header, extension and ICRC
    /// in a small buffer; returns the big one for reuse.
    fn elide_zero_payload(&mut self) -> Option<Vec<u8>> {
        static ZEROS: [u8; 65_536] = [0; 65_536];
        if self.bytes.len() < HEADER_LEN + udrma_proto::ICRC_LEN {
            return None;
        }
        let payload_len = usize::from(Packet::new_unchecked(&self.bytes[..]).payload_len());
        let end = self.bytes.len() - udrma_proto::ICRC_LEN;
        let start = end.checked_sub(payload_len)?;
        if payload_len == 0 || start < HEADER_LEN || self.bytes[start..end] != ZEROS[..payload_len]
        {
            return None;
        }
        let mut small = Vec::with_capacity(start + udrma_proto::ICRC_LEN);
        small.extend_from_slice(&self.bytes[..start]);
        small.extend_from_slice(&self.bytes[end..]);
        self.elided = payload_len as u32;
        Some(std::mem::replace(&mut self.bytes, small))
    }
}

#[derive(Debug)]
enum EvKind {
    /// A host's port finished sending: pull the NIC's next datagram.
    HostFree(u32),
    /// The packet at the head of a port's flight line reaches the far end.
    Arrive(PortId),
    Enqueue(PortId, Pkt),
    Timer(u32),
    Pause(u32, Instant),
    Resume(u32),
    /// Boxed: the slab's entries are as large as the largest event.
    Post(u32, Box<WorkRequest>),
    /// The host NIC's receive side has processed a packet (cost model).
    Deliver(u32, Pkt),
    /// A trimmed header reaches the far end of a port, ahead of the queue.
    ArriveTrimmed(PortId, Pkt),
}

/// What a hop needs to know about a port and its link, copied next to the
/// port's state so a hop reads one place instead of five tables (on the
/// 1024-host shape each of those reads was a cache miss).
#[derive(Debug, Clone, Copy)]
struct PortHot {
    link: LinkId,
    direction: Direction,
    /// The host this port belongs to (its NIC's egress), if any.
    host: Option<u32>,
    /// The node at the far end, and its host number if it is one.
    peer: NodeId,
    peer_host: Option<u32>,
    mtu: u32,
    queue_bytes: u64,
    ecn_threshold: Option<u64>,
    /// A switch port that trims on a full queue.
    trim: bool,
    bandwidth_bps: u64,
    /// Picoseconds per bit when that is a whole number (every rate that
    /// divides 1 Tb/s), else 0 and serialization divides.
    ps_per_bit: u64,
    latency: Duration,
    tapped: bool,
}

#[derive(Debug)]
struct PortState {
    hot: PortHot,
    /// When the last packet given to this port finishes serializing.
    free_at: Instant,
    /// Start times and lengths of packets not yet being sent.
    waiting: VecDeque<(Instant, u32)>,
    /// Sum of their lengths.
    queued_bytes: u64,
    /// Packets given to the port, with their arrival time at the far end
    /// (increasing: FIFO, one rate, one latency). Only the head's arrival
    /// is in the event queue.
    flight: VecDeque<(Instant, Pkt)>,
}

struct HostState {
    nic: Nic,
    port: PortId,
    timer_at: Option<Instant>,
    paused: bool,
    held: VecDeque<Pkt>,
    /// Cost-model NIC time of the last packet sent: the host pulls its next
    /// datagram this long before its link frees up, so NIC processing
    /// overlaps the wire as in a pipelined NIC.
    tx_lead: Duration,
    /// The NIC's receive processing unit (cost model).
    rx_unit: udrma_nic::cost::Serial,
    /// Host software, if any: it gets the NIC's events instead of
    /// [`World::take_host_events`], and its deadline joins the NIC's.
    app: Option<Box<dyn App>>,
}

impl HostState {
    /// The earlier of the NIC's and the app's deadlines.
    fn deadline(&self) -> Option<Instant> {
        let nic = self.nic.poll_timeout();
        match self.app.as_ref().and_then(|a| a.poll_timeout()) {
            Some(a) => Some(nic.map_or(a, |n| n.min(a))),
            None => nic,
        }
    }

    /// Lets the NIC, then the app, handle what is due at `now`.
    fn handle_timeout(&mut self, now: Instant) {
        self.nic.handle_timeout(now);
        if let Some(app) = self.app.as_mut() {
            if app.poll_timeout().is_some_and(|t| t <= now) {
                app.handle_timeout(now, &mut self.nic);
            }
        }
    }
}

/// One packet between two watched hosts, from creation to its fate (for
/// ladder diagrams).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journey {
    /// Packet serial.
    pub serial: u64,
    /// Sender.
    pub src: NodeAddr,
    /// Receiver.
    pub dst: NodeAddr,
    /// When the NIC sent it.
    pub sent: Instant,
    /// Opcode byte (0 if unreadable).
    pub opcode: u8,
    /// Header flags.
    pub flags: u16,
    /// Message id.
    pub msg: u32,
    /// Segment index.
    pub seg: u32,
    /// When it reached the receiver's NIC.
    pub arrived: Option<Instant>,
    /// Dropped: when and why.
    pub dropped: Option<(Instant, DropReason)>,
    /// A fault's copy of this packet serial.
    pub copy_of: Option<u64>,
    /// A fault flipped bits in it.
    pub corrupted: bool,
}

/// A completion or arrival a host reported, with when and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEvent {
    /// Host.
    pub host: NodeAddr,
    /// The NIC's event.
    pub event: Event,
}

/// The simulated fabric.
pub struct World {
    topo: Topology,
    router: Router,
    hosts: Vec<HostState>,
    ports: Vec<PortState>,
    switch_rng: Vec<Option<ChaCha8Rng>>,
    faults: RuleSet,
    /// Event keys ordered by (time, insertion sequence); the events
    /// that carry data wait in `slab`, so the queue moves 16 bytes, not
    /// packets; the frequent small ones (arrivals, host wake-ups, timers)
    /// are coded in the key itself (see [`World::code`]).
    queue: EventQueue,
    slab: Vec<Option<EvKind>>,
    free: Vec<u32>,
    now: Instant,
    serial: u64,
    stats: FabricStats,
    trace: Trace,
    pcap: Option<PcapSink<Box<dyn Write>>>,
    /// Captured frames waiting for simulated time to reach them.
    pcap_pending: BTreeMap<(Instant, u64), Vec<u8>>,
    pcap_error: Option<CaptureError>,
    host_events: Vec<HostEvent>,
    pool: Vec<Vec<u8>>,
    scratch: Vec<PortId>,
    rebuild: Vec<u8>,
    phantom_payload: bool,
    /// See [`FabricConfig::seal_bytes`].
    seal_bytes: u64,
    /// Per-packet NIC costs (from the NIC configuration).
    cost: udrma_nic::CostModel,
    /// Highest packet serial delivered per flow: indexed by destination
    /// host, then keyed by source (small maps: one lookup per delivery).
    flow_max: Vec<BTreeMap<NodeAddr, u64>>,
    /// Hosts whose packets are journaled, and the journal.
    watch: Option<(NodeAddr, NodeAddr)>,
    journal: Vec<Journey>,
    journal_index: BTreeMap<u64, usize>,
    /// Completions on hosts with an app (exactly-once check of `sim`).
    completions: crate::sim::CompletionLog,
}

impl core::fmt::Debug for World {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now)
            .field("hosts", &self.hosts.len())
            .field("pending", &self.queue.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Event codes in a queue key's `slot` (see `World::code`); 0 is the slab.
const CODE_INDEX: u32 = (1 << 30) - 1;
const CODE_ARRIVE: u32 = 1 << 30;
const CODE_HOST_FREE: u32 = 2 << 30;
const CODE_TIMER: u32 = 3 << 30;

/// Picoseconds in a second.
const PS_PER_S: u64 = 1_000_000_000_000;

impl World {
    /// A world over `topo` with one NIC per host, and `faults` installed
    /// (their link names are resolved here).
    pub fn new(
        topo: Topology,
        cfg: FabricConfig,
        mut faults: RuleSet,
    ) -> Result<World, FabricError> {
        let names = topo.link_names();
        faults.resolve(|n| topo.link_by_name(n), &names)?;
        let mut hosts = Vec::with_capacity(topo.n_hosts());
        for (i, &node) in topo.hosts.iter().enumerate() {
            hosts.push(HostState {
                nic: Nic::new(NodeAddr(i as u32), cfg.nic.clone())?,
                port: topo.nodes[node as usize].ports[0],
                timer_at: None,
                paused: false,
                held: VecDeque::new(),
                tx_lead: Duration::ZERO,
                rx_unit: udrma_nic::cost::Serial::default(),
                app: None,
            });
        }
        let flow_max = vec![BTreeMap::new(); hosts.len()];
        let switch_rng = topo
            .nodes
            .iter()
            .map(|n| match n.kind {
                NodeKind::Switch => Some(stream(cfg.seed, &format!("route:{}", n.name))),
                NodeKind::Host(_) => None,
            })
            .collect();
        let ports = topo
            .ports
            .iter()
            .map(|p| {
                let params = topo.links[p.link as usize].params;
                let bw = params.bandwidth_bps.max(1);
                PortState {
                    hot: PortHot {
                        link: p.link,
                        direction: p.direction,
                        host: topo.host_addr(p.node).map(|h| h.0),
                        peer: p.peer,
                        peer_host: topo.host_addr(p.peer).map(|h| h.0),
                        mtu: params.mtu,
                        queue_bytes: params.queue_bytes,
                        ecn_threshold: params.ecn_threshold,
                        trim: params.trim && topo.host_addr(p.node).is_none(),
                        bandwidth_bps: bw,
                        ps_per_bit: if PS_PER_S % bw == 0 { PS_PER_S / bw } else { 0 },
                        latency: params.latency,
                        tapped: false,
                    },
                    free_at: Instant::ZERO,
                    waiting: VecDeque::new(),
                    queued_bytes: 0,
                    flight: VecDeque::new(),
                }
            })
            .collect();
        Ok(World {
            router: Router::new(&topo, cfg.routing),
            topo,
            hosts,
            ports,
            switch_rng,
            faults,
            queue: EventQueue::default(),
            slab: Vec::new(),
            free: Vec::new(),
            now: Instant::ZERO,
            serial: 0,
            stats: FabricStats::default(),
            trace: Trace::default(),
            pcap: None,
            pcap_pending: BTreeMap::new(),
            pcap_error: None,
            host_events: Vec::new(),
            pool: Vec::new(),
            scratch: Vec::new(),
            rebuild: Vec::new(),
            phantom_payload: cfg.phantom_payload,
            seal_bytes: cfg.seal_bytes,
            cost: cfg.nic.cost,
            flow_max,
            watch: None,
            journal: Vec::new(),
            journal_index: BTreeMap::new(),
            completions: Default::default(),
        })
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    /// Simulated time now.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Fabric counters.
    pub fn stats(&self) -> &FabricStats {
        &self.stats
    }

    /// The trace (hash and event count).
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The fault rules with their counters.
    pub fn faults(&self) -> &RuleSet {
        &self.faults
    }

    /// Host `h`'s NIC.
    pub fn nic(&self, h: NodeAddr) -> &Nic {
        &self.hosts[h.0 as usize].nic
    }

    /// Host `h`'s NIC, to register memory or inspect it.
    pub fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        &mut self.hosts[h.0 as usize].nic
    }

    /// Completions and arrivals reported since the last
    /// [`World::take_host_events`], in order.
    pub fn host_events(&self) -> &[HostEvent] {
        &self.host_events
    }

    /// Takes the completions and arrivals reported so far, so a long run
    /// does not keep them all.
    pub fn take_host_events(&mut self) -> Vec<HostEvent> {
        std::mem::take(&mut self.host_events)
    }

    /// Records the journey of every packet between `a` and `b` (either
    /// way) from now on; see [`World::journeys`].
    pub fn watch(&mut self, a: NodeAddr, b: NodeAddr) {
        self.watch = Some((a, b));
    }

    /// The journeys recorded since [`World::watch`], in send order.
    pub fn journeys(&self) -> &[Journey] {
        &self.journal
    }

    fn watched(&self, src: NodeAddr, dst: NodeAddr) -> bool {
        self.watch
            .is_some_and(|(a, b)| (src == a && dst == b) || (src == b && dst == a))
    }

    fn journal_new(&mut self, pkt: &Pkt, copy_of: Option<u64>) {
        if !self.watched(pkt.src, pkt.dst) {
            return;
        }
        let Head {
            opcode,
            flags,
            msg,
            seg,
        } = pkt.head;
        self.journal_index.insert(pkt.serial, self.journal.len());
        self.journal.push(Journey {
            serial: pkt.serial,
            src: pkt.src,
            dst: pkt.dst,
            sent: self.now,
            opcode: opcode.map_or(0, u8::from),
            flags: flags.bits(),
            msg,
            seg,
            arrived: None,
            dropped: None,
            copy_of,
            corrupted: false,
        });
    }

    fn journal_mut(&mut self, serial: u64) -> Option<&mut Journey> {
        let i = *self.journal_index.get(&serial)?;
        self.journal.get_mut(i)
    }

    /// Writes every event to `sink` as well as hashing it.
    pub fn set_trace_sink(&mut self, format: TraceFormat, sink: Box<dyn Write>) {
        self.trace.set_sink(format, sink);
    }

    /// Captures every packet that starts crossing one of `links` (both
    /// directions) to a nanosecond pcap, timestamped with simulated time.
    pub fn tap(&mut self, links: &[&str], sink: Box<dyn Write>) -> Result<(), FabricError> {
        for name in links {
            let id = self
                .topo
                .link_by_name(name)
                .ok_or_else(|| self.topo.unknown_link(name))?;
            for st in self.ports.iter_mut().filter(|st| st.hot.link == id) {
                st.hot.tapped = true;
            }
        }
        self.pcap = Some(PcapSink::new(sink)?);
        Ok(())
    }

    /// Captures every link.
    pub fn tap_all(&mut self, sink: Box<dyn Write>) -> Result<(), FabricError> {
        self.ports.iter_mut().for_each(|st| st.hot.tapped = true);
        self.pcap = Some(PcapSink::new(sink)?);
        Ok(())
    }

    /// Schedules a host pause.
    pub fn pause(&mut self, p: HostPause) -> Result<(), FabricError> {
        self.check_host(p.host)?;
        self.schedule(p.from, EvKind::Pause(p.host.0, p.until));
        Ok(())
    }

    fn check_host(&self, h: NodeAddr) -> Result<(), FabricError> {
        if (h.0 as usize) < self.hosts.len() {
            Ok(())
        } else {
            Err(FabricError::NoHost(h.0, self.hosts.len()))
        }
    }

    /// After the caller worked on host `h`'s NIC directly (through
    /// [`World::nic_mut`], e.g. a messaging layer posting receives and
    /// sends): collects its events, lets it send and keeps its wake-up.
    pub fn service(&mut self, h: NodeAddr) -> Result<(), FabricError> {
        self.check_host(h)?;
        self.service_host(h.0);
        Ok(())
    }

    /// Posts `wr` on host `h` now.
    pub fn post(&mut self, h: NodeAddr, wr: WorkRequest) -> Result<WrId, FabricError> {
        self.check_host(h)?;
        let now = self.now;
        let id = self.hosts[h.0 as usize]
            .nic
            .post(now, wr)
            .map_err(|e| FabricError::Post(h.0, e))?;
        self.service_host(h.0);
        Ok(id)
    }

    /// Posts `wr` on host `h` at time `at` (a refusal then is recorded as
    /// nothing happening; check with [`World::post`] when it matters).
    pub fn post_at(
        &mut self,
        at: Instant,
        h: NodeAddr,
        wr: WorkRequest,
    ) -> Result<(), FabricError> {
        self.check_host(h)?;
        self.schedule(at.max(self.now), EvKind::Post(h.0, Box::new(wr)));
        Ok(())
    }

    /// The key's `slot` for `kind`: the two top bits say which event, the
    /// rest is its port or host, or for events with data the slab slot
    /// that holds them. Arrivals, host wake-ups and timers (nearly every
    /// event) never touch the slab, which saves two cache misses an event
    /// on large topologies.
    fn code(&mut self, kind: EvKind) -> u32 {
        let small = |tag: u32, index: u32| (index <= CODE_INDEX).then_some(tag | index);
        let coded = match kind {
            EvKind::Arrive(port) => small(CODE_ARRIVE, port),
            EvKind::HostFree(h) => small(CODE_HOST_FREE, h),
            EvKind::Timer(h) => small(CODE_TIMER, h),
            _ => None,
        };
        if let Some(c) = coded {
            return c;
        }
        let slot = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(kind);
                i
            }
            None => {
                self.slab.push(Some(kind));
                (self.slab.len() - 1) as u32
            }
        };
        assert!(
            slot <= CODE_INDEX,
            "more than 2^30 events with data pending"
        );
        slot
    }

    /// The event a key's `slot` stands for (taking it out of the slab).
    fn decode(&mut self, slot: u32) -> EvKind {
        let index = slot & CODE_INDEX;
        match slot & !CODE_INDEX {
            CODE_ARRIVE => EvKind::Arrive(index),
            CODE_HOST_FREE => EvKind::HostFree(index),
            CODE_TIMER => EvKind::Timer(index),
            _ => {
                let kind = self.slab[index as usize].take().expect("scheduled event");
                self.free.push(index);
                kind
            }
        }
    }

    fn schedule(&mut self, t: Instant, kind: EvKind) {
        let slot = self.code(kind);
        self.queue.push(t, slot);
        self.stats.max_event_queue = self.stats.max_event_queue.max(self.queue.len() as u64);
    }

    /// Runs until nothing is left to happen or simulated time passes
    /// `limit`. Returns whether it went idle.
    pub fn run_until(&mut self, limit: Instant) -> bool {
        // The same work as `peek_time` + `step`, fused: one slab read per
        // event instead of two (5 % of the speed shape's wall time).
        while let Some(key) = self.queue.peek() {
            if key.t > limit {
                self.flush_pcap(limit);
                return false;
            }
            self.queue.take();
            let kind = self.decode(key.slot);
            if let EvKind::Timer(h) = kind {
                // Lazy cancellation: a wake-up that finds nothing due is
                // dropped without moving the clock, so simulated time never
                // runs on to a deadline that was cancelled.
                if !self.timer_due(h, key.t) {
                    continue;
                }
            }
            self.now = key.t;
            self.stats.events += 1;
            if !self.pcap_pending.is_empty() {
                self.flush_pcap(key.t);
            }
            self.dispatch(kind);
        }
        self.flush_pcap(Instant(u64::MAX));
        true
    }

    /// Time of the next event that will do something, if any (stale
    /// timer wake-ups are discarded on the way).
    pub fn peek_time(&mut self) -> Option<Instant> {
        loop {
            let key = self.queue.peek()?;
            if key.slot & !CODE_INDEX == CODE_TIMER {
                let h = key.slot & CODE_INDEX;
                if !self.timer_due(h, key.t) {
                    self.queue.take();
                    continue;
                }
            }
            return Some(key.t);
        }
    }

    /// Processes exactly the next event; returns its time, or `None` when
    /// nothing is left.
    pub fn step(&mut self) -> Option<Instant> {
        let t = self.peek_time()?;
        self.process_next(t);
        Some(t)
    }

    fn process_next(&mut self, t: Instant) {
        if let Some(key) = self.queue.take() {
            debug_assert_eq!(key.t, t);
            let kind = self.decode(key.slot);
            self.now = key.t;
            self.stats.events += 1;
            if !self.pcap_pending.is_empty() {
                self.flush_pcap(key.t);
            }
            self.dispatch(kind);
        }
    }

    /// Moves the clock forward to `t` without processing anything; only
    /// allowed when no event is due before `t` (returns whether it moved).
    pub fn advance_clock(&mut self, t: Instant) -> bool {
        if t < self.now || self.peek_time().is_some_and(|next| next < t) {
            return false;
        }
        self.now = t;
        true
    }

    /// Runs until idle.
    pub fn run(&mut self) -> bool {
        self.run_until(Instant(u64::MAX))
    }

    /// Flushes the trace sink and the capture, reporting the first error.
    pub fn finish(&mut self) -> Result<(), FabricError> {
        self.flush_pcap(Instant(u64::MAX));
        if let Some(e) = self.pcap_error.take() {
            return Err(e.into());
        }
        if let Some(p) = self.pcap.take() {
            let mut w = p.into_inner();
            w.flush().map_err(|e| {
                FabricError::Capture(CaptureError::Pcap(pcap_file::PcapError::IoError(e)))
            })?;
        }
        self.trace
            .finish()
            .map_err(|e| FabricError::Capture(CaptureError::Pcap(pcap_file::PcapError::IoError(e))))
    }

    /// Whether host `h`'s wake-up at `t` has anything to do. A stale
    /// wake-up (the host's deadline moved) is not; if the NIC's earliest
    /// deadline moved later, the wake-up is re-armed there.
    fn timer_due(&mut self, h: u32, t: Instant) -> bool {
        let host = &mut self.hosts[h as usize];
        if host.timer_at != Some(t) {
            return false;
        }
        match host.deadline() {
            Some(d) if d <= t => true,
            Some(d) if host.paused => {
                // Resume handles it; keep the record honest.
                host.timer_at = Some(d);
                false
            }
            Some(d) => {
                host.timer_at = Some(d);
                self.schedule(d, EvKind::Timer(h));
                false
            }
            None => {
                host.timer_at = None;
                false
            }
        }
    }

    fn dispatch(&mut self, kind: EvKind) {
        match kind {
            EvKind::HostFree(h) => {
                let port = self.hosts[h as usize].port;
                let lead = self.hosts[h as usize].tx_lead;
                if self.ports[port as usize].free_at <= self.now + lead
                    && !self.hosts[h as usize].paused
                {
                    self.pull(h);
                    // What went out armed retransmit deadlines; a NIC whose
                    // timer had nothing to wait for (Go-back-N just queued
                    // everything again) must get a wake-up for them.
                    self.arm_timer(h);
                }
            }
            EvKind::Arrive(port) => {
                let st = &mut self.ports[port as usize];
                let (_, pkt) = st.flight.pop_front().expect("scheduled arrival");
                if let Some((next, _)) = st.flight.front() {
                    let next = *next;
                    self.schedule(next, EvKind::Arrive(port));
                }
                self.arrive(port, pkt);
            }
            EvKind::Enqueue(port, pkt) => self.enqueue(port, pkt),
            EvKind::ArriveTrimmed(port, pkt) => self.arrive(port, pkt),
            EvKind::Deliver(h, pkt) => self.arrive_at_host(h, pkt),
            EvKind::Timer(h) => {
                let host = &mut self.hosts[h as usize];
                host.timer_at = None;
                if host.paused {
                    return;
                }
                host.handle_timeout(self.now);
                self.service_host(h);
            }
            EvKind::Pause(h, until) => {
                tracing::info!(
                    sim_ns = self.now.as_nanos(),
                    host = h,
                    until_ns = until.as_nanos(),
                    "pause"
                );
                self.hosts[h as usize].paused = true;
                self.trace.record(&TraceEvent::Pause {
                    t: self.now.as_ps(),
                    host: h,
                    paused: true,
                });
                self.schedule(until.max(self.now), EvKind::Resume(h));
            }
            EvKind::Resume(h) => {
                self.hosts[h as usize].paused = false;
                self.trace.record(&TraceEvent::Pause {
                    t: self.now.as_ps(),
                    host: h,
                    paused: false,
                });
                let held = std::mem::take(&mut self.hosts[h as usize].held);
                for pkt in held {
                    self.deliver(h, pkt);
                }
                let now = self.now;
                self.hosts[h as usize].handle_timeout(now);
                self.hosts[h as usize].timer_at = None;
                self.service_host(h);
            }
            EvKind::Post(h, wr) => {
                let now = self.now;
                let _ = self.hosts[h as usize].nic.post(now, *wr);
                self.service_host(h);
            }
        }
    }

    /// After anything happened at host `h`: collect its events, let it
    /// send if its link is free, and keep one wake-up for its earliest
    /// deadline.
    fn service_host(&mut self, h: u32) {
        let now = self.now;
        let host = &mut self.hosts[h as usize];
        while let Some(e) = host.nic.poll_event() {
            tracing::info!(sim_ns = now.as_nanos(), host = h, event = ?e, "host event");
            match &e {
                Event::Completed { wr, result, .. } => self.trace.record(&TraceEvent::Completed {
                    t: now.as_ps(),
                    host: h,
                    wr: wr.0,
                    ok: result.is_ok(),
                }),
                Event::WriteReceived { from, msg_id, .. } => {
                    self.trace.record(&TraceEvent::WriteReceived {
                        t: now.as_ps(),
                        host: h,
                        from: from.0,
                        msg: *msg_id,
                    })
                }
                Event::DataArrived { .. }
                | Event::Control { .. }
                | Event::Credits { .. }
                | Event::Hello { .. }
                | Event::PeerRestarted { .. } => {}
            }
            match host.app.as_mut() {
                Some(app) => {
                    if let Event::Completed { wr, .. } = &e {
                        self.completions.record(NodeAddr(h), *wr);
                    }
                    app.handle_event(now, &mut host.nic, e)
                }
                None => self.host_events.push(HostEvent {
                    host: NodeAddr(h),
                    event: e,
                }),
            }
        }
        if !host.paused && self.ports[host.port as usize].free_at <= now + host.tx_lead {
            self.pull(h);
        }
        self.arm_timer(h);
    }

    /// Keeps one wake-up for host `h`'s earliest deadline.
    fn arm_timer(&mut self, h: u32) {
        let now = self.now;
        let host = &mut self.hosts[h as usize];
        if let Some(t) = host.deadline() {
            if host.timer_at.is_none_or(|at| t < at) {
                let t = t.max(now);
                host.timer_at = Some(t);
                self.schedule(t, EvKind::Timer(h));
            }
        }
    }

    /// Takes the host's next datagram, if it has one, onto its link.
    fn pull(&mut self, h: u32) {
        let now = self.now;
        let port = self.hosts[h as usize].port;
        // A datagram a fault drops or delays at the host's own egress never
        // occupies the link: take the next one at once, until one does (or
        // the NIC has nothing). Otherwise a host without timers of its own
        // (a READ responder, a receiver owing ACKs) would stall with its
        // transmit queue full.
        loop {
            let mut buf = self.pool.pop().unwrap_or_default();
            let host = &mut self.hosts[h as usize];
            let Some(t) = host.nic.poll_transmit(now, &mut buf) else {
                self.pool.push(buf);
                return;
            };
            buf.truncate(t.len);
            self.serial += 1;
            self.stats.sent += 1;
            let mut pkt = Pkt {
                serial: self.serial,
                src: NodeAddr(h),
                dst: t.dst,
                src_port: t.src_port,
                head: Head::of(&buf),
                bytes: buf,
                elided: 0,
                nic_work_ps: u32::try_from(t.nic_work.as_ps()).unwrap_or(u32::MAX),
                ce: false,
                trimmed: false,
            };
            if self.phantom_payload {
                if let Some(big) = pkt.elide_zero_payload() {
                    self.recycle(big);
                }
            }
            if self.watch.is_some() {
                self.journal_new(&pkt, None);
            }
            self.egress(port, pkt);
            if self.ports[port as usize].free_at > now + self.hosts[h as usize].tx_lead {
                return;
            }
        }
    }

    /// A packet wants to cross the link of `port`: fault rules first.
    fn egress(&mut self, port: PortId, mut pkt: Pkt) {
        if self.faults.is_empty() {
            self.enqueue(port, pkt);
            return;
        }
        let p = self.ports[port as usize].hot;
        let Head { opcode, flags, .. } = pkt.head;
        let ctx = PacketCtx {
            now: self.now,
            link: p.link,
            direction: p.direction,
            src: pkt.src,
            dst: pkt.dst,
            opcode,
            flags,
            len: pkt.len() as u32,
        };
        let (verdict, rule) = self.faults.judge(&ctx);
        if let Some(r) = rule {
            tracing::debug!(
                sim_ns = self.now.as_nanos(),
                link = %self.topo.links[p.link as usize].name,
                pkt = pkt.serial,
                rule = %self.faults.rules()[r].name,
                ?verdict,
                "fault"
            );
        }
        let rule = rule.unwrap_or(0) as u32;
        let fault = |kind, arg| TraceEvent::Fault {
            t: self.now.as_ps(),
            link: p.link,
            pkt: pkt.serial,
            rule,
            kind,
            arg,
        };
        match verdict {
            Verdict::Pass => self.enqueue(port, pkt),
            Verdict::Drop => {
                self.trace.record(&fault(0, 0));
                self.drop_pkt(p.link, pkt, DropReason::Fault);
            }
            Verdict::Duplicate(n) => {
                self.trace.record(&fault(1, u64::from(n)));
                self.stats.duplicated += u64::from(n);
                for _ in 0..n {
                    self.serial += 1;
                    let copy = Pkt {
                        serial: self.serial,
                        src: pkt.src,
                        dst: pkt.dst,
                        src_port: pkt.src_port,
                        bytes: pkt.bytes.clone(),
                        elided: pkt.elided,
                        nic_work_ps: pkt.nic_work_ps,
                        ce: pkt.ce,
                        trimmed: pkt.trimmed,
                        head: pkt.head,
                    };
                    if self.watch.is_some() {
                        self.journal_new(&copy, Some(pkt.serial));
                    }
                    self.enqueue(port, copy);
                }
                self.enqueue(port, pkt);
            }
            Verdict::Delay(d) => {
                self.trace.record(&fault(2, d.as_ps()));
                self.stats.delayed += 1;
                let at = self.now + d;
                self.schedule(at, EvKind::Enqueue(port, pkt));
            }
            Verdict::Corrupt(bits) => {
                self.trace.record(&fault(3, u64::from(bits)));
                self.stats.corrupted += 1;
                pkt.materialise();
                if let Some(j) = self.journal_mut(pkt.serial) {
                    j.corrupted = true;
                }
                self.faults.corrupt(rule as usize, &mut pkt.bytes, bits);
                pkt.head = Head::of(&pkt.bytes);
                self.enqueue(port, pkt);
            }
        }
    }

    fn drop_pkt(&mut self, link: LinkId, pkt: Pkt, reason: DropReason) {
        let now = self.now;
        tracing::debug!(sim_ns = now.as_nanos(), link = %self.topo.links[link as usize].name, pkt = pkt.serial, ?reason, "drop");
        if let Some(j) = self.journal_mut(pkt.serial) {
            j.dropped = Some((now, reason));
        }
        self.trace.record(&TraceEvent::Drop {
            t: self.now.as_ps(),
            link,
            pkt: pkt.serial,
            reason,
        });
        *self.stats.dropped.entry(reason).or_default() += 1;
        self.recycle(pkt.bytes);
    }

    fn recycle(&mut self, bytes: Vec<u8>) {
        if self.pool.len() < 4096 {
            self.pool.push(bytes);
        }
    }

    fn enqueue(&mut self, port: PortId, mut pkt: Pkt) {
        let now = self.now;
        let hot = self.ports[port as usize].hot;
        let len = pkt.len() + self.seal_bytes;
        if len > u64::from(hot.mtu) {
            self.drop_pkt(hot.link, pkt, DropReason::Mtu);
            return;
        }
        let st = &mut self.ports[port as usize];
        while st.waiting.front().is_some_and(|(start, _)| *start <= now) {
            let (_, l) = st.waiting.pop_front().expect("checked");
            st.queued_bytes -= u64::from(l);
        }
        if hot.trim && pkt.trimmed {
            // Headers go ahead of the queue at every trimming hop.
            self.trim(port, pkt);
            return;
        }
        if st.queued_bytes + len > hot.queue_bytes {
            if hot.trim {
                self.trim(port, pkt);
            } else {
                self.drop_pkt(hot.link, pkt, DropReason::QueueFull);
            }
            return;
        }
        if hot.ecn_threshold.is_some_and(|th| st.queued_bytes > th) {
            self.stats.ecn_marked += 1;
            pkt.ce = true;
        }
        // A host's own NIC works on the packet before it can leave.
        let nic_cost = match hot.host {
            Some(_) if !self.cost.is_zero() => {
                self.cost.packet(len as usize) + Duration::from_ps(u64::from(pkt.nic_work_ps))
            }
            _ => Duration::ZERO,
        };
        let start = st.free_at.max(now + nic_cost);
        let bits = (len + WIRE_OVERHEAD) * 8;
        // Exactly the division below, without a 128-bit divide per hop
        // when the rate divides 1 Tb/s.
        let ser = match hot.ps_per_bit {
            0 => Duration(
                (u128::from(bits) * u128::from(PS_PER_S) / u128::from(hot.bandwidth_bps)) as u64,
            ),
            ps => Duration(bits * ps),
        };
        st.free_at = start + ser;
        if start > now {
            st.waiting.push_back((start, len as u32));
            st.queued_bytes += len;
            self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(st.queued_bytes);
        }
        let free_at = st.free_at;
        let Head {
            opcode, msg, seg, ..
        } = pkt.head;
        self.trace.record(&TraceEvent::Tx {
            t: start.as_ps(),
            link: hot.link,
            dir: u8::from(hot.direction == Direction::Reverse),
            pkt: pkt.serial,
            opcode: opcode.map_or(0, u8::from),
            msg,
            seg,
            len: len as u32,
        });
        if hot.tapped {
            self.capture(start, &pkt);
        }
        if let Some(h) = hot.host {
            self.hosts[h as usize].tx_lead = nic_cost;
            let pull_at = Instant(free_at.as_ps().saturating_sub(nic_cost.as_ps())).max(now);
            self.schedule(pull_at, EvKind::HostFree(h));
        }
        let arrive_at = free_at + hot.latency;
        let st = &mut self.ports[port as usize];
        st.flight.push_back((arrive_at, pkt));
        if st.flight.len() == 1 {
            self.schedule(arrive_at, EvKind::Arrive(port));
        }
    }

    /// A full trimming port: the payload is cut off and the header goes
    /// ahead of the queue, as a priority queue would send it (its few
    /// bytes are not charged to the port). A header trimmed once is not
    /// trimmed again: later full queues forward it the same way.
    fn trim(&mut self, port: PortId, mut pkt: Pkt) {
        let hot = self.ports[port as usize].hot;
        if !pkt.trimmed {
            pkt.trimmed = true;
            pkt.bytes.truncate(HEADER_LEN);
            pkt.elided = 0;
            self.stats.trimmed += 1;
            self.trace.record(&TraceEvent::Drop {
                t: self.now.as_ps(),
                link: hot.link,
                pkt: pkt.serial,
                reason: DropReason::Trimmed,
            });
        }
        let bits = (pkt.len() + self.seal_bytes + WIRE_OVERHEAD) * 8;
        let ser = Duration(
            (u128::from(bits) * u128::from(PS_PER_S) / u128::from(hot.bandwidth_bps)) as u64,
        );
        if hot.tapped {
            self.capture(self.now, &pkt);
        }
        let at = self.now + ser + hot.latency;
        self.schedule(at, EvKind::ArriveTrimmed(port, pkt));
    }

    /// Encapsulates a packet that starts crossing a tapped link at `t`;
    /// frames are written once simulated time reaches them, so the file is
    /// in time order.
    fn capture(&mut self, t: Instant, pkt: &Pkt) {
        if self.pcap.is_none() || self.pcap_error.is_some() {
            return;
        }
        let mut frame = Vec::with_capacity(pkt.len() as usize + FRAME_OVERHEAD);
        let mut full = Vec::new();
        let datagram = pkt.datagram(&mut full);
        let src = UdpEndpoint::node(pkt.src, pkt.src_port);
        let dst = UdpEndpoint::node(pkt.dst, DEFAULT_UDP_PORT);
        if encapsulate(&src, &dst, datagram, &mut frame).is_ok() {
            self.pcap_pending.insert((t, pkt.serial), frame);
        }
    }

    fn flush_pcap(&mut self, upto: Instant) {
        let Some(sink) = self.pcap.as_mut() else {
            return;
        };
        while let Some(entry) = self.pcap_pending.first_entry() {
            if entry.key().0 > upto {
                break;
            }
            let ((t, _), frame) = entry.remove_entry();
            if self.pcap_error.is_none() {
                if let Err(e) = sink.write_frame(t.as_nanos(), &frame) {
                    self.pcap_error = Some(e);
                }
            }
        }
    }

    fn arrive(&mut self, port: PortId, pkt: Pkt) {
        self.stats.packet_hops += 1;
        let hot = self.ports[port as usize].hot;
        let node: NodeId = hot.peer;
        match hot.peer_host {
            Some(h) if !self.cost.is_zero() => {
                // The receive side processes packets one at a time; placing
                // a payload in many blocks takes longer.
                let nic = &mut self.hosts[h as usize].nic;
                let work = if nic.needs_dma_work() {
                    nic.receive_work(pkt.src, pkt.datagram(&mut self.rebuild))
                } else {
                    Duration::ZERO
                };
                let cost = self.cost.packet(pkt.len() as usize) + work;
                let done = self.hosts[h as usize].rx_unit.take(self.now, cost);
                self.schedule(done, EvKind::Deliver(h, pkt));
            }
            Some(h) => self.arrive_at_host(h, pkt),
            None => {
                let mut cands = std::mem::take(&mut self.scratch);
                self.router
                    .candidates(&self.topo, node, pkt.dst, &mut cands);
                if cands.is_empty() {
                    self.scratch = cands;
                    self.drop_pkt(hot.link, pkt, DropReason::NoRoute);
                    return;
                }
                let rng = self.switch_rng[node as usize]
                    .as_mut()
                    .expect("switch has a stream");
                let out = self
                    .router
                    .choose(&cands, (pkt.src, pkt.dst, pkt.src_port), node, rng);
                self.scratch = cands;
                self.egress(out, pkt);
            }
        }
    }

    /// A packet reaches host `h`'s NIC (held while the host is paused).
    fn arrive_at_host(&mut self, h: u32, pkt: Pkt) {
        let host = &mut self.hosts[h as usize];
        if host.paused {
            if host.held.len() >= PAUSE_HOLD_LIMIT {
                let link = self.topo.ports[host.port as usize].link;
                self.drop_pkt(link, pkt, DropReason::PausedOverflow);
            } else {
                host.held.push_back(pkt);
            }
            return;
        }
        self.deliver(h, pkt);
        self.service_host(h);
    }

    fn deliver(&mut self, h: u32, pkt: Pkt) {
        self.stats.delivered += 1;
        let now = self.now;
        if let Some(j) = self.journal_mut(pkt.serial) {
            j.arrived = Some(now);
        }
        let max = self.flow_max[h as usize].entry(pkt.src).or_insert(0);
        if pkt.serial < *max {
            self.stats.reordered += 1;
        } else {
            *max = pkt.serial;
        }
        let now = self.now;
        let mut rebuild = std::mem::take(&mut self.rebuild);
        let meta = udrma_nic::RxMeta {
            ecn: udrma_nic::Ecn::marked(pkt.ce),
            trimmed: pkt.trimmed,
            src_port: pkt.src_port,
        };
        self.hosts[h as usize].nic.handle_datagram_meta(
            now,
            pkt.src,
            meta,
            pkt.datagram(&mut rebuild),
        );
        self.rebuild = rebuild;
        self.recycle(pkt.bytes);
    }

    /// Whether every NIC is idle and nothing is scheduled.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.hosts.iter().all(|h| h.nic.is_idle())
    }
}
