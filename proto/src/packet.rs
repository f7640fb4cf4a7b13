//! `Packet`: a zero-copy, checked view of one udrma datagram.
//!
//! ```text
//! +--------------------+------------------+-----------+------+
//! | common header 32 B | extension header | payload   | ICRC |
//! |                    | (per opcode)     | (data)    | 4 B  |
//! +--------------------+------------------+-----------+------+
//! ```
//! All multi-byte fields are big-endian (network order). The byte-by-byte
//! description lives in `docs/wire-format.md`.

use crate::error::Error;
use crate::flags::Flags;
use crate::icrc::{icrc, icrc_zeros};
use crate::opcode::Opcode;

/// The protocol version this crate emits and accepts.
pub const VERSION: u8 = 1;
/// Length of the common header.
pub const HEADER_LEN: usize = field::EXT_START;
/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Byte ranges of the common header fields.
pub mod field {
    /// A byte range within a packet.
    pub type Field = core::ops::Range<usize>;

    /// Protocol version (1 byte).
    pub const VERSION: usize = 0;
    /// Opcode (1 byte).
    pub const OPCODE: usize = 1;
    /// Flags.
    pub const FLAGS: Field = 2..4;
    /// Source endpoint (VI) number.
    pub const SRC_EP: Field = 4..6;
    /// Destination endpoint (VI) number.
    pub const DST_EP: Field = 6..8;
    /// DMA OP table number (slot in the low 16 bits, generation in the high).
    pub const OP_NUM: Field = 8..12;
    /// Message (operation) id, unique per (source node, source endpoint).
    pub const MSG_ID: Field = 12..16;
    /// Index of this packet within its operation.
    pub const SEG_INDEX: Field = 16..20;
    /// Number of packets in the operation.
    pub const SEG_COUNT: Field = 20..24;
    /// Piggybacked credit update (valid when the CREDITS flag is set).
    pub const CREDITS: Field = 24..26;
    /// Length of the data payload (after the extension header).
    pub const PAYLOAD_LEN: Field = 26..28;
    /// Sender's boot epoch: a restarted peer's stale packets carry an old one.
    pub const EPOCH: Field = 28..32;
    /// First byte of the extension header.
    pub const EXT_START: usize = 32;
}

/// A read-only or read-write view of a udrma datagram (header, extension,
/// payload and ICRC) in a byte buffer.
///
/// Build it with [`Packet::new_checked`]; after that succeeds no accessor
/// panics. [`Packet::new_unchecked`] skips the checks and is meant for
/// writing into a buffer whose length the writer chose.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[r]);
    u16::from_be_bytes(a)
}

fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[r]);
    u32::from_be_bytes(a)
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and runs [`Packet::check`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Packet::new_unchecked(buffer);
        packet.check()?;
        Ok(packet)
    }

    /// Checks, in order: minimum length, ICRC, version, and that the
    /// datagram length equals header + extension + `payload_len` + ICRC
    /// (for unknown opcodes: is at least header + `payload_len` + ICRC).
    ///
    /// The opcode itself is not judged here: an unknown opcode is a value.
    pub fn check(&self) -> Result<(), Error> {
        self.check_elided(0)
    }

    /// [`Packet::check`] for a datagram whose payload, `zeros` zero bytes,
    /// is left out of the buffer (which holds header, extension and ICRC):
    /// the ICRC and the lengths are judged as if the zeros were there, and
    /// the payload length field must be exactly `zeros`.
    pub fn check_elided(&self, zeros: u16) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        let need = HEADER_LEN + ICRC_LEN;
        if b.len() < need {
            return Err(Error::Truncated { len: b.len(), need });
        }
        let computed = icrc_zeros(icrc(&b[..b.len() - ICRC_LEN]), usize::from(zeros));
        let carried = be32(b, b.len() - ICRC_LEN..b.len());
        if computed != carried {
            return Err(Error::BadChecksum { carried, computed });
        }
        if b[field::VERSION] != VERSION {
            return Err(Error::BadVersion(b[field::VERSION]));
        }
        let opcode = Opcode::from(b[field::OPCODE]);
        let payload_len = be16(b, field::PAYLOAD_LEN);
        let actual = b.len() + usize::from(zeros);
        let bad_length = |expected| Error::BadLength {
            opcode: b[field::OPCODE],
            payload_len,
            expected,
            actual,
        };
        if zeros != 0 && payload_len != zeros {
            return Err(Error::ElidedLength { payload_len, zeros });
        }
        match opcode.ext_len() {
            Some(ext) => {
                let expected = HEADER_LEN + ext + payload_len as usize + ICRC_LEN;
                if actual != expected {
                    return Err(bad_length(expected));
                }
            }
            None => {
                let minimum = HEADER_LEN + payload_len as usize + ICRC_LEN;
                if actual < minimum {
                    return Err(bad_length(minimum));
                }
            }
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version byte.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// Opcode (unknown codes as [`Opcode::Unknown`]).
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.buffer.as_ref()[field::OPCODE])
    }

    /// Flags.
    pub fn flags(&self) -> Flags {
        Flags(be16(self.buffer.as_ref(), field::FLAGS))
    }

    /// Source endpoint.
    pub fn src_ep(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_EP)
    }

    /// Destination endpoint.
    pub fn dst_ep(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_EP)
    }

    /// DMA OP table number.
    pub fn op_num(&self) -> u32 {
        be32(self.buffer.as_ref(), field::OP_NUM)
    }

    /// Message id.
    pub fn msg_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::MSG_ID)
    }

    /// Packet index within the operation.
    pub fn seg_index(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEG_INDEX)
    }

    /// Packet count of the operation.
    pub fn seg_count(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEG_COUNT)
    }

    /// Piggybacked credit update.
    pub fn credits(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CREDITS)
    }

    /// Data payload length.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    /// Sender's boot epoch.
    pub fn epoch(&self) -> u32 {
        be32(self.buffer.as_ref(), field::EPOCH)
    }

    /// The extension header: for unknown opcodes, everything between the
    /// common header and the payload.
    pub fn ext(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN..self.payload_start()]
    }

    /// The data payload.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.payload_start()..b.len() - ICRC_LEN]
    }

    /// The ICRC carried in the trailer.
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        be32(b, b.len() - ICRC_LEN..b.len())
    }

    fn payload_start(&self) -> usize {
        let b = self.buffer.as_ref();
        b.len() - ICRC_LEN - self.payload_len() as usize
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The extension header and the payload, borrowed for the buffer's
    /// whole lifetime rather than the view's (what `Repr::parse` needs).
    pub(crate) fn ext_and_payload(&self) -> (&'a [u8], &'a [u8]) {
        let b: &'a [u8] = self.buffer.as_ref();
        let start = self.payload_start();
        (&b[HEADER_LEN..start], &b[start..b.len() - ICRC_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn put16(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    fn put32(&mut self, r: core::ops::Range<usize>, v: u32) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the version byte.
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }

    /// Sets the opcode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = v.into();
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, v: Flags) {
        self.put16(field::FLAGS, v.bits());
    }

    /// Sets the source endpoint.
    pub fn set_src_ep(&mut self, v: u16) {
        self.put16(field::SRC_EP, v);
    }

    /// Sets the destination endpoint.
    pub fn set_dst_ep(&mut self, v: u16) {
        self.put16(field::DST_EP, v);
    }

    /// Sets the op number.
    pub fn set_op_num(&mut self, v: u32) {
        self.put32(field::OP_NUM, v);
    }

    /// Sets the message id.
    pub fn set_msg_id(&mut self, v: u32) {
        self.put32(field::MSG_ID, v);
    }

    /// Sets the segment index.
    pub fn set_seg_index(&mut self, v: u32) {
        self.put32(field::SEG_INDEX, v);
    }

    /// Sets the segment count.
    pub fn set_seg_count(&mut self, v: u32) {
        self.put32(field::SEG_COUNT, v);
    }

    /// Sets the piggybacked credits.
    pub fn set_credits(&mut self, v: u16) {
        self.put16(field::CREDITS, v);
    }

    /// Sets the payload length field.
    pub fn set_payload_len(&mut self, v: u16) {
        self.put16(field::PAYLOAD_LEN, v);
    }

    /// Sets the epoch.
    pub fn set_epoch(&mut self, v: u32) {
        self.put32(field::EPOCH, v);
    }

    /// Mutable extension header (per the current payload length field).
    pub fn ext_mut(&mut self) -> &mut [u8] {
        let start = self.payload_start();
        &mut self.buffer.as_mut()[HEADER_LEN..start]
    }

    /// Mutable data payload (per the current payload length field).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.payload_start();
        let end = self.buffer.as_ref().len() - ICRC_LEN;
        &mut self.buffer.as_mut()[start..end]
    }

    /// Computes the ICRC over everything before the trailer and stores it.
    pub fn fill_icrc(&mut self) {
        let len = self.buffer.as_ref().len();
        let value = icrc(&self.buffer.as_ref()[..len - ICRC_LEN]);
        self.put32(len - ICRC_LEN..len, value);
    }
}
