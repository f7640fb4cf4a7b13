//! The timeout hold (`timeout_hold`, after F-RTO, RFC 5682): while a
//! peer answers nothing, one timeout at a time toward it. A timeout's
//! copy is remembered per peer (`Flow::timeout_copy`); a timer toward the
//! same peer that comes due while that copy is out, and before the peer
//! answered anything since it left, is filed again just past the copy's
//! own deadline instead of sending. The copy's answer convicts what left
//! before it (`loss::detect_overtaken`), a stalled peer's late answers
//! leave nothing to send, and with no answer the copy's own timer fires
//! first, backs off, and becomes the next copy. Selective retransmission
//! only. Its unit tests are `timeout_hold_tests`; the stories are
//! nic-model/tests/timeout_hold.rs.

use super::flow::Gate;
use super::*;

/// A packet a timeout sent again (`timeout_hold`): when, and which (an
/// OP table slot is reused once its packet is acknowledged, so the
/// operation and segment say whether the slot still holds it).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct TimeoutCopy {
    pub at: Instant,
    pub opn: OpNumber,
    pub msg_id: u32,
    pub seg: u32,
}

impl Nic {
    /// A timeout is sending `opn` (of `msg_id`) again: with the hold on,
    /// it becomes its peer's copy, which the peer's other timers wait for.
    pub(super) fn note_timeout_copy(&mut self, now: Instant, opn: OpNumber, msg_id: u32) {
        if !self.holds_timeouts() {
            return;
        }
        let Some(dst) = self.ops.get(&msg_id).map(|op| op.dst) else {
            return;
        };
        let seg = self.op_table.get(opn).map_or(0, |e| e.seg);
        self.flow(dst).timeout_copy = Some(TimeoutCopy {
            at: now,
            opn,
            msg_id,
            seg,
        });
    }

    /// `timeout_hold`, under selective retransmission only: a go-back-N
    /// receiver answers only in order, and a packet held could be the one
    /// it waits for while it discards the copy.
    pub(super) fn holds_timeouts(&self) -> bool {
        self.cfg.timeout_hold && self.cfg.retransmit == RetransmitMode::Selective
    }

    /// With `timeout_hold`: `opn`'s timer came due while its peer has
    /// answered nothing (no acknowledgement, no READ response) since a
    /// timeout sent a copy toward it, and that copy is still out. The
    /// timer is filed again just after the copy's (returns whether it
    /// was): the copy's answer, or the peer's answers for what it already
    /// had, say whether `opn` is lost, and if none comes the copy's own
    /// timeout goes first and the wait starts again. Sending now would
    /// send every packet a stalled peer has not yet acknowledged. A copy
    /// waiting at the send gate holds nothing (the packets held would keep
    /// its room in the window), unless it was queued at this instant.
    pub(super) fn timeout_copy_holds(&mut self, now: Instant, opn: OpNumber) -> bool {
        if !self.holds_timeouts() {
            return false;
        }
        let Some(inf) = self.op_table.get(opn).copied() else {
            return false;
        };
        let Some(dst) = self.ops.get(&inf.msg_id).map(|op| op.dst) else {
            return false;
        };
        let Some((copy, heard)) = self
            .flows
            .get(&dst)
            .and_then(|f| f.timeout_copy.map(|c| (c, f.acked.max(f.responded))))
        else {
            return false;
        };
        if heard >= copy.at || copy.opn == opn {
            return false;
        }
        let Some(out) = self
            .op_table
            .get(copy.opn)
            .filter(|e| e.msg_id == copy.msg_id && e.seg == copy.seg)
            .copied()
        else {
            return false;
        };
        let due = match out.deadline {
            Some(d) => d,
            // Queued at this instant, by a timer of the same batch: it
            // leaves after them, and is due about a backoff from now, if
            // its peer's window lets it (and the copies ahead of it) out.
            // Else it waits for room that only the packets held here
            // would make: none is held (finding 43's stall, one packet a
            // backoff of 80 ms).
            None if copy.at == now && self.copy_fits(now, dst, copy.opn) => {
                now + self.rtt_to(dst).backoff(out.retries)
            }
            None => return false,
        };
        let deadline = due + udrma_proto::time::Duration(1);
        if let Some(e) = self.op_table.get_mut(opn) {
            e.deadline = Some(deadline);
        }
        self.timers.insert((deadline, Timer::Retransmit(opn)));
        self.stats.timeouts_held += 1;
        true
    }

    /// Whether the copy `copy`, waiting in the retransmit queue, fits in
    /// `dst`'s window now with every copy toward `dst` queued ahead of it:
    /// a window shut by bytes in flight (held packets among them) would
    /// keep it waiting.
    fn copy_fits(&self, now: Instant, dst: NodeAddr, copy: OpNumber) -> bool {
        let mut bytes = 0u64;
        for opn in &self.retransmit_queue {
            let Some(e) = self.op_table.get(*opn) else {
                continue;
            };
            if *opn == copy && !e.lost {
                // Never out of the flight: it passes no gate.
                return true;
            }
            if e.lost && self.ops.get(&e.msg_id).is_some_and(|op| op.dst == dst) {
                bytes += u64::from(e.bytes);
            }
            if *opn == copy {
                return self.gate(now, dst, bytes) != Gate::Window;
            }
        }
        false
    }
}

#[cfg(test)]
#[path = "timeout_hold_tests.rs"]
mod tests;
