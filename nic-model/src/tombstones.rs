//! Tombstones: the receive side's memory of completed operations, so that
//! a late copy of one never writes again, in the modes of
//! [`TombstoneMode`] (docs/design.md, "Exactly once"). The sender's half
//! of the window mode is `nic/window.rs`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use udrma_proto::NodeAddr;

use crate::config::TombstoneMode;
use crate::registry::OpKey;

/// Whether message id `a` comes before `b` in a sender's numbering, in
/// serial-number arithmetic (RFC 1982): a life's ids may wrap past 2^32.
pub fn msg_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// [`msg_before`] as an ordering.
fn serial_cmp(a: u32, b: u32) -> std::cmp::Ordering {
    if a == b {
        std::cmp::Ordering::Equal
    } else if msg_before(a, b) {
        std::cmp::Ordering::Less
    } else {
        std::cmp::Ordering::Greater
    }
}

/// Completed operations, remembered so late duplicates never write again.
///
/// In [`TombstoneMode::Window`] each peer has a window of its
/// `capacity` newest completed message ids. Its sender opens at most
/// `capacity` operations toward this receiver from its oldest unfinished
/// one on, so the completed operations it may still send copies of are
/// all among the newest `capacity`: none is ever forgotten while it
/// matters, and a copy older than every id of a full window belongs to an
/// operation its sender has finished with ([`Tombstones::finished`]).
/// In [`TombstoneMode::Fifo`] one set of `capacity` for all peers forgets
/// its oldest first, whatever the senders still send (the hazard).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Tombstones {
    memory: Memory,
    capacity: usize,
    len: u32,
    peak: u32,
}

/// What [`Tombstones`] keeps, by mode (one enum, so that the engine's
/// per-packet part stays as small as it was).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Memory {
    /// Tombstones off: nothing.
    Off,
    /// One set for all peers, and its order.
    Fifo {
        set: BTreeSet<OpKey>,
        order: VecDeque<OpKey>,
    },
    /// Per peer, completed message ids in the sender's order.
    Window {
        windows: BTreeMap<NodeAddr, VecDeque<u32>>,
        max_peers: u32,
        /// Most windows ever kept at once.
        peak_windows: u32,
        peers_overflow: u64,
    },
}

impl Tombstones {
    /// Empty; with `enabled` false nothing is ever remembered. A window
    /// is kept for at most `max_peers` peers (further peers' completions
    /// are not remembered, and counted: [`Tombstones::peers_overflow`]).
    pub fn new(
        capacity: usize,
        enabled: bool,
        mode: TombstoneMode,
        max_peers: usize,
    ) -> Tombstones {
        let memory = match (enabled && capacity > 0, mode) {
            (false, _) => Memory::Off,
            (true, TombstoneMode::Fifo) => Memory::Fifo {
                set: BTreeSet::new(),
                order: VecDeque::new(),
            },
            (true, TombstoneMode::Window) => Memory::Window {
                windows: BTreeMap::new(),
                max_peers: u32::try_from(max_peers).unwrap_or(u32::MAX),
                peak_windows: 0,
                peers_overflow: 0,
            },
        };
        Tombstones {
            memory,
            capacity,
            len: 0,
            peak: 0,
        }
    }

    /// Remembers `key`; returns `true` if a completion that a late copy
    /// could still name was forgotten (Fifo only: a window forgets only
    /// ids its sender has finished with).
    pub fn insert(&mut self, key: OpKey) -> bool {
        let capacity = self.capacity;
        let evicted = match &mut self.memory {
            Memory::Off => return false,
            Memory::Fifo { set, order } => {
                if !set.insert(key) {
                    return false;
                }
                order.push_back(key);
                let mut evicted = false;
                while order.len() > capacity {
                    if let Some(old) = order.pop_front() {
                        set.remove(&old);
                        evicted = true;
                    }
                }
                self.len = set.len() as u32;
                evicted
            }
            Memory::Window {
                windows,
                max_peers,
                peak_windows,
                peers_overflow,
            } => {
                if !windows.contains_key(&key.from) {
                    if windows.len() >= *max_peers as usize {
                        *peers_overflow += 1;
                        return false;
                    }
                    *peak_windows = (*peak_windows).max(windows.len() as u32 + 1);
                }
                let w = windows.entry(key.from).or_default();
                // Completions come mostly in the sender's order: look from
                // the newest end.
                let mut at = w.len();
                while at > 0 && msg_before(key.msg_id, w[at - 1]) {
                    at -= 1;
                }
                if at > 0 && w[at - 1] == key.msg_id {
                    return false;
                }
                if at == 0 && w.len() >= capacity {
                    // Older than a full window: finished at its sender.
                    return false;
                }
                w.insert(at, key.msg_id);
                self.len += 1;
                if w.len() > capacity {
                    w.pop_front();
                    self.len -= 1;
                }
                false
            }
        };
        self.peak = self.peak.max(self.len);
        evicted
    }

    /// Forgets every operation from `from` (the peer restarted: its new
    /// life numbers its messages afresh); returns how many.
    pub fn forget_peer(&mut self, from: NodeAddr) -> usize {
        let gone = match &mut self.memory {
            Memory::Off => 0,
            Memory::Fifo { set, order } => {
                let before = set.len();
                set.retain(|k| k.from != from);
                order.retain(|k| k.from != from);
                before - set.len()
            }
            Memory::Window { windows, .. } => windows.remove(&from).map_or(0, |w| w.len()),
        };
        self.len -= gone as u32;
        gone
    }

    /// Whether `key` completed here and is still remembered.
    pub fn contains(&self, key: &OpKey) -> bool {
        match &self.memory {
            Memory::Off => false,
            Memory::Fifo { set, .. } => set.contains(key),
            // A window is sorted in the sender's order: every new
            // operation's first packet asks, so search, not scan.
            Memory::Window { windows, .. } => windows
                .get(&key.from)
                .is_some_and(|w| w.binary_search_by(|m| serial_cmp(*m, key.msg_id)).is_ok()),
        }
    }

    /// Whether `key` names an operation its sender has finished with
    /// (Window only): its peer's window is full and every id in it is
    /// newer. Such a packet is a late copy, never a live operation's.
    pub fn finished(&self, key: &OpKey) -> bool {
        match &self.memory {
            Memory::Window { windows, .. } => windows.get(&key.from).is_some_and(|w| {
                w.len() >= self.capacity && w.front().is_some_and(|f| msg_before(key.msg_id, *f))
            }),
            _ => false,
        }
    }

    /// Remembered now.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Nothing remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most ever remembered at once.
    pub fn peak(&self) -> usize {
        self.peak as usize
    }

    /// The most that may be remembered: the capacity, per peer window
    /// (as many windows as were ever kept at once).
    pub fn limit(&self) -> usize {
        match &self.memory {
            Memory::Off => 0,
            Memory::Fifo { .. } => self.capacity,
            Memory::Window { peak_windows, .. } => self.capacity * (*peak_windows).max(1) as usize,
        }
    }

    /// Peers whose completions went unremembered: every window was taken.
    pub fn peers_overflow(&self) -> u64 {
        match &self.memory {
            Memory::Window { peers_overflow, .. } => *peers_overflow,
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(msg_id: u32) -> OpKey {
        from(0, msg_id)
    }

    fn from(peer: u32, msg_id: u32) -> OpKey {
        OpKey {
            from: NodeAddr(peer),
            src_ep: 0,
            msg_id,
        }
    }

    #[test]
    fn fifo_tombstones_forget_the_oldest_and_can_be_off() {
        let mut t = Tombstones::new(2, true, TombstoneMode::Fifo, 8);
        assert!(!t.insert(key(1)));
        assert!(!t.insert(key(2)));
        assert!(t.insert(key(3)));
        assert!(!t.contains(&key(1)));
        assert!(t.contains(&key(3)));
        assert_eq!(t.len(), 2);
        let mut off = Tombstones::new(2, false, TombstoneMode::Window, 8);
        off.insert(key(1));
        assert!(!off.contains(&key(1)));
    }

    #[test]
    fn tombstones_forget_a_restarted_peer_only() {
        let mut t = Tombstones::new(8, true, TombstoneMode::Fifo, 8);
        assert!(t.is_empty());
        for k in [from(0, 1), from(1, 1), from(0, 2)] {
            t.insert(k);
        }
        assert_eq!((t.len(), t.peak(), t.is_empty()), (3, 3, false));
        assert_eq!(t.forget_peer(NodeAddr(0)), 2);
        assert!(t.contains(&from(1, 1)) && !t.contains(&from(0, 2)));
        assert_eq!((t.len(), t.peak()), (1, 3));
        // The order queue forgot them too: the capacity is free again.
        for m in 10..17 {
            assert!(!t.insert(from(2, m)), "no eviction while there is room");
        }
        assert_eq!(t.len(), 8);
    }

    #[test]
    fn a_window_keeps_each_peers_newest_and_knows_what_is_finished() {
        let mut t = Tombstones::new(3, true, TombstoneMode::Window, 8);
        // Out of order, as operations complete.
        for m in [2, 1, 4] {
            assert!(
                !t.insert(from(0, m)),
                "a window forgets nothing that matters"
            );
        }
        assert!(t.contains(&from(0, 1)) && t.contains(&from(0, 4)));
        assert!(!t.contains(&from(0, 3)), "3 is still open at its sender");
        assert!(!t.finished(&from(0, 3)));
        // A full window of three ids newer than 0: had 0 been open at its
        // sender, it would have opened four operations from it on.
        assert!(t.finished(&from(0, 0)));
        assert!(!t.insert(from(0, 4)), "a second copy adds nothing");
        assert_eq!(t.len(), 3);
        // 5 completes: 1 slides out, and with three newer ids in a full
        // window its sender has finished with it (and with 0).
        t.insert(from(0, 5));
        assert!(!t.contains(&from(0, 1)));
        assert!(t.finished(&from(0, 1)) && t.finished(&from(0, 0)));
        assert!(!t.finished(&from(0, 3)), "newer than the window's oldest");
        assert!(!t.finished(&from(1, 1)), "another peer's window is its own");
        // Inserting a finished id remembers nothing.
        t.insert(from(0, 1));
        assert!(!t.contains(&from(0, 1)));
        t.insert(from(1, 9));
        assert_eq!((t.len(), t.peak(), t.limit()), (4, 4, 6));
        assert_eq!(t.forget_peer(NodeAddr(0)), 3);
        assert_eq!(
            (t.len(), t.limit()),
            (1, 6),
            "the limit counts the most windows kept"
        );
    }

    #[test]
    fn a_window_orders_ids_across_the_wrap() {
        let mut t = Tombstones::new(2, true, TombstoneMode::Window, 8);
        t.insert(from(0, u32::MAX));
        t.insert(from(0, 1));
        assert!(t.finished(&from(0, u32::MAX - 1)));
        assert!(!t.finished(&from(0, 0)), "0 comes after u32::MAX");
        t.insert(from(0, 0));
        assert!(t.contains(&from(0, 0)) && t.contains(&from(0, 1)));
        assert!(!t.contains(&from(0, u32::MAX)));
    }

    #[test]
    fn windows_are_kept_for_a_bounded_number_of_peers() {
        let mut t = Tombstones::new(4, true, TombstoneMode::Window, 2);
        for p in 0..3 {
            t.insert(from(p, 1));
        }
        assert!(t.contains(&from(1, 1)) && !t.contains(&from(2, 1)));
        assert_eq!((t.peers_overflow(), t.len()), (1, 2));
    }
}
