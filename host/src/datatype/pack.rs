//! Packing and unpacking: copies between a [`Layout`] in a buffer and a
//! contiguous run of bytes, in type-map order.
//!
//! A buffer is a byte slice plus the index of the layout's origin in it
//! (offset 0 of element 0), since MPI displacements may be negative. Every
//! block is checked against the slice before any byte moves: a layout that
//! does not fit is a [`PackError`] and nothing is written.

use thiserror::Error;

use super::Layout;

/// A layout that does not fit the buffer, or packed bytes of the wrong
/// length.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum PackError {
    /// Block `block` (`offset`, `len`) falls outside the buffer.
    #[error(
        "block {block} ({len} bytes at offset {offset}) falls outside the buffer \
         ({buffer} bytes, origin at {origin})"
    )]
    OutOfRange {
        /// Index of the block.
        block: usize,
        /// Its offset from the origin.
        offset: i64,
        /// Its length.
        len: u64,
        /// Buffer length.
        buffer: usize,
        /// Where the origin sits in the buffer.
        origin: usize,
    },
    /// The packed bytes are not as long as the layout's data.
    #[error("{got} packed bytes for a layout of {want}")]
    WrongLength {
        /// Bytes given.
        got: usize,
        /// Bytes the layout describes.
        want: u64,
    },
}

/// Where block `i` sits in a buffer of `buffer` bytes with its origin at
/// `origin`.
fn span(
    layout: &Layout,
    buffer: usize,
    origin: usize,
) -> impl Iterator<Item = Result<core::ops::Range<usize>, PackError>> + '_ {
    layout.blocks().iter().enumerate().map(move |(i, b)| {
        let bad = PackError::OutOfRange {
            block: i,
            offset: b.offset,
            len: b.len,
            buffer,
            origin,
        };
        let start = i64::try_from(origin)
            .ok()
            .and_then(|o| o.checked_add(b.offset))
            .and_then(|s| usize::try_from(s).ok())
            .ok_or(bad.clone())?;
        let end = usize::try_from(b.len)
            .ok()
            .and_then(|l| start.checked_add(l))
            .filter(|&e| e <= buffer)
            .ok_or(bad)?;
        Ok(start..end)
    })
}

/// Appends the bytes `layout` describes in `buf` (origin at index
/// `origin`) to `out`, in type-map order. On error `out` is unchanged.
pub fn pack(
    layout: &Layout,
    buf: &[u8],
    origin: usize,
    out: &mut Vec<u8>,
) -> Result<(), PackError> {
    let spans = span(layout, buf.len(), origin).collect::<Result<Vec<_>, _>>()?;
    out.reserve(layout.size() as usize);
    for r in spans {
        out.extend_from_slice(&buf[r]);
    }
    Ok(())
}

/// Writes `packed` into the places `layout` describes in `buf` (origin at
/// `origin`), in type-map order; bytes between blocks are not touched. On
/// error nothing is written.
pub fn unpack(
    layout: &Layout,
    packed: &[u8],
    buf: &mut [u8],
    origin: usize,
) -> Result<(), PackError> {
    if packed.len() as u64 != layout.size() {
        return Err(PackError::WrongLength {
            got: packed.len(),
            want: layout.size(),
        });
    }
    let spans = span(layout, buf.len(), origin).collect::<Result<Vec<_>, _>>()?;
    let mut at = 0;
    for r in spans {
        let n = r.len();
        buf[r].copy_from_slice(&packed[at..at + n]);
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Datatype;

    #[test]
    fn a_column_packs_and_unpacks_in_place() {
        let d = Datatype::byte();
        let col = Datatype::vector(3, 2, 4, &d).unwrap().commit().unwrap();
        let buf: Vec<u8> = (0..12).collect();
        let mut out = Vec::new();
        pack(&col, &buf, 0, &mut out).unwrap();
        assert_eq!(out, [0, 1, 4, 5, 8, 9]);
        let mut back = [0xEEu8; 12];
        unpack(&col, &out, &mut back, 0).unwrap();
        assert_eq!(back, [0, 1, 0xEE, 0xEE, 4, 5, 0xEE, 0xEE, 8, 9, 0xEE, 0xEE]);
    }

    #[test]
    fn out_of_range_and_wrong_lengths_write_nothing() {
        let d = Datatype::byte();
        let back = Datatype::hvector(2, 1, -4, &d).unwrap().commit().unwrap();
        let mut out = vec![7];
        let e = pack(&back, &[1, 2, 3, 4, 5], 2, &mut out).unwrap_err();
        assert!(e.to_string().contains("block 1"), "{e}");
        assert_eq!(out, [7], "nothing appended");
        pack(&back, &[1, 2, 3, 4, 5], 4, &mut out).unwrap();
        assert_eq!(out, [7, 5, 1]);
        let mut buf = [0u8; 5];
        assert_eq!(
            unpack(&back, &[1], &mut buf, 4),
            Err(PackError::WrongLength { got: 1, want: 2 })
        );
        assert!(unpack(&back, &[1, 2], &mut buf, 3).is_err());
        assert_eq!(buf, [0; 5]);
    }
}
