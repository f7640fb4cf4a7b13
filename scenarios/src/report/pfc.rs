//! What PFC did in a run (frames, paused time, each paused port, a
//! deadlock), and the checks a lossless fabric adds.

use std::collections::BTreeMap;

use serde::Serialize;
use udrma_proto::Instant;

/// A lossless fabric's own checks: no packet was dropped at a queue
/// (tail drop, a full headroom, a paused host's overflow, a trim), and
/// no PFC deadlock formed.
pub(crate) fn lossless_checks(
    w: &udrma_fabric::World,
    checks: &mut BTreeMap<String, bool>,
    notes: &mut Vec<String>,
) {
    use udrma_fabric::DropReason as R;
    let at_queue: u64 = [R::QueueFull, R::Headroom, R::PausedOverflow, R::Trimmed]
        .iter()
        .filter_map(|r| w.stats().dropped.get(r))
        .sum();
    checks.insert("no-queue-drop".into(), at_queue == 0);
    if at_queue > 0 {
        notes.push(format!(
            "{at_queue} packets dropped at a queue of a lossless fabric ({:?})",
            w.stats().dropped
        ));
    }
    checks.insert("no-pfc-deadlock".into(), w.pfc_deadlock().is_none());
    if let Some(d) = w.pfc_deadlock() {
        notes.push(format!(
            "PFC deadlock formed at {} (confirmed at {}, nothing of it moved since): {}",
            d.formed - Instant::ZERO,
            d.confirmed - Instant::ZERO,
            d.cycle.join(" waits for ")
        ));
    }
}

/// What PFC did in a run: frames and paused time in all, each port that
/// was paused, and the deadlock if one formed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PfcReport {
    /// PAUSE frames that reached a port (refreshes included).
    pub pauses: u64,
    /// RESUME frames.
    pub resumes: u64,
    /// Paused time, every port's priorities added up, ns.
    pub paused_ns: u64,
    /// Bytes some ingress held at most.
    pub max_ingress_bytes: u64,
    /// The ports that were paused, as `link (from→to)`, in port order.
    pub ports: Vec<PfcPortReport>,
    /// The first PFC deadlock, if one formed.
    pub deadlock: Option<PfcDeadlockReport>,
}

/// One port's pauses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PfcPortReport {
    /// `link (from→to)`.
    pub port: String,
    /// PAUSE frames it received.
    pub pauses: u64,
    /// RESUME frames.
    pub resumes: u64,
    /// Paused time, ns.
    pub paused_ns: u64,
}

/// A PFC deadlock as the report gives it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PfcDeadlockReport {
    /// When the cycle's last PAUSE took effect, ns.
    pub formed_ns: u64,
    /// The ports of the cycle, each waiting for the next.
    pub cycle: Vec<String>,
}

impl PfcReport {
    /// From a lossless world; `None` for a lossy one.
    pub fn of(w: &udrma_fabric::World) -> Option<PfcReport> {
        w.pfc()?;
        let stats = w.pfc_stats();
        let ports = stats
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pauses > 0)
            .map(|(p, s)| PfcPortReport {
                port: w.port_name(p as u32),
                pauses: s.pauses,
                resumes: s.resumes,
                paused_ns: s.paused_ps / 1000,
            })
            .collect();
        Some(PfcReport {
            pauses: stats.iter().map(|s| s.pauses).sum(),
            resumes: stats.iter().map(|s| s.resumes).sum(),
            paused_ns: stats.iter().map(|s| s.paused_ps).sum::<u64>() / 1000,
            max_ingress_bytes: stats.iter().map(|s| s.max_ingress_bytes).max().unwrap_or(0),
            ports,
            deadlock: w.pfc_deadlock().map(|d| PfcDeadlockReport {
                formed_ns: d.formed.as_nanos(),
                cycle: d.cycle.clone(),
            }),
        })
    }
}
