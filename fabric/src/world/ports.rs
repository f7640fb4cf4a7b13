//! Egress ports: faults at the queue, FIFO service with tail drop, ECN
//! and trimming, the flight line to the far end, captures.

use super::*;

/// What a hop needs to know about a port and its link, copied next to the
/// port's state so a hop reads one place instead of five tables (on the
/// 1024-host shape each of those reads was a cache miss).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct PortHot {
    pub(super) link: LinkId,
    pub(super) direction: Direction,
    /// The host this port belongs to (its NIC's egress), or [`NO_HOST`]
    /// (see [`PortHot::host`]).
    pub(super) host_raw: u32,
    /// The node at the far end, and its host number if it is one (or
    /// [`NO_HOST`]).
    pub(super) peer: NodeId,
    pub(super) peer_host_raw: u32,
    pub(super) mtu: u32,
    pub(super) queue_bytes: u64,
    /// Mark above this many queued bytes (`u64::MAX`: never).
    pub(super) ecn_threshold: u64,
    /// Above the threshold, mark for certain from this many bytes more
    /// (0: at once); in between with a probability that grows linearly.
    pub(super) ecn_span: u64,
    /// A switch port that trims on a full queue.
    pub(super) trim: bool,
    /// A switch port that serves control packets ahead of its queue.
    pub(super) priority: bool,
    pub(super) bandwidth_bps: u64,
    /// Picoseconds per bit when that is a whole number that fits 32 bits
    /// (every rate from 1 kb/s that divides 1 Tb/s), else 0 and
    /// serialization divides.
    pub(super) ps_per_bit: u32,
    pub(super) latency: Duration,
    pub(super) tapped: bool,
    /// In a split run: the far end is another shard's, which `to_shard`
    /// names (`shards`).
    pub(super) remote: bool,
    pub(super) to_shard: u16,
}

/// No host at this end of the port (a switch).
pub(super) const NO_HOST: u32 = u32::MAX;

impl PortHot {
    /// The host this port belongs to (its NIC's egress), if any.
    pub(super) fn host(&self) -> Option<u32> {
        (self.host_raw != NO_HOST).then_some(self.host_raw)
    }

    /// The host at the far end, if it is one.
    pub(super) fn peer_host(&self) -> Option<u32> {
        (self.peer_host_raw != NO_HOST).then_some(self.peer_host_raw)
    }
}

/// A port's state: two cache lines, aligned (the constants a hop reads,
/// then the queue), so a hop touches exactly those two.
#[derive(Debug)]
#[repr(align(64))]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct PortState {
    pub(super) hot: PortHot,
    /// When the last packet given to this port finishes serializing.
    pub(super) free_at: Instant,
    /// How many packets at the tail of `flight` were waiting to start
    /// when last looked at (starts only grow along the line, so the
    /// waiting ones are always its tail). Brought up to date only when a
    /// decision depends on it ([`PortState::settle`]), so between times
    /// it may still count packets that have started.
    pub(super) waiting: u32,
    /// The bytes of those packets (as charged to the queue): never less
    /// than the bytes really waiting.
    pub(super) queued_bytes: u64,
    /// Packets given to the port, in order (FIFO, one rate, one latency:
    /// arrivals and starts both increase). Only the head's arrival is in
    /// the event queue.
    pub(super) flight: VecDeque<InFlight>,
}

/// A packet given to a port: 72 bytes, which a hop reads at the line's
/// far end and writes into the next port's line. What the queue's
/// accounting needs besides, the bytes charged to the queue and when the
/// first bit left, follows from the packet and the port
/// ([`InFlight::charged`], [`InFlight::start`]) instead of being kept
/// (16 bytes an entry less: a large fabric's lines are about a third of
/// its memory).
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct InFlight {
    /// When it reaches the far end.
    pub(super) arrive: Instant,
    pub(super) pkt: Pkt,
}

impl InFlight {
    /// What the sender of a packet handed to another shard keeps of it
    /// for its queue's count: its arrival and its length, no bytes.
    pub(super) fn stand_in(&self) -> InFlight {
        let p = &self.pkt;
        debug_assert!(p.len() <= u64::from(u16::MAX), "a datagram fits 64 KiB");
        InFlight {
            arrive: self.arrive,
            pkt: Pkt {
                serial: p.serial,
                src: p.src,
                dst: p.dst,
                src_port: p.src_port,
                bytes: Vec::new(),
                elided: u16::try_from(p.len()).unwrap_or(u16::MAX),
                nic_work_ps: p.nic_work_ps,
                ce: p.ce,
                trimmed: p.trimmed,
                head: p.head,
            },
        }
    }

    /// Bytes charged to the queue while it waits: the datagram and the
    /// seal (`seal` bytes).
    #[inline]
    pub(super) fn charged(&self, seal: u64) -> u64 {
        self.pkt.len() + seal
    }

    /// When its first bit left `hot`'s port: its arrival less the link's
    /// latency and its serialization (the port's rate and latency never
    /// change, so this is exactly the start `enqueue` worked out).
    #[inline]
    pub(super) fn start(&self, hot: &PortHot, seal: u64) -> Instant {
        Instant(
            self.arrive.as_ps()
                - hot.latency.as_ps()
                - hot.serialization(self.charged(seal)).as_ps(),
        )
    }
}

impl PortHot {
    /// How long `len` bytes of UDP payload (and the wire's overhead) take
    /// to serialize.
    #[inline]
    pub(super) fn serialization(&self, len: u64) -> Duration {
        let bits = (len + WIRE_OVERHEAD) * 8;
        // Exactly the division below, without a 128-bit divide per hop
        // when the rate divides 1 Tb/s.
        match self.ps_per_bit {
            0 => Duration(
                (u128::from(bits) * u128::from(PS_PER_S) / u128::from(self.bandwidth_bps)) as u64,
            ),
            ps => Duration(bits * u64::from(ps)),
        }
    }
}

impl PortState {
    /// The first packet still counted as waiting, if any (the waiting
    /// are the line's tail).
    pub(super) fn first_waiting(&self) -> Option<&InFlight> {
        let waiting = self.waiting as usize;
        if waiting == 0 {
            return None;
        }
        self.flight.get(self.flight.len().checked_sub(waiting)?)
    }

    /// Makes the queue's count exact where a packet of `len` bytes
    /// joining it at `now` could be judged by it: its drop or trim, its
    /// ECN mark, or the run's deepest queue (`deepest`). The count only
    /// overstates (started packets still counted), so while the
    /// overstated figure decides nothing, the line is not read: reading
    /// its first waiting packet was the one cold load of most switch
    /// hops, and catching up later reads several entries side by side.
    /// A port that has finished serializing everything has no waiting
    /// packet, which needs no line either.
    #[inline]
    fn settle(&mut self, now: Instant, len: u64, deepest: u64, seal: u64) {
        if self.free_at <= now {
            self.waiting = 0;
            self.queued_bytes = 0;
            return;
        }
        let hot = &self.hot;
        if self.queued_bytes + len > hot.queue_bytes.min(deepest)
            || self.queued_bytes > hot.ecn_threshold
        {
            self.drain_started(now, seal);
        }
    }

    /// Stops counting the packets that started by `now` as queued.
    fn drain_started(&mut self, now: Instant, seal: u64) {
        while let Some(f) = self.first_waiting() {
            if f.start(&self.hot, seal) > now {
                return;
            }
            self.queued_bytes -= f.charged(seal);
            self.waiting -= 1;
        }
    }

    /// Takes the head of the line off as it arrives (it started long
    /// ago: if still counted as waiting, it stops being counted).
    pub(super) fn pop_arrived(&mut self, seal: u64) -> Option<InFlight> {
        if self.waiting as usize == self.flight.len() && self.waiting > 0 {
            self.waiting -= 1;
            let f = self.flight.front()?;
            self.queued_bytes -= f.charged(seal);
        }
        self.flight.pop_front()
    }
}

/// Whether a packet that finds `queued` bytes ahead of it is marked, on a
/// port that marks above `threshold` and every packet from `span` bytes
/// above that: always at or beyond `span`, else with probability
/// `over / span` (`over` the bytes above the threshold), drawn as a hash
/// of the packet's serial number and the port (deterministic, and no
/// random stream is drawn from).
pub(super) fn ecn_marks(queued: u64, threshold: u64, span: u64, serial: u64, port: PortId) -> bool {
    if queued <= threshold {
        return false;
    }
    let over = queued - threshold;
    if over >= span {
        return true;
    }
    let h = udrma_proto::rng::mix(serial ^ (u64::from(port) << 40) ^ 0xEC4E_C4EC_4EC4_EC4E);
    // `h * span / 2^64` is uniform over 0..span.
    ((u128::from(h) * u128::from(span)) >> 64) < u128::from(over)
}

impl World {
    /// A packet wants to cross the link of `port`: fault rules first.
    pub(super) fn egress(&mut self, port: PortId, mut pkt: Pkt) {
        if self.egress_log.is_some() {
            self.note_egress(port, &pkt);
        }
        if self.faults.is_empty() {
            self.enqueue(port, pkt);
            return;
        }
        let p = self.ports[port as usize].hot;
        let Head { opcode, flags, .. } = pkt.head;
        let ctx = PacketCtx {
            now: self.now,
            link: p.link,
            direction: p.direction,
            src: pkt.src,
            dst: pkt.dst,
            opcode,
            flags,
            len: pkt.len() as u32,
        };
        // In windows a rule that can draws by the packet and the port, so
        // that a verdict does not depend on which nodes were judged
        // first (and a split run gets the verdicts one thread gets).
        let key = (self.windows.width > 0)
            .then(|| udrma_proto::rng::mix(udrma_proto::rng::mix(pkt.serial) ^ u64::from(port)));
        let (verdict, rule) = match key {
            Some(k) => self.faults.judge_keyed(&ctx, k),
            None => self.faults.judge(&ctx),
        };
        if let Some(r) = rule {
            tracing::debug!(
                sim_ns = self.now.as_nanos(),
                link = %self.topo.links[p.link as usize].name,
                pkt = pkt.serial,
                rule = %self.faults.rules()[r].name,
                ?verdict,
                "fault"
            );
        }
        let rule = rule.unwrap_or(0) as u32;
        let fault = |kind, arg| TraceEvent::Fault {
            t: self.now.as_ps(),
            link: p.link,
            pkt: pkt.serial,
            rule,
            kind,
            arg,
        };
        match verdict {
            Verdict::Pass => self.enqueue(port, pkt),
            Verdict::Drop => {
                self.trace.record(&fault(0, 0));
                self.drop_pkt(p.link, pkt, DropReason::Fault);
            }
            Verdict::Duplicate(n) => {
                self.trace.record(&fault(1, u64::from(n)));
                self.stats.duplicated += u64::from(n);
                for _ in 0..n {
                    let copy = Pkt {
                        serial: self.next_serial(),
                        src: pkt.src,
                        dst: pkt.dst,
                        src_port: pkt.src_port,
                        bytes: pkt.bytes.clone(),
                        elided: pkt.elided,
                        nic_work_ps: pkt.nic_work_ps,
                        ce: pkt.ce,
                        trimmed: pkt.trimmed,
                        head: pkt.head,
                    };
                    if self.watch.is_some() {
                        self.journal_new(&copy, Some(pkt.serial));
                    }
                    self.enqueue(port, copy);
                }
                self.enqueue(port, pkt);
            }
            Verdict::Delay(d) => {
                self.trace.record(&fault(2, d.as_ps()));
                self.stats.delayed += 1;
                let at = self.now + d;
                self.schedule(at, EvKind::Enqueue(port, pkt));
            }
            Verdict::Corrupt(bits) => {
                self.trace.record(&fault(3, u64::from(bits)));
                self.stats.corrupted += 1;
                pkt.materialise();
                if let Some(j) = self.journal_mut(pkt.serial) {
                    j.corrupted = true;
                }
                match key {
                    Some(k) => self
                        .faults
                        .corrupt_keyed(rule as usize, k, &mut pkt.bytes, bits),
                    None => self.faults.corrupt(rule as usize, &mut pkt.bytes, bits),
                }
                pkt.head = Head::of(&pkt.bytes);
                self.enqueue(port, pkt);
            }
        }
    }

    pub(super) fn drop_pkt(&mut self, link: LinkId, pkt: Pkt, reason: DropReason) {
        let now = self.now;
        tracing::debug!(sim_ns = now.as_nanos(), link = %self.topo.links[link as usize].name, pkt = pkt.serial, ?reason, "drop");
        if let Some(j) = self.journal_mut(pkt.serial) {
            j.dropped = Some((now, reason));
        }
        self.trace.record(&TraceEvent::Drop {
            t: self.now.as_ps(),
            link,
            pkt: pkt.serial,
            reason,
        });
        *self.stats.dropped.entry(reason).or_default() += 1;
        self.recycle(pkt.bytes);
    }

    pub(super) fn recycle(&mut self, bytes: Vec<u8>) {
        if self.pool.len() < 4096 {
            self.pool.push(bytes);
        }
    }

    pub(super) fn enqueue(&mut self, port: PortId, mut pkt: Pkt) {
        let now = self.now;
        let hot = self.ports[port as usize].hot;
        let len = pkt.len() + self.seal_bytes;
        if len > u64::from(hot.mtu) {
            self.drop_pkt(hot.link, pkt, DropReason::Mtu);
            return;
        }
        if self.pfc.is_some() {
            self.pfc_enqueue(port, pkt, len);
            return;
        }
        let st = &mut self.ports[port as usize];
        if hot.trim && pkt.trimmed {
            // Headers go ahead of the queue at every trimming hop.
            self.trim(port, pkt);
            return;
        }
        if hot.priority && pkt.head.opcode.is_some_and(Opcode::is_control) {
            self.trace_tx(now, &hot, &pkt, len);
            self.stats.control_ahead += 1;
            self.ahead(port, pkt);
            return;
        }
        if hot.remote {
            // Stand-ins of packets another shard has taken in by now.
            while st.flight.front().is_some_and(|f| f.arrive <= now) {
                st.pop_arrived(self.seal_bytes);
            }
        }
        st.settle(now, len, self.stats.max_queue_bytes, self.seal_bytes);
        if st.queued_bytes + len > hot.queue_bytes {
            if hot.trim {
                self.trim(port, pkt);
            } else {
                self.drop_pkt(hot.link, pkt, DropReason::QueueFull);
            }
            return;
        }
        if ecn_marks(
            st.queued_bytes,
            hot.ecn_threshold,
            hot.ecn_span,
            pkt.serial,
            port,
        ) {
            self.stats.ecn_marked += 1;
            pkt.ce = true;
        }
        self.launch(port, pkt, len);
    }

    /// Gives `pkt` (`len` bytes as charged) to `port`'s line: it starts
    /// once the port is free and the NIC has worked on it, and its
    /// arrival at the far end is filed. The lossy queue calls it as a
    /// packet joins; a lossless port (`pfc`) only once the packet is the
    /// one to go next and its priority is not paused.
    pub(super) fn launch(&mut self, port: PortId, pkt: Pkt, len: u64) {
        let now = self.now;
        let hot = self.ports[port as usize].hot;
        // A host's own NIC works on the packet before it can leave.
        let nic_cost = match hot.host() {
            Some(_) if self.costed => {
                self.cost.packet(len as usize) + Duration::from_ps(u64::from(pkt.nic_work_ps))
            }
            _ => Duration::ZERO,
        };
        let st = &mut self.ports[port as usize];
        let mut start = st.free_at.max(now + nic_cost);
        let ser = hot.serialization(len);
        if let Some(to) = hot.peer_host().filter(|_| self.costed) {
            // Link-level flow control into a NIC that works packets one at
            // a time (Myrinet's stop-and-go, InfiniBand's link credits,
            // PFC): a packet starts only once it will reach the receive
            // unit no sooner than one packet's work before the unit frees
            // up (the NIC buffers the packet it works on and one more), so
            // the far NIC holds no queue of its own. Without it, a NIC slower than its wire (MyVIA at
            // 512-byte packets) let the queue grow by milliseconds, inside
            // the round trip of every packet behind it: the sender's
            // timers fired on packets that were only waiting, and the
            // copies queued up behind them in turn (docs/testing.md).
            // The wait is the sender's (a host: its next packet leaves
            // later, and no timer runs for a packet not yet sent) or a
            // switch's queue, which drops, trims and marks as any does.
            let work = self.cost.packet(pkt.len() as usize);
            start = self.rx_slot(to, &hot, ser, work, start);
            self.take_rx_slot(to, &hot, ser, work, start);
        }
        let st = &mut self.ports[port as usize];
        st.free_at = start + ser;
        let waits = start > now;
        if waits {
            st.queued_bytes += len;
            self.stats.max_queue_bytes = self.stats.max_queue_bytes.max(st.queued_bytes);
        }
        let free_at = st.free_at;
        self.trace_tx(start, &hot, &pkt, len);
        if hot.tapped {
            self.capture(start, &pkt);
        }
        if let Some(h) = hot.host() {
            self.hosts[h as usize].tx_lead = nic_cost;
            let pull_at = Instant(free_at.as_ps().saturating_sub(nic_cost.as_ps())).max(now);
            self.schedule(pull_at, EvKind::HostFree(h));
        }
        let arrive_at = free_at + hot.latency;
        let st = &mut self.ports[port as usize];
        let entry = InFlight {
            arrive: arrive_at,
            pkt,
        };
        if hot.remote {
            st.flight.push_back(entry.stand_in());
            if let Some(shard) = self.shard.as_mut() {
                shard.outbox[usize::from(hot.to_shard)]
                    .line
                    .push((port, entry));
            }
        } else {
            st.flight.push_back(entry);
        }
        // What the entry no longer keeps, it must give back exactly.
        debug_assert!(st.flight.back().is_some_and(|f| {
            f.start(&hot, self.seal_bytes) == start && f.charged(self.seal_bytes) == len
        }));
        // (A packet that starts at once is never counted as waiting, and
        // the waiting are the tail: it can join them only if none wait.)
        if waits {
            st.waiting += 1;
        }
        if st.flight.len() == 1 && !hot.remote {
            self.schedule(arrive_at, EvKind::Arrive(port));
        }
    }

    /// Traces `pkt` starting to cross `hot`'s link at `t` (`len` bytes on
    /// the wire's UDP payload).
    fn trace_tx(&mut self, t: Instant, hot: &PortHot, pkt: &Pkt, len: u64) {
        let Head {
            opcode, msg, seg, ..
        } = pkt.head;
        self.trace.record(&TraceEvent::Tx {
            t: t.as_ps(),
            link: hot.link,
            dir: u8::from(hot.direction == Direction::Reverse),
            pkt: pkt.serial,
            opcode: opcode.map_or(0, u8::from),
            msg,
            seg,
            len: len as u32,
        });
    }

    /// A full trimming port: the payload is cut off and the header goes
    /// ahead of the queue, as a priority queue would send it (its few
    /// bytes are not charged to the port). A header trimmed once is not
    /// trimmed again: later full queues forward it the same way.
    pub(super) fn trim(&mut self, port: PortId, mut pkt: Pkt) {
        let hot = self.ports[port as usize].hot;
        if !pkt.trimmed {
            pkt.trimmed = true;
            pkt.bytes.truncate(HEADER_LEN);
            pkt.elided = 0;
            self.stats.trimmed += 1;
            self.trace.record(&TraceEvent::Drop {
                t: self.now.as_ps(),
                link: hot.link,
                pkt: pkt.serial,
                reason: DropReason::Trimmed,
            });
        }
        self.ahead(port, pkt);
    }

    /// The link-level flow control into costed host `to`: the earliest
    /// instant, no sooner than `earliest`, at which a packet that takes
    /// `ser` to cross `hot`'s link and `work` of the NIC may start, so that
    /// it reaches the receive unit no sooner than one packet's work
    /// before the unit frees up (see `enqueue`).
    fn rx_slot(
        &self,
        to: u32,
        hot: &PortHot,
        ser: Duration,
        work: Duration,
        earliest: Instant,
    ) -> Instant {
        let ready = self.hosts[to as usize].rx_ready;
        let reach = hot.latency + ser + work;
        earliest.max(Instant(ready.as_ps().saturating_sub(reach.as_ps())))
    }

    /// Books host `to`'s receive unit for a packet that starts across
    /// `hot`'s link at `start` (from `rx_slot`).
    fn take_rx_slot(
        &mut self,
        to: u32,
        hot: &PortHot,
        ser: Duration,
        work: Duration,
        start: Instant,
    ) {
        let host = &mut self.hosts[to as usize];
        host.rx_ready = (start + hot.latency + ser).max(host.rx_ready) + work;
    }

    /// Sends `pkt` ahead of `port`'s queue, as the high level of a
    /// priority queue would: it serializes at the line rate and arrives
    /// after the link's latency, whatever the queue holds.
    ///
    /// Into a NIC that works packets one at a time (a costed host), the
    /// lane obeys the link-level flow control that `enqueue` applies to
    /// data: a packet starts only when the receive unit will be ready for
    /// it, and one that finds the lane's waiting packets filling as many
    /// bytes as the port's queue, or as much of the NIC's work as the
    /// lane's patience, is dropped (the lane's buffer is full; `lane`).
    /// Before, the lane had no bound and skipped the flow control, so
    /// trimmed headers, each a whole packet's firmware time on a slow
    /// NIC, piled up in its receive unit: 105 ms of backlog on
    /// `myrinet-lanai9`, and every packet behind them timed out while it
    /// waited (finding 30).
    pub(super) fn ahead(&mut self, port: PortId, pkt: Pkt) {
        let hot = self.ports[port as usize].hot;
        let bits = (pkt.len() + self.seal_bytes + WIRE_OVERHEAD) * 8;
        let ser = Duration(
            (u128::from(bits) * u128::from(PS_PER_S) / u128::from(hot.bandwidth_bps)) as u64,
        );
        let mut start = self.now;
        if let Some(to) = hot.peer_host().filter(|_| self.costed) {
            let work = self.cost.packet(pkt.len() as usize);
            start = self.rx_slot(to, &hot, ser, work, start);
            // The lane holds as many bytes as the port's queue, and no
            // more of the NIC's work than its patience, of its own
            // waiting packets only (`lane`).
            let bytes = pkt.len() + self.seal_bytes;
            let lane = &mut self.lanes[port as usize];
            let Some(ahead) = lane.admits(self.now, bytes, work) else {
                self.drop_pkt(hot.link, pkt, DropReason::QueueFull);
                return;
            };
            lane.book(start, bytes, work);
            let ahead = ahead.as_ps();
            self.stats.max_lane_work_ps = self.stats.max_lane_work_ps.max(ahead);
            self.take_rx_slot(to, &hot, ser, work, start);
        }
        if hot.tapped {
            self.capture(start, &pkt);
        }
        let at = start + ser + hot.latency;
        let f = InFlight { arrive: at, pkt };
        if hot.remote {
            // The far end's shard files it, with the key this node gives
            // it (a later window's: the line's latency is at least one).
            let key = self.windows.stamp(at, events::CODE_AHEAD | port);
            if let Some(shard) = self.shard.as_mut() {
                shard.outbox[usize::from(hot.to_shard)]
                    .ahead
                    .push((port, key, f));
            }
            return;
        }
        self.file_ahead(port, f);
        self.schedule(at, EvKind::ArriveAhead(port));
    }

    /// Puts `f` in `port`'s ahead line, after every packet that arrives
    /// no later. Its arrival event is filed by the caller; a port's ahead
    /// arrivals at one time run in the order they were sent (their keys'
    /// counts grow with it), which is the line's.
    pub(super) fn file_ahead(&mut self, port: PortId, f: InFlight) {
        let p = port as usize;
        if self.ahead.len() <= p {
            self.ahead.resize_with(p + 1, VecDeque::new);
        }
        let line = &mut self.ahead[p];
        let at = line.partition_point(|g| g.arrive <= f.arrive);
        line.insert(at, f);
    }

    /// Encapsulates a packet that starts crossing a tapped link at `t`;
    /// frames are written once simulated time reaches them, so the file is
    /// in time order.
    pub(super) fn capture(&mut self, t: Instant, pkt: &Pkt) {
        if self.pcap.is_none() || self.pcap_error.is_some() {
            return;
        }
        let mut frame = Vec::with_capacity(pkt.len() as usize + FRAME_OVERHEAD);
        let mut full = Vec::new();
        let datagram = pkt.datagram(&mut full);
        let src = UdpEndpoint::node(pkt.src, pkt.src_port);
        let dst = UdpEndpoint::node(pkt.dst, DEFAULT_UDP_PORT);
        if encapsulate(&src, &dst, datagram, &mut frame).is_ok() {
            self.pcap_pending.insert((t, pkt.serial), frame);
        }
    }

    pub(super) fn flush_pcap(&mut self, upto: Instant) {
        let Some(sink) = self.pcap.as_mut() else {
            return;
        };
        while let Some(entry) = self.pcap_pending.first_entry() {
            if entry.key().0 > upto {
                break;
            }
            let ((t, _), frame) = entry.remove_entry();
            if self.pcap_error.is_none() {
                if let Err(e) = sink.write_frame(t.as_nanos(), &frame) {
                    self.pcap_error = Some(e);
                }
            }
        }
    }

    pub(super) fn arrive(&mut self, port: PortId, mut pkt: Pkt) {
        self.stats.packet_hops += 1;
        let hot = self.ports[port as usize].hot;
        if self.pfc.is_some() && hot.peer_host().is_some() {
            match self.pfc_nic_arrival(port, pkt) {
                Some(p) => pkt = p,
                None => return,
            }
        }
        let node: NodeId = hot.peer;
        match hot.peer_host() {
            Some(h) if self.costed => {
                // The receive side processes packets one at a time; placing
                // a payload in many blocks takes longer.
                let nic = &mut self.hosts[h as usize].nic;
                let work = if nic.needs_dma_work() {
                    nic.receive_work(pkt.src, pkt.datagram(&mut self.rebuild))
                } else {
                    Duration::ZERO
                };
                let cost = self.cost.packet(pkt.len() as usize) + work;
                let host = &mut self.hosts[h as usize];
                let done = host.rx_unit.take(self.now, cost);
                // The link's flow control booked the packet's own work
                // only (its placing work depends on the registry, the
                // translation cache and the receive buffer, known when the
                // NIC takes it): what it finds now holds back every packet
                // booked after this one, as a link credit that comes back
                // later would. Without it, SENDs through an indirect key,
                // 30 to 150 us of placing a packet, queued in the NIC past
                // the sender's timer cap (docs/testing.md, finding 34).
                if work > Duration::ZERO {
                    host.rx_ready = (host.rx_ready + work).max(done);
                }
                let waited = (done - self.now).as_ps().saturating_sub(cost.as_ps());
                self.stats.max_rx_wait_ps = self.stats.max_rx_wait_ps.max(waited);
                self.schedule(done, EvKind::Deliver(h, pkt));
            }
            Some(h) => self.arrive_at_host(h, pkt),
            None => {
                let flow = pkt.route_key();
                let rng = self.switch_rng[node as usize]
                    .as_mut()
                    .expect("switch has a stream");
                // A fat tree's candidates are a run of the switch's ports:
                // no copy into the scratch list.
                let out = match self.router.structural(&self.topo, node, pkt.dst) {
                    Some([]) => {
                        self.drop_pkt(hot.link, pkt, DropReason::NoRoute);
                        return;
                    }
                    Some(cands) => self.router.choose(cands, flow, node, rng),
                    None => {
                        let mut cands = std::mem::take(&mut self.scratch);
                        self.router
                            .candidates(&self.topo, node, pkt.dst, &mut cands);
                        if cands.is_empty() {
                            self.scratch = cands;
                            self.drop_pkt(hot.link, pkt, DropReason::NoRoute);
                            return;
                        }
                        let out = self.router.choose(&cands, flow, node, rng);
                        self.scratch = cands;
                        out
                    }
                };
                if self.pfc.is_some() {
                    // Charged to this ingress if it reaches a queue.
                    self.ingress = port;
                    self.egress(out, pkt);
                    self.ingress = PortId::MAX;
                } else {
                    self.egress(out, pkt);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Above a threshold of 4000 bytes with a ramp of 1000: the draw
    /// marks about `over / 1000` of the packets, all of them from 5000
    /// bytes on, none at or below the threshold, and differs from port to
    /// port. Without a ramp, every packet above the threshold.
    #[test]
    fn the_marking_ramp_marks_in_proportion() {
        let share = |queued, span, port| {
            (0..20_000u64)
                .filter(|&s| ecn_marks(queued, 4000, span, s, port))
                .count()
        };
        assert_eq!(share(4000, 1000, 3), 0);
        assert_eq!(share(4000, 0, 3), 0);
        assert_eq!(share(4001, 0, 3), 20_000);
        assert_eq!(share(5000, 1000, 3), 20_000);
        assert_eq!(share(9000, 1000, 3), 20_000);
        for (over, want) in [(1, 20), (250, 5_000), (500, 10_000), (900, 18_000)] {
            let got = share(4000 + over, 1000, 3);
            assert!(
                got.abs_diff(want) <= want / 20 + 10,
                "{over} of 1000 over: {got} of 20000 marked, want about {want}"
            );
        }
        for (a, b) in [(1, 2), (3, 4), (0, 1 << 20)] {
            let differ = (0..1000u64)
                .filter(|&s| ecn_marks(4500, 4000, 1000, s, a) != ecn_marks(4500, 4000, 1000, s, b))
                .count();
            assert!(
                differ > 400,
                "ports {a} and {b} draw apart: {differ} of 1000 differ"
            );
        }
    }

    /// How long the test port takes to send one of its 1000-byte packets.
    fn one() -> u64 {
        port_with_stale_count(0, 0).hot.serialization(1000).as_ps()
    }

    /// A port whose line holds four packets of 1000 bytes, sent back to
    /// back from 0 (it is free after the fourth), the last three still
    /// counted as waiting: 3000 bytes, where half way through the third
    /// only the last really waits.
    fn port_with_stale_count(queue_bytes: u64, ecn_threshold: u64) -> PortState {
        let hot = PortHot {
            link: 0,
            direction: Direction::Forward,
            host_raw: NO_HOST,
            peer: 1,
            peer_host_raw: NO_HOST,
            mtu: 9216,
            queue_bytes,
            ecn_threshold,
            ecn_span: 0,
            trim: false,
            priority: false,
            bandwidth_bps: 100_000_000_000,
            ps_per_bit: 10,
            latency: Duration::from_micros(1),
            tapped: false,
            remote: false,
            to_shard: 0,
        };
        let one = hot.serialization(1000).as_ps();
        let entry = |i: u64| InFlight {
            arrive: Instant((i + 1) * one + 1_000_000),
            pkt: Pkt {
                serial: i,
                src: NodeAddr(0),
                dst: NodeAddr(1),
                src_port: 0,
                bytes: Vec::new(),
                elided: 1000,
                nic_work_ps: 0,
                ce: false,
                trimmed: false,
                head: Head::of(&[]),
            },
        };
        PortState {
            hot,
            free_at: Instant(4 * one),
            waiting: 3,
            queued_bytes: 3000,
            flight: (0..4).map(entry).collect(),
        }
    }

    /// Serialization is exact at every rate: by a whole number of
    /// picoseconds a bit where the rate divides 1 Tb/s, by a division
    /// where it does not (3 Gb/s: a third of a nanosecond a bit, rounded
    /// down once per packet, not per bit).
    #[test]
    fn serialization_is_exact_at_every_rate() {
        let mut hot = port_with_stale_count(0, 0).hot;
        let bits = (1000 + WIRE_OVERHEAD) * 8;
        assert_eq!(hot.serialization(1000), Duration(bits * 10), "100 Gb/s");
        hot.bandwidth_bps = 3_000_000_000;
        hot.ps_per_bit = 0;
        assert_eq!(hot.serialization(1000), Duration(bits * 1000 / 3));
        assert_eq!(hot.serialization(0), Duration(WIRE_OVERHEAD * 8 * 1000 / 3));
    }

    /// The head of a line that is still counted as waiting when it
    /// arrives (every packet of the line is) stops being counted: its
    /// charge leaves the queue's count with it. One that was not counted
    /// leaves the count alone.
    #[test]
    fn an_arrival_still_counted_as_waiting_leaves_the_count() {
        let mut st = port_with_stale_count(1 << 20, u64::MAX);
        st.pop_arrived(0).unwrap();
        assert_eq!((st.queued_bytes, st.waiting), (3000, 3), "not counted");
        st.pop_arrived(0).unwrap();
        assert_eq!((st.queued_bytes, st.waiting), (2000, 2), "counted");
        let mut st = port_with_stale_count(1 << 20, u64::MAX);
        st.queued_bytes = 3048;
        st.pop_arrived(16).unwrap();
        st.pop_arrived(16).unwrap();
        assert_eq!(st.queued_bytes, 2032, "the seal is charged too");
    }

    /// A line entry's start and charge, worked out from the packet and
    /// the port, are those the line was built with.
    #[test]
    fn an_entry_knows_its_start_and_its_charge() {
        let st = port_with_stale_count(0, 0);
        for (i, f) in st.flight.iter().enumerate() {
            assert_eq!(f.start(&st.hot, 0), Instant(i as u64 * one()));
            assert_eq!(f.charged(0), 1000);
            assert_eq!(f.charged(16), 1016);
        }
    }

    /// The queue's count is made exact exactly when a decision could
    /// read it: a packet of 1000 bytes joining half way through the third
    /// packet would be dropped by a 3500-byte queue, would set a new
    /// deepest queue above 3500, or would be marked above a threshold of
    /// 2999, if the stale count were believed; each time it is counted
    /// again (1000 bytes, one packet). Where nothing depends on it the
    /// count stays as it was, and a port that has sent everything is
    /// empty without its line being read.
    #[test]
    fn the_queue_is_counted_again_only_when_it_decides_something() {
        let now = Instant(one() * 5 / 2);
        let exact = |st: &PortState| (st.queued_bytes, st.waiting);
        for (queue, threshold, deepest, why) in [
            (3500, u64::MAX, u64::MAX, "a drop"),
            (1 << 20, u64::MAX, 3500, "the deepest queue"),
            (1 << 20, 2999, u64::MAX, "a mark"),
        ] {
            let mut st = port_with_stale_count(queue, threshold);
            st.settle(now, 1000, deepest, 0);
            assert_eq!(exact(&st), (1000, 1), "{why}");
        }
        let mut st = port_with_stale_count(1 << 20, 3000);
        st.settle(now, 1000, 4000, 0);
        assert_eq!(exact(&st), (3000, 3), "nothing depends on it");
        let mut st = port_with_stale_count(1 << 20, u64::MAX);
        st.flight.clear();
        st.settle(Instant(4 * one()), 1000, u64::MAX, 0);
        assert_eq!(exact(&st), (0, 0), "free after the fourth: nothing waits");
    }

    /// The arrival time and the packet, nothing else (the prefetches ask
    /// for two cache lines an entry).
    #[test]
    fn a_packet_in_a_line_is_72_bytes() {
        assert_eq!(std::mem::size_of::<InFlight>(), 72);
    }

    #[test]
    fn a_port_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<PortState>(), 128);
        assert_eq!(std::mem::align_of::<PortState>(), 64);
    }
}
