//! Protocol stories over virtual time: two NICs, a 1 µs wire, and packets
//! dropped, duplicated, delayed and reordered one by one.

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{
    Access, AckMode, Duration, Event, Instant, NicConfig, PostError, RegistrationMode,
    RetransmitMode, WcError, WorkRequest, WrKind,
};
use udrma_proto::{Flags, NodeAddr, Opcode, Syndrome};

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

// ------------------------------------------------------------ clean paths

#[test]
fn clean_writes_of_every_size_land_byte_exact() {
    // 1 byte, exactly one packet, many packets, and a large transfer cut
    // into 64 KiB segments (threshold 256 KiB).
    for len in [1u64, 1024, 10 * 1024 + 5, 600 * 1024] {
        let mut s = setup(config());
        let wr = s.write(len);
        s.pair.run();
        s.assert_ok_once(0, wr);
        s.assert_written(len as usize);
        let ops = if len > 256 * 1024 {
            len.div_ceil(64 * 1024)
        } else {
            1
        };
        let received = s
            .pair
            .events_of(1)
            .filter(|e| matches!(e, Event::WriteReceived { .. }))
            .count();
        assert_eq!(
            received as u64, ops,
            "one receiver completion per segment operation ({len} B)"
        );
        assert_eq!(s.retransmits(), 0);
        assert_eq!(
            s.pair.nics[0].stats().data_sent,
            if len > 256 * 1024 {
                600
            } else {
                len.div_ceil(1024)
            }
        );
        assert!(s.pair.nics[0].is_idle() && s.pair.nics[1].is_idle());
    }
}

#[test]
fn only_the_last_segment_carries_the_local_completion_flag() {
    let mut s = setup(config());
    let wr = s.write(300 * 1024); // 5 segments: 4 × 64 KiB + 44 KiB
    s.pair.run();
    s.assert_ok_once(0, wr);
    let flagged: Vec<u32> = s
        .pair
        .log
        .iter()
        .filter(|l| l.kind.starts_with("WRITE"))
        .map(|l| l.msg_id)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        flagged.len(),
        5,
        "five segment operations, five message ids"
    );
    // Re-run and look at the flags of each segment's packets.
    let mut s = setup(config());
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    s.pair.set_filter(move |w| {
        if let Some(r) = w.repr.filter(|r| r.opcode() == Opcode::Write) {
            log.borrow_mut()
                .push((r.msg_id, r.flags.contains(Flags::LAST_SEGMENT)));
        }
        Verdict::Deliver
    });
    s.write(300 * 1024);
    s.pair.run();
    let seen = seen.borrow();
    let last_msg = seen.iter().map(|(m, _)| *m).max().unwrap();
    assert!(seen.iter().all(|(m, flag)| *flag == (*m == last_msg)));
}

#[test]
fn clean_reads_of_every_size_land_byte_exact() {
    for len in [1u64, 1024, 10 * 1024 + 5, 600 * 1024] {
        let mut s = setup(config());
        let wr = s.read(len);
        s.pair.run();
        s.assert_ok_once(0, wr);
        assert!(
            s.src_bytes(0, len as usize) == s.dst_bytes(0, len as usize),
            "READ of {len} B"
        );
        assert_eq!(s.retransmits(), 0);
    }
}

#[test]
fn sends_fill_posted_receive_buffers_in_order() {
    for len in [1u64, 1024, 10 * 1024 + 5] {
        let mut s = setup(config());
        let recv = s.pair.nics[1]
            .post_recv(s.pair.now, 0, s.dst, DST, 64 * 1024)
            .unwrap();
        let wr = s.pair.nics[0]
            .post(s.pair.now, WorkRequest::send(NodeAddr(1), s.src, SRC, len))
            .unwrap();
        s.pair.run();
        s.assert_ok_once(0, wr);
        s.assert_ok_once(1, recv);
        s.assert_written(len as usize);
        let got = s.pair.events_of(1).find_map(|e| match e {
            Event::Completed {
                kind: WrKind::Recv,
                len,
                ..
            } => Some(*len),
            _ => None,
        });
        assert_eq!(got, Some(len));
    }
    // A SEND larger than one operation is refused at post.
    let mut s = setup(config());
    let too_long = s.pair.nics[0].post(
        s.pair.now,
        WorkRequest::send(NodeAddr(1), s.src, SRC, 512 * 1024),
    );
    assert_eq!(
        too_long,
        Err(PostError::TooLong {
            len: 512 * 1024,
            max: 256 * 1024
        })
    );
}

#[test]
fn send_without_a_posted_buffer_waits_for_one() {
    let mut s = setup(NicConfig {
        rnr_delay: us(20),
        ..config()
    });
    let wr = s.pair.nics[0]
        .post(s.pair.now, WorkRequest::send(NodeAddr(1), s.src, SRC, 3000))
        .unwrap();
    s.pair.advance_to(Instant::ZERO + us(30));
    assert!(s.pair.nics[0].stats().nacks_received[&Syndrome::ReceiverNotReady] >= 1);
    let recv = s.pair.nics[1]
        .post_recv(s.pair.now, 0, s.dst, DST, 4096)
        .unwrap();
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_ok_once(1, recv);
    s.assert_written(3000);
}

#[test]
fn send_too_long_for_the_buffer_fails_and_the_buffer_stays_posted() {
    let mut s = setup(config());
    let recv = s.pair.nics[1]
        .post_recv(s.pair.now, 0, s.dst, DST, 100)
        .unwrap();
    let big = s.pair.nics[0]
        .post(s.pair.now, WorkRequest::send(NodeAddr(1), s.src, SRC, 101))
        .unwrap();
    s.pair.run();
    assert_eq!(
        s.completions(0, big),
        vec![Err(WcError::Remote(Syndrome::OutOfBounds))]
    );
    assert!(
        s.completions(1, recv).is_empty(),
        "the buffer was not consumed"
    );
    let small = s.pair.nics[0]
        .post(s.pair.now, WorkRequest::send(NodeAddr(1), s.src, SRC, 100))
        .unwrap();
    s.pair.run();
    s.assert_ok_once(0, small);
    s.assert_ok_once(1, recv);
}

// ------------------------------------------------------------- single loss

#[test]
fn every_single_packet_loss_position_recovers() {
    // A 4-packet WRITE; drop one packet at each position once.
    type Pick = fn(&udrma_nic::pair::Wire<'_>) -> bool;
    let cases: Vec<(&str, Pick)> = vec![
        ("FIRST", |w| is_kind(w, "WRITE_FIRST")),
        ("middle", |w| {
            w.repr
                .is_some_and(|r| r.kind_name() == "WRITE_MIDDLE" && r.seg_index == 1)
        }),
        ("LAST", |w| is_kind(w, "WRITE_LAST")),
        ("ACK", |w| {
            w.repr
                .is_some_and(|r| r.opcode() == Opcode::Ack && r.seg_index == 2)
        }),
        ("completion notice", |w| {
            opcode(w) == Some(Opcode::Completion)
        }),
    ];
    for (name, pred) in cases {
        let mut s = setup(config());
        s.pair.set_filter(first_matching(pred, Verdict::Drop, 1));
        let wr = s.write(4096);
        s.pair.run();
        s.assert_ok_once(0, wr);
        s.assert_written(4096);
        let dropped = s
            .pair
            .log
            .iter()
            .filter(|l| l.verdict == Verdict::Drop)
            .count();
        assert_eq!(dropped, 1, "{name}");
        let retx = s.retransmits();
        match name {
            // The receiver's completion notice still tells the sender.
            "ACK" | "completion notice" => assert_eq!(retx, 0, "{name}"),
            // Packets waiting in the escape channel are not acknowledged,
            // so without their FIRST every packet reaches its RTO.
            "FIRST" => assert_eq!(
                retx, 4,
                "{name}: FIRST-only registration resends the operation"
            ),
            _ => assert_eq!(retx, 1, "{name}: selective retransmit sends one packet"),
        }
        assert_eq!(
            s.pair
                .events_of(1)
                .filter(|e| matches!(e, Event::WriteReceived { .. }))
                .count(),
            1,
            "{name}"
        );
    }
}

#[test]
fn a_lost_first_costs_one_retransmit_with_self_describing_packets() {
    let mut s = setup(NicConfig {
        registration: RegistrationMode::SelfDescribing,
        ..config()
    });
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_FIRST"),
        Verdict::Drop,
        1,
    ));
    let wr = s.write(4096);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(4096);
    assert_eq!(s.retransmits(), 1);
}

#[test]
fn lost_ack_and_notice_together_cost_one_retransmit_and_a_stale_drop() {
    let mut s = setup(config());
    s.pair.set_filter(|w| match opcode(w) {
        Some(Opcode::Completion) => Verdict::Drop,
        Some(Opcode::Ack)
            if w.repr.is_some_and(|r| r.seg_index == 3) && w.at < Instant(10_000_000) =>
        {
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(4096);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert_eq!(s.retransmits(), 1);
    assert_eq!(
        s.pair.nics[1].stats().stale_dropped,
        1,
        "the retransmission met the tombstone"
    );
}

// -------------------------------------------------------------- duplicates

#[test]
fn duplicates_of_every_kind_change_nothing() {
    // Each kind duplicated (3 extra copies) every time it is sent.
    for kind in [
        "WRITE_FIRST",
        "WRITE_MIDDLE",
        "WRITE_LAST",
        "ACK",
        "COMPLETION",
        "DATA_ARRIVED",
    ] {
        let mut s = setup(config());
        s.pair.set_filter(move |w| {
            if is_kind(w, kind) {
                Verdict::Duplicate(3)
            } else {
                Verdict::Deliver
            }
        });
        let wr = s.pair.nics[0]
            .post(
                s.pair.now,
                WorkRequest::write_notify(NodeAddr(1), s.src, SRC, 4096, s.dst.0, DST, 0xbeef),
            )
            .unwrap();
        s.pair.run();
        s.assert_ok_once(0, wr);
        s.assert_written(4096);
        let arrived = s
            .pair
            .events_of(1)
            .filter(|e| matches!(e, Event::DataArrived { .. }))
            .count();
        assert_eq!(arrived, 1, "{kind}: one data-arrived event");
        let received = s
            .pair
            .events_of(1)
            .filter(|e| matches!(e, Event::WriteReceived { .. }))
            .count();
        assert_eq!(received, 1, "{kind}: one receiver completion");
        let rx = s.pair.nics[1].stats();
        let tx = s.pair.nics[0].stats();
        match kind {
            "WRITE_FIRST" => assert_eq!(rx.dup_dropped, 3, "{kind}"),
            // Two middle packets, three extra copies each.
            "WRITE_MIDDLE" => assert_eq!(rx.dup_dropped, 6, "{kind}"),
            // Copies of the last packet arrive after completion.
            "WRITE_LAST" => assert_eq!(rx.stale_dropped, 3, "{kind}"),
            "DATA_ARRIVED" => assert_eq!(rx.stale_dropped, 3, "{kind}"),
            // 4 data ACKs and the notice's ACK, 3 extra copies each: every
            // copy names a freed OP slot.
            "ACK" => assert_eq!(tx.stale_acks, 15, "{kind}"),
            // The ACKs finished the operation first; notices find nothing.
            "COMPLETION" => assert_eq!((tx.stale_acks, tx.completion_notices), (0, 0), "{kind}"),
            _ => unreachable!(),
        }
    }
    // READ requests and responses, and SENDs.
    for kind in ["READ_REQ", "READ_RESP_FIRST", "READ_RESP_LAST"] {
        let mut s = setup(config());
        s.pair.set_filter(move |w| {
            if is_kind(w, kind) {
                Verdict::Duplicate(2)
            } else {
                Verdict::Deliver
            }
        });
        let wr = s.read(4096);
        s.pair.run();
        s.assert_ok_once(0, wr);
        assert!(s.src_bytes(0, 4096) == s.dst_bytes(0, 4096), "{kind}");
    }
    let mut s = setup(config());
    s.pair.set_filter(|w| {
        if opcode(w) == Some(Opcode::Send) {
            Verdict::Duplicate(2)
        } else {
            Verdict::Deliver
        }
    });
    let r1 = s.pair.nics[1]
        .post_recv(s.pair.now, 0, s.dst, DST, 4096)
        .unwrap();
    let r2 = s.pair.nics[1]
        .post_recv(s.pair.now, 0, s.dst, DST + 4096, 4096)
        .unwrap();
    let wr = s.pair.nics[0]
        .post(s.pair.now, WorkRequest::send(NodeAddr(1), s.src, SRC, 3000))
        .unwrap();
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_ok_once(1, r1);
    assert!(
        s.completions(1, r2).is_empty(),
        "a duplicated SEND consumes one buffer, not three"
    );
}

// ---------------------------------------------------------------- reorder

#[test]
fn full_reversal_of_packet_order_completes_via_the_escape_channel() {
    let mut s = setup(config());
    // 8 data packets leave together; packet k is held (8 - k) × 2 µs, so
    // they arrive in exactly reverse order and FIRST comes last.
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) => Verdict::Delay(us(2 * u64::from(8 - r.seg_index))),
        _ => Verdict::Deliver,
    });
    let wr = s.write(8 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(8 * 1024);
    let rx = s.pair.nics[1].stats();
    assert_eq!(
        (rx.escape_buffered, rx.escape_drained, rx.escape_expired),
        (7, 7, 0)
    );
    assert_eq!(s.retransmits(), 0);
}

#[test]
fn first_delayed_past_all_others_drains_the_escape_channel() {
    let mut s = setup(config());
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_FIRST"),
        Verdict::Delay(us(20)),
        1,
    ));
    let wr = s.write(6 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(6 * 1024);
    let rx = s.pair.nics[1].stats();
    assert_eq!((rx.escape_buffered, rx.escape_drained), (5, 5));
    assert_eq!(s.retransmits(), 0);
}

#[test]
fn first_delayed_past_the_escape_timer_expires_then_retransmission_completes() {
    let mut s = setup(NicConfig {
        escape_timeout: us(50),
        ..config()
    });
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_FIRST"),
        Verdict::Delay(us(500)),
        1,
    ));
    let wr = s.write(4 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(4 * 1024);
    let rx = s.pair.nics[1].stats();
    assert_eq!(
        rx.escape_expired, 3,
        "the three early packets waited 50 µs and were dropped"
    );
    assert!(
        s.retransmits() >= 4,
        "every packet went again after the RTO"
    );
    assert!(
        rx.stale_dropped >= 1,
        "the original FIRST finally arrived after completion"
    );
}

/// A WRITE of `kib` packets whose FIRST packet's first copy is lost, into
/// an escape channel of 2: it completes exactly once, every byte landed.
/// Returns the pair and the WRITE.
fn write_with_first_lost(kib: u64) -> (Setup, udrma_nic::WrId) {
    let mut s = setup(NicConfig {
        escape_capacity: 2,
        ..config()
    });
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_FIRST"),
        Verdict::Drop,
        1,
    ));
    let wr = s.write(kib * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(kib as usize * 1024);
    (s, wr)
}

#[test]
fn escape_channel_overflow_drops_and_counts() {
    let (s, _) = write_with_first_lost(6);
    let rx = s.pair.nics[1].stats();
    assert_eq!(rx.escape_buffered, 2);
    // Three packets found the channel full, and each was NACKed
    // receiver-not-ready; their retries (every rnr_delay, until the FIRST
    // came back after its timeout) found it full again.
    assert!(rx.escape_overflow >= 3, "{}", rx.escape_overflow);
    assert_eq!(
        rx.nacks_sent[&Syndrome::ReceiverNotReady],
        rx.escape_overflow,
        "every overflow is NACKed"
    );
    assert_eq!(s.pair.nics[0].stats().retries_exhausted, 0);
    let occ = s.pair.nics[1].occupancy();
    assert_eq!(occ.escape_entries.1, 2, "peak never passed the limit");
}

/// The FIRST packet of an 8-packet WRITE is lost, and the escape channel
/// holds 2: packets 1 and 2 wait there, 3 to 7 are refused
/// (receiver-not-ready). The first refusal says the FIRST did not get
/// there before packet 3 did, so the FIRST goes again at once, and the
/// refused packets wait for it (their timers double from `rnr_delay`)
/// instead of knocking every
/// `rnr_delay`: once it is acknowledged they go again, once each. The
/// WRITE completes in a few round trips, with no timeout. Before, every
/// refused packet went again every 50 µs until the FIRST's own timer
/// fired, each copy refused again (finding 37, docs/testing.md: a
/// sprayed all-to-all into small queues sent 327,548 packets for 4,400).
#[test]
fn a_refused_packet_waits_for_its_first_instead_of_knocking_again() {
    let (s, wr) = write_with_first_lost(8);
    let (tx, rx) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!((rx.escape_buffered, rx.escape_overflow), (2, 5));
    assert_eq!((tx.parked_for_first, tx.first_resent_on_refusal), (5, 1));
    assert_eq!(
        tx.timeouts, 0,
        "the refusal, not a timer, sent the FIRST again"
    );
    assert_eq!(
        tx.retransmits, 6,
        "the FIRST and the five refused, once each"
    );
    assert!(
        s.completion_time(0, wr).as_ps() < udrma_nic::Duration::from_micros(100).0,
        "done within a few round trips: {:?}",
        s.completion_time(0, wr)
    );
}

#[test]
fn self_describing_packets_register_without_the_escape_channel() {
    let mut s = setup(NicConfig {
        registration: RegistrationMode::SelfDescribing,
        ..config()
    });
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_FIRST"),
        Verdict::Delay(us(20)),
        1,
    ));
    let wr = s.write(6 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(6 * 1024);
    assert_eq!(s.pair.nics[1].stats().escape_buffered, 0);
    assert_eq!(s.pair.nics[1].stats().dup_dropped, 0);
}

// ------------------------------------------------------------ bounded state

#[test]
fn registry_full_nacks_not_ready_and_the_retry_gets_in_later() {
    let mut s = setup(NicConfig {
        registry_capacity: 1,
        rnr_delay: us(30),
        ..config()
    });
    // Keep the first WRITE registered by losing its LAST packet once.
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_LAST"),
        Verdict::Drop,
        1,
    ));
    let a = s.write_at(0, 3 * 1024);
    let b = s.write_at(8192, 3 * 1024);
    s.pair.run();
    s.assert_ok_once(0, a);
    s.assert_ok_once(0, b);
    assert!(s.dst_bytes(8192, 3072) == s.src_bytes(8192, 3072));
    let rx = s.pair.nics[1].stats();
    assert!(rx.registry_full >= 1);
    assert!(s.pair.nics[0].stats().nacks_received[&Syndrome::ReceiverNotReady] >= 1);
    assert_eq!(
        s.pair.nics[1].occupancy().registry.1,
        1,
        "peak registry size is its capacity"
    );
}

#[test]
fn a_nack_triggers_retransmission_at_once_not_after_the_rto() {
    let mut s = setup(NicConfig {
        registry_capacity: 1,
        rnr_delay: Duration::ZERO,
        rto_initial: us(1000),
        max_retries: 1000,
        ..config()
    });
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_LAST"),
        Verdict::Drop,
        1,
    ));
    s.write_at(0, 3 * 1024);
    s.write_at(8192, 3 * 1024);
    s.pair.advance_to(Instant::ZERO + us(20));
    // Within 20 µs (RTO is 1 ms) the NACKed FIRST went again several times.
    let retx = s
        .pair
        .log
        .iter()
        .filter(|l| l.kind == "WRITE_FIRST" && l.msg_id == 2)
        .count();
    assert!(retx >= 3, "NACK → immediate retransmit: {retx} sends");
}

#[test]
fn registry_entries_expire_when_the_sender_gives_up() {
    let mut s = setup(NicConfig {
        max_retries: 2,
        registry_timeout: us(500),
        ..config()
    });
    // Everything after the FIRST packet is lost for good.
    s.pair.set_filter(|w| {
        if is_data(w) && !is_kind(w, "WRITE_FIRST")
            || w.repr.is_some_and(|r| {
                r.flags.contains(Flags::RETRANSMIT) && !r.flags.contains(Flags::FIRST)
            })
        {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    let wr = s.write(4096);
    s.pair.run();
    assert_eq!(s.completions(0, wr), vec![Err(WcError::RetryExceeded)]);
    assert_eq!(s.pair.nics[1].stats().registry_expired, 1);
    assert!(s.pair.nics[1].is_idle());
}

/// A slow operation: its packets come 250 µs apart with a 300 µs registry
/// timeout. Each arrival pushes the deadline back (the timer, filed at the
/// first packet's deadline, fires at 300 µs and is filed again), so the
/// entry outlives its first deadline; when the packets stop, it expires
/// one timeout after the last one, not after the first.
fn slow_operation(third_arrives: bool) -> Setup {
    let mut s = setup(NicConfig {
        registry_timeout: us(300),
        rto_initial: us(5_000),
        rto_min: us(5_000),
        ..config()
    });
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if is_data(w) && r.seg_index == 1 => Verdict::Delay(us(250)),
        Some(r) if is_data(w) && r.seg_index == 2 && third_arrives => Verdict::Delay(us(500)),
        Some(r) if r.opcode().carries_data() && r.seg_index == 2 => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    s
}

#[test]
fn progress_keeps_a_registry_entry_past_its_first_deadline() {
    let mut s = slow_operation(true);
    let wr = s.write(3 * 1024);
    s.pair.advance_to(Instant::ZERO + us(1_000));
    s.assert_ok_once(0, wr);
    s.assert_written(3 * 1024);
    assert_eq!(s.pair.nics[1].stats().registry_expired, 0);
}

#[test]
fn a_stalled_registry_entry_expires_one_timeout_after_its_last_packet() {
    let mut s = slow_operation(false);
    s.write(3 * 1024);
    // The second packet lands at about 251 µs: the entry lives to 551 µs.
    s.pair.advance_to(Instant::ZERO + us(540));
    assert_eq!(s.pair.nics[1].stats().registry_expired, 0);
    s.pair.advance_to(Instant::ZERO + us(560));
    assert_eq!(s.pair.nics[1].stats().registry_expired, 1);
}

// ------------------------------------------------- tombstones and reuse

fn stale_duplicate_story(tombstones: bool) -> Setup {
    let mut s = setup(NicConfig {
        tombstones,
        ..config()
    });
    // A copy of the FIRST packet lingers in the network for 50 µs.
    let mut copied = false;
    s.pair.set_filter(move |w| {
        if !copied && is_kind(w, "WRITE_FIRST") {
            copied = true;
            return Verdict::Duplicate(1);
        }
        Verdict::Deliver
    });
    let wr = s.write(2048);
    s.pair.advance_to(Instant::ZERO + us(10));
    s.assert_ok_once(0, wr);
    s.assert_written(2048);
    s.pair.clear_filter();
    // The host reuses its buffer for new data.
    let fresh = pattern(2048, 0x77);
    s.pair.nics[1].memory_mut().region_mut(s.dst).unwrap().bytes[..2048].copy_from_slice(&fresh);
    s
}

#[test]
fn stale_duplicate_after_completion_is_dropped_with_tombstones() {
    let mut s = stale_duplicate_story(true);
    // Send the lingering copy now (it was delivered already; replay its bytes).
    let first = first_write_packet(s.pair.nics[0].config().clone());
    s.pair.inject(0, first);
    s.pair.run();
    assert!(
        s.dst_bytes(0, 2048) == pattern(2048, 0x77),
        "reused buffer intact"
    );
    assert_eq!(s.pair.nics[1].stats().stale_dropped, 1);
}

#[test]
fn stale_duplicate_corrupts_a_reused_buffer_without_tombstones() {
    // The demonstration docs/design.md §1 promises: with tombstones off, a late
    // FIRST re-registers the finished operation and writes old bytes over
    // the host's new data.
    let mut s = stale_duplicate_story(false);
    let first = first_write_packet(s.pair.nics[0].config().clone());
    s.pair.inject(0, first);
    s.pair.run();
    assert!(
        s.dst_bytes(0, 1024) != pattern(1024, 0x77),
        "the hazard: stale bytes overwrote reused memory"
    );
    assert!(s.dst_bytes(0, 1024) == s.src_bytes(0, 1024));
    assert_eq!(s.pair.nics[1].stats().stale_dropped, 0);
    assert_eq!(
        s.pair.nics[1].stats().registry_expired,
        1,
        "the resurrected entry never completes"
    );
}

// --------------------------------------------------- memory protection

#[test]
fn rkey_bounds_and_access_violations_write_nothing_and_fail_the_request() {
    let mut s = setup(config());
    let ro = s.pair.nics[1].register(
        0x90_0000,
        4096,
        Access {
            remote_read: true,
            ..Access::default()
        },
    );
    let before = s.pair.nics[1]
        .memory()
        .regions()
        .map(|(k, r)| (k, r.bytes.clone()))
        .collect::<Vec<_>>();
    let cases = [
        (
            WorkRequest::write(NodeAddr(1), s.src, SRC, 2048, 0xdead, DST),
            Syndrome::BadRkey,
        ),
        (
            WorkRequest::write(
                NodeAddr(1),
                s.src,
                SRC,
                2048,
                s.dst.0,
                DST + LEN as u64 - 1024,
            ),
            Syndrome::OutOfBounds,
        ),
        (
            WorkRequest::write(NodeAddr(1), s.src, SRC, 2048, s.dst.0, DST - 1),
            Syndrome::OutOfBounds,
        ),
        (
            WorkRequest::write(NodeAddr(1), s.src, SRC, 2048, ro.0, 0x90_0000),
            Syndrome::RemoteAccess,
        ),
        (
            WorkRequest::read(NodeAddr(1), s.src, SRC, 2048, 0xdead, DST),
            Syndrome::BadRkey,
        ),
    ];
    for (wr, syndrome) in cases {
        let id = s.pair.nics[0].post(s.pair.now, wr).unwrap();
        s.pair.run();
        assert_eq!(s.completions(0, id), vec![Err(WcError::Remote(syndrome))]);
    }
    let after = s.pair.nics[1]
        .memory()
        .regions()
        .map(|(k, r)| (k, r.bytes.clone()))
        .collect::<Vec<_>>();
    assert_eq!(before.len(), 2, "both of h1's regions compared");
    assert!(before == after, "no byte written anywhere");
    assert!(s.pair.nics[0].is_idle(), "failed requests leave no state");
    // A READ into a region the host may not write is refused at post.
    let ro_local = s.pair.nics[0].register(0x80_0000, 4096, Access::default());
    let refused = s.pair.nics[0].post(
        s.pair.now,
        WorkRequest::read(NodeAddr(1), ro_local, 0x80_0000, 16, s.dst.0, DST),
    );
    assert_eq!(refused, Err(PostError::LocalAccess(Syndrome::RemoteAccess)));
}

#[test]
fn a_read_of_a_region_without_remote_read_is_refused() {
    let mut s = setup(config());
    let wo = s.pair.nics[1].register(
        0x90_0000,
        4096,
        Access {
            remote_write: true,
            ..Access::default()
        },
    );
    let id = s.pair.nics[0]
        .post(
            s.pair.now,
            WorkRequest::read(NodeAddr(1), s.src, SRC, 16, wo.0, 0x90_0000),
        )
        .unwrap();
    s.pair.run();
    assert_eq!(
        s.completions(0, id),
        vec![Err(WcError::Remote(Syndrome::RemoteAccess))]
    );
}

// ------------------------------------------------------------ give up

#[test]
fn retries_exhausted_fail_the_request_and_free_all_state() {
    let mut s = setup(NicConfig {
        max_retries: 3,
        ..config()
    });
    s.pair.set_filter(|w| {
        if w.from == NodeAddr(0) {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    let wr = s.write(300 * 1024); // segmented: state in several places
    s.pair.run();
    assert_eq!(s.completions(0, wr), vec![Err(WcError::RetryExceeded)]);
    let nic = &s.pair.nics[0];
    assert_eq!(nic.stats().retries_exhausted, 1);
    assert_eq!(nic.occupancy().op_table.0, 0);
    assert!(nic.is_idle());
    // Backoff doubled the wait each time: 4 sends of the first packet.
    let sends = s
        .pair
        .log
        .iter()
        .filter(|l| l.kind == "WRITE_FIRST" && l.msg_id == 1)
        .count();
    assert_eq!(sends, 4);
}

// ------------------------------------------------- completion one RTT early

#[test]
fn receiver_completes_one_rtt_before_the_sender_could_tell_it() {
    let mut s = setup(config());
    let wr = s.pair.nics[0]
        .post(
            s.pair.now,
            WorkRequest::write_notify(NodeAddr(1), s.src, SRC, 4096, s.dst.0, DST, 7),
        )
        .unwrap();
    s.pair.run();
    s.assert_ok_once(0, wr);
    let received = s.pair.events_of(1).find_map(|e| match e {
        Event::WriteReceived { at, .. } => Some(*at),
        _ => None,
    });
    let notified = s.pair.events_of(1).find_map(|e| match e {
        Event::DataArrived {
            at, immediate: 7, ..
        } => Some(*at),
        _ => None,
    });
    let (received, notified) = (received.unwrap(), notified.unwrap());
    // Without the registry the receiver learns of the data from the
    // sender's notice, which leaves after the last ACK: one round trip.
    let rtt = s.pair.latency.saturating_mul(2);
    assert_eq!(
        notified - received,
        rtt,
        "registry completion at {received}, notice at {notified}"
    );
}

// ------------------------------------------------------ op table reuse

#[test]
fn a_stale_ack_for_a_recycled_op_slot_is_recognised() {
    let mut s = setup(NicConfig {
        op_table_capacity: 1,
        rto_initial: us(100),
        ..config()
    });
    // Write A's ACK lingers 150 µs and its completion notice is lost; A is
    // retransmitted at the RTO, its second ACK frees the slot; B gets the
    // same slot with a new generation.
    let mut acks = 0;
    s.pair.set_filter(move |w| {
        if opcode(w) == Some(Opcode::Completion) && w.repr.is_some_and(|r| r.msg_id == 1) {
            return Verdict::Drop;
        }
        if opcode(w) == Some(Opcode::Ack) {
            acks += 1;
            if acks == 1 {
                return Verdict::Delay(us(150));
            }
        }
        Verdict::Deliver
    });
    let a = s.write(100);
    s.pair.advance_to(Instant::ZERO + us(110));
    s.assert_ok_once(0, a);
    // B's first transmission is lost, so B is outstanding when A's old ACK
    // finally arrives at ~151 µs.
    s.pair.set_filter(first_matching(
        |w| opcode(w) == Some(Opcode::Write),
        Verdict::Drop,
        1,
    ));
    let b = s.write_at(4096, 100);
    s.pair.run();
    s.assert_ok_once(0, b);
    assert!(s.dst_bytes(4096, 100) == s.src_bytes(4096, 100));
    assert!(
        s.pair.nics[0].stats().stale_acks >= 1,
        "A's old ACK named slot 0 generation 1"
    );
    assert_eq!(
        s.retransmits(),
        2,
        "A once at its RTO, B once: the stale ACK did not complete B"
    );
}

// ------------------------------------------------------------- modes

#[test]
fn selective_acks_coalesce_and_recover_a_loss() {
    let mut s = setup(NicConfig {
        ack_mode: AckMode::Selective { delay: us(2) },
        ..config()
    });
    s.pair.set_filter(first_matching(
        |w| w.repr.is_some_and(|r| r.seg_index == 17 && is_data(w)),
        Verdict::Drop,
        1,
    ));
    let wr = s.write(100 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(100 * 1024);
    let sacks = s.pair.log.iter().filter(|l| l.kind == "SACK").count();
    let acks = s.pair.log.iter().filter(|l| l.kind == "ACK").count();
    assert_eq!(acks, 0);
    assert!(
        sacks > 0 && sacks < 10,
        "100 packets acknowledged in {sacks} SACKs"
    );
    assert_eq!(s.retransmits(), 1);
}

#[test]
fn go_back_n_resends_everything_after_the_loss() {
    let lose_third =
        |w: &udrma_nic::pair::Wire<'_>| w.repr.is_some_and(|r| r.seg_index == 2 && is_data(w));
    let mut gbn = setup(NicConfig {
        retransmit: RetransmitMode::GoBackN,
        ..config()
    });
    // Receiver ACKs are lost after packet 2 too, so GBN's later packets are
    // still outstanding when the timer fires.
    gbn.pair
        .set_filter(first_matching(lose_third, Verdict::Drop, 1));
    let wr = gbn.write(8 * 1024);
    gbn.pair.run();
    gbn.assert_ok_once(0, wr);
    gbn.assert_written(8 * 1024);
    let mut sel = setup(config());
    sel.pair
        .set_filter(first_matching(lose_third, Verdict::Drop, 1));
    let wr = sel.write(8 * 1024);
    sel.pair.run();
    sel.assert_ok_once(0, wr);
    assert_eq!(sel.retransmits(), 1);
    // Packets 3..7 were acknowledged before the timer fired, so go-back-N
    // has nothing later outstanding either; with every ACK delayed it does.
    let mut gbn = setup(NicConfig {
        retransmit: RetransmitMode::GoBackN,
        ..config()
    });
    gbn.pair.set_filter({
        let mut lost = false;
        move |w| {
            if !lost && lose_third(w) {
                lost = true;
                return Verdict::Drop;
            }
            if opcode(w) == Some(Opcode::Ack) || opcode(w) == Some(Opcode::Completion) {
                return Verdict::Delay(us(150));
            }
            Verdict::Deliver
        }
    });
    let wr = gbn.write(8 * 1024);
    gbn.pair.run();
    gbn.assert_ok_once(0, wr);
    gbn.assert_written(8 * 1024);
    assert!(
        gbn.retransmits() >= 6,
        "go-back-N resent packet 2 and all after it: {}",
        gbn.retransmits()
    );
}

// ------------------------------------------------------------ hostile input

#[test]
fn hostile_datagrams_are_counted_by_reason_and_never_panic() {
    let mut s = setup(config());
    let mut good = first_write_packet(s.pair.nics[0].config().clone());
    s.pair.inject(0, vec![]);
    s.pair.inject(0, vec![1; 10]);
    let mut corrupt = good.clone();
    corrupt[40] ^= 4;
    s.pair.inject(0, corrupt);
    let mut unknown = good.clone();
    unknown[1] = 0x3f;
    udrma_proto::Packet::new_unchecked(&mut unknown[..]).fill_icrc();
    s.pair.inject(0, unknown);
    // Segment index beyond its count.
    good[16..20].copy_from_slice(&9u32.to_be_bytes());
    udrma_proto::Packet::new_unchecked(&mut good[..]).fill_icrc();
    s.pair.inject(0, good);
    s.pair.run();
    let rx = s.pair.nics[1].stats();
    assert_eq!(rx.rx_truncated, 2);
    assert_eq!(rx.rx_bad_checksum, 1);
    assert_eq!(rx.rx_unknown_opcode, 1);
    assert_eq!(rx.rx_invalid, 1);
    assert_eq!(rx.nacks_sent.get(&Syndrome::UnknownOpcode), Some(&1));
    assert_eq!(rx.nacks_sent.get(&Syndrome::InvalidRequest), Some(&1));
    assert!(
        s.dst_bytes(0, 2048) == pattern(2048, 0xc3),
        "nothing written"
    );
}

#[test]
fn same_story_same_wire_log() {
    // Determinism: the same posts and faults give the same packets at the
    // same times.
    let run = || {
        let mut s = setup(config());
        s.pair.set_filter(first_matching(
            |w| is_kind(w, "WRITE_FIRST"),
            Verdict::Drop,
            2,
        ));
        s.write(300 * 1024);
        s.read(70 * 1024);
        s.pair.run();
        s.pair.log.clone()
    };
    assert_eq!(run(), run());
}

// ------------------------------------------ support for the messaging layer

#[test]
fn control_messages_arrive_once_under_loss_and_duplication() {
    use udrma_nic::Control;
    use udrma_proto::{Protocol, Rendezvous};
    let mut s = setup(config());
    // The first RTS is lost; its retransmission arrives three times.
    let mut sent = 0;
    s.pair.set_filter(move |w| {
        if opcode(w) != Some(Opcode::Rts) {
            return Verdict::Deliver;
        }
        sent += 1;
        if sent == 1 {
            Verdict::Drop
        } else {
            Verdict::Duplicate(2)
        }
    });
    let rts = Control::Rts(Rendezvous {
        protocol: Protocol::Rget,
        tag: 42,
        length: 1 << 20,
        addr: SRC,
        rkey: s.src.0,
        seq: 9,
    });
    let wr = s.pair.nics[0]
        .post(
            s.pair.now,
            WorkRequest::control(NodeAddr(1), rts).endpoints(3, 4),
        )
        .unwrap();
    s.pair.run();
    s.assert_ok_once(0, wr);
    let got: Vec<_> = s
        .pair
        .events_of(1)
        .filter_map(|e| match e {
            Event::Control {
                from,
                src_ep,
                dst_ep,
                control,
                ..
            } => Some((*from, *src_ep, *dst_ep, *control)),
            _ => None,
        })
        .collect();
    assert_eq!(
        got,
        vec![(NodeAddr(0), 3, 4, rts)],
        "delivered exactly once"
    );
    assert_eq!(
        s.pair.nics[1].stats().stale_dropped,
        2,
        "the copies met the tombstone"
    );
    assert_eq!(s.retransmits(), 1);
    // A control request without its message is refused.
    let mut bad = WorkRequest::control(NodeAddr(1), rts);
    bad.control = None;
    assert_eq!(
        s.pair.nics[0].post(s.pair.now, bad),
        Err(PostError::NotARequest)
    );
}

fn credit_events(s: &Setup, nic: usize) -> Vec<u16> {
    s.pair
        .events_of(nic)
        .filter_map(|e| match e {
            Event::Credits { cumulative, .. } => Some(*cumulative),
            _ => None,
        })
        .collect()
}

#[test]
fn credit_counts_ride_on_every_packet_and_only_newer_ones_count() {
    let mut s = setup(config());
    // h1 advertises 5 re-posted buffers; its ACKs carry the count to h0.
    s.pair.nics[1].advertise_credits(NodeAddr(0), 5);
    s.write(4096);
    s.pair.run();
    assert_eq!(
        credit_events(&s, 0),
        vec![5],
        "four ACKs and a notice, one event"
    );
    assert!(s.pair.log.iter().any(|l| l.kind == "ACK"));
    // h0 never echoed 5 (it sent nothing after the ACKs), so h1's engine
    // sent it again in NOOPs (docs/wire-format.md, "Credit echo").
    let repairs = s.pair.nics[1].stats().credit_repairs;
    assert!(repairs > 0);
    assert_eq!(s.pair.nics[0].stats().noops_received, repairs);
    // Nothing else flows: a NOOP carries the next count.
    s.pair.nics[1].advertise_credits(NodeAddr(0), 7);
    s.pair.nics[1].send_noop(NodeAddr(0), 0, 0);
    s.pair.run();
    assert_eq!(credit_events(&s, 0), vec![5, 7]);
    assert_eq!(s.pair.nics[0].stats().noops_received, repairs + 1);
    // An older count arriving late (reordered or duplicated) is ignored.
    s.pair.nics[1].advertise_credits(NodeAddr(0), 6);
    s.pair.nics[1].send_noop(NodeAddr(0), 0, 0);
    s.pair.run();
    assert_eq!(credit_events(&s, 0), vec![5, 7]);
    // Counts are modulo 2^16 and grow by less than 2^15 between two
    // packets: climbing to the wrap, 65535 then 2 is three more.
    for c in [32_000u16, 64_000, 65_535, 2] {
        s.pair.nics[1].advertise_credits(NodeAddr(0), c);
        s.pair.nics[1].send_noop(NodeAddr(0), 0, 0);
        s.pair.run();
    }
    assert_eq!(credit_events(&s, 0), vec![5, 7, 32_000, 64_000, 65_535, 2]);
    // A lost NOOP is repaired by the next packet that carries the count.
    s.pair.nics[1].advertise_credits(NodeAddr(0), 10);
    s.pair.set_filter(first_matching(
        |w| opcode(w) == Some(Opcode::Credit),
        Verdict::Drop,
        1,
    ));
    s.pair.nics[1].send_noop(NodeAddr(0), 0, 0);
    s.pair.run();
    let wr = s.pair.nics[1]
        .post(
            s.pair.now,
            WorkRequest::write(NodeAddr(0), s.dst, DST, 100, s.src.0, SRC),
        )
        .unwrap();
    s.pair.run();
    s.assert_ok_once(1, wr);
    assert_eq!(credit_events(&s, 0).last(), Some(&10));
}

#[test]
fn a_read_window_bounds_the_response_burst_a_requester_calls_for() {
    // A 1 MiB READ is 16 segment READs of 64 KiB; each is one request
    // packet that calls for 64 responses. Unbounded, all 16 requests leave
    // at once (1 MiB of responses in flight); with a 64 KiB window the next
    // request waits until the previous READ's responses have all arrived.
    let burst = |read_window: u64| {
        let mut s = setup(NicConfig {
            read_window,
            ..config()
        });
        let wr = s.read(1 << 20);
        s.pair.run();
        s.assert_ok_once(0, wr);
        assert_eq!(s.src_bytes(0, 1 << 20), s.dst_bytes(0, 1 << 20));
        // Most READ requests sent before the first response arrived back.
        s.pair
            .log
            .iter()
            .take_while(|l| !l.kind.starts_with("READ_RESP"))
            .filter(|l| l.kind == "READ_REQ")
            .count()
    };
    assert_eq!(burst(u64::MAX), 16);
    assert_eq!(burst(64 * 1024), 1);
    assert_eq!(burst(128 * 1024), 2);
}
