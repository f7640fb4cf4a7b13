//! A WRITE the receiver refuses writes nothing, whichever of its packets
//! arrives first. With self-describing packets any packet may register
//! the operation, so every packet must let the receiver check the
//! operation's whole range, not only its own bytes.

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{NicConfig, RegistrationMode, WcError, WorkRequest};
use udrma_proto::{NodeAddr, Syndrome};

fn self_describing() -> NicConfig {
    NicConfig {
        registration: RegistrationMode::SelfDescribing,
        ..config()
    }
}

/// h0 WRITEs 3 KiB (three packets) so that it runs 1 KiB past the end of
/// h1's region: the first two packets are in bounds, the last is not.
fn overhanging_write(s: &mut Setup) -> udrma_nic::WrId {
    let wr = WorkRequest::write(
        NodeAddr(1),
        s.src,
        SRC,
        3 * 1024,
        s.dst.0,
        DST + LEN as u64 - 2048,
    );
    s.pair.nics[0].post(s.pair.now, wr).unwrap()
}

fn tail_of_target(s: &Setup) -> Vec<u8> {
    s.dst_bytes(LEN - 4096, 4096)
}

#[test]
fn a_refused_first_packet_does_not_let_the_next_one_write() {
    let mut s = setup(self_describing());
    let before = tail_of_target(&s);
    let wr = overhanging_write(&mut s);
    s.pair.run();
    assert_eq!(
        s.completions(0, wr),
        vec![Err(WcError::Remote(Syndrome::OutOfBounds))]
    );
    assert!(
        tail_of_target(&s) == before,
        "the second packet, in bounds on its own, must not land"
    );
}

#[test]
fn a_middle_packet_that_arrives_first_is_checked_for_the_whole_range() {
    let mut s = setup(self_describing());
    let before = tail_of_target(&s);
    // The FIRST packet is lost, so the second registers the operation.
    s.pair.set_filter(|w| match w.repr {
        Some(r) if r.kind_name() == "WRITE_FIRST" && w.n == 0 => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    let wr = overhanging_write(&mut s);
    s.pair.run();
    assert_eq!(
        s.completions(0, wr),
        vec![Err(WcError::Remote(Syndrome::OutOfBounds))]
    );
    assert!(
        tail_of_target(&s) == before,
        "nothing of a refused WRITE lands"
    );
    assert!(s.pair.nics[1].is_idle() && s.pair.nics[0].is_idle());
}
