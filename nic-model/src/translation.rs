//! The NIC's address translation cache for indirect keys.
//!
//! An indirect key (like an mlx5 user-mode memory registration, UMR) maps
//! one contiguous range onto a list of blocks. The NIC keeps that list in
//! host memory, `entries_per_line` entries to a line (16-byte entries in a
//! 64-byte line: 4), and each entry names a region whose own page table is
//! the translation's second level. Entries have lengths of their own, so
//! an offset does not index them: the NIC walks them from the first to the
//! block's ([`CostModel::translate_search`] per entry stepped over). To
//! move bytes through the key the NIC needs the line of every entry the
//! access touches. Lines
//! it holds in its translation cache cost [`CostModel::translate_hit`]; the
//! rest are read over PCIe and cost [`CostModel::translate_miss`], and push
//! the least recently used line of their set out.
//!
//! The cache is set-associative (`sets` × `ways` lines), as on-NIC
//! translation caches are. That is what makes an indirect key slow down as
//! its blocks grow in number, the non-contiguous study's finding: while
//! the key's lines fit, a repeated transfer hits every time; as they
//! outgrow their sets, more and more of them are evicted before they are
//! used again. The mechanism, not a fitted curve, produces the trend.
//!
//! [`CostModel::translate_hit`]: crate::CostModel::translate_hit
//! [`CostModel::translate_miss`]: crate::CostModel::translate_miss
//! [`CostModel::translate_search`]: crate::CostModel::translate_search

use crate::memory::MrKey;

/// Geometry of the translation cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct TranslationConfig {
    /// Indirect-key entries per line.
    pub entries_per_line: u32,
    /// Sets.
    pub sets: u32,
    /// Lines per set.
    pub ways: u32,
    /// Bytes per page of the page tables.
    pub page_size: u32,
    /// Page-table entries per line.
    pub pages_per_line: u32,
}

impl Default for TranslationConfig {
    /// 4 key entries (16 B each) or 8 page entries (8 B each) to a 64-byte
    /// line, 4 KiB pages, 16 sets of 4 ways: 64 lines.
    fn default() -> TranslationConfig {
        TranslationConfig {
            entries_per_line: 4,
            sets: 16,
            ways: 4,
            page_size: 4096,
            pages_per_line: 8,
        }
    }
}

/// Lines found and lines fetched by a translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Lookups {
    /// Lines found in the cache.
    pub hits: u64,
    /// Lines read from host memory.
    pub misses: u64,
}

impl Lookups {
    /// Adds another translation's lookups.
    pub fn add(&mut self, o: Lookups) {
        self.hits += o.hits;
        self.misses += o.misses;
    }
}

/// Tags of page-table lines carry this bit (key-entry lines do not).
const PAGE_LINE: u64 = 1 << 39;

/// The cache itself: for each set, its lines' tags with their last use.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct TranslationCache {
    cfg: TranslationConfig,
    sets: Vec<Vec<(u64, u64)>>,
    clock: u64,
}

impl TranslationCache {
    /// An empty cache. Zero sizes are raised to one.
    pub fn new(cfg: TranslationConfig) -> TranslationCache {
        let cfg = TranslationConfig {
            entries_per_line: cfg.entries_per_line.max(1),
            sets: cfg.sets.max(1),
            ways: cfg.ways.max(1),
            page_size: cfg.page_size.max(1),
            pages_per_line: cfg.pages_per_line.max(1),
        };
        TranslationCache {
            cfg,
            sets: vec![Vec::new(); cfg.sets as usize],
            clock: 0,
        }
    }

    /// Looks up the lines holding entries `first ..= last` of `key`'s
    /// table, filling what is missing.
    pub fn translate(&mut self, key: MrKey, first: usize, last: usize) -> Lookups {
        let per = self.cfg.entries_per_line as usize;
        let mut l = Lookups::default();
        for line in first / per..=last / per {
            if self.touch(key, line as u64 & (PAGE_LINE - 1)) {
                l.hits += 1;
            } else {
                l.misses += 1;
            }
        }
        l
    }

    /// Looks up the page-table lines for bytes `first ..= last` of the
    /// region under `key` (a direct key: the second level of an indirect
    /// key's translation, and all of a direct key's).
    pub fn translate_pages(&mut self, key: MrKey, first: u64, last: u64) -> Lookups {
        let per = u64::from(self.cfg.page_size) * u64::from(self.cfg.pages_per_line);
        let mut l = Lookups::default();
        for line in first / per..=last / per {
            if self.touch(key, PAGE_LINE | (line & (PAGE_LINE - 1))) {
                l.hits += 1;
            } else {
                l.misses += 1;
            }
        }
        l
    }

    /// Forgets every line of `key` (its key was destroyed or replaced).
    pub fn invalidate(&mut self, key: MrKey) {
        for set in &mut self.sets {
            set.retain(|(tag, _)| (tag >> 40) as u32 != key.0);
        }
    }

    fn touch(&mut self, key: MrKey, line: u64) -> bool {
        self.clock += 1;
        let tag = (u64::from(key.0) << 40) | line;
        // Spread consecutive lines over the sets (multiplicative hash).
        let h = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let set = &mut self.sets[(h % u64::from(self.cfg.sets)) as usize];
        if let Some(slot) = set.iter_mut().find(|(t, _)| *t == tag) {
            slot.1 = self.clock;
            return true;
        }
        if set.len() < self.cfg.ways as usize {
            set.push((tag, self.clock));
        } else if let Some(lru) = set.iter_mut().min_by_key(|(_, used)| *used) {
            *lru = (tag, self.clock);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeated(blocks: usize) -> Lookups {
        let mut c = TranslationCache::new(TranslationConfig::default());
        c.translate(MrKey(9), 0, blocks - 1);
        c.translate(MrKey(9), 0, blocks - 1)
    }

    #[test]
    fn a_small_key_hits_on_every_repeat_and_a_large_one_misses_more() {
        // 16 blocks: 4 lines, all cached after the first pass.
        assert_eq!(repeated(16), Lookups { hits: 4, misses: 0 });
        // Far more lines than the cache holds: almost every line misses.
        let big = repeated(4096);
        assert_eq!(big.hits + big.misses, 1024);
        assert!(big.misses > 1000, "{big:?}");
        // In between, the miss fraction grows with the block count.
        let frac = |n: usize| {
            let l = repeated(n);
            l.misses as f64 / (l.hits + l.misses) as f64
        };
        assert!(
            frac(128) <= frac(256) && frac(256) < frac(512),
            "{} {} {}",
            frac(128),
            frac(256),
            frac(512)
        );
    }

    #[test]
    fn entries_share_lines_four_to_a_line() {
        let mut c = TranslationCache::new(TranslationConfig::default());
        // Entries 4..=7 are one line; 8 starts the next.
        assert_eq!(c.translate(MrKey(1), 4, 7), Lookups { hits: 0, misses: 1 });
        assert_eq!(c.translate(MrKey(1), 5, 6), Lookups { hits: 1, misses: 0 });
        assert_eq!(c.translate(MrKey(1), 7, 8), Lookups { hits: 1, misses: 1 });
        assert_eq!(c.translate(MrKey(1), 0, 3).misses, 1);
        // Distinct page lines are distinct, however far apart.
        let per0 = 4096 * 8;
        assert_eq!(c.translate_pages(MrKey(9), 2 * per0, 2 * per0).misses, 1);
        assert_eq!(c.translate_pages(MrKey(9), 4 * per0, 4 * per0).misses, 1);
        // Page-table lines are another table: same numbers, other lines.
        let per = 4096 * 8;
        assert_eq!(c.translate_pages(MrKey(1), per, 2 * per - 1).misses, 1);
        assert_eq!(c.translate_pages(MrKey(1), per + 5, per + 9).hits, 1);
        assert_eq!(
            c.translate_pages(MrKey(1), 0, per).misses,
            1,
            "line 0 new, line 1 hit"
        );
    }

    #[test]
    fn a_set_holds_exactly_its_ways_least_recently_used_out() {
        let mut c = TranslationCache::new(TranslationConfig {
            sets: 1,
            ways: 2,
            entries_per_line: 1,
            ..TranslationConfig::default()
        });
        let k = MrKey(3);
        // Three lines round-robin through two ways: LRU misses every time.
        for _ in 0..3 {
            for e in 0..3 {
                assert_eq!(c.translate(k, e, e).misses, 1);
            }
        }
        // Two lines fit.
        c.translate(k, 0, 1);
        assert_eq!(c.translate(k, 0, 1).hits, 2);
        // Touching 0 makes 1 the least recent: 2 evicts 1, not 0.
        c.translate(k, 0, 0);
        c.translate(k, 2, 2);
        assert_eq!(c.translate(k, 0, 0).hits, 1);
        assert_eq!(c.translate(k, 1, 1).misses, 1);
    }

    #[test]
    fn invalidation_forgets_only_that_key() {
        let mut c = TranslationCache::new(TranslationConfig::default());
        c.translate(MrKey(1), 0, 3);
        c.translate(MrKey(2), 0, 3);
        c.invalidate(MrKey(1));
        assert_eq!(c.translate(MrKey(1), 0, 3).misses, 1);
        assert_eq!(c.translate(MrKey(2), 0, 3).hits, 1);
    }
}
