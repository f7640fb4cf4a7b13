//! The messaging workloads' plan (`msg-latency`, `msg-bw`, `msg-bibw`,
//! `msg-mixed`): each workload's two hosts, its sizes (the file's, or
//! the bimodal mix drawn from the seed), warm-up, count, window and
//! start; the same in every process. The runner (`crate::run::messaging`)
//! connects the messengers and installs the apps.

use udrma_faults::rng::{stream, unit};
use udrma_host::workload::msg::{MsgKind, MsgWorkload};
use udrma_proto::{Duration, Instant};

use crate::file::schema::{SizesSpec, WorkloadKind, WorkloadSpec};
use crate::file::source::Locate;
use crate::file::units::parse_size;
use crate::{Scenario, ScenarioError};

/// The messaging workloads of `sc` over `n` hosts, for `seed`.
pub fn workloads(sc: &Scenario, seed: u64, n: usize) -> Result<Vec<MsgWorkload>, ScenarioError> {
    let mut workloads: Vec<MsgWorkload> = Vec::new();
    for (i, w) in sc.file.workloads.iter().enumerate() {
        let who = format!("workload {i}");
        let a = sc.host(w.src.as_deref().unwrap_or(""), n, &who)?;
        let b = sc.host(w.dst.as_deref().unwrap_or(""), n, &who)?;
        let kind = match w.kind {
            WorkloadKind::MsgLatency => MsgKind::Latency,
            WorkloadKind::MsgBw => MsgKind::Bw,
            WorkloadKind::MsgBibw => MsgKind::Bibw,
            _ => MsgKind::Mixed,
        };
        let sizes = if kind == MsgKind::Mixed {
            mixed_sizes(seed, i, w.count)
        } else {
            sizes(sc, w, &who, MAX_MESSAGE)?
        };
        workloads.push(MsgWorkload {
            kind,
            a,
            b,
            sizes,
            warmup: if kind == MsgKind::Mixed {
                0
            } else {
                w.warmup.unwrap_or(2)
            },
            count: w.count.max(1),
            window: w.window.unwrap_or(64).max(1),
            start: Instant::ZERO + w.start.map_or(Duration::ZERO, |t| t.0),
        });
    }
    Ok(workloads)
}

/// The bimodal mix: most messages 128 B – 4 KiB, one in ten 8 KiB – 1 MiB
/// (log-uniform within each mode).
fn mixed_sizes(seed: u64, wl: usize, count: u32) -> Vec<u64> {
    let mut rng = stream(seed, &format!("mix:{wl}"));
    (0..count)
        .map(|_| {
            let big = unit(&mut rng) < 0.1;
            let (lo, hi) = if big {
                (13.0f64, 20.0f64)
            } else {
                (7.0f64, 12.0f64)
            };
            let e = lo + unit(&mut rng) * (hi - lo);
            2f64.powf(e).round() as u64
        })
        .collect()
}

/// Most bytes per message of a `msg-*` workload (real bytes).
pub const MAX_MESSAGE: u64 = 64 << 20;

/// The message sizes of a `msg-*` workload, each at most `max` bytes.
pub fn sizes(
    sc: &Scenario,
    w: &WorkloadSpec,
    who: &str,
    max: u64,
) -> Result<Vec<u64>, ScenarioError> {
    if w.sizes.is_some() && w.size.is_some() {
        return Err(sc.error_at(
            "sizes",
            format!(
                "{who}: `sizes` and `size` both given: give one (`sizes` takes a list or a range)"
            ),
        ));
    }
    let list = match &w.sizes {
        Some(SizesSpec::List(l)) => l.iter().map(|s| s.0).collect(),
        Some(SizesSpec::One(s)) => vec![s.0],
        Some(SizesSpec::Range(r)) => {
            let (a, b) = r.split_once("..").ok_or_else(|| {
                sc.error_at(
                    r,
                    format!(
                        "{who}: sizes = {r:?}: expected a size, a list of sizes or \"FROM..TO\" (powers of two)"
                    ),
                )
            })?;
            let a = parse_size(a.trim()).map_err(|e| sc.error_at(r, format!("{who}: {e}")))?;
            let b = parse_size(b.trim()).map_err(|e| sc.error_at(r, format!("{who}: {e}")))?;
            if a == 0 || a > b {
                return Err(sc.error_at(
                    r,
                    format!("{who}: sizes = {r:?}: FROM must be at least 1 and at most TO"),
                ));
            }
            // Doubling up to TO, and no further than u64 goes (a bound
            // near u64::MAX is refused by the limit below).
            let mut v = Vec::new();
            let mut s = Some(a);
            while let Some(x) = s.filter(|&x| x <= b) {
                v.push(x);
                s = x.checked_mul(2);
            }
            v
        }
        None => w.size.map(|s| vec![s.0]).unwrap_or_default(),
    };
    if list.is_empty() && w.kind != WorkloadKind::MsgMixed {
        return Err(sc.error_at("workload", format!("{who} needs `sizes` or `size`")));
    }
    if let Some(big) = list.iter().find(|s| **s > max) {
        return Err(sc.error_at(
            "sizes",
            format!(
                "{who}: messages are limited to {} MiB here, {big} B asked for",
                max >> 20
            ),
        ));
    }
    Ok(list)
}
