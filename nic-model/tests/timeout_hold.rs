//! Timeout hold stories (`timeout_hold`, on in the bridge) over virtual
//! time, with a 1 ms RTO: while a peer answers nothing, one timeout at a
//! time goes toward it. A receiver that stalls (a host process the
//! scheduler did not run) answers late for every packet, and only one copy
//! went; a burst that was really lost is found by the copy's answer, which
//! convicts the packets sent before it; and a peer that answers nothing at
//! all still fails the WRITE when the copy's retries run out. Beside each,
//! the same run with the hold off.

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{AckMode, Duration, NicConfig, RetransmitMode, WcError};
use udrma_proto::NodeAddr;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// mtu 1 KiB, a 1 ms RTO from the start, the hold on or off.
fn cfg(hold: bool) -> NicConfig {
    NicConfig {
        rto_initial: ms(1),
        rto_min: ms(1),
        timeout_hold: hold,
        ..config()
    }
}

/// An 8-packet WRITE whose receiver answers everything 1.5 ms late.
fn stalled_receiver(hold: bool) -> Setup {
    stalled_receiver_with(cfg(hold))
}

fn stalled_receiver_with(cfg: NicConfig) -> Setup {
    let mut s = setup(cfg);
    s.pair.set_filter(|w| {
        if w.from == NodeAddr(1) {
            Verdict::Delay(Duration::from_micros(1500))
        } else {
            Verdict::Deliver
        }
    });
    s.write_through(8192);
    s
}

#[test]
fn a_stalled_receiver_gets_one_copy_not_every_packet_again() {
    // The eight packets arrive at once; their answers leave 1.5 ms late,
    // after the 1 ms timers. The first timer sends packet 0 again; the
    // other seven come due while the receiver has answered nothing since
    // that copy, and wait one backed-off RTO after it. The late answers
    // arrive first, and nothing more is sent.
    let s = stalled_receiver(true);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.timeouts_held), (1, 7), "{h0:?}");
    assert_eq!(resent_segments(&s), vec![0]);

    // Without the hold every timer sends its packet: eight copies of
    // packets the receiver had.
    let s = stalled_receiver(false);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.timeouts_held), (8, 0), "{h0:?}");
    assert_eq!(resent_segments(&s), (0..8).collect::<Vec<u32>>());

    // Under go-back-N nothing is held: the receiver answers only in
    // order, so a packet held could be the one it waits for (scenario
    // files refuse the key there). The first timeout goes back over all
    // eight.
    let s = stalled_receiver_with(NicConfig {
        retransmit: RetransmitMode::GoBackN,
        ..cfg(true)
    });
    let h0 = s.pair.nics[0].stats();
    assert_eq!(h0.timeouts_held, 0, "{h0:?}");
    assert_eq!(resent_segments(&s), (0..8).collect::<Vec<u32>>());
}

/// A one-packet WRITE (an RTT sample), then an 8-packet WRITE whose
/// first copies are all lost.
fn burst_lost(hold: bool) -> Setup {
    let mut s = setup(cfg(hold));
    s.write_through(1024);
    let mut dropped = 0;
    s.pair.set_filter(move |w| {
        if is_data(w) && dropped < 8 {
            dropped += 1;
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    s.write_through(8192);
    s
}

#[test]
fn a_lost_burst_is_found_by_the_copys_answer() {
    // All eight are lost (after a first WRITE gave an RTT sample, 2 µs).
    // The eight timers come due together at 1 ms: the first (packet 1's)
    // sends its packet again and the other seven wait. The copy finds the
    // WRITE unregistered (its first packet was lost) and is refused; the
    // first packet goes again, and its acknowledgement, a round trip
    // later, convicts packets 2-7, which left long before it: they go
    // again at once, with packet 1 after the refusal. One timeout, not
    // eight.
    let s = burst_lost(true);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.timeouts, h0.timeouts_held, h0.fast_retransmits),
        (1, 7, 6),
        "{h0:?}"
    );
    assert_eq!(
        (h0.first_resent_on_refusal, h0.retransmits),
        (1, 9),
        "{h0:?}"
    );
    // A round trip (microseconds here) after the timer, not another RTO.
    let held = s.pair.now;
    assert!(held.0 < ms(2).0, "done at {held:?}");

    let s = burst_lost(false);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.timeouts, h0.timeouts_held, h0.retransmits),
        (8, 0, 8),
        "{h0:?}"
    );
    assert!(
        s.pair.now.0 <= held.0,
        "without the hold done at {:?}",
        s.pair.now
    );
}

#[test]
fn a_peer_that_answers_nothing_still_fails_the_write() {
    // Everything toward h1 is lost. The held timers never send, but the
    // copy's own timer backs off and spends its retries: the WRITE fails
    // with its budget spent, as it does with the hold off.
    for hold in [true, false] {
        let mut s = setup(NicConfig {
            max_retries: 3,
            ..cfg(hold)
        });
        s.pair.set_filter(|w| {
            if w.from == NodeAddr(0) {
                Verdict::Drop
            } else {
                Verdict::Deliver
            }
        });
        let wr = s.write(8192);
        s.pair.run();
        assert_eq!(
            s.completions(0, wr),
            vec![Err(WcError::RetryExceeded)],
            "hold {hold}"
        );
        let h0 = s.pair.nics[0].stats();
        if hold {
            // Only packet 0 ever went again: once per retry.
            assert_eq!(resent_segments(&s), vec![0, 0, 0]);
            assert!(h0.timeouts_held > 0, "{h0:?}");
        } else {
            assert_eq!(h0.timeouts_held, 0, "{h0:?}");
        }
    }
}

/// `stalled_receiver` with selective ACKs: the late answers come as one
/// SACK naming the timeout's copy beside the seven packets held.
#[test]
fn a_sack_naming_the_copy_and_the_held_packets_convicts_none_of_them() {
    let s = stalled_receiver_with(NicConfig {
        ack_mode: AckMode::Selective {
            delay: Duration::from_micros(1),
        },
        ..cfg(true)
    });
    let h0 = s.pair.nics[0].stats();
    // The copy's answer is read after the packets sent once: nothing it
    // would judge lost is still out (before, the seven were counted lost,
    // and their loss told to the controller, by the SACK that
    // acknowledged them).
    assert_eq!((h0.timeouts, h0.fast_retransmits), (1, 0), "{h0:?}");
    assert_eq!(resent_segments(&s), vec![0]);
}
