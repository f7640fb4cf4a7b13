//! The non-contiguous study's table and how its points are run: the
//! published one-way latencies (16 to 128 blocks of 256 B to 16 KiB, four
//! methods), and our latency for any (method, block, count), with the
//! shipped costs or others. `study` reads it for the comparison,
//! `study_cv` for the cross-validation.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::{scenario, simulate};

/// The study's scenario, each point set on it.
pub(super) const STUDY: &str = include_str!("../../scenarios/reproduce/noncontig-study.toml");

/// The study's methods: (name, our method, our form).
pub(super) const METHODS: [(&str, &str, &str); 4] = [
    ("sgrs", "sgl", "messaging"),
    ("copy", "pack", "messaging"),
    ("umr_sr", "indirect", "messaging"),
    ("umr_w", "indirect", "rdma"),
];

/// The block counts of the table's columns.
pub(super) const COUNTS: [u64; 4] = [16, 32, 64, 128];

/// One-way latency in µs at 16, 32, 64 and 128 blocks (the study's table).
pub(super) const PUBLISHED: [(u64, &str, [f64; 4]); 16] = [
    (256, "sgrs", [6.30, 7.97, 11.38, 17.42]),
    (256, "copy", [6.37, 7.94, 11.46, 17.35]),
    (256, "umr_sr", [6.43, 8.40, 14.38, 34.87]),
    (256, "umr_w", [4.21, 6.04, 11.85, 32.29]),
    (1024, "sgrs", [8.18, 11.19, 16.41, 26.23]),
    (1024, "copy", [11.01, 16.20, 27.73, 57.84]),
    (1024, "umr_sr", [7.94, 10.42, 15.80, 30.70]),
    (1024, "umr_w", [5.45, 8.14, 13.56, 27.11]),
    (4096, "sgrs", [15.62, 27.48, 46.09, 85.54]),
    (4096, "copy", [24.07, 46.46, 95.85, 195.58]),
    (4096, "umr_sr", [15.54, 27.66, 48.70, 97.30]),
    (4096, "umr_w", [13.11, 23.69, 45.45, 93.05]),
    (16384, "sgrs", [46.85, 85.30, 164.14, 322.39]),
    (16384, "copy", [94.59, 195.92, 380.18, 758.42]),
    (16384, "umr_sr", [48.39, 88.70, 170.68, 363.48]),
    (16384, "umr_w", [43.54, 83.88, 165.10, 359.62]),
];

/// A point: (study method, block bytes, block count).
pub(super) type Key = (&'static str, u64, u64);

/// Our one-way latency (µs) for every (study method, block, count) asked.
pub(super) fn latencies(points: &[Key]) -> anyhow::Result<BTreeMap<Key, f64>> {
    latencies_with(points, &[])
}

/// [`latencies`] with further settings applied to every point (other
/// costs and fewer iterations, for cross-validation).
pub(super) fn latencies_with(
    points: &[Key],
    extra: &[(&str, String)],
) -> anyhow::Result<BTreeMap<Key, f64>> {
    let results: Vec<anyhow::Result<(Key, f64)>> = points
        .par_iter()
        .map(|&(m, block, count)| {
            let (_, method, form) = METHODS
                .iter()
                .find(|x| x.0 == m)
                .copied()
                .unwrap_or(METHODS[0]);
            let mut sets = vec![
                ("workload.0.method", format!("\"{method}\"")),
                ("workload.0.form", format!("\"{form}\"")),
                ("workload.0.block", format!("\"{block}B\"")),
                ("workload.0.blocks", count.to_string()),
            ];
            sets.extend(extra.iter().cloned());
            let sc = scenario("noncontig-study.toml", STUDY, &sets)?;
            let r = simulate(&sc)?;
            let lat = r.noncontig.as_ref().map_or(0.0, |n| n.latency_p50_us);
            Ok(((m, block, count), lat))
        })
        .collect();
    results.into_iter().collect()
}
