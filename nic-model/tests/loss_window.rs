//! The loss window over virtual time: after a loss that congestion
//! caused, a sender keeps less out toward its peer and opens up as
//! acknowledgements come back, instead of sending a whole window again
//! (go-back-N) or every trimmed packet at once (selective, no controller)
//! into the queue that lost it (docs/engine.md, "The loss window";
//! docs/testing.md, findings 40 and 41).

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{Duration, NicConfig, RetransmitMode};
use udrma_proto::{NodeAddr, Opcode};

/// An 8-packet go-back-N WRITE whose packet 1 is lost once and whose
/// receiver's SEQUENCE_ERROR NACKs are lost too, so only the sender's
/// timer finds the loss. With `marked`, packet 0 arrives with a
/// congestion mark (its ACK echoes it): the loss is congestion's.
fn lost_until_the_timer(loss_window: bool, marked: bool) -> Setup {
    let mut s = setup(NicConfig {
        retransmit: RetransmitMode::GoBackN,
        loss_window,
        rto_initial: Duration::from_micros(50),
        ..config()
    });
    let mut lost = false;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if r.opcode() == Opcode::Nack => Verdict::Drop,
        Some(r) if is_data(w) && r.seg_index == 0 && marked => Verdict::MarkCe(Duration::ZERO),
        Some(r) if is_data(w) && r.seg_index == 1 && !lost => {
            lost = true;
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    s.write_through(8192);
    s
}

/// The segments of WRITE packets h0 sent after its timer's copy of
/// packet 1 and before that copy's ACK came back.
fn sent_with_the_timers_copy(s: &Setup) -> Vec<u32> {
    let log = &s.pair.log;
    let copy = log
        .iter()
        .filter(|l| l.from == NodeAddr(0) && l.kind.starts_with("WRITE") && l.seg_index == 1)
        .nth(1)
        .expect("packet 1 went twice");
    let acked = log
        .iter()
        .find(|l| l.from == NodeAddr(1) && l.kind == "ACK" && l.seg_index == 1 && l.n > copy.n)
        .expect("the copy was acknowledged");
    log.iter()
        .filter(|l| l.from == NodeAddr(0) && l.kind.starts_with("WRITE"))
        .filter(|l| l.n > copy.n && l.at < acked.at)
        .map(|l| l.seg_index)
        .collect()
}

#[test]
fn after_a_congested_timeout_go_back_n_starts_again_from_one_packet() {
    // The path marked packet 0: with the window, the timer's copy of
    // packet 1 goes alone; packets 2 to 7 follow as acknowledgements
    // open the window again.
    let s = lost_until_the_timer(true, true);
    assert_eq!(sent_with_the_timers_copy(&s), Vec::<u32>::new());
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.loss_window_cuts, h0.ecn_echoes), (1, 1, 1));
    assert_eq!(resent_segments(&s), vec![1, 2, 3, 4, 5, 6, 7]);

    // Without it (RoCE's sender): the whole rest of the window leaves at
    // once behind the copy, into the queue that lost packet 1.
    let s = lost_until_the_timer(false, true);
    assert_eq!(sent_with_the_timers_copy(&s), vec![2, 3, 4, 5, 6, 7]);
    assert_eq!(s.pair.nics[0].stats().loss_window_cuts, 0);
}

#[test]
fn a_loss_with_no_sign_of_congestion_leaves_the_window_alone() {
    // Nothing marked, nothing trimmed: the path lost packet 1 on its own
    // (a lossy link), and a smaller window would only be slower. The
    // rewind goes at once, as RoCE's.
    let s = lost_until_the_timer(true, false);
    assert_eq!(sent_with_the_timers_copy(&s), vec![2, 3, 4, 5, 6, 7]);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.loss_window_cuts, h0.ecn_echoes), (1, 0, 0));
}

/// A selective pair with no controller whose first copy of packet 2 is
/// trimmed and whose every ACK is held 10 µs on the way back.
fn trim_once_holding_acks(loss_window: bool) -> Setup {
    let mut s = setup(NicConfig {
        loss_window,
        ..config()
    });
    let mut trimmed = false;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if r.opcode() == Opcode::Ack => Verdict::Delay(Duration::from_micros(10)),
        Some(r) if is_data(w) && r.seg_index == 2 && !trimmed => {
            trimmed = true;
            Verdict::Trim
        }
        _ => Verdict::Deliver,
    });
    s
}

/// An 8-packet selective WRITE with no controller whose packet 2 is
/// trimmed once, every ACK held 10 µs on the way back: when the TRIMMED
/// NACK comes (1 µs after the packets left), the other seven are still
/// out. Returns when packet 2's copy left.
fn trimmed_copy_leaves(loss_window: bool) -> (Setup, udrma_nic::Instant) {
    let mut s = trim_once_holding_acks(loss_window);
    s.write_through(8192);
    let copy = writes_sent(&s)
        .into_iter()
        .filter(|l| l.seg_index == 2)
        .nth(1)
        .expect("packet 2 went twice")
        .at;
    (s, copy)
}

#[test]
fn with_no_controller_a_trim_holds_the_copy_until_the_window_has_room() {
    // With the window: the trim halves what may be out (seven packets
    // are), so the copy waits for the held ACKs (10 µs on top of the
    // wire) instead of joining the queue that trimmed it.
    let (s, copy) = trimmed_copy_leaves(true);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.loss_window_cuts, h0.timeouts), (1, 0));
    assert!(copy.0 >= Duration::from_micros(10).0, "left at {copy:?}");

    // Without it: the copy leaves the moment the NACK is in.
    let (s, copy) = trimmed_copy_leaves(false);
    assert_eq!(s.pair.nics[0].stats().loss_window_cuts, 0);
    assert!(copy.0 < Duration::from_micros(10).0, "left at {copy:?}");
}

/// `trimmed_copy_leaves`'s WRITE (packet 2 trimmed once, ACKs held
/// 10 µs), with a second 8-packet WRITE posted 3 µs in, after the trim's
/// NACK cut the window. Returns when the second WRITE's first packet
/// left.
fn second_write_leaves(loss_window: bool) -> udrma_nic::Instant {
    let mut s = trim_once_holding_acks(loss_window);
    let first = s.write(8192);
    s.pair
        .run_until(udrma_nic::Instant::ZERO + Duration::from_micros(3));
    let second = s.write_at(8192, 8192);
    s.pair.flush();
    s.pair.run();
    s.assert_ok_once(0, first);
    s.assert_ok_once(0, second);
    let msg = s
        .pair
        .log
        .iter()
        .find(|l| l.from == NodeAddr(0) && l.kind.starts_with("WRITE"))
        .map(|l| l.msg_id)
        .expect("the first WRITE went");
    writes_sent(&s)
        .into_iter()
        .find(|l| l.msg_id != msg)
        .expect("the second WRITE went")
        .at
}

#[test]
fn with_no_controller_new_data_waits_for_the_cut_window_too() {
    // The window holds new operations as it holds copies: the second
    // WRITE waits for the held ACKs to make room.
    let held = second_write_leaves(true);
    assert!(held.0 >= Duration::from_micros(10).0, "left at {held:?}");
    // Without it, the second WRITE leaves as soon as it is posted (one
    // microsecond of doorbell later), long before the ACKs are back.
    let at_once = second_write_leaves(false);
    assert!(
        at_once.0 < Duration::from_micros(10).0,
        "left at {at_once:?}"
    );
}
