//! Ethernet II / IPv4 / UDP encapsulation of udrma datagrams, built and
//! checked with smoltcp's `wire` module.
//!
//! The simulator has no real frames; captures need them so Wireshark can
//! follow the stack down to our dissector. Frames carry correct IPv4 header
//! and UDP checksums, the don't-fragment bit, TTL 64 and no VLAN tag.

use std::net::{Ipv4Addr, SocketAddrV4};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};
use thiserror::Error;

use crate::addr::NodeAddr;

/// Ethernet (14) + IPv4 (20) + UDP (8) header bytes in front of a datagram.
pub const FRAME_OVERHEAD: usize = 14 + 20 + 8;
/// The largest udrma datagram one IPv4 packet can carry.
pub const MAX_DATAGRAM: usize = 65_535 - 20 - 8;

/// One end of a UDP flow as a capture shows it.
#[derive(Debug, PartialEq, Eq, Clone, Copy, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct UdpEndpoint {
    /// Ethernet address.
    pub mac: [u8; 6],
    /// IPv4 address and UDP port.
    pub addr: SocketAddrV4,
}

impl UdpEndpoint {
    /// The synthetic endpoint of a simulated host on `port`.
    pub const fn node(node: NodeAddr, port: u16) -> UdpEndpoint {
        UdpEndpoint {
            mac: node.mac(),
            addr: SocketAddrV4::new(node.ipv4(), port),
        }
    }
}

/// A UDP datagram found inside a frame.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Datagram<'a> {
    /// Sender.
    pub src: UdpEndpoint,
    /// Receiver.
    pub dst: UdpEndpoint,
    /// UDP payload (the udrma datagram, if the port says so).
    pub payload: &'a [u8],
    /// The UDP checksum is absent (0) or right. A capture taken on the
    /// sending host usually holds datagrams whose checksum the kernel left
    /// for the NIC to fill in (checksum offload; always so on loopback), so
    /// a wrong one is reported, not refused: the ICRC covers the datagram.
    pub udp_checksum_ok: bool,
}

/// Why a frame could not be built or taken apart.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum EncapError {
    /// The datagram does not fit one IPv4 packet.
    #[error("datagram of {0} bytes exceeds the {MAX_DATAGRAM}-byte IPv4/UDP limit")]
    TooLarge(usize),
    /// Shorter than an Ethernet header.
    #[error("truncated Ethernet frame ({0} bytes)")]
    TruncatedEthernet(usize),
    /// Not IPv4.
    #[error("not IPv4 (ethertype {0:#06x})")]
    NotIpv4(u16),
    /// IPv4 header truncated or its lengths inconsistent.
    #[error("malformed IPv4 header")]
    BadIpv4,
    /// IPv4 header checksum wrong.
    #[error("bad IPv4 header checksum")]
    BadIpv4Checksum,
    /// A fragment; udrma never fragments.
    #[error("IPv4 fragment (udrma datagrams are never fragmented)")]
    Fragment,
    /// Not UDP.
    #[error("not UDP (IP protocol {0})")]
    NotUdp(u8),
    /// UDP header truncated or its length inconsistent.
    #[error("malformed UDP header")]
    BadUdp,
}

/// Builds an Ethernet/IPv4/UDP frame around `payload` into `out`
/// (replacing its contents).
pub fn encapsulate(
    src: &UdpEndpoint,
    dst: &UdpEndpoint,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), EncapError> {
    if payload.len() > MAX_DATAGRAM {
        return Err(EncapError::TooLarge(payload.len()));
    }
    let caps = ChecksumCapabilities::default();
    let eth = EthernetRepr {
        src_addr: EthernetAddress(src.mac),
        dst_addr: EthernetAddress(dst.mac),
        ethertype: EthernetProtocol::Ipv4,
    };
    let udp = UdpRepr {
        src_port: src.addr.port(),
        dst_port: dst.addr.port(),
    };
    let ip = Ipv4Repr {
        src_addr: *src.addr.ip(),
        dst_addr: *dst.addr.ip(),
        next_header: IpProtocol::Udp,
        payload_len: udp.header_len() + payload.len(),
        hop_limit: 64,
    };
    out.clear();
    out.resize(eth.buffer_len() + ip.buffer_len() + ip.payload_len, 0);
    let mut frame = EthernetFrame::new_unchecked(&mut out[..]);
    eth.emit(&mut frame);
    let mut ip_packet = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut ip_packet, &caps);
    ip_packet.set_dont_frag(true);
    ip_packet.fill_checksum();
    let mut udp_packet = UdpPacket::new_unchecked(ip_packet.payload_mut());
    udp.emit(
        &mut udp_packet,
        &IpAddress::Ipv4(ip.src_addr),
        &IpAddress::Ipv4(ip.dst_addr),
        payload.len(),
        |buf| buf.copy_from_slice(payload),
        &caps,
    );
    Ok(())
}

/// Finds the UDP datagram in an Ethernet frame, checking the IPv4 header
/// checksum (a wrong one is an error) and the UDP checksum (a wrong one is
/// reported in [`Datagram::udp_checksum_ok`]).
pub fn decapsulate(frame: &[u8]) -> Result<Datagram<'_>, EncapError> {
    let eth = EthernetFrame::new_checked(frame)
        .map_err(|_| EncapError::TruncatedEthernet(frame.len()))?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return Err(EncapError::NotIpv4(u16::from(eth.ethertype())));
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).map_err(|_| EncapError::BadIpv4)?;
    if ip.version() != 4 {
        return Err(EncapError::BadIpv4);
    }
    if !ip.verify_checksum() {
        return Err(EncapError::BadIpv4Checksum);
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Err(EncapError::Fragment);
    }
    if ip.next_header() != IpProtocol::Udp {
        return Err(EncapError::NotUdp(u8::from(ip.next_header())));
    }
    let (src_ip, dst_ip): (Ipv4Addr, Ipv4Addr) = (ip.src_addr(), ip.dst_addr());
    let ip_payload: &[u8] = {
        let start = usize::from(ip.header_len());
        let end = usize::from(ip.total_len());
        &eth.payload()[start..end]
    };
    let udp = UdpPacket::new_checked(ip_payload).map_err(|_| EncapError::BadUdp)?;
    let udp_checksum_ok = udp.checksum() == 0
        || udp.verify_checksum(&IpAddress::Ipv4(src_ip), &IpAddress::Ipv4(dst_ip));
    let payload_end = usize::from(udp.len());
    let payload = &ip_payload[8..payload_end];
    Ok(Datagram {
        src: UdpEndpoint {
            mac: eth.src_addr().0,
            addr: SocketAddrV4::new(src_ip, udp.src_port()),
        },
        dst: UdpEndpoint {
            mac: eth.dst_addr().0,
            addr: SocketAddrV4::new(dst_ip, udp.dst_port()),
        },
        payload,
        udp_checksum_ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (UdpEndpoint, UdpEndpoint) {
        (
            UdpEndpoint::node(NodeAddr(0), 49152),
            UdpEndpoint::node(NodeAddr(1), crate::DEFAULT_UDP_PORT),
        )
    }

    // A 4-byte payload "udrm" from h0:49152 to h1:18791, every byte known.
    static FRAME: [u8; 46] = [
        // Ethernet: dst, src, ethertype IPv4
        0x02, 0x75, 0x64, 0x00, 0x00, 0x02, 0x02, 0x75, 0x64, 0x00, 0x00, 0x01, 0x08, 0x00,
        // IPv4: v4 ihl5, tos, total 32, id 0, DF, ttl 64, udp, checksum, src, dst
        0x45, 0x00, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0xcb, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, // UDP: sport 49152, dport 18791, len 12, checksum
        0xc0, 0x00, 0x49, 0x67, 0x00, 0x0c, 0xfa, 0x99, // payload
        b'u', b'd', b'r', b'm',
    ];

    #[test]
    fn test_construct() {
        let (src, dst) = pair();
        let mut out = Vec::new();
        encapsulate(&src, &dst, b"udrm", &mut out).unwrap();
        assert_eq!(out, FRAME);
    }

    #[test]
    fn test_deconstruct() {
        let d = decapsulate(&FRAME).unwrap();
        let (src, dst) = pair();
        assert_eq!(d.src, src);
        assert_eq!(d.dst, dst);
        assert_eq!(d.payload, b"udrm");
    }

    #[test]
    fn checksums_are_checked() {
        let mut bad_ip = FRAME;
        bad_ip[14 + 8] = 0x3f; // TTL changes, header checksum now wrong
        assert_eq!(decapsulate(&bad_ip), Err(EncapError::BadIpv4Checksum));
        assert!(decapsulate(&FRAME).unwrap().udp_checksum_ok);
        let mut bad_udp = FRAME;
        bad_udp[45] ^= 1;
        let d = decapsulate(&bad_udp).unwrap();
        assert!(!d.udp_checksum_ok);
        assert_eq!(d.payload, b"udrl");
        let mut absent = FRAME;
        absent[14 + 20 + 6..14 + 20 + 8].fill(0);
        assert!(decapsulate(&absent).unwrap().udp_checksum_ok);
        let mut arp = FRAME;
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(decapsulate(&arp), Err(EncapError::NotIpv4(0x0806)));
        assert_eq!(
            decapsulate(&FRAME[..10]),
            Err(EncapError::TruncatedEthernet(10))
        );
        assert_eq!(decapsulate(&FRAME[..30]), Err(EncapError::BadIpv4));
    }

    #[test]
    fn too_large_is_refused() {
        let (src, dst) = pair();
        let big = vec![0u8; MAX_DATAGRAM + 1];
        assert_eq!(
            encapsulate(&src, &dst, &big, &mut Vec::new()),
            Err(EncapError::TooLarge(MAX_DATAGRAM + 1))
        );
        encapsulate(&src, &dst, &big[1..], &mut Vec::new()).unwrap();
    }
}
