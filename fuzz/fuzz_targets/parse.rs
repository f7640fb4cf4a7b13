//! Fuzzes the udrma wire parser: arbitrary datagrams, the same bytes with
//! a correct ICRC appended (random bytes almost never carry one, and the
//! checks behind it are where the layout logic lives), and the bytes as an
//! Ethernet frame. The parser must never panic; whatever it
//! accepts must emit back to an equal Repr.
//!
//! cargo +nightly fuzz run parse        (from the repository root)

#![no_main]

use libfuzzer_sys::fuzz_target;
use udrma_proto::encap::decapsulate;
use udrma_proto::{Packet, Repr};

fn check(data: &[u8]) {
    if let Ok(p) = Packet::new_checked(data) {
        let _ = (p.opcode(), p.flags(), p.msg_id(), p.ext().len(), p.payload().len());
    }
    if let Ok(repr) = Repr::parse_bytes(data) {
        let again = repr.to_vec().expect("a parsed packet re-emits");
        assert_eq!(Repr::parse_bytes(&again), Ok(repr));
        let _ = repr.to_string();
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let mut sealed = data.to_vec();
    sealed.extend_from_slice(&udrma_proto::icrc::icrc(data).to_be_bytes());
    check(&sealed);
    if let Ok(d) = decapsulate(data) {
        check(d.payload);
    }
});
