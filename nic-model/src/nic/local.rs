//! Where a request's or a receive buffer's bytes are (one region, or a
//! scatter-gather list), and the DMA work of touching them: one setup per
//! block a packet touches and, through an indirect key, the translation
//! of its table lines ([`crate::translation`]).

use super::*;
use crate::sgl::Sgl;
use crate::translation::{Lookups, TranslationCache};
use udrma_proto::time::Duration;

/// Local bytes of a posted receive buffer.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) enum Local {
    /// `[addr, ..)` under `key` (which may be an indirect key).
    Region { key: MrKey, addr: u64 },
    /// A scatter list.
    List(Sgl),
}

/// A range a packet's DMA touches: under a key (direct or indirect), or
/// in a scatter-gather list.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) enum Touch {
    /// `[addr, addr + len)` under `key`.
    Key { key: MrKey, addr: u64, len: u64 },
    /// `[offset, offset + len)` of the list.
    List { sgl: Sgl, offset: u64, len: u64 },
}

impl Local {
    pub(super) fn touch(&self, offset: u64, len: u64) -> Touch {
        match self {
            Local::Region { key, addr } => Touch::Key {
                key: *key,
                addr: addr + offset,
                len,
            },
            Local::List(sgl) => Touch::List {
                sgl: sgl.clone(),
                offset,
                len,
            },
        }
    }

    /// Writes `data` at `offset` of the buffer, checked for `u`.
    pub(super) fn store(
        &self,
        memory: &mut MemoryTable,
        offset: u64,
        data: &[u8],
        u: Use,
    ) -> Result<(), Syndrome> {
        match self {
            Local::Region { key, addr } => memory.write(*key, addr + offset, data, u),
            Local::List(sgl) => memory.scatter(sgl, offset, data, u),
        }
    }

    /// Bytes in the buffer.
    pub(super) fn check(&self, memory: &MemoryTable, len: u64, u: Use) -> Result<(), Syndrome> {
        match self {
            Local::Region { key, addr } => memory.check(*key, *addr, len, u),
            Local::List(sgl) => {
                for e in sgl.entries() {
                    memory.check(e.key, e.addr, e.len, u)?;
                }
                Ok(())
            }
        }
    }
}

/// A request's local bytes as a [`Local`].
pub(super) fn local_of(req: &WorkRequest) -> Local {
    match &req.sgl {
        Some(sgl) => Local::List(sgl.clone()),
        None => Local::Region {
            key: req.local,
            addr: req.local_addr,
        },
    }
}

/// Bytes `[offset, offset + len)` of a request's local buffer, checked for
/// `u`: a slice of memory when contiguous, else gathered into `scratch`.
pub(super) fn request_bytes<'a>(
    memory: &'a MemoryTable,
    req: &WorkRequest,
    offset: u64,
    len: u64,
    u: Use,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], Syndrome> {
    match &req.sgl {
        Some(sgl) => {
            memory.gather(sgl, offset, len, u, scratch)?;
            Ok(scratch)
        }
        None => memory.load(req.local, req.local_addr + offset, len, u, scratch),
    }
}

/// What `[offset, offset + len)` of a request's local buffer touches.
pub(super) fn request_touch(req: &WorkRequest, offset: u64, len: u64) -> Touch {
    local_of(req).touch(offset, len)
}

impl Nic {
    /// Whether packets' DMA work must be worked out at all: a list or an
    /// indirect key is in use, or the cost model prices translation or
    /// receive descriptors. When not, [`Nic::receive_work`] is zero and a
    /// backend may skip it (the common case costs nothing).
    pub fn needs_dma_work(&self) -> bool {
        let c = &self.cfg.cost;
        self.uses_layouts()
            || c.prices_translation()
            || c.recv_fetch > Duration::ZERO
            || (self.reduce.used && !c.is_zero())
    }

    /// Whether any scatter-gather list or indirect key could be touched.
    pub fn uses_layouts(&self) -> bool {
        self.lists_posted || self.memory.has_indirect()
    }

    /// The NIC time a packet's DMA takes beyond the fabric's per-packet
    /// cost: a setup per extra block, and the part of translation the DMA
    /// does not hide ([`CostModel::scatter_gather`]): the indirect key's
    /// table lines (its first level) and, when the cost model prices
    /// translation, the page-table lines of every block touched (its second
    /// level, and the one direct keys use too). Lookups warm or churn the
    /// translation cache. Through an indirect key each block's lookup
    /// walks the key's entries from the first to its own
    /// ([`CostModel::search`]), so a packet deep in a key of many blocks
    /// pays for every entry before its blocks.
    ///
    /// [`CostModel::scatter_gather`]: crate::CostModel::scatter_gather
    /// [`CostModel::search`]: crate::CostModel::search
    pub(super) fn dma_work(&mut self, t: Touch) -> Duration {
        let priced = self.cfg.cost.prices_translation();
        let len = match &t {
            Touch::Key { len, .. } | Touch::List { len, .. } => *len,
        };
        let mut pieces = 0usize;
        let mut steps = 0u64;
        let mut l = Lookups::default();
        let tc = &mut self.translation;
        let mut pages = |tc: &mut TranslationCache, key: MrKey, addr: u64, len: u64| {
            if priced && len > 0 {
                l.add(tc.translate_pages(key, addr, addr + (len - 1)));
            }
        };
        match t {
            Touch::Key { key, addr, len } => match self.memory.indirect(key) {
                Some(ind) => {
                    let mut span: Option<(usize, usize)> = None;
                    for p in addr
                        .checked_sub(ind.base)
                        .into_iter()
                        .flat_map(|off| ind.blocks.pieces(off, len))
                    {
                        pieces += 1;
                        steps += p.entry as u64;
                        span = Some(span.map_or((p.entry, p.entry), |(f, _)| (f, p.entry)));
                        pages(tc, p.sge.key, p.sge.addr, p.sge.len);
                    }
                    if let Some((first, last)) = span {
                        l.add(tc.translate(key, first, last));
                    }
                }
                None => {
                    pieces = 1;
                    pages(tc, key, addr, len);
                }
            },
            Touch::List { sgl, offset, len } => {
                for p in sgl.pieces(offset, len) {
                    pieces += 1;
                    pages(tc, p.sge.key, p.sge.addr, p.sge.len);
                }
            }
        }
        self.stats.translation_hits += l.hits;
        self.stats.translation_misses += l.misses;
        self.stats.translation_search_steps += steps;
        if pieces > 1 {
            self.stats.dma_pieces += pieces as u64;
        }
        self.cfg
            .cost
            .scatter_gather(len as usize, pieces, l.hits, l.misses)
            + self.cfg.cost.search(steps)
    }

    /// The NIC's receive side looks at a datagram before it is handled
    /// (address translation, DMA setup and fetching a SEND's receive
    /// descriptor run ahead of the protocol): the extra time placing its
    /// payload takes. A backend with a cost model adds it to the packet's
    /// receive processing; anything that is not a well-formed WRITE, SEND
    /// or READ response costs nothing extra. Zero unless
    /// [`Nic::needs_dma_work`].
    pub fn receive_work(&mut self, from: NodeAddr, bytes: &[u8]) -> Duration {
        if !self.needs_dma_work() {
            return Duration::ZERO;
        }
        let Ok(r) = Repr::parse_bytes(bytes) else {
            return Duration::ZERO;
        };
        if r.opcode() == udrma_proto::Opcode::ReduceBcast {
            return self.reduce_receive_work(&r);
        }
        if !self.would_place(from, &r) {
            // A copy the bitmask or go-back-N's sequence discards never
            // reaches the DMA engine: no translation, no descriptor.
            return Duration::ZERO;
        }
        // Nor does a copy of a packet still waiting to be handled here:
        // the first is handled before it and sets its bit. Without this a
        // receiver slower than the sender's timer placed every spurious
        // copy too, fell further behind each round, and timed out more
        // (finding 42).
        let booked = (from, r.src_ep, r.msg_id, r.seg_index);
        if matches!(r.body, Body::Write { .. } | Body::Send { .. }) {
            if self.placing.contains(&booked) {
                return Duration::ZERO;
            }
            if self.placing.len() < PLACING_CAP {
                self.placing.insert(booked);
            }
        }
        let mut fetch = Duration::ZERO;
        let touch = match r.body {
            Body::Write {
                remote_addr,
                rkey,
                data,
                ..
            } => Some(Touch::Key {
                key: MrKey(rkey),
                addr: remote_addr,
                len: data.len() as u64,
            }),
            Body::Send { offset, data, .. } => {
                let key = OpKey {
                    from,
                    src_ep: r.src_ep,
                    msg_id: r.msg_id,
                };
                let buf = match self.registry.get(&key).map(|e| e.target) {
                    Some(Target::Send { recv, .. }) => self.bound.get(&recv),
                    _ => {
                        // The SEND's first packet takes the head receive
                        // buffer: the NIC fetches its descriptor first.
                        let head = self.recv_queues.get(&r.dst_ep).and_then(|q| q.front());
                        if let Some(b) = head.filter(|_| r.flags.contains(Flags::FIRST)) {
                            let sges = match &b.at {
                                Local::List(l) => l.entries().len(),
                                Local::Region { .. } => 1,
                            };
                            let c = &self.cfg.cost;
                            fetch = c.recv_fetch
                                + Duration::from_ps(c.per_sge.as_ps().saturating_mul(sges as u64));
                        }
                        head
                    }
                };
                buf.map(|b| b.at.touch(u64::from(offset), data.len() as u64))
            }
            Body::ReadResponse { offset, data, .. } => self
                .ops
                .get(&r.msg_id)
                .and_then(|op| self.requests.get(&op.wr).map(|q| (op.offset, q)))
                .map(|(op_offset, q)| {
                    request_touch(&q.req, op_offset + u64::from(offset), data.len() as u64)
                }),
            _ => None,
        };
        fetch + touch.map_or(Duration::ZERO, |t| self.dma_work(t))
    }
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
