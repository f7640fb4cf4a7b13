//! Loss recovery stories over virtual time: a packet overtaken by a later
//! one is sent again before any timer, a lost selective ACK is repaired by
//! the next one, a go-back-N receiver discards what arrives out of
//! sequence and says so once, and a receiver that is not ready costs the
//! sender time, never its loss budget.

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{AckMode, Duration, NicConfig, RetransmitMode};
use udrma_proto::{Flags, Opcode, Syndrome};

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// A 4-packet WRITE under `cfg` whose packet 1 is lost once.
fn second_packet_lost_under(cfg: NicConfig) -> Setup {
    let mut s = setup(cfg);
    s.pair.set_filter(first_matching(
        {
            let mut seen = 0;
            move |w| {
                seen += u32::from(is_data(w));
                is_data(w) && seen == 2
            }
        },
        Verdict::Drop,
        1,
    ));
    let wr = s.write(4096);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(4096);
    s
}

/// Through an OP table of 2, so packets leave one round trip apart.
fn second_packet_lost_once(fast: bool) -> Setup {
    second_packet_lost_under(NicConfig {
        op_table_capacity: 2,
        fast_retransmit: fast,
        ..config()
    })
}

#[test]
fn a_packet_overtaken_by_a_later_one_goes_again_before_its_timer() {
    // Packet 0 is acknowledged, packet 2 leaves a round trip later and is
    // acknowledged too: packet 1, sent well before it, is lost. It goes
    // again then, not when its 100 µs timer fires.
    let s = second_packet_lost_once(true);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.fast_retransmits, h0.timeouts), (1, 0));
    assert_eq!(resent_segments(&s), vec![1]);
    let fast_done = s.pair.now;
    assert!(fast_done.0 < us(50).0, "done at {fast_done:?}");

    // Without loss detection the timer is all there is.
    let s = second_packet_lost_once(false);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.fast_retransmits, h0.timeouts), (0, 1));
    assert!(s.pair.now.0 > us(100).0, "done at {:?}", s.pair.now);
}

#[test]
fn packets_that_left_together_are_not_judged_by_the_order_of_their_acks() {
    // All four packets leave at once; packet 1's ACK is held 3 µs, so the
    // ACKs of 2 and 3 come back first. None of them left after packet 1,
    // so nothing is declared lost.
    let mut s = setup(config());
    s.pair
        .set_filter(|w| match (opcode(w), w.repr.map(|r| r.seg_index)) {
            (Some(Opcode::Ack), Some(1)) => Verdict::Delay(us(3)),
            _ => Verdict::Deliver,
        });
    let wr = s.write(4096);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.retransmits, h0.fast_retransmits), (0, 0));
}

#[test]
fn a_lost_sack_is_repaired_by_the_next_one() {
    // Selective ACKs, 8 packets: 0–3 arrive together and their SACK is
    // lost; 4–5 arrive 10 µs later and their SACK names 0–5 (everything
    // the registry holds in the 64 packets ending at 5); 6–7 are held past
    // every timer. Packets 0–3 are never sent again.
    let mut s = setup(NicConfig {
        ack_mode: AckMode::Selective { delay: us(2) },
        ..config()
    });
    let mut sacks = 0;
    s.pair.set_filter(move |w| {
        let Some(r) = w.repr else {
            return Verdict::Deliver;
        };
        if opcode(w) == Some(Opcode::SelectiveAck) {
            sacks += 1;
            return if sacks == 1 {
                Verdict::Drop
            } else {
                Verdict::Deliver
            };
        }
        match (is_data(w), r.seg_index) {
            (true, 4 | 5) => Verdict::Delay(us(10)),
            (true, 6 | 7) => Verdict::Delay(us(1000)),
            _ => Verdict::Deliver,
        }
    });
    let wr = s.write(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(8192);
    let resent = resent_segments(&s);
    assert!(
        resent.iter().all(|seg| *seg >= 6),
        "only the held packets may go again: {resent:?}"
    );
}

/// Per-packet ACKs, every packet out at once.
fn second_packet_lost(mode: RetransmitMode) -> Setup {
    second_packet_lost_under(NicConfig {
        retransmit: mode,
        ..config()
    })
}

#[test]
fn a_go_back_n_receiver_discards_what_is_out_of_sequence_and_nacks_once() {
    // RoCE's receiver: packets 2 and 3 arrive after the gap and are thrown
    // away; the first of them draws one SEQUENCE_ERROR naming packet 1,
    // and the sender sends 1, 2 and 3 again at once.
    let s = second_packet_lost(RetransmitMode::GoBackN);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!(h1.out_of_sequence, 2);
    assert_eq!(h1.nacks_sent.get(&Syndrome::SequenceError), Some(&1));
    assert_eq!(h0.nacks_received.get(&Syndrome::SequenceError), Some(&1));
    assert_eq!(resent_segments(&s), vec![1, 2, 3]);
    assert_eq!(h0.timeouts, 0);

    // Selective: the receiver keeps 2 and 3; only 1 goes again.
    let s = second_packet_lost(RetransmitMode::Selective);
    let h1 = s.pair.nics[1].stats();
    assert_eq!(h1.out_of_sequence, 0);
    assert_eq!(resent_segments(&s), vec![1]);
}

#[test]
fn a_go_back_n_gap_before_registration_is_nacked_once_not_every_round_trip() {
    // Every copy of the first packet is lost for 200 µs, the rest arrive.
    // RoCE's responder NACKs the gap once and then drops out-of-sequence
    // copies quietly, so the sender's later tries wait for its timer, which
    // backs off. (Found by the vocabulary property test: a NACK per round
    // trip spent 40 retries in 80 µs of a link that was down for 82.)
    let mut s = setup(NicConfig {
        retransmit: RetransmitMode::GoBackN,
        max_retries: 8,
        rto_initial: us(20),
        ..config()
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r) if r.opcode().carries_data() && r.seg_index == 0 && w.at.0 < us(200).0 => {
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    s.write_through(4096);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!(h1.nacks_sent.get(&Syndrome::SequenceError), Some(&1));
    assert!(h0.timeouts >= 2, "later tries wait for the timer");
    assert_eq!(h0.retries_exhausted, 0);
}

#[test]
fn a_refused_operation_waits_without_spending_the_loss_budget() {
    // A registry of one, held by WRITE A whose last packet is delayed
    // 20 µs. WRITE B's first packet is refused (not ready); its second is
    // parked in the escape channel, and its timer fires while the first
    // waits out the refusal. With no loss retries at all B still
    // completes: the wait is spent on the busy budget.
    let mut s = setup(NicConfig {
        registry_capacity: 1,
        max_retries: 0,
        rto_initial: us(30),
        ..config()
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) && r.msg_id == 1 && r.seg_index == 1 => Verdict::Delay(us(20)),
        _ => Verdict::Deliver,
    });
    let a = s.write(2048);
    let b = s.write_at(4096, 2048);
    s.pair.run();
    s.assert_ok_once(0, a);
    s.assert_ok_once(0, b);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert!(h1.registry_full >= 1, "B was refused");
    assert!(h0.timeouts >= 1, "B's parked packet timed out");
    assert_eq!(h0.retries_exhausted, 0);
}

#[test]
fn an_escaped_packet_that_expires_draws_a_refusal() {
    // The first packet is lost, so the second waits in the escape channel
    // for an operation that never registers; when it expires its sender
    // hears "not ready" instead of nothing.
    let mut s = setup(NicConfig {
        escape_timeout: us(5),
        ..config()
    });
    s.pair.set_filter(first_matching(is_data, Verdict::Drop, 1));
    let wr = s.write(2048);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert!(h1.escape_expired >= 1);
    assert!(
        h1.nacks_sent.get(&Syndrome::ReceiverNotReady) >= Some(&1),
        "the expired packet is refused"
    );
    assert_eq!(h0.retries_exhausted, 0);
}

/// `writes` 4 KiB WRITEs one after another on `s`, each checked done
/// once: how many packets each sent again on loss detection.
fn fast_retransmits_per_write(s: &mut Setup, writes: usize) -> Vec<u64> {
    let mut per_write = Vec::new();
    for _ in 0..writes {
        let before = s.pair.nics[0].stats().fast_retransmits;
        let wr = s.write(4096);
        s.pair.run();
        s.assert_ok_once(0, wr);
        per_write.push(s.pair.nics[0].stats().fast_retransmits - before);
    }
    per_write
}

#[test]
fn a_late_packet_resent_for_nothing_widens_the_window_until_it_is_left_alone() {
    // A 2 µs round trip, an OP table of 2, and the first copy of every
    // WRITE's packet 1 held 2.5 µs: packet 2 (sent a round trip later) is
    // acknowledged first, so packet 1 goes again; its first copy's ACK
    // comes 0.5 µs after the resend, too soon to answer it: that
    // retransmission was for nothing. Each one doubles the reordering
    // window (0.5, 1, 2 µs); once it spans the round trip between the two
    // packets, packet 1 is left to arrive.
    let mut s = setup(NicConfig {
        op_table_capacity: 2,
        ..config()
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) && r.seg_index == 1 => Verdict::Delay(Duration::from_nanos(2_500)),
        _ => Verdict::Deliver,
    });
    let per_write = fast_retransmits_per_write(&mut s, 4);
    assert_eq!(per_write, vec![1, 1, 1, 0]);
    assert_eq!(s.pair.nics[0].stats().spurious_fast_retransmits, 3);
}

#[test]
fn an_answer_soon_after_a_copy_over_a_drained_queue_is_no_sign_of_reordering() {
    // One WRITE over an empty path (a 2 µs round trip, the fastest the
    // sender sees), then three whose data waits 8 µs in a queue, so the
    // smoothed round trip swells toward 10 µs. In the fifth, packet 1 is
    // lost, and its copy, sent when packet 2 is acknowledged, finds the
    // queue drained: it is answered 2 µs later, under half the smoothed
    // round trip, so half the srtt alone would take that answer for a late
    // first copy's. It is not sooner than the fastest round trip, so it
    // may be the copy's own, and nothing arrived twice: the copy is not
    // counted spurious, and the window learns nothing.
    let mut s = setup(NicConfig {
        op_table_capacity: 2,
        ..config()
    });
    s.pair.set_filter({
        let (mut n, mut dropped, mut copied) = (0, false, false);
        move |w| match w.repr {
            Some(r) if is_data(w) => {
                n += 1;
                if n <= 4 {
                    Verdict::Deliver
                } else if r.seg_index == 1 && n > 16 && !dropped {
                    dropped = true;
                    Verdict::Drop
                } else if r.seg_index == 1 && dropped && !copied {
                    copied = true;
                    Verdict::Deliver
                } else {
                    Verdict::Delay(us(8))
                }
            }
            _ => Verdict::Deliver,
        }
    });
    let per_write = fast_retransmits_per_write(&mut s, 5);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!(per_write, vec![0, 0, 0, 0, 1]);
    let peer = s.pair.nics[1].addr();
    let srtt = s.pair.nics[0]
        .rtt(peer)
        .and_then(|e| e.srtt())
        .expect("sampled");
    assert!(srtt.0 > us(4).0, "the queue swelled the srtt: {srtt:?}");
    assert_eq!(
        (h0.timeouts, h1.dup_dropped),
        (0, 0),
        "nothing arrived twice"
    );
    assert_eq!(h0.spurious_fast_retransmits, 0);
}

#[test]
fn a_copy_that_overtakes_its_late_first_packet_is_reported_and_widens_the_window() {
    // As above, but packet 1's first copy is held 10 µs: its copy, sent
    // when packet 2 is acknowledged, arrives first and completes the
    // WRITE, so no acknowledgement comes too soon after the copy. The
    // late first copy then arrives after the end; the receiver's ACK says
    // it had the packet already (flag DUP), and the sender, which had sent
    // that packet again on loss detection, learns from the report's
    // timing how late the first copy was (about 10 µs, less the round
    // trip) and widens its window to that at once. Without the report,
    // every WRITE would resend packet 1.
    let mut s = setup(NicConfig {
        op_table_capacity: 2,
        ..config()
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) && r.seg_index == 1 => Verdict::Delay(us(10)),
        _ => Verdict::Deliver,
    });
    let per_write = fast_retransmits_per_write(&mut s, 6);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!(per_write, vec![1, 0, 0, 0, 0, 0]);
    assert_eq!(h0.spurious_fast_retransmits, 1);
    assert_eq!(h0.stale_acks, 1, "the report came after the WRITE ended");
    assert_eq!(
        h1.stale_dropped, 1,
        "the late first copy arrived after its WRITE was complete"
    );
    assert_eq!(h0.timeouts, 0);
}

#[test]
fn a_duplicate_that_answers_a_lost_ack_is_no_sign_of_reordering() {
    // Packet 1 arrives but its ACK is lost, each WRITE: packet 2's ACK
    // convicts it, and its copy arrives as a duplicate. The receiver's
    // DUP acknowledgement is the first word the sender has of packet 1,
    // so the copy was needed; nothing was late, and the window stays: the
    // next WRITE's lost ACK is found as fast.
    let mut s = setup(NicConfig {
        op_table_capacity: 2,
        ..config()
    });
    s.pair
        .set_filter(|w| match (opcode(w), w.repr.map(|r| r.flags)) {
            (Some(Opcode::Ack), Some(f))
                if w.repr.is_some_and(|r| r.seg_index == 1) && !f.contains(Flags::DUP) =>
            {
                Verdict::Drop
            }
            _ => Verdict::Deliver,
        });
    let per_write = fast_retransmits_per_write(&mut s, 4);
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!(per_write, vec![1, 1, 1, 1]);
    assert_eq!(h1.dup_dropped, 4);
    assert_eq!(h0.spurious_fast_retransmits, 0);
    assert_eq!(h0.timeouts, 0);
}

/// A 16-packet WRITE through an OP table of 2 (packets leave about a
/// round trip, 2 µs, apart) whose packet 1 is held 14 µs on the wire the
/// first time: the packets sent after it are acknowledged first, the
/// last of them sent up to about 13 µs after it.
fn second_packet_late(multipath: udrma_nic::Multipath) -> Setup {
    let mut cfg = NicConfig {
        op_table_capacity: 2,
        multipath,
        entropies: 4,
        ..config()
    };
    cfg.cc.base_rtt = us(20);
    let mut s = setup(cfg);
    s.pair.set_filter(first_matching(
        |w| is_data(w) && w.repr.is_some_and(|r| r.seg_index == 1),
        Verdict::Delay(us(14)),
        1,
    ));
    let wr = s.write(16 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s
}

#[test]
fn a_sprayed_packet_later_than_its_path_could_make_it_waits_a_base_rtt_before_it_is_resent() {
    // On one path a packet overtaken is lost: it goes again at once.
    let s = second_packet_late(udrma_nic::Multipath::Single);
    assert_eq!(resent_segments(&s), vec![1]);
    // Sprayed packets take paths of different delay: a packet overtaken by
    // less than one base RTT (20 µs here) is left to arrive. (Half a base
    // RTT, the earlier window, resent it.)
    for mode in [udrma_nic::Multipath::Spray, udrma_nic::Multipath::Reps] {
        let s = second_packet_late(mode);
        let h0 = s.pair.nics[0].stats();
        assert_eq!((h0.fast_retransmits, h0.timeouts), (0, 0), "{mode:?}");
        assert_eq!(resent_segments(&s), Vec::<u32>::new(), "{mode:?}");
    }
}

#[test]
fn a_copy_is_judged_by_when_it_left_not_by_when_its_first_copy_did() {
    // An OP table of 2 (packets leave a round trip apart) and an 8-packet
    // WRITE. Packet 1's first copy is lost; packet 2's ACK says so and
    // packet 1 goes again at once, beside packet 3. That second copy is
    // held 10 µs. Packet 3's ACK, the first to come back, does not condemn
    // it (they left together); the ACK of packet 4, which left a round trip
    // after it, does: a third copy, and no timer.
    let mut s = setup(NicConfig {
        op_table_capacity: 2,
        ..config()
    });
    let mut copies = 0;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if r.opcode().carries_data() && r.seg_index == 1 => {
            copies += 1;
            match copies {
                1 => Verdict::Drop,
                2 => Verdict::Delay(us(10)),
                _ => Verdict::Deliver,
            }
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(8192);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(8192);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.fast_retransmits, h0.timeouts), (2, 0));
    assert_eq!(resent_segments(&s), vec![1, 1]);
    let when = |from: u32, kind: &str, seg: u32| -> Vec<_> {
        s.pair
            .log
            .iter()
            .filter(|l| l.from.0 == from && l.kind.starts_with(kind) && l.seg_index == seg)
            .map(|l| l.at)
            .collect()
    };
    let (copies, ack3, ack4) = (when(0, "WRITE", 1), when(1, "ACK", 3), when(1, "ACK", 4));
    assert!(
        copies[2] > ack4[0] && ack4[0] > ack3[0],
        "third copy at {:?}, ACKs of 3 and 4 at {:?} and {:?}",
        copies[2],
        ack3[0],
        ack4[0]
    );
}

/// A 10-packet WRITE, all of it sent at once (a 2 µs round trip, no loss
/// detection: the timer is all there is, 20 µs before any sample). The
/// ACKs of packets 0 to 8 come back 5 µs apart, as from a queue ahead
/// draining; packet 9 meets `last`. `restart` is `rto_restart`.
fn last_packet_behind_a_draining_queue(restart: bool, last: Verdict) -> Setup {
    let mut s = setup(NicConfig {
        fast_retransmit: false,
        rto_initial: us(20),
        rto_min: us(20),
        rto_restart: restart,
        ..config()
    });
    let mut first_copy = true;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if is_data(w) && r.seg_index == 9 && first_copy => {
            first_copy = false;
            last
        }
        Some(r) if opcode(w) == Some(Opcode::Ack) && r.seg_index < 9 => {
            Verdict::Delay(us(5 * u64::from(r.seg_index)))
        }
        _ => Verdict::Deliver,
    });
    let wr = s.write(10 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    s.assert_written(10 * 1024);
    s
}

#[test]
fn a_timer_restarted_by_acks_from_the_queue_ahead_spares_a_packet_that_is_only_late() {
    // Held 60 µs behind a 20 µs timer: without restarts the timers fire
    // (packet 9's, and those of packets 4 to 8, whose ACKs come at 20 µs
    // or later) and six packets go again for nothing. With them, each ACK
    // of a packet that left with them moves their count on, and their own
    // ACKs arrive first.
    let late = Verdict::Delay(us(60));
    let plain = last_packet_behind_a_draining_queue(false, late);
    let h0 = plain.pair.nics[0].stats();
    assert_eq!(
        (h0.timeouts, h0.retransmits, h0.rto_restarts),
        (6, 6, 0),
        "{h0:?}"
    );
    let restarted = last_packet_behind_a_draining_queue(true, late);
    let h0 = restarted.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.retransmits), (0, 0), "{h0:?}");
    assert!(h0.rto_restarts >= 1, "{h0:?}");
}

#[test]
fn a_lost_packet_still_goes_again_once_the_queue_ahead_is_drained() {
    // Really lost: the timer is moved on while the queue ahead drains
    // (its last ACK at about 42 µs), then fires a timeout after it.
    let s = last_packet_behind_a_draining_queue(true, Verdict::Drop);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.retransmits), (1, 1), "{h0:?}");
    assert!(h0.rto_restarts >= 1, "{h0:?}");
    let copies: Vec<_> = writes_sent(&s)
        .into_iter()
        .filter(|l| l.seg_index == 9)
        .map(|l| l.at)
        .collect();
    assert_eq!(copies.len(), 2, "{copies:?}");
    assert!(copies[1].0 > us(42).0, "resent at {:?}", copies[1]);
}

#[test]
fn an_ack_for_a_later_packet_restarts_nothing() {
    // A one-packet WRITE held 60 µs, then another sent 5 µs later and
    // acknowledged at once: that ACK is for a packet that left after the
    // held one (it overtook it, which is how a loss looks), so the held
    // packet's timer fires at 20 µs as without restarts.
    let mut s = setup(NicConfig {
        fast_retransmit: false,
        rto_initial: us(20),
        rto_min: us(20),
        rto_restart: true,
        ..config()
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r)
            if is_data(w) && r.msg_id == 1 && !r.flags.contains(udrma_proto::Flags::RETRANSMIT) =>
        {
            Verdict::Delay(us(60))
        }
        _ => Verdict::Deliver,
    });
    let first = s.write(1024);
    s.pair.advance_to(udrma_nic::Instant::ZERO + us(5));
    s.write_at(4096, 1024);
    s.pair.run();
    s.assert_ok_once(0, first);
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.timeouts, h0.rto_restarts), (1, 0), "{h0:?}");
}

/// A 4-packet WRITE, and `gap` later a second one beside it; both end
/// well, once.
fn two_writes_apart(s: &mut Setup, gap: Duration) {
    let a = s.write(4096);
    s.pair.advance_to(s.pair.now + gap);
    let b = s.write_at(4096, 4096);
    s.pair.run();
    s.assert_ok_once(0, a);
    s.assert_ok_once(0, b);
}

/// Two 4-packet WRITEs posted 1 µs apart under `cfg`, every packet of
/// the first lost once: what h0 counted, and when both were done.
fn first_write_lost_whole(cfg: NicConfig) -> (udrma_nic::Stats, udrma_nic::Instant) {
    let mut s = setup(cfg);
    s.pair.set_filter({
        let (mut first, mut dropped) = (None, std::collections::BTreeSet::new());
        move |w| match w.repr {
            Some(r) if is_data(w) => {
                let m = *first.get_or_insert(r.msg_id);
                if m == r.msg_id && dropped.insert(r.seg_index) {
                    Verdict::Drop
                } else {
                    Verdict::Deliver
                }
            }
            _ => Verdict::Deliver,
        }
    });
    two_writes_apart(&mut s, us(1));
    s.assert_written(8192);
    (s.pair.nics[0].stats().clone(), s.pair.now)
}

#[test]
fn an_operation_lost_whole_is_found_by_a_later_operations_ack() {
    // Nothing of the first WRITE arrives, so nothing of it can overtake
    // the rest. The second WRITE's packets, sent 1 µs after (a 2 µs round
    // trip), are acknowledged:
    // by send time, as RACK judges over a connection, the first WRITE's
    // packets are lost. Nothing of it being acknowledged, its newest
    // packet goes first, to ask (its acknowledgements may have been what
    // was lost); its own answer convicts the other three, all before any
    // timer.
    let (h0, done) = first_write_lost_whole(NicConfig {
        registration: udrma_nic::RegistrationMode::SelfDescribing,
        ..config()
    });
    assert_eq!((h0.fast_retransmits, h0.timeouts), (4, 0));
    assert!(done.0 < us(20).0, "done at {done:?}");
    // A receiver that registers an operation by its first packet may be
    // holding the others in its escape channel, unacknowledged until the
    // first arrives: only the first is judged, and the other three wait
    // for their timer.
    let (h0, _) = first_write_lost_whole(config());
    assert_eq!(h0.fast_retransmits, 1);
}

#[test]
fn a_duplicate_report_never_overtakes_the_sack_that_names_its_packet() {
    // Selective ACKs coalesced for 2 µs, no judging by timing (as over
    // sockets), and every WRITE's packet 1 held 7 µs the first time:
    // packet 2 is acknowledged first, packet 1 goes again, and its copy
    // arrives 1 µs after the late first copy, which waits in a pending
    // SACK.
    // The receiver sends that SACK at once, before the duplicate report:
    // the sender then has the packet's own acknowledgement first, reads
    // the report as a late first copy's, and widens its window, so the
    // later WRITEs leave packet 1 to arrive. Were the report to overtake
    // the SACK, it would read as the first word of the packet (a lost
    // ACK), and every WRITE would resend it.
    let mut s = setup(NicConfig {
        op_table_capacity: 2,
        ack_mode: AckMode::Selective { delay: us(2) },
        spurious_by_timing: false,
        ..config()
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) && r.seg_index == 1 && !r.flags.contains(Flags::RETRANSMIT) => {
            Verdict::Delay(us(7))
        }
        _ => Verdict::Deliver,
    });
    let per_write = fast_retransmits_per_write(&mut s, 4);
    assert_eq!(per_write, vec![1, 0, 0, 0]);
    assert_eq!(s.pair.nics[0].stats().spurious_fast_retransmits, 1);
}

/// Rounds of two 4-packet WRITEs, the second leaving 3 µs after the first
/// (a 2 µs round trip), with selective ACKs coalesced for 2 µs and no
/// judging by timing (as over sockets): every first WRITE arrives whole,
/// but the SACK that says so is lost, and so is the COMPLETION that would
/// acknowledge it too; no later SACK of its own repairs them. Returns the fast retransmissions of each round.
fn first_sack_lost(rounds: usize) -> (Vec<u64>, udrma_nic::Stats, udrma_nic::Stats) {
    let mut s = setup(NicConfig {
        ack_mode: AckMode::Selective { delay: us(2) },
        spurious_by_timing: false,
        registration: udrma_nic::RegistrationMode::SelfDescribing,
        ..config()
    });
    s.pair.set_filter({
        let (mut order, mut dropped) = (Vec::new(), std::collections::BTreeSet::new());
        move |w| match w.repr {
            Some(r) if is_data(w) => {
                if !order.contains(&r.msg_id) {
                    order.push(r.msg_id);
                }
                Verdict::Deliver
            }
            Some(r) if matches!(r.opcode(), Opcode::SelectiveAck | Opcode::Completion) => {
                let nth = order.iter().position(|m| *m == r.msg_id);
                if nth.is_some_and(|i| i % 2 == 0) && dropped.insert((r.msg_id, r.opcode())) {
                    Verdict::Drop
                } else {
                    Verdict::Deliver
                }
            }
            _ => Verdict::Deliver,
        }
    });
    let mut per_round = Vec::new();
    for _ in 0..rounds {
        let before = s.pair.nics[0].stats().fast_retransmits;
        two_writes_apart(&mut s, us(3));
        per_round.push(s.pair.nics[0].stats().fast_retransmits - before);
    }
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    (per_round, h0.clone(), h1.clone())
}

#[test]
fn a_copy_that_answers_a_lost_sack_is_no_sign_of_reordering() {
    // The second WRITE's SACK convicts the first, whose copy arrives as a
    // duplicate of a packet already acknowledged. The receiver's report
    // says so (RETX beside DUP): the answer was lost, not the packet late,
    // and the window stays. Taken for a late first copy, the report would
    // widen the window by the time it took to find the loss (about 6 µs),
    // beyond the 3 µs between the WRITEs, and the next rounds' lost SACKs
    // would wait for the timer.
    let (per_round, h0, h1) = first_sack_lost(3);
    assert_eq!(per_round, vec![1, 1, 1]);
    assert_eq!((h0.timeouts, h0.spurious_fast_retransmits), (0, 0));
    assert_eq!(h1.stale_dropped, 3, "each copy found its WRITE complete");
}

#[test]
fn an_operation_nothing_of_which_is_acknowledged_is_asked_about_with_one_copy() {
    // The same rounds: of the first WRITE, whose SACK was lost, one copy
    // goes (its newest packet), not four. The receiver, which completed
    // the WRITE, answers it with a SACK of every packet up to it, and the
    // other three are acknowledged without going again.
    let (_, h0, h1) = first_sack_lost(3);
    assert_eq!(h0.retransmits, 3, "one packet of each first WRITE");
    assert_eq!(h1.stale_dropped, 3);
}

#[test]
fn of_an_operation_partly_acknowledged_every_overtaken_packet_goes_at_once() {
    // Packets 2 and 3 of the first WRITE are lost, 0 and 1 acknowledged:
    // its acknowledgements are not what was lost, so when the second
    // WRITE (3 µs later) is acknowledged, both go again at once; asking
    // with one copy first would leave packet 2 to its timer.
    let mut s = setup(NicConfig {
        registration: udrma_nic::RegistrationMode::SelfDescribing,
        ..config()
    });
    s.pair.set_filter({
        let mut first = None;
        move |w| match w.repr {
            Some(r) if is_data(w) => {
                let m = *first.get_or_insert(r.msg_id);
                if m == r.msg_id && r.seg_index >= 2 {
                    Verdict::Drop
                } else {
                    Verdict::Deliver
                }
            }
            _ => Verdict::Deliver,
        }
    });
    two_writes_apart(&mut s, us(3));
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.fast_retransmits, h0.timeouts), (2, 0));
}

/// Two one-packet WRITEs posted 5 µs apart under `cfg`, the first copy of
/// each lost: what h0 counted once both were done.
fn two_single_writes_lost_once(cfg: NicConfig) -> udrma_nic::Stats {
    let mut s = setup(cfg);
    s.pair.set_filter({
        let mut dropped = std::collections::BTreeSet::new();
        move |w| match w.repr {
            Some(r) if is_data(w) && dropped.insert(r.msg_id) => Verdict::Drop,
            _ => Verdict::Deliver,
        }
    });
    let a = s.write(1024);
    s.pair.advance_to(s.pair.now + us(5));
    let b = s.write_at(1024, 1024);
    s.pair.run();
    s.assert_ok_once(0, a);
    s.assert_ok_once(0, b);
    s.assert_written(2048);
    s.pair.nics[0].stats().clone()
}

#[test]
fn the_answer_to_a_copy_sent_on_its_timer_convicts_nothing_without_tail_probes() {
    // The first WRITE's only packet is lost and goes again on its timer;
    // the second WRITE's, sent 5 µs after the first, is lost too. When the
    // first WRITE's copy is answered, that answer may be the lost first
    // copy's (nothing tells them apart: Karn's ambiguity), and the first
    // copy left before the second WRITE did, so it can convict nothing:
    // the second WRITE waits for its own timer.
    let h0 = two_single_writes_lost_once(config());
    assert_eq!((h0.timeouts, h0.fast_retransmits), (2, 0), "{h0:?}");
    // With tail probes a copy's answer is judged by its timing: one round
    // trip after the copy left, it is the copy's own, sent well after the
    // second WRITE, which it convicts before its timer.
    let h0 = two_single_writes_lost_once(NicConfig {
        tail_probe: true,
        ..config()
    });
    assert_eq!((h0.timeouts, h0.fast_retransmits), (1, 1), "{h0:?}");
}
