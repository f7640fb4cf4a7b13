//! Tail loss probe stories (`tail_probe`) over virtual time, with a 1 ms
//! RTO floor (as `rto_min = "full-queues"` gives a fabric): a loss at an
//! operation's end, which no later packet can reveal, is found by a probe
//! within a few round trips; the probe's acknowledgement shows what was
//! lost before it; a probe for a packet that was only late is counted
//! spurious, and its late answer is dated from when the first copy left;
//! an operation whose first packet is lost is probed with that packet;
//! and a probe spends no retry. A READ whose last response is
//! lost asks again for it after the same silence; one nothing of which
//! came back is left to its timer; and a READ probe for a response that
//! was only late is counted spurious.

mod common;

use common::*;
use udrma_nic::pair::{Verdict, Wire};
use udrma_nic::{Duration, NicConfig, WcError};
use udrma_proto::{Flags, Opcode};

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// mtu 1 KiB, a 1 ms RTO floor, probes on or off.
fn cfg(probe: bool) -> NicConfig {
    NicConfig {
        rto_min: Duration::from_millis(1),
        tail_probe: probe,
        ..config()
    }
}

/// No probe went: the loss waited out the 1 ms timer.
fn left_to_the_timer(s: &Setup) {
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.tail_probes, h0.timeouts), (0, 1), "{h0:?}");
    assert!(s.pair.now.0 > us(1000).0, "done at {:?}", s.pair.now);
}

/// A filter that drops the first packet of each segment in `lost` among
/// those `kind` picks, and delivers everything else.
fn drop_once(
    lost: &'static [u32],
    kind: impl Fn(&Wire<'_>) -> bool + 'static,
) -> impl FnMut(&Wire<'_>) -> Verdict + 'static {
    let mut dropped: Vec<u32> = Vec::new();
    move |w| match w.repr {
        Some(r) if kind(w) && lost.contains(&r.seg_index) && !dropped.contains(&r.seg_index) => {
            dropped.push(r.seg_index);
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    }
}

/// An 8-packet WRITE whose data packets `lost` are dropped once each.
fn write_losing(cfg: NicConfig, lost: &'static [u32]) -> Setup {
    let mut s = setup(cfg);
    s.pair.set_filter(drop_once(lost, is_data));
    let wr = s.write(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(8192);
    s
}

#[test]
fn the_last_packet_lost_is_found_by_a_probe_not_the_timer() {
    // Packets 0–6 are acknowledged; packet 7 is lost and nothing after it
    // can overtake it. Two smoothed RTTs and four deviations of silence
    // later it goes again as a probe, and the WRITE is done in tens of
    // microseconds, not after the 1 ms timer.
    let s = write_losing(cfg(true), &[7]);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.tail_probes, h0.spurious_tail_probes, h0.timeouts),
        (1, 0, 0),
        "{h0:?}"
    );
    assert_eq!(resent_segments(&s), vec![7]);
    assert!(s.pair.now.0 < us(50).0, "done at {:?}", s.pair.now);

    // Without probes the timer is all there is.
    let s = write_losing(cfg(false), &[7]);
    left_to_the_timer(&s);
}

#[test]
fn a_probe_answer_shows_what_was_lost_before_it() {
    // The eight packets leave together; 5 and 7 are lost. The ACK of 6
    // cannot convict 5 (they left together), so the operation falls
    // silent. The probe resends 7, the highest packet out; its
    // acknowledgement comes a round trip after the probe left, so it is
    // the probe's own, and 5, sent long before the probe, is lost: it
    // goes again at once.
    let s = write_losing(cfg(true), &[5, 7]);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.tail_probes, h0.fast_retransmits, h0.timeouts),
        (1, 1, 0),
        "{h0:?}"
    );
    assert_eq!(resent_segments(&s), vec![7, 5]);
    assert!(s.pair.now.0 < us(50).0, "done at {:?}", s.pair.now);
    // The probe taught the reordering window nothing: a later WRITE with
    // one loss in the middle is still caught by the packet after it.
    assert_eq!(h0.spurious_fast_retransmits, 0);
}

#[test]
fn a_probe_for_a_packet_that_was_only_late_is_counted_spurious() {
    // Round trips take 2 µs. Packet 7 is held 5 µs on the wire, not
    // lost: the probe leaves at 6.7 µs, after 4.7 µs of silence, and the
    // first copy's acknowledgement is back at 7 µs, within half a
    // smoothed RTT of it. The receiver drops the probe by the finished
    // operation's tombstone; nothing else goes again.
    let mut s = setup(cfg(true));
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) && r.seg_index == 7 && !r.flags.contains(Flags::RETRANSMIT) => {
            Verdict::Delay(us(5))
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!(
        (
            h0.tail_probes,
            h0.spurious_tail_probes,
            h0.fast_retransmits,
            h0.timeouts
        ),
        (1, 1, 0, 0),
        "{h0:?}"
    );
    assert_eq!(h1.stale_dropped, 1, "{h1:?}");
}

#[test]
fn an_operation_whose_first_packet_is_lost_is_probed_with_it() {
    // The receiver registers an operation by its first packet: without
    // packet 0 the other seven wait in its escape channel and nothing is
    // acknowledged. Probing the highest packet would only park another
    // copy; the probe sends packet 0, the operation registers, the escape
    // channel drains, and the WRITE is done before the 1 ms timer.
    let s = write_losing(
        NicConfig {
            escape_timeout: Duration::from_millis(2),
            ..cfg(true)
        },
        &[0],
    );
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!((h0.tail_probes, h0.timeouts), (1, 0), "{h0:?}");
    assert_eq!(resent_segments(&s), vec![0]);
    assert_eq!(h1.escape_drained, 7, "{h1:?}");
    assert!(s.pair.now.0 < us(1000).0, "done at {:?}", s.pair.now);
}

#[test]
fn a_probe_is_not_a_retry() {
    // With no retry budget at all, a lost last packet fails the WRITE
    // when its timer fires; a probe recovers it without spending any.
    let no_retries = |probe| NicConfig {
        max_retries: 0,
        ..cfg(probe)
    };
    let s = write_losing(no_retries(true), &[7]);
    assert_eq!(s.pair.nics[0].stats().retries_exhausted, 0);

    let mut s = setup(no_retries(false));
    let mut dropped = false;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if is_data(w) && r.seg_index == 7 && !dropped => {
            dropped = true;
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(8192);
    s.pair.run();
    assert_eq!(s.completions(0, wr), vec![Err(WcError::RetryExceeded)]);
}

#[test]
fn probes_stop_when_the_operation_is_done() {
    // 32 one-packet WRITEs, none lost, all acknowledged 2 µs after they
    // leave. At 3 µs every probe timer filed has been taken down with its
    // operation: the NIC has no deadline left at all.
    let mut s = setup(cfg(true));
    let wrs: Vec<_> = (0..32).map(|i| s.write_at(i * 1024, 1024)).collect();
    s.pair.advance_to(udrma_nic::Instant::ZERO + us(3));
    for wr in wrs {
        s.assert_ok_once(0, wr);
    }
    assert_eq!(s.pair.nics[0].poll_timeout(), None);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.tail_probes, h0.retransmits), (0, 0), "{h0:?}");
}

#[test]
fn a_steady_transfer_is_never_probed() {
    // Through an OP table of 2 a 64-packet WRITE keeps its operation
    // busy for 64 µs, a packet out and one acknowledged every microsecond,
    // while its probe timeout is under 10 µs: the timer filed at the
    // start comes due many times over, finds activity since, and files
    // itself again each time. Nothing is sent twice.
    let mut s = setup(NicConfig {
        op_table_capacity: 2,
        ..cfg(true)
    });
    let wr = s.write(64 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert!(s.pair.now.0 > us(60).0, "done at {:?}", s.pair.now);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.tail_probes, h0.retransmits), (0, 0), "{h0:?}");
}

#[test]
fn a_probe_lost_too_is_followed_by_another_after_twice_the_wait() {
    // Packet 7 and its first probe are both lost. The last
    // acknowledgement came at 2 µs; the first probe leaves one probe
    // timeout later, and the second waits two timeouts after the first.
    let mut s = setup(cfg(true));
    let mut sevens = 0;
    s.pair.set_filter(move |w| match w.repr {
        // (Copies too: `is_data` is first copies only.)
        Some(r) if r.opcode().carries_data() && r.seg_index == 7 => {
            sevens += 1;
            if sevens <= 2 {
                Verdict::Drop
            } else {
                Verdict::Deliver
            }
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.tail_probes, h0.timeouts), (2, 0), "{h0:?}");
    let sent: Vec<u64> = writes_sent(&s)
        .iter()
        .filter(|l| l.seg_index == 7)
        .map(|l| l.at.0)
        .collect();
    assert_eq!(sent.len(), 3, "{sent:?}");
    let (last_ack, first, second) = (us(2).0, sent[1], sent[2]);
    assert_eq!(second - first, 2 * (first - last_ack), "{sent:?}");
}

/// An 8 KiB READ (eight 1 KiB responses) whose responses `lost` are
/// dropped once each; the READ requests h0 sent, as (time, first
/// response asked for).
fn read_losing(cfg: NicConfig, lost: &'static [u32]) -> (Setup, Vec<(u64, u32)>) {
    let mut s = setup(cfg);
    s.pair
        .set_filter(drop_once(lost, |w| opcode(w) == Some(Opcode::ReadResponse)));
    let wr = s.read(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let asks = s
        .pair
        .log
        .iter()
        .filter(|l| l.from == udrma_proto::NodeAddr(0) && l.kind == "READ_REQ")
        .map(|l| (l.at.0, l.seg_index))
        .collect();
    (s, asks)
}

#[test]
fn a_read_whose_last_response_is_lost_asks_again_after_a_probe_timeout() {
    // Responses 0–6 arrive; 7 is lost, and nothing after it can show it
    // missing. A probe timeout after response 6 the requester asks again,
    // for response 7 alone, and the READ is done in tens of microseconds.
    let (s, asks) = read_losing(cfg(true), &[7]);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.tail_probes, h0.spurious_tail_probes, h0.timeouts),
        (1, 0, 0),
        "{h0:?}"
    );
    assert_eq!(asks.len(), 2, "{asks:?}");
    assert_eq!(
        asks[1].1, 7,
        "the second ask starts at the missing response"
    );
    assert!(s.pair.now.0 < us(50).0, "done at {:?}", s.pair.now);
    let responses = s
        .pair
        .log
        .iter()
        .filter(|l| l.kind.starts_with("READ_RESP"))
        .count();
    assert_eq!(responses, 9, "one response sent again");

    // Without probes the READ waits for its 1 ms timer.
    let (s, _) = read_losing(cfg(false), &[7]);
    left_to_the_timer(&s);
}

#[test]
fn a_read_nothing_of_which_came_back_is_left_to_the_timer() {
    // The READ request is lost: no response ever comes. Asking again
    // early could have a responder that was only busy send everything
    // twice, so no probe goes; the 1 ms timer asks again.
    let mut s = setup(cfg(true));
    s.pair
        .set_filter(first_matching(|w| is_kind(w, "READ_REQ"), Verdict::Drop, 1));
    let wr = s.read(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    left_to_the_timer(&s);
}

#[test]
fn a_read_probe_for_a_response_that_was_only_late_is_counted_spurious() {
    // The responses leave at 1 µs and arrive at 2 µs, but the first copy
    // of response 7 is held 8.5 µs on the wire, not lost. The requester
    // asks for it again at 10 µs, after a probe timeout of silence, and
    // the first copy arrives at 10.5 µs, sooner than half a smoothed RTT
    // after that ask: the probe is counted spurious, and the copy the
    // responder sends again finds the READ done and is dropped as stale.
    let mut s = setup(cfg(true));
    let mut held = false;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if r.opcode() == Opcode::ReadResponse && r.seg_index == 7 && !held => {
            held = true;
            Verdict::Delay(Duration::from_nanos(8_500))
        }
        _ => Verdict::Deliver,
    });
    let wr = s.read(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.tail_probes, h0.spurious_tail_probes, h0.timeouts),
        (1, 1, 0),
        "{h0:?}"
    );
    assert_eq!(h0.stale_read_responses, 1, "{h0:?}");
}

#[test]
fn a_probe_holds_off_the_timers_of_the_packets_it_will_answer_for() {
    // A one-packet WRITE gives the sender its first RTT sample (2 µs).
    // At 5 µs an eight-packet WRITE leaves; 2–7 are lost, 0 and 1 are
    // acknowledged at 7 µs. The probe (packet 7) goes at 13.25 µs, after
    // a probe timeout of silence; with an 8 µs RTO floor the six timers
    // come due at 15 µs, before the probe's answer at 15.25 µs (without
    // the re-arming below, five timeouts resend 2–6 at 15 µs). As
    // RACK-TLP re-arms its RTO when it probes, the timers are filed again
    // one RTO after the probe; the answer comes first and convicts 2–6,
    // which go again at 15.25 µs. No timer fires.
    let mut s = setup(NicConfig {
        rto_min: us(8),
        ..cfg(true)
    });
    s.pair.set_filter(drop_once(&[2, 3, 4, 5, 6, 7], is_data));
    let first = s.write(1024);
    s.pair.advance_to(udrma_nic::Instant::ZERO + us(5));
    let wr = s.write(8192);
    s.pair.run();
    s.assert_ok_once(0, first);
    s.assert_ok_once(0, wr);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (h0.tail_probes, h0.fast_retransmits, h0.timeouts),
        (1, 5, 0),
        "{h0:?}"
    );
    // After the nine first copies (one packet, then eight): the probe,
    // then what its answer convicted.
    let again: Vec<u32> = writes_sent(&s)
        .iter()
        .skip(9)
        .map(|l| l.seg_index)
        .collect();
    assert_eq!(again, vec![7, 2, 3, 4, 5, 6]);
}

#[test]
fn a_late_first_copy_answered_after_its_probe_dates_from_when_it_first_left() {
    // As above, packet 7 of a WRITE is held 5 µs and probed at 6.7 µs. A
    // second WRITE, posted at 4 µs, has its packets held 4 µs (its own
    // tail is probed too). The acknowledgement back at 7 µs is the first
    // copy's, which left at about 1 µs: it says nothing of the second
    // WRITE's packets, all sent after it. Dated from the probe instead
    // (a packet's first send time overwritten by a copy's), it convicted
    // one as overtaken and sent it again, spuriously.
    let mut s = setup(cfg(true));
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) && w.at.0 < us(3).0 && r.seg_index == 7 => Verdict::Delay(us(5)),
        Some(_) if is_data(w) && w.at.0 >= us(3).0 => Verdict::Delay(us(4)),
        _ => Verdict::Deliver,
    });
    let first = s.write(8192);
    s.pair.run_until(udrma_nic::Instant(us(4).0));
    let second = s.write_at(8192, 8192);
    s.pair.run();
    s.assert_ok_once(0, first);
    s.assert_ok_once(0, second);
    let h0 = s.pair.nics[0].stats();
    assert_eq!(
        (
            h0.tail_probes,
            h0.spurious_tail_probes,
            h0.fast_retransmits,
            h0.spurious_fast_retransmits
        ),
        (2, 1, 0, 0),
        "{h0:?}"
    );
}
