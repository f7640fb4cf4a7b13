//! `NodeAddr`: how the engine names a host, and the Ethernet/IPv4
//! addresses captures give it.

use core::fmt;
use std::net::Ipv4Addr;

/// A host on the fabric, numbered from 0 (`h0`, `h1`, ...).
///
/// In simulation this is the host index; captures show it as the IPv4
/// address `10.0.0.0 + (id + 1)` (so `h0` is `10.0.0.1`) and the locally
/// administered MAC `02:75:64:xx:xx:xx` holding the same 24 bits. Ids at or
/// beyond 2^24 - 1 wrap in those synthetic addresses (never in the id).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Hash, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct NodeAddr(pub u32);

impl NodeAddr {
    /// The synthetic IPv4 address captures use for this host.
    pub const fn ipv4(self) -> Ipv4Addr {
        let host = self.0.wrapping_add(1) & 0x00FF_FFFF;
        let v = 0x0A00_0000 | host;
        Ipv4Addr::new((v >> 24) as u8, (v >> 16) as u8, (v >> 8) as u8, v as u8)
    }

    /// The synthetic MAC address captures use for this host.
    pub const fn mac(self) -> [u8; 6] {
        let host = self.0.wrapping_add(1);
        [
            0x02,
            0x75,
            0x64,
            (host >> 16) as u8,
            (host >> 8) as u8,
            host as u8,
        ]
    }

    /// The host whose synthetic IPv4 address is `ip`, if it is one.
    pub fn from_ipv4(ip: Ipv4Addr) -> Option<NodeAddr> {
        let v = u32::from(ip);
        if v & 0xFF00_0000 != 0x0A00_0000 || v & 0x00FF_FFFF == 0 {
            return None;
        }
        Some(NodeAddr((v & 0x00FF_FFFF) - 1))
    }
}

/// `h<id>`, the name topologies and outputs use.
impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "h{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_addresses() {
        assert_eq!(NodeAddr(0).ipv4(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(NodeAddr(1023).ipv4(), Ipv4Addr::new(10, 0, 4, 0));
        assert_eq!(NodeAddr(0).mac(), [0x02, 0x75, 0x64, 0, 0, 1]);
        assert_eq!(
            NodeAddr::from_ipv4(Ipv4Addr::new(10, 0, 4, 0)),
            Some(NodeAddr(1023))
        );
        assert_eq!(NodeAddr::from_ipv4(Ipv4Addr::new(10, 0, 0, 0)), None);
        assert_eq!(NodeAddr::from_ipv4(Ipv4Addr::new(192, 168, 0, 1)), None);
        assert_eq!(NodeAddr(7).to_string(), "h7");
    }
}
