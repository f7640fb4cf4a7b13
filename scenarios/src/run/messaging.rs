//! The runner of the messaging workloads (`msg-latency`, `msg-bw`,
//! `msg-bibw`, `msg-mixed`: the osu_latency, osu_bw and osu_bibw shapes
//! and a bimodal mix) over the MVICH-like messaging layer, and the checks
//! of their messages: all-complete, all-succeeded, exactly-once,
//! memory-equal, mpi-order, credits, bounded-state, liveness.

use std::collections::BTreeMap;

use udrma_host::messaging::{Messenger, MsgStats};
use udrma_host::workload::msg::{self, MsgApp, MsgKind, MsgWorkload, Received, Sent};
use udrma_proto::{Instant, NodeAddr};

use crate::backend::Backend;
use crate::file::source::Locate;
use crate::plan::build::msg_checked;
use crate::plan::resolved::{Plan, Work};
use crate::report::timeline::OpSpan;
use crate::report::{self, MessagingReport, Report, SizeRow};
use crate::ScenarioError;

/// Runs a messaging scenario: every local host that takes part gets a
/// messenger connected to its peers and an app with its sides of the
/// workloads; then time runs, and the apps' records are checked. With
/// `spans`, each message is a span for a timeline.
pub(crate) fn run(
    plan: &Plan,
    mut world: Box<dyn Backend>,
    spans: bool,
) -> Result<Report, ScenarioError> {
    let n = world.n_hosts();
    let Work::Messaging(workloads) = &plan.work else {
        return Err(plan.at.error("internal: not a messaging plan".into()));
    };
    // Messengers, connected at time zero, in workload order.
    let mut ms: Vec<Option<Messenger>> = (0..n).map(|_| None).collect();
    for (i, w) in workloads.iter().enumerate() {
        for (x, y) in [(w.a, w.b), (w.b, w.a)] {
            if !world.is_local(x) {
                continue;
            }
            if ms[x.0 as usize].is_none() {
                let nic = world.nic(x).config().clone();
                let cfg = msg_checked(&plan.at, plan.resolved.msg.config(x), &nic)?;
                let m = Messenger::new(cfg, world.nic(x))
                    .map_err(|e| plan.at.error_at("messaging", format!("[messaging] {e}")))?;
                ms[x.0 as usize] = Some(m);
            }
            let m = ms[x.0 as usize].as_mut().expect("made");
            m.connect(Instant::ZERO, world.nic_mut(x), y)
                .map_err(|e| plan.at.error_at("workload", format!("workload {i}: {e}")))?;
            world.service(x);
        }
    }
    for (h, m) in ms.into_iter().enumerate() {
        if let Some(m) = m {
            let me = NodeAddr(h as u32);
            let app = MsgApp::new(me, m, workloads.clone());
            world
                .set_app(me, Box::new(app))
                .map_err(|e| plan.at.error_at("workload", e))?;
        }
    }
    let (limit, ending) = crate::run::rdma::start_and_run(plan, world.as_mut())?;
    Ok(check(plan, &*world, workloads, (limit, ending), spans))
}

/// Checks what the local hosts' apps recorded and builds the report.
fn check(
    plan: &Plan,
    world: &dyn Backend,
    workloads: &[MsgWorkload],
    (limit, ending): (Instant, crate::backend::Ending),
    spans: bool,
) -> Report {
    let n = world.n_hosts();
    let apps: Vec<(NodeAddr, &MsgApp)> = (0..n as u32)
        .map(NodeAddr)
        .filter_map(|h| {
            let app = world.app(h)?;
            Some((h, udrma_host::app::downcast_ref::<MsgApp>(app)?))
        })
        .collect();
    let mut t = Tally::of(&apps);
    let mut notes = std::mem::take(&mut t.notes);
    if !t.all_done {
        notes.push(format!(
            "{} receives not completed, {} sends not finished",
            t.open_recvs, t.open_sends
        ));
    }
    // (Both, each with its notes.)
    let matched = matched_in_order(&t.received, &mut notes);
    let in_order = t.in_order && matched;
    let timing = Timing::of(&t, workloads);
    let rows = size_rows(&apps, workloads, &timing.buckets);
    let no_rnr = every_chunk_found_a_vbuf(world, &apps, &mut notes);
    let mut checks: BTreeMap<String, bool> = BTreeMap::new();
    checks.insert("all-complete".into(), t.all_done);
    if !plan.checks.expect_failures {
        checks.insert("all-succeeded".into(), t.all_done && t.failed == 0);
    }
    checks.insert("exactly-once".into(), t.exactly_once);
    checks.insert("memory-equal".into(), t.memory_equal);
    checks.insert("mpi-order".into(), in_order);
    checks.insert("credits".into(), t.credits_ok && no_rnr);
    let mut bounded = true;
    for h in (0..n as u32).map(NodeAddr).filter(|h| world.is_local(*h)) {
        if let Some(what) = world.nic(h).occupancy().violation() {
            bounded = false;
            notes.push(format!("{h}: {what} passed its limit"));
        }
    }
    checks.insert("bounded-state".into(), bounded);
    let quiet = apps.iter().all(|(_, a)| a.messenger().is_quiet());
    let idle = world.is_idle() && quiet;
    checks.insert("liveness".into(), idle && t.all_done);
    if idle && t.all_done {
        // Every credit comes back once both sides are quiet: a count that
        // rode on a lost packet and was never repaired leaves the peer
        // short of vbufs for good (docs/testing.md, finding 8).
        let short = credits_not_back(&apps);
        if !short.is_empty() {
            checks.insert("credits".into(), false);
            notes.extend(short);
        }
    }
    if !idle {
        let note = crate::run::leftover::note(world, limit, ending, |h| {
            apps.iter()
                .find(|(x, a)| *x == h && !a.messenger().is_quiet())
                .map(|_| "messages still in the messaging layer".to_string())
        });
        notes.push(note);
    }
    let posted = t.sent.len() as u64;
    let mut rep = report::build(plan, world, &[], posted, checks, notes);
    timing.fill(&mut rep, &t);
    let st = &t.stats;
    rep.messaging = Some(MessagingReport {
        eager: st.eager,
        r3: st.r3,
        rget: st.rget,
        rput: st.rput,
        noops: st.noops,
        credit_stalls: st.credit_stalls,
        fallbacks: st.fallbacks,
        sizes: rows,
    });
    if spans {
        rep.op_spans = t.spans();
    }
    rep
}

/// What every local app recorded, added up.
#[derive(Default)]
struct Tally {
    notes: Vec<String>,
    exactly_once: bool,
    in_order: bool,
    memory_equal: bool,
    credits_ok: bool,
    all_done: bool,
    failed: u64,
    open_sends: usize,
    open_recvs: usize,
    stats: MsgStats,
    /// (from, to, tag, k) → when it was sent.
    sent_at: BTreeMap<(NodeAddr, NodeAddr, u32, u32), Instant>,
    /// (sender, what it sent).
    sent: Vec<(NodeAddr, Sent)>,
    /// (receiver, what it received).
    received: Vec<(NodeAddr, Received)>,
}

impl Tally {
    fn of(apps: &[(NodeAddr, &MsgApp)]) -> Tally {
        let mut t = Tally {
            exactly_once: true,
            in_order: true,
            memory_equal: true,
            credits_ok: true,
            all_done: true,
            ..Tally::default()
        };
        for (h, app) in apps {
            t.notes.extend(app.notes().iter().cloned());
            t.exactly_once &= app.exactly_once();
            t.in_order &= app.in_order();
            t.memory_equal &= app.bytes_ok();
            t.credits_ok &= app.credits_ok();
            t.failed += app.failed();
            let (s, r) = app.open();
            t.open_sends += s;
            t.open_recvs += r;
            t.all_done &= udrma_host::App::is_done(*app);
            let st = app.messenger().stats();
            t.stats.eager += st.eager;
            t.stats.r3 += st.r3;
            t.stats.rget += st.rget;
            t.stats.rput += st.rput;
            t.stats.noops += st.noops;
            t.stats.credit_stalls += st.credit_stalls;
            t.stats.fallbacks += st.fallbacks;
            for m in app.sent() {
                t.sent_at.insert((*h, m.to, m.tag, m.k), m.at);
                t.sent.push((*h, *m));
            }
            t.received.extend(app.received().iter().map(|r| (*h, *r)));
        }
        t
    }

    /// Each message sent as a span on its sender, from when it was
    /// handed to the messenger to when its receive completed.
    fn spans(&self) -> Vec<OpSpan> {
        let received: BTreeMap<_, _> = self
            .received
            .iter()
            .map(|(h, r)| ((r.from, *h, r.tag, r.k), (r.at, r.ok)))
            .collect();
        (self.sent.iter())
            .map(|(h, m)| {
                let got = received.get(&(*h, m.to, m.tag, m.k));
                OpSpan {
                    host: h.0,
                    kind: "MSG".into(),
                    size: m.len,
                    peer: Some(m.to.0),
                    posted: m.at.as_ps(),
                    done: got.map(|(at, _)| at.as_ps()),
                    ok: got.map(|(_, ok)| *ok),
                }
            })
            .collect()
    }
}

/// `mpi-order`: sequence numbers rise in posting order for every
/// (source, tag) at every receiver.
fn matched_in_order(received: &[(NodeAddr, Received)], notes: &mut Vec<String>) -> bool {
    let mut in_order = true;
    let mut flows: BTreeMap<(NodeAddr, NodeAddr, u32), BTreeMap<u32, u32>> = BTreeMap::new();
    for (h, r) in received {
        flows
            .entry((*h, r.from, r.tag))
            .or_default()
            .insert(r.k, r.seq);
    }
    for ((h, from, tag), by_k) in &flows {
        let seqs: Vec<u32> = by_k.values().copied().collect();
        if seqs
            .windows(2)
            .any(|w| w[1].wrapping_sub(w[0]).wrapping_sub(1) >= 1 << 31)
        {
            in_order = false;
            notes.push(format!(
                "{h}: messages from {from} tag {tag} matched out of order"
            ));
        }
    }
    in_order
}

/// The latencies of the messages whose both ends ran here, the mixes'
/// buckets (workload, size rounded up to a power of two) → (count, sum),
/// and what was received when.
struct Timing {
    latencies: Vec<u64>,
    buckets: BTreeMap<(usize, u64), (u64, u64)>,
    recv_ok: u64,
    bytes_ok: u64,
    last_done: Option<Instant>,
}

impl Timing {
    fn of(t: &Tally, workloads: &[MsgWorkload]) -> Timing {
        let mut m = Timing {
            latencies: Vec::new(),
            buckets: BTreeMap::new(),
            recv_ok: 0,
            bytes_ok: 0,
            last_done: None,
        };
        for (h, r) in t.received.iter().filter(|(_, r)| r.ok) {
            m.recv_ok += 1;
            m.bytes_ok += r.len;
            m.last_done = Some(m.last_done.map_or(r.at, |l| l.max(r.at)));
            let Some(at) = t.sent_at.get(&(r.from, *h, r.tag, r.k)) else {
                continue;
            };
            let lat = (r.at - *at).as_nanos();
            m.latencies.push(lat);
            if workloads[r.workload].kind == MsgKind::Mixed {
                let b = m
                    .buckets
                    .entry((r.workload, r.len.next_power_of_two()))
                    .or_default();
                b.0 += 1;
                b.1 += lat;
            }
        }
        m.latencies.sort_unstable();
        m
    }

    /// The report's completion times, operation counts and goodput.
    fn fill(&self, rep: &mut Report, t: &Tally) {
        let l = &self.latencies;
        let pct = |q: f64| {
            if l.is_empty() {
                0
            } else {
                l[((q * l.len() as f64).ceil() as usize).clamp(1, l.len()) - 1]
            }
        };
        rep.completion_ns = report::Latency {
            p50: pct(0.5),
            p99: pct(0.99),
            max: l.last().copied().unwrap_or(0),
        };
        rep.ops = report::Ops {
            posted: t.sent.len() as u64,
            completed: self.recv_ok,
            failed: t.failed,
        };
        let first_post = t.sent.iter().map(|(_, m)| m.at).min();
        rep.goodput_gbps = match (first_post, self.last_done) {
            (Some(a), Some(b)) if b > a => {
                let g = self.bytes_ok as f64 * 8.0 / (b - a).as_ps() as f64 * 1e3;
                (g * 1000.0).round() / 1000.0
            }
            _ => 0.0,
        };
    }
}

/// The report's rows: the timed sizes side `a` measured, then the mixes'
/// buckets.
fn size_rows(
    apps: &[(NodeAddr, &MsgApp)],
    workloads: &[MsgWorkload],
    buckets: &BTreeMap<(usize, u64), (u64, u64)>,
) -> Vec<SizeRow> {
    let mut rows: Vec<SizeRow> = Vec::new();
    for (_, app) in apps {
        for r in app.rows() {
            rows.push(size_row(&workloads[r.workload], r));
        }
    }
    rows.sort_by_key(|r| (r.workload, r.size));
    for ((wl, b), (count, sum)) in buckets {
        rows.push(SizeRow {
            workload: *wl,
            kind: kind_name(workloads[*wl].kind).into(),
            size: *b,
            protocol: "-".into(),
            messages: *count,
            latency_us: round3(*sum as f64 / *count as f64 / 1e3),
            bandwidth_mbs: 0.0,
        });
    }
    rows
}

/// Whether every SEND chunk found a vbuf posted: credits let a chunk go
/// that had no buffer otherwise. (Receiver-not-ready for a full registry
/// or transmit queue is the engine's own flow control, not a credit
/// violation.)
fn every_chunk_found_a_vbuf(
    world: &dyn Backend,
    apps: &[(NodeAddr, &MsgApp)],
    notes: &mut Vec<String>,
) -> bool {
    let mut ok = true;
    for (h, _) in apps {
        let overflows = world.nic(*h).stats().no_receive_buffer;
        if overflows > 0 {
            ok = false;
            notes.push(format!(
                "{h}: {overflows} SEND chunks found no vbuf posted (receiver-not-ready)"
            ));
        }
    }
    ok
}

/// A timed size as the report shows it.
fn size_row(w: &MsgWorkload, r: &msg::SizeRow) -> SizeRow {
    let elapsed = r.elapsed.as_ps() as f64 / 1e6; // µs
    let count = f64::from(w.count);
    let size = r.size;
    let (messages, latency_us, bytes) = match w.kind {
        MsgKind::Latency => (
            u64::from(w.count) * 2,
            elapsed / (2.0 * count),
            size as f64 * 2.0 * count,
        ),
        MsgKind::Bw => {
            let m = u64::from(w.count * w.window);
            (m, elapsed / m as f64, size as f64 * m as f64)
        }
        _ => {
            let m = u64::from(2 * w.count * w.window);
            (m, elapsed / m as f64, size as f64 * m as f64)
        }
    };
    let bandwidth_mbs = if w.kind == MsgKind::Latency {
        size as f64 / latency_us
    } else {
        bytes / elapsed
    };
    SizeRow {
        workload: r.workload,
        kind: kind_name(w.kind).into(),
        size,
        protocol: r.protocol.map_or("-", |p| p.name()).to_string(),
        messages,
        latency_us: round3(latency_us),
        bandwidth_mbs: round3(bandwidth_mbs),
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Each host's view of a peer's vbufs for it that differs from what the
/// peer has posted, in words (both ends must run here).
fn credits_not_back(apps: &[(NodeAddr, &MsgApp)]) -> Vec<String> {
    let mut short = Vec::new();
    for (h, app) in apps {
        for (peer, other) in apps {
            let (Some(seen), Some(posted)) = (
                app.messenger().remote_credit(*peer),
                other.messenger().vbufs_posted_for(*h),
            ) else {
                continue;
            };
            if seen as usize != posted {
                short.push(format!(
                    "{h} sees {seen} of the {posted} vbufs {peer} has posted for it once the run is quiet (a credit count was lost)"
                ));
            }
        }
    }
    short
}

/// The file name of a workload kind.
pub fn kind_name(k: MsgKind) -> &'static str {
    match k {
        MsgKind::Latency => "msg-latency",
        MsgKind::Bw => "msg-bw",
        MsgKind::Bibw => "msg-bibw",
        MsgKind::Mixed => "msg-mixed",
    }
}
