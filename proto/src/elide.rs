//! Elided payloads: a datagram whose payload is all zeros, carried without
//! it.
//!
//! A simulator with phantom memory moves millions of 4 KB payloads that
//! are all zeros. Writing them, checksumming them at both ends and copying
//! them between buffers was a fifth of a fabric run's time. A [`Datagram`]
//! names a buffer holding the common header, the extension header and the
//! ICRC, plus how many zero bytes of payload belong before the ICRC: the
//! ICRC and every length are judged as if the zeros were there, and the
//! parsed payload is a slice of [`ZEROS`]. Nothing on a real wire is ever
//! elided; the bridge hands over whole datagrams.

use crate::error::{EmitError, Error};
use crate::packet::{Packet, HEADER_LEN, ICRC_LEN};
use crate::repr::Repr;

/// Zero bytes, as many as a payload can hold: what phantom memory reads
/// give and what an elided payload parses to.
pub static ZEROS: [u8; 65_536] = [0; 65_536];

/// Whether `data` lies inside [`ZEROS`] (so is zeros without looking).
/// Empty slices do not count: there is nothing to leave out.
pub fn is_static_zeros(data: &[u8]) -> bool {
    let z = ZEROS.as_ptr_range();
    let d = data.as_ptr_range();
    !data.is_empty() && d.start >= z.start && d.end <= z.end
}

/// A datagram, perhaps with its all-zero payload left out of `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Datagram<'a> {
    /// The whole datagram, or with `zeros` > 0: header, extension and ICRC.
    pub bytes: &'a [u8],
    /// Zero bytes of payload left out, just before the ICRC.
    pub zeros: u16,
}

impl<'a> Datagram<'a> {
    /// A datagram held whole.
    pub const fn whole(bytes: &'a [u8]) -> Datagram<'a> {
        Datagram { bytes, zeros: 0 }
    }

    /// Its length on the wire.
    pub fn len(&self) -> usize {
        self.bytes.len() + usize::from(self.zeros)
    }

    /// Whether it has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The common header's view (its fields lie in the first
    /// [`HEADER_LEN`] bytes either way).
    pub fn header(&self) -> Packet<&'a [u8]> {
        Packet::new_unchecked(self.bytes)
    }

    /// Checks and parses it, as [`Repr::parse_bytes`] would the whole
    /// datagram; an elided payload parses to a slice of [`ZEROS`].
    pub fn parse(&self) -> Result<Repr<'a>, Error> {
        if self.zeros == 0 {
            return Repr::parse_bytes(self.bytes);
        }
        let p = Packet::new_unchecked(self.bytes);
        p.check_elided(self.zeros)?;
        let ext_end = self.bytes.len() - ICRC_LEN;
        Repr::decode(
            &p,
            &self.bytes[HEADER_LEN..ext_end],
            &ZEROS[..usize::from(self.zeros)],
        )
    }

    /// Writes the whole datagram into `out`, replacing its contents.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.clear();
        if self.zeros == 0 || self.bytes.len() < ICRC_LEN {
            out.extend_from_slice(self.bytes);
            out.resize(self.len(), 0);
            return;
        }
        let icrc_at = self.bytes.len() - ICRC_LEN;
        out.extend_from_slice(&self.bytes[..icrc_at]);
        out.resize(icrc_at + usize::from(self.zeros), 0);
        out.extend_from_slice(&self.bytes[icrc_at..]);
    }

    /// The whole datagram in a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        self.write_to(&mut out);
        out
    }
}

impl Repr<'_> {
    /// Emits into `out` like [`Repr::emit_vec`], but leaves the payload out
    /// when it is a slice of [`ZEROS`] (phantom memory); returns the bytes
    /// written and the zero bytes left out (0 when the payload is held).
    pub fn emit_elided_vec(&self, out: &mut Vec<u8>) -> Result<(usize, u16), EmitError> {
        let data = self.body.data();
        if !is_static_zeros(data) {
            return self.emit_vec(out).map(|n| (n, 0));
        }
        let zeros =
            u16::try_from(data.len()).map_err(|_| EmitError::PayloadTooLarge(data.len()))?;
        out.clear();
        out.resize(self.buffer_len() - data.len(), 0);
        let n = self.emit_inner(out, true)?;
        Ok((n, zeros))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::Flags;
    use crate::repr::Body;

    fn write(data: &[u8]) -> Repr<'_> {
        Repr {
            flags: Flags::FIRST | Flags::ACK_REQ,
            src_ep: 1,
            dst_ep: 2,
            op_num: 7,
            msg_id: 9,
            seg_index: 0,
            seg_count: 3,
            credits: 4,
            epoch: 5,
            body: Body::Write {
                remote_addr: 0x1000,
                rkey: 0x42,
                total_len: 12_000,
                data,
            },
        }
    }

    #[test]
    fn an_elided_write_is_the_whole_write_less_its_zeros() {
        let repr = write(&ZEROS[..4000]);
        let whole = repr.to_vec().unwrap();
        let mut short = Vec::new();
        let (n, zeros) = repr.emit_elided_vec(&mut short).unwrap();
        assert_eq!((n, zeros), (whole.len() - 4000, 4000));
        assert_eq!(short.len(), n);
        let d = Datagram {
            bytes: &short,
            zeros,
        };
        assert_eq!(d.len(), whole.len());
        assert_eq!(d.to_vec(), whole, "same bytes, ICRC included");
        assert_eq!(d.parse().unwrap(), Repr::parse_bytes(&whole).unwrap());
        assert!(is_static_zeros(d.parse().unwrap().body.data()));
    }

    #[test]
    fn payloads_not_from_the_zeros_are_held() {
        let real = vec![0u8; 100];
        let repr = write(&real);
        let mut out = Vec::new();
        assert_eq!(repr.emit_elided_vec(&mut out).unwrap(), (out.len(), 0));
        assert_eq!(out, repr.to_vec().unwrap());
        assert!(!is_static_zeros(&real));
        assert!(!is_static_zeros(&ZEROS[..0]));
        assert!(is_static_zeros(&ZEROS[65_000..]));
    }

    #[test]
    fn a_damaged_elided_datagram_is_refused_like_a_whole_one() {
        let repr = write(&ZEROS[..4000]);
        let mut short = Vec::new();
        let (_, zeros) = repr.emit_elided_vec(&mut short).unwrap();
        // One zero too few or too many: the ICRC no longer matches.
        for z in [zeros - 1, zeros + 1] {
            let d = Datagram {
                bytes: &short,
                zeros: z,
            };
            assert!(matches!(d.parse(), Err(Error::BadChecksum { .. })), "{z}");
        }
        // A flipped header bit.
        let mut bad = short.clone();
        bad[HEADER_LEN - 1] ^= 1;
        let d = Datagram { bytes: &bad, zeros };
        assert!(matches!(d.parse(), Err(Error::BadChecksum { .. })));
        // Too short to hold a header.
        let d = Datagram {
            bytes: &short[..10],
            zeros,
        };
        assert!(matches!(d.parse(), Err(Error::Truncated { .. })));
    }

    #[test]
    fn a_payload_partly_held_is_refused() {
        // A whole 8-byte-payload WRITE, claimed to have 4 more zeros left
        // out, with an ICRC that matches that claim: the length field says
        // 8, not 4.
        let data = [0u8; 8];
        let mut whole = write(&data).to_vec().unwrap();
        let icrc_at = whole.len() - ICRC_LEN;
        let crc = crate::icrc::icrc_zeros(crate::icrc::icrc(&whole[..icrc_at]), 4);
        whole[icrc_at..].copy_from_slice(&crc.to_be_bytes());
        let d = Datagram {
            bytes: &whole,
            zeros: 4,
        };
        assert_eq!(
            d.parse(),
            Err(Error::ElidedLength {
                payload_len: 8,
                zeros: 4
            })
        );
    }

    proptest::proptest! {
        /// Any bytes, any count of zeros left out, a valid ICRC over the
        /// whole: the elided view parses exactly as the whole datagram
        /// does (same packet or same error), except that a payload length
        /// other than the zeros left out is refused as such.
        #[test]
        fn an_elided_view_is_the_whole_datagram(
            mut bytes in proptest::collection::vec(proptest::num::u8::ANY, HEADER_LEN + ICRC_LEN..120),
            zeros in 0u16..70,
            version_ok in proptest::bool::ANY,
            opcode in 0u8..24,
            claim_zeros in proptest::bool::ANY,
        ) {
            use crate::packet::VERSION;
            if version_ok {
                bytes[0] = VERSION;
            }
            bytes[1] = opcode;
            // Often make the payload length field the zeros left out, and
            // the buffer exactly header, extension and ICRC, so that many
            // cases parse.
            if claim_zeros {
                if let Some(ext) = crate::Opcode::from(opcode).ext_len() {
                    bytes.resize(HEADER_LEN + ext + ICRC_LEN, 0);
                }
            }
            let p = Packet::new_unchecked(&bytes[..]);
            let declared = if claim_zeros { zeros } else { p.payload_len() };
            let mut p = Packet::new_unchecked(&mut bytes[..]);
            p.set_payload_len(declared);
            let mut whole = Datagram { bytes: &bytes, zeros }.to_vec();
            let n = whole.len();
            let crc = crate::icrc::icrc(&whole[..n - ICRC_LEN]).to_be_bytes();
            whole[n - ICRC_LEN..].copy_from_slice(&crc);
            let m = bytes.len();
            bytes[m - ICRC_LEN..].copy_from_slice(&crc);
            let elided = Datagram { bytes: &bytes, zeros }.parse();
            let direct = Repr::parse_bytes(&whole);
            match elided {
                Err(Error::ElidedLength { payload_len, zeros: z }) => {
                    proptest::prop_assert_eq!(z, zeros);
                    proptest::prop_assert_ne!(payload_len, zeros);
                }
                other => proptest::prop_assert_eq!(other, direct),
            }
        }
    }

    #[test]
    fn scraps_shorter_than_a_header_are_rebuilt_without_panicking() {
        // The zeros go just before the ICRC: with a bare ICRC, in front.
        let icrc_only = Datagram {
            bytes: &[1, 2, 3, 4],
            zeros: 2,
        };
        assert_eq!(icrc_only.to_vec(), vec![0, 0, 1, 2, 3, 4]);
        // With less than an ICRC there is no "before it": appended.
        let scrap = Datagram {
            bytes: &[9, 9],
            zeros: 3,
        };
        assert_eq!(scrap.to_vec(), vec![9, 9, 0, 0, 0]);
        assert!(matches!(
            scrap.parse(),
            Err(Error::Truncated { len: 2, .. })
        ));
        assert!(Datagram::whole(&[]).is_empty());
        assert!(!scrap.is_empty());
    }

    #[test]
    fn whole_datagrams_pass_through() {
        let bytes = write(b"abc").to_vec().unwrap();
        let d = Datagram::whole(&bytes);
        assert_eq!(d.to_vec(), bytes);
        assert_eq!(d.parse().unwrap(), Repr::parse_bytes(&bytes).unwrap());
        assert!(!d.is_empty());
    }
}
