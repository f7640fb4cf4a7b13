//! Committing: a datatype flattened into its blocks.

use super::{Constructor, Datatype, Order, TypeError};

/// Most blocks a [`Layout`] may hold (64 MiB of block list). The indirect
/// keys of the modelled NIC cover at most 65,536 regions, so a layout this
/// large is already far past what any method can move in one go.
pub const MAX_BLOCKS: usize = 1 << 22;

/// Most block pieces flattening may visit before merging, so that a
/// pathological nesting (millions of empty or overlapping copies) fails
/// quickly instead of running for minutes.
const MAX_WORK: u64 = 1 << 26;

/// One contiguous run of bytes: `len` bytes starting `offset` bytes from
/// the buffer's start (element 0's origin). Offsets may be negative, as MPI
/// displacements may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Block {
    /// Start, relative to the buffer.
    pub offset: i64,
    /// Bytes.
    pub len: u64,
}

/// A committed datatype: the blocks of some number of elements in type-map
/// order (the order packing follows), adjacent blocks merged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Layout {
    blocks: Vec<Block>,
    lb: i64,
    extent: i64,
    size: u64,
}

#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Sink {
    blocks: Vec<Block>,
    work: u64,
}

impl Sink {
    fn push(&mut self, offset: i64, len: u64) -> Result<(), TypeError> {
        self.work += 1;
        if self.work > MAX_WORK {
            return Err(TypeError::Invalid(format!(
                "flattening visits more than {MAX_WORK} pieces; the type is too deeply replicated"
            )));
        }
        if len == 0 {
            return Ok(());
        }
        if let Some(last) = self.blocks.last_mut() {
            if last.offset.checked_add(last.len as i64) == Some(offset) {
                last.len += len;
                return Ok(());
            }
        }
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(TypeError::TooManyBlocks { limit: MAX_BLOCKS });
        }
        self.blocks.push(Block { offset, len });
        Ok(())
    }
}

fn at(base: i64, d: i64) -> Result<i64, TypeError> {
    base.checked_add(d)
        .ok_or(TypeError::Overflow("a block's offset"))
}

/// `copies` copies of `t`, one extent apart, from `base`.
fn rep(t: &Datatype, copies: u64, base: i64, sink: &mut Sink) -> Result<(), TypeError> {
    if t.is_dense() {
        let len = copies
            .checked_mul(t.size())
            .ok_or(TypeError::Overflow("a block's length"))?;
        return sink.push(at(base, t.lb())?, len);
    }
    let mut here = base;
    for k in 0..copies {
        emit(t, here, sink)?;
        if k + 1 < copies {
            here = at(here, t.extent())?;
        }
    }
    Ok(())
}

fn emit(t: &Datatype, base: i64, sink: &mut Sink) -> Result<(), TypeError> {
    if t.is_dense() {
        return sink.push(at(base, t.lb())?, t.size());
    }
    match t.constructor() {
        Constructor::Primitive { size } => sink.push(base, *size),
        Constructor::Contiguous { count, inner } => rep(inner, *count, base, sink),
        Constructor::Hvector {
            count,
            blocklen,
            stride,
            inner,
        } => {
            let mut here = base;
            for j in 0..*count {
                rep(inner, *blocklen, here, sink)?;
                if j + 1 < *count {
                    here = at(here, *stride)?;
                }
            }
            Ok(())
        }
        Constructor::Hindexed {
            blocklens,
            displs,
            inner,
        } => {
            for (&b, &d) in blocklens.iter().zip(displs) {
                rep(inner, b, at(base, d)?, sink)?;
            }
            Ok(())
        }
        Constructor::Struct { fields } => {
            for (copies, d, ft) in fields {
                rep(ft, *copies, at(base, *d)?, sink)?;
            }
            Ok(())
        }
        Constructor::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            inner,
        } => subarray(sizes, subsizes, starts, *order, inner, base, sink),
        Constructor::Resized { inner, .. } => emit(inner, base, sink),
    }
}

/// Rows of the fastest dimension, in storage order.
fn subarray(
    sizes: &[u64],
    subsizes: &[u64],
    starts: &[u64],
    order: Order,
    inner: &Datatype,
    base: i64,
    sink: &mut Sink,
) -> Result<(), TypeError> {
    // Dimensions from slowest to fastest.
    let dims: Vec<usize> = match order {
        Order::C => (0..sizes.len()).collect(),
        Order::Fortran => (0..sizes.len()).rev().collect(),
    };
    // Stride of each dimension, in elements (the array fits in i64 bytes:
    // checked when the type was built).
    let mut stride = vec![0i64; sizes.len()];
    let mut s = 1i64;
    for &d in dims.iter().rev() {
        stride[d] = s;
        s *= sizes[d] as i64;
    }
    let e = inner.extent();
    let fast = *dims.last().expect("at least one dimension");
    let slow = &dims[..dims.len() - 1];
    let mut idx = vec![0u64; slow.len()];
    loop {
        let mut elem = starts[fast] as i64 * stride[fast];
        for (k, &d) in slow.iter().enumerate() {
            elem += (starts[d] + idx[k]) as i64 * stride[d];
        }
        let off = elem
            .checked_mul(e)
            .ok_or(TypeError::Overflow("a subarray offset"))?;
        rep(inner, subsizes[fast], at(base, off)?, sink)?;
        // Odometer over the slower dimensions, fastest of them first.
        let mut k = slow.len();
        loop {
            if k == 0 {
                return Ok(());
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < subsizes[slow[k]] {
                break;
            }
            idx[k] = 0;
        }
    }
}

pub(super) fn commit(t: &Datatype) -> Result<Layout, TypeError> {
    let mut sink = Sink {
        blocks: Vec::new(),
        work: 0,
    };
    emit(t, 0, &mut sink)?;
    Ok(Layout {
        blocks: sink.blocks,
        lb: t.lb(),
        extent: t.extent(),
        size: t.size(),
    })
}

impl Layout {
    /// A layout of one block of `len` bytes at offset 0 (a contiguous
    /// buffer).
    pub fn contiguous(len: u64) -> Layout {
        Layout {
            blocks: if len == 0 {
                Vec::new()
            } else {
                vec![Block { offset: 0, len }]
            },
            lb: 0,
            extent: len as i64,
            size: len,
        }
    }

    /// The blocks, in the order packing visits them.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Lower bound of the type (of element 0).
    pub fn lb(&self) -> i64 {
        self.lb
    }

    /// Extent of one element.
    pub fn extent(&self) -> i64 {
        self.extent
    }

    /// Bytes of data the layout describes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The lowest and highest-plus-one offsets any block touches (MPI's
    /// true bounds), or `None` for an empty layout.
    pub fn span(&self) -> Option<(i64, i64)> {
        let lo = self.blocks.iter().map(|b| b.offset).min()?;
        let hi = self.blocks.iter().map(|b| b.offset + b.len as i64).max()?;
        Some((lo, hi))
    }

    /// The layout of `count` consecutive elements: element `i` shifted by
    /// `i × extent`, blocks merged across element boundaries. The result
    /// describes `count × size` bytes and its extent is `count × extent`.
    pub fn repeat(&self, count: u64) -> Result<Layout, TypeError> {
        let size = self
            .size
            .checked_mul(count)
            .ok_or(TypeError::Overflow("the layout's size"))?;
        let extent = i64::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(self.extent))
            .ok_or(TypeError::Overflow("the layout's extent"))?;
        let mut sink = Sink {
            blocks: Vec::new(),
            work: 0,
        };
        if let [one] = self.blocks[..] {
            if one.len as i64 == self.extent {
                sink.push(one.offset, size)?;
                return Ok(Layout {
                    blocks: sink.blocks,
                    lb: self.lb,
                    extent,
                    size,
                });
            }
        }
        let mut shift = 0i64;
        for i in 0..count {
            for b in &self.blocks {
                sink.push(at(b.offset, shift)?, b.len)?;
            }
            if i + 1 < count {
                shift = at(shift, self.extent)?;
            }
        }
        Ok(Layout {
            blocks: sink.blocks,
            lb: self.lb,
            extent,
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(l: &Layout) -> Vec<(i64, u64)> {
        l.blocks().iter().map(|b| (b.offset, b.len)).collect()
    }

    #[test]
    fn a_matrix_column_is_one_block_per_row() {
        let d = Datatype::double();
        let col = Datatype::vector(3, 1, 4, &d).unwrap().commit().unwrap();
        assert_eq!(blocks(&col), [(0, 8), (32, 8), (64, 8)]);
        // Two columns side by side (resized to one double) merge pairwise.
        let one = Datatype::resized(&Datatype::vector(3, 1, 4, &d).unwrap(), 0, 8).unwrap();
        let two = one.commit().unwrap().repeat(2).unwrap();
        assert_eq!(
            blocks(&two),
            [(0, 8), (32, 8), (64, 8), (8, 8), (40, 8), (72, 8)],
            "type-map order: all of column 0, then column 1"
        );
    }

    #[test]
    fn adjacent_blocks_merge_in_order_only() {
        let b = Datatype::byte();
        let t = Datatype::hindexed(&[4, 4, 4], &[0, 4, 12], &b).unwrap();
        assert_eq!(blocks(&t.commit().unwrap()), [(0, 8), (12, 4)]);
        // Out of order: [4,8) then [0,4) do not merge (packing order).
        let t = Datatype::hindexed(&[4, 4], &[4, 0], &b).unwrap();
        assert_eq!(blocks(&t.commit().unwrap()), [(4, 4), (0, 4)]);
    }

    #[test]
    fn subarrays_in_both_orders() {
        let b = Datatype::byte();
        // 4x6 array, 2x3 block at (1, 2).
        let c = Datatype::subarray(&[4, 6], &[2, 3], &[1, 2], Order::C, &b).unwrap();
        assert_eq!(blocks(&c.commit().unwrap()), [(8, 3), (14, 3)]);
        // Fortran: the first dimension is fastest.
        let f = Datatype::subarray(&[4, 6], &[2, 3], &[1, 2], Order::Fortran, &b).unwrap();
        assert_eq!(blocks(&f.commit().unwrap()), [(9, 2), (13, 2), (17, 2)]);
        // A 3-D face (NAS MG-like): the k = 0 plane of a 4x4x4 cube.
        let face = Datatype::subarray(&[4, 4, 4], &[4, 4, 1], &[0, 0, 0], Order::C, &b)
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(face.blocks().len(), 16);
        assert_eq!(face.size(), 16);
    }

    #[test]
    fn dense_types_flatten_in_one_step_whatever_their_count() {
        let d = Datatype::double();
        let big = Datatype::contiguous(1 << 40, &d).unwrap().commit().unwrap();
        assert_eq!(blocks(&big), [(0, 8 << 40)]);
        let many = Layout::contiguous(8).repeat(1 << 50).unwrap();
        assert_eq!(many.blocks().len(), 1);
    }

    #[test]
    fn limits_are_errors() {
        let d = Datatype::double();
        let sparse = Datatype::resized(&d, 0, 16).unwrap();
        let l = sparse.commit().unwrap();
        assert_eq!(
            l.repeat(MAX_BLOCKS as u64 + 1),
            Err(TypeError::TooManyBlocks { limit: MAX_BLOCKS })
        );
        let e = Datatype::contiguous(1 << 30, &sparse)
            .unwrap()
            .commit()
            .unwrap_err();
        assert!(matches!(e, TypeError::TooManyBlocks { .. }), "{e}");
    }
}
