//! The event queue: a binary heap over (time, insertion sequence) that
//! lets the event being run hand its place at the top to the next event it
//! schedules.
//!
//! Almost every event schedules another (an arrival schedules the next
//! hop's arrival, a transmission the next pull). Popping the top and then
//! pushing costs a sift to the bottom, a sift up, and another sift up;
//! writing the new key over the top costs one sift down. So the world
//! [`take`](EventQueue::take)s the top, which stays in the heap marked as
//! gone until either a [`push`](EventQueue::push) overwrites it or the next
//! look at the queue removes it for real. On the speed shape this halved
//! the time spent in the heap.
//!
//! Keys are unique (the sequence number is), so the pop order is exactly a
//! plain binary heap's, and no trace hash depends on this trick.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use udrma_proto::Instant;

/// One scheduled event: when, its insertion sequence, and the slab slot
/// that holds it. Ordered by time, then sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub t: Instant,
    pub seq: u64,
    pub slot: u32,
}

/// A min-queue of [`Key`]s.
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Reverse<Key>>,
    /// The top of `heap` was taken and is waiting to be overwritten.
    top_taken: bool,
}

impl EventQueue {
    /// Removes a taken top for real.
    #[inline]
    fn settle(&mut self) {
        if self.top_taken {
            self.heap.pop();
            self.top_taken = false;
        }
    }

    /// Adds a key (over the taken top, if there is one).
    #[inline]
    pub fn push(&mut self, key: Key) {
        if self.top_taken {
            self.top_taken = false;
            // Sifts down from the root when the guard drops, which makes a
            // valid heap whatever the new key is.
            if let Some(mut top) = self.heap.peek_mut() {
                *top = Reverse(key);
                return;
            }
        }
        self.heap.push(Reverse(key));
    }

    /// The smallest key, without taking it.
    #[inline]
    pub fn peek(&mut self) -> Option<Key> {
        self.settle();
        self.heap.peek().map(|Reverse(k)| *k)
    }

    /// Takes the smallest key; its place is reused by the next push.
    #[inline]
    pub fn take(&mut self) -> Option<Key> {
        let key = self.peek()?;
        self.top_taken = true;
        Some(key)
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.heap.len() - usize::from(self.top_taken)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(t: u64, seq: u64) -> Key {
        Key {
            t: Instant(t),
            seq,
            slot: seq as u32,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Schedule at now + delta (possibly before the last taken key).
        Push(u64, bool),
        Take,
        Peek,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..2_000_000, any::<bool>()).prop_map(|(d, early)| Op::Push(d, early)),
            1 => (0u64..(1 << 40)).prop_map(|d| Op::Push(d, false)),
            4 => Just(Op::Take),
            1 => Just(Op::Peek),
        ]
    }

    proptest! {
        /// Takes keys in exactly the order of a plain binary heap.
        #[test]
        fn same_order_as_a_binary_heap(ops in proptest::collection::vec(op(), 1..400)) {
            let mut q = EventQueue::default();
            let mut model = BinaryHeap::new();
            let mut seq = 0;
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Push(d, early) => {
                        seq += 1;
                        let t = if early { now.saturating_sub(d) } else { now + d };
                        q.push(key(t, seq));
                        model.push(Reverse(key(t, seq)));
                    }
                    Op::Take => {
                        let got = q.take();
                        prop_assert_eq!(got, model.pop().map(|Reverse(k)| k));
                        if let Some(k) = got {
                            now = now.max(k.t.as_ps());
                        }
                    }
                    Op::Peek => {
                        prop_assert_eq!(q.peek(), model.peek().map(|Reverse(k)| *k));
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
            }
            while let Some(Reverse(k)) = model.pop() {
                prop_assert_eq!(q.take(), Some(k));
            }
            prop_assert!(q.take().is_none() && q.is_empty());
        }
    }

    #[test]
    fn ties_in_time_come_out_in_insertion_order() {
        let mut q = EventQueue::default();
        for seq in [3, 1, 2] {
            q.push(key(10, seq));
        }
        q.push(key(5, 9));
        let order: Vec<u64> = std::iter::from_fn(|| q.take()).map(|k| k.seq).collect();
        assert_eq!(order, [9, 1, 2, 3]);
    }
}
