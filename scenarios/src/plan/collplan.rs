//! The plan of a collective study (`kind = "collective"`): the collective,
//! operation, type and size, the trees, the iterations, and the checks of
//! its keys. Running it is the run floor's business (the `collective` module).

use udrma_host::collective::{CollectivePlan, Tree};
use udrma_nic::reduce::CollectiveKind;
use udrma_proto::{Duration, Instant, ReduceOp, ReduceType};

use crate::file::schema::{TopologyKind, WorkloadKind, WorkloadSpec};
use crate::file::source::Locate;
use crate::{Scenario, ScenarioError};

/// Most iterations a collective workload may run.
pub const MAX_ITERATIONS: u32 = 10_000;
/// Most elements per node.
pub const MAX_ELEMENTS: u64 = 1 << 16;

/// Which versions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// NIC offload only.
    Nic,
    /// Host software only.
    Host,
    /// Both, on identical fabrics (the default).
    Both,
}

fn bad(sc: &Scenario, key: &str, msg: String) -> ScenarioError {
    sc.error_at_key(key, format!("collective workload: {msg}"))
}

/// The radix that follows the topology: a k-ary n-tree's `k`, a 3-tier fat
/// tree's hosts per edge switch, every host under a star's one switch.
pub fn default_fan_in(sc: &Scenario, nodes: u32) -> u32 {
    let t = &sc.file.topology;
    match t.kind {
        TopologyKind::KaryNtree => t.k.unwrap_or(2),
        TopologyKind::FatTree => (t.k.unwrap_or(4) / 2).max(2),
        TopologyKind::Star => nodes.max(2),
        TopologyKind::Pair | TopologyKind::Ring => 2,
        TopologyKind::Dumbbell => t.hosts.unwrap_or(2).max(2),
    }
}

/// The study as planned.
#[derive(Debug, Clone)]
pub struct Planned {
    /// What every host agrees on.
    pub plan: CollectivePlan,
    /// Which versions run.
    pub method: Method,
}

/// Plans the collective workload of `sc` over `n` hosts.
pub fn plan(sc: &Scenario, seed: u64, n: usize) -> Result<Planned, ScenarioError> {
    let w = sc
        .file
        .workloads
        .iter()
        .find(|w| w.kind == WorkloadKind::Collective)
        .ok_or_else(|| sc.error_at("workload", "no collective workload".into()))?;
    let (kind, op, ty) = what(sc, w)?;
    let width = ty.width().unwrap_or(8) as u64;
    let size = w.size.map(|s| s.0).ok_or_else(|| {
        sc.error_at(
            "workload",
            "collective workload: needs `size` (bytes of data per node)".into(),
        )
    })?;
    if size == 0 || size % width != 0 || size / width > MAX_ELEMENTS {
        return Err(bad(
            sc,
            "size",
            format!(
                "`size = {size}`: must be a whole number of {ty} elements ({width} B each), 1..={MAX_ELEMENTS} of them"
            ),
        ));
    }
    let (nodes, fan_in, tree) = tree(sc, w, n)?;
    let iterations = w.count;
    if iterations == 0 || iterations > MAX_ITERATIONS {
        return Err(bad(
            sc,
            "count",
            format!("`count = {iterations}` iterations: must be 1..={MAX_ITERATIONS}"),
        ));
    }
    for (key, given) in [
        ("sizes", w.sizes.is_some()),
        ("warmup", w.warmup.is_some()),
        ("form", w.form.is_some()),
        ("pipeline", w.pipeline.is_some()),
    ] {
        if given {
            return Err(bad(
                sc,
                key,
                format!("`{key}` belongs to an MPI algorithm (`algorithm = \"ring\"`, ...), not to the NIC study"),
            ));
        }
    }
    let default = if w.algorithm.as_deref() == Some("nic") {
        "nic"
    } else {
        "both"
    };
    let method = match w.method.as_deref().unwrap_or(default) {
        "nic" => Method::Nic,
        "host" => Method::Host,
        "both" => Method::Both,
        other => {
            return Err(bad(
                sc,
                "method",
                format!("`method = {other:?}`: expected nic, host or both"),
            ))
        }
    };
    if w.algorithm.as_deref() == Some("nic") && method != Method::Nic {
        return Err(bad(
            sc,
            "method",
            "`algorithm = \"nic\"` runs the NIC offload only: leave `method` out".into(),
        ));
    }
    let interval = w.interval.map_or(Duration::from_micros(500), |t| t.0);
    if interval == Duration::ZERO {
        return Err(bad(sc, "interval", "`interval` must be positive".into()));
    }
    Ok(Planned {
        plan: CollectivePlan {
            kind,
            op,
            ty,
            count: (size / width) as u32,
            nodes,
            radix: fan_in,
            tree,
            host_tree: Tree::knomial(nodes, 2),
            iterations,
            start: Instant::ZERO + w.start.map_or(Duration::ZERO, |t| t.0),
            interval,
            seed,
            ep: 0x7ff0,
            tree_id: 1,
        },
        method,
    })
}

/// The collective, its operation and its datatype, each read against its
/// names, and the operation defined on the type.
fn what(
    sc: &Scenario,
    w: &WorkloadSpec,
) -> Result<(CollectiveKind, ReduceOp, ReduceType), ScenarioError> {
    let kind = match w.collective.as_deref().unwrap_or("allreduce") {
        "allreduce" => CollectiveKind::Allreduce,
        "reduce" => CollectiveKind::Reduce,
        "broadcast" => CollectiveKind::Broadcast,
        other => {
            return Err(bad(
                sc,
                "collective",
                format!("`collective = {other:?}`: expected allreduce, reduce or broadcast"),
            ))
        }
    };
    let (op, ty) = op_and_type(w, true).map_err(|(key, m)| bad(sc, key, m))?;
    Ok((kind, op, ty))
}

/// The operation and datatype of a collective workload, each read
/// against its names, and the operation defined on the type; with
/// `locations` false, MINLOC and MAXLOC are refused (MPI's algorithms:
/// they take pair types in MPI). An error names its key.
pub(crate) fn op_and_type(
    w: &WorkloadSpec,
    locations: bool,
) -> Result<(ReduceOp, ReduceType), (&'static str, String)> {
    let op_name = w.reduce_op.as_deref().unwrap_or("sum");
    let takes = |o: &&ReduceOp| locations || !o.has_locations();
    let op = ReduceOp::from_name(op_name)
        .filter(|o| takes(&o))
        .ok_or_else(|| {
            let names: Vec<&str> = ReduceOp::ALL
                .iter()
                .filter(takes)
                .map(|o| o.name())
                .collect();
            let which = if locations {
                "expected"
            } else {
                "an MPI algorithm takes"
            };
            let names = names.join(", ");
            (
                "reduce_op",
                format!("`reduce_op = {op_name:?}`: {which} one of {names}"),
            )
        })?;
    let ty_name = w.datatype.as_deref().unwrap_or("f64");
    let ty = ReduceType::from_name(ty_name).ok_or_else(|| {
        let names: Vec<&str> = ReduceType::ALL.iter().map(|t| t.name()).collect();
        let names = names.join(", ");
        (
            "datatype",
            format!("`datatype = {ty_name:?}`: expected one of {names}"),
        )
    })?;
    if !op.applies_to(ty) {
        return Err((
            "reduce_op",
            format!("{op} is not defined on {ty} (logical and bitwise operations take integers)"),
        ));
    }
    Ok((op, ty))
}

/// The nodes taking part (2 up to the topology's hosts), the NIC tree's
/// radix, and the tree, whose root a NIC must be able to serve.
fn tree(sc: &Scenario, w: &WorkloadSpec, n: usize) -> Result<(u32, u32, Tree), ScenarioError> {
    let nodes = w.nodes.unwrap_or(n as u32);
    if nodes < 2 || nodes as usize > n {
        return Err(bad(
            sc,
            "nodes",
            format!("`nodes = {nodes}`: must be 2..={n} (the topology's hosts)"),
        ));
    }
    let fan_in = w.fan_in.unwrap_or_else(|| default_fan_in(sc, nodes));
    if !(2..=256).contains(&fan_in) {
        return Err(bad(
            sc,
            "fan_in",
            format!("`fan_in = {fan_in}`: the tree's radix must be 2..=256"),
        ));
    }
    let tree = Tree::knomial(nodes, fan_in);
    if tree.max_fan_in() > udrma_nic::reduce::MAX_FAN_IN {
        return Err(bad(
            sc,
            "fan_in",
            format!(
                "radix {fan_in} over {nodes} nodes gives the root {} children; a NIC takes at most {}",
                tree.max_fan_in(),
                udrma_nic::reduce::MAX_FAN_IN
            ),
        ));
    }
    Ok((nodes, fan_in, tree))
}

/// Refuses a collective beside other workloads, and plans it (its keys on
/// other kinds are refused in `applies`).
pub fn validate(sc: &Scenario, n: usize) -> Result<(), ScenarioError> {
    let mut count = 0;
    for w in &sc.file.workloads {
        if w.kind == WorkloadKind::Collective {
            count += 1;
        }
    }
    if count > 0 && sc.file.workloads.len() > 1 {
        return Err(sc.error_at(
            "collective",
            "a collective workload runs alone: put other workloads in another scenario".into(),
        ));
    }
    // A collective by one of MPI's algorithms is planned by `schedplan`.
    if count == 1 && !sc.file.workloads.iter().any(|w| w.is_scheduled()) {
        plan(sc, sc.file.seed, n)?;
    }
    Ok(())
}
