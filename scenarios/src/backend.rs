//! The backend seam: where the packets go. A workload runner installs one
//! app per host through [`Backend`], lets time run and reads the apps back;
//! it cannot tell whether the hosts sit in the simulated world (virtual
//! time, deterministic) or on real UDP sockets (real time, the kernel's
//! stack), all in this process or some in others.
//!
//! Child: `udp` (the hosts on real UDP sockets, [`Udp`]).

use serde::{Deserialize, Serialize};
use udrma_fabric::{DropReason, FabricStats, Ran, RankedWorld, Ranks, SplitWorld, World};
use udrma_faults::RuleSet;
use udrma_host::App;
use udrma_nic::Nic;
use udrma_proto::{Instant, NodeAddr};

mod udp;

pub use udp::{Udp, UDP_SLICE};

/// How a backend's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Nothing was left to do (every app done, nothing in flight).
    Quiet,
    /// The next event (or timer) was due at this time, past the limit.
    Limit(Instant),
    /// The caller stopped it between two slices, before the limit
    /// (`RunOptions::observer`).
    Stopped,
}

/// Packet counts as the backend saw them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Datagrams the NICs sent.
    pub sent: u64,
    /// Datagrams handed to a NIC.
    pub delivered: u64,
    /// Lost: faults, full queues (the simulator); egress rules (sockets).
    pub dropped: u64,
    /// Extra copies made by faults.
    pub duplicated: u64,
    /// Delivered out of order (the simulator only).
    pub reordered: u64,
    /// Corrupted by faults.
    pub corrupted: u64,
    /// Marked Congestion Experienced by a queue above its ECN threshold
    /// (the simulator; over sockets, the marks the engines read).
    pub ecn_marked: u64,
    /// Payloads cut off by trimming switches (the simulator).
    pub trimmed: u64,
    /// Events processed (the simulator only).
    pub events: u64,
    /// Link crossings (the simulator only).
    pub packet_hops: u64,
}

/// The packets the fabric (or the egress rules) dropped, by cause. The
/// causes add up to [`Traffic::dropped`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Each fault rule, by name in the file's order, with how many
    /// packets it dropped.
    pub by_rule: Vec<(String, u64)>,
    /// Tail drops at a full egress queue (the lanes' below excluded).
    pub queue_full: u64,
    /// A costed NIC's receive lane was full (what a port sends ahead of
    /// its queue: trimmed headers, control under priority).
    pub nic_lane: u64,
    /// A lossless ingress past its XOFF threshold and headroom (PFC).
    pub pfc_headroom: u64,
    /// A paused host's hold buffer was full.
    pub paused_overflow: u64,
    /// Larger than a link's MTU.
    pub mtu: u64,
    /// No route to the destination (a link down).
    pub no_route: u64,
}

impl DropCounts {
    /// The simulator's drops, the rules named from `rules` (the world's).
    fn of(s: &FabricStats, rules: &RuleSet) -> DropCounts {
        let reason = |r| s.dropped.get(&r).copied().unwrap_or(0);
        let by_rule = rules
            .rules()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let n = s.fault_drops.get(&(i as u32)).copied().unwrap_or(0);
                (r.name.clone(), n)
            })
            .collect();
        DropCounts {
            by_rule,
            queue_full: reason(DropReason::QueueFull).saturating_sub(s.lane_dropped),
            nic_lane: s.lane_dropped,
            pfc_headroom: reason(DropReason::Headroom),
            paused_overflow: reason(DropReason::PausedOverflow),
            mtu: reason(DropReason::Mtu),
            no_route: reason(DropReason::NoRoute),
        }
    }

    /// Adds what `rules` dropped, by name (the egress rules of one host
    /// over sockets: every host has the same rules).
    fn add_rules(&mut self, rules: &RuleSet) {
        for r in rules.rules() {
            match self.by_rule.iter_mut().find(|(n, _)| *n == r.name) {
                Some((_, n)) => *n += r.counters.dropped,
                None => self.by_rule.push((r.name.clone(), r.counters.dropped)),
            }
        }
    }

    /// Every drop counted here.
    pub fn total(&self) -> u64 {
        self.by_rule.iter().map(|(_, n)| n).sum::<u64>()
            + self.queue_full
            + self.nic_lane
            + self.pfc_headroom
            + self.paused_overflow
            + self.mtu
            + self.no_route
    }
}

/// The NICs' counters a report sums, over the hosts of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NicSums {
    /// ECN echoes seen.
    pub ecn_echoes: u64,
    /// Retransmissions (reductions' included).
    pub retransmits: u64,
    /// Fast retransmissions.
    pub fast_retransmits: u64,
    /// Fast retransmissions that were not needed.
    pub spurious_fast_retransmits: u64,
    /// Tail probes.
    pub tail_probes: u64,
    /// Timeouts.
    pub timeouts: u64,
    /// Duplicates dropped (reductions' included).
    pub dup_dropped: u64,
    /// Packets into the escape channel.
    pub escape_buffered: u64,
    /// Packets drained from it.
    pub escape_drained: u64,
    /// Packets expired in it.
    pub escape_expired: u64,
    /// Packets it had no room for.
    pub escape_overflow: u64,
    /// NACKs sent.
    pub nacks: u64,
    /// Datagrams refused as malformed: the ICRC, the version or the
    /// length did not hold (in the simulator, corrupted packets).
    pub refused_malformed: u64,
}

impl NicSums {
    /// Adds one NIC's counters.
    pub fn add(&mut self, s: &udrma_nic::Stats) {
        self.ecn_echoes += s.ecn_echoes;
        self.retransmits += s.retransmits + s.reduce_retransmits;
        self.fast_retransmits += s.fast_retransmits;
        self.spurious_fast_retransmits += s.spurious_fast_retransmits;
        self.tail_probes += s.tail_probes;
        self.timeouts += s.timeouts;
        self.dup_dropped += s.dup_dropped + s.reduce_duplicates;
        self.escape_buffered += s.escape_buffered;
        self.escape_drained += s.escape_drained;
        self.escape_expired += s.escape_expired;
        self.escape_overflow += s.escape_overflow;
        self.nacks += s.nacks_out();
        self.refused_malformed +=
            s.rx_bad_checksum + s.rx_bad_version + s.rx_bad_length + s.rx_truncated;
    }

    /// Adds another set of sums.
    pub fn absorb(&mut self, o: &NicSums) {
        self.ecn_echoes += o.ecn_echoes;
        self.retransmits += o.retransmits;
        self.fast_retransmits += o.fast_retransmits;
        self.spurious_fast_retransmits += o.spurious_fast_retransmits;
        self.tail_probes += o.tail_probes;
        self.timeouts += o.timeouts;
        self.dup_dropped += o.dup_dropped;
        self.escape_buffered += o.escape_buffered;
        self.escape_drained += o.escape_drained;
        self.escape_expired += o.escape_expired;
        self.escape_overflow += o.escape_overflow;
        self.nacks += o.nacks;
        self.refused_malformed += o.refused_malformed;
    }
}

/// Hosts and their NICs, and a way to let time pass.
pub trait Backend {
    /// `sim` or `udp`.
    fn name(&self) -> &'static str;
    /// Now: simulated time, or real time since the run started.
    fn now(&self) -> Instant;
    /// Hosts.
    fn n_hosts(&self) -> usize;
    /// Whether host `h` runs here (`udrma host` runs one host per
    /// process; its NIC is the only one [`Backend::nic`] may be asked for).
    fn is_local(&self, h: NodeAddr) -> bool {
        let _ = h;
        true
    }
    /// Host `h`'s NIC.
    fn nic(&self, h: NodeAddr) -> &Nic;
    /// Host `h`'s NIC, to post or register (then [`Backend::service`]).
    fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic;
    /// After working on host `h`'s NIC: lets it send.
    fn service(&mut self, h: NodeAddr);
    /// Installs `app` on local host `h` and starts it (see
    /// `udrma_host::app` for the calling rules every backend follows).
    fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), String>;
    /// Local host `h`'s app.
    fn app(&self, h: NodeAddr) -> Option<&dyn App>;
    /// Called once every local host has its app, before time runs: a
    /// backend with hosts in other processes meets them here (they must
    /// not send before this host can take their data).
    fn start(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// Lets time pass, driving the hosts and their apps, until nothing is
    /// left to do or the next thing due is past `limit`. Fails only when
    /// the run itself cannot go on (a split run's thread stopped).
    fn run(&mut self, limit: Instant) -> Result<Ending, String>;
    /// [`Backend::run`] in slices: returns `None` once about `events`
    /// more events have run with more still due before `limit`; calling
    /// it again goes on where it stopped, with the outcome of one
    /// [`Backend::run`]. A backend that cannot stop between slices (the
    /// default) runs to the end.
    fn run_for(&mut self, limit: Instant, events: u64) -> Result<Option<Ending>, String> {
        let _ = events;
        self.run(limit).map(Some)
    }
    /// Between two slices, whether the run stops there, given whether
    /// this process's caller asks to (`stop`). A run spread over ranks
    /// stops where any rank's caller asked, every rank at the same
    /// window, so every rank calls it (and so every rank of such a run
    /// must be watched, or none). Alone, the caller decides.
    fn agree(&mut self, stop: bool) -> Result<bool, String> {
        Ok(stop)
    }
    /// Nothing left in flight and every NIC idle.
    fn is_idle(&self) -> bool;
    /// Flushes outputs (trace, capture); reports the first error.
    fn finish(&mut self) -> Result<(), String>;
    /// Packet counts.
    fn traffic(&self) -> Traffic;
    /// The drops of [`Traffic::dropped`], by cause.
    fn drop_counts(&self) -> DropCounts;
    /// The run's trace hash (the simulator only: real time is not
    /// deterministic).
    fn trace_hash(&self) -> Option<u64>;
    /// The simulated world, for what only it can draw (ladders).
    fn world(&self) -> Option<&World> {
        None
    }
    /// The NICs' counters summed over the hosts here (a run on ranks:
    /// over every rank's, on rank 0, once it finished).
    fn nic_sums(&self) -> NicSums {
        let mut sums = NicSums::default();
        for h in (0..self.n_hosts() as u32).map(NodeAddr) {
            if self.is_local(h) {
                sums.add(self.nic(h).stats());
            }
        }
        sums
    }
    /// Gathers `mine` (this process's part of what a runner reports) to
    /// where the report is made: here, with every part in process order
    /// (`Some`), or another rank (`None`: this one's part is sent). One
    /// process has one part, its own.
    fn gather(&mut self, mine: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, String> {
        Ok(Some(vec![mine]))
    }
    /// A run on ranks: how many, and what each exchanged (rank 0, at
    /// the end).
    fn ranks(&self) -> Option<(usize, &[udrma_fabric::Exchanged])> {
        None
    }
}

impl Backend for World {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn now(&self) -> Instant {
        World::now(self)
    }

    fn n_hosts(&self) -> usize {
        self.topology().n_hosts()
    }

    fn nic(&self, h: NodeAddr) -> &Nic {
        World::nic(self, h)
    }

    fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        World::nic_mut(self, h)
    }

    fn service(&mut self, h: NodeAddr) {
        let _ = World::service(self, h);
    }

    fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), String> {
        World::set_app(self, h, app).map_err(|e| e.to_string())
    }

    fn app(&self, h: NodeAddr) -> Option<&dyn App> {
        World::app_dyn(self, h)
    }

    fn run(&mut self, limit: Instant) -> Result<Ending, String> {
        Ok(if self.run_until(limit) {
            Ending::Quiet
        } else {
            Ending::Limit(self.peek_time().unwrap_or(limit))
        })
    }

    fn run_for(&mut self, limit: Instant, events: u64) -> Result<Option<Ending>, String> {
        Ok(match World::run_for(self, limit, events) {
            Ran::Idle => Some(Ending::Quiet),
            Ran::Limit => Some(Ending::Limit(self.peek_time().unwrap_or(limit))),
            Ran::Budget => None,
        })
    }

    fn is_idle(&self) -> bool {
        World::is_idle(self)
    }

    fn finish(&mut self) -> Result<(), String> {
        World::finish(self).map_err(|e| e.to_string())
    }

    fn traffic(&self) -> Traffic {
        Traffic::of(self.stats())
    }

    fn drop_counts(&self) -> DropCounts {
        DropCounts::of(self.stats(), self.faults())
    }

    fn trace_hash(&self) -> Option<u64> {
        Some(self.trace().hash())
    }

    fn world(&self) -> Option<&World> {
        Some(self)
    }
}

impl Traffic {
    /// The simulator's counters as a backend reports them.
    fn of(s: &FabricStats) -> Traffic {
        Traffic {
            sent: s.sent,
            delivered: s.delivered,
            dropped: s.dropped_total(),
            duplicated: s.duplicated,
            reordered: s.reordered,
            corrupted: s.corrupted,
            ecn_marked: s.ecn_marked,
            trimmed: s.trimmed,
            events: s.events,
            packet_hops: s.packet_hops,
        }
    }
}

/// The simulated world split across threads (`udrma run --threads`):
/// each host's NIC and app live in the world of the thread that runs it.
/// Apps are copied onto every thread's world before the run
/// ([`udrma_host::App::fork`]); working on a NIC from outside its app
/// makes the next run fail, naming the host.
impl Backend for SplitWorld {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn now(&self) -> Instant {
        SplitWorld::now(self)
    }

    fn n_hosts(&self) -> usize {
        self.topology().n_hosts()
    }

    fn nic(&self, h: NodeAddr) -> &Nic {
        self.world_of(h).nic(h)
    }

    fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        SplitWorld::nic_mut(self, h)
    }

    fn service(&mut self, h: NodeAddr) {
        // Only after nic_mut, which has already marked the run.
        let _ = h;
    }

    fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), String> {
        SplitWorld::set_app(self, h, app).map_err(|e| e.to_string())
    }

    fn app(&self, h: NodeAddr) -> Option<&dyn App> {
        self.world_of(h).app_dyn(h)
    }

    fn run(&mut self, limit: Instant) -> Result<Ending, String> {
        Backend::run_for(self, limit, u64::MAX)?
            .ok_or_else(|| "a run without a budget stopped on one".to_string())
    }

    fn run_for(&mut self, limit: Instant, events: u64) -> Result<Option<Ending>, String> {
        Ok(
            match SplitWorld::run_for(self, limit, events).map_err(|e| e.to_string())? {
                Ran::Idle => Some(Ending::Quiet),
                Ran::Limit => Some(Ending::Limit(self.peek_time().unwrap_or(limit))),
                Ran::Budget => None,
            },
        )
    }

    fn is_idle(&self) -> bool {
        SplitWorld::is_idle(self)
    }

    fn finish(&mut self) -> Result<(), String> {
        SplitWorld::finish(self).map_err(|e| e.to_string())
    }

    fn traffic(&self) -> Traffic {
        Traffic::of(&self.stats())
    }

    fn drop_counts(&self) -> DropCounts {
        DropCounts::of(&self.stats(), self.world_of(NodeAddr(0)).faults())
    }

    fn trace_hash(&self) -> Option<u64> {
        Some(self.trace().hash())
    }
}

/// The simulated world spread over ranks (`mpiexec -n N udrma run`):
/// every rank builds the world and installs every host's app, the first
/// run keeps its shard ([`RankedWorld`]), and at the end rank 0 gathers
/// the counters, the clock, whether every rank is idle, the NICs' sums
/// and each host's end, and makes the report.
pub struct Ranked {
    world: RankedWorld<Box<dyn Ranks>>,
    /// What rank 0 gathered at the end.
    ended: Option<RanksEnded>,
}

/// What rank 0 gathered at the end of a run on ranks.
struct RanksEnded {
    run: udrma_fabric::RankedRun,
    idle: bool,
    nic: NicSums,
}

impl std::fmt::Debug for Ranked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranked")
            .field("rank", &self.world.rank())
            .field("ranks", &self.world.size())
            .finish_non_exhaustive()
    }
}

impl Ranked {
    /// Drives `world`.
    pub fn new(world: RankedWorld<Box<dyn Ranks>>) -> Ranked {
        Ranked { world, ended: None }
    }

    /// This rank's local idleness and NIC sums.
    fn local_end(&self) -> (bool, NicSums) {
        let w = self.world.world();
        let n = w.topology().n_hosts() as u32;
        let mut nic = NicSums::default();
        for h in (0..n).map(NodeAddr).filter(|h| self.world.is_local(*h)) {
            nic.add(w.nic(h).stats());
        }
        (self.world.is_idle_here(), nic)
    }

    /// What each rank exchanged (rank 0, after the run).
    pub fn exchanged(&self) -> Option<&[udrma_fabric::Exchanged]> {
        self.ended.as_ref().map(|e| &e.run.ranks[..])
    }
}

impl Backend for Ranked {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn now(&self) -> Instant {
        match &self.ended {
            Some(e) => e.run.now,
            None => self.world.world().now(),
        }
    }

    fn n_hosts(&self) -> usize {
        self.world.world().topology().n_hosts()
    }

    fn is_local(&self, h: NodeAddr) -> bool {
        self.world.is_local(h)
    }

    fn nic(&self, h: NodeAddr) -> &Nic {
        self.world.world().nic(h)
    }

    fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        self.world.nic_mut(h)
    }

    fn service(&mut self, h: NodeAddr) {
        // Only after nic_mut, which has already marked the run.
        let _ = h;
    }

    fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), String> {
        self.world.set_app(h, app).map_err(|e| e.to_string())
    }

    fn app(&self, h: NodeAddr) -> Option<&dyn App> {
        self.world.world().app_dyn(h)
    }

    fn run(&mut self, limit: Instant) -> Result<Ending, String> {
        Backend::run_for(self, limit, u64::MAX)?
            .ok_or_else(|| "a run without a budget stopped on one".to_string())
    }

    /// Every rank returns after the same window: the budget counts the
    /// events of all ranks, as all agreed.
    fn run_for(&mut self, limit: Instant, events: u64) -> Result<Option<Ending>, String> {
        Ok(
            match self
                .world
                .run_for(limit, events)
                .map_err(|e| e.to_string())?
            {
                Ran::Idle => Some(Ending::Quiet),
                Ran::Limit => {
                    let next = self.world.peek_time().map_err(|e| e.to_string())?;
                    Some(Ending::Limit(next.unwrap_or(limit)))
                }
                Ran::Budget => None,
            },
        )
    }

    fn agree(&mut self, stop: bool) -> Result<bool, String> {
        self.world.any(stop).map_err(|e| e.to_string())
    }

    fn is_idle(&self) -> bool {
        match &self.ended {
            Some(e) => e.idle,
            None => self.local_end().0,
        }
    }

    /// Gathers the figures every rank has at the end on rank 0.
    fn finish(&mut self) -> Result<(), String> {
        let (idle, nic) = self.local_end();
        let run = self.world.gather().map_err(|e| e.to_string())?;
        let mut out = vec![Vec::new(); self.world.size()];
        out[0] = postcard::to_stdvec(&(idle, nic)).map_err(|e| e.to_string())?;
        let got = self.world.exchange(out).map_err(|e| e.to_string())?;
        if let Some(run) = run {
            let mut ended = RanksEnded {
                run,
                idle: true,
                nic: NicSums::default(),
            };
            for (r, bytes) in got.iter().enumerate() {
                let (idle, nic): (bool, NicSums) = postcard::from_bytes(bytes)
                    .map_err(|e| format!("rank {r}'s figures do not parse: {e}"))?;
                ended.idle &= idle;
                ended.nic.absorb(&nic);
            }
            self.ended = Some(ended);
        }
        Ok(())
    }

    /// Before the end, this rank's counters, but the events and packets
    /// sent of every rank, as agreed at the last window (what a progress
    /// line shows).
    fn traffic(&self) -> Traffic {
        match &self.ended {
            Some(e) => Traffic::of(&e.run.stats),
            None => {
                let mut t = Traffic::of(self.world.world().stats());
                (t.events, t.sent) = self.world.so_far();
                t
            }
        }
    }

    fn drop_counts(&self) -> DropCounts {
        let rules = self.world.world().faults();
        match &self.ended {
            Some(e) => DropCounts::of(&e.run.stats, rules),
            None => DropCounts::of(self.world.world().stats(), rules),
        }
    }

    fn trace_hash(&self) -> Option<u64> {
        Some(self.world.trace().hash())
    }

    fn nic_sums(&self) -> NicSums {
        match &self.ended {
            Some(e) => e.nic,
            None => self.local_end().1,
        }
    }

    fn gather(&mut self, mine: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, String> {
        let mut out = vec![Vec::new(); self.world.size()];
        out[0] = mine;
        let got = self.world.exchange(out).map_err(|e| e.to_string())?;
        Ok((self.world.rank() == 0).then_some(got))
    }

    fn ranks(&self) -> Option<(usize, &[udrma_fabric::Exchanged])> {
        Some((self.world.size(), self.exchanged().unwrap_or(&[])))
    }
}
