//! The NIC's ALU against the host's reference reduction: every operation
//! on every type it is defined for, on arbitrary element bits (NaNs,
//! signed zeros, overflowing integers included), with locations.

use proptest::prelude::*;

use udrma_host::collective::reference;
use udrma_nic::reduce::alu;
use udrma_proto::{ReduceOp, ReduceType};

/// Element bits that hit the interesting cases often.
fn bits(ty: ReduceType) -> impl Strategy<Value = u64> {
    let special: Vec<u64> = match ty {
        ReduceType::F64 => [
            0.0f64,
            -0.0,
            1.0,
            -1.0,
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::MAX,
        ]
        .iter()
        .map(|x| x.to_bits())
        .collect(),
        ReduceType::F32 => [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::MIN,
        ]
        .iter()
        .map(|x| u64::from(x.to_bits()))
        .collect(),
        ReduceType::I32 | ReduceType::U32 => vec![0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff],
        _ => vec![0, 1, i64::MAX as u64, i64::MIN as u64, u64::MAX],
    };
    let narrow = ty.width() == Some(4);
    prop_oneof![
        proptest::sample::select(special),
        any::<u64>().prop_map(move |v| if narrow { v & 0xffff_ffff } else { v }),
    ]
}

fn case() -> impl Strategy<Value = (ReduceOp, ReduceType, u64, u64, u32, u32)> {
    (0usize..ReduceOp::ALL.len(), 0usize..ReduceType::ALL.len())
        .prop_map(|(o, t)| (ReduceOp::ALL[o], ReduceType::ALL[t]))
        .prop_flat_map(|(op, ty)| (Just(op), Just(ty), bits(ty), bits(ty), 0u32..4, 0u32..4))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn the_alu_agrees_with_the_reference_bit_for_bit((op, ty, a, b, la, lb) in case()) {
        let nic = alu::combine_one(op, ty, (a, la), (b, lb));
        let host = reference::element(op, ty, (a, la), (b, lb));
        prop_assert_eq!(nic.is_some(), op.applies_to(ty));
        prop_assert_eq!(nic, host, "{} on {}", op, ty);
    }
}

#[test]
fn every_operation_and_type_pair_is_covered() {
    // The strategy draws from these: 5 operations on every type, 6 more on
    // the 4 integer types.
    let defined = ReduceOp::ALL
        .iter()
        .flat_map(|o| ReduceType::ALL.iter().map(move |t| (o, t)))
        .filter(|(o, t)| o.applies_to(**t))
        .count();
    assert_eq!(defined, 5 * 6 + 6 * 4);
}
