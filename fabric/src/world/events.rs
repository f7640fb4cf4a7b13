//! The event loop: queue keys and the slab, stepping, and dispatch.

use super::*;

#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) enum EvKind {
    /// A host's port finished sending: pull the NIC's next datagram.
    HostFree(u32),
    /// The packet at the head of a port's flight line reaches the far end.
    Arrive(PortId),
    Enqueue(PortId, Pkt),
    Timer(u32),
    Pause(u32, Instant),
    Resume(u32),
    /// Boxed: the slab's entries are as large as the largest event.
    Post(u32, Box<WorkRequest>),
    /// The host NIC's receive side has processed a packet (cost model).
    Deliver(u32, Pkt),
    /// The first packet of a port's ahead line (a header sent ahead of
    /// its queue: trimmed, or control under priority) reaches the far end.
    ArriveAhead(PortId),
    /// Priority Flow Control (`pfc`).
    Pfc(pfc::PfcEv),
}

/// Where a run in slices ([`World::run_for`]) stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// Nothing is left to happen.
    Idle,
    /// The next event is due after the limit.
    Limit,
    /// The slice's events ran with more still due before the limit.
    Budget,
}

/// Event codes in a queue key's `slot` (see `World::code`); 0 is the slab.
pub(super) const CODE_INDEX: u32 = (1 << 30) - 1;
pub(super) const CODE_ARRIVE: u32 = 1 << 30;
pub(super) const CODE_HOST_FREE: u32 = 2 << 30;
pub(super) const CODE_TIMER: u32 = 3 << 30;
/// Below the two top bits: set for an ahead arrival (its port below),
/// clear for a slab slot.
pub(super) const CODE_AHEAD: u32 = 1 << 29;
/// Lines of a host's state asked for ahead of its events (deep pipeline):
/// its own fields and the NIC's per-packet part (20 lines, 1,256 bytes,
/// today).
pub(super) const HOST_LINES: usize =
    (std::mem::offset_of!(HostState, nic) + Nic::HOT_BYTES).div_ceil(64);

impl World {
    /// The key's `slot` for `kind`: the two top bits say which event, the
    /// rest is its port or host, or for events with data the slab slot
    /// that holds them. Arrivals, host wake-ups and timers (nearly every
    /// event) never touch the slab, which saves two cache misses an event
    /// on large topologies.
    pub(super) fn code(&mut self, kind: EvKind) -> u32 {
        let small = |tag: u32, index: u32| (index <= CODE_INDEX).then_some(tag | index);
        let coded = match kind {
            EvKind::Arrive(port) => small(CODE_ARRIVE, port),
            EvKind::HostFree(h) => small(CODE_HOST_FREE, h),
            EvKind::Timer(h) => small(CODE_TIMER, h),
            EvKind::ArriveAhead(port) => (port < CODE_AHEAD).then_some(CODE_AHEAD | port),
            _ => None,
        };
        if let Some(c) = coded {
            return c;
        }
        let slot = match self.free.pop() {
            Some(i) => {
                self.slab[i as usize] = Some(kind);
                i
            }
            None => {
                self.slab.push(Some(kind));
                (self.slab.len() - 1) as u32
            }
        };
        assert!(slot < CODE_AHEAD, "more than 2^29 events with data pending");
        slot
    }

    /// The event a key's `slot` stands for (taking it out of the slab).
    pub(super) fn decode(&mut self, slot: u32) -> EvKind {
        let index = slot & CODE_INDEX;
        match slot & !CODE_INDEX {
            CODE_ARRIVE => EvKind::Arrive(index),
            CODE_HOST_FREE => EvKind::HostFree(index),
            CODE_TIMER => EvKind::Timer(index),
            _ if index & CODE_AHEAD != 0 => EvKind::ArriveAhead(index & !CODE_AHEAD),
            _ => {
                let kind = self.slab[index as usize].take().expect("scheduled event");
                self.free.push(index);
                kind
            }
        }
    }

    pub(super) fn schedule(&mut self, t: Instant, kind: EvKind) {
        let slot = self.code(kind);
        if self.windows.end > 0 {
            if t.as_ps() < self.windows.end {
                self.schedule_in_window(t, slot);
            } else {
                self.schedule_later(t, slot);
            }
            return;
        }
        self.queue.push(t, slot);
        self.stats.max_event_queue = self.stats.max_event_queue.max(self.queue.len() as u64);
    }

    /// Runs until nothing is left to happen or simulated time passes
    /// `limit`. Returns whether it went idle.
    pub fn run_until(&mut self, limit: Instant) -> bool {
        self.run_bounded::<false>(limit, u64::MAX) == Ran::Idle
    }

    /// [`World::run_until`], but it also returns once about `events`
    /// more events have run ([`Ran::Budget`]: in time order after exactly
    /// that many, in windows at the end of the window that reaches it),
    /// so that a caller can look at the run between slices. Calling it
    /// again goes on exactly where it stopped: a run in slices has the
    /// same events, trace and outcome as one in one go.
    pub fn run_for(&mut self, limit: Instant, events: u64) -> Ran {
        let stop_at = self.stats.events.saturating_add(events);
        self.run_bounded::<true>(limit, stop_at)
    }

    /// The loop of both: with `BOUNDED` false the budget check is not
    /// compiled in, and `run_until` costs what it did before.
    #[inline(always)]
    fn run_bounded<const BOUNDED: bool>(&mut self, limit: Instant, stop_at: u64) -> Ran {
        if self.windows.width > 0 {
            return self.run_windows(limit, stop_at);
        }
        // The same work as `peek_time` + `step`, fused: one slab read per
        // event instead of two (5 % of the speed shape's wall time).
        while let Some(key) = self.queue.peek() {
            if key.t > limit {
                self.flush_pcap(limit);
                return Ran::Limit;
            }
            if BOUNDED && self.stats.events >= stop_at {
                return Ran::Budget;
            }
            #[cfg(feature = "fingerprint")]
            self.note_fingerprint(key.t);
            self.queue.take();
            self.prefetch_ahead();
            self.run_event(key, true);
        }
        self.flush_pcap(Instant(u64::MAX));
        Ran::Idle
    }

    /// Runs the event `key` names, already out of the queue (or the
    /// window's list), and returns whether it ran. A timer's wake-up that
    /// finds nothing due is dropped without moving the clock (lazy
    /// cancellation: simulated time never runs on to a deadline that was
    /// cancelled). Otherwise the clock moves to the event, the event is
    /// counted and dispatched; with `flush_first` (time order) the
    /// capture first writes the frames before it, which windows do once a
    /// window instead.
    #[inline(always)]
    pub(super) fn run_event(&mut self, key: crate::queue::Key, flush_first: bool) -> bool {
        let kind = self.decode(key.slot);
        if let EvKind::Timer(h) = kind {
            if !self.timer_due(h, key.t) {
                return false;
            }
        }
        if let EvKind::Pfc(ev) = &kind {
            if !self.pfc_due(ev, key.t) {
                return false;
            }
        }
        self.now = key.t;
        self.stats.events += 1;
        if flush_first && !self.pcap_pending.is_empty() {
            self.flush_pcap(key.t);
        }
        self.dispatch(kind);
        true
    }

    /// Asks for the lines the next events will touch: the deep pipeline
    /// on a fabric whose state does not fit the caches, where it pays for
    /// the routes it works out early, the near one otherwise (where the
    /// deep one's extra work made k=8 runs 6–10 % slower).
    #[inline]
    fn prefetch_ahead(&mut self) {
        if self.deep_prefetch {
            self.prefetch_deep();
        } else {
            self.prefetch_near();
        }
    }

    /// Arrivals coming up (a small fabric), in three stages one event
    /// apart: the port state of the third next, the packet at the head of
    /// the second next's flight line (its port state asked for an event
    /// earlier), and for the next, if it reaches a host, the packet's
    /// bytes (its head asked for an event earlier), which the NIC reads
    /// first.
    #[inline]
    fn prefetch_near(&self) {
        if let Some(p) = self.arrival_in(2) {
            self.prefetch_port(p, false);
        }
        if let Some(p) = self.arrival_in(1) {
            self.prefetch_head(p);
        }
        if let Some((st, head)) = self.arrival_in(0).and_then(|p| self.head_of(p)) {
            if st.hot.peer_host().is_some() {
                crate::prefetch::prefetch(head.pkt.bytes.as_ptr());
            }
        }
    }

    /// Arrivals coming up (a large fabric), in four stages one event
    /// apart: the port state of the fourth next, the packet at the head
    /// of the third next's flight line, for the second next, if it
    /// reaches a switch, the state of the port it will leave by, and for
    /// the next, where that port's line takes its new entry (or, if it
    /// reaches a host, the packet's bytes, which the NIC reads first).
    /// Besides, the state of the host an event two ahead wakes
    /// ([`World::prefetch_host_in`]).
    #[inline]
    fn prefetch_deep(&mut self) {
        self.prefetch_host_in(2);
        if let Some(p) = self.arrival_in(3) {
            self.prefetch_port(p, false);
        }
        if let Some(p) = self.arrival_in(2) {
            self.prefetch_head(p);
        }
        if let Some(p) = self.arrival_in(1) {
            let next = self
                .head_of(p)
                .filter(|(st, _)| st.hot.peer_host().is_none())
                .map(|(st, head)| (st.hot.peer, head.pkt.route_key(), head.pkt.serial));
            if let Some((node, key, serial)) = next {
                if let Some(out) = self.out_port(node, key) {
                    self.early_route = (p, serial, out);
                    self.prefetch_port(out, true);
                }
            }
        }
        if let Some(p) = self.arrival_in(0) {
            let Some((st, head)) = self.head_of(p) else {
                return;
            };
            if st.hot.peer_host().is_some() {
                crate::prefetch::prefetch(head.pkt.bytes.as_ptr());
                return;
            }
            // The route worked out an event ago, if it was for this packet.
            let (ep, serial, early) = self.early_route;
            let out = if (ep, serial) == (p, head.pkt.serial) {
                Some(early)
            } else {
                let (node, key) = (st.hot.peer, head.pkt.route_key());
                self.out_port(node, key)
            };
            // Where its entry will be written: just past the line's last
            // (the queue's count is settled only when it decides something,
            // so the first waiting packet is rarely read).
            let Some(o) = out else {
                return;
            };
            self.prefetch_tail(o);
            // A line to another shard first drops its stand-ins that have
            // arrived (`World::enqueue`), reading its oldest only once one
            // may have: asked for then too.
            let due = (self.shard.as_deref())
                .and_then(|s| s.stand_ins_from.get(o as usize))
                .is_some_and(|&from| from <= self.now.as_ps());
            let remote = self.ports.get(o as usize).filter(|st| due && st.hot.remote);
            if let Some(f) = remote.and_then(|st| st.flight.front()) {
                prefetch_entry(f);
            }
        }
    }

    /// Asks for the first [`HOST_LINES`] lines of the state of the host
    /// that the event `n` from now wakes: a transmit or timer wake-up, or
    /// (one event nearer, its port state asked for already) an arrival at
    /// a host. Those lines (20 today) hold the host's own fields and the
    /// part of its NIC that every packet reads (the NIC puts it first; see
    /// `Nic::HOT_BYTES`); from a few thousand hosts up they are cold.
    /// docs/benchmarks.md ("The NIC's per-packet part first") has what
    /// this and the counts before it measured.
    #[inline(always)]
    fn prefetch_host_in(&self, n: usize) {
        let h = match self.queue.upcoming(n) {
            Some(slot)
                if slot & !CODE_INDEX == CODE_HOST_FREE || slot & !CODE_INDEX == CODE_TIMER =>
            {
                slot & CODE_INDEX
            }
            // An arrival's port state was asked for an event before.
            _ => match self
                .arrival_in(n - 1)
                .and_then(|p| self.ports.get(p as usize))
            {
                Some(st) => st.hot.peer_host_raw,
                None => return,
            },
        };
        self.prefetch_host(h);
    }

    /// Asks for the first [`HOST_LINES`] lines of host `h`'s state.
    #[inline(always)]
    pub(super) fn prefetch_host(&self, h: u32) {
        if let Some(host) = self.hosts.get(h as usize) {
            let p: *const HostState = host;
            for i in 0..HOST_LINES {
                crate::prefetch::prefetch(p.cast::<u8>().wrapping_add(64 * i));
            }
        }
    }

    /// The port whose flight line's head arrives `n` events from now, if
    /// that event is an arrival.
    #[inline(always)]
    fn arrival_in(&self, n: usize) -> Option<PortId> {
        let slot = self.queue.upcoming(n)?;
        (slot & !CODE_INDEX == CODE_ARRIVE).then_some(slot & CODE_INDEX)
    }

    /// A port's state and the head of its flight line.
    #[inline(always)]
    pub(super) fn head_of(
        &self,
        p: PortId,
    ) -> Option<(&port_state::PortState, &port_state::InFlight)> {
        let st = self.ports.get(p as usize)?;
        Some((st, st.flight.front()?))
    }

    /// Asks for port `p`'s state: its first line (the constants an
    /// arrival reads), or with `queue` both (the queue an enqueue reads).
    #[inline(always)]
    pub(super) fn prefetch_port(&self, p: PortId, queue: bool) {
        if let Some(st) = self.ports.get(p as usize) {
            let st: *const port_state::PortState = st;
            crate::prefetch::prefetch(st);
            if queue {
                crate::prefetch::prefetch(st.cast::<u8>().wrapping_add(64));
            }
        }
    }

    /// Asks for where `p`'s flight line takes its next entry: just past
    /// its last (nothing, if the line is empty).
    #[inline(always)]
    pub(super) fn prefetch_tail(&self, p: PortId) {
        if let Some(f) = self.ports.get(p as usize).and_then(|st| st.flight.back()) {
            prefetch_entry((f as *const port_state::InFlight).wrapping_add(1));
        }
    }

    /// Asks for the packet at the head of `p`'s flight line.
    #[inline(always)]
    pub(super) fn prefetch_head(&self, p: PortId) {
        self.prefetch_line(p, 1);
    }

    /// Asks for the first `n` packets of `p`'s flight line (72 bytes:
    /// two cache lines each).
    #[inline(always)]
    pub(super) fn prefetch_line(&self, p: PortId, n: usize) {
        let Some(st) = self.ports.get(p as usize) else {
            return;
        };
        for f in (0..n).map_while(|i| st.flight.get(i)) {
            prefetch_entry(f);
        }
    }

    /// The port a switch will send a packet of `flow` (source,
    /// destination, source port) out of, worked out early for a prefetch:
    /// the route looks at the switch's next draw without taking it
    /// ([`SwitchRng`]), so nothing the run does changes (if another packet
    /// takes that draw first, the hint is only wasted).
    #[inline]
    fn out_port(&mut self, node: NodeId, flow: (NodeAddr, NodeAddr, u16)) -> Option<PortId> {
        let cands = self.router.structural(&self.topo, node, flow.1)?;
        let out = match cands {
            [] => return None,
            [one] => *one,
            _ => {
                let rng = self.switch_rng.get_mut(node as usize)?.as_mut()?;
                self.router.predict(cands, flow, node, rng)?
            }
        };
        ((out as usize) < self.ports.len()).then_some(out)
    }

    /// Time of the next event that will do something, if any (stale
    /// timer wake-ups are discarded on the way).
    pub fn peek_time(&mut self) -> Option<Instant> {
        loop {
            let key = self.queue.peek()?;
            if key.slot & !CODE_INDEX == CODE_TIMER {
                let h = key.slot & CODE_INDEX;
                if !self.timer_due(h, key.t) {
                    self.queue.take();
                    continue;
                }
            }
            return Some(key.t);
        }
    }

    /// Processes exactly the next event; returns its time, or `None` when
    /// nothing is left.
    pub fn step(&mut self) -> Option<Instant> {
        let t = self.peek_time()?;
        #[cfg(feature = "fingerprint")]
        self.note_fingerprint(t);
        self.process_next(t);
        Some(t)
    }

    pub(super) fn process_next(&mut self, t: Instant) {
        if let Some(key) = self.queue.take() {
            debug_assert_eq!(key.t, t);
            // `peek_time` dropped the stale wake-ups: this one runs.
            self.run_event(key, true);
        }
    }

    /// Moves the clock forward to `t` without processing anything; only
    /// allowed when no event is due before `t` (returns whether it moved).
    pub fn advance_clock(&mut self, t: Instant) -> bool {
        if t < self.now || self.peek_time().is_some_and(|next| next < t) {
            return false;
        }
        self.now = t;
        true
    }

    /// Runs until idle.
    pub fn run(&mut self) -> bool {
        self.run_until(Instant(u64::MAX))
    }

    /// Flushes the trace sink and the capture, reporting the first error.
    pub fn finish(&mut self) -> Result<(), FabricError> {
        self.flush_pcap(Instant(u64::MAX));
        if let Some(e) = self.pcap_error.take() {
            return Err(e.into());
        }
        if let Some(p) = self.pcap.take() {
            let mut w = p.into_inner();
            w.flush().map_err(|e| {
                FabricError::Capture(CaptureError::Pcap(pcap_file::PcapError::IoError(e)))
            })?;
        }
        self.trace
            .finish()
            .map_err(|e| FabricError::Capture(CaptureError::Pcap(pcap_file::PcapError::IoError(e))))
    }

    /// Whether host `h`'s wake-up at `t` has anything to do. A stale
    /// wake-up (the host's deadline moved) is not; if the NIC's earliest
    /// deadline moved later, the wake-up is re-armed there.
    pub(super) fn timer_due(&mut self, h: u32, t: Instant) -> bool {
        let host = &mut self.hosts[h as usize];
        if host.timer_at != Some(t) {
            return false;
        }
        match host.deadline() {
            Some(d) if d <= t => true,
            Some(d) if host.paused => {
                // Resume handles it; keep the record honest.
                host.timer_at = Some(d);
                false
            }
            Some(d) => {
                host.timer_at = Some(d);
                self.schedule(d, EvKind::Timer(h));
                false
            }
            None => {
                host.timer_at = None;
                false
            }
        }
    }

    pub(super) fn dispatch(&mut self, kind: EvKind) {
        match kind {
            EvKind::HostFree(h) => {
                if self.host_may_send(h) && !self.hosts[h as usize].paused {
                    self.pull(h);
                    // What went out armed retransmit deadlines; a NIC whose
                    // timer had nothing to wait for (Go-back-N just queued
                    // everything again) must get a wake-up for them.
                    self.arm_timer(h);
                }
            }
            EvKind::Arrive(port) => {
                let st = &mut self.ports[port as usize];
                let f = st.pop_arrived(self.seal_bytes).expect("scheduled arrival");
                if let Some(next) = st.flight.front() {
                    // In windows the next packet of the line arrives in
                    // the same node's run, where no list names it ahead:
                    // its bytes are asked for now, for the NIC.
                    if self.windows.end > 0 && st.hot.peer_host().is_some() {
                        windows::prefetch_bytes(&next.pkt);
                    }
                    let next = next.arrive;
                    self.schedule(next, EvKind::Arrive(port));
                }
                self.arrive(port, f.pkt);
            }
            EvKind::Enqueue(port, pkt) => self.enqueue(port, pkt),
            EvKind::ArriveAhead(port) => {
                let f = self.ahead[port as usize]
                    .pop_front()
                    .expect("scheduled ahead arrival");
                self.arrive(port, f.pkt);
            }
            EvKind::Deliver(h, pkt) => self.arrive_at_host(h, pkt),
            EvKind::Timer(h) => {
                let host = &mut self.hosts[h as usize];
                host.timer_at = None;
                if host.paused {
                    return;
                }
                host.handle_timeout(self.now);
                self.service_host(h);
            }
            EvKind::Pause(h, until) => {
                tracing::info!(
                    sim_ns = self.now.as_nanos(),
                    host = h,
                    until_ns = until.as_nanos(),
                    "pause"
                );
                self.hosts[h as usize].paused = true;
                self.trace.record(&TraceEvent::Pause {
                    t: self.now.as_ps(),
                    host: h,
                    paused: true,
                });
                self.schedule(until.max(self.now), EvKind::Resume(h));
            }
            EvKind::Resume(h) => {
                self.hosts[h as usize].paused = false;
                self.trace.record(&TraceEvent::Pause {
                    t: self.now.as_ps(),
                    host: h,
                    paused: false,
                });
                let held = std::mem::take(&mut self.hosts[h as usize].held);
                for pkt in held {
                    self.deliver(h, pkt);
                }
                let now = self.now;
                self.hosts[h as usize].handle_timeout(now);
                self.hosts[h as usize].timer_at = None;
                self.service_host(h);
            }
            EvKind::Pfc(ev) => self.pfc_event(ev),
            EvKind::Post(h, wr) => {
                let now = self.now;
                let _ = self.hosts[h as usize].nic.post(now, *wr);
                self.service_host(h);
            }
        }
    }
}

/// Asks for a line entry (72 bytes: two cache lines) at `f`.
#[inline(always)]
pub(super) fn prefetch_entry(f: *const port_state::InFlight) {
    crate::prefetch::prefetch(f);
    crate::prefetch::prefetch(f.cast::<u8>().wrapping_add(64));
}
