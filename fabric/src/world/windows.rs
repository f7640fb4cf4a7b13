//! Lookahead windows: the event loop's second order, for large fabrics.
//!
//! Every effect one node (host or switch) has on another crosses a link,
//! so it lands at least the shortest link latency `L` later. Cut time
//! into windows `L` wide: nothing that happens inside a window can cause
//! anything at another node inside the same window. So a window's events
//! may run node by node, each node's in time order, and every node still
//! sees exactly what it would see in time order, up to ties: events at
//! one node at the very same picosecond, which time order runs in the
//! order they were scheduled. Here ties are broken by what the node
//! itself can know (see [`Windows::stamp`]): arrivals first, by port,
//! then the node's own events in the order it scheduled them.
//!
//! What it buys is locality. In time order consecutive events belong to
//! different nodes, so on a fabric larger than the caches each event
//! loads its node's state from memory. Here a node's events in a window
//! (a host's arrivals, wake-ups and timers: a handful per microsecond at
//! 100 Gb/s) run back to back on state that stays in the cache, the
//! window's events are known in advance (so what they touch is asked for
//! well ahead), and nodes run in index order, so their state is walked
//! in address order.
//!
//! What differs from time order: the trace takes a window's events node
//! by node, each node's run as one digest ([`Trace::begin_run`]), so
//! trace hashes differ; packets are numbered by their sending node
//! (`Origin`), so the ECN draws that hash those numbers differ; the
//! random draws several nodes share (fault rules) are taken in a
//! different order. Outcomes are those of the same model, not
//! bit-identical with time order's. Rules whose verdict depends on when
//! earlier packets came (rate shapers, delays with a limit) would see
//! their packets out of time order, so a world with one refuses windows.
//!
//! Nothing a node does in a window depends on which nodes ran before it
//! in that window: so the nodes can be shared out between threads and
//! the run comes out the same (`shards`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::*;
use crate::queue::unpack;
use events::{CODE_AHEAD, CODE_ARRIVE, CODE_HOST_FREE, CODE_INDEX, CODE_TIMER};

/// The order the event loop runs events in ([`World::set_event_order`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum EventOrder {
    /// Strictly by time, ties in the order they were scheduled.
    #[default]
    Time,
    /// Window by window, node by node within a window, each node's events
    /// in time order (see the module documentation).
    Windows,
}

/// Why a world cannot run in windows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum WindowError {
    /// Some link has no latency: there is no window to run.
    #[error("a link has zero latency, so no window is safe (windows are as wide as the shortest link latency)")]
    ZeroLatency,
    /// A fault rule needs its packets in time order.
    #[error("fault rule {0:?} depends on when earlier packets came (a rate shaper or a delay with a limit), which needs time order")]
    TimedRule(String),
    /// A lossless fabric needs time order.
    #[error("the fabric is lossless (PFC), which needs time order")]
    Pfc,
}

/// The window loop's state.
#[derive(Debug, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Windows {
    /// Window width in picoseconds (the shortest link latency); 0: time
    /// order.
    pub(super) width: u64,
    /// End of the window being run (exclusive); 0 between windows.
    pub(super) end: u64,
    /// The node whose events are running.
    node: u32,
    /// Keys scheduled for the window being run (its node's, always).
    local: BinaryHeap<Reverse<u128>>,
    /// The window's keys taken from the queue, with their node, in key
    /// order.
    taken: Vec<(u32, u128)>,
    /// The same keys by node, each node's in key order.
    batch: Vec<(u32, u128)>,
    /// Scratch for [`by_node`]: per node a count, then where its next key
    /// goes in `batch` (one more entry than there are nodes).
    starts: Vec<u32>,
    /// Per node, what it has stamped and sent in windows (see
    /// [`Origin`]).
    origins: Vec<Origin>,
}

/// What one node has numbered while running in windows: the keys it
/// stamped and the packets it sent. Each node counts its own, so a key's
/// tie-breaker and a packet's serial number depend only on what that node
/// did, never on which other nodes ran before it in a window: the order
/// of a run split across threads by node is then the order of one thread.
#[derive(Debug, Default, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Origin {
    stamps: u32,
    sent: u32,
}

impl Windows {
    /// A key for `slot` at `t`, stamped by the running node. An arrival
    /// at a port's far end needs no stamp: its key is its time and its
    /// port (tie-breaker 0), whichever node files it. The packet's sender
    /// files it when the packet joins an empty line, its receiver when
    /// the packet before it arrives; which of the two it was depends on
    /// whether the sender ran before the receiver in the window, but the
    /// key does not. Every other event is filed by the node it happens
    /// at (a host's wake-ups and timers, events with data), whose own
    /// count breaks ties in time; the one exception, a header a switch
    /// sends ahead of its queue, carries the sender's count and its port
    /// (the sender is the port's one sender, so no two such keys tie, and
    /// a tie with the receiver's own events is broken by the slot: events
    /// with data first, then ahead arrivals by port, whoever runs which
    /// node). The counts wrap after 2^32 keys, which keeps the order
    /// deterministic if not FIFO.
    #[inline]
    pub(super) fn stamp(&mut self, t: Instant, slot: u32) -> u128 {
        if slot & !CODE_INDEX == CODE_ARRIVE {
            return crate::queue::pack(t, 0, slot);
        }
        let o = &mut self.origins[self.node as usize];
        o.stamps = o.stamps.wrapping_add(1);
        crate::queue::pack(t, o.stamps, slot)
    }

    /// The serial number of the next packet the running node sends: its
    /// number above 2^32 (serials below are those handed out outside
    /// windows, by the world's one count), its own count below.
    #[inline]
    pub(super) fn serial(&mut self) -> u64 {
        let node = self.node;
        let o = &mut self.origins[node as usize];
        o.sent = o.sent.wrapping_add(1);
        ((u64::from(node) + 1) << 32) | u64::from(o.sent)
    }
}

/// How far ahead in the window's list the loop asks for a port's state
/// and a node's lines, for the first packets of a port's line, and for a
/// packet's bytes ([`World::prefetch_window`]).
const AHEAD_STATE: usize = 12;
const AHEAD_HEAD: usize = 6;
const AHEAD_BYTES: usize = 3;
/// Packets of a line asked for at once: the head, whose arrival is in
/// the window's list, and those behind it, which arrive within the same
/// window (about three a microsecond at 100 Gb/s) from the node's own
/// schedule, which no list shows in advance.
const LINE_ENTRIES: usize = 4;

impl World {
    /// Chooses the order events run in: time order (the default), or
    /// lookahead windows as wide as the shortest link latency, which
    /// large fabrics run faster (docs/fabric.md, "Event order"). Returns
    /// the window width, or why the world cannot use windows (it then
    /// keeps time order). Only between runs.
    pub fn set_event_order(&mut self, order: EventOrder) -> Result<Option<Duration>, WindowError> {
        self.windows.width = 0;
        if order == EventOrder::Time {
            return Ok(None);
        }
        if self.pfc.is_some() {
            return Err(WindowError::Pfc);
        }
        if let Some(r) = self.faults.rules().iter().find(|r| r.model.keeps_time()) {
            return Err(WindowError::TimedRule(r.name.clone()));
        }
        let shortest = self.ports.iter().map(|p| p.hot.latency.as_ps()).min();
        match shortest {
            Some(0) => Err(WindowError::ZeroLatency),
            Some(w) => {
                self.windows.width = w;
                self.windows
                    .origins
                    .resize(self.topo.nodes.len(), Origin::default());
                Ok(Some(Duration::from_ps(w)))
            }
            // No links: nothing crosses between nodes, any width is safe.
            None => {
                self.windows.width = u64::MAX;
                self.windows
                    .origins
                    .resize(self.topo.nodes.len(), Origin::default());
                Ok(Some(Duration::from_ps(u64::MAX)))
            }
        }
    }

    /// The order events run in.
    pub fn event_order(&self) -> EventOrder {
        if self.windows.width > 0 {
            EventOrder::Windows
        } else {
            EventOrder::Time
        }
    }

    /// The node an event code's event happens at.
    pub(super) fn owner(&self, slot: u32) -> u32 {
        let index = slot & CODE_INDEX;
        match slot & !CODE_INDEX {
            CODE_ARRIVE => self.ports[index as usize].hot.peer,
            CODE_HOST_FREE | CODE_TIMER => self.topo.hosts[index as usize],
            _ if index & CODE_AHEAD != 0 => self.ports[(index & !CODE_AHEAD) as usize].hot.peer,
            _ => match self.slab[index as usize].as_ref() {
                Some(EvKind::Enqueue(p, _)) => self.topo.ports[*p as usize].node,
                Some(EvKind::ArriveAhead(p) | EvKind::Arrive(p)) => {
                    self.ports[*p as usize].hot.peer
                }
                Some(
                    EvKind::HostFree(h)
                    | EvKind::Timer(h)
                    | EvKind::Pause(h, _)
                    | EvKind::Resume(h)
                    | EvKind::Post(h, _)
                    | EvKind::Deliver(h, _),
                ) => self.topo.hosts[*h as usize],
                Some(EvKind::Pfc(e)) => e.node(&self.topo),
                None => unreachable!("a key names an empty slab slot"),
            },
        }
    }

    /// Files an event scheduled inside the window being run. It must be
    /// the running node's own: an event at another node this soon would
    /// break the window's promise (a bug in whatever scheduled it, which
    /// this stops rather than run out of order).
    pub(super) fn schedule_in_window(&mut self, t: Instant, slot: u32) {
        let owner = self.owner(slot);
        assert_eq!(
            owner, self.windows.node,
            "an event at node {owner} scheduled inside the window of node {} (at {t}, window end {} ps)",
            self.windows.node, self.windows.end
        );
        let k = self.windows.stamp(t, slot);
        self.windows.local.push(Reverse(k));
    }

    /// Files an event the running node schedules for a later window.
    pub(super) fn schedule_later(&mut self, t: Instant, slot: u32) {
        let k = self.windows.stamp(t, slot);
        self.queue.insert_key(k);
    }

    /// [`World::run_for`] in windows: whole windows only, so a run in
    /// slices has the windows of a run in one go (the next window is
    /// worked out from the queue alone).
    pub(super) fn run_windows(&mut self, limit: Instant, stop_at: u64) -> Ran {
        let idle = loop {
            let Some(first) = self.queue.peek() else {
                break true;
            };
            if first.t > limit {
                break false;
            }
            if self.stats.events >= stop_at {
                // The frames before the next window are flushed as it
                // begins.
                return Ran::Budget;
            }
            let (start, end) = span(first.t, self.windows.width, limit);
            let pending = self.run_one_window(start, end);
            self.stats.max_event_queue = self.stats.max_event_queue.max(pending);
        };
        self.flush_pcap(if idle { Instant(u64::MAX) } else { limit });
        if idle {
            Ran::Idle
        } else {
            Ran::Limit
        }
    }

    /// Runs the events from `start` to `end` (exclusive; nothing is due
    /// before `start`), and returns how many events were pending as it
    /// began (its own and later ones).
    pub(super) fn run_one_window(&mut self, start: u64, end: u64) -> u64 {
        let mut taken = std::mem::take(&mut self.windows.taken);
        let mut batch = std::mem::take(&mut self.windows.batch);
        let mut starts = std::mem::take(&mut self.windows.starts);
        starts.resize(self.topo.nodes.len() + 1, 0);
        // Frames are captured when a packet starts crossing, never before
        // its node's event: those before this window are final.
        self.flush_pcap(Instant(start.saturating_sub(1)));
        taken.clear();
        while let Some(k) = self.queue.take_before(Instant(end)) {
            taken.push((self.owner(k as u32), k));
        }
        let pending = (taken.len() + self.queue.len()) as u64;
        by_node(&taken, &mut starts, &mut batch);
        self.windows.end = end;
        self.run_window(&batch);
        self.windows.end = 0;
        self.windows.taken = taken;
        self.windows.batch = batch;
        self.windows.starts = starts;
        pending
    }

    /// Runs one window's events: node by node, each node's keys from the
    /// queue merged in key order with those it schedules for itself.
    fn run_window(&mut self, batch: &[(u32, u128)]) {
        let mut latest = self.now;
        let mut i = 0;
        while i < batch.len() {
            let node = batch[i].0;
            self.windows.node = node;
            self.trace.begin_run();
            loop {
                let next = batch.get(i).filter(|e| e.0 == node).map(|e| e.1);
                let k = match (next, self.windows.local.peek()) {
                    (Some(b), Some(&Reverse(l))) if l < b => {
                        self.windows.local.pop();
                        l
                    }
                    (Some(b), _) => {
                        self.prefetch_window(batch, i);
                        i += 1;
                        b
                    }
                    (None, Some(&Reverse(l))) => {
                        self.windows.local.pop();
                        l
                    }
                    (None, None) => break,
                };
                let key = unpack(k);
                if self.run_event(key, false) {
                    latest = latest.max(key.t);
                }
            }
            self.trace.end_run(node);
        }
        // Between windows the clock reads the latest event run.
        self.now = latest;
    }

    /// Asks for what the window's events ahead of `i` will touch. Far
    /// ahead: an arrival's port state and, where a node's run begins, a
    /// host's lines or the state of every port of a switch (its run sends
    /// out of most of them). Nearer: the first packets of an arriving
    /// port's line (the ones behind the head arrive in the same run) and
    /// the host's lines if the line ends at one. Just before: for an
    /// arrival at a host, the packet's bytes, which the NIC reads first.
    #[inline]
    fn prefetch_window(&self, batch: &[(u32, u128)], i: usize) {
        let starts = |j: usize| batch[j - 1].0 != batch[j].0;
        if let Some(&(node, k)) = batch.get(i + AHEAD_STATE) {
            let slot = k as u32;
            let index = slot & CODE_INDEX;
            let first = starts(i + AHEAD_STATE);
            match slot & !CODE_INDEX {
                CODE_ARRIVE => self.prefetch_port(index, true),
                CODE_HOST_FREE | CODE_TIMER if first => self.prefetch_host(index),
                _ => {}
            }
            if first {
                self.prefetch_switch(node);
            }
        }
        if let Some(&(_, k)) = batch.get(i + AHEAD_HEAD) {
            let slot = k as u32;
            if slot & !CODE_INDEX == CODE_ARRIVE {
                let p = slot & CODE_INDEX;
                self.prefetch_line(p, LINE_ENTRIES);
                if starts(i + AHEAD_HEAD) {
                    if let Some(h) = self.ports.get(p as usize).and_then(|st| st.hot.peer_host()) {
                        self.prefetch_host(h);
                    }
                }
            }
        }
        if let Some(&(_, k)) = batch.get(i + AHEAD_BYTES) {
            let slot = k as u32;
            if slot & !CODE_INDEX == CODE_ARRIVE {
                if let Some((st, head)) = self.head_of(slot & CODE_INDEX) {
                    if st.hot.peer_host().is_some() {
                        prefetch_bytes(&head.pkt);
                    }
                }
            }
        }
    }

    /// Asks for the state of every port of `node` if it is a switch.
    #[inline]
    fn prefetch_switch(&self, node: u32) {
        if let Some(n) = self.topo.nodes.get(node as usize) {
            if n.kind == NodeKind::Switch {
                for &p in &n.ports {
                    self.prefetch_port(p, true);
                }
            }
        }
    }
}

/// Puts `taken` (keys in key order, with their nodes, every node below
/// `starts.len() - 1`) into `batch` node by node, each node's keys still
/// in key order: a counting sort, two passes where a comparison sort
/// would take many. The result is the list sorted by (node, key).
fn by_node(taken: &[(u32, u128)], starts: &mut [u32], batch: &mut Vec<(u32, u128)>) {
    starts.fill(0);
    for &(node, _) in taken {
        starts[node as usize + 1] += 1;
    }
    for n in 1..starts.len() {
        starts[n] += starts[n - 1];
    }
    batch.clear();
    batch.resize(taken.len(), (0, 0));
    for &(node, k) in taken {
        let at = &mut starts[node as usize];
        batch[*at as usize] = (node, k);
        *at += 1;
    }
}

/// Asks for the first two lines of a packet's bytes (its header and
/// ICRC: what a receiving NIC reads first).
#[inline]
pub(super) fn prefetch_bytes(pkt: &Pkt) {
    let b = pkt.bytes.as_ptr();
    crate::prefetch::prefetch(b);
    crate::prefetch::prefetch(b.wrapping_add(64));
}

/// The window whose first event is at `t`: from the window boundary at
/// or before `t`, `width` wide, cut after `limit` (a run to a limit runs
/// nothing past it).
pub(super) fn span(t: Instant, width: u64, limit: Instant) -> (u64, u64) {
    let start = t.as_ps() - t.as_ps() % width;
    let end = start
        .saturating_add(width)
        .min(limit.as_ps().saturating_add(1));
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use udrma_nic::Access;

    proptest! {
        /// The counting sort gives what sorting by (node, key) gives, and
        /// leaves nothing out, twice in a row on the same buffers (the
        /// loop reuses them window after window).
        #[test]
        fn by_node_is_a_sort_by_node_then_key(
            windows in proptest::collection::vec(
                proptest::collection::btree_map(any::<u128>(), 0u32..7, 0..60), 1..3),
        ) {
            let mut starts = vec![0; 8];
            let mut batch = Vec::new();
            for keys in windows {
                let taken: Vec<(u32, u128)> = keys.iter().map(|(&k, &n)| (n, k)).collect();
                by_node(&taken, &mut starts, &mut batch);
                let mut sorted = taken.clone();
                sorted.sort_unstable();
                prop_assert_eq!(&batch, &sorted);
            }
        }
    }

    /// An event a node schedules for the very end of the window being
    /// run belongs to the next window (windows end before their end
    /// time): it goes to the queue, where arrivals at that time sort
    /// ahead of it, not into the running node's list.
    #[test]
    fn an_event_at_the_window_end_waits_for_the_next_window() {
        let topo = Topology::pair(crate::LinkParams::default());
        let mut w = World::new(topo, FabricConfig::default(), RuleSet::new()).unwrap();
        w.set_event_order(EventOrder::Windows).unwrap();
        let end = 3_000_000;
        w.windows.end = end;
        w.windows.node = w.topo.hosts[0];
        let queued = w.queue.len();
        w.schedule(Instant(end - 1), EvKind::Timer(0));
        assert_eq!((w.windows.local.len(), w.queue.len()), (1, queued));
        w.schedule(Instant(end), EvKind::Timer(0));
        assert_eq!((w.windows.local.len(), w.queue.len()), (1, queued + 1));
    }

    /// The window's promise is checked, not assumed: a window wider than
    /// the link lets a host's packet reach the other host inside it, and
    /// the loop stops there instead of running that arrival out of order.
    #[test]
    #[should_panic(expected = "scheduled inside the window")]
    fn an_event_at_another_node_inside_the_window_is_stopped() {
        let topo = Topology::pair(crate::LinkParams::default());
        let mut w = World::new(topo, FabricConfig::default(), RuleSet::new()).unwrap();
        let mut keys = Vec::new();
        for h in 0..2 {
            let m = w.nic_mut(NodeAddr(h)).memory_mut();
            keys.push((
                m.register_phantom(0x1000, 1 << 16, Access::ALL),
                m.register_phantom(0x2_0000, 1 << 16, Access::ALL),
            ));
        }
        let wr = WorkRequest::write(NodeAddr(1), keys[0].0, 0x1000, 8192, keys[1].1 .0, 0x2_0000);
        w.post(NodeAddr(0), wr).unwrap();
        assert_eq!(
            w.set_event_order(EventOrder::Windows),
            Ok(Some(Duration::from_micros(1)))
        );
        // Four times the link's latency: wrong on purpose.
        w.windows.width = 4_000_000;
        w.run();
    }
}
