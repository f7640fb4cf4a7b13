//! The sender's half of exactly once under bounded state
//! ([`TombstoneMode::Window`]): toward each peer, a sender opens at most
//! `tombstone_capacity` data and control operations from its oldest
//! unfinished one on. The receiver remembers that many completed message
//! ids per peer, so every completed operation a late copy can still name
//! is remembered there, and a copy older than a full window is one its
//! sender has finished with (`registry.rs`, `Tombstones::finished`).
//! READ requests take no place: the responder keeps nothing for them.

use super::*;
use crate::config::TombstoneMode;

/// The operations opened toward one peer from the oldest unfinished one
/// on, oldest first (finished ones leave from the front), and the
/// data-arrived notices owed by WRITEs with notification whose last
/// segment is open (each will open one more operation).
#[derive(Debug, Clone, Default)]
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
}
