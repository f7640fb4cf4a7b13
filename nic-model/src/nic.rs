//! `Nic`: the sans-IO protocol engine of one host.
//!
//! It owns the sender (command queue, large-transfer cutting, DMA OP table,
//! retransmission), the receiver (receive registry, escape channel,
//! tombstones, posted receive buffers) and registered memory. It never
//! reads a clock or a socket: the caller passes `now` to every method and
//! moves datagrams in and out.
//!
//! # Driving it
//!
//! After every [`Nic::post`], [`Nic::post_recv`], [`Nic::handle_datagram`]
//! and [`Nic::handle_timeout`], the caller drains [`Nic::poll_transmit`]
//! (until `None`) and [`Nic::poll_event`] (until `None`), then sleeps until
//! [`Nic::poll_timeout`] or the next datagram, whichever comes first, and
//! calls [`Nic::handle_timeout`] when that deadline passes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use udrma_proto::{Body, Error as WireError, Flags, NodeAddr, Packet, Repr, Syndrome};

use crate::config::{AckMode, NicConfig, RegistrationMode, RetransmitMode};
use crate::cost::Serial;
use crate::mask::Mask;
use crate::memory::{Access, MemoryTable, MrKey, Use};
use crate::optable::{OpNumber, OpTable};
use crate::registry::{Entry, EscapeChannel, Escaped, OpKey, ReceiveRegistry, Target, Tombstones};
use crate::rtt::RttEstimator;
use crate::stats::{Occupancy, Stats};
use crate::wr::{Control, Event, PostError, WcError, WorkRequest, WrId, WrKind};
use udrma_proto::time::Instant;

/// A datagram [`Nic::poll_transmit`] wrote into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Destination host.
    pub dst: NodeAddr,
    /// Bytes written to the buffer.
    pub len: usize,
    /// UDP source port suggested for the datagram.
    pub src_port: u16,
}

/// Everything in the one ordered deadline structure. Each owner remembers
/// its deadline, so cancelling is an O(log n) removal and nothing stale is
/// left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// An outstanding packet's retransmit deadline.
    Retransmit(OpNumber),
    /// A packet NACKed as receiver-not-ready is due again.
    RnrRetry(OpNumber),
    /// An escape channel entry expires.
    Escape(u64),
    /// A registry entry saw no progress for `registry_timeout`.
    Registry(OpKey),
    /// Coalesced selective ACKs for an operation are due.
    Sack(OpKey),
    /// The NIC has fetched a request's descriptor: it joins the command
    /// queue (only with a nonzero cost model).
    Fetch(WrId),
    /// The host's interrupt handler refills the descriptor ring.
    Refill,
}

#[derive(Debug, Clone)]
struct Request {
    req: WorkRequest,
    /// Bytes already cut into operations.
    cut: u64,
    /// Whether cutting has finished (a zero-length request is one op).
    cut_done: bool,
    /// Operations of this request not yet finished.
    open_ops: u32,
    /// Whether it holds a descriptor ring slot (else it waits in the host
    /// overflow ring).
    in_ring: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Write,
    Send,
    ReadRequest,
    Notify,
    Control,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PktState {
    Unsent,
    InFlight(OpNumber),
    Acked,
}

/// One segment operation: a message id with its packets.
#[derive(Debug, Clone)]
struct Op {
    wr: WrId,
    kind: OpKind,
    dst: NodeAddr,
    /// Offset of this operation within its request.
    offset: u64,
    len: u64,
    seg_count: u32,
    next_unsent: u32,
    pkts: Vec<PktState>,
    acked: u32,
    last_segment: bool,
    /// READ: which response packets have arrived.
    read_mask: Option<Mask>,
}

/// An OP table entry: one outstanding packet.
#[derive(Debug, Clone, Copy)]
struct Inflight {
    msg_id: u32,
    seg: u32,
    sent_at: Instant,
    retries: u32,
    retransmitted: bool,
    /// `None` while waiting in the retransmit queue.
    deadline: Option<Instant>,
}

/// A posted receive buffer.
#[derive(Debug, Clone, Copy)]
struct RecvBuf {
    wr: WrId,
    mr: MrKey,
    addr: u64,
    len: u64,
}

#[derive(Debug, Clone, Copy)]
enum ReplyBody {
    Ack,
    Sack {
        base: u32,
        bitmap: u64,
    },
    Nack {
        syndrome: Syndrome,
        detail: u32,
    },
    Completion {
        len: u32,
    },
    ReadResponse {
        rkey: u32,
        addr: u64,
        total_len: u32,
    },
    Credit,
    Hello {
        reply: bool,
        nonce: u32,
    },
}

/// A packet the receive side owes a peer (built at transmit time).
#[derive(Debug, Clone, Copy)]
struct Reply {
    to: NodeAddr,
    src_ep: u16,
    dst_ep: u16,
    op_num: u32,
    msg_id: u32,
    seg_index: u32,
    seg_count: u32,
    body: ReplyBody,
}

#[derive(Debug, Clone)]
struct PendingSack {
    src_ep: u16,
    seg_count: u32,
    indices: BTreeSet<u32>,
    deadline: Instant,
}

/// The protocol engine of one host. See the module docs for how to drive it.
#[derive(Debug)]
pub struct Nic {
    addr: NodeAddr,
    cfg: NicConfig,
    memory: MemoryTable,
    next_wr: u64,
    next_msg: u32,
    requests: BTreeMap<WrId, Request>,
    requests_peak: usize,
    command_queue: VecDeque<WrId>,
    ops: BTreeMap<u32, Op>,
    sendable: VecDeque<u32>,
    op_table: OpTable<Inflight>,
    retransmit_queue: VecDeque<OpNumber>,
    rtt: BTreeMap<NodeAddr, RttEstimator>,
    registry: ReceiveRegistry,
    escape: EscapeChannel,
    tombstones: Tombstones,
    recv_queues: BTreeMap<u16, VecDeque<RecvBuf>>,
    sacks: BTreeMap<OpKey, PendingSack>,
    replies: VecDeque<Reply>,
    replies_peak: usize,
    events: VecDeque<Event>,
    timers: BTreeSet<(Instant, Timer)>,
    stats: Stats,
    /// Credit count advertised to each peer on every packet.
    advertised: BTreeMap<NodeAddr, u16>,
    /// Newest credit count each peer advertised.
    credits_seen: BTreeMap<NodeAddr, u16>,
    /// Newest credit count that really left toward each peer on a packet.
    credits_carried: BTreeMap<NodeAddr, u16>,
    /// Boot epoch each peer last showed (at most [`MAX_PEERS`] peers).
    peer_epochs: BTreeMap<NodeAddr, u32>,
    /// The region HELLOs announce, if any.
    announced: Option<MrKey>,
    /// Descriptor ring slots in use, and their peak.
    ring_used: usize,
    ring_peak: usize,
    /// Requests waiting in the host overflow ring, oldest first.
    overflow: VecDeque<WrId>,
    /// Whether a refill interrupt is pending.
    refill_pending: bool,
    /// The NIC's descriptor fetch unit.
    fetch_unit: Serial,
}

/// Most peers whose credit advertisements are tracked; beyond, new peers'
/// advertisements are ignored (and counted), so a flood of forged sources
/// cannot grow the table.
pub const MAX_CREDIT_PEERS: usize = 65_536;

/// Most peers whose boot epochs are tracked. Packets from further peers are
/// still served, but their restarts go unnoticed (counted in
/// `Stats::epoch_peers_overflow`).
pub const MAX_PEERS: usize = 65_536;

/// Whether epoch `a` is newer than `b`, in serial-number arithmetic
/// (RFC 1982): the difference, read as a signed 32-bit number, is positive.
/// A restarted peer's epoch is newer than its previous life's as long as the
/// two lives are less than 2^31 epoch ticks apart.
pub fn epoch_newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

fn div_ceil_nonzero(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

impl Nic {
    /// A NIC for host `addr`. Fails if the configuration cannot work.
    pub fn new(addr: NodeAddr, cfg: NicConfig) -> Result<Nic, crate::config::ConfigError> {
        cfg.validate()?;
        Ok(Nic {
            addr,
            memory: MemoryTable::new(),
            next_wr: 1,
            next_msg: 1,
            requests: BTreeMap::new(),
            requests_peak: 0,
            command_queue: VecDeque::new(),
            ops: BTreeMap::new(),
            sendable: VecDeque::new(),
            op_table: OpTable::new(cfg.op_table_capacity),
            retransmit_queue: VecDeque::new(),
            rtt: BTreeMap::new(),
            registry: ReceiveRegistry::new(cfg.registry_capacity),
            escape: EscapeChannel::new(cfg.escape_capacity, cfg.escape_bytes),
            tombstones: Tombstones::new(cfg.tombstone_capacity, cfg.tombstones),
            recv_queues: BTreeMap::new(),
            sacks: BTreeMap::new(),
            replies: VecDeque::new(),
            replies_peak: 0,
            events: VecDeque::new(),
            timers: BTreeSet::new(),
            stats: Stats::default(),
            advertised: BTreeMap::new(),
            credits_seen: BTreeMap::new(),
            credits_carried: BTreeMap::new(),
            peer_epochs: BTreeMap::new(),
            announced: None,
            ring_used: 0,
            ring_peak: 0,
            overflow: VecDeque::new(),
            refill_pending: false,
            fetch_unit: Serial::default(),
            cfg,
        })
    }

    /// This host.
    pub fn addr(&self) -> NodeAddr {
        self.addr
    }

    /// The configuration.
    pub fn config(&self) -> &NicConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Registered memory.
    pub fn memory(&self) -> &MemoryTable {
        &self.memory
    }

    /// Registered memory, for the host to register, fill, reuse and
    /// deregister regions.
    pub fn memory_mut(&mut self) -> &mut MemoryTable {
        &mut self.memory
    }

    /// Registers `len` zeroed bytes at `base`; shorthand for
    /// `memory_mut().register(..)`.
    pub fn register(&mut self, base: u64, len: usize, access: Access) -> MrKey {
        self.memory.register(base, len, access)
    }

    /// RTT state toward `peer`, once it has been talked to.
    pub fn rtt(&self, peer: NodeAddr) -> Option<&RttEstimator> {
        self.rtt.get(&peer)
    }

    /// Bounded state now, at its peak, and its limits.
    pub fn occupancy(&self) -> Occupancy {
        let c = &self.cfg;
        Occupancy {
            registry: (
                self.registry.len(),
                self.registry.peak(),
                c.registry_capacity,
            ),
            escape_entries: (
                self.escape.len(),
                self.escape.peak_entries(),
                c.escape_capacity,
            ),
            escape_bytes: (
                self.escape.bytes(),
                self.escape.peak_bytes(),
                c.escape_bytes,
            ),
            op_table: (
                self.op_table.len(),
                self.op_table.peak(),
                usize::from(c.op_table_capacity),
            ),
            tombstones: (
                self.tombstones.len(),
                self.tombstones.peak(),
                if c.tombstones {
                    c.tombstone_capacity
                } else {
                    0
                },
            ),
            transmit_queue: (
                self.replies.len(),
                self.replies_peak,
                c.transmit_queue_capacity,
            ),
            requests: (
                self.requests.len(),
                self.requests_peak,
                c.command_queue_capacity,
            ),
            descriptor_ring: (self.ring_used, self.ring_peak, c.descriptor_ring),
        }
    }

    /// Whether nothing is outstanding: no request, no queued packet, no
    /// registry entry, no escaped packet and no pending timer.
    pub fn is_idle(&self) -> bool {
        self.requests.is_empty()
            && self.replies.is_empty()
            && self.registry.is_empty()
            && self.escape.is_empty()
            && self.timers.is_empty()
    }

    /// Queues a WRITE, WRITE-with-notify, READ or SEND. Call
    /// [`Nic::poll_transmit`] afterwards. The request completes with exactly
    /// one [`Event::Completed`].
    ///
    /// The request takes a descriptor ring slot, or waits in the host
    /// overflow ring when the ring is full. With a nonzero cost model it
    /// joins the command queue only after the doorbell and the NIC's
    /// descriptor fetch (one at a time); [`Nic::poll_timeout`] says when.
    pub fn post(&mut self, now: Instant, wr: WorkRequest) -> Result<WrId, PostError> {
        let local_use = match wr.kind {
            WrKind::Write | WrKind::WriteNotify | WrKind::Send => Some(Use::LocalRead),
            WrKind::Read => Some(Use::LocalWrite),
            WrKind::Control if wr.control.is_some() => None,
            WrKind::Control | WrKind::Recv => return Err(PostError::NotARequest),
        };
        if self.requests.len() >= self.cfg.command_queue_capacity {
            return Err(PostError::QueueFull(self.requests.len()));
        }
        if let Some(u) = local_use {
            self.memory
                .check(wr.local, wr.local_addr, wr.len, u)
                .map_err(PostError::LocalAccess)?;
        }
        if wr.kind == WrKind::Send && wr.len > self.cfg.max_op_bytes() {
            return Err(PostError::TooLong {
                len: wr.len,
                max: self.cfg.max_op_bytes(),
            });
        }
        let id = self.next_wr_id();
        self.requests.insert(
            id,
            Request {
                req: wr,
                cut: 0,
                cut_done: false,
                open_ops: 0,
                in_ring: false,
            },
        );
        self.requests_peak = self.requests_peak.max(self.requests.len());
        if self.ring_used < self.cfg.descriptor_ring {
            let rung = now + self.cfg.cost.doorbell;
            self.enter_ring(rung, id);
        } else {
            self.overflow.push_back(id);
            self.stats.ring_overflows += 1;
        }
        self.stats.posted += 1;
        Ok(id)
    }

    /// Gives request `id` a ring slot; the NIC fetches its descriptor
    /// from `at` on.
    fn enter_ring(&mut self, at: Instant, id: WrId) {
        if let Some(r) = self.requests.get_mut(&id) {
            r.in_ring = true;
        }
        self.ring_used += 1;
        self.ring_peak = self.ring_peak.max(self.ring_used);
        if self.cfg.cost.is_zero() {
            self.command_queue.push_back(id);
            return;
        }
        let fetched = self.fetch_unit.take(at, self.cfg.cost.fetch());
        self.timers.insert((fetched, Timer::Fetch(id)));
    }

    /// A request left the ring: refill it from the overflow ring when it
    /// fell to the low-water mark (after an interrupt).
    fn ring_slot_freed(&mut self, now: Instant) {
        self.ring_used -= 1;
        if self.ring_used > self.cfg.ring_low_water
            || self.overflow.is_empty()
            || self.refill_pending
        {
            return;
        }
        if self.cfg.cost.is_zero() {
            self.refill(now);
        } else {
            self.refill_pending = true;
            self.timers
                .insert((now + self.cfg.cost.interrupt, Timer::Refill));
        }
    }

    fn refill(&mut self, now: Instant) {
        self.stats.ring_refills += 1;
        while self.ring_used < self.cfg.descriptor_ring {
            let Some(id) = self.overflow.pop_front() else {
                break;
            };
            if self.requests.contains_key(&id) {
                self.enter_ring(now, id);
            }
        }
    }

    /// Posts a receive buffer on endpoint `ep`; the next SEND to that
    /// endpoint fills it and completes it with [`Event::Completed`].
    pub fn post_recv(
        &mut self,
        _now: Instant,
        ep: u16,
        mr: MrKey,
        addr: u64,
        len: u64,
    ) -> Result<WrId, PostError> {
        self.memory
            .check(mr, addr, len, Use::LocalWrite)
            .map_err(PostError::LocalAccess)?;
        let queue_len = self.recv_queues.get(&ep).map_or(0, VecDeque::len);
        if queue_len >= self.cfg.recv_queue_capacity {
            return Err(PostError::QueueFull(queue_len));
        }
        let wr = self.next_wr_id();
        self.recv_queues
            .entry(ep)
            .or_default()
            .push_back(RecvBuf { wr, mr, addr, len });
        self.stats.posted += 1;
        Ok(wr)
    }

    fn next_wr_id(&mut self) -> WrId {
        let id = WrId(self.next_wr);
        self.next_wr += 1;
        id
    }

    /// The next event for the host (completions, arrivals), oldest first.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest deadline at which [`Nic::handle_timeout`] must be
    /// called, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        // (Fetch and refill timers live here too.)
        self.timers.first().map(|(t, _)| *t)
    }

    /// Fires every deadline at or before `now`: retransmissions, escape
    /// channel expiry, registry eviction, coalesced ACKs.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(t, timer)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Retransmit(opn) => self.on_retransmit_timeout(now, opn),
                Timer::RnrRetry(opn) => {
                    if let Some(inf) = self.op_table.get_mut(opn) {
                        inf.deadline = None;
                        self.queue_retransmit(opn);
                    }
                }
                Timer::Escape(id) => {
                    if self.escape.remove(id).is_some() {
                        self.stats.escape_expired += 1;
                    }
                }
                Timer::Registry(key) => self.expire_registry(key),
                Timer::Sack(key) => self.flush_sack(key),
                Timer::Fetch(id) => {
                    if self.requests.contains_key(&id) {
                        self.command_queue.push_back(id);
                    }
                }
                Timer::Refill => {
                    self.refill_pending = false;
                    self.refill(now);
                }
            }
        }
    }

    // ---------------------------------------------------------------- sender

    /// Writes the next datagram to send into `buf` (replacing its contents)
    /// and says where it goes; `None` when nothing can be sent now. Order:
    /// replies owed to peers, retransmissions, then new data while the OP
    /// table has room.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        loop {
            if let Some(reply) = self.replies.pop_front() {
                if let Some(t) = self.build_reply(&reply, buf) {
                    self.stats.control_sent += 1;
                    return Some(t);
                }
                continue;
            }
            if let Some(opn) = self.retransmit_queue.pop_front() {
                if let Some(t) = self.send_packet(now, opn, true, buf) {
                    return Some(t);
                }
                continue;
            }
            if self.op_table.is_full() {
                return None;
            }
            let Some(&msg_id) = self.sendable.front() else {
                if !self.cut_next_op() {
                    return None;
                }
                continue;
            };
            let Some(op) = self.ops.get_mut(&msg_id) else {
                self.sendable.pop_front();
                continue;
            };
            if op.next_unsent >= op.seg_count {
                self.sendable.pop_front();
                continue;
            }
            let seg = op.next_unsent;
            op.next_unsent += 1;
            let inflight = Inflight {
                msg_id,
                seg,
                sent_at: now,
                retries: 0,
                retransmitted: false,
                deadline: None,
            };
            let opn = self.op_table.insert(inflight).expect("checked not full");
            if let Some(op) = self.ops.get_mut(&msg_id) {
                op.pkts[seg as usize] = PktState::InFlight(opn);
            }
            if let Some(t) = self.send_packet(now, opn, false, buf) {
                return Some(t);
            }
        }
    }

    /// Cuts the next operation from the head of the command queue: a whole
    /// request up to `segment_threshold`, else one `segment_size` segment
    /// (the queue head keeps only its offset and remaining length).
    fn cut_next_op(&mut self) -> bool {
        let Some(&wr) = self.command_queue.front() else {
            return false;
        };
        let Some(r) = self.requests.get_mut(&wr) else {
            self.command_queue.pop_front();
            return true;
        };
        let remaining = r.req.len - r.cut;
        let size = if r.req.len > self.cfg.segment_threshold {
            remaining.min(u64::from(self.cfg.segment_size))
        } else {
            remaining
        };
        if r.req.kind == WrKind::Read && self.cfg.read_window != u64::MAX {
            let asked: u64 = self
                .ops
                .values()
                .filter(|op| op.kind == OpKind::ReadRequest)
                .map(|op| op.len)
                .sum();
            if asked > 0 && asked + size > self.cfg.read_window {
                // Wait for responses to drain; a completing READ makes the
                // next poll_transmit try again.
                return false;
            }
        }
        let Some(r) = self.requests.get_mut(&wr) else {
            return true;
        };
        let offset = r.cut;
        r.cut += size;
        r.open_ops += 1;
        let last_segment = r.cut >= r.req.len;
        if last_segment {
            r.cut_done = true;
            self.command_queue.pop_front();
        }
        let req = r.req;
        let (kind, seg_count, read_mask) = match req.kind {
            WrKind::Read => (
                OpKind::ReadRequest,
                1,
                Some(Mask::new(div_ceil_nonzero(size, self.cfg.mtu_payload))),
            ),
            WrKind::Control => (OpKind::Control, 1, None),
            WrKind::Send => (
                OpKind::Send,
                div_ceil_nonzero(size, self.cfg.mtu_payload),
                None,
            ),
            _ => (
                OpKind::Write,
                div_ceil_nonzero(size, self.cfg.mtu_payload),
                None,
            ),
        };
        self.start_op(Op {
            wr,
            kind,
            dst: req.dst,
            offset,
            len: size,
            seg_count,
            next_unsent: 0,
            pkts: vec![PktState::Unsent; seg_count as usize],
            acked: 0,
            last_segment,
            read_mask,
        });
        true
    }

    fn start_op(&mut self, op: Op) {
        let msg_id = self.next_msg;
        self.next_msg = self.next_msg.wrapping_add(1).max(1);
        self.ops.insert(msg_id, op);
        self.sendable.push_back(msg_id);
    }

    /// Builds and emits one data packet (WRITE, SEND, READ request or
    /// data-arrived notice) and arms its retransmit deadline.
    fn send_packet(
        &mut self,
        now: Instant,
        opn: OpNumber,
        retransmit: bool,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let inf = *self.op_table.get(opn)?;
        let op = self.ops.get(&inf.msg_id)?;
        let r = self.requests.get(&op.wr)?;
        let mtu = u64::from(self.cfg.mtu_payload);
        let seg = inf.seg;
        let mut flags = Flags::ACK_REQ;
        flags.set(Flags::FIRST, seg == 0);
        flags.set(Flags::LAST, seg + 1 == op.seg_count);
        flags.set(Flags::LAST_SEGMENT, op.last_segment);
        flags.set(Flags::RETRANSMIT, retransmit);
        let seg_offset = u64::from(seg) * mtu;
        let seg_len = op.len.saturating_sub(seg_offset).min(mtu);
        let local_addr = r.req.local_addr + op.offset + seg_offset;
        let describe = seg == 0 || self.cfg.registration == RegistrationMode::SelfDescribing;
        let data: &[u8] = match op.kind {
            OpKind::Write | OpKind::Send => {
                match self
                    .memory
                    .read(r.req.local, local_addr, seg_len, Use::LocalRead)
                {
                    Ok(d) => d,
                    Err(s) => {
                        let wr = op.wr;
                        self.fail_request(now, wr, WcError::LocalAccess(s));
                        return None;
                    }
                }
            }
            _ => &[],
        };
        let body = match op.kind {
            OpKind::Write => Body::Write {
                remote_addr: r.req.remote_addr + op.offset + seg_offset,
                rkey: r.req.rkey,
                total_len: if describe { op.len as u32 } else { 0 },
                data,
            },
            OpKind::Send => Body::Send {
                offset: seg_offset as u32,
                total_len: op.len as u32,
                data,
            },
            OpKind::ReadRequest => Body::ReadRequest {
                remote_addr: r.req.remote_addr + op.offset,
                rkey: r.req.rkey,
                length: op.len as u32,
            },
            OpKind::Notify => {
                flags |= Flags::SOLICITED;
                Body::DataArrived {
                    addr: r.req.remote_addr,
                    length: r.req.len as u32,
                    immediate: r.req.immediate,
                }
            }
            OpKind::Control => match r.req.control {
                Some(Control::Rts(rdv)) => Body::Rts(rdv),
                Some(Control::Cts(rdv)) => Body::Cts(rdv),
                Some(Control::Fin { protocol, tag, seq }) => Body::Fin { protocol, tag, seq },
                None => return None,
            },
        };
        let dst = op.dst;
        let credits = self.advertised.get(&dst).copied();
        if let Some(c) = credits {
            self.credits_carried.insert(dst, c);
        }
        flags.set(Flags::CREDITS_VALID, credits.is_some());
        let repr = Repr {
            flags,
            src_ep: r.req.src_ep,
            dst_ep: r.req.dst_ep,
            op_num: opn.0,
            msg_id: inf.msg_id,
            seg_index: seg,
            seg_count: op.seg_count,
            credits: credits.unwrap_or(0),
            epoch: self.cfg.epoch,
            body,
        };
        repr.emit_vec(buf).ok()?;
        let rto = self.rtt_to(dst).backoff(inf.retries);
        let deadline = now + rto;
        if let Some(e) = self.op_table.get_mut(opn) {
            e.sent_at = now;
            e.deadline = Some(deadline);
            e.retransmitted |= retransmit;
        }
        self.timers.insert((deadline, Timer::Retransmit(opn)));
        if retransmit {
            self.stats.retransmits += 1;
        } else {
            self.stats.data_sent += 1;
        }
        Some(Transmit {
            dst,
            len: buf.len(),
            src_port: self.cfg.src_port,
        })
    }

    fn rtt_to(&mut self, peer: NodeAddr) -> RttEstimator {
        let c = &self.cfg;
        *self
            .rtt
            .entry(peer)
            .or_insert_with(|| RttEstimator::new(c.rto_initial, c.rto_min, c.rto_max))
    }

    fn on_retransmit_timeout(&mut self, now: Instant, opn: OpNumber) {
        let Some(inf) = self.op_table.get_mut(opn) else {
            return;
        };
        inf.deadline = None;
        self.stats.timeouts += 1;
        if !self.count_retry(now, opn) {
            return;
        }
        self.queue_retransmit(opn);
        if self.cfg.retransmit == RetransmitMode::GoBackN {
            // Everything after it in the same operation goes again too.
            let Some(inf) = self.op_table.get(opn).copied() else {
                return;
            };
            let later: Vec<OpNumber> = self
                .ops
                .get(&inf.msg_id)
                .map(|op| {
                    op.pkts[inf.seg as usize + 1..]
                        .iter()
                        .filter_map(|p| match p {
                            PktState::InFlight(o) => Some(*o),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            for o in later {
                if let Some(e) = self.op_table.get_mut(o) {
                    if let Some(d) = e.deadline.take() {
                        self.timers.remove(&(d, Timer::Retransmit(o)));
                        self.retransmit_queue.push_back(o);
                    }
                }
            }
        }
    }

    /// Counts one retry of `opn`; fails its request and returns `false`
    /// when `max_retries` is exhausted.
    fn count_retry(&mut self, now: Instant, opn: OpNumber) -> bool {
        let Some(inf) = self.op_table.get_mut(opn) else {
            return false;
        };
        inf.retries += 1;
        if inf.retries > self.cfg.max_retries {
            let msg_id = inf.msg_id;
            if let Some(wr) = self.ops.get(&msg_id).map(|op| op.wr) {
                self.stats.retries_exhausted += 1;
                self.fail_request(now, wr, WcError::RetryExceeded);
            }
            return false;
        }
        true
    }

    fn queue_retransmit(&mut self, opn: OpNumber) {
        if let Some(inf) = self.op_table.get_mut(opn) {
            if let Some(d) = inf.deadline.take() {
                self.timers.remove(&(d, Timer::Retransmit(opn)));
            }
            self.retransmit_queue.push_back(opn);
        }
    }

    /// An outstanding packet is acknowledged: free its slot, feed the RTT
    /// estimator (not for retransmitted packets: Karn's rule), and finish
    /// its operation when it was the last.
    fn ack_packet(&mut self, now: Instant, opn: OpNumber, sample: bool) {
        let Some(inf) = self.op_table.remove(opn) else {
            return;
        };
        if let Some(d) = inf.deadline {
            // Armed either as a retransmit or as an RNR retry.
            self.timers.remove(&(d, Timer::Retransmit(opn)));
            self.timers.remove(&(d, Timer::RnrRetry(opn)));
        }
        self.stats.acks += 1;
        let Some(op) = self.ops.get_mut(&inf.msg_id) else {
            return;
        };
        let dst = op.dst;
        op.pkts[inf.seg as usize] = PktState::Acked;
        op.acked += 1;
        let done = op.acked == op.seg_count;
        if sample && !inf.retransmitted {
            let c = &self.cfg;
            self.rtt
                .entry(dst)
                .or_insert_with(|| RttEstimator::new(c.rto_initial, c.rto_min, c.rto_max))
                .on_sample(now - inf.sent_at);
            self.stats.rtt_samples += 1;
        }
        if done {
            self.op_done(now, inf.msg_id);
        }
    }

    fn op_done(&mut self, now: Instant, msg_id: u32) {
        let Some(op) = self.ops.remove(&msg_id) else {
            return;
        };
        let Some(r) = self.requests.get_mut(&op.wr) else {
            return;
        };
        r.open_ops -= 1;
        if op.kind == OpKind::Notify {
            self.complete_request(now, op.wr, Ok(()));
            return;
        }
        if !r.cut_done || r.open_ops > 0 {
            return;
        }
        if r.req.kind == WrKind::WriteNotify {
            // Every byte is acknowledged: tell the receiver where it is.
            r.open_ops = 1;
            self.start_op(Op {
                wr: op.wr,
                kind: OpKind::Notify,
                dst: op.dst,
                offset: 0,
                len: 0,
                seg_count: 1,
                next_unsent: 0,
                pkts: vec![PktState::Unsent],
                acked: 0,
                last_segment: true,
                read_mask: None,
            });
        } else {
            self.complete_request(now, op.wr, Ok(()));
        }
    }

    fn complete_request(&mut self, now: Instant, wr: WrId, result: Result<(), WcError>) {
        let Some(r) = self.requests.remove(&wr) else {
            return;
        };
        if r.in_ring {
            self.ring_slot_freed(now);
        }
        if result.is_ok() {
            self.stats.completed += 1;
        } else {
            self.stats.failed += 1;
        }
        self.events.push_back(Event::Completed {
            wr,
            kind: r.req.kind,
            len: r.req.len,
            result,
            at: now,
        });
    }

    /// Completes `wr` in error and frees every piece of state it holds.
    fn fail_request(&mut self, now: Instant, wr: WrId, err: WcError) {
        if !self.requests.contains_key(&wr) {
            return;
        }
        let msgs: Vec<u32> = self
            .ops
            .iter()
            .filter(|(_, op)| op.wr == wr)
            .map(|(m, _)| *m)
            .collect();
        for m in msgs {
            if let Some(op) = self.ops.remove(&m) {
                for p in op.pkts {
                    if let PktState::InFlight(opn) = p {
                        if let Some(inf) = self.op_table.remove(opn) {
                            if let Some(d) = inf.deadline {
                                self.timers.remove(&(d, Timer::Retransmit(opn)));
                                self.timers.remove(&(d, Timer::RnrRetry(opn)));
                            }
                        }
                    }
                }
            }
        }
        self.command_queue.retain(|w| *w != wr);
        self.overflow.retain(|w| *w != wr);
        self.complete_request(now, wr, Err(err));
    }

    // -------------------------------------------------------- messaging aid

    /// From now on every packet to `peer` carries `cumulative` (the count
    /// of receive buffers re-posted for it, modulo 2^16) with the CREDITS
    /// flag. A cumulative count survives loss, duplication and reordering:
    /// the peer keeps the newest it has seen.
    pub fn advertise_credits(&mut self, peer: NodeAddr, cumulative: u16) {
        self.advertised.insert(peer, cumulative);
    }

    /// The newest credit count that has really left toward `peer` on a
    /// packet (any packet: data, ACK or NOOP). The messaging layer compares
    /// it with what it re-posted to decide whether a NOOP is owed.
    pub fn credits_carried(&self, peer: NodeAddr) -> Option<u16> {
        self.credits_carried.get(&peer).copied()
    }

    /// Sends a CREDIT (NOOP) packet to `peer` now carrying the current
    /// advertisement: for when nothing else would carry it. Not
    /// acknowledged: the next advertisement repairs a lost one.
    pub fn send_noop(&mut self, peer: NodeAddr, src_ep: u16, dst_ep: u16) {
        if self.push_reply(Reply {
            to: peer,
            src_ep,
            dst_ep,
            op_num: 0,
            msg_id: 0,
            seg_index: 0,
            seg_count: 0,
            body: ReplyBody::Credit,
        }) {
            self.stats.noops_sent += 1;
        }
    }

    /// Chooses the region this NIC's HELLOs (asks and replies) announce:
    /// its address, length and rkey travel in the packet, so a peer learns
    /// where to WRITE and READ without any side channel. `None` announces
    /// nothing (zeros).
    pub fn announce(&mut self, region: Option<MrKey>) {
        self.announced = region;
    }

    /// Sends a HELLO to `peer` now, announcing this NIC's region. The peer
    /// answers with a HELLO reply echoing `nonce`; both sides raise
    /// [`Event::Hello`]. HELLOs are not acknowledged or retransmitted: the
    /// asker repeats its HELLO until it hears the reply.
    pub fn hello(&mut self, peer: NodeAddr, nonce: u32) {
        if self.push_reply(Reply {
            to: peer,
            src_ep: 0,
            dst_ep: 0,
            op_num: 0,
            msg_id: 0,
            seg_index: 0,
            seg_count: 0,
            body: ReplyBody::Hello {
                reply: false,
                nonce,
            },
        }) {
            self.stats.hellos_sent += 1;
        }
    }

    fn on_hello(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>, hello: udrma_proto::Hello) {
        self.stats.hellos_received += 1;
        self.events.push_back(Event::Hello {
            from,
            hello,
            at: now,
        });
        if !hello.reply
            && self.push_reply(Nic::header_reply(
                from,
                r,
                ReplyBody::Hello {
                    reply: true,
                    nonce: hello.nonce,
                },
            ))
        {
            self.stats.hellos_sent += 1;
        }
    }

    /// Raises `Event::Credits` when `from` advertises a newer count
    /// (modulo 2^16: newer means 1..32767 ahead).
    fn note_credits(&mut self, now: Instant, from: NodeAddr, cumulative: u16) {
        let newer = match self.credits_seen.get(&from) {
            None => true,
            Some(old) => (1..0x8000).contains(&cumulative.wrapping_sub(*old)),
        };
        if !newer {
            return;
        }
        if !self.credits_seen.contains_key(&from) && self.credits_seen.len() >= MAX_CREDIT_PEERS {
            self.stats.credit_peers_overflow += 1;
            return;
        }
        self.credits_seen.insert(from, cumulative);
        self.stats.credit_updates += 1;
        self.events.push_back(Event::Credits {
            from,
            cumulative,
            at: now,
        });
    }

    /// Whether a single-packet message (control, data-arrived) is seen
    /// for the first time: remembers it with a tombstone, or counts a
    /// stale copy. With tombstones off every copy is new (the hazard).
    fn first_sighting(&mut self, key: OpKey) -> bool {
        if self.tombstones.contains(&key) {
            self.stats.stale_dropped += 1;
            return false;
        }
        if self.tombstones.insert(key) {
            self.stats.tombstone_evictions += 1;
        }
        true
    }

    /// A control message: raised once (a tombstone drops later copies),
    /// acknowledged every time.
    fn on_control(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>, control: Control) {
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        if self.first_sighting(key) {
            self.stats.controls_delivered += 1;
            self.events.push_back(Event::Control {
                from,
                src_ep: r.src_ep,
                dst_ep: r.dst_ep,
                control,
                at: now,
            });
        }
        self.push_reply(Nic::header_reply(from, r, ReplyBody::Ack));
    }

    // -------------------------------------------------------------- receiver

    /// Takes one datagram from `from`. Malformed or hostile bytes never
    /// panic: they are counted by reason in [`Stats`] and dropped, or
    /// NACKed where the protocol says so.
    pub fn handle_datagram(&mut self, now: Instant, from: NodeAddr, bytes: &[u8]) {
        self.stats.rx_datagrams += 1;
        let repr = match Repr::parse_bytes(bytes) {
            Ok(r) => r,
            Err(e) => {
                match e {
                    WireError::Truncated { .. } => self.stats.rx_truncated += 1,
                    WireError::BadChecksum { .. } => self.stats.rx_bad_checksum += 1,
                    WireError::BadVersion(_) => self.stats.rx_bad_version += 1,
                    WireError::BadLength { .. } | WireError::UnexpectedPayload { .. } => {
                        self.stats.rx_bad_length += 1
                    }
                    WireError::UnknownOpcode(code) => {
                        self.stats.rx_unknown_opcode += 1;
                        // The ICRC held, so the header can be trusted enough
                        // to tell the sender.
                        let p = Packet::new_unchecked(bytes);
                        self.push_reply(Reply {
                            to: from,
                            src_ep: p.dst_ep(),
                            dst_ep: p.src_ep(),
                            op_num: p.op_num(),
                            msg_id: p.msg_id(),
                            seg_index: p.seg_index(),
                            seg_count: p.seg_count(),
                            body: ReplyBody::Nack {
                                syndrome: Syndrome::UnknownOpcode,
                                detail: u32::from(code),
                            },
                        });
                        *self
                            .stats
                            .nacks_sent
                            .entry(Syndrome::UnknownOpcode)
                            .or_default() += 1;
                    }
                }
                return;
            }
        };
        if !self.check_epoch(now, from, repr.epoch) {
            return;
        }
        if repr.flags.contains(Flags::CREDITS_VALID) {
            self.note_credits(now, from, repr.credits);
        }
        match repr.body {
            Body::Write { .. } | Body::Send { .. } => self.on_data(now, from, &repr, bytes),
            Body::ReadRequest {
                remote_addr,
                rkey,
                length,
            } => self.on_read_request(from, &repr, remote_addr, rkey, length),
            Body::ReadResponse { offset, data, .. } => {
                self.on_read_response(now, from, &repr, offset, data)
            }
            Body::Ack => self.on_ack(now, from, &repr),
            Body::SelectiveAck { base, bitmap } => self.on_sack(now, from, &repr, base, bitmap),
            Body::Nack { syndrome, .. } => self.on_nack(now, from, &repr, syndrome),
            Body::Completion { .. } => self.on_completion_notice(now, from, &repr),
            Body::DataArrived {
                addr,
                length,
                immediate,
            } => self.on_data_arrived(now, from, &repr, addr, length, immediate),
            Body::Rts(rdv) => self.on_control(now, from, &repr, Control::Rts(rdv)),
            Body::Cts(rdv) => self.on_control(now, from, &repr, Control::Cts(rdv)),
            Body::Fin { protocol, tag, seq } => {
                self.on_control(now, from, &repr, Control::Fin { protocol, tag, seq })
            }
            Body::Credit => self.stats.noops_received += 1,
            Body::Hello(h) => self.on_hello(now, from, &repr, h),
        }
    }

    /// Compares a packet's epoch with the newest `from` has shown. An older
    /// epoch is a packet of the peer's previous life: dropped (`false`). A
    /// newer one means the peer restarted: everything remembered about its
    /// previous life is forgotten before the packet is processed.
    fn check_epoch(&mut self, now: Instant, from: NodeAddr, epoch: u32) -> bool {
        match self.peer_epochs.get(&from).copied() {
            Some(known) if known == epoch => true,
            Some(known) if epoch_newer(epoch, known) => {
                self.peer_epochs.insert(from, epoch);
                self.forget_peer(now, from, epoch);
                true
            }
            Some(_) => {
                self.stats.stale_epoch += 1;
                false
            }
            None => {
                if self.peer_epochs.len() >= MAX_PEERS {
                    self.stats.epoch_peers_overflow += 1;
                } else {
                    self.peer_epochs.insert(from, epoch);
                }
                true
            }
        }
    }

    /// The boot epoch `peer` last showed, once it has sent a valid packet.
    pub fn peer_epoch(&self, peer: NodeAddr) -> Option<u32> {
        self.peer_epochs.get(&peer).copied()
    }

    /// `peer` restarted with `epoch`: its half-received operations, escaped
    /// packets and tombstones belong to a life that is over (its new life
    /// numbers messages from scratch, so an old tombstone would swallow a new
    /// message), and the requests still running toward it name memory that
    /// no longer exists: they fail with [`WcError::PeerRestarted`].
    fn forget_peer(&mut self, now: Instant, peer: NodeAddr, epoch: u32) {
        self.stats.peer_restarts += 1;
        for key in self.registry.keys_from(peer) {
            self.drop_entry(key);
        }
        for (id, e) in self.escape.take_from(peer) {
            self.timers.remove(&(e.deadline, Timer::Escape(id)));
        }
        let sacks: Vec<OpKey> = self
            .sacks
            .keys()
            .filter(|k| k.from == peer)
            .copied()
            .collect();
        for key in sacks {
            if let Some(p) = self.sacks.remove(&key) {
                self.timers.remove(&(p.deadline, Timer::Sack(key)));
            }
        }
        self.tombstones.forget_peer(peer);
        self.credits_seen.remove(&peer);
        self.replies.retain(|r| r.to != peer);
        let doomed: Vec<WrId> = self
            .requests
            .iter()
            .filter(|(_, r)| r.req.dst == peer && r.req.kind != WrKind::Recv)
            .map(|(w, _)| *w)
            .collect();
        for wr in doomed {
            self.fail_request(now, wr, WcError::PeerRestarted);
        }
        self.events.push_back(Event::PeerRestarted {
            peer,
            epoch,
            at: now,
        });
    }

    fn header_reply(from: NodeAddr, r: &Repr<'_>, body: ReplyBody) -> Reply {
        Reply {
            to: from,
            src_ep: r.dst_ep,
            dst_ep: r.src_ep,
            op_num: r.op_num,
            msg_id: r.msg_id,
            seg_index: r.seg_index,
            seg_count: r.seg_count,
            body,
        }
    }

    fn push_reply(&mut self, reply: Reply) -> bool {
        if self.replies.len() >= self.cfg.transmit_queue_capacity {
            self.stats.tx_queue_overflow += 1;
            return false;
        }
        self.replies.push_back(reply);
        self.replies_peak = self.replies_peak.max(self.replies.len());
        true
    }

    fn nack(&mut self, from: NodeAddr, r: &Repr<'_>, syndrome: Syndrome, detail: u32) {
        *self.stats.nacks_sent.entry(syndrome).or_default() += 1;
        self.push_reply(Nic::header_reply(
            from,
            r,
            ReplyBody::Nack { syndrome, detail },
        ));
    }

    /// Acknowledges a data packet: at once, or coalesced into a SACK.
    fn ack(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>) {
        match self.cfg.ack_mode {
            AckMode::PerPacket => {
                self.push_reply(Nic::header_reply(from, r, ReplyBody::Ack));
            }
            AckMode::Selective { delay } => {
                let key = OpKey {
                    from,
                    src_ep: r.src_ep,
                    msg_id: r.msg_id,
                };
                let pending = self.sacks.entry(key).or_insert_with(|| PendingSack {
                    src_ep: r.dst_ep,
                    seg_count: r.seg_count,
                    indices: BTreeSet::new(),
                    deadline: now + delay,
                });
                pending.indices.insert(r.seg_index);
                let deadline = pending.deadline;
                let fresh = pending.indices.len() == 1;
                if self.sacks.len() > self.cfg.registry_capacity {
                    // Bound the pending set: send this one now.
                    self.flush_sack(key);
                } else if fresh {
                    self.timers.insert((deadline, Timer::Sack(key)));
                }
            }
        }
    }

    fn flush_sack(&mut self, key: OpKey) {
        let Some(p) = self.sacks.remove(&key) else {
            return;
        };
        self.timers.remove(&(p.deadline, Timer::Sack(key)));
        let mut words: BTreeMap<u32, u64> = BTreeMap::new();
        for i in p.indices {
            *words.entry(i / 64 * 64).or_default() |= 1u64 << (i % 64);
        }
        for (base, bitmap) in words {
            self.push_reply(Reply {
                to: key.from,
                src_ep: p.src_ep,
                dst_ep: key.src_ep,
                op_num: 0,
                msg_id: key.msg_id,
                seg_index: base,
                seg_count: p.seg_count,
                body: ReplyBody::Sack { base, bitmap },
            });
        }
    }

    /// WRITE or SEND data: apply it to its registered operation, register
    /// the operation, or park the packet in the escape channel.
    fn on_data(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>, bytes: &[u8]) {
        if r.seg_count == 0
            || r.seg_index >= r.seg_count
            || u64::from(r.seg_count) > self.cfg.max_packets_per_op()
        {
            self.stats.rx_invalid += 1;
            self.nack(from, r, Syndrome::InvalidRequest, r.seg_count);
            return;
        }
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        if self.registry.contains(&key) {
            self.apply(now, key, r);
            return;
        }
        if self.tombstones.contains(&key) {
            // A late copy of a completed operation: never write again.
            self.stats.stale_dropped += 1;
            self.ack(now, from, r);
            return;
        }
        let described = match r.body {
            Body::Write { total_len, .. } => total_len != 0,
            _ => true,
        };
        let can_register = r.flags.contains(Flags::FIRST)
            || (self.cfg.registration == RegistrationMode::SelfDescribing && described);
        if can_register {
            if self.register_op(now, key, r) {
                self.apply(now, key, r);
                self.drain_escape(now, key);
            }
            return;
        }
        let deadline = now + self.cfg.escape_timeout;
        match self.escape.push(Escaped {
            key,
            datagram: bytes.to_vec(),
            deadline,
        }) {
            Ok(id) => {
                self.stats.escape_buffered += 1;
                self.timers.insert((deadline, Timer::Escape(id)));
            }
            Err(_) => self.stats.escape_overflow += 1,
        }
    }

    /// Registers an operation: checks the target (memory or a posted
    /// receive buffer) and creates its registry entry with a fresh mask.
    fn register_op(&mut self, now: Instant, key: OpKey, r: &Repr<'_>) -> bool {
        if self.registry.is_full() {
            self.stats.registry_full += 1;
            self.nack(key.from, r, Syndrome::ReceiverNotReady, 0);
            return false;
        }
        let (target, total_len) = match r.body {
            Body::Write {
                remote_addr,
                rkey,
                total_len,
                ..
            } => {
                if r.flags.contains(Flags::FIRST) {
                    // The FIRST packet names the whole range: refuse early.
                    if let Err(s) = self.memory.check(
                        MrKey(rkey),
                        remote_addr,
                        u64::from(total_len),
                        Use::RemoteWrite,
                    ) {
                        self.nack(key.from, r, s, rkey);
                        return false;
                    }
                }
                (
                    Target::Write {
                        rkey: MrKey(rkey),
                        lo: remote_addr,
                    },
                    u64::from(total_len),
                )
            }
            Body::Send { total_len, .. } => {
                let Some(buf) = self
                    .recv_queues
                    .get(&r.dst_ep)
                    .and_then(|q| q.front())
                    .copied()
                else {
                    self.nack(key.from, r, Syndrome::ReceiverNotReady, 0);
                    return false;
                };
                if u64::from(total_len) > buf.len {
                    self.nack(key.from, r, Syndrome::OutOfBounds, total_len);
                    return false;
                }
                if let Some(q) = self.recv_queues.get_mut(&r.dst_ep) {
                    q.pop_front();
                }
                (
                    Target::Send {
                        recv: buf.wr,
                        mr: buf.mr,
                        addr: buf.addr,
                        cap: buf.len,
                    },
                    u64::from(total_len),
                )
            }
            _ => return false,
        };
        let deadline = now + self.cfg.registry_timeout;
        self.registry.insert(
            key,
            Entry {
                target,
                mask: Mask::new(r.seg_count),
                dst_ep: r.dst_ep,
                total_len,
                received: 0,
                deadline,
            },
        );
        self.timers.insert((deadline, Timer::Registry(key)));
        true
    }

    /// Applies a data packet to its registered operation.
    fn apply(&mut self, now: Instant, key: OpKey, r: &Repr<'_>) {
        let Some(entry) = self.registry.get_mut(&key) else {
            return;
        };
        if r.seg_count != entry.mask.count() {
            self.stats.rx_invalid += 1;
            self.nack(key.from, r, Syndrome::InvalidRequest, r.seg_count);
            return;
        }
        if entry.mask.is_set(r.seg_index) {
            self.stats.dup_dropped += 1;
            self.ack(now, key.from, r);
            return;
        }
        let target = entry.target;
        let result = match (target, r.body) {
            (
                Target::Write { rkey, .. },
                Body::Write {
                    remote_addr, data, ..
                },
            ) => self
                .memory
                .write(rkey, remote_addr, data, Use::RemoteWrite)
                .map(|_| (remote_addr, data.len())),
            (Target::Send { mr, addr, cap, .. }, Body::Send { offset, data, .. }) => {
                if u64::from(offset) + data.len() as u64 > cap {
                    Err(Syndrome::OutOfBounds)
                } else {
                    self.memory
                        .write(mr, addr + u64::from(offset), data, Use::LocalWrite)
                        .map(|_| (addr, data.len()))
                }
            }
            _ => Err(Syndrome::InvalidRequest),
        };
        let (addr, n) = match result {
            Ok(v) => v,
            Err(s) => {
                let detail = match target {
                    Target::Write { rkey, .. } => rkey.0,
                    Target::Send { .. } => 0,
                };
                self.nack(key.from, r, s, detail);
                self.drop_entry(key);
                return;
            }
        };
        let Some(entry) = self.registry.get_mut(&key) else {
            return;
        };
        entry.mask.set(r.seg_index);
        entry.received += n as u64;
        if let Target::Write { rkey, lo } = entry.target {
            entry.target = Target::Write {
                rkey,
                lo: lo.min(addr),
            };
        }
        let full = entry.mask.is_full();
        let old = entry.deadline;
        let new = now + self.cfg.registry_timeout;
        entry.deadline = new;
        self.timers.remove(&(old, Timer::Registry(key)));
        self.timers.insert((new, Timer::Registry(key)));
        self.ack(now, key.from, r);
        if full {
            self.complete_receive(now, key, r);
        }
    }

    /// The mask is full: the receiver completes now, one round trip before
    /// the sender could tell it, and notifies the sender.
    fn complete_receive(&mut self, now: Instant, key: OpKey, r: &Repr<'_>) {
        let Some(entry) = self.registry.remove(&key) else {
            return;
        };
        self.timers.remove(&(entry.deadline, Timer::Registry(key)));
        if self.tombstones.insert(key) {
            self.stats.tombstone_evictions += 1;
        }
        self.stats.receiver_completions += 1;
        match entry.target {
            Target::Write { lo, .. } => self.events.push_back(Event::WriteReceived {
                from: key.from,
                ep: entry.dst_ep,
                msg_id: key.msg_id,
                addr: lo,
                len: entry.received,
                at: now,
            }),
            Target::Send { recv, .. } => {
                self.stats.completed += 1;
                self.events.push_back(Event::Completed {
                    wr: recv,
                    kind: WrKind::Recv,
                    len: entry.received,
                    result: Ok(()),
                    at: now,
                });
            }
        }
        self.flush_sack(key);
        self.push_reply(Reply {
            to: key.from,
            src_ep: entry.dst_ep,
            dst_ep: key.src_ep,
            op_num: 0,
            msg_id: key.msg_id,
            seg_index: 0,
            seg_count: r.seg_count,
            body: ReplyBody::Completion {
                len: entry.received as u32,
            },
        });
    }

    /// Removes an entry that failed; a SEND's receive buffer goes back to
    /// the front of its queue (nothing the host posted is lost).
    fn drop_entry(&mut self, key: OpKey) {
        let Some(entry) = self.registry.remove(&key) else {
            return;
        };
        self.timers.remove(&(entry.deadline, Timer::Registry(key)));
        if let Target::Send {
            recv,
            mr,
            addr,
            cap,
        } = entry.target
        {
            self.recv_queues
                .entry(entry.dst_ep)
                .or_default()
                .push_front(RecvBuf {
                    wr: recv,
                    mr,
                    addr,
                    len: cap,
                });
        }
    }

    fn expire_registry(&mut self, key: OpKey) {
        if self.registry.contains(&key) {
            self.stats.registry_expired += 1;
            self.drop_entry(key);
        }
    }

    /// Applies every escaped packet of a newly registered operation.
    fn drain_escape(&mut self, now: Instant, key: OpKey) {
        for (id, e) in self.escape.take(&key) {
            self.timers.remove(&(e.deadline, Timer::Escape(id)));
            self.stats.escape_drained += 1;
            if let Ok(r) = Repr::parse_bytes(&e.datagram) {
                if self.registry.contains(&key) {
                    self.apply(now, key, &r);
                } else {
                    // The operation completed or failed meanwhile.
                    self.on_data(now, key.from, &r, &e.datagram);
                }
            }
        }
    }

    fn on_read_request(
        &mut self,
        from: NodeAddr,
        r: &Repr<'_>,
        remote_addr: u64,
        rkey: u32,
        length: u32,
    ) {
        let count = div_ceil_nonzero(u64::from(length), self.cfg.mtu_payload);
        if u64::from(count) > self.cfg.max_packets_per_op() {
            self.stats.rx_invalid += 1;
            self.nack(from, r, Syndrome::InvalidRequest, length);
            return;
        }
        if let Err(s) =
            self.memory
                .check(MrKey(rkey), remote_addr, u64::from(length), Use::RemoteRead)
        {
            self.nack(from, r, s, rkey);
            return;
        }
        if self.replies.len() + count as usize > self.cfg.transmit_queue_capacity {
            self.nack(from, r, Syndrome::ReceiverNotReady, 0);
            return;
        }
        self.stats.read_requests_served += 1;
        for seg_index in 0..count {
            self.push_reply(Reply {
                to: from,
                src_ep: r.dst_ep,
                dst_ep: r.src_ep,
                op_num: r.op_num,
                msg_id: r.msg_id,
                seg_index,
                seg_count: count,
                body: ReplyBody::ReadResponse {
                    rkey,
                    addr: remote_addr,
                    total_len: length,
                },
            });
        }
    }

    fn on_read_response(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        offset: u32,
        data: &[u8],
    ) {
        let Some(op) = self.ops.get_mut(&r.msg_id) else {
            self.stats.stale_read_responses += 1;
            return;
        };
        let (Some(mask), PktState::InFlight(opn)) = (op.read_mask.as_mut(), op.pkts[0]) else {
            self.stats.stale_read_responses += 1;
            return;
        };
        if op.kind != OpKind::ReadRequest || op.dst != from {
            self.stats.stale_read_responses += 1;
            return;
        }
        if r.seg_count != mask.count()
            || r.seg_index >= mask.count()
            || u64::from(offset) + data.len() as u64 > op.len
        {
            self.stats.rx_invalid += 1;
            return;
        }
        if mask.is_set(r.seg_index) {
            self.stats.dup_dropped += 1;
            return;
        }
        let (wr, op_offset) = (op.wr, op.offset);
        let Some(req) = self.requests.get(&wr).map(|q| q.req) else {
            return;
        };
        let at = req.local_addr + op_offset + u64::from(offset);
        if let Err(s) = self.memory.write(req.local, at, data, Use::LocalWrite) {
            self.fail_request(now, wr, WcError::LocalAccess(s));
            return;
        }
        let Some(op) = self.ops.get_mut(&r.msg_id) else {
            return;
        };
        let Some(mask) = op.read_mask.as_mut() else {
            return;
        };
        mask.set(r.seg_index);
        if mask.is_full() {
            self.ack_packet(now, opn, false);
            return;
        }
        // Progress: the READ request's deadline restarts.
        let rto = self.rtt_to(from);
        if let Some(inf) = self.op_table.get_mut(opn) {
            if let Some(d) = inf.deadline {
                let new = now + rto.backoff(inf.retries);
                inf.deadline = Some(new);
                self.timers.remove(&(d, Timer::Retransmit(opn)));
                self.timers.insert((new, Timer::Retransmit(opn)));
            }
        }
    }

    /// The outstanding packet an ACK or NACK names, if the number is
    /// current and matches the packet's message and segment.
    fn match_op(&self, from: NodeAddr, r: &Repr<'_>) -> Option<OpNumber> {
        let opn = OpNumber(r.op_num);
        let inf = self.op_table.get(opn)?;
        let op = self.ops.get(&inf.msg_id)?;
        (inf.msg_id == r.msg_id && inf.seg == r.seg_index && op.dst == from).then_some(opn)
    }

    fn on_ack(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>) {
        match self.match_op(from, r) {
            Some(opn) => self.ack_packet(now, opn, true),
            None => self.stats.stale_acks += 1,
        }
    }

    fn on_sack(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>, base: u32, bitmap: u64) {
        let Some(op) = self.ops.get(&r.msg_id).filter(|op| op.dst == from) else {
            self.stats.stale_acks += 1;
            return;
        };
        let acked: Vec<OpNumber> = (0..64u32)
            .filter(|b| bitmap & (1u64 << b) != 0)
            .filter_map(|b| base.checked_add(b))
            .filter_map(|i| match op.pkts.get(i as usize) {
                Some(PktState::InFlight(opn)) => Some(*opn),
                _ => None,
            })
            .collect();
        for opn in acked {
            self.ack_packet(now, opn, true);
        }
    }

    fn on_nack(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>, syndrome: Syndrome) {
        let Some(opn) = self.match_op(from, r) else {
            self.stats.stale_acks += 1;
            return;
        };
        *self.stats.nacks_received.entry(syndrome).or_default() += 1;
        if syndrome == Syndrome::ReceiverNotReady {
            // Not fatal: send again, after rnr_delay (at once if zero). A
            // packet already waiting to go again is not queued twice.
            if self
                .op_table
                .get(opn)
                .is_some_and(|inf| inf.deadline.is_none())
            {
                return;
            }
            if !self.count_retry(now, opn) {
                return;
            }
            let delay = self.cfg.rnr_delay;
            let Some(inf) = self.op_table.get_mut(opn) else {
                return;
            };
            if let Some(d) = inf.deadline.take() {
                self.timers.remove(&(d, Timer::Retransmit(opn)));
            }
            if delay.0 == 0 {
                self.retransmit_queue.push_back(opn);
            } else {
                inf.deadline = Some(now + delay);
                self.timers.insert((now + delay, Timer::RnrRetry(opn)));
            }
            return;
        }
        let wr = self
            .op_table
            .get(opn)
            .and_then(|inf| self.ops.get(&inf.msg_id))
            .map(|op| op.wr);
        if let Some(wr) = wr {
            self.fail_request(now, wr, WcError::Remote(syndrome));
        }
    }

    /// The receiver's registry completed the operation: everything still
    /// outstanding of it is acknowledged at once (no RTT sample).
    fn on_completion_notice(&mut self, now: Instant, from: NodeAddr, r: &Repr<'_>) {
        let Some(op) = self.ops.get(&r.msg_id) else {
            return;
        };
        if op.dst != from
            || !matches!(op.kind, OpKind::Write | OpKind::Send)
            || op.next_unsent < op.seg_count
        {
            return;
        }
        self.stats.completion_notices += 1;
        let outstanding: Vec<OpNumber> = op
            .pkts
            .iter()
            .filter_map(|p| match p {
                PktState::InFlight(o) => Some(*o),
                _ => None,
            })
            .collect();
        for opn in outstanding {
            self.ack_packet(now, opn, false);
        }
    }

    fn on_data_arrived(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        addr: u64,
        length: u32,
        immediate: u32,
    ) {
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        if self.first_sighting(key) {
            self.events.push_back(Event::DataArrived {
                from,
                addr,
                len: u64::from(length),
                immediate,
                at: now,
            });
        }
        self.push_reply(Nic::header_reply(from, r, ReplyBody::Ack));
    }

    /// Emits a reply; READ responses read memory now (a region deregistered
    /// meanwhile sends nothing: the requester retries and is NACKed).
    fn build_reply(&mut self, reply: &Reply, buf: &mut Vec<u8>) -> Option<Transmit> {
        let mtu = u64::from(self.cfg.mtu_payload);
        let mut flags = Flags::empty();
        let body = match reply.body {
            ReplyBody::Ack => Body::Ack,
            ReplyBody::Sack { base, bitmap } => Body::SelectiveAck { base, bitmap },
            ReplyBody::Nack { syndrome, detail } => Body::Nack { syndrome, detail },
            ReplyBody::Credit => Body::Credit,
            ReplyBody::Hello { reply, nonce } => {
                let (region_addr, region_len, rkey) = self
                    .announced
                    .and_then(|k| self.memory.region(k).map(|r| (r.base, r.len, k.0)))
                    .unwrap_or((0, 0, 0));
                Body::Hello(udrma_proto::Hello {
                    reply,
                    max_payload: self.cfg.mtu_payload.min(u32::from(u16::MAX)) as u16,
                    nonce,
                    region_addr,
                    region_len,
                    rkey,
                })
            }
            ReplyBody::Completion { len } => Body::Completion {
                status: 0,
                length: len,
            },
            ReplyBody::ReadResponse {
                rkey,
                addr,
                total_len,
            } => {
                let offset = u64::from(reply.seg_index) * mtu;
                let len = u64::from(total_len).saturating_sub(offset).min(mtu);
                let data = self
                    .memory
                    .read(MrKey(rkey), addr + offset, len, Use::RemoteRead)
                    .ok()?;
                flags.set(Flags::FIRST, reply.seg_index == 0);
                flags.set(Flags::LAST, reply.seg_index + 1 == reply.seg_count);
                Body::ReadResponse {
                    offset: offset as u32,
                    total_len,
                    data,
                }
            }
        };
        let credits = self.advertised.get(&reply.to).copied();
        if let Some(c) = credits {
            self.credits_carried.insert(reply.to, c);
        }
        flags.set(Flags::CREDITS_VALID, credits.is_some());
        let repr = Repr {
            flags,
            src_ep: reply.src_ep,
            dst_ep: reply.dst_ep,
            op_num: reply.op_num,
            msg_id: reply.msg_id,
            seg_index: reply.seg_index,
            seg_count: reply.seg_count,
            credits: credits.unwrap_or(0),
            epoch: self.cfg.epoch,
            body,
        };
        repr.emit_vec(buf).ok()?;
        Some(Transmit {
            dst: reply.to,
            len: buf.len(),
            src_port: self.cfg.src_port,
        })
    }
}
