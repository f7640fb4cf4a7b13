//! The receive side's bounded state: the receive registry and the escape
//! channel (the tombstones are `tombstones.rs`). Their policies live in
//! `nic/`; these types only keep the bounds and the bookkeeping honest.

use std::collections::BTreeMap;

use udrma_proto::NodeAddr;

use crate::mask::Mask;
use crate::memory::MrKey;
use crate::wr::WrId;
use udrma_proto::time::Instant;

/// Identifies an operation at its receiver: (source node, source
/// endpoint, message id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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
    /// The incarnation of the packet that registered it
    /// ([`Flags::INCARNATION`](udrma_proto::Flags::INCARNATION)): if the
    /// entry expires, packets of this incarnation are refused.
    pub incarnation: bool,
}

/// The receive registry: operations being received, at most `capacity`.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum EscapeFull {
    /// Entry limit reached.
    Entries,
    /// Byte limit reached.
    Bytes,
}

/// The escape channel: a bounded buffer (entries and bytes) of packets that
/// arrived before their operation was registered.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
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
            incarnation: false,
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
}
