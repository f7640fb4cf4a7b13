//! The NIC's deadlines: one ordered set of `(Instant, Timer)` keys, with a
//! fast lane for the per-packet ones.
//!
//! Nearly every timer is a packet's retransmit deadline: one is filed per
//! packet sent and cancelled per ACK, hundreds per NIC at a time. In an
//! ordered tree each of those is a search through nodes scattered over
//! the heap (a tenth of a large fabric run's time). Here a packet's
//! deadline lives in a slot array indexed by its op-table slot (filing
//! and cancelling are O(1)) and in a binary heap that gives the earliest;
//! a cancelled key stays in the heap until it reaches the top and is seen
//! not to be the slot's armed key. Every other timer stays in the tree.
//!
//! The set behaves exactly as a `BTreeSet<(Instant, Timer)>` would, order
//! of equal instants included: a packet timer's variant sorts before every
//! other variant, and among themselves keys pack into integers in the
//! same order. That is what keeps every trace hash unchanged.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::Timer;
use crate::optable::OpNumber;
use udrma_proto::time::Instant;

/// No key armed in a slot (never a packed key: bits 34..64 are zero in
/// those).
const NONE: u128 = u128::MAX;

/// A per-packet key packed in `(Instant, Timer)` order: time, then
/// `Retransmit` (0) before `RnrRetry` (1), then the op number.
fn pack(t: Instant, timer: Timer) -> Option<u128> {
    let (kind, opn) = match timer {
        Timer::Retransmit(o) => (0u128, o),
        Timer::RnrRetry(o) => (1u128, o),
        _ => return None,
    };
    Some((u128::from(t.as_ps()) << 64) | (kind << 32) | u128::from(opn.0))
}

fn unpack(k: u128) -> (Instant, Timer) {
    let t = Instant((k >> 64) as u64);
    let opn = OpNumber(k as u32);
    let timer = if (k >> 32) & 1 == 0 {
        Timer::Retransmit(opn)
    } else {
        Timer::RnrRetry(opn)
    };
    (t, timer)
}

fn slot_of(k: u128) -> usize {
    OpNumber(k as u32).slot() as usize
}

#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct TimerSet {
    /// Every key that is not in the fast lane.
    other: BTreeSet<(Instant, Timer)>,
    /// Per op-table slot, the packet key armed there ([`NONE`]: none).
    armed: Vec<u128>,
    /// Armed keys, and cancelled ones not yet at the top. The top is
    /// always armed (see [`TimerSet::settle`]).
    heap: BinaryHeap<Reverse<u128>>,
    /// Keys in `armed`.
    n_armed: usize,
    /// Packet keys that found their slot taken by another packet key and
    /// went to `other` (a stale generation's timer left armed): while any
    /// are there, lookups check `other` too.
    spilled: usize,
    /// The heap's top and `other`'s first key, kept here: the NIC asks for
    /// its earliest deadline after every event, and the heap's and the
    /// tree's first nodes were cold by then on a large fabric (`first`
    /// was 4–6 % of a k=16 or k=32 run).
    top: Option<u128>,
    other_first: Option<(Instant, Timer)>,
}

impl TimerSet {
    pub(super) fn insert(&mut self, (t, timer): (Instant, Timer)) {
        let Some(k) = pack(t, timer) else {
            self.other_insert((t, timer));
            return;
        };
        let slot = slot_of(k);
        if slot >= self.armed.len() {
            self.armed.resize(slot + 1, NONE);
        }
        let held = self.armed[slot];
        if held == k || (self.spilled > 0 && self.other.contains(&(t, timer))) {
            return;
        }
        if held != NONE {
            // Another packet key holds the slot: it stays a key of the set,
            // filed in the tree.
            if self.other_insert(unpack(held)) {
                self.spilled += 1;
            }
            self.n_armed -= 1;
        }
        self.armed[slot] = k;
        self.n_armed += 1;
        self.heap.push(Reverse(k));
        // (The key it displaced may have been the top.)
        self.settle();
        self.compact();
    }

    pub(super) fn remove(&mut self, key: &(Instant, Timer)) -> bool {
        let Some(k) = pack(key.0, key.1) else {
            return self.other_remove(key);
        };
        let slot = slot_of(k);
        if self.armed.get(slot) == Some(&k) {
            self.armed[slot] = NONE;
            self.n_armed -= 1;
            self.settle();
            return true;
        }
        if self.spilled > 0 && self.other_remove(key) {
            self.spilled -= 1;
            return true;
        }
        false
    }

    pub(super) fn contains(&self, key: &(Instant, Timer)) -> bool {
        match pack(key.0, key.1) {
            Some(k) if self.armed.get(slot_of(k)) == Some(&k) => true,
            Some(_) if self.spilled == 0 => false,
            _ => self.other.contains(key),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.n_armed == 0 && self.other.is_empty()
    }

    /// The earliest key.
    pub(super) fn first(&self) -> Option<(Instant, Timer)> {
        let fast = self.top.map(unpack);
        match (fast, self.other_first) {
            (Some(f), Some(o)) => Some(if f <= o { f } else { o }),
            (f, o) => f.or(o),
        }
    }

    /// Files `key` in the tree; whether it was not there.
    fn other_insert(&mut self, key: (Instant, Timer)) -> bool {
        if self.other_first.is_none_or(|f| key < f) {
            self.other_first = Some(key);
        }
        self.other.insert(key)
    }

    /// Takes `key` out of the tree; whether it was there.
    fn other_remove(&mut self, key: &(Instant, Timer)) -> bool {
        let removed = self.other.remove(key);
        if removed && self.other_first == Some(*key) {
            self.other_first = self.other.first().copied();
        }
        removed
    }

    /// Takes the earliest key out.
    pub(super) fn pop_first(&mut self) -> Option<(Instant, Timer)> {
        let first = self.first()?;
        self.remove(&first);
        Some(first)
    }

    /// Drops cancelled keys off the top of the heap, so its top is armed.
    fn settle(&mut self) {
        while let Some(Reverse(k)) = self.heap.peek() {
            if self.armed[slot_of(*k)] == *k {
                self.top = Some(*k);
                return;
            }
            self.heap.pop();
        }
        self.top = None;
    }

    /// Rebuilds the heap from the armed keys when cancelled ones outnumber
    /// them (long deadlines cancelled early could pile up): the heap stays
    /// within twice the keys it holds.
    fn compact(&mut self) {
        if self.heap.len() > 2 * self.n_armed + 64 {
            let live: Vec<Reverse<u128>> = self
                .armed
                .iter()
                .filter(|k| **k != NONE)
                .map(|k| Reverse(*k))
                .collect();
            self.heap = BinaryHeap::from(live);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::OpKey;
    use proptest::prelude::*;
    use udrma_proto::NodeAddr;

    fn opn(slot: u16, generation: u16) -> OpNumber {
        OpNumber((u32::from(generation) << 16) | u32::from(slot))
    }

    fn timer(kind: u8, slot: u16, generation: u16) -> Timer {
        let o = opn(slot, generation);
        match kind % 4 {
            0 => Timer::Retransmit(o),
            1 => Timer::RnrRetry(o),
            2 => Timer::Escape(u64::from(slot)),
            _ => Timer::Sack(OpKey {
                from: NodeAddr(u32::from(generation)),
                src_ep: slot,
                msg_id: 1,
            }),
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u64, u8, u16, u16),
        Remove(u64, u8, u16, u16),
        Pop,
    }

    fn step() -> impl Strategy<Value = Step> {
        // Few times, slots and generations, so keys collide often: equal
        // instants, a slot armed twice, a stale generation still filed.
        let key = (0u64..6, 0u8..4, 0u16..4, 0u16..3);
        prop_oneof![
            4 => key.clone().prop_map(|(t, k, s, g)| Step::Insert(t, k, s, g)),
            3 => key.prop_map(|(t, k, s, g)| Step::Remove(t, k, s, g)),
            1 => Just(Step::Pop),
        ]
    }

    proptest! {
        /// Any sequence of inserts, removals and pops gives the same
        /// answers as the ordered tree it replaces.
        #[test]
        fn behaves_as_an_ordered_set(steps in proptest::collection::vec(step(), 0..200)) {
            let mut fast = TimerSet::default();
            let mut tree: BTreeSet<(Instant, Timer)> = BTreeSet::new();
            for s in steps {
                match s {
                    Step::Insert(t, k, s, g) => {
                        let key = (Instant(t), timer(k, s, g));
                        fast.insert(key);
                        tree.insert(key);
                    }
                    Step::Remove(t, k, s, g) => {
                        let key = (Instant(t), timer(k, s, g));
                        prop_assert_eq!(fast.contains(&key), tree.contains(&key));
                        prop_assert_eq!(fast.remove(&key), tree.remove(&key));
                    }
                    Step::Pop => prop_assert_eq!(fast.pop_first(), tree.pop_first()),
                }
                prop_assert_eq!(fast.first(), tree.first().copied());
                prop_assert_eq!(fast.is_empty(), tree.is_empty());
            }
            while let Some(k) = tree.pop_first() {
                prop_assert_eq!(fast.pop_first(), Some(k));
            }
            prop_assert!(fast.is_empty());
        }
    }

    /// The tree is the fallback that makes any layout correct, so the
    /// property test cannot see a packet key filed there: this one does.
    #[test]
    fn packet_deadlines_take_the_fast_lane() {
        let mut s = TimerSet::default();
        for slot in 0..100u16 {
            let t = Instant(1000 - u64::from(slot));
            let timer = if slot % 2 == 0 {
                Timer::Retransmit(opn(slot, 1))
            } else {
                Timer::RnrRetry(opn(slot, 1))
            };
            s.insert((t, timer));
        }
        assert!(s.other.is_empty());
        assert_eq!((s.n_armed, s.spilled), (100, 0));
        assert_eq!(s.first(), Some((Instant(901), Timer::RnrRetry(opn(99, 1)))));
        // A stale generation's deadline left filed, and its slot reused:
        // the old key spills into the tree until it is removed.
        let old = (Instant(1000), Timer::Retransmit(opn(0, 1)));
        let new = (Instant(5), Timer::Retransmit(opn(0, 2)));
        s.insert(new);
        assert_eq!((s.spilled, s.other.len(), s.n_armed), (1, 1, 100));
        assert!(s.contains(&old) && s.contains(&new));
        assert!(s.remove(&old));
        assert_eq!((s.spilled, s.other.len()), (0, 0));
        assert!(!s.remove(&old));
        assert_eq!(s.pop_first(), Some(new));
    }

    #[test]
    fn cancelled_keys_do_not_pile_up() {
        let mut s = TimerSet::default();
        // A packet filed far out and cancelled at once, many times over,
        // with one early key that never fires.
        s.insert((Instant(1), Timer::Retransmit(opn(0, 0))));
        for i in 0..10_000u32 {
            let key = (
                Instant(1_000_000 + u64::from(i)),
                Timer::Retransmit(opn(1, i as u16)),
            );
            s.insert(key);
            assert!(s.heap.len() <= 2 * s.n_armed + 64, "{}", s.heap.len());
            assert!(s.remove(&key));
        }
    }
}
