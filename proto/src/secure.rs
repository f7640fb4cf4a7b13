//! The authenticated mode's framing (docs/wire-format.md, "Authenticated
//! mode"): a 24-byte security header in front of the packet, the packet's
//! payload encrypted, and a 16-byte AEAD tag in place of its ICRC.
//!
//! ```text
//! | security header (24) | common header + extension | payload (sealed) | tag (16) |
//! ```
//!
//! This module only frames; the cryptography (AES-256-GCM from `ring`,
//! under a subkey per sender) lives in the UDP bridge, which seals what
//! its engine sends and opens what arrives before the engine sees it.

use crate::{Error, Opcode, HEADER_LEN, ICRC_LEN};

/// The first byte of a sealed datagram (a plain packet starts with its
/// version, 1).
pub const MARKER: u8 = 0x81;

/// Bytes of the security header.
pub const SEC_HEADER_LEN: usize = 24;

/// Bytes of the AEAD tag that ends a sealed datagram.
pub const TAG_LEN: usize = 16;

/// How many more bytes a sealed datagram has than the plain packet.
pub const OVERHEAD: usize = SEC_HEADER_LEN + TAG_LEN - ICRC_LEN;

/// The security header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct SecHeader {
    /// Which key sealed it (receivers may hold several: rotation).
    pub key_id: u8,
    /// The sender's random identity for this life (12 bytes, drawn at
    /// start): each sender seals under its own subkey derived from it, so
    /// two senders sharing a key never reuse a nonce.
    pub sender: [u8; 12],
    /// The sender's sequence number: from 1, one per datagram, never
    /// reused under one key and sender; it makes the AEAD nonce.
    pub seq: u64,
}

impl SecHeader {
    /// Writes the header into the first [`SEC_HEADER_LEN`] bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) {
        out[0] = MARKER;
        out[1] = self.key_id;
        out[2] = 0;
        out[3] = 0;
        out[4..16].copy_from_slice(&self.sender);
        out[16..24].copy_from_slice(&self.seq.to_be_bytes());
    }
}

/// A sealed datagram taken apart (nothing checked but lengths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Sealed<'a> {
    /// The security header.
    pub header: SecHeader,
    /// Security header, common header and extension: the associated data.
    pub aad: &'a [u8],
    /// The sealed payload.
    pub ciphertext: &'a [u8],
    /// The tag.
    pub tag: &'a [u8; TAG_LEN],
}

/// Whether `bytes` is a sealed datagram (by its first byte).
pub fn is_sealed(bytes: &[u8]) -> bool {
    bytes.first() == Some(&MARKER)
}

/// Takes a sealed datagram apart: the security header, the associated
/// data (it and the packet's headers), the sealed payload and the tag.
/// Fails on a wrong marker, a datagram too short for its opcode's
/// headers, or an unknown opcode.
pub fn split(bytes: &[u8]) -> Result<Sealed<'_>, Error> {
    let need = SEC_HEADER_LEN + HEADER_LEN + TAG_LEN;
    if bytes.len() < need {
        return Err(Error::Truncated {
            len: bytes.len(),
            need,
        });
    }
    if bytes[0] != MARKER {
        return Err(Error::BadVersion(bytes[0]));
    }
    let opcode = Opcode::from(bytes[SEC_HEADER_LEN + 1]);
    let Some(ext) = opcode.ext_len() else {
        return Err(Error::UnknownOpcode(bytes[SEC_HEADER_LEN + 1]));
    };
    let aad_len = SEC_HEADER_LEN + HEADER_LEN + ext;
    if bytes.len() < aad_len + TAG_LEN {
        return Err(Error::Truncated {
            len: bytes.len(),
            need: aad_len + TAG_LEN,
        });
    }
    let mut sender = [0u8; 12];
    sender.copy_from_slice(&bytes[4..16]);
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&bytes[16..24]);
    let tag_at = bytes.len() - TAG_LEN;
    Ok(Sealed {
        header: SecHeader {
            key_id: bytes[1],
            sender,
            seq: u64::from_be_bytes(seq),
        },
        aad: &bytes[..aad_len],
        ciphertext: &bytes[aad_len..tag_at],
        tag: bytes[tag_at..].try_into().expect("TAG_LEN bytes"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Body, Flags, Repr};

    #[test]
    fn a_sealed_frame_splits_into_its_parts_and_short_ones_are_errors() {
        let pkt = Repr {
            flags: Flags::FIRST,
            src_ep: 1,
            dst_ep: 2,
            op_num: 3,
            msg_id: 4,
            seg_index: 0,
            seg_count: 1,
            credits: 0,
            epoch: 9,
            body: Body::Write {
                remote_addr: 0x1000,
                rkey: 5,
                total_len: 3,
                data: b"abc",
            },
        }
        .to_vec()
        .unwrap();
        let h = SecHeader {
            key_id: 7,
            sender: [0xaa; 12],
            seq: 42,
        };
        let mut d = vec![0u8; SEC_HEADER_LEN];
        h.emit(&mut d);
        d.extend_from_slice(&pkt[..pkt.len() - ICRC_LEN]);
        d.extend_from_slice(&[0xee; TAG_LEN]);
        assert_eq!(d.len(), pkt.len() + OVERHEAD);
        assert!(is_sealed(&d) && !is_sealed(&pkt));
        let s = split(&d).unwrap();
        assert_eq!(s.header, h);
        assert_eq!(s.aad.len(), SEC_HEADER_LEN + HEADER_LEN + 16);
        assert_eq!(s.ciphertext, b"abc");
        assert_eq!(s.tag, &[0xee; TAG_LEN]);
        for n in 0..d.len() - 3 {
            assert!(split(&d[..n]).is_err(), "{n} bytes");
        }
        assert!(split(&pkt).is_err(), "a plain packet is not sealed");
        let mut unknown = d.clone();
        unknown[SEC_HEADER_LEN + 1] = 0x7f;
        assert_eq!(split(&unknown), Err(Error::UnknownOpcode(0x7f)));
    }
}
