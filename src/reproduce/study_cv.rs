//! Cross-validation of the `connectx5-roce` profile against the
//! non-contiguous study's table: its twelve costs fitted again, from round
//! numbers, to the points of some block counts alone, and the error on the
//! block counts left out. Fitting on 16–64 blocks and predicting 128 asks
//! the model what a user asks of it: a count nobody measured.

use rayon::prelude::*;

use super::fit::{self, Values};
use super::study::{METHODS, PUBLISHED, STUDY};
use super::{scenario, simulate};

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

/// Rounds of each fit.
pub const ROUNDS: u32 = 3;

/// The folds: (block counts fitted, block counts predicted).
pub const FOLDS: [(&[u64], &[u64]); 2] = [(&[16, 32, 64], &[128]), (&[32, 64, 128], &[16])];

/// (ours, published) latency for every table point at `counts`, with the
/// profile's costs replaced by `v` (3 iterations after 1 warm-up, as the
/// fit script runs them).
fn pairs(v: &Values, counts: &[u64]) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut jobs = Vec::new();
    for (block, m, published) in PUBLISHED {
        for (i, c) in super::study::COUNTS.iter().enumerate() {
            if counts.contains(c) {
                jobs.push((m, block, *c, published[i]));
            }
        }
    }
    jobs.par_iter()
        .map(|&(m, block, count, published)| {
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
                ("workload.0.count", "3".to_string()),
                ("workload.0.warmup", "1".to_string()),
            ];
            let keys: Vec<String> = KEYS.iter().map(|(k, _)| format!("cost.{k}")).collect();
            for ((key, (_, unit)), (_, x)) in keys.iter().zip(KEYS).zip(v) {
                sets.push((key.as_str(), format!("\"{x:.4}{unit}\"")));
            }
            let sc = scenario("noncontig-study.toml", STUDY, &sets)?;
            let r = simulate(&sc)?;
            let ours = r.noncontig.as_ref().map_or(0.0, |n| n.latency_p50_us);
            Ok((ours, published))
        })
        .collect()
}

/// One fold's result: (block counts fitted, the fit's error there, block
/// counts predicted, the error there), errors as rms log ratios.
pub type Fold = (Vec<u64>, f64, Vec<u64>, f64);

/// Fits and scores every fold of [`FOLDS`].
pub fn cross_validate() -> anyhow::Result<Vec<Fold>> {
    let start: Values = KEYS
        .iter()
        .zip(NEUTRAL)
        .map(|((n, _), x)| (*n, x))
        .collect();
    let folds: Vec<(Vec<u64>, Vec<u64>)> = FOLDS
        .iter()
        .map(|(on, held)| (on.to_vec(), held.to_vec()))
        .collect();
    fit::cross_validate(&start, ROUNDS, &folds, &|v, counts| pairs(v, counts))
}
