//! Replies: ACKs, coalesced selective ACKs, NACKs and completion
//! notices owed to peers (built when the link can take them), and what
//! the sender does when they come back.

use super::*;

impl Nic {
    pub(super) fn header_reply(from: NodeAddr, r: &Repr<'_>, body: ReplyBody) -> Reply {
        Reply {
            port: 0,
            to: from,
            src_ep: r.dst_ep,
            dst_ep: r.src_ep,
            op_num: r.op_num,
            msg_id: r.msg_id,
            seg_index: r.seg_index,
            seg_count: r.seg_count,
            body,
        }
    }

    pub(super) fn push_reply(&mut self, mut reply: Reply) -> bool {
        if self.cfg.multipath != Multipath::Single {
            reply.port = self.rx_port;
        }
        if self.replies.len() >= self.cfg.transmit_queue_capacity {
            self.stats.tx_queue_overflow += 1;
            return false;
        }
        self.replies.push_back(reply);
        self.replies_peak = self.replies_peak.max(self.replies.len());
        true
    }

    pub(super) fn nack(&mut self, from: NodeAddr, r: &Repr<'_>, syndrome: Syndrome, detail: u32) {
        *self.stats.nacks_sent.entry(syndrome).or_default() += 1;
        self.push_reply(Nic::header_reply(
            from,
            r,
            ReplyBody::Nack { syndrome, detail },
        ));
    }

    /// NACKs a packet known only by its header (one that did not parse, or
    /// whose payload a switch trimmed).
    pub(super) fn nack_header(
        &mut self,
        from: NodeAddr,
        p: &Packet<&[u8]>,
        syndrome: Syndrome,
        detail: u32,
    ) {
        *self.stats.nacks_sent.entry(syndrome).or_default() += 1;
        self.push_reply(Reply {
            port: 0,
            to: from,
            src_ep: p.dst_ep(),
            dst_ep: p.src_ep(),
            op_num: p.op_num(),
            msg_id: p.msg_id(),
            seg_index: p.seg_index(),
            seg_count: p.seg_count(),
            body: ReplyBody::Nack { syndrome, detail },
        });
    }

    /// Acknowledges a data packet: at once, or coalesced into a SACK.
    pub(super) fn ack(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>) {
        match self.cfg.ack_mode {
            AckMode::PerPacket => {
                let ece = self.rx_ce;
                self.push_reply(Nic::header_reply(
                    from,
                    r,
                    ReplyBody::Ack { ece, dup: Dup::No },
                ));
            }
            AckMode::Selective { delay } => {
                let key = OpKey {
                    from,
                    src_ep: r.src_ep,
                    msg_id: r.msg_id,
                };
                let pending = self.sacks.entry(key).or_insert_with(|| PendingSack {
                    src_ep: r.dst_ep,
                    seg_count: r.seg_count,
                    indices: BTreeSet::new(),
                    marked: BTreeSet::new(),
                    deadline: now + delay,
                });
                pending.indices.insert(r.seg_index);
                if self.rx_ce {
                    pending.marked.insert(r.seg_index);
                }
                let deadline = pending.deadline;
                let fresh = pending.indices.len() == 1;
                if self.sacks.len() > self.cfg.registry_capacity {
                    // Bound the pending set: send this one now.
                    self.flush_sack(key);
                } else if fresh {
                    self.timers.insert((deadline, Timer::Sack(key)));
                }
            }
        }
    }

    /// Acknowledges a data packet that had arrived before (its registry
    /// bit set, or its operation complete): at once, by an ACK flagged
    /// `DUP`, so that a sender that sent it again on loss detection learns
    /// the copy was not needed (DSACK), even when the copy came first.
    /// With selective ACKs the packet also joins a SACK, sent before the
    /// report, whose bitmap repairs lost SACKs.
    ///
    /// The report also says (flag `RETX` beside `DUP`) when the duplicate
    /// is a copy sent again after the packet's earlier arrival had been
    /// acknowledged: that acknowledgement may have been lost, and the copy
    /// says nothing about reordering. A first copy arriving after its copy
    /// (or a copy while the earlier arrival's SACK still waits here) is a
    /// late packet, and the report says so by leaving `RETX` off.
    pub(super) fn ack_duplicate(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>) {
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        let unacked = self
            .sacks
            .get(&key)
            .is_some_and(|p| p.indices.contains(&r.seg_index));
        let answered = r.flags.contains(Flags::RETRANSMIT) && !unacked;
        let selective = matches!(self.cfg.ack_mode, AckMode::Selective { .. });
        if selective && self.tombstones.contains(&key) {
            // The operation is complete here: every packet of it arrived.
            // A sender that sends one again lost its SACKs and COMPLETION,
            // and learns from this copy's answer that the packets below it
            // arrived too.
            self.sack_complete(key, r.dst_ep, r.seg_count, r.seg_index);
        } else if selective {
            // The SACK that names the packet goes first, now, not after
            // its coalescing delay: a report that overtook it would read,
            // at the sender, as the first word of the packet (a lost
            // acknowledgement), and the copy would teach nothing.
            self.ack(now, from, r);
            self.flush_sack(key);
        }
        let ece = self.rx_ce;
        let dup = Dup::Reported { answered };
        self.push_reply(Nic::header_reply(from, r, ReplyBody::Ack { ece, dup }));
    }

    /// A SACK for an operation complete here (its tombstone's: every
    /// packet arrived) naming the 64 packets that end at `hi`. One, not
    /// one per 64 packets of the operation: a datagram's answer stays
    /// bounded whatever `seg_count` it claims.
    pub(super) fn sack_complete(&mut self, key: OpKey, src_ep: u16, seg_count: u32, hi: u32) {
        let base = hi.saturating_sub(63);
        let bits = hi - base + 1;
        let bitmap = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        self.push_reply(Reply {
            port: 0,
            to: key.from,
            src_ep,
            dst_ep: key.src_ep,
            op_num: 0,
            msg_id: key.msg_id,
            seg_index: base,
            seg_count,
            body: ReplyBody::Sack {
                base,
                bitmap,
                ece: false,
            },
        });
    }

    pub(super) fn flush_sack(&mut self, key: OpKey) {
        let Some(p) = self.sacks.remove(&key) else {
            return;
        };
        self.timers.remove(&(p.deadline, Timer::Sack(key)));
        // Marked and unmarked packets go in separate SACKs (the ECE flag
        // speaks for every packet of its bitmap). A marked SACK names its
        // fresh marked packets, by aligned word; an unmarked one covers
        // the 64 packets ending at its highest fresh packet and names every
        // packet there the registry holds (except fresh marked ones), so a
        // lost SACK costs no retransmission once a later one gets through.
        let mut words: BTreeMap<(u32, bool), u64> = BTreeMap::new();
        for &i in &p.marked {
            *words.entry((i / 64 * 64, true)).or_default() |= 1u64 << (i % 64);
        }
        let held = self.registry.get(&key).map(|e| &e.mask);
        let mut fresh: Vec<u32> = p
            .indices
            .iter()
            .copied()
            .filter(|i| !p.marked.contains(i))
            .collect();
        while let Some(&hi) = fresh.last() {
            let base = hi.saturating_sub(63);
            let mut bitmap = 0u64;
            for b in 0..=(hi - base) {
                let i = base + b;
                let repeat = held.is_some_and(|m| m.is_set(i)) && !p.marked.contains(&i);
                if repeat || fresh.binary_search(&i).is_ok() {
                    bitmap |= 1u64 << b;
                }
            }
            fresh.retain(|i| *i < base);
            words.insert((base, false), bitmap);
        }
        for ((base, ece), bitmap) in words {
            self.push_reply(Reply {
                port: 0,
                to: key.from,
                src_ep: p.src_ep,
                dst_ep: key.src_ep,
                op_num: 0,
                msg_id: key.msg_id,
                seg_index: base,
                seg_count: p.seg_count,
                body: ReplyBody::Sack { base, bitmap, ece },
            });
        }
    }

    /// The outstanding packet an ACK or NACK names, if the number is
    /// current and matches the packet's message and segment.
    pub(super) fn match_op(&self, from: NodeAddr, r: &Repr<'_>) -> Option<OpNumber> {
        let opn = OpNumber(r.op_num);
        let inf = self.op_table.get(opn)?;
        let op = self.ops.get(&inf.msg_id)?;
        (inf.msg_id == r.msg_id && inf.seg == r.seg_index && op.dst == from).then_some(opn)
    }

    pub(super) fn on_ack(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>) {
        let dup = r.flags.contains(Flags::DUP);
        match self.match_op(from, r) {
            Some(opn) => {
                // The first word of this packet's arrival is a duplicate's:
                // the receiver had it, but its acknowledgement was lost,
                // so the copy was needed to learn it. No sign of reordering.
                if dup {
                    self.flow(from).take_resent(r.msg_id, r.seg_index);
                }
                self.ack_packet(now, opn, true, r.flags.contains(Flags::ECE));
            }
            None => {
                self.stats.stale_acks += 1;
                if dup {
                    let answered = r.flags.contains(Flags::RETRANSMIT);
                    self.on_duplicate(now, from, r.msg_id, r.seg_index, answered);
                }
            }
        }
    }

    pub(super) fn on_sack(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        base: u32,
        bitmap: u64,
    ) {
        let Some(op) = self.ops.get(&r.msg_id).filter(|op| op.dst == from) else {
            self.stats.stale_acks += 1;
            return;
        };
        let acked: Vec<OpNumber> = (0..64u32)
            .filter(|b| bitmap & (1u64 << b) != 0)
            .filter_map(|b| base.checked_add(b))
            .filter_map(|i| match op.pkts.get(i as usize) {
                Some(PktState::InFlight(opn)) => Some(*opn),
                _ => None,
            })
            .collect();
        // Packets sent once first, copies after: a copy's answer judges
        // what left before it (`detect_overtaken`), and the packets this
        // same SACK names are not lost (a stalled receiver's one SACK
        // names a timeout's copy beside the packets it held).
        let mut acked = acked;
        acked.sort_by_key(|o| self.op_table.get(*o).is_some_and(|e| e.retransmitted));
        let ce = r.flags.contains(Flags::ECE);
        for opn in acked {
            self.ack_packet(now, opn, true, ce);
        }
    }

    pub(super) fn on_nack(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        syndrome: Syndrome,
        detail: u32,
    ) {
        // Any answer ends a timeout hold toward the peer: it is not
        // silent. (Held behind a copy the receiver refused, an operation's
        // first packet waited while the receiver's escape channel expired
        // the rest, NACKing each: a SEND ran out of retries.)
        if let Some(f) = self.flows.get_mut(&from) {
            f.timeout_copy = None;
        }
        let Some(opn) = self.match_op(from, r) else {
            self.stats.stale_acks += 1;
            return;
        };
        *self.stats.nacks_received.entry(syndrome).or_default() += 1;
        if syndrome == Syndrome::Trimmed {
            // Lost to a full queue, and known at once: send it again now
            // (once; a copy already waiting is not queued twice). A trim
            // is congestion, not a lossy path: it spends the busy budget
            // (max_rnr_retries), as receiver-not-ready does, not the loss
            // budget, and does not back off the RTO.
            let Some(inf) = self.op_table.get(opn).copied() else {
                return;
            };
            if inf.deadline.is_none() {
                return;
            }
            if let Some(dst) = self.ops.get(&inf.msg_id).map(|op| op.dst) {
                self.flow_lost(now, dst, inf.bytes, LossCause::Trimmed);
                self.entropy_feedback(dst, inf.entropy, false);
            }
            if detail == TRIMMED_AHEAD && self.cfg.retransmit == RetransmitMode::GoBackN {
                // A go-back-N receiver discarded it out of sequence: the
                // rewind from the packet it expects resends it.
                self.stats.trims_ahead += 1;
                return;
            }
            if self.count_rnr_retry(now, opn) {
                self.cut_window_from(now, opn, CutCause::Trim);
                self.queue_retransmit(opn);
                if self.cfg.retransmit == RetransmitMode::GoBackN {
                    // The receiver discards every later packet of the
                    // operation as out of sequence: they go again now, in
                    // order after it, instead of each on its own timer
                    // (which spent the loss budget on packets only
                    // discarded).
                    self.go_back_after(opn);
                }
            }
            return;
        }
        if syndrome == Syndrome::SequenceError {
            self.on_sequence_error(now, opn, detail);
            return;
        }
        if syndrome == Syndrome::ReceiverNotReady {
            // Back-pressure, not loss: send again after rnr_delay (at once
            // if zero), and nothing new to this peer meanwhile. A packet
            // already waiting to go again (queued, or on its RNR timer: a
            // NACK for an older copy) is not counted or queued twice.
            let waiting = self.op_table.get(opn).is_none_or(|inf| {
                inf.deadline
                    .is_none_or(|d| self.timers.contains(&(d, Timer::RnrRetry(opn))))
            });
            if waiting || self.restart_lost_registration(now, opn, detail == RNR_LOST) {
                return;
            }
            if !self.count_rnr_retry(now, opn) {
                return;
            }
            let delay = self.cfg.rnr_delay;
            if delay.0 > 0 {
                self.hold_peer(now, from, delay);
            }
            if self.park_for_first(now, opn) {
                return;
            }
            self.rnr_wait(now, opn);
            return;
        }
        let wr = self
            .op_table
            .get(opn)
            .and_then(|inf| self.ops.get(&inf.msg_id))
            .map(|op| op.wr);
        if let Some(wr) = wr {
            self.fail_request(now, wr, WcError::Remote(syndrome));
        }
    }

    /// The receiver's registry completed the operation: everything still
    /// outstanding of it is acknowledged at once (no RTT sample).
    pub(super) fn on_completion_notice(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>) {
        let Some(op) = self.ops.get(&r.msg_id) else {
            return;
        };
        if op.dst != from
            || !matches!(op.kind, OpKind::Write | OpKind::Send)
            || op.next_unsent < op.seg_count
        {
            return;
        }
        self.stats.completion_notices += 1;
        if op.seg_count == 1 && r.flags.contains(Flags::ACKS) {
            // The notice is its one packet's acknowledgement (the receiver
            // sent no other): a round-trip sample, path feedback and the
            // controller's ack, ECE included.
            if let PktState::InFlight(opn) = op.pkts[0] {
                self.ack_packet(now, opn, true, r.flags.contains(Flags::ECE));
            }
            return;
        }
        let outstanding: Vec<OpNumber> = op
            .pkts
            .iter()
            .filter_map(|p| match p {
                PktState::InFlight(o) => Some(*o),
                _ => None,
            })
            .collect();
        for opn in outstanding {
            self.ack_packet(now, opn, false, false);
        }
    }

    pub(super) fn on_data_arrived(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        addr: u64,
        length: u32,
        immediate: u32,
    ) {
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        if self.first_sighting(key) {
            self.events.push_back(Event::DataArrived {
                from,
                addr,
                len: u64::from(length),
                immediate,
                at: now,
            });
        }
        let ece = self.rx_ce;
        self.push_reply(Nic::header_reply(
            from,
            r,
            ReplyBody::Ack { ece, dup: Dup::No },
        ));
    }

    /// Emits a reply; READ responses read memory now (a region deregistered
    /// meanwhile sends nothing: the requester retries and is NACKed).
    pub(super) fn build_reply(
        &mut self,
        now: Instant,
        reply: &Reply,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let mtu = u64::from(self.cfg.mtu_payload);
        let mut flags = Flags::empty();
        let mut touch = None;
        let body = match reply.body {
            ReplyBody::Ack { ece, dup } => {
                flags.set(Flags::ECE, ece);
                if let Dup::Reported { answered } = dup {
                    flags.set(Flags::DUP, true);
                    flags.set(Flags::RETRANSMIT, answered);
                }
                Body::Ack
            }
            ReplyBody::Sack { base, bitmap, ece } => {
                flags.set(Flags::ECE, ece);
                Body::SelectiveAck { base, bitmap }
            }
            ReplyBody::Nack { syndrome, detail } => Body::Nack { syndrome, detail },
            ReplyBody::ReadAgain { rkey, addr, length } => {
                flags |= Flags::PARTIAL | Flags::RETRANSMIT;
                Body::ReadRequest {
                    remote_addr: addr,
                    rkey,
                    length,
                }
            }
            ReplyBody::Credit(noop) => {
                flags.set(Flags::ACK_REQ, noop == Noop::Repair);
                Body::Credit
            }
            ReplyBody::Demand { wanted, free } => Body::Demand { wanted, free },
            ReplyBody::Grant { granted } => Body::Grant { granted },
            ReplyBody::Hello {
                reply,
                nonce,
                cookie,
            } => Body::Hello(self.hello_said(reply, nonce, cookie)),
            ReplyBody::Completion { len, acks, ece } => {
                flags.set(Flags::ACKS, acks);
                flags.set(Flags::ECE, acks && ece);
                Body::Completion {
                    status: 0,
                    length: len,
                }
            }
            ReplyBody::ReadResponse {
                rkey,
                addr,
                total_len,
            } => {
                let offset = u64::from(reply.seg_index) * mtu;
                let len = u64::from(total_len).saturating_sub(offset).min(mtu);
                if self.needs_dma_work() {
                    touch = Some(local::Touch::Key {
                        key: MrKey(rkey),
                        addr: addr + offset,
                        len,
                    });
                }
                let data = self
                    .memory
                    .load(
                        MrKey(rkey),
                        addr + offset,
                        len,
                        Use::RemoteRead,
                        &mut self.scratch,
                    )
                    .ok()?;
                flags.set(Flags::FIRST, reply.seg_index == 0);
                flags.set(Flags::LAST, reply.seg_index + 1 == reply.seg_count);
                Body::ReadResponse {
                    offset: offset as u32,
                    total_len,
                    data,
                }
            }
        };
        let noop = match reply.body {
            ReplyBody::Credit(Noop::Echo) => peers::Carry::Echo,
            ReplyBody::Credit(_) => peers::Carry::Advertise,
            _ => peers::Carry::Any,
        };
        let (credit_flags, credits, news) = peers::credit_field(
            peers::CreditBook {
                advertised: &self.advertised,
                seen: &self.credits_seen,
                carried: &mut self.credits_carried,
                echo_next: &mut self.echo_next,
            },
            reply.to,
            noop,
        );
        flags |= credit_flags;
        let repr = Repr {
            flags,
            src_ep: reply.src_ep,
            dst_ep: reply.dst_ep,
            op_num: reply.op_num,
            msg_id: reply.msg_id,
            seg_index: reply.seg_index,
            seg_count: reply.seg_count,
            credits,
            epoch: self.cfg.epoch,
            body,
        };
        let elided = send::emit(&repr, buf, self.elide_zeros)?;
        if news && noop == peers::Carry::Any {
            // An answer is never sent again: if the peer does not show
            // this count within a retransmit timeout, a NOOP carries it.
            self.doubt(now, reply.to, 0);
        }
        Some(self.reply_transmit(reply, buf.len(), elided, touch))
    }

    /// The HELLO this NIC says: its payload limit, the region it
    /// announces (if any), its ports.
    fn hello_said(&self, reply: bool, nonce: u32, cookie: [u8; 16]) -> udrma_proto::Hello {
        let (region_addr, region_len, rkey) = self
            .announced
            .and_then(|k| self.memory.region(k).map(|r| (r.base, r.len, k.0)))
            .unwrap_or((0, 0, 0));
        udrma_proto::Hello {
            reply,
            max_payload: self.cfg.mtu_payload.min(u32::from(u16::MAX)) as u16,
            nonce,
            region_addr,
            region_len,
            rkey,
            ports: self.cfg.hello_ports,
            retry: false,
            full: false,
            cookie,
        }
    }

    /// The emitted reply as a transmit: its DMA work (a READ response's
    /// bytes) and the port it leaves from.
    fn reply_transmit(
        &mut self,
        reply: &Reply,
        len: usize,
        elided: u16,
        touch: Option<local::Touch>,
    ) -> Transmit {
        let nic_work = touch.map_or(udrma_proto::time::Duration::ZERO, |t| self.dma_work(t));
        Transmit {
            dst: reply.to,
            len,
            elided,
            src_port: if reply.port != 0 {
                reply.port
            } else {
                self.cfg.src_port
            },
            nic_work,
            leaves_in: nic_work,
        }
    }
}
