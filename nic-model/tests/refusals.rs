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

/// The overhanging WRITE, its first FIRST packet lost: it must fail out
/// of bounds and land nothing.
fn refused_without_its_first_packet(s: &mut Setup) {
    let before = tail_of_target(s);
    s.pair.set_filter(|w| match w.repr {
        Some(r) if r.kind_name() == "WRITE_FIRST" && w.n == 0 => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    let wr = overhanging_write(s);
    s.pair.run();
    assert_eq!(
        s.completions(0, wr),
        vec![Err(WcError::Remote(Syndrome::OutOfBounds))]
    );
    assert!(
        tail_of_target(s) == before,
        "nothing of a refused WRITE lands"
    );
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
    // The FIRST packet is lost, so the second registers the operation.
    refused_without_its_first_packet(&mut s);
    assert!(s.pair.nics[1].is_idle() && s.pair.nics[0].is_idle());
}

/// h0 with `sender` registration, h1 with `receiver`, the usual regions.
fn mixed(sender: RegistrationMode, receiver: RegistrationMode) -> Setup {
    let base = setup(config());
    let mut s = Setup {
        pair: udrma_nic::pair::Pair::with_configs(
            NicConfig {
                registration: sender,
                ..config()
            },
            NicConfig {
                registration: receiver,
                ..config()
            },
        ),
        src: base.src,
        dst: base.dst,
    };
    for (i, nic) in base.pair.nics.iter().enumerate() {
        for (_, r) in nic.memory().regions() {
            let key = s.pair.nics[i].register(r.base, r.bytes.len(), r.access);
            s.pair.nics[i].memory_mut().region_mut(key).unwrap().bytes = r.bytes.clone();
        }
    }
    s
}

#[test]
fn packets_that_do_not_describe_their_operation_never_register_it() {
    // A FIRST-only sender leaves `total_len` 0 after the FIRST packet: a
    // self-describing receiver must not register from those (it could not
    // check the range), so they wait for the FIRST in the escape channel.
    let mut s = mixed(
        RegistrationMode::FirstOnly,
        RegistrationMode::SelfDescribing,
    );
    refused_without_its_first_packet(&mut s);
    assert!(s.pair.nics[1].stats().escape_buffered >= 2);
    assert_eq!(s.pair.nics[1].occupancy().registry.1, 0, "never registered");
}

#[test]
fn a_first_only_receiver_waits_for_the_first_packet_even_when_others_describe_themselves() {
    let mut s = mixed(
        RegistrationMode::SelfDescribing,
        RegistrationMode::FirstOnly,
    );
    let mut held = false;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if !held && r.kind_name() == "WRITE_FIRST" => {
            held = true;
            Verdict::Delay(udrma_nic::Duration::from_micros(5))
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(4096);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(4096);
    let rx = s.pair.nics[1].stats();
    assert_eq!((rx.escape_buffered, rx.escape_drained), (3, 3));
}

#[test]
fn a_self_describing_packet_whose_numbers_cannot_add_up_is_invalid() {
    // Packet 5 of a WRITE whose packets carry 1 KiB cannot start 1 KiB
    // into the address space.
    let mut s = setup(self_describing());
    let mut fresh = setup(self_describing());
    fresh.write(8 * 1024);
    let mut buf = Vec::new();
    let mut second = Vec::new();
    for _ in 0..2 {
        let t = fresh.pair.nics[0]
            .poll_transmit(udrma_nic::Instant::ZERO, &mut buf)
            .unwrap();
        second = buf[..t.len].to_vec();
    }
    second[16..20].copy_from_slice(&5u32.to_be_bytes());
    let addr_at = 32; // the WRITE extension starts with remote_addr
    second[addr_at..addr_at + 8].copy_from_slice(&1024u64.to_be_bytes());
    udrma_proto::Packet::new_unchecked(&mut second[..]).fill_icrc();
    s.pair.inject(0, second);
    s.pair.run();
    let rx = s.pair.nics[1].stats();
    assert_eq!(rx.rx_invalid, 1);
    assert_eq!(rx.nacks_sent.get(&Syndrome::InvalidRequest), Some(&1));
    assert_eq!(s.pair.nics[1].occupancy().registry.1, 0);
}

#[test]
fn a_short_last_packet_that_arrives_first_names_the_range_right() {
    // 2.5 KiB ending exactly at the end of h1's region: packets of 1 KiB,
    // 1 KiB and 512 B. The first two are lost, so the short last packet
    // registers the operation: its range starts 2 KiB before it, not two
    // of its own lengths before it. The WRITE fits and must land.
    let mut s = setup(self_describing());
    let at = LEN as u64 - 2560;
    s.pair.set_filter(|w| match w.repr {
        Some(r) if r.seg_index < 2 && w.n < 2 => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    let wr = s.write_at(at, 2560);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert_eq!(
        s.dst_bytes(at as usize, 2560),
        s.src_bytes(at as usize, 2560)
    );
    assert_eq!(s.pair.nics[1].stats().nacks_out(), 0);
}
