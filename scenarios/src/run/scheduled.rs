//! A collective run by one of MPI's algorithms (planned by
//! [`crate::plan::schedplan`]): one [`ScheduledApp`] per rank over the
//! messaging layer, then the checks: all-complete, all-succeeded,
//! result-equal (every rank's result at every size equals what the same
//! schedules give in memory, bit for bit), bounded-state, liveness; and
//! the OSU-shaped table.

use std::collections::BTreeMap;
use udrma_host::collective::schedule::run::{fold_elements, run as interpret};
use udrma_host::collective::scheduled::{ScheduledApp, ScheduledPlan, Wire};
use udrma_proto::NodeAddr;

use crate::backend::Backend;
use crate::file::source::Locate;
use crate::plan::resolved::{Plan, Work};
use crate::report::osu::{OsuReport, OsuRow};
use crate::report::timeline::OpSpan;
use crate::report::{self, MessagingReport, Report};
use crate::ScenarioError;

/// Runs the collective on `world`.
pub(crate) fn run(
    whole: &Plan,
    mut world: Box<dyn Backend>,
    spans: bool,
) -> Result<Report, ScenarioError> {
    let Work::Scheduled(plan) = &whole.work else {
        return Err(whole
            .at
            .error("internal: not a scheduled collective".into()));
    };
    let p = plan.spec.ranks;
    let local: Vec<NodeAddr> = (0..p)
        .map(NodeAddr)
        .filter(|h| world.is_local(*h))
        .collect();
    for h in local {
        let app = match plan.wire {
            Wire::Messaging => {
                let peers = plan
                    .peers(h.0)
                    .map_err(|e| whole.at.error_at("algorithm", e.to_string()))?;
                let m = crate::run::collective::connected(whole, world.as_mut(), h, peers)?;
                ScheduledApp::new(h.0, plan.clone(), m)
                    .map_err(|e| whole.at.error_at("algorithm", e.to_string()))?
            }
            Wire::Write => ScheduledApp::over_writes(h.0, plan.clone(), world.nic_mut(h))
                .map_err(|e| whole.at.error_at("form", e))?,
        };
        world
            .set_app(h, Box::new(app))
            .map_err(|e| whole.at.error_at("workload", e))?;
    }
    let (limit, ending) = crate::run::rdma::start_and_run(whole, world.as_mut())?;
    let seen = Seen::of(plan, world.as_ref());
    let mut notes = seen.notes.clone();
    let mut rows = Vec::new();
    let mut equal = true;
    for i in 0..plan.sizes.len() {
        let row = seen
            .row(plan, i, &mut notes)
            .map_err(|e| whole.at.error_at("algorithm", e))?;
        equal &= row.result_equal;
        rows.push(row);
    }
    let all_done = seen.done;
    let live = world.is_idle() && all_done;
    if !live {
        notes.push(crate::run::leftover::note(&*world, limit, ending, |_| None));
    }
    let mut checks: BTreeMap<String, bool> = BTreeMap::new();
    checks.insert("all-complete".into(), all_done);
    if !whole.checks.expect_failures {
        checks.insert("all-succeeded".into(), all_done && seen.failed == 0);
    }
    // Results a rank holds: none when no measured iteration finished
    // anywhere, and then there is nothing for result-equal to pass on.
    let compared = seen
        .ranks
        .iter()
        .flatten()
        .flatten()
        .filter(|(_, got, _)| got.is_some())
        .count();
    if plan.phantom {
        notes.push("phantom payloads: no bytes moved, so no result is checked".into());
    } else if compared == 0 {
        notes.push(
            "result-equal not checked: no rank finished a measured iteration, so no result was there to compare"
                .into(),
        );
    } else {
        checks.insert("result-equal".into(), equal);
    }
    checks.insert("bounded-state".into(), seen.bounded);
    checks.insert("liveness".into(), live);
    let posted = u64::from(p) * u64::from(plan.iterations) * plan.sizes.len() as u64;
    let mut rep = report::build(whole, world.as_ref(), &[], posted, checks, notes);
    if spans {
        rep.op_spans = lap_spans(plan, world.as_ref());
    }
    // The headline completion: every rank's measured iterations at the
    // first size (what a sweep's CSV shows).
    let mut first = seen.first.clone();
    first.sort_unstable();
    let at = |q: usize| {
        first
            .get((first.len() * q).div_ceil(100).saturating_sub(1))
            .copied()
    };
    rep.completion_ns = report::Latency {
        p50: at(50).unwrap_or(0),
        p99: at(99).unwrap_or(0),
        max: first.last().copied().unwrap_or(0),
    };
    // A measured iteration that did not finish by the end failed: its
    // rank's own send or receive failed, or it waited on one that did.
    let unfinished = posted.saturating_sub(seen.measured);
    if unfinished > seen.failed {
        rep.notes.push(format!(
            "{unfinished} measured iterations (ranks × iterations × sizes) did not finish; {} (warm-up ones included) failed at their own rank, the others waited on a rank that stopped or ran out of time",
            seen.failed
        ));
    }
    rep.ops = report::Ops {
        posted,
        completed: seen.measured,
        failed: unfinished,
    };
    rep.messaging = (plan.wire == Wire::Messaging).then(|| seen.messaging.clone());
    rep.scheduled = Some(OsuReport {
        collective: plan.spec.collective.name().into(),
        op: plan.op.name().into(),
        datatype: plan.ty.name().into(),
        ranks: p,
        iterations: plan.iterations,
        warmup: plan.warmup,
        rows,
    });
    Ok(rep)
}

/// One rank at one size: its mean measured latency (ps), its first
/// measured result, and whether every later one equalled it.
type AtSize = (Option<f64>, Option<Vec<u8>>, bool);

/// What every rank's app recorded.
struct Seen {
    /// Per rank (`None` where not run here): per size.
    ranks: Vec<Option<Vec<AtSize>>>,
    done: bool,
    bounded: bool,
    measured: u64,
    /// Measured iterations that finished, per size, every rank together.
    measured_per_size: Vec<u64>,
    /// Every measured iteration's latency at the first size, every rank
    /// together (ns), sorted.
    first: Vec<u64>,
    /// The messaging layer's counters over every rank (no per-size rows:
    /// the OSU table has them).
    messaging: MessagingReport,
    failed: u64,
    notes: Vec<String>,
}

impl Seen {
    fn of(plan: &ScheduledPlan, world: &dyn Backend) -> Seen {
        let mut seen = Seen {
            ranks: Vec::new(),
            done: true,
            bounded: true,
            measured: 0,
            measured_per_size: vec![0; plan.sizes.len()],
            first: Vec::new(),
            messaging: MessagingReport {
                eager: 0,
                r3: 0,
                rget: 0,
                rput: 0,
                noops: 0,
                credit_stalls: 0,
                fallbacks: 0,
                sizes: Vec::new(),
            },
            failed: 0,
            notes: Vec::new(),
        };
        for h in (0..plan.spec.ranks).map(NodeAddr) {
            let app = world
                .is_local(h)
                .then(|| world.app(h))
                .flatten()
                .and_then(|a| udrma_host::app::downcast_ref::<ScheduledApp>(a));
            let Some(app) = app else {
                // A local host without its rank's app ran nothing.
                seen.done &= !world.is_local(h);
                seen.ranks.push(None);
                continue;
            };
            seen.done &= udrma_host::App::is_done(app);
            if let Some(st) = app.messenger().map(|m| m.stats()) {
                let m = &mut seen.messaging;
                m.eager += st.eager;
                m.r3 += st.r3;
                m.rget += st.rget;
                m.rput += st.rput;
                m.noops += st.noops;
                m.credit_stalls += st.credit_stalls;
                m.fallbacks += st.fallbacks;
            }
            if app.strays() > 0 {
                seen.bounded = false;
                seen.notes.push(format!(
                    "{h}: {} WRITEs landed in no slot of its landing region",
                    app.strays()
                ));
            }
            if let Some((size, iter, why)) = app.failure() {
                seen.notes.push(format!(
                    "{h} at {} B, iteration {iter}: {why}",
                    plan.spec_at(*size).bytes()
                ));
            }
            let mut per = Vec::new();
            for size in 0..plan.sizes.len() {
                let mut sum = 0u64;
                let mut n = 0u64;
                for lap in app.laps().iter().filter(|l| l.size == size) {
                    match &lap.end {
                        // Still running when the run stopped: not measured.
                        None => {}
                        Some(Ok(end)) if lap.iter >= plan.warmup => {
                            sum += (*end - lap.start).as_ps();
                            if size == 0 {
                                seen.first.push((*end - lap.start).as_nanos());
                            }
                            n += 1;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            seen.failed += 1;
                            if seen.notes.len() < 20 {
                                let warm = if lap.iter < plan.warmup {
                                    " (warm-up)"
                                } else {
                                    ""
                                };
                                seen.notes.push(format!(
                                    "{h} at {} B, iteration {}{warm}: {e}",
                                    plan.spec_at(size).bytes(),
                                    lap.iter
                                ));
                            }
                        }
                    }
                }
                seen.measured += n;
                seen.measured_per_size[size] += n;
                seen.done &= n == u64::from(plan.iterations);
                let mean = (n > 0).then(|| sum as f64 / n as f64);
                let (result, same) = app.result(size);
                per.push((mean, result.map(<[u8]>::to_vec), same));
            }
            seen.ranks.push(Some(per));
            if let Some(what) = world.nic(h).occupancy().violation() {
                seen.bounded = false;
                seen.notes.push(format!("{h}: {what} passed its limit"));
            }
        }
        seen
    }

    /// Measured iterations that finished at the `i`-th size, every rank
    /// together.
    fn measured_at(&self, i: usize) -> u64 {
        self.measured_per_size.get(i).copied().unwrap_or(0)
    }

    /// The row of the `i`-th size: latencies over the ranks, bandwidths,
    /// and every rank's result against the schedules run in memory.
    fn row(
        &self,
        plan: &ScheduledPlan,
        i: usize,
        notes: &mut Vec<String>,
    ) -> Result<OsuRow, String> {
        let spec = plan.spec_at(i);
        let plans = (0..spec.ranks)
            .map(|r| spec.plan(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let ran = if plan.phantom {
            None
        } else {
            Some(
                interpret(
                    &plans,
                    |r| plan.input(r, plans[r as usize].input.len),
                    |g, h| fold_elements(plan.op, plan.ty, g, h),
                )
                .map_err(|e| format!("the schedules in memory: {e}"))?,
            )
        };
        let messages = ran.as_ref().map_or_else(
            || {
                plans
                    .iter()
                    .flat_map(|p| &p.steps)
                    .map(|s| s.sends.len() as u64)
                    .sum()
            },
            |r| r.messages,
        );
        let mut equal = true;
        let mut means = Vec::new();
        let mut missing = Vec::new();
        for (r, rank) in self.ranks.iter().enumerate() {
            let Some((mean, got, same)) = rank.as_ref().and_then(|v| v.get(i)) else {
                continue;
            };
            means.extend(*mean);
            let Some(ran) = &ran else {
                continue;
            };
            let out = plans[r].output;
            let want = &ran.arenas[r][out.at as usize..out.end() as usize];
            // A rank that finished no measured iteration has no result
            // to compare (all-complete says so).
            let Some(got) = got else {
                missing.push(format!("h{r}"));
                continue;
            };
            if got.as_slice() != want || !same {
                equal = false;
                if notes.len() < 20 {
                    notes.push(format!(
                        "h{r} size {} B: its result differs from the schedules' in memory",
                        spec.bytes()
                    ));
                }
            }
        }
        if !missing.is_empty() && notes.len() < 20 {
            notes.push(format!(
                "no result at {} B (no measured iteration finished): {}",
                spec.bytes(),
                missing.join(", ")
            ));
        }
        // Nothing measured (every rank's iterations at this size failed
        // or never ran): no latency, rather than a latency of 0.
        let us = |ps: f64| (ps / 1e3).round() / 1e3;
        let avg = (!means.is_empty()).then(|| means.iter().sum::<f64>() / means.len() as f64);
        let min = means.iter().copied().reduce(f64::min);
        let max = means.iter().copied().reduce(f64::max);
        let name = spec.collective.name();
        let (factor, every) = OsuReport::factors(name, spec.ranks);
        let bytes = spec.bytes() * if every { u64::from(spec.ranks) } else { 1 };
        let algbw = avg.filter(|a| *a > 0.0).map(|a| bytes as f64 / a * 1e3);
        // Four decimals: a few bytes' bandwidth is small, not zero.
        let r4 = |x: f64| (x * 1e4).round() / 1e4;
        Ok(OsuRow {
            size: spec.bytes(),
            algorithm: spec.algorithm.name().into(),
            avg_us: avg.map(us),
            min_us: min.map(us),
            max_us: max.map(us),
            algbw_gbs: algbw.map(r4),
            busbw_gbs: algbw.map(|a| r4(a * factor)),
            measured: self.measured_at(i),
            wanted: u64::from(spec.ranks) * u64::from(plan.iterations),
            messages,
            result_equal: equal,
        })
    }
}

/// Each rank's iterations as spans for a timeline, from when the rank
/// started one to when its collective ended there (warm-up ones too).
fn lap_spans(plan: &ScheduledPlan, world: &dyn Backend) -> Vec<OpSpan> {
    let mut spans = Vec::new();
    for h in (0..plan.spec.ranks).map(NodeAddr) {
        let Some(app) = world
            .app(h)
            .and_then(udrma_host::app::downcast_ref::<ScheduledApp>)
        else {
            continue;
        };
        for lap in app.laps() {
            let spec = plan.spec_at(lap.size);
            let (done, ok) = OpSpan::ended(lap.end.as_ref());
            spans.push(OpSpan {
                host: h.0,
                kind: format!("{} #{}", spec.collective.name(), lap.iter),
                size: spec.bytes(),
                peer: None,
                posted: lap.start.as_ps(),
                done,
                ok,
            });
        }
    }
    spans
}
