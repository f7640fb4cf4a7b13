//! Shards: one run in lookahead windows, split by node across threads.
//!
//! Windows already run a window's events node by node, and nothing a
//! node does in a window reaches another node before the window ends
//! (`windows`). So the nodes can be shared out between threads, each
//! thread running its own nodes' part of every window, and the threads
//! need to meet only between windows. Each thread builds the same world
//! (the same build, so the same state at time zero) and keeps only its
//! own nodes' part ([`World::keep_shard`]); between windows a coordinator
//! hands each shard the packets other shards gave to ports whose far end
//! it runs, folds the window's node runs (each a digest of its trace
//! events, `Trace::end_run`) and host events from every shard in node
//! order, and works out the next window.
//!
//! The result is the run of one thread, exactly: the same trace (event
//! for event, so the same hash), the same counters, the same host events
//! in the same order, for any number of shards. What makes that so:
//!
//! - a window's events at a node depend only on that node's state and
//!   the packets that reach it, never on which nodes ran before it;
//! - keys and packet serial numbers are counted per node in windows
//!   (`windows::Origin`), and an arrival's key is its time and its port
//!   whoever files it;
//! - a port's queue is judged by its sender alone: the sender keeps a
//!   stand-in for each packet it gave to another shard (its length and
//!   arrival, [`InFlight::stand_in`]) for its queue's count, and the
//!   packet itself goes to the receiver's line.
//!
//! - a packet a switch sends ahead of its queue (trimmed, or control
//!   under priority) goes to the far end's shard with the key its
//!   arrival would have had on one thread.
//!
//! - fault rules judge a packet at its sender, and in windows a rule
//!   without memory draws by packet and port, not from its stream.
//!
//! What a split run cannot hold (refused by [`World::shardable`]): fault
//! rules with memory (their verdicts depend on the packets they judged
//! before), a capture, a trace sink and a ladder journal. Host apps run on the
//! thread of their host; [`SplitWorld`](super::SplitWorld) installs them
//! and reads them back.

use std::sync::mpsc;

use super::mail::Mail;
use super::*;
use crate::topology::Shape;
use crate::trace::RunDigest;

/// Most shards a run may be split into.
pub const MAX_SHARDS: usize = 64;

/// What a world running as one shard keeps besides a world's state.
#[derive(Debug, Default)]
pub(super) struct Shard {
    /// Packets given this window to ports whose far end another shard
    /// runs, by that shard.
    pub(super) outbox: Vec<Mail>,
    /// Whether packets on lines to another shard stay here until the
    /// window before their arrival's (ranks: `kept`), instead of going
    /// at the end of the window they were given in (threads).
    pub(super) keep: bool,
    /// The lines that keep packets (`PortState::kept` > 0), in the order
    /// they came to.
    pub(super) keeping: Vec<PortId>,
    /// By port, on a line to another shard: no stand-in on it arrives
    /// before this time (ps; a bound, and zero, which bounds anything,
    /// from the start), so that a packet joining the queue reads the
    /// line's head, a cold entry, only once one may have arrived
    /// (`World::enqueue`). Not in the port's state, whose two cache lines
    /// are full; zeros, so that the room of the ports that never send to
    /// another shard is never written.
    pub(super) stand_ins_from: Vec<u64>,
}

/// Why a run could not be split.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The world holds something a split run cannot (see the module
    /// documentation).
    #[error("cannot split this run across threads or ranks: {0}")]
    Unsupported(String),
    /// The shard count is out of range.
    #[error("shards: {0} (from 1 to {MAX_SHARDS})")]
    Count(usize),
    /// Building a shard's world failed.
    #[error(transparent)]
    Build(#[from] FabricError),
    /// The world cannot run in windows.
    #[error(transparent)]
    Window(#[from] WindowError),
    /// Two shards built different worlds: the build is not deterministic.
    #[error(
        "shard {0} built a different world from shard 0 ({1}): the build must be deterministic"
    )]
    Differ(usize, String),
    /// A rank was started with another run than rank 0 (another file,
    /// seed, command or build: their identities, see `RankedWorld`).
    #[error("rank {0} was not started as rank 0 was: {1}")]
    Started(usize, String),
    /// A shard's thread stopped.
    #[error("shard {0} stopped: {1}")]
    Stopped(usize, String),
    /// The other shards' threads ended without a word (one panicked).
    #[error("the other shards' threads have ended")]
    Lost,
}

/// What a split run did: what [`World`] would report after the same run
/// on one thread.
#[derive(Debug)]
pub struct ShardedRun {
    /// The fabric's counters, summed over the shards.
    pub stats: FabricStats,
    /// The run's trace (hash and event count).
    pub trace: Trace,
    /// Simulated time at the end: the latest event run.
    pub now: Instant,
    /// Completions and arrivals the hosts reported, in order.
    pub host_events: Vec<HostEvent>,
    /// The window width.
    pub window: Duration,
    /// Shards (threads) the run was split into.
    pub shards: usize,
}

/// What the coordinator asks of a shard.
enum Command {
    /// Run a window.
    Run(Run),
    /// Report the counters and stop.
    Finish,
}

/// A window to run: first take in the packets other shards sent (by
/// sender). `runs` is an empty list to record the window's node runs in
/// (the one last handed back, so that its room is used again).
pub(super) struct Run {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) inbox: Vec<Mail>,
    pub(super) runs: Vec<RunDigest>,
    /// On ranks, the kept packets arriving before this (ps) go with the
    /// window's outbox ([`World::hand_on`]).
    pub(super) hand_on: Option<u64>,
}

/// A shard, built and ready: its first event's time, its window width,
/// what identifies the world it built and that world's trace so far.
pub(super) struct Ready {
    pub(super) next: Option<Instant>,
    pub(super) width: u64,
    pub(super) fingerprint: String,
    pub(super) trace: (u64, u64),
}

/// A window a shard ran.
pub(super) struct Done {
    /// Events pending as the window began.
    pub(super) pending: u64,
    /// The shard's next event's time.
    pub(super) next: Option<Instant>,
    /// Packets for other shards, by receiving shard.
    pub(super) outbox: Vec<Mail>,
    /// Its node runs, in node order.
    pub(super) runs: Vec<RunDigest>,
    /// Its hosts' events, in node order.
    pub(super) host_events: Vec<HostEvent>,
    /// When the earliest packet it still keeps arrives.
    pub(super) kept: Option<Instant>,
    /// The arrival of a packet another shard gave it too late: before
    /// the window began (never, while shards keep in step).
    pub(super) late: Option<Instant>,
}

/// What a shard has at the end: its counters and clock, and its world if
/// it was asked to give it back.
type Final = (FabricStats, Instant, Option<Box<World>>);

/// What a shard tells the coordinator.
enum Report {
    /// Built and ready.
    Ready(Ready),
    /// A window ran.
    Done(Done),
    /// The end.
    Final(Final),
    /// Building or keeping its part failed.
    Failed(ShardError),
}

/// Per node, the shard that runs it, for `n` shards: on a fat tree pod
/// by pod (a pod's hosts, edge and aggregation switches together, the
/// core switches shared out evenly), so that only packets between pods
/// change shard, at most twice; on any other topology the switches in
/// runs of their numbers and each host with the node its link goes to.
pub fn partition(topo: &Topology, n: usize) -> Vec<u16> {
    let n = n.clamp(1, MAX_SHARDS);
    let nodes = topo.nodes.len();
    let share = |i: usize, of: usize| (i * n / of.max(1)) as u16;
    match topo.shape {
        Shape::FatTree { k } => {
            let (k, half) = (k as usize, k as usize / 2);
            let hosts = topo.n_hosts();
            let per_pod = half * half;
            (0..nodes)
                .map(|i| {
                    if i < hosts {
                        share(i / per_pod, k)
                    } else if i < hosts + 2 * k * half {
                        share(((i - hosts) % (k * half)) / half, k)
                    } else {
                        share(i - hosts - 2 * k * half, per_pod)
                    }
                })
                .collect()
        }
        Shape::Generic => {
            // Switches in runs of their numbers; each host with the node
            // at the other end of its link, whose port books the host's
            // receive unit and which the host's placing work moves on
            // (`World::arrive`): both must be one thread's. Hosts linked
            // to hosts only (a pair) share the first thread.
            let switches: Vec<usize> = (0..nodes)
                .filter(|&i| matches!(topo.nodes[i].kind, NodeKind::Switch))
                .collect();
            let mut part = vec![0u16; nodes];
            for (j, &i) in switches.iter().enumerate() {
                part[i] = share(j, switches.len());
            }
            for i in 0..nodes {
                if matches!(topo.nodes[i].kind, NodeKind::Host(_)) {
                    let peer = topo.nodes[i]
                        .ports
                        .first()
                        .map(|&p| topo.ports[p as usize].peer as usize);
                    part[i] = peer
                        .filter(|&q| matches!(topo.nodes[q].kind, NodeKind::Switch))
                        .map_or(0, |q| part[q]);
                }
            }
            part
        }
    }
}

/// Where a crew's windows stop ([`Crew::windows`]).
pub(super) struct Bounds {
    /// The window width, ps.
    pub(super) width: u64,
    /// Nothing due after this runs.
    pub(super) limit: Instant,
    /// The trace's event count at which a slice ends.
    pub(super) stop_at: u64,
}

/// Runs the world `build` makes until it is idle, in windows, split into
/// `shards` threads by [`partition`]. `build` is called once on each
/// thread and must build the same world each time (the same topology,
/// configuration and posts); each thread keeps its own nodes' part. The
/// calling thread runs shard 0 and puts the windows together.
pub fn run_sharded<B>(shards: usize, build: B) -> Result<ShardedRun, ShardError>
where
    B: Fn() -> Result<World, FabricError> + Sync,
{
    if shards == 0 || shards > MAX_SHARDS {
        return Err(ShardError::Count(shards));
    }
    let build = &build;
    let prepared = |me: usize| move || prepare(build()?, shards, me);
    crew(shards, prepared, false, |crew| {
        let (mut w0, ready0) = prepared(0)()?;
        let mut next = crew.handshake(&ready0)?;
        let mut trace = Trace::continuing(ready0.trace);
        let mut between = Between::new(shards);
        let mut host_events = Vec::new();
        crew.windows(
            &mut w0,
            &mut next,
            Bounds {
                width: ready0.width,
                limit: Instant(u64::MAX),
                stop_at: u64::MAX,
            },
            &mut between,
            &mut trace,
            &mut host_events,
        )?;
        let mut stats = FabricStats::default();
        let mut now = Instant::ZERO;
        for (st, t, _) in crew.finish(&w0)? {
            stats.absorb(&st);
            now = now.max(t);
        }
        stats.max_event_queue = stats.max_event_queue.max(between.deepest);
        Ok(ShardedRun {
            stats,
            trace,
            now,
            host_events,
            window: Duration::from_ps(ready0.width),
            shards,
        })
    })
}

/// Rounds of asking for a message before sleeping on it.
const SPIN: u32 = 20_000;

/// The next message, or why none will come: asked for `spin` times
/// first, then slept on.
fn receive<T>(rx: &mpsc::Receiver<T>, spin: u32) -> Option<T> {
    for _ in 0..spin {
        match rx.try_recv() {
            Ok(m) => return Some(m),
            Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Disconnected) => return None,
        }
    }
    rx.recv().ok()
}

/// Makes `w` shard `me` of `shards`: checks that it can be split, runs
/// it in windows and keeps its part.
pub(super) fn prepare(
    mut w: World,
    shards: usize,
    me: usize,
) -> Result<(World, Ready), ShardError> {
    let ready = prepare_in_place(&mut w, shards, me)?;
    Ok((w, ready))
}

/// [`prepare`], on a world the caller keeps.
pub(super) fn prepare_in_place(
    w: &mut World,
    shards: usize,
    me: usize,
) -> Result<Ready, ShardError> {
    w.shardable().map_err(ShardError::Unsupported)?;
    let width = w
        .set_event_order(EventOrder::Windows)?
        .map_or(u64::MAX, |d| d.as_ps());
    let fingerprint = w.fingerprint();
    let trace = (w.trace.hash(), w.trace.events());
    let part = partition(&w.topo, shards);
    w.keep_shard(&part, me as u16, shards);
    if me > 0 {
        // What the build counted (its first packets), shard 0 counts.
        w.stats = FabricStats::default();
    }
    Ok(w.ready(width, fingerprint, trace))
}

impl World {
    /// What a shard tells the coordinator as it starts.
    pub(super) fn ready(&mut self, width: u64, fingerprint: String, trace: (u64, u64)) -> Ready {
        Ready {
            next: self.queue.peek().map(|k| k.t),
            width,
            fingerprint,
            trace,
        }
    }
}

/// Runs one window of a shard's world.
pub(super) fn window(w: &mut World, run: Run) -> Done {
    let late = run
        .inbox
        .iter()
        .filter_map(Mail::first_arrival)
        .min()
        .filter(|t| t.as_ps() < run.start);
    let emptied = w.take_mail(run.inbox);
    w.trace.held = Some(run.runs);
    let heads = w.kept_heads(run.start);
    let pending = w.run_one_window(run.start, run.end) + heads;
    let kept = run.hand_on.and_then(|bound| w.hand_on(bound));
    let runs = w
        .trace
        .held
        .as_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    // The lists the inbox came in hold the next window's outbox.
    let outbox = w
        .shard
        .as_mut()
        .map(|s| std::mem::replace(&mut s.outbox, emptied))
        .unwrap_or_default();
    Done {
        pending,
        next: w.queue.peek().map(|k| k.t),
        outbox,
        runs,
        host_events: w.take_host_events(),
        kept,
        late,
    }
}

/// Another shard's thread: take its world from `source`, say it is
/// ready, run windows as told, and at the end report its counters and
/// clock, and hand its world back if `give_back`.
fn shard_thread<S>(
    source: S,
    me: usize,
    spin: u32,
    commands: mpsc::Receiver<Command>,
    report: mpsc::Sender<(usize, Report)>,
    give_back: bool,
) where
    S: FnOnce() -> Result<(World, Ready), ShardError>,
{
    let mut w = match source() {
        Ok((w, ready)) => {
            let _ = report.send((me, Report::Ready(ready)));
            w
        }
        Err(e) => {
            let _ = report.send((me, Report::Failed(e)));
            return;
        }
    };
    while let Some(Command::Run(run)) = receive(&commands, spin) {
        let done = window(&mut w, run);
        if report.send((me, Report::Done(done))).is_err() {
            return;
        }
    }
    let (stats, now) = (w.stats.clone(), w.now);
    let world = give_back.then(|| Box::new(w));
    let _ = report.send((me, Report::Final((stats, now, world))));
}

/// The coordinator's side of the shards' threads.
pub(super) struct Crew<'a> {
    shards: usize,
    spin: u32,
    commands: &'a [mpsc::Sender<Command>],
    reports: &'a mpsc::Receiver<(usize, Report)>,
}

/// Starts threads for shards 1 to `shards - 1`, each taking its world
/// from `source(s)`, and runs `lead` on this thread (shard 0) with
/// their crew. The threads stop when `lead` returns.
pub(super) fn crew<S, R>(
    shards: usize,
    source: impl Fn(usize) -> S + Sync,
    give_back: bool,
    lead: impl FnOnce(&Crew) -> Result<R, ShardError>,
) -> Result<R, ShardError>
where
    S: FnOnce() -> Result<(World, Ready), ShardError> + Send,
{
    // Waiting shards spin a while before they sleep, if every thread has
    // a core of its own: a window is a fraction of a millisecond, and
    // waking a sleeping thread takes a good part of that.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let spin = if shards <= cores { SPIN } else { 0 };
    std::thread::scope(|scope| {
        let (report_tx, reports) = mpsc::channel::<(usize, Report)>();
        let mut commands = Vec::with_capacity(shards);
        for me in 1..shards {
            let (tx, rx) = mpsc::channel::<Command>();
            commands.push(tx);
            let report = report_tx.clone();
            let src = source(me);
            scope.spawn(move || shard_thread(src, me, spin, rx, report, give_back));
        }
        drop(report_tx);
        let crew = Crew {
            shards,
            spin,
            commands: &commands,
            reports: &reports,
        };
        let result = lead(&crew);
        for c in &commands {
            let _ = c.send(Command::Finish);
        }
        result
    })
}

/// What the coordinator carries from window to window, and for a split
/// world from one run to the next.
#[derive(Debug)]
pub(super) struct Between {
    /// Per receiving shard, per sending shard: what it has to take in.
    pub(super) inboxes: Vec<Vec<Mail>>,
    spare_runs: Vec<Vec<RunDigest>>,
    /// The most events pending at once, over the shards.
    pub(super) deepest: u64,
}

impl Between {
    pub(super) fn new(shards: usize) -> Between {
        Between {
            inboxes: (0..shards)
                .map(|_| (0..shards).map(|_| Mail::default()).collect())
                .collect(),
            spare_runs: (0..shards).map(|_| Vec::new()).collect(),
            deepest: 0,
        }
    }

    /// The earliest arrival of a packet between shards.
    pub(super) fn first_arrival(&self) -> Option<Instant> {
        self.inboxes
            .iter()
            .flatten()
            .filter_map(Mail::first_arrival)
            .min()
    }
}

impl Crew<'_> {
    fn stopped(s: usize) -> ShardError {
        ShardError::Stopped(s, "its thread has ended".into())
    }

    fn out_of_step(s: usize) -> ShardError {
        ShardError::Stopped(s, "out of step".into())
    }

    fn receive(&self) -> Result<(usize, Report), ShardError> {
        match receive(self.reports, self.spin) {
            Some((s, Report::Failed(e))) => Err(ShardError::Stopped(s, e.to_string())),
            Some(r) => Ok(r),
            None => Err(ShardError::Lost),
        }
    }

    /// Waits for every other shard to be ready, checks that each built
    /// the world shard 0 did, and gives every shard's first event time.
    pub(super) fn handshake(&self, ready0: &Ready) -> Result<Vec<Option<Instant>>, ShardError> {
        let mut next = vec![None; self.shards];
        next[0] = ready0.next;
        for _ in 1..self.shards {
            match self.receive()? {
                (s, Report::Ready(r)) => {
                    if r.fingerprint != ready0.fingerprint {
                        return Err(ShardError::Differ(
                            s,
                            format!("{} against {}", r.fingerprint, ready0.fingerprint),
                        ));
                    }
                    next[s] = r.next;
                }
                (s, _) => return Err(Self::out_of_step(s)),
            }
        }
        Ok(next)
    }

    /// Window after window, as [`World::run_for`] runs them on one
    /// thread (`w0` is shard 0's world, `next` each shard's next event
    /// time): until no shard has anything left and no packet is between
    /// shards ([`Ran::Idle`]), the next thing is past the limit
    /// ([`Ran::Limit`]), or the trace has counted the budget's events
    /// ([`Ran::Budget`], between two windows). The node runs fold into
    /// `trace`, the host events join `host_events`.
    pub(super) fn windows(
        &self,
        w0: &mut World,
        next: &mut [Option<Instant>],
        Bounds {
            width,
            limit,
            stop_at,
        }: Bounds,
        between: &mut Between,
        trace: &mut Trace,
        host_events: &mut Vec<HostEvent>,
    ) -> Result<Ran, ShardError> {
        let shards = self.shards;
        let mut done: Vec<Option<Done>> = (0..shards).map(|_| None).collect();
        loop {
            let in_mail = between.first_arrival();
            let Some(t) = next.iter().flatten().copied().chain(in_mail).min() else {
                return Ok(Ran::Idle);
            };
            if t > limit {
                return Ok(Ran::Limit);
            }
            if trace.events() >= stop_at {
                return Ok(Ran::Budget);
            }
            let (start, end) = windows::span(t, width, limit);
            let mut runs = std::mem::take(&mut between.spare_runs).into_iter();
            let inboxes = &mut between.inboxes;
            let mut order = |s: usize| Run {
                start,
                end,
                inbox: std::mem::take(&mut inboxes[s]),
                runs: runs.next().unwrap_or_default(),
                hand_on: None,
            };
            let own = order(0);
            for (s, c) in self.commands.iter().enumerate().map(|(i, c)| (i + 1, c)) {
                c.send(Command::Run(order(s)))
                    .map_err(|_| Self::stopped(s))?;
            }
            done[0] = Some(window(w0, own));
            for _ in 1..shards {
                match self.receive()? {
                    (s, Report::Done(d)) => done[s] = Some(d),
                    (s, _) => return Err(Self::out_of_step(s)),
                }
            }
            let mut pending = 0;
            let mut run_lists = Vec::with_capacity(shards);
            let mut event_lists = Vec::with_capacity(shards);
            for (s, d) in done.iter_mut().enumerate() {
                let d = d.take().ok_or_else(|| Self::out_of_step(s))?;
                if let Some(t) = d.late {
                    return Err(ShardError::Stopped(
                        s,
                        format!("a packet due at {t} came after its window began at {start} ps"),
                    ));
                }
                pending += d.pending;
                next[s] = d.next;
                run_lists.push(d.runs);
                event_lists.push(d.host_events);
                for (to, mail) in d.outbox.into_iter().enumerate() {
                    between.inboxes[to].resize_with(shards, Mail::default);
                    between.inboxes[to][s] = mail;
                }
            }
            between.deepest = between.deepest.max(pending);
            between.spare_runs = merge_into(run_lists, |r| r.0, |r| trace.take_run(r));
            merge_into(event_lists, |e| e.host.0, |e| host_events.push(e));
        }
    }

    /// Tells every other shard to stop and gathers what each has at the
    /// end, shard 0's (`w0`) first.
    pub(super) fn finish(&self, w0: &World) -> Result<Vec<Final>, ShardError> {
        for c in self.commands {
            c.send(Command::Finish).map_err(|_| ShardError::Lost)?;
        }
        let mut finals: Vec<Final> = vec![(w0.stats.clone(), w0.now, None)];
        finals.resize_with(self.shards, || {
            (FabricStats::default(), Instant::ZERO, None)
        });
        for _ in 1..self.shards {
            match self.receive()? {
                (s, Report::Final(f)) => finals[s] = f,
                (s, _) => return Err(Self::out_of_step(s)),
            }
        }
        Ok(finals)
    }
}

/// Hands `take` the items of `lists`, each list already in order of
/// `node`, in that order (each node's items are in one list only, so
/// ties cannot come up between lists), and hands back the emptied lists,
/// in their order, for their room to be used again.
pub(super) fn merge_into<T>(
    mut lists: Vec<Vec<T>>,
    node: impl Fn(&T) -> u32,
    mut take: impl FnMut(T),
) -> Vec<Vec<T>> {
    {
        let mut drains: Vec<_> = lists.iter_mut().map(|l| l.drain(..).peekable()).collect();
        loop {
            let mut best: Option<(usize, u32)> = None;
            for (i, d) in drains.iter_mut().enumerate() {
                if let Some(x) = d.peek() {
                    let n = node(x);
                    if best.is_none_or(|(_, b)| n < b) {
                        best = Some((i, n));
                    }
                }
            }
            let Some((i, n)) = best else {
                break;
            };
            while let Some(x) = drains[i].next_if(|x| node(x) == n) {
                take(x);
            }
        }
    }
    lists
}

impl World {
    /// Whether this world can run split across threads, or what stops it.
    pub fn shardable(&self) -> Result<(), String> {
        if let Some(r) = self.faults.rules().iter().find(|r| !r.draws_by_packet()) {
            return Err(format!(
                "fault rule {:?}: its verdicts depend on the packets it judged before (an n-th packet target, correlation, Gilbert-Elliott, a reorder gap), which they would see in another order",
                r.name
            ));
        }
        if self.pcap.is_some() {
            return Err("a capture is set up".into());
        }
        if self.trace.has_sink() {
            // Each thread would write its own nodes' events.
            return Err("a trace sink is set up (a split run has its hash, not its events)".into());
        }
        if self.watch.is_some() {
            return Err("a ladder journal is set up".into());
        }
        Ok(())
    }

    /// What identifies the world a build made, for the shards to compare.
    pub(super) fn fingerprint(&self) -> String {
        format!(
            "{} nodes, {} events pending, {} packets sent, trace {:016x}, at {}",
            self.topo.nodes.len(),
            self.queue.len(),
            self.serial,
            self.trace.hash(),
            self.now
        )
    }

    /// Keeps shard `me`'s part of the world (`part`: each node's shard):
    /// its nodes' events, the lines that reach its nodes, and a stand-in
    /// for each packet on a line from its nodes to another shard's; the
    /// other shards' hosts give their state back, and only the run of
    /// hosts from this shard's first to its last stays (`HostTable`).
    fn keep_shard(&mut self, part: &[u16], me: u16, shards: usize) {
        let mine = |n: NodeId| part[n as usize] == me;
        let hosts: Vec<bool> = self.topo.hosts.iter().map(|&n| mine(n)).collect();
        self.hosts.keep_run(&hosts, self.phantom_payload);
        let mut queue = std::mem::take(&mut self.queue);
        let mut dropped = Vec::new();
        queue.retain(|k| {
            let keep = mine(self.owner(k as u32));
            if !keep {
                dropped.push(k as u32);
            }
            keep
        });
        self.queue = queue;
        for slot in dropped {
            // Another shard's event: its data leaves the slab.
            drop(self.decode(slot));
        }
        for (p, st) in self.ports.iter_mut().enumerate() {
            let from = self.topo.ports[p].node;
            let to = st.hot.peer;
            st.hot.to_shard = part[to as usize];
            st.hot.remote = mine(from) && !mine(to);
            if !mine(to) {
                if mine(from) {
                    for f in st.flight.iter_mut() {
                        *f = f.stand_in();
                    }
                } else {
                    st.flight.clear();
                }
                // Its ahead arrivals' keys went with the other shard's.
                if let Some(line) = self.ahead.get_mut(p) {
                    line.clear();
                }
            }
            if !mine(from) {
                // Only the sender judges its queue.
                st.waiting = 0;
                st.queued_bytes = 0;
            }
        }
        self.trace.held = Some(Vec::new());
        self.shard = Some(Box::new(Shard {
            outbox: (0..shards).map(|_| Mail::default()).collect(),
            keep: false,
            keeping: Vec::new(),
            stand_ins_from: vec![0; self.ports.len()],
        }));
    }
}

impl FabricStats {
    /// Adds another shard's counters (maxima stay maxima).
    pub(super) fn absorb(&mut self, o: &FabricStats) {
        self.events += o.events;
        self.packet_hops += o.packet_hops;
        self.delivered += o.delivered;
        self.sent += o.sent;
        for (r, n) in &o.dropped {
            *self.dropped.entry(*r).or_default() += n;
        }
        for (r, n) in &o.fault_drops {
            *self.fault_drops.entry(*r).or_default() += n;
        }
        self.lane_dropped += o.lane_dropped;
        self.duplicated += o.duplicated;
        self.delayed += o.delayed;
        self.corrupted += o.corrupted;
        self.ecn_marked += o.ecn_marked;
        self.trimmed += o.trimmed;
        self.control_ahead += o.control_ahead;
        self.max_queue_bytes = self.max_queue_bytes.max(o.max_queue_bytes);
        self.max_rx_wait_ps = self.max_rx_wait_ps.max(o.max_rx_wait_ps);
        self.max_lane_work_ps = self.max_lane_work_ps.max(o.max_lane_work_ps);
        self.max_event_queue = self.max_event_queue.max(o.max_event_queue);
        self.reordered += o.reordered;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters add up across shards and maxima stay maxima, every field
    /// (the stories of tests/shards.rs leave several at zero: no faults
    /// in a split run).
    #[test]
    fn counters_add_up_and_maxima_stay_maxima() {
        let one = |n: u64| FabricStats {
            events: n,
            packet_hops: 2 * n,
            delivered: 3 * n,
            sent: 4 * n,
            dropped: [(DropReason::QueueFull, 5 * n), (DropReason::Mtu, n)].into(),
            fault_drops: [(0, n), (2, 2 * n)].into(),
            lane_dropped: 17 * n,
            duplicated: 6 * n,
            delayed: 7 * n,
            corrupted: 8 * n,
            ecn_marked: 9 * n,
            trimmed: 10 * n,
            control_ahead: 11 * n,
            max_queue_bytes: 12 * n,
            max_event_queue: 13 * n,
            reordered: 14 * n,
            max_rx_wait_ps: 15 * n,
            max_lane_work_ps: 16 * n,
        };
        let mut sum = one(2);
        sum.absorb(&one(3));
        let mut want = one(5);
        want.max_queue_bytes = 36;
        want.max_event_queue = 39;
        want.max_rx_wait_ps = 45;
        want.max_lane_work_ps = 48;
        assert_eq!(sum, want);
        sum.absorb(&FabricStats::default());
        assert_eq!(sum, want, "nothing added");
    }
}
