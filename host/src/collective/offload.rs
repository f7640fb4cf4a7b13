//! The offloaded collective as a host app: at each iteration's common
//! start the host posts its descriptor, then waits for the NIC's
//! completion; the NIC has written the result to host memory by then.

use std::collections::BTreeMap;
use std::sync::Arc;

use udrma_nic::{Access, Event, MrKey, Nic, WrId, WrKind};
use udrma_proto::{Instant, NodeAddr};

use super::{CollectivePlan, Outcome, RESULT_BASE};
use crate::App;

/// One node's side of the offloaded collectives.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct OffloadApp {
    me: NodeAddr,
    plan: Arc<CollectivePlan>,
    result: Option<MrKey>,
    next_iter: u32,
    posted: BTreeMap<WrId, u32>,
    outcomes: Vec<Outcome>,
}

impl OffloadApp {
    /// Node `me`'s part of `plan`.
    pub fn new(me: NodeAddr, plan: Arc<CollectivePlan>) -> OffloadApp {
        OffloadApp {
            me,
            plan,
            result: None,
            next_iter: 0,
            posted: BTreeMap::new(),
            outcomes: Vec::new(),
        }
    }

    /// What happened to each iteration that finished, in finishing order.
    pub fn outcomes(&self) -> &[Outcome] {
        &self.outcomes
    }

    /// The result region (once started).
    pub fn result_key(&self) -> Option<MrKey> {
        self.result
    }

    fn post_due(&mut self, now: Instant, nic: &mut Nic) {
        let Some(key) = self.result else {
            return;
        };
        while self.next_iter < self.plan.iterations && self.plan.start_of(self.next_iter) <= now {
            let iter = self.next_iter;
            self.next_iter += 1;
            match nic.post_reduce(now, self.plan.post(self.me.0, iter, key)) {
                Ok(wr) => {
                    self.posted.insert(wr, iter);
                }
                Err(e) => self.outcomes.push(Outcome {
                    iter,
                    done: Err(format!("post refused: {e}")),
                }),
            }
        }
    }
}

impl App for OffloadApp {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        let len = self.plan.result_region() as usize;
        self.result = Some(nic.register(RESULT_BASE, len, Access::ALL));
        self.post_due(now, nic);
    }

    fn handle_event(&mut self, _now: Instant, _nic: &mut Nic, event: Event) {
        if let Event::Completed {
            wr,
            kind: WrKind::Reduce,
            result,
            at,
            ..
        } = event
        {
            if let Some(iter) = self.posted.remove(&wr) {
                self.outcomes.push(Outcome {
                    iter,
                    done: result.map(|()| at).map_err(|e| e.to_string()),
                });
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (self.next_iter < self.plan.iterations).then(|| self.plan.start_of(self.next_iter))
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        self.post_due(now, nic);
    }

    fn is_done(&self) -> bool {
        self.next_iter == self.plan.iterations && self.posted.is_empty()
    }
}
