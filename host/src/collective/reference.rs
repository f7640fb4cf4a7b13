//! The reference reduction: the same operations as the NIC's ALU, written
//! again with Rust's own typed arithmetic (no shared code with
//! `udrma_nic::reduce::alu`), so that the two can be checked against each
//! other element by element and the collective's results bit by bit.

use udrma_nic::reduce::Operand;
use udrma_proto::{ReduceOp, ReduceType};

/// A float of either width, for the reference's min/max rules.
trait Float: Copy + PartialOrd {
    fn nan(self) -> bool;
    fn negative(self) -> bool;
}

impl Float for f32 {
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn negative(self) -> bool {
        self.is_sign_negative()
    }
}

impl Float for f64 {
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn negative(self) -> bool {
        self.is_sign_negative()
    }
}

/// Whether `b` beats `a` for min (`less`) or max, with NaN winning and
/// `-0.0 < +0.0`; `None` on an exact tie.
fn float_beats<F: Float>(a: F, b: F, less: bool) -> Option<bool> {
    if a.nan() && b.nan() {
        return None;
    }
    if a.nan() {
        return Some(false);
    }
    if b.nan() {
        return Some(true);
    }
    if a == b {
        // Equal numbers: only the zeros' signs can differ.
        return match (a.negative(), b.negative()) {
            (false, true) => Some(less),
            (true, false) => Some(!less),
            _ => None,
        };
    }
    Some(if less { b < a } else { b > a })
}

fn ord_beats<T: Ord>(a: T, b: T, less: bool) -> Option<bool> {
    match a.cmp(&b) {
        core::cmp::Ordering::Equal => None,
        core::cmp::Ordering::Greater => Some(less),
        core::cmp::Ordering::Less => Some(!less),
    }
}

/// Whether `b` beats `a` (`None`: a tie) for min (`less`) or max.
fn beats(ty: ReduceType, a: u64, b: u64, less: bool) -> Option<bool> {
    match ty {
        ReduceType::F32 => float_beats(f32::from_bits(a as u32), f32::from_bits(b as u32), less),
        ReduceType::F64 => float_beats(f64::from_bits(a), f64::from_bits(b), less),
        ReduceType::I32 => ord_beats(a as u32 as i32, b as u32 as i32, less),
        ReduceType::I64 => ord_beats(a as i64, b as i64, less),
        ReduceType::U32 => ord_beats(a as u32, b as u32, less),
        _ => ord_beats(a, b, less),
    }
}

fn add(ty: ReduceType, a: u64, b: u64) -> u64 {
    match ty {
        ReduceType::F32 => (f32::from_bits(a as u32) + f32::from_bits(b as u32)).to_bits() as u64,
        ReduceType::F64 => (f64::from_bits(a) + f64::from_bits(b)).to_bits(),
        ReduceType::I32 => (a as u32 as i32).wrapping_add(b as u32 as i32) as u32 as u64,
        ReduceType::U32 => (a as u32).wrapping_add(b as u32) as u64,
        ReduceType::I64 => (a as i64).wrapping_add(b as i64) as u64,
        _ => a.wrapping_add(b),
    }
}

/// One element: `a` comes first in combination order. `None` when the
/// operation is not defined on the type.
pub fn element(op: ReduceOp, ty: ReduceType, a: (u64, u32), b: (u64, u32)) -> Option<(u64, u32)> {
    let int = matches!(
        ty,
        ReduceType::I32 | ReduceType::I64 | ReduceType::U32 | ReduceType::U64
    );
    let narrow = matches!(ty, ReduceType::I32 | ReduceType::U32 | ReduceType::F32);
    let bits = |v: u64| if narrow { v as u32 as u64 } else { v };
    let truth = |v: u64| bits(v) != 0;
    let logical = |f: fn(bool, bool) -> bool| Some((u64::from(f(truth(a.0), truth(b.0))), a.1));
    match op {
        ReduceOp::Sum => Some((add(ty, a.0, b.0), a.1)),
        ReduceOp::Min | ReduceOp::Max => {
            let less = op == ReduceOp::Min;
            let b_wins = beats(ty, a.0, b.0, less) == Some(true);
            Some((if b_wins { b.0 } else { a.0 }, a.1))
        }
        ReduceOp::MinLoc | ReduceOp::MaxLoc => {
            let less = op == ReduceOp::MinLoc;
            match beats(ty, a.0, b.0, less) {
                Some(true) => Some(b),
                Some(false) => Some(a),
                None => Some(if b.1 < a.1 { b } else { a }),
            }
        }
        _ if !int => None,
        ReduceOp::Land => logical(|x, y| x && y),
        ReduceOp::Lor => logical(|x, y| x || y),
        ReduceOp::Lxor => logical(|x, y| x ^ y),
        ReduceOp::Band => Some((bits(a.0 & b.0), a.1)),
        ReduceOp::Bor => Some((bits(a.0 | b.0), a.1)),
        ReduceOp::Bxor => Some((bits(a.0 ^ b.0), a.1)),
        ReduceOp::Unknown(_) => None,
    }
}

/// `acc ⊕ x`, element by element (`acc` first).
pub fn fold(op: ReduceOp, ty: ReduceType, acc: &Operand, x: &Operand) -> Operand {
    let locs = op.has_locations();
    let mut out = Operand::default();
    for i in 0..acc.values.len() {
        let la = if locs { acc.locs[i] } else { 0 };
        let lb = if locs { x.locs[i] } else { 0 };
        let (v, l) = element(op, ty, (acc.values[i], la), (x.values[i], lb))
            .expect("the plan only holds operations defined on their type");
        out.values.push(v);
        if locs {
            out.locs.push(l);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_zero_and_nan_rules() {
        let (pz, nz) = (0.0f64.to_bits(), (-0.0f64).to_bits());
        assert_eq!(
            element(ReduceOp::Min, ReduceType::F64, (pz, 0), (nz, 0)),
            Some((nz, 0))
        );
        assert_eq!(
            element(ReduceOp::Max, ReduceType::F64, (pz, 0), (nz, 0)),
            Some((pz, 0))
        );
        let nan = f64::NAN.to_bits();
        assert_eq!(
            element(
                ReduceOp::Max,
                ReduceType::F64,
                (1.0f64.to_bits(), 0),
                (nan, 0)
            ),
            Some((nan, 0))
        );
        assert_eq!(
            element(ReduceOp::Bor, ReduceType::F64, (1, 0), (1, 0)),
            None
        );
    }
}
