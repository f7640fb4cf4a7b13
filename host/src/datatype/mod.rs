//! Derived datatypes with MPI semantics: describing non-contiguous data.
//!
//! Scientific codes move matrix columns, sub-blocks, halos and faces: many
//! blocks at different addresses. A [`Datatype`] describes such a layout
//! the way MPI does (MPI-4.1, chapter 5): a *type map*, the ordered list of
//! (primitive, displacement) pairs one element covers, built by nesting
//! constructors — [contiguous](Datatype::contiguous),
//! [vector](Datatype::vector), [hvector](Datatype::hvector),
//! [indexed](Datatype::indexed), [hindexed](Datatype::hindexed),
//! [indexed-block](Datatype::indexed_block), [struct](Datatype::structure),
//! [subarray](Datatype::subarray) (C and Fortran order) and
//! [resized](Datatype::resized).
//!
//! Every type has a lower bound, an upper bound and their difference, the
//! *extent*: element `i` of a buffer starts `i × extent` bytes after the
//! first. The rules are MPI's: the bounds of a constructed type are the
//! least and greatest bounds of its copies of the inner type (copies of a
//! type with no data and no bounds set outright give none); `resized`
//! sets them outright; a subarray's bounds are those of the whole array.
//! Unlike MPI, no alignment padding is added to a struct's upper bound
//! (use `resized` to say it).
//!
//! [Committing](Datatype::commit) a type flattens it into a [`Layout`]: the
//! blocks (offset, length) of one element in type-map order, adjacent blocks
//! merged, as datatype engines (yaksa, UCX's iov datatypes) do. The
//! [`pack`] module copies between a layout and a contiguous buffer. Packing
//! is host software; the engine moves a layout without copies through
//! scatter-gather lists or an indirect key (see `udrma_nic::memory`).
//!
//! Types are immutable and cheap to clone (shared). Everything is checked:
//! a negative count, an overflowing displacement or a layout of more than
//! [`MAX_BLOCKS`] blocks is a [`TypeError`], never a panic.
//!
//! Children not named above:
//! - `flatten`: Committing: a datatype flattened into its blocks

use std::sync::Arc;

use thiserror::Error;

mod flatten;
pub mod pack;

pub use flatten::{Block, Layout, MAX_BLOCKS};

/// Why a datatype cannot be built or committed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum TypeError {
    /// Two argument lists that must be equally long are not.
    #[error("{what}: {a} and {b} entries (they must match)")]
    LengthMismatch {
        /// Which constructor and lists.
        what: &'static str,
        /// Length of the first list.
        a: usize,
        /// Length of the second.
        b: usize,
    },
    /// A constructor argument is out of its range.
    #[error("{0}")]
    Invalid(String),
    /// A displacement, bound or size does not fit in 64 bits.
    #[error("{0} overflows 64 bits")]
    Overflow(&'static str),
    /// Flattening would give more blocks than a layout may hold.
    #[error("the layout has more than {limit} blocks")]
    TooManyBlocks {
        /// The limit ([`MAX_BLOCKS`]).
        limit: usize,
    },
}

/// Storage order of a [subarray](Datatype::subarray).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Order {
    /// Row-major: the last dimension varies fastest (MPI_ORDER_C).
    C,
    /// Column-major: the first dimension varies fastest
    /// (MPI_ORDER_FORTRAN).
    Fortran,
}

/// How a type was built: the constructor and its arguments (what MPI's
/// `MPI_Type_get_contents` returns).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Constructor {
    /// `size` contiguous bytes of a basic type (a byte, an int, a double).
    Primitive {
        /// Bytes.
        size: u64,
    },
    /// `count` copies of `inner`, one extent apart.
    Contiguous {
        /// Copies.
        count: u64,
        /// Copied type.
        inner: Datatype,
    },
    /// `count` blocks of `blocklen` copies, block starts `stride` bytes
    /// apart (vector's stride, in extents, is converted to bytes).
    Hvector {
        /// Blocks.
        count: u64,
        /// Copies per block.
        blocklen: u64,
        /// Bytes between block starts.
        stride: i64,
        /// Copied type.
        inner: Datatype,
    },
    /// Blocks of `blocklen[j]` copies at byte displacement `displs[j]`
    /// (indexed, hindexed and indexed-block all come down to this).
    Hindexed {
        /// Copies per block.
        blocklens: Vec<u64>,
        /// Byte displacement of each block.
        displs: Vec<i64>,
        /// Copied type.
        inner: Datatype,
    },
    /// Fields of different types at byte displacements.
    Struct {
        /// `(copies, byte displacement, type)` per field.
        fields: Vec<(u64, i64, Datatype)>,
    },
    /// A sub-block of a multi-dimensional array.
    Subarray {
        /// Array size per dimension.
        sizes: Vec<u64>,
        /// Sub-block size per dimension.
        subsizes: Vec<u64>,
        /// Sub-block start per dimension.
        starts: Vec<u64>,
        /// Storage order.
        order: Order,
        /// Element type.
        inner: Datatype,
    },
    /// `inner` with its bounds set.
    Resized {
        /// New lower bound.
        lb: i64,
        /// New extent.
        extent: i64,
        /// The type.
        inner: Datatype,
    },
}

/// A derived datatype (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Datatype(Arc<Node>);

#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Node {
    ctor: Constructor,
    lb: i64,
    ub: i64,
    /// Bytes of data in one element.
    size: u64,
    /// One element's data is exactly the bytes `[lb, ub)`, in order.
    dense: bool,
    /// The bounds were set outright (by `resized` or `subarray`, here or
    /// in a copy this type holds), as MPI's bound markers are: only then
    /// does a type with no data have bounds of its own to give the types
    /// built from it.
    marked: bool,
}

/// Bounds, size and flags of a type: `(lb, ub, size, dense, marked)`.
type Shape = (i64, i64, u64, bool, bool);

/// The shape of a type whose copies give no bounds: MPI's empty type.
const EMPTY: Shape = (0, 0, 0, true, false);

fn ck<T>(v: Option<T>, what: &'static str) -> Result<T, TypeError> {
    v.ok_or(TypeError::Overflow(what))
}

fn to_i64(v: u64, what: &'static str) -> Result<i64, TypeError> {
    i64::try_from(v).map_err(|_| TypeError::Overflow(what))
}

/// Bounds and size of `blocks` of copies of `inner`: `(copies, byte
/// displacement)` each. `None` when no copy gives bounds: there are none,
/// or `inner` has no data and no bounds set outright. Copies of such an
/// empty type are nothing (MPICH and Open MPI agree); giving them the
/// bounds of a point at their displacement once moved the data of an
/// enclosing struct.
fn replicate(
    inner: &Datatype,
    blocks: impl Iterator<Item = (u64, i64)>,
) -> Result<Option<Shape>, TypeError> {
    if inner.size() == 0 && !inner.0.marked {
        return Ok(None);
    }
    let e = inner.extent();
    let (mut lb, mut ub, mut size) = (i64::MAX, i64::MIN, 0u64);
    let mut dense = inner.0.dense;
    let mut next: Option<i64> = None;
    for (copies, d) in blocks {
        if copies == 0 {
            continue;
        }
        let span = ck(
            to_i64(copies - 1, "a block length")?.checked_mul(e),
            "a block's span",
        )?;
        lb = lb.min(ck(d.checked_add(inner.lb()), "a lower bound")?);
        ub = ub.max(ck(
            d.checked_add(span).and_then(|v| v.checked_add(inner.ub())),
            "an upper bound",
        )?);
        size = ck(
            copies
                .checked_mul(inner.size())
                .and_then(|s| s.checked_add(size)),
            "the type's size",
        )?;
        let start = d + inner.lb();
        dense &= next.is_none_or(|n| n == start);
        next = Some(start + span + e);
    }
    if lb > ub {
        return Ok(None);
    }
    let dense = dense && size == (ub - lb) as u64;
    Ok(Some((lb, ub, size, dense, inner.0.marked)))
}

impl Datatype {
    fn node(ctor: Constructor, shape: Option<Shape>) -> Datatype {
        let (lb, ub, size, dense, marked) = shape.unwrap_or(EMPTY);
        Datatype(Arc::new(Node {
            ctor,
            lb,
            ub,
            size,
            dense,
            marked,
        }))
    }

    /// A basic type of `size` bytes (1 for a byte, 4 for an int, 8 for a
    /// double). Fails for a size of zero or above 2^62.
    pub fn primitive(size: u64) -> Result<Datatype, TypeError> {
        if size == 0 || size > 1 << 62 {
            return Err(TypeError::Invalid(format!(
                "a primitive type has 1 to 2^62 bytes, not {size}"
            )));
        }
        Ok(Datatype::node(
            Constructor::Primitive { size },
            Some((0, size as i64, size, true, false)),
        ))
    }

    /// One byte.
    pub fn byte() -> Datatype {
        Datatype::node(
            Constructor::Primitive { size: 1 },
            Some((0, 1, 1, true, false)),
        )
    }

    /// An 8-byte double.
    pub fn double() -> Datatype {
        Datatype::node(
            Constructor::Primitive { size: 8 },
            Some((0, 8, 8, true, false)),
        )
    }

    /// `count` copies of `inner`, one extent apart (MPI_Type_contiguous).
    pub fn contiguous(count: u64, inner: &Datatype) -> Result<Datatype, TypeError> {
        let b = replicate(inner, std::iter::once((count, 0)))?;
        Ok(Datatype::node(
            Constructor::Contiguous {
                count,
                inner: inner.clone(),
            },
            b,
        ))
    }

    /// `count` blocks of `blocklen` copies of `inner`, block starts
    /// `stride` extents of `inner` apart (MPI_Type_vector).
    pub fn vector(
        count: u64,
        blocklen: u64,
        stride: i64,
        inner: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let bytes = ck(stride.checked_mul(inner.extent()), "the vector's stride")?;
        Datatype::hvector(count, blocklen, bytes, inner)
    }

    /// `count` blocks of `blocklen` copies of `inner`, block starts
    /// `stride` bytes apart (MPI_Type_create_hvector).
    pub fn hvector(
        count: u64,
        blocklen: u64,
        stride: i64,
        inner: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let abut = inner.is_dense()
            && i128::from(stride) == i128::from(blocklen) * i128::from(inner.extent());
        let b = if abut {
            // Dense blocks that abut: one long run, whatever the count.
            let total = ck(count.checked_mul(blocklen), "the vector's length")?;
            replicate(inner, std::iter::once((total, 0)))?
        } else if count > MAX_BLOCKS as u64 {
            return Err(TypeError::TooManyBlocks { limit: MAX_BLOCKS });
        } else {
            let mut blocks = Vec::with_capacity(count as usize);
            let mut d = 0i64;
            for j in 0..count {
                blocks.push((blocklen, d));
                if j + 1 < count {
                    d = ck(d.checked_add(stride), "the vector's stride")?;
                }
            }
            replicate(inner, blocks.into_iter())?
        };
        Ok(Datatype::node(
            Constructor::Hvector {
                count,
                blocklen,
                stride,
                inner: inner.clone(),
            },
            b,
        ))
    }

    /// Blocks of `blocklens[j]` copies of `inner` at displacements
    /// `displs[j]` extents of `inner` (MPI_Type_indexed).
    pub fn indexed(
        blocklens: &[u64],
        displs: &[i64],
        inner: &Datatype,
    ) -> Result<Datatype, TypeError> {
        let e = inner.extent();
        let bytes = displs
            .iter()
            .map(|d| ck(d.checked_mul(e), "an indexed displacement"))
            .collect::<Result<Vec<_>, _>>()?;
        Datatype::hindexed(blocklens, &bytes, inner)
    }

    /// Blocks of `blocklen` copies each at displacements `displs[j]`
    /// extents of `inner` (MPI_Type_create_indexed_block).
    pub fn indexed_block(
        blocklen: u64,
        displs: &[i64],
        inner: &Datatype,
    ) -> Result<Datatype, TypeError> {
        Datatype::indexed(&vec![blocklen; displs.len()], displs, inner)
    }

    /// Blocks of `blocklens[j]` copies of `inner` at byte displacements
    /// `displs[j]` (MPI_Type_create_hindexed).
    pub fn hindexed(
        blocklens: &[u64],
        displs: &[i64],
        inner: &Datatype,
    ) -> Result<Datatype, TypeError> {
        if blocklens.len() != displs.len() {
            return Err(TypeError::LengthMismatch {
                what: "hindexed block lengths and displacements",
                a: blocklens.len(),
                b: displs.len(),
            });
        }
        if blocklens.len() > MAX_BLOCKS {
            return Err(TypeError::TooManyBlocks { limit: MAX_BLOCKS });
        }
        let b = replicate(inner, blocklens.iter().copied().zip(displs.iter().copied()))?;
        Ok(Datatype::node(
            Constructor::Hindexed {
                blocklens: blocklens.to_vec(),
                displs: displs.to_vec(),
                inner: inner.clone(),
            },
            b,
        ))
    }

    /// Fields `(copies, byte displacement, type)` (MPI_Type_create_struct).
    pub fn structure(fields: &[(u64, i64, Datatype)]) -> Result<Datatype, TypeError> {
        if fields.len() > MAX_BLOCKS {
            return Err(TypeError::TooManyBlocks { limit: MAX_BLOCKS });
        }
        let mut shape: Option<Shape> = None;
        let mut next: Option<i64> = None;
        for (copies, d, t) in fields {
            // An empty field with no bounds of its own is nothing, even
            // with copies (MPI implementations count its displacement).
            let Some((l, u, s, dn, m)) = replicate(t, std::iter::once((*copies, *d)))? else {
                continue;
            };
            let (lb, ub, size, dense, marked) = shape.unwrap_or((l, u, 0, true, false));
            shape = Some((
                lb.min(l),
                ub.max(u),
                ck(size.checked_add(s), "the struct's size")?,
                dense && dn && next.is_none_or(|n| n == l),
                marked || m,
            ));
            next = Some(u);
        }
        let b = shape.map(|(lb, ub, size, dense, marked)| {
            (lb, ub, size, dense && size == (ub - lb) as u64, marked)
        });
        Ok(Datatype::node(
            Constructor::Struct {
                fields: fields.to_vec(),
            },
            b,
        ))
    }

    /// The `subsizes` block starting at `starts` of an array of `sizes`
    /// elements of `inner`, stored in `order` (MPI_Type_create_subarray).
    /// Its bounds are the whole array's: lower bound 0, extent the array's.
    pub fn subarray(
        sizes: &[u64],
        subsizes: &[u64],
        starts: &[u64],
        order: Order,
        inner: &Datatype,
    ) -> Result<Datatype, TypeError> {
        if sizes.len() != subsizes.len() || sizes.len() != starts.len() {
            return Err(TypeError::LengthMismatch {
                what: "subarray sizes, subsizes and starts",
                a: sizes.len(),
                b: subsizes.len().min(starts.len()),
            });
        }
        if sizes.is_empty() {
            return Err(TypeError::Invalid(
                "a subarray needs at least one dimension".into(),
            ));
        }
        for (d, ((&n, &s), &st)) in sizes.iter().zip(subsizes).zip(starts).enumerate() {
            if n == 0 || s == 0 || st.checked_add(s).is_none_or(|end| end > n) {
                return Err(TypeError::Invalid(format!(
                    "subarray dimension {d}: size {n}, subsize {s}, start {st} \
                     (need 1 <= subsize, start + subsize <= size)"
                )));
            }
        }
        let mut whole = 1u64;
        for &n in sizes {
            whole = ck(whole.checked_mul(n), "the subarray's array size")?;
        }
        let mut size = inner.size();
        for &s in subsizes {
            size = ck(size.checked_mul(s), "the subarray's size")?;
        }
        let extent = ck(
            to_i64(whole, "the subarray's extent")?.checked_mul(inner.extent()),
            "the subarray's extent",
        )?;
        let dense = inner.0.dense && subsizes == sizes;
        Ok(Datatype::node(
            Constructor::Subarray {
                sizes: sizes.to_vec(),
                subsizes: subsizes.to_vec(),
                starts: starts.to_vec(),
                order,
                inner: inner.clone(),
            },
            Some((0, extent, size, dense && inner.lb() == 0, true)),
        ))
    }

    /// `inner` with lower bound `lb` and extent `extent`
    /// (MPI_Type_create_resized). The extent may not be negative.
    pub fn resized(inner: &Datatype, lb: i64, extent: i64) -> Result<Datatype, TypeError> {
        if extent < 0 {
            return Err(TypeError::Invalid(format!(
                "a resized type's extent may not be negative ({extent})"
            )));
        }
        let ub = ck(lb.checked_add(extent), "the resized upper bound")?;
        let dense = inner.0.dense && lb == inner.lb() && ub == inner.ub();
        Ok(Datatype::node(
            Constructor::Resized {
                lb,
                extent,
                inner: inner.clone(),
            },
            Some((lb, ub, inner.size(), dense, true)),
        ))
    }

    /// How the type was built.
    pub fn constructor(&self) -> &Constructor {
        &self.0.ctor
    }

    /// Lower bound, in bytes from an element's start.
    pub fn lb(&self) -> i64 {
        self.0.lb
    }

    /// Upper bound.
    pub fn ub(&self) -> i64 {
        self.0.ub
    }

    /// Extent: upper bound minus lower bound; element `i` of a buffer
    /// starts `i × extent` after element 0.
    pub fn extent(&self) -> i64 {
        self.0.ub - self.0.lb
    }

    /// Bytes of data in one element (what packing one element gives).
    pub fn size(&self) -> u64 {
        self.0.size
    }

    /// Flattens one element into its blocks, in type-map order, adjacent
    /// blocks merged. Fails if the layout would exceed [`MAX_BLOCKS`].
    pub fn commit(&self) -> Result<Layout, TypeError> {
        flatten::commit(self)
    }

    pub(crate) fn is_dense(&self) -> bool {
        self.0.dense
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_follow_mpi_rules() {
        let d = Datatype::double();
        // A column of a 4x5 row-major matrix of doubles: 4 blocks, 5 apart.
        let col = Datatype::vector(4, 1, 5, &d).unwrap();
        assert_eq!((col.lb(), col.extent(), col.size()), (0, 3 * 40 + 8, 32));
        // Resized to one double, so consecutive columns interleave.
        let r = Datatype::resized(&col, 0, 8).unwrap();
        assert_eq!((r.lb(), r.extent(), r.size()), (0, 8, 32));
        // Negative stride: the lower bound moves below zero.
        let back = Datatype::hvector(3, 1, -16, &d).unwrap();
        assert_eq!((back.lb(), back.ub()), (-32, 8));
        // A subarray spans the whole array.
        let sub = Datatype::subarray(&[4, 6], &[2, 3], &[1, 2], Order::C, &d).unwrap();
        assert_eq!((sub.lb(), sub.extent(), sub.size()), (0, 192, 48));
        // A struct: int at 0, double at 8 (no padding added).
        let int = Datatype::primitive(4).unwrap();
        let s = Datatype::structure(&[(1, 0, int), (2, 8, d.clone())]).unwrap();
        assert_eq!((s.lb(), s.ub(), s.size()), (0, 24, 20));
        // Empty types have zero bounds.
        let e = Datatype::contiguous(0, &d).unwrap();
        assert_eq!((e.lb(), e.extent(), e.size()), (0, 0, 0));
    }

    #[test]
    fn copies_of_an_empty_type_are_nothing() {
        // Found by comparing with MPICH (host/tests/mpi_conformance.rs):
        // copies of an empty type took the bounds of a point at their
        // displacement, so two of them at 0 and 15 had extent 15 (MPICH
        // and Open MPI give 0), and the data of a struct that held them
        // moved.
        let d = Datatype::double();
        let empty = Datatype::contiguous(0, &d).unwrap();
        let two = Datatype::hindexed(&[1, 1], &[0, 15], &empty).unwrap();
        assert_eq!((two.lb(), two.extent(), two.size()), (0, 0, 0));
        let s = Datatype::structure(&[(1, 0, two), (1, 0, d.clone())]).unwrap();
        assert_eq!((s.lb(), s.extent()), (0, 8));
        let blocks = s.commit().unwrap().repeat(2).unwrap();
        let offsets: Vec<i64> = blocks.blocks().iter().map(|b| b.offset).collect();
        assert_eq!(offsets, [0], "two doubles, one after the other");
        // Bounds set outright stay: an empty type resized is a marker.
        let marked = Datatype::resized(&empty, 4, 4).unwrap();
        let two = Datatype::hindexed(&[1, 1], &[0, 15], &marked).unwrap();
        assert_eq!((two.lb(), two.ub(), two.size()), (4, 23, 0));
        // ... through a struct that holds it, too.
        let held = Datatype::structure(&[(1, 0, marked)]).unwrap();
        let moved = Datatype::hindexed(&[1], &[10], &held).unwrap();
        assert_eq!((moved.lb(), moved.ub()), (14, 18));
    }

    #[test]
    fn bad_arguments_are_named_not_panics() {
        let d = Datatype::double();
        assert!(matches!(
            Datatype::hindexed(&[1, 2], &[0], &d),
            Err(TypeError::LengthMismatch { a: 2, b: 1, .. })
        ));
        let e = Datatype::subarray(&[4], &[3], &[2], Order::C, &d).unwrap_err();
        assert!(e.to_string().contains("dimension 0"), "{e}");
        assert!(Datatype::resized(&d, 0, -1).is_err());
        assert_eq!(
            Datatype::hvector(2, 1, i64::MAX, &d),
            Err(TypeError::Overflow("an upper bound"))
        );
        assert!(Datatype::primitive(0).is_err());
        let huge = Datatype::contiguous(u64::MAX, &d);
        assert!(matches!(huge, Err(TypeError::Overflow(_))), "{huge:?}");
    }

    #[test]
    fn density_is_known_without_flattening() {
        let d = Datatype::double();
        assert!(Datatype::contiguous(10, &d).unwrap().is_dense());
        assert!(Datatype::vector(3, 2, 2, &d).unwrap().is_dense());
        assert!(!Datatype::vector(3, 2, 3, &d).unwrap().is_dense());
        assert!(!Datatype::vector(3, 1, -1, &d).unwrap().is_dense());
        assert!(!Datatype::resized(&d, 0, 16).unwrap().is_dense());
        // Away from zero too: two doubles at 8, and fields that abut.
        assert!(Datatype::hindexed(&[2], &[8], &d).unwrap().is_dense());
        let s = |f: &[(u64, i64)]| {
            let f: Vec<_> = f.iter().map(|&(n, at)| (n, at, d.clone())).collect();
            Datatype::structure(&f).unwrap().is_dense()
        };
        assert!(s(&[(1, 0), (1, 8)]));
        assert!(s(&[(1, 8), (2, 16)]));
        assert!(!s(&[(1, 0), (1, 16)]));
        assert!(!s(&[(1, 8), (1, 0)]), "out of order");
    }
}
