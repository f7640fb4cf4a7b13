//! Receiver-not-ready refusals that say an operation is not registered
//! yet (first-only registration): the refused packets wait for their
//! first packet instead of knocking again, and the first goes again at
//! once when the refusal shows it was lost.

use super::*;

impl Nic {
    /// First-only registration: a refusal of a later packet while the
    /// first is unacknowledged says the receiver has not registered the
    /// operation (its escape channel was full, or the packet waited there
    /// too long). Sending the refused packet again before the first has
    /// registered the operation only refuses it again: it waits until a
    /// packet of its operation is acknowledged (`Nic::unpark`), or one
    /// round-trip timeout at most. The
    /// first packet goes again at once, on the busy budget, when its
    /// latest copy left no later than the refused one (the refusal is
    /// the sign that it was lost: it had its chance to register the
    /// operation first), unless it waits to go already or the receiver
    /// refused it too. Returns whether `opn` was parked.
    ///
    /// Before, each refused packet went again every `rnr_delay` into the
    /// queue that had lost the first, and was refused again until the
    /// first's own timer fired: a sprayed all-to-all with no fault at all
    /// sent 327,548 packets for 4,400 and 3 of 56 WRITEs failed
    /// (docs/testing.md, finding 37).
    pub(super) fn park_for_first(&mut self, now: Instant, opn: OpNumber) -> bool {
        if self.cfg.registration != RegistrationMode::FirstOnly
            || self.cfg.retransmit != RetransmitMode::Selective
        {
            return false;
        }
        let Some(inf) = self.op_table.get(opn).copied() else {
            return false;
        };
        let Some(op) = self.ops.get(&inf.msg_id) else {
            return false;
        };
        let Some(&PktState::InFlight(first)) = op.pkts.first() else {
            return false;
        };
        if inf.seg == 0 || !matches!(op.kind, OpKind::Write | OpKind::Send) {
            return false;
        }
        let dst = op.dst;
        let judged = self.cc_active() || self.loss_windowed(dst);
        // It asks again after `rnr_delay`, doubled at each refusal, up to
        // one round-trip timeout: soon after a first that was only late,
        // and seldom while it is lost.
        let rto = self.rtt_to(dst).backoff(inf.retries);
        let shift = inf.rnr_retries.saturating_sub(1).min(16);
        let wait =
            udrma_proto::time::Duration(self.cfg.rnr_delay.0.saturating_mul(1 << shift).min(rto.0));
        let until = now + wait;
        if let Some(e) = self.op_table.get_mut(opn) {
            if let Some(d) = e.deadline.take() {
                self.timers.remove(&(d, Timer::Retransmit(opn)));
                self.timers.remove(&(d, Timer::RnrRetry(opn)));
            }
            e.deadline = Some(until);
            self.timers.insert((until, Timer::RnrRetry(opn)));
            // Out of the network while it waits: under a controller its
            // bytes leave the flight now, and its copy goes through the
            // send gate when it goes.
            if judged && !e.lost {
                e.lost = true;
                let bytes = e.bytes;
                self.flow_released(dst, bytes);
            }
        }
        self.stats.parked_for_first += 1;
        if let Some(op) = self.ops.get_mut(&inf.msg_id) {
            // (Once a segment: a packet refused again while it waits is
            // already listed.)
            if !op.parked.contains(&inf.seg) {
                op.parked.push(inf.seg);
            }
        }
        let resend_first = self.op_table.get(first).is_some_and(|f| {
            f.sent_at <= inf.sent_at
                && f.deadline
                    .is_some_and(|d| self.timers.contains(&(d, Timer::Retransmit(first))))
        });
        if resend_first {
            let bytes = self.op_table.get(first).map_or(0, |f| f.bytes);
            self.flow_lost(now, dst, bytes, LossCause::Nack);
            self.stats.first_resent_on_refusal += 1;
            if self.count_rnr_retry(now, first) {
                self.queue_retransmit(first);
            }
        }
        true
    }

    /// A packet of `msg_id` was acknowledged, so the receiver holds its
    /// registration: the packets parked for it go again now, in segment
    /// order.
    pub(super) fn unpark(&mut self, msg_id: u32) {
        let Some(op) = self.ops.get_mut(&msg_id) else {
            return;
        };
        let mut segs = std::mem::take(&mut op.parked);
        segs.sort_unstable();
        for seg in segs {
            let Some(&PktState::InFlight(o)) = self
                .ops
                .get(&msg_id)
                .and_then(|op| op.pkts.get(seg as usize))
            else {
                continue;
            };
            // Still waiting on its timer (not acknowledged since, and not
            // gone again already).
            let waiting = self
                .op_table
                .get(o)
                .and_then(|e| e.deadline)
                .is_some_and(|d| self.timers.contains(&(d, Timer::RnrRetry(o))));
            if waiting {
                self.queue_retransmit(o);
            }
        }
    }
}
