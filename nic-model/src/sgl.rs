//! Scatter-gather lists: one logical run of bytes made of blocks in
//! registered memory.
//!
//! A work request may name a list of (key, address, length) entries instead
//! of one contiguous buffer: a WRITE or SEND gathers its bytes from them, a
//! READ or a posted receive scatters into them, with no host copy. A NIC
//! fetches the entries with the descriptor, so a request carries at most
//! `max_sge` of them (`NicConfig::max_sge`; 30 on the ConnectX-5 the
//! non-contiguous study measured). An indirect key ([`crate::memory`])
//! names such a list once, under a key of its own, with no per-request
//! limit.

use std::sync::Arc;

use crate::ids::MrKey;

/// One scatter-gather entry: `len` bytes at `addr` under `key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Sge {
    /// Region key.
    pub key: MrKey,
    /// First address.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
}

/// A list of entries read as one run of bytes: byte `o` of the run is in
/// the entry whose cumulative start is the last at or before `o`. Cheap to
/// clone (shared).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Sgl {
    entries: Arc<[Sge]>,
    /// `starts[i]`: offset of entry `i` in the run; one more at the end
    /// (the total).
    starts: Arc<[u64]>,
}

/// A part of one entry that an access touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Piece {
    /// Index of the entry.
    pub entry: usize,
    /// Key, address and length of the part.
    pub sge: Sge,
    /// Where the part starts in the accessed range.
    pub at: u64,
}

impl Sgl {
    /// A list of `entries`. `None` if their total length overflows 64 bits.
    pub fn new(entries: Vec<Sge>) -> Option<Sgl> {
        let mut starts = Vec::with_capacity(entries.len() + 1);
        let mut total = 0u64;
        for e in &entries {
            starts.push(total);
            total = total.checked_add(e.len)?;
        }
        starts.push(total);
        Some(Sgl {
            entries: entries.into(),
            starts: starts.into(),
        })
    }

    /// The entries.
    pub fn entries(&self) -> &[Sge] {
        &self.entries
    }

    /// Total bytes.
    pub fn len(&self) -> u64 {
        self.starts[self.starts.len() - 1]
    }

    /// Whether the list holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parts of entries that `[offset, offset + len)` of the run
    /// touches, in order. Empty if the range is empty or leaves the run.
    pub fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        let end = offset.checked_add(len).filter(|&e| e <= self.len());
        // The entry holding `offset`: the last start at or before it
        // (zero-length entries are skipped by the walk below).
        let first = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let mut i = first;
        let mut at = offset;
        std::iter::from_fn(move || {
            let end = end?;
            while i < self.entries.len() {
                let (s, e) = (self.starts[i], self.starts[i + 1]);
                if at >= end {
                    return None;
                }
                i += 1;
                if e <= at {
                    continue;
                }
                let lo = at.max(s);
                let hi = end.min(e);
                at = hi;
                let ent = self.entries[i - 1];
                return Some(Piece {
                    entry: i - 1,
                    sge: Sge {
                        key: ent.key,
                        addr: ent.addr + (lo - s),
                        len: hi - lo,
                    },
                    at: lo - offset,
                });
            }
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(addr: u64, len: u64) -> Sge {
        Sge {
            key: MrKey(1),
            addr,
            len,
        }
    }

    #[test]
    fn an_access_is_cut_at_entry_boundaries() {
        let l = Sgl::new(vec![sge(100, 4), sge(0, 0), sge(200, 4), sge(300, 8)]).unwrap();
        assert_eq!(l.len(), 16);
        let p: Vec<(usize, u64, u64, u64)> = l
            .pieces(2, 8)
            .map(|p| (p.entry, p.sge.addr, p.sge.len, p.at))
            .collect();
        assert_eq!(p, [(0, 102, 2, 0), (2, 200, 4, 2), (3, 300, 2, 6)]);
        assert_eq!(l.pieces(12, 4).count(), 1);
        assert_eq!(l.pieces(12, 5).count(), 0, "past the end");
        assert_eq!(l.pieces(3, 0).count(), 0);
        assert_eq!(l.pieces(u64::MAX, 2).count(), 0);
        assert!(Sgl::new(vec![sge(0, u64::MAX), sge(0, 1)]).is_none());
        assert!(!l.is_empty());
        assert!(Sgl::new(vec![sge(5, 0)]).unwrap().is_empty());
        assert!(Sgl::new(Vec::new()).unwrap().is_empty());
    }
}
