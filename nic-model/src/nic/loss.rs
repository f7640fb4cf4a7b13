//! Loss recovery on the sender: what a timeout, an overtaking
//! acknowledgement, a go-back-N sequence error or a receiver-not-ready
//! refusal sends again, and which budget each spends; and, when a
//! timeline asks, the record of when each retransmit timer expired.

use super::*;

/// Most retransmit timeouts one NIC records for a timeline
/// ([`Nic::record_timeouts`]); later ones are counted in
/// `Stats::timeouts` only.
pub const TIMEOUT_LOG_CAP: usize = 1 << 16;

impl Nic {
    /// From now on, records when each retransmit timer expires (at most
    /// [`TIMEOUT_LOG_CAP`]), for [`Nic::recorded_timeouts`]. Nothing the
    /// engine does changes.
    pub fn record_timeouts(&mut self) {
        self.timeout_log.get_or_insert_with(Vec::new);
    }

    /// The retransmit timeouts recorded since [`Nic::record_timeouts`]:
    /// when, and the message's id, in the order they fired.
    pub fn recorded_timeouts(&self) -> &[(Instant, u32)] {
        self.timeout_log.as_deref().unwrap_or(&[])
    }

    pub(super) fn on_retransmit_timeout(&mut self, now: Instant, opn: OpNumber) {
        if self.restart_timer(now, opn)
            || self.probe_defers_timer(now, opn)
            || self.timeout_copy_holds(now, opn)
        {
            return;
        }
        let Some(inf) = self.op_table.get_mut(opn) else {
            return;
        };
        inf.deadline = None;
        self.stats.timeouts += 1;
        let (msg_id, bytes, entropy) = (inf.msg_id, inf.bytes, inf.entropy);
        if let Some(log) = &mut self.timeout_log {
            if log.len() < TIMEOUT_LOG_CAP {
                log.push((now, msg_id));
            }
        }
        if self.first_refused(msg_id, opn) {
            // The receiver refused the operation's first packet (not
            // ready): this one is parked in its escape channel or refused
            // too, not lost. It goes again after `rnr_delay`, on the busy
            // budget.
            if self.count_rnr_retry(now, opn) {
                self.rnr_wait(now, opn);
            }
            return;
        }
        if let Some(dst) = self.ops.get(&msg_id).map(|op| op.dst) {
            self.flow_lost(now, dst, bytes, LossCause::Timeout);
            self.entropy_feedback(dst, entropy, false);
            self.entropy_freeze(now, dst);
        }
        if !self.count_retry(now, opn) {
            return;
        }
        self.cut_window_from(now, opn, CutCause::Timeout);
        self.note_timeout_copy(now, opn, msg_id);
        self.queue_retransmit(opn);
        if self.cfg.retransmit == RetransmitMode::GoBackN {
            self.go_back_after(opn);
        }
    }

    /// With `rto_restart`: if the last packet `opn`'s peer acknowledged
    /// left no later than `opn` (the queue ahead of it is draining), its
    /// timer counts from that acknowledgement instead, and is filed again
    /// there when that is later than now (returns whether it was). An
    /// acknowledgement of a packet that left after `opn` restarts nothing:
    /// `opn` was overtaken, which is how a loss looks.
    fn restart_timer(&mut self, now: Instant, opn: OpNumber) -> bool {
        if !self.cfg.rto_restart {
            return false;
        }
        let Some(inf) = self.op_table.get(opn).copied() else {
            return false;
        };
        let Some(dst) = self.ops.get(&inf.msg_id).map(|op| op.dst) else {
            return false;
        };
        let Some((acked, acked_sent)) = self.flows.get(&dst).map(|f| (f.acked, f.acked_sent))
        else {
            return false;
        };
        let deadline = acked + self.rtt_to(dst).backoff(inf.retries);
        if acked <= inf.sent_at || acked_sent > inf.sent_at || deadline <= now {
            return false;
        }
        if let Some(e) = self.op_table.get_mut(opn) {
            e.deadline = Some(deadline);
        }
        self.timers.insert((deadline, Timer::Retransmit(opn)));
        self.stats.rto_restarts += 1;
        true
    }

    /// Whether `msg_id`'s first packet, other than `opn`, is still out and
    /// was NACKed receiver-not-ready: the receiver has not registered the
    /// operation, so its other packets wait rather than get lost.
    pub(super) fn first_refused(&self, msg_id: u32, opn: OpNumber) -> bool {
        let Some(PktState::InFlight(first)) = self.ops.get(&msg_id).and_then(|op| op.pkts.first())
        else {
            return false;
        };
        *first != opn && self.op_table.get(*first).is_some_and(|e| e.rnr_retries > 0)
    }

    /// Go-back-N: every packet of `opn`'s operation after it that is out
    /// is sent again, in order, after it; one already waiting to go again
    /// moves behind it, so the queue keeps the operation's order (with a
    /// loss window, later packets still waiting from an earlier rewind
    /// went first, the receiver discarded them, and with no loss budget
    /// left the WRITE failed).
    pub(super) fn go_back_after(&mut self, opn: OpNumber) {
        let Some(inf) = self.op_table.get(opn).copied() else {
            return;
        };
        let later: Vec<OpNumber> = self
            .ops
            .get(&inf.msg_id)
            .map(|op| {
                op.pkts[inf.seg as usize + 1..]
                    .iter()
                    .filter_map(|p| match p {
                        PktState::InFlight(o) => Some(*o),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        for o in later {
            // (One already queued has no deadline: not queued twice.)
            if self.op_table.get(o).is_some_and(|e| e.deadline.is_some()) {
                self.queue_retransmit(o);
            } else if let Some(i) = self.retransmit_queue.iter().position(|q| *q == o) {
                // Queued again, and judged now if its flow has since got a
                // loss window (else it would pass the gate, its bytes
                // still counted, and hold the expected copy back).
                self.retransmit_queue.remove(i);
                self.queue_retransmit(o);
            }
        }
    }

    /// A response to this NIC's READ `msg_id` from `from` (segment `seg`)
    /// arrived trimmed: the responder answers and the path works, but a
    /// queue on it overflowed. As a trimmed WRITE draws a TRIMMED NACK and
    /// goes again at once, the segment is asked for again now, alone (a
    /// PARTIAL request for one segment), on the busy budget
    /// (`max_rnr_retries`); the request's timer starts over without
    /// backing off, and the controller toward the responder hears a trim.
    /// Before, the segment was left to the request's timer and each trim
    /// spent a try of the loss budget: READs on a trimming fabric that
    /// dropped nothing failed with `RetryExceeded`. A request already
    /// waiting to go again (it asks for the whole missing span) sends
    /// nothing more, nor does a trimmed copy that came too soon to answer
    /// the segment's latest ask (`too_soon_for_copy`): with duplicating
    /// links every copy of a trimmed answer asked again, and each ask's
    /// answer was copied and trimmed in turn.
    pub(super) fn read_response_trimmed(
        &mut self,
        now: Instant,
        from: NodeAddr,
        msg_id: u32,
        seg: u32,
    ) {
        let Some(op) = self.ops.get(&msg_id) else {
            self.stats.stale_read_responses += 1;
            return;
        };
        let (Some(mask), Some(&PktState::InFlight(opn))) = (op.read_mask.as_ref(), op.pkts.first())
        else {
            self.stats.stale_read_responses += 1;
            return;
        };
        if op.kind != OpKind::ReadRequest
            || op.dst != from
            || seg >= mask.count()
            || mask.is_set(seg)
        {
            self.stats.stale_read_responses += 1;
            return;
        }
        let (wr, offset, len) = (op.wr, op.offset, op.len);
        let asked = op
            .asked_again
            .iter()
            .find(|(s, _, _)| *s == seg)
            .map(|(_, t, _)| *t);
        let Some(inf) = self.op_table.get(opn).copied() else {
            return;
        };
        // The latest ask for this segment: the request's latest copy, or
        // this segment asked again alone.
        let latest = asked.map_or(inf.sent_at, |t| t.max(inf.sent_at));
        // The first trim heard of this READ is a round trip of its latest
        // ask, or less (it may answer an older copy): a trim cuts the
        // payload, not the path. Kept for this READ alone, it stands in
        // for the path's when no whole response or ACK has been sampled
        // yet (finding 29: a READ whose every first response is trimmed;
        // finding 31: one whose request went again after a link failure,
        // so that no trim was the first word of a request sent once). A
        // bound from below errs toward asking again.
        let trim_rtt = op.trim_rtt.unwrap_or(now - latest);
        // A trimmed copy too soon to answer the latest ask answers an
        // older one: a duplicate's, or one the latest ask repeats. It is
        // not asked for again, so copies do not multiply asks.
        let unsampled = self.rtt_to(from).srtt().is_none();
        if let Some(op) = self.ops.get_mut(&msg_id) {
            op.trim_rtt = Some(trim_rtt);
        }
        if self.too_soon_for_copy(now, from, latest)
            || (unsampled && now - latest < udrma_proto::time::Duration(trim_rtt.0 / 2))
        {
            self.stats.read_trims_of_older_asks += 1;
            return;
        }
        let Some(deadline) = inf
            .deadline
            .filter(|d| !self.timers.contains(&(*d, Timer::RnrRetry(opn))))
        else {
            return;
        };
        let Some(req) = self.requests.get(&wr).map(|q| &q.req) else {
            return;
        };
        let (src_ep, dst_ep, addr, rkey) =
            (req.src_ep, req.dst_ep, req.remote_addr + offset, req.rkey);
        self.stats.read_responses_trimmed += 1;
        self.flow(from).responded = now;
        let mtu = u64::from(self.cfg.mtu_payload);
        let seg_bytes = len.saturating_sub(u64::from(seg) * mtu).min(mtu);
        self.flow_lost(now, from, seg_bytes as u32, LossCause::Trimmed);
        // The busy budget is the segment's own, as each packet of a WRITE
        // has its own: the READ request's one budget, shared by every
        // segment of a long READ, ran out on a trimming fabric where each
        // segment was trimmed a few times (1,000 trims over 137 segments
        // of a 70 kB RGET: docs/testing.md, finding 36).
        let asks = self.ops.get_mut(&msg_id).map_or(0, |op| {
            match op.asked_again.iter_mut().find(|(s, _, _)| *s == seg) {
                Some(e) => {
                    e.1 = now;
                    e.2 += 1;
                    e.2
                }
                None => {
                    op.asked_again.push((seg, now, 1));
                    1
                }
            }
        });
        if asks > self.cfg.max_rnr_retries {
            self.stats.retries_exhausted += 1;
            self.fail_request(now, wr, WcError::RetryExceeded);
            return;
        }
        let again = now + self.rtt_to(from).backoff(inf.retries);
        self.timers.remove(&(deadline, Timer::Retransmit(opn)));
        self.timers.insert((again, Timer::Retransmit(opn)));
        if let Some(e) = self.op_table.get_mut(opn) {
            e.deadline = Some(again);
        }
        self.push_reply(Reply {
            port: 0,
            to: from,
            src_ep,
            dst_ep,
            op_num: opn.0,
            msg_id,
            seg_index: seg,
            seg_count: 1,
            body: ReplyBody::ReadAgain {
                rkey,
                addr,
                length: len as u32,
            },
        });
    }

    /// Counts one retry of `opn`; fails its request and returns `false`
    /// when `max_retries` is exhausted.
    pub(super) fn count_retry(&mut self, now: Instant, opn: OpNumber) -> bool {
        self.count(now, opn, false)
    }

    /// Counts one receiver-not-ready retry of `opn` (apart from loss
    /// retries, as InfiniBand's RNR retry count is: a busy receiver is not
    /// a lossy path, and does not back off the RTO); fails its request
    /// when `max_rnr_retries` is exhausted.
    pub(super) fn count_rnr_retry(&mut self, now: Instant, opn: OpNumber) -> bool {
        self.count(now, opn, true)
    }

    pub(super) fn count(&mut self, now: Instant, opn: OpNumber, rnr: bool) -> bool {
        let Some(inf) = self.op_table.get_mut(opn) else {
            return false;
        };
        let (n, max) = if rnr {
            inf.rnr_retries += 1;
            (inf.rnr_retries, self.cfg.max_rnr_retries)
        } else {
            inf.retries += 1;
            (inf.retries, self.cfg.max_retries)
        };
        if n <= max {
            return true;
        }
        let msg_id = inf.msg_id;
        if !rnr {
            let sent_at = inf.sent_at;
            if let Some(op) = self.ops.get(&msg_id) {
                // A READ whose responder has answered other READs since
                // this one was asked is not on a dead path: its responses
                // were lost in a queue that this requester's own READs
                // overflow (without a controller nothing paces them). It
                // keeps its longest backoff and goes again; the budget is
                // for a peer or path that answers nothing.
                let (kind, dst) = (op.kind, op.dst);
                if kind == OpKind::ReadRequest
                    && self.flows.get(&dst).is_some_and(|f| f.responded > sent_at)
                {
                    self.stats.read_retries_congested += 1;
                    if let Some(inf) = self.op_table.get_mut(opn) {
                        inf.retries = max;
                    }
                    return true;
                }
            }
        }
        if let Some(wr) = self.ops.get(&msg_id).map(|op| op.wr) {
            self.stats.retries_exhausted += 1;
            self.fail_request(now, wr, WcError::RetryExceeded);
        }
        false
    }

    /// Queues `opn` to go again. A packet sent again on loss detection is
    /// remembered once its copy is queued (`detect_overtaken`); any later
    /// copy (the timer's, a probe's) makes it forgotten, since a duplicate
    /// reported after that may be the later copy's and say nothing about
    /// the first one.
    ///
    /// Under a controller the packet leaves the bytes in flight toward its
    /// peer until its copy is sent (`Inflight::lost`): the copy goes
    /// through the send gate, as new data does (`next_retransmit`).
    pub(super) fn queue_retransmit(&mut self, opn: OpNumber) {
        let dst = self
            .op_table
            .get(opn)
            .and_then(|inf| self.ops.get(&inf.msg_id))
            .map(|op| op.dst);
        let judged = self.cc_active() || dst.is_some_and(|d| self.loss_windowed(d));
        if let Some(inf) = self.op_table.get_mut(opn) {
            inf.fast = false;
            if let Some(d) = inf.deadline.take() {
                self.timers.remove(&(d, Timer::Retransmit(opn)));
                self.timers.remove(&(d, Timer::RnrRetry(opn)));
            }
            let released = if judged && !inf.lost {
                inf.lost = true;
                inf.bytes
            } else {
                0
            };
            self.retransmit_queue.push_back(opn);
            let (msg_id, seg) = (inf.msg_id, inf.seg);
            if let Some(dst) = dst {
                self.flow_released(dst, released);
                self.flow(dst).take_resent(msg_id, seg);
            }
        }
    }

    /// Selective-ACK loss detection (after RACK, RFC 8985): packet `seg`
    /// of `msg_id`, first sent at `sent_at`, came back; every packet of the
    /// operation below it that left more than a reordering window before
    /// it and is still unacknowledged is taken as lost and sent again now.
    ///
    /// The window is this NIC's own SACK coalescing delay (packets that
    /// arrive together may be split between a marked and an unmarked
    /// SACK) plus the farthest reordering seen toward the peer: how long
    /// before the latest-sent packet acknowledged a packet acknowledged
    /// after it had left, and doubled after each spurious fast retransmit
    /// (`check_spurious`), as RACK widens its window on a DSACK. With one
    /// path and no reordering fault the window stays at the SACK delay.
    /// A copy waiting to go again (or waiting out a receiver-not-ready) is
    /// skipped, and a retransmitted copy counts from when it left, so each
    /// copy is declared lost at most once; the retry budget is left to
    /// the timer. `first_copy`: the acknowledged copy is the packet's
    /// first. A copy sent again (with `tail_probe`) says what was lost
    /// before it, but nothing about reordering: learning from it would
    /// widen the window by about the probe timeout. (With `timeout_hold`,
    /// "before it" is by send time, so the operation's packets above it
    /// are judged too.)
    pub(super) fn detect_overtaken(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        msg_id: u32,
        seg: u32,
        sent_at: Instant,
        first_copy: bool,
    ) {
        let coalesce = self.sack_coalesce();
        let Some(op) = self.ops.get_mut(&msg_id) else {
            return;
        };
        let f = if first_copy {
            let latest = op.acked_sent.unwrap_or(sent_at);
            op.acked_sent = Some(latest.max(sent_at));
            let f = self.flow(dst);
            if sent_at + coalesce < latest {
                f.learn_reorder(latest - sent_at);
            }
            f
        } else {
            self.flow(dst)
        };
        let window = coalesce + f.reorder;
        let Some(op) = self.ops.get(&msg_id) else {
            return;
        };
        let from = (op.first_unacked as usize).min(seg as usize);
        // With `timeout_hold` a copy's answer judges the packets above it
        // too, by when they left, as it judges other operations': the
        // packets a silent peer's timers held wait for this answer.
        let upto = if !first_copy && self.cfg.timeout_hold {
            op.first_sent.len()
        } else {
            (seg as usize).min(op.first_sent.len())
        };
        // Beyond the first segment first sent within `window` of this one,
        // no copy is old enough (copies are never older than the first).
        let to = from + op.first_sent[from..upto].partition_point(|t| *t + window < sent_at);
        let lost = self.overtaken(op, from..to, window, sent_at);
        self.resend_overtaken(now, dst, lost);
    }

    /// Overtaken-loss detection across operations: a packet to `dst` that
    /// left at `sent_at` (of operation `msg_id`) was acknowledged, so every
    /// unacknowledged packet of the other operations open toward `dst`
    /// that left more than the reordering window before it is lost too,
    /// as RACK judges by send time over a whole connection. Without this,
    /// an operation all of whose packets are lost together (a dropped GSO
    /// send; a burst) has nothing of its own to overtake them, and waits
    /// for its timer. Not READ requests (their responses, not an ACK,
    /// answer them, and may take long), and of an operation nothing of
    /// which is acknowledged yet, whose receiver registers it by its first
    /// packet, only that first packet: the rest may be parked in the
    /// receiver's escape channel, unacknowledged until the first arrives.
    pub(super) fn detect_overtaken_across(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        msg_id: u32,
        sent_at: Instant,
    ) {
        let coalesce = self.sack_coalesce();
        let first_only = self.cfg.registration == RegistrationMode::FirstOnly;
        let f = self.flow(dst);
        let window = coalesce + f.reorder;
        let mut open = std::mem::take(&mut f.open);
        open.retain(|m| self.ops.contains_key(m));
        let mut lost = Vec::new();
        for m in open.iter().filter(|m| **m != msg_id) {
            let Some(op) = self.ops.get(m) else {
                continue;
            };
            if op.kind == OpKind::ReadRequest {
                continue;
            }
            let from = op.first_unacked as usize;
            let end = if first_only && op.acked == 0 {
                op.first_sent.len().min(1)
            } else {
                op.first_sent.len()
            };
            let to =
                from + op.first_sent[from.min(end)..end].partition_point(|t| *t + window < sent_at);
            let mut l = self.overtaken(op, from..to, window, sent_at);
            if op.acked == 0 && !first_only && !l.is_empty() {
                self.ask_once(op, &mut l);
            }
            lost.extend(l);
        }
        self.flow(dst).open = open;
        self.resend_overtaken(now, dst, lost);
    }

    /// Of an operation nothing of which is acknowledged, `lost` (its
    /// packets found overtaken) keeps only the newest: the operation may
    /// have arrived whole and lost only its acknowledgements (a SACK
    /// dropped, which no later one of its own repairs). One copy asks:
    /// the receiver answers a duplicate with a SACK of every packet it
    /// holds below it, and a packet really lost is found once the copy's
    /// answer comes (by the copy's own acknowledgement, or by the
    /// operation's, then partly acknowledged, packets being overtaken).
    /// While a copy of one of its packets is out, only copies left more
    /// than a window before stay (that copy lost too).
    fn ask_once(&self, op: &Op, lost: &mut Vec<OpNumber>) {
        let asking = op.pkts.iter().any(|p| match p {
            PktState::InFlight(o) => self
                .op_table
                .get(*o)
                .is_some_and(|e| e.retransmitted || e.deadline.is_none()),
            _ => false,
        });
        if asking {
            lost.retain(|o| self.op_table.get(*o).is_some_and(|e| e.retransmitted));
        } else if let Some(&newest) = lost.last() {
            *lost = vec![newest];
        }
    }

    /// How long this NIC holds an acknowledgement to coalesce it into a
    /// SACK (zero with per-packet ACKs): packets that arrive together may
    /// be split between two SACKs, so loss detection waits this much more.
    pub(super) fn sack_coalesce(&self) -> udrma_proto::time::Duration {
        match self.cfg.ack_mode {
            AckMode::Selective { delay } => delay,
            AckMode::PerPacket => udrma_proto::time::Duration::ZERO,
        }
    }

    /// The packets of `op` in segments `segs` still out on their first or
    /// a later copy that left more than `window` before `sent_at`: not one
    /// waiting to go again, nor one waiting out a receiver-not-ready.
    fn overtaken(
        &self,
        op: &Op,
        segs: std::ops::Range<usize>,
        window: udrma_proto::time::Duration,
        sent_at: Instant,
    ) -> Vec<OpNumber> {
        op.pkts[segs]
            .iter()
            .filter_map(|p| match p {
                PktState::InFlight(o) => Some(*o),
                _ => None,
            })
            .filter(|o| {
                self.op_table.get(*o).is_some_and(|e| {
                    e.deadline.is_some_and(|d| {
                        // (Not one waiting out a receiver-not-ready.)
                        !self.timers.contains(&(d, Timer::RnrRetry(*o)))
                    }) && e.sent_at + window < sent_at
                })
            })
            .collect()
    }

    /// Sends each of `lost` (packets to `dst` found overtaken) again now,
    /// remembered as sent on loss detection.
    fn resend_overtaken(&mut self, now: Instant, dst: NodeAddr, lost: Vec<OpNumber>) {
        if !lost.is_empty() {
            self.flow(dst).clean_recovery();
        }
        for opn in lost {
            let Some(inf) = self.op_table.get(opn).copied() else {
                continue;
            };
            self.stats.fast_retransmits += 1;
            self.flow_lost(now, dst, inf.bytes, LossCause::Overtaken);
            self.entropy_feedback(dst, inf.entropy, false);
            self.queue_retransmit(opn);
            self.flow(dst).note_resent(inf.msg_id, inf.seg, inf.sent_at);
            if let Some(e) = self.op_table.get_mut(opn) {
                e.fast = true;
            }
        }
    }

    /// A packet sent again by `detect_overtaken` (the copy left at
    /// `resent_at`) is acknowledged too soon to be the copy's answer
    /// (`too_soon_for_copy`): the acknowledgement is the first copy's,
    /// which was late, not lost.
    /// The reordering window toward the peer doubles, once for all the
    /// copies judged at one instant (to at least a quarter RTT and at most
    /// the RTO, beyond which the timer is sooner; `widen_reorder`).
    /// Returns whether it was.
    pub(super) fn check_spurious(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        resent_at: Instant,
    ) -> bool {
        if !self.cfg.spurious_by_timing || !self.too_soon_for_copy(now, dst, resent_at) {
            return false;
        }
        self.widen_reorder(now, dst)
    }

    /// The receiver reports (flag `DUP`) that packet `seg` of `msg_id`
    /// arrived twice. If this NIC had sent it again on loss detection, that
    /// copy was not needed: the first one was late, not lost. This is how
    /// the sender learns it when the copy overtook the late first copy and
    /// was acknowledged first, where `check_spurious`'s timing cannot tell
    /// (after RACK's use of DSACK, RFC 8985 §6.2).
    ///
    /// The report also says how late that first copy was: it arrived about
    /// half an srtt before the report, so about `now - left - srtt` after
    /// a packet sent with it would have. The window takes that measure (at
    /// least a quarter RTT, at most the RTO) rather than doubling: one
    /// late packet teaches the reordering it saw, and no more.
    ///
    /// `answered` (flag `RETX` on the report): the duplicate was the copy,
    /// and the first copy's arrival had been acknowledged before it came.
    /// If that acknowledgement reached this NIC only with the report (the
    /// SACK the receiver sends just before it), it was lost (a SACK that
    /// no later one of its operation repaired), and the copy was needed to
    /// learn of it, as when the report is the first word of the packet
    /// (`on_ack`): nothing was late. Learning from it would widen the
    /// window by the time it took to find the loss, and every such loss
    /// would widen it further. If it came at least half a SACK delay
    /// before the report, the first copy was late and arrived before its
    /// copy (after the sender had judged it lost): that teaches as above.
    pub(super) fn on_duplicate(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        msg_id: u32,
        seg: u32,
        answered: bool,
    ) {
        let Some(r) = self.flow(dst).take_resent(msg_id, seg) else {
            return;
        };
        let with_report = r
            .acked
            .is_none_or(|t| t + udrma_proto::time::Duration(self.sack_coalesce().0 / 2) > now);
        if answered && with_report {
            return;
        }
        let Some(srtt) = self.rtt_to(dst).srtt() else {
            return;
        };
        self.stats.spurious_fast_retransmits += 1;
        let rto = self.rtt_to(dst).rto();
        let late = (now - r.prev_sent).0.saturating_sub(srtt.0);
        let f = self.flow(dst);
        let seen = late.max(srtt.0 / 4).min(rto.0);
        f.learn_reorder(udrma_proto::time::Duration(seen));
    }

    /// A fast retransmission toward `dst` was spurious: counts it, and the
    /// reordering window doubles (to at least a quarter RTT and at most the
    /// RTO, beyond which the timer is sooner), once for all the copies
    /// judged at one instant: acknowledgements read together (a batch from
    /// a socket) answer copies sent together, and are one sign of
    /// reordering, not one per copy. Needs an RTT sample (returns `false`
    /// without one).
    fn widen_reorder(&mut self, now: Instant, dst: NodeAddr) -> bool {
        let Some(srtt) = self.rtt_to(dst).srtt() else {
            return false;
        };
        self.stats.spurious_fast_retransmits += 1;
        let rto = self.rtt_to(dst).rto();
        let f = self.flow(dst);
        if f.widened == Some(now) {
            return true;
        }
        f.widened = Some(now);
        let wider = f.reorder.0.saturating_mul(2).max(srtt.0 / 4).min(rto.0);
        f.learn_reorder(udrma_proto::time::Duration(wider));
        true
    }

    /// An acknowledgement at `now` of a packet whose latest copy left at
    /// `sent_at` came too soon to be that copy's: sooner than half a
    /// smoothed RTT toward `dst` and sooner than the fastest round trip
    /// ever sampled (never before any sample), so it answers an earlier
    /// copy. Half the srtt alone misjudges a copy sent into a queue that
    /// then drains: its own answer comes quickly next to an srtt swollen
    /// by the queue, but not sooner than the path's fastest round trip.
    /// Without timestamps on the wire, timing is all there is.
    pub(super) fn too_soon_for_copy(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        sent_at: Instant,
    ) -> bool {
        let rtt = self.rtt_to(dst);
        let (Some(srtt), Some(fastest)) = (rtt.srtt(), rtt.fastest()) else {
            return false;
        };
        now - sent_at < udrma_proto::time::Duration((srtt.0 / 2).min(fastest.0))
    }

    /// `opn` goes again after `rnr_delay` (at once if zero).
    pub(super) fn rnr_wait(&mut self, now: Instant, opn: OpNumber) {
        let delay = self.cfg.rnr_delay;
        let Some(inf) = self.op_table.get_mut(opn) else {
            return;
        };
        if let Some(d) = inf.deadline.take() {
            self.timers.remove(&(d, Timer::Retransmit(opn)));
        }
        if delay.0 == 0 {
            self.retransmit_queue.push_back(opn);
        } else {
            inf.deadline = Some(now + delay);
            self.timers.insert((now + delay, Timer::RnrRetry(opn)));
        }
    }

    /// Go-back-N: the receiver discarded `opn` for being ahead of segment
    /// `expected` of its operation. That segment and every later one out
    /// go again now, unless its latest copy left after `opn`'s (a go-back
    /// already under way) or it waits to go already. The controller hears
    /// it as a loss, but the receiver answered: it is congestion (a packet
    /// trimmed or dropped in a queue ahead of it, or overtaken), not a
    /// failed try, so it spends the busy budget (`max_rnr_retries`), as a
    /// trim does, not `max_retries`, and does not back off the RTO. Only a
    /// timeout spends the loss budget: before, a go-back-N transfer on a
    /// trimming fabric that lost nothing failed with `RetryExceeded`.
    pub(super) fn on_sequence_error(&mut self, now: Instant, opn: OpNumber, expected: u32) {
        let Some(nacked) = self.op_table.get(opn).copied() else {
            return;
        };
        let Some(op) = self.ops.get(&nacked.msg_id) else {
            return;
        };
        let dst = op.dst;
        if expected == 0 && op.pkts.first() == Some(&PktState::Acked) {
            // It asks for the first packet, which it acknowledged: it
            // dropped the operation (the first packet registered it, then
            // the registry let it go), and only the whole operation again
            // registers it. A receiver that holds the registration has
            // seen packet 0 and asks for a later one; such a NACK for a
            // packet acknowledged since is merely stale. With
            // self-describing registration a later packet registered it
            // again, but go-back-N still waits for packet 0.
            self.restart_lost_registration(now, opn, false);
            return;
        }
        let Some(PktState::InFlight(first)) = op.pkts.get(expected as usize).copied() else {
            return;
        };
        let Some(inf) = self.op_table.get(first).copied() else {
            return;
        };
        if inf.deadline.is_none() || inf.sent_at > nacked.sent_at {
            return;
        }
        self.flow_lost(now, dst, inf.bytes, LossCause::Nack);
        if !self.count_rnr_retry(now, first) {
            return;
        }
        self.cut_window(now, dst, inf.sent_at, CutCause::SequenceError);
        self.queue_retransmit(first);
        self.go_back_after(first);
    }
}
