//! Running a scenario: build its world (topology, NICs, faults, pauses,
//! capture, trace), then hand it to the runner of its workloads (RDMA or
//! messaging), which checks the invariants and reports.

use std::io::Write;

use udrma_fabric::{TraceFormat, World};

use crate::build;
use crate::ladder::Ladder;
use crate::report::Report;
use crate::{Scenario, ScenarioError};

/// What the caller wants besides the report.
#[derive(Default)]
pub struct RunOptions {
    /// Overrides the file's seed.
    pub seed: Option<u64>,
    /// Capture to this sink, of these links (empty: all).
    pub pcap: Option<(Box<dyn Write>, Vec<String>)>,
    /// Trace to this sink.
    pub trace: Option<(TraceFormat, Box<dyn Write>)>,
    /// Draw a ladder diagram (`Report::ladder_svg`).
    pub ladder: Option<Ladder>,
}

/// Runs `sc`. Fails only on invalid input; check failures are in the
/// report.
pub fn run(sc: &Scenario, mut opts: RunOptions) -> Result<Report, ScenarioError> {
    let seed = opts.seed.unwrap_or(sc.file.seed);
    let topo = build::topology(sc)?;
    let n = topo.n_hosts();
    let cfg = build::fabric_config(sc, seed)?;
    let rules = build::rules(sc, seed, n)?;
    let pauses = build::pauses(sc, n)?;
    let mut world =
        World::new(topo, cfg, rules).map_err(|e| sc.error_at("fault", e.to_string()))?;
    for p in pauses {
        world
            .pause(p)
            .map_err(|e| sc.error_at("pause", e.to_string()))?;
    }
    if let Some((sink, links)) = opts.pcap.take() {
        let r = if links.is_empty() {
            world.tap_all(sink)
        } else {
            let names: Vec<&str> = links.iter().map(String::as_str).collect();
            world.tap(&names, sink)
        };
        r.map_err(|e| sc.error_at("pcap", format!("pcap: {e}")))?;
    }
    if let Some((format, sink)) = opts.trace.take() {
        world.set_trace_sink(format, sink);
    }
    let ladder_hosts = match &opts.ladder {
        Some(l) => Some((
            build::host(sc, &l.left, n, "ladder")?,
            build::host(sc, &l.right, n, "ladder")?,
        )),
        None => None,
    };
    if let Some((a, b)) = ladder_hosts {
        world.watch(a, b);
    }
    if sc.file.workloads.iter().any(|w| w.kind.is_messaging()) {
        let mut report = crate::messaging::run(sc, seed, world)?;
        if let Some((a, b)) = ladder_hosts {
            report.notes.push(format!(
                "no ladder between {a} and {b}: ladders draw RDMA scenarios only"
            ));
        }
        return Ok(report);
    }
    let ladder = match (ladder_hosts, opts.ladder.as_ref()) {
        (Some((a, b)), Some(spec)) => Some((a, b, spec)),
        _ => None,
    };
    crate::rdma::run(sc, seed, world, ladder)
}
