//! One rank of an MPI collective run by its [schedule](super::schedule)
//! over the messaging layer, as an MPI library over verbs runs it: each
//! step's local copies and folds cost the host CPU time, each message is
//! a [`Messenger`] send (eager through vbufs, or a rendezvous), and a
//! step ends when its sends and receives have all completed, as
//! `MPI_Sendrecv` returns.
//!
//! Two wires carry the messages: the messaging layer's tagged sends
//! ([`Wire::Messaging`]), or one RDMA WRITE per message into a slot its
//! receiver registered for it ([`Wire::Write`], in `direct`), which also
//! runs phantom payloads.
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
use super::schedule::{Algorithm, Collective, Land, Plan, ScheduleError, Span, Spec, Step};
use crate::messaging::{Messenger, MsgEvent, RecvId, SendId};
use crate::App;

mod direct;

use direct::{Direct, Part};

/// What carries a scheduled collective's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// The messaging layer: eager through vbufs, or a rendezvous, as
    /// its configuration says.
    #[default]
    Messaging,
    /// One RDMA WRITE per message into a landing slot the receiver
    /// registered at start-up (no rendezvous round trip).
    Write,
}

impl Wire {
    /// Its name in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Messaging => "messaging",
            Wire::Write => "rdma",
        }
    }
}

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
    /// What carries the messages.
    pub wire: Wire,
    /// No bytes stored or moved (the [`Wire::Write`] wire only): the
    /// timing is the same, and no result is checked.
    pub phantom: bool,
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
        Ok((self.spec_at(size).plan(rank)?, self.barrier(rank)?))
    }

    /// Rank `rank`'s plan of the barrier after every collective (the
    /// same at every size).
    pub fn barrier(&self, rank: u32) -> Result<Plan, ScheduleError> {
        Spec {
            collective: Collective::Barrier,
            algorithm: Algorithm::Dissemination,
            ..self.spec
        }
        .plan(rank)
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
    /// The messaging wire's messenger, or the write wire's state.
    m: Option<Messenger>,
    direct: Option<Direct>,
    /// The messaging wire's arena (the write wire's is a NIC region).
    arena: Vec<u8>,
    /// Sends and receives of the phase's steps before this one (the
    /// write wire finds a message's slot by its place in the plan).
    sends_before: usize,
    recvs_before: usize,
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
        Self::with(me, plan, Some(m), None)
    }

    /// Rank `me` of `plan` over the [`Wire::Write`] wire: registers its
    /// arena and landing region on `nic`, which must have no regions yet
    /// (every rank's keys must be the same).
    pub fn over_writes(me: u32, plan: Arc<ScheduledPlan>, nic: &mut Nic) -> Result<Self, String> {
        let d = Direct::new(me, &plan, nic)?;
        Self::with(me, plan, None, Some(d)).map_err(|e| e.to_string())
    }

    fn with(
        me: u32,
        plan: Arc<ScheduledPlan>,
        m: Option<Messenger>,
        direct: Option<Direct>,
    ) -> Result<Self, ScheduleError> {
        let (coll, barrier) = plan.plans(me, 0)?;
        let input = Vec::new();
        Ok(ScheduledApp {
            me,
            direct,
            sends_before: 0,
            recvs_before: 0,
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

    /// The messenger (on the messaging wire).
    pub fn messenger(&self) -> Option<&Messenger> {
        self.m.as_ref()
    }

    /// Writes that landed in no slot (the write wire; always 0 unless
    /// something is wrong).
    pub fn strays(&self) -> u64 {
        self.direct.as_ref().map_or(0, |d| d.strays)
    }

    /// Whether payloads are phantom (no result to check).
    pub fn phantom(&self) -> bool {
        self.direct.as_ref().is_some_and(Direct::phantom)
    }

    /// The arena's bytes at `s` (empty when phantom).
    fn read(&self, nic: &Nic, s: Span) -> Vec<u8> {
        match &self.direct {
            Some(d) => d.read(nic, s),
            None => self.arena[s.at as usize..s.end() as usize].to_vec(),
        }
    }

    /// Puts `data` at `s` of the arena (nothing when phantom).
    fn write(&mut self, nic: &mut Nic, s: Span, data: &[u8]) {
        match &self.direct {
            Some(d) => d.write(nic, s, data),
            None => self.arena[s.at as usize..s.end() as usize].copy_from_slice(data),
        }
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
    fn begin(&mut self, now: Instant, nic: &mut Nic) {
        self.begun += 1;
        let (size, iter) = (self.size(), self.iter());
        if iter == 0 {
            match self.plan.plans(self.me, size) {
                Ok((c, b)) => {
                    if !self.phantom() {
                        self.input = self.plan.input(self.me, c.input.len);
                    }
                    if self.direct.is_none() {
                        self.arena = vec![0; c.arena as usize];
                    }
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
        let input = std::mem::take(&mut self.input);
        self.write(nic, self.coll.input, &input);
        self.input = input;
        self.laps.push(Lap {
            size,
            iter,
            start: now,
            end: None,
        });
        self.enter(Phase::Collective);
    }

    /// Starts `phase` at its first step.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.step = 0;
        self.sends_before = 0;
        self.recvs_before = 0;
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
            if let Some(why) = self.direct.as_mut().and_then(Direct::take_failure) {
                self.fail(why);
                return;
            }
            let plan = self.plan_now();
            let Some(step) = plan.steps.get(self.step) else {
                self.end_phase(now, nic);
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
            if !self.step_done(step) {
                return;
            }
            self.land(now, nic, step);
        }
    }

    /// Whether the step's sends are complete and its receives in.
    fn step_done(&self, step: &Step) -> bool {
        match &self.direct {
            None => self.sends.is_empty() && self.recvs.is_empty(),
            Some(d) => {
                let part = self.part();
                d.sent()
                    && (0..step.recvs.len()).all(|i| {
                        d.recv_at(part, self.recvs_before + i)
                            .is_some_and(|at| d.is_in(at))
                    })
            }
        }
    }

    fn part(&self) -> Part {
        match self.phase {
            Phase::Collective => Part::Collective,
            Phase::Barrier => Part::Barrier,
        }
    }

    /// Makes the step's local copies; the CPU is busy for their bytes.
    fn copy(&mut self, now: Instant, nic: &mut Nic, step: &Step) {
        let mut bytes = 0;
        let phantom = self.phantom();
        for &(from, to) in &step.copies {
            if !phantom {
                let b = self.read(nic, from);
                self.write(nic, to, &b);
            }
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
        self.posted = true;
        let part = self.part();
        if let Some(d) = self.direct.as_mut() {
            for (i, msg) in step.sends.iter().enumerate() {
                d.send(now, nic, part, self.sends_before + i, msg)
                    .map_err(|e| format!("send to h{}: {e}", msg.peer))?;
            }
            return Ok(());
        }
        let tag = (self.begun - 1) * 2 + u32::from(self.phase == Phase::Barrier);
        let Some(m) = self.m.as_mut() else {
            return Err("internal: no wire".into());
        };
        for msg in &step.sends {
            let mut data = Vec::with_capacity(msg.bytes() as usize);
            for s in &msg.spans {
                data.extend_from_slice(&self.arena[s.at as usize..s.end() as usize]);
            }
            let id = m
                .send(now, nic, NodeAddr(msg.peer), tag, data)
                .map_err(|e| format!("send to h{}: {e}", msg.peer))?;
            self.sends.insert(id, ());
        }
        self.got = vec![None; step.recvs.len()];
        for (i, (msg, _)) in step.recvs.iter().enumerate() {
            let id = m.recv(now, nic, Some(NodeAddr(msg.peer)), Some(tag), msg.bytes());
            self.recvs.insert(id, i);
        }
        Ok(())
    }

    /// The bytes of the step's `i`-th receive: taken off the messenger's
    /// results, or out of the write wire's slot (whose count it clears).
    fn received(&mut self, nic: &Nic, i: usize, len: u64) -> Vec<u8> {
        let part = self.part();
        match self.direct.as_mut() {
            None => self.got[i].take().unwrap_or_default(),
            Some(d) => {
                let Some(at) = d.recv_at(part, self.recvs_before + i) else {
                    return Vec::new();
                };
                d.take(at);
                d.landed(nic, at, len)
            }
        }
    }

    /// Lands the step's receives in order (folds cost the CPU), and
    /// moves to the next step. On the write wire a message is already in
    /// its slot, as a verbs MPI's RDMA-written rendezvous lands in the
    /// receive buffer: moving it into place costs nothing.
    fn land(&mut self, now: Instant, nic: &mut Nic, step: &Step) {
        let mut folded = 0u64;
        let phantom = self.phantom();
        for (i, (msg, land)) in step.recvs.iter().enumerate() {
            let data = self.received(nic, i, msg.bytes());
            let mut from = 0usize;
            for s in &msg.spans {
                if *land == Land::Fold {
                    folded += s.len;
                }
                if phantom {
                    continue;
                }
                let piece = &data[from..from + s.len as usize];
                match land {
                    Land::Copy => self.write(nic, *s, piece),
                    Land::Fold => {
                        let mut held = self.read(nic, *s);
                        fold_elements(self.plan.op, self.plan.ty, piece, &mut held);
                        self.write(nic, *s, &held);
                    }
                }
                from += s.len as usize;
            }
        }
        self.step += 1;
        self.sends_before += step.sends.len();
        self.recvs_before += step.recvs.len();
        self.copied = false;
        self.posted = false;
        let ready = self.cpu.take(now, nic.config().cost.reduce(folded));
        if ready > now {
            self.cpu_until = Some(ready);
        }
    }

    fn end_phase(&mut self, now: Instant, nic: &mut Nic) {
        match self.phase {
            Phase::Collective => {
                if let Some(lap) = self.laps.last_mut() {
                    lap.end = Some(Ok(now));
                }
                if self.iter() >= self.plan.warmup && !self.phantom() {
                    let got = self.read(nic, self.coll.output);
                    if let Some((first, same)) = self.results.last_mut() {
                        match first {
                            None => *first = Some(got),
                            Some(r) => *same &= *r == got,
                        }
                    }
                }
                // The write wire lays out the next size's slots now: no
                // peer writes them before this rank is in the barrier.
                let next = self.begun as usize;
                if self.iter() + 1 == self.per_size() && next < self.total() as usize {
                    let size = self.size() + 1;
                    if let Some(d) = self.direct.as_mut() {
                        if let Err(e) = d.lay_out(&self.plan, size) {
                            // Between the collective (ended) and its
                            // barrier: said as what it is.
                            let why = format!("laying out the next size's landing slots: {e}");
                            self.failure = Some((self.size(), self.iter(), why));
                            self.failed = true;
                            return;
                        }
                    }
                }
                self.enter(Phase::Barrier);
            }
            Phase::Barrier => {
                if self.begun < self.total() {
                    self.begin(now, nic);
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

    fn poll_msg(&mut self) -> Option<MsgEvent> {
        self.m.as_mut().and_then(Messenger::poll_event)
    }

    fn drain(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(e) = self.poll_msg() {
            self.on_msg(e);
        }
        self.advance(now, nic);
        // Posting may have completed sends or receives at once.
        while let Some(e) = self.poll_msg() {
            self.on_msg(e);
            self.advance(now, nic);
        }
    }
}

impl App for ScheduledApp {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        if now >= self.plan.start && self.total() > 0 {
            self.begin(now, nic);
            self.drain(now, nic);
        }
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        if let Some(m) = self.m.as_mut() {
            m.handle_event(now, nic, event);
        } else if let Some(d) = self.direct.as_mut() {
            d.handle_event(now, nic, &event);
        }
        self.drain(now, nic);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start = self.laps.is_empty().then_some(self.plan.start);
        let m = self.m.as_ref().and_then(Messenger::poll_timeout);
        [m, self.cpu_until, start].into_iter().flatten().min()
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        if self.laps.is_empty() && now >= self.plan.start && self.total() > 0 {
            self.begin(now, nic);
        }
        if let Some(m) = self.m.as_mut() {
            if m.poll_timeout().is_some_and(|t| t <= now) {
                m.handle_timeout(now, nic);
            }
        }
        self.drain(now, nic);
    }

    fn is_done(&self) -> bool {
        let quiet = match (&self.m, &self.direct) {
            (Some(m), _) => m.is_quiet(),
            (None, Some(d)) => d.sent(),
            (None, None) => true,
        };
        (self.failed || self.begun > self.total()) && quiet
    }
}
