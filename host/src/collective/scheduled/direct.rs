//! The `write` wire of a scheduled collective: every message is one RDMA
//! WRITE (gathering the message's spans) into a landing area its receiver
//! registered for it, as MPI libraries and NCCL do over verbs with
//! buffers registered and exchanged at start-up: no rendezvous round trip
//! per message, and the receiver knows a message is in when the engine
//! raises [`Event::WriteReceived`] for it, which it does once per WRITE
//! (the registry's mask drops copies); the counts below rely on that.
//!
//! # Where a message lands
//! Every rank registers two regions, first on its NIC so that their keys
//! are the same at every rank (as a library exchanges them when it
//! starts): its arena, and its landing region. The landing region holds,
//! in order, one slot per receive of the barrier's plan (from offset 0),
//! then one per receive of the collective's plan at the size under way
//! (from [`COLLECTIVE_AT`]); a slot is as long as its message (a byte
//! for an empty one, which is written as one byte). A sender finds its
//! k-th message to a peer's slot by reading the peer's plan: the peer's
//! k-th receive from it, as MPI matches messages between two ranks in
//! order.
//!
//! # Why a slot is never overwritten early
//! A slot is reused only by the same message of a later iteration. Every
//! collective is followed by a dissemination barrier, and a rank leaves
//! the barrier only after every rank has entered it, that is, finished
//! its collective and landed every message of it: so a later iteration's
//! write cannot reach a collective slot before it was read. Barrier slots
//! can be written again before they are read (a rank in the next barrier
//! while its peer is still in this one): their arrivals are counted in
//! bytes, and a receive takes its bytes off the count, so an early second
//! message is kept for the next barrier. A new size's slots are laid out
//! when the barrier after the last iteration of the old size begins,
//! before any peer can write them.

use std::collections::{BTreeMap, VecDeque};

use udrma_nic::{Access, Event, MrKey, Nic, Sge, Sgl, WorkRequest, WrId};
use udrma_proto::{Instant, NodeAddr};

use super::ScheduledPlan;
use crate::collective::schedule::{Msg, Plan, Span};

/// Where the arena starts in the host's address space.
pub(super) const ARENA_BASE: u64 = 0x10_0000_0000;
/// Where the landing region starts.
pub(super) const LAND_BASE: u64 = 0x20_0000_0000;
/// The keys the two regions get as their NIC's first registrations.
pub(super) const ARENA_KEY: MrKey = MrKey(0x100);
/// (See [`ARENA_KEY`].)
pub(super) const LAND_KEY: MrKey = MrKey(0x101);
/// Where the collective's slots start in the landing region (the
/// barrier's come first: a dissemination barrier receives one empty
/// message per round, at most 32).
pub(super) const COLLECTIVE_AT: u64 = 64;

/// One receive's slot: its sender, offset and length.
#[derive(Debug, Clone, Copy)]
struct Slot {
    from: u32,
    at: u64,
    len: u64,
}

/// The landing slots of one rank's plan, per receive (steps in order,
/// receives in order), from offset `from`; and where they end.
fn slots(plan: &Plan, from: u64) -> (Vec<Slot>, u64) {
    let mut at = from;
    let mut out = Vec::new();
    for step in &plan.steps {
        for (msg, _) in &step.recvs {
            let len = msg.bytes().max(1);
            out.push(Slot {
                from: msg.peer,
                at,
                len,
            });
            at += len;
        }
    }
    (out, at)
}

/// One phase's layout at one rank: where its receives land here, and
/// where its sends land at their peers (both in plan order).
#[derive(Debug, Default)]
struct Layout {
    recv: Vec<Slot>,
    send_at: Vec<u64>,
}

impl Layout {
    /// Rank `me`'s layout of `mine`, whose peers' plans of the same phase
    /// `theirs` gives, with slots from `from`.
    fn of(
        me: u32,
        mine: &Plan,
        from: u64,
        theirs: impl Fn(u32) -> Result<Plan, String>,
    ) -> Result<Layout, String> {
        let recv = slots(mine, from).0;
        // Per peer: its slots for messages from me, and how many of
        // them my sends have used so far.
        let mut at_peer: BTreeMap<u32, (Vec<Slot>, usize)> = BTreeMap::new();
        let mut send_at = Vec::new();
        for msg in mine.steps.iter().flat_map(|s| &s.sends) {
            let (list, used) = match at_peer.entry(msg.peer) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    let (all, _) = slots(&theirs(msg.peer)?, from);
                    e.insert((all.into_iter().filter(|s| s.from == me).collect(), 0))
                }
            };
            let slot = list.get(*used).copied().ok_or_else(|| {
                format!(
                    "rank {me} sends h{} more messages than that rank receives from it",
                    msg.peer
                )
            })?;
            if slot.len != msg.bytes().max(1) {
                return Err(format!(
                    "rank {me}'s message {} to h{} is {} B, and h{} expects {} B",
                    *used,
                    msg.peer,
                    msg.bytes(),
                    msg.peer,
                    slot.len
                ));
            }
            *used += 1;
            send_at.push(slot.at);
        }
        Ok(Layout { recv, send_at })
    }
}

/// Which phase a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Collective,
    Barrier,
}

/// The write wire's state at one rank.
#[derive(Debug)]
pub(super) struct Direct {
    me: u32,
    phantom: bool,
    barrier: Layout,
    coll: Layout,
    /// Per slot (by offset): its length, and the bytes arrived and not
    /// yet taken.
    arrived: BTreeMap<u64, (u64, u64)>,
    /// WRITEs of the step under way, not yet complete.
    open: BTreeMap<WrId, ()>,
    /// WRITEs the NIC's queue had no room for yet.
    backlog: VecDeque<WorkRequest>,
    /// Writes that reached no slot (a bug if ever seen).
    pub(super) strays: u64,
    /// A WRITE that failed, and why.
    failed: Option<String>,
}

impl Direct {
    /// Registers rank `me`'s regions on `nic` (which must have none yet:
    /// their keys are what peers write to) for every size of `plan`,
    /// and lays out the first size.
    pub(super) fn new(me: u32, plan: &ScheduledPlan, nic: &mut Nic) -> Result<Direct, String> {
        let b = plan.barrier(me).map_err(|e| e.to_string())?;
        let end = slots(&b, 0).1;
        if end > COLLECTIVE_AT {
            return Err(format!(
                "the barrier's {end} landing bytes pass the {COLLECTIVE_AT} set aside"
            ));
        }
        let mut arena = 8u64;
        let mut landing = 0u64;
        for size in 0..plan.sizes.len().max(1) {
            let c = plan.spec_at(size).plan(me).map_err(|e| e.to_string())?;
            arena = arena.max(c.arena);
            landing = landing.max(slots(&c, COLLECTIVE_AT).1);
        }
        let phantom = plan.phantom;
        let m = nic.memory_mut();
        let keys = if phantom {
            (
                m.register_phantom(ARENA_BASE, arena, Access::ALL),
                m.register_phantom(LAND_BASE, landing, Access::ALL),
            )
        } else {
            let len = |n: u64| {
                usize::try_from(n).map_err(|_| format!("{n} bytes do not fit this machine"))
            };
            (
                m.register(ARENA_BASE, len(arena)?, Access::ALL),
                m.register(LAND_BASE, len(landing)?, Access::ALL),
            )
        };
        if keys != (ARENA_KEY, LAND_KEY) {
            return Err(format!(
                "rank {me}'s regions got keys {:?}, not the {:?} its peers write to (the NIC had regions already)",
                keys,
                (ARENA_KEY, LAND_KEY)
            ));
        }
        let barrier = Layout::of(me, &b, 0, |q| plan.barrier(q).map_err(|e| e.to_string()))?;
        let mut d = Direct {
            me,
            phantom,
            barrier,
            coll: Layout::default(),
            arrived: BTreeMap::new(),
            open: BTreeMap::new(),
            backlog: VecDeque::new(),
            strays: 0,
            failed: None,
        };
        for s in &d.barrier.recv {
            d.arrived.insert(s.at, (s.len, 0));
        }
        d.lay_out(plan, 0)?;
        Ok(d)
    }

    /// Lays out the collective's slots at the `size`-th size (when no
    /// peer can be writing the old ones: see the module's notes).
    pub(super) fn lay_out(&mut self, plan: &ScheduledPlan, size: usize) -> Result<(), String> {
        let at = plan.spec_at(size);
        let c = at.plan(self.me).map_err(|e| e.to_string())?;
        self.coll = Layout::of(self.me, &c, COLLECTIVE_AT, |q| {
            at.plan(q).map_err(|e| e.to_string())
        })?;
        self.arrived.retain(|&at, _| at < COLLECTIVE_AT);
        for s in &self.coll.recv {
            self.arrived.insert(s.at, (s.len, 0));
        }
        Ok(())
    }

    /// Whether the regions hold no bytes.
    pub(super) fn phantom(&self) -> bool {
        self.phantom
    }

    fn layout(&self, part: Part) -> &Layout {
        match part {
            Part::Collective => &self.coll,
            Part::Barrier => &self.barrier,
        }
    }

    /// Posts the WRITE of the `index`-th send of `part`'s plan.
    pub(super) fn send(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        part: Part,
        index: usize,
        msg: &Msg,
    ) -> Result<(), String> {
        let at = *self
            .layout(part)
            .send_at
            .get(index)
            .ok_or_else(|| format!("no slot for send {index}"))?;
        let sges: Vec<Sge> = msg
            .spans
            .iter()
            .filter(|s| s.len > 0)
            .map(|s| Sge {
                key: ARENA_KEY,
                addr: ARENA_BASE + s.at,
                len: s.len,
            })
            .collect();
        let max = nic.config().max_sge.max(1);
        let mut remote = LAND_BASE + at;
        let wrs: Vec<WorkRequest> = if sges.is_empty() {
            // An empty message is one byte, so that it is a packet that
            // lands (its content is not read).
            vec![WorkRequest::write(
                NodeAddr(msg.peer),
                ARENA_KEY,
                ARENA_BASE,
                1,
                LAND_KEY.0,
                remote,
            )]
        } else {
            sges.chunks(max)
                .map(|part| {
                    let sgl = Sgl::new(part.to_vec()).expect("spans of one arena");
                    let len = sgl.len();
                    let wr =
                        WorkRequest::write(NodeAddr(msg.peer), ARENA_KEY, 0, 0, LAND_KEY.0, remote)
                            .gather(sgl);
                    remote += len;
                    wr
                })
                .collect()
        };
        for wr in wrs {
            self.backlog.push_back(wr);
        }
        self.pump(now, nic)
    }

    /// Posts what waited for room in the NIC's queue.
    fn pump(&mut self, now: Instant, nic: &mut Nic) -> Result<(), String> {
        while let Some(wr) = self.backlog.pop_front() {
            match nic.post(now, wr.clone()) {
                Ok(id) => {
                    self.open.insert(id, ());
                }
                Err(udrma_nic::PostError::QueueFull(_)) => {
                    self.backlog.push_front(wr);
                    break;
                }
                Err(e) => {
                    // The rank stops: nothing more goes out.
                    self.backlog.clear();
                    return Err(format!("WRITE to h{} refused: {e}", wr.dst.0));
                }
            }
        }
        Ok(())
    }

    /// The offset of the `index`-th receive of `part`'s plan.
    pub(super) fn recv_at(&self, part: Part, index: usize) -> Option<u64> {
        self.layout(part).recv.get(index).map(|s| s.at)
    }

    /// Whether the slot at `at` holds a whole message.
    pub(super) fn is_in(&self, at: u64) -> bool {
        self.arrived.get(&at).is_some_and(|&(len, got)| got >= len)
    }

    /// Takes the message at `at` off its slot's count.
    pub(super) fn take(&mut self, at: u64) {
        if let Some((len, got)) = self.arrived.get_mut(&at) {
            *got = got.saturating_sub(*len);
        }
    }

    /// Whether the step's WRITEs are all complete.
    pub(super) fn sent(&self) -> bool {
        self.open.is_empty() && self.backlog.is_empty()
    }

    /// A failed WRITE's reason, once.
    pub(super) fn take_failure(&mut self) -> Option<String> {
        self.failed.take()
    }

    /// Takes the NIC's event: a WRITE of ours completed, or one landed.
    pub(super) fn handle_event(&mut self, now: Instant, nic: &mut Nic, e: &Event) {
        match *e {
            Event::Completed { wr, ref result, .. } if self.open.remove(&wr).is_some() => {
                if let Err(err) = result {
                    self.failed
                        .get_or_insert_with(|| format!("a WRITE failed: {err}"));
                    // The rank stops: what waited to go does not.
                    self.backlog.clear();
                } else if let Err(err) = self.pump(now, nic) {
                    self.failed.get_or_insert(err);
                }
            }
            Event::WriteReceived { addr, len, .. } => {
                let off = addr.wrapping_sub(LAND_BASE);
                match self.arrived.range_mut(..=off).next_back() {
                    Some((&at, (slot, got))) if off.saturating_add(len) <= at + *slot => {
                        *got += len
                    }
                    _ => self.strays += 1,
                }
            }
            _ => {}
        }
    }

    /// The bytes at `at` of the landing region (empty when phantom).
    pub(super) fn landed(&self, nic: &Nic, at: u64, len: u64) -> Vec<u8> {
        if self.phantom {
            return Vec::new();
        }
        nic.memory()
            .region(LAND_KEY)
            .and_then(|r| r.bytes.get(at as usize..(at + len) as usize))
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// The arena's bytes at `s` (empty when phantom).
    pub(super) fn read(&self, nic: &Nic, s: Span) -> Vec<u8> {
        if self.phantom {
            return Vec::new();
        }
        nic.memory()
            .region(ARENA_KEY)
            .and_then(|r| r.bytes.get(s.at as usize..s.end() as usize))
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    }

    /// Writes `data` at `s` of the arena (nothing when phantom).
    pub(super) fn write(&self, nic: &mut Nic, s: Span, data: &[u8]) {
        if self.phantom {
            return;
        }
        if let Some(r) = nic.memory_mut().region_mut(ARENA_KEY) {
            r.bytes.write_at(s.at as usize..s.end() as usize, data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::schedule::{Algorithm, Collective, Spec};
    use crate::collective::scheduled::{SizeRun, Wire};
    use udrma_nic::NicConfig;
    use udrma_proto::{ReduceOp, ReduceType};

    /// A write that lands outside every slot is counted, not added to
    /// the slot below it; one inside a slot fills it, and taking it
    /// empties it.
    #[test]
    fn a_write_outside_the_slots_is_a_stray() {
        let algorithm = Algorithm::Ring;
        let plan = ScheduledPlan {
            spec: Spec {
                collective: Collective::Allreduce,
                algorithm,
                ranks: 4,
                count: 0,
                elem: 8,
                root: 0,
                pipeline: Spec::PIPELINE,
            },
            sizes: vec![SizeRun {
                count: 8,
                algorithm,
            }],
            op: ReduceOp::Sum,
            ty: ReduceType::F64,
            iterations: 1,
            warmup: 0,
            start: Instant::ZERO,
            seed: 1,
            wire: Wire::Write,
            phantom: false,
        };
        let mut nic = Nic::new(NodeAddr(0), NicConfig::default()).unwrap();
        let mut d = Direct::new(0, &plan, &mut nic).unwrap();
        let first = d.recv_at(Part::Collective, 0).unwrap();
        let (len, _) = d.arrived[&first];
        let landed = |addr: u64, len: u64| Event::WriteReceived {
            from: NodeAddr(3),
            ep: 0,
            msg_id: 1,
            addr,
            len,
            at: Instant::ZERO,
        };
        let last = *d.arrived.keys().next_back().unwrap();
        let past = LAND_BASE + last + d.arrived[&last].0;
        d.handle_event(Instant::ZERO, &mut nic, &landed(past, 8));
        assert_eq!(d.strays, 1);
        assert!(!d.is_in(last));
        d.handle_event(Instant::ZERO, &mut nic, &landed(LAND_BASE + first, len));
        assert!(d.is_in(first));
        d.take(first);
        assert!(!d.is_in(first));
    }
}
