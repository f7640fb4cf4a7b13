//! The receive side's record of packets booked for placing and not yet
//! handled (`Nic::placing`): emptied as they are handled, and bounded.
//! The story is nic-model/tests/noncontig.rs,
//! `a_copy_of_a_packet_still_waiting_to_be_placed_costs_nothing`.

use super::*;
use crate::cost::CostModel;
use udrma_proto::time::Duration;

/// A two-packet SEND from h0 to h1, whose receive buffer's descriptor
/// costs 1 µs to fetch (so its first packet has placing work): h1 and
/// the packets, not yet delivered.
fn send_to_a_fetching_receiver() -> (Nic, Vec<Vec<u8>>) {
    let cfg = NicConfig {
        mtu_payload: 1000,
        cost: CostModel {
            recv_fetch: Duration::from_nanos(1000),
            ..CostModel::ZERO
        },
        ..NicConfig::default()
    };
    let mut a = Nic::new(NodeAddr(0), cfg.clone()).unwrap();
    let mut b = Nic::new(NodeAddr(1), cfg).unwrap();
    let src = a.register(0x1000, 4096, crate::Access::ALL);
    let dst = b.register(0x10_000, 4096, crate::Access::ALL);
    let t = Instant::ZERO;
    b.post_recv(t, 0, dst, 0x10_000, 4096).unwrap();
    a.post(t, WorkRequest::send(NodeAddr(1), src, 0x1000, 2000))
        .unwrap();
    // (The doorbell takes a moment.)
    let t = t + Duration::from_micros(1);
    a.handle_timeout(t);
    let mut pkts = Vec::new();
    let mut buf = Vec::new();
    while let Some(tx) = a.poll_transmit(t, &mut buf) {
        pkts.push(buf[..tx.len].to_vec());
    }
    assert_eq!(pkts.len(), 2);
    (b, pkts)
}

#[test]
fn a_packet_booked_for_placing_is_forgotten_once_handled() {
    let (mut b, pkts) = send_to_a_fetching_receiver();
    let fetch = Duration::from_nanos(1000);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), fetch);
    assert_eq!(b.placing.len(), 1);
    b.handle_datagram(Instant::ZERO, NodeAddr(0), &pkts[0]);
    assert!(b.placing.is_empty());
    // A datagram too short for a header, handled with the record empty
    // or not, changes nothing and does not panic. (Packet 1 fetches no
    // descriptor: no work, but booked all the same.)
    b.handle_datagram(Instant::ZERO, NodeAddr(0), &[1, 2, 3]);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[1]), Duration::ZERO);
    b.handle_datagram(Instant::ZERO, NodeAddr(0), &[1, 2, 3]);
    assert_eq!(b.placing.len(), 1);
}

#[test]
fn past_its_cap_a_copy_is_charged_again_as_before() {
    let (mut b, pkts) = send_to_a_fetching_receiver();
    let fetch = Duration::from_nanos(1000);
    for i in 0..PLACING_CAP as u32 - 1 {
        b.placing.insert((NodeAddr(9), 0, i, 0));
    }
    // One place left: the packet is booked, and its copy costs nothing.
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), fetch);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), Duration::ZERO);
    assert_eq!(b.placing.len(), PLACING_CAP);
    // Full: the next packet is not remembered, so its copy pays again.
    b.placing.remove(&(NodeAddr(0), 0, 1, 0));
    b.placing.insert((NodeAddr(9), 1, 0, 0));
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), fetch);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), fetch);
    assert_eq!(b.placing.len(), PLACING_CAP);
}

/// A packet of an incarnation whose registration was lost is refused
/// (finding 43): it places nothing, so it is charged nothing, while a
/// packet of the next incarnation pays as any first packet.
#[test]
fn a_packet_of_a_lost_incarnation_costs_no_placing_work() {
    let (mut b, pkts) = send_to_a_fetching_receiver();
    let r = Repr::parse_bytes(&pkts[0]).unwrap();
    let key = OpKey {
        from: NodeAddr(0),
        src_ep: r.src_ep,
        msg_id: r.msg_id,
    };
    assert!(!r.flags.contains(Flags::INCARNATION));
    b.lost_registrations.push_back((key, false));
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), Duration::ZERO);
    b.lost_registrations.clear();
    b.lost_registrations.push_back((key, true));
    let fetch = Duration::from_nanos(1000);
    assert_eq!(b.receive_work(NodeAddr(0), &pkts[0]), fetch);
}
