//! The plan of a collective run by one of MPI's algorithms
//! (`kind = "collective"` with `algorithm` set to anything but `nic`):
//! the collective, its ranks, the sizes and iterations, each key checked
//! against what it may be.

use udrma_host::collective::schedule::{auto, Algorithm, Collective, Spec};
use udrma_host::collective::scheduled::{ScheduledPlan, SizeRun, Wire};
use udrma_proto::{Duration, Instant};

use crate::file::schema::{WorkloadKind, WorkloadSpec};
use crate::file::source::Locate;
use crate::{Scenario, ScenarioError};

/// Most bytes one rank's buffer may hold (the collective's input and
/// output and the scratch room its algorithm needs: an all-to-all holds
/// two or three blocks per rank), and most over all ranks: the bytes are
/// real.
pub const MAX_RANK_BYTES: u64 = 64 << 20;
/// Most bytes over every rank's buffer.
pub const MAX_TOTAL_BYTES: u64 = 2 << 30;
/// Most bytes per rank with phantom payloads (nothing is stored).
pub const MAX_PHANTOM_BYTES: u64 = 1 << 30;
/// Most pieces of the ring allgatherv per rank (`pipeline`).
pub const MAX_PIECES: u64 = 65_536;
/// Most measured iterations at each size, and most warm-up ones.
pub const MAX_ITERATIONS: u32 = 10_000;
/// Most iterations over every size, warm-up ones included.
pub const MAX_LAPS: u32 = 1_000_000;

fn bad(sc: &Scenario, key: &str, msg: String) -> ScenarioError {
    sc.error_at_key(key, format!("collective workload: {msg}"))
}

/// Plans the collective workload of `sc` over `n` hosts.
pub fn plan(sc: &Scenario, seed: u64, n: usize) -> Result<ScheduledPlan, ScenarioError> {
    let w = sc
        .file
        .workloads
        .iter()
        .find(|w| w.kind == WorkloadKind::Collective)
        .ok_or_else(|| sc.error_at("workload", "no collective workload".into()))?;
    for (key, given) in [
        ("fan_in", w.fan_in.is_some()),
        ("interval", w.interval.is_some()),
        ("method", w.method.is_some()),
    ] {
        if given {
            return Err(bad(
                sc,
                key,
                format!("`{key}` belongs to the NIC study (`algorithm = \"nic\"`), not to an MPI algorithm"),
            ));
        }
    }
    let collective = collective(sc, w)?;
    does_not_apply(sc, w, collective)?;
    let algorithm = algorithm(sc, w, collective)?;
    let (op, ty) =
        crate::plan::collplan::op_and_type(w, false).map_err(|(key, m)| bad(sc, key, m))?;
    let ranks = w.nodes.unwrap_or(n as u32);
    if ranks < 1 || ranks as usize > n {
        return Err(bad(
            sc,
            "nodes",
            format!("`nodes = {ranks}`: must be 1..={n} (the topology's hosts)"),
        ));
    }
    let (wire, phantom) = wire(sc, w)?;
    let elem = ty.width().unwrap_or(8) as u64;
    let spec = Spec {
        collective,
        algorithm: algorithm.unwrap_or(Algorithm::Dissemination),
        ranks,
        count: 0,
        elem,
        root: 0,
        pipeline: match w.pipeline {
            None => Spec::PIPELINE,
            Some(s) if s.0 >= elem => s.0,
            Some(s) => {
                return Err(bad(
                    sc,
                    "pipeline",
                    format!(
                        "`pipeline = {}` B: a piece must hold at least one {ty} element ({elem} B)",
                        s.0
                    ),
                ))
            }
        },
    };
    let mut sizes = Vec::new();
    let bytes = byte_sizes(sc, w, collective, phantom)?;
    for b in bytes {
        if b % elem != 0 {
            return Err(bad(
                sc,
                if w.sizes.is_some() { "sizes" } else { "size" },
                format!("{b} B is not a whole number of {ty} elements ({elem} B each)"),
            ));
        }
        let count = b / elem;
        let run = SizeRun {
            count,
            algorithm: match algorithm {
                Some(a) => auto::runs(collective, a, ranks, count, elem),
                None => auto::choose(collective, ranks, count, elem),
            },
        };
        fits(sc, w, &spec, run, wire, phantom)?;
        sizes.push(run);
    }
    let iterations = w.count;
    if iterations == 0 || iterations > MAX_ITERATIONS {
        return Err(bad(
            sc,
            "count",
            format!("`count = {iterations}` iterations: must be 1..={MAX_ITERATIONS}"),
        ));
    }
    let warmup = w.warmup.unwrap_or(1);
    let laps = u64::from(iterations + warmup.min(MAX_ITERATIONS)) * sizes.len() as u64;
    if warmup > MAX_ITERATIONS || laps > u64::from(MAX_LAPS) {
        return Err(bad(
            sc,
            "warmup",
            format!(
                "`warmup = {warmup}` and `count = {iterations}` at {} sizes: at most {MAX_ITERATIONS} each, and {MAX_LAPS} iterations in all",
                sizes.len()
            ),
        ));
    }
    Ok(ScheduledPlan {
        spec,
        sizes,
        op,
        ty,
        iterations,
        warmup,
        start: Instant::ZERO + w.start.map_or(Duration::ZERO, |t| t.0),
        seed,
        wire,
        phantom,
    })
}

/// The bytes per rank at each size: a barrier's one size of none; real
/// bytes up to the messaging layer's largest message, phantom ones up to
/// [`MAX_PHANTOM_BYTES`].
fn byte_sizes(
    sc: &Scenario,
    w: &WorkloadSpec,
    collective: Collective,
    phantom: bool,
) -> Result<Vec<u64>, ScenarioError> {
    if collective == Collective::Barrier {
        return Ok(vec![0]);
    }
    let all = crate::plan::messaging::sizes(sc, w, "collective workload", u64::MAX)?;
    let real = crate::plan::messaging::MAX_MESSAGE;
    let key = if w.sizes.is_some() { "sizes" } else { "size" };
    if let Some(big) = all.iter().find(|b| phantom && **b > MAX_PHANTOM_BYTES) {
        return Err(sc.error_at_key(
            key,
            format!(
                "collective workload: {big} B asked for, and phantom payloads are limited \
                 to {} GiB a rank",
                MAX_PHANTOM_BYTES >> 30
            ),
        ));
    }
    if let Some(big) = all.iter().find(|b| !phantom && **b > real) {
        return Err(sc.error_at_key(
            key,
            format!(
                "collective workload: {big} B asked for, and real bytes are limited to {} MiB \
                 a size: up to {} GiB with phantom payloads (`[topology] phantom = true`, \
                 `form = \"rdma\"`), which store nothing",
                real >> 20,
                MAX_PHANTOM_BYTES >> 30
            ),
        ));
    }
    Ok(all)
}

/// Refuses a key the collective has no use for: a barrier moves no data
/// (no size, element type or operation); a broadcast, allgather or
/// all-to-all reduces nothing.
fn does_not_apply(
    sc: &Scenario,
    w: &WorkloadSpec,
    collective: Collective,
) -> Result<(), ScenarioError> {
    let reduces = matches!(
        collective,
        Collective::Allreduce | Collective::Reduce | Collective::ReduceScatter
    );
    let barrier = collective == Collective::Barrier;
    for (key, given, why) in [
        (
            "sizes",
            barrier && w.sizes.is_some(),
            "a barrier moves no data",
        ),
        (
            "size",
            barrier && w.size.is_some(),
            "a barrier moves no data",
        ),
        (
            "datatype",
            barrier && w.datatype.is_some(),
            "a barrier moves no data",
        ),
        (
            "reduce_op",
            !reduces && w.reduce_op.is_some(),
            "it reduces nothing",
        ),
    ] {
        if given {
            return Err(bad(
                sc,
                key,
                format!("`{key}` does not apply to {collective}: {why}"),
            ));
        }
    }
    Ok(())
}

/// What carries the messages (`form`), and whether payloads are phantom
/// (which needs the RDMA wire).
fn wire(sc: &Scenario, w: &WorkloadSpec) -> Result<(Wire, bool), ScenarioError> {
    let wire = match w.form.as_deref() {
        None | Some("messaging") => Wire::Messaging,
        Some("rdma") => Wire::Write,
        Some(other) => {
            return Err(bad(
                sc,
                "form",
                format!("`form = {other:?}`: expected \"messaging\" (the messaging layer's sends) or \"rdma\" (one RDMA WRITE per message)"),
            ))
        }
    };
    let phantom = sc.file.topology.phantom;
    if phantom && wire == Wire::Messaging {
        return Err(bad(
            sc,
            // Where the file says it: `form = "messaging"`, or, with no
            // `form`, the `phantom` line.
            if w.form.is_some() { "form" } else { "phantom" },
            "phantom payloads (`[topology] phantom = true`) need `form = \"rdma\"`: the messaging layer moves real bytes".into(),
        ));
    }
    Ok((wire, phantom))
}

/// Refuses a size whose buffers the machine should not be asked to hold
/// (or, with phantom payloads, that one message could not carry).
fn fits(
    sc: &Scenario,
    w: &WorkloadSpec,
    spec: &Spec,
    run: SizeRun,
    wire: Wire,
    phantom: bool,
) -> Result<(), ScenarioError> {
    let at = Spec {
        count: run.count,
        algorithm: run.algorithm,
        ..*spec
    };
    // The ring's allgatherv sends one piece a step: a tiny pipeline on a
    // large vector is millions of steps per rank, held in memory.
    if at.collective == Collective::Allreduce
        && at.algorithm == Algorithm::Ring
        && at.bytes() / at.pipeline.max(1) > MAX_PIECES
    {
        return Err(bad(
            sc,
            "pipeline",
            format!(
                "`pipeline = {}` B cuts {} B into more than {MAX_PIECES} pieces per rank; take a larger pipeline",
                at.pipeline,
                at.bytes()
            ),
        ));
    }
    if phantom {
        return Ok(());
    }
    // The key the file sizes the collective with, for the error's line.
    let key = if w.sizes.is_some() { "sizes" } else { "size" };
    let mut total = 0u64;
    for r in 0..spec.ranks {
        let plan = at
            .plan(r)
            .map_err(|e| bad(sc, "algorithm", e.to_string()))?;
        // On the RDMA wire every message received has its own slot too.
        let slots: u64 = match wire {
            Wire::Messaging => 0,
            Wire::Write => plan
                .steps
                .iter()
                .flat_map(|s| &s.recvs)
                .map(|(m, _)| m.bytes().max(1))
                .sum(),
        };
        let arena = plan.arena + slots;
        if arena > MAX_RANK_BYTES {
            let slots = if wire == Wire::Write {
                " (its landing slots included, on the RDMA wire)"
            } else {
                ""
            };
            // (Phantom payloads returned above: these bytes are real.)
            let phantom =
                ": with `[topology] phantom = true` and `form = \"rdma\"` nothing is stored";
            return Err(bad(
                sc,
                key,
                format!(
                    "{} B per rank needs {arena} B of buffer at rank {r}{slots}; at most {MAX_RANK_BYTES} B, as the bytes are real{phantom}",
                    at.bytes()
                ),
            ));
        }
        total += arena;
    }
    if total > MAX_TOTAL_BYTES {
        return Err(bad(
            sc,
            key,
            format!(
                "{} B per rank needs {total} B of buffers over {} ranks; at most {MAX_TOTAL_BYTES} B",
                at.bytes(),
                spec.ranks
            ),
        ));
    }
    Ok(())
}

fn collective(sc: &Scenario, w: &WorkloadSpec) -> Result<Collective, ScenarioError> {
    let name = w.collective.as_deref().unwrap_or("allreduce");
    Collective::ALL
        .into_iter()
        .find(|c| c.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
            bad(
                sc,
                "collective",
                format!(
                    "`collective = {name:?}`: expected one of {}",
                    names.join(", ")
                ),
            )
        })
}

/// The algorithm asked for, or `None` for `auto` (chosen per size).
fn algorithm(
    sc: &Scenario,
    w: &WorkloadSpec,
    collective: Collective,
) -> Result<Option<Algorithm>, ScenarioError> {
    let name = w.algorithm.as_deref().unwrap_or_default();
    if name == "auto" {
        return Ok(None);
    }
    let takes = collective.algorithms();
    takes
        .iter()
        .find(|a| a.name() == name)
        .copied()
        .map(Some)
        .ok_or_else(|| {
            let names: Vec<&str> = takes.iter().map(|a| a.name()).collect();
            bad(
                sc,
                "algorithm",
                format!(
                    "`algorithm = {name:?}` does not run {collective}: it takes {}, \"auto\" (MPICH's choice by size), or \"nic\" for the NIC study",
                    names.join(", ")
                ),
            )
        })
}
