//! The receive side's bounded state: the receive registry, the escape
//! channel and the tombstones. Their policies live in `nic.rs`; these types
//! only keep the bounds and the bookkeeping honest.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use udrma_proto::NodeAddr;

use crate::config::TombstoneMode;
use crate::mask::Mask;
use crate::memory::MrKey;
use crate::wr::WrId;
use udrma_proto::time::Instant;

/// Identifies an operation at its receiver: (source node, source
/// endpoint, message id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpKey {
    /// Sending host.
    pub from: NodeAddr,
    /// Sending endpoint.
    pub src_ep: u16,
    /// Message id.
    pub msg_id: u32,
}

/// Where a registered operation's bytes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A remote WRITE into registered memory.
    Write {
        /// Remote key the sender named.
        rkey: MrKey,
        /// Lowest target address seen.
        lo: u64,
    },
    /// A SEND consuming one posted receive buffer (the engine keeps where
    /// the buffer is, under `recv`).
    Send {
        /// The receive request it fills.
        recv: WrId,
        /// Buffer length.
        cap: u64,
    },
}

/// One operation being received.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Where its bytes go.
    pub target: Target,
    /// Which packets have arrived.
    pub mask: Mask,
    /// Endpoint it is addressed to.
    pub dst_ep: u16,
    /// Operation length, if described.
    pub total_len: u64,
    /// Payload bytes placed so far.
    pub received: u64,
    /// When the entry expires unless another packet arrives.
    pub deadline: Instant,
    /// The deadline its timer is filed under: the first `deadline`, moved
    /// only when the timer fires early (a packet arrived since), so that a
    /// packet's arrival costs no timer-set update.
    pub armed: Instant,
    /// Go-back-N: the expected segment a `SEQUENCE_ERROR` NACK was last
    /// sent for (one NACK per gap, as RoCE sends one NAK).
    pub nak_sent: Option<u32>,
}

/// The receive registry: operations being received, at most `capacity`.
#[derive(Debug, Clone)]
pub struct ReceiveRegistry {
    entries: BTreeMap<OpKey, Entry>,
    capacity: usize,
    peak: usize,
}

impl ReceiveRegistry {
    /// Empty, holding at most `capacity` entries.
    pub fn new(capacity: usize) -> ReceiveRegistry {
        ReceiveRegistry {
            entries: BTreeMap::new(),
            capacity,
            peak: 0,
        }
    }

    /// Entries now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Most entries ever held.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// At capacity.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    /// Adds an entry; `false` (and nothing added) when full.
    pub fn insert(&mut self, key: OpKey, entry: Entry) -> bool {
        if self.is_full() && !self.entries.contains_key(&key) {
            return false;
        }
        self.entries.insert(key, entry);
        self.peak = self.peak.max(self.entries.len());
        true
    }

    /// The entry for `key`.
    pub fn get(&self, key: &OpKey) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// The entry for `key`, mutably.
    pub fn get_mut(&mut self, key: &OpKey) -> Option<&mut Entry> {
        self.entries.get_mut(key)
    }

    /// Whether `key` is registered.
    pub fn contains(&self, key: &OpKey) -> bool {
        self.entries.contains_key(key)
    }

    /// Removes the entry for `key`.
    pub fn remove(&mut self, key: &OpKey) -> Option<Entry> {
        self.entries.remove(key)
    }

    /// Keys of every entry from `from`, in key order.
    pub fn keys_from(&self, from: NodeAddr) -> Vec<OpKey> {
        self.entries
            .keys()
            .filter(|k| k.from == from)
            .copied()
            .collect()
    }
}

/// A packet waiting in the escape channel for its operation to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escaped {
    /// Operation it belongs to.
    pub key: OpKey,
    /// The whole datagram, as received.
    pub datagram: Vec<u8>,
    /// When it is dropped if still waiting.
    pub deadline: Instant,
}

/// Why the escape channel refused a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapeFull {
    /// Entry limit reached.
    Entries,
    /// Byte limit reached.
    Bytes,
}

/// The escape channel: a bounded buffer (entries and bytes) of packets that
/// arrived before their operation was registered.
#[derive(Debug, Clone)]
pub struct EscapeChannel {
    entries: BTreeMap<u64, Escaped>,
    bytes: usize,
    next_id: u64,
    max_entries: usize,
    max_bytes: usize,
    peak_entries: usize,
    peak_bytes: usize,
}

impl EscapeChannel {
    /// Empty, with both limits.
    pub fn new(max_entries: usize, max_bytes: usize) -> EscapeChannel {
        EscapeChannel {
            entries: BTreeMap::new(),
            bytes: 0,
            next_id: 0,
            max_entries,
            max_bytes,
            peak_entries: 0,
            peak_bytes: 0,
        }
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Nothing waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Most packets ever waiting at once.
    pub fn peak_entries(&self) -> usize {
        self.peak_entries
    }

    /// Most bytes ever waiting at once.
    pub fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// Buffers a packet, returning its id (for its expiry timer).
    pub fn push(&mut self, e: Escaped) -> Result<u64, EscapeFull> {
        if self.entries.len() >= self.max_entries {
            return Err(EscapeFull::Entries);
        }
        if self.bytes + e.datagram.len() > self.max_bytes {
            return Err(EscapeFull::Bytes);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.bytes += e.datagram.len();
        self.entries.insert(id, e);
        self.peak_entries = self.peak_entries.max(self.entries.len());
        self.peak_bytes = self.peak_bytes.max(self.bytes);
        Ok(id)
    }

    /// Removes and returns every packet of `key`, in arrival order.
    pub fn take(&mut self, key: &OpKey) -> Vec<(u64, Escaped)> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.key == *key)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.remove(id).map(|e| (id, e)))
            .collect()
    }

    /// Whether any packet from `from` is parked here.
    pub fn holds_from(&self, from: NodeAddr) -> bool {
        self.entries.values().any(|e| e.key.from == from)
    }

    /// Removes and returns every packet from `from`, in arrival order.
    pub fn take_from(&mut self, from: NodeAddr) -> Vec<(u64, Escaped)> {
        let ids: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.key.from == from)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.remove(id).map(|e| (id, e)))
            .collect()
    }

    /// Removes one packet (on expiry).
    pub fn remove(&mut self, id: u64) -> Option<Escaped> {
        let e = self.entries.remove(&id)?;
        self.bytes -= e.datagram.len();
        Some(e)
    }
}

/// Whether message id `a` comes before `b` in a sender's numbering, in
/// serial-number arithmetic (RFC 1982): a life's ids may wrap past 2^32.
pub fn msg_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
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
pub struct Tombstones {
    memory: Memory,
    capacity: usize,
    len: u32,
    peak: u32,
}

/// What [`Tombstones`] keeps, by mode (one enum, so that the engine's
/// per-packet part stays as small as it was).
#[derive(Debug, Clone)]
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
            Memory::Window { windows, .. } => windows
                .get(&key.from)
                .is_some_and(|w| w.iter().rev().any(|m| *m == key.msg_id)),
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
        OpKey {
            from: NodeAddr(0),
            src_ep: 0,
            msg_id,
        }
    }

    #[test]
    fn escape_channel_keeps_both_bounds() {
        let mut e = EscapeChannel::new(2, 10);
        let p = |k, n| Escaped {
            key: key(k),
            datagram: vec![0; n],
            deadline: Instant(0),
        };
        assert_eq!(e.push(p(1, 6)), Ok(0));
        assert_eq!(e.push(p(2, 6)), Err(EscapeFull::Bytes));
        assert_eq!(e.push(p(1, 4)), Ok(1));
        assert_eq!(e.push(p(3, 0)), Err(EscapeFull::Entries));
        let taken = e.take(&key(1));
        assert_eq!(taken.len(), 2);
        assert_eq!((e.len(), e.bytes()), (0, 0));
        assert_eq!((e.peak_entries(), e.peak_bytes()), (2, 10));
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
    fn registry_refuses_beyond_capacity() {
        let mut r = ReceiveRegistry::new(1);
        assert!(r.insert(key(1), entry()));
        assert!(!r.insert(key(2), entry()));
        assert!(r.is_full());
    }

    fn from(peer: u32, msg_id: u32) -> OpKey {
        OpKey {
            from: NodeAddr(peer),
            src_ep: 0,
            msg_id,
        }
    }

    fn entry() -> Entry {
        Entry {
            target: Target::Write {
                rkey: MrKey(1),
                lo: 0,
            },
            mask: Mask::new(1),
            dst_ep: 0,
            total_len: 1,
            received: 0,
            deadline: Instant(0),
            armed: Instant(0),
            nak_sent: None,
        }
    }

    #[test]
    fn registry_counts_its_entries_and_finds_a_peers() {
        let mut r = ReceiveRegistry::new(4);
        assert!(r.is_empty());
        for k in [from(0, 1), from(1, 1), from(1, 2)] {
            assert!(r.insert(k, entry()));
        }
        assert_eq!((r.len(), r.peak(), r.is_empty()), (3, 3, false));
        assert_eq!(r.keys_from(NodeAddr(1)), vec![from(1, 1), from(1, 2)]);
        for k in r.keys_from(NodeAddr(1)) {
            r.remove(&k);
        }
        assert_eq!(r.keys_from(NodeAddr(0)), vec![from(0, 1)]);
        assert_eq!((r.len(), r.peak()), (1, 3), "the peak stays");
    }

    #[test]
    fn escape_channel_gives_up_one_peers_packets_and_their_bytes() {
        let mut e = EscapeChannel::new(8, 100);
        let p = |peer, n| Escaped {
            key: from(peer, 7),
            datagram: vec![0; n],
            deadline: Instant(0),
        };
        let a = e.push(p(0, 10)).unwrap();
        e.push(p(1, 20)).unwrap();
        e.push(p(0, 30)).unwrap();
        assert_eq!((e.len(), e.bytes(), e.is_empty()), (3, 60, false));
        assert!(e.holds_from(NodeAddr(0)) && e.holds_from(NodeAddr(1)));
        assert!(!e.holds_from(NodeAddr(2)));
        let taken = e.take_from(NodeAddr(0));
        assert!(!e.holds_from(NodeAddr(0)), "all of peer 0's taken");
        assert_eq!(
            taken
                .iter()
                .map(|(_, x)| x.datagram.len())
                .collect::<Vec<_>>(),
            vec![10, 30],
            "peer 0's packets, in arrival order"
        );
        assert_eq!(taken[0].0, a);
        assert_eq!((e.len(), e.bytes()), (1, 20));
        let left = e.take_from(NodeAddr(1));
        assert_eq!(e.remove(left[0].0), None, "already gone");
        assert!(e.is_empty());
        let b = e.push(p(2, 15)).unwrap();
        e.push(p(2, 5)).unwrap();
        assert_eq!(e.remove(b).map(|x| x.datagram.len()), Some(15));
        assert_eq!(e.bytes(), 5, "an expired packet returns its bytes");
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
