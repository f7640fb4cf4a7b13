//! Ranks: a split run whose shards are processes, one per rank of an
//! engine that carries messages between them (MPI under `mpiexec` or
//! Slurm's `srun`; [`LocalRanks`] on threads, for tests).
//!
//! It is the run of `shards`, with the coordinator gone: every rank runs
//! its shard's part of a window, then all ranks make one exchange
//! ([`Ranks::exchange`]). What rank `s` sends rank `r` holds the packets
//! `s` gave to ports whose far end `r` runs, `s`'s next event time and
//! the earliest arrival among everything `s` handed on; what it sends
//! rank 0 also holds its node runs, which rank 0 folds into the trace in
//! node order as the coordinator would. So after one exchange every rank
//! knows the same earliest time anything is due, and starts the same
//! next window there (empty windows are skipped), and the run comes out
//! as one thread runs it: the same trace, counters and clock. Each
//! message also says its rank's events and packets sent so far, so that
//! a run in slices ([`RankedWorld::run_for`]) ends each slice at the same
//! window on every rank; between slices [`RankedWorld::any`] is one more
//! small exchange, to agree whether to stop.
//!
//! At the start the ranks greet each other with what identifies their
//! run (the caller's words: the file, the seed, the build) and the
//! fingerprint of the world each built; any difference stops every rank
//! with the same error, naming the first rank that differs. A message
//! that does not parse stops the run naming its rank and byte.
//!
//! Children: `wire` (the messages as bytes), `packed` ([`Packed`]:
//! messages end to end, as MPI moves them) and `local` ([`LocalRanks`]).

mod local;
mod packed;
mod wire;

pub use local::LocalRanks;
pub use packed::Packed;

use super::mail::Mail;
use super::shards::{merge_into, prepare_in_place, window, Run};
use super::*;
use crate::trace::RunDigest;
use wire::{Reader, Writer};

/// The engine that carries messages between ranks.
pub trait Ranks {
    /// This rank, from 0.
    fn rank(&self) -> usize;
    /// How many ranks run.
    fn size(&self) -> usize;
    /// One all-to-all exchange, which every rank makes together: `out[r]`
    /// goes to rank `r` (`out` has one entry per rank, this one's
    /// included); the result's entry `r` is what rank `r` sent here.
    /// Fails when the ranks cannot exchange (a rank died).
    fn exchange(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String>;
    /// The same exchange with the messages laid end to end in one buffer
    /// each way, as the windows send them: an engine that moves one
    /// buffer (MPI's all-to-all with counts) overrides it and spares the
    /// copies, which at k=64 are tens of MiB a window. By default it goes
    /// through [`Ranks::exchange`].
    fn exchange_packed(&mut self, out: Packed) -> Result<Packed, String> {
        let got = self.exchange(out.split())?;
        Ok(Packed::join(got))
    }
}

/// Ranks behind a box (a scenario runner's, whatever engine carries them).
impl<R: Ranks + ?Sized> Ranks for Box<R> {
    fn rank(&self) -> usize {
        (**self).rank()
    }
    fn size(&self) -> usize {
        (**self).size()
    }
    fn exchange(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
        (**self).exchange(out)
    }
    fn exchange_packed(&mut self, out: Packed) -> Result<Packed, String> {
        (**self).exchange_packed(out)
    }
}

/// Message kinds, the first byte of every message.
const GREETING: u8 = 0x47;
const WINDOW: u8 = 0x57;
const FIGURES: u8 = 0x46;
/// Kept packets due in the next window, when it starts later than the
/// end of the last ("H").
const HAND_ON: u8 = 0x48;
/// Whether to stop between two slices of a run ("S").
const STOP: u8 = 0x53;

/// What one rank exchanged over a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exchanged {
    /// Windows run.
    pub windows: u64,
    /// Empty windows skipped over (nothing was due in them anywhere).
    pub skipped: u64,
    /// Bytes sent to other ranks (every message, headers included).
    pub bytes: u64,
    /// Messages to other ranks that carried packets.
    pub messages: u64,
    /// Packets handed to other ranks.
    pub packets: u64,
}

/// What a run on ranks did, as rank 0 gathers it ([`RankedWorld::gather`]).
#[derive(Debug)]
pub struct RankedRun {
    /// The fabric's counters, summed over the ranks.
    pub stats: FabricStats,
    /// The run's trace hash.
    pub trace_hash: u64,
    /// Its event count.
    pub trace_events: u64,
    /// Simulated time at the end: the latest event run on any rank.
    pub now: Instant,
    /// The window width.
    pub window: Duration,
    /// What each rank exchanged, by rank.
    pub ranks: Vec<Exchanged>,
}

/// This rank's shard of a world run on ranks (see the module
/// documentation).
pub struct RankedWorld<R: Ranks> {
    world: World,
    ranks: R,
    identity: String,
    /// Whether this rank has kept its shard and greeted the others (at
    /// the first run).
    split: bool,
    /// Each node's rank, from the split on.
    part: Vec<u16>,
    /// A host whose NIC was worked on from outside its app after the
    /// split.
    touched: Option<u32>,
    width: u64,
    /// The earliest time anything is due on any rank, as every rank
    /// agreed at the last exchange.
    next: Option<Instant>,
    /// The earliest arrival of a packet any rank still keeps (`kept`),
    /// as of the last exchange.
    kept: Option<Instant>,
    spare_runs: Vec<RunDigest>,
    /// The last window's outbox, emptied, to hold the next one's if it
    /// is small ([`Packed::SPARE_BYTES`]): lists grown from nothing each
    /// window cost their pages' faults.
    spare_outbox: Vec<Mail>,
    /// The lists rank 0 read the last window's node runs into, emptied.
    run_lists: Vec<Vec<RunDigest>>,
    /// The room of the last message read, kept for the next one written
    /// when it is small ([`Packed::spare`]): fresh room each window cost
    /// its pages' faults.
    spare_bytes: Vec<u8>,
    /// On rank 0 the run's trace; elsewhere the build's.
    trace: Trace,
    host_events: Vec<HostEvent>,
    /// The most events pending at once over the ranks (rank 0).
    deepest: u64,
    /// Where the last window ended.
    last_end: Option<u64>,
    exchanged: Exchanged,
    /// Events run and packets sent over every rank, as of the last
    /// window (each rank's message says its own).
    so_far: (u64, u64),
}

impl<R: Ranks> std::fmt::Debug for RankedWorld<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankedWorld")
            .field("rank", &self.ranks.rank())
            .field("ranks", &self.ranks.size())
            .finish_non_exhaustive()
    }
}

impl<R: Ranks> RankedWorld<R> {
    /// Takes `world` (built the same way on every rank) to run on
    /// `ranks`: checks that it can be split and puts it in windows. Apps
    /// are installed on every host, on every rank, before the first run
    /// ([`RankedWorld::set_app`]); the first run keeps this rank's shard
    /// and greets the other ranks: each must have been started with the
    /// same `identity` and have built the same world, or every rank
    /// fails alike.
    pub fn new(mut world: World, ranks: R, identity: &str) -> Result<RankedWorld<R>, ShardError> {
        let (size, me) = (ranks.size(), ranks.rank());
        if size == 0 || size > MAX_SHARDS || me >= size {
            return Err(ShardError::Count(size));
        }
        world.shardable().map_err(ShardError::Unsupported)?;
        // The apps to come start on every host, but only this rank's keep
        // their state.
        world.build_for_shard(&partition(&world.topo, size), me as u16);
        let width = world
            .set_event_order(EventOrder::Windows)?
            .map_or(u64::MAX, |d| d.as_ps());
        let trace = Trace::continuing((world.trace.hash(), world.trace.events()));
        Ok(RankedWorld {
            world,
            ranks,
            identity: identity.to_string(),
            split: false,
            part: Vec::new(),
            touched: None,
            width,
            next: None,
            kept: None,
            spare_runs: Vec::new(),
            spare_outbox: Vec::new(),
            run_lists: Vec::new(),
            spare_bytes: Vec::new(),
            trace,
            host_events: Vec::new(),
            deepest: 0,
            last_end: None,
            exchanged: Exchanged::default(),
            so_far: (0, 0),
        })
    }

    /// Installs `app` on host `h` and starts it, before the first run:
    /// every rank installs every host's app, as one process would, so
    /// that each starts from the same state; the split then gives back
    /// the apps of the hosts other ranks run.
    pub fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), ShardError> {
        if self.split {
            return Err(ShardError::Unsupported(format!(
                "host {h}: a run on ranks takes its apps before it first runs"
            )));
        }
        Ok(self.world.set_app(h, app)?)
    }

    /// Host `h`'s NIC, to work on from outside its app: after the split
    /// no other rank can make the same change, so the next run is
    /// refused, naming the host.
    pub fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        if self.split {
            self.touched.get_or_insert(h.0);
        }
        self.world.nic_mut(h)
    }

    /// The first run: keeps this rank's shard and greets the others.
    fn split(&mut self) -> Result<(), ShardError> {
        let (size, me) = (self.size(), self.rank());
        let ready = prepare_in_place(&mut self.world, size, me)?;
        self.world.keep_on_lines();
        self.split = true;
        self.part = partition(&self.world.topo, size);
        self.trace = Trace::continuing(ready.trace);
        let mut w = Writer::default();
        w.u8(GREETING);
        w.blob(self.identity.as_bytes());
        w.blob(ready.fingerprint.as_bytes());
        w.u64(ready.width);
        w.time(ready.next);
        let greetings = self
            .ranks
            .exchange(vec![w.bytes; size])
            .map_err(|e| ShardError::Stopped(me, e))?;
        let mut first: Option<(String, String, u64)> = None;
        let mut next = None;
        for (r, g) in greetings.iter().enumerate() {
            let bad = |e: String| ShardError::Stopped(r, e);
            let mut rd = Reader::new(g, r);
            if rd.u8("kind").map_err(bad)? != GREETING {
                return Err(bad(format!("rank {r} did not greet (is it a udrma rank?)")));
            }
            let id = String::from_utf8_lossy(rd.blob("identity").map_err(bad)?).into_owned();
            let fp = String::from_utf8_lossy(rd.blob("fingerprint").map_err(bad)?).into_owned();
            let width = rd.u64("width").map_err(bad)?;
            let t = rd.time("next event").map_err(bad)?;
            rd.end().map_err(bad)?;
            match &first {
                None => first = Some((id, fp, width)),
                Some((id0, fp0, width0)) => {
                    if id != *id0 {
                        return Err(ShardError::Started(
                            r,
                            format!("it runs {id}; rank 0 runs {id0}"),
                        ));
                    }
                    if fp != *fp0 || width != *width0 {
                        return Err(ShardError::Differ(r, format!("{fp} against {fp0}")));
                    }
                }
            }
            next = next.into_iter().chain(t).min();
        }
        self.next = next;
        Ok(())
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.ranks.rank()
    }

    /// The ranks the run is split into.
    pub fn size(&self) -> usize {
        self.ranks.size()
    }

    /// This rank's world: its own nodes' state (the other ranks' hosts
    /// were given back).
    pub fn world(&self) -> &World {
        &self.world
    }

    /// One exchange of the caller's own among the ranks (every rank
    /// calls it together; see [`Ranks::exchange`]): what a runner
    /// gathers after the run.
    pub fn exchange(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, ShardError> {
        let me = self.rank();
        self.ranks
            .exchange(out)
            .map_err(|e| ShardError::Stopped(me, e))
    }

    /// Whether this rank runs host `h` (before the first run, every
    /// host is here: every rank installs every app).
    pub fn is_local(&self, h: NodeAddr) -> bool {
        let Some(&node) = self.world.topo.hosts.get(h.0 as usize) else {
            return false;
        };
        !self.split || self.part.get(node as usize).map(|&s| usize::from(s)) == Some(self.rank())
    }

    /// The events of this rank's hosts (those without apps), in order.
    pub fn take_host_events(&mut self) -> Vec<HostEvent> {
        std::mem::take(&mut self.host_events)
    }

    /// Nothing left to happen on this rank: no event, no packet from
    /// another rank waiting, none kept for another rank, every NIC idle.
    pub fn is_idle_here(&self) -> bool {
        self.world.is_idle() && self.world.first_kept().is_none()
    }

    /// When the next thing is due on any rank (every rank calls it
    /// together, after a run that stopped at its limit): each rank's
    /// next live event ([`World::peek_time`]) or packet from another
    /// rank, at the earliest.
    pub fn peek_time(&mut self) -> Result<Option<Instant>, ShardError> {
        let mine = self
            .world
            .peek_time()
            .into_iter()
            .chain(self.world.first_kept())
            .min();
        let mut w = Writer::default();
        w.time(mine);
        let got = self.exchange(vec![w.bytes; self.size()])?;
        let mut next = None;
        for (r, bytes) in got.iter().enumerate() {
            let mut rd = Reader::new(bytes, r);
            let t = rd
                .time("next event")
                .map_err(|e| ShardError::Stopped(r, e))?;
            rd.end().map_err(|e| ShardError::Stopped(r, e))?;
            next = next.into_iter().chain(t).min();
        }
        Ok(next)
    }

    /// The run's trace so far on rank 0 (elsewhere, the build's).
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// What this rank exchanged so far.
    pub fn exchanged(&self) -> &Exchanged {
        &self.exchanged
    }

    /// Events run and packets sent over every rank, as every rank agreed
    /// at the end of the last window.
    pub fn so_far(&self) -> (u64, u64) {
        self.so_far
    }

    /// Whether any rank asks to stop (every rank calls it together,
    /// between two slices of a run, each with its own `mine`): so that
    /// all stop at the same window, whichever was asked.
    pub fn any(&mut self, mine: bool) -> Result<bool, ShardError> {
        let got = self.exchange(vec![vec![STOP, u8::from(mine)]; self.size()])?;
        let mut any = false;
        for (r, bytes) in got.iter().enumerate() {
            let bad = |e: String| ShardError::Stopped(r, e);
            let mut rd = opened(bytes, r, STOP, "between slices")?;
            any |= match rd.u8("stop").map_err(bad)? {
                0 => false,
                1 => true,
                x => return Err(bad(format!("rank {r}'s stop flag is {x}, not 0 or 1"))),
            };
            rd.end().map_err(bad)?;
        }
        Ok(any)
    }

    /// Runs windows, all ranks together, until nothing is due anywhere
    /// (true) or the next thing is due after `limit` (false).
    pub fn run_until(&mut self, limit: Instant) -> Result<bool, ShardError> {
        Ok(self.run_for(limit, u64::MAX)? == Ran::Idle)
    }

    /// [`RankedWorld::run_until`] in slices, as [`World::run_for`] runs
    /// one world in windows: it also returns ([`Ran::Budget`]) at the
    /// end of the window in which about `events` more events have run
    /// over all ranks, with more still due before `limit`. The count is
    /// the one every rank agreed ([`RankedWorld::so_far`]), so every rank
    /// returns after the same window.
    pub fn run_for(&mut self, limit: Instant, events: u64) -> Result<Ran, ShardError> {
        if let Some(h) = self.touched {
            return Err(ShardError::Unsupported(format!(
                "host h{h}'s NIC was worked on outside its app, which the other ranks cannot repeat"
            )));
        }
        if !self.split {
            self.split()?;
        }
        let (size, me) = (self.size(), self.rank());
        let width = self.width;
        let stop_at = self.so_far.0.saturating_add(events);
        loop {
            let Some(t) = self.next else {
                return Ok(Ran::Idle);
            };
            if t > limit {
                return Ok(Ran::Limit);
            }
            if self.so_far.0 >= stop_at {
                return Ok(Ran::Budget);
            }
            let (start, end) = windows::span(t, width, limit);
            if self.kept.is_some_and(|k| k.as_ps() < end) {
                // The window starts later than the last one ended: what
                // is kept for it goes now.
                self.hand_on(end)?;
            }
            if let Some(last) = self.last_end {
                if t.as_ps() < last {
                    return Err(ShardError::Stopped(
                        me,
                        format!("something is due at {t}, before the last window ended at {last} ps: the ranks are out of step"),
                    ));
                }
                self.exchanged.skipped += start.saturating_sub(last) / width;
            }
            self.last_end = Some(end);
            self.exchanged.windows += 1;
            let run = Run {
                start,
                end,
                // Packets from other ranks went on this rank's lines as
                // they were read: the inbox is only room for the outbox.
                inbox: std::mem::take(&mut self.spare_outbox),
                runs: std::mem::take(&mut self.spare_runs),
                // What the next window needs if it starts where this one
                // ends.
                hand_on: Some(windows::span(Instant(end), width, limit).1),
            };
            // (An empty inbox, so never a late one: a packet read after its
            // window began shows as something due before the last
            // window ended, above.)
            let mut done = window(&mut self.world, run);
            self.host_events.append(&mut done.host_events);
            let kept = done.kept;
            done.outbox.resize_with(size, Mail::default);
            let first_out = done.outbox.iter().filter_map(Mail::first_arrival).min();
            let runs = std::mem::take(&mut done.runs);
            let counts = (self.world.stats.events, self.world.stats.sent);
            let out = self.post(&mut done.outbox, |w, r| {
                w.u8(WINDOW);
                w.time(done.next);
                w.time(first_out);
                w.time(kept);
                w.u64(done.pending);
                w.u64(counts.0);
                w.u64(counts.1);
                Some(if r == 0 { &runs[..] } else { &[] })
            });
            let mut spare = runs;
            spare.clear();
            self.spare_runs = spare;
            let got = self
                .ranks
                .exchange_packed(out)
                .map_err(|e| ShardError::Stopped(me, e))?;
            self.spare_outbox = (done.outbox.into_iter())
                .map(|m| m.spare(Packed::SPARE_BYTES))
                .collect();
            self.take_window(got)?;
        }
    }

    /// Reads every rank's message of a window: the packets for this
    /// rank's lines go on them, every rank learns when the next thing is
    /// due and what is still kept, and rank 0 adds the node runs to the
    /// trace.
    fn take_window(&mut self, got: Packed) -> Result<(), ShardError> {
        let (size, me) = (self.size(), self.rank());
        let ports = self.world.ports.len();
        let mut next: Option<Instant> = None;
        let mut kept_any: Option<Instant> = None;
        let mut pending = 0;
        let mut so_far = (0u64, 0u64);
        // Rank 0 reads the node runs into the lists it read the last
        // window's into.
        let mut run_lists = std::mem::take(&mut self.run_lists);
        run_lists.resize_with(if me == 0 { size } else { 1 }, Vec::new);
        for r in 0..size {
            let bad = |e: String| ShardError::Stopped(r, e);
            let mut rd = opened(got.part(r), r, WINDOW, "a window")?;
            let theirs = rd.time("next event").map_err(bad)?;
            let handed = rd.time("first arrival").map_err(bad)?;
            let kept = rd.time("first kept").map_err(bad)?;
            next = next
                .into_iter()
                .chain(theirs)
                .chain(handed)
                .chain(kept)
                .min();
            kept_any = kept_any.into_iter().chain(kept).min();
            pending += rd.u64("pending").map_err(bad)?;
            so_far.0 = so_far.0.saturating_add(rd.u64("events").map_err(bad)?);
            so_far.1 = so_far
                .1
                .saturating_add(rd.u64("packets sent").map_err(bad)?);
            self.world.mail_each(&mut rd, ports).map_err(bad)?;
            let runs = &mut run_lists[if me == 0 { r } else { 0 }];
            rd.runs(runs).map_err(bad)?;
            rd.end().map_err(bad)?;
            if me != 0 && !runs.is_empty() {
                return Err(bad(format!("rank {r} sent node runs to rank {me}")));
            }
        }
        self.spare_bytes = Packed::spare(got.bytes);
        self.next = next;
        self.kept = kept_any;
        self.so_far = so_far;
        if me == 0 {
            self.deepest = self.deepest.max(pending);
            let trace = &mut self.trace;
            run_lists = merge_into(run_lists, |r| r.0, |r| trace.take_run(r));
        }
        self.run_lists = run_lists;
        Ok(())
    }

    /// Writes each rank's message: `head` writes its first fields (and
    /// gives the node runs to end it with, if any), then the mail for
    /// that rank, whose packets' room then serves the packets sent next.
    /// Counts what goes to other ranks.
    fn post<'a>(
        &mut self,
        outbox: &mut [Mail],
        head: impl Fn(&mut Writer, usize) -> Option<&'a [RunDigest]>,
    ) -> Packed {
        let me = self.rank();
        let room = outbox.iter().map(|m| 48 + Writer::mail_len(m)).sum();
        let mut w = Writer::reusing(std::mem::take(&mut self.spare_bytes), room);
        let mut lens = Vec::with_capacity(outbox.len());
        for (r, mail) in outbox.iter_mut().enumerate() {
            let from = w.bytes.len();
            let runs = head(&mut w, r);
            w.mail(mail);
            if let Some(runs) = runs {
                w.runs(runs);
            }
            let len = w.bytes.len() - from;
            if r != me {
                let packets = (mail.line.len() + mail.ahead.len()) as u64;
                self.exchanged.bytes += len as u64;
                self.exchanged.packets += packets;
                self.exchanged.messages += u64::from(packets > 0);
            }
            for (_, f) in mail.line.drain(..) {
                self.world.recycle(f.pkt.bytes);
            }
            for (_, _, f) in mail.ahead.drain(..) {
                self.world.recycle(f.pkt.bytes);
            }
            lens.push(len);
        }
        Packed {
            bytes: w.bytes,
            lens,
        }
    }

    /// Every rank hands on the packets it keeps that arrive before `end`
    /// (ps), and all learn what is still kept: one exchange, no window.
    fn hand_on(&mut self, end: u64) -> Result<(), ShardError> {
        let (size, me) = (self.size(), self.rank());
        let ports = self.world.ports.len();
        let kept = self.world.hand_on(end);
        let mut outbox = self.world.take_outbox(size);
        let out = self.post(&mut outbox, |w, _| {
            w.u8(HAND_ON);
            w.time(kept);
            None
        });
        self.world.give_back_outbox(outbox);
        let got = self
            .ranks
            .exchange_packed(out)
            .map_err(|e| ShardError::Stopped(me, e))?;
        let mut kept_any: Option<Instant> = None;
        for r in 0..size {
            let bad = |e: String| ShardError::Stopped(r, e);
            let mut rd = opened(got.part(r), r, HAND_ON, "handing on")?;
            let kept = rd.time("first kept").map_err(bad)?;
            kept_any = kept_any.into_iter().chain(kept).min();
            self.world.mail_each(&mut rd, ports).map_err(bad)?;
            rd.end().map_err(bad)?;
        }
        self.spare_bytes = Packed::spare(got.bytes);
        self.kept = kept_any;
        Ok(())
    }

    /// Gathers every rank's counters, clock and exchange figures on rank
    /// 0 (every rank calls it together): `Some` on rank 0, `None`
    /// elsewhere.
    pub fn gather(&mut self) -> Result<Option<RankedRun>, ShardError> {
        let (size, me) = (self.size(), self.rank());
        let mut w = Writer::default();
        w.u8(FIGURES);
        let stats = postcard::to_stdvec(&self.world.stats)
            .map_err(|e| ShardError::Stopped(me, format!("its counters: {e}")))?;
        w.blob(&stats);
        w.u64(self.world.now.as_ps());
        let x = &self.exchanged;
        for v in [x.windows, x.skipped, x.bytes, x.messages, x.packets] {
            w.u64(v);
        }
        let mut out = vec![Vec::new(); size];
        out[0] = w.bytes;
        let got = self
            .ranks
            .exchange(out)
            .map_err(|e| ShardError::Stopped(me, e))?;
        if me != 0 {
            return Ok(None);
        }
        let mut run = RankedRun {
            stats: FabricStats::default(),
            trace_hash: self.trace.hash(),
            trace_events: self.trace.events(),
            now: Instant::ZERO,
            window: Duration::from_ps(self.width),
            ranks: Vec::with_capacity(size),
        };
        for (r, bytes) in got.iter().enumerate() {
            let bad = |e: String| ShardError::Stopped(r, e);
            let mut rd = opened(bytes, r, FIGURES, "its figures")?;
            let stats: FabricStats = postcard::from_bytes(rd.blob("counters").map_err(bad)?)
                .map_err(|e| bad(format!("rank {r}'s counters: {e}")))?;
            let now = Instant(rd.u64("clock").map_err(bad)?);
            let mut f = [0u64; 5];
            for v in &mut f {
                *v = rd.u64("figures").map_err(bad)?;
            }
            rd.end().map_err(bad)?;
            run.stats.absorb(&stats);
            run.now = run.now.max(now);
            let [windows, skipped, bytes, messages, packets] = f;
            run.ranks.push(Exchanged {
                windows,
                skipped,
                bytes,
                messages,
                packets,
            });
        }
        run.stats.max_event_queue = run.stats.max_event_queue.max(self.deepest);
        Ok(Some(run))
    }
}

/// Rank `r`'s message `bytes`, read past its first byte, which must be
/// `kind` (what every rank is `doing`): otherwise the ranks are out of
/// step.
fn opened<'a>(bytes: &'a [u8], r: usize, kind: u8, doing: &str) -> Result<Reader<'a>, ShardError> {
    let mut rd = Reader::new(bytes, r);
    let first = rd.u8("kind").map_err(|e| ShardError::Stopped(r, e))?;
    if first != kind {
        return Err(ShardError::Stopped(
            r,
            format!("rank {r} is out of step (not {doing})"),
        ));
    }
    Ok(rd)
}

/// How many packets are read ahead of the one put on its line: each
/// port's state is asked for as its packet is read, and where the line
/// takes its entry half way (the lines of another rank's packets are
/// cold: one process writes an entry as its sender queues it).
const TAKE_AHEAD: usize = 16;

impl World {
    /// Puts the packets a rank's message carries on this world's lines,
    /// their datagrams in room from the packet pool (what this rank sent
    /// gave it back).
    fn mail_each(&mut self, rd: &mut Reader, ports: usize) -> Result<(), String> {
        let mut pool = std::mem::take(&mut self.pool);
        let mut ahead = VecDeque::with_capacity(TAKE_AHEAD + 1);
        let read = rd.mail_each(ports, &mut pool, &mut |p, key, f| {
            self.prefetch_port(p, true);
            ahead.push_back((p, key, f));
            // (A packet that goes ahead of a queue takes no entry.)
            if let Some(&(half, None, _)) = ahead.get(TAKE_AHEAD / 2) {
                self.prefetch_tail(half);
            }
            if ahead.len() > TAKE_AHEAD {
                if let Some((p, key, f)) = ahead.pop_front() {
                    self.take(p, key, f);
                }
            }
        });
        for (p, key, f) in ahead {
            self.take(p, key, f);
        }
        // Taking a packet gives no room back, but keep any that did.
        pool.append(&mut self.pool);
        self.pool = pool;
        read
    }
}

/// Runs the world `build` makes until it is idle, split over `ranks` by
/// [`partition`], every rank calling this together with the same
/// `identity` and a `build` that makes the same world on each (a build
/// that calls [`World::build_for_shard`] for this rank's shard before it
/// posts holds less). Rank 0 gets the run's figures (`Some`), the others
/// `None`.
pub fn run_ranked<R: Ranks>(
    ranks: R,
    identity: &str,
    build: impl FnOnce() -> Result<World, FabricError>,
) -> Result<Option<RankedRun>, ShardError> {
    let mut w = RankedWorld::new(build()?, ranks, identity)?;
    w.run_until(Instant(u64::MAX))?;
    w.gather()
}
