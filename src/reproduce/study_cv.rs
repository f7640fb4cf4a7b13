//! Cross-validation of the `connectx5-roce` profile against the
//! non-contiguous study's table: its twelve costs fitted again, from round
//! numbers, to the points of some block counts alone, and the error on the
//! block counts left out. Fitting on 16–64 blocks and predicting 128 asks
//! the model what a user asks of it: a count nobody measured.

use super::fit::{self, Values};
use super::study_table::{latencies_with, Key, COUNTS, PUBLISHED};

/// The costs `scripts/fit-noncontig.py` fits, each with its unit.
const KEYS: [(&str, &str); 12] = [
    ("doorbell", "ns"),
    ("descriptor_fetch", "ns"),
    ("recv_fetch", "ns"),
    ("per_sge", "ns"),
    ("dma_setup", "ns"),
    ("nic_per_packet", "ns"),
    ("translate_hit", "ns"),
    ("translate_miss", "ns"),
    ("translate_search", "ns"),
    ("host_copy_per_block", "ns"),
    ("dma_bandwidth", "Gbps"),
    ("host_copy_bandwidth", "Gbps"),
];

/// Where each fit starts: round numbers, not the shipped costs (fitted to
/// every point, the held-out ones among them).
const NEUTRAL: [f64; 12] = [
    100.0, 1000.0, 1000.0, 10.0, 10.0, 100.0, 50.0, 200.0, 1.0, 10.0, 50.0, 50.0,
];

/// Rounds of each fit. The search's factor shrinks to its square root
/// every round: after 3 rounds its finest step is still ×1.19, coarser
/// than the errors judged here; after 6 (×1.02) the 16–64 fit's error
/// barely falls (0.063 at 6 and 8 rounds, 0.062 at 10), and at 8 rounds
/// no method's error one doubling ahead moves by more than 0.005.
pub const ROUNDS: u32 = 6;

/// The folds: (block counts fitted, block counts predicted).
pub const FOLDS: [(&[u64], &[u64]); 2] = [(&[16, 32, 64], &[128]), (&[32, 64, 128], &[16])];

/// The table's points at `counts`, in the study's order, each with its
/// published latency.
fn points(counts: &[u64]) -> Vec<(Key, f64)> {
    let mut out = Vec::new();
    for (block, m, lat) in PUBLISHED {
        for (c, l) in COUNTS.iter().zip(lat) {
            if counts.contains(c) {
                out.push(((m, block, *c), l));
            }
        }
    }
    out
}

/// (study method, ours, published) latency for every table point at
/// `counts`, with the profile's costs replaced by `v` (3 iterations after
/// 1 warm-up, as the fit script runs them).
fn pairs(v: &Values, counts: &[u64]) -> anyhow::Result<Vec<(&'static str, f64, f64)>> {
    let keys: Vec<String> = KEYS.iter().map(|(k, _)| format!("cost.{k}")).collect();
    let mut extra = vec![
        ("workload.0.count", "3".to_string()),
        ("workload.0.warmup", "1".to_string()),
    ];
    for ((key, (_, unit)), (_, x)) in keys.iter().zip(KEYS).zip(v) {
        extra.push((key.as_str(), format!("\"{x:.4}{unit}\"")));
    }
    let points = points(counts);
    let at: Vec<Key> = points.iter().map(|(k, _)| *k).collect();
    let ours = latencies_with(&at, &extra)?;
    Ok(points.iter().map(|(k, p)| (k.0, ours[k], *p)).collect())
}

/// Fits every fold of [`FOLDS`] and gives its points at the block
/// counts left out, labelled by study method.
pub fn cross_validate() -> anyhow::Result<Vec<fit::Fold<&'static [u64], &'static str>>> {
    let start: Values = KEYS
        .iter()
        .zip(NEUTRAL)
        .map(|((n, _), x)| (*n, x))
        .collect();
    fit::cross_validate(&start, ROUNDS, &FOLDS, &|v, c| pairs(v, c))
}
