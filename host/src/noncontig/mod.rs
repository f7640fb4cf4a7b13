//! Moving non-contiguous data: the three methods and how a transfer is cut
//! into work requests for each.
//!
//! A transfer takes the bytes a sender's [`Layout`] describes, in order,
//! and puts them where the receiver's layout says (the two may differ: a
//! matrix column sent into a row). Three ways to do it, as the
//! non-contiguous study compared them:
//!
//! - [`Method::Pack`]: the sender's CPU copies the blocks into one
//!   contiguous buffer, one contiguous transfer moves it, the receiver's
//!   CPU copies it out. Costs host time per byte and per block.
//! - [`Method::Sgl`]: zero copy with scatter-gather lists. A work request
//!   carries at most `max_sge` entries, so the stream is cut into
//!   [`Chunk`]s with at most that many pieces on each side (for an RDMA
//!   WRITE, the receiving side of one request is one contiguous range).
//! - [`Method::Indirect`]: zero copy with one indirect key per side over
//!   all its blocks: one work request, whatever the block count; creating
//!   a key costs time, and the NIC translates through it on every packet.
//!
//! [`predict`] estimates each method's time from the cost model so that
//! [`Method::Auto`] can choose.

use core::fmt;

use crate::datatype::{Block, Layout};

mod predict;

pub use predict::{predict, Estimate, Shape};

/// How non-contiguous data is moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Method {
    /// Host copies into and out of a contiguous buffer.
    Pack,
    /// Scatter-gather lists, at most `max_sge` entries per request.
    Sgl,
    /// One indirect key per side.
    Indirect,
    /// Whichever [`predict`] says is fastest.
    Auto,
}

impl Method {
    /// Every concrete method, in report order.
    pub const CONCRETE: [Method; 3] = [Method::Pack, Method::Sgl, Method::Indirect];

    /// The name used in scenario files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Method::Pack => "pack",
            Method::Sgl => "sgl",
            Method::Indirect => "indirect",
            Method::Auto => "auto",
        }
    }

    /// The method named `s`.
    pub fn parse(s: &str) -> Option<Method> {
        [Method::Pack, Method::Sgl, Method::Indirect, Method::Auto]
            .into_iter()
            .find(|m| m.name() == s)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One work request's share of a transfer: `len` bytes of the stream from
/// `offset`, read from `src` pieces and written to `dst` pieces (offsets
/// relative to each side's layout origin).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Chunk {
    /// Where the chunk starts in the stream.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Sender pieces, in stream order.
    pub src: Vec<Block>,
    /// Receiver pieces, in stream order.
    pub dst: Vec<Block>,
}

/// Why a transfer cannot be cut.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum CutError {
    /// The two layouts describe different amounts of data.
    #[error("the sender's layout holds {src} bytes and the receiver's {dst}")]
    SizeMismatch {
        /// Sender bytes.
        src: u64,
        /// Receiver bytes.
        dst: u64,
    },
    /// A limit of zero pieces.
    #[error("at least one scatter-gather entry per request is needed")]
    NoEntries,
}

/// Cuts the transfer from `src` to `dst` into chunks with at most
/// `max_src` sender pieces, `max_dst` receiver pieces and `max_len` bytes
/// each, greedily (as few chunks as this order allows). With `max_dst = 1`
/// every chunk's receiving side is contiguous, as one RDMA WRITE needs;
/// `max_len` is the longest SEND the engine takes.
pub fn cut(
    src: &Layout,
    dst: &Layout,
    max_src: usize,
    max_dst: usize,
    max_len: u64,
) -> Result<Vec<Chunk>, CutError> {
    if src.size() != dst.size() {
        return Err(CutError::SizeMismatch {
            src: src.size(),
            dst: dst.size(),
        });
    }
    if max_src == 0 || max_dst == 0 || max_len == 0 {
        return Err(CutError::NoEntries);
    }
    let (sb, db) = (src.blocks(), dst.blocks());
    let (mut i, mut j) = (0usize, 0usize);
    // Bytes already used of the current block on each side.
    let (mut si, mut dj) = (0u64, 0u64);
    let mut chunks = Vec::new();
    let mut cur: Option<Chunk> = None;
    let mut at = 0u64;
    while i < sb.len() && j < db.len() {
        let (s, d) = (sb[i], db[j]);
        if cur.as_ref().is_some_and(|c| c.len == max_len) {
            chunks.extend(cur.take());
        }
        let room = max_len - cur.as_ref().map_or(0, |c| c.len);
        let n = (s.len - si).min(d.len - dj).min(room);
        let sp = Block {
            offset: s.offset + si as i64,
            len: n,
        };
        let dp = Block {
            offset: d.offset + dj as i64,
            len: n,
        };
        // Does this segment continue the chunk's last piece on each side?
        let fits = cur.as_ref().is_some_and(|c| {
            let s_new = !continues(c.src.last(), sp);
            let d_new = !continues(c.dst.last(), dp);
            c.src.len() + usize::from(s_new) <= max_src
                && c.dst.len() + usize::from(d_new) <= max_dst
        });
        if !fits {
            if let Some(c) = cur.take() {
                chunks.push(c);
            }
            cur = Some(Chunk {
                offset: at,
                len: 0,
                src: Vec::new(),
                dst: Vec::new(),
            });
        }
        let c = cur.as_mut().expect("a chunk is open");
        extend(&mut c.src, sp);
        extend(&mut c.dst, dp);
        c.len += n;
        at += n;
        si += n;
        dj += n;
        if si == s.len {
            i += 1;
            si = 0;
        }
        if dj == d.len {
            j += 1;
            dj = 0;
        }
    }
    chunks.extend(cur);
    Ok(chunks)
}

/// Whether `next` starts where `last` ends (same block, continued).
fn continues(last: Option<&Block>, next: Block) -> bool {
    last.is_some_and(|l| l.offset + l.len as i64 == next.offset)
}

fn extend(v: &mut Vec<Block>, b: Block) {
    match v.last_mut() {
        Some(l) if l.offset + l.len as i64 == b.offset => l.len += b.len,
        _ => v.push(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Datatype;

    fn vector(count: u64, block: u64, stride: i64) -> Layout {
        Datatype::hvector(count, block, stride, &Datatype::byte())
            .unwrap()
            .commit()
            .unwrap()
    }

    #[test]
    fn symmetric_blocks_cut_every_max_sge() {
        let l = vector(70, 256, 1024);
        // No chunk longer than 1000 bytes: blocks split across chunks.
        let c = cut(&l, &l, 30, 30, 1000).unwrap();
        assert!(c.iter().all(|c| c.len <= 1000));
        assert_eq!(c.len(), (70 * 256usize).div_ceil(1000));
        assert_eq!(
            c[1].src[0],
            Block {
                offset: 3 * 1024 + 232,
                len: 24
            }
        );
        let c = cut(&l, &l, 30, 30, u64::MAX).unwrap();
        assert_eq!(
            c.iter().map(|c| c.src.len()).collect::<Vec<_>>(),
            [30, 30, 10]
        );
        assert_eq!(c[1].offset, 30 * 256);
        assert_eq!(c.iter().map(|c| c.len).sum::<u64>(), 70 * 256);
    }

    #[test]
    fn a_write_needs_one_contiguous_range_per_request() {
        // Columns of 8 bytes into a contiguous row: one WRITE gathers 30.
        let col = vector(64, 8, 800);
        let row = Layout::contiguous(512);
        let c = cut(&col, &row, 30, 1, u64::MAX).unwrap();
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|c| c.dst.len() == 1));
        // A row into columns: every block of the receiver is its own WRITE.
        let c = cut(&row, &col, 30, 1, u64::MAX).unwrap();
        assert_eq!(c.len(), 64);
    }

    #[test]
    fn asymmetric_blocks_split_where_either_side_breaks() {
        let a = vector(3, 100, 200); // 300 bytes in 100s
        let b = vector(2, 150, 1000); // 300 bytes in 150s
        let c = cut(&a, &b, 2, 2, u64::MAX).unwrap();
        // Pieces: a0 | a1 split 50/50 over b0,b1 | a2.
        let lens: Vec<(usize, usize)> = c.iter().map(|c| (c.src.len(), c.dst.len())).collect();
        assert_eq!(lens, [(2, 2), (1, 1)]);
        assert_eq!(c[0].len, 200);
        assert_eq!(
            cut(&a, &vector(2, 100, 300), 2, 2, 64),
            Err(CutError::SizeMismatch { src: 300, dst: 200 })
        );
    }
}
