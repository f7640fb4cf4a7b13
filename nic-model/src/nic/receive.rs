//! The receive path: datagram checks, the receive registry and its
//! bitmask, the escape channel, tombstones, and READ requests and
//! responses.

use super::*;

impl Nic {
    /// Takes one datagram from `from`. Malformed or hostile bytes never
    /// panic: they are counted by reason in [`Stats`] and dropped, or
    /// NACKed where the protocol says so.
    pub fn handle_datagram(&mut self, now: Instant, from: NodeAddr, bytes: &[u8]) {
        self.handle_datagram_meta(now, from, RxMeta::default(), bytes);
    }

    /// [`Nic::handle_datagram`] with what the network said about the
    /// datagram: a Congestion Experienced mark is echoed to the sender on
    /// the acknowledgement (the ECE flag) and, for READ responses, heard by
    /// this NIC's own controller toward `from`.
    pub fn handle_datagram_meta(
        &mut self,
        now: Instant,
        from: NodeAddr,
        meta: RxMeta,
        bytes: &[u8],
    ) {
        self.handle_elided(now, from, meta, Datagram::whole(bytes));
    }

    /// [`Nic::handle_datagram_meta`] for a datagram whose all-zero payload
    /// may be left out of its buffer (a simulator's phantom payloads):
    /// checked, counted and applied exactly as the whole datagram would be.
    pub fn handle_elided(&mut self, now: Instant, from: NodeAddr, meta: RxMeta, d: Datagram<'_>) {
        self.rx_ce = meta.ecn == Ecn::Ce;
        self.rx_port = meta.src_port;
        if self.rx_ce {
            self.stats.rx_ce += 1;
        }
        if !self.placing.is_empty() && d.bytes.len() >= udrma_proto::HEADER_LEN {
            let p = Packet::new_unchecked(d.bytes);
            self.placing
                .remove(&(from, p.src_ep(), p.msg_id(), p.seg_index()));
        }
        if meta.trimmed {
            self.on_trimmed(now, from, d.bytes);
        } else {
            self.receive(now, from, d);
        }
        self.rx_ce = false;
        self.rx_port = 0;
    }

    /// A header whose payload a switch cut off. Its ICRC went with the
    /// payload, so nothing in it is trusted beyond naming the packet back
    /// to its claimed sender: no state changes here (not even a first
    /// sighting of the peer's epoch), and no NACK for a packet of another
    /// life than the one the peer last showed (dropped and counted). The
    /// sender retransmits at once; a trimmed READ response is asked for
    /// again by this NIC, its requester.
    fn on_trimmed(&mut self, now: Instant, from: NodeAddr, bytes: &[u8]) {
        self.stats.rx_datagrams += 1;
        self.stats.rx_trimmed += 1;
        if bytes.len() < udrma_proto::HEADER_LEN {
            self.stats.rx_truncated += 1;
            return;
        }
        let p = Packet::new_unchecked(bytes);
        if p.version() != udrma_proto::VERSION {
            self.stats.rx_bad_version += 1;
            return;
        }
        if self.peer_epochs.get(&from).is_some_and(|e| *e != p.epoch()) {
            self.stats.stale_epoch += 1;
            return;
        }
        match p.opcode() {
            udrma_proto::Opcode::Write | udrma_proto::Opcode::Send => {
                if self.gbn_skips_trimmed(from, &p) {
                    // Discarded as the whole packet would have been; its
                    // sender's controller still hears the full queue.
                    self.nack_header(from, &p, Syndrome::Trimmed, TRIMMED_AHEAD);
                    return;
                }
                self.nack_header(from, &p, Syndrome::Trimmed, 0);
            }
            // This NIC asked for it: it asks again.
            udrma_proto::Opcode::ReadResponse => {
                self.read_response_trimmed(now, from, p.msg_id(), p.seg_index());
            }
            // A reduce packet or a control packet: its sender's timer
            // recovers it.
            _ => {}
        }
    }

    /// Go-back-N: whether a trimmed WRITE or SEND header is one the
    /// receiver would discard whole (ahead of the packet it takes next, or
    /// one it holds already). Its TRIMMED NACK then says so
    /// ([`TRIMMED_AHEAD`]): the sender's controller hears the full queue,
    /// but nothing is resent, since the rewind from the packet expected
    /// next resends it. Before, every trimmed header asked for a rewind,
    /// those of copies an earlier rewind had already abandoned included,
    /// and each rewind sent the window into the same full queue again: an
    /// all-to-all that dropped nothing failed with `RetryExceeded`
    /// (finding 35). Reads state, changes none.
    fn gbn_skips_trimmed(&self, from: NodeAddr, p: &Packet<&[u8]>) -> bool {
        if self.cfg.retransmit != RetransmitMode::GoBackN {
            return false;
        }
        let key = OpKey {
            from,
            src_ep: p.src_ep(),
            msg_id: p.msg_id(),
        };
        let expected = match self.registry.get(&key) {
            Some(entry) if entry.mask.count() == p.seg_count() => entry
                .mask
                .missing_span()
                .map_or(entry.mask.count(), |(lo, _)| lo),
            // A copy of another shape, or of an operation finished here:
            // answered as before (its sender drops a NACK for what it no
            // longer holds).
            Some(_) => return false,
            None if self.tombstones.contains(&key) || self.tombstones.finished(&key) => {
                return false;
            }
            None => 0,
        };
        p.seg_index() != expected
    }

    fn receive(&mut self, now: Instant, from: NodeAddr, d: Datagram<'_>) {
        self.stats.rx_datagrams += 1;
        let repr = match d.parse() {
            Ok(r) => r,
            Err(e) => {
                match e {
                    WireError::Truncated { .. } => self.stats.rx_truncated += 1,
                    WireError::BadChecksum { .. } => self.stats.rx_bad_checksum += 1,
                    WireError::BadVersion(_) => self.stats.rx_bad_version += 1,
                    WireError::BadLength { .. }
                    | WireError::UnexpectedPayload { .. }
                    | WireError::BadReduceLength { .. }
                    | WireError::ElidedLength { .. } => self.stats.rx_bad_length += 1,
                    WireError::UnknownOpcode(code) => {
                        self.stats.rx_unknown_opcode += 1;
                        // The ICRC held, so the header can be trusted enough
                        // to tell the sender.
                        self.nack_header(
                            from,
                            &d.header(),
                            Syndrome::UnknownOpcode,
                            u32::from(code),
                        );
                    }
                }
                return;
            }
        };
        if !self.check_epoch(now, from, repr.epoch) {
            return;
        }
        if repr.flags.contains(Flags::CREDITS_ECHO) {
            self.note_echo(now, from, Some(repr.credits));
        } else {
            if repr.flags.contains(Flags::CREDITS_VALID) {
                self.note_credits(now, from, repr.credits);
            }
            // A NOOP answers nothing (two NOOPs must not draw each other),
            // except that a repair asks for one echo.
            if !matches!(repr.body, Body::Credit) {
                self.note_echo(now, from, None);
            } else if repr.flags.contains(Flags::ACK_REQ) {
                self.answer_repair(from);
            }
        }
        match repr.body {
            Body::Write { .. } | Body::Send { .. } => {
                self.credit_arrived(from, d.len());
                self.on_data(now, from, &repr, d)
            }
            Body::ReadRequest {
                remote_addr,
                rkey,
                length,
            } => self.on_read_request(from, &repr, remote_addr, rkey, length),
            Body::ReadResponse { offset, data, .. } => {
                self.on_read_response(now, from, &repr, offset, data)
            }
            Body::Ack => self.on_ack(now, from, &repr),
            Body::SelectiveAck { base, bitmap } => self.on_sack(now, from, &repr, base, bitmap),
            Body::Nack { syndrome, detail } => self.on_nack(now, from, &repr, syndrome, detail),
            Body::Completion { .. } => self.on_completion_notice(now, from, &repr),
            Body::DataArrived {
                addr,
                length,
                immediate,
            } => self.on_data_arrived(now, from, &repr, addr, length, immediate),
            Body::Rts(rdv) => self.on_control(now, from, &repr, Control::Rts(rdv)),
            Body::Cts(rdv) => self.on_control(now, from, &repr, Control::Cts(rdv)),
            Body::Fin { protocol, tag, seq } => {
                self.on_control(now, from, &repr, Control::Fin { protocol, tag, seq })
            }
            Body::Credit => self.stats.noops_received += 1,
            Body::Demand { wanted, free } => self.on_demand(now, from, wanted, free),
            Body::Grant { granted } => self.on_grant(now, from, granted),
            Body::Hello(h) => self.on_hello(now, from, &repr, h),
            Body::Reduce { hdr, data } => self.on_reduce(now, from, &repr, hdr, data, false),
            Body::ReduceBcast { hdr, data } => self.on_reduce(now, from, &repr, hdr, data, true),
            Body::ReduceAck {
                acked,
                branch,
                tree,
            } => self.on_reduce_ack(now, from, &repr, acked, branch, tree),
        }
    }

    /// WRITE or SEND data: apply it to its registered operation, register
    /// the operation, or park the packet in the escape channel.
    pub(super) fn on_data(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>, d: Datagram<'_>) {
        if self.invalid_segment(r) {
            self.stats.rx_invalid += 1;
            self.nack(from, r, Syndrome::InvalidRequest, r.seg_count);
            return;
        }
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        if self.registry.contains(&key) {
            self.apply(now, key, r);
            return;
        }
        if self.tombstones.contains(&key) {
            // A late copy of a completed operation: never write again.
            self.stats.stale_dropped += 1;
            self.ack_duplicate(now, from, r);
            return;
        }
        if self.tombstones.finished(&key) {
            // Older than a full window of this peer's completions: its
            // sender has finished with it, so this is a late copy of an
            // operation that completed (or failed) long ago. Nobody waits
            // for an answer.
            self.stats.stale_finished += 1;
            return;
        }
        let described = match r.body {
            Body::Write { total_len, .. } => total_len != 0,
            _ => true,
        };
        let first = r.flags.contains(Flags::FIRST);
        let incarnation = (key, r.flags.contains(Flags::INCARNATION));
        if self.lost_registrations.contains(&incarnation) {
            // Its entry expired holding acknowledged packets: only the
            // whole operation again, in its next incarnation, can complete
            // it (the field's docs). Its first packet too: a late copy of
            // it would register an entry waiting for packets its sender
            // saw acknowledged (finding 43).
            self.stats.lost_registration_refusals += 1;
            self.nack(from, r, Syndrome::ReceiverNotReady, RNR_LOST);
            return;
        }
        let can_register =
            first || (self.cfg.registration == RegistrationMode::SelfDescribing && described);
        if can_register {
            if let Some(i) = self.gap_naks.iter().position(|k| *k == key) {
                self.gap_naks.remove(i);
            }
            self.lost_registrations.retain(|(k, _)| *k != key);
            if self.register_op(now, key, r) {
                self.apply(now, key, r);
                self.drain_escape(now, key);
            }
            return;
        }
        if self.cfg.retransmit == RetransmitMode::GoBackN {
            // Go-back-N keeps nothing out of sequence: the first packet is
            // missing. The first packet after it to arrive says so, once
            // per operation; later ones (and later copies) are discarded
            // quietly until the first packet comes.
            self.stats.out_of_sequence += 1;
            if !self.gap_naks.contains(&key) {
                if self.gap_naks.len() >= self.cfg.escape_capacity.max(1) {
                    self.gap_naks.pop_front();
                }
                self.gap_naks.push_back(key);
                self.nack(from, r, Syndrome::SequenceError, 0);
            }
            return;
        }
        let deadline = now + self.cfg.escape_timeout;
        match self.escape.push(Escaped {
            key,
            datagram: d.to_vec(),
            deadline,
        }) {
            Ok(id) => {
                self.stats.escape_buffered += 1;
                self.timers.insert((deadline, Timer::Escape(id)));
            }
            Err(_) => {
                // Full: the packet arrived intact, so say "not ready"
                // rather than let it look lost (its sender retries it on
                // the receiver-not-ready budget, not the loss budget).
                self.stats.escape_overflow += 1;
                self.nack(from, r, Syndrome::ReceiverNotReady, 0);
            }
        }
    }

    /// Whether a WRITE or SEND packet arriving now would have its payload
    /// placed, as [`Nic::on_data`] and [`Nic::apply`] decide: not one
    /// refused as invalid, not a copy the bitmask already holds, not a
    /// late copy of a finished operation, not one of an incarnation whose
    /// registration was lost, not one go-back-N discards as out of
    /// sequence. Other opcodes count as placed: the caller prices
    /// their work as before.
    pub(super) fn would_place(&self, from: NodeAddr, r: &Repr<'_>) -> bool {
        if !matches!(r.body, Body::Write { .. } | Body::Send { .. }) {
            return true;
        }
        if self.invalid_segment(r) {
            return false;
        }
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        // The packet go-back-N takes next: the first one missing, packet 0
        // of an operation not registered yet.
        let expected = match self.registry.get(&key) {
            Some(entry) => {
                if r.seg_count != entry.mask.count() || entry.mask.is_set(r.seg_index) {
                    return false;
                }
                entry
                    .mask
                    .missing_span()
                    .map_or(entry.mask.count(), |(lo, _)| lo)
            }
            None if self.tombstones.contains(&key) || self.tombstones.finished(&key) => {
                return false;
            }
            // A packet of an incarnation whose registration was lost is
            // refused (`on_data`).
            None if self
                .lost_registrations
                .contains(&(key, r.flags.contains(Flags::INCARNATION))) =>
            {
                return false;
            }
            // Selective retransmission places it, or keeps it in the escape
            // channel to place later: its work is counted now.
            None => 0,
        };
        self.cfg.retransmit != RetransmitMode::GoBackN || r.seg_index == expected
    }

    /// Whether a data packet's segment fields are refused as invalid
    /// before anything else (`INVALID_REQUEST`).
    fn invalid_segment(&self, r: &Repr<'_>) -> bool {
        r.seg_count == 0
            || r.seg_index >= r.seg_count
            || u64::from(r.seg_count) > self.cfg.max_packets_per_op()
    }

    /// Registers an operation: checks the target (memory or a posted
    /// receive buffer) and creates its registry entry with a fresh mask.
    pub(super) fn register_op(&mut self, now: Instant, key: OpKey, r: &Repr<'_>) -> bool {
        if self.registry.is_full() {
            self.stats.registry_full += 1;
            self.nack(key.from, r, Syndrome::ReceiverNotReady, 0);
            return false;
        }
        let (target, total_len) = match r.body {
            Body::Write {
                remote_addr,
                rkey,
                total_len,
                data,
            } => {
                // Whichever packet registers the operation names its whole
                // range: refuse the operation before any byte lands.
                let Some(start) = write_start(r, remote_addr, data.len(), total_len) else {
                    self.stats.rx_invalid += 1;
                    self.nack(key.from, r, Syndrome::InvalidRequest, r.seg_count);
                    return false;
                };
                if let Err(s) =
                    self.memory
                        .check(MrKey(rkey), start, u64::from(total_len), Use::RemoteWrite)
                {
                    self.nack(key.from, r, s, rkey);
                    return false;
                }
                (
                    Target::Write {
                        rkey: MrKey(rkey),
                        lo: remote_addr,
                    },
                    u64::from(total_len),
                )
            }
            Body::Send { total_len, .. } => {
                let Some(cap) = self
                    .recv_queues
                    .get(&r.dst_ep)
                    .and_then(|q| q.front())
                    .map(|b| b.len)
                else {
                    self.stats.no_receive_buffer += 1;
                    self.nack(key.from, r, Syndrome::ReceiverNotReady, 0);
                    return false;
                };
                if u64::from(total_len) > cap {
                    self.nack(key.from, r, Syndrome::OutOfBounds, total_len);
                    return false;
                }
                let Some(buf) = self
                    .recv_queues
                    .get_mut(&r.dst_ep)
                    .and_then(|q| q.pop_front())
                else {
                    return false;
                };
                let recv = buf.wr;
                self.bound.insert(recv, buf);
                (Target::Send { recv, cap }, u64::from(total_len))
            }
            _ => return false,
        };
        let deadline = now + self.cfg.registry_timeout;
        self.registry.insert(
            key,
            Entry {
                target,
                mask: Mask::new(r.seg_count),
                dst_ep: r.dst_ep,
                total_len,
                received: 0,
                deadline,
                armed: deadline,
                nak_sent: None,
                incarnation: r.flags.contains(Flags::INCARNATION),
            },
        );
        self.timers.insert((deadline, Timer::Registry(key)));
        true
    }

    /// Applies a data packet to its registered operation.
    pub(super) fn apply(&mut self, now: Instant, key: OpKey, r: &Repr<'_>) {
        let Some(entry) = self.registry.get_mut(&key) else {
            return;
        };
        if r.seg_count != entry.mask.count() {
            self.stats.rx_invalid += 1;
            self.nack(key.from, r, Syndrome::InvalidRequest, r.seg_count);
            return;
        }
        if entry.mask.is_set(r.seg_index) {
            self.stats.dup_dropped += 1;
            self.ack_duplicate(now, key.from, r);
            return;
        }
        if self.cfg.retransmit == RetransmitMode::GoBackN {
            // RoCE's receiver: only the next packet in sequence is taken;
            // one ahead of it is discarded and the gap NACKed once.
            let expected = entry
                .mask
                .missing_span()
                .map_or(entry.mask.count(), |(lo, _)| lo);
            if r.seg_index != expected {
                self.stats.out_of_sequence += 1;
                if entry.nak_sent != Some(expected) {
                    entry.nak_sent = Some(expected);
                    self.nack(key.from, r, Syndrome::SequenceError, expected);
                }
                return;
            }
        }
        let target = entry.target;
        let result = match (target, r.body) {
            (
                Target::Write { rkey, .. },
                Body::Write {
                    remote_addr, data, ..
                },
            ) => self
                .memory
                .write(rkey, remote_addr, data, Use::RemoteWrite)
                .map(|_| (remote_addr, data.len())),
            (Target::Send { recv, cap }, Body::Send { offset, data, .. }) => {
                match self.bound.get(&recv) {
                    Some(buf) if u64::from(offset) + data.len() as u64 <= cap => buf
                        .at
                        .store(&mut self.memory, u64::from(offset), data, Use::LocalWrite)
                        .map(|_| (0, data.len())),
                    _ => Err(Syndrome::OutOfBounds),
                }
            }
            _ => Err(Syndrome::InvalidRequest),
        };
        let (addr, n) = match result {
            Ok(v) => v,
            Err(s) => {
                let detail = match target {
                    Target::Write { rkey, .. } => rkey.0,
                    Target::Send { .. } => 0,
                };
                self.nack(key.from, r, s, detail);
                self.drop_entry(key);
                return;
            }
        };
        let Some(entry) = self.registry.get_mut(&key) else {
            return;
        };
        entry.mask.set(r.seg_index);
        entry.received += n as u64;
        if let Target::Write { rkey, lo } = entry.target {
            entry.target = Target::Write {
                rkey,
                lo: lo.min(addr),
            };
        }
        let full = entry.mask.is_full();
        // Progress pushes the deadline back; the timer stays where it is
        // filed and, when it fires, is filed again at the new deadline
        // (`expire_registry`): one timer move per registry_timeout, not
        // two timer-set updates per packet.
        entry.deadline = now + self.cfg.registry_timeout;
        // With `completion_acks`, a one-packet operation's completion
        // notice, sent at once, acknowledges its packet: one datagram back
        // instead of two.
        let folded = self.cfg.completion_acks && full && r.seg_count == 1;
        if !folded {
            self.ack(now, key.from, r);
        }
        if full {
            let acks = folded.then_some(self.rx_ce);
            self.complete_receive(now, key, r, acks);
        }
    }

    /// The mask is full: the receiver completes now, one round trip before
    /// the sender could tell it, and notifies the sender.
    /// `acks`: the notice also acknowledges a one-packet operation's packet
    /// (`Some(true)`: it arrived CE-marked).
    pub(super) fn complete_receive(
        &mut self,
        now: Instant,
        key: OpKey,
        r: &Repr<'_>,
        acks: Option<bool>,
    ) {
        let Some(entry) = self.registry.remove(&key) else {
            return;
        };
        self.timers.remove(&(entry.armed, Timer::Registry(key)));
        self.remember(key);
        self.stats.receiver_completions += 1;
        match entry.target {
            Target::Write { lo, .. } => self.events.push_back(Event::WriteReceived {
                from: key.from,
                ep: entry.dst_ep,
                msg_id: key.msg_id,
                addr: lo,
                len: entry.received,
                at: now,
            }),
            Target::Send { recv, .. } => {
                self.bound.remove(&recv);
                self.stats.completed += 1;
                self.events.push_back(Event::Completed {
                    wr: recv,
                    kind: WrKind::Recv,
                    len: entry.received,
                    result: Ok(()),
                    at: now,
                });
            }
        }
        self.flush_sack(key);
        self.push_reply(Reply {
            port: 0,
            to: key.from,
            src_ep: entry.dst_ep,
            dst_ep: key.src_ep,
            op_num: 0,
            msg_id: key.msg_id,
            seg_index: 0,
            seg_count: r.seg_count,
            body: ReplyBody::Completion {
                len: entry.received as u32,
                acks: acks.is_some(),
                ece: acks == Some(true),
            },
        });
    }

    /// Removes an entry that failed; a SEND's receive buffer goes back to
    /// the front of its queue (nothing the host posted is lost).
    pub(super) fn drop_entry(&mut self, key: OpKey) {
        let Some(entry) = self.registry.remove(&key) else {
            return;
        };
        self.timers.remove(&(entry.armed, Timer::Registry(key)));
        if let Target::Send { recv, .. } = entry.target {
            if let Some(buf) = self.bound.remove(&recv) {
                self.recv_queues
                    .entry(entry.dst_ep)
                    .or_default()
                    .push_front(buf);
            }
        }
    }

    pub(super) fn expire_registry(&mut self, now: Instant, key: OpKey) {
        let Some(entry) = self.registry.get_mut(&key) else {
            return;
        };
        if entry.deadline > now {
            // Packets came since the timer was filed: file it again.
            entry.armed = entry.deadline;
            self.timers.insert((entry.deadline, Timer::Registry(key)));
            return;
        }
        self.stats.registry_expired += 1;
        let incarnation = entry.incarnation;
        self.drop_entry(key);
        // The entry held at least the packet that registered it, which
        // was acknowledged: remember that only a restart can complete it.
        if self.lost_registrations.len() >= self.cfg.registry_capacity.max(1) {
            self.lost_registrations.pop_front();
            self.stats.lost_registrations_forgotten += 1;
        }
        self.lost_registrations.push_back((key, incarnation));
        self.lost_registrations_peak = self
            .lost_registrations_peak
            .max(self.lost_registrations.len());
    }

    /// Applies every escaped packet of a newly registered operation.
    pub(super) fn drain_escape(&mut self, now: Instant, key: OpKey) {
        for (id, e) in self.escape.take(&key) {
            self.timers.remove(&(e.deadline, Timer::Escape(id)));
            self.stats.escape_drained += 1;
            if let Ok(r) = Repr::parse_bytes(&e.datagram) {
                if self.registry.contains(&key) {
                    self.apply(now, key, &r);
                } else {
                    // The operation completed or failed meanwhile.
                    self.on_data(now, key.from, &r, Datagram::whole(&e.datagram));
                }
            }
        }
    }

    /// An escaped packet's operation never registered in time (its first
    /// packet is lost, or was refused for a full registry): the packet
    /// itself arrived intact, so its sender hears "not ready" and sends it
    /// again on the busy budget, rather than losing it silently to a
    /// timeout that spends the loss budget.
    pub(super) fn escape_expired(&mut self, e: Escaped) {
        if let Ok(r) = Repr::parse_bytes(&e.datagram) {
            self.nack(e.key.from, &r, Syndrome::ReceiverNotReady, 0);
        }
    }

    pub(super) fn on_read_request(
        &mut self,
        from: NodeAddr,
        r: &Repr<'_>,
        remote_addr: u64,
        rkey: u32,
        length: u32,
    ) {
        let count = div_ceil_nonzero(u64::from(length), self.cfg.mtu_payload);
        if u64::from(count) > self.cfg.max_packets_per_op() {
            self.stats.rx_invalid += 1;
            self.nack(from, r, Syndrome::InvalidRequest, length);
            return;
        }
        if let Err(s) =
            self.memory
                .check(MrKey(rkey), remote_addr, u64::from(length), Use::RemoteRead)
        {
            self.nack(from, r, s, rkey);
            return;
        }
        // A retry may ask for a span only.
        let wanted = if r.flags.contains(Flags::PARTIAL) {
            let end = u64::from(r.seg_index) + u64::from(r.seg_count);
            if r.seg_count == 0 || end > u64::from(count) {
                self.stats.rx_invalid += 1;
                self.nack(from, r, Syndrome::InvalidRequest, r.seg_index);
                return;
            }
            r.seg_index..end as u32
        } else {
            0..count
        };
        // A retried request whose responses still wait in the transmit
        // queue (the requester's timer fired while they queued) gets no
        // second copy of those: copies queued behind copies would keep
        // the requester timing out, and every timeout would add more.
        // (Each segment counted once: a duplicated first request may have
        // queued two copies.)
        let queued: Vec<u32> = if r.flags.contains(Flags::RETRANSMIT) {
            let mut q: Vec<u32> = self
                .replies
                .iter()
                .filter(|q| {
                    q.to == from
                        && q.msg_id == r.msg_id
                        && q.op_num == r.op_num
                        && matches!(q.body, ReplyBody::ReadResponse { .. })
                        && wanted.contains(&q.seg_index)
                })
                .map(|q| q.seg_index)
                .collect();
            q.sort_unstable();
            q.dedup();
            q
        } else {
            Vec::new()
        };
        let fresh = wanted.len() - queued.len();
        if self.replies.len() + fresh > self.cfg.transmit_queue_capacity {
            self.nack(from, r, Syndrome::ReceiverNotReady, 0);
            return;
        }
        self.stats.read_requests_served += 1;
        if r.flags.contains(Flags::PARTIAL) {
            self.stats.read_requests_partial += 1;
        }
        self.stats.read_responses_still_queued += queued.len() as u64;
        for seg_index in wanted {
            if queued.binary_search(&seg_index).is_ok() {
                continue;
            }
            self.push_reply(Reply {
                port: 0,
                to: from,
                src_ep: r.dst_ep,
                dst_ep: r.src_ep,
                op_num: r.op_num,
                msg_id: r.msg_id,
                seg_index,
                seg_count: count,
                body: ReplyBody::ReadResponse {
                    rkey,
                    addr: remote_addr,
                    total_len: length,
                },
            });
        }
    }

    pub(super) fn on_read_response(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        offset: u32,
        data: &[u8],
    ) {
        let Some(op) = self.ops.get_mut(&r.msg_id) else {
            self.stats.stale_read_responses += 1;
            return;
        };
        let (Some(mask), PktState::InFlight(opn)) = (op.read_mask.as_mut(), op.pkts[0]) else {
            self.stats.stale_read_responses += 1;
            return;
        };
        if op.kind != OpKind::ReadRequest || op.dst != from {
            self.stats.stale_read_responses += 1;
            return;
        }
        if r.seg_count != mask.count()
            || r.seg_index >= mask.count()
            || u64::from(offset) + data.len() as u64 > op.len
        {
            self.stats.rx_invalid += 1;
            return;
        }
        if mask.is_set(r.seg_index) {
            self.stats.dup_dropped += 1;
            return;
        }
        let (wr, op_offset) = (op.wr, op.offset);
        let Some(at) = self.requests.get(&wr).map(|q| local::local_of(&q.req)) else {
            return;
        };
        let offset = op_offset + u64::from(offset);
        if let Err(s) = at.store(&mut self.memory, offset, data, Use::LocalWrite) {
            self.fail_request(now, wr, WcError::LocalAccess(s));
            return;
        }
        let Some(op) = self.ops.get_mut(&r.msg_id) else {
            return;
        };
        let Some(mask) = op.read_mask.as_mut() else {
            return;
        };
        let first = mask.missing() == mask.count();
        mask.set(r.seg_index);
        let full = mask.is_full();
        self.flow(from).responded = now;
        // The first response to a request sent once is a round-trip
        // sample that includes the responder's transmit queue: without
        // it a READ's timer knows only the round trips of small packets
        // and fires while its responses still queue.
        if first {
            if let Some(inf) = self.op_table.get(opn).filter(|e| !e.retransmitted) {
                self.rtt_sample(from, now - inf.sent_at);
            }
        }
        let ack = AckSample {
            bytes: data.len() as u64,
            rtt: None,
            ce: self.rx_ce,
            inflight: self.inflight_bytes(from),
        };
        self.flow_acked(now, from, ack);
        // A probe's request answered too soon to be the probe's own: the
        // responses were only late (counted once per probe).
        if self.cfg.tail_probe {
            if let Some(sent_at) = self
                .op_table
                .get(opn)
                .filter(|e| e.probe)
                .map(|e| e.sent_at)
            {
                if self.too_soon_for_copy(now, from, sent_at) {
                    self.stats.spurious_tail_probes += 1;
                }
                if let Some(e) = self.op_table.get_mut(opn) {
                    e.probe = false;
                }
            }
        }
        if full {
            self.ack_packet(now, opn, false, false);
            return;
        }
        // Progress: the READ request's deadline restarts, and its retries
        // start over (the path works; what is missing is a short queue's
        // overflow, asked for again by span).
        let rto = self.rtt_to(from);
        if let Some(inf) = self.op_table.get_mut(opn) {
            inf.retries = 0;
            if let Some(d) = inf.deadline {
                let new = now + rto.backoff(inf.retries);
                inf.deadline = Some(new);
                self.timers.remove(&(d, Timer::Retransmit(opn)));
                self.timers.insert((new, Timer::Retransmit(opn)));
            }
        }
        self.probe_activity(now, r.msg_id, true);
    }
}

/// Where a WRITE's range begins, worked out from any one of its packets:
/// every packet but the last carries as many bytes as this one, and the
/// last ends the range. `None` if the packet's numbers cannot belong to
/// one range (a hostile or damaged packet).
fn write_start(r: &Repr<'_>, remote_addr: u64, data_len: usize, total_len: u32) -> Option<u64> {
    let len = data_len as u64;
    let start = if r.seg_index + 1 == r.seg_count {
        remote_addr
            .checked_add(len)?
            .checked_sub(u64::from(total_len))?
    } else {
        remote_addr.checked_sub(u64::from(r.seg_index).checked_mul(len)?)?
    };
    (start.checked_add(u64::from(total_len))? >= remote_addr.checked_add(len)?).then_some(start)
}
