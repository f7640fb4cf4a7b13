//! Why a buffer is not a valid udrma packet, and why a `Repr` cannot be
//! emitted.

use thiserror::Error;

/// Why bytes failed to parse as a udrma packet.
///
/// Checks run in this order: length floor, ICRC, version, length field,
/// opcode. A corrupted packet therefore reports [`Error::BadChecksum`]
/// whichever byte was hit.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Error {
    /// Shorter than the common header plus the ICRC trailer.
    #[error("truncated: {len} bytes, a packet needs at least {need}")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The ICRC trailer does not match the bytes it covers.
    #[error("bad checksum: ICRC carried {carried:#010x}, computed {computed:#010x}")]
    BadChecksum {
        /// ICRC found in the trailer.
        carried: u32,
        /// ICRC computed over header, extension and payload.
        computed: u32,
    },
    /// A version this implementation does not speak.
    #[error("bad version {0} (this decoder speaks version 1)")]
    BadVersion(u8),
    /// The payload length field disagrees with the datagram length.
    #[error("bad length: {opcode} with payload_len {payload_len} needs {expected} bytes, datagram has {actual}")]
    BadLength {
        /// Opcode byte of the packet.
        opcode: u8,
        /// Payload length from the header.
        payload_len: u16,
        /// Datagram length this opcode and payload length imply (a minimum
        /// for unknown opcodes).
        expected: usize,
        /// Datagram length present.
        actual: usize,
    },
    /// A kind without a data payload declared one.
    #[error("bad length: {opcode} carries no payload but payload_len is {payload_len}")]
    UnexpectedPayload {
        /// Opcode byte of the packet.
        opcode: u8,
        /// Payload length from the header.
        payload_len: u16,
    },
    /// A REDUCE or REDUCE_BCAST payload does not hold exactly `count`
    /// elements of its type (and their locations, for MINLOC/MAXLOC).
    #[error(
        "bad length: REDUCE with {count} elements needs a {expected}-byte payload, has {actual}"
    )]
    BadReduceLength {
        /// Element count from the extension header.
        count: u8,
        /// Payload bytes the count, type and operation imply.
        expected: usize,
        /// Payload bytes present.
        actual: usize,
    },
    /// A datagram handed over with its payload left out (see
    /// [`crate::elide`]) whose payload length field is not the number of
    /// zero bytes left out. Only a simulator makes such datagrams; bytes
    /// off a wire never report this.
    #[error("elided payload: payload_len is {payload_len} but {zeros} zero bytes were left out")]
    ElidedLength {
        /// Payload length from the header.
        payload_len: u16,
        /// Zero bytes said to be left out.
        zeros: u16,
    },
    /// An opcode this implementation does not know; the header is still
    /// readable through [`crate::Packet`].
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
}

/// Why a [`crate::Repr`] could not be written to a buffer.
#[derive(Debug, Error, PartialEq, Eq, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum EmitError {
    /// The output buffer is smaller than [`crate::Repr::buffer_len`].
    #[error("buffer too small: {have} bytes, packet needs {need}")]
    BufferTooSmall {
        /// Bytes available.
        have: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The payload does not fit the 16-bit payload length field.
    #[error("payload of {0} bytes exceeds the 65535-byte payload_len field")]
    PayloadTooLarge(usize),
}
