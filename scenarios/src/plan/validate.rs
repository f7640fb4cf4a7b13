//! The one validation pass: everything that can be checked without
//! running, each error located at its key in the file; it returns the
//! resolved scenario ([`Resolved`]) it checked.

use udrma_proto::NodeAddr;

use crate::file::schema::{OpKind, WorkloadKind, WorkloadSpec};
use crate::file::source::Locate;
use crate::plan::build::{msg_checked, MAX_OPS, MAX_STORED_BYTES};
use crate::plan::flows::{planned_bytes, SizeCdf};
use crate::plan::resolved::{resolve, Resolved};
use crate::{Scenario, ScenarioError};

/// Checks everything that can be checked without running; returns what
/// `sc` resolves to for its own seed.
pub fn validate(sc: &Scenario) -> Result<Resolved, ScenarioError> {
    crate::file::applies::check(sc)?;
    unique_fault_names(sc)?;
    let r = resolve(sc, sc.file.seed)?;
    let n = r.topology.n_hosts();
    windows_hold_one(sc)?;
    validate_messaging(sc, &r)?;
    crate::plan::ncplan::validate(sc, &r.nic, &r.topology)?;
    crate::plan::collplan::validate(sc, n)?;
    if sc.file.workloads.iter().any(|w| w.is_scheduled()) {
        crate::plan::schedplan::plan(sc, sc.file.seed, n)?;
    }
    for (i, w) in sc.file.workloads.iter().enumerate() {
        if !(w.kind.is_messaging()
            || w.kind == WorkloadKind::Noncontig
            || w.kind == WorkloadKind::Collective)
        {
            validate_rdma_workload(sc, i, w, n, &r.fabric.nic)?;
        }
    }
    within_bounds(sc, n)?;
    known_skips(sc)?;
    // Last, so that a file's other mistakes are named first.
    if sc.file.workloads.is_empty() {
        return Err(sc.error_at_key(
            "name",
            "no [[workload]]: the run would send nothing and pass on nothing \
             (docs/scenarios.md lists the workload kinds)"
                .into(),
        ));
    }
    Ok(r)
}

/// An RDMA workload's hosts, the keys its kind needs, and a SEND's size.
fn validate_rdma_workload(
    sc: &Scenario,
    i: usize,
    w: &WorkloadSpec,
    n: usize,
    nic: &udrma_nic::NicConfig,
) -> Result<(), ScenarioError> {
    let who = format!("workload {i} ({})", w.kind.name());
    for h in w.src.iter().chain(w.dst.iter()).chain(w.srcs.iter()) {
        sc.host(h, n, &who)?;
    }
    for (k, [a, b]) in w.pairs.iter().enumerate() {
        let (x, y) = (sc.host(a, n, &who)?, sc.host(b, n, &who)?);
        if x == y {
            return Err(sc.error_at_key(
                "pairs",
                format!("{who}: pairs[{k}] sends from {a} to itself"),
            ));
        }
    }
    let needs_pair = matches!(
        w.kind,
        WorkloadKind::Single | WorkloadKind::Many | WorkloadKind::Pingpong | WorkloadKind::Window
    );
    if needs_pair && (w.src.is_none() || w.dst.is_none()) {
        return Err(sc.error_at("workload", format!("{who} needs `src` and `dst`")));
    }
    if matches!(w.kind, WorkloadKind::Incast | WorkloadKind::Reuse) && w.dst.is_none() {
        return Err(sc.error_at("workload", format!("{who} needs `dst`")));
    }
    if w.kind == WorkloadKind::Flows {
        crate::plan::flows::validate(sc, w, &who, n)?;
    } else if w.kind != WorkloadKind::Reuse && w.size.is_none() {
        return Err(sc.error_at("workload", format!("{who} needs `size`")));
    }
    if w.src.is_some() && w.src == w.dst {
        return Err(sc.error_at(
            "workload",
            format!("{who}: `src` and `dst` are the same host"),
        ));
    }
    if w.kind == WorkloadKind::Pingpong && w.op != OpKind::Write {
        return Err(sc.error_at("pingpong", format!("{who}: pingpong uses WRITEs only")));
    }
    if w.op == OpKind::Send && w.size.is_some_and(|s| s.0 > nic.max_op_bytes()) {
        return Err(sc.error_at(
            "send",
            format!(
                "{who}: a SEND is at most one operation ({} bytes, nic.segment_threshold)",
                nic.max_op_bytes()
            ),
        ));
    }
    Ok(())
}

/// Bounds on what a file may ask for: planned operations, and bytes
/// stored when memory is real.
fn within_bounds(sc: &Scenario, n: usize) -> Result<(), ScenarioError> {
    let mut total_ops: u128 = 0;
    let mut total_bytes: u128 = 0;
    let hosts = n as u32;
    for (i, w) in sc.file.workloads.iter().enumerate() {
        let count = u128::from(w.count);
        let n = n as u128;
        if w.kind.is_messaging() {
            continue;
        }
        let ops = match w.kind {
            // Bounded in noncontig::validate and collective::plan.
            WorkloadKind::Noncontig | WorkloadKind::Collective => 0,
            WorkloadKind::Single => 1,
            WorkloadKind::Many
            | WorkloadKind::Window
            | WorkloadKind::RandomPairs
            | WorkloadKind::Flows => count,
            WorkloadKind::Pingpong => 2 * count,
            WorkloadKind::AllToAll => count * n * (n - 1),
            WorkloadKind::Incast => {
                count
                    * if w.srcs.is_empty() {
                        n - 1
                    } else {
                        w.srcs.len() as u128
                    }
            }
            WorkloadKind::Permutation if !w.pairs.is_empty() => count * w.pairs.len() as u128,
            WorkloadKind::Permutation => count * n,
            WorkloadKind::Reuse => 0,
            // Bounded in validate_messaging.
            WorkloadKind::MsgLatency
            | WorkloadKind::MsgBw
            | WorkloadKind::MsgBibw
            | WorkloadKind::MsgMixed => 0,
        };
        total_ops += ops;
        if total_ops > MAX_OPS {
            return Err(sc.error_at(
                "workload",
                format!("workload {i} brings the scenario to {total_ops} operations; at most {MAX_OPS} are allowed"),
            ));
        }
        total_bytes += match (w.kind, &w.cdf) {
            // (Checked above.) The sizes this seed draws, not count times
            // the mean: heavy tails stray far from it.
            (WorkloadKind::Flows, Some(spec)) => spec
                .points()
                .and_then(SizeCdf::new)
                .map_or(0, |c| planned_bytes(&c, w.count, hosts, sc.file.seed, i)),
            _ => ops * u128::from(w.size.map_or(0, |s| s.0)),
        };
    }
    if !sc.file.topology.phantom && total_bytes > MAX_STORED_BYTES {
        return Err(sc.error_at(
            "workload",
            format!(
                "the workloads move {total_bytes} bytes, which would all be stored (more than {MAX_STORED_BYTES}); set `phantom = true` in [topology] for scale runs"
            ),
        ));
    }
    Ok(())
}

/// A `window` of 0 would keep nothing in flight; it was raised to 1 in
/// silence until a reader noticed, so it is refused at its place.
fn windows_hold_one(sc: &Scenario) -> Result<(), ScenarioError> {
    for (i, w) in sc.file.workloads.iter().enumerate() {
        if w.window == Some(0) {
            return Err(ScenarioError {
                file: sc.path.clone(),
                at: crate::file::edit::locate(&sc.text, &format!("workload.{i}.window")),
                message: format!(
                    "workload {i} ({}): window = 0 keeps nothing in flight; it must be at least 1",
                    w.kind.name()
                ),
            });
        }
    }
    Ok(())
}

/// Every name in `checks.skip` is a check.
fn known_skips(sc: &Scenario) -> Result<(), ScenarioError> {
    for s in &sc.file.checks.skip {
        if !crate::file::checks::CHECKS.contains(&s.as_str()) {
            return Err(sc.error_at(
                s,
                format!(
                    "checks.skip: unknown check {s:?}; expected one of {}",
                    crate::file::checks::CHECKS.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the messaging parts of a scenario.
fn validate_messaging(sc: &Scenario, r: &Resolved) -> Result<(), ScenarioError> {
    let msg = sc.file.workloads.iter().any(|w| w.kind.is_messaging());
    let rdma = sc.file.workloads.iter().any(|w| !w.kind.is_messaging());
    if msg && rdma {
        return Err(sc.error_at(
            "workload",
            "a scenario's workloads are either RDMA operations or messaging (msg-*), not both"
                .into(),
        ));
    }
    // Hosts differ only in registration faults, which are checked for
    // every fault whatever the host.
    msg_checked(sc, r.msg.config(NodeAddr(0)), &r.nic)?;
    let mut messages: u128 = 0;
    let mut bytes: u128 = 0;
    for (i, w) in sc.file.workloads.iter().enumerate() {
        if !w.kind.is_messaging() {
            continue;
        }
        let who = format!("workload {i} ({})", w.kind.name());
        if w.src.is_none() || w.dst.is_none() {
            return Err(sc.error_at("workload", format!("{who} needs `src` and `dst`")));
        }
        let s = crate::plan::messaging::sizes(sc, w, &who, crate::plan::messaging::MAX_MESSAGE)?;
        let iters = u128::from(w.count) + u128::from(w.warmup.unwrap_or(2));
        let window = u128::from(w.window.unwrap_or(64).max(1));
        let per = match w.kind {
            WorkloadKind::MsgLatency => 2 * iters,
            WorkloadKind::MsgBw => iters * (window + 1),
            WorkloadKind::MsgBibw => 2 * iters * window,
            _ => u128::from(w.count),
        };
        messages += per * s.len().max(1) as u128;
        bytes += s.iter().map(|x| u128::from(*x) * per).sum::<u128>();
        if w.kind == WorkloadKind::MsgMixed {
            bytes += u128::from(w.count) << 20;
        }
    }
    if messages > MAX_OPS {
        return Err(sc.error_at(
            "workload",
            format!(
                "the messaging workloads send {messages} messages; at most {} are allowed",
                MAX_OPS
            ),
        ));
    }
    if bytes > 64 << 30 {
        return Err(sc.error_at(
            "workload",
            format!("the messaging workloads move {bytes} bytes; at most 64 GiB are allowed"),
        ));
    }
    Ok(())
}

/// Fault rules are addressed by name (`--set fault.NAME.p=...`, sweeps,
/// shrinking): two rules of one name would leave it to chance which one a
/// setting reaches.
fn unique_fault_names(sc: &Scenario) -> Result<(), ScenarioError> {
    let mut seen: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for (i, f) in sc.file.faults.iter().enumerate() {
        let name = f.name.clone().unwrap_or_else(|| format!("fault{i}"));
        if let Some(&first) = seen.get(&name) {
            // Located at the name's second spelling in the file.
            return Err(sc.error_at_nth_setting(
                "name",
                &name,
                1,
                format!(
                    "fault {i} is named {name:?} like fault {first}: rules are addressed by name \
                     (--set fault.{name}.KEY=...), so each needs its own"
                ),
            ));
        }
        seen.insert(name, i);
    }
    Ok(())
}
