//! The loss window's arithmetic, driven directly: what each cause cuts
//! it to, which losses cut it, how it grows, and when it is dropped. The
//! stories in nic-model/tests/loss_window.rs tell the same rules over the
//! wire.

use super::*;
use crate::config::RetransmitMode;
use udrma_proto::time::Duration;

const PEER: NodeAddr = NodeAddr(1);
const MTU: u64 = 1000;

fn nic(retransmit: RetransmitMode) -> Nic {
    let cfg = NicConfig {
        retransmit,
        mtu_payload: MTU as u32,
        op_table_capacity: 8,
        ..NicConfig::default()
    };
    Nic::new(NodeAddr(0), cfg).unwrap()
}

fn at(us: u64) -> Instant {
    Instant::ZERO + Duration::from_micros(us)
}

/// A go-back-N NIC with `out` bytes toward PEER, which marked a packet
/// at time zero.
fn congested(out: u64) -> Nic {
    let mut n = nic(RetransmitMode::GoBackN);
    n.flow(PEER).inflight = out;
    n.flow(PEER).congested = Some(Instant::ZERO);
    n
}

fn window(n: &Nic) -> Option<(u64, u64)> {
    n.flows
        .get(&PEER)
        .and_then(|f| f.loss_window)
        .map(|w| (w.window, w.threshold))
}

#[test]
fn a_timeout_starts_from_one_packet_and_a_nack_halves_what_was_out() {
    let mut n = congested(6 * MTU);
    assert!(!n.loss_windowed(PEER));
    n.cut_window(at(10), PEER, at(1), CutCause::Timeout);
    assert_eq!(window(&n), Some((MTU, 3 * MTU)));
    assert!(n.loss_windowed(PEER));
    assert_eq!((n.windowed_flows, n.stats.loss_window_cuts), (1, 1));
    // A later loss: half of what the window lets out now, never below
    // two packets.
    n.cut_window(at(20), PEER, at(10), CutCause::SequenceError);
    assert_eq!(window(&n), Some((2 * MTU, 2 * MTU)));
    assert_eq!((n.windowed_flows, n.stats.loss_window_cuts), (1, 2));
    let mut n = congested(12 * MTU);
    n.cut_window(at(10), PEER, at(1), CutCause::Trim);
    assert_eq!(window(&n), Some((6 * MTU, 6 * MTU)));
}

#[test]
fn a_loss_of_a_packet_that_left_before_the_cut_cuts_nothing_more() {
    let mut n = congested(8 * MTU);
    n.cut_window(at(10), PEER, at(1), CutCause::Trim);
    assert_eq!(window(&n), Some((4 * MTU, 4 * MTU)));
    n.cut_window(at(12), PEER, at(9), CutCause::Timeout);
    assert_eq!(window(&n), Some((4 * MTU, 4 * MTU)), "same congestion");
    n.cut_window(at(14), PEER, at(10), CutCause::Timeout);
    assert_eq!(window(&n), Some((MTU, 2 * MTU)), "left at the cut: new");
    assert_eq!(n.stats.loss_window_cuts, 2);
}

#[test]
fn only_losses_near_congestion_cut_and_selective_only_on_trims_with_no_controller() {
    // No mark, no trim heard: the path's own loss.
    let mut n = nic(RetransmitMode::GoBackN);
    n.flow(PEER).inflight = 8 * MTU;
    n.cut_window(at(10), PEER, at(1), CutCause::Timeout);
    assert_eq!(window(&n), None);
    // A trim is congestion by itself.
    n.cut_window(at(10), PEER, at(1), CutCause::Trim);
    assert!(window(&n).is_some());
    // Selective, no controller: a trim cuts, a timeout near a mark not.
    let mut n = nic(RetransmitMode::Selective);
    n.flow(PEER).inflight = 8 * MTU;
    n.flow(PEER).congested = Some(Instant::ZERO);
    n.cut_window(at(10), PEER, at(1), CutCause::Timeout);
    assert_eq!(window(&n), None);
    n.cut_window(at(10), PEER, at(1), CutCause::Trim);
    assert!(window(&n).is_some());
    // Off, nothing cuts.
    let mut n = congested(8 * MTU);
    n.cfg.loss_window = false;
    n.cut_window(at(10), PEER, at(1), CutCause::Trim);
    assert_eq!(window(&n), None);
}

#[test]
fn the_window_grows_by_what_is_acknowledged_then_by_a_packet_per_window() {
    let mut n = congested(16 * MTU);
    n.cut_window(at(10), PEER, at(1), CutCause::Timeout);
    assert_eq!(window(&n), Some((MTU, 8 * MTU)));
    n.grow_window(PEER, MTU);
    assert_eq!(window(&n), Some((2 * MTU, 8 * MTU)), "slow start");
    n.grow_window(PEER, MTU);
    assert_eq!(window(&n), Some((3 * MTU, 8 * MTU)));
    if let Some(w) = n.flow(PEER).loss_window.as_mut() {
        (w.window, w.threshold) = (2 * MTU, 2 * MTU);
    }
    // At the threshold: a packet per window (1000 · 1000 / 2000).
    n.grow_window(PEER, MTU);
    assert_eq!(window(&n), Some((2 * MTU + MTU / 2, 2 * MTU)));
    // Never less than a byte.
    n.grow_window(PEER, 1);
    assert_eq!(window(&n), Some((2 * MTU + MTU / 2 + 1, 2 * MTU)));
}

#[test]
fn the_window_is_dropped_once_it_holds_more_than_the_op_table() {
    // Eight slots of 1,000 bytes: dropped past 8,000.
    let mut n = congested(16 * MTU);
    n.cut_window(at(10), PEER, at(1), CutCause::Trim);
    assert_eq!(window(&n), Some((8 * MTU, 8 * MTU)));
    if let Some(w) = n.flow(PEER).loss_window.as_mut() {
        w.threshold = 9 * MTU;
    }
    n.grow_window(PEER, 0);
    assert_eq!(window(&n).map(|w| w.0), Some(8 * MTU), "full, not past");
    n.grow_window(PEER, 1);
    assert_eq!(window(&n), None);
    assert!(!n.loss_windowed(PEER));
    assert_eq!(n.windowed_flows, 0);
    // Acknowledgements with no window change nothing.
    n.grow_window(PEER, MTU);
    assert_eq!((window(&n), n.windowed_flows), (None, 0));
}

#[test]
fn a_peer_held_by_its_window_holds_up_no_other_peer() {
    // Selective, no controller: a trim cut PEER's window to four packets
    // with eight out, so it is full. A WRITE to PEER was posted first and
    // one to another peer after it: the gate decides what goes (not the
    // oldest first), and the other peer's WRITE goes while PEER's waits.
    let mut n = nic(RetransmitMode::Selective);
    let mr = n.register(0x1000, 1 << 16, crate::Access::ALL);
    let other = NodeAddr(2);
    for dst in [PEER, other] {
        let wr = crate::WorkRequest::write(dst, mr, 0x1000, 2 * MTU, 1, 0x2000);
        n.post(at(0), wr).unwrap();
    }
    n.flow(PEER).inflight = 8 * MTU;
    n.cut_window(at(0), PEER, at(0), CutCause::Trim);
    assert_eq!(window(&n), Some((4 * MTU, 4 * MTU)));
    let mut buf = Vec::new();
    let mut sent = Vec::new();
    while let Some(t) = n.poll_transmit(at(1), &mut buf) {
        sent.push(t.dst);
    }
    assert_eq!(sent, vec![other, other]);
}

#[test]
fn go_back_n_copies_held_by_the_window_go_before_new_data() {
    // A congested go-back-N peer times out packet 0 of a two-packet
    // WRITE: the window starts again from one packet, and both copies
    // wait at the gate. With 10 bytes of room left, a 1-byte WRITE posted
    // now would fit where a copy (a whole datagram) does not; it must not
    // pass them (the receiver would discard it, out of sequence).
    let mut n = nic(RetransmitMode::GoBackN);
    let mr = n.register(0x1000, 1 << 16, crate::Access::ALL);
    let wr = crate::WorkRequest::write(PEER, mr, 0x1000, 2 * MTU, 1, 0x2000);
    n.post(at(0), wr).unwrap();
    let mut buf = Vec::new();
    let mut sent = 0;
    while n.poll_transmit(at(0), &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, 2);
    n.flow(PEER).congested = Some(Instant::ZERO);
    let first = match n.ops.values().next().map(|op| op.pkts[0]) {
        Some(PktState::InFlight(o)) => o,
        p => panic!("packet 0 is not out: {p:?}"),
    };
    n.on_retransmit_timeout(at(100), first);
    assert_eq!(window(&n), Some((MTU, 2 * MTU)));
    n.flow(PEER).inflight = MTU - 10;
    let wr = crate::WorkRequest::write(PEER, mr, 0x1000, 1, 1, 0x2000);
    n.post(at(100), wr).unwrap();
    assert!(n.poll_transmit(at(100), &mut buf).is_none());
    assert_eq!(n.stats.data_sent, 2);
}
