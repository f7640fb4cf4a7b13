//! The timeout hold's rules, driven directly: which copy holds, until
//! when, and what ends the hold. The stories in
//! nic-model/tests/timeout_hold.rs tell the same over the wire.

use super::*;
use udrma_proto::time::Duration;

const PEER: NodeAddr = NodeAddr(1);

fn at(us: u64) -> Instant {
    Instant::ZERO + Duration::from_micros(us)
}

/// A selective NIC with the hold on and a 1 ms RTO, whose three-packet
/// WRITE to PEER left at time zero; returns it and the packets' OP
/// numbers.
fn three_out() -> (Nic, Vec<OpNumber>) {
    let (n, o, _) = three_out_with_packets();
    (n, o)
}

/// `three_out`, with the datagrams the WRITE sent.
fn three_out_with_packets() -> (Nic, Vec<OpNumber>, Vec<Vec<u8>>) {
    let cfg = NicConfig {
        mtu_payload: 1000,
        rto_initial: Duration::from_millis(1),
        rto_min: Duration::from_millis(1),
        timeout_hold: true,
        ..NicConfig::default()
    };
    let mut n = Nic::new(NodeAddr(0), cfg).unwrap();
    let mr = n.register(0x1000, 1 << 16, crate::Access::ALL);
    let wr = crate::WorkRequest::write(PEER, mr, 0x1000, 3000, 1, 0x2000);
    n.post(at(0), wr).unwrap();
    let mut buf = Vec::new();
    let mut pkts = Vec::new();
    while let Some(tx) = n.poll_transmit(at(0), &mut buf) {
        pkts.push(buf[..tx.len].to_vec());
    }
    let opns = n.ops.values().next().unwrap().pkts.iter().map(|p| match p {
        PktState::InFlight(o) => *o,
        p => panic!("not out: {p:?}"),
    });
    let opns = opns.collect::<Vec<_>>();
    assert_eq!(opns.len(), 3);
    (n, opns, pkts)
}

fn deadline(n: &Nic, opn: OpNumber) -> Option<Instant> {
    n.op_table.get(opn).and_then(|e| e.deadline)
}

/// Packet 0 times out at 1 ms and its copy leaves.
fn copy_of_first_out() -> (Nic, Vec<OpNumber>) {
    let (mut n, o) = three_out();
    n.on_retransmit_timeout(at(1000), o[0]);
    let mut buf = Vec::new();
    assert!(n.poll_transmit(at(1000), &mut buf).is_some());
    (n, o)
}

#[test]
fn a_timer_due_while_the_copy_is_out_waits_just_past_its_deadline() {
    let (mut n, o) = copy_of_first_out();
    let copy_due = deadline(&n, o[0]).unwrap();
    assert!(n.timeout_copy_holds(at(1000), o[1]));
    assert_eq!(deadline(&n, o[1]), Some(copy_due + Duration(1)));
    // The copy itself is never held behind itself.
    assert!(!n.timeout_copy_holds(at(1000), o[0]));
    assert_eq!(n.stats.timeouts_held, 1);
}

#[test]
fn an_answer_from_the_peer_after_the_copy_ends_the_hold() {
    let (mut n, o) = copy_of_first_out();
    n.flow(PEER).acked = at(1000);
    assert!(!n.timeout_copy_holds(at(1001), o[1]), "heard at the copy");
    let (mut n, o) = copy_of_first_out();
    n.flow(PEER).responded = at(1001);
    assert!(!n.timeout_copy_holds(at(1002), o[1]), "a READ response");
    let (mut n, o) = copy_of_first_out();
    n.flow(PEER).acked = at(999);
    assert!(n.timeout_copy_holds(at(1001), o[1]), "heard before it");
}

#[test]
fn an_acknowledgement_with_the_hold_on_says_when_the_peer_was_heard() {
    let (mut n, o) = three_out();
    n.ack_packet(at(5), o[2], true, false);
    assert_eq!((n.flows.get(&PEER).unwrap().acked), at(5));
}

#[test]
fn a_slot_reused_by_another_packet_holds_nothing() {
    let (mut n, o) = copy_of_first_out();
    // The copy's slot now names another packet (of the same operation).
    if let Some(c) = n.flow(PEER).timeout_copy.as_mut() {
        c.seg = 2;
    }
    assert!(!n.timeout_copy_holds(at(1000), o[1]));
    let (mut n, o) = copy_of_first_out();
    if let Some(c) = n.flow(PEER).timeout_copy.as_mut() {
        c.msg_id += 1;
    }
    assert!(!n.timeout_copy_holds(at(1000), o[1]));
}

#[test]
fn a_copy_still_queued_holds_only_at_the_instant_it_was_queued() {
    // Packet 0 times out; its copy waits in the queue (not polled).
    let (mut n, o) = three_out();
    n.on_retransmit_timeout(at(1000), o[0]);
    assert_eq!(deadline(&n, o[0]), None);
    // Same instant: held about a backoff on.
    assert!(n.timeout_copy_holds(at(1000), o[1]));
    assert!(deadline(&n, o[1]).is_some_and(|d| d > at(1000)));
    // Later, the copy still waiting (at the send gate): nothing held,
    // or the packets held could keep its room in the window.
    assert!(!n.timeout_copy_holds(at(1001), o[2]));
}

/// Finding 43's stall: a copy queued at this instant behind a window
/// that the packets still out keep shut would wait for room only the
/// packets held could make. Nothing is held: their timers go as they
/// would without the hold, and their bytes leave the flight.
#[test]
fn a_copy_queued_behind_a_shut_window_holds_nothing() {
    let (mut n, o) = three_out();
    // Room for one packet toward PEER: the copy of packet 0 goes through
    // the gate, and packets 1 and 2 are still out.
    n.flow(PEER).loss_window = Some(super::super::loss_window::LossWindow {
        window: 1000,
        threshold: 1000,
        cut: at(0),
    });
    n.on_retransmit_timeout(at(1000), o[0]);
    assert_eq!(deadline(&n, o[0]), None, "the copy waits in the queue");
    assert!(!n.timeout_copy_holds(at(1000), o[1]));
    assert_eq!(n.stats.timeouts_held, 0);
    // Room for the copy beside what is out: held as before.
    n.flow(PEER).loss_window = None;
    assert!(n.timeout_copy_holds(at(1000), o[1]));
}

fn window(n: &mut Nic, bytes: u64) {
    n.flow(PEER).loss_window = Some(super::super::loss_window::LossWindow {
        window: bytes,
        threshold: bytes,
        cut: at(0),
    });
}

/// The bytes one of `three_out`'s packets counts in flight (its datagram).
fn packet_bytes(n: &Nic, opn: OpNumber) -> u64 {
    u64::from(n.op_table.get(opn).unwrap().bytes)
}

/// The copy's own bytes count: two packets out and a copy do not fit two
/// and a half, though the packets out alone do.
#[test]
fn a_copy_fits_only_with_its_own_bytes_beside_what_is_out() {
    let (mut n, o) = three_out();
    let b = packet_bytes(&n, o[0]);
    window(&mut n, b * 5 / 2);
    n.on_retransmit_timeout(at(1000), o[0]);
    assert!(!n.timeout_copy_holds(at(1000), o[1]));
    window(&mut n, 3 * b);
    assert!(n.timeout_copy_holds(at(1000), o[1]));
}

/// The copies queued ahead toward the same peer count, those toward
/// another peer do not: packet 1's copy, behind packet 0's, needs room
/// for both beside packet 2.
#[test]
fn a_copy_fits_with_the_copies_ahead_of_it_toward_its_peer() {
    // The other peer's copy judged lost (its peer windowed too), or not.
    copies_ahead(true);
    copies_ahead(false);
}

fn copies_ahead(other_windowed: bool) {
    let (mut n, o) = three_out();
    // A WRITE to another peer, timed out first: its copy leads the queue.
    let mr = n.register(0x9000, 4096, crate::Access::ALL);
    let other = NodeAddr(2);
    n.post(
        at(0),
        crate::WorkRequest::write(other, mr, 0x9000, 1000, 1, 0x2000),
    )
    .unwrap();
    let mut buf = Vec::new();
    while n.poll_transmit(at(0), &mut buf).is_some() {}
    let o_other = match n.ops.values().last().unwrap().pkts[0] {
        PktState::InFlight(x) => x,
        p => panic!("not out: {p:?}"),
    };
    let b = packet_bytes(&n, o[0]);
    window(&mut n, 2 * b);
    if other_windowed {
        n.flow(other).loss_window = n.flows.get(&PEER).and_then(|f| f.loss_window);
    }
    n.on_retransmit_timeout(at(1000), o_other);
    let lost = n.op_table.get(o_other).unwrap().lost;
    assert_eq!(lost, other_windowed);
    n.on_retransmit_timeout(at(1000), o[0]);
    n.on_retransmit_timeout(at(1000), o[1]);
    assert_eq!(n.retransmit_queue.len(), 3);
    // One packet out (packet 2) and two copies toward PEER: three.
    assert!(!n.timeout_copy_holds(at(1000), o[2]));
    window(&mut n, 3 * b);
    assert!(n.timeout_copy_holds(at(1000), o[2]));
}

#[test]
fn go_back_n_holds_nothing() {
    let (mut n, o) = copy_of_first_out();
    n.cfg.retransmit = crate::config::RetransmitMode::GoBackN;
    assert!(!n.holds_timeouts());
    assert!(!n.timeout_copy_holds(at(1000), o[1]));
}

#[test]
fn a_refusal_from_the_peer_ends_the_hold_too() {
    // A NACK is an answer: the peer is not silent. Before, refusals did
    // not end a hold, and an operation's first packet, held, waited while
    // the receiver's escape channel expired the rest, NACKing each
    // (docs/testing.md, the hunt of 2026-12-02).
    let (mut n, o, pkts) = three_out_with_packets();
    n.on_retransmit_timeout(at(1000), o[0]);
    let mut buf = Vec::new();
    assert!(n.poll_transmit(at(1000), &mut buf).is_some());
    assert!(n.timeout_copy_holds(at(1000), o[1]));
    // PEER refuses packet 0's copy (receiver not ready).
    let r = Repr::parse_bytes(&pkts[0]).unwrap();
    let nack = Nic::header_reply(
        NodeAddr(0),
        &r,
        ReplyBody::Nack {
            syndrome: Syndrome::ReceiverNotReady,
            detail: 0,
        },
    );
    let mut peer = Nic::new(PEER, NicConfig::default()).unwrap();
    let mut bytes = Vec::new();
    let tx = peer.build_reply(at(1001), &nack, &mut bytes).unwrap();
    n.handle_datagram(at(1001), PEER, &bytes[..tx.len]);
    assert!(n.flows.get(&PEER).unwrap().timeout_copy.is_none());
    assert!(!n.timeout_copy_holds(at(1002), o[2]));
}
