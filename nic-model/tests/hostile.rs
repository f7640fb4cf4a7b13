//! Hostile datagrams, one inconsistency at a time: each is refused before
//! it changes any state, counted under its own reason, and answered with
//! a NACK only where the header held together well enough to trust.

mod common;

use common::*;
use udrma_proto::Syndrome;

/// The FIRST packet of a 2 KiB WRITE (two packets of 1 KiB), as h0 sends it.
fn first_packet() -> Vec<u8> {
    first_write_packet(config())
}

/// The FIRST packet of a 2 KiB SEND, as h0 sends it.
fn first_send_packet() -> Vec<u8> {
    first_packet_of(config(), |s| {
        udrma_nic::WorkRequest::send(udrma_proto::NodeAddr(1), s.src, SRC, 2048)
    })
}

fn with_u32(mut bytes: Vec<u8>, at: usize, v: u32) -> Vec<u8> {
    bytes[at..at + 4].copy_from_slice(&v.to_be_bytes());
    reseal(bytes)
}

/// Injects `bytes` from h0 into a fresh pair and returns the pair after
/// it settles.
fn deliver(bytes: Vec<u8>) -> Setup {
    let mut s = setup(config());
    s.pair.inject(0, bytes);
    s.pair.run();
    s
}

fn assert_untouched(s: &Setup, what: &str) {
    assert!(
        s.dst_bytes(0, 4096) == pattern(4096, 0xc3),
        "{what}: nothing written"
    );
    let o = s.pair.nics[1].occupancy();
    assert_eq!(
        (o.registry.1, o.escape_entries.1, o.tombstones.1),
        (0, 0, 0),
        "{what}: no state created, even for a moment"
    );
}

#[test]
fn every_inconsistent_segment_numbering_is_refused_and_counted() {
    let max = config().max_packets_per_op();
    for (kind, good) in [("WRITE", first_packet()), ("SEND", first_send_packet())] {
        let cases = [
            ("no packets at all", with_u32(good.clone(), 20, 0)),
            ("index equal to the count", with_u32(good.clone(), 16, 2)),
            ("index past the count", with_u32(good.clone(), 16, 9)),
            (
                "more packets than an operation may have",
                with_u32(good.clone(), 20, max as u32 + 1),
            ),
        ];
        for (what, bytes) in cases {
            let what = format!("{kind}: {what}");
            let s = deliver(bytes);
            let rx = s.pair.nics[1].stats();
            assert_eq!(rx.rx_invalid, 1, "{what}");
            assert_eq!(
                rx.nacks_sent.get(&Syndrome::InvalidRequest),
                Some(&1),
                "{what}"
            );
            assert_untouched(&s, &what);
        }
    }
    let good = first_packet();
    // The same packet with its own numbers is accepted (the cases above
    // fail for the reason they name).
    let s = deliver(good);
    assert_eq!(s.pair.nics[1].stats().rx_invalid, 0);
    assert_eq!(s.pair.nics[1].occupancy().registry.1, 1);
}

#[test]
fn a_wrong_version_and_a_wrong_length_are_counted_apart() {
    let good = first_packet();
    let mut version = good.clone();
    version[0] = 2;
    let mut short = good.clone();
    // payload_len says one byte less than the datagram carries.
    let len = u16::from_be_bytes([short[26], short[27]]) - 1;
    short[26..28].copy_from_slice(&len.to_be_bytes());
    let mut s = setup(config());
    s.pair.inject(0, reseal(version));
    s.pair.inject(0, reseal(short));
    s.pair.run();
    let rx = s.pair.nics[1].stats();
    assert_eq!(
        (
            rx.rx_datagrams,
            rx.rx_bad_version,
            rx.rx_bad_length,
            rx.rx_bad_checksum
        ),
        (2, 1, 1, 0)
    );
    assert!(
        rx.nacks_sent.is_empty(),
        "an untrusted header gets no answer"
    );
    assert_untouched(&s, "version and length");
}

#[test]
fn a_packet_that_changes_its_operations_packet_count_is_refused() {
    // The FIRST packet of a 2-packet WRITE registers the operation; its
    // second packet is lost. A forged copy of the FIRST claiming 3 packets
    // cannot belong to the registered operation.
    let good = first_packet();
    let mut s = setup(config());
    let soon = |s: &Setup| s.pair.now + udrma_nic::Duration::from_micros(5);
    s.pair.inject(0, good.clone());
    s.pair.advance_to(soon(&s));
    assert_eq!(s.pair.nics[1].occupancy().registry.0, 1, "half received");
    s.pair.inject(0, with_u32(good, 20, 3));
    s.pair.advance_to(soon(&s));
    let rx = s.pair.nics[1].stats();
    assert_eq!(rx.rx_invalid, 1);
    assert_eq!(rx.nacks_sent.get(&Syndrome::InvalidRequest), Some(&1));
    assert_eq!(rx.dup_dropped, 0, "not taken for a duplicate");
}
