//! The RDMA workloads (single, many, pingpong, window, all-to-all,
//! incast, random pairs, permutation, reuse) and the checks of their
//! operations: all-complete, all-succeeded, exactly-once, memory-equal,
//! no-out-of-bounds, no-write-after-completion, bounded-state, liveness.

use std::collections::BTreeMap;

use udrma_host::workload::rdma::{OpKind, OpRecord, PlannedOp, RdmaApp, RdmaPlan, When};
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::backend::Backend;
use crate::file::schema::WorkloadKind;
use crate::file::source::Locate;
use crate::plan::resolved::{BackendKind, Plan, Work};
use crate::report::ladder::Ladder;
use crate::report::{self, OpOutcome, Report};
use crate::run::host_end::{self, AppEnd, HostEnd};
use crate::ScenarioError;

/// One planned operation, and what became of it.
#[derive(Debug, Clone)]
struct Op {
    plan: PlannedOp,
    rec: OpRecord,
    /// What its target must hold at the end, if it is a WRITE into a
    /// host of this process that landed.
    expect: Option<Expect>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Its source's bytes.
    Source,
    /// What the host's reuse wrote over it (this pattern seed).
    Reused(u32),
}

/// The start of the message of an error that came from the network (a
/// peer that never answered), not from the scenario.
pub(crate) const NETWORK: &str = "network: ";

/// Starts the backend (apps installed), runs it to the scenario's time
/// limit and finishes its outputs: the part every runner shares. Returns
/// the limit and how the run ended.
pub(crate) fn start_and_run(
    plan: &Plan,
    world: &mut dyn Backend,
) -> Result<(Instant, crate::backend::Ending), ScenarioError> {
    world
        .start()
        .map_err(|e| plan.at.error(format!("{NETWORK}{e}")))?;
    let limit = Instant::ZERO + plan.time_limit;
    let ending = world.run(limit).map_err(|e| plan.at.error(e))?;
    world
        .finish()
        .map_err(|e| plan.at.error_at("outputs", format!("writing outputs: {e}")))?;
    Ok((limit, ending))
}

/// Runs the RDMA workloads `whole` planned on its built `world`: posts
/// every operation at its time (or when the closed-loop workloads
/// allow), watches the completions, checks the invariants at the end,
/// and draws the ladder when one is asked for.
pub(crate) fn run(
    whole: &Plan,
    mut world: Box<dyn Backend>,
    ladder: Option<(NodeAddr, NodeAddr, &Ladder)>,
    spans: bool,
) -> Result<Report, ScenarioError> {
    let n = world.n_hosts();
    let Work::Rdma(plan) = &whole.work else {
        return Err(whole.at.error("internal: not an RDMA plan".into()));
    };
    let phantom = plan.phantom;
    let local: Vec<bool> = (0..n).map(|h| world.is_local(NodeAddr(h as u32))).collect();

    // ---- every local host gets its part as an app, then time runs
    for h in (0..n).filter(|h| local[*h]) {
        let app = RdmaApp::new(NodeAddr(h as u32), plan.clone());
        world
            .set_app(NodeAddr(h as u32), Box::new(app))
            .map_err(|e| whole.at.error_at("workload", e))?;
    }
    let (limit, ending) = start_and_run(whole, world.as_mut())?;

    // ---- each host's end, worked out where it ran, gathered here
    // (Asked again: before the first run every host is local.)
    let to = incoming(plan, n);
    let mine: Vec<HostEnd> = (0..n)
        .filter(|h| world.is_local(NodeAddr(*h as u32)))
        .map(|h| HostEnd::of(&*world, NodeAddr(h as u32), plan, &to[h], phantom))
        .collect();
    let gathered = world
        .gather(host_end::encode(&mine).map_err(|e| whole.at.error(e))?)
        .map_err(|e| whole.at.error(e))?;
    let Some(parts) = gathered else {
        // Another rank makes the report; this one's part is sent.
        return Ok(report::build(
            whole,
            &*world,
            &[],
            0,
            BTreeMap::new(),
            Vec::new(),
        ));
    };
    let ends = host_end::decode(&parts).map_err(|e| whole.at.error(e))?;
    let mut local = vec![false; n];
    let mut apps: Vec<Option<&AppEnd>> = vec![None; n];
    for e in &ends {
        if let Some(h) = local.get_mut(e.host as usize) {
            *h = true;
            apps[e.host as usize] = e.app.as_ref();
        }
    }

    let (ops, mut notes, bytes_ok) = gather(plan, &apps);
    let end = Ended {
        apps: &apps,
        ops: &ops,
        local: &local,
        phantom,
    };
    let checks = end.checks(whole, &*world, &ends, bytes_ok, (limit, ending), &mut notes);
    // Attempted posts: accepted ones have a post time, refused ones a
    // failure without a request id.
    let attempted = ops
        .iter()
        .filter(|o| o.rec.posted_at.is_some() || (o.rec.ok == Some(false) && o.rec.wr.is_none()))
        .count();
    let mut report = report::build(
        whole,
        &*world,
        &ops_summary(&ops),
        attempted as u64,
        checks,
        notes,
    );
    if whole.kinds.contains(&WorkloadKind::Flows) {
        report.flows = Some(flow_stats(whole, &*world, &ops));
    }
    if spans {
        report.op_spans = op_spans(&ops);
    }
    if let Some((a, b, spec)) = ladder {
        let first_only =
            world.nic(a).config().registration == udrma_nic::RegistrationMode::FirstOnly;
        report.ladder_svg = world
            .world()
            .map(|w| crate::report::ladder::draw(w, a, b, spec, first_only, &whole.name));
    }
    Ok(report)
}

impl Ended<'_> {
    /// The checks of an RDMA run: each named check and whether it held,
    /// with a note on each thing that broke one.
    fn checks(
        &self,
        whole: &Plan,
        world: &dyn Backend,
        ends: &[HostEnd],
        bytes_ok: bool,
        (limit, ending): (Instant, crate::backend::Ending),
        notes: &mut Vec<String>,
    ) -> BTreeMap<String, bool> {
        let (ops, local, phantom) = (self.ops, self.local, self.phantom);
        let mine = |op: &Op| local[op.plan.poster.0 as usize];
        let mut checks: BTreeMap<String, bool> = BTreeMap::new();
        let ended = chains_ended_by_failure(ops);
        for (i, j) in &ended {
            let p = &ops[*i].plan;
            notes.push(format!(
                "op {i} ({:?} {}→{} {} B) not posted: op {j}, whose landing it waits for, failed",
                p.kind, p.from, p.to, p.size
            ));
        }
        let all_done = ops
            .iter()
            .enumerate()
            .filter(|(_, o)| mine(o))
            .all(|(i, o)| o.rec.completions > 0 || ended.contains_key(&i));
        checks.insert("all-complete".into(), all_done);
        if !whole.checks.expect_failures {
            checks.insert(
                "all-succeeded".into(),
                ops.iter()
                    .filter(|o| mine(o))
                    .all(|o| o.rec.ok == Some(true)),
            );
        }
        let exactly_once = ops.iter().all(|o| o.rec.completions <= 1);
        checks.insert("exactly-once".into(), exactly_once);
        if !phantom {
            let sends = self.sends_in_buffers(notes);
            checks.insert("memory-equal".into(), bytes_ok && sends);
            let mut in_bounds = true;
            for (h, app) in self.apps.iter().enumerate() {
                let Some(app) = app else { continue };
                in_bounds &= app.bounds.is_empty();
                notes.extend(app.bounds.iter().map(|why| format!("h{h}: {why}")));
            }
            checks.insert("no-out-of-bounds".into(), in_bounds);
            let no_late = self.no_late_writes(notes);
            checks.insert("no-write-after-completion".into(), no_late);
        }
        let mut bounded = true;
        for e in ends {
            if let Some(what) = &e.over_limit {
                bounded = false;
                notes.push(format!("h{}: {what} passed its limit", e.host));
            }
        }
        checks.insert("bounded-state".into(), bounded);
        let idle = world.is_idle();
        checks.insert("liveness".into(), idle && all_done);
        if !idle {
            let held = ends.iter().map(|e| (NodeAddr(e.host), e.held.clone()));
            notes.push(crate::run::leftover::note_of(
                world.now(),
                limit,
                ending,
                held,
            ));
        }
        checks
    }
}

/// Each of `n` hosts' incoming operations (their indices in the plan),
/// found in one pass.
fn incoming(plan: &RdmaPlan, n: usize) -> Vec<Vec<usize>> {
    let mut to: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, p) in plan.ops.iter().enumerate() {
        if let Some(list) = to.get_mut(p.to.0 as usize) {
            list.push(i);
        }
    }
    to
}

/// What the apps saw, per operation (its record, and what its target
/// should hold), their notes, and whether every landing and READ brought
/// its source's bytes.
fn gather(plan: &RdmaPlan, apps: &[Option<&AppEnd>]) -> (Vec<Op>, Vec<String>, bool) {
    let mut ops: Vec<Op> = plan
        .ops
        .iter()
        .map(|p| Op {
            plan: p.clone(),
            rec: OpRecord::default(),
            expect: None,
        })
        .collect();
    let mut notes: Vec<String> = Vec::new();
    let mut bytes_ok = true;
    for app in apps.iter().flatten() {
        for (i, rec) in &app.records {
            ops[*i].rec = (*rec).into();
        }
        for i in &app.landed {
            ops[*i].expect = Some(Expect::Source);
        }
        for (i, seed) in &app.reused {
            ops[*i].expect = Some(Expect::Reused(*seed));
        }
        notes.extend(app.notes.iter().cloned());
        bytes_ok &= app.bytes_ok;
    }
    (ops, notes, bytes_ok)
}

/// What a run ended with, as the memory checks read it.
struct Ended<'a> {
    apps: &'a [Option<&'a AppEnd>],
    ops: &'a [Op],
    local: &'a [bool],
    /// The run moved no bytes (`phantom_payload`): no memory checks.
    phantom: bool,
}

impl Ended<'_> {
    /// `memory-equal` for SENDs: each successful one's bytes in exactly one
    /// filled receive buffer (of the hosts here).
    fn sends_in_buffers(&self, notes: &mut Vec<String>) -> bool {
        let mut ok = true;
        let mut filled: Vec<(NodeAddr, &[usize])> = Vec::new();
        for (h, app) in self.apps.iter().enumerate() {
            let Some(app) = app else { continue };
            for holds in &app.filled {
                filled.push((NodeAddr(h as u32), holds));
            }
        }
        for (i, op) in self.ops.iter().enumerate() {
            let p = &op.plan;
            if p.kind == OpKind::Send && op.rec.ok == Some(true) && self.local[p.to.0 as usize] {
                match filled
                    .iter()
                    .position(|(h, holds)| *h == p.to && holds.contains(&i))
                {
                    Some(at) => {
                        filled.swap_remove(at);
                    }
                    None => {
                        ok = false;
                        notes.push(format!(
                            "op {i} (SEND {}→{}): bytes in no receive buffer",
                            p.from, p.to
                        ));
                    }
                }
            }
        }
        ok
    }

    /// `no-write-after-completion`: a WRITE's target still holds what it
    /// should: its source once it landed or completed, or what the host's
    /// reuse wrote over it.
    fn no_late_writes(&self, notes: &mut Vec<String>) -> bool {
        let mut no_late = true;
        for (i, op) in self.ops.iter().enumerate() {
            let p = &op.plan;
            if p.kind != OpKind::Write || !self.local[p.to.0 as usize] {
                continue;
            }
            let want = match op.expect {
                Some(e) => e,
                None if op.rec.ok == Some(true) => Expect::Source,
                None => continue,
            };
            let verdict =
                self.apps[p.to.0 as usize].and_then(|a| a.writes.iter().find(|(j, _, _)| *j == i));
            let holds = verdict.is_some_and(|(_, source, reused)| match want {
                Expect::Source => *source,
                Expect::Reused(_) => reused.unwrap_or(false),
            });
            if !holds {
                no_late = false;
                notes.push(format!(
                    "op {i} (WRITE {}→{}): its target changed after completion{}",
                    p.from,
                    p.to,
                    if want != Expect::Source {
                        " (the host had reused it)"
                    } else {
                        ""
                    }
                ));
            }
        }
        no_late
    }
}

/// The flow workloads' figures: each completed flow's time against its
/// time on an empty fabric over its own path (the links between its
/// hosts, 2 over real sockets).
fn flow_stats(whole: &Plan, world: &dyn Backend, ops: &[Op]) -> crate::plan::flows::FlowStats {
    let (bps, latency) = whole.host_link;
    let mtu = u64::from(if world.is_local(NodeAddr(0)) {
        world.nic(NodeAddr(0)).config().mtu_payload
    } else {
        whole.resolved.nic.mtu_payload
    });
    let links = |a: NodeAddr, b: NodeAddr| -> u32 {
        Some(&whole.resolved.topology)
            .filter(|_| whole.backend == BackendKind::Sim)
            .and_then(|t| path_links(t, a, b))
            .unwrap_or(2)
    };
    let done: Vec<(u64, u32, Duration)> = ops
        .iter()
        .filter(|o| whole.kinds[o.plan.workload] == WorkloadKind::Flows)
        .filter(|o| o.rec.ok == Some(true))
        .filter_map(|o| {
            let d = o.rec.done_at? - o.rec.posted_at?;
            Some((o.plan.size, links(o.plan.from, o.plan.to), d))
        })
        .collect();
    crate::plan::flows::stats(&done, bps, latency, mtu)
}

/// Links on a shortest path from host `a` to host `b` (breadth first).
fn path_links(t: &udrma_fabric::Topology, a: NodeAddr, b: NodeAddr) -> Option<u32> {
    let (from, to) = (*t.hosts.get(a.0 as usize)?, *t.hosts.get(b.0 as usize)?);
    let mut dist = vec![u32::MAX; t.nodes.len()];
    dist[from as usize] = 0;
    let mut frontier = std::collections::VecDeque::from([from]);
    while let Some(u) = frontier.pop_front() {
        if u == to {
            return Some(dist[u as usize]);
        }
        if u != from && t.host_addr(u).is_some() {
            continue;
        }
        for &p in &t.nodes[u as usize].ports {
            let v = t.ports[p as usize].peer;
            if dist[v as usize] == u32::MAX {
                dist[v as usize] = dist[u as usize] + 1;
                frontier.push_back(v);
            }
        }
    }
    None
}

/// The operations never posted because the WRITE whose landing they wait
/// for (a ping-pong's) failed, or was itself never posted for that
/// reason: operation → the failed WRITE that ended its chain. A failure
/// is reported where it happens (all-succeeded, the failure's own note);
/// what waited on it is accounted, not lost. A chain whose WRITE
/// succeeded and whose next operation still never came is not in here:
/// that is a lost event, and all-complete fails on it.
fn chains_ended_by_failure(ops: &[Op]) -> BTreeMap<usize, usize> {
    let mut ended: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let When::AfterLanded(j) = op.plan.when else {
            continue;
        };
        if op.rec.completions > 0 || op.rec.ok.is_some() || op.rec.posted_at.is_some() {
            continue;
        }
        if let Some(&root) = ended.get(&j) {
            ended.insert(i, root);
        } else if ops.get(j).is_some_and(|w| w.rec.ok == Some(false)) {
            ended.insert(i, j);
        }
    }
    ended
}

/// The posted operations' spans, for a timeline.
fn op_spans(ops: &[Op]) -> Vec<crate::report::timeline::OpSpan> {
    ops.iter()
        .filter_map(|o| {
            let posted = o.rec.posted_at?.as_ps();
            Some(crate::report::timeline::OpSpan {
                host: o.plan.poster.0,
                kind: format!("{:?}", o.plan.kind).to_uppercase(),
                size: o.plan.size,
                peer: Some(if o.plan.poster == o.plan.from {
                    o.plan.to.0
                } else {
                    o.plan.from.0
                }),
                posted,
                done: o.rec.done_at.map(|d| d.as_ps()),
                ok: o.rec.ok,
            })
        })
        .collect()
}

fn ops_summary(ops: &[Op]) -> Vec<OpOutcome> {
    ops.iter()
        .map(|o| OpOutcome {
            size: o.plan.size,
            ok: o.rec.ok,
            latency: match (o.rec.posted_at, o.rec.done_at) {
                (Some(p), Some(d)) => Some(d - p),
                _ => None,
            },
            done_at: o.rec.done_at,
            posted_at: o.rec.posted_at,
        })
        .collect()
}
