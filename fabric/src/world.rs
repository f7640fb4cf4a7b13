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
//!
//! This file holds the world's state, its configuration and its public
//! surface. Its children: `events` is the event loop, `ports` the egress
//! queues and links, `port_state` a port's own state (its link's
//! figures, its queue's count, its flight line), `lane` the backlog of
//! the lane ahead of a queue into a costed NIC, `hosts` the driving of each NIC,
//! `host_table` the hosts' states by number (a shard's run of them), `packet` the packet
//! in flight, `arrivals` what each host heard from each source (to count
//! reordering), `journey` the ladder-diagram journal, `egress_log` the
//! packets the fault rules judged (for `udrma check`), `fingerprint`
//! the state as `udrma check --merge-states` fingerprints it (feature
//! `fingerprint`), `pfc` Priority
//! Flow Control (lossless ports, PAUSE frames, the deadlock detector),
//! `apps` host
//! software and the completion log, `windows` the lookahead windows (the
//! event loop's second order), `shards` one run split by node across
//! threads, `mail` the packets one shard hands another and how they
//! are taken in, `split` a world that stays split from run to run,
//! `ranks` one run split across processes (MPI ranks), and `kept` the
//! packets a rank keeps for another until they are due.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;

use udrma_app::App;
use udrma_faults::rng::stream;
use udrma_faults::{Direction, HostPause, PacketCtx, RuleSet, Verdict};
use udrma_nic::{Event, Nic, NicConfig, WorkRequest, WrId};
use udrma_proto::encap::{encapsulate, UdpEndpoint, FRAME_OVERHEAD};
use udrma_proto::pcap::{CaptureError, PcapSink};
use udrma_proto::{
    Datagram, Duration, Flags, Instant, NodeAddr, Opcode, Packet, DEFAULT_UDP_PORT, HEADER_LEN,
};

mod apps;
mod arrivals;
mod egress_log;
mod events;
#[cfg(feature = "fingerprint")]
mod fingerprint;
mod host_table;
mod hosts;
mod journey;
mod kept;
mod lane;
mod mail;
mod packet;
mod pfc;
mod port_state;
mod ports;
mod ranks;
mod shards;
mod split;
mod windows;

use arrivals::Arrivals;
pub use egress_log::{Egress, FingerprintLog};
use events::EvKind;
pub use events::Ran;
use host_table::HostTable;
use hosts::HostState;
pub use journey::Journey;
use packet::{Head, Pkt};
pub use pfc::{PfcConfig, PfcDeadlock, PfcError, PfcPortStats, HOST_WAITING, PFC_WIRE_BYTES};
use port_state::{InFlight, PortHot, PortState};
pub use ranks::{run_ranked, Exchanged, LocalRanks, Packed, RankedRun, RankedWorld, Ranks};
pub use shards::{partition, run_sharded, ShardError, ShardedRun, MAX_SHARDS};
pub use split::SplitWorld;
pub use windows::{EventOrder, WindowError};

pub use crate::error::FabricError;
use crate::queue::EventQueue;
use crate::routing::{Policy, Router, SwitchRng};
use crate::topology::{LinkId, NodeId, NodeKind, PortId, Topology};
use crate::trace::{DropReason, Trace, TraceEvent, TraceFormat};

/// Bytes a frame occupies on the wire beyond the datagram: Ethernet, IPv4
/// and UDP headers, FCS, preamble and inter-frame gap.
pub const WIRE_OVERHEAD: u64 = FRAME_OVERHEAD as u64 + 4 + 8 + 12;

/// Most packets a paused host holds; more are dropped and counted.
pub const PAUSE_HOLD_LIMIT: usize = 1 << 20;

/// Port state above which the event loop prefetches deep (see
/// `World::prefetch_ahead`): 256 KiB, where the whole fabric's state
/// (about 75 KiB a host) outgrows a 32 MiB last-level cache. The k=10
/// fat tree (1,500 ports, 188 KiB, 25 MiB in all) stays below, k=12
/// (2,592 ports, 324 KiB, 39 MiB) is above (alternating runs with the
/// heap on huge pages: deep against near 1.08 / 1.01 at k=10, 0.95 /
/// 0.96 at k=12, 0.94–0.98 / 0.87–0.89 at k=16; docs/benchmarks.md).
const DEEP_PREFETCH_BYTES: usize = 256 << 10;

/// Everything that describes a world besides its topology.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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

/// Counters of the fabric (the NICs keep their own).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// The fault drops (`DropReason::Fault`) by rule, keyed by the rule's
    /// index in the world's [`RuleSet`]; they add up to that reason's
    /// count.
    pub fault_drops: BTreeMap<u32, u64>,
    /// Of the full-queue drops (`DropReason::QueueFull`), those at a
    /// costed NIC's receive lane: the packets a port sends ahead of its
    /// queue (trimmed headers, control under priority) found the lane
    /// into that NIC full. The trace records them as full-queue drops.
    pub lane_dropped: u64,
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
    /// Control packets a priority switch port sent ahead of its queue
    /// (`LinkParams::control_priority`).
    pub control_ahead: u64,
    /// Deepest egress queue seen, in bytes.
    pub max_queue_bytes: u64,
    /// Longest any packet waited in a costed NIC's receive unit for the
    /// packets ahead of it, in picoseconds. The link-level flow control
    /// into such a NIC keeps it under about one packet's work: packets
    /// wait in the switch's queue instead, which drops, trims and marks.
    pub max_rx_wait_ps: u64,
    /// Most NIC work, in picoseconds, that a packet sent ahead of a
    /// port's queue (a trimmed header, or control under priority) into a
    /// costed NIC found in its lane ahead of it: within the lane's
    /// patience (a full queue of data's time into that NIC, or one
    /// packet's work per other port of the switch if more).
    pub max_lane_work_ps: u64,
    /// Most events pending at once (bounded by ports + hosts + delayed
    /// packets: lazy timer cancellation leaves at most a few per host).
    /// In lookahead windows it is counted as each window begins and at
    /// every event filed for a later window.
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

/// A completion or arrival a host reported, with when and where.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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
    hosts: HostTable,
    ports: Vec<PortState>,
    switch_rng: Vec<Option<SwitchRng>>,
    /// Whether the event loop prefetches four events deep, routes worked
    /// out early included (a fabric with more than [`DEEP_PREFETCH_BYTES`]
    /// of port state); a hint only, it changes no outcome.
    deep_prefetch: bool,
    /// The last route the deep pipeline worked out early: the arrival
    /// port, the packet's serial, the port it will leave by (read by the
    /// next stage instead of drawing it again).
    early_route: (PortId, u64, PortId),
    faults: RuleSet,
    /// Event keys ordered by (time, insertion sequence); the events
    /// that carry data wait in `slab`, so the queue moves 16 bytes, not
    /// packets; the frequent small ones (arrivals, host wake-ups, timers)
    /// are coded in the key itself (see [`World::code`]).
    queue: EventQueue,
    /// The window loop's state ([`EventOrder::Windows`]).
    windows: windows::Windows,
    slab: Vec<Option<EvKind>>,
    /// Per port, the packets sent ahead of its queue (trimmed headers,
    /// control packets under priority) not yet arrived, by arrival; only
    /// as long as the last port that sent one.
    ahead: Vec<VecDeque<InFlight>>,
    /// Per port, the packets ahead of its queue still waiting to start
    /// into a costed NIC (`lane`); empty when NICs cost nothing.
    lanes: Vec<lane::Lane>,
    free: Vec<u32>,
    now: Instant,
    serial: u64,
    stats: FabricStats,
    trace: Trace,
    pcap: Option<PcapSink<Box<dyn Write + Send>>>,
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
    /// Whether `cost` charges anything (asked on every host hop).
    costed: bool,
    /// The NIC's time for a full data packet: how far ahead of its wire
    /// freeing up a host's NIC takes its next packet (`ports::launch`).
    full_work: Duration,
    /// Highest packet serial delivered per flow: indexed by destination
    /// host, then keyed by source (small maps: one lookup per delivery).
    /// Hosts whose packets are journaled, and the journal.
    watch: Option<(NodeAddr, NodeAddr)>,
    journal: Vec<Journey>,
    journal_index: BTreeMap<u64, usize>,
    /// Completions on hosts with an app (exactly-once check of `sim`).
    completions: apps::CompletionLog,
    /// Every packet presented to the fault rules, when asked
    /// ([`World::log_egress`]).
    egress_log: Option<Vec<egress_log::Egress>>,
    /// In a split run, this shard's own state (`shards`).
    shard: Option<Box<shards::Shard>>,
    /// While a rank builds the world for its shard: per host, whether
    /// another shard runs it ([`World::build_for_shard`]).
    elsewhere: Option<Vec<bool>>,
    /// A lossless fabric's state ([`World::set_pfc`]).
    pfc: Option<Box<pfc::Pfc>>,
    /// While a switch routes an arriving packet on a lossless fabric: the
    /// port it came in by (its ingress to charge), else `PortId::MAX`.
    ingress: PortId,
    /// `udrma check`'s fingerprints, when asked
    /// ([`World::log_fingerprints`]).
    #[cfg(feature = "fingerprint")]
    fingerprints: Option<egress_log::FingerprintLog>,
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

/// Picoseconds in a second.
const PS_PER_S: u64 = 1_000_000_000_000;

impl World {
    /// A world over `topo` with one NIC per host, and `faults` installed
    /// (their link names are resolved here).
    pub fn new(topo: Topology, cfg: FabricConfig, faults: RuleSet) -> Result<World, FabricError> {
        World::with_hosts(topo, cfg, faults, None)
    }

    /// The world shard `me` of `shards` runs ([`partition`]), built from
    /// the start as [`World::new`] followed by [`World::build_for_shard`]
    /// would leave it, but holding only the run of hosts from the shard's
    /// first to its last: a host outside the run has a state only while
    /// the build works on it (a post, an app's start), as every shard
    /// builds every host's first packets. What a rank of an MPI run
    /// builds (`RankedWorld`).
    pub fn new_shard(
        topo: Topology,
        cfg: FabricConfig,
        faults: RuleSet,
        shards: usize,
        me: usize,
    ) -> Result<World, FabricError> {
        let part = partition(&topo, shards);
        let me = me as u16;
        let mine: Vec<bool> = topo
            .hosts
            .iter()
            .map(|&n| part.get(n as usize) == Some(&me))
            .collect();
        let mut w = World::with_hosts(topo, cfg, faults, Some(&mine))?;
        w.build_for_shard(&part, me);
        Ok(w)
    }

    fn with_hosts(
        topo: Topology,
        cfg: FabricConfig,
        mut faults: RuleSet,
        mine: Option<&[bool]>,
    ) -> Result<World, FabricError> {
        let names = topo.link_names();
        faults.resolve(|n| topo.link_by_name(n), &names)?;
        check_ecn_ramps(&topo, &names)?;
        let hosts = HostTable::new(&topo, &cfg.nic, cfg.phantom_payload, mine)?;
        let switch_rng = topo
            .nodes
            .iter()
            .map(|n| match n.kind {
                NodeKind::Switch => Some(SwitchRng::new(stream(
                    cfg.seed,
                    &format!("route:{}", n.name),
                ))),
                NodeKind::Host(_) => None,
            })
            .collect();
        let ports: Vec<PortState> = topo
            .ports
            .iter()
            .map(|p| initial_port_state(&topo, p))
            .collect();
        let costed = !cfg.nic.cost.is_zero();
        let packet = u64::from(cfg.nic.mtu_payload) + udrma_proto::packet::HEADER_LEN as u64;
        let lanes = if costed {
            lane::for_ports(&topo, &cfg.nic.cost, packet)
        } else {
            Vec::new()
        };
        let full_work = cfg.nic.cost.packet(packet as usize);
        let router = Router::new(&topo, cfg.routing);
        let deep_prefetch = ports.len() * std::mem::size_of::<PortState>() > DEEP_PREFETCH_BYTES;
        Ok(World {
            router,
            topo,
            hosts,
            ports,
            switch_rng,
            deep_prefetch,
            early_route: (PortId::MAX, 0, 0),
            faults,
            queue: EventQueue::default(),
            windows: Default::default(),
            slab: Vec::new(),
            ahead: Vec::new(),
            lanes,
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
            costed,
            full_work,
            watch: None,
            journal: Vec::new(),
            journal_index: BTreeMap::new(),
            completions: Default::default(),
            egress_log: None,
            shard: None,
            elsewhere: None,
            pfc: None,
            ingress: PortId::MAX,
            #[cfg(feature = "fingerprint")]
            fingerprints: None,
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

    /// Prefetches four events deep, routes worked out early included
    /// (`true`), or three (`false`). A speed knob with no effect on any
    /// outcome; by default on when the fabric's port state exceeds 256 KiB.
    pub fn set_deep_prefetch(&mut self, on: bool) {
        self.deep_prefetch = on;
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

    /// Writes every event to `sink` as well as hashing it.
    pub fn set_trace_sink(&mut self, format: TraceFormat, sink: Box<dyn Write + Send>) {
        self.trace.set_sink(format, sink);
    }

    /// Captures every packet that starts crossing one of `links` (both
    /// directions) to a nanosecond pcap, timestamped with simulated time.
    pub fn tap(&mut self, links: &[&str], sink: Box<dyn Write + Send>) -> Result<(), FabricError> {
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
    pub fn tap_all(&mut self, sink: Box<dyn Write + Send>) -> Result<(), FabricError> {
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
        self.give_back_if_elsewhere(h.0);
        Ok(id)
    }

    /// Builds the world for shard `me` from here on (`part`: each node's
    /// shard, as [`partition`] gives it): a host another shard runs gives
    /// back its state (its posts' tables, its regions, its app) as soon
    /// as a post or its app's start has run on it. Its first packets
    /// leave as they would in the whole world, numbered and traced the
    /// same, so once split the world is the one the whole would have
    /// been; but no rank holds every host's state at once.
    pub fn build_for_shard(&mut self, part: &[u16], me: u16) {
        let elsewhere = self
            .topo
            .hosts
            .iter()
            .map(|&n| part.get(n as usize).is_some_and(|&s| s != me))
            .collect();
        self.elsewhere = Some(elsewhere);
    }

    /// Gives back host `h`'s state if another shard will run it.
    fn give_back_if_elsewhere(&mut self, h: u32) {
        if let Some(e) = &self.elsewhere {
            if e.get(h as usize) == Some(&true) {
                self.hosts[h as usize].vacate(NodeAddr(h));
            }
        }
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

    /// The serial number of a new packet: in windows, the running node's
    /// own count (see `windows::Origin`), else the world's.
    fn next_serial(&mut self) -> u64 {
        if self.windows.end > 0 {
            self.windows.serial()
        } else {
            self.serial += 1;
            self.serial
        }
    }

    /// How many hosts' states this world holds: every host in a whole
    /// world; in a shard ([`World::new_shard`], or once split) the run
    /// from its first host to its last, and while it is built, also the
    /// hosts outside the run that the build worked on.
    pub fn hosts_held(&self) -> usize {
        self.hosts.held()
    }

    /// Whether every NIC is idle and nothing is scheduled.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.hosts.iter().all(|(_, h)| h.nic.is_idle())
    }
}

/// A marking ramp rises from its threshold: `ecn_max` needs
/// `ecn_threshold`, and must be above it.
fn check_ecn_ramps(topo: &Topology, names: &[&str]) -> Result<(), FabricError> {
    for (l, name) in topo.links.iter().zip(names) {
        match (l.params.ecn_threshold, l.params.ecn_max) {
            (None, Some(_)) => {
                return Err(FabricError::Topology(format!(
                    "link {name}: ecn_max without ecn_threshold (where the marking ramp starts)"
                )))
            }
            (Some(t), Some(m)) if m <= t => {
                return Err(FabricError::Topology(format!(
                    "link {name}: ecn_max ({m} B) must be above ecn_threshold ({t} B)"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A port's state at the start: its link's parameters where the hot
/// loop reads them, and nothing queued.
fn initial_port_state(topo: &Topology, p: &crate::topology::Port) -> PortState {
    let params = topo.links[p.link as usize].params;
    let bw = params.bandwidth_bps.max(1);
    PortState {
        hot: PortHot {
            link: p.link,
            direction: p.direction,
            host_raw: topo.host_addr(p.node).map_or(port_state::NO_HOST, |h| h.0),
            peer: p.peer,
            peer_host_raw: topo.host_addr(p.peer).map_or(port_state::NO_HOST, |h| h.0),
            mtu: params.mtu,
            queue_bytes: params.queue_bytes,
            ecn_threshold: params.ecn_threshold.unwrap_or(u64::MAX),
            // (`check_ecn_ramps`: a ramp rises from its threshold.)
            ecn_span: match (params.ecn_threshold, params.ecn_max) {
                (Some(t), Some(m)) => m - t,
                _ => 0,
            },
            trim: params.trim && topo.host_addr(p.node).is_none(),
            priority: params.control_priority && topo.host_addr(p.node).is_none(),
            bandwidth_bps: bw,
            ps_per_bit: if PS_PER_S % bw == 0 {
                u32::try_from(PS_PER_S / bw).unwrap_or(0)
            } else {
                0
            },
            latency: params.latency,
            tapped: false,
            remote: false,
            to_shard: 0,
        },
        free_at: Instant::ZERO,
        waiting: 0,
        kept: 0,
        queued_bytes: 0,
        flight: VecDeque::new(),
    }
}
