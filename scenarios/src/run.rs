//! Running a plan: build its backend — the simulated world (topology,
//! NICs, faults, pauses, capture, trace), a split of it across threads,
//! or real UDP sockets on loopback — then hand it to the runner of its
//! workloads, which checks the invariants and reports.
//!
//! This module is the entry: [`run`] and [`run_host`] plan the file
//! (`crate::plan::resolved::plan`), [`run_plan`] and [`host_part`] run a
//! plan; over real sockets each host's fault rules are seeded here from
//! the plan's copy of the file's rules (`egress_plans`). Its children:
//! - one runner per workload family, each installing one app per host
//!   from `udrma_host::workload` with the plan's part for it, and
//!   checking what the apps recorded: [`rdma`] (which also holds
//!   `start_and_run`, the start, run to the time limit and finish that
//!   every runner shares), [`messaging`], [`noncontig`], [`collective`],
//!   [`scheduled`] (a collective by one of MPI's algorithms);
//! - [`leftover`]: what a run left undone, said the way it happened;
//! - [`observed`]: the run in slices, with the caller's observer called
//!   between them (progress, an interrupt);
//! - `host_end`: what a host ended an RDMA run with, worked out where it
//!   ran and gathered where the report is made.

pub mod collective;
mod host_end;
pub mod leftover;
pub mod messaging;
pub mod noncontig;
pub mod observed;
pub mod rdma;
pub mod scheduled;

use std::io::Write;
use std::net::SocketAddr;

use udrma_bridge::{BridgeConfig, Cluster, FaultPlan};
use udrma_fabric::{SplitWorld, TraceFormat, World};
use udrma_faults::Direction;
use udrma_nic::NicConfig;
use udrma_proto::NodeAddr;

use crate::backend::{Backend, Udp};
use crate::file::schema::TopologyKind;
use crate::file::source::Locate;
use crate::plan::build;
use crate::plan::resolved::{plan, Plan, Work};
pub use crate::plan::resolved::{real_time_floors, BackendKind, UDP_MIN_TIME_LIMIT};
use crate::report::ladder::Ladder;
use crate::report::timeline::{Recording, Timeline};
use crate::report::Report;
use crate::{Scenario, ScenarioError};

/// The largest data payload `udrma host` sends: its datagrams (with the
/// udrma header and ICRC) fit a 1500-byte Ethernet MTU.
pub const ETHERNET_PAYLOAD: u32 = 1400;

/// What the caller wants besides the report.
#[derive(Default)]
pub struct RunOptions {
    /// Overrides the file's seed.
    pub seed: Option<u64>,
    /// Capture to this sink, of these links (empty: all).
    pub pcap: Option<(Box<dyn Write + Send>, Vec<String>)>,
    /// Trace to this sink.
    pub trace: Option<(TraceFormat, Box<dyn Write + Send>)>,
    /// Draw a ladder diagram (`Report::ladder_svg`).
    pub ladder: Option<Ladder>,
    /// Make a timeline of the run (`Report::timeline_json`; the
    /// simulated fabric, one thread).
    pub timeline: Option<Timeline>,
    /// Where the packets go (default: the simulated fabric).
    pub backend: BackendKind,
    /// Split the simulated run across this many threads (in lookahead
    /// windows, with the outcome of one thread in windows); `None` runs
    /// one world as the file says.
    pub threads: Option<usize>,
    /// Spread the simulated run over these ranks (processes an MPI
    /// launcher started, every one calling [`run`] with the same file):
    /// each runs its shard, and rank 0's report is the run's (the other
    /// ranks' reports are placeholders, not to be shown).
    pub ranks: Option<RankOptions>,
    /// Record every packet presented to the fault rules
    /// ([`Report::egress`]; the simulated fabric, one thread).
    pub egress_log: bool,
    /// Record the state's fingerprint before every event that begins
    /// with at least this many packets judged, and the egress log
    /// ([`Report::fingerprints`]; the `fingerprint` feature, the
    /// simulated fabric, one thread).
    pub fingerprints: Option<u32>,
    /// Called between slices of this many events (at least 1;
    /// [`observed::SLICE_EVENTS`] for a CLI) with where the run is, and
    /// may stop it there ([`observed::Observer`]); the run is the same
    /// with it as without. On threads and ranks a slice is whole
    /// windows; over sockets, [`crate::backend::UDP_SLICE`] of real time.
    /// On ranks give every rank one with the same count, or none: they
    /// agree between slices (ranks that differ are refused at the start).
    pub observer: Option<(u64, observed::Observer)>,
}

/// The ranks a run is spread over, and what identifies the run for them
/// to compare (the command, the file, the seed, the build).
pub struct RankOptions {
    /// This process's rank among them.
    pub ranks: Box<dyn udrma_fabric::Ranks>,
    /// What identifies the run.
    pub identity: String,
}

/// Runs `sc`: plans it for the seed and backend `opts` give, then runs
/// the plan ([`run_plan`]). Fails only on invalid input; check failures
/// are in the report.
pub fn run(sc: &Scenario, opts: RunOptions) -> Result<Report, ScenarioError> {
    let seed = opts.seed.unwrap_or(sc.file.seed);
    let plan = plan(sc, seed, opts.backend)?;
    run_plan(&plan, opts)
}

/// Runs a plan on the backend it was planned for (`opts.seed` and
/// `opts.backend` are the plan's already, and not read again): builds
/// the backend and hands it to the runner of the plan's workloads.
pub fn run_plan(plan: &Plan, opts: RunOptions) -> Result<Report, ScenarioError> {
    let mut r = dispatch(plan, opts)?;
    if plan.backend == BackendKind::Sim {
        if let Some(note) = early_timers(plan, &r) {
            r.notes.push(note);
        }
    }
    if let Work::Rdma(p) = &plan.work {
        if !p.ops.is_empty() && p.ops.iter().all(|o| o.size == 0) {
            let n = p.ops.len();
            let what = if n == 1 {
                "the one operation exercises".to_string()
            } else {
                format!("the {n} operations exercise")
            };
            r.notes.push(format!(
                "every operation moves 0 bytes: {what} the protocol's requests and \
                 acknowledgements, and no data"
            ));
        }
    }
    Ok(r)
}

/// A note when retransmit timers expired though nothing was lost: each
/// fired while its packet or the ACK for it still waited in a queue, so
/// the user sees why a clean run retransmitted, and which key to change.
fn early_timers(plan: &Plan, r: &Report) -> Option<String> {
    let p = &r.packets;
    let lost = p.dropped + p.corrupted + p.trimmed + r.escape.expired + r.escape.overflow;
    // A delay the file injects holds packets too: the queues are not
    // then the only cause, and the note would mislead.
    let delays = plan.faults.iter().any(|f| {
        use crate::file::schema::ModelKind;
        matches!(f.model, ModelKind::Delay | ModelKind::Reorder)
    });
    if r.timeouts == 0 || lost > 0 || delays {
        return None;
    }
    let advice = if plan.at.text().contains("full-queues") {
        "raise it"
    } else {
        "raise it, or set `rto_min = \"full-queues\"`,"
    };
    let paused = r
        .pfc
        .as_ref()
        .filter(|f| f.paused_ns > 0)
        .map(|f| {
            format!(
                " (PFC held ports paused for {:.1} us in all)",
                f.paused_ns as f64 / 1e3
            )
        })
        .unwrap_or_default();
    Some(format!(
        "{} retransmit timers expired though no packet was lost: they fired while packets \
         or their ACKs still waited in queues{paused}; the timer's floor is `[nic] rto_min` \
         ({} here): {advice} to keep it from firing early",
        r.timeouts, plan.resolved.nic.rto_min
    ))
}

/// [`run_plan`] before the notes on the whole run: the run, watched if
/// the caller gave an observer, and whether the observer stopped it.
fn dispatch(plan: &Plan, mut opts: RunOptions) -> Result<Report, ScenarioError> {
    let watch = opts.observer.take().map(observed::watch);
    let mut report = dispatch_watched(plan, opts, watch.as_ref())?;
    report.interrupted = watch.is_some_and(|w| w.borrow().stopped());
    Ok(report)
}

/// [`dispatch`] with its watch made.
fn dispatch_watched(
    plan: &Plan,
    mut opts: RunOptions,
    watch: Option<&observed::Shared>,
) -> Result<Report, ScenarioError> {
    if let Some(ranks) = opts.ranks.take() {
        return run_ranked(plan, ranks, &opts, watch);
    }
    if plan.backend == BackendKind::Udp {
        if opts.threads.is_some() {
            return Err(plan.at.error(
                "--threads splits the simulated fabric; the udp backend runs real sockets".into(),
            ));
        }
        return run_udp(plan, &opts, watch);
    }
    if let Some(n) = opts.threads {
        return run_split(plan, n, &opts, watch);
    }
    let mut world = sim_world(plan)?;
    if opts.egress_log {
        world.log_egress();
    }
    if let Some(_from) = opts.fingerprints {
        #[cfg(feature = "fingerprint")]
        world.log_fingerprints(_from);
        #[cfg(not(feature = "fingerprint"))]
        return Err(plan
            .at
            .error("state fingerprints need udrma-scenarios' `fingerprint` feature".into()));
    }
    let n = world.n_hosts();
    if let Some((sink, links)) = opts.pcap.take() {
        let r = if links.is_empty() {
            world.tap_all(sink)
        } else {
            let names: Vec<&str> = links.iter().map(String::as_str).collect();
            world.tap(&names, sink)
        };
        r.map_err(|e| plan.at.error_at("pcap", format!("pcap: {e}")))?;
    }
    let timeline = opts
        .timeline
        .map(|spec| Recording::new(world.topology(), spec));
    match (&timeline, opts.trace.take()) {
        (Some(rec), inner) => {
            world.set_trace_sink(TraceFormat::Postcard, Box::new(rec.sink(inner)))
        }
        (None, Some((format, sink))) => world.set_trace_sink(format, sink),
        (None, None) => {}
    }
    let ladder_hosts = match &opts.ladder {
        Some(l) => Some((
            plan.at.host(&l.left, n, "ladder")?,
            plan.at.host(&l.right, n, "ladder")?,
        )),
        None => None,
    };
    if let Some((a, b)) = ladder_hosts {
        world.watch(a, b);
    }
    let recording = timeline.is_some();
    let watched = |mut w: World| -> Box<dyn Backend> {
        if recording {
            // A timeline shows when each retransmit timer expired.
            for h in (0..w.topology().n_hosts() as u32).map(NodeAddr) {
                w.nic_mut(h).record_timeouts();
            }
        }
        observe(Box::new(w), watch, 1)
    };
    let world = watched(world);
    let rebuild = || sim_world(plan).map(watched);
    let mut report = run_work(
        plan,
        (world, &rebuild),
        ladder_hosts,
        &opts,
        timeline.is_some(),
    )?;
    if let Some(rec) = timeline {
        let spans = std::mem::take(&mut report.op_spans);
        let timeouts = std::mem::take(&mut report.timeout_marks);
        let end = report.sim_time_ns.saturating_mul(1000);
        report.timeline_json = Some(rec.json(n, &spans, &timeouts, end));
    }
    Ok(report)
}

/// A built backend, and how to build another (a collective's rounds).
type Built<'a> = (
    Box<dyn Backend>,
    &'a dyn Fn() -> Result<Box<dyn Backend>, ScenarioError>,
);

/// `backend`, watched by `watch` if there is one, in slices `scale`
/// times the watch's (1; [`observed::WINDOWED_SCALE`] on threads and
/// ranks).
fn observe(
    backend: Box<dyn Backend>,
    watch: Option<&observed::Shared>,
    scale: u64,
) -> Box<dyn Backend> {
    match watch {
        Some(watch) => Box::new(observed::Observed::new(backend, watch, scale)),
        None => backend,
    }
}

/// Runs the workloads of `plan` on its built simulated `world`.
fn run_work(
    plan: &Plan,
    (world, rebuild): Built<'_>,
    ladder_hosts: Option<(NodeAddr, NodeAddr)>,
    opts: &RunOptions,
    spans: bool,
) -> Result<Report, ScenarioError> {
    match &plan.work {
        Work::Noncontig(_) => crate::run::noncontig::run(plan, world, rebuild, spans),
        Work::Collective(_) => crate::run::collective::run(plan, world, rebuild, spans),
        Work::Scheduled(_) => crate::run::scheduled::run(plan, world, spans),
        Work::Messaging(_) => {
            let mut report = crate::run::messaging::run(plan, world, spans)?;
            if let Some((a, b)) = ladder_hosts {
                report.notes.push(format!(
                    "no ladder between {a} and {b}: ladders draw RDMA scenarios only"
                ));
            }
            Ok(report)
        }
        Work::Rdma(_) => {
            let ladder = match (ladder_hosts, opts.ladder.as_ref()) {
                (Some((a, b)), Some(spec)) => Some((a, b, spec)),
                _ => None,
            };
            crate::run::rdma::run(plan, world, ladder, spans)
        }
    }
}

/// Runs the RDMA workloads of `plan` on ranks, each running its shard of
/// the world ([`udrma_fabric::RankedWorld`]): what a split run cannot
/// carry is refused in the same words, naming the key.
fn run_ranked(
    plan: &Plan,
    ranks: RankOptions,
    opts: &RunOptions,
    watch: Option<&observed::Shared>,
) -> Result<Report, ScenarioError> {
    let n = ranks.ranks.size();
    let refuse = |what: &str| {
        Err(plan.at.error(format!(
            "{n} MPI ranks: {what} cannot be split across ranks"
        )))
    };
    if plan.backend == BackendKind::Udp {
        return Err(plan.at.error(format!(
            "{n} MPI ranks split the simulated fabric; --backend udp runs real sockets (run it without the launcher)"
        )));
    }
    if opts.threads.is_some() {
        return Err(plan.at.error(format!(
            "--threads splits a run within one process; under an MPI launcher the {n} ranks split it: drop --threads"
        )));
    }
    refuse_unsplittable(plan, opts, &refuse)?;
    if opts.egress_log || opts.fingerprints.is_some() {
        refuse("the egress log and state fingerprints (one thread only)")?;
    }
    if !(1..=udrma_fabric::MAX_SHARDS).contains(&n) {
        return Err(plan.at.error(format!(
            "{n} MPI ranks: from 1 to {}",
            udrma_fabric::MAX_SHARDS
        )));
    }
    let identity = format!("{}{}", ranks.identity, observed::identity(watch));
    let world = udrma_fabric::RankedWorld::new(sim_world(plan)?, ranks.ranks, &identity)
        .map_err(|e| plan.at.error(format!("{n} MPI ranks: {e}")))?;
    let backend = Box::new(crate::backend::Ranked::new(world));
    let backend = observe(backend, watch, observed::WINDOWED_SCALE);
    crate::run::rdma::run(plan, backend, None, false)
}

/// What neither threads nor ranks can split, refused by `refuse` naming
/// it: captures, trace files, ladders, a lossless fabric, workloads other
/// than RDMA.
fn refuse_unsplittable(
    plan: &Plan,
    opts: &RunOptions,
    refuse: &dyn Fn(&str) -> Result<(), ScenarioError>,
) -> Result<(), ScenarioError> {
    if opts.pcap.is_some() || plan.outputs.pcap.is_some() {
        return refuse("a capture");
    }
    if opts.trace.is_some() || plan.outputs.trace.is_some() {
        return refuse("a trace file (a split run has the trace's hash, not its events)");
    }
    if opts.ladder.is_some() {
        return refuse("a ladder diagram");
    }
    if opts.timeline.is_some() {
        return refuse("a timeline (it is read from the trace's events)");
    }
    if plan.resolved.pfc.is_some() {
        return refuse("a lossless fabric (pfc = true: its pauses need time order)");
    }
    if let Some(k) = plan.kinds.iter().find(|k| !k.is_rdma()) {
        return refuse(&format!(
            "the {} workload (messaging, `noncontig` and `collective` workloads do not split; those that post RDMA operations straight on the NICs do)",
            k.name()
        ));
    }
    Ok(())
}

/// Runs the RDMA workloads of `plan` on `threads` copies of its world,
/// each thread running its share of the nodes ([`SplitWorld`]).
fn run_split(
    plan: &Plan,
    threads: usize,
    opts: &RunOptions,
    watch: Option<&observed::Shared>,
) -> Result<Report, ScenarioError> {
    let refuse = |what: &str| {
        Err(plan.at.error(format!(
            "--threads {threads}: {what} cannot be split across threads"
        )))
    };
    refuse_unsplittable(plan, opts, &refuse)?;
    if !(1..=udrma_fabric::MAX_SHARDS).contains(&threads) {
        return Err(plan.at.error(format!(
            "--threads {threads}: from 1 to {}",
            udrma_fabric::MAX_SHARDS
        )));
    }
    // Every thread's copy of the world, built side by side.
    let worlds: Vec<Result<World, ScenarioError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads)
            .map(|_| scope.spawn(|| sim_world(plan)))
            .collect();
        let mut worlds = vec![sim_world(plan)];
        for h in handles {
            worlds.push(h.join().unwrap_or_else(|_| {
                Err(plan.at.error("a thread building the world stopped".into()))
            }));
        }
        worlds
    });
    let worlds = worlds.into_iter().collect::<Result<Vec<_>, _>>()?;
    let split =
        SplitWorld::new(worlds).map_err(|e| plan.at.error(format!("--threads {threads}: {e}")))?;
    let split = observe(Box::new(split), watch, observed::WINDOWED_SCALE);
    crate::run::rdma::run(plan, split, None, false)
}

/// The simulated fabric of `plan` ([`crate::plan::resolved::Resolved::world`]).
fn sim_world(plan: &Plan) -> Result<World, ScenarioError> {
    plan.resolved.world(&plan.at)
}

/// The plan over real sockets: one loopback endpoint per host, the fault
/// rules on each host's egress, timers no finer than the runtime's
/// millisecond clock, and a time limit of at least
/// [`UDP_MIN_TIME_LIMIT`] (both in the plan). What has no meaning on real
/// sockets is refused with the key that asks for it.
fn run_udp(
    plan: &Plan,
    opts: &RunOptions,
    watch: Option<&observed::Shared>,
) -> Result<Report, ScenarioError> {
    refuse_simulated_only(plan, opts)?;
    let plans = egress_plans(plan)?;
    let n = plans.len();
    let cfg = BridgeConfig {
        nic: plan.resolved.nic.clone(),
        ..BridgeConfig::default()
    };
    let loopback = || {
        Cluster::loopback(n, &cfg, |h| plans[h.0 as usize].clone())
            .map(|c| observe(Box::new(Udp::new(c)), watch, 1))
            .map_err(|e| plan.at.error_at("topology", format!("udp backend: {e}")))
    };
    match &plan.work {
        Work::Noncontig(_) => {
            // `auto` tries the methods on the simulated fabric (with the
            // plan's NIC, its real-time floors, and time limit) before the
            // sockets' clock starts.
            let trial = || sim_world(plan).map(|w| observe(Box::new(w), watch, 1));
            let (planned, stopped) = crate::run::noncontig::choose(plan, &trial)?;
            crate::run::noncontig::run_chosen(plan, loopback()?, (&planned, stopped), false)
        }
        Work::Collective(_) => crate::run::collective::run(plan, loopback()?, &loopback, false),
        Work::Scheduled(_) => crate::run::scheduled::run(plan, loopback()?, false),
        Work::Messaging(_) => crate::run::messaging::run(plan, loopback()?, false),
        Work::Rdma(_) => crate::run::rdma::run(plan, loopback()?, None, false),
    }
}

/// Refuses, by key, what only the simulator can do.
fn refuse_simulated_only(plan: &Plan, opts: &RunOptions) -> Result<(), ScenarioError> {
    let at = &plan.at;
    if opts.pcap.is_some() || plan.outputs.pcap.is_some() {
        return Err(at.error_at_key(
            "pcap",
            "a capture needs the simulated backend (over real sockets, capture with tcpdump or Wireshark on the loopback interface, UDP ports of the hosts)".into(),
        ));
    }
    if opts.trace.is_some() || plan.outputs.trace.is_some() {
        return Err(at.error_at_key(
            "trace",
            "a trace needs the simulated backend (real time has no deterministic event log)".into(),
        ));
    }
    if opts.ladder.is_some() {
        return Err(at.error_at(
            "ladder",
            "a ladder diagram needs the simulated backend".into(),
        ));
    }
    if opts.timeline.is_some() {
        return Err(at.error(
            "a timeline needs the simulated backend (it is read from the trace's events)".into(),
        ));
    }
    if plan.resolved.windows {
        return Err(at.error_at_key(
            "order",
            "order = \"windows\" is how the simulator runs its events; real sockets run in real time (remove it or use --backend sim)".into(),
        ));
    }
    if plan.resolved.pfc.is_some() {
        return Err(at.error_at_key(
            "pfc",
            "pfc = true makes the simulated fabric lossless; real sockets run over the host's own network (remove it or use --backend sim)".into(),
        ));
    }
    if !plan.resolved.pauses.is_empty() {
        return Err(at.error_at(
            "[[pause]]",
            "host pauses are simulated-only (the udp backend does not stop real hosts); remove [[pause]] or use --backend sim".into(),
        ));
    }
    match plan.topology_kind {
        TopologyKind::Pair | TopologyKind::Star => Ok(()),
        other => {
            let name = match other {
                TopologyKind::Dumbbell => "dumbbell",
                TopologyKind::KaryNtree => "kary-ntree",
                TopologyKind::Ring => "ring",
                _ => "fat-tree",
            };
            Err(ScenarioError {
                file: at.path.clone(),
                at: crate::file::edit::locate(&at.text, "topology.kind"),
                message: format!(
                    "topology kind `{name}` has switches and links with no real-socket meaning; the udp backend runs `pair` and `star` (every host reaches every other over loopback)"
                ),
            })
        }
    }
}

/// Each host's egress fault rules over real sockets: the scenario's rules
/// with a stream per host, judged on the links a datagram between two
/// hosts would cross in the simulated topology.
fn egress_plans(plan: &Plan) -> Result<Vec<FaultPlan>, ScenarioError> {
    let seed = plan.seed();
    let topo = &plan.resolved.topology;
    let n = topo.n_hosts();
    // Which links a datagram between two hosts crosses in the simulated
    // topology: the sender's link forward, then the receiver's in reverse
    // (a pair has one link, crossed forward from h0).
    let host_link = |h: usize| -> Option<(u32, Direction)> {
        if plan.topology_kind == TopologyKind::Pair {
            return None;
        }
        topo.link_by_name(&format!("h{h}-s0"))
            .map(|l| (l, Direction::Forward))
    };
    let names = topo.link_names();
    let mut plans = Vec::with_capacity(n);
    for h in 0..n {
        // Each host's rules draw from their own streams.
        let host_seed =
            udrma_proto::rng::mix(seed ^ udrma_proto::rng::component_id(&format!("udp:h{h}")));
        let mut rules = build::rules(&plan.at, &plan.faults, host_seed, n)?;
        rules
            .resolve(|name| topo.link_by_name(name), &names)
            .map_err(|e| plan.at.error_at("fault", e.to_string()))?;
        let mut fp = FaultPlan {
            rules,
            ..FaultPlan::default()
        };
        for d in (0..n).filter(|d| *d != h) {
            let path = match (host_link(h), host_link(d)) {
                (Some(out), Some((back, _))) => vec![out, (back, Direction::Reverse)],
                _ if h == 0 => vec![(0, Direction::Forward)],
                _ => vec![(0, Direction::Reverse)],
            };
            fp.crossings.set(NodeAddr(d as u32), path);
        }
        plans.push(fp);
    }
    Ok(plans)
}

/// One host's part of a scenario, run in this process (`udrma host`).
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Overrides the file's seed (every process must use the same).
    pub seed: Option<u64>,
    /// The host this process runs (`h1`).
    pub host: String,
    /// Its UDP address.
    pub bind: SocketAddr,
    /// Every other host of the scenario and its address.
    pub peers: Vec<(String, SocketAddr)>,
}

/// Why a host's part could not run.
#[derive(Debug)]
pub enum HostError {
    /// The scenario or the options are wrong (exit 2).
    Input(ScenarioError),
    /// A peer could not be reached, or the socket failed (exit 1).
    Network(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Input(e) => e.fmt(f),
            HostError::Network(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for HostError {}

impl From<ScenarioError> for HostError {
    fn from(e: ScenarioError) -> Self {
        HostError::Input(e)
    }
}

/// Runs host `opts.host`'s part of `sc` over real UDP: its memory, its
/// app (the same per-host app the other backends run), its egress fault
/// rules. It introduces itself to every peer in-band (HELLO) and waits
/// for each to answer before its app starts, so the processes start
/// together; each checks what it can see (its own operations and
/// messages; the bytes other hosts wrote into it), and leaves only when
/// every peer has said goodbye (see `udrma_bridge::Cluster::goodbye`).
pub fn run_host(sc: &Scenario, opts: &HostOptions) -> Result<Report, HostError> {
    let seed = opts.seed.unwrap_or(sc.file.seed);
    host_part(&plan(sc, seed, BackendKind::Udp)?, opts)
}

/// Runs host `opts.host`'s part of `plan` (a udp plan: [`run_host`]).
pub fn host_part(plan: &Plan, opts: &HostOptions) -> Result<Report, HostError> {
    let at = &plan.at;
    refuse_simulated_only(plan, &RunOptions::default())?;
    if plan.backend != BackendKind::Udp {
        return Err(HostError::Input(at.error(
            "internal: `udrma host` runs a plan made for the udp backend".into(),
        )));
    }
    let plans = egress_plans(plan)?;
    let n = plans.len();
    let bad = |message: String| HostError::Input(at.error(message));
    let local = at.host(&opts.host, n, "--as")?;
    let mut remotes: Vec<(NodeAddr, SocketAddr)> = Vec::new();
    for (name, addr) in &opts.peers {
        let h = at.host(name, n, "--peer")?;
        if h == local || remotes.iter().any(|(r, _)| *r == h) {
            return Err(bad(format!(
                "--peer {name}={addr}: {name} is this host, or listed twice"
            )));
        }
        remotes.push((h, *addr));
    }
    let missing: Vec<String> = (0..n as u32)
        .map(NodeAddr)
        .filter(|h| *h != local && !remotes.iter().any(|(r, _)| r == h))
        .map(|h| h.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(bad(format!(
            "no --peer for {}: every other host of the scenario needs an address (--peer h0=ADDR)",
            missing.join(", ")
        )));
    }
    let nic = plan.resolved.nic.clone();
    let peer_addrs: Vec<SocketAddr> = remotes.iter().map(|(_, a)| *a).collect();
    let cfg = BridgeConfig {
        nic: NicConfig {
            epoch: udrma_bridge::clock::boot_epoch(),
            mtu_payload: host_payload(nic.mtu_payload, &peer_addrs),
            ..nic
        },
        peer_program: "`udrma host` for that host (with the same scenario file)",
        ..BridgeConfig::default()
    };
    let egress = plans[local.0 as usize].clone();
    let network = |e: udrma_bridge::BridgeError| HostError::Network(format!("{}: {e}", opts.host));
    let cluster = Cluster::partial(n, local, opts.bind, remotes, &cfg, egress).map_err(network)?;
    // The cluster meets its peers once this host's memory is registered.
    let backend: Box<dyn Backend> = Box::new(Udp::new(cluster));
    let report = match &plan.work {
        Work::Messaging(_) => crate::run::messaging::run(plan, backend, false),
        Work::Rdma(_) => crate::run::rdma::run(plan, backend, None, false),
        Work::Noncontig(_) | Work::Collective(_) | Work::Scheduled(_) => Err(at.error_at(
            "workload",
            "`udrma host` runs RDMA and messaging workloads; run noncontig and collective ones with `udrma run --backend udp`".into(),
        )),
    };
    report.map_err(
        |e| match e.message.strip_prefix(crate::run::rdma::NETWORK) {
            Some(m) if e.at.is_none() => HostError::Network(format!("{}: {m}", opts.host)),
            _ => HostError::Input(e),
        },
    )
}

/// The data payload `udrma host` sends to `peers`, from the file's
/// `mtu_payload`. Datagrams must fit the path: the sockets set
/// don't-fragment, so over anything but loopback the payload is cut to
/// [`ETHERNET_PAYLOAD`]. Loopback carries 64 KiB datagrams, so peers
/// that are all on it get the file's payload, as `udrma run --backend
/// udp` does: cut to 1,400 bytes, a 256 KiB operation is 188 packets
/// instead of 64, and when its first packet is overtaken the other 187
/// overrun the escape channel the file sized in packets of its own
/// payload (docs/bridge.md, "What a split run costs").
pub fn host_payload(file_payload: u32, peers: &[SocketAddr]) -> u32 {
    if !peers.is_empty() && peers.iter().all(|a| a.ip().is_loopback()) {
        file_payload
    } else {
        file_payload.min(ETHERNET_PAYLOAD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_run_keeps_the_files_payload_only_where_the_path_carries_it() {
        let lo: SocketAddr = "127.0.0.1:19000".parse().unwrap();
        let lo6: SocketAddr = "[::1]:19000".parse().unwrap();
        let lan: SocketAddr = "10.0.0.2:19000".parse().unwrap();
        // Loopback carries the file's 4 KiB payloads, as the one-process
        // form sends them.
        assert_eq!(host_payload(4096, &[lo, lo6]), 4096);
        // One peer across an Ethernet path cuts every datagram to fit it.
        assert_eq!(host_payload(4096, &[lo, lan]), ETHERNET_PAYLOAD);
        assert_eq!(host_payload(4096, &[]), ETHERNET_PAYLOAD);
        // A payload already small enough stays.
        assert_eq!(host_payload(1024, &[lan]), 1024);
    }
}
