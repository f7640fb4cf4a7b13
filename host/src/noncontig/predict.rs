//! What each method should cost, from the cost model alone: the estimate
//! [`Method::Auto`](super::Method::Auto) chooses by.
//!
//! The estimate follows the simulator's own accounting, without running
//! it: a transfer takes the host's copies (pack), the posting of its work
//! requests (a doorbell each, a descriptor fetch that grows per entry), and
//! its packets, each taking the longest of the link's serialisation, the
//! sending NIC's work and the receiving NIC's work (the three overlap from
//! packet to packet). A packet's NIC work is the per-packet cost plus a DMA
//! setup per extra block it touches and, through an indirect key, its
//! translation-table lines (cached if the key's lines fit the cache, else
//! fetched) and the walk of the key's entries that finds each block's.
//! The one-way latency of the path is the same for every method and left
//! out, so estimates compare methods; they are not latencies.

use udrma_nic::translation::TranslationConfig;
use udrma_nic::CostModel;
use udrma_proto::Duration;

use super::{cut, CutError, Method};
use crate::datatype::Layout;

/// The transfer and the machine, as the estimate needs them.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Shape<'a> {
    /// Sender's layout.
    pub src: &'a Layout,
    /// Receiver's layout.
    pub dst: &'a Layout,
    /// RDMA WRITE (one contiguous receiving range per request) rather than
    /// SEND/RECV (lists on both sides).
    pub rdma: bool,
    /// Entries per work request.
    pub max_sge: usize,
    /// Longest SEND the engine takes (SEND/RECV transfers longer than
    /// this go as several).
    pub max_send: u64,
    /// Payload bytes per packet.
    pub mtu: u64,
    /// The cost model.
    pub cost: &'a CostModel,
    /// The translation cache.
    pub translation: TranslationConfig,
    /// Link serialisation time per byte, in picoseconds.
    pub link_ps_per_byte: u64,
    /// Whether indirect keys are kept between transfers (created once).
    pub key_cache: bool,
}

/// One method's estimate for one transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Estimate {
    /// The method.
    pub method: Method,
    /// Estimated time, path latency excluded.
    pub time: Duration,
    /// Work requests posted.
    pub work_requests: u64,
    /// Bytes copied by host CPUs (both sides).
    pub bytes_copied: u64,
    /// Indirect keys created per transfer (0 with the key cache).
    pub keys_created: u64,
}

/// Estimates `method` for `shape`; [`Method::Auto`] gives the cheapest
/// concrete method's estimate (ties go to the earlier of pack, sgl,
/// indirect).
pub fn predict(shape: &Shape<'_>, method: Method) -> Result<Estimate, CutError> {
    if method == Method::Auto {
        let mut best: Option<Estimate> = None;
        for m in Method::CONCRETE {
            let e = predict(shape, m)?;
            if best.is_none_or(|b| e.time < b.time) {
                best = Some(e);
            }
        }
        return Ok(best.expect("three methods"));
    }
    let t = Terms::of(shape);
    match method {
        Method::Pack => Ok(t.pack()),
        Method::Sgl => t.sgl(),
        Method::Indirect | Method::Auto => Ok(t.indirect()),
    }
}

/// What every method's estimate is made of, for one transfer.
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Terms<'a> {
    shape: &'a Shape<'a>,
    c: &'a CostModel,
    bytes: u64,
    /// Blocks of the sender's and the receiver's layouts.
    sb: u64,
    db: u64,
    mtu: u64,
    packets: u64,
    /// Contiguous SEND/RECV transfers go in pieces of at most `max_send`.
    sends: u64,
    /// The link's serialisation of the bytes, in picoseconds.
    wire: u64,
}

impl<'a> Terms<'a> {
    fn of(shape: &'a Shape<'a>) -> Terms<'a> {
        let bytes = shape.src.size();
        let mtu = shape.mtu.max(1);
        Terms {
            shape,
            c: shape.cost,
            bytes,
            sb: shape.src.blocks().len() as u64,
            db: shape.dst.blocks().len() as u64,
            mtu,
            packets: bytes.div_ceil(mtu).max(1),
            sends: if shape.rdma {
                1
            } else {
                bytes.div_ceil(shape.max_send.max(1)).max(1)
            },
            wire: shape.link_ps_per_byte * bytes,
        }
    }

    /// Posting a work request of `entries` entries.
    fn post(&self, entries: usize) -> Duration {
        self.c.doorbell + self.c.fetch_sges(entries)
    }

    /// Fetching a receive of `entries` entries (nothing for RDMA).
    fn recv(&self, entries: u64) -> Duration {
        if self.shape.rdma {
            Duration::ZERO
        } else {
            self.c.recv_fetch + Duration::from_ps(self.c.per_sge.as_ps().saturating_mul(entries))
        }
    }

    fn times(d: Duration, n: u64) -> Duration {
        Duration::from_ps(d.as_ps().saturating_mul(n))
    }

    /// Per-packet work on one side, with `pieces` blocks spread over the
    /// packets and `hit` and `miss` translation lines, in picoseconds.
    fn nic(&self, pieces: u64, hit: u64, miss: u64) -> u64 {
        let (c, packets, bytes) = (self.c, self.packets, self.bytes);
        let extra = pieces.saturating_sub(packets);
        let per = c.packet(self.mtu.min(bytes) as usize).as_ps();
        // Translation, cached lines and fetched ones, overlaps the DMA of
        // setups and bytes (see CostModel::scatter_gather).
        let dma = c.dma_setup.as_ps() * pieces.max(1) + c.dma_ps_per_byte * bytes;
        let lines = c.translate_hit.as_ps() * hit + c.translate_miss.as_ps() * miss;
        per * packets + c.dma_setup.as_ps() * extra + lines.saturating_sub(dma)
    }

    /// The packets' stream: the slowest of the link, the sender and the
    /// receiver.
    fn stream(&self, tx: u64, rx: u64) -> Duration {
        Duration::from_ps(self.wire.max(tx).max(rx))
    }

    fn pack(&self) -> Estimate {
        let (c, bytes, packets) = (self.c, self.bytes, self.packets);
        let copy = c.pack(bytes, self.sb) + c.pack(bytes, self.db);
        Estimate {
            method: Method::Pack,
            time: copy
                + Self::times(self.post(1) + self.recv(1), self.sends)
                + self.stream(self.nic(packets, 0, 0), self.nic(packets, 0, 0)),
            work_requests: self.sends,
            bytes_copied: 2 * bytes,
            keys_created: 0,
        }
    }

    fn sgl(&self) -> Result<Estimate, CutError> {
        let shape = self.shape;
        let max_dst = if shape.rdma { 1 } else { shape.max_sge };
        let max_len = if shape.rdma { u64::MAX } else { shape.max_send };
        let chunks = cut(shape.src, shape.dst, shape.max_sge, max_dst, max_len)?;
        let posting: Duration = chunks
            .iter()
            .map(|ch| self.post(ch.src.len()) + self.recv(ch.dst.len() as u64))
            .fold(Duration::ZERO, |a, b| a + b);
        let (sp, dp) = chunks.iter().fold((0, 0), |(s, d), ch| {
            (s + ch.src.len() as u64, d + ch.dst.len() as u64)
        });
        Ok(Estimate {
            method: Method::Sgl,
            time: posting
                + self.stream(
                    self.nic(sp + self.packets, 0, 0),
                    self.nic(dp + self.packets, 0, 0),
                ),
            work_requests: chunks.len() as u64,
            bytes_copied: 0,
            keys_created: 0,
        })
    }

    fn indirect(&self) -> Estimate {
        let (shape, c, packets) = (self.shape, self.c, self.packets);
        let t = shape.translation;
        let per_line = u64::from(t.entries_per_line.max(1));
        let capacity = u64::from(t.sets.max(1)) * u64::from(t.ways.max(1));
        let lines = |blocks: u64| {
            let l = blocks.div_ceil(per_line);
            // A key whose lines fit is all hits once warm; beyond, the
            // share that cannot stay misses.
            let miss = if shape.key_cache {
                l.saturating_sub(capacity * 3 / 4)
            } else {
                l
            };
            (l - miss, miss)
        };
        let (sh, sm) = lines(self.sb);
        let (dh, dm) = lines(self.db);
        // Each piece's lookup walks the key's entries to its own: a
        // piece of entry j steps over j of them, pieces spread evenly.
        let search = |blocks: u64| {
            let pieces = blocks + packets;
            c.search(pieces.saturating_mul(blocks.saturating_sub(1)) / 2)
                .as_ps()
        };
        let create = if shape.key_cache {
            Duration::ZERO
        } else {
            c.key_create + c.key_create
        };
        Estimate {
            method: Method::Indirect,
            time: create
                + Self::times(self.post(1) + self.recv(1), self.sends)
                + self.stream(
                    self.nic(self.sb + packets, sh, sm) + search(self.sb),
                    self.nic(self.db + packets, dh, dm) + search(self.db),
                ),
            work_requests: self.sends,
            bytes_copied: 0,
            keys_created: if shape.key_cache { 0 } else { 2 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::Datatype;

    fn vector(count: u64, block: u64) -> Layout {
        Datatype::hvector(count, block, 2 * block as i64, &Datatype::byte())
            .unwrap()
            .commit()
            .unwrap()
    }

    fn shape<'a>(l: &'a Layout, cost: &'a CostModel) -> Shape<'a> {
        Shape {
            src: l,
            dst: l,
            rdma: false,
            max_sge: 30,
            max_send: 1 << 18,
            mtu: 4096,
            cost,
            translation: TranslationConfig::default(),
            link_ps_per_byte: 80,
            key_cache: true,
        }
    }

    fn costs() -> CostModel {
        CostModel {
            doorbell: Duration::from_nanos(100),
            descriptor_fetch: Duration::from_nanos(400),
            per_sge: Duration::from_nanos(30),
            dma_setup: Duration::from_nanos(60),
            host_copy_ps_per_byte: 100,
            host_copy_per_block: Duration::from_nanos(5),
            translate_hit: Duration::from_nanos(20),
            translate_miss: Duration::from_nanos(400),
            ..CostModel::ZERO
        }
    }

    #[test]
    fn copies_win_small_blocks_and_zero_copy_wins_large_ones() {
        let c = costs();
        let small = vector(64, 32);
        let large = vector(64, 16384);
        assert_eq!(
            predict(&shape(&small, &c), Method::Auto).unwrap().method,
            Method::Pack
        );
        assert_ne!(
            predict(&shape(&large, &c), Method::Auto).unwrap().method,
            Method::Pack
        );
        let s = predict(&shape(&large, &c), Method::Sgl).unwrap();
        // 1 MiB in SENDs of at most 256 KiB: 4 requests of 16 entries.
        assert_eq!((s.work_requests, s.bytes_copied), (4, 0));
        let w = predict(
            &Shape {
                rdma: true,
                ..shape(&large, &c)
            },
            Method::Sgl,
        )
        .unwrap();
        assert_eq!(w.work_requests, 64, "a WRITE per receiving block");
        let p = predict(&shape(&large, &c), Method::Pack).unwrap();
        assert_eq!(p.bytes_copied, 2 * 64 * 16384);
    }

    #[test]
    fn the_indirect_key_loses_its_lead_as_blocks_grow_in_number() {
        // The walk through the key's entries is what grows with the
        // blocks' number: fetched lines partly hide behind the DMA, and
        // without the walk the key's lead would not shrink.
        let c = CostModel {
            translate_search: Duration::from_nanos(1),
            ..costs()
        };
        let gap = |n| {
            let l = vector(n, 1024);
            let s = predict(&shape(&l, &c), Method::Sgl).unwrap().time.as_ps() as f64;
            let i = predict(&shape(&l, &c), Method::Indirect)
                .unwrap()
                .time
                .as_ps() as f64;
            i / s
        };
        assert!(gap(16) < 1.0, "few blocks: the key wins ({})", gap(16));
        assert!(gap(4096) > gap(16), "{} vs {}", gap(4096), gap(16));
    }
}
