//! Exactly once under bounded state: the stories of findings 3, 9 and 12
//! (docs/testing.md), each told twice. With the default per-peer window of
//! completions (`TombstoneMode::Window`) every operation completes once
//! and nothing lands twice; with one first-in, first-out set of the same
//! size for all peers (`TombstoneMode::Fifo`, the engine before the
//! window) the same wire breaks it, as the findings said.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{
    Event, NicConfig, RegistrationMode, RetransmitMode, TombstoneMode, WcError, WorkRequest, WrId,
    WrKind,
};

const FIRST_ONLY: RegistrationMode = RegistrationMode::FirstOnly;
use udrma_proto::{NodeAddr, Opcode, Syndrome};

/// Four tombstones, in `mode`.
fn four(mode: TombstoneMode) -> NicConfig {
    NicConfig {
        tombstone_capacity: 4,
        tombstone_mode: mode,
        ..config()
    }
}

/// What happened to the 3-packet operation whose middle packet's ACK and
/// completion notice are lost while four one-packet operations follow it.
struct LostAnswer {
    first: Result<(), WcError>,
    /// Receiver-not-ready NACKs h0 heard.
    rnr_retries: u64,
    later_ok: usize,
    window_waits: u64,
}

/// Finding 12 (a WRITE) and finding 9 (a SEND): h1 completes the first
/// operation, but the ACK of its middle packet and its completion notice
/// are lost. Four more operations follow at once; with a first-in,
/// first-out set of four, their completions push the first one's tombstone
/// out before the copy of its middle packet arrives. The copy then finds
/// neither a registry entry nor a tombstone, waits in the escape channel,
/// is refused, and the sender spends its whole refusal budget.
fn lost_answer(mode: TombstoneMode, send: bool) -> LostAnswer {
    let mut s = setup(NicConfig {
        max_rnr_retries: 40,
        ..four(mode)
    });
    if send {
        for i in 0..5 {
            s.pair.nics[1]
                .post_recv(s.pair.now, 0, s.dst, DST + i * 8192, 4096)
                .unwrap();
        }
    }
    let first_msg = Rc::new(RefCell::new(None));
    let seen = first_msg.clone();
    let mut lost = [false; 2];
    s.pair.set_filter(move |w| {
        let Some(r) = w.repr else {
            return Verdict::Deliver;
        };
        if matches!(r.opcode(), Opcode::Write | Opcode::Send) && seen.borrow().is_none() {
            *seen.borrow_mut() = Some(r.msg_id);
        }
        let ours = *seen.borrow() == Some(r.msg_id) && w.from == NodeAddr(1);
        // The first answer of each kind to the middle packet is lost; the
        // answers to its copies come through.
        let kind = match r.opcode() {
            Opcode::Ack if r.seg_index == 1 => 0,
            Opcode::Completion => 1,
            _ => return Verdict::Deliver,
        };
        if ours && !lost[kind] {
            lost[kind] = true;
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    let post = |s: &mut Setup, i: u64, len: u64| -> WrId {
        let wr = if send {
            WorkRequest::send(NodeAddr(1), s.src, SRC + i * 8192, len)
        } else {
            WorkRequest::write(
                NodeAddr(1),
                s.src,
                SRC + i * 8192,
                len,
                s.dst.0,
                DST + i * 8192,
            )
        };
        s.pair.nics[0].post(s.pair.now, wr).unwrap()
    };
    let first = post(&mut s, 0, 3 * 1024);
    let later: Vec<WrId> = (1..5).map(|i| post(&mut s, i, 512)).collect();
    s.pair.run();
    let results = |wr| s.completions(0, wr);
    for wr in later.iter().chain([&first]) {
        assert_eq!(results(*wr).len(), 1, "{wr} completes exactly once");
    }
    let h0 = s.pair.nics[0].stats();
    LostAnswer {
        first: results(first)[0],
        rnr_retries: h0
            .nacks_received
            .get(&Syndrome::ReceiverNotReady)
            .copied()
            .unwrap_or(0),
        later_ok: later.iter().filter(|w| results(**w)[0].is_ok()).count(),
        window_waits: h0.window_waits,
    }
}

#[test]
fn a_completed_write_whose_answers_were_lost_is_acknowledged_by_its_copy() {
    let w = lost_answer(TombstoneMode::Window, false);
    assert_eq!((w.first, w.later_ok), (Ok(()), 4));
    assert_eq!(w.rnr_retries, 0, "the copy found its WRITE complete");
    assert!(w.window_waits > 0, "the fourth WRITE waited for the first");
    // Finding 12 on the engine before the window: refused until the
    // refusal budget is spent, with two datagrams harmed.
    let f = lost_answer(TombstoneMode::Fifo, false);
    assert_eq!((f.first, f.later_ok), (Err(WcError::RetryExceeded), 4));
    assert!(f.rnr_retries >= 40, "{}", f.rnr_retries);
}

#[test]
fn a_completed_send_whose_answers_were_lost_is_acknowledged_by_its_copy() {
    let w = lost_answer(TombstoneMode::Window, true);
    assert_eq!((w.first, w.later_ok, w.rnr_retries), (Ok(()), 4, 0));
    // Finding 9: a SEND out of retries on a wire that harmed two
    // datagrams.
    let f = lost_answer(TombstoneMode::Fifo, true);
    assert_eq!(f.first, Err(WcError::RetryExceeded));
}

/// Finding 3: a copy of a one-packet SEND is held on the wire while the
/// SEND completes and five more follow; then it arrives. Returns how many
/// receive buffers h1 filled, and the copies h1 dropped as finished.
fn late_send_copy(mode: TombstoneMode) -> (usize, u64) {
    let mut s = setup(four(mode));
    for i in 0..7 {
        s.pair.nics[1]
            .post_recv(s.pair.now, 0, s.dst, DST + i * 4096, 4096)
            .unwrap();
    }
    let held: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let keep = held.clone();
    s.pair.set_filter(move |w| {
        if let Some(r) = w.repr.filter(|r| r.opcode() == Opcode::Send) {
            if keep.borrow().is_empty() {
                let mut copy = Vec::new();
                r.emit_vec(&mut copy).unwrap();
                keep.borrow_mut().push(copy);
            }
        }
        Verdict::Deliver
    });
    let sends: Vec<WrId> = (0..6)
        .map(|i| {
            let wr = WorkRequest::send(NodeAddr(1), s.src, SRC + i * 4096, 64);
            let id = s.pair.nics[0].post(s.pair.now, wr).unwrap();
            s.pair.run();
            id
        })
        .collect();
    for wr in &sends {
        s.assert_ok_once(0, *wr);
    }
    let copy = held.borrow()[0].clone();
    s.pair.inject(0, copy);
    s.pair.run();
    let filled = s
        .pair
        .events_of(1)
        .filter(|e| {
            matches!(
                e,
                Event::Completed {
                    kind: WrKind::Recv,
                    ..
                }
            )
        })
        .count();
    (filled, s.pair.nics[1].stats().stale_finished)
}

#[test]
fn a_late_copy_of_a_finished_send_takes_no_second_buffer() {
    // Six SENDs, six buffers filled; the late copy is older than a full
    // window of h0's completions, so h0 has finished with it: dropped.
    assert_eq!(late_send_copy(TombstoneMode::Window), (6, 1));
    // One first-in, first-out set of four had forgotten it: it registered
    // as a new SEND and took a seventh buffer (finding 3).
    assert_eq!(late_send_copy(TombstoneMode::Fifo), (7, 0));
}

#[test]
fn a_sender_opens_no_more_than_the_window_toward_one_peer() {
    let mut s = setup(four(TombstoneMode::Window));
    // Every ACK is lost for a while: nothing finishes.
    s.pair.set_filter(|w| {
        if w.from == NodeAddr(1) {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    let writes: Vec<WrId> = (0..9).map(|i| s.write_at(i * 4096, 100)).collect();
    s.pair.flush();
    assert_eq!(s.pair.nics[0].window_len(NodeAddr(1)), 4);
    assert_eq!(s.pair.in_flight(), 4, "four WRITEs left, five wait");
    s.pair.clear_filter();
    s.pair.run();
    for wr in writes {
        s.assert_ok_once(0, wr);
    }
    assert_eq!(s.pair.nics[0].window_len(NodeAddr(1)), 0);
    let occ = s.pair.nics[1].occupancy();
    assert!(occ.tombstones.1 <= 4, "{:?}", occ.tombstones);
}

#[test]
fn a_write_with_notification_keeps_a_place_for_its_notice() {
    let mut s = setup(NicConfig {
        tombstone_capacity: 2,
        ..four(TombstoneMode::Window)
    });
    let notify = WorkRequest::write_notify(NodeAddr(1), s.src, SRC, 100, s.dst.0, DST, 7);
    let first = s.pair.nics[0].post(s.pair.now, notify).unwrap();
    let second = s.write_at(8192, 100);
    s.pair.flush();
    assert_eq!(
        s.pair.nics[0].window_len(NodeAddr(1)),
        2,
        "the WRITE and its notice to come fill a window of two"
    );
    assert_eq!(s.pair.in_flight(), 1, "the plain WRITE waits");
    s.pair.run();
    s.assert_ok_once(0, first);
    s.assert_ok_once(0, second);
    let notices = s
        .pair
        .events_of(1)
        .filter(|e| matches!(e, Event::DataArrived { .. }))
        .count();
    assert_eq!(notices, 1);
}

#[test]
fn a_window_of_one_is_refused() {
    let err = udrma_nic::Nic::new(
        NodeAddr(0),
        NicConfig {
            tombstone_capacity: 1,
            ..NicConfig::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("tombstone_capacity"), "{err}");
    // One set for all peers may be as small as it likes.
    assert!(udrma_nic::Nic::new(
        NodeAddr(0),
        NicConfig {
            tombstone_capacity: 1,
            tombstone_mode: TombstoneMode::Fifo,
            ..NicConfig::default()
        },
    )
    .is_ok());
}

/// Every WRITE packet but each operation's first is lost for the first
/// millisecond.
fn drop_later_packets_for_a_millisecond(s: &mut Setup) {
    s.pair.set_filter(|w| match w.repr {
        Some(r)
            if r.opcode() == Opcode::Write
                && r.seg_index > 0
                && w.at < udrma_nic::Instant::ZERO + udrma_nic::Duration::from_millis(1) =>
        {
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
}

/// A WRITE's first packet registers it and is acknowledged; the others are
/// lost for 1 ms, longer than h1's `registry_timeout` of 300 µs, so h1
/// drops the half-received operation. Returns the WRITE's result, the
/// refusals h0 heard (receiver-not-ready, or with go-back-N and first-only
/// registration the one out-of-sequence NACK that asks for the first
/// packet again), and how often it sent the whole WRITE again.
fn lost_registration(
    mode: TombstoneMode,
    retransmit: RetransmitMode,
    registration: RegistrationMode,
) -> (Result<(), WcError>, u64, u64) {
    let mut s = setup(NicConfig {
        registry_timeout: udrma_nic::Duration::from_micros(300),
        max_rnr_retries: 40,
        retransmit,
        registration,
        ..four(mode)
    });
    drop_later_packets_for_a_millisecond(&mut s);
    let wr = s.write(3 * 1024);
    s.pair.run();
    let result = s.completions(0, wr);
    assert_eq!(result.len(), 1);
    let h0 = s.pair.nics[0].stats();
    assert!(
        s.pair.nics[1].stats().registry_expired >= 1,
        "h1 dropped the half-received WRITE"
    );
    if result[0].is_ok() {
        s.assert_written(3 * 1024);
        assert_eq!(
            s.pair.nics[1].stats().receiver_completions,
            1,
            "h1 completed the WRITE, so its host heard that it landed"
        );
    }
    let refusals = [Syndrome::ReceiverNotReady, Syndrome::SequenceError]
        .iter()
        .map(|r| h0.nacks_received.get(r).copied().unwrap_or(0))
        .sum();
    (result[0], refusals, h0.registrations_lost)
}

#[test]
fn a_receiver_that_lost_a_registration_gets_the_whole_operation_again() {
    // With the window a refusal after the first packet's acknowledgement
    // can only mean the registration is gone: the WRITE goes again from
    // its first packet at the first refusal.
    let selective = RetransmitMode::Selective;
    let (result, refusals, restarts) =
        lost_registration(TombstoneMode::Window, selective, FIRST_ONLY);
    assert_eq!((result, restarts), (Ok(()), 1));
    assert!(refusals <= 2, "{refusals}");
    // Without it the refused packets are offered until the refusal
    // budget is spent.
    let (result, refusals, restarts) =
        lost_registration(TombstoneMode::Fifo, selective, FIRST_ONLY);
    assert_eq!((result, restarts), (Err(WcError::RetryExceeded), 0));
    assert!(refusals >= 40, "{refusals}");
}

/// The same under go-back-N, whose receiver keeps nothing out of
/// sequence: it answers the first packet after the dropped registration
/// with one out-of-sequence NACK asking for packet 0, which the sender
/// had seen acknowledged, and discards the rest quietly. Found by the
/// whole-vocabulary property (tests/found/gbn-lost-registration.toml):
/// the sender kept resending the unacknowledged packets into that silence
/// until its retries ran out.
#[test]
fn a_go_back_n_receiver_that_lost_a_registration_gets_the_whole_operation_again() {
    let gbn = RetransmitMode::GoBackN;
    let (result, refusals, restarts) = lost_registration(TombstoneMode::Window, gbn, FIRST_ONLY);
    assert_eq!((result, restarts), (Ok(()), 1));
    assert!(refusals >= 1, "the receiver asked for packet 0");
}

/// The same with self-describing registration: the first retransmitted
/// packet registers the WRITE again, but go-back-N waits for packet 0,
/// which its sender saw acknowledged. Found by the whole-vocabulary hunt
/// (tests/found/gbn-self-describing-lost-registration.toml): the sender
/// resent its unacknowledged packets one timeout apart, each drawing a
/// NACK for packet 0, until the time limit.
#[test]
fn a_self_describing_go_back_n_receiver_that_lost_a_registration_gets_it_all_again() {
    let gbn = RetransmitMode::GoBackN;
    let described = RegistrationMode::SelfDescribing;
    let (result, refusals, restarts) = lost_registration(TombstoneMode::Window, gbn, described);
    assert_eq!((result, restarts), (Ok(()), 1));
    assert!(refusals >= 1, "the receiver asked for packet 0");
}

/// The same with self-describing registration and selective
/// retransmission: the first resent packet would register the WRITE
/// again, and the new entry wait for packet 0, which its sender saw
/// acknowledged and never sends again. The sender completed; the
/// receiver's entry expired a second time and its host was never told
/// the data had landed (finding 32: a ping-pong whose reply never
/// "arrived" stopped). Now h1 remembers that the expired entry held
/// acknowledged packets, refuses the resent ones, and h0 sends the whole
/// WRITE again.
#[test]
fn a_self_describing_receiver_that_lost_a_registration_is_sent_it_all_again() {
    let selective = RetransmitMode::Selective;
    let described = RegistrationMode::SelfDescribing;
    let (result, refusals, restarts) =
        lost_registration(TombstoneMode::Window, selective, described);
    assert_eq!((result, restarts), (Ok(()), 1));
    assert!(refusals >= 1, "h1 refused a resent packet");
}

/// The same when the lost entry never held packet 0 (finding 43): with
/// self-describing registration packets 1 and 2 register the WRITE and are
/// acknowledged, while every copy of packet 0 is lost for a millisecond,
/// and the entry expires waiting for it. The next copy of packet 0 used to
/// register the WRITE again; h0, with all three acknowledged, completed,
/// and the new entry waited for packets 1 and 2 until it expired too: h1's
/// host never heard the data land. Now h1 refuses packet 0 of the
/// incarnation it lost, saying so (`RNR_LOST`), and h0 sends the whole
/// WRITE again in its next incarnation, which h1 registers.
#[test]
fn a_late_first_packet_of_a_lost_registration_is_refused_and_the_whole_operation_goes_again() {
    let mut s = setup(NicConfig {
        registry_timeout: udrma_nic::Duration::from_micros(300),
        registration: RegistrationMode::SelfDescribing,
        ..four(TombstoneMode::Window)
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r)
            if r.opcode() == Opcode::Write
                && r.seg_index == 0
                && w.at < udrma_nic::Instant::ZERO + udrma_nic::Duration::from_millis(1) =>
        {
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(3 * 1024);
    s.pair.run();
    assert_eq!(s.completions(0, wr), [Ok(())]);
    s.assert_written(3 * 1024);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert!(h1.registry_expired >= 1, "h1 let the WRITE go");
    assert_eq!(
        h1.receiver_completions, 1,
        "h1 completed the WRITE, so its host heard that it landed"
    );
    assert!(h1.lost_registration_refusals >= 1, "h1 refused packet 0");
    assert_eq!(h0.registrations_lost, 1, "h0 sent it all again once");
}

/// A go-back-N receiver that holds the registration NACKs a gap for the
/// packet it expects next, never for packet 0. When that NACK comes back
/// late, after the packet it asked for was acknowledged, it is stale: the
/// operation goes on, nothing is restarted.
#[test]
fn a_stale_go_back_n_nack_for_a_later_packet_restarts_nothing() {
    let mut s = setup(NicConfig {
        retransmit: RetransmitMode::GoBackN,
        ..four(TombstoneMode::Window)
    });
    let (mut held, mut late) = (false, false);
    s.pair.set_filter(move |w| match w.repr {
        // Packet 1 is overtaken by packet 2: the receiver asks for 1 ...
        Some(r) if r.opcode() == Opcode::Write && r.seg_index == 1 && !held => {
            held = true;
            Verdict::Delay(udrma_nic::Duration::from_micros(3))
        }
        // ... and its NACK comes back after 1 arrived and was acknowledged.
        Some(r) if r.opcode() == Opcode::Nack && !late => {
            late = true;
            Verdict::Delay(udrma_nic::Duration::from_micros(20))
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(4 * 1024);
    s.pair.run();
    assert_eq!(s.completions(0, wr), [Ok(())]);
    s.assert_written(4 * 1024);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        h0.nacks_received.get(&Syndrome::SequenceError).copied(),
        Some(1),
        "the receiver asked once"
    );
    assert_eq!(h0.registrations_lost, 0, "a stale NACK restarts nothing");
}

/// Two 3-packet WRITEs whose later packets are dropped for a millisecond,
/// to a receiver with room for one registration (and one record of a lost
/// one) that lets an entry go after 300 µs, run to the end.
fn two_lost_registrations(registration: RegistrationMode) -> (Setup, WrId, WrId) {
    let mut s = setup(NicConfig {
        registry_capacity: 1,
        registry_timeout: udrma_nic::Duration::from_micros(300),
        max_rnr_retries: 40,
        registration,
        ..four(TombstoneMode::Window)
    });
    drop_later_packets_for_a_millisecond(&mut s);
    let first = s.write_at(0, 3 * 1024);
    let second = s.write_at(8192, 3 * 1024);
    s.pair.run();
    (s, first, second)
}

/// The receiver remembers at most `registry_capacity` operations whose
/// entry expired. With room for one, two WRITEs lose their registration
/// one after the other (the second registers once the first's entry has
/// expired): the first's record is forgotten to make room for the
/// second's. The second is refused and sent again whole; the first's
/// later packets register it again and that entry waits for packet 0,
/// which h0 saw acknowledged (the limit docs/engine.md states): h0
/// completes both, h1 only the second.
#[test]
fn a_receiver_remembers_a_registry_s_worth_of_lost_registrations() {
    let (s, first, second) = two_lost_registrations(RegistrationMode::SelfDescribing);
    let h1 = s.pair.nics[1].stats();
    assert_eq!(h1.registry_expired, 3, "both expired, then the first again");
    assert_eq!(h1.lost_registrations_forgotten, 1);
    assert!(h1.lost_registration_refusals >= 1);
    assert_eq!(h1.receiver_completions, 1, "the second only");
    assert_eq!(s.completions(0, first), [Ok(())]);
    assert_eq!(s.completions(0, second), [Ok(())]);
    assert_eq!(s.pair.nics[0].stats().registrations_lost, 1);
}

/// Under first-only registration the record's loss is no loss of the
/// operation: with room for one record, the first WRITE's is forgotten,
/// its later packets wait in the escape channel for a first packet that
/// is not coming and are refused when their time there runs out, without
/// the word `RNR_LOST`. The window still tells h0 what that refusal
/// means (packet 0 was acknowledged), and both WRITEs go again whole and
/// complete at both ends.
#[test]
fn a_first_only_receiver_that_forgot_a_lost_registration_still_gets_it_all_again() {
    let (s, first, second) = two_lost_registrations(FIRST_ONLY);
    let h1 = s.pair.nics[1].stats();
    assert_eq!(h1.lost_registrations_forgotten, 1);
    assert_eq!(s.completions(0, first), [Ok(())]);
    assert_eq!(s.completions(0, second), [Ok(())]);
    assert_eq!(h1.receiver_completions, 2, "both landed, and h1 said so");
    assert_eq!(s.pair.nics[0].stats().registrations_lost, 2);
}
