//! The run of a non-contiguous ping-pong (planned by [`crate::plan::ncplan`]):
//! with `method = "auto"`, first a trial of each method on the simulated
//! fabric ([`choose`]); then one app per host, and the checks:
//! all-complete, all-succeeded, memory-equal (every block byte-exact,
//! nothing between blocks touched), max-sge, bounded-state, liveness.

use std::collections::BTreeMap;
use std::sync::Arc;

use udrma_host::noncontig::Method;
use udrma_host::workload::noncontig::{check_received, NcApp, NcPlan};
use udrma_proto::{Instant, NodeAddr};

use crate::backend::{Backend, Ending};
use crate::file::source::Locate;
use crate::plan::ncplan::{one_way_p50, Planned};
use crate::plan::resolved::{Plan, Work};
use crate::report::timeline::OpSpan;
use crate::report::{self, NoncontigReport, Report};
use crate::ScenarioError;

/// What the two hosts' apps and NICs recorded, added up.
#[derive(Default)]
struct Tally {
    wrs: u64,
    completed: u64,
    copied: u64,
    keys: u64,
    errors: usize,
    one_way: Vec<u64>,
    all_done: bool,
    memory_equal: bool,
    max_sge_ok: bool,
    /// Translation cache hits and misses.
    translation: [u64; 2],
}

impl Tally {
    /// Reads every local host's record, checks the bytes it received and
    /// the scatter-gather entries it posted (failures into `notes`).
    fn of(
        world: &dyn Backend,
        plan: &NcPlan,
        hosts: &[NodeAddr],
        notes: &mut Vec<String>,
    ) -> Tally {
        let mut t = Tally {
            all_done: true,
            memory_equal: true,
            max_sge_ok: true,
            ..Tally::default()
        };
        for &h in hosts {
            let Some(app) = world
                .app(h)
                .and_then(udrma_host::app::downcast_ref::<NcApp>)
            else {
                continue;
            };
            let r = app.record();
            t.all_done &= udrma_host::App::is_done(app);
            t.wrs += r.work_requests;
            t.completed += r.completed;
            t.copied += r.bytes_copied;
            t.keys += r.keys_created;
            t.errors += r.errors.len();
            notes.extend(r.errors.iter().take(5).map(|e| format!("{h}: {e}")));
            t.one_way.extend(&r.one_way_ps);
            // What a host that did not finish holds is not yet the whole
            // transfer (all-complete fails instead), as an RDMA run
            // compares only the operations that completed.
            let done = udrma_host::App::is_done(app);
            let received = check_received(plan, h, world.nic(h).memory());
            if let (true, Err(e)) = (done, received) {
                t.memory_equal = false;
                notes.push(e);
            }
            let st = world.nic(h).stats();
            t.translation[0] += st.translation_hits;
            t.translation[1] += st.translation_misses;
            if st.max_sges_posted > plan.max_sge as u64 {
                t.max_sge_ok = false;
                notes.push(format!(
                    "{h}: a request carried {} scatter-gather entries, over max_sge = {}",
                    st.max_sges_posted, plan.max_sge
                ));
            }
        }
        t
    }

    /// The report's completion times, counts and the non-contiguous
    /// figures: one-way latency, bandwidth, per-transfer work.
    fn fill(mut self, rep: &mut Report, planned: &Planned) {
        let plan = &planned.plan;
        let one_way = &mut self.one_way;
        one_way.sort_unstable();
        let (wrs, completed, errors) = (self.wrs, self.completed, self.errors);
        let transfers = 2 * u64::from(plan.count + plan.warmup);
        let p50 = crate::plan::ncplan::one_way_p50(one_way).unwrap_or(0);
        let mean = if one_way.is_empty() {
            0.0
        } else {
            one_way.iter().sum::<u64>() as f64 / one_way.len() as f64
        };
        let bytes = plan.layouts[0].size();
        let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
        rep.completion_ns = report::Latency {
            p50: p50 / 1000,
            p99: one_way
                .get((one_way.len() * 99).div_ceil(100).saturating_sub(1))
                .copied()
                .unwrap_or(0)
                / 1000,
            max: one_way.last().copied().unwrap_or(0) / 1000,
        };
        rep.ops = report::Ops {
            posted: wrs,
            completed,
            failed: errors as u64,
        };
        let bandwidth_mbs = if p50 > 0 {
            r3(bytes as f64 / (p50 as f64 / 1e6))
        } else {
            0.0
        };
        rep.goodput_gbps = r3(bandwidth_mbs * 8.0 / 1000.0);
        rep.noncontig = Some(NoncontigReport {
            requested: planned.requested.name().into(),
            method: plan.method.name().into(),
            form: if plan.rdma { "rdma" } else { "messaging" }.into(),
            layout: planned.layout.clone(),
            blocks: [
                plan.layouts[0].blocks().len(),
                plan.layouts[1].blocks().len(),
            ],
            bytes,
            latency_p50_us: r3(p50 as f64 / 1e6),
            latency_mean_us: r3(mean / 1e6),
            bandwidth_mbs,
            work_requests: r3(wrs as f64 / transfers as f64),
            bytes_copied: r3(self.copied as f64 / transfers as f64),
            keys_created: self.keys,
            translation: self.translation,
            estimates_us: planned
                .estimates
                .iter()
                .map(|(m, t)| (m.name().to_string(), r3(*t)))
                .collect(),
            measured_us: planned
                .measured
                .iter()
                .map(|(m, t)| (m.name().to_string(), t.map(r3)))
                .collect(),
        });
    }
}

/// A simulated world to try a method on, watched as the run is.
pub(crate) type Trial<'a> = &'a dyn Fn() -> Result<Box<dyn Backend>, ScenarioError>;

/// Resolves `auto`: runs the ping-pong by each concrete method on a
/// world from `trial`, to `limit`, and keeps the method whose one-way
/// p50 is lowest (ties to the earlier of pack, sgl, indirect) among those
/// that finished every round trip without error. If none did, the cost
/// estimate's choice stands. Another method asked for is left alone.
/// Also says whether the run's observer stopped a trial (Ctrl-C): the
/// trials after it do not run, and neither does the ping-pong.
pub(crate) fn choose(whole: &Plan, trial: Trial<'_>) -> Result<(Planned, bool), ScenarioError> {
    let Work::Noncontig(planned) = &whole.work else {
        return Err(whole.at.error("internal: not a noncontig plan".into()));
    };
    let mut planned = planned.clone();
    if planned.requested != Method::Auto {
        return Ok((planned, false));
    }
    let limit = Instant::ZERO + whole.time_limit;
    let mut best: Option<(Method, u64)> = None;
    for m in Method::CONCRETE {
        let plan = Arc::new(NcPlan {
            method: m,
            ..planned.plan.clone()
        });
        let mut w = trial()?;
        for h in [plan.a, plan.b] {
            w.set_app(h, Box::new(NcApp::new(h, plan.clone())))
                .map_err(|e| {
                    let e = format!("method = \"auto\", trying {}: {e}", m.name());
                    whole.at.error_at_key("method", e)
                })?;
        }
        if w.run(limit).map_err(|e| whole.at.error(e))? == Ending::Stopped {
            return Ok((planned, true));
        }
        let mut one_way = Vec::new();
        let mut clean = true;
        for h in [plan.a, plan.b] {
            let app = w.app(h).and_then(udrma_host::app::downcast_ref::<NcApp>);
            match app {
                Some(app) if udrma_host::App::is_done(app) && app.record().errors.is_empty() => {
                    one_way.extend(&app.record().one_way_ps);
                }
                _ => clean = false,
            }
        }
        one_way.sort_unstable();
        let p50 = one_way_p50(&one_way).filter(|_| clean);
        planned.measured.push((m, p50.map(|t| t as f64 / 1e6)));
        if let Some(t) = p50 {
            if best.is_none_or(|(_, b)| t < b) {
                best = Some((m, t));
            }
        }
    }
    if let Some((m, _)) = best {
        planned.plan.method = m;
    }
    Ok((planned, false))
}

/// The note of a run stopped during `auto`'s trials (`measured`: those
/// that finished).
fn trials_stopped(measured: &[(Method, Option<f64>)]) -> String {
    let done: Vec<String> = measured
        .iter()
        .map(|(m, t)| match t {
            Some(t) => format!("{} {t:.3} us", m.name()),
            None => format!("{} unclean", m.name()),
        })
        .collect();
    let under_way = Method::CONCRETE
        .get(measured.len())
        .map_or("none", |m| m.name());
    let done = if done.is_empty() {
        "none".to_string()
    } else {
        done.join(", ")
    };
    format!(
        "interrupted during method = \"auto\"'s trials (finished: {done}; under way: {under_way}): \
         the ping-pong itself did not run, so its figures here are zero"
    )
}

/// Runs the noncontig ping-pong on `world` and checks it; `auto` is
/// resolved first, on worlds from `trial`. With `spans`, each round trip
/// is a span for a timeline.
pub(crate) fn run(
    whole: &Plan,
    world: Box<dyn Backend>,
    trial: Trial<'_>,
    spans: bool,
) -> Result<Report, ScenarioError> {
    let chosen = choose(whole, trial)?;
    run_chosen(whole, world, (&chosen.0, chosen.1), spans)
}

/// [`run`] with `auto` resolved already (`stopped`: during its trials).
pub(crate) fn run_chosen(
    whole: &Plan,
    mut world: Box<dyn Backend>,
    (planned, stopped): (&Planned, bool),
    spans: bool,
) -> Result<Report, ScenarioError> {
    let plan = Arc::new(planned.plan.clone());
    for h in [plan.a, plan.b] {
        if world.is_local(h) {
            world
                .set_app(h, Box::new(NcApp::new(h, plan.clone())))
                .map_err(|e| whole.at.error_at("workload", e))?;
        }
    }
    let (limit, ending) = crate::run::rdma::start_and_run(whole, world.as_mut())?;
    let mut notes = Vec::new();
    if stopped {
        notes.push(trials_stopped(&planned.measured));
    }
    let mut checks: BTreeMap<String, bool> = BTreeMap::new();
    let hosts: Vec<NodeAddr> = [plan.a, plan.b]
        .into_iter()
        .filter(|h| world.is_local(*h))
        .collect();
    let t = Tally::of(world.as_ref(), &plan, &hosts, &mut notes);
    let all_done = t.all_done;
    checks.insert("all-complete".into(), all_done);
    if !whole.checks.expect_failures {
        checks.insert("all-succeeded".into(), all_done && t.errors == 0);
    }
    checks.insert("memory-equal".into(), t.memory_equal);
    checks.insert("max-sge".into(), t.max_sge_ok);
    let mut bounded = true;
    for &h in &hosts {
        if let Some(what) = world.nic(h).occupancy().violation() {
            bounded = false;
            notes.push(format!("{h}: {what} passed its limit"));
        }
    }
    checks.insert("bounded-state".into(), bounded);
    let idle = world.is_idle();
    checks.insert("liveness".into(), idle && all_done);
    if !idle || !all_done {
        notes.push(crate::run::leftover::note(
            world.as_ref(),
            limit,
            ending,
            |_| None,
        ));
    }
    let mut rep = report::build(whole, world.as_ref(), &[], t.wrs, checks, notes);
    t.fill(&mut rep, planned);
    if spans {
        rep.op_spans = round_spans(world.as_ref(), &plan);
    }
    Ok(rep)
}

/// Host `a`'s round trips as spans for a timeline (warm-up ones too),
/// the one under way at the end drawn to the end, not completed.
fn round_spans(world: &dyn Backend, plan: &NcPlan) -> Vec<OpSpan> {
    let Some(app) = world
        .app(plan.a)
        .and_then(udrma_host::app::downcast_ref::<NcApp>)
    else {
        return Vec::new();
    };
    let span = |posted: u64, done: Option<u64>| OpSpan {
        host: plan.a.0,
        kind: format!("{} round trip", plan.method.name()),
        size: plan.layouts[0].size(),
        peer: Some(plan.b.0),
        posted,
        done,
        ok: done.map(|_| true),
    };
    let rounds = app.record().rounds_ps.iter();
    let mut spans: Vec<OpSpan> = rounds.map(|&(a, b)| span(a, Some(b))).collect();
    spans.extend(app.open_round().map(|a| span(a, None)));
    spans
}
