//! Where a request's or a receive buffer's bytes are (one region, or a
//! scatter-gather list), and the DMA work of touching them: one setup per
//! block a packet touches and, through an indirect key, the translation
//! of its table lines ([`crate::translation`]).

use super::*;
use crate::sgl::Sgl;
use udrma_proto::time::Duration;

/// Local bytes of a posted receive buffer.
#[derive(Debug, Clone)]
pub(super) enum Local {
    /// `[addr, ..)` under `key` (which may be an indirect key).
    Region { key: MrKey, addr: u64 },
    /// A scatter list.
    List(Sgl),
}

/// What touching a range takes: the blocks it covers and, through an
/// indirect key, the range of table entries to translate.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Shape {
    pieces: usize,
    indirect: Option<(MrKey, usize, usize)>,
}

impl Shape {
    fn of_key(memory: &MemoryTable, key: MrKey, addr: u64, len: u64) -> Shape {
        Shape {
            pieces: memory.pieces(key, addr, len),
            indirect: memory
                .indirect_entries(key, addr, len)
                .map(|(a, b)| (key, a, b)),
        }
    }

    fn of_list(sgl: &Sgl, offset: u64, len: u64) -> Shape {
        Shape {
            pieces: sgl.pieces(offset, len).count().max(1),
            indirect: None,
        }
    }
}

impl Local {
    pub(super) fn shape(&self, memory: &MemoryTable, offset: u64, len: u64) -> Shape {
        match self {
            Local::Region { key, addr } => Shape::of_key(memory, *key, addr + offset, len),
            Local::List(sgl) => Shape::of_list(sgl, offset, len),
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
            Local::List(sgl) => memory.scatter(sgl, offset, data, u).map(|_| ()),
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

/// The shape of `[offset, offset + len)` of a request's local buffer.
pub(super) fn request_shape(
    memory: &MemoryTable,
    req: &WorkRequest,
    offset: u64,
    len: u64,
) -> Shape {
    match &req.sgl {
        Some(sgl) => Shape::of_list(sgl, offset, len),
        None => Shape::of_key(memory, req.local, req.local_addr + offset, len),
    }
}

/// The shape of `[addr, addr + len)` under `key`.
pub(super) fn key_shape(memory: &MemoryTable, key: MrKey, addr: u64, len: u64) -> Shape {
    Shape::of_key(memory, key, addr, len)
}

impl Nic {
    /// The NIC time a packet's DMA takes beyond the fabric's per-packet
    /// cost: a setup per extra block and the translation of indirect-key
    /// table lines (which also warms or churns the translation cache).
    pub(super) fn dma_work(&mut self, shape: Shape) -> Duration {
        let (mut hits, mut misses) = (0, 0);
        if let Some((key, first, last)) = shape.indirect {
            let l = self.translation.translate(key, first, last);
            self.stats.translation_hits += l.hits;
            self.stats.translation_misses += l.misses;
            hits = l.hits;
            misses = l.misses;
        }
        if shape.pieces > 1 {
            self.stats.dma_pieces += shape.pieces as u64;
        }
        self.cfg.cost.scatter_gather(shape.pieces, hits, misses)
    }

    /// The NIC's receive side looks at a datagram before it is handled
    /// (address translation and DMA setup run ahead of the protocol): the
    /// extra time its payload's placement takes. A backend with a cost
    /// model adds it to the packet's receive processing; anything that is
    /// not a well-formed WRITE, SEND or READ response costs nothing extra.
    /// Returns zero when no scatter list or indirect key is in use.
    pub fn receive_work(&mut self, from: NodeAddr, bytes: &[u8]) -> Duration {
        if !self.uses_layouts() {
            return Duration::ZERO;
        }
        let Ok(r) = Repr::parse_bytes(bytes) else {
            return Duration::ZERO;
        };
        let shape = match r.body {
            Body::Write {
                remote_addr,
                rkey,
                data,
                ..
            } => key_shape(&self.memory, MrKey(rkey), remote_addr, data.len() as u64),
            Body::Send { offset, data, .. } => {
                let key = OpKey {
                    from,
                    src_ep: r.src_ep,
                    msg_id: r.msg_id,
                };
                let buf = match self.registry.get(&key).map(|e| e.target) {
                    Some(Target::Send { recv, .. }) => self.bound.get(&recv),
                    _ => self.recv_queues.get(&r.dst_ep).and_then(|q| q.front()),
                };
                match buf {
                    Some(b) => {
                        b.at.shape(&self.memory, u64::from(offset), data.len() as u64)
                    }
                    None => Shape::default(),
                }
            }
            Body::ReadResponse { offset, data, .. } => {
                match self
                    .ops
                    .get(&r.msg_id)
                    .and_then(|op| self.requests.get(&op.wr).map(|q| (op.offset, q)))
                {
                    Some((op_offset, q)) => request_shape(
                        &self.memory,
                        &q.req,
                        op_offset + u64::from(offset),
                        data.len() as u64,
                    ),
                    None => Shape::default(),
                }
            }
            _ => Shape::default(),
        };
        self.dma_work(shape)
    }

    /// Whether any scatter-gather list or indirect key could be touched: when
    /// not, [`Nic::receive_work`] is always zero and a backend may skip it.
    pub fn uses_layouts(&self) -> bool {
        self.lists_posted || self.memory.has_indirect()
    }
}
