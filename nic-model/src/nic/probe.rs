//! Tail loss probes (`tail_probe`, after RACK-TLP, RFC 8985): the loss
//! signal for an operation's last packets, which no later packet of the
//! operation can overtake.
//!
//! Each operation keeps one lazy timer: filed when it sends or hears
//! (sooner if the timeout shrank), and on firing filed again from its
//! last activity (a packet sent or acknowledged) until it comes due with
//! nothing sent or heard for the probe timeout. Then one packet goes again
//! as a probe: no retry spent, no loss told to the controller, no entropy
//! abandoned. Each probe left unanswered doubles the wait for the next;
//! an acknowledgement of the operation resets it. What the probe's
//! acknowledgement convicts is `send.rs`'s business (`ack_packet` runs
//! overtaken-loss detection from the copy's send time when the
//! acknowledgement comes late enough to be the copy's own). A first
//! probe also re-arms the timers of the operation's other packets to one
//! RTO after it (`probe_defers_timer`), as RACK-TLP re-arms its RTO, so
//! that its answer, not a timer, says what was lost.
//!
//! A READ's activity is its request going out and its responses coming
//! in. Its probe asks again for the span of responses still missing (the
//! request sent again, as its timer would), but only once some response
//! has come: before that, silence may be a responder busy with other
//! work, and asking again would have it send everything twice.

use super::*;
use udrma_proto::time::Duration;

/// One operation's probing state.
#[derive(Debug, Clone, Copy, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct ProbeState {
    /// When the operation last sent a packet or had one acknowledged.
    active: Instant,
    /// The instant its probe timer is filed at.
    armed: Option<Instant>,
    /// Probes sent since the operation last had a packet acknowledged.
    unanswered: u32,
    /// When its latest probe went: the timers of its other packets count
    /// from no earlier than this (RACK-TLP re-arms the RTO on a probe).
    sent: Option<Instant>,
}

impl Nic {
    /// The probe timeout toward `peer`: two smoothed RTTs, four mean
    /// deviations (queues that grow faster than the smoothed RTT follows
    /// made 2·srtt alone probe packets that were only queued) and the
    /// selective-ACK delay (the receiver may hold the answer that long);
    /// the initial RTO before any sample.
    fn probe_timeout(&mut self, peer: NodeAddr) -> Duration {
        let delay = self.sack_coalesce();
        let est = self.rtt_to(peer);
        match est.srtt() {
            Some(srtt) => srtt.saturating_mul(2) + est.rttvar().saturating_mul(4) + delay,
            None => self.cfg.rto_initial,
        }
    }

    /// `msg_id` sent a packet (`acked`: had one acknowledged, or for a
    /// READ, a response arrived) at `now`: its probe timer counts from
    /// here.
    pub(super) fn probe_activity(&mut self, now: Instant, msg_id: u32, acked: bool) {
        if !self.cfg.tail_probe {
            return;
        }
        let Some(dst) = self.ops.get(&msg_id).map(|op| op.dst) else {
            return;
        };
        let pto = self.probe_timeout(dst);
        let Some(op) = self.ops.get_mut(&msg_id) else {
            return;
        };
        let p = &mut op.probe;
        // A packet's activity counts from when it leaves, which can be
        // later than an answer heard since (a slow gather).
        p.active = p.active.max(now);
        if acked {
            p.unanswered = 0;
        }
        // Filed anew only when none is filed or this one is due sooner
        // (the first RTT sample shortens the timeout); else the filed one
        // files itself again from `active` when it comes due.
        let t = now + pto;
        if p.armed.is_none_or(|a| a > t) {
            if let Some(a) = p.armed.replace(t) {
                self.timers.remove(&(a, Timer::Probe(msg_id)));
            }
            self.timers.insert((t, Timer::Probe(msg_id)));
        }
    }

    /// `msg_id` is finished or failed: its probe timer goes.
    pub(super) fn probe_disarm(&mut self, msg_id: u32, probe: ProbeState) {
        if let Some(t) = probe.armed {
            self.timers.remove(&(t, Timer::Probe(msg_id)));
        }
    }

    /// The probe timer filed at `t` for `msg_id` came due.
    pub(super) fn on_probe_timeout(&mut self, now: Instant, t: Instant, msg_id: u32) {
        let Some(op) = self.ops.get(&msg_id) else {
            return;
        };
        if op.probe.armed != Some(t) {
            return;
        }
        let (dst, active, unanswered) = (op.dst, op.probe.active, op.probe.unanswered);
        let pto = self.probe_timeout(dst);
        let Some(op) = self.ops.get_mut(&msg_id) else {
            return;
        };
        op.probe.armed = None;
        // Each unanswered probe doubles the wait for the next.
        let due = active + pto.saturating_mul(1 << unanswered.min(16));
        if due > now {
            // Something was sent or acknowledged since it was filed.
            op.probe.armed = Some(due);
            self.timers.insert((due, Timer::Probe(msg_id)));
            return;
        }
        if op
            .read_mask
            .as_ref()
            .is_some_and(|m| m.missing() == m.count())
        {
            // A READ nothing of which has come back: its request may
            // only wait behind the responder's other work, and asking
            // again would have all of it sent twice. The timer decides.
            return;
        }
        // The highest packet out, not waiting to go again or waiting out
        // a receiver-not-ready refusal: its acknowledgement shows what
        // before it is missing. But while nothing of the operation is
        // acknowledged and the receiver registers operations by their
        // first packet, that first packet is what it needs (the others
        // wait in its escape channel, or were refused, without it).
        let first_only = op.acked == 0 && self.cfg.registration == RegistrationMode::FirstOnly;
        let from = (op.first_unacked as usize).min(op.pkts.len());
        let out = |p: &PktState| match p {
            PktState::InFlight(o) => self.op_table.get(*o).is_some_and(|e| {
                e.deadline
                    .is_some_and(|d| !self.timers.contains(&(d, Timer::RnrRetry(*o))))
            }),
            _ => false,
        };
        let pick = if first_only {
            op.pkts[from..].iter().find(|p| out(p))
        } else {
            op.pkts[from..].iter().rev().find(|p| out(p))
        };
        let tail = match pick {
            Some(PktState::InFlight(o)) => Some(*o),
            _ => None,
        };
        let Some(opn) = tail else {
            // Nothing out: the next packet sent files the timer again.
            return;
        };
        if self.first_refused(msg_id, opn) {
            // Not registered at the receiver yet: a refusal, not a loss.
            return;
        }
        if let Some(op) = self.ops.get_mut(&msg_id) {
            op.probe.unanswered += 1;
            op.probe.sent = Some(now);
        }
        self.stats.tail_probes += 1;
        self.queue_retransmit(opn);
        if let Some(e) = self.op_table.get_mut(opn) {
            e.probe = true;
        }
    }

    /// `opn`'s retransmit timer came due at `now`: with tail probes, if
    /// its operation sent a probe less than that packet's RTO ago, the
    /// timer is filed again one RTO after the probe (returns whether it
    /// was), as RACK-TLP re-arms its RTO when it probes. The probe's
    /// answer, a round trip away, convicts the packet as lost; firing now
    /// would send it, and every packet of a burst lost with it, on the
    /// timer's word while that answer is on its way.
    pub(super) fn probe_defers_timer(&mut self, now: Instant, opn: OpNumber) -> bool {
        if !self.cfg.tail_probe {
            return false;
        }
        let Some(inf) = self.op_table.get(opn).copied() else {
            return false;
        };
        // Only for a first probe: RACK-TLP sends one before its RTO,
        // and deferring on every doubled probe after it would let a
        // string of lost probes hold the timer off for ever longer.
        let Some((dst, Some(sent))) = self
            .ops
            .get(&inf.msg_id)
            .filter(|op| op.probe.unanswered == 1)
            .map(|op| (op.dst, op.probe.sent))
        else {
            return false;
        };
        let deadline = sent + self.rtt_to(dst).backoff(inf.retries);
        if deadline <= now {
            return false;
        }
        if let Some(e) = self.op_table.get_mut(opn) {
            e.deadline = Some(deadline);
        }
        self.timers.insert((deadline, Timer::Retransmit(opn)));
        true
    }

    /// A packet sent again (its latest copy left at `sent_at`; `probe`:
    /// as a tail probe) is acknowledged at `now`: whether the
    /// acknowledgement can be that copy's own (else it is an earlier
    /// copy's, and a probe is counted spurious).
    pub(super) fn copy_answered(
        &mut self,
        now: Instant,
        dst: NodeAddr,
        sent_at: Instant,
        probe: bool,
    ) -> bool {
        if !self.too_soon_for_copy(now, dst, sent_at) {
            return true;
        }
        if probe {
            self.stats.spurious_tail_probes += 1;
        }
        false
    }
}
