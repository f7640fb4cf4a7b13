//! One rank of an MPI collective run by its [schedule](super::schedule)
//! over the messaging layer, as an MPI library over verbs runs it: each
//! step's local copies and folds cost the host CPU time, each message is
//! a [`Messenger`] send (eager through vbufs, or a rendezvous), and a
//! step ends when its sends and receives have all completed, as
//! `MPI_Sendrecv` returns.
//!
//! Iterations run back to back, OSU-style: the collective, then a
//! dissemination barrier; an iteration's latency is the time from its
//! start to the end of the collective at this rank. Every iteration
//! starts from the same input (as a benchmark reuses its buffers), so
//! every iteration's result must equal the one [`run`](super::schedule::run)
//! computes in memory from the same schedules.

use std::collections::BTreeMap;
use std::sync::Arc;

use udrma_nic::cost::Serial;
use udrma_nic::{Event, Nic};
use udrma_proto::{Instant, NodeAddr, ReduceOp, ReduceType};

use super::schedule::run::fold_elements;
use super::schedule::{Algorithm, Collective, Land, Plan, ScheduleError, Spec, Step};
use crate::messaging::{Messenger, MsgEvent, RecvId, SendId};
use crate::App;

/// What every rank of a scheduled collective agrees on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledPlan {
    /// The collective, ranks (hosts `0..ranks`), element size and root
    /// (its `count` and `algorithm` are not read: `sizes` say them).
    pub spec: Spec,
    /// The sizes run, one after the other.
    pub sizes: Vec<SizeRun>,
    /// The reduction's operation (reductions only).
    pub op: ReduceOp,
    /// The elements' type.
    pub ty: ReduceType,
    /// Iterations measured, after `warmup` not measured.
    pub iterations: u32,
    /// Iterations run first and not measured.
    pub warmup: u32,
    /// When every rank starts.
    pub start: Instant,
    /// Seed of the inputs.
    pub seed: u64,
}

impl ScheduledPlan {
    /// The collective at the `size`-th size.
    pub fn spec_at(&self, size: usize) -> Spec {
        let run = self.sizes.get(size);
        Spec {
            count: run.map_or(0, |r| r.count),
            algorithm: run.map_or(self.spec.algorithm, |r| r.algorithm),
            ..self.spec
        }
    }

    /// Rank `rank`'s plan of the collective at the `size`-th count and
    /// of the barrier after it.
    pub fn plans(&self, rank: u32, size: usize) -> Result<(Plan, Plan), ScheduleError> {
        let barrier = Spec {
            collective: Collective::Barrier,
            algorithm: Algorithm::Dissemination,
            ..self.spec
        };
        Ok((self.spec_at(size).plan(rank)?, barrier.plan(rank)?))
    }

    /// Rank `rank`'s input: `len` bytes of elements of the plan's type
    /// (floats over twelve decades, so a sum's order shows in its bits).
    pub fn input(&self, rank: u32, len: u64) -> Vec<u8> {
        let w = self.ty.width().unwrap_or(8);
        let mut out = Vec::with_capacity(len as usize);
        let mut i = 0u64;
        while (out.len() as u64) < len {
            let r = udrma_proto::rng::mix(self.seed ^ u64::from(rank) << 40 ^ i);
            let small = (r % 2001) as i64 - 1000;
            let v = match self.ty {
                ReduceType::F64 => (small as f64 * 10f64.powi((r >> 32) as i32 % 12 - 6)).to_bits(),
                ReduceType::F32 => {
                    u64::from((small as f32 * 10f32.powi((r >> 32) as i32 % 8 - 4)).to_bits())
                }
                _ => r,
            };
            out.extend_from_slice(&v.to_le_bytes()[..w]);
            i += 1;
        }
        out.truncate(len as usize);
        out
    }

    /// The peers rank `rank` exchanges messages with, at any count.
    pub fn peers(&self, rank: u32) -> Result<Vec<NodeAddr>, ScheduleError> {
        let mut peers = Vec::new();
        for size in 0..self.sizes.len().max(1) {
            let (c, b) = self.plans(rank, size)?;
            peers.extend(
                c.steps
                    .iter()
                    .chain(&b.steps)
                    .flat_map(|s| s.sends.iter().chain(s.recvs.iter().map(|(m, _)| m)))
                    .map(|m| m.peer)
                    .filter(|&p| p != rank),
            );
        }
        peers.sort_unstable();
        peers.dedup();
        Ok(peers.into_iter().map(NodeAddr).collect())
    }
}

/// One size of a scheduled collective: its count (elements per rank,
/// block or pair, as [`Spec::count`]) and the algorithm run at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRun {
    /// Elements.
    pub count: u64,
    /// The algorithm.
    pub algorithm: Algorithm,
}

/// One iteration at one rank: when it started and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lap {
    /// Which size (index into [`ScheduledPlan::sizes`]).
    pub size: usize,
    /// Iteration at that count, warm-up ones included.
    pub iter: u32,
    /// When this rank started it.
    pub start: Instant,
    /// When its collective ended here, or why it failed; `None` while it
    /// runs (and for good if the run stopped first).
    pub end: Option<Result<Instant, String>>,
}

/// Where a rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Collective,
    Barrier,
}

/// One rank's side of a scheduled collective.
#[derive(Debug)]
pub struct ScheduledApp {
    me: u32,
    plan: Arc<ScheduledPlan>,
    coll: Arc<Plan>,
    barrier: Arc<Plan>,
    input: Vec<u8>,
    m: Messenger,
    arena: Vec<u8>,
    phase: Phase,
    step: usize,
    /// The step's sends and receives still open (receives by their
    /// place in the step).
    sends: BTreeMap<SendId, ()>,
    recvs: BTreeMap<RecvId, usize>,
    got: Vec<Option<Vec<u8>>>,
    /// The step waits for the CPU until then (copies before it, folds
    /// after it).
    cpu_until: Option<Instant>,
    /// The step's copies are made, and its messages posted.
    copied: bool,
    posted: bool,
    cpu: Serial,
    laps: Vec<Lap>,
    /// Iterations begun, over every count (a message's tag).
    begun: u32,
    /// Per count: the first measured result, and whether every later
    /// one equalled it.
    results: Vec<(Option<Vec<u8>>, bool)>,
    /// A failure outside a collective: size, iteration, why.
    failure: Option<(usize, u32, String)>,
    failed: bool,
}

impl ScheduledApp {
    /// Rank `me` of `plan`, over `m` (connected to [`ScheduledPlan::peers`]).
    pub fn new(me: u32, plan: Arc<ScheduledPlan>, m: Messenger) -> Result<Self, ScheduleError> {
        let (coll, barrier) = plan.plans(me, 0)?;
        let input = Vec::new();
        Ok(ScheduledApp {
            me,
            arena: Vec::new(),
            coll: Arc::new(coll),
            barrier: Arc::new(barrier),
            input,
            m,
            phase: Phase::Collective,
            step: 0,
            sends: BTreeMap::new(),
            recvs: BTreeMap::new(),
            got: Vec::new(),
            cpu_until: None,
            copied: false,
            posted: false,
            cpu: Serial::default(),
            laps: Vec::new(),
            begun: 0,
            results: Vec::new(),
            failure: None,
            failed: false,
            plan,
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.me
    }

    /// Every iteration this rank started.
    pub fn laps(&self) -> &[Lap] {
        &self.laps
    }

    /// At the `size`-th count: the first measured iteration's result,
    /// and whether every later iteration's equalled it.
    pub fn result(&self, size: usize) -> (Option<&[u8]>, bool) {
        self.results
            .get(size)
            .map_or((None, false), |(r, same)| (r.as_deref(), *same))
    }

    /// The messenger.
    pub fn messenger(&self) -> &Messenger {
        &self.m
    }

    /// Iterations at each count.
    fn per_size(&self) -> u32 {
        self.plan.warmup + self.plan.iterations
    }

    /// Iterations over every count.
    fn total(&self) -> u32 {
        self.per_size() * self.plan.sizes.len() as u32
    }

    /// The count under way.
    fn size(&self) -> usize {
        (self.begun.saturating_sub(1) / self.per_size().max(1)) as usize
    }

    /// The iteration under way at its count.
    fn iter(&self) -> u32 {
        self.begun.saturating_sub(1) % self.per_size().max(1)
    }

    /// The plan of the phase under way (shared, so that a step can be
    /// read while the app changes).
    fn plan_now(&self) -> Arc<Plan> {
        match self.phase {
            Phase::Collective => Arc::clone(&self.coll),
            Phase::Barrier => Arc::clone(&self.barrier),
        }
    }

    /// The iteration under way fails, and the rank stops. A failure in
    /// the barrier after it leaves the finished collective as it ended
    /// and is kept apart ([`ScheduledApp::failure`]).
    fn fail(&mut self, why: String) {
        let (size, iter) = (self.size(), self.iter());
        match self.laps.last_mut() {
            Some(lap) if (lap.size, lap.iter) == (size, iter) && lap.end.is_none() => {
                lap.end = Some(Err(why));
            }
            _ => self.failure = Some((size, iter, format!("in the barrier after it: {why}"))),
        }
        self.failed = true;
    }

    /// Why this rank stopped outside a collective (in the barrier after
    /// one): its size, iteration and reason.
    pub fn failure(&self) -> Option<&(usize, u32, String)> {
        self.failure.as_ref()
    }

    /// Starts the next iteration: at a new size, its plans, buffer and
    /// input first; then the input back in place. The reset is the
    /// benchmark's, not the collective's, and costs no time (MPICH's own
    /// first copies, sendbuf into recvbuf, are not charged yet).
    fn begin(&mut self, now: Instant) {
        self.begun += 1;
        let (size, iter) = (self.size(), self.iter());
        if iter == 0 {
            match self.plan.plans(self.me, size) {
                Ok((c, b)) => {
                    self.input = self.plan.input(self.me, c.input.len);
                    self.arena = vec![0; c.arena as usize];
                    self.coll = Arc::new(c);
                    self.barrier = Arc::new(b);
                    self.results.push((None, true));
                }
                Err(e) => {
                    self.failed = true;
                    self.laps.push(Lap {
                        size,
                        iter,
                        start: now,
                        end: Some(Err(e.to_string())),
                    });
                    return;
                }
            }
        }
        let span = self.coll.input;
        self.arena[span.at as usize..span.end() as usize].copy_from_slice(&self.input);
        self.laps.push(Lap {
            size,
            iter,
            start: now,
            end: None,
        });
        self.phase = Phase::Collective;
        self.step = 0;
        self.copied = false;
        self.posted = false;
    }

    /// Moves as far as it can: through CPU waits, posting steps, landing
    /// what arrived, into the next phase and iteration.
    fn advance(&mut self, now: Instant, nic: &mut Nic) {
        while !self.failed && self.begun > 0 && self.begun <= self.total() {
            if let Some(t) = self.cpu_until {
                if t > now {
                    return;
                }
                self.cpu_until = None;
                continue;
            }
            let plan = self.plan_now();
            let Some(step) = plan.steps.get(self.step) else {
                self.end_phase(now);
                continue;
            };
            if !self.copied {
                self.copy(now, nic, step);
                continue;
            }
            if !self.posted {
                if let Err(e) = self.post(now, nic, step) {
                    self.fail(e);
                    return;
                }
                continue;
            }
            if !self.sends.is_empty() || !self.recvs.is_empty() {
                return;
            }
            self.land(now, nic, step);
        }
    }

    /// Makes the step's local copies; the CPU is busy for their bytes.
    fn copy(&mut self, now: Instant, nic: &Nic, step: &Step) {
        let mut bytes = 0;
        for &(from, to) in &step.copies {
            let b = self.arena[from.at as usize..from.end() as usize].to_vec();
            self.arena[to.at as usize..to.end() as usize].copy_from_slice(&b);
            bytes += from.len;
        }
        self.copied = true;
        let ready = self.cpu.take(now, nic.config().cost.copy(bytes));
        if ready > now {
            self.cpu_until = Some(ready);
        }
    }

    /// Posts the step's sends and receives.
    fn post(&mut self, now: Instant, nic: &mut Nic, step: &Step) -> Result<(), String> {
        let tag = (self.begun - 1) * 2 + u32::from(self.phase == Phase::Barrier);
        self.posted = true;
        for msg in &step.sends {
            let mut data = Vec::with_capacity(msg.bytes() as usize);
            for s in &msg.spans {
                data.extend_from_slice(&self.arena[s.at as usize..s.end() as usize]);
            }
            let id = self
                .m
                .send(now, nic, NodeAddr(msg.peer), tag, data)
                .map_err(|e| format!("send to h{}: {e}", msg.peer))?;
            self.sends.insert(id, ());
        }
        self.got = vec![None; step.recvs.len()];
        for (i, (msg, _)) in step.recvs.iter().enumerate() {
            let id = self
                .m
                .recv(now, nic, Some(NodeAddr(msg.peer)), Some(tag), msg.bytes());
            self.recvs.insert(id, i);
        }
        Ok(())
    }

    /// Lands the step's receives in order (folds cost the CPU), and
    /// moves to the next step.
    fn land(&mut self, now: Instant, nic: &Nic, step: &Step) {
        let mut folded = 0u64;
        for (i, (msg, land)) in step.recvs.iter().enumerate() {
            let data = self.got[i].take().unwrap_or_default();
            let mut from = 0usize;
            for s in &msg.spans {
                let piece = &data[from..from + s.len as usize];
                let held = &mut self.arena[s.at as usize..s.end() as usize];
                match land {
                    Land::Copy => held.copy_from_slice(piece),
                    Land::Fold => {
                        fold_elements(self.plan.op, self.plan.ty, piece, held);
                        folded += s.len;
                    }
                }
                from += s.len as usize;
            }
        }
        self.step += 1;
        self.copied = false;
        self.posted = false;
        let ready = self.cpu.take(now, nic.config().cost.reduce(folded));
        if ready > now {
            self.cpu_until = Some(ready);
        }
    }

    fn end_phase(&mut self, now: Instant) {
        match self.phase {
            Phase::Collective => {
                if let Some(lap) = self.laps.last_mut() {
                    lap.end = Some(Ok(now));
                }
                if self.iter() >= self.plan.warmup {
                    let out = self.coll.output;
                    let got = &self.arena[out.at as usize..out.end() as usize];
                    if let Some((first, same)) = self.results.last_mut() {
                        match first {
                            None => *first = Some(got.to_vec()),
                            Some(r) => *same &= r.as_slice() == got,
                        }
                    }
                }
                self.phase = Phase::Barrier;
                self.step = 0;
                self.copied = false;
                self.posted = false;
            }
            Phase::Barrier => {
                if self.begun < self.total() {
                    self.begin(now);
                } else {
                    // Past the last: nothing left to run.
                    self.begun += 1;
                }
            }
        }
    }

    fn on_msg(&mut self, e: MsgEvent) {
        match e {
            MsgEvent::SendDone { id, result, .. } => {
                if self.sends.remove(&id).is_some() {
                    if let Err(e) = result {
                        self.fail(format!("a send failed: {e}"));
                    }
                }
            }
            MsgEvent::RecvDone {
                id,
                src,
                data,
                result,
                ..
            } => {
                if let Some(i) = self.recvs.remove(&id) {
                    match result {
                        Ok(()) => self.got[i] = Some(data),
                        Err(e) => self.fail(format!("a receive from {src} failed: {e}")),
                    }
                }
            }
        }
    }

    fn drain(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(e) = self.m.poll_event() {
            self.on_msg(e);
        }
        self.advance(now, nic);
        // Posting may have completed sends or receives at once.
        while let Some(e) = self.m.poll_event() {
            self.on_msg(e);
            self.advance(now, nic);
        }
    }
}

impl App for ScheduledApp {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        if now >= self.plan.start && self.total() > 0 {
            self.begin(now);
            self.drain(now, nic);
        }
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        self.m.handle_event(now, nic, event);
        self.drain(now, nic);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start = self.laps.is_empty().then_some(self.plan.start);
        [self.m.poll_timeout(), self.cpu_until, start]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        if self.laps.is_empty() && now >= self.plan.start && self.total() > 0 {
            self.begin(now);
        }
        if self.m.poll_timeout().is_some_and(|t| t <= now) {
            self.m.handle_timeout(now, nic);
        }
        self.drain(now, nic);
    }

    fn is_done(&self) -> bool {
        (self.failed || self.begun > self.total()) && self.m.is_quiet()
    }
}
