//! A collective run by one of MPI's algorithms, reported as the OSU
//! micro-benchmarks report one (`osu_allreduce`: size, average, minimum
//! and maximum latency) with NCCL-tests' algorithm and bus bandwidth
//! beside it.

use std::fmt::Write as _;

use serde::Serialize;

/// One size's row.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OsuRow {
    /// Bytes per rank: its vector (allreduce, reduce, broadcast), its
    /// block (allgather; reduce-scatter: the block it gets, of the `p`
    /// it gives), its block for each rank (all-to-all).
    pub size: u64,
    /// The algorithm run at this size.
    pub algorithm: String,
    /// Each rank's mean latency over the measured iterations it
    /// finished, averaged over the ranks, µs (OSU's "Avg Latency");
    /// `None` (JSON `null`) when no rank finished one.
    pub avg_us: Option<f64>,
    /// The smallest rank's mean, µs.
    pub min_us: Option<f64>,
    /// The largest rank's mean, µs.
    pub max_us: Option<f64>,
    /// NCCL-tests' algorithm bandwidth: its bytes over the average
    /// latency, GB/s (10^9 bytes a second). Its bytes are the size, or
    /// for allgather, all-to-all and reduce-scatter the size times the
    /// ranks (NCCL-tests' whole buffer).
    pub algbw_gbs: Option<f64>,
    /// NCCL-tests' bus bandwidth: the algorithm bandwidth times
    /// `2(p − 1)/p` (allreduce), `(p − 1)/p` (allgather, all-to-all,
    /// reduce-scatter) or 1 (reduce, broadcast), GB/s.
    pub busbw_gbs: Option<f64>,
    /// Measured iterations that finished, every rank's added up: the
    /// latencies are over these.
    pub measured: u64,
    /// Measured iterations asked for: ranks × iterations.
    pub wanted: u64,
    /// Messages one iteration sends over every rank (barrier excluded).
    pub messages: u64,
    /// Whether every rank's result equals the schedules' in memory.
    pub result_equal: bool,
}

/// `scheduled` in the JSON report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OsuReport {
    /// `allreduce`, `reduce`, `broadcast`, `allgather`, `alltoall`,
    /// `reduce_scatter`, `barrier`.
    pub collective: String,
    /// The operation (reductions).
    pub op: String,
    /// The element type.
    pub datatype: String,
    /// Ranks taking part.
    pub ranks: u32,
    /// Measured iterations per size.
    pub iterations: u32,
    /// Iterations run first per size and not measured.
    pub warmup: u32,
    /// One row per size.
    pub rows: Vec<OsuRow>,
}

impl OsuReport {
    /// The bus bandwidth's factor for `p` ranks, and whether the
    /// algorithm bandwidth counts every rank's block (NCCL-tests'
    /// `PERFORMANCE.md` factors).
    pub fn factors(collective: &str, p: u32) -> (f64, bool) {
        let p = f64::from(p.max(1));
        match collective {
            "allreduce" => (2.0 * (p - 1.0) / p, false),
            "allgather" | "alltoall" | "reduce_scatter" => ((p - 1.0) / p, true),
            _ => (1.0, false),
        }
    }

    /// The summary's lines.
    pub fn lines(&self, s: &mut String) {
        let reduces = matches!(
            self.collective.as_str(),
            "allreduce" | "reduce" | "reduce_scatter"
        );
        let what = if reduces {
            format!("{} {} of {}", self.collective, self.op, self.datatype)
        } else if self.collective == "barrier" {
            self.collective.clone()
        } else {
            format!("{} of {}", self.collective, self.datatype)
        };
        let _ = writeln!(
            s,
            "collective  {what} over {} ranks, {} iteration{} after {} warm-up",
            self.ranks,
            self.iterations,
            if self.iterations == 1 { "" } else { "s" },
            self.warmup
        );
        let _ = writeln!(
            s,
            "  {:>12} {:<26} {:>12} {:>12} {:>12} {:>10} {:>10} {:>9}",
            "size", "algorithm", "avg_us", "min_us", "max_us", "algbw_GBs", "busbw_GBs", "messages"
        );
        for r in &self.rows {
            let f = |x: Option<f64>, w: usize| {
                x.map_or(format!("{:>w$}", "-"), |x| format!("{x:>w$.2}"))
            };
            let mut flags = String::new();
            if r.measured < r.wanted {
                let _ = write!(
                    flags,
                    "  PARTIAL: {} of {} rank-iterations finished",
                    r.measured, r.wanted
                );
            }
            if !r.result_equal {
                flags.push_str("  RESULT DIFFERS");
            }
            let _ = writeln!(
                s,
                "  {:>12} {:<26} {} {} {} {} {} {:>9}{flags}",
                r.size,
                r.algorithm,
                f(r.avg_us, 12),
                f(r.min_us, 12),
                f(r.max_us, 12),
                f(r.algbw_gbs, 10),
                f(r.busbw_gbs, 10),
                r.messages,
            );
        }
    }
}
