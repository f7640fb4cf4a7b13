//! The cost model: how long host and NIC work takes in simulated time.
//!
//! VIA-era NICs (MyVIA on LANai9) and modern RDMA NICs spend most of a
//! small message's latency outside the wire: ringing a doorbell, fetching a
//! descriptor over PCI, setting up DMA, running per-packet firmware, copying
//! through bounce buffers and, now and then, taking an interrupt. A
//! [`CostModel`] names each of these; who charges what:
//!
//! | cost | charged by | when |
//! |---|---|---|
//! | `doorbell` | the engine ([`crate::Nic::post`]) | once per posted request (and per posted receive) |
//! | `descriptor_fetch`, `per_sge` | the engine | once per request, by the NIC's fetch unit, one at a time |
//! | `interrupt` | the engine | once per refill of the NIC descriptor ring from the host overflow ring |
//! | `nic_per_packet` | the fabric | per packet sent and per packet received |
//! | `dma_setup`, `dma_per_byte` | the fabric | per packet sent and received but control packets (acknowledgements, NACKs, completion notices, credits, demands, grants), trimmed headers and runts, which move nothing over PCIe |
//! | `host_copy_per_byte` | the messaging layer, packing | per byte copied into or out of a vbuf or a pack buffer |
//! | `host_copy_per_block` | packing | per block packed or unpacked |
//! | `host_reduce_per_byte` | host collectives (MPI's algorithms) | per byte of a received vector folded into the held one |
//! | `key_create` | host software (non-contiguous workloads) | per indirect key created |
//! | `recv_fetch` | the engine ([`crate::Nic::receive_work`]) | when a SEND's first packet takes a receive buffer |
//! | `translate_hit`, `translate_miss` | the engine | per translation-table line an indirect key's access needs ([`crate::translation`]) |
//! | `translate_search` | the engine | per indirect-key entry the lookup of each block a packet touches steps over ([`crate::translation`]) |
//! | `dma_setup` per extra piece | the engine | per further block a packet's bytes touch (gather lists, indirect keys) |
//! | `reduce_trigger`, `alu_per_operand` | the engine ([`crate::reduce`]) | per triggered descriptor that fires, and per operand its ALU folds |
//! | `aead_per_packet`, `aead_ps_per_byte` | the fabric | per packet sealed (sent) and opened (received), in the authenticated mode |
//!
//! The zero model ([`CostModel::ZERO`], profile `ideal`) changes nothing:
//! every request is fetched the instant it is posted. The UDP bridge always
//! uses it, because there real time applies.

use udrma_proto::time::{Duration, Instant};

/// Simulated costs of host and NIC work. All zero by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct CostModel {
    /// Host writes the doorbell register (per post).
    pub doorbell: Duration,
    /// NIC fetches one descriptor from host memory.
    pub descriptor_fetch: Duration,
    /// Extra fetch time per scatter-gather entry (every request has one).
    pub per_sge: Duration,
    /// NIC sets up one DMA (per packet, each way).
    pub dma_setup: Duration,
    /// DMA time per byte, in picoseconds (per packet, each way).
    pub dma_ps_per_byte: u64,
    /// NIC firmware time per packet (each way).
    pub nic_per_packet: Duration,
    /// Host copy time per byte, in picoseconds (vbuf copies).
    pub host_copy_ps_per_byte: u64,
    /// One interrupt taken by the host.
    pub interrupt: Duration,
    /// Host time per block packed or unpacked (loop and address work).
    pub host_copy_per_block: Duration,
    /// Host time per byte folded by a reduction, in picoseconds (a
    /// received vector combined element by element into the held one).
    pub host_reduce_ps_per_byte: u64,
    /// A translation-table line found in the NIC's cache.
    pub translate_hit: Duration,
    /// A translation-table line read from host memory.
    pub translate_miss: Duration,
    /// One step of an indirect key's lookup: for each block a packet
    /// touches, the NIC walks the key's entries from the first, adding up
    /// their lengths, to that block's (its entries have lengths of their
    /// own, so an offset does not index them). Per entry stepped over.
    pub translate_search: Duration,
    /// Host and NIC time to create one indirect key (charged by the host
    /// software that creates it).
    pub key_create: Duration,
    /// NIC time to fetch a receive descriptor when a SEND arrives for it
    /// (plus `per_sge` for each of its entries).
    pub recv_fetch: Duration,
    /// NIC time from a reduce counter reaching its threshold to the
    /// triggered descriptor's packet leaving (and per broadcast forwarded).
    pub reduce_trigger: Duration,
    /// NIC ALU time per operand folded into a reduce chunk.
    pub alu_per_operand: Duration,
    /// Sealing or opening one packet in the authenticated mode (fixed
    /// part; each way).
    pub aead_per_packet: Duration,
    /// Sealing or opening per byte, in picoseconds (each way).
    pub aead_ps_per_byte: u64,
}

impl CostModel {
    /// No costs at all.
    pub const ZERO: CostModel = CostModel {
        doorbell: Duration::ZERO,
        descriptor_fetch: Duration::ZERO,
        per_sge: Duration::ZERO,
        dma_setup: Duration::ZERO,
        dma_ps_per_byte: 0,
        nic_per_packet: Duration::ZERO,
        host_copy_ps_per_byte: 0,
        interrupt: Duration::ZERO,
        host_copy_per_block: Duration::ZERO,
        host_reduce_ps_per_byte: 0,
        translate_hit: Duration::ZERO,
        translate_miss: Duration::ZERO,
        translate_search: Duration::ZERO,
        key_create: Duration::ZERO,
        recv_fetch: Duration::ZERO,
        reduce_trigger: Duration::ZERO,
        alu_per_operand: Duration::ZERO,
        aead_per_packet: Duration::ZERO,
        aead_ps_per_byte: 0,
    };

    /// Whether every cost is zero.
    pub fn is_zero(&self) -> bool {
        *self == CostModel::ZERO
    }

    /// NIC time to move one packet of `len` bytes between host memory and
    /// the wire (either way): firmware, DMA setup and DMA of its bytes.
    pub fn packet(&self, len: usize) -> Duration {
        self.nic_per_packet
            + self.dma_setup
            + self.aead_per_packet
            + Duration::from_ps(
                (self.dma_ps_per_byte + self.aead_ps_per_byte).saturating_mul(len as u64),
            )
    }

    /// NIC time for a control packet of `len` bytes (an acknowledgement,
    /// a NACK, a credit; or a trimmed header): the firmware reads its
    /// header and updates its own tables, and nothing crosses PCIe, so no
    /// DMA is set up and no bytes are moved; sealing still covers it.
    pub fn control(&self, len: usize) -> Duration {
        self.nic_per_packet
            + self.aead_per_packet
            + Duration::from_ps(self.aead_ps_per_byte.saturating_mul(len as u64))
    }

    /// NIC time to fetch one descriptor with `sges` gather entries.
    pub fn fetch_sges(&self, sges: usize) -> Duration {
        self.descriptor_fetch + Duration::from_ps(self.per_sge.as_ps().saturating_mul(sges as u64))
    }

    /// Extra NIC time, beyond [`CostModel::packet`], for a packet of `len`
    /// bytes that touch `pieces` separate blocks (one DMA setup each beyond
    /// the first) and whose translation needed `hits` cached and `misses`
    /// fetched table lines. Lookups run on the NIC ahead of the data,
    /// block by block, so they overlap the DMA: only the part longer than
    /// the packet's DMA (setups and bytes) shows. That holds for fetched
    /// lines too (the NIC issues their PCIe reads while earlier blocks'
    /// data moves): a packet of few blocks hides its misses, one of many
    /// small blocks cannot, which is why the indirect key's misses cost
    /// 256 B blocks most.
    pub fn scatter_gather(&self, len: usize, pieces: usize, hits: u64, misses: u64) -> Duration {
        let setups = (pieces as u64).saturating_sub(1);
        let extra_setups = self.dma_setup.as_ps().saturating_mul(setups);
        let dma = self
            .dma_setup
            .as_ps()
            .saturating_add(extra_setups)
            .saturating_add(self.dma_ps_per_byte.saturating_mul(len as u64));
        let hit = self.translate_hit.as_ps().saturating_mul(hits);
        let miss = self.translate_miss.as_ps().saturating_mul(misses);
        Duration::from_ps(extra_setups.saturating_add(hit.saturating_add(miss).saturating_sub(dma)))
    }

    /// NIC time of indirect-key lookups that step over `steps` entries in
    /// all. A lookup runs before its block's DMA can start (the entry
    /// names the address), so it adds in full.
    pub fn search(&self, steps: u64) -> Duration {
        Duration::from_ps(self.translate_search.as_ps().saturating_mul(steps))
    }

    /// Whether translation-table lookups cost anything (only then are
    /// page tables walked for every packet).
    pub fn prices_translation(&self) -> bool {
        self.translate_hit > Duration::ZERO
            || self.translate_miss > Duration::ZERO
            || self.translate_search > Duration::ZERO
    }

    /// Host time to fold `len` bytes of a received vector into the held
    /// one.
    pub fn reduce(&self, len: u64) -> Duration {
        Duration::from_ps(self.host_reduce_ps_per_byte.saturating_mul(len))
    }

    /// Host time to copy `len` bytes.
    pub fn copy(&self, len: u64) -> Duration {
        Duration::from_ps(self.host_copy_ps_per_byte.saturating_mul(len))
    }

    /// Host time to pack or unpack `len` bytes in `blocks` blocks.
    pub fn pack(&self, len: u64, blocks: u64) -> Duration {
        self.copy(len) + Duration::from_ps(self.host_copy_per_block.as_ps().saturating_mul(blocks))
    }
}

/// A unit that does one thing at a time (a NIC's fetch engine, its
/// transmit or receive DMA, a host CPU): work offered at `now` starts when
/// the unit is free and ends `cost` later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Serial {
    free_at: Instant,
}

impl Serial {
    /// Takes the unit for `cost` from `now` (or from when it frees up);
    /// returns when the work is done.
    pub fn take(&mut self, now: Instant, cost: Duration) -> Instant {
        let start = if self.free_at > now {
            self.free_at
        } else {
            now
        };
        self.free_at = start + cost;
        self.free_at
    }

    /// When the unit is free again.
    pub fn free_at(&self) -> Instant {
        self.free_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serial_unit_queues_work_behind_work() {
        let mut u = Serial::default();
        let t0 = Instant::ZERO + Duration::from_micros(1);
        assert_eq!(
            u.take(t0, Duration::from_micros(2)),
            t0 + Duration::from_micros(2)
        );
        // Offered while busy: starts when the first finishes.
        assert_eq!(
            u.take(t0, Duration::from_micros(2)),
            t0 + Duration::from_micros(4)
        );
        // Offered after it went idle: starts at once.
        let late = t0 + Duration::from_micros(10);
        assert_eq!(u.take(late, Duration::ZERO), late);
        assert_eq!(u.free_at(), late);
    }

    #[test]
    fn host_copies_descriptors_and_translation_are_priced_per_unit() {
        let c = CostModel {
            host_copy_ps_per_byte: 100,
            host_copy_per_block: Duration::from_nanos(5),
            descriptor_fetch: Duration::from_nanos(400),
            per_sge: Duration::from_nanos(10),
            ..CostModel::ZERO
        };
        assert_eq!(c.copy(1000), Duration::from_nanos(100));
        assert_eq!(c.pack(1000, 4), Duration::from_nanos(120));
        assert_eq!(c.fetch_sges(30), Duration::from_nanos(700));
        assert!(!c.prices_translation());
        for (hit, miss) in [(1, 0), (0, 1)] {
            let t = CostModel {
                translate_hit: Duration::from_nanos(hit),
                translate_miss: Duration::from_nanos(miss),
                ..c
            };
            assert!(t.prices_translation(), "hit {hit} miss {miss}");
        }
    }

    #[test]
    fn lookups_hide_behind_the_dma_only_while_it_lasts() {
        let c = CostModel {
            dma_setup: Duration::from_nanos(50),
            dma_ps_per_byte: 100,
            translate_hit: Duration::from_nanos(20),
            translate_miss: Duration::from_nanos(300),
            ..CostModel::ZERO
        };
        // 1000 bytes in 3 blocks: DMA 3 × 50 + 100 = 250 ns.
        assert_eq!(c.scatter_gather(1000, 3, 0, 0), Duration::from_nanos(100));
        assert_eq!(
            c.scatter_gather(1000, 3, 12, 0),
            Duration::from_nanos(100),
            "240 ns hidden"
        );
        assert_eq!(
            c.scatter_gather(1000, 3, 15, 0),
            Duration::from_nanos(150),
            "300 - 250 shows"
        );
        // Fetched lines hide too: 2 × 300 = 600 ns, 250 of them behind
        // the DMA.
        assert_eq!(c.scatter_gather(1000, 3, 0, 2), Duration::from_nanos(450));
        // Hits and misses add up before the DMA hides them: 5 × 20 + 300
        // = 400 ns, 150 of them showing.
        assert_eq!(c.scatter_gather(1000, 3, 5, 1), Duration::from_nanos(250));
        // Behind a long DMA (100 kB: 10 us) they hide whole: only the
        // two extra setups show.
        assert_eq!(
            c.scatter_gather(100_000, 3, 0, 2),
            Duration::from_nanos(100)
        );
        assert_eq!(c.scatter_gather(0, 1, 0, 0), Duration::ZERO);
    }

    #[test]
    fn an_indirect_key_s_lookup_costs_per_entry_stepped_over() {
        let c = CostModel {
            translate_search: Duration::from_nanos(2),
            ..CostModel::ZERO
        };
        assert!(c.prices_translation());
        assert_eq!(c.search(0), Duration::ZERO);
        assert_eq!(c.search(300), Duration::from_nanos(600));
    }

    #[test]
    fn packet_cost_adds_firmware_setup_and_bytes() {
        let c = CostModel {
            nic_per_packet: Duration::from_nanos(500),
            dma_setup: Duration::from_nanos(100),
            dma_ps_per_byte: 1000,
            ..CostModel::ZERO
        };
        assert_eq!(c.packet(1000), Duration::from_nanos(1600));
        assert!(CostModel::ZERO.is_zero() && !c.is_zero());
    }

    /// An acknowledgement moves nothing over PCIe: firmware and sealing
    /// only, however long its header.
    #[test]
    fn a_packet_without_payload_costs_firmware_and_sealing_only() {
        let c = CostModel {
            nic_per_packet: Duration::from_nanos(500),
            dma_setup: Duration::from_nanos(100),
            dma_ps_per_byte: 1000,
            aead_per_packet: Duration::from_nanos(20),
            aead_ps_per_byte: 10,
            ..CostModel::ZERO
        };
        assert_eq!(c.control(36), Duration::from_ps(520_000 + 360));
        assert_eq!(c.packet(36), Duration::from_ps(620_000 + 36_000 + 360));
    }
}
