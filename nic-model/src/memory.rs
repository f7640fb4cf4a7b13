//! `MemoryTable`: registered memory regions whose bytes are really stored.
//!
//! A region has a base address, a length, access rights and a key (used as
//! both lkey and rkey). Every remote access is checked against it; a check
//! that fails writes nothing and names the NACK syndrome to send.
//!
//! An *indirect key* ([`MemoryTable::register_indirect`]) names a range of
//! its own that maps, in order, onto blocks of other regions (like an mlx5
//! user-mode memory registration): a peer WRITEs or READs one contiguous
//! range and the bytes land in, or come from, many places. Sender and
//! receiver may use different layouts. Creating one checks every block
//! against its region's rights once; every access checks again that the
//! blocks' regions still exist.
//!
//! - `bytes`: a region's bytes ([`RegionBytes`]), with the one value,
//!   kept up to date block by block, that a state fingerprint reads
//!   instead of the bytes themselves.

use std::collections::BTreeMap;

use udrma_proto::Syndrome;

use crate::sgl::Sgl;

mod bytes;
pub use bytes::{RegionBytes, BLOCK};

/// Access rights of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Access {
    /// The local host may write into it (READ results, SEND receives).
    pub local_write: bool,
    /// Remote peers may WRITE into it.
    pub remote_write: bool,
    /// Remote peers may READ from it.
    pub remote_read: bool,
}

impl Access {
    /// Every right.
    pub const ALL: Access = Access {
        local_write: true,
        remote_write: true,
        remote_read: true,
    };
    /// Local use only.
    pub const LOCAL: Access = Access {
        local_write: true,
        remote_write: false,
        remote_read: false,
    };
}

pub use crate::ids::MrKey;

/// One registered region.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Region {
    /// First address.
    pub base: u64,
    /// Rights.
    pub access: Access,
    /// The bytes (empty for a phantom region).
    pub bytes: RegionBytes,
    /// Length in bytes.
    pub len: u64,
    /// A phantom region has bounds and rights but no bytes: reads give
    /// zeros, writes are checked and discarded (for scale runs).
    pub phantom: bool,
}

/// Zeros that phantom reads return (the engine never reads more than one
/// packet's payload at a time). Shared with the wire format, so a backend
/// that carries elided payloads knows them without looking.
use udrma_proto::elide::ZEROS;

impl Region {
    /// Byte range of `[addr, addr+len)` inside the region, if it fits.
    fn span(&self, addr: u64, len: u64) -> Option<core::ops::Range<usize>> {
        let start = addr.checked_sub(self.base)?;
        let end = start.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(start as usize..end as usize)
    }
}

/// What a memory access is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Use {
    /// Local read (data to send).
    LocalRead,
    /// Local write (READ results, SEND payloads).
    LocalWrite,
    /// A remote peer's WRITE.
    RemoteWrite,
    /// A remote peer's READ.
    RemoteRead,
}

/// An indirect key: `[base, base + blocks.len())` mapped onto `blocks`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct IndirectKey {
    /// First address of the key's own range.
    pub base: u64,
    /// Rights granted through the key.
    pub access: Access,
    /// The blocks, in range order.
    pub blocks: Sgl,
}

/// Most blocks one indirect key may map (the modelled NIC's UMR limit).
pub const MAX_INDIRECT_BLOCKS: usize = 65_536;

/// Regions by key: the keys in order in one array, the regions at the
/// same places in another. Every packet a NIC sends or places checks a
/// region: a search of a few keys in one line, then the region's own
/// line (a tree's node put its length and its keys lines apart, one cold
/// load more a packet on a large simulated fabric).
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Regions {
    keys: Vec<MrKey>,
    regions: Vec<Region>,
}

impl Regions {
    #[inline]
    fn find(&self, key: &MrKey) -> Result<usize, usize> {
        self.keys.binary_search(key)
    }

    #[inline]
    fn get(&self, key: &MrKey) -> Option<&Region> {
        self.find(key).ok().map(|i| &self.regions[i])
    }

    fn get_mut(&mut self, key: &MrKey) -> Option<&mut Region> {
        self.find(key).ok().map(|i| &mut self.regions[i])
    }

    fn contains_key(&self, key: &MrKey) -> bool {
        self.find(key).is_ok()
    }

    fn insert(&mut self, key: MrKey, region: Region) {
        match self.find(&key) {
            Ok(i) => self.regions[i] = region,
            Err(i) => {
                self.keys.insert(i, key);
                self.regions.insert(i, region);
            }
        }
    }

    fn remove(&mut self, key: &MrKey) -> Option<Region> {
        let i = self.find(key).ok()?;
        self.keys.remove(i);
        Some(self.regions.remove(i))
    }

    fn iter(&self) -> impl Iterator<Item = (&MrKey, &Region)> {
        self.keys.iter().zip(&self.regions)
    }
}

impl MemoryTable {
    /// Brings every region's block hashes up to date (see
    /// [`RegionBytes`]): a search that fingerprints the state before
    /// every event calls this first, so each fingerprint rehashes only
    /// the blocks written since the last.
    pub fn refresh_hashes(&mut self) {
        for r in &mut self.regions.regions {
            r.bytes.refresh_hashes();
        }
    }
}

/// The registered regions of one host.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct MemoryTable {
    regions: Regions,
    indirect: BTreeMap<MrKey, IndirectKey>,
    next_key: u32,
}

impl MemoryTable {
    /// No regions.
    pub fn new() -> MemoryTable {
        MemoryTable {
            regions: Regions::default(),
            indirect: BTreeMap::new(),
            next_key: 0x100,
        }
    }

    /// Registers `len` zeroed bytes at `base` with `access`; keys are
    /// handed out in order, so runs are reproducible.
    pub fn register(&mut self, base: u64, len: usize, access: Access) -> MrKey {
        self.insert(Region {
            base,
            access,
            bytes: RegionBytes::zeroed(len),
            len: len as u64,
            phantom: false,
        })
    }

    /// Registers a phantom region of `len` bytes: checked like any other,
    /// but holding no bytes (reads give zeros, writes are discarded), so a
    /// thousand-host run does not need gigabytes of buffers.
    pub fn register_phantom(&mut self, base: u64, len: u64, access: Access) -> MrKey {
        self.insert(Region {
            base,
            access,
            bytes: RegionBytes::default(),
            len,
            phantom: true,
        })
    }

    fn insert(&mut self, region: Region) -> MrKey {
        let key = self.fresh_key();
        self.regions.insert(key, region);
        key
    }

    fn fresh_key(&mut self) -> MrKey {
        loop {
            let key = MrKey(self.next_key);
            self.next_key = self.next_key.wrapping_add(1).max(0x100);
            if !self.regions.contains_key(&key) && !self.indirect.contains_key(&key) {
                return key;
            }
        }
    }

    /// Creates an indirect key whose range `[base, base + blocks.len())`
    /// maps onto `blocks` in order, granting `access`. Every block must lie
    /// in a registered (direct) region that grants at least `access`:
    /// otherwise the syndrome a peer would have got names what is wrong
    /// (`BadRkey` for a missing region, `RemoteAccess` for rights,
    /// `OutOfBounds` for a block that leaves its region or a range that
    /// overflows), and no key is made.
    pub fn register_indirect(
        &mut self,
        base: u64,
        blocks: Sgl,
        access: Access,
    ) -> Result<MrKey, Syndrome> {
        if blocks.entries().len() > MAX_INDIRECT_BLOCKS || base.checked_add(blocks.len()).is_none()
        {
            return Err(Syndrome::OutOfBounds);
        }
        for b in blocks.entries() {
            let region = self.regions.get(&b.key).ok_or(Syndrome::BadRkey)?;
            let a = region.access;
            if (access.local_write && !a.local_write)
                || (access.remote_write && !a.remote_write)
                || (access.remote_read && !a.remote_read)
            {
                return Err(Syndrome::RemoteAccess);
            }
            region.span(b.addr, b.len).ok_or(Syndrome::OutOfBounds)?;
        }
        let key = self.fresh_key();
        self.indirect.insert(
            key,
            IndirectKey {
                base,
                access,
                blocks,
            },
        );
        Ok(key)
    }

    /// Whether any indirect key exists.
    pub fn has_indirect(&self) -> bool {
        !self.indirect.is_empty()
    }

    /// The indirect key `key`, if it is one.
    pub fn indirect(&self, key: MrKey) -> Option<&IndirectKey> {
        self.indirect.get(&key)
    }

    /// Removes a region; later accesses with its key fail with BAD_RKEY.
    /// Indirect keys over it fail the same way from then on.
    pub fn deregister(&mut self, key: MrKey) -> Option<Region> {
        self.regions.remove(&key)
    }

    /// Destroys an indirect key (its blocks' regions stay).
    pub fn deregister_indirect(&mut self, key: MrKey) -> Option<IndirectKey> {
        self.indirect.remove(&key)
    }

    /// The region under `key`.
    pub fn region(&self, key: MrKey) -> Option<&Region> {
        self.regions.get(&key)
    }

    /// The region under `key`, mutably (for the host to fill or reuse).
    pub fn region_mut(&mut self, key: MrKey) -> Option<&mut Region> {
        self.regions.get_mut(&key)
    }

    /// Every region, in key order.
    pub fn regions(&self) -> impl Iterator<Item = (MrKey, &Region)> {
        self.regions.iter().map(|(k, r)| (*k, r))
    }

    /// Checks that `[addr, addr+len)` under `key` may be used as `u`.
    pub fn check(&self, key: MrKey, addr: u64, len: u64, u: Use) -> Result<(), Syndrome> {
        if let Some(ind) = self.indirect.get(&key) {
            if !allowed(ind.access, u) {
                return Err(Syndrome::RemoteAccess);
            }
            let off = addr
                .checked_sub(ind.base)
                .filter(|o| o.checked_add(len).is_some_and(|e| e <= ind.blocks.len()))
                .ok_or(Syndrome::OutOfBounds)?;
            for p in ind.blocks.pieces(off, len) {
                self.check(p.sge.key, p.sge.addr, p.sge.len, u)?;
            }
            return Ok(());
        }
        let region = self.regions.get(&key).ok_or(Syndrome::BadRkey)?;
        if !allowed(region.access, u) {
            return Err(Syndrome::RemoteAccess);
        }
        region.span(addr, len).ok_or(Syndrome::OutOfBounds)?;
        Ok(())
    }

    /// The bytes `[addr, addr + len)` under `key`, checked for `u`: a slice
    /// of the region when they are contiguous in memory, else gathered
    /// into `scratch` (an indirect key's range that crosses blocks).
    pub fn load<'a>(
        &'a self,
        key: MrKey,
        addr: u64,
        len: u64,
        u: Use,
        scratch: &'a mut Vec<u8>,
    ) -> Result<&'a [u8], Syndrome> {
        let Some(ind) = self.indirect.get(&key) else {
            return self.read(key, addr, len, u);
        };
        self.check(key, addr, len, u)?;
        self.gather(&ind.blocks, addr - ind.base, len, u, scratch)?;
        Ok(scratch)
    }

    /// Replaces `out` with bytes `[offset, offset + len)` of the run `sgl`
    /// describes, each block checked for `u`.
    pub fn gather(
        &self,
        sgl: &Sgl,
        offset: u64,
        len: u64,
        u: Use,
        out: &mut Vec<u8>,
    ) -> Result<(), Syndrome> {
        if offset.checked_add(len).is_none_or(|e| e > sgl.len()) {
            return Err(Syndrome::OutOfBounds);
        }
        out.clear();
        for p in sgl.pieces(offset, len) {
            out.extend_from_slice(self.read(p.sge.key, p.sge.addr, p.sge.len, u)?);
        }
        Ok(())
    }

    /// Writes `data` at `[offset, ..)` of the run `sgl` describes, after
    /// checking every block it touches for `u` (on failure nothing is
    /// written).
    pub fn scatter(&mut self, sgl: &Sgl, offset: u64, data: &[u8], u: Use) -> Result<(), Syndrome> {
        let len = data.len() as u64;
        if offset.checked_add(len).is_none_or(|e| e > sgl.len()) {
            return Err(Syndrome::OutOfBounds);
        }
        for p in sgl.pieces(offset, len) {
            self.check(p.sge.key, p.sge.addr, p.sge.len, u)?;
        }
        for p in sgl.pieces(offset, len) {
            let at = p.at as usize;
            self.write(p.sge.key, p.sge.addr, &data[at..at + p.sge.len as usize], u)?;
        }
        Ok(())
    }

    /// Reads `len` bytes at `addr` after checking them for `u`. Under an
    /// indirect key the range must lie in one block (bytes of several
    /// blocks are not contiguous: use [`MemoryTable::load`]); otherwise
    /// `InvalidRequest`.
    pub fn read(&self, key: MrKey, addr: u64, len: u64, u: Use) -> Result<&[u8], Syndrome> {
        self.check(key, addr, len, u)?;
        if let Some(ind) = self.indirect.get(&key) {
            let mut pieces = ind.blocks.pieces(addr - ind.base, len);
            return match (pieces.next(), pieces.next()) {
                (Some(p), None) => self.read(p.sge.key, p.sge.addr, p.sge.len, u),
                (None, _) => Ok(&[]),
                _ => Err(Syndrome::InvalidRequest),
            };
        }
        let region = self.regions.get(&key).ok_or(Syndrome::BadRkey)?;
        let span = region.span(addr, len).ok_or(Syndrome::OutOfBounds)?;
        if region.phantom {
            return ZEROS.get(..span.len()).ok_or(Syndrome::OutOfBounds);
        }
        Ok(&region.bytes[span])
    }

    /// Writes `data` at `addr` after checking the whole range for `u`;
    /// on failure nothing is written.
    pub fn write(&mut self, key: MrKey, addr: u64, data: &[u8], u: Use) -> Result<(), Syndrome> {
        self.check(key, addr, data.len() as u64, u)?;
        if let Some(ind) = self.indirect.get(&key) {
            let (blocks, off) = (ind.blocks.clone(), addr - ind.base);
            return self.scatter(&blocks, off, data, u);
        }
        let region = self.regions.get_mut(&key).ok_or(Syndrome::BadRkey)?;
        let span = region
            .span(addr, data.len() as u64)
            .ok_or(Syndrome::OutOfBounds)?;
        if !region.phantom {
            region.bytes.write_at(span, data);
        }
        Ok(())
    }
}

fn allowed(a: Access, u: Use) -> bool {
    match u {
        Use::LocalRead => true,
        Use::LocalWrite => a.local_write,
        Use::RemoteWrite => a.remote_write,
        Use::RemoteRead => a.remote_read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sgl::Sge;

    #[test]
    fn an_indirect_key_maps_one_range_onto_blocks() {
        let mut m = MemoryTable::new();
        let a = m.register(0x1000, 16, Access::ALL);
        let b = m.register(0x2000, 16, Access::ALL);
        let sge = |key, addr, len| Sge { key, addr, len };
        // Asymmetric on purpose: 4 bytes of b, then 8 of a, then 2 of b.
        let blocks = Sgl::new(vec![
            sge(b, 0x200c, 4),
            sge(a, 0x1004, 8),
            sge(b, 0x2000, 2),
        ])
        .unwrap();
        let k = m.register_indirect(0x9000, blocks, Access::ALL).unwrap();
        m.write(k, 0x9002, b"ABCDEFGH", Use::RemoteWrite).unwrap();
        assert_eq!(&m.region(b).unwrap().bytes[12..16], b"\0\0AB");
        assert_eq!(&m.region(a).unwrap().bytes[4..10], b"CDEFGH");
        let mut scratch = Vec::new();
        assert_eq!(
            m.load(k, 0x9002, 8, Use::RemoteRead, &mut scratch).unwrap(),
            b"ABCDEFGH"
        );
        assert_eq!(
            m.read(k, 0x9004, 4, Use::RemoteRead).unwrap(),
            b"CDEF",
            "one block"
        );
        assert_eq!(
            m.read(k, 0x9002, 4, Use::RemoteRead),
            Err(Syndrome::InvalidRequest)
        );
        // Past the key's range, and through a region that went away.
        assert_eq!(
            m.write(k, 0x900d, b"xy", Use::RemoteWrite),
            Err(Syndrome::OutOfBounds)
        );
        m.deregister(a);
        assert_eq!(
            m.write(k, 0x9000, b"x", Use::RemoteWrite),
            Ok(()),
            "block 0 is in b"
        );
        assert_eq!(
            m.write(k, 0x9003, b"xy", Use::RemoteWrite),
            Err(Syndrome::BadRkey)
        );
        assert_eq!(m.region(b).unwrap().bytes[15], b'B', "nothing written");
    }

    #[test]
    fn each_right_an_indirect_key_asks_for_must_be_granted_by_every_block() {
        let mut m = MemoryTable::new();
        let only = |w, r| Access {
            local_write: true,
            remote_write: w,
            remote_read: r,
        };
        let write_only = m.register(0x1000, 16, only(true, false));
        let read_only = m.register(0x2000, 16, only(false, true));
        let no_local = m.register(
            0x3000,
            16,
            Access {
                local_write: false,
                ..Access::ALL
            },
        );
        let one = |key, addr| Sgl::new(vec![Sge { key, addr, len: 4 }]).unwrap();
        assert!(!m.has_indirect());
        assert_eq!(
            m.register_indirect(0, one(write_only, 0x1000), only(false, true)),
            Err(Syndrome::RemoteAccess)
        );
        assert_eq!(
            m.register_indirect(0, one(read_only, 0x2000), only(true, false)),
            Err(Syndrome::RemoteAccess)
        );
        assert_eq!(
            m.register_indirect(0, one(no_local, 0x3000), Access::LOCAL),
            Err(Syndrome::RemoteAccess)
        );
        assert!(!m.has_indirect(), "nothing made");
        let w = m
            .register_indirect(0, one(write_only, 0x1000), only(true, false))
            .unwrap();
        assert!(m.has_indirect());
        assert_eq!(m.indirect(w).map(|k| k.base), Some(0));
        assert_eq!(m.indirect(write_only), None, "a direct key is not indirect");
        // A zero-length read through the key is fine and empty.
        assert_eq!(m.read(w, 0, 0, Use::RemoteWrite), Ok(&[][..]));
    }

    #[test]
    fn an_indirect_key_maps_at_most_the_nics_limit_of_blocks() {
        let mut m = MemoryTable::new();
        let r = m.register(0, MAX_INDIRECT_BLOCKS + 1, Access::ALL);
        let blocks = |n: usize| {
            Sgl::new(
                (0..n as u64)
                    .map(|i| Sge {
                        key: r,
                        addr: i,
                        len: 1,
                    })
                    .collect(),
            )
            .unwrap()
        };
        assert!(m
            .register_indirect(0, blocks(MAX_INDIRECT_BLOCKS), Access::ALL)
            .is_ok());
        assert_eq!(
            m.register_indirect(0, blocks(MAX_INDIRECT_BLOCKS + 1), Access::ALL),
            Err(Syndrome::OutOfBounds)
        );
    }

    #[test]
    fn an_indirect_key_grants_no_more_than_its_blocks() {
        let mut m = MemoryTable::new();
        let local = m.register(0x1000, 16, Access::LOCAL);
        let one = |addr, len| {
            Sgl::new(vec![Sge {
                key: local,
                addr,
                len,
            }])
            .unwrap()
        };
        assert_eq!(
            m.register_indirect(0, one(0x1000, 4), Access::ALL),
            Err(Syndrome::RemoteAccess)
        );
        assert_eq!(
            m.register_indirect(0, one(0x100e, 4), Access::LOCAL),
            Err(Syndrome::OutOfBounds)
        );
        assert_eq!(
            m.register_indirect(u64::MAX, one(0x1000, 4), Access::LOCAL),
            Err(Syndrome::OutOfBounds)
        );
        let k = m
            .register_indirect(0, one(0x1000, 4), Access::LOCAL)
            .unwrap();
        assert_eq!(
            m.check(k, 0, 4, Use::RemoteWrite),
            Err(Syndrome::RemoteAccess)
        );
        assert!(m.deregister_indirect(k).is_some());
        assert_eq!(m.check(k, 0, 4, Use::LocalWrite), Err(Syndrome::BadRkey));
    }

    #[test]
    fn checks_name_the_syndrome_and_write_nothing() {
        let mut m = MemoryTable::new();
        let rw = m.register(0x1000, 16, Access::ALL);
        let ro = m.register(
            0x2000,
            16,
            Access {
                remote_read: true,
                ..Access::default()
            },
        );
        m.write(rw, 0x1004, b"abcd", Use::RemoteWrite).unwrap();
        assert_eq!(m.read(rw, 0x1004, 4, Use::RemoteRead).unwrap(), b"abcd");
        assert_eq!(
            m.write(ro, 0x2000, b"x", Use::RemoteWrite),
            Err(Syndrome::RemoteAccess)
        );
        assert_eq!(
            m.write(rw, 0x100e, b"xyz", Use::RemoteWrite),
            Err(Syndrome::OutOfBounds)
        );
        assert_eq!(
            m.write(rw, 0x0fff, b"x", Use::RemoteWrite),
            Err(Syndrome::OutOfBounds)
        );
        assert_eq!(
            m.write(MrKey(7), 0x1000, b"x", Use::RemoteWrite),
            Err(Syndrome::BadRkey)
        );
        assert_eq!(
            m.check(rw, u64::MAX, 2, Use::RemoteRead),
            Err(Syndrome::OutOfBounds)
        );
        assert_eq!(
            &m.region(rw).unwrap().bytes[12..],
            &[0, 0, 0, 0],
            "failed write left no trace"
        );
        m.deregister(rw);
        assert_eq!(
            m.read(rw, 0x1000, 1, Use::RemoteRead),
            Err(Syndrome::BadRkey)
        );
    }

    #[test]
    fn keys_that_wrap_around_keep_regions_apart_and_in_key_order() {
        let mut m = MemoryTable::new();
        m.next_key = u32::MAX - 1;
        let keys: Vec<MrKey> = (0..4u64)
            .map(|i| m.register(0x1000 * (i + 1), 8, Access::ALL))
            .collect();
        // Handed out in order, wrapping past the reserved low keys.
        assert_eq!(
            keys,
            [
                MrKey(u32::MAX - 1),
                MrKey(u32::MAX),
                MrKey(0x100),
                MrKey(0x101)
            ]
        );
        for (i, k) in keys.iter().enumerate() {
            let byte = [i as u8 + 1];
            m.write(*k, 0x1000 * (i as u64 + 1), &byte, Use::RemoteWrite)
                .unwrap();
        }
        assert!(m.deregister(MrKey(u32::MAX)).is_some());
        assert!(m.deregister(MrKey(u32::MAX)).is_none());
        let listed: Vec<(MrKey, u64, u8)> =
            m.regions().map(|(k, r)| (k, r.base, r.bytes[0])).collect();
        assert_eq!(
            listed,
            [
                (MrKey(0x100), 0x3000, 3),
                (MrKey(0x101), 0x4000, 4),
                (MrKey(u32::MAX - 1), 0x1000, 1),
            ]
        );
        assert_eq!(
            m.check(MrKey(u32::MAX), 0x2000, 1, Use::RemoteRead),
            Err(Syndrome::BadRkey)
        );
        assert_eq!(
            m.read(MrKey(0x101), 0x4000, 1, Use::RemoteRead).unwrap(),
            [4]
        );
    }

    #[test]
    fn a_key_still_in_use_is_not_handed_out_again() {
        let mut m = MemoryTable::new();
        let first = m.register(0x1000, 8, Access::ALL);
        // The counter comes round to the key still in use.
        m.next_key = first.0;
        let second = m.register_phantom(0x2000, 8, Access::ALL);
        assert_ne!(second, first);
        assert_eq!(m.region(first).map(|r| r.base), Some(0x1000));
        assert_eq!(m.region(second).map(|r| r.base), Some(0x2000));
    }

    #[test]
    fn phantom_regions_check_bounds_but_hold_no_bytes() {
        let mut m = MemoryTable::new();
        let p = m.register_phantom(0x1000, 1 << 40, Access::ALL);
        m.write(p, 0x1000 + (1 << 39), b"ignored", Use::RemoteWrite)
            .unwrap();
        assert_eq!(
            m.read(p, 0x1000, 4, Use::RemoteRead).unwrap(),
            &[0, 0, 0, 0]
        );
        assert_eq!(
            m.write(p, 0x1000 + (1 << 40), b"x", Use::RemoteWrite),
            Err(Syndrome::OutOfBounds)
        );
        assert!(m.region(p).unwrap().bytes.is_empty());
    }
}
