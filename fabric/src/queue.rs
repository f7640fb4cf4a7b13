//! The event queue: a 4-ary min-heap of 16-byte keys ordered by (time,
//! insertion sequence), which lets the event being run hand its place at
//! the top to the next event it schedules.
//!
//! Why not `BinaryHeap<(Instant, u64, u32)>`: at k=16 the queue holds
//! about 14,000 events and the heap was a fifth of the run, nearly all of
//! it cache misses. Here a key is one `u128` (time in the high half, then
//! a 32-bit sequence and the 32-bit event code), so four children share
//! one or two cache lines and the heap is half as deep. And almost every
//! event schedules another (an arrival schedules the next hop's arrival,
//! a transmission the next pull): the world [`take`](EventQueue::take)s
//! the top, which stays in place marked as gone until a
//! [`push`](EventQueue::push) overwrites it (one sift down instead of a
//! pop and a push) or the next look at the queue removes it for real.
//!
//! Keys are unique (the sequence is), so events come out in exactly the
//! order of any other priority queue over (time, sequence): no trace hash
//! depends on this structure. The sequence is 32 bits: when it runs out
//! (after 4 billion events) the queue renumbers the keys it holds in
//! order, which keeps every comparison the same.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use udrma_proto::Instant;

/// One scheduled event: when, and the code of what (see `World::code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub t: Instant,
    pub slot: u32,
}

/// A min-queue of events by (time, insertion order).
#[derive(Debug)]
pub(crate) struct EventQueue {
    /// `time << 64 | seq << 32 | slot`.
    heap: BinaryHeap<Reverse<u128>>,
    /// The top of `heap` was taken and is waiting to be overwritten.
    top_taken: bool,
    /// Sequence of the last push.
    seq: u32,
    /// Where the sequence is renumbered (`u32::MAX`; lower in tests).
    seq_limit: u32,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            top_taken: false,
            seq: 0,
            seq_limit: u32::MAX,
        }
    }
}

#[inline]
fn pack(t: Instant, seq: u32, slot: u32) -> u128 {
    (u128::from(t.as_ps()) << 64) | (u128::from(seq) << 32) | u128::from(slot)
}

#[inline]
fn unpack(k: u128) -> Key {
    Key {
        t: Instant((k >> 64) as u64),
        slot: k as u32,
    }
}

impl EventQueue {
    /// Removes a taken top for real.
    #[inline]
    fn settle(&mut self) {
        if self.top_taken {
            self.top_taken = false;
            self.heap.pop();
        }
    }

    /// Gives every key a new sequence from 1, in order, so the counter can
    /// go on; the order of everything held stays the same.
    fn renumber(&mut self) {
        self.settle();
        let mut keys: Vec<u128> = std::mem::take(&mut self.heap)
            .into_iter()
            .map(|Reverse(k)| k)
            .collect();
        keys.sort_unstable();
        self.seq = keys.len() as u32;
        self.heap = keys
            .into_iter()
            .enumerate()
            .map(|(i, k)| Reverse(pack(Instant((k >> 64) as u64), i as u32 + 1, k as u32)))
            .collect();
    }

    /// Schedules event `slot` at `t`, after everything already scheduled
    /// at `t`.
    #[inline]
    pub fn push(&mut self, t: Instant, slot: u32) {
        if self.seq >= self.seq_limit {
            self.renumber();
        }
        self.seq += 1;
        let k = Reverse(pack(t, self.seq, slot));
        if self.top_taken {
            self.top_taken = false;
            // Sifts down from the root when the guard drops, which makes a
            // valid heap whatever the new key is.
            if let Some(mut top) = self.heap.peek_mut() {
                *top = k;
                return;
            }
        }
        self.heap.push(k);
    }

    /// The next event, without taking it.
    #[inline]
    pub fn peek(&mut self) -> Option<Key> {
        self.settle();
        self.heap.peek().map(|Reverse(k)| unpack(*k))
    }

    /// Takes the next event; its place is reused by the next push.
    #[inline]
    pub fn take(&mut self) -> Option<Key> {
        let key = self.peek()?;
        self.top_taken = true;
        Some(key)
    }

    /// Number of events held.
    pub fn len(&self) -> usize {
        self.heap.len() - usize::from(self.top_taken)
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// Schedule at now + delta (or before the last taken key).
        Push(u64, bool),
        Take,
        Peek,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..2_000, any::<bool>()).prop_map(|(d, early)| Op::Push(d, early)),
            1 => (0u64..(1 << 40)).prop_map(|d| Op::Push(d, false)),
            4 => Just(Op::Take),
            1 => Just(Op::Peek),
        ]
    }

    proptest! {
        /// Events come out in exactly the order of a binary heap over
        /// (time, insertion order), also across renumberings.
        #[test]
        fn same_order_as_a_binary_heap(
            ops in proptest::collection::vec(op(), 1..400),
            seq_limit in prop_oneof![Just(u32::MAX), 200u32..600],
        ) {
            let mut q = EventQueue { seq_limit, ..EventQueue::default() };
            let mut model = BinaryHeap::new();
            let mut n = 0u64;
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Push(d, early) => {
                        n += 1;
                        let t = if early { now.saturating_sub(d) } else { now + d };
                        q.push(Instant(t), n as u32);
                        model.push(Reverse((t, n)));
                    }
                    Op::Take => {
                        let got = q.take().map(|k| (k.t.as_ps(), u64::from(k.slot)));
                        prop_assert_eq!(got, model.pop().map(|Reverse(k)| k));
                        if let Some((t, _)) = got {
                            now = now.max(t);
                        }
                    }
                    Op::Peek => {
                        let got = q.peek().map(|k| (k.t.as_ps(), u64::from(k.slot)));
                        prop_assert_eq!(got, model.peek().map(|Reverse(k)| *k));
                    }
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
            }
            while let Some(Reverse((t, n))) = model.pop() {
                let got = q.take().map(|k| (k.t.as_ps(), u64::from(k.slot)));
                prop_assert_eq!(got, Some((t, n)));
            }
            prop_assert!(q.take().is_none() && q.is_empty());
        }
    }

    #[test]
    fn ties_in_time_come_out_in_insertion_order_across_a_renumbering() {
        let mut q = EventQueue {
            seq_limit: 4,
            ..EventQueue::default()
        };
        for slot in [30, 10, 20] {
            q.push(Instant(10), slot);
        }
        q.push(Instant(5), 9);
        // The counter is at its limit: this push renumbers first.
        q.push(Instant(10), 40);
        q.push(Instant(10), 50);
        let order: Vec<u32> = std::iter::from_fn(|| q.take()).map(|k| k.slot).collect();
        assert_eq!(order, [9, 30, 10, 20, 40, 50]);
    }
}
