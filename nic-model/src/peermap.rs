//! A map from peers to what a NIC keeps about each, its first few entries
//! inline.
//!
//! A NIC keeps several such maps (congestion state, RTT estimators, boot
//! epochs, credits) and reads some of them on every packet, but most NICs
//! talk to a handful of peers: a host of a permutation to two. In a
//! `BTreeMap` every lookup reads a node of its own, allocated apart from
//! the NIC (its keys at the start, its length at the end, which for a
//! large value is kilobytes further on): on a large simulated fabric,
//! where a host's state is cold at each of its events, that was two or
//! three cache misses a lookup. Here the first `N` peers sit in the map
//! itself, beside the NIC's other fields; more go to a tree, as before.
//!
//! The map offers the operations the NIC uses, with `BTreeMap`'s meaning.
//! It is never iterated, so the order entries are kept in is its own
//! business; [`PeerMap::retain`] must be given a predicate without side
//! effects.

use std::collections::BTreeMap;

use udrma_proto::NodeAddr;

/// Peers to `V`, the first `N` inline.
#[derive(Debug, Clone)]
pub struct PeerMap<V, const N: usize> {
    /// Filled from the front: a hole is filled from `rest` at once, so
    /// `rest` holds entries only while every slot is taken.
    inline: [Option<(NodeAddr, V)>; N],
    rest: BTreeMap<NodeAddr, V>,
}

impl<V, const N: usize> Default for PeerMap<V, N> {
    fn default() -> Self {
        PeerMap {
            inline: [const { None }; N],
            rest: BTreeMap::new(),
        }
    }
}

impl<V, const N: usize> PeerMap<V, N> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn slot(&self, peer: NodeAddr) -> Option<usize> {
        self.inline
            .iter()
            .position(|e| e.as_ref().is_some_and(|(p, _)| *p == peer))
    }

    /// The value kept for `peer`.
    #[inline]
    pub fn get(&self, peer: &NodeAddr) -> Option<&V> {
        match self.slot(*peer) {
            Some(i) => self.inline[i].as_ref().map(|(_, v)| v),
            None => self.rest.get(peer),
        }
    }

    /// The value kept for `peer`, to change.
    #[inline]
    pub fn get_mut(&mut self, peer: &NodeAddr) -> Option<&mut V> {
        match self.slot(*peer) {
            Some(i) => self.inline[i].as_mut().map(|(_, v)| v),
            None => self.rest.get_mut(peer),
        }
    }

    /// Whether anything is kept for `peer`.
    pub fn contains_key(&self, peer: &NodeAddr) -> bool {
        self.get(peer).is_some()
    }

    /// Keeps `value` for `peer`; returns what was kept before.
    pub fn insert(&mut self, peer: NodeAddr, value: V) -> Option<V> {
        if let Some(old) = self.get_mut(&peer) {
            return Some(std::mem::replace(old, value));
        }
        match self.inline.iter_mut().find(|e| e.is_none()) {
            Some(hole) => *hole = Some((peer, value)),
            None => {
                self.rest.insert(peer, value);
            }
        }
        None
    }

    /// The value kept for `peer`, made by `make` first if there is none.
    #[inline]
    pub fn get_or_insert_with(&mut self, peer: NodeAddr, make: impl FnOnce() -> V) -> &mut V {
        if let Some(i) = self.slot(peer) {
            return self.inline[i].as_mut().map(|(_, v)| v).expect("slot found");
        }
        // The tree holds entries only while every slot is taken.
        if self.inline.iter().all(Option::is_some) {
            return self.rest.entry(peer).or_insert_with(make);
        }
        let hole = self
            .inline
            .iter_mut()
            .find(|e| e.is_none())
            .expect("a free slot");
        &mut hole.insert((peer, make())).1
    }

    /// Forgets `peer`; returns what was kept.
    pub fn remove(&mut self, peer: &NodeAddr) -> Option<V> {
        match self.slot(*peer) {
            Some(i) => {
                let (_, v) = self.inline[i].take().expect("slot found");
                self.inline[i] = self.rest.pop_first();
                Some(v)
            }
            None => self.rest.remove(peer),
        }
    }

    /// Keeps only the entries `keep` says yes to (a predicate without
    /// side effects: the order it sees them in is not the peers').
    pub fn retain(&mut self, mut keep: impl FnMut(&NodeAddr, &mut V) -> bool) {
        for e in self.inline.iter_mut() {
            if let Some((p, v)) = e {
                if !keep(p, v) {
                    *e = None;
                }
            }
        }
        self.rest.retain(|p, v| keep(p, v));
        for i in 0..N {
            if self.inline[i].is_none() {
                self.inline[i] = self.rest.pop_first();
            }
        }
    }

    /// How many peers have an entry.
    pub fn len(&self) -> usize {
        self.inline.iter().filter(|e| e.is_some()).count() + self.rest.len()
    }

    /// Whether no peer has one.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.inline.iter().all(Option::is_none) && self.rest.is_empty()
    }
}

/// In peer order, whichever slots hold the entries (two maps of the
/// same entries are one state).
#[cfg(feature = "fingerprint")]
impl<V: serde::Serialize, const N: usize> serde::Serialize for PeerMap<V, N> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut all: Vec<(&NodeAddr, &V)> = self
            .inline
            .iter()
            .flatten()
            .map(|(k, v)| (k, v))
            .chain(self.rest.iter())
            .collect();
        all.sort_by_key(|(k, _)| **k);
        s.collect_seq(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Get(u8),
        Insert(u8, u32),
        GetOrInsert(u8, u32),
        Remove(u8),
        Retain(u32),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few peers, so that they collide, fill the inline slots and spill.
        let peer = 0u8..6;
        prop_oneof![
            4 => peer.clone().prop_map(Op::Get),
            3 => (peer.clone(), any::<u32>()).prop_map(|(p, v)| Op::Insert(p, v)),
            3 => (peer.clone(), any::<u32>()).prop_map(|(p, v)| Op::GetOrInsert(p, v)),
            2 => peer.prop_map(Op::Remove),
            1 => any::<u32>().prop_map(Op::Retain),
            1 => Just(Op::Clear),
        ]
    }

    fn check<const N: usize>(ops: &[Op]) -> Result<(), TestCaseError> {
        let mut map: PeerMap<u32, N> = PeerMap::new();
        let mut model: BTreeMap<NodeAddr, u32> = BTreeMap::new();
        for op in ops {
            match *op {
                Op::Get(p) => {
                    let p = NodeAddr(u32::from(p));
                    prop_assert_eq!(map.get(&p), model.get(&p));
                    prop_assert_eq!(map.contains_key(&p), model.contains_key(&p));
                    prop_assert_eq!(map.get_mut(&p).copied(), model.get(&p).copied());
                }
                Op::Insert(p, v) => {
                    let p = NodeAddr(u32::from(p));
                    prop_assert_eq!(map.insert(p, v), model.insert(p, v));
                }
                Op::GetOrInsert(p, v) => {
                    let p = NodeAddr(u32::from(p));
                    let got = map.get_or_insert_with(p, || v);
                    *got = got.wrapping_add(1);
                    let want = model.entry(p).or_insert(v);
                    *want = want.wrapping_add(1);
                    prop_assert_eq!(*got, *want);
                }
                Op::Remove(p) => {
                    let p = NodeAddr(u32::from(p));
                    prop_assert_eq!(map.remove(&p), model.remove(&p));
                }
                Op::Retain(bound) => {
                    map.retain(|_, v| *v < bound);
                    model.retain(|_, v| *v < bound);
                }
                Op::Clear => {
                    map = PeerMap::new();
                    model.clear();
                }
            }
            prop_assert_eq!(map.len(), model.len());
            prop_assert_eq!(map.is_empty(), model.is_empty());
            // Inline slots are used first: the tree holds entries only
            // when every slot is taken.
            prop_assert!(map.rest.is_empty() || map.inline.iter().all(Option::is_some));
        }
        Ok(())
    }

    proptest! {
        /// Whatever is done to it, the map answers as a `BTreeMap` would.
        #[test]
        fn a_peer_map_answers_as_a_tree_would(ops in prop::collection::vec(op(), 0..200)) {
            check::<1>(&ops)?;
            check::<2>(&ops)?;
        }
    }
}
