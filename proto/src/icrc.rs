//! The ICRC: a CRC-32 (IEEE 802.3 polynomial, reflected, as in Ethernet and
//! zlib) over the common header, the extension header and the payload.
//!
//! It is carried big-endian in the last four bytes of every udrma datagram.
//! Any single bit flip anywhere in a packet (trailer included) makes the
//! check fail; `docs/wire-format.md` gives a known-answer value.

/// CRC-32 of `bytes` as the ICRC defines it.
pub fn icrc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answer() {
        // The standard CRC-32 check value.
        assert_eq!(icrc(b"123456789"), 0xCBF4_3926);
        assert_eq!(icrc(b""), 0);
    }
}
