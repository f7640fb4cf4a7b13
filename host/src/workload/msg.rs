//! The OSU-shaped messaging workloads as a host app: one [`MsgApp`] per
//! host runs that host's side of every workload it takes part in, over
//! its own [`Messenger`].
//!
//! Each workload has two sides, `a` and `b`, and a tag (`4 ×` its index;
//! `+ 1` for the bandwidth test's acknowledgement). Each side keeps its
//! own iteration count and needs nothing from the other but messages:
//! - `msg-latency` (osu_latency): `a` posts the pong's receive and sends
//!   a ping; `b` posts the ping's receive, and when it completes posts
//!   the next ping's receive and sends the pong.
//! - `msg-bw` (osu_bw): `a` posts the acknowledgement's receive and sends
//!   a window of messages; `b` posts a window of receives and, when they
//!   all completed, the next window's receives and a 4-byte
//!   acknowledgement.
//! - `msg-bibw` (osu_bibw): both sides post a window of receives and send
//!   a window; an iteration ends when all of its own completed.
//! - `msg-mixed`: `a` sends every message at once, `b` posts a receive
//!   for each.
//!
//! The first `warmup` iterations of each size are not timed; side `a`
//! records a [`SizeRow`] per size. The `k`-th message from a host with a
//! tag carries [`pattern`] seeded by [`message_seed`], so a receiver
//! checks the bytes of its `k`-th receive on that source and tag (MPI's
//! matching order) without asking the sender.

use std::collections::BTreeMap;

use udrma_nic::{Event, Nic};
use udrma_proto::{Duration, Instant, NodeAddr};

use super::{is_pattern, pattern};
use crate::messaging::{Messenger, MsgEvent, MsgProtocol, RecvId, SendId};
use crate::App;

/// Which OSU shape a workload has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum MsgKind {
    /// Ping-pong latency.
    Latency,
    /// One-way bandwidth with a window and an acknowledgement.
    Bw,
    /// Both ways at once.
    Bibw,
    /// Every message at once, of the sizes given.
    Mixed,
}

/// One messaging workload, planned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct MsgWorkload {
    /// Its shape.
    pub kind: MsgKind,
    /// The side that starts (and reports).
    pub a: NodeAddr,
    /// The other side.
    pub b: NodeAddr,
    /// Message sizes: one per size step, or for [`MsgKind::Mixed`] one
    /// per message.
    pub sizes: Vec<u64>,
    /// Untimed iterations per size.
    pub warmup: u32,
    /// Timed iterations per size.
    pub count: u32,
    /// Messages per iteration (bandwidth shapes).
    pub window: u32,
    /// When it starts.
    pub start: Instant,
}

/// The tag of workload `wl`'s messages (its acknowledgements use `+ 1`).
pub fn workload_tag(wl: usize) -> u32 {
    wl as u32 * 4
}

/// The pattern seed of the `k`-th message from `from` with `tag`.
pub fn message_seed(from: NodeAddr, tag: u32, k: u32) -> u32 {
    from.0
        .wrapping_mul(0x9E37_79B1)
        .wrapping_add(tag.wrapping_mul(0x85EB_CA6B))
        .wrapping_add(k.wrapping_mul(0xC2B2_AE35))
        .rotate_left(13)
        ^ 0x5bd1_e995
}

/// A message this host sent: the `k`-th to `to` with `tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Sent {
    /// Its workload.
    pub workload: usize,
    /// Receiver.
    pub to: NodeAddr,
    /// Tag.
    pub tag: u32,
    /// Its place among this host's messages to `to` with `tag`.
    pub k: u32,
    /// Bytes.
    pub len: u64,
    /// When it was handed to the messenger.
    pub at: Instant,
}

/// A message this host received: the `k`-th from `from` with `tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Received {
    /// Its workload.
    pub workload: usize,
    /// Sender.
    pub from: NodeAddr,
    /// Tag.
    pub tag: u32,
    /// Which receive on (`from`, `tag`) it completed, in posting order.
    pub k: u32,
    /// The sender's sequence number.
    pub seq: u32,
    /// Bytes.
    pub len: u64,
    /// Whether it succeeded with the bytes of the `k`-th message.
    pub ok: bool,
    /// When.
    pub at: Instant,
}

/// One timed size of a workload, as side `a` measured it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct SizeRow {
    /// The workload.
    pub workload: usize,
    /// Message size.
    pub size: u64,
    /// From the first timed iteration's start to the last one's end.
    pub elapsed: Duration,
    /// The protocol most of side `a`'s messages of this size went by.
    pub protocol: Option<MsgProtocol>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Role {
    A,
    B,
}

/// One side of one workload.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Side {
    wl: usize,
    role: Role,
    peer: NodeAddr,
    tag: u32,
    size_i: usize,
    iter: u32,
    t0: Instant,
    /// Completions this iteration still waits for.
    pending: u32,
    protocols: BTreeMap<MsgProtocol, u64>,
    started: bool,
    done: bool,
}

/// One host's side of the messaging workloads, as an app.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct MsgApp {
    me: NodeAddr,
    m: Messenger,
    #[cfg_attr(feature = "fingerprint", serde(skip))]
    workloads: Vec<MsgWorkload>,
    sides: Vec<Side>,
    next_k_sent: BTreeMap<(NodeAddr, u32), u32>,
    next_k_posted: BTreeMap<(NodeAddr, u32), u32>,
    sends: BTreeMap<SendId, Sent>,
    recvs: BTreeMap<RecvId, (usize, NodeAddr, u32, u32, u64)>,
    sent: Vec<Sent>,
    received: Vec<Received>,
    rows: Vec<SizeRow>,
    failed: u64,
    exactly_once: bool,
    in_order: bool,
    bytes_ok: bool,
    credits_ok: bool,
    notes: Vec<String>,
}

impl MsgApp {
    /// Host `me`'s sides of `workloads`, over `m` (connected to every
    /// peer it has in them).
    pub fn new(me: NodeAddr, m: Messenger, workloads: Vec<MsgWorkload>) -> MsgApp {
        let sides = workloads
            .iter()
            .enumerate()
            .filter_map(|(wl, w)| {
                let (role, peer) = if w.a == me {
                    (Role::A, w.b)
                } else if w.b == me {
                    (Role::B, w.a)
                } else {
                    return None;
                };
                Some(Side {
                    wl,
                    role,
                    peer,
                    tag: workload_tag(wl),
                    size_i: 0,
                    iter: 0,
                    t0: w.start,
                    pending: 0,
                    protocols: BTreeMap::new(),
                    started: false,
                    done: false,
                })
            })
            .collect();
        MsgApp {
            me,
            m,
            workloads,
            sides,
            next_k_sent: BTreeMap::new(),
            next_k_posted: BTreeMap::new(),
            sends: BTreeMap::new(),
            recvs: BTreeMap::new(),
            sent: Vec::new(),
            received: Vec::new(),
            rows: Vec::new(),
            failed: 0,
            exactly_once: true,
            in_order: true,
            bytes_ok: true,
            credits_ok: true,
            notes: Vec::new(),
        }
    }

    /// The messenger.
    pub fn messenger(&self) -> &Messenger {
        &self.m
    }

    /// Messages sent and accepted, in order.
    pub fn sent(&self) -> &[Sent] {
        &self.sent
    }

    /// Messages received, in completion order.
    pub fn received(&self) -> &[Received] {
        &self.received
    }

    /// Timed sizes (side `a` only).
    pub fn rows(&self) -> &[SizeRow] {
        &self.rows
    }

    /// Sends refused or failed, and receives that failed.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Sends not finished and receives not completed.
    pub fn open(&self) -> (usize, usize) {
        (self.sends.len(), self.recvs.len())
    }

    /// Whether every workload side here is finished.
    pub fn sides_done(&self) -> bool {
        self.sides.iter().all(|s| s.done)
    }

    /// Whether no send or receive completed twice or unasked.
    pub fn exactly_once(&self) -> bool {
        self.exactly_once
    }

    /// Whether every receive matched its source and tag, and sequence
    /// numbers rose in posting order.
    pub fn in_order(&self) -> bool {
        self.in_order
    }

    /// Whether every message received had its bytes.
    pub fn bytes_ok(&self) -> bool {
        self.bytes_ok
    }

    /// Whether the messenger's credit accounting always held.
    pub fn credits_ok(&self) -> bool {
        self.credits_ok
    }

    /// What went wrong, in words.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    fn send(&mut self, now: Instant, nic: &mut Nic, wl: usize, to: NodeAddr, tag: u32, len: u64) {
        let k = self.next_k_sent.entry((to, tag)).or_default();
        let this = *k;
        *k += 1;
        let data = pattern(len as usize, message_seed(self.me, tag, this));
        match self.m.send(now, nic, to, tag, data) {
            Ok(id) => {
                let s = Sent {
                    workload: wl,
                    to,
                    tag,
                    k: this,
                    len,
                    at: now,
                };
                self.sends.insert(id, s);
                self.sent.push(s);
            }
            Err(e) => {
                self.failed += 1;
                self.notes
                    .push(format!("{}: send {}→{to} refused: {e}", self.me, self.me));
            }
        }
    }

    fn recv(&mut self, now: Instant, nic: &mut Nic, wl: usize, from: NodeAddr, tag: u32, len: u64) {
        let k = self.next_k_posted.entry((from, tag)).or_default();
        let this = *k;
        *k += 1;
        let id = self.m.recv(now, nic, Some(from), Some(tag), len);
        self.recvs.insert(id, (wl, from, tag, this, len));
    }

    /// Starts side `s`'s next iteration (or its next size), or ends it.
    fn begin(&mut self, now: Instant, nic: &mut Nic, s: usize) {
        let side = &mut self.sides[s];
        let w = &self.workloads[side.wl];
        let Some(&size) = w.sizes.get(side.size_i) else {
            side.done = true;
            return;
        };
        if side.iter == w.warmup {
            side.t0 = now;
            side.protocols.clear();
        }
        let (wl, peer, tag, window) = (side.wl, side.peer, side.tag, w.window);
        match (w.kind, side.role) {
            (MsgKind::Latency, Role::A) => {
                side.pending = 1;
                self.recv(now, nic, wl, peer, tag, size);
                self.send(now, nic, wl, peer, tag, size);
            }
            (MsgKind::Latency, Role::B) => {
                side.pending = 1;
                self.recv(now, nic, wl, peer, tag, size);
            }
            (MsgKind::Bw, Role::A) => {
                side.pending = window + 1;
                self.recv(now, nic, wl, peer, tag + 1, 4);
                for _ in 0..window {
                    self.send(now, nic, wl, peer, tag, size);
                }
            }
            (MsgKind::Bw, Role::B) => {
                side.pending = window;
                for _ in 0..window {
                    self.recv(now, nic, wl, peer, tag, size);
                }
            }
            (MsgKind::Bibw, _) => {
                side.pending = 2 * window;
                for _ in 0..window {
                    self.recv(now, nic, wl, peer, tag, size);
                }
                for _ in 0..window {
                    self.send(now, nic, wl, peer, tag, size);
                }
            }
            (MsgKind::Mixed, role) => {
                let sizes = w.sizes.clone();
                side.pending = sizes.len() as u32;
                side.size_i = sizes.len();
                for len in sizes {
                    if role == Role::A {
                        self.send(now, nic, wl, peer, tag, len);
                    } else {
                        self.recv(now, nic, wl, peer, tag, len);
                    }
                }
            }
        }
    }

    /// Side `s` finished an iteration: records the size's row after its
    /// last timed one, then begins the next.
    fn end_iteration(&mut self, now: Instant, nic: &mut Nic, s: usize) {
        let side = &mut self.sides[s];
        let w = &self.workloads[side.wl];
        side.iter += 1;
        if side.iter >= w.warmup + w.count.max(1) {
            if side.role == Role::A {
                self.rows.push(SizeRow {
                    workload: side.wl,
                    size: w.sizes[side.size_i],
                    elapsed: now - side.t0,
                    protocol: side
                        .protocols
                        .iter()
                        .max_by_key(|(_, n)| **n)
                        .map(|(p, _)| *p),
                });
            }
            side.size_i += 1;
            side.iter = 0;
        }
        self.begin(now, nic, s);
    }

    /// A send (`recv == false`) or a receive of side `s` completed.
    fn progress(&mut self, now: Instant, nic: &mut Nic, s: usize, recv: bool) {
        let side = &mut self.sides[s];
        let w = &self.workloads[side.wl];
        let (kind, role, peer, tag) = (w.kind, side.role, side.peer, side.tag);
        let size = w.sizes.get(side.size_i).copied().unwrap_or(0);
        match (kind, role) {
            (MsgKind::Latency, Role::A) if recv => self.end_iteration(now, nic, s),
            (MsgKind::Latency, Role::B) if recv => {
                // The next ping's receive first, then the pong.
                let wl = side.wl;
                self.end_iteration(now, nic, s);
                self.send(now, nic, wl, peer, tag, size);
            }
            (MsgKind::Latency, _) => {}
            (MsgKind::Bw, Role::B) if !recv => {}
            (MsgKind::Bw, Role::B) => {
                side.pending -= 1;
                if side.pending == 0 {
                    let wl = side.wl;
                    self.end_iteration(now, nic, s);
                    self.send(now, nic, wl, peer, tag + 1, 4);
                }
            }
            (MsgKind::Bw | MsgKind::Bibw, _) => {
                side.pending -= 1;
                if side.pending == 0 {
                    self.end_iteration(now, nic, s);
                }
            }
            (MsgKind::Mixed, _) => {
                side.pending -= 1;
                if side.pending == 0 {
                    side.done = true;
                }
            }
        }
    }

    fn side_of(&self, wl: usize) -> Option<usize> {
        self.sides.iter().position(|s| s.wl == wl)
    }

    fn on_msg_event(&mut self, now: Instant, nic: &mut Nic, e: MsgEvent) {
        match e {
            MsgEvent::SendDone {
                id,
                protocol,
                result,
                ..
            } => {
                let Some(sent) = self.sends.remove(&id) else {
                    self.exactly_once = false;
                    self.notes
                        .push(format!("{}: send {id:?} completed twice", self.me));
                    return;
                };
                if let Err(e) = result {
                    self.failed += 1;
                    self.notes
                        .push(format!("{}: send of {} B failed: {e}", self.me, sent.len));
                    return;
                }
                let Some(s) = self.side_of(sent.workload) else {
                    return;
                };
                *self.sides[s].protocols.entry(protocol).or_default() += 1;
                // A bandwidth test's acknowledgement ends nothing.
                if sent.tag == self.sides[s].tag {
                    self.progress(now, nic, s, false);
                }
            }
            MsgEvent::RecvDone {
                id,
                src,
                tag,
                data,
                seq,
                result,
                at,
            } => {
                let Some((wl, from, want_tag, k, len)) = self.recvs.remove(&id) else {
                    self.exactly_once = false;
                    self.notes
                        .push(format!("{}: receive {id:?} completed twice", self.me));
                    return;
                };
                if (src, tag) != (from, want_tag) {
                    self.in_order = false;
                    self.notes.push(format!(
                        "{}: a receive for {from} tag {want_tag} matched {src} tag {tag}",
                        self.me
                    ));
                }
                if let Some(prev) = self
                    .received
                    .iter()
                    .rev()
                    .find(|r| (r.from, r.tag) == (from, want_tag) && r.k < k)
                {
                    if seq.wrapping_sub(prev.seq).wrapping_sub(1) >= 1 << 31 {
                        self.in_order = false;
                        self.notes.push(format!(
                            "{}: messages from {from} tag {want_tag} matched out of order",
                            self.me
                        ));
                    }
                }
                let ok = result.is_ok();
                if let Err(e) = &result {
                    self.failed += 1;
                    self.notes.push(format!("{}: receive failed: {e}", self.me));
                } else if data.len() as u64 != len
                    || !is_pattern(&data, message_seed(from, want_tag, k), 0)
                {
                    if self.bytes_ok {
                        self.notes.push(format!(
                            "{}: message {k} from {from} tag {want_tag} ({len} B) has the wrong bytes",
                            self.me
                        ));
                    }
                    self.bytes_ok = false;
                }
                self.received.push(Received {
                    workload: wl,
                    from,
                    tag: want_tag,
                    k,
                    seq,
                    len,
                    ok,
                    at,
                });
                if ok {
                    if let Some(s) = self.side_of(wl) {
                        self.progress(now, nic, s, true);
                    }
                }
            }
        }
    }

    /// Hands the messenger's results to the workloads until none is left.
    fn drain(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(e) = self.m.poll_event() {
            self.on_msg_event(now, nic, e);
        }
    }

    fn start_due(&mut self, now: Instant, nic: &mut Nic) {
        for s in 0..self.sides.len() {
            let side = &self.sides[s];
            if !side.started && self.workloads[side.wl].start <= now {
                self.sides[s].started = true;
                self.begin(now, nic, s);
            }
        }
    }
}

impl App for MsgApp {
    #[cfg(feature = "fingerprint")]
    fn fingerprint(&self) -> Option<Vec<u8>> {
        postcard::to_allocvec(self).ok()
    }
    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        self.m.handle_event(now, nic, event);
        self.drain(now, nic);
        if let Err(e) = self.m.check() {
            if self.credits_ok {
                self.notes.push(format!("{}: {e}", self.me));
            }
            self.credits_ok = false;
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start = self
            .sides
            .iter()
            .filter(|s| !s.started)
            .map(|s| self.workloads[s.wl].start)
            .min();
        [self.m.poll_timeout(), start].into_iter().flatten().min()
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        self.start_due(now, nic);
        if self.m.poll_timeout().is_some_and(|t| t <= now) {
            self.m.handle_timeout(now, nic);
        }
        self.drain(now, nic);
    }

    fn is_done(&self) -> bool {
        self.sides_done() && self.sends.is_empty() && self.recvs.is_empty()
    }
}
