//! A region's bytes, and what a state fingerprint reads instead of them:
//! one 128-bit value for the whole region, kept up to date as writes
//! land, so that a fingerprint taken before every event costs sixteen
//! bytes per region, and a write costs one rehash of the 4 KiB blocks it
//! touched.
//!
//! The region's value is the XOR, over its blocks, of a hash of (the
//! block's number, the hash of its bytes): a block that changes is taken
//! out and put back in without reading the others, and a block's place
//! is part of what it adds (two blocks swapped give another value).
//!
//! Every write goes through [`RegionBytes::write_at`] (which marks the
//! blocks it touches) or through `DerefMut` (which forgets every hash),
//! so a kept value is never stale. A region registered zeroed
//! ([`RegionBytes::zeroed`]) knows its blocks' hashes without reading
//! them: every block of zeros hashes alike.
//!
//! A zeroed region also remembers which blocks were ever written, so
//! that when it goes its buffer can be zeroed again block by block and
//! kept for the next region of its length (a few per thread, see
//! [`POOL_BYTES`]): `udrma check` runs one scenario hundreds of
//! thousands of times, and a messaging host registers 2 MiB of send
//! buffers in each run, of which it writes a few kilobytes.

use core::ops::{Deref, DerefMut, Range};
use std::hash::{DefaultHasher, Hasher};
use std::sync::OnceLock;

/// Bytes per hashed block.
pub const BLOCK: usize = 4096;

/// A region's bytes (empty for a phantom region).
#[derive(Clone, Default)]
pub struct RegionBytes {
    data: Vec<u8>,
    /// What is known of the blocks' hashes, as of before the writes
    /// `dirty` marks.
    known: Known,
    /// Blocks written since `known` was taken (one bit each; empty when
    /// nothing is known).
    dirty: Vec<u64>,
    /// For a region registered zeroed: the blocks ever written (`None`
    /// once a write went through `DerefMut`).
    touched: Option<Vec<u64>>,
}

#[derive(Clone, Default)]
enum Known {
    /// Nothing: the first refresh reads every block.
    #[default]
    Nothing,
    /// Every block held zeros.
    Zero,
    /// Each block's hash, and the region's value.
    Hashed { blocks: Vec<u128>, value: u128 },
}

impl RegionBytes {
    /// `len` zeroed bytes, whose hashes are known without reading them.
    pub fn zeroed(len: usize) -> RegionBytes {
        let words = blocks(len).div_ceil(64);
        RegionBytes {
            data: pool::take(len).unwrap_or_else(|| vec![0; len]),
            known: Known::Zero,
            dirty: vec![0; words],
            touched: Some(vec![0; words]),
        }
    }

    /// Copies `data` into `span` (which must lie in the region, as for a
    /// slice), marking the blocks it touches.
    pub fn write_at(&mut self, span: Range<usize>, data: &[u8]) {
        self.data[span.clone()].copy_from_slice(data);
        if span.is_empty() {
            return;
        }
        let marks = span.start / BLOCK..=(span.end - 1) / BLOCK;
        if !matches!(self.known, Known::Nothing) {
            for b in marks.clone() {
                self.dirty[b / 64] |= 1 << (b % 64);
            }
        }
        if let Some(touched) = &mut self.touched {
            for b in marks {
                touched[b / 64] |= 1 << (b % 64);
            }
        }
    }

    /// The bytes, as a vector.
    pub fn into_vec(mut self) -> Vec<u8> {
        self.touched = None;
        std::mem::take(&mut self.data)
    }

    /// Brings the region's value up to date, rehashing only the blocks
    /// written since the last refresh (or every block, the first time,
    /// unless the region was registered zeroed), and keeps it so from
    /// now on.
    pub fn refresh_hashes(&mut self) {
        let n = blocks(self.data.len());
        self.known = match std::mem::take(&mut self.known) {
            Known::Nothing => {
                let blocks: Vec<u128> = (0..n).map(|b| content_hash(self.block(b))).collect();
                let value = blocks
                    .iter()
                    .enumerate()
                    .fold(0, |v, (b, &c)| v ^ placed(b, c));
                Known::Hashed { blocks, value }
            }
            Known::Zero => {
                let mut blocks: Vec<u128> =
                    (0..n).map(|b| zero_hash(self.block(b).len())).collect();
                let mut value = zero_value(self.data.len());
                self.rehash_written(&mut blocks, &mut value);
                Known::Hashed { blocks, value }
            }
            Known::Hashed {
                mut blocks,
                mut value,
            } => {
                self.rehash_written(&mut blocks, &mut value);
                Known::Hashed { blocks, value }
            }
        };
        // (Cleared in place: this runs for every region before every
        // event of a fingerprinted run.)
        let words = n.div_ceil(64);
        if self.dirty.len() == words {
            self.dirty.fill(0);
        } else {
            self.dirty = vec![0; words];
        }
    }

    /// Rehashes the blocks `dirty` marks into `blocks` and the region's
    /// `value`.
    fn rehash_written(&self, blocks: &mut [u128], value: &mut u128) {
        for b in marked(&self.dirty) {
            let c = content_hash(self.block(b));
            *value ^= placed(b, blocks[b]) ^ placed(b, c);
            blocks[b] = c;
        }
    }

    /// The region's value: the kept one if nothing was written since the
    /// last refresh, else computed from the bytes now (the same value
    /// either way).
    pub fn value(&self) -> u128 {
        match &self.known {
            Known::Hashed { value, .. } if self.dirty.iter().all(|&w| w == 0) => *value,
            Known::Zero if self.dirty.iter().all(|&w| w == 0) => zero_value(self.data.len()),
            _ => (0..blocks(self.data.len()))
                .fold(0, |v, b| v ^ placed(b, content_hash(self.block(b)))),
        }
    }

    fn block(&self, b: usize) -> &[u8] {
        &self.data[b * BLOCK..((b + 1) * BLOCK).min(self.data.len())]
    }
}

/// Blocks in `len` bytes.
fn blocks(len: usize) -> usize {
    len.div_ceil(BLOCK)
}

/// The blocks a bit set marks, in order.
fn marked(words: &[u64]) -> impl Iterator<Item = usize> + '_ {
    words.iter().enumerate().flat_map(|(w, &word)| {
        let mut bits = word;
        core::iter::from_fn(move || {
            (bits != 0).then(|| {
                let b = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                b
            })
        })
    })
}

/// Two SipHashes with fixed, different keys (the same in every process)
/// of what `feed` writes, as one 128-bit value.
fn sip128(feed: impl Fn(&mut DefaultHasher)) -> u128 {
    let mut a = DefaultHasher::new();
    let mut b = DefaultHasher::new();
    b.write_u16(0x5eed);
    feed(&mut a);
    feed(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// The hash of a block's bytes.
fn content_hash(block: &[u8]) -> u128 {
    #[cfg(test)]
    tests::HASHED.with(|n| n.set(n.get() + 1));
    sip128(|h| h.write(block))
}

/// What block `b` with content hash `c` adds to its region's value.
fn placed(b: usize, c: u128) -> u128 {
    sip128(|h| {
        h.write_u64(b as u64);
        h.write_u128(c);
    })
}

/// The content hash of `len` zeros (a whole block's, kept).
fn zero_hash(len: usize) -> u128 {
    static WHOLE: OnceLock<u128> = OnceLock::new();
    if len == BLOCK {
        *WHOLE.get_or_init(|| content_hash(&[0; BLOCK]))
    } else {
        content_hash(&vec![0; len])
    }
}

/// Whole zero blocks whose summed value is kept (64 MiB of them).
const ZERO_PREFIX: usize = 1 << 14;

/// The value of a region of `len` zeros.
fn zero_value(len: usize) -> u128 {
    static PREFIX: OnceLock<Vec<u128>> = OnceLock::new();
    let whole = len / BLOCK;
    let mut v = if whole <= ZERO_PREFIX {
        PREFIX.get_or_init(|| {
            let z = zero_hash(BLOCK);
            let mut acc = 0;
            let mut out = Vec::with_capacity(ZERO_PREFIX + 1);
            out.push(0);
            for b in 0..ZERO_PREFIX {
                acc ^= placed(b, z);
                out.push(acc);
            }
            out
        })[whole]
    } else {
        let z = zero_hash(BLOCK);
        (0..whole).fold(0, |v, b| v ^ placed(b, z))
    };
    if len % BLOCK != 0 {
        v ^= placed(whole, zero_hash(len % BLOCK));
    }
    v
}

impl From<Vec<u8>> for RegionBytes {
    fn from(data: Vec<u8>) -> RegionBytes {
        RegionBytes {
            data,
            known: Known::Nothing,
            dirty: Vec::new(),
            touched: None,
        }
    }
}

impl Deref for RegionBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl DerefMut for RegionBytes {
    /// Any write but [`RegionBytes::write_at`]: every block may change,
    /// so what was known is forgotten (the next refresh reads them all).
    fn deref_mut(&mut self) -> &mut [u8] {
        self.known = Known::Nothing;
        self.dirty = Vec::new();
        self.touched = None;
        &mut self.data
    }
}

impl Drop for RegionBytes {
    /// A zeroed region's buffer, zeroed again where it was written, is
    /// kept for the next region of its length.
    fn drop(&mut self) {
        let Some(touched) = self.touched.take() else {
            return;
        };
        if self.data.len() < pool::SMALLEST {
            return;
        }
        for b in marked(&touched) {
            let end = ((b + 1) * BLOCK).min(self.data.len());
            self.data[b * BLOCK..end].fill(0);
        }
        pool::give(std::mem::take(&mut self.data));
    }
}

/// Most bytes of zeroed buffers a thread keeps for later regions.
pub const POOL_BYTES: usize = 32 << 20;

/// Zeroed buffers kept for later regions of the same length.
mod pool {
    use std::cell::RefCell;

    /// Smaller buffers are not kept (allocating them costs little).
    pub const SMALLEST: usize = 64 << 10;

    /// Most buffers a thread keeps.
    pub const MOST: usize = 16;

    std::thread_local! {
        static KEPT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    }

    /// A kept buffer of exactly `len` zeros.
    pub fn take(len: usize) -> Option<Vec<u8>> {
        if len < SMALLEST {
            return None;
        }
        KEPT.with(|k| {
            let mut k = k.borrow_mut();
            let i = k.iter().position(|b| b.len() == len)?;
            let b = k.swap_remove(i);
            debug_assert!(b.iter().all(|&x| x == 0), "a kept buffer is all zeros");
            Some(b)
        })
    }

    /// Keeps `buf` (all zeros) if there is room.
    pub fn give(buf: Vec<u8>) {
        // (At thread exit the pool may be gone: the buffer is freed.)
        let _ = KEPT.try_with(|k| {
            let mut k = k.borrow_mut();
            let held: usize = k.iter().map(Vec::len).sum();
            if k.len() < MOST && held + buf.len() <= super::POOL_BYTES {
                k.push(buf);
            }
        });
    }
}

impl PartialEq for RegionBytes {
    fn eq(&self, other: &RegionBytes) -> bool {
        self.data == other.data
    }
}

impl Eq for RegionBytes {}

impl core::fmt::Debug for RegionBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.data.fmt(f)
    }
}

/// The region's value (its length is serialised beside it).
#[cfg(feature = "fingerprint")]
impl serde::Serialize for RegionBytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u128(self.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    std::thread_local! {
        /// Blocks' bytes hashed on this thread.
        pub static HASHED: Cell<usize> = const { Cell::new(0) };
    }

    /// Blocks hashed by `f`.
    fn hashes_in(f: impl FnOnce()) -> usize {
        let before = HASHED.with(Cell::get);
        f();
        HASHED.with(Cell::get) - before
    }

    #[test]
    fn a_refresh_reads_only_the_blocks_written_since_the_last() {
        zero_hash(BLOCK); // (kept once per process)
        let len = 70 * BLOCK;
        let mut r = RegionBytes::zeroed(len);
        // Block 65 (past the first bit word), then the end of block 0
        // up to its last byte: one block each.
        r.write_at(65 * BLOCK + 1..65 * BLOCK + 3, &[1, 2]);
        r.write_at(BLOCK - 4..BLOCK, &[3, 3, 3, 3]);
        assert_eq!(hashes_in(|| r.refresh_hashes()), 2, "two blocks written");
        assert_eq!(hashes_in(|| assert_eq!(r.value(), from_scratch(&r))), 70);
        assert_eq!(
            hashes_in(|| {
                r.value();
            }),
            0,
            "the kept value"
        );
        r.write_at(65 * BLOCK..65 * BLOCK + 1, &[9]);
        assert_eq!(hashes_in(|| r.refresh_hashes()), 1);
        assert_eq!(r.value(), from_scratch(&r));
        assert_eq!(hashes_in(|| r.refresh_hashes()), 0, "nothing written since");
        let untouched = RegionBytes::zeroed(len);
        assert_eq!(
            hashes_in(|| {
                untouched.value();
            }),
            0,
            "zeros read nothing"
        );
        let mut fresh = fresh(3 * BLOCK);
        assert_eq!(
            hashes_in(|| fresh.refresh_hashes()),
            3,
            "unknown bytes are read"
        );
    }

    #[test]
    fn a_zeroed_regions_value_before_any_refresh_counts_its_writes() {
        let mut r = RegionBytes::zeroed(2 * BLOCK);
        r.write_at(BLOCK + 1..BLOCK + 2, &[7]);
        assert_eq!(r.value(), from_scratch(&r));
        assert_ne!(r.value(), RegionBytes::zeroed(2 * BLOCK).value());
        assert_eq!(
            RegionBytes::from(vec![1, 2, 3]).into_vec(),
            vec![1, 2, 3],
            "a region's bytes come back as they are"
        );
    }

    fn fresh(len: usize) -> RegionBytes {
        RegionBytes::from((0..len).map(|i| (i * 7) as u8).collect::<Vec<u8>>())
    }

    /// The region's value as its definition says, from its bytes alone.
    fn from_scratch(r: &RegionBytes) -> u128 {
        RegionBytes::from(r.to_vec()).value()
    }

    #[test]
    fn a_kept_value_follows_the_writes_and_equals_one_taken_from_scratch() {
        let mut r = fresh(3 * BLOCK + 100);
        let before = r.value();
        r.refresh_hashes();
        assert_eq!(r.value(), before, "same before and after the first refresh");
        // A write across the first two blocks' boundary, then one in the
        // last (short) block.
        r.write_at(BLOCK - 2..BLOCK + 2, &[9, 9, 9, 9]);
        r.write_at(3 * BLOCK + 99..3 * BLOCK + 100, &[1]);
        let dirty = r.value();
        r.refresh_hashes();
        assert_eq!(
            r.value(),
            dirty,
            "a dirty region's value is computed on the fly"
        );
        assert_eq!(r.value(), from_scratch(&r));
        assert_ne!(r.value(), before);
        // Written back as it was: the value it had.
        r.write_at(BLOCK - 2..BLOCK + 2, &fresh(BLOCK + 2)[BLOCK - 2..]);
        r.write_at(
            3 * BLOCK + 99..3 * BLOCK + 100,
            &[(((3 * BLOCK + 99) * 7) as u8)],
        );
        r.refresh_hashes();
        assert_eq!(r.value(), before);
    }

    #[test]
    fn a_zeroed_region_knows_its_value_and_follows_writes_before_the_first_refresh() {
        for len in [0, 10, BLOCK, 2 * BLOCK + 1, 70 * BLOCK] {
            let mut r = RegionBytes::zeroed(len);
            assert_eq!(r.value(), from_scratch(&r), "{len} zeros");
            r.refresh_hashes();
            assert_eq!(r.value(), from_scratch(&r), "{len} zeros, refreshed");
            if len > 5 {
                let mut w = RegionBytes::zeroed(len);
                w.write_at(len - 5..len - 3, &[1, 2]);
                w.refresh_hashes();
                assert_eq!(
                    w.value(),
                    from_scratch(&w),
                    "{len}: written before the refresh"
                );
                assert_ne!(w.value(), r.value());
            }
        }
    }

    #[test]
    fn a_region_gone_leaves_its_buffer_zeroed_for_the_next_of_its_length() {
        let len = 3 * pool::SMALLEST + 7;
        let mut r = RegionBytes::zeroed(len);
        r.write_at(5..9, &[1, 2, 3, 4]);
        r.write_at(len - 2..len, &[5, 6]);
        let at = r.as_ptr();
        drop(r);
        let again = RegionBytes::zeroed(len);
        assert_eq!(again.as_ptr(), at, "the same buffer");
        assert!(again.iter().all(|&b| b == 0), "zeroed where it was written");
        // A buffer written through `DerefMut` is not kept.
        let mut w = again;
        w[100] = 1;
        drop(w);
        assert!(pool::take(len).is_none(), "not kept");
        // A block past the first bit word, zeroed again too.
        let big = 70 * BLOCK;
        let mut r = RegionBytes::zeroed(big);
        r.write_at(65 * BLOCK + 3..65 * BLOCK + 4, &[8]);
        drop(r);
        let again = RegionBytes::zeroed(big);
        assert!(again.iter().all(|&b| b == 0));
        // The smallest kept, and one byte less not.
        for (len, kept) in [(pool::SMALLEST, true), (pool::SMALLEST - 1, false)] {
            drop(RegionBytes::zeroed(len));
            assert_eq!(pool::take(len).is_some(), kept, "{len} bytes");
        }
    }

    #[test]
    fn zeros_past_the_kept_prefix_have_the_value_their_definition_gives() {
        let z = zero_hash(BLOCK);
        let defined = |whole: usize| (0..whole).fold(0, |v, b| v ^ placed(b, z));
        for whole in [
            ZERO_PREFIX - 1,
            ZERO_PREFIX,
            ZERO_PREFIX + 1,
            ZERO_PREFIX + 2,
        ] {
            assert_eq!(zero_value(whole * BLOCK), defined(whole), "{whole} blocks");
            assert_eq!(
                zero_value(whole * BLOCK + 5),
                defined(whole) ^ placed(whole, content_hash(&[0; 5])),
                "{whole} blocks and 5 bytes"
            );
        }
    }

    #[test]
    fn a_hash_has_two_independent_halves() {
        for bytes in [&b""[..], b"x", &[0; BLOCK]] {
            let h = content_hash(bytes);
            let (high, low) = (h >> 64, h & u128::from(u64::MAX));
            assert!(high != 0 && low != 0 && high != low, "{h:x}");
        }
    }

    #[test]
    fn the_pool_keeps_at_most_its_count_and_its_bytes() {
        for _ in 0..pool::MOST + 1 {
            pool::give(vec![0; pool::SMALLEST]);
        }
        let mut kept = 0;
        while pool::take(pool::SMALLEST).is_some() {
            kept += 1;
        }
        assert_eq!(kept, pool::MOST);
        let half = POOL_BYTES / 2 + 1;
        pool::give(vec![0; half]);
        pool::give(vec![0; half]);
        assert!(pool::take(half).is_some());
        assert!(
            pool::take(half).is_none(),
            "the second was over the bytes kept"
        );
    }

    #[test]
    fn regions_are_equal_when_their_bytes_are() {
        let mut a = RegionBytes::zeroed(10);
        assert_eq!(a, RegionBytes::from(vec![0; 10]));
        a.write_at(3..4, &[1]);
        assert_ne!(a, RegionBytes::zeroed(10));
    }

    #[test]
    fn two_blocks_swapped_give_another_value() {
        let mut a = RegionBytes::zeroed(2 * BLOCK);
        a.write_at(0..1, &[1]);
        let mut b = RegionBytes::zeroed(2 * BLOCK);
        b.write_at(BLOCK..BLOCK + 1, &[1]);
        a.refresh_hashes();
        b.refresh_hashes();
        assert_ne!(a.value(), b.value());
    }

    #[test]
    fn a_write_through_deref_mut_forgets_what_was_known() {
        let mut r = fresh(2 * BLOCK);
        r.refresh_hashes();
        r[BLOCK + 5] ^= 1;
        assert_eq!(r.value(), from_scratch(&r));
        r.refresh_hashes();
        assert_eq!(r.value(), from_scratch(&r));
        r.write_at(3..4, &[0]);
        r.refresh_hashes();
        assert_eq!(r.value(), from_scratch(&r));
    }
}
