//! The NIC's ALU: element-wise combination of two reduce operands.
//!
//! # Semantics (exact, and the same in every run)
//!
//! - **Sum**: floats add by IEEE 754 (round to nearest even); integers
//!   wrap on overflow (two's complement for signed types).
//! - **Min / Max**: integers compare signed or unsigned by type. Floats
//!   order `-0.0` below `+0.0`, and a NaN operand wins: the result is
//!   NaN (the first NaN in combination order, bits unchanged), as IEEE
//!   754-2019's `minimum`/`maximum` do.
//! - **MinLoc / MaxLoc**: the value as for Min/Max; on a tie (equal
//!   values, `-0.0` and `+0.0` not equal) the smaller location wins, as
//!   MPI's `MINLOC`/`MAXLOC` say. When both values are NaN the smaller
//!   location wins too.
//! - **Land / Lor / Lxor**: nonzero is true; the result is 0 or 1.
//! - **Band / Bor / Bxor**: on the bits.
//!
//! Logical and bitwise operations apply to integer types only
//! ([`ReduceOp::applies_to`]). Combination order is the caller's: the
//! reduce unit folds a node's own operand first, then its children's in
//! branch order, so float results do not depend on arrival order.

use core::cmp::Ordering;

use udrma_proto::{ReduceHeader, ReduceOp, ReduceType};

/// One operand: elements as raw bits (32-bit types in the low half) and,
/// for MINLOC/MAXLOC, one location per element (empty otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Operand {
    /// Element bits.
    pub values: Vec<u64>,
    /// Locations (MINLOC/MAXLOC only).
    pub locs: Vec<u32>,
}

impl Operand {
    /// Elements held.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Elements `range` of this operand (locations too, when present).
    pub fn slice(&self, range: core::ops::Range<usize>) -> Operand {
        Operand {
            values: self.values[range.clone()].to_vec(),
            locs: if self.locs.is_empty() {
                Vec::new()
            } else {
                self.locs[range].to_vec()
            },
        }
    }
}

fn mask(ty: ReduceType, v: u64) -> u64 {
    match ty.width() {
        Some(4) => v & 0xffff_ffff,
        _ => v,
    }
}

fn is_nan(ty: ReduceType, v: u64) -> bool {
    match ty {
        ReduceType::F32 => f32::from_bits(v as u32).is_nan(),
        ReduceType::F64 => f64::from_bits(v).is_nan(),
        _ => false,
    }
}

/// Order of two non-NaN values of `ty` (`-0.0 < +0.0` for floats).
fn order(ty: ReduceType, a: u64, b: u64) -> Ordering {
    match ty {
        ReduceType::F32 => f32::from_bits(a as u32).total_cmp(&f32::from_bits(b as u32)),
        ReduceType::F64 => f64::from_bits(a).total_cmp(&f64::from_bits(b)),
        ReduceType::I32 => (a as u32 as i32).cmp(&(b as u32 as i32)),
        ReduceType::I64 => (a as i64).cmp(&(b as i64)),
        _ => mask(ty, a).cmp(&mask(ty, b)),
    }
}

/// Picks between `a` (earlier in combination order) and `b` for
/// Min/Max (`want` = the ordering that makes `b` win) with locations.
fn pick(ty: ReduceType, a: (u64, u32), b: (u64, u32), want: Ordering, loc: bool) -> (u64, u32) {
    match (is_nan(ty, a.0), is_nan(ty, b.0)) {
        (true, true) if loc => {
            if b.1 < a.1 {
                b
            } else {
                a
            }
        }
        (true, _) => a,
        (false, true) => b,
        (false, false) => match order(ty, b.0, a.0) {
            o if o == want => b,
            Ordering::Equal if loc && b.1 < a.1 => b,
            _ => a,
        },
    }
}

fn sum(ty: ReduceType, a: u64, b: u64) -> u64 {
    match ty {
        ReduceType::F32 => {
            u64::from((f32::from_bits(a as u32) + f32::from_bits(b as u32)).to_bits())
        }
        ReduceType::F64 => (f64::from_bits(a) + f64::from_bits(b)).to_bits(),
        _ => mask(ty, a.wrapping_add(b)),
    }
}

/// Combines one element: `a` is earlier in combination order. Returns
/// `None` when `op` does not apply to `ty`.
pub fn combine_one(
    op: ReduceOp,
    ty: ReduceType,
    a: (u64, u32),
    b: (u64, u32),
) -> Option<(u64, u32)> {
    if !op.applies_to(ty) {
        return None;
    }
    let truth = |v: u64| mask(ty, v) != 0;
    let bits = |v: bool| u64::from(v);
    Some(match op {
        ReduceOp::Sum => (sum(ty, a.0, b.0), a.1),
        ReduceOp::Min => (pick(ty, a, b, Ordering::Less, false).0, a.1),
        ReduceOp::Max => (pick(ty, a, b, Ordering::Greater, false).0, a.1),
        ReduceOp::MinLoc => pick(ty, a, b, Ordering::Less, true),
        ReduceOp::MaxLoc => pick(ty, a, b, Ordering::Greater, true),
        ReduceOp::Land => (bits(truth(a.0) && truth(b.0)), a.1),
        ReduceOp::Lor => (bits(truth(a.0) || truth(b.0)), a.1),
        ReduceOp::Lxor => (bits(truth(a.0) != truth(b.0)), a.1),
        ReduceOp::Band => (mask(ty, a.0 & b.0), a.1),
        ReduceOp::Bor => (mask(ty, a.0 | b.0), a.1),
        ReduceOp::Bxor => (mask(ty, a.0 ^ b.0), a.1),
        ReduceOp::Unknown(_) => return None,
    })
}

/// Why two operands cannot be combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum AluError {
    /// The operation is not defined on the type.
    #[error("{op} is not defined on {ty}")]
    NotApplicable {
        /// Operation.
        op: ReduceOp,
        /// Type.
        ty: ReduceType,
    },
    /// The operands differ in length (or lack locations).
    #[error("operands of {a} and {b} elements")]
    Shape {
        /// Elements of the accumulator.
        a: usize,
        /// Elements of the other operand.
        b: usize,
    },
}

/// `acc = acc ⊕ x`, element by element (`acc` is earlier in order).
pub fn combine(
    op: ReduceOp,
    ty: ReduceType,
    acc: &mut Operand,
    x: &Operand,
) -> Result<(), AluError> {
    if !op.applies_to(ty) {
        return Err(AluError::NotApplicable { op, ty });
    }
    let locs = op.has_locations();
    if acc.values.len() != x.values.len()
        || (locs && (acc.locs.len() != acc.values.len() || x.locs.len() != x.values.len()))
    {
        return Err(AluError::Shape {
            a: acc.values.len(),
            b: x.values.len(),
        });
    }
    for i in 0..acc.values.len() {
        let la = if locs { acc.locs[i] } else { 0 };
        let lb = if locs { x.locs[i] } else { 0 };
        let (v, l) = combine_one(op, ty, (acc.values[i], la), (x.values[i], lb))
            .ok_or(AluError::NotApplicable { op, ty })?;
        acc.values[i] = v;
        if locs {
            acc.locs[i] = l;
        }
    }
    Ok(())
}

/// The operand a REDUCE payload carries (big-endian values, then
/// locations); `None` when the type is unknown or the length is wrong.
pub fn decode(hdr: &ReduceHeader, data: &[u8]) -> Option<Operand> {
    let w = hdr.ty.width()?;
    if hdr.payload_len()? != data.len() {
        return None;
    }
    let n = usize::from(hdr.count);
    let values = data[..n * w]
        .chunks_exact(w)
        .map(|c| c.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b)))
        .collect();
    let locs = if hdr.op.has_locations() {
        data[n * w..]
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    } else {
        Vec::new()
    };
    Some(Operand { values, locs })
}

/// Appends `x` to `out` as a REDUCE payload of `ty` (big-endian values,
/// then locations when `op` has them).
pub fn encode(op: ReduceOp, ty: ReduceType, x: &Operand, out: &mut Vec<u8>) {
    let w = ty.width().unwrap_or(8);
    for v in &x.values {
        out.extend_from_slice(&v.to_be_bytes()[8 - w..]);
    }
    if op.has_locations() {
        for l in &x.locs {
            out.extend_from_slice(&l.to_be_bytes());
        }
    }
}

/// Writes `x` as host memory holds it: little-endian values, then (for
/// MINLOC/MAXLOC) little-endian 32-bit locations.
pub fn to_host_bytes(op: ReduceOp, ty: ReduceType, x: &Operand) -> Vec<u8> {
    let w = ty.width().unwrap_or(8);
    let mut out = Vec::with_capacity(x.len() * (w + 4));
    for v in &x.values {
        out.extend_from_slice(&v.to_le_bytes()[..w]);
    }
    if op.has_locations() {
        for l in &x.locs {
            out.extend_from_slice(&l.to_le_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReduceOp::*;
    use ReduceType::*;

    fn f64s(v: &[f64]) -> Operand {
        Operand {
            values: v.iter().map(|x| x.to_bits()).collect(),
            locs: Vec::new(),
        }
    }

    fn one(op: ReduceOp, ty: ReduceType, a: u64, b: u64) -> u64 {
        combine_one(op, ty, (a, 0), (b, 0)).unwrap().0
    }

    #[test]
    fn integer_sums_wrap_and_compare_by_signedness() {
        assert_eq!(
            one(Sum, I32, u64::from(i32::MAX as u32), 1),
            u64::from(i32::MIN as u32)
        );
        assert_eq!(one(Sum, U32, 0xffff_ffff, 2), 1);
        assert_eq!(one(Sum, U64, u64::MAX, 2), 1);
        assert_eq!(one(Sum, I64, i64::MAX as u64, 1), i64::MIN as u64);
        // -1 is the smallest I32 here but the largest U32.
        assert_eq!(one(Min, I32, 0xffff_ffff, 5), 0xffff_ffff);
        assert_eq!(one(Min, U32, 0xffff_ffff, 5), 5);
        assert_eq!(one(Max, I64, (-3i64) as u64, 2), 2);
        assert_eq!(one(Max, U64, (-3i64) as u64, 2), (-3i64) as u64);
    }

    #[test]
    fn logical_and_bitwise_operations() {
        for ty in [I32, I64, U32, U64] {
            assert_eq!(one(Land, ty, 7, 0), 0);
            assert_eq!(one(Land, ty, 7, 2), 1);
            assert_eq!(one(Lor, ty, 0, 0), 0);
            assert_eq!(one(Lor, ty, 0, 9), 1);
            assert_eq!(one(Lxor, ty, 3, 9), 0);
            assert_eq!(one(Lxor, ty, 0, 9), 1);
            assert_eq!(one(Band, ty, 0b1100, 0b1010), 0b1000);
            assert_eq!(one(Bor, ty, 0b1100, 0b1010), 0b1110);
            assert_eq!(one(Bxor, ty, 0b1100, 0b1010), 0b0110);
        }
        // Only the type's bits count as truth: the high half of a 32-bit
        // element is not part of it.
        assert_eq!(one(Land, U32, 1 << 40, 1), 0);
        assert!(combine_one(Band, F64, (1, 0), (1, 0)).is_none());
    }

    #[test]
    fn float_min_max_order_signed_zeros_and_propagate_nan() {
        let (pz, nz) = (0.0f64.to_bits(), (-0.0f64).to_bits());
        assert_eq!(one(Min, F64, pz, nz), nz);
        assert_eq!(one(Min, F64, nz, pz), nz);
        assert_eq!(one(Max, F64, nz, pz), pz);
        let nan = f64::NAN.to_bits();
        let other_nan = (f64::NAN.to_bits()) | 1;
        assert_eq!(one(Min, F64, 1.0f64.to_bits(), nan), nan);
        assert_eq!(one(Max, F64, nan, 1.0f64.to_bits()), nan);
        // The first NaN in combination order is kept, bits unchanged.
        assert_eq!(one(Max, F64, other_nan, nan), other_nan);
        let (pz32, nz32) = (u64::from(0.0f32.to_bits()), u64::from((-0.0f32).to_bits()));
        assert_eq!(one(Max, F32, pz32, nz32), pz32);
        assert_eq!(one(Min, F32, pz32, nz32), nz32);
        let nan32 = u64::from(f32::NAN.to_bits());
        assert_eq!(one(Min, F32, nan32, u64::from(2.0f32.to_bits())), nan32);
    }

    #[test]
    fn locations_break_ties_toward_the_smaller_and_follow_nan() {
        let v = |x: f64| x.to_bits();
        assert_eq!(
            combine_one(MinLoc, F64, (v(1.0), 7), (v(1.0), 3)),
            Some((v(1.0), 3))
        );
        assert_eq!(
            combine_one(MaxLoc, F64, (v(1.0), 2), (v(1.0), 3)),
            Some((v(1.0), 2))
        );
        assert_eq!(
            combine_one(MaxLoc, F64, (v(1.0), 2), (v(4.0), 9)),
            Some((v(4.0), 9))
        );
        // -0.0 and +0.0 are not a tie.
        assert_eq!(
            combine_one(MinLoc, F64, (v(0.0), 1), (v(-0.0), 5)),
            Some((v(-0.0), 5))
        );
        let nan = f64::NAN.to_bits();
        assert_eq!(
            combine_one(MinLoc, F64, (v(1.0), 1), (nan, 5)),
            Some((nan, 5))
        );
        assert_eq!(combine_one(MaxLoc, F64, (nan, 8), (nan, 5)), Some((nan, 5)));
        assert_eq!(
            combine_one(MinLoc, I32, (0xffff_fff0, 4), (3, 1)),
            Some((0xffff_fff0, 4))
        );
        assert_eq!(combine_one(MaxLoc, U64, (5, 4), (5, 1)), Some((5, 1)));
    }

    #[test]
    fn float_sums_follow_the_given_order() {
        // (1e16 + 1) + 1 != 1e16 + (1 + 1): the order is the caller's.
        let mut left = f64s(&[1e16]);
        combine(Sum, F64, &mut left, &f64s(&[1.0])).unwrap();
        combine(Sum, F64, &mut left, &f64s(&[1.0])).unwrap();
        let mut right = f64s(&[1.0]);
        combine(Sum, F64, &mut right, &f64s(&[1.0])).unwrap();
        combine(Sum, F64, &mut right, &f64s(&[1e16])).unwrap();
        assert_ne!(left, right);
        assert_eq!(f64::from_bits(right.values[0]), 1e16 + 2.0);
        let a = u64::from(0.1f32.to_bits());
        assert_eq!(one(Sum, F32, a, a), u64::from((0.1f32 + 0.1f32).to_bits()));
    }

    #[test]
    fn combine_refuses_mismatched_shapes_and_types() {
        let mut a = f64s(&[1.0, 2.0]);
        assert_eq!(
            combine(Sum, F64, &mut a, &f64s(&[1.0])),
            Err(AluError::Shape { a: 2, b: 1 })
        );
        assert!(combine(MinLoc, F64, &mut a, &f64s(&[1.0, 2.0])).is_err());
        // Locations on one side only.
        let mut with_locs = Operand {
            values: vec![1.0f64.to_bits()],
            locs: vec![3],
        };
        assert!(combine(MinLoc, F64, &mut with_locs, &f64s(&[2.0])).is_err());
        assert!(f64s(&[]).is_empty() && !f64s(&[1.0]).is_empty());
        assert_eq!(
            combine(Bor, F32, &mut a, &f64s(&[1.0, 2.0])),
            Err(AluError::NotApplicable { op: Bor, ty: F32 })
        );
    }

    #[test]
    fn payloads_round_trip_through_the_wire_encoding() {
        for ty in ReduceType::ALL {
            for op in [Sum, MaxLoc] {
                let x = Operand {
                    values: vec![mask(ty, 0x0102_0304_0506_0708), mask(ty, u64::MAX)],
                    locs: if op.has_locations() {
                        vec![3, 9]
                    } else {
                        Vec::new()
                    },
                };
                let mut bytes = Vec::new();
                encode(op, ty, &x, &mut bytes);
                let hdr = ReduceHeader {
                    op,
                    ty,
                    count: 2,
                    branch: 0,
                    fan_in: 1,
                    tree: 0,
                    level: 0,
                    first: 0,
                };
                assert_eq!(bytes.len(), hdr.payload_len().unwrap());
                assert_eq!(decode(&hdr, &bytes), Some(x.clone()));
                assert_eq!(decode(&hdr, &bytes[1..]), None);
                let host = to_host_bytes(op, ty, &x);
                assert_eq!(host.len(), bytes.len());
            }
        }
    }
}
