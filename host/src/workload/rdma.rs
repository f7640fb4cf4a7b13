//! The RDMA workloads as a host app: one [`RdmaApp`] per host carries out
//! that host's part of an [`RdmaPlan`].
//!
//! Every host's memory has the same three regions: sources (filled with
//! [`pattern`] seeded by the host number, never written), targets (a
//! pattern seeded `0x80 +` the host number until operations land) and a
//! guard region no operation names. Each operation's bytes sit at its own
//! offset in its source and target, so the app can tell from a landing
//! address which operation it was, and anyone can say what bytes a
//! target must hold without asking the source host.
//!
//! What a host does, and when:
//! - posts each of its timed operations at its time;
//! - posts a window workload's next operation when one of the window
//!   completes (closed loop);
//! - posts a ping-pong reply when the WRITE it answers has landed;
//! - posts a receive buffer for every SEND aimed at it, at the SEND's
//!   time (or its workload's start, for closed-loop SENDs). As with verbs
//!   over one shared receive queue, any SEND may take any buffer (the
//!   transport does not keep SENDs in order, and SENDs from several
//!   senders meet in one queue), so every buffer is as long as the
//!   longest SEND aimed at the host ([`RdmaPlan::recv_len`]);
//! - at a reuse time, overwrites the targets of the WRITEs that have
//!   landed in it (a host re-using a buffer after the data arrived).
//!
//! It records what it saw ([`OpRecord`], landings, filled receive
//! buffers, reuses, notes); the runner checks the records.

use std::collections::BTreeMap;
use std::sync::Arc;

use udrma_nic::{Access, Event, MemoryTable, MrKey, Nic, WorkRequest, WrId, WrKind};
use udrma_proto::{Instant, NodeAddr};

use super::{is_pattern, pattern, pattern_at};
use crate::App;

/// Where every host's source region starts.
pub const SRC_BASE: u64 = 0x1000_0000_0000;
/// Where every host's target region starts.
pub const DST_BASE: u64 = 0x2000_0000_0000;
/// Where every host's guard region starts.
pub const GUARD_BASE: u64 = 0x3000_0000_0000;
/// The guard region's length.
pub const GUARD_LEN: usize = 4096;
/// The pattern seed of a host's guard region.
pub const GUARD_SEED: u32 = 0xee;

/// The pattern seed of host `h`'s targets before anything lands.
pub fn target_seed(h: NodeAddr) -> u32 {
    0x80 + h.0
}

/// The pattern seed reuse number `tag` writes into operation `op`'s
/// target.
pub fn reuse_seed(tag: u32, op: usize) -> u32 {
    0x1000 + tag + op as u32
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum OpKind {
    /// The poster writes its source into the peer's target.
    Write,
    /// The poster reads the peer's source into its own target.
    Read,
    /// The poster sends its source into a receive buffer the peer posted.
    Send,
}

/// When an operation is posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum When {
    /// At this time (open loop).
    At(Instant),
    /// When an earlier operation of its window workload completes on its
    /// poster (closed loop).
    Window,
    /// When this earlier operation's WRITE has landed on its poster (a
    /// ping-pong reply).
    AfterLanded(usize),
}

/// One planned operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct PlannedOp {
    /// The workload it belongs to (its index in the scenario).
    pub workload: usize,
    /// What it does.
    pub kind: OpKind,
    /// The host that posts it.
    pub poster: NodeAddr,
    /// The host the bytes come from.
    pub from: NodeAddr,
    /// The host the bytes go to.
    pub to: NodeAddr,
    /// Bytes.
    pub size: u64,
    /// Offset in the source host's source region.
    pub src_off: u64,
    /// Offset in the target host's target region.
    pub dst_off: u64,
    /// When it is posted.
    pub when: When,
    /// For a SEND: when its receiver posts the buffer.
    pub recv_at: Instant,
    /// For a SEND: the length of the receive buffer posted for it at
    /// `dst_off` (the longest SEND aimed at its receiver); otherwise
    /// `size`.
    pub recv_len: u64,
}

impl PlannedOp {
    /// The bytes it moves: its slice of the source host's pattern.
    pub fn source_bytes(&self) -> Vec<u8> {
        pattern_at(self.from.0, self.src_off, self.size as usize)
    }

    /// Whether `bytes` are the bytes it moves.
    pub fn is_source(&self, bytes: &[u8]) -> bool {
        bytes.len() as u64 == self.size && is_pattern(bytes, self.from.0, self.src_off)
    }
}

/// A host overwriting the targets of the WRITEs that landed in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Reuse {
    /// When.
    pub at: Instant,
    /// Which host.
    pub host: NodeAddr,
    /// Which reuse (seeds the new bytes, see [`reuse_seed`]).
    pub tag: u32,
}

/// Every host's part of the RDMA workloads, planned once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct RdmaPlan {
    /// Every operation, in plan order (the order ties are broken in).
    pub ops: Vec<PlannedOp>,
    /// Window workloads: the operations of each, in posting order, and
    /// how many are posted at the start.
    pub windows: Vec<(Vec<usize>, usize)>,
    /// Buffer reuses.
    pub reuses: Vec<Reuse>,
    /// Per host: bytes of its source region.
    pub src_len: Vec<u64>,
    /// Per host: bytes of its target region.
    pub dst_len: Vec<u64>,
    /// Per host: the length of each receive buffer it posts, the longest
    /// SEND aimed at it.
    pub recv_len: Vec<u64>,
    /// Regions without bytes (addresses and lengths only): nothing is
    /// copied or compared.
    pub phantom: bool,
}

impl RdmaPlan {
    /// An empty plan for `hosts` hosts.
    pub fn new(hosts: usize, phantom: bool) -> RdmaPlan {
        RdmaPlan {
            src_len: vec![0; hosts],
            dst_len: vec![0; hosts],
            recv_len: vec![0; hosts],
            phantom,
            ..RdmaPlan::default()
        }
    }

    /// Adds an operation of `size` bytes that `poster` posts toward
    /// `peer` (for a READ, `peer` is the host read from), laid out after
    /// the operations already planned in both hosts' regions; a SEND's
    /// receiver posts its buffer at `recv_at`. Returns its index.
    ///
    /// A SEND's receive buffer is as long as the longest SEND planned
    /// toward its receiver so far: a SEND longer than every earlier one
    /// lengthens the buffers of the earlier ones, and the receiver's
    /// targets are laid out again (in plan order, as they were added).
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        workload: usize,
        kind: OpKind,
        poster: NodeAddr,
        peer: NodeAddr,
        size: u64,
        when: When,
        recv_at: Instant,
    ) -> usize {
        let (from, to) = match kind {
            OpKind::Read => (peer, poster),
            _ => (poster, peer),
        };
        let src_off = self.src_len[from.0 as usize];
        self.src_len[from.0 as usize] += size;
        let t = to.0 as usize;
        let longer = kind == OpKind::Send && size > self.recv_len[t];
        if longer {
            self.recv_len[t] = size;
        }
        let recv_len = if kind == OpKind::Send {
            self.recv_len[t]
        } else {
            size
        };
        let dst_off = self.dst_len[t];
        self.dst_len[t] += recv_len;
        self.ops.push(PlannedOp {
            workload,
            kind,
            poster,
            from,
            to,
            size,
            src_off,
            dst_off,
            when,
            recv_at,
            recv_len,
        });
        if longer {
            self.lay_out_targets(to);
        }
        self.ops.len() - 1
    }

    /// Lays out again, in plan order, the targets of every operation into
    /// `to`, each SEND's buffer as long as `recv_len[to]`.
    fn lay_out_targets(&mut self, to: NodeAddr) {
        let t = to.0 as usize;
        let mut at = 0;
        for op in self.ops.iter_mut().filter(|op| op.to == to) {
            if op.kind == OpKind::Send {
                op.recv_len = self.recv_len[t];
            }
            op.dst_off = at;
            at += op.recv_len;
        }
        self.dst_len[t] = at;
    }
}

/// The keys of a host's three regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Keys {
    /// Sources.
    pub src: MrKey,
    /// Targets.
    pub dst: MrKey,
    /// Guard.
    pub guard: MrKey,
}

impl Keys {
    /// The keys every host's app gets: it registers its three regions
    /// first, in this order, on a NIC with no regions, so a peer knows
    /// them without asking.
    pub fn expected() -> Keys {
        let mut m = MemoryTable::new();
        Keys {
            src: m.register_phantom(SRC_BASE, 1, Access::ALL),
            dst: m.register_phantom(DST_BASE, 1, Access::ALL),
            guard: m.register_phantom(GUARD_BASE, 1, Access::LOCAL),
        }
    }
}

/// What happened to an operation, as its poster saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct OpRecord {
    /// When it was posted (`None`: not yet, or refused).
    pub posted_at: Option<Instant>,
    /// Its request id, once accepted.
    pub wr: Option<WrId>,
    /// Completions seen (more than one breaks exactly-once).
    pub completions: u32,
    /// Whether it succeeded (refused at post: `Some(false)`).
    pub ok: Option<bool>,
    /// When it completed (or was refused).
    pub done_at: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Action {
    Post(usize),
    Recv(usize),
    Reuse(u32),
}

/// One host's part of an [`RdmaPlan`], as an app.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct RdmaApp {
    me: NodeAddr,
    #[cfg_attr(feature = "fingerprint", serde(skip))]
    plan: Arc<RdmaPlan>,
    keys: Keys,
    /// Timed actions by (time, plan order).
    timed: BTreeMap<(Instant, usize), Action>,
    /// Window workloads this host posts: (operations, next to post).
    windows: BTreeMap<usize, (Vec<usize>, usize)>,
    /// Ping-pong replies: landed operation → the reply this host posts.
    replies: BTreeMap<usize, usize>,
    /// This host's requests.
    by_wr: BTreeMap<WrId, usize>,
    /// This host's receive buffers for SENDs: request → target offset.
    recv_bufs: BTreeMap<WrId, u64>,
    /// WRITEs into this host, by target address.
    by_dst: BTreeMap<u64, usize>,
    records: BTreeMap<usize, OpRecord>,
    /// How many of this host's operations have not completed.
    open: usize,
    /// WRITEs into this host partly landed: bytes so far.
    landing: BTreeMap<usize, u64>,
    landed: BTreeMap<usize, Instant>,
    filled: Vec<(u64, u64)>,
    reused: BTreeMap<usize, u32>,
    notes: Vec<String>,
    bytes_ok: bool,
}

impl RdmaApp {
    /// Host `me`'s part of `plan`.
    pub fn new(me: NodeAddr, plan: Arc<RdmaPlan>) -> RdmaApp {
        let mut timed = BTreeMap::new();
        let mut windows = BTreeMap::new();
        let mut replies = BTreeMap::new();
        let mut by_dst = BTreeMap::new();
        let mut open = 0;
        for (i, op) in plan.ops.iter().enumerate() {
            if op.poster == me {
                open += 1;
                match op.when {
                    When::At(t) => {
                        timed.insert((t, i), Action::Post(i));
                    }
                    When::AfterLanded(j) => {
                        replies.insert(j, i);
                    }
                    When::Window => {}
                }
            }
            if op.to == me && op.kind == OpKind::Send {
                timed.insert((op.recv_at, i), Action::Recv(i));
            }
            if op.to == me && op.kind == OpKind::Write && op.size > 0 {
                by_dst.insert(DST_BASE + op.dst_off, i);
            }
        }
        for (queue, first) in &plan.windows {
            if let Some(&i) = queue.first() {
                if plan.ops[i].poster == me {
                    windows.insert(plan.ops[i].workload, (queue.clone(), *first));
                }
            }
        }
        for (k, r) in plan.reuses.iter().enumerate() {
            if r.host == me {
                timed.insert((r.at, plan.ops.len() + k), Action::Reuse(r.tag));
            }
        }
        RdmaApp {
            me,
            plan,
            keys: Keys::expected(),
            timed,
            windows,
            replies,
            by_wr: BTreeMap::new(),
            recv_bufs: BTreeMap::new(),
            by_dst,
            records: BTreeMap::new(),
            open,
            landing: BTreeMap::new(),
            landed: BTreeMap::new(),
            filled: Vec::new(),
            reused: BTreeMap::new(),
            notes: Vec::new(),
            bytes_ok: true,
        }
    }

    /// The plan it carries out a part of.
    pub fn plan(&self) -> &RdmaPlan {
        &self.plan
    }

    /// Its regions' keys.
    pub fn keys(&self) -> Keys {
        self.keys
    }

    /// What happened to the operations this host posts, by plan index.
    pub fn records(&self) -> &BTreeMap<usize, OpRecord> {
        &self.records
    }

    /// WRITEs that landed in this host (plan index → when).
    pub fn landed(&self) -> &BTreeMap<usize, Instant> {
        &self.landed
    }

    /// Receive buffers SENDs filled: (target offset, bytes).
    pub fn filled(&self) -> &[(u64, u64)] {
        &self.filled
    }

    /// Targets this host overwrote (plan index → the seed written).
    pub fn reused(&self) -> &BTreeMap<usize, u32> {
        &self.reused
    }

    /// What went wrong, in words, in the order it was seen.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Whether every WRITE that landed here and every READ that completed
    /// here brought the bytes of its source.
    pub fn bytes_ok(&self) -> bool {
        self.bytes_ok
    }

    fn describe(&self, i: usize) -> String {
        let op = &self.plan.ops[i];
        format!("op {i} ({:?} {}→{} {} B)", op.kind, op.from, op.to, op.size)
    }

    fn fail(&mut self, now: Instant, i: usize, why: String) {
        let rec = self.records.entry(i).or_default();
        rec.ok = Some(false);
        rec.completions = 1;
        rec.done_at = Some(now);
        self.open -= 1;
        self.notes.push(why);
    }

    fn post(&mut self, now: Instant, nic: &mut Nic, i: usize) {
        let op = &self.plan.ops[i];
        let theirs = Keys::expected();
        let (src, dst) = (SRC_BASE + op.src_off, DST_BASE + op.dst_off);
        let wr = match op.kind {
            OpKind::Write => {
                WorkRequest::write(op.to, self.keys.src, src, op.size, theirs.dst.0, dst)
            }
            OpKind::Read => {
                WorkRequest::read(op.from, self.keys.dst, dst, op.size, theirs.src.0, src)
            }
            OpKind::Send => WorkRequest::send(op.to, self.keys.src, src, op.size),
        };
        self.records.entry(i).or_default().posted_at = Some(now);
        match nic.post(now, wr) {
            Ok(id) => {
                self.records.entry(i).or_default().wr = Some(id);
                self.by_wr.insert(id, i);
            }
            Err(e) => self.fail(now, i, format!("op {i} refused at post: {e}")),
        }
    }

    fn post_recv(&mut self, now: Instant, nic: &mut Nic, i: usize) {
        let op = &self.plan.ops[i];
        let (off, len) = (op.dst_off, op.recv_len);
        match nic.post_recv(now, 0, self.keys.dst, DST_BASE + off, len) {
            Ok(r) => {
                self.recv_bufs.insert(r, off);
            }
            Err(e) => self
                .notes
                .push(format!("receive buffer for op {i} refused: {e}")),
        }
    }

    fn reuse(&mut self, nic: &mut Nic, tag: u32) {
        if self.plan.phantom {
            return;
        }
        let Some(region) = nic.memory_mut().region_mut(self.keys.dst) else {
            return;
        };
        for &i in self.landed.keys() {
            let op = &self.plan.ops[i];
            let seed = reuse_seed(tag, i);
            let at = op.dst_off as usize;
            region.bytes[at..at + op.size as usize]
                .copy_from_slice(&pattern(op.size as usize, seed));
            self.reused.insert(i, seed);
        }
    }

    fn completed(&mut self, i: usize, ok: bool, at: Instant, nic: &Nic, err: Option<String>) {
        let rec = self.records.entry(i).or_default();
        rec.completions += 1;
        if rec.completions > 1 {
            return;
        }
        rec.ok = Some(ok);
        rec.done_at = Some(at);
        self.open -= 1;
        if let Some(err) = err {
            self.notes
                .push(format!("{} failed: {err}", self.describe(i)));
            return;
        }
        let op = &self.plan.ops[i];
        if op.kind == OpKind::Read && !self.plan.phantom && !self.holds_source(nic, i) {
            self.bytes_ok = false;
            self.notes
                .push(format!("{}: bytes differ at completion", self.describe(i)));
        }
    }

    /// Whether this host's target of operation `i` holds its source bytes.
    fn holds_source(&self, nic: &Nic, i: usize) -> bool {
        let op = &self.plan.ops[i];
        nic.memory()
            .region(self.keys.dst)
            .and_then(|r| {
                r.bytes
                    .get(op.dst_off as usize..(op.dst_off + op.size) as usize)
            })
            .is_some_and(|b| op.is_source(b))
    }

    fn next_in_window(&mut self, now: Instant, nic: &mut Nic, i: usize) {
        let wl = self.plan.ops[i].workload;
        let Some((queue, next)) = self.windows.get_mut(&wl) else {
            return;
        };
        if let Some(&j) = queue.get(*next) {
            *next += 1;
            self.post(now, nic, j);
        }
    }
}

impl App for RdmaApp {
    #[cfg(feature = "fingerprint")]
    fn fingerprint(&self) -> Option<Vec<u8>> {
        postcard::to_allocvec(self).ok()
    }
    fn fork(&self) -> Option<Box<dyn App>> {
        Some(Box::new(self.clone()))
    }

    fn start(&mut self, _now: Instant, nic: &mut Nic) {
        let h = self.me.0 as usize;
        let (src_len, dst_len) = (self.plan.src_len[h].max(1), self.plan.dst_len[h].max(1));
        let m = nic.memory_mut();
        let keys = if self.plan.phantom {
            Keys {
                src: m.register_phantom(SRC_BASE, src_len, Access::ALL),
                dst: m.register_phantom(DST_BASE, dst_len, Access::ALL),
                guard: m.register(GUARD_BASE, GUARD_LEN, Access::LOCAL),
            }
        } else {
            Keys {
                src: m.register(SRC_BASE, src_len as usize, Access::ALL),
                dst: m.register(DST_BASE, dst_len as usize, Access::ALL),
                guard: m.register(GUARD_BASE, GUARD_LEN, Access::LOCAL),
            }
        };
        if !self.plan.phantom {
            let fill = [
                (keys.src, pattern(src_len as usize, self.me.0)),
                (keys.dst, pattern(dst_len as usize, target_seed(self.me))),
            ];
            for (key, bytes) in fill {
                if let Some(r) = m.region_mut(key) {
                    r.bytes = bytes.into();
                }
            }
        }
        if let Some(r) = m.region_mut(keys.guard) {
            r.bytes = pattern(GUARD_LEN, GUARD_SEED).into();
        }
        if keys != Keys::expected() {
            self.notes.push(format!(
                "{}: regions got keys {keys:?}, not the ones peers use (the NIC had regions already)",
                self.me
            ));
        }
        self.keys = keys;
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        match event {
            Event::Completed {
                wr,
                kind: WrKind::Recv,
                len,
                result,
                ..
            } => {
                if let (Some(off), true) = (self.recv_bufs.remove(&wr), result.is_ok()) {
                    self.filled.push((off, len));
                }
            }
            Event::Completed { wr, result, at, .. } => {
                let Some(&i) = self.by_wr.get(&wr) else {
                    return;
                };
                let err = result.err().map(|e| e.to_string());
                self.completed(i, err.is_none(), at, nic, err);
                if self.records[&i].completions == 1 {
                    self.next_in_window(now, nic, i);
                }
            }
            Event::WriteReceived {
                from,
                addr,
                len,
                at,
                ..
            } => {
                // A large WRITE arrives as several messages, each with
                // its own landing; the operation has landed when all of
                // its bytes have.
                let Some((&start, &i)) = self.by_dst.range(..=addr).next_back() else {
                    return;
                };
                let op = &self.plan.ops[i];
                if op.from != from || addr >= start + op.size || self.landed.contains_key(&i) {
                    return;
                }
                let got = self.landing.entry(i).or_default();
                *got += len;
                if *got < op.size {
                    return;
                }
                self.landing.remove(&i);
                self.landed.insert(i, at);
                if !self.plan.phantom && !self.holds_source(nic, i) {
                    self.bytes_ok = false;
                    self.notes
                        .push(format!("{}: bytes differ when it landed", self.describe(i)));
                }
                if let Some(&reply) = self.replies.get(&i) {
                    self.post(now, nic, reply);
                }
            }
            Event::DataArrived { .. }
            | Event::Control { .. }
            | Event::Credits { .. }
            | Event::Hello { .. }
            | Event::PeerRestarted { .. } => {}
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.timed.first_key_value().map(|((t, _), _)| *t)
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(entry) = self.timed.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                Action::Post(i) => self.post(now, nic, i),
                Action::Recv(i) => self.post_recv(now, nic, i),
                Action::Reuse(tag) => self.reuse(nic, tag),
            }
        }
    }

    fn is_done(&self) -> bool {
        self.open == 0 && self.timed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_receive_buffer_is_as_long_as_the_longest_send_to_its_host() {
        let (h0, h1, h2) = (NodeAddr(0), NodeAddr(1), NodeAddr(2));
        let at = When::At(Instant::ZERO);
        let mut p = RdmaPlan::new(3, false);
        p.add(0, OpKind::Send, h1, h2, 100, at, Instant::ZERO);
        p.add(1, OpKind::Write, h0, h2, 10, at, Instant::ZERO);
        p.add(2, OpKind::Send, h0, h2, 4096, at, Instant::ZERO);
        p.add(3, OpKind::Send, h0, h1, 7, at, Instant::ZERO);
        p.add(4, OpKind::Send, h1, h2, 50, at, Instant::ZERO);
        let laid: Vec<(u64, u64)> = p.ops.iter().map(|o| (o.dst_off, o.recv_len)).collect();
        // h2's targets in plan order: a 4096 B buffer, the WRITE's 10 B,
        // two more 4096 B buffers; h1's one SEND keeps its own size.
        assert_eq!(
            laid,
            [(0, 4096), (4096, 10), (4106, 4096), (0, 7), (8202, 4096)]
        );
        assert_eq!(p.dst_len, [0, 7, 12_298]);
        assert_eq!(p.recv_len, [0, 7, 4096]);
        // The bytes each moves are still its own.
        assert_eq!(p.ops[0].size, 100);
        assert_eq!(p.ops[4].size, 50);
    }
}
