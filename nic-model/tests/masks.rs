//! Operations past one mask word: the receive registry's bitmask spans
//! several 64-bit words once an operation has more than 64 packets, and
//! duplicates, losses and reordering must be judged the same in every
//! word (a mask that ignored bits from 64 on would count duplicates as
//! data and complete early or late).

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{Event, NicConfig};
use udrma_proto::{Duration, Flags};

/// mtu 1024 and no segmentation up to 1 MiB: an operation of `n` KiB is
/// one registry entry of `n` packets.
fn long_ops() -> NicConfig {
    NicConfig {
        segment_threshold: 1 << 20,
        segment_size: 1 << 20,
        ..config()
    }
}

/// The receiver completions h1 raised: (bytes, how many).
fn landed(s: &Setup) -> Vec<u64> {
    s.pair
        .events_of(1)
        .filter_map(|e| match e {
            Event::WriteReceived { len, .. } => Some(*len),
            _ => None,
        })
        .collect()
}

/// The segment index of a first-transmission data packet.
fn data_seg(w: &udrma_nic::pair::Wire<'_>) -> Option<u32> {
    is_data(w).then(|| w.repr.map(|r| r.seg_index)).flatten()
}

#[test]
fn duplicates_past_the_first_mask_word_are_dropped_not_counted() {
    // A 100 KiB WRITE is 100 packets: bits 0-63 in word 0, 64-99 in word
    // 1. Every packet of word 1 arrives twice.
    let mut s = setup(long_ops());
    s.pair.set_filter(|w| match data_seg(w) {
        Some(i) if i >= 64 => Verdict::Duplicate(1),
        _ => Verdict::Deliver,
    });
    let wr = s.write(100 << 10);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(100 << 10);
    assert_eq!(
        landed(&s),
        vec![102_400],
        "received length counts each packet once"
    );
    let rx = s.pair.nics[1].stats();
    assert_eq!(rx.dup_dropped + rx.stale_dropped, 36, "36 copies dropped");
}

#[test]
fn losses_at_every_word_boundary_of_a_300_packet_operation_recover() {
    // Packets either side of each word boundary are lost once, and the
    // last one: the mask must wait for exactly these.
    let lost = [0u32, 63, 64, 127, 128, 191, 192, 255, 256, 299];
    let mut s = setup(long_ops());
    s.pair.set_filter(move |w| match data_seg(w) {
        Some(i) if lost.contains(&i) => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    let wr = s.write(300 << 10);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(300 << 10);
    assert_eq!(landed(&s), vec![300 << 10]);
    assert!(s.retransmits() >= lost.len() as u64);
}

#[test]
fn reordering_across_word_boundaries_completes_once() {
    // Word 1 and word 3 of a 256-packet WRITE are held back so that they
    // arrive after words 2 and 4 (the FIRST packet is on time), and word
    // 2 arrives twice.
    let mut s = setup(long_ops());
    s.pair.set_filter(|w| match data_seg(w) {
        Some(i) if (64..128).contains(&i) || (192..256).contains(&i) => {
            Verdict::Delay(Duration::from_micros(300))
        }
        Some(i) if (128..192).contains(&i) => Verdict::Duplicate(1),
        _ => Verdict::Deliver,
    });
    let wr = s.write(256 << 10);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(256 << 10);
    assert_eq!(landed(&s), vec![256 << 10]);
    let rx = s.pair.nics[1].stats();
    assert_eq!(rx.dup_dropped, 64);
}

#[test]
fn a_long_read_with_duplicated_responses_lands_once() {
    // READ responses come back as one 200-packet operation; every
    // response from index 100 on is duplicated.
    let mut s = setup(long_ops());
    s.pair.set_filter(|w| {
        let resp = w.repr.is_some_and(|r| {
            r.kind_name().starts_with("READ_RESP") && !r.flags.contains(Flags::RETRANSMIT)
        });
        match w.repr.map(|r| r.seg_index) {
            Some(i) if resp && i >= 100 => Verdict::Duplicate(1),
            _ => Verdict::Deliver,
        }
    });
    let wr = s.read(200 << 10);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert!(s.src_bytes(0, 200 << 10) == s.dst_bytes(0, 200 << 10));
    // 99 copies meet the incomplete operation; the last packet's copy
    // comes after the READ completed.
    let rx = s.pair.nics[0].stats();
    assert_eq!((rx.dup_dropped, rx.stale_read_responses), (99, 1));
}
