//! The host-based baseline: the same collective done by host software over
//! the messaging layer, as MPI libraries do for short vectors.
//!
//! The tree is binomial (the plan's `host_tree`): a node receives its
//! children's partial results, folds them in branch order after its own
//! operand (the host CPU pays one pass over the data per child, at the
//! profile's host copy rate), and sends the fold to its parent; the root's
//! result goes back down the same tree. Every step is one eager message,
//! so it pays the messaging layer's costs: vbuf copies, doorbells,
//! descriptor fetches, the NIC's per-packet work and the wire, each way.

use std::collections::BTreeMap;
use std::sync::Arc;

use udrma_nic::cost::Serial;
use udrma_nic::memory::Use;
use udrma_nic::reduce::Operand;
use udrma_nic::{Access, Event, MrKey, Nic};
use udrma_proto::{Instant, NodeAddr};

use super::reference::fold;
use super::{from_host_bytes, CollectivePlan, Outcome, RESULT_BASE};
use crate::messaging::{Messenger, MsgEvent, SendId};
use crate::App;

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Iter {
    arrived: Vec<Option<Operand>>,
    folded: bool,
    finished: bool,
}

/// One node's side of the host-based collectives.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct HostApp {
    me: NodeAddr,
    plan: Arc<CollectivePlan>,
    m: Messenger,
    result: Option<MrKey>,
    next_iter: u32,
    iters: BTreeMap<u32, Iter>,
    /// Folds waiting for the host CPU: (ready at, iteration).
    folds: BTreeMap<(Instant, u32), ()>,
    cpu: Serial,
    /// Reduce at non-root nodes: the iteration finishes when its send does.
    up_sends: BTreeMap<SendId, u32>,
    outcomes: Vec<Outcome>,
}

fn tag_up(iter: u32) -> u32 {
    iter.wrapping_mul(2)
}

fn tag_down(iter: u32) -> u32 {
    iter.wrapping_mul(2) + 1
}

impl HostApp {
    /// Node `me`'s part of `plan`, over `m` (connected to its parent and
    /// children in `plan.host_tree`; see [`HostApp::peers`]).
    pub fn new(me: NodeAddr, plan: Arc<CollectivePlan>, m: Messenger) -> HostApp {
        HostApp {
            me,
            plan,
            m,
            result: None,
            next_iter: 0,
            iters: BTreeMap::new(),
            folds: BTreeMap::new(),
            cpu: Serial::default(),
            up_sends: BTreeMap::new(),
            outcomes: Vec::new(),
        }
    }

    /// The peers node `me` exchanges messages with: parent, then children.
    pub fn peers(plan: &CollectivePlan, me: NodeAddr) -> Vec<NodeAddr> {
        let i = me.0 as usize;
        let t = &plan.host_tree;
        t.parent[i]
            .map(|p| p.addr)
            .into_iter()
            .chain(t.children[i].iter().copied())
            .collect()
    }

    /// What happened to each iteration that finished.
    pub fn outcomes(&self) -> &[Outcome] {
        &self.outcomes
    }

    /// The result region (once started).
    pub fn result_key(&self) -> Option<MrKey> {
        self.result
    }

    /// The messenger.
    pub fn messenger(&self) -> &Messenger {
        &self.m
    }

    fn finish(&mut self, iter: u32, done: Result<Instant, String>) {
        if let Some(it) = self.iters.get_mut(&iter) {
            if !it.finished {
                it.finished = true;
                self.outcomes.push(Outcome { iter, done });
            }
        }
    }

    fn begin(&mut self, now: Instant, nic: &mut Nic, iter: u32) {
        let i = self.me.0 as usize;
        let t = &self.plan.host_tree;
        let children = t.children[i].clone();
        let parent = t.parent[i];
        let max = self.plan.result_bytes();
        self.iters.insert(
            iter,
            Iter {
                arrived: vec![None; children.len()],
                folded: false,
                finished: false,
            },
        );
        if self.plan.kind.goes_up() {
            for c in &children {
                self.m.recv(now, nic, Some(*c), Some(tag_up(iter)), max);
            }
        }
        if let Some(p) = parent.filter(|_| self.plan.kind.goes_down()) {
            self.m
                .recv(now, nic, Some(p.addr), Some(tag_down(iter)), max);
        }
        if self.plan.kind.goes_up() {
            self.try_fold(now, nic, iter);
        } else if parent.is_none() {
            let own = self.plan.operand(0, iter);
            self.deliver(now, nic, iter, own);
        }
    }

    /// Once every child's part is in, the host folds (after its CPU is
    /// free and has made one pass per child).
    fn try_fold(&mut self, now: Instant, nic: &mut Nic, iter: u32) {
        let Some(it) = self.iters.get(&iter) else {
            return;
        };
        if it.folded || it.arrived.iter().any(Option::is_none) {
            return;
        }
        let passes = it.arrived.len() as u64;
        let cost = nic.config().cost.copy(self.plan.result_bytes());
        let ready = self.cpu.take(now, cost.saturating_mul(passes));
        self.folds.insert((ready, iter), ());
        if ready <= now {
            self.run_folds(now, nic);
        }
    }

    fn run_folds(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(e) = self.folds.first_entry() {
            if e.key().0 > now {
                break;
            }
            let (_, iter) = *e.key();
            e.remove();
            let Some(it) = self.iters.get_mut(&iter) else {
                continue;
            };
            it.folded = true;
            let mut acc = self.plan.operand(self.me.0, iter);
            for x in it.arrived.iter().flatten() {
                acc = fold(self.plan.op, self.plan.ty, &acc, x);
            }
            match self.plan.host_tree.parent[self.me.0 as usize] {
                Some(p) => {
                    let bytes =
                        udrma_nic::reduce::alu::to_host_bytes(self.plan.op, self.plan.ty, &acc);
                    match self.m.send(now, nic, p.addr, tag_up(iter), bytes) {
                        Ok(id) if !self.plan.kind.goes_down() => {
                            self.up_sends.insert(id, iter);
                        }
                        Ok(_) => {}
                        Err(e) => self.finish(iter, Err(format!("send to {}: {e}", p.addr))),
                    }
                }
                None => self.deliver(now, nic, iter, acc),
            }
        }
    }

    /// This node holds the result: write it, pass it down, finish.
    fn deliver(&mut self, now: Instant, nic: &mut Nic, iter: u32, result: Operand) {
        let bytes = udrma_nic::reduce::alu::to_host_bytes(self.plan.op, self.plan.ty, &result);
        if let Some(key) = self.result {
            let addr = self.plan.result_addr(iter);
            let _ = nic.memory_mut().write(key, addr, &bytes, Use::LocalWrite);
        }
        if self.plan.kind.goes_down() {
            for c in self.plan.host_tree.children[self.me.0 as usize].clone() {
                if let Err(e) = self.m.send(now, nic, c, tag_down(iter), bytes.clone()) {
                    self.finish(iter, Err(format!("send to {c}: {e}")));
                }
            }
        }
        self.finish(iter, Ok(now));
    }

    fn on_msg(&mut self, now: Instant, nic: &mut Nic, e: MsgEvent) {
        match e {
            MsgEvent::RecvDone {
                src,
                tag,
                data,
                result,
                ..
            } => {
                let iter = tag / 2;
                if let Err(e) = result {
                    self.finish(iter, Err(format!("receive from {src}: {e}")));
                    return;
                }
                let x = from_host_bytes(self.plan.op, self.plan.ty, self.plan.count, &data);
                if tag % 2 == 0 {
                    let i = self.me.0 as usize;
                    let Some(b) = self.plan.host_tree.children[i]
                        .iter()
                        .position(|c| *c == src)
                    else {
                        return;
                    };
                    if let Some(it) = self.iters.get_mut(&iter) {
                        it.arrived[b] = Some(x);
                    }
                    self.try_fold(now, nic, iter);
                } else {
                    self.deliver(now, nic, iter, x);
                }
            }
            MsgEvent::SendDone { id, result, .. } => {
                if let Some(iter) = self.up_sends.remove(&id) {
                    self.finish(iter, result.map(|()| now).map_err(|e| e.to_string()));
                } else if let Err(e) = result {
                    self.notes_failure(now, e.to_string());
                }
            }
        }
    }

    fn notes_failure(&mut self, _now: Instant, why: String) {
        // A failed send down the tree: the iterations still open cannot
        // all finish here; record it against the oldest.
        if let Some((&iter, _)) = self.iters.iter().find(|(_, it)| !it.finished) {
            self.finish(iter, Err(why));
        }
    }

    fn drain(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(e) = self.m.poll_event() {
            self.on_msg(now, nic, e);
        }
    }

    fn begin_due(&mut self, now: Instant, nic: &mut Nic) {
        while self.next_iter < self.plan.iterations && self.plan.start_of(self.next_iter) <= now {
            let iter = self.next_iter;
            self.next_iter += 1;
            self.begin(now, nic, iter);
        }
    }
}

impl App for HostApp {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        let len = self.plan.result_region() as usize;
        self.result = Some(nic.register(RESULT_BASE, len, Access::ALL));
        self.begin_due(now, nic);
        self.drain(now, nic);
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        self.m.handle_event(now, nic, event);
        self.drain(now, nic);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start =
            (self.next_iter < self.plan.iterations).then(|| self.plan.start_of(self.next_iter));
        let fold = self.folds.keys().next().map(|k| k.0);
        [self.m.poll_timeout(), start, fold]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        self.begin_due(now, nic);
        self.run_folds(now, nic);
        if self.m.poll_timeout().is_some_and(|t| t <= now) {
            self.m.handle_timeout(now, nic);
        }
        self.drain(now, nic);
    }

    fn is_done(&self) -> bool {
        self.next_iter == self.plan.iterations
            && self.iters.values().all(|it| it.finished)
            && self.m.is_quiet()
    }
}
