//! `MemoryTable`: registered memory regions whose bytes are really stored.
//!
//! A region has a base address, a length, access rights and a key (used as
//! both lkey and rkey). Every remote access is checked against it; a check
//! that fails writes nothing and names the NACK syndrome to send.

use std::collections::BTreeMap;

use udrma_proto::Syndrome;

/// Access rights of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
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

/// A memory region key (lkey = rkey).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MrKey(pub u32);

/// One registered region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// First address.
    pub base: u64,
    /// Rights.
    pub access: Access,
    /// The bytes (empty for a phantom region).
    pub bytes: Vec<u8>,
    /// Length in bytes.
    pub len: u64,
    /// A phantom region has bounds and rights but no bytes: reads give
    /// zeros, writes are checked and discarded (for scale runs).
    pub phantom: bool,
}

/// Zeros that phantom reads return (the engine never reads more than one
/// packet's payload at a time).
static ZEROS: [u8; 65_536] = [0; 65_536];

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

/// The registered regions of one host.
#[derive(Debug, Clone, Default)]
pub struct MemoryTable {
    regions: BTreeMap<MrKey, Region>,
    next_key: u32,
}

impl MemoryTable {
    /// No regions.
    pub fn new() -> MemoryTable {
        MemoryTable {
            regions: BTreeMap::new(),
            next_key: 0x100,
        }
    }

    /// Registers `len` zeroed bytes at `base` with `access`; keys are
    /// handed out in order, so runs are reproducible.
    pub fn register(&mut self, base: u64, len: usize, access: Access) -> MrKey {
        self.insert(Region {
            base,
            access,
            bytes: vec![0; len],
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
            bytes: Vec::new(),
            len,
            phantom: true,
        })
    }

    fn insert(&mut self, region: Region) -> MrKey {
        let key = MrKey(self.next_key);
        self.next_key = self.next_key.wrapping_add(1).max(0x100);
        self.regions.insert(key, region);
        key
    }

    /// Removes a region; later accesses with its key fail with BAD_RKEY.
    pub fn deregister(&mut self, key: MrKey) -> Option<Region> {
        self.regions.remove(&key)
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
        let region = self.regions.get(&key).ok_or(Syndrome::BadRkey)?;
        let allowed = match u {
            Use::LocalRead => true,
            Use::LocalWrite => region.access.local_write,
            Use::RemoteWrite => region.access.remote_write,
            Use::RemoteRead => region.access.remote_read,
        };
        if !allowed {
            return Err(Syndrome::RemoteAccess);
        }
        region.span(addr, len).ok_or(Syndrome::OutOfBounds)?;
        Ok(())
    }

    /// Reads `len` bytes at `addr` after checking them for `u`.
    pub fn read(&self, key: MrKey, addr: u64, len: u64, u: Use) -> Result<&[u8], Syndrome> {
        self.check(key, addr, len, u)?;
        let region = &self.regions[&key];
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
        let region = self.regions.get_mut(&key).ok_or(Syndrome::BadRkey)?;
        let span = region
            .span(addr, data.len() as u64)
            .ok_or(Syndrome::OutOfBounds)?;
        if !region.phantom {
            region.bytes[span].copy_from_slice(data);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
