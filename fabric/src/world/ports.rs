//! Egress ports: faults at the queue, FIFO service with tail drop, ECN
//! and trimming, the flight line to the far end, captures (the port's
//! own state is `port_state`).

use super::port_state::{ecn_marks, InFlight, PortHot};
use super::*;

/// Room (bytes) of a buffer the packet pool keeps many of
/// ([`World::recycle`]).
const SMALL_ROOM: usize = 128;

/// Whether a pool holding `held` buffers keeps one more of `room` bytes.
fn pool_keeps(held: usize, room: usize) -> bool {
    held < 4096 || (room <= SMALL_ROOM && held < 1 << 16)
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
                *self.stats.fault_drops.entry(rule).or_default() += 1;
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

    /// Keeps a packet's room for the next datagram: up to 4,096 buffers
    /// of any size, and up to 65,536 small ones (a header and an elided
    /// payload), so that a rank reading a window's packets from another
    /// (16,000 a window at k=32) reuses the room of those it sent rather
    /// than allocating each. The small ones add at most 7.5 MiB (61,440
    /// of 128 bytes) to the 4,096 of any size kept before.
    pub(super) fn recycle(&mut self, bytes: Vec<u8>) {
        if pool_keeps(self.pool.len(), bytes.capacity()) {
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
            // Stand-ins of packets another shard has taken in by now
            // (every packet kept here arrives in a later window), looked
            // for only once one may have arrived (a line with no bound
            // looks every time).
            let from =
                (self.shard.as_deref_mut()).and_then(|s| s.stand_ins_from.get_mut(port as usize));
            if from.as_deref().is_none_or(|&from| from <= now.as_ps()) {
                while st.flight.front().is_some_and(|f| f.arrive <= now) {
                    debug_assert!(st.flight.len() > st.kept as usize, "a kept packet is due");
                    st.pop_arrived(self.seal_bytes);
                }
                if let Some(from) = from {
                    *from = st.flight.front().map_or(u64::MAX, |f| f.arrive.as_ps());
                }
            } else {
                debug_assert!(
                    st.flight.front().is_none_or(|f| f.arrive > now),
                    "a stand-in arrived before its line's bound"
                );
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
                pkt.nic_time(&self.cost, len) + Duration::from_ps(u64::from(pkt.nic_work_ps))
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
            let work = pkt.nic_time(&self.cost, pkt.len());
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
            // The NIC works on its next packet while this one is on the
            // wire, so it takes it early enough for a full data packet's
            // work to end as the wire frees: leading by this packet's own
            // work alone left the wire idle after every acknowledgement,
            // while the data packet behind it was still being read.
            let lead = nic_cost.max(self.full_work);
            self.hosts[h as usize].tx_lead = lead;
            let pull_at = Instant(free_at.as_ps().saturating_sub(lead.as_ps())).max(now);
            self.schedule(pull_at, EvKind::HostFree(h));
        }
        let arrive_at = free_at + hot.latency;
        let st = &mut self.ports[port as usize];
        let entry = InFlight {
            arrive: arrive_at,
            pkt,
        };
        if hot.remote {
            if let Some(from) =
                (self.shard.as_deref_mut()).and_then(|s| s.stand_ins_from.get_mut(port as usize))
            {
                *from = (*from).min(arrive_at.as_ps());
            }
            match self.shard.as_mut() {
                Some(shard) if shard.keep => {
                    st.flight.push_back(entry);
                    st.kept += 1;
                    if st.kept == 1 {
                        shard.keeping.push(port);
                    }
                }
                Some(shard) => {
                    st.flight.push_back(entry.stand_in());
                    shard.outbox[usize::from(hot.to_shard)]
                        .line
                        .push((port, entry));
                }
                None => st.flight.push_back(entry.stand_in()),
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
    /// it reaches the receive unit no sooner than one full data packet's
    /// work before the unit frees up (see `launch`).
    fn rx_slot(
        &self,
        to: u32,
        hot: &PortHot,
        ser: Duration,
        work: Duration,
        earliest: Instant,
    ) -> Instant {
        let ready = self.hosts[to as usize].rx_ready;
        // The NIC buffers one full packet beside the one it works on, so a
        // packet may arrive one full packet's work before the unit frees,
        // however little work it brings itself: measured from its own
        // work, an acknowledgement behind a data packet waited until that
        // packet was nearly done, and left the link idle meanwhile.
        let reach = hot.latency + ser + work.max(self.full_work);
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
            let work = pkt.nic_time(&self.cost, pkt.len());
            start = self.rx_slot(to, &hot, ser, work, start);
            // The lane holds as many bytes as the port's queue, and no
            // more of the NIC's work than its patience, of its own
            // waiting packets only (`lane`).
            let bytes = pkt.len() + self.seal_bytes;
            let lane = &mut self.lanes[port as usize];
            let Some(ahead) = lane.admits(self.now, bytes, work) else {
                self.stats.lane_dropped += 1;
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
                let cost = pkt.nic_time(&self.cost, pkt.len()) + work;
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

    /// The pool stays bounded: 4,096 buffers of any size, 65,536 small
    /// ones, whatever is given back.
    #[test]
    fn the_packet_pool_keeps_at_most_4096_frames_and_65536_small_buffers() {
        let fill = |room: usize, given: usize| {
            (0..given).fold(0, |n, _| n + usize::from(pool_keeps(n, room)))
        };
        assert_eq!(fill(4000, 10_000), 4096);
        assert_eq!(fill(SMALL_ROOM + 1, 10_000), 4096);
        assert_eq!(fill(SMALL_ROOM, 100_000), 65_536);
        assert_eq!(fill(48, 100_000), 65_536);
        // Past 4,096, only small room is kept.
        assert!(pool_keeps(5000, 64) && !pool_keeps(5000, 4000));
    }
}
