//! The reduce unit at work: posting collective descriptors, counting
//! children's REDUCE packets, firing triggered descriptors through the ALU,
//! broadcasting results, and acknowledging and retransmitting reduce
//! packets (see [`crate::reduce`] for the model).

use udrma_proto::time::Duration;
use udrma_proto::{Opcode, ReduceHeader};

use super::*;
use crate::reduce::alu::{self, Operand};
use crate::reduce::state::{AckOut, ChunkKey, ChunkState, Coll, OutKey, Outgoing, Shape};
use crate::reduce::{elements_per_chunk, CollectiveKind, ReducePost, MAX_FAN_IN};

impl Nic {
    /// Posts this node's descriptor for one collective. From here on the
    /// NIC runs its part of the tree without the host; the request
    /// completes ([`WrKind::Reduce`]) when this node holds the result (for
    /// a reduce, at non-root nodes: when the parent has acknowledged its
    /// operand). The result is written to `post.result` first.
    pub fn post_reduce(&mut self, now: Instant, post: ReducePost) -> Result<WrId, PostError> {
        let per_chunk = self.check_reduce(&post)?;
        let chunks = (post.count as usize).div_ceil(per_chunk) as u32;
        let free = self
            .cfg
            .reduce_chunks
            .saturating_sub(self.reduce.chunks.len());
        if chunks as usize > free {
            return Err(PostError::QueueFull(self.reduce.chunks.len()));
        }
        let id = (post.ep, post.tree, post.seq);
        if self.reduce.by_coll.contains_key(&id) {
            return Err(PostError::BadReduce(
                "this collective (endpoint, tree, sequence number) is already posted",
            ));
        }
        self.reduce.used = true;
        let wr = WrId(self.next_wr);
        self.next_wr += 1;
        self.stats.posted += 1;
        self.reduce.by_coll.insert(id, wr);
        let coll = Coll {
            post,
            chunks,
            per_chunk,
            chunks_done: 0,
            chunks_retired: 0,
            completed: false,
        };
        let fan_in = coll.post.children.len();
        let root_data = coll.post.parent.is_none() && !coll.post.kind.goes_up();
        let mut keys = Vec::with_capacity(chunks as usize);
        for c in 0..chunks {
            let range = coll.range(c);
            let shape = Shape {
                op: coll.post.op,
                ty: coll.post.ty,
                count: range.len() as u8,
                first: range.start as u32,
                chunks,
            };
            let key = ChunkKey {
                ep: id.0,
                tree: id.1,
                seq: id.2,
                chunk: c,
            };
            let st = self.reduce.chunks.entry(key).or_default();
            if let Some(t) = st.expire_at.take() {
                self.timers.remove(&(t, Timer::ReduceExpire(key)));
            }
            if st.shape.is_some_and(|s| s != shape) || (st.counter > 0 && st.slots.len() != fan_in)
            {
                // Arrivals that disagree with the host's own descriptor
                // were never this collective's: drop them.
                self.stats.reduce_invalid += u64::from(st.counter) + u64::from(st.result.is_some());
                *st = ChunkState::default();
            }
            st.wr = Some(wr);
            st.shape = Some(shape);
            st.slots.resize(fan_in, None);
            if root_data {
                st.result = Some(coll.post.operand.slice(range));
            }
            keys.push(key);
        }
        self.reduce.peak = self.reduce.peak.max(self.reduce.chunks.len());
        self.reduce.colls.insert(wr, coll);
        for key in keys {
            self.reduce_progress(now, key);
        }
        Ok(wr)
    }

    /// Checks a descriptor; returns the elements per chunk.
    fn check_reduce(&self, p: &ReducePost) -> Result<usize, PostError> {
        let bad = |why| Err(PostError::BadReduce(why));
        if !p.op.applies_to(p.ty) {
            return bad("the operation is not defined on the element type");
        }
        if p.count == 0 {
            return bad("a collective needs at least one element");
        }
        let per_chunk = elements_per_chunk(p.op, p.ty, self.cfg.reduce_data_limit);
        if (p.count as usize).div_ceil(per_chunk) > self.cfg.reduce_chunks {
            return bad("the vector needs more chunks than the NIC tracks (reduce_chunks)");
        }
        let carries = p.kind.goes_up() || p.parent.is_none();
        if carries && p.operand.len() != p.count as usize {
            return bad("the operand must hold `count` elements");
        }
        if !carries && !p.operand.is_empty() {
            return bad("a broadcast's non-root nodes give no operand");
        }
        let want_locs = if p.op.has_locations() && carries {
            p.operand.len()
        } else {
            0
        };
        if p.operand.locs.len() != want_locs {
            return bad("MINLOC/MAXLOC operands carry one location per element, others none");
        }
        if p.children.len() > MAX_FAN_IN {
            return bad("a node may have at most 255 children");
        }
        if p.children.contains(&self.addr) || p.parent.is_some_and(|q| q.addr == self.addr) {
            return bad("a node cannot be its own parent or child");
        }
        if p.parent
            .is_some_and(|q| q.fan_in == 0 || u16::from(q.branch) >= q.fan_in)
        {
            return bad("the branch must be below the parent's fan-in");
        }
        if let Some((key, addr)) = p.result.filter(|_| p.gets_result()) {
            let w = p.ty.width().unwrap_or(8) + if p.op.has_locations() { 4 } else { 0 };
            let len = u64::from(p.count) * w as u64;
            if self.memory.check(key, addr, len, Use::LocalWrite).is_err() {
                return bad(
                    "the result buffer is not registered writable memory of the vector's size",
                );
            }
        }
        Ok(per_chunk)
    }

    /// Moves one chunk on as far as it can go: fire the up descriptor,
    /// deliver the result, send the broadcast, complete and retire.
    fn reduce_progress(&mut self, now: Instant, key: ChunkKey) {
        let Some(st) = self.reduce.chunks.get(&key) else {
            return;
        };
        let Some(wr) = st.wr else {
            return;
        };
        let Some(coll) = self.reduce.colls.get(&wr) else {
            return;
        };
        let range = coll.range(key.chunk);
        let chunks = coll.chunks;
        let post = coll.post.clone();
        let post = &post;
        let kind = post.kind;
        let fan_in = post.children.len();
        let c = self.cfg.cost;
        let mut sends: Vec<(OutKey, ReduceHeader, Operand, Duration)> = Vec::new();
        let mut root_work = Duration::ZERO;
        let st = self.reduce.chunks.get_mut(&key).expect("looked up above");
        let hdr = |branch: u8, fan_in: usize, level: u8| ReduceHeader {
            op: post.op,
            ty: post.ty,
            count: range.len() as u8,
            branch,
            fan_in: fan_in as u16,
            tree: key.tree,
            level,
            first: range.start as u32,
        };
        if kind.goes_up() && !st.fired && st.counter as usize == fan_in {
            // The triggered descriptor fires: own operand first, then the
            // children's in branch order.
            st.fired = true;
            self.stats.reduce_fired += 1;
            let mut acc = post.operand.slice(range.clone());
            for x in st.slots.iter().flatten() {
                // Shapes were checked on arrival.
                let _ = alu::combine(post.op, post.ty, &mut acc, x);
            }
            self.stats.alu_operands += fan_in as u64;
            // The ALU took each operand as it arrived; what it has not
            // finished yet delays the packet.
            let mut work = c.reduce_trigger + st.alu_free.saturating_since(now);
            if fan_in == 0 {
                // A leaf fires at once: the host's doorbell and the NIC's
                // descriptor fetch are still on the path.
                work = work + c.doorbell + c.descriptor_fetch;
            }
            match post.parent {
                Some(parent) => {
                    let to = OutKey {
                        to: parent.addr,
                        down: false,
                        key,
                    };
                    let h = hdr(parent.branch, usize::from(parent.fan_in), post.level);
                    sends.push((to, h, acc, work));
                }
                None => {
                    // The root's broadcast leaves once the ALU is done.
                    root_work = work;
                    st.result = Some(acc);
                }
            }
        }
        if !st.delivered {
            if let Some(result) = st.result.clone() {
                st.delivered = true;
                if write_result(&mut self.memory, post, range.start, &result) {
                    self.stats.reduce_results += 1;
                }
                if kind.goes_down() && fan_in > 0 {
                    self.stats.reduce_fired += 1;
                    // Farthest child first: its subtree is the largest,
                    // so it has the most left to do (MPICH's binomial
                    // broadcast sends in this order too). Children are
                    // listed nearest first.
                    for (n, (i, child)) in post.children.iter().enumerate().rev().enumerate() {
                        let to = OutKey {
                            to: *child,
                            down: true,
                            key,
                        };
                        let work = root_work + c.reduce_trigger.saturating_mul(n as u64 + 1);
                        sends.push((to, hdr(i as u8, fan_in, post.level), result.clone(), work));
                    }
                }
            }
        }
        let wr_post_root = post.parent.is_none();
        st.pending_out += sends.len() as u32;
        let (out, tx) = (&mut self.reduce.out, &mut self.reduce.tx);
        queue_sends(out, tx, now, wr, chunks, sends);
        let finished_here = match kind {
            CollectiveKind::Reduce if wr_post_root => st.delivered,
            CollectiveKind::Reduce => st.fired && st.pending_out == 0,
            _ => st.delivered,
        };
        let mut complete = false;
        if finished_here && !st.done {
            st.done = true;
            let coll = self.reduce.colls.get_mut(&wr).expect("looked up above");
            coll.chunks_done += 1;
            complete = coll.chunks_done == coll.chunks && !coll.completed;
        }
        let retire = st.done && st.pending_out == 0 && (!kind.goes_up() || st.fired);
        if complete {
            self.finish_reduce(now, wr, Ok(()));
        }
        if retire {
            self.retire_chunk(key, wr);
        }
    }

    /// Raises the collective's completion (once).
    fn finish_reduce(&mut self, now: Instant, wr: WrId, result: Result<(), WcError>) {
        let Some(coll) = self.reduce.colls.get_mut(&wr) else {
            return;
        };
        if coll.completed {
            return;
        }
        coll.completed = true;
        let w =
            coll.post.ty.width().unwrap_or(8) + if coll.post.op.has_locations() { 4 } else { 0 };
        let len = u64::from(coll.post.count) * w as u64;
        if result.is_ok() {
            self.stats.completed += 1;
        } else {
            self.stats.failed += 1;
        }
        self.events.push_back(Event::Completed {
            wr,
            kind: WrKind::Reduce,
            len,
            result,
            at: now,
        });
    }

    /// Forgets a finished chunk (remembering its key against duplicates).
    fn retire_chunk(&mut self, key: ChunkKey, wr: WrId) {
        self.reduce.chunks.remove(&key);
        self.reduce.finish(key, self.cfg.reduce_chunks * 4);
        let Some(coll) = self.reduce.colls.get_mut(&wr) else {
            return;
        };
        coll.chunks_retired += 1;
        if coll.chunks_retired == coll.chunks {
            let p = &coll.post;
            self.reduce.by_coll.remove(&(p.ep, p.tree, p.seq));
            self.reduce.colls.remove(&wr);
        }
    }

    /// Fails a collective: its chunks and packets are dropped.
    fn fail_reduce(&mut self, now: Instant, wr: WrId, err: WcError) {
        self.finish_reduce(now, wr, Err(err));
        let keys: Vec<ChunkKey> = self
            .reduce
            .chunks
            .iter()
            .filter(|(_, s)| s.wr == Some(wr))
            .map(|(k, _)| *k)
            .collect();
        let outs: Vec<OutKey> = self
            .reduce
            .out
            .iter()
            .filter(|(_, o)| o.wr == wr)
            .map(|(k, _)| *k)
            .collect();
        for o in outs {
            if let Some(d) = self.reduce.out.remove(&o).and_then(|o| o.deadline) {
                self.timers.remove(&(d, Timer::ReduceRetransmit(o)));
            }
        }
        for k in keys {
            if let Some(st) = self.reduce.chunks.get_mut(&k) {
                st.pending_out = 0;
                st.done = true;
                st.fired = true;
            }
            self.retire_chunk(k, wr);
        }
    }

    /// A REDUCE (up) or REDUCE_BCAST (down) from `from`.
    pub(super) fn on_reduce(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        hdr: ReduceHeader,
        data: &[u8],
        down: bool,
    ) {
        self.reduce.used = true;
        let limit = elements_per_chunk(hdr.op, hdr.ty, self.cfg.reduce_data_limit);
        let operand = alu::decode(&hdr, data);
        let valid = hdr.op.applies_to(hdr.ty)
            && hdr.count >= 1
            && usize::from(hdr.count) <= limit
            && r.seg_count >= 1
            && r.seg_index < r.seg_count
            && hdr.fan_in >= 1
            && u16::from(hdr.branch) < hdr.fan_in
            && usize::from(hdr.fan_in) <= MAX_FAN_IN;
        let Some(operand) = operand.filter(|_| valid) else {
            self.stats.reduce_invalid += 1;
            return;
        };
        let key = ChunkKey {
            ep: r.dst_ep,
            tree: hdr.tree,
            seq: r.msg_id,
            chunk: r.seg_index,
        };
        let shape = Shape {
            op: hdr.op,
            ty: hdr.ty,
            count: hdr.count,
            first: hdr.first,
            chunks: r.seg_count,
        };
        let opcode = if down {
            Opcode::ReduceBcast
        } else {
            Opcode::Reduce
        };
        if self.reduce.finished.contains(&key) {
            self.stats.reduce_duplicates += 1;
            self.reduce_ack(from, r, opcode, hdr);
            return;
        }
        if !self.reduce.chunks.contains_key(&key) {
            if self.reduce.chunks.len() >= self.cfg.reduce_chunks {
                // No room: unacknowledged, so the sender tries again.
                self.stats.reduce_refused += 1;
                return;
            }
            let expire = now + self.cfg.registry_timeout;
            self.reduce.chunks.insert(
                key,
                ChunkState {
                    shape: Some(shape),
                    expire_at: Some(expire),
                    ..ChunkState::default()
                },
            );
            self.timers.insert((expire, Timer::ReduceExpire(key)));
            self.reduce.peak = self.reduce.peak.max(self.reduce.chunks.len());
        }
        let st = self.reduce.chunks.get_mut(&key).expect("present");
        if st.shape != Some(shape) {
            self.stats.reduce_invalid += 1;
            return;
        }
        if down {
            if st.result.is_some() {
                self.stats.reduce_duplicates += 1;
            } else {
                st.result = Some(operand);
            }
        } else {
            if st.wr.is_none() && st.counter == 0 && st.slots.is_empty() {
                st.slots.resize(usize::from(hdr.fan_in), None);
            }
            if st.slots.len() != usize::from(hdr.fan_in) {
                // The child thinks its parent has another fan-in.
                self.stats.reduce_invalid += 1;
                return;
            }
            let slot = &mut st.slots[usize::from(hdr.branch)];
            if slot.is_some() {
                self.stats.reduce_duplicates += 1;
            } else {
                *slot = Some(operand);
                st.counter += 1;
                st.alu_free = st.alu_free.max(now) + self.cfg.cost.alu_per_operand;
                self.stats.reduce_counted += 1;
            }
        }
        self.reduce_ack(from, r, opcode, hdr);
        self.reduce_progress(now, key);
    }

    fn reduce_ack(&mut self, from: NodeAddr, r: &Repr<'_>, acked: Opcode, hdr: ReduceHeader) {
        if self.reduce.acks.len() >= self.cfg.transmit_queue_capacity {
            self.stats.tx_queue_overflow += 1;
            return;
        }
        self.reduce.acks.push_back(AckOut {
            to: from,
            src_ep: r.dst_ep,
            dst_ep: r.src_ep,
            seq: r.msg_id,
            chunk: r.seg_index,
            chunks: r.seg_count,
            acked,
            branch: hdr.branch,
            tree: hdr.tree,
        });
    }

    /// A REDUCE_ACK: the packet it names is delivered.
    pub(super) fn on_reduce_ack(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        acked: Opcode,
        branch: u8,
        tree: u16,
    ) {
        let key = OutKey {
            to: from,
            down: acked == Opcode::ReduceBcast,
            key: ChunkKey {
                ep: r.dst_ep,
                tree,
                seq: r.msg_id,
                chunk: r.seg_index,
            },
        };
        let matches = matches!(acked, Opcode::Reduce | Opcode::ReduceBcast)
            && self
                .reduce
                .out
                .get(&key)
                .is_some_and(|o| o.hdr.branch == branch);
        if !matches {
            self.stats.reduce_stale_acks += 1;
            return;
        }
        let o = self.reduce.out.remove(&key).expect("checked");
        self.stats.reduce_acks += 1;
        if let Some(d) = o.deadline {
            self.timers.remove(&(d, Timer::ReduceRetransmit(key)));
            if !o.retransmitted {
                let c = &self.cfg;
                self.rtt
                    .get_or_insert_with(from, || {
                        RttEstimator::new(c.rto_initial, c.rto_min, c.rto_max)
                    })
                    .on_sample(now - o.sent_at);
                self.stats.rtt_samples += 1;
            }
        }
        if let Some(st) = self.reduce.chunks.get_mut(&key.key) {
            st.pending_out = st.pending_out.saturating_sub(1);
        }
        self.reduce_progress(now, key.key);
    }

    /// A reduce packet's retransmit deadline passed.
    pub(super) fn on_reduce_timeout(&mut self, now: Instant, key: OutKey) {
        let Some(o) = self.reduce.out.get_mut(&key) else {
            return;
        };
        o.deadline = None;
        o.retries += 1;
        self.stats.timeouts += 1;
        if o.retries > self.cfg.max_retries {
            let wr = o.wr;
            self.stats.retries_exhausted += 1;
            self.fail_reduce(now, wr, WcError::RetryExceeded);
            return;
        }
        self.reduce.tx.push_back(key);
    }

    /// A chunk that arrivals created was never posted here: forget it.
    pub(super) fn on_reduce_expire(&mut self, key: ChunkKey) {
        if self.reduce.chunks.get(&key).is_some_and(|s| s.wr.is_none()) {
            self.reduce.chunks.remove(&key);
            self.stats.reduce_expired += 1;
        }
    }

    /// The next reduce packet to send: acknowledgements first.
    pub(super) fn poll_reduce(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(a) = self.reduce.acks.pop_front() {
            let repr = Repr {
                flags: Flags::empty(),
                src_ep: a.src_ep,
                dst_ep: a.dst_ep,
                op_num: 0,
                msg_id: a.seq,
                seg_index: a.chunk,
                seg_count: a.chunks,
                credits: 0,
                epoch: self.cfg.epoch,
                body: Body::ReduceAck {
                    acked: a.acked,
                    branch: a.branch,
                    tree: a.tree,
                },
            };
            repr.emit_vec(buf).ok()?;
            self.stats.control_sent += 1;
            return Some(Transmit {
                dst: a.to,
                len: buf.len(),
                elided: 0,
                src_port: self.cfg.src_port,
                nic_work: Duration::ZERO,
                leaves_in: Duration::ZERO,
            });
        }
        while let Some(key) = self.reduce.tx.pop_front() {
            let Some(o) = self.reduce.out.get(&key) else {
                continue;
            };
            if o.deadline.is_some() {
                continue;
            }
            let mut data = Vec::new();
            alu::encode(o.hdr.op, o.hdr.ty, &o.operand, &mut data);
            let retransmit = o.retries > 0;
            let body = if key.down {
                Body::ReduceBcast {
                    hdr: o.hdr,
                    data: &data,
                }
            } else {
                Body::Reduce {
                    hdr: o.hdr,
                    data: &data,
                }
            };
            let repr = Repr {
                flags: if retransmit {
                    Flags::RETRANSMIT
                } else {
                    Flags::empty()
                },
                src_ep: key.key.ep,
                dst_ep: key.key.ep,
                op_num: 0,
                msg_id: key.key.seq,
                seg_index: key.key.chunk,
                seg_count: o.chunks,
                credits: 0,
                epoch: self.cfg.epoch,
                body,
            };
            repr.emit_vec(buf).ok()?;
            let work = if retransmit { Duration::ZERO } else { o.work };
            let retries = o.retries;
            let deadline = now + self.rtt_to(key.to).backoff(retries);
            let o = self.reduce.out.get_mut(&key).expect("looked up above");
            o.sent_at = now;
            o.deadline = Some(deadline);
            o.retransmitted |= retransmit;
            self.timers.insert((deadline, Timer::ReduceRetransmit(key)));
            if retransmit {
                self.stats.reduce_retransmits += 1;
            } else {
                self.stats.reduce_sent += 1;
            }
            return Some(Transmit {
                dst: key.to,
                len: buf.len(),
                elided: 0,
                src_port: self.cfg.src_port,
                nic_work: work,
                leaves_in: work,
            });
        }
        None
    }

    /// NIC time a reduce packet's arrival costs beyond the per-packet
    /// cost: writing a result to host memory (one DMA).
    pub(super) fn reduce_receive_work(&self, r: &Repr<'_>) -> Duration {
        match r.body {
            Body::ReduceBcast { data, .. } => {
                let c = &self.cfg.cost;
                c.dma_setup + Duration::from_ps(c.dma_ps_per_byte.saturating_mul(data.len() as u64))
            }
            _ => Duration::ZERO,
        }
    }

    /// Reduce chunks tracked now, at their peak, and the limit.
    pub fn reduce_occupancy(&self) -> (usize, usize, usize) {
        (
            self.reduce.chunks.len(),
            self.reduce.peak,
            self.cfg.reduce_chunks,
        )
    }
}

/// Queues a chunk's packets to send (each waits for its NIC `work`),
/// in order.
fn queue_sends(
    out: &mut BTreeMap<OutKey, Outgoing>,
    tx: &mut VecDeque<OutKey>,
    now: Instant,
    wr: WrId,
    chunks: u32,
    sends: Vec<(OutKey, ReduceHeader, Operand, Duration)>,
) {
    for (to, h, operand, work) in sends {
        out.insert(
            to,
            Outgoing {
                wr,
                hdr: h,
                chunks,
                operand,
                sent_at: now,
                retries: 0,
                retransmitted: false,
                deadline: None,
                work,
            },
        );
        tx.push_back(to);
    }
}

/// Writes a chunk's `result` (its elements from `first` on) into the
/// host's result buffer, when this node's post gets one: the values, and
/// after all of them the locations of a MINLOC/MAXLOC. Whether it wrote.
fn write_result(
    memory: &mut MemoryTable,
    post: &ReducePost,
    first: usize,
    result: &Operand,
) -> bool {
    let Some((mkey, addr)) = post.result.filter(|_| post.gets_result()) else {
        return false;
    };
    let w = post.ty.width().unwrap_or(8) as u64;
    let vals = alu::to_host_bytes(
        post.op,
        post.ty,
        &Operand {
            values: result.values.clone(),
            locs: Vec::new(),
        },
    );
    let _ = memory.write(mkey, addr + first as u64 * w, &vals, Use::LocalWrite);
    if post.op.has_locations() {
        let locs: Vec<u8> = result.locs.iter().flat_map(|l| l.to_le_bytes()).collect();
        let _ = memory.write(
            mkey,
            addr + u64::from(post.count) * w + first as u64 * 4,
            &locs,
            Use::LocalWrite,
        );
    }
    true
}
