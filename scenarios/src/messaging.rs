//! The runner of the messaging workloads (`msg-latency`, `msg-bw`,
//! `msg-bibw`, `msg-mixed`: the osu_latency, osu_bw and osu_bibw shapes
//! and a bimodal mix) over the MVICH-like messaging layer, and the checks
//! of their messages: all-complete, all-succeeded, exactly-once,
//! memory-equal, mpi-order, credits, bounded-state, liveness.

use std::collections::BTreeMap;

use udrma_faults::rng::{stream, unit};
use udrma_host::messaging::{Messenger, MsgEvent, MsgProtocol, SendId};
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::backend::{Advance, Backend};
use crate::build::{self, msg_config};
use crate::data::pattern;
use crate::leftover::Ending;
use crate::report::{self, MessagingReport, Report, SizeRow};
use crate::schema::WorkloadKind;
use crate::validate::sizes;
use crate::{Scenario, ScenarioError};

/// Who a workload's iteration talks between.
#[derive(Debug, Clone, Copy)]
struct Endpoints {
    a: NodeAddr,
    b: NodeAddr,
    tag: u32,
    window: u32,
}

/// (receiver, sender, tag).
type Flow = (NodeAddr, NodeAddr, u32);

#[derive(Debug, Clone)]
struct Expected {
    len: u64,
    seed: u32,
    sent_at: Instant,
    workload: usize,
}

#[derive(Debug, Clone)]
struct Wl {
    kind: WorkloadKind,
    a: NodeAddr,
    b: NodeAddr,
    tag: u32,
    sizes: Vec<u64>,
    size_i: usize,
    iter: u32,
    warmup: u32,
    count: u32,
    window: u32,
    t0: Instant,
    /// Per iteration: completions still awaited.
    pending: u32,
    protocols: BTreeMap<MsgProtocol, u64>,
    done: bool,
    start: Instant,
    started: bool,
    /// Bandwidth: receives of this iteration's window so far.
    recvs: u32,
    /// Mix: latency sums per bucket.
    buckets: BTreeMap<u64, (u64, u64)>,
}

struct Run<'a> {
    sc: &'a Scenario,
    world: Box<dyn Backend>,
    ms: Vec<Option<Messenger>>,
    wls: Vec<Wl>,
    /// Per (receiver, sender, tag): the messages sent, in order.
    expect: BTreeMap<Flow, Vec<Expected>>,
    /// Per (receiver, sender, tag): receives posted so far, and the
    /// sequence number each got (in posting order).
    posted: BTreeMap<Flow, Vec<Option<u32>>>,
    /// Each receive's key and posting index.
    recv_index: BTreeMap<(NodeAddr, udrma_host::messaging::RecvId), (Flow, usize)>,
    received: u64,
    sends: BTreeMap<(NodeAddr, SendId), (usize, Instant, u64)>,
    next_seed: u32,
    rows: Vec<SizeRow>,
    notes: Vec<String>,
    memory_equal: bool,
    in_order: bool,
    credits_ok: bool,
    exactly_once: bool,
    sent: u64,
    recv_ok: u64,
    failed: u64,
    latencies: Vec<u64>,
    bytes_ok: u64,
    first_post: Option<Instant>,
    last_done: Option<Instant>,
    /// The time limit, and how the event loop ended.
    limit: Instant,
    ending: Ending,
}

/// Runs a messaging scenario on a built world.
pub(crate) fn run(
    sc: &Scenario,
    seed: u64,
    world: Box<dyn Backend>,
) -> Result<Report, ScenarioError> {
    let n = world.n_hosts();
    let nic = world.nic(NodeAddr(0)).config().clone();
    let mut r = Run {
        sc,
        world,
        ms: (0..n).map(|_| None).collect(),
        wls: Vec::new(),
        expect: BTreeMap::new(),
        posted: BTreeMap::new(),
        recv_index: BTreeMap::new(),
        received: 0,
        sends: BTreeMap::new(),
        next_seed: 1,
        rows: Vec::new(),
        notes: Vec::new(),
        memory_equal: true,
        in_order: true,
        credits_ok: true,
        exactly_once: true,
        sent: 0,
        recv_ok: 0,
        failed: 0,
        latencies: Vec::new(),
        bytes_ok: 0,
        first_post: None,
        last_done: None,
        limit: Instant::ZERO + sc.file.time_limit.0,
        ending: Ending::Quiet,
    };
    for (i, w) in sc.file.workloads.iter().enumerate() {
        let who = format!("workload {i}");
        let a = build::host(sc, w.src.as_deref().unwrap_or(""), n, &who)?;
        let b = build::host(sc, w.dst.as_deref().unwrap_or(""), n, &who)?;
        for (x, y) in [(a, b), (b, a)] {
            if r.ms[x.0 as usize].is_none() {
                let cfg = msg_config(sc, seed, x, n, &nic)?;
                let m = Messenger::new(cfg, r.world.nic(x))
                    .map_err(|e| sc.error_at("messaging", format!("[messaging] {e}")))?;
                r.ms[x.0 as usize] = Some(m);
            }
            let m = r.ms[x.0 as usize].as_mut().expect("made");
            m.connect(Instant::ZERO, r.world.nic_mut(x), y)
                .map_err(|e| sc.error_at("workload", format!("{who}: {e}")))?;
            r.world.service(x);
        }
        let mut sizes = sizes(sc, w, &who)?;
        if w.kind == WorkloadKind::MsgMixed {
            sizes = mixed_sizes(seed, i, w.count);
        }
        r.wls.push(Wl {
            kind: w.kind,
            a,
            b,
            tag: (i as u32) * 4,
            sizes,
            size_i: 0,
            iter: 0,
            warmup: if w.kind == WorkloadKind::MsgMixed {
                0
            } else {
                w.warmup.unwrap_or(2)
            },
            count: w.count.max(1),
            window: w.window.unwrap_or(64).max(1),
            t0: Instant::ZERO,
            pending: 0,
            protocols: BTreeMap::new(),
            done: false,
            start: Instant::ZERO + w.start.map_or(Duration::ZERO, |t| t.0),
            started: false,
            recvs: 0,
            buckets: BTreeMap::new(),
        });
    }
    let limit = r.limit;
    loop {
        // Start workloads whose time has come.
        let now = r.world.now();
        for i in 0..r.wls.len() {
            if !r.wls[i].started && r.wls[i].start <= now {
                r.wls[i].started = true;
                r.begin(i);
            }
        }
        r.settle();
        let next_start = r.wls.iter().filter(|w| !w.started).map(|w| w.start).min();
        let tm = r.ms.iter().flatten().filter_map(|m| m.poll_timeout()).min();
        let tm = [tm, next_start].into_iter().flatten().min();
        match r.world.advance(tm, limit) {
            Advance::Quiet => break,
            Advance::Limit(t) => {
                r.ending = Ending::Limit(t);
                break;
            }
            Advance::Ran => {}
            Advance::Reached(_) => {
                let now = r.world.now();
                for h in 0..r.ms.len() {
                    let Some(m) = r.ms[h].as_mut() else {
                        continue;
                    };
                    if m.poll_timeout().is_some_and(|x| x <= now) {
                        m.handle_timeout(now, r.world.nic_mut(NodeAddr(h as u32)));
                        r.world.service(NodeAddr(h as u32));
                    }
                }
            }
        }
    }
    r.world
        .finish()
        .map_err(|e| sc.error_at("outputs", format!("writing outputs: {e}")))?;
    Ok(r.report(seed))
}

/// The bimodal mix: most messages 128 B – 4 KiB, one in ten 8 KiB – 1 MiB
/// (log-uniform within each mode).
fn mixed_sizes(seed: u64, wl: usize, count: u32) -> Vec<u64> {
    let mut rng = stream(seed, &format!("mix:{wl}"));
    (0..count)
        .map(|_| {
            let big = unit(&mut rng) < 0.1;
            let (lo, hi) = if big {
                (13.0f64, 20.0f64)
            } else {
                (7.0f64, 12.0f64)
            };
            let e = lo + unit(&mut rng) * (hi - lo);
            2f64.powf(e).round() as u64
        })
        .collect()
}

impl Run<'_> {
    fn send(&mut self, wl: usize, from: NodeAddr, to: NodeAddr, tag: u32, len: u64) {
        let seed = self.next_seed;
        self.next_seed = self.next_seed.wrapping_add(1);
        let now = self.world.now();
        let data = pattern(len as usize, seed);
        self.expect
            .entry((to, from, tag))
            .or_default()
            .push(Expected {
                len,
                seed,
                sent_at: now,
                workload: wl,
            });
        let ms = &mut self.ms;
        let m = ms[from.0 as usize].as_mut().expect("connected");
        match m.send(now, self.world.nic_mut(from), to, tag, data) {
            Ok(id) => {
                self.sends.insert((from, id), (wl, now, len));
                self.sent += 1;
                self.first_post = Some(self.first_post.map_or(now, |f| f.min(now)));
            }
            Err(e) => {
                self.failed += 1;
                self.notes.push(format!("send {from}→{to} refused: {e}"));
            }
        }
        self.world.service(from);
    }

    fn recv(&mut self, at: NodeAddr, from: NodeAddr, tag: u32, max: u64) {
        let now = self.world.now();
        let ms = &mut self.ms;
        let m = ms[at.0 as usize].as_mut().expect("connected");
        let id = m.recv(now, self.world.nic_mut(at), Some(from), Some(tag), max);
        let key = (at, from, tag);
        let list = self.posted.entry(key).or_default();
        list.push(None);
        self.recv_index.insert((at, id), (key, list.len() - 1));
        self.world.service(at);
    }

    /// Starts the workload's next iteration (or size).
    fn begin(&mut self, i: usize) {
        let now = self.world.now();
        let w = &mut self.wls[i];
        let Some(&size) = w.sizes.get(w.size_i) else {
            w.done = true;
            return;
        };
        if w.iter == w.warmup {
            w.t0 = now;
            w.protocols.clear();
        }
        let (kind, a, b, tag, window) = (w.kind, w.a, w.b, w.tag, w.window);
        let w = Endpoints { a, b, tag, window };
        match kind {
            WorkloadKind::MsgLatency => {
                self.wls[i].pending = 1;
                self.recv(w.b, w.a, w.tag, size);
                self.recv(w.a, w.b, w.tag, size);
                self.send(i, w.a, w.b, w.tag, size);
            }
            WorkloadKind::MsgBw => {
                // window receives + window sends + the ack's send and
                // receive.
                self.wls[i].pending = 2 * w.window + 2;
                for _ in 0..w.window {
                    self.recv(w.b, w.a, w.tag, size);
                }
                self.recv(w.a, w.b, w.tag + 1, 4);
                for _ in 0..w.window {
                    self.send(i, w.a, w.b, w.tag, size);
                }
            }
            WorkloadKind::MsgBibw => {
                self.wls[i].pending = 4 * w.window;
                for _ in 0..w.window {
                    self.recv(w.b, w.a, w.tag, size);
                    self.recv(w.a, w.b, w.tag, size);
                }
                for _ in 0..w.window {
                    self.send(i, w.a, w.b, w.tag, size);
                    self.send(i, w.b, w.a, w.tag, size);
                }
            }
            _ => {
                // The mix: everything at once.
                let sizes = self.wls[i].sizes.clone();
                self.wls[i].pending = sizes.len() as u32;
                for s in &sizes {
                    self.recv(w.b, w.a, w.tag, *s);
                }
                for s in &sizes {
                    self.send(i, w.a, w.b, w.tag, *s);
                }
                self.wls[i].size_i = sizes.len();
            }
        }
    }

    /// Feeds NIC events to messengers and messenger events to the
    /// workloads until nothing new happens at this instant.
    fn settle(&mut self) {
        loop {
            let evs = self.world.take_host_events();
            let mut out: Vec<(NodeAddr, MsgEvent)> = Vec::new();
            let now = self.world.now();
            let busy = !evs.is_empty();
            for (h, event) in evs {
                let Some(m) = self.ms[h.0 as usize].as_mut() else {
                    continue;
                };
                m.handle_event(now, self.world.nic_mut(h), event);
                self.world.service(h);
            }
            for h in 0..self.ms.len() {
                let Some(m) = self.ms[h].as_mut() else {
                    continue;
                };
                while let Some(e) = m.poll_event() {
                    out.push((NodeAddr(h as u32), e));
                }
                if busy {
                    if let Err(e) = m.check() {
                        if self.credits_ok {
                            self.notes.push(format!("h{h}: {e}"));
                        }
                        self.credits_ok = false;
                    }
                }
            }
            if out.is_empty() && !busy {
                break;
            }
            for (h, e) in out {
                self.on_msg_event(h, e);
            }
        }
    }

    fn on_msg_event(&mut self, h: NodeAddr, e: MsgEvent) {
        let now = self.world.now();
        match e {
            MsgEvent::SendDone {
                id,
                protocol,
                result,
                ..
            } => {
                let Some((wl, _, len)) = self.sends.remove(&(h, id)) else {
                    self.exactly_once = false;
                    self.notes.push(format!("{h}: send {id:?} completed twice"));
                    return;
                };
                if let Err(e) = result {
                    self.failed += 1;
                    self.notes.push(format!("{h}: send of {len} B failed: {e}"));
                    return;
                }
                *self.wls[wl].protocols.entry(protocol).or_default() += 1;
                self.progress(wl, h, false);
            }
            MsgEvent::RecvDone {
                id,
                src,
                tag,
                data,
                seq,
                result,
                ..
            } => {
                // The k-th receive posted for (source, tag) must get the
                // k-th message sent with them (MPI's matching order; the
                // completion order may differ).
                let Some((key, k)) = self.recv_index.remove(&(h, id)) else {
                    self.exactly_once = false;
                    self.notes
                        .push(format!("{h}: receive {id:?} completed twice"));
                    return;
                };
                if key != (h, src, tag) {
                    self.in_order = false;
                    self.notes.push(format!(
                        "{h}: a receive for {:?} matched {src} tag {tag}",
                        key
                    ));
                }
                if let Some(slot) = self.posted.get_mut(&key).and_then(|l| l.get_mut(k)) {
                    *slot = Some(seq);
                }
                let Some(x) = self.expect.get(&key).and_then(|l| l.get(k)).cloned() else {
                    self.exactly_once = false;
                    self.notes
                        .push(format!("{h}: a message from {src} tag {tag} nobody sent"));
                    return;
                };
                self.received += 1;
                if let Err(e) = result {
                    self.failed += 1;
                    self.notes.push(format!("{h}: receive failed: {e}"));
                    return;
                }
                if data != pattern(x.len as usize, x.seed) {
                    if self.memory_equal {
                        self.notes.push(format!(
                            "{h}: message from {src} tag {tag} ({} B) has the wrong bytes",
                            x.len
                        ));
                    }
                    self.memory_equal = false;
                }
                self.recv_ok += 1;
                self.bytes_ok += x.len;
                let lat = (now - x.sent_at).as_nanos();
                self.latencies.push(lat);
                self.last_done = Some(now);
                let wl = x.workload;
                if self.wls[wl].kind == WorkloadKind::MsgMixed {
                    let b = self.wls[wl]
                        .buckets
                        .entry(x.len.next_power_of_two())
                        .or_default();
                    b.0 += 1;
                    b.1 += lat;
                }
                // Acks and pongs belong to the workload of their tag.
                let wl = (tag / 4) as usize;
                if wl < self.wls.len() {
                    self.progress(wl, h, true);
                }
            }
        }
    }

    /// A send (`recv == false`) or receive finished at `h` for workload
    /// `i`: move its iteration along.
    fn progress(&mut self, i: usize, h: NodeAddr, recv: bool) {
        let w = &self.wls[i];
        let (kind, a, b, tag, window) = (w.kind, w.a, w.b, w.tag, w.window);
        let size = w.sizes.get(w.size_i).copied().unwrap_or(0);
        match kind {
            WorkloadKind::MsgLatency => {
                if !recv {
                    return;
                }
                if h == b {
                    // The pong (the next ping's receive is posted when the
                    // next iteration begins).
                    self.send(i, b, a, tag, size);
                    return;
                }
                self.end_iteration(i);
            }
            WorkloadKind::MsgBw => {
                self.wls[i].pending -= 1;
                if recv && h == b {
                    // Count the window's receives; the last one acks.
                    self.wls[i].recvs += 1;
                    if self.wls[i].recvs == window {
                        self.send(i, b, a, tag + 1, 4);
                    }
                }
                if self.wls[i].pending == 0 {
                    self.wls[i].recvs = 0;
                    self.end_iteration(i);
                }
            }
            WorkloadKind::MsgBibw => {
                self.wls[i].pending -= 1;
                if self.wls[i].pending == 0 {
                    self.end_iteration(i);
                }
            }
            _ => {
                if recv {
                    self.wls[i].pending -= 1;
                    if self.wls[i].pending == 0 {
                        self.wls[i].done = true;
                    }
                }
            }
        }
    }

    fn end_iteration(&mut self, i: usize) {
        let now = self.world.now();
        let w = &mut self.wls[i];
        w.iter += 1;
        if w.iter < w.warmup + w.count {
            self.begin(i);
            return;
        }
        let size = w.sizes[w.size_i];
        let elapsed = (now - w.t0).as_ps() as f64 / 1e6; // µs
        let count = f64::from(w.count);
        let (messages, latency_us, bytes) = match w.kind {
            WorkloadKind::MsgLatency => (
                u64::from(w.count) * 2,
                elapsed / (2.0 * count),
                size as f64 * 2.0 * count,
            ),
            WorkloadKind::MsgBw => {
                let m = u64::from(w.count * w.window);
                (m, elapsed / m as f64, size as f64 * m as f64)
            }
            _ => {
                let m = u64::from(2 * w.count * w.window);
                (m, elapsed / m as f64, size as f64 * m as f64)
            }
        };
        let protocol = w
            .protocols
            .iter()
            .max_by_key(|(_, n)| **n)
            .map_or("-", |(p, _)| p.name())
            .to_string();
        let bandwidth_mbs = if w.kind == WorkloadKind::MsgLatency {
            size as f64 / latency_us
        } else {
            bytes / elapsed
        };
        self.rows.push(SizeRow {
            workload: i,
            kind: kind_name(w.kind).into(),
            size,
            protocol,
            messages,
            latency_us: round3(latency_us),
            bandwidth_mbs: round3(bandwidth_mbs),
        });
        w.size_i += 1;
        w.iter = 0;
        self.begin(i);
    }

    fn report(mut self, seed: u64) -> Report {
        // Rows of the mix, per bucket.
        for (i, w) in self.wls.iter().enumerate() {
            for (b, (n, sum)) in &w.buckets {
                self.rows.push(SizeRow {
                    workload: i,
                    kind: kind_name(w.kind).into(),
                    size: *b,
                    protocol: "-".into(),
                    messages: *n,
                    latency_us: round3(*sum as f64 / *n as f64 / 1e3),
                    bandwidth_mbs: 0.0,
                });
            }
        }
        // Sequence numbers rise in posting order for every (source, tag).
        for (key, list) in &self.posted {
            let seqs: Vec<u32> = list.iter().flatten().copied().collect();
            if seqs
                .windows(2)
                .any(|w| w[1].wrapping_sub(w[0]).wrapping_sub(1) >= 1 << 31)
            {
                self.in_order = false;
                self.notes.push(format!(
                    "{}: messages from {} tag {} matched out of order",
                    key.0, key.1, key.2
                ));
            }
        }
        let sent_total: usize = self.expect.values().map(Vec::len).sum();
        let all_done = self.wls.iter().all(|w| w.done)
            && self.received as usize == sent_total
            && self.sends.is_empty();
        if !all_done {
            let left = sent_total.saturating_sub(self.received as usize);
            self.notes.push(format!(
                "{left} messages not received, {} sends not finished",
                self.sends.len()
            ));
        }
        let n = self.world.n_hosts();
        let mut stats = udrma_host::messaging::MsgStats::default();
        for m in self.ms.iter().flatten() {
            let s = m.stats();
            stats.eager += s.eager;
            stats.r3 += s.r3;
            stats.rget += s.rget;
            stats.rput += s.rput;
            stats.noops += s.noops;
            stats.credit_stalls += s.credit_stalls;
            stats.fallbacks += s.fallbacks;
        }
        let mut no_rnr = true;
        for h in 0..n as u32 {
            let rnr = self
                .world
                .nic(NodeAddr(h))
                .stats()
                .nacks_sent
                .get(&udrma_proto::Syndrome::ReceiverNotReady)
                .copied()
                .unwrap_or(0);
            if rnr > 0 {
                no_rnr = false;
                self.notes.push(format!(
                    "h{h}: {rnr} receiver-not-ready NACKs (a vbuf overflowed)"
                ));
            }
        }
        let mut checks: BTreeMap<String, bool> = BTreeMap::new();
        checks.insert("all-complete".into(), all_done);
        if !self.sc.file.checks.expect_failures {
            checks.insert("all-succeeded".into(), all_done && self.failed == 0);
        }
        checks.insert("exactly-once".into(), self.exactly_once);
        checks.insert("memory-equal".into(), self.memory_equal);
        checks.insert("mpi-order".into(), self.in_order);
        checks.insert("credits".into(), self.credits_ok && no_rnr);
        let mut bounded = true;
        for h in 0..n {
            if let Some(what) = self.world.nic(NodeAddr(h as u32)).occupancy().violation() {
                bounded = false;
                self.notes.push(format!("h{h}: {what} passed its limit"));
            }
        }
        checks.insert("bounded-state".into(), bounded);
        let quiet = self.ms.iter().flatten().all(Messenger::is_quiet);
        let idle = self.world.is_idle() && quiet;
        checks.insert("liveness".into(), idle && all_done);
        if !idle {
            let ms = &self.ms;
            let note = crate::leftover::note(&*self.world, self.limit, self.ending, |h| {
                ms.get(h.0 as usize)
                    .and_then(Option::as_ref)
                    .filter(|m| !m.is_quiet())
                    .map(|_| "messages still in the messaging layer".to_string())
            });
            self.notes.push(note);
        }
        for skip in &self.sc.file.checks.skip {
            checks.remove(skip);
        }
        let mut rep = report::build(
            self.sc,
            seed,
            &*self.world,
            &[],
            self.sent,
            checks,
            self.notes,
        );
        self.latencies.sort_unstable();
        let pct = |q: f64| {
            let l = &self.latencies;
            if l.is_empty() {
                0
            } else {
                l[((q * l.len() as f64).ceil() as usize).clamp(1, l.len()) - 1]
            }
        };
        rep.completion_ns = report::Latency {
            p50: pct(0.5),
            p99: pct(0.99),
            max: self.latencies.last().copied().unwrap_or(0),
        };
        rep.ops = report::Ops {
            posted: self.sent,
            completed: self.recv_ok,
            failed: self.failed,
        };
        rep.goodput_gbps = match (self.first_post, self.last_done) {
            (Some(a), Some(b)) if b > a => {
                let g = self.bytes_ok as f64 * 8.0 / (b - a).as_ps() as f64 * 1e3;
                (g * 1000.0).round() / 1000.0
            }
            _ => 0.0,
        };
        rep.messaging = Some(MessagingReport {
            eager: stats.eager,
            r3: stats.r3,
            rget: stats.rget,
            rput: stats.rput,
            noops: stats.noops,
            credit_stalls: stats.credit_stalls,
            fallbacks: stats.fallbacks,
            sizes: self.rows,
        });
        rep
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The file name of a workload kind.
pub fn kind_name(k: WorkloadKind) -> &'static str {
    match k {
        WorkloadKind::MsgLatency => "msg-latency",
        WorkloadKind::MsgBw => "msg-bw",
        WorkloadKind::MsgBibw => "msg-bibw",
        WorkloadKind::MsgMixed => "msg-mixed",
        _ => "rdma",
    }
}
