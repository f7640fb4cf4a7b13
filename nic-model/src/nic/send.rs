//! The send path: cutting requests into segment operations and packets,
//! the DMA OP table and retransmit deadlines (what a loss sends again is
//! `loss.rs`), and completing
//! requests once every packet is acknowledged.

use super::*;

impl Nic {
    /// Writes the next datagram to send into `buf` (replacing its contents)
    /// and says where it goes; `None` when nothing can be sent now. Order:
    /// replies owed to peers, retransmissions, then new data while the OP
    /// table has room.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        loop {
            if let Some(reply) = self.replies.pop_front() {
                if let Some(t) = self.build_reply(now, &reply, buf) {
                    self.stats.control_sent += 1;
                    return Some(t);
                }
                continue;
            }
            if let Some(t) = self.poll_reduce(now, buf) {
                return Some(t);
            }
            if let Some(opn) = self.next_retransmit(now) {
                if let Some(t) = self.send_packet(now, opn, true, buf) {
                    return Some(t);
                }
                continue;
            }
            if self.op_table.is_full() {
                return None;
            }
            if self.gated() {
                // A controlled sender serves its flows in turn, so keep
                // up to the gate's scan depth of operations cut.
                while self.may_cut_more() && !self.command_queue.is_empty() {
                    if !self.cut_next_op() {
                        break;
                    }
                }
            }
            let Some(idx) = self.pick_sendable(now) else {
                // Nothing sendable, or every sendable operation's peer is
                // held back by its controller: cut another (its peer's
                // gate may be open), up to the gate's scan depth.
                if (self.sendable.is_empty() || self.may_cut_more()) && self.cut_next_op() {
                    continue;
                }
                if !self.replies.is_empty() {
                    // The gate asked a receiver for credit (a DEMAND).
                    continue;
                }
                return None;
            };
            let msg_id = self.sendable[idx];
            let Some(op) = self.ops.get_mut(&msg_id) else {
                self.sendable.remove(idx);
                continue;
            };
            if op.next_unsent >= op.seg_count {
                self.sendable.remove(idx);
                continue;
            }
            let seg = op.next_unsent;
            op.next_unsent += 1;
            let dst = op.dst;
            self.rr_last = Some(dst);
            let inflight = Inflight {
                msg_id,
                seg,
                sent_at: now,
                retries: 0,
                rnr_retries: 0,
                retransmitted: false,
                fast: false,
                probe: false,
                bytes: 0,
                entropy: 0,
                deadline: None,
                lost: false,
            };
            let opn = self.op_table.insert(inflight).expect("checked not full");
            if let Some(op) = self.ops.get_mut(&msg_id) {
                op.pkts[seg as usize] = PktState::InFlight(opn);
                debug_assert_eq!(op.first_sent.len(), seg as usize);
                op.first_sent.push(now);
            }
            if let Some(t) = self.send_packet(now, opn, false, buf) {
                return Some(t);
            }
        }
    }

    /// Cuts the next operation from the head of the command queue: a whole
    /// request up to `segment_threshold`, else one `segment_size` segment
    /// (the queue head keeps only its offset and remaining length).
    pub(super) fn cut_next_op(&mut self) -> bool {
        let Some(&wr) = self.command_queue.front() else {
            return false;
        };
        let Some(r) = self.requests.get_mut(&wr) else {
            self.command_queue.pop_front();
            return true;
        };
        let remaining = r.req.len - r.cut;
        let size = if r.req.len > self.cfg.segment_threshold {
            remaining.min(u64::from(self.cfg.segment_size))
        } else {
            remaining
        };
        if r.req.kind == WrKind::Read && self.cfg.read_window != u64::MAX {
            let asked: u64 = self
                .ops
                .values()
                .filter(|op| op.kind == OpKind::ReadRequest)
                .map(|op| op.len)
                .sum();
            if asked > 0 && asked + size > self.cfg.read_window {
                // Wait for responses to drain; a completing READ makes the
                // next poll_transmit try again.
                return false;
            }
        }
        let Some(r) = self.requests.get(&wr) else {
            return true;
        };
        let (req_kind, req_dst) = (r.req.kind, r.req.dst);
        let notice = req_kind == WrKind::WriteNotify && r.cut + size >= r.req.len;
        if req_kind != WrKind::Read && !self.window_room(req_dst, notice) {
            // The receiver remembers only so many of this peer's
            // completions: wait for the oldest open operation to finish.
            return false;
        }
        let Some(r) = self.requests.get_mut(&wr) else {
            return true;
        };
        let offset = r.cut;
        r.cut += size;
        r.open_ops += 1;
        let last_segment = r.cut >= r.req.len;
        if last_segment {
            r.cut_done = true;
            self.command_queue.pop_front();
        }
        let (kind, seg_count, read_mask) = match req_kind {
            WrKind::Read => (
                OpKind::ReadRequest,
                1,
                Some(Mask::new(div_ceil_nonzero(size, self.cfg.mtu_payload))),
            ),
            WrKind::Control => (OpKind::Control, 1, None),
            WrKind::Send => (
                OpKind::Send,
                div_ceil_nonzero(size, self.cfg.mtu_payload),
                None,
            ),
            _ => (
                OpKind::Write,
                div_ceil_nonzero(size, self.cfg.mtu_payload),
                None,
            ),
        };
        self.start_op(Op {
            wr,
            kind,
            dst: req_dst,
            offset,
            len: size,
            seg_count,
            next_unsent: 0,
            pkts: vec![PktState::Unsent; seg_count as usize],
            first_unacked: 0,
            first_sent: Vec::new(),
            acked: 0,
            last_segment,
            read_mask,
            asked_again: Vec::new(),
            trim_rtt: None,
            acked_sent: None,
            probe: Default::default(),
            restarts: 0,
            parked: Vec::new(),
        });
        true
    }

    pub(super) fn start_op(&mut self, op: Op) {
        let msg_id = self.next_msg;
        self.next_msg = self.next_msg.wrapping_add(1).max(1);
        if self.cfg.fast_retransmit && self.cfg.retransmit == RetransmitMode::Selective {
            // Kept for detection across operations (which drops the ended
            // ones on every scan; the front is tidied here too).
            let f = self.flow(op.dst);
            let mut open = std::mem::take(&mut f.open);
            while open.front().is_some_and(|m| !self.ops.contains_key(m)) {
                open.pop_front();
            }
            open.push_back(msg_id);
            self.flow(op.dst).open = open;
        }
        let notice = op.last_segment
            && op.kind == OpKind::Write
            && self
                .requests
                .get(&op.wr)
                .is_some_and(|r| r.req.kind == WrKind::WriteNotify);
        self.window_opened(op.dst, msg_id, op.kind, notice);
        self.ops.insert(msg_id, op);
        self.sendable.push_back(msg_id);
    }

    /// Builds and emits one data packet (WRITE, SEND, READ request or
    /// data-arrived notice) and arms its retransmit deadline.
    pub(super) fn send_packet(
        &mut self,
        now: Instant,
        opn: OpNumber,
        retransmit: bool,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let inf = *self.op_table.get(opn)?;
        let op = self.ops.get(&inf.msg_id)?;
        let r = self.requests.get(&op.wr)?;
        let mtu = u64::from(self.cfg.mtu_payload);
        let seg = inf.seg;
        let mut flags = Flags::ACK_REQ;
        flags.set(Flags::FIRST, seg == 0);
        flags.set(Flags::LAST, seg + 1 == op.seg_count);
        flags.set(Flags::LAST_SEGMENT, op.last_segment);
        flags.set(Flags::RETRANSMIT, retransmit);
        flags.set(Flags::INCARNATION, op.restarts % 2 == 1);
        let seg_offset = u64::from(seg) * mtu;
        let seg_len = op.len.saturating_sub(seg_offset).min(mtu);
        let describe = seg == 0 || self.cfg.registration == RegistrationMode::SelfDescribing;
        let mut touch = None;
        let data: &[u8] = match op.kind {
            OpKind::Write | OpKind::Send => {
                let at = op.offset + seg_offset;
                if self.needs_dma_work() {
                    touch = Some(local::request_touch(&r.req, at, seg_len));
                }
                match local::request_bytes(
                    &self.memory,
                    &r.req,
                    at,
                    seg_len,
                    Use::LocalRead,
                    &mut self.scratch,
                ) {
                    Ok(d) => d,
                    Err(s) => {
                        let wr = op.wr;
                        self.fail_request(now, wr, WcError::LocalAccess(s));
                        return None;
                    }
                }
            }
            _ => &[],
        };
        let body = match op.kind {
            OpKind::Write => Body::Write {
                remote_addr: r.req.remote_addr + op.offset + seg_offset,
                rkey: r.req.rkey,
                total_len: if describe { op.len as u32 } else { 0 },
                data,
            },
            OpKind::Send => Body::Send {
                offset: seg_offset as u32,
                total_len: op.len as u32,
                data,
            },
            OpKind::ReadRequest => Body::ReadRequest {
                remote_addr: r.req.remote_addr + op.offset,
                rkey: r.req.rkey,
                length: op.len as u32,
            },
            OpKind::Notify => {
                flags |= Flags::SOLICITED;
                Body::DataArrived {
                    addr: r.req.remote_addr,
                    length: r.req.len as u32,
                    immediate: r.req.immediate,
                }
            }
            OpKind::Control => match r.req.control {
                Some(Control::Rts(rdv)) => Body::Rts(rdv),
                Some(Control::Cts(rdv)) => Body::Cts(rdv),
                Some(Control::Fin { protocol, tag, seq }) => Body::Fin { protocol, tag, seq },
                None => return None,
            },
        };
        let dst = op.dst;
        let read_len = (op.kind == OpKind::ReadRequest).then_some(op.len);
        let (mut seg_index, mut seg_count) = (seg, op.seg_count);
        if let Some((lo, hi)) = still_missing(op.read_mask.as_ref(), retransmit) {
            flags |= Flags::PARTIAL;
            (seg_index, seg_count) = (lo, hi - lo + 1);
        }
        let (credit_flags, credits, _) = peers::credit_field(
            peers::CreditBook {
                advertised: &self.advertised,
                seen: &self.credits_seen,
                carried: &mut self.credits_carried,
                echo_next: &mut self.echo_next,
            },
            dst,
            peers::Carry::Any,
        );
        flags |= credit_flags;
        let repr = Repr {
            flags,
            src_ep: r.req.src_ep,
            dst_ep: r.req.dst_ep,
            op_num: opn.0,
            msg_id: inf.msg_id,
            seg_index,
            seg_count,
            credits,
            epoch: self.cfg.epoch,
            body,
        };
        let elided = emit(&repr, buf, self.elide_zeros)?;
        let leaving = Leaving {
            opn,
            inf,
            retransmit,
            dst,
            read_len,
            touch,
        };
        Some(self.record_sent(now, leaving, buf.len(), elided))
    }

    /// The packet `l` names has been emitted (`emitted` bytes, `elided` left
    /// out): when it leaves the NIC, its timer, its entry in the OP
    /// table, the flow's bytes in flight, and the transmit.
    #[inline]
    fn record_sent(&mut self, now: Instant, l: Leaving, emitted: usize, elided: u16) -> Transmit {
        let (opn, inf, retransmit, dst) = (l.opn, l.inf, l.retransmit, l.dst);
        let seg = inf.seg;
        let nic_work = l
            .touch
            .map_or(udrma_proto::time::Duration::ZERO, |t| self.dma_work(t));
        // The packet leaves once the NIC has gathered it, and not before
        // the packet handed out ahead of it: its timer, its round-trip
        // sample and its place in overtaken-loss detection count from
        // then, not from the hand-over (the timer rule, docs/engine.md).
        // A gather through an indirect key can take this NIC hundreds of
        // microseconds (docs/testing.md, finding 34).
        let leaves = (now + nic_work).max(self.tx_frontier);
        self.tx_frontier = leaves;
        let rto = self.rtt_to(dst).backoff(inf.retries);
        let deadline = leaves + rto;
        let entropy = self.pick_entropy(now, dst);
        let counted = match l.read_len {
            Some(len) => len.min(u64::from(u32::MAX)) as u32,
            None => (emitted + usize::from(elided)) as u32,
        };
        let back_in_flight = retransmit && inf.lost;
        if !retransmit {
            if let Some(t) = self
                .ops
                .get_mut(&inf.msg_id)
                .and_then(|op| op.first_sent.get_mut(seg as usize))
            {
                *t = leaves;
            }
        }
        if let Some(e) = self.op_table.get_mut(opn) {
            e.lost = false;
            e.sent_at = leaves;
            e.deadline = Some(deadline);
            e.retransmitted |= retransmit;
            e.fast = retransmit && e.fast;
            e.probe = retransmit && e.probe;
            e.entropy = entropy;
            if !retransmit {
                e.bytes = counted;
            }
        }
        if !retransmit {
            self.flow_sent(now, dst, u64::from(counted));
        } else if back_in_flight {
            // A copy of a packet judged lost is sent as new data is: its
            // bytes are in flight again and its controller hears it
            // (window, pacing, receiver credit).
            self.flow_sent(now, dst, u64::from(inf.bytes));
        }
        self.timers.insert((deadline, Timer::Retransmit(opn)));
        self.probe_activity(leaves, inf.msg_id, false);
        if retransmit {
            self.stats.retransmits += 1;
        } else {
            self.stats.data_sent += 1;
        }
        Transmit {
            dst,
            len: emitted,
            elided,
            src_port: self.cfg.src_port.wrapping_add(entropy),
            nic_work,
            leaves_in: leaves - now,
        }
    }

    pub(super) fn rtt_to(&mut self, peer: NodeAddr) -> RttEstimator {
        let c = &self.cfg;
        *self.rtt.get_or_insert_with(peer, || {
            RttEstimator::new(c.rto_initial, c.rto_min, c.rto_max)
        })
    }

    /// An outstanding packet is acknowledged: free its slot, feed the RTT
    /// estimator (not for retransmitted packets: Karn's rule), and finish
    /// its operation when it was the last.
    /// Feeds one round-trip sample toward `peer` to its estimator.
    pub(super) fn rtt_sample(&mut self, peer: NodeAddr, sample: udrma_proto::time::Duration) {
        let c = &self.cfg;
        self.rtt
            .get_or_insert_with(peer, || {
                RttEstimator::new(c.rto_initial, c.rto_min, c.rto_max)
            })
            .on_sample(sample);
        self.stats.rtt_samples += 1;
    }

    pub(super) fn ack_packet(&mut self, now: Instant, opn: OpNumber, sample: bool, ce: bool) {
        let Some(inf) = self.op_table.remove(opn) else {
            return;
        };
        if let Some(d) = inf.deadline {
            // Armed either as a retransmit or as an RNR retry.
            self.timers.remove(&(d, Timer::Retransmit(opn)));
            self.timers.remove(&(d, Timer::RnrRetry(opn)));
        }
        self.stats.acks += 1;
        let Some(op) = self.ops.get_mut(&inf.msg_id) else {
            return;
        };
        let dst = op.dst;
        let kind = op.kind;
        op.pkts[inf.seg as usize] = PktState::Acked;
        while op
            .pkts
            .get(op.first_unacked as usize)
            .is_some_and(|p| matches!(p, PktState::Acked))
        {
            op.first_unacked += 1;
        }
        op.acked += 1;
        let unpark = !op.parked.is_empty();
        let first_word = op.acked == 1;
        let done = op.acked == op.seg_count;
        if self.cfg.rto_restart || self.cfg.timeout_hold {
            let f = self.flow(dst);
            (f.acked, f.acked_sent) = (now, inf.sent_at);
        }
        let mut rtt = None;
        if sample && !inf.retransmitted {
            let r = now - inf.sent_at;
            self.rtt_sample(dst, r);
            rtt = Some(r);
        }
        self.flow_released(dst, inf.in_flight());
        self.grow_window(dst, u64::from(inf.bytes));
        if sample {
            self.entropy_feedback(dst, inf.entropy, !ce);
        }
        if !sample || (inf.fast && self.check_spurious(now, dst, inf.sent_at)) {
            // Judged already (a `DUP` for it later must not count twice),
            // or acknowledged by a COMPLETION, not by its own ACK: a `DUP`
            // for it later may answer a copy sent because that ACK was
            // lost, and says nothing about a late first copy.
            self.flow(dst).take_resent(inf.msg_id, inf.seg);
        } else if inf.fast {
            self.flow(dst).resent_acked(inf.msg_id, inf.seg, now);
        }
        // The copy acknowledged, and when it left. A first copy's is its
        // own. With tail probes a copy sent again (a probe, or any
        // other) also convicts: it is the one acknowledged when the
        // answer comes late enough to be its own, else the first copy.
        // So does the copy that asked about an operation nothing of which
        // was acknowledged (`ask_once`), when it brings the first word.
        let asked = inf.fast && first_word;
        let copy = if !inf.retransmitted {
            Some((inf.sent_at, true))
        } else if (self.cfg.tail_probe || self.cfg.timeout_hold || asked) && sample {
            if self.copy_answered(now, dst, inf.sent_at, inf.probe) {
                Some((inf.sent_at, false))
            } else {
                self.ops
                    .get(&inf.msg_id)
                    .and_then(|op| op.first_sent.get(inf.seg as usize))
                    .map(|t| (*t, false))
            }
        } else {
            None
        };
        if let Some((sent_at, first_copy)) = copy.filter(|_| {
            sample && self.cfg.fast_retransmit && self.cfg.retransmit == RetransmitMode::Selective
        }) {
            if !done {
                self.detect_overtaken(now, dst, inf.msg_id, inf.seg, sent_at, first_copy);
            }
            self.detect_overtaken_across(now, dst, inf.msg_id, sent_at);
        }
        if kind != OpKind::ReadRequest {
            // (A READ's controller hears each response as it arrives.)
            let bytes = u64::from(inf.bytes);
            let inflight = self.inflight_bytes(dst);
            let ack = AckSample {
                bytes,
                rtt,
                ce,
                inflight,
            };
            self.flow_acked(now, dst, ack);
        }
        if done {
            self.op_done(now, inf.msg_id);
        } else {
            self.probe_activity(now, inf.msg_id, true);
            if unpark {
                self.unpark(inf.msg_id);
            }
        }
    }

    pub(super) fn op_done(&mut self, now: Instant, msg_id: u32) {
        let Some(op) = self.ops.remove(&msg_id) else {
            return;
        };
        self.probe_disarm(msg_id, op.probe);
        let Some(r) = self.requests.get_mut(&op.wr) else {
            return;
        };
        r.open_ops -= 1;
        if op.kind == OpKind::Notify {
            self.complete_request(now, op.wr, Ok(()));
            return;
        }
        if !r.cut_done || r.open_ops > 0 {
            return;
        }
        if r.req.kind == WrKind::WriteNotify {
            // Every byte is acknowledged: tell the receiver where it is.
            r.open_ops = 1;
            self.start_op(Op {
                wr: op.wr,
                kind: OpKind::Notify,
                dst: op.dst,
                offset: 0,
                len: 0,
                seg_count: 1,
                next_unsent: 0,
                pkts: vec![PktState::Unsent],
                first_unacked: 0,
                first_sent: Vec::new(),
                acked: 0,
                last_segment: true,
                read_mask: None,
                asked_again: Vec::new(),
                trim_rtt: None,
                acked_sent: None,
                probe: Default::default(),
                restarts: 0,
                parked: Vec::new(),
            });
        } else {
            self.complete_request(now, op.wr, Ok(()));
        }
    }

    pub(super) fn complete_request(&mut self, now: Instant, wr: WrId, result: Result<(), WcError>) {
        let Some(r) = self.requests.remove(&wr) else {
            return;
        };
        if r.in_ring {
            self.ring_slot_freed(now);
        }
        if result.is_ok() {
            self.stats.completed += 1;
        } else {
            self.stats.failed += 1;
        }
        self.events.push_back(Event::Completed {
            wr,
            kind: r.req.kind,
            len: r.req.len,
            result,
            at: now,
        });
    }

    /// Completes `wr` in error and frees every piece of state it holds.
    pub(super) fn fail_request(&mut self, now: Instant, wr: WrId, err: WcError) {
        let Some(r) = self.requests.get(&wr) else {
            return;
        };
        let owes_notice = r.req.kind == WrKind::WriteNotify
            && r.cut_done
            && !self
                .ops
                .values()
                .any(|op| op.wr == wr && op.kind == OpKind::Notify);
        if owes_notice {
            self.window_notice_dropped(r.req.dst);
        }
        let msgs: Vec<u32> = self
            .ops
            .iter()
            .filter(|(_, op)| op.wr == wr)
            .map(|(m, _)| *m)
            .collect();
        for m in msgs {
            if let Some(op) = self.ops.remove(&m) {
                self.probe_disarm(m, op.probe);
                for p in op.pkts {
                    if let PktState::InFlight(opn) = p {
                        if let Some(inf) = self.op_table.remove(opn) {
                            self.flow_released(op.dst, inf.in_flight());
                            if let Some(d) = inf.deadline {
                                self.timers.remove(&(d, Timer::Retransmit(opn)));
                                self.timers.remove(&(d, Timer::RnrRetry(opn)));
                            }
                        }
                    }
                }
            }
        }
        self.command_queue.retain(|w| *w != wr);
        self.overflow.retain(|w| *w != wr);
        self.complete_request(now, wr, Err(err));
    }
}

/// Writes `repr` into `buf`, leaving an all-zero payload out when `elide`
/// (the backend asked for that); returns the zero bytes left out.
pub(super) fn emit(repr: &Repr<'_>, buf: &mut Vec<u8>, elide: bool) -> Option<u16> {
    if elide {
        repr.emit_elided_vec(buf).ok().map(|(_, z)| z)
    } else {
        repr.emit_vec(buf).ok().map(|_| 0)
    }
}

/// A retried READ whose responses arrived in part asks only for the span
/// still missing (first and last segment): re-asking for all of it could
/// overflow a short queue the same way every time.
fn still_missing(mask: Option<&Mask>, retransmit: bool) -> Option<(u32, u32)> {
    mask.filter(|m| retransmit && m.missing() < m.count())
        .and_then(|m| m.missing_span())
}

/// A packet just emitted, as `Nic::record_sent` books it.
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Leaving {
    opn: OpNumber,
    inf: Inflight,
    retransmit: bool,
    dst: NodeAddr,
    /// A READ request's length (its bytes in flight are the response's).
    read_len: Option<u64>,
    touch: Option<local::Touch>,
}
