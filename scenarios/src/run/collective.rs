//! A collective study's run (planned by [`crate::plan::collplan`]): the
//! NIC-offloaded version and the host-software baseline on two copies of
//! the same fabric, then the checks: all-complete, all-succeeded,
//! result-equal (every node's result equals the reference bit for bit),
//! bounded-state, liveness.

use std::collections::BTreeMap;
use std::sync::Arc;

use udrma_host::collective::hostbased::HostApp;
use udrma_host::collective::offload::OffloadApp;
use udrma_host::collective::{from_host_bytes, CollectivePlan, Outcome};
use udrma_host::messaging::Messenger;
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::backend::Backend;
use crate::file::source::Locate;
use crate::plan::build::msg_checked;
use crate::plan::collplan::Method;
use crate::plan::resolved::{Plan, Work};
use crate::report::timeline::OpSpan;
use crate::report::{self, CollectiveReport, CollectiveSide, Report};
use crate::ScenarioError;

/// What one version's run left behind.
struct Ran {
    outcomes: Vec<Vec<Outcome>>,
    results: Vec<Option<Vec<u8>>>,
    side: CollectiveSide,
    all_done: bool,
    idle: bool,
    bounded: bool,
    notes: Vec<String>,
}

/// Runs the collective study: the offload on `world`, the host baseline
/// on a second fabric built by `rebuild` (for `method = "both"`).
pub(crate) fn run(
    whole: &Plan,
    mut world: Box<dyn Backend>,
    rebuild: &dyn Fn() -> Result<Box<dyn Backend>, ScenarioError>,
    spans: bool,
) -> Result<Report, ScenarioError> {
    let Work::Collective(planned) = &whole.work else {
        return Err(whole.at.error("internal: not a collective plan".into()));
    };
    let plan = Arc::new(planned.plan.clone());
    let mut checks: BTreeMap<String, bool> = BTreeMap::new();
    let mut notes = Vec::new();
    let (nic, host);
    match planned.method {
        Method::Nic => {
            nic = Some(run_nic(whole, &plan, world.as_mut())?);
            host = None;
        }
        Method::Host => {
            host = Some(run_host(whole, &plan, world.as_mut())?);
            nic = None;
        }
        Method::Both => {
            nic = Some(run_nic(whole, &plan, world.as_mut())?);
            let mut second = rebuild()?;
            host = Some(run_host(whole, &plan, second.as_mut())?);
        }
    }
    let mut all_done = true;
    let mut all_ok = true;
    let mut equal = true;
    let mut bounded = true;
    let mut live = true;
    let mut posted = 0u64;
    let mut completed = 0u64;
    let mut failed = 0u64;
    for (name, ran) in [("nic", &nic), ("host", &host)] {
        let Some(ran) = ran else {
            continue;
        };
        all_done &= ran.all_done;
        bounded &= ran.bounded;
        live &= ran.idle && ran.all_done;
        notes.extend(ran.notes.iter().map(|m| format!("{name}: {m}")));
        for (h, outs) in ran.outcomes.iter().enumerate() {
            posted += u64::from(plan.iterations);
            for o in outs {
                match &o.done {
                    Ok(_) => completed += 1,
                    Err(e) => {
                        failed += 1;
                        all_ok = false;
                        if notes.len() < 20 {
                            notes.push(format!("{name}: h{h} iteration {}: {e}", o.iter));
                        }
                    }
                }
            }
        }
        if let Err(e) = check_results(&plan, ran, name == "host") {
            equal = false;
            notes.push(format!("{name}: {e}"));
        }
    }
    checks.insert("all-complete".into(), all_done);
    if !whole.checks.expect_failures {
        checks.insert("all-succeeded".into(), all_done && all_ok);
    }
    checks.insert("result-equal".into(), equal);
    checks.insert("bounded-state".into(), bounded);
    checks.insert("liveness".into(), live);
    let mut rep = report::build(whole, world.as_ref(), &[], posted, checks, notes);
    rep.ops = report::Ops {
        posted,
        completed,
        failed,
    };
    if let (true, Some(first)) = (spans, nic.as_ref().or(host.as_ref())) {
        // The first fabric's: the one a timeline records.
        rep.op_spans = iteration_spans(&plan, first, world.now());
    }
    // The headline completion: the first version's per-iteration times.
    if let Some(first) = nic.as_ref().or(host.as_ref()) {
        let c = first.side.completion_us;
        let ns = |us: f64| (us * 1000.0).round() as u64;
        rep.completion_ns = report::Latency {
            p50: ns(c.p50),
            p99: ns(c.p99),
            max: ns(c.max),
        };
    }
    let speedup = match (&nic, &host) {
        (Some(a), Some(b)) if a.side.completion_us.p50 > 0.0 => {
            r3(b.side.completion_us.p50 / a.side.completion_us.p50)
        }
        _ => 0.0,
    };
    rep.collective = Some(CollectiveReport {
        collective: plan.kind.name().into(),
        op: plan.op.name().into(),
        datatype: plan.ty.name().into(),
        bytes: plan.result_bytes(),
        elements: plan.count,
        nodes: plan.nodes,
        radix: plan.radix,
        fan_in: plan.tree.children[0].len() as u32,
        depth: plan.tree.depth(),
        host_depth: plan.host_tree.depth(),
        iterations: plan.iterations,
        nic: nic.map(|r| r.side),
        host: host.map(|r| r.side),
        speedup,
    });
    Ok(rep)
}

fn r3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Every node that gets a result holds the reference's bytes, in every
/// iteration.
fn check_results(plan: &CollectivePlan, ran: &Ran, host: bool) -> Result<(), String> {
    let tree = if host { &plan.host_tree } else { &plan.tree };
    let len = plan.result_bytes() as usize;
    for iter in 0..plan.iterations {
        let want = plan.reference(tree, iter);
        for node in 0..plan.nodes {
            if !plan.gets_result(node) {
                continue;
            }
            let ok = ran.outcomes[node as usize]
                .iter()
                .any(|o| o.iter == iter && o.done.is_ok());
            if !ok {
                continue;
            }
            let Some(mem) = &ran.results[node as usize] else {
                return Err(format!("h{node}: no result memory"));
            };
            let at = (plan.result_addr(iter) - udrma_host::collective::RESULT_BASE) as usize;
            let got = from_host_bytes(plan.op, plan.ty, plan.count, &mem[at..at + len]);
            if got != want {
                let i = got
                    .values
                    .iter()
                    .zip(&want.values)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                return Err(format!(
                    "h{node} iteration {iter}: element {i} is {:#x}, the reference says {:#x}",
                    got.values.get(i).copied().unwrap_or(0),
                    want.values.get(i).copied().unwrap_or(0)
                ));
            }
        }
    }
    Ok(())
}

fn run_nic(
    whole: &Plan,
    plan: &Arc<CollectivePlan>,
    world: &mut dyn Backend,
) -> Result<Ran, ScenarioError> {
    for h in (0..plan.nodes).map(NodeAddr) {
        if world.is_local(h) {
            world
                .set_app(h, Box::new(OffloadApp::new(h, plan.clone())))
                .map_err(|e| whole.at.error_at("workload", e))?;
        }
    }
    let (limit, ending) = crate::run::rdma::start_and_run(whole, world)?;
    let mut ran = collect(plan, world, |app| {
        let a = app.downcast_ref::<OffloadApp>()?;
        Some((
            a.outcomes().to_vec(),
            a.result_key(),
            udrma_host::App::is_done(a),
        ))
    });
    let mut fired = 0;
    let mut retx = 0;
    let mut dups = 0;
    let mut sent = 0;
    for h in (0..plan.nodes).map(NodeAddr).filter(|h| world.is_local(*h)) {
        let st = world.nic(h).stats();
        fired += st.reduce_fired;
        retx += st.reduce_retransmits;
        dups += st.reduce_duplicates;
        sent += st.reduce_sent;
    }
    ran.side.descriptors_fired = fired;
    ran.side.retransmits = retx;
    ran.side.duplicates = dups;
    ran.side.packets = sent;
    if !ran.idle || !ran.all_done {
        ran.notes
            .push(crate::run::leftover::note(&*world, limit, ending, |_| None));
    }
    Ok(ran)
}

fn run_host(
    whole: &Plan,
    plan: &Arc<CollectivePlan>,
    world: &mut dyn Backend,
) -> Result<Ran, ScenarioError> {
    let local: Vec<NodeAddr> = (0..plan.nodes)
        .map(NodeAddr)
        .filter(|h| world.is_local(*h))
        .collect();
    for h in local {
        let m = connected(whole, world, h, HostApp::peers(plan, h))?;
        world
            .set_app(h, Box::new(HostApp::new(h, plan.clone(), m)))
            .map_err(|e| whole.at.error_at("workload", e))?;
    }
    let (limit, ending) = crate::run::rdma::start_and_run(whole, world)?;
    let mut ran = collect(plan, world, |app| {
        let a = app.downcast_ref::<HostApp>()?;
        Some((
            a.outcomes().to_vec(),
            a.result_key(),
            udrma_host::App::is_done(a),
        ))
    });
    let mut sent = 0;
    let mut retx = 0;
    for h in (0..plan.nodes).map(NodeAddr).filter(|h| world.is_local(*h)) {
        let st = world.nic(h).stats();
        sent += st.data_sent;
        retx += st.retransmits;
    }
    ran.side.packets = sent;
    ran.side.retransmits = retx;
    if !ran.idle || !ran.all_done {
        ran.notes
            .push(crate::run::leftover::note(&*world, limit, ending, |_| None));
    }
    Ok(ran)
}

/// Host `h`'s messenger, with the plan's messaging configuration,
/// connected to `peers`, its NIC serviced: what a collective's host app
/// runs over.
pub(crate) fn connected(
    whole: &Plan,
    world: &mut dyn Backend,
    h: NodeAddr,
    peers: Vec<NodeAddr>,
) -> Result<Messenger, ScenarioError> {
    let nic = world.nic(h).config().clone();
    let cfg = msg_checked(&whole.at, whole.resolved.msg.config(h), &nic)?;
    let mut m = Messenger::new(cfg, world.nic(h))
        .map_err(|e| whole.at.error_at("messaging", format!("[messaging] {e}")))?;
    for p in peers {
        m.connect(Instant::ZERO, world.nic_mut(h), p)
            .map_err(|e| whole.at.error_at("workload", format!("collective: {e}")))?;
    }
    world.service(h);
    Ok(m)
}

type Record = (Vec<Outcome>, Option<udrma_nic::MrKey>, bool);

trait Downcast {
    fn downcast_ref<T: udrma_host::App>(&self) -> Option<&T>;
}

impl Downcast for dyn udrma_host::App {
    fn downcast_ref<T: udrma_host::App>(&self) -> Option<&T> {
        udrma_host::app::downcast_ref::<T>(self)
    }
}

/// Gathers what every node's app recorded, its result memory, and the
/// completion figures.
fn collect(
    plan: &CollectivePlan,
    world: &dyn Backend,
    read: impl Fn(&dyn udrma_host::App) -> Option<Record>,
) -> Ran {
    let mut outcomes = Vec::new();
    let mut results = Vec::new();
    let mut all_done = true;
    let mut bounded = true;
    let mut notes = Vec::new();
    // Per iteration: the latest finish among result holders.
    let mut last: Vec<Option<Duration>> = vec![None; plan.iterations as usize];
    let mut per_node: Vec<u64> = Vec::new();
    let mut holders_done = vec![0u32; plan.iterations as usize];
    let holders = (0..plan.nodes).filter(|n| plan.gets_result(*n)).count() as u32;
    for h in (0..plan.nodes).map(NodeAddr) {
        if !world.is_local(h) {
            outcomes.push(Vec::new());
            results.push(None);
            continue;
        }
        let rec = world.app(h).and_then(&read);
        let Some((outs, key, done)) = rec else {
            all_done = false;
            outcomes.push(Vec::new());
            results.push(None);
            continue;
        };
        all_done &= done;
        for o in &outs {
            if let Ok(at) = o.done {
                let d = at - plan.start_of(o.iter);
                if plan.gets_result(h.0) {
                    let slot = &mut last[o.iter as usize];
                    *slot = Some(slot.map_or(d, |x: Duration| x.max(d)));
                    holders_done[o.iter as usize] += 1;
                    per_node.push(d.as_ps());
                }
            }
        }
        results.push(key.and_then(|k| world.nic(h).memory().region(k).map(|r| r.bytes.to_vec())));
        outcomes.push(outs);
        if let Some(what) = world.nic(h).occupancy().violation() {
            bounded = false;
            notes.push(format!("{h}: {what} passed its limit"));
        }
    }
    // An iteration counts once every result holder has finished it.
    for (slot, done) in last.iter_mut().zip(&holders_done) {
        if *done < holders {
            *slot = None;
        }
    }
    let mut whole: Vec<u64> = last.iter().flatten().map(|d| d.as_ps()).collect();
    whole.sort_unstable();
    per_node.sort_unstable();
    let us = |ps: u64| r3(ps as f64 / 1e6);
    let stats = |v: &[u64]| report::Spread {
        min: us(v.first().copied().unwrap_or(0)),
        p50: us(v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)),
        p99: us(v
            .get((v.len() * 99).div_ceil(100).saturating_sub(1))
            .copied()
            .unwrap_or(0)),
        max: us(v.last().copied().unwrap_or(0)),
        mean: if v.is_empty() {
            0.0
        } else {
            r3(v.iter().sum::<u64>() as f64 / v.len() as f64 / 1e6)
        },
    };
    Ran {
        outcomes,
        results,
        side: CollectiveSide {
            completion_us: stats(&whole),
            per_node_us: stats(&per_node),
            completed_iterations: whole.len() as u32,
            per_iteration_us: last.iter().map(|d| d.map(|d| us(d.as_ps()))).collect(),
            descriptors_fired: 0,
            packets: 0,
            retransmits: 0,
            duplicates: 0,
        },
        all_done,
        idle: world.is_idle(),
        bounded,
        notes,
    }
}

/// Each node's iterations as spans for a timeline, from the iteration's
/// common start to when the node's part finished; an iteration started
/// by `now` that has not finished is drawn to the end, not completed.
fn iteration_spans(plan: &CollectivePlan, ran: &Ran, now: Instant) -> Vec<OpSpan> {
    let mut spans = Vec::new();
    for (h, outs) in ran.outcomes.iter().enumerate() {
        let mut ended: BTreeMap<u32, &Outcome> = BTreeMap::new();
        for o in outs {
            ended.insert(o.iter, o);
        }
        for iter in (0..plan.iterations).take_while(|i| plan.start_of(*i) <= now) {
            let (done, ok) = OpSpan::ended(ended.get(&iter).map(|o| &o.done));
            spans.push(OpSpan {
                host: h as u32,
                kind: format!("{} #{iter}", plan.kind.name()),
                size: plan.result_bytes(),
                peer: None,
                posted: plan.start_of(iter).as_ps(),
                done,
                ok,
            });
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use udrma_host::collective::{Tree, RESULT_BASE};
    use udrma_nic::reduce::{alu, CollectiveKind};
    use udrma_proto::{ReduceOp, ReduceType};

    /// What every node would hold after a correct run, then one flipped
    /// bit: `result-equal` must catch it.
    #[test]
    fn result_equal_fails_on_a_single_flipped_bit() {
        let plan = CollectivePlan {
            kind: CollectiveKind::Allreduce,
            op: ReduceOp::Sum,
            ty: ReduceType::F64,
            count: 3,
            nodes: 5,
            radix: 2,
            tree: Tree::knomial(5, 2),
            host_tree: Tree::knomial(5, 2),
            iterations: 2,
            start: Instant::ZERO,
            interval: Duration::from_micros(10),
            seed: 9,
            ep: 1,
            tree_id: 1,
        };
        let mut mem = vec![0u8; plan.result_region() as usize];
        for iter in 0..plan.iterations {
            let bytes = alu::to_host_bytes(plan.op, plan.ty, &plan.reference(&plan.tree, iter));
            let at = (plan.result_addr(iter) - RESULT_BASE) as usize;
            mem[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        let outcomes = (0..plan.iterations)
            .map(|iter| Outcome {
                iter,
                done: Ok(Instant::ZERO),
            })
            .collect::<Vec<_>>();
        let mut ran = Ran {
            outcomes: vec![outcomes; 5],
            results: vec![Some(mem); 5],
            side: CollectiveSide {
                completion_us: report::Spread::default(),
                per_node_us: report::Spread::default(),
                completed_iterations: 2,
                per_iteration_us: Vec::new(),
                descriptors_fired: 0,
                packets: 0,
                retransmits: 0,
                duplicates: 0,
            },
            all_done: true,
            idle: true,
            bounded: true,
            notes: Vec::new(),
        };
        check_results(&plan, &ran, false).unwrap();
        let at = (plan.result_addr(1) - RESULT_BASE) as usize + 8;
        ran.results[3].as_mut().unwrap()[at] ^= 1;
        let e = check_results(&plan, &ran, false).unwrap_err();
        assert!(e.starts_with("h3 iteration 1: element 1"), "{e}");
    }
}
