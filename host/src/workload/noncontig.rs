//! The non-contiguous ping-pong: two hosts bounce a non-contiguous
//! transfer back and forth with one [`Method`], as the non-contiguous
//! study measured one-way latency (half the round trip).
//!
//! Each host has its own [`Layout`] (the two may differ: columns on one
//! side, rows on the other) and four regions: a send matrix (its pattern
//! seeded with the host number), a receive matrix (seeded `0x80 +` the host
//! number), and a contiguous pack buffer each way. Host `a` starts every
//! round trip; `b` answers when `a`'s transfer has fully arrived.
//!
//! - **pack**: the CPU packs the send matrix's blocks into the pack buffer
//!   (taking [`CostModel::pack`] of host time), one contiguous WRITE or
//!   SEND moves it, the receiver's CPU unpacks it into the receive matrix.
//! - **sgl**: the transfer is [`cut`] into work requests of at most
//!   `max_sge` entries a side; a WRITE's receiving side is one contiguous
//!   range, a SEND's is a scatter list posted as a receive.
//! - **indirect**: each host keeps one indirect key over its send matrix's
//!   blocks and one over its receive matrix's; one WRITE (or SEND into a
//!   receive posted through the key) moves everything. Without the key
//!   cache the sender creates its send key afresh for every transfer
//!   ([`CostModel::key_create`] of host time, and a cold translation cache).
//!
//! **Key lifetime.** A key is destroyed only once every work request that
//! names it has completed (successfully or not) at this NIC. The peer's
//! answer is no such sign: the receiver completes a transfer one round
//! trip before the sender does, so when the answer arrives the sender may
//! still be retransmitting a packet whose ACK was lost, and reads it
//! through the key again. A replaced send key is therefore retired, and
//! destroyed at the completion of the last request that names it. The
//! receive key lives as long as the app (the peer's WRITEs, and this
//! host's posted receives, name it at any time).
//!
//! SEND chunks name their own endpoint (chunk `i` goes to endpoint `i + 1`),
//! because the transport does not keep SENDs in order and each chunk must
//! fill the receive list that describes its bytes.
//!
//! [`CostModel::pack`]: udrma_nic::CostModel::pack
//! [`CostModel::key_create`]: udrma_nic::CostModel::key_create

use std::collections::BTreeMap;
use std::sync::Arc;

use udrma_nic::cost::Serial;
use udrma_nic::{Access, Event, MemoryTable, MrKey, Nic, Sge, Sgl, WorkRequest, WrId, WrKind};
use udrma_proto::{Duration, Instant, NodeAddr};

use super::pattern;
use crate::datatype::pack::{pack, unpack};
use crate::datatype::Layout;
use crate::noncontig::{cut, Chunk, Method};
use crate::App;

/// Where the send matrix starts.
pub const SEND_BASE: u64 = 0x4000_0000_0000;
/// Where the receive matrix starts.
pub const RECV_BASE: u64 = 0x5000_0000_0000;
/// Where the outgoing pack buffer starts.
pub const PACK_SEND_BASE: u64 = 0x6000_0000_0000;
/// Where the incoming pack buffer starts.
pub const PACK_RECV_BASE: u64 = 0x7000_0000_0000;
/// The range the indirect key over the receive matrix names.
pub const IKEY_RECV_BASE: u64 = 0x8000_0000_0000;
/// The range the indirect key over the send matrix names.
pub const IKEY_SEND_BASE: u64 = 0x9000_0000_0000;

/// The pattern seed of host `h`'s receive matrix before anything lands.
pub fn recv_seed(h: NodeAddr) -> u32 {
    0x80 + h.0
}

/// A ping-pong between two hosts.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct NcPlan {
    /// The host that starts each round trip.
    pub a: NodeAddr,
    /// The host that answers.
    pub b: NodeAddr,
    /// `a`'s layout, then `b`'s (same data size).
    pub layouts: [Layout; 2],
    /// How the data moves (a concrete method: `auto` is resolved by the
    /// planner).
    pub method: Method,
    /// RDMA WRITE rather than SEND/RECV.
    pub rdma: bool,
    /// Timed round trips.
    pub count: u32,
    /// Untimed round trips first.
    pub warmup: u32,
    /// Keep indirect keys between transfers.
    pub key_cache: bool,
    /// Entries per work request.
    pub max_sge: usize,
    /// Longest SEND the engine takes: SEND/RECV transfers go in pieces of
    /// at most this.
    pub max_send: u64,
    /// When `a` starts.
    pub start: Instant,
}

impl NcPlan {
    fn side(&self, me: NodeAddr) -> Option<(usize, NodeAddr)> {
        if me == self.a {
            Some((0, self.b))
        } else if me == self.b {
            Some((1, self.a))
        } else {
            None
        }
    }

    /// Where `layout`'s offset 0 sits in a matrix starting at `base`, and
    /// the matrix's length.
    pub fn matrix(layout: &Layout, base: u64) -> (u64, u64) {
        let (lo, hi) = layout.span().unwrap_or((0, 0));
        let lo = lo.min(0);
        let hi = hi.max(1);
        (base.wrapping_add_signed(-lo), (hi - lo) as u64)
    }
}

/// What one host saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct NcRecord {
    /// One-way latencies of the timed round trips (half each round trip),
    /// in picoseconds (host `a` only).
    pub one_way_ps: Vec<u64>,
    /// Every round trip that ended, warm-up ones too: when it started
    /// and ended, in picoseconds (host `a` only).
    pub rounds_ps: Vec<(u64, u64)>,
    /// Work requests this host posted.
    pub work_requests: u64,
    /// Of those, completed successfully.
    pub completed: u64,
    /// Bytes this host's CPU copied (packing and unpacking).
    pub bytes_copied: u64,
    /// Indirect keys this host created.
    pub keys_created: u64,
    /// Transfers this host received completely.
    pub received: u64,
    /// What went wrong (posting refused, a request failed).
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Step {
    /// Waiting for the peer's transfer.
    Waiting,
    /// The CPU prepares the next send (packing, creating a key) until then.
    Preparing(Instant),
    /// Posted; the peer's answer (or, on `b`, the next transfer) comes next.
    Sent,
    /// The CPU unpacks an arrival until then.
    Unpacking(Instant),
    /// Every round trip done.
    Done,
}

/// One host's side of an [`NcPlan`].
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct NcApp {
    #[cfg_attr(feature = "fingerprint", serde(skip))]
    plan: Arc<NcPlan>,
    me: NodeAddr,
    peer: NodeAddr,
    mine: Layout,
    theirs: Layout,
    /// Chunks of my sends and of the transfers I receive.
    out: Vec<Chunk>,
    inc: Vec<Chunk>,
    keys: Keys,
    cpu: Serial,
    step: Step,
    /// Round trips started (on `a`) or answered (on `b`).
    round: u32,
    round_start: Instant,
    /// Bytes or receives of the current arrival so far.
    arrived: u64,
    /// Requests refused for a full queue, posted again on a completion.
    backlog: Vec<WorkRequest>,
    /// Which local keys the requests in flight name.
    ledger: KeyLedger,
    rec: NcRecord,
}

/// The local keys each request in flight names, and the keys waiting for
/// their last request to complete before they are destroyed.
#[derive(Debug, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct KeyLedger {
    /// Posted requests that have not completed: the keys they name.
    in_flight: BTreeMap<WrId, Vec<MrKey>>,
    /// Indirect keys replaced but still named by a request.
    retired: Vec<MrKey>,
}

impl KeyLedger {
    /// The local keys `wr` names (its buffer, or every entry of its list).
    fn keys_of(wr: &WorkRequest) -> Vec<MrKey> {
        match &wr.sgl {
            Some(sgl) => sgl.entries().iter().map(|e| e.key).collect(),
            None => vec![wr.local],
        }
    }

    /// Whether a request in flight or waiting to be posted names `key`.
    fn named(&self, key: MrKey, backlog: &[WorkRequest]) -> bool {
        self.in_flight.values().any(|ks| ks.contains(&key))
            || backlog.iter().any(|wr| Self::keys_of(wr).contains(&key))
    }

    /// Destroys every retired indirect key no request names any more.
    fn reap(&mut self, mem: &mut MemoryTable, backlog: &[WorkRequest]) {
        let retired = std::mem::take(&mut self.retired);
        for key in retired {
            if self.named(key, backlog) {
                self.retired.push(key);
            } else {
                mem.deregister_indirect(key);
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Keys {
    send: MrKey,
    recv: MrKey,
    pack_send: MrKey,
    pack_recv: MrKey,
    ikey_recv: MrKey,
    ikey_send: MrKey,
}

impl Default for Keys {
    fn default() -> Keys {
        let none = MrKey(0);
        Keys {
            send: none,
            recv: none,
            pack_send: none,
            pack_recv: none,
            ikey_recv: none,
            ikey_send: none,
        }
    }
}

impl NcApp {
    /// Host `me`'s side of `plan` (a bystander's app does nothing).
    pub fn new(me: NodeAddr, plan: Arc<NcPlan>) -> NcApp {
        let (i, peer) = plan.side(me).unwrap_or((0, me));
        let mine = plan.layouts[i].clone();
        let theirs = plan.layouts[1 - i].clone();
        let (max_dst, max_len) = if plan.rdma {
            (1, u64::MAX)
        } else {
            (plan.max_sge, plan.max_send.max(1))
        };
        let cut_or_none =
            |s: &Layout, d: &Layout| cut(s, d, plan.max_sge, max_dst, max_len).unwrap_or_default();
        let out = cut_or_none(&mine, &theirs);
        let inc = cut_or_none(&theirs, &mine);
        NcApp {
            me,
            peer,
            mine,
            theirs,
            out,
            inc,
            keys: Keys::default(),
            cpu: Serial::default(),
            step: Step::Waiting,
            round: 0,
            round_start: Instant::ZERO,
            arrived: 0,
            backlog: Vec::new(),
            ledger: KeyLedger::default(),
            rec: NcRecord::default(),
            plan,
        }
    }

    /// The round trip under way on host `a` (its start, in picoseconds),
    /// if one started and has not ended.
    pub fn open_round(&self) -> Option<u64> {
        // (A round that ends is recorded as the next begins, or the app
        // is done: no round is ever both ended and under way.)
        let open = self.is_a() && self.round > 0 && !matches!(self.step, Step::Done);
        open.then(|| self.round_start.as_ps())
    }

    /// What this host saw.
    pub fn record(&self) -> &NcRecord {
        &self.rec
    }

    fn is_a(&self) -> bool {
        self.me == self.plan.a
    }

    fn size(&self) -> u64 {
        self.mine.size()
    }

    /// Host memory and keys, in the same order on both hosts so that a
    /// region's key here is the peer's key for its own.
    fn register(&mut self, nic: &mut Nic) {
        let (_, s_len) = NcPlan::matrix(&self.mine, SEND_BASE);
        let mem = nic.memory_mut();
        let send = mem.register(SEND_BASE, s_len as usize, Access::ALL);
        if let Some(r) = mem.region_mut(send) {
            r.bytes = pattern(s_len as usize, self.me.0).into();
        }
        let recv = mem.register(RECV_BASE, s_len as usize, Access::ALL);
        if let Some(r) = mem.region_mut(recv) {
            r.bytes = pattern(s_len as usize, recv_seed(self.me)).into();
        }
        let size = self.size().max(1) as usize;
        let pack_send = mem.register(PACK_SEND_BASE, size, Access::ALL);
        let pack_recv = mem.register(PACK_RECV_BASE, size, Access::ALL);
        self.keys = Keys {
            send,
            recv,
            pack_send,
            pack_recv,
            ..Keys::default()
        };
        if self.plan.method == Method::Indirect {
            match mem.register_indirect(
                IKEY_RECV_BASE,
                list(&self.mine, RECV_BASE, recv),
                Access::ALL,
            ) {
                Ok(k) => self.keys.ikey_recv = k,
                Err(e) => self.rec.errors.push(format!("receive key refused: {e}")),
            }
            self.make_send_key(nic);
        }
    }

    /// Makes a fresh send key; the old one is destroyed once no request
    /// names it (a retransmission of the last transfer may still read it).
    fn make_send_key(&mut self, nic: &mut Nic) {
        let mem = nic.memory_mut();
        if self.keys.ikey_send != MrKey(0) {
            self.ledger.retired.push(self.keys.ikey_send);
            self.ledger.reap(mem, &self.backlog);
        }
        match mem.register_indirect(
            IKEY_SEND_BASE,
            list(&self.mine, SEND_BASE, self.keys.send),
            Access::ALL,
        ) {
            Ok(k) => self.keys.ikey_send = k,
            Err(e) => self.rec.errors.push(format!("send key refused: {e}")),
        }
        self.rec.keys_created += 1;
    }

    /// Posts the receives the peer's next transfer needs (SEND/RECV only).
    fn post_receives(&mut self, now: Instant, nic: &mut Nic) {
        if self.plan.rdma {
            return;
        }
        let k = self.keys;
        let (key, base) = match self.plan.method {
            Method::Pack => (k.pack_recv, PACK_RECV_BASE),
            Method::Indirect => (k.ikey_recv, IKEY_RECV_BASE),
            _ => {
                let (origin, _) = NcPlan::matrix(&self.mine, RECV_BASE);
                for (i, ch) in self.inc.iter().enumerate() {
                    let sgl = pieces(&ch.dst, origin, k.recv);
                    if let Err(e) = nic.post_recv_sgl(now, (i + 1) as u16, sgl) {
                        self.rec
                            .errors
                            .push(format!("receive list {i} refused: {e}"));
                    }
                }
                return;
            }
        };
        for (i, (off, len)) in self.spans().into_iter().enumerate() {
            if let Err(e) = nic.post_recv(now, (i + 1) as u16, key, base + off, len) {
                self.rec.errors.push(format!("receive {i} refused: {e}"));
            }
        }
    }

    /// A contiguous SEND/RECV transfer's pieces: `(offset, length)`, each
    /// at most the longest SEND.
    fn spans(&self) -> Vec<(u64, u64)> {
        let (size, max) = (self.size(), self.plan.max_send.max(1));
        if size == 0 {
            return vec![(0, 0)];
        }
        (0..size.div_ceil(max))
            .map(|i| (i * max, max.min(size - i * max)))
            .collect()
    }

    /// Receives one transfer completes with (SEND/RECV).
    fn receives_per_transfer(&self) -> u64 {
        match self.plan.method {
            Method::Sgl => self.inc.len() as u64,
            _ => self.spans().len() as u64,
        }
    }

    /// A transfer between two contiguous ranges (a pack buffer, or an
    /// indirect key's range): one WRITE, or one SEND per span.
    fn contiguous(
        &self,
        (key, base): (MrKey, u64),
        (rkey, rbase): (MrKey, u64),
    ) -> Vec<WorkRequest> {
        if self.plan.rdma {
            vec![WorkRequest::write(
                self.peer,
                key,
                base,
                self.size(),
                rkey.0,
                rbase,
            )]
        } else {
            self.sends(key, base)
        }
    }

    /// SENDs of `[base, base + size)` under `key`, one per span.
    fn sends(&self, key: MrKey, base: u64) -> Vec<WorkRequest> {
        self.spans()
            .into_iter()
            .enumerate()
            .map(|(i, (off, len))| {
                WorkRequest::send(self.peer, key, base + off, len).endpoints(0, (i + 1) as u16)
            })
            .collect()
    }

    /// Starts preparing a send: host work first (packing, a new key).
    fn prepare(&mut self, now: Instant, nic: &mut Nic) {
        let cost = nic.config().cost;
        let work = match self.plan.method {
            Method::Pack => cost.pack(self.size(), self.mine.blocks().len() as u64),
            Method::Indirect if !self.plan.key_cache => cost.key_create,
            _ => Duration::ZERO,
        };
        let ready = self.cpu.take(now, work);
        self.step = Step::Preparing(ready);
        if ready <= now {
            self.send(now, nic);
        }
    }

    /// The host work is done: the bytes go.
    fn send(&mut self, now: Instant, nic: &mut Nic) {
        let k = self.keys;
        let size = self.size();
        let peer = self.peer;
        let (peer_origin, _) = NcPlan::matrix(&self.theirs, RECV_BASE);
        let mut wrs = Vec::new();
        match self.plan.method {
            Method::Pack => {
                let (origin, _) = NcPlan::matrix(&self.mine, SEND_BASE);
                let mut packed = Vec::with_capacity(size as usize);
                let mem = nic.memory_mut();
                let res = mem.region(k.send).map(|r| {
                    pack(
                        &self.mine,
                        &r.bytes,
                        (origin - SEND_BASE) as usize,
                        &mut packed,
                    )
                });
                match (res, mem.region_mut(k.pack_send)) {
                    (Some(Ok(())), Some(r)) => r.bytes.write_at(0..packed.len(), &packed),
                    (e, _) => self.rec.errors.push(format!("packing failed: {e:?}")),
                }
                self.rec.bytes_copied += size;
                wrs = self.contiguous((k.pack_send, PACK_SEND_BASE), (k.pack_recv, PACK_RECV_BASE));
            }
            Method::Indirect => {
                if !self.plan.key_cache {
                    self.make_send_key(nic);
                }
                let k = self.keys;
                wrs = self.contiguous((k.ikey_send, IKEY_SEND_BASE), (k.ikey_recv, IKEY_RECV_BASE));
            }
            _ => {
                let (origin, _) = NcPlan::matrix(&self.mine, SEND_BASE);
                for (i, ch) in self.out.iter().enumerate() {
                    let sgl = pieces(&ch.src, origin, k.send);
                    let wr = if self.plan.rdma {
                        let at = peer_origin.wrapping_add_signed(ch.dst[0].offset);
                        WorkRequest::write(peer, MrKey(0), 0, 0, k.recv.0, at).gather(sgl)
                    } else {
                        WorkRequest::send(peer, MrKey(0), 0, 0)
                            .gather(sgl)
                            .endpoints(0, (i + 1) as u16)
                    };
                    wrs.push(wr);
                }
            }
        }
        self.backlog.extend(wrs.into_iter().rev());
        self.flush(now, nic);
        self.step = Step::Sent;
    }

    fn flush(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(wr) = self.backlog.pop() {
            match nic.post(now, wr.clone()) {
                Ok(id) => {
                    self.rec.work_requests += 1;
                    self.ledger.in_flight.insert(id, KeyLedger::keys_of(&wr));
                }
                Err(udrma_nic::PostError::QueueFull(_)) => {
                    self.backlog.push(wr);
                    return;
                }
                Err(e) => self.rec.errors.push(format!("post refused: {e}")),
            }
        }
    }

    /// The peer's transfer is all here: unpack if packing, then go on.
    fn arrived(&mut self, now: Instant, nic: &mut Nic) {
        self.arrived = 0;
        self.rec.received += 1;
        let mut done = now;
        if self.plan.method == Method::Pack {
            let cost = nic.config().cost;
            done = self
                .cpu
                .take(now, cost.pack(self.size(), self.mine.blocks().len() as u64));
            let (origin, _) = NcPlan::matrix(&self.mine, RECV_BASE);
            let mem = nic.memory_mut();
            let packed = mem
                .region(self.keys.pack_recv)
                .map(|r| r.bytes[..self.size() as usize].to_vec())
                .unwrap_or_default();
            let res = mem.region_mut(self.keys.recv).map(|r| {
                unpack(
                    &self.mine,
                    &packed,
                    &mut r.bytes,
                    (origin - RECV_BASE) as usize,
                )
            });
            if !matches!(res, Some(Ok(()))) {
                self.rec.errors.push(format!("unpacking failed: {res:?}"));
            }
            self.rec.bytes_copied += self.size();
        }
        self.post_receives(now, nic);
        self.step = Step::Unpacking(done);
        if done <= now {
            self.after_arrival(now, nic);
        }
    }

    fn after_arrival(&mut self, now: Instant, nic: &mut Nic) {
        if self.is_a() {
            if self.round > self.plan.warmup {
                let rtt = now - self.round_start;
                self.rec.one_way_ps.push(rtt.as_ps() / 2);
            }
            let round = (self.round_start.as_ps(), now.as_ps());
            self.rec.rounds_ps.push(round);
            self.next_round(now, nic);
        } else {
            self.round += 1;
            self.prepare(now, nic);
        }
    }

    fn next_round(&mut self, now: Instant, nic: &mut Nic) {
        if self.round >= self.plan.warmup + self.plan.count {
            self.step = Step::Done;
            return;
        }
        self.round += 1;
        self.round_start = now;
        self.prepare(now, nic);
    }
}

/// The scatter-gather list of `blocks` (offsets from `origin`) under `key`.
fn pieces(blocks: &[crate::datatype::Block], origin: u64, key: MrKey) -> Sgl {
    Sgl::new(
        blocks
            .iter()
            .map(|b| Sge {
                key,
                addr: origin.wrapping_add_signed(b.offset),
                len: b.len,
            })
            .collect(),
    )
    .unwrap_or_else(|| Sgl::new(Vec::new()).expect("empty"))
}

/// Every block of `layout` in a matrix at `base`, under `key`.
fn list(layout: &Layout, base: u64, key: MrKey) -> Sgl {
    let (origin, _) = NcPlan::matrix(layout, base);
    pieces(layout.blocks(), origin, key)
}

impl App for NcApp {
    #[cfg(feature = "fingerprint")]
    fn fingerprint(&self) -> Option<Vec<u8>> {
        postcard::to_allocvec(self).ok()
    }
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        if self.plan.side(self.me).is_none() {
            self.step = Step::Done;
            return;
        }
        self.register(nic);
        if self.plan.method == Method::Indirect {
            // Keys made before the first round trip, as in the study.
            let c = nic.config().cost.key_create;
            self.cpu.take(now, c + c);
            self.rec.keys_created += 1;
        }
        self.post_receives(now, nic);
        if self.is_a() {
            self.step = Step::Preparing(self.plan.start.max(self.cpu.free_at()));
        }
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        match event {
            Event::Completed {
                wr, kind, result, ..
            } => {
                if self.ledger.in_flight.remove(&wr).is_some() {
                    self.ledger.reap(nic.memory_mut(), &self.backlog);
                }
                match result {
                    Err(e) => self.rec.errors.push(format!("{kind:?} failed: {e}")),
                    Ok(()) if kind != WrKind::Recv => self.rec.completed += 1,
                    Ok(()) => {}
                }
                if kind == WrKind::Recv && result.is_ok() && !self.plan.rdma {
                    self.arrived += 1;
                    if self.arrived == self.receives_per_transfer() {
                        self.arrived(now, nic);
                    }
                }
                self.flush(now, nic);
            }
            Event::WriteReceived { from, len, .. } if from == self.peer && self.plan.rdma => {
                self.arrived += len;
                if self.arrived == self.size() {
                    self.arrived(now, nic);
                }
            }
            _ => {}
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.step {
            Step::Preparing(t) | Step::Unpacking(t) => Some(t),
            _ => None,
        }
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        match self.step {
            Step::Preparing(t) if t <= now => {
                if self.is_a() && self.round == 0 {
                    self.next_round(now, nic);
                } else {
                    self.send(now, nic);
                }
            }
            Step::Unpacking(t) if t <= now => self.after_arrival(now, nic),
            _ => {}
        }
    }

    fn is_done(&self) -> bool {
        match self.step {
            Step::Done => true,
            // `b` is done once it has answered every round trip.
            _ => {
                !self.is_a()
                    && self.rec.received >= u64::from(self.plan.warmup + self.plan.count)
                    && self.step == Step::Sent
            }
        }
    }
}

/// Checks host `me`'s receive matrix after a run: the blocks of its layout
/// hold the peer's send-matrix bytes, in stream order, and every byte
/// between blocks is as it started.
pub fn check_received(plan: &NcPlan, me: NodeAddr, mem: &MemoryTable) -> Result<(), String> {
    let Some((i, peer)) = plan.side(me) else {
        return Ok(());
    };
    let (mine, theirs) = (&plan.layouts[i], &plan.layouts[1 - i]);
    let (p_origin, p_len) = NcPlan::matrix(theirs, SEND_BASE);
    let mut want = Vec::new();
    pack(
        theirs,
        &pattern(p_len as usize, peer.0),
        (p_origin - SEND_BASE) as usize,
        &mut want,
    )
    .map_err(|e| e.to_string())?;
    let (origin, len) = NcPlan::matrix(mine, RECV_BASE);
    let region = mem
        .regions()
        .find(|(_, r)| r.base == RECV_BASE)
        .map(|(_, r)| r)
        .ok_or("the receive matrix is not registered")?;
    let mut got = Vec::new();
    pack(mine, &region.bytes, (origin - RECV_BASE) as usize, &mut got)
        .map_err(|e| e.to_string())?;
    if got != want {
        let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!(
            "{me}: received byte {at} of the stream differs from what {peer} sent"
        ));
    }
    // Put the expected bytes back over the start pattern: that is what the
    // whole matrix must be.
    let mut expect = pattern(len as usize, recv_seed(me));
    unpack(mine, &want, &mut expect, (origin - RECV_BASE) as usize).map_err(|e| e.to_string())?;
    if let Some(at) = region.bytes.iter().zip(&expect).position(|(a, b)| a != b) {
        return Err(format!(
            "{me}: byte {:#x} between blocks of the receive matrix was written",
            RECV_BASE + at as u64
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_puts_negative_offsets_inside_the_region() {
        let l = crate::datatype::Datatype::hvector(2, 4, -8, &crate::datatype::Datatype::byte())
            .unwrap()
            .commit()
            .unwrap();
        let (origin, len) = NcPlan::matrix(&l, 0x1000);
        assert_eq!((origin, len), (0x1008, 12));
    }

    /// A send key replaced while the WRITE that names it is in flight
    /// (the peer answered, but the WRITE's ACK was lost) stays until that
    /// WRITE completes, then goes; a key nothing names goes at once.
    #[test]
    fn a_replaced_send_key_lives_until_the_request_naming_it_completes() {
        let byte = crate::datatype::Datatype::byte();
        let l = crate::datatype::Datatype::hvector(4, 64, 128, &byte)
            .unwrap()
            .commit()
            .unwrap();
        let plan = Arc::new(NcPlan {
            a: NodeAddr(0),
            b: NodeAddr(1),
            layouts: [l.clone(), l],
            method: Method::Indirect,
            rdma: true,
            count: 2,
            warmup: 0,
            key_cache: false,
            max_sge: 30,
            max_send: 1 << 18,
            start: Instant::ZERO,
        });
        let mut nic = Nic::new(NodeAddr(0), udrma_nic::NicConfig::default()).unwrap();
        let mut app = NcApp::new(NodeAddr(0), plan);
        let now = Instant::ZERO;
        app.start(now, &mut nic);
        let k0 = app.keys.ikey_send;
        assert!(nic.memory().indirect(k0).is_some());
        // The first transfer: a fresh key; the one made at the start was
        // named by nothing and is gone.
        app.send(now, &mut nic);
        let k1 = app.keys.ikey_send;
        assert_ne!(k1, k0);
        assert!(nic.memory().indirect(k0).is_none(), "an unused key is kept");
        let (&wr1, _) = app.ledger.in_flight.first_key_value().unwrap();
        // The peer's answer came: the next transfer, with its own key.
        app.send(now, &mut nic);
        let k2 = app.keys.ikey_send;
        assert_ne!(k2, k1);
        assert!(
            nic.memory().indirect(k1).is_some(),
            "the first WRITE may still retransmit through its key"
        );
        // The first WRITE completes: its key goes, the current one stays.
        app.handle_event(
            now,
            &mut nic,
            Event::Completed {
                wr: wr1,
                kind: WrKind::Write,
                len: 256,
                result: Ok(()),
                at: now,
            },
        );
        assert!(
            nic.memory().indirect(k1).is_none(),
            "a finished key is kept"
        );
        assert!(nic.memory().indirect(k2).is_some());
    }
}
