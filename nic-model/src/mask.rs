//! `Mask`: the receive registry's bitmask (the patent's barrel-shifter rule).
//!
//! An operation of `n` packets gets a mask of `n` bits rounded up to whole
//! 64-bit words. Bits for packets that will never come (positions `n` and
//! above) are set from the start, so "complete" is simply "every bit set".
//! Setting a bit that is already set changes nothing: that packet is a
//! duplicate. docs/receive-registry.md works the patent's example.

/// A fixed-size bitmask with the never-arriving bits pre-set.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Mask {
    words: Vec<u64>,
    count: u32,
    missing: u32,
}

impl Mask {
    /// A mask for `count` expected packets, none received yet.
    pub fn new(count: u32) -> Mask {
        let n_words = (count as usize).div_ceil(64).max(1);
        let mut words = vec![0u64; n_words];
        let tail = count as usize % 64;
        if count == 0 {
            words[0] = u64::MAX;
        } else if tail != 0 {
            // Pre-set the bits beyond the expected packets.
            words[n_words - 1] = !0u64 << tail;
        }
        Mask {
            words,
            count,
            missing: count,
        }
    }

    /// Expected packets.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Packets not yet received.
    pub fn missing(&self) -> u32 {
        self.missing
    }

    /// Sets bit `index`. Returns `true` if it was clear (a new packet),
    /// `false` if already set (a duplicate) or out of range.
    pub fn set(&mut self, index: u32) -> bool {
        if index >= self.count {
            return false;
        }
        let (w, b) = (index as usize / 64, index % 64);
        let old = self.words[w];
        let new = old | (1u64 << b);
        if new == old {
            return false;
        }
        self.words[w] = new;
        self.missing -= 1;
        true
    }

    /// Whether bit `index` is set.
    pub fn is_set(&self, index: u32) -> bool {
        let w = index as usize / 64;
        w < self.words.len() && self.words[w] & (1u64 << (index % 64)) != 0
    }

    /// The first and the last packet not yet received (`None` when all
    /// are): a retried READ asks for this span only.
    pub fn missing_span(&self) -> Option<(u32, u32)> {
        let first = self.words.iter().position(|w| *w != u64::MAX)?;
        let last = self.words.iter().rposition(|w| *w != u64::MAX)?;
        let lo = first as u32 * 64 + self.words[first].trailing_ones();
        let hi = last as u32 * 64 + 63 - self.words[last].leading_ones();
        Some((lo, hi))
    }

    /// Every bit set: the operation is complete.
    pub fn is_full(&self) -> bool {
        self.words.iter().all(|w| *w == u64::MAX)
    }

    /// The 64 bits starting at word `word` (for selective ACKs).
    pub fn word(&self, word: usize) -> u64 {
        self.words.get(word).copied().unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_span_runs_from_the_first_hole_to_the_last() {
        let mut m = Mask::new(130);
        assert_eq!(m.missing_span(), Some((0, 129)));
        for i in (0..130).filter(|i| ![3, 70, 100].contains(i)) {
            m.set(i);
        }
        assert_eq!(m.missing_span(), Some((3, 100)));
        m.set(3);
        m.set(100);
        assert_eq!(m.missing_span(), Some((70, 70)));
        m.set(70);
        assert_eq!(m.missing_span(), None);
    }

    /// The patent's worked example, on the low 32 bits of our first word:
    /// a 4 KB operation in 512 B packets expects 8 packets; after the FIRST
    /// packet the mask is 1111 1111 1111 1111 1111 1111 0000 0001.
    #[test]
    fn patent_example_4k_in_512b_packets() {
        let mut m = Mask::new(8);
        assert_eq!(m.word(0) as u32, 0b1111_1111_1111_1111_1111_1111_0000_0000);
        assert_eq!((m.count(), m.missing()), (8, 8));
        assert!(m.set(0));
        assert_eq!(m.missing(), 7);
        assert_eq!(m.word(0) as u32, 0b1111_1111_1111_1111_1111_1111_0000_0001);
        // The same packet again leaves the mask unchanged: a duplicate.
        assert!(!m.set(0));
        for i in 1..8 {
            assert!(!m.is_full());
            assert!(m.set(i));
        }
        assert!(m.is_full());
        assert_eq!(m.missing(), 0);
    }

    #[test]
    fn word_boundaries_and_out_of_range() {
        for count in [1u32, 63, 64, 65, 128, 200] {
            let mut m = Mask::new(count);
            assert!(!m.set(count), "index == count is out of range");
            for i in (0..count).rev() {
                assert!(!m.is_full());
                assert!(m.set(i));
            }
            assert!(m.is_full(), "count {count}");
        }
        assert!(Mask::new(0).is_full());
    }

    #[test]
    fn bits_past_the_last_word_read_as_clear() {
        // A hostile packet may carry any segment index: asking about a bit
        // past the mask's words is an answer (not set), never a panic.
        for count in [1u32, 64, 100] {
            let m = Mask::new(count);
            let words = count.div_ceil(64).max(1);
            assert!(!m.is_set(64 * words));
            assert!(!m.is_set(u32::MAX));
            assert_eq!(m.word(words as usize), u64::MAX);
        }
    }
}
