//! `OpTable`: the DMA OP table. Every outstanding packet holds one slot;
//! its op number (slot in the low 16 bits, the slot's generation in the
//! high 16) travels in the packet and returns in the ACK/NACK.
//!
//! Freeing a slot bumps its generation, so an ACK that arrives after the
//! slot was recycled names a generation the slot no longer has and is
//! recognised as stale instead of acknowledging the wrong packet.

/// A packet's op number as it travels on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct OpNumber(pub u32);

impl OpNumber {
    /// The table slot.
    pub const fn slot(self) -> u16 {
        self.0 as u16
    }

    /// The slot's generation when this number was handed out.
    pub const fn generation(self) -> u16 {
        (self.0 >> 16) as u16
    }

    const fn new(slot: u16, generation: u16) -> OpNumber {
        OpNumber(((generation as u32) << 16) | slot as u32)
    }
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Slot<T> {
    generation: u16,
    value: Option<T>,
}

/// A bounded slab of outstanding packets, addressed by [`OpNumber`].
/// Slots are allocated as needed up to the capacity; the most recently
/// freed slot is reused first.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct OpTable<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u16>,
    used: usize,
    capacity: u16,
    peak: usize,
}

impl<T> OpTable<T> {
    /// An empty table of `capacity` slots.
    pub fn new(capacity: u16) -> OpTable<T> {
        OpTable {
            slots: Vec::new(),
            free: Vec::new(),
            used: 0,
            capacity,
            peak: 0,
        }
    }

    /// Slots in use.
    pub fn len(&self) -> usize {
        self.used
    }

    /// No slot in use.
    pub fn is_empty(&self) -> bool {
        self.used == 0
    }

    /// Most slots ever in use at once.
    pub fn peak(&self) -> usize {
        self.peak
    }

    /// Every slot in use.
    pub fn is_full(&self) -> bool {
        self.used >= usize::from(self.capacity)
    }

    /// Stores `value` in a free slot; `None` when the table is full.
    pub fn insert(&mut self, value: T) -> Option<OpNumber> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.slots.len() < usize::from(self.capacity) => {
                self.slots.push(Slot {
                    generation: 1,
                    value: None,
                });
                (self.slots.len() - 1) as u16
            }
            None => return None,
        };
        let s = &mut self.slots[usize::from(slot)];
        s.value = Some(value);
        self.used += 1;
        self.peak = self.peak.max(self.used);
        Some(OpNumber::new(slot, s.generation))
    }

    /// The entry `op` names, if its slot still has that generation.
    pub fn get(&self, op: OpNumber) -> Option<&T> {
        let s = self.slots.get(usize::from(op.slot()))?;
        if s.generation != op.generation() {
            return None;
        }
        s.value.as_ref()
    }

    /// Mutable [`OpTable::get`].
    pub fn get_mut(&mut self, op: OpNumber) -> Option<&mut T> {
        let s = self.slots.get_mut(usize::from(op.slot()))?;
        if s.generation != op.generation() {
            return None;
        }
        s.value.as_mut()
    }

    /// Frees the slot `op` names (if current) and bumps its generation.
    pub fn remove(&mut self, op: OpNumber) -> Option<T> {
        let s = self.slots.get_mut(usize::from(op.slot()))?;
        if s.generation != op.generation() {
            return None;
        }
        let value = s.value.take()?;
        s.generation = s.generation.wrapping_add(1).max(1);
        self.free.push(op.slot());
        self.used -= 1;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_slot_rejects_the_old_number() {
        let mut t = OpTable::new(2);
        assert!(t.is_empty());
        let a = t.insert("a").unwrap();
        assert_eq!((t.len(), t.is_empty()), (1, false));
        let b = t.insert("b").unwrap();
        assert!(t.is_full());
        assert_eq!(t.insert("c"), None);
        assert_eq!(t.remove(a), Some("a"));
        let c = t.insert("c").unwrap();
        assert_eq!(c.slot(), a.slot(), "the freed slot is reused");
        assert_ne!(c, a, "with a new generation");
        assert_eq!(t.get(a), None, "the stale number finds nothing");
        assert_eq!(t.remove(a), None);
        assert_eq!(t.get(c), Some(&"c"));
        assert_eq!(t.get(b), Some(&"b"));
        assert_eq!(t.peak(), 2);
        t.remove(b);
        t.remove(c);
        assert_eq!((t.len(), t.is_empty(), t.peak()), (0, true, 2));
    }
}
