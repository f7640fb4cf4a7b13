//! The flow state's bookkeeping, driven directly: REPS's abandoned-entropy
//! bits (one per entropy, in 64-bit words), its recycled and known-good
//! lists, freezing, and the send gate's boundaries. The stories in
//! nic-model/tests/congestion.rs tell the same rules over the wire with
//! few entropies; these reach the words past the first and the edges.

use super::*;
use crate::cc::{AckSample, CongestionControl, LossCause};
use crate::config::Multipath;

const PEER: NodeAddr = NodeAddr(1);

fn nic(entropies: u16) -> Nic {
    let cfg = NicConfig {
        multipath: Multipath::Reps,
        entropies,
        ..NicConfig::default()
    };
    Nic::new(NodeAddr(0), cfg).unwrap()
}

#[test]
fn an_abandoned_entropy_past_the_first_word_is_skipped_by_its_own_bit() {
    let mut n = nic(130);
    n.flow(PEER).next_entropy = 99;
    // Entropy 100 is bit 36 of word 1.
    n.entropy_feedback(PEER, 100, false);
    let at = Instant::ZERO;
    assert_eq!(n.pick_entropy(at, PEER), 99);
    assert_eq!(n.pick_entropy(at, PEER), 101, "100 is skipped");
    assert_eq!(n.pick_entropy(at, PEER), 102);
    assert_eq!(n.stats.entropies_abandoned, 1);
}

#[test]
fn the_abandoned_set_empties_when_the_turn_comes_round() {
    let mut n = nic(4);
    n.entropy_feedback(PEER, 2, false);
    n.flow(PEER).recycled.clear();
    n.flow(PEER).next_entropy = 3;
    let at = Instant::ZERO;
    // 3, then the turn comes round: every path is tried again.
    let picks: Vec<u16> = (0..4).map(|_| n.pick_entropy(at, PEER)).collect();
    assert_eq!(picks, [3, 0, 1, 2]);
}

#[test]
fn a_frozen_flow_cycles_through_its_good_entropies_until_the_rto_passes() {
    let mut n = nic(8);
    for e in [5, 6] {
        n.entropy_feedback(PEER, e, true);
    }
    n.flow(PEER).recycled.clear();
    let now = Instant::ZERO + udrma_proto::time::Duration::from_micros(10);
    n.entropy_freeze(now, PEER);
    let until = n.flow(PEER).frozen_until;
    assert!(until > now);
    assert_eq!(n.pick_entropy(now, PEER), 5);
    assert_eq!(n.pick_entropy(now, PEER), 6);
    assert_eq!(n.pick_entropy(now, PEER), 5);
    assert_eq!(n.stats.entropies_reused, 3);
    // At the end of the freeze, fresh entropies again.
    assert_eq!(n.pick_entropy(until, PEER), 0);
    assert_eq!(n.stats.entropies_reused, 3);
}

#[test]
fn recycled_entropies_are_bounded_and_good_ones_are_the_last_eight_distinct() {
    let mut n = nic(2);
    n.cfg.op_table_capacity = 4;
    for e in 0..12 {
        n.entropy_feedback(PEER, e, true);
    }
    // One slot per packet the OP table holds (4 here).
    assert_eq!(n.flow(PEER).recycled, [0, 1, 2, 3]);
    assert_eq!(n.flow(PEER).good, (4..12).collect::<Vec<u16>>());
    // The newest again: not twice. An older one moves to the back.
    n.entropy_feedback(PEER, 11, true);
    n.entropy_feedback(PEER, 6, true);
    assert_eq!(n.flow(PEER).good, [4, 5, 7, 8, 9, 10, 11, 6]);
    // A marked one leaves the good list.
    n.entropy_feedback(PEER, 9, false);
    assert_eq!(n.flow(PEER).good, [4, 5, 7, 8, 10, 11, 6]);
}

/// A controller with a fixed window and, optionally, receiver credit.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Fixed {
    window: u64,
    credit: Option<u64>,
}

impl CongestionControl for Fixed {
    fn on_send(&mut self, _now: Instant, _bytes: u64) {}
    fn on_ack(&mut self, _now: Instant, _ack: AckSample) {}
    fn on_loss(&mut self, _now: Instant, _bytes: u64, _cause: LossCause) {}
    fn window(&self) -> u64 {
        self.window
    }
    fn next_send_time(&self) -> Option<Instant> {
        None
    }
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn credit(&self) -> Option<u64> {
        self.credit
    }
}

fn gated(window: u64, credit: Option<u64>, inflight: u64) -> Nic {
    let mut n = nic(1);
    n.set_controller_factory(move |_| Box::new(Fixed { window, credit }));
    n.flow(PEER).inflight = inflight;
    n
}

#[test]
fn the_window_admits_a_packet_that_fills_it_exactly_and_always_a_first_one() {
    let now = Instant::ZERO;
    assert!(matches!(
        gated(3000, None, 2000).gate(now, PEER, 1000),
        Gate::Open
    ));
    assert!(matches!(
        gated(3000, None, 2001).gate(now, PEER, 1000),
        Gate::Window
    ));
    // Nothing in flight: a packet larger than the window still goes.
    assert!(matches!(
        gated(500, None, 0).gate(now, PEER, 1000),
        Gate::Open
    ));
}

#[test]
fn receiver_credit_admits_a_packet_it_covers_exactly() {
    let now = Instant::ZERO;
    assert!(matches!(
        gated(u64::MAX, Some(1000), 0).gate(now, PEER, 1000),
        Gate::Open
    ));
    assert!(matches!(
        gated(u64::MAX, Some(999), 0).gate(now, PEER, 1000),
        Gate::Credit
    ));
    assert!(matches!(
        gated(u64::MAX, Some(5000), 0).gate(now, PEER, 1000),
        Gate::Open
    ));
}

#[test]
fn inflight_bytes_reports_the_flow_and_zero_for_a_stranger() {
    let mut n = nic(1);
    n.flow(PEER).inflight = 4321;
    assert_eq!(n.inflight_bytes(PEER), 4321);
    assert_eq!(n.inflight_bytes(NodeAddr(9)), 0);
}

/// The peers `n`'s next `count` packets go to.
fn destinations(n: &mut Nic, count: usize) -> Vec<u32> {
    let mut buf = Vec::new();
    (0..count)
        .filter_map(|_| n.poll_transmit(Instant::ZERO, &mut buf).map(|t| t.dst.0))
        .collect()
}

/// A NIC with one-packet WRITEs posted to `peers`, in that order, and
/// with or without a controller.
fn posted(peers: &[u32], controlled: bool) -> Nic {
    let mut n = nic(1);
    if controlled {
        n.set_controller_factory(|_| {
            Box::new(Fixed {
                window: u64::MAX,
                credit: None,
            })
        });
    }
    let local = n.register(0x1000, 1 << 16, crate::Access::ALL);
    for p in peers {
        let wr = crate::WorkRequest::write(NodeAddr(*p), local, 0x1000, 100, 7, 0x9000);
        n.post(Instant::ZERO, wr).unwrap();
    }
    n
}

#[test]
fn with_a_controller_peers_take_turns_in_address_order() {
    // Without one, the oldest operation first.
    assert_eq!(
        destinations(&mut posted(&[3, 1, 2, 1], false), 4),
        [3, 1, 2, 1]
    );
    // With one: the lowest address, then each next one after the peer
    // served last, round again.
    assert_eq!(
        destinations(&mut posted(&[3, 1, 2, 1], true), 4),
        [1, 2, 3, 1]
    );
    assert_eq!(
        destinations(&mut posted(&[5, 2, 2, 9], true), 4),
        [2, 5, 9, 2]
    );
}

#[test]
fn a_flow_remembers_its_last_sixteen_copies_and_judges_each_once() {
    let mut n = nic(1);
    let f = n.flow(PEER);
    for seg in 0..=RESENT_KEPT as u32 {
        f.note_resent(7, seg, Instant(u64::from(seg)));
    }
    // Seventeen noted: the first was overwritten, the others are kept.
    assert_eq!(f.take_resent(7, 0), None);
    for seg in 1..=RESENT_KEPT as u32 {
        let r = f.take_resent(7, seg).expect("remembered");
        assert_eq!(r.prev_sent, Instant(u64::from(seg)));
        assert_eq!(f.take_resent(7, seg), None, "judged once");
    }
    assert_eq!(f.take_resent(8, 1), None, "another operation's packet");
}

#[test]
fn a_duplicate_report_widens_the_window_to_how_late_the_first_copy_was() {
    // One path: the window starts at zero.
    let mut n = Nic::new(NodeAddr(0), NicConfig::default()).unwrap();
    let us = |x: u64| udrma_proto::time::Duration::from_micros(x);
    n.rtt_sample(PEER, us(4));
    let srtt = n.rtt_to(PEER).srtt().expect("a sample");
    let rto = n.rtt_to(PEER).rto();
    assert!(rto.0 > us(20).0);
    // Reported 20 µs after the first copy left: 20 µs less the srtt late.
    n.flow(PEER).note_resent(1, 3, Instant::ZERO);
    n.on_duplicate(Instant::ZERO + us(20), PEER, 1, 3, false);
    assert_eq!(n.flow(PEER).reorder.0, us(20).0 - srtt.0);
    assert_eq!(n.stats.spurious_fast_retransmits, 1);
    // Reported sooner than an srtt after: it still teaches a quarter srtt
    // (on a fresh flow).
    n.flows = Default::default();
    n.flow(PEER).note_resent(1, 4, Instant::ZERO);
    n.on_duplicate(Instant::ZERO + us(1), PEER, 1, 4, false);
    assert_eq!(n.flow(PEER).reorder.0, srtt.0 / 4);
    // Never beyond the RTO, where the timer is sooner anyway.
    n.flows = Default::default();
    n.flow(PEER).note_resent(1, 5, Instant::ZERO);
    n.on_duplicate(Instant::ZERO + us(10_000), PEER, 1, 5, false);
    assert_eq!(n.flow(PEER).reorder, rto);
    // A report for a packet not sent again on loss detection: nothing.
    n.on_duplicate(Instant::ZERO + us(10_000), PEER, 1, 6, false);
    assert_eq!(n.stats.spurious_fast_retransmits, 3);
    // A report that the duplicate was the copy, sent after the first
    // arrival had been acknowledged (flag RETX): the acknowledgement was
    // lost, nothing was late. Neither counted nor learnt from, however
    // late, and the packet is judged once.
    n.flows = Default::default();
    n.flow(PEER).note_resent(1, 7, Instant::ZERO);
    n.on_duplicate(Instant::ZERO + us(20), PEER, 1, 7, true);
    assert_eq!(n.flow(PEER).reorder.0, 0);
    assert_eq!(n.stats.spurious_fast_retransmits, 3);
    assert_eq!(n.flow(PEER).take_resent(1, 7), None);
}

#[test]
fn an_answer_is_too_soon_for_a_copy_under_half_the_srtt_and_under_the_fastest_round_trip() {
    let mut n = Nic::new(NodeAddr(0), NicConfig::default()).unwrap();
    let us = |x: u64| udrma_proto::time::Duration::from_micros(x);
    let at = |x: u64| Instant::ZERO + us(x);
    assert!(
        !n.too_soon_for_copy(at(1), PEER, Instant::ZERO),
        "no sample yet"
    );
    // An even 4 µs path: half the srtt is the stricter bound.
    n.rtt_sample(PEER, us(4));
    assert!(n.too_soon_for_copy(at(1), PEER, Instant::ZERO));
    assert!(!n.too_soon_for_copy(at(3), PEER, Instant::ZERO));
    // A queue swells the srtt toward 40 µs; the fastest stays 4 µs and
    // is now the stricter bound: an answer 5 µs after the copy may be its
    // own over the drained queue.
    for _ in 0..30 {
        n.rtt_sample(PEER, us(40));
    }
    assert!(n.rtt_to(PEER).srtt().is_some_and(|s| s > us(30)));
    assert!(n.too_soon_for_copy(at(3), PEER, Instant::ZERO));
    assert!(!n.too_soon_for_copy(at(5), PEER, Instant::ZERO));
}

#[test]
fn copies_judged_spurious_together_double_the_window_once() {
    let mut n = Nic::new(NodeAddr(0), NicConfig::default()).unwrap();
    let us = |x: u64| udrma_proto::time::Duration::from_micros(x);
    n.rtt_sample(PEER, us(8));
    let srtt = n.rtt_to(PEER).srtt().expect("a sample");
    // Three copies that left at 10 µs, answered together at 11 µs: too
    // soon for their own answers, one sign of reordering.
    let (left, read) = (Instant::ZERO + us(10), Instant::ZERO + us(11));
    for _ in 0..3 {
        assert!(n.check_spurious(read, PEER, left));
    }
    assert_eq!(n.stats.spurious_fast_retransmits, 3);
    assert_eq!(n.flow(PEER).reorder.0, srtt.0 / 4);
    // Another, answered at another instant, doubles it.
    assert!(n.check_spurious(read + us(1), PEER, left + us(1)));
    assert_eq!(n.flow(PEER).reorder.0, srtt.0 / 2);
    // Not judged by timing where the clock is when a batch was read.
    let mut b = Nic::new(
        NodeAddr(0),
        NicConfig {
            spurious_by_timing: false,
            ..NicConfig::default()
        },
    )
    .unwrap();
    b.rtt_sample(PEER, us(8));
    assert!(!b.check_spurious(read, PEER, left));
    assert_eq!(b.stats.spurious_fast_retransmits, 0);
}

#[test]
fn a_flow_keeps_its_open_operations_only_where_they_are_scanned() {
    let post3 = |cfg: NicConfig| {
        let mut n = Nic::new(NodeAddr(0), cfg).unwrap();
        let local = n.register(0x1000, 1 << 16, crate::Access::ALL);
        for _ in 0..3 {
            let wr = crate::WorkRequest::write(PEER, local, 0x1000, 100, 7, 0x9000);
            n.post(Instant::ZERO, wr).unwrap();
        }
        let mut buf = Vec::new();
        while n.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
        let open: Vec<u32> = n.flow(PEER).open.iter().copied().collect();
        open
    };
    // Oldest first, for detection across operations.
    assert_eq!(post3(NicConfig::default()), [1, 2, 3]);
    // Nothing scans them without selective loss detection: none kept,
    // where nothing would ever tidy them.
    let gbn = NicConfig {
        retransmit: RetransmitMode::GoBackN,
        ..NicConfig::default()
    };
    assert!(post3(gbn).is_empty());
    let no_fast = NicConfig {
        fast_retransmit: false,
        ..NicConfig::default()
    };
    assert!(post3(no_fast).is_empty());
}

#[test]
fn the_reordering_window_halves_after_sixteen_clean_recoveries_and_any_growth_restarts_the_count() {
    let mut n = nic(4);
    let us = |x: u64| udrma_proto::time::Duration::from_micros(x);
    let f = n.flow(PEER);
    f.learn_reorder(us(40));
    for _ in 0..CLEAN_TO_NARROW - 1 {
        f.clean_recovery();
    }
    assert_eq!(f.reorder, us(40), "fifteen are not enough");
    f.clean_recovery();
    assert_eq!(f.reorder, us(20));
    // Learning less than the window changes nothing, the count included.
    for _ in 0..CLEAN_TO_NARROW - 1 {
        f.clean_recovery();
    }
    f.learn_reorder(us(5));
    f.clean_recovery();
    assert_eq!(f.reorder, us(10));
    // Nor does learning the window itself.
    for _ in 0..CLEAN_TO_NARROW - 1 {
        f.clean_recovery();
    }
    f.learn_reorder(us(10));
    f.clean_recovery();
    assert_eq!(f.reorder, us(5));
    // A growth restarts the count: sixteen more are needed.
    f.learn_reorder(us(30));
    for _ in 0..CLEAN_TO_NARROW - 1 {
        f.clean_recovery();
    }
    f.learn_reorder(us(31));
    f.clean_recovery();
    assert_eq!(f.reorder, us(31));
    assert_eq!(f.clean, 1);
}

#[test]
fn a_report_of_a_copy_after_an_answer_teaches_only_when_the_answer_came_well_before_it() {
    // Selective ACKs coalesced for 2 µs: an answer that came less than
    // half that before the report came with it (the SACK a receiver sends
    // just before its report), and was the first word of a lost answer.
    let us = |x: u64| udrma_proto::time::Duration::from_micros(x);
    let ns = udrma_proto::time::Duration::from_nanos;
    let fresh = || {
        let cfg = NicConfig {
            ack_mode: crate::config::AckMode::Selective { delay: us(2) },
            ..NicConfig::default()
        };
        let mut n = Nic::new(NodeAddr(0), cfg).unwrap();
        n.rtt_sample(PEER, us(4));
        n
    };
    let report = Instant::ZERO + us(30);
    let before = |d: udrma_proto::time::Duration| Instant(report.0 - d.0);
    let judged = |acked: Option<udrma_proto::time::Duration>| {
        let mut n = fresh();
        n.flow(PEER).note_resent(1, 3, Instant::ZERO);
        if let Some(d) = acked {
            n.flow(PEER).resent_acked(1, 3, before(d));
        }
        n.on_duplicate(report, PEER, 1, 3, true);
        (
            n.flow(PEER).reorder.0 > 0,
            n.stats.spurious_fast_retransmits,
        )
    };
    assert_eq!(judged(None), (false, 0), "never answered before: lost");
    assert_eq!(judged(Some(ns(0))), (false, 0), "answered with the report");
    assert_eq!(judged(Some(ns(999))), (false, 0), "within half the delay");
    assert_eq!(
        judged(Some(us(1))),
        (true, 1),
        "half the delay before: late"
    );
    assert_eq!(judged(Some(ns(1_500))), (true, 1));
    // Only the first answer counts, and only the packet's own.
    let mut n = fresh();
    n.flow(PEER).note_resent(1, 4, Instant::ZERO);
    n.flow(PEER).resent_acked(1, 4, before(us(5)));
    n.flow(PEER).resent_acked(1, 4, report);
    n.flow(PEER).resent_acked(1, 5, report);
    n.on_duplicate(report, PEER, 1, 4, true);
    assert!(n.flow(PEER).reorder.0 > 0);
    let mut n = fresh();
    n.flow(PEER).note_resent(1, 4, Instant::ZERO);
    n.flow(PEER).resent_acked(1, 5, before(us(5)));
    n.on_duplicate(report, PEER, 1, 4, true);
    assert_eq!(n.flow(PEER).reorder.0, 0, "another packet's answer");
}

#[test]
fn a_completed_operations_sack_names_the_64_packets_up_to_the_duplicate() {
    let mut n = nic(4);
    let key = OpKey {
        from: PEER,
        src_ep: 1,
        msg_id: 9,
    };
    let sacks = |n: &mut Nic| -> Vec<(u32, u64)> {
        n.replies
            .drain(..)
            .filter_map(|r| match r.body {
                ReplyBody::Sack { base, bitmap, .. } => Some((base, bitmap)),
                _ => None,
            })
            .collect()
    };
    // Within the first word: every packet up to the duplicate.
    n.sack_complete(key, 2, 4, 3);
    assert_eq!(sacks(&mut n), vec![(0, 0b1111)]);
    // Further on: the 64 ending at it, one SACK whatever the count.
    n.sack_complete(key, 2, 100, 79);
    assert_eq!(sacks(&mut n), vec![(16, u64::MAX)]);
    n.sack_complete(key, 2, 100, 63);
    assert_eq!(sacks(&mut n), vec![(0, u64::MAX)]);
}

#[test]
fn an_operations_own_reordering_is_learnt_only_beyond_the_sack_delay() {
    // A 4-packet WRITE whose packets leave 1 µs apart; acknowledgements
    // of first copies are then handed to the detector in a chosen order.
    let us = |x: u64| udrma_proto::time::Duration::from_micros(x);
    let cfg = NicConfig {
        mtu_payload: 1024,
        ack_mode: crate::AckMode::Selective { delay: us(1) },
        ..NicConfig::default()
    };
    let mut n = Nic::new(NodeAddr(0), cfg).unwrap();
    let local = n.register(0x1000, 1 << 16, crate::Access::ALL);
    let wr = crate::WorkRequest::write(PEER, local, 0x1000, 4096, 7, 0x9000);
    n.post(Instant::ZERO, wr).unwrap();
    let mut buf = Vec::new();
    for i in 0..4 {
        assert!(n.poll_transmit(Instant::ZERO + us(i), &mut buf).is_some());
    }
    let msg = *n.ops.keys().next().expect("one operation");
    let coalesce = n.sack_coalesce();
    assert_eq!(coalesce, us(1));
    let now = Instant::ZERO + us(10);
    let at = |i: u64| Instant::ZERO + us(i);
    // Packet 1 first: nothing answered before it, nothing to learn.
    n.detect_overtaken(now, PEER, msg, 1, at(1), true);
    assert_eq!(n.flow(PEER).reorder.0, 0);
    // Packet 3, sent after it: in order, nothing to learn.
    n.detect_overtaken(now, PEER, msg, 3, at(3), true);
    assert_eq!(n.flow(PEER).reorder.0, 0);
    // Packet 2, sent exactly one SACK delay before packet 3: a coalesced
    // SACK may name the two in either order, so no sign of reordering.
    n.detect_overtaken(now, PEER, msg, 2, at(2), true);
    assert_eq!(n.flow(PEER).reorder.0, 0, "at the SACK delay: no sign");
    // Packet 0, answered after packet 3 that left 3 µs later: overtaken
    // by 3 µs, which the window learns.
    n.detect_overtaken(now, PEER, msg, 0, at(0), true);
    assert_eq!(n.flow(PEER).reorder, us(3));
    // A copy (not a first copy) teaches nothing of the kind.
    n.flows = Default::default();
    n.detect_overtaken(now, PEER, msg, 1, Instant::ZERO, false);
    assert_eq!(n.flow(PEER).reorder.0, 0);
}
