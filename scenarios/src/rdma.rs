//! The RDMA workloads (single, many, pingpong, window, all-to-all,
//! incast, random pairs, permutation, reuse) and the checks of their
//! operations: all-complete, all-succeeded, exactly-once, memory-equal,
//! no-out-of-bounds, no-write-after-completion, bounded-state, liveness.

use std::collections::BTreeMap;

use udrma_fabric::shapes::derangement;
use udrma_faults::rng::{below, stream};
use udrma_nic::{Access, Event, MrKey, WorkRequest, WrId, WrKind};
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::backend::{Advance, Backend};
use crate::build;
use crate::data::pattern;
use crate::ladder::Ladder;
use crate::leftover::Ending;
use crate::report::{self, OpOutcome, Report};
use crate::schema::{OpKind, WorkloadKind};
use crate::{Scenario, ScenarioError};

const SRC_BASE: u64 = 0x1000_0000_0000;
const DST_BASE: u64 = 0x2000_0000_0000;
const GUARD_BASE: u64 = 0x3000_0000_0000;
const GUARD_LEN: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Source,
    Reused(u32),
}

#[derive(Debug, Clone)]
struct Op {
    workload: usize,
    op: OpKind,
    /// Host that posts it.
    poster: NodeAddr,
    /// Host the data comes from / goes to.
    from: NodeAddr,
    to: NodeAddr,
    size: u64,
    src_off: u64,
    dst_off: u64,
    /// Open-loop start time; `None` for closed-loop follow-ups.
    start: Option<Instant>,
    posted_at: Option<Instant>,
    wr: Option<WrId>,
    completions: u32,
    ok: Option<bool>,
    done_at: Option<Instant>,
    expect: Expect,
}

#[derive(Debug, Clone)]
enum Action {
    Post(usize),
    Reuse(NodeAddr, u32),
}

struct Loop {
    /// Closed-loop workloads: the ops still to post, in order.
    queue: Vec<usize>,
    next: usize,
}

/// The start of the message of an error that came from the network (a
/// peer that never answered), not from the scenario.
pub(crate) const NETWORK: &str = "network: ";

/// Runs the RDMA workloads of `sc` on its built `world`: plans every
/// operation, posts them at their times (or when the closed-loop
/// workloads allow), watches the completions, checks the invariants at
/// the end, and draws the ladder when one is asked for.
pub(crate) fn run(
    sc: &Scenario,
    seed: u64,
    mut world: Box<dyn Backend>,
    ladder: Option<(NodeAddr, NodeAddr, &Ladder)>,
) -> Result<Report, ScenarioError> {
    let n = world.n_hosts();
    let phantom = sc.file.topology.phantom;
    // ---- plan every operation and where its bytes live
    let mut ops: Vec<Op> = Vec::new();
    let mut actions: BTreeMap<(Instant, u64), Action> = BTreeMap::new();
    let mut loops: BTreeMap<usize, Loop> = BTreeMap::new();
    let mut send_used = vec![0u64; n];
    let mut recv_used = vec![0u64; n];
    let mut seq = 0u64;
    let host =
        |name: &Option<String>, who: &str| build::host(sc, name.as_deref().unwrap_or(""), n, who);
    for (wi, w) in sc.file.workloads.iter().enumerate() {
        let who = format!("workload {wi}");
        let start = Instant::ZERO + w.start.map_or(Duration::ZERO, |t| t.0);
        let size = w.size.map_or(0, |s| s.0);
        let mut add = |poster: NodeAddr, peer: NodeAddr, open: bool| {
            let (from, to) = match w.op {
                OpKind::Read => (peer, poster),
                _ => (poster, peer),
            };
            let src_off = send_used[from.0 as usize];
            send_used[from.0 as usize] += size;
            let dst_off = recv_used[to.0 as usize];
            recv_used[to.0 as usize] += size;
            ops.push(Op {
                workload: wi,
                op: w.op,
                poster,
                from,
                to,
                size,
                src_off,
                dst_off,
                start: open.then_some(start),
                posted_at: None,
                wr: None,
                completions: 0,
                ok: None,
                done_at: None,
                expect: Expect::Source,
            });
            ops.len() - 1
        };
        match w.kind {
            WorkloadKind::Single | WorkloadKind::Many => {
                let (s, d) = (host(&w.src, &who)?, host(&w.dst, &who)?);
                let count = if w.kind == WorkloadKind::Single {
                    1
                } else {
                    w.count
                };
                for _ in 0..count {
                    add(s, d, true);
                }
            }
            WorkloadKind::Pingpong | WorkloadKind::Window => {
                let (s, d) = (host(&w.src, &who)?, host(&w.dst, &who)?);
                let mut queue = Vec::new();
                if w.kind == WorkloadKind::Pingpong {
                    for i in 0..2 * w.count {
                        let (a, b) = if i % 2 == 0 { (s, d) } else { (d, s) };
                        queue.push(add(a, b, i == 0));
                    }
                    loops.insert(wi, Loop { queue, next: 1 });
                } else {
                    let window = w.window.unwrap_or(64).max(1) as usize;
                    for i in 0..w.count as usize {
                        queue.push(add(s, d, i < window));
                    }
                    loops.insert(
                        wi,
                        Loop {
                            queue,
                            next: window,
                        },
                    );
                }
            }
            WorkloadKind::AllToAll => {
                for _ in 0..w.count {
                    for a in 0..n as u32 {
                        for b in 0..n as u32 {
                            if a != b {
                                add(NodeAddr(a), NodeAddr(b), true);
                            }
                        }
                    }
                }
            }
            WorkloadKind::Incast => {
                let d = host(&w.dst, &who)?;
                let srcs: Vec<NodeAddr> = if w.srcs.is_empty() {
                    (0..n as u32).map(NodeAddr).filter(|h| *h != d).collect()
                } else {
                    w.srcs
                        .iter()
                        .map(|h| build::host(sc, h, n, &who))
                        .collect::<Result<_, _>>()?
                };
                for _ in 0..w.count {
                    for s in &srcs {
                        if *s != d {
                            add(*s, d, true);
                        }
                    }
                }
            }
            WorkloadKind::RandomPairs => {
                let mut rng = stream(seed, &format!("workload:{wi}"));
                for _ in 0..w.count {
                    let a = below(&mut rng, n as u64) as u32;
                    let b = (a + 1 + below(&mut rng, n as u64 - 1) as u32) % n as u32;
                    add(NodeAddr(a), NodeAddr(b), true);
                }
            }
            WorkloadKind::Permutation => {
                let perm = derangement(n as u32, seed ^ wi as u64);
                for _ in 0..w.count {
                    for (a, b) in perm.iter().enumerate() {
                        add(NodeAddr(a as u32), NodeAddr(*b), true);
                    }
                }
            }
            // Run by crate::msg (returned above).
            WorkloadKind::MsgLatency
            | WorkloadKind::MsgBw
            | WorkloadKind::MsgBibw
            | WorkloadKind::MsgMixed => {}
            WorkloadKind::Reuse => {
                seq += 1;
                actions.insert(
                    (start, seq),
                    Action::Reuse(host(&w.dst, &who)?, wi as u32 + 1),
                );
            }
        }
    }
    for (i, op) in ops.iter().enumerate() {
        if let Some(t) = op.start {
            seq += 1;
            actions.insert((t, seq), Action::Post(i));
        }
    }

    // ---- which hosts run here (all, but for `udrma host`)
    let local: Vec<bool> = (0..n).map(|h| world.is_local(NodeAddr(h as u32))).collect();
    let mine = |op: &Op| local[op.poster.0 as usize];

    // ---- memory: sources with a pattern, targets with another, a guard
    let mut keys: Vec<(MrKey, MrKey, MrKey)> = Vec::with_capacity(n);
    for h in 0..n {
        if !local[h] {
            // Another process registers this host's memory in the same
            // order, so its keys are the ones a fresh table gives.
            let mut m = udrma_nic::MemoryTable::new();
            keys.push((
                m.register_phantom(SRC_BASE, 1, Access::ALL),
                m.register_phantom(DST_BASE, 1, Access::ALL),
                m.register_phantom(GUARD_BASE, 1, Access::LOCAL),
            ));
            continue;
        }
        let m = world.nic_mut(NodeAddr(h as u32)).memory_mut();
        let (src_len, dst_len) = (send_used[h].max(1), recv_used[h].max(1));
        let (src, dst) = if phantom {
            (
                m.register_phantom(SRC_BASE, src_len, Access::ALL),
                m.register_phantom(DST_BASE, dst_len, Access::ALL),
            )
        } else {
            let src = m.register(SRC_BASE, src_len as usize, Access::ALL);
            m.region_mut(src).expect("registered").bytes = pattern(src_len as usize, h as u32);
            let dst = m.register(DST_BASE, dst_len as usize, Access::ALL);
            m.region_mut(dst).expect("registered").bytes =
                pattern(dst_len as usize, 0x80 + h as u32);
            (src, dst)
        };
        let guard = m.register(GUARD_BASE, GUARD_LEN, Access::LOCAL);
        m.region_mut(guard).expect("registered").bytes = pattern(GUARD_LEN, 0xee);
        keys.push((src, dst, guard));
    }

    // ---- run
    world.start().map_err(|e| ScenarioError {
        file: sc.path.clone(),
        at: None,
        message: format!("{NETWORK}{e}"),
    })?;
    let limit = Instant::ZERO + sc.file.time_limit.0;
    let mut by_wr: BTreeMap<(NodeAddr, WrId), usize> = BTreeMap::new();
    let mut recvs: BTreeMap<(NodeAddr, WrId), (usize, u64)> = BTreeMap::new();
    let mut recv_done: Vec<(NodeAddr, u64, u64)> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut memory_equal = true;
    let post = |world: &mut dyn Backend,
                i: usize,
                ops: &mut Vec<Op>,
                recvs: &mut BTreeMap<_, _>,
                by_wr: &mut BTreeMap<_, _>| {
        let op = &mut ops[i];
        if !local[op.poster.0 as usize] {
            // Its own process posts it.
            return None;
        }
        let now = world.now();
        let (fk, tk) = (keys[op.from.0 as usize], keys[op.to.0 as usize]);
        let (src_addr, dst_addr) = (SRC_BASE + op.src_off, DST_BASE + op.dst_off);
        let wr = match op.op {
            OpKind::Write => WorkRequest::write(op.to, fk.0, src_addr, op.size, tk.1 .0, dst_addr),
            OpKind::Read => WorkRequest::read(op.from, tk.1, dst_addr, op.size, fk.0 .0, src_addr),
            OpKind::Send => {
                match world
                    .nic_mut(op.to)
                    .post_recv(now, 0, tk.1, dst_addr, op.size)
                {
                    Ok(r) => {
                        recvs.insert((op.to, r), (i, dst_addr));
                    }
                    Err(e) => {
                        op.ok = Some(false);
                        op.completions = 1;
                        op.done_at = Some(now);
                        return Some(format!("receive buffer for op {i} refused: {e}"));
                    }
                }
                WorkRequest::send(op.to, fk.0, src_addr, op.size)
            }
        };
        op.posted_at = Some(now);
        match world.post(op.poster, wr) {
            Ok(id) => {
                op.wr = Some(id);
                by_wr.insert((op.poster, id), i);
                None
            }
            Err(e) => {
                op.ok = Some(false);
                op.completions = 1;
                op.done_at = Some(now);
                Some(format!("op {i} refused at post: {e}"))
            }
        }
    };
    let mut pending_follow: Vec<usize> = Vec::new();
    let mut ending = Ending::Quiet;
    loop {
        // React to what happened.
        let new: Vec<(NodeAddr, Event)> = world.take_host_events();
        for (h, e) in new {
            match e {
                Event::Completed {
                    wr,
                    kind: WrKind::Recv,
                    len,
                    result,
                    ..
                } => {
                    if let (Some((_, addr)), true) = (recvs.get(&(h, wr)), result.is_ok()) {
                        recv_done.push((h, *addr, len));
                    }
                }
                Event::Completed { wr, result, at, .. } => {
                    let Some(&i) = by_wr.get(&(h, wr)) else {
                        continue;
                    };
                    let op = &mut ops[i];
                    op.completions += 1;
                    if op.completions > 1 {
                        continue;
                    }
                    op.ok = Some(result.is_ok());
                    op.done_at = Some(at);
                    if let Err(err) = result {
                        notes.push(format!(
                            "op {i} ({:?} {}→{} {} B) failed: {err}",
                            op.op, op.from, op.to, op.size
                        ));
                    } else if !phantom
                        && matches!(op.op, OpKind::Write | OpKind::Read)
                        && local[op.to.0 as usize]
                    {
                        // (A WRITE into another process's host is checked
                        // there, at the end.)
                        let op = op.clone();
                        if target(&*world, &keys, &op) != source(&*world, &keys, &send_used, &op) {
                            memory_equal = false;
                            notes.push(format!(
                                "op {i} ({:?} {}→{}): bytes differ at completion",
                                op.op, op.from, op.to
                            ));
                        }
                    }
                    let wl = ops[i].workload;
                    if let Some(l) = loops.get_mut(&wl) {
                        if sc.file.workloads[wl].kind == WorkloadKind::Window
                            && l.next < l.queue.len()
                        {
                            pending_follow.push(l.queue[l.next]);
                            l.next += 1;
                        }
                    }
                }
                Event::WriteReceived { from, .. } => {
                    // Pingpong: the reply leaves when the write lands.
                    for (wl, l) in loops.iter_mut() {
                        if sc.file.workloads[*wl].kind != WorkloadKind::Pingpong
                            || l.next >= l.queue.len()
                        {
                            continue;
                        }
                        let next = &ops[l.queue[l.next]];
                        if next.poster == h && next.to == from {
                            pending_follow.push(l.queue[l.next]);
                            l.next += 1;
                            break;
                        }
                    }
                }
                Event::DataArrived { .. }
                | Event::Control { .. }
                | Event::Credits { .. }
                | Event::Hello { .. }
                | Event::PeerRestarted { .. } => {}
            }
        }
        for i in pending_follow.drain(..) {
            if let Some(note) = post(world.as_mut(), i, &mut ops, &mut recvs, &mut by_wr) {
                notes.push(note);
            }
        }
        // Next: an action due before the next event, or the event.
        let next_action = actions.first_key_value().map(|((t, _), _)| *t);
        match world.advance(next_action, limit) {
            Advance::Limit(t) => {
                ending = Ending::Limit(t);
                break;
            }
            Advance::Quiet => break,
            Advance::Ran => {}
            Advance::Reached(_) => {
                let (_, action) = actions.pop_first().expect("peeked");
                match action {
                    Action::Post(i) => {
                        if let Some(note) =
                            post(world.as_mut(), i, &mut ops, &mut recvs, &mut by_wr)
                        {
                            notes.push(note);
                        }
                    }
                    Action::Reuse(h, tag) => {
                        for (i, op) in ops.iter_mut().enumerate() {
                            if op.to == h
                                && op.op == OpKind::Write
                                && op.ok == Some(true)
                                && !phantom
                            {
                                let fresh = pattern(op.size as usize, 0x1000 + tag + i as u32);
                                let key = keys[h.0 as usize].1;
                                let region = world
                                    .nic_mut(h)
                                    .memory_mut()
                                    .region_mut(key)
                                    .expect("registered");
                                let at = op.dst_off as usize;
                                region.bytes[at..at + op.size as usize].copy_from_slice(&fresh);
                                op.expect = Expect::Reused(0x1000 + tag + i as u32);
                            }
                        }
                    }
                }
            }
        }
    }
    world
        .finish()
        .map_err(|e| sc.error_at("outputs", format!("writing outputs: {e}")))?;

    // ---- checks
    let mut checks: BTreeMap<String, bool> = BTreeMap::new();
    let all_done = ops.iter().filter(|o| mine(o)).all(|o| o.completions > 0);
    checks.insert("all-complete".into(), all_done);
    if !sc.file.checks.expect_failures {
        checks.insert(
            "all-succeeded".into(),
            ops.iter().filter(|o| mine(o)).all(|o| o.ok == Some(true)),
        );
    }
    let exactly_once = ops.iter().all(|o| o.completions <= 1);
    checks.insert("exactly-once".into(), exactly_once);
    if !phantom {
        // SENDs: each successful one's bytes in exactly one filled buffer.
        let mut filled: Vec<Vec<u8>> = recv_done
            .iter()
            .map(|(h, addr, len)| {
                region_bytes(&*world, *h, keys[h.0 as usize].1, addr - DST_BASE, *len)
            })
            .collect();
        for (i, op) in ops.iter().enumerate() {
            if op.op == OpKind::Send && op.ok == Some(true) {
                let sent = source(&*world, &keys, &send_used, op);
                match filled.iter().position(|b| *b == sent) {
                    Some(at) => {
                        filled.swap_remove(at);
                    }
                    None => {
                        memory_equal = false;
                        notes.push(format!(
                            "op {i} (SEND {}→{}): bytes in no receive buffer",
                            op.from, op.to
                        ));
                    }
                }
            }
        }
        // WRITEs other processes posted into this one's hosts: their
        // bytes, by the end.
        for (i, op) in ops.iter().enumerate() {
            if !mine(op) && op.op == OpKind::Write && local[op.to.0 as usize] {
                let want = source(&*world, &keys, &send_used, op);
                if target(&*world, &keys, op) != want {
                    memory_equal = false;
                    notes.push(format!(
                        "op {i} (WRITE {}→{}, posted by another process): bytes differ at the end",
                        op.from, op.to
                    ));
                }
            }
        }
        checks.insert("memory-equal".into(), memory_equal);
        // No byte outside an accepted operation changed.
        let mut in_bounds = true;
        for h in (0..n).filter(|h| local[*h]) {
            let (_, dst, guard) = keys[h];
            let nic = world.nic(NodeAddr(h as u32));
            if nic
                .memory()
                .region(guard)
                .map(|r| r.bytes != pattern(GUARD_LEN, 0xee))
                .unwrap_or(true)
            {
                in_bounds = false;
                notes.push(format!("h{h}: guard region written"));
            }
            let bytes = &nic.memory().region(dst).expect("registered").bytes;
            let used = recv_used[h] as usize;
            if bytes.len() > used && bytes[used..] != pattern(bytes.len(), 0x80 + h as u32)[used..]
            {
                in_bounds = false;
                notes.push(format!("h{h}: bytes beyond every target changed"));
            }
        }
        checks.insert("no-out-of-bounds".into(), in_bounds);
        // A completed WRITE's target still holds what it should.
        let mut no_late = true;
        for (i, op) in ops.iter().enumerate() {
            if op.op == OpKind::Write && op.ok == Some(true) && local[op.to.0 as usize] {
                let want = match op.expect {
                    Expect::Source => source(&*world, &keys, &send_used, op),
                    Expect::Reused(tag) => pattern(op.size as usize, tag),
                };
                if target(&*world, &keys, op) != want {
                    no_late = false;
                    notes.push(format!(
                        "op {i} (WRITE {}→{}): its target changed after completion{}",
                        op.from,
                        op.to,
                        if op.expect == Expect::Source {
                            ""
                        } else {
                            " (the host had reused it)"
                        }
                    ));
                }
            }
        }
        checks.insert("no-write-after-completion".into(), no_late);
    }
    let mut bounded = true;
    for h in (0..n).filter(|h| local[*h]) {
        if let Some(what) = world.nic(NodeAddr(h as u32)).occupancy().violation() {
            bounded = false;
            notes.push(format!("h{h}: {what} passed its limit"));
        }
    }
    checks.insert("bounded-state".into(), bounded);
    let idle = world.is_idle();
    checks.insert("liveness".into(), idle && all_done);
    if !idle {
        notes.push(crate::leftover::note(&*world, limit, ending, |_| None));
    }
    for skip in &sc.file.checks.skip {
        checks.remove(skip);
    }
    // Attempted posts: accepted ones have a post time, refused ones a
    // failure without a request id.
    let attempted = ops
        .iter()
        .filter(|o| o.posted_at.is_some() || (o.ok == Some(false) && o.wr.is_none()))
        .count();
    let mut report = report::build(
        sc,
        seed,
        &*world,
        &ops_summary(&ops),
        attempted as u64,
        checks,
        notes,
    );
    if let Some((a, b, spec)) = ladder {
        let first_only =
            build::nic_config(sc)?.registration == udrma_nic::RegistrationMode::FirstOnly;
        report.ladder_svg = world
            .world()
            .map(|w| crate::ladder::draw(w, a, b, spec, first_only, &sc.file.name));
    }
    Ok(report)
}

fn region_bytes(world: &dyn Backend, h: NodeAddr, key: MrKey, off: u64, len: u64) -> Vec<u8> {
    let r = world.nic(h).memory().region(key).expect("registered");
    r.bytes[off as usize..(off + len) as usize].to_vec()
}

/// The bytes an operation moves: read from the source host's memory, or,
/// when that host runs in another process, the pattern its sources start
/// with (sources are never written).
fn source(
    world: &dyn Backend,
    keys: &[(MrKey, MrKey, MrKey)],
    send_used: &[u64],
    op: &Op,
) -> Vec<u8> {
    if !world.is_local(op.from) {
        let len = send_used[op.from.0 as usize].max(1) as usize;
        let (at, n) = (op.src_off as usize, op.size as usize);
        return pattern(len, op.from.0)[at..at + n].to_vec();
    }
    region_bytes(
        world,
        op.from,
        keys[op.from.0 as usize].0,
        op.src_off,
        op.size,
    )
}

fn target(world: &dyn Backend, keys: &[(MrKey, MrKey, MrKey)], op: &Op) -> Vec<u8> {
    region_bytes(world, op.to, keys[op.to.0 as usize].1, op.dst_off, op.size)
}

fn ops_summary(ops: &[Op]) -> Vec<OpOutcome> {
    ops.iter()
        .map(|o| OpOutcome {
            size: o.size,
            ok: o.ok,
            latency: match (o.posted_at, o.done_at) {
                (Some(p), Some(d)) => Some(d - p),
                _ => None,
            },
            done_at: o.done_at,
            posted_at: o.posted_at,
        })
        .collect()
}
