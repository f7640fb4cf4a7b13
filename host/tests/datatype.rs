//! Datatype properties: for random nested types, flattening then packing
//! gives what a naive element-by-element walk of the type map gives, and
//! unpacking what was packed restores the described bytes and touches
//! nothing else.

use proptest::prelude::*;
use udrma_host::datatype::pack::{pack, unpack};
use udrma_host::datatype::{Constructor, Datatype, Order};

/// The type map of one element at `base`, byte by byte: the offset of
/// every data byte, in type-map order. Written from the MPI definitions
/// alone, without the flattening code.
fn typemap(t: &Datatype, base: i64, out: &mut Vec<i64>) {
    let copies = |inner: &Datatype, n: u64, at: i64, out: &mut Vec<i64>| {
        for k in 0..n as i64 {
            typemap(inner, at + k * inner.extent(), out);
        }
    };
    match t.constructor() {
        Constructor::Primitive { size } => out.extend((0..*size as i64).map(|i| base + i)),
        Constructor::Contiguous { count, inner } => copies(inner, *count, base, out),
        Constructor::Hvector {
            count,
            blocklen,
            stride,
            inner,
        } => {
            for j in 0..*count as i64 {
                copies(inner, *blocklen, base + j * stride, out);
            }
        }
        Constructor::Hindexed {
            blocklens,
            displs,
            inner,
        } => {
            for (b, d) in blocklens.iter().zip(displs) {
                copies(inner, *b, base + d, out);
            }
        }
        Constructor::Struct { fields } => {
            for (n, d, ft) in fields {
                copies(ft, *n, base + d, out);
            }
        }
        Constructor::Subarray {
            sizes,
            subsizes,
            starts,
            order,
            inner,
        } => {
            // Every index tuple of the sub-block, in storage order.
            let nd = sizes.len();
            let mut tuples: Vec<Vec<u64>> = vec![vec![]];
            let dims: Vec<usize> = match order {
                Order::C => (0..nd).collect(),
                Order::Fortran => (0..nd).rev().collect(),
            };
            for &d in &dims {
                tuples = tuples
                    .into_iter()
                    .flat_map(|t| {
                        (0..subsizes[d]).map(move |i| {
                            let mut t = t.clone();
                            t.push(starts[d] + i);
                            t
                        })
                    })
                    .collect();
            }
            for tuple in tuples {
                // tuple[k] is the index in dimension dims[k].
                let mut elem = 0i64;
                for (k, &d) in dims.iter().enumerate() {
                    elem = elem * if k == 0 { 1 } else { sizes[d] as i64 } + tuple[k] as i64;
                }
                typemap(inner, base + elem * inner.extent(), out);
            }
        }
        Constructor::Resized { inner, .. } => typemap(inner, base, out),
    }
}

fn leaf() -> impl Strategy<Value = Datatype> {
    prop_oneof![
        Just(Datatype::byte()),
        (1u64..=8).prop_map(|s| Datatype::primitive(s).unwrap()),
    ]
}

/// Random nested types with small counts, so the reference stays cheap.
fn datatype() -> impl Strategy<Value = Datatype> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (0u64..4, inner.clone()).prop_map(|(n, t)| Datatype::contiguous(n, &t).unwrap()),
            (0u64..4, 0u64..3, -3i64..4, inner.clone())
                .prop_map(|(c, b, s, t)| Datatype::vector(c, b, s, &t).unwrap()),
            (0u64..4, 0u64..3, -20i64..20, inner.clone())
                .prop_map(|(c, b, s, t)| Datatype::hvector(c, b, s, &t).unwrap()),
            (
                prop::collection::vec((0u64..3, -4i64..6), 0..4),
                inner.clone()
            )
                .prop_map(|(v, t)| {
                    let (b, d): (Vec<_>, Vec<_>) = v.into_iter().unzip();
                    Datatype::indexed(&b, &d, &t).unwrap()
                }),
            (
                0u64..3,
                prop::collection::vec(-4i64..6, 0..4),
                inner.clone()
            )
                .prop_map(|(b, d, t)| Datatype::indexed_block(b, &d, &t).unwrap()),
            (
                prop::collection::vec((0u64..3, -16i64..32), 0..4),
                inner.clone()
            )
                .prop_map(|(v, t)| {
                    let (b, d): (Vec<_>, Vec<_>) = v.into_iter().unzip();
                    Datatype::hindexed(&b, &d, &t).unwrap()
                }),
            prop::collection::vec((0u64..3, -16i64..32, inner.clone()), 0..4)
                .prop_map(|f| Datatype::structure(&f).unwrap()),
            (
                prop::collection::vec((1u64..4, 0u64..4, 0u64..4), 1..4),
                any::<bool>(),
                inner.clone()
            )
                .prop_map(|(dims, c, t)| {
                    let sizes: Vec<u64> = dims.iter().map(|d| d.0).collect();
                    let subs: Vec<u64> = dims.iter().map(|d| 1 + d.1 % d.0).collect();
                    let starts: Vec<u64> = dims
                        .iter()
                        .zip(&subs)
                        .map(|(d, s)| d.2 % (d.0 - s + 1))
                        .collect();
                    let order = if c { Order::C } else { Order::Fortran };
                    Datatype::subarray(&sizes, &subs, &starts, order, &t).unwrap()
                }),
            (inner, -8i64..8, 0i64..24)
                .prop_map(|(t, lb, e)| Datatype::resized(&t, lb, e).unwrap()),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512),
        ..ProptestConfig::default()
    })]

    #[test]
    fn flatten_then_pack_equals_the_naive_type_map(t in datatype(), count in 0u64..4) {
        let mut map = Vec::new();
        for i in 0..count as i64 {
            typemap(&t, i * t.extent(), &mut map);
        }
        prop_assert_eq!(map.len() as u64, t.size() * count, "size");
        let layout = t.commit().unwrap().repeat(count).unwrap();
        prop_assert_eq!(layout.size(), t.size() * count);
        // Blocks are merged: no block ends where the next begins.
        for w in layout.blocks().windows(2) {
            prop_assert!(w[0].offset + w[0].len as i64 != w[1].offset, "unmerged {:?}", w);
        }
        // A buffer that holds every offset, with distinct bytes.
        let lo = map.iter().copied().min().unwrap_or(0).min(0);
        let hi = map.iter().copied().max().unwrap_or(0).max(0) + 1;
        let origin = (-lo) as usize;
        let buf: Vec<u8> = (0..(hi - lo) as usize).map(|i| (i * 7 + 3) as u8).collect();
        let naive: Vec<u8> = map.iter().map(|&o| buf[(o - lo) as usize]).collect();
        let mut packed = Vec::new();
        pack(&layout, &buf, origin, &mut packed).unwrap();
        prop_assert_eq!(&packed, &naive);

        // Unpack into a sentinel buffer: described bytes come back, the
        // rest stays. (Overlapping type maps write the same byte twice; the
        // last write wins, as in the reference.)
        let mut back = vec![0xA5u8; buf.len()];
        unpack(&layout, &packed, &mut back, origin).unwrap();
        let mut want = vec![0xA5u8; buf.len()];
        for (&o, &b) in map.iter().zip(&naive) {
            want[(o - lo) as usize] = b;
        }
        prop_assert_eq!(back, want);
    }
}
