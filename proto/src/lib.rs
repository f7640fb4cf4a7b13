//! `udrma-proto`: the wire formats of udrma, and the plain values every
//! floor shares (simulated time, seeded random streams).
//!
//! This crate owns every byte the protocol puts on a wire: the common
//! header, the per-opcode extension headers, the ICRC trailer
//! ([`packet`], [`repr`]), the Ethernet/IPv4/UDP encapsulation used by
//! captures ([`encap`]) and the nanosecond pcap files people open in
//! Wireshark ([`pcap`]). It performs no I/O of its own beyond the
//! `std::io::{Read, Write}` handles the caller passes to [`pcap`], and it
//! never reads a clock.
//!
//! # The no-panic promise
//!
//! Every parser here accepts arbitrary bytes. [`Packet::new_checked`]
//! validates a buffer once (length, version, ICRC, length field against
//! the opcode's layout); after it returns `Ok`, no accessor of that
//! [`Packet`] can panic. [`Repr::parse`] builds on it, and unknown codes
//! (opcodes, syndromes, rendezvous protocols) are kept as
//! `Unknown(u8)` values so the layer above can decide what to do with
//! them. `docs/wire-format.md` in the repository describes every byte.
//!
//! The simulated-time types [`Instant`] and [`Duration`] (picoseconds) also
//! live here: they are plain values, not a clock, and every crate above
//! (the engine, the fault rules, the fabric) shares them. So do the seeded
//! ChaCha8 streams of [`rng`]: one per component, derived from the master
//! seed, never from the OS.
//!
//! Layout follows smoltcp's `wire` module: a zero-copy checked view
//! ([`Packet`]) beside a typed representation ([`Repr`]) with `parse`,
//! `emit` and `buffer_len`.
//!
//! Children not named above:
//! - `macros`: `enum_with_unknown!`: wire codes whose unknown values stay values
//! - `addr`: `NodeAddr`: how the engine names a host, and the Ethernet/IPv4 addresses captures give it
//! - `elide`: Elided payloads: a datagram whose payload is all zeros, carried without it
//! - `error`: Why a buffer is not a valid udrma packet, and why a `Repr` cannot be emitted
//! - `flags`: The 16-bit flags field of the common header
//! - `icrc`: The ICRC: a CRC-32
//! - `samples`: One packet of every kind, with plausible field values
//! - `secure`: The authenticated mode's framing (docs/wire-format.md, "Authenticated mode")
//! - `pfc`: Priority Flow Control frames (IEEE 802.1Qbb PAUSE and RESUME), for a lossless link

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod macros;

pub mod addr;
pub mod elide;
pub mod encap;
pub mod error;
pub mod flags;
pub mod icrc;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod pfc;
pub mod repr;
pub mod rng;
pub mod samples;
pub mod secure;
pub mod time;

pub use addr::NodeAddr;
pub use elide::Datagram;
pub use error::{EmitError, Error};
pub use flags::Flags;
pub use opcode::{
    Opcode, Position, Protocol, ReduceOp, ReduceType, Syndrome, RNR_LOST, TRIMMED_AHEAD,
};
pub use packet::{Packet, HEADER_LEN, ICRC_LEN, VERSION};
pub use repr::{Body, Detail, Hello, ReduceHeader, Rendezvous, Repr};
#[cfg(feature = "fingerprint")]
pub use time::fingerprint_origin;
#[cfg(feature = "fingerprint")]
pub use time::not_before_now;
pub use time::{Duration, Instant};

/// The UDP port udrma uses unless configured otherwise (destination port of
/// every protocol datagram; the Wireshark dissector registers on it).
///
/// Chosen away from RoCEv2's 4791 so Wireshark's own RoCE dissector does
/// not claim our traffic.
pub const DEFAULT_UDP_PORT: u16 = 18791;
