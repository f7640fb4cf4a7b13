//! Posting: work requests enter the descriptor ring (or the host's
//! overflow ring when it is full), with doorbell and descriptor-fetch
//! costs; receive buffers for SENDs.

use super::*;

impl Nic {
    /// Queues a WRITE, WRITE-with-notify, READ or SEND. Call
    /// [`Nic::poll_transmit`] afterwards. The request completes with exactly
    /// one [`Event::Completed`].
    ///
    /// The request takes a descriptor ring slot, or waits in the host
    /// overflow ring when the ring is full. With a nonzero cost model it
    /// joins the command queue only after the doorbell and the NIC's
    /// descriptor fetch (one at a time); [`Nic::poll_timeout`] says when.
    ///
    /// A request with a scatter-gather list ([`WorkRequest::gather`]) may
    /// carry at most `max_sge` entries, each checked like a buffer; its
    /// descriptor takes `per_sge` longer to fetch for every entry.
    pub fn post(&mut self, now: Instant, mut wr: WorkRequest) -> Result<WrId, PostError> {
        let local_use = match wr.kind {
            WrKind::Write | WrKind::WriteNotify | WrKind::Send => Some(Use::LocalRead),
            WrKind::Read => Some(Use::LocalWrite),
            WrKind::Control if wr.control.is_some() => None,
            WrKind::Control | WrKind::Recv | WrKind::Reduce => return Err(PostError::NotARequest),
        };
        if self.requests.len() >= self.cfg.command_queue_capacity {
            return Err(PostError::QueueFull(self.requests.len()));
        }
        if let Some(sgl) = &wr.sgl {
            self.check_list_len(sgl.entries().len())?;
            wr.len = sgl.len();
        }
        if let Some(u) = local_use {
            local::local_of(&wr)
                .check(&self.memory, wr.len, u)
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
        if let Some(sgl) = self.requests.get(&id).and_then(|r| r.req.sgl.as_ref()) {
            self.note_list(sgl.entries().len());
        }
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
    pub(super) fn enter_ring(&mut self, at: Instant, id: WrId) {
        if let Some(r) = self.requests.get_mut(&id) {
            r.in_ring = true;
        }
        self.ring_used += 1;
        self.ring_peak = self.ring_peak.max(self.ring_used);
        if self.cfg.cost.is_zero() {
            self.command_queue.push_back(id);
            return;
        }
        let sges = self
            .requests
            .get(&id)
            .and_then(|r| r.req.sgl.as_ref())
            .map_or(1, |l| l.entries().len().max(1));
        let fetched = self.fetch_unit.take(at, self.cfg.cost.fetch_sges(sges));
        self.timers.insert((fetched, Timer::Fetch(id)));
    }

    /// A request left the ring: refill it from the overflow ring when it
    /// fell to the low-water mark (after an interrupt).
    pub(super) fn ring_slot_freed(&mut self, now: Instant) {
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

    pub(super) fn refill(&mut self, now: Instant) {
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
        self.post_recv_at(ep, Local::Region { key: mr, addr }, len)
    }

    /// Posts a receive buffer made of the scatter list `sgl` (at most
    /// `max_sge` entries) on endpoint `ep`: a SEND's bytes fill its entries
    /// in order, without a host copy.
    pub fn post_recv_sgl(
        &mut self,
        _now: Instant,
        ep: u16,
        sgl: crate::sgl::Sgl,
    ) -> Result<WrId, PostError> {
        self.check_list_len(sgl.entries().len())?;
        let len = sgl.len();
        let n = sgl.entries().len();
        let wr = self.post_recv_at(ep, Local::List(sgl), len)?;
        self.note_list(n);
        Ok(wr)
    }

    fn check_list_len(&self, sges: usize) -> Result<(), PostError> {
        if sges > self.cfg.max_sge {
            return Err(PostError::TooManySges {
                sges,
                max: self.cfg.max_sge,
            });
        }
        Ok(())
    }

    fn note_list(&mut self, sges: usize) {
        self.lists_posted = true;
        self.stats.max_sges_posted = self.stats.max_sges_posted.max(sges as u64);
    }

    fn post_recv_at(&mut self, ep: u16, at: Local, len: u64) -> Result<WrId, PostError> {
        at.check(&self.memory, len, Use::LocalWrite)
            .map_err(PostError::LocalAccess)?;
        let queue_len = self.recv_queues.get(&ep).map_or(0, VecDeque::len);
        if queue_len >= self.cfg.recv_queue_capacity {
            return Err(PostError::QueueFull(queue_len));
        }
        let wr = self.next_wr_id();
        self.recv_queues
            .entry(ep)
            .or_default()
            .push_back(RecvBuf { wr, at, len });
        self.stats.posted += 1;
        Ok(wr)
    }

    pub(super) fn next_wr_id(&mut self) -> WrId {
        let id = WrId(self.next_wr);
        self.next_wr += 1;
        id
    }
}
