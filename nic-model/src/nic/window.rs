//! The sender's half of exactly once under bounded state
//! ([`TombstoneMode::Window`]): toward each peer, a sender opens at most
//! `tombstone_capacity` data and control operations from its oldest
//! unfinished one on. The receiver remembers that many completed message
//! ids per peer, so every completed operation a late copy can still name
//! is remembered there, and a copy older than a full window is one its
//! sender has finished with (`registry.rs`, `Tombstones::finished`).
//! READ requests take no place: the responder keeps nothing for them.
//!
//! The window also lets a refusal say "never seen" with certainty: with
//! it, a receiver that refuses a later packet of an operation whose first
//! packet it acknowledged has neither completed the operation (its copy
//! would have been acknowledged) nor still registered it (the packet would
//! have been applied): it lost the registration (`registry_timeout` passed
//! with nothing arriving). The whole operation goes again from its first
//! packet at once, instead of the refused packet being offered until the
//! refusal budget is spent. Under self-describing registration a later
//! packet would register the operation again and wait for the packets its
//! sender saw acknowledged; so a receiver whose entry expired holding
//! acknowledged packets keeps a bounded record of it and refuses every
//! later packet of the incarnation it lost, the first too, saying so
//! (`RNR_LOST`; `Nic::lost_registrations`). The restart flips the
//! operation's incarnation (`Flags::INCARNATION`), whose packets the
//! receiver registers.

use super::*;
use crate::config::TombstoneMode;

/// The operations opened toward one peer from the oldest unfinished one
/// on, oldest first (finished ones leave from the front), and the
/// data-arrived notices owed by WRITEs with notification whose last
/// segment is open (each will open one more operation).
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct SendWindow {
    ids: VecDeque<u32>,
    notices_owed: usize,
}

impl Nic {
    fn windowed(&self) -> bool {
        self.cfg.tombstones && self.cfg.tombstone_mode == TombstoneMode::Window
    }

    /// Whether an operation toward `dst` may open now; `notice`: it is the
    /// last segment of a WRITE with notification, which opens one more
    /// when its data is acknowledged. Finished operations at the front
    /// leave first, and a peer with nothing open is forgotten.
    pub(super) fn window_room(&mut self, dst: NodeAddr, notice: bool) -> bool {
        if !self.windowed() {
            return true;
        }
        let Some(w) = self.send_windows.get_mut(&dst) else {
            return true;
        };
        while w.ids.front().is_some_and(|m| !self.ops.contains_key(m)) {
            w.ids.pop_front();
        }
        if w.ids.is_empty() && w.notices_owed == 0 {
            self.send_windows.remove(&dst);
            return true;
        }
        let needed = 1 + usize::from(notice);
        if w.ids.len() + w.notices_owed + needed <= self.cfg.tombstone_capacity {
            return true;
        }
        self.stats.window_waits += 1;
        false
    }

    /// An operation opened toward `dst` (its message id `msg_id`); a
    /// notice owes nothing any more once it opens itself.
    pub(super) fn window_opened(&mut self, dst: NodeAddr, msg_id: u32, kind: OpKind, notice: bool) {
        if !self.windowed() || kind == OpKind::ReadRequest {
            return;
        }
        let w = self.send_windows.entry(dst).or_default();
        w.ids.push_back(msg_id);
        if kind == OpKind::Notify {
            w.notices_owed = w.notices_owed.saturating_sub(1);
        }
        if notice {
            w.notices_owed += 1;
        }
    }

    /// A WRITE with notification toward `dst` failed before its notice
    /// opened: the place it owed is free again.
    pub(super) fn window_notice_dropped(&mut self, dst: NodeAddr) {
        if let Some(w) = self.send_windows.get_mut(&dst) {
            w.notices_owed = w.notices_owed.saturating_sub(1);
        }
    }

    /// The places `dst`'s window holds now: the operations opened toward
    /// it from its oldest unfinished one on, and the notices owed (0 when
    /// nothing toward it is unfinished).
    pub fn window_len(&self, dst: NodeAddr) -> usize {
        self.send_windows.get(&dst).map_or(0, |w| {
            let finished = w
                .ids
                .iter()
                .take_while(|m| !self.ops.contains_key(m))
                .count();
            w.ids.len() - finished + w.notices_owed
        })
    }

    /// The receiver lost `opn`'s operation after acknowledging some of
    /// it: every packet of the operation goes again from the first, in its
    /// next incarnation (`Flags::INCARNATION`), on the loss budget (the
    /// operation's `restarts`, at most `max_retries`, then the request
    /// fails `RetryExceeded`); returns whether it did.
    ///
    /// `said` is a receiver-not-ready refusal that says so (detail
    /// `RNR_LOST`). Without it, the window lets the sender infer it
    /// (module docs): a refusal of a later packet of an
    /// operation whose first packet was acknowledged (a receiver that
    /// forgot its record of the loss), or a go-back-N NACK asking for
    /// packet 0 once packet 0 was acknowledged, whichever packet registered
    /// the operation again (a self-describing one registers from any
    /// packet, then waits for packet 0 that its sender will never resend).
    pub(super) fn restart_lost_registration(
        &mut self,
        now: Instant,
        opn: OpNumber,
        said: bool,
    ) -> bool {
        if !self.windowed() {
            return false;
        }
        let Some(inf) = self.op_table.get(opn).copied() else {
            return false;
        };
        let Some(op) = self.ops.get(&inf.msg_id) else {
            return false;
        };
        let registered_once = said || (inf.seg > 0 && op.pkts.first() == Some(&PktState::Acked));
        if !registered_once || !matches!(op.kind, OpKind::Write | OpKind::Send) {
            return false;
        }
        if op.restarts >= self.cfg.max_retries {
            let wr = op.wr;
            self.fail_request(now, wr, WcError::RetryExceeded);
            return true;
        }
        self.stats.registrations_lost += 1;
        let (dst, msg_id) = (op.dst, inf.msg_id);
        let pkts = std::mem::take(&mut self.ops.get_mut(&msg_id).expect("found above").pkts);
        for p in &pkts {
            if let PktState::InFlight(o) = p {
                if let Some(e) = self.op_table.remove(*o) {
                    self.flow_released(dst, e.in_flight());
                    if let Some(d) = e.deadline {
                        self.timers.remove(&(d, Timer::Retransmit(*o)));
                        self.timers.remove(&(d, Timer::RnrRetry(*o)));
                    }
                }
            }
        }
        let Some(op) = self.ops.get_mut(&msg_id) else {
            return true;
        };
        op.pkts = vec![PktState::Unsent; pkts.len()];
        op.restarts += 1;
        op.parked.clear();
        op.next_unsent = 0;
        op.first_unacked = 0;
        op.first_sent.clear();
        op.acked = 0;
        op.acked_sent = None;
        if !self.sendable.contains(&msg_id) {
            self.sendable.push_back(msg_id);
        }
        true
    }
}
