//! The event queue: 16-byte keys ordered by (time, insertion sequence),
//! in a calendar of time buckets for the near future and a binary heap for
//! the rest.
//!
//! A key is one `u128`: time in picoseconds in the high half, then a
//! 32-bit tie-breaker and the 32-bit event code. Pushed keys take the
//! queue's own sequence as tie-breaker, so they are unique and events
//! come out in exactly the order of any other priority queue over (time,
//! sequence): no trace hash depends on this structure. The sequence is
//! 32 bits: when it runs out (after 4 billion events) the queue renumbers
//! the keys it holds in order, which keeps every comparison the same.
//! The window loop files keys it stamped itself
//! ([`EventQueue::insert_key`]): their tie-breaker is the scheduling
//! node's own count, which does not depend on what other nodes did.
//!
//! Why a calendar: nearly every event schedules one a hop later (about a
//! microsecond ahead), so on a large fabric the heap holds 100,000 keys
//! and every pop sifted a key down 17 levels, most of them cache misses.
//! Here the near future is cut into 2^10 ps (about 1 ns) wide buckets: a push is
//! an append to its bucket, and when the clock reaches a bucket its keys
//! are sorted once and taken from the end. Keys beyond the calendar's
//! horizon (timers, slow links) wait in the heap and move into the
//! calendar as it advances. Small worlds never build the calendar: the
//! heap alone serves until it holds [`CALENDAR_AFTER`] keys.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use udrma_proto::Instant;

/// Width of a calendar bucket: 2^10 ps, about a nanosecond.
const BUCKET_BITS: u32 = 10;
/// Buckets in the calendar: a horizon of 2^24 ps, about 16.8 µs.
const BUCKETS: usize = 1 << 14;
const WORDS: usize = BUCKETS / 64;
/// Largest bucket buffer (in keys) kept for reuse.
const SPARE_MAX: usize = 256;
/// Keys in the heap at which the calendar is built.
pub(crate) const CALENDAR_AFTER: usize = 256;

/// A dequeued key: when, and the event code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub t: Instant,
    pub slot: u32,
}

#[derive(Debug)]
struct Calendar {
    /// Bucket number (time >> BUCKET_BITS) of `active`.
    cur: u64,
    /// The keys of bucket `cur` (and any pushed for an earlier time),
    /// sorted from last to first: the next one is at the end.
    active: Vec<u128>,
    /// Buckets `cur + 1 .. cur + BUCKETS`, each at `bucket % BUCKETS`,
    /// unsorted.
    wheel: Vec<Vec<u128>>,
    /// Which wheel buckets hold keys.
    occupied: Vec<u64>,
    /// Keys in `wheel`.
    in_wheel: usize,
    /// Buffers of emptied buckets, for the next bucket that fills.
    spare: Vec<Vec<u128>>,
}

/// Keys ordered by (time, sequence); see the module documentation.
#[derive(Debug)]
pub(crate) struct EventQueue {
    /// Keys beyond the calendar's horizon (all keys, before it exists).
    far: BinaryHeap<Reverse<u128>>,
    calendar: Option<Calendar>,
    len: usize,
    seq: u32,
    /// Renumber when the sequence reaches this (`u32::MAX`; tests lower it).
    seq_limit: u32,
    /// Build the calendar at this many keys ([`CALENDAR_AFTER`]; tests
    /// lower it).
    calendar_after: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            far: BinaryHeap::new(),
            calendar: None,
            len: 0,
            seq: 0,
            seq_limit: u32::MAX,
            calendar_after: CALENDAR_AFTER,
        }
    }
}

#[inline]
pub(crate) fn pack(t: Instant, seq: u32, slot: u32) -> u128 {
    (u128::from(t.as_ps()) << 64) | (u128::from(seq) << 32) | u128::from(slot)
}

#[inline]
pub(crate) fn unpack(k: u128) -> Key {
    Key {
        t: Instant((k >> 64) as u64),
        slot: k as u32,
    }
}

#[inline]
fn bucket(k: u128) -> u64 {
    ((k >> 64) as u64) >> BUCKET_BITS
}

impl Calendar {
    /// Files `k` where it belongs, or hands it back when it lies beyond
    /// the horizon.
    #[inline]
    fn place(&mut self, k: u128) -> Option<u128> {
        let b = bucket(k);
        if b <= self.cur {
            // Rare: an event for the bucket being run (or earlier).
            let pos = self.active.partition_point(|&x| x > k);
            self.active.insert(pos, k);
        } else if b - self.cur < BUCKETS as u64 {
            let i = (b as usize) & (BUCKETS - 1);
            if self.wheel[i].capacity() == 0 {
                if let Some(buf) = self.spare.pop() {
                    self.wheel[i] = buf;
                }
            }
            self.wheel[i].push(k);
            self.occupied[i / 64] |= 1 << (i % 64);
            self.in_wheel += 1;
        } else {
            return Some(k);
        }
        None
    }

    /// The first occupied bucket after `cur` (the wheel is not empty).
    fn next_occupied(&self) -> u64 {
        let start = ((self.cur + 1) as usize) & (BUCKETS - 1);
        let mut w = start / 64;
        let mut bits = self.occupied[w] & (!0u64 << (start % 64));
        for _ in 0..=WORDS {
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let d = i.wrapping_sub(start) & (BUCKETS - 1);
                return self.cur + 1 + d as u64;
            }
            w = (w + 1) % WORDS;
            bits = self.occupied[w];
        }
        unreachable!("next_occupied on an empty wheel")
    }
}

impl EventQueue {
    /// Every key waiting, as (time, event code), in the order they come
    /// out (the tie-breakers dropped: the order says it).
    #[cfg(feature = "fingerprint")]
    pub(crate) fn pending(&self) -> Vec<(Instant, u32)> {
        let mut all: Vec<u128> = self.far.iter().map(|r| r.0).collect();
        if let Some(c) = &self.calendar {
            all.extend(c.active.iter().copied());
            all.extend(c.wheel.iter().flatten().copied());
        }
        all.sort_unstable();
        all.into_iter()
            .map(|k| (Instant((k >> 64) as u64), k as u32))
            .collect()
    }

    /// Makes bucket `b` the active one: keys from the heap that the moved
    /// horizon now covers go into the wheel first.
    fn enter(&mut self, b: u64) {
        let far = &mut self.far;
        let c = self.calendar.as_mut().expect("calendar built");
        debug_assert!(c.active.is_empty());
        c.cur = b;
        let i = (b as usize) & (BUCKETS - 1);
        // The bucket's buffer goes back to the spares, unless a burst made
        // it large: only buckets that hold keys own one, and none keeps
        // what a burst needed. (Buffers that stayed with their bucket grew,
        // one by one, to the largest burst any bucket held, thousands of
        // keys on a fat tree whose hosts all start at once: 45 % more peak
        // memory at k=32.)
        let mut buf = std::mem::take(&mut c.wheel[i]);
        c.active.extend_from_slice(&buf);
        buf.clear();
        if buf.capacity() > 0 && buf.capacity() <= SPARE_MAX {
            c.spare.push(buf);
        }
        c.occupied[i / 64] &= !(1 << (i % 64));
        c.in_wheel -= c.active.len();
        while let Some(&Reverse(k)) = far.peek() {
            if bucket(k) - b >= BUCKETS as u64 {
                break;
            }
            far.pop();
            // (Bucket `b` itself goes to `active`, sorted below.)
            let left = c.place(k);
            debug_assert!(left.is_none());
        }
        // Keys pushed in time order arrive in order (a bucket whose keys
        // all share one time, as on fabrics of identical links, always
        // does): turning them around is cheaper than sorting, most of
        // whose cost was the calls for small buckets.
        if c.active.is_sorted() {
            c.active.reverse();
        } else {
            c.active.sort_unstable_by(|a, b| b.cmp(a));
        }
    }

    /// Makes sure the next key, if any, is at the end of `active` (with
    /// the calendar built).
    #[inline]
    fn ready(&mut self) {
        let Some(c) = self.calendar.as_ref() else {
            return;
        };
        if !c.active.is_empty() {
            return;
        }
        let b = if c.in_wheel > 0 {
            c.next_occupied()
        } else if let Some(&Reverse(k)) = self.far.peek() {
            bucket(k)
        } else {
            return;
        };
        self.enter(b);
    }

    fn build_calendar(&mut self) {
        let Some(&Reverse(first)) = self.far.peek() else {
            return;
        };
        self.calendar = Some(Calendar {
            cur: 0,
            active: Vec::new(),
            wheel: vec![Vec::new(); BUCKETS],
            occupied: vec![0; WORDS],
            in_wheel: 0,
            spare: Vec::new(),
        });
        self.enter(bucket(first));
    }

    /// Every key in order, with fresh sequence numbers from 1.
    fn renumber(&mut self) {
        let mut keys: Vec<u128> = std::mem::take(&mut self.far)
            .into_iter()
            .map(|Reverse(k)| k)
            .collect();
        if let Some(c) = self.calendar.as_mut() {
            keys.append(&mut c.active);
            for b in &mut c.wheel {
                keys.append(b);
            }
            c.occupied.fill(0);
            c.in_wheel = 0;
        }
        keys.sort_unstable();
        self.seq = keys.len() as u32;
        for (i, k) in keys.into_iter().enumerate() {
            let k = pack(Instant((k >> 64) as u64), i as u32 + 1, k as u32);
            self.insert(k);
        }
    }

    #[inline]
    fn insert(&mut self, k: u128) {
        match self.calendar.as_mut() {
            Some(c) => {
                if let Some(k) = c.place(k) {
                    self.far.push(Reverse(k));
                }
            }
            None => self.far.push(Reverse(k)),
        }
    }

    /// Schedules event code `slot` at `t`; ties in `t` keep push order.
    #[inline]
    pub fn push(&mut self, t: Instant, slot: u32) {
        if self.seq >= self.seq_limit {
            self.renumber();
        }
        self.seq += 1;
        self.insert_key(pack(t, self.seq, slot));
    }

    /// The next key, left in the queue.
    #[inline]
    pub fn peek(&mut self) -> Option<Key> {
        self.ready();
        match self.calendar.as_ref() {
            Some(c) => c.active.last().map(|k| unpack(*k)),
            None => self.far.peek().map(|Reverse(k)| unpack(*k)),
        }
    }

    /// Removes and returns the next key.
    #[inline]
    pub fn take(&mut self) -> Option<Key> {
        self.ready();
        let k = match self.calendar.as_mut() {
            Some(c) => c.active.pop(),
            None => self.far.pop().map(|Reverse(k)| k),
        }?;
        self.len -= 1;
        Some(unpack(k))
    }

    /// The event code of the key `n` places after the next one, when the
    /// calendar's current bucket holds it (for prefetching; no side
    /// effects).
    #[inline]
    pub fn upcoming(&self, n: usize) -> Option<u32> {
        let a = &self.calendar.as_ref()?.active;
        let i = a.len().checked_sub(n + 1)?;
        Some(a[i] as u32)
    }

    /// Removes and returns the next key, whole (time, sequence, code),
    /// if it is earlier than `end`, without moving the calendar to a
    /// bucket that starts at or after `end`: keys pushed afterwards for
    /// times from `end` on are then appended to their buckets, not
    /// inserted into the sorted one being run (which cost a copy of that
    /// bucket each). The window loop gathers a window's keys with it.
    #[inline]
    pub(crate) fn take_before(&mut self, end: Instant) -> Option<u128> {
        // The first bucket that starts at or after `end`.
        let end_bucket = end.as_ps().div_ceil(1 << BUCKET_BITS);
        if let Some(c) = self.calendar.as_ref() {
            if c.active.is_empty() {
                let b = if c.in_wheel > 0 {
                    c.next_occupied()
                } else {
                    bucket(self.far.peek()?.0)
                };
                if b >= end_bucket {
                    return None;
                }
                self.enter(b);
            }
        }
        let k = match self.calendar.as_mut() {
            Some(c) => {
                let k = *c.active.last()?;
                if (k >> 64) as u64 >= end.as_ps() {
                    return None;
                }
                c.active.pop()
            }
            None => {
                let Reverse(k) = *self.far.peek()?;
                if (k >> 64) as u64 >= end.as_ps() {
                    return None;
                }
                self.far.pop().map(|Reverse(k)| k)
            }
        }?;
        self.len -= 1;
        Some(k)
    }

    /// Files a key the caller stamped itself (the window loop's keys,
    /// whose second field is the scheduling node's own count, not this
    /// queue's sequence; see `World::set_event_order`). Such keys may
    /// repeat; equal keys name the same event, in either order.
    #[inline]
    pub(crate) fn insert_key(&mut self, k: u128) {
        self.insert(k);
        self.len += 1;
        if self.calendar.is_none() && self.far.len() >= self.calendar_after {
            self.build_calendar();
        }
    }

    /// Keeps only the keys `keep` accepts, handing it each key in order;
    /// the calendar starts again from the first key kept.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(u128) -> bool) {
        let mut fresh = EventQueue {
            seq: self.seq,
            seq_limit: self.seq_limit,
            calendar_after: self.calendar_after,
            ..EventQueue::default()
        };
        while let Some(k) = self.take_before(Instant(u64::MAX)) {
            if keep(k) {
                fresh.insert_key(k);
            }
        }
        *self = fresh;
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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
        /// Take the next key if it is earlier than now + delta.
        TakeBefore(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..2_000, any::<bool>()).prop_map(|(d, early)| Op::Push(d, early)),
            // Around the calendar's horizon (2^24 ps), to wrap its wheel.
            2 => (0u64..(1 << 26)).prop_map(|d| Op::Push(d, false)),
            1 => (0u64..(1 << 40)).prop_map(|d| Op::Push(d, false)),
            4 => Just(Op::Take),
            1 => Just(Op::Peek),
            2 => (0u64..(1 << 26)).prop_map(Op::TakeBefore),
        ]
    }

    proptest! {
        /// Events come out in exactly the order of a binary heap over
        /// (time, insertion order), also across renumberings.
        #[test]
        fn same_order_as_a_binary_heap(
            ops in proptest::collection::vec(op(), 1..400),
            seq_limit in prop_oneof![Just(u32::MAX), 20u32..600],
            calendar_after in prop_oneof![Just(usize::MAX), 1usize..40],
        ) {
            let mut q = EventQueue { seq_limit, calendar_after, ..EventQueue::default() };
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
                    Op::TakeBefore(d) => {
                        let end = now + d;
                        let got = q
                            .take_before(Instant(end))
                            .map(|k| (unpack(k).t.as_ps(), u64::from(unpack(k).slot)));
                        let want = match model.peek() {
                            Some(Reverse((t, _))) if *t < end => model.pop().map(|Reverse(k)| k),
                            _ => None,
                        };
                        prop_assert_eq!(got, want);
                        if let Some((t, _)) = got {
                            now = now.max(t);
                        }
                    }
                    Op::Peek => {
                        let got = q.peek().map(|k| (k.t.as_ps(), u64::from(k.slot)));
                        prop_assert_eq!(got, model.peek().map(|Reverse(k)| *k));
                        // With the calendar built, the prefetcher sees the
                        // next key.
                        if q.calendar.is_some() {
                            prop_assert_eq!(q.upcoming(0).map(u64::from), got.map(|g| g.1));
                        }
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

    /// Where keys live, which the order alone does not show: a heap until
    /// the threshold, then the calendar for the next 2^24 ps from the first
    /// key's bucket and the heap beyond, the horizon moving with the clock.
    #[test]
    fn the_near_future_lives_in_the_calendar_and_the_rest_in_the_heap() {
        let mut q = EventQueue {
            calendar_after: 4,
            ..EventQueue::default()
        };
        for (slot, t) in [0u64, 1_000, 2_000].into_iter().enumerate() {
            q.push(Instant(t), slot as u32);
        }
        assert!(q.calendar.is_none() && q.far.len() == 3);
        for (slot, t) in [(1u64 << 24) - 1, 1 << 24, 1 << 30].into_iter().enumerate() {
            q.push(Instant(t), 3 + slot as u32);
        }
        let c = q.calendar.as_ref().expect("built at 4 keys");
        // Bucket 0 (0 and 1,000 ps) is running; 2,000 ps and the last
        // picosecond of the horizon wait in the wheel; 2^24 ps is beyond.
        assert_eq!((c.cur, c.active.len(), c.in_wheel), (0, 2, 2));
        assert_eq!(q.far.len(), 2);
        for want in 0..4 {
            assert_eq!(q.take().map(|k| k.slot), Some(want));
        }
        // The clock reached 2^24 ps: that key moved in, 2^30 did not.
        assert_eq!(q.peek().map(|k| k.slot), Some(4));
        assert_eq!(q.calendar.as_ref().map(|c| c.cur), Some(1 << 14));
        assert_eq!(q.far.len(), 1);
        assert_eq!(q.upcoming(0), Some(4));
        assert_eq!(q.upcoming(1), None);
    }

    /// A burst's large buffer is not kept for reuse; small ones are.
    #[test]
    fn a_bursts_buffer_is_released_small_ones_are_reused() {
        let mut q = EventQueue {
            calendar_after: 1,
            ..EventQueue::default()
        };
        q.push(Instant(0), 0);
        for i in 0..1_000 {
            q.push(Instant(5_000), i);
        }
        for i in 0..8 {
            q.push(Instant(9_000), i);
        }
        while q.take().is_some() {}
        let c = q.calendar.as_ref().expect("built");
        assert_eq!(c.spare.len(), 1);
        assert!(c
            .spare
            .iter()
            .all(|b| b.capacity() <= SPARE_MAX && b.is_empty()));
    }

    /// Renumbering restarts the sequence from the keys held, so it never
    /// reaches its limit while the queue is small.
    #[test]
    fn a_renumbering_restarts_the_sequence_from_the_keys_held() {
        let mut q = EventQueue {
            seq_limit: 8,
            ..EventQueue::default()
        };
        for i in 0..20 {
            q.push(Instant(u64::from(i)), i);
        }
        for _ in 0..18 {
            q.take();
        }
        q.push(Instant(100), 99);
        assert_eq!((q.len(), q.seq), (3, 3));
    }

    /// Taking a window's keys leaves the calendar on the window's last
    /// bucket, so a key pushed just past the window is filed in the
    /// wheel (appended), not inserted into the bucket being run; and a
    /// stamped key sorts after every key pushed before it at its time.
    #[test]
    fn taking_a_window_does_not_enter_the_bucket_after_it() {
        let mut q = EventQueue {
            calendar_after: 1,
            ..EventQueue::default()
        };
        q.push(Instant(0), 0);
        q.push(Instant(1 << 20), 1);
        assert_eq!(
            q.take_before(Instant(1 << 20)).map(|k| unpack(k).slot),
            Some(0)
        );
        assert_eq!(q.take_before(Instant(1 << 20)), None);
        let c = q.calendar.as_ref().expect("built");
        assert_eq!(
            (c.cur, c.active.len()),
            (0, 0),
            "still on the window's bucket"
        );
        q.push(Instant((1 << 20) + 5), 2);
        assert_eq!(q.calendar.as_ref().map(|c| c.in_wheel), Some(2));
        q.insert_key(pack(Instant(1 << 20), 0, 3));
        assert_eq!(q.len(), 3);
        let order: Vec<u32> = std::iter::from_fn(|| q.take()).map(|k| k.slot).collect();
        assert_eq!(order, [3, 1, 2], "a stamped key sorts by its own fields");
    }

    /// Stamped keys build the calendar as pushed ones do, once the heap
    /// holds enough of them, and never again: a key beyond the horizon
    /// waits in the heap while later keys go to the calendar, and every
    /// key comes out, in key order.
    #[test]
    fn stamped_keys_build_the_calendar_once() {
        let mut q = EventQueue {
            calendar_after: 4,
            ..EventQueue::default()
        };
        for i in 0..3 {
            q.insert_key(pack(Instant(10 + i), 0, i as u32));
        }
        assert!(q.calendar.is_none(), "three keys: the heap alone");
        q.insert_key(pack(Instant(13), 0, 3));
        assert!(q.calendar.is_some(), "four keys: the calendar");
        let far = Instant(1 << 40);
        q.insert_key(pack(far, 0, 9));
        assert_eq!(q.far.len(), 1, "beyond the horizon");
        for i in 4..8 {
            q.insert_key(pack(Instant(10 + i), 0, i as u32));
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.take()).map(|k| k.slot).collect();
        assert_eq!(order, [0, 1, 2, 3, 4, 5, 6, 7, 9]);
    }

    /// Keeping some keys leaves the rest of the queue as it was: its
    /// sequence goes on (a key pushed afterwards sorts after the kept
    /// ones of its time), and so do its limits (renumbering, the
    /// calendar's threshold).
    #[test]
    fn retain_keeps_the_sequence_and_the_limits() {
        let mut q = EventQueue {
            seq_limit: 8,
            calendar_after: 3,
            ..EventQueue::default()
        };
        for slot in 0..4 {
            q.push(Instant(10), slot);
        }
        q.retain(|k| k as u32 % 2 == 1);
        assert_eq!((q.len(), q.seq, q.seq_limit), (2, 4, 8));
        assert!(q.calendar.is_none(), "two keys: under the threshold of 3");
        q.push(Instant(10), 7);
        assert!(q.calendar.is_some(), "three: the calendar");
        let order: Vec<u32> = std::iter::from_fn(|| q.take()).map(|k| k.slot).collect();
        assert_eq!(order, [1, 3, 7]);
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
