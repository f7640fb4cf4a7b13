//! Peer restart stories: a host that reboots numbers its messages from 1
//! again, and packets of its previous life may still be on the wire. The
//! boot epoch in every header keeps the two lives apart.

mod common;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{Access, Duration, Event, Instant, Nic, NicConfig, WcError, WorkRequest};
use udrma_proto::NodeAddr;

const LEN4K: u64 = 4096;

fn life(epoch: u32) -> NicConfig {
    NicConfig { epoch, ..config() }
}

/// h0 reboots: a fresh engine with a newer epoch, its source buffer
/// refilled with `fill`.
fn reboot(s: &mut Setup, epoch: u32, fill: u8) {
    let mut nic = Nic::new(NodeAddr(0), life(epoch)).unwrap();
    let src = nic.register(SRC, LEN, Access::ALL);
    nic.memory_mut().region_mut(src).unwrap().bytes.fill(fill);
    s.pair.nics[0] = nic;
    // The host's view of events starts afresh with its new life.
    s.pair.events.retain(|(i, _)| *i != 0);
    s.src = src;
}

#[test]
fn a_rebooted_writer_is_not_swallowed_by_its_old_tombstones_nor_its_old_packets() {
    let mut s = setup(life(1));
    s.pair.nics[0]
        .memory_mut()
        .region_mut(s.src)
        .unwrap()
        .bytes
        .fill(0xaa);
    // Life 1: message 1 writes elsewhere; message 2 writes offset 0, and
    // its FIRST packet is held on the wire for 2 ms. The retransmission
    // completes the WRITE long before the held copy lands.
    let mut held = false;
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if !held && r.kind_name() == "WRITE_FIRST" && r.msg_id == 2 => {
            held = true;
            Verdict::Delay(Duration::from_millis(2))
        }
        _ => Verdict::Deliver,
    });
    let elsewhere = s.write_at(8192, LEN4K);
    let wr = s.write(LEN4K);
    s.pair.advance_to(Instant::ZERO + Duration::from_millis(1));
    s.assert_ok_once(0, elsewhere);
    s.assert_ok_once(0, wr);
    assert!(s.dst_bytes(0, 4096).iter().all(|b| *b == 0xaa));

    // h0 reboots with epoch 2 and writes message 1 again, new bytes.
    reboot(&mut s, 2, 0xbb);
    let wr = s.write(LEN4K);
    s.pair
        .advance_to(Instant::ZERO + Duration::from_micros(1500));
    s.assert_ok_once(0, wr);
    // Without the epoch, h1's tombstone for (h0, ep 0, msg 1) would have
    // dropped every packet as a late duplicate and re-ACKed it: the sender
    // would see success and the bytes would still be 0xaa.
    assert!(
        s.dst_bytes(0, 4096).iter().all(|b| *b == 0xbb),
        "the new life's WRITE must land"
    );
    assert_eq!(s.pair.nics[1].stats().peer_restarts, 1);
    assert_eq!(s.pair.nics[1].peer_epoch(NodeAddr(0)), Some(2));
    assert!(s.pair.events_of(1).any(|e| matches!(
        e,
        Event::PeerRestarted {
            peer: NodeAddr(0),
            epoch: 2,
            ..
        }
    )));

    // The life-1 FIRST packet of message 2 finally lands. The new life has
    // no message 2 yet and the old tombstones are gone, so only its epoch
    // tells it apart: it would register and write 0xaa over the new bytes.
    s.pair.run();
    assert_eq!(s.pair.nics[1].stats().stale_epoch, 1);
    assert!(
        s.dst_bytes(0, 4096).iter().all(|b| *b == 0xbb),
        "a packet of the previous life must not write"
    );
}

#[test]
fn requests_toward_a_peer_that_rebooted_fail_once_with_peer_restarted() {
    let mut s = setup(life(7));
    // h1 writes to h0, but every packet from h1 is lost: the request stays
    // outstanding, retransmitting.
    let back = s.pair.nics[0].register(0x80_0000, 8192, Access::ALL);
    s.pair.set_filter(|w| {
        if w.from == NodeAddr(1) {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    let stuck = s.pair.nics[1]
        .post(
            s.pair.now,
            WorkRequest::write(NodeAddr(0), s.dst, DST, 4096, back.0, 0x80_0000),
        )
        .unwrap();
    let wr = s.write(1024);
    s.pair.advance_to(Instant::ZERO + Duration::from_micros(50));
    assert!(s.pair.nics[1].stats().retransmits + s.pair.nics[1].stats().data_sent > 0);

    // h0 reboots (epoch 8) and speaks: h1 learns of it from the first packet.
    let _ = wr;
    reboot(&mut s, 8, 0x11);
    s.pair.clear_filter();
    let wr = s.write(1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let failed: Vec<_> = s
        .pair
        .events_of(1)
        .filter_map(|e| match e {
            Event::Completed { wr, result, .. } if *wr == stuck => Some(*result),
            _ => None,
        })
        .collect();
    assert_eq!(failed, vec![Err(WcError::PeerRestarted)]);
    assert!(s.pair.nics[1].is_idle());
}

#[test]
fn epochs_compare_in_serial_arithmetic_across_the_wrap() {
    use udrma_nic::nic::epoch_newer;
    assert!(epoch_newer(2, 1));
    assert!(!epoch_newer(1, 2));
    assert!(!epoch_newer(5, 5));
    assert!(
        epoch_newer(3, u32::MAX - 3),
        "a wrapped epoch is still newer"
    );
    assert!(!epoch_newer(u32::MAX - 3, 3));
}

#[test]
fn hello_exchange_announces_each_sides_region_in_band() {
    let mut s = setup(life(3));
    s.pair.nics[1].announce(Some(s.dst));
    s.pair.nics[0].announce(Some(s.src));
    s.pair.nics[0].hello(NodeAddr(1), 0xfeed);
    s.pair.run();
    let heard = |nic: usize| -> Vec<udrma_proto::Hello> {
        s.pair
            .events_of(nic)
            .filter_map(|e| match e {
                Event::Hello { hello, .. } => Some(*hello),
                _ => None,
            })
            .collect()
    };
    // h1 heard the ask (h0's region) and answered; h0 heard the reply.
    let ask = heard(1);
    assert_eq!(ask.len(), 1);
    assert!(!ask[0].reply);
    assert_eq!(
        (ask[0].region_addr, ask[0].region_len, ask[0].rkey),
        (SRC, LEN as u64, s.src.0)
    );
    let reply = heard(0);
    assert_eq!(reply.len(), 1);
    assert!(reply[0].reply);
    assert_eq!(reply[0].nonce, 0xfeed);
    assert_eq!(reply[0].max_payload, 1024);
    assert_eq!(
        (reply[0].region_addr, reply[0].region_len, reply[0].rkey),
        (DST, LEN as u64, s.dst.0)
    );
    // Both learned the other's epoch from the exchange.
    assert_eq!(s.pair.nics[0].peer_epoch(NodeAddr(1)), Some(3));
    assert_eq!(s.pair.nics[1].peer_epoch(NodeAddr(0)), Some(3));
}

#[test]
fn a_reply_to_the_previous_life_does_not_complete_the_new_lifes_request() {
    // Found by the state machine: h0 WRITEs (message 1 of its first life)
    // and reboots while h1's ACK and completion notice are on the wire.
    let mut s = setup(life(1));
    s.write(0);
    s.pair.flush();
    s.pair.advance_to(s.pair.now + Duration::from_micros(1));
    let old_replies = s.pair.in_flight();
    assert_eq!(old_replies, 2, "ACK and completion notice of message 1");
    reboot(&mut s, 2, 0x11);
    // The new life READs at once: had it numbered messages from 1 again,
    // the old ACK for message 1 would complete this READ before any byte
    // was read.
    let wr = s.read(1);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert_eq!(s.src_bytes(0, 1), s.dst_bytes(0, 1), "the READ read");
    assert_eq!(s.pair.nics[0].stats().stale_acks, 1);
}

#[test]
fn a_restart_frees_what_the_receiver_held_for_the_previous_life_at_once() {
    let mut s = setup(life(1));
    // h0's first life: one WRITE completes (a tombstone at h1), one loses
    // its last packet (half-received, in h1's registry), one loses its
    // FIRST packet (its others wait in h1's escape channel).
    s.pair.set_filter(|w| match w.repr {
        Some(r) if r.msg_id == 2 && r.kind_name() == "WRITE_LAST" => Verdict::Drop,
        Some(r) if r.msg_id == 3 && r.kind_name() == "WRITE_FIRST" => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    s.write_at(0, LEN4K);
    s.write_at(8192, LEN4K);
    s.write_at(16384, LEN4K);
    s.pair.advance_to(Instant::ZERO + Duration::from_micros(5));
    let held = s.pair.nics[1].occupancy();
    assert_eq!(
        (held.registry.0, held.escape_entries.0, held.tombstones.0),
        (1, 3, 1),
        "{held:?}"
    );
    assert_eq!(held.escape_bytes.0, 3 * (1024 + 32 + 16 + 4));
    // h0 reboots; its first packet tells h1, which forgets all three at
    // once rather than waiting for their timers.
    reboot(&mut s, 2, 0x33);
    s.pair.clear_filter();
    s.write_at(32768, 0);
    s.pair.advance_to(s.pair.now + Duration::from_micros(1));
    let now = s.pair.nics[1].occupancy();
    assert_eq!(
        (now.registry.0, now.escape_entries.0, now.escape_bytes.0),
        (0, 0, 0),
        "{now:?}"
    );
    assert_eq!(now.tombstones.0, 1, "only the new life's WRITE: {now:?}");
    assert_eq!(s.pair.nics[1].stats().peer_restarts, 1);
}

#[test]
fn a_peer_holding_no_work_can_be_forgotten_and_one_holding_work_cannot() {
    // What a host does before evicting a silent peer (the UDP bridge's
    // admission): ask the engine whether the peer holds work, and have it
    // forget the peer's state only if not.
    let mut s = setup(config());
    let wr = s.write(4096);
    // Posted, not yet sent: a request toward h1.
    assert!(s.pair.nics[0].busy_with(NodeAddr(1)));
    assert!(!s.pair.nics[0].release_peer(NodeAddr(1)));
    // h1 has half of the WRITE: an operation it is receiving from h0.
    s.pair.set_filter(|w| match w.repr {
        Some(r) if is_data(w) && r.seg_index >= 2 => Verdict::Delay(Duration::from_micros(50)),
        _ => Verdict::Deliver,
    });
    s.pair.advance_to(s.pair.now + Duration::from_micros(10));
    assert!(s.pair.nics[1].busy_with(NodeAddr(0)));
    assert!(!s.pair.nics[1].release_peer(NodeAddr(0)));
    assert!(
        !s.pair.nics[0].busy_with(NodeAddr(2)),
        "a peer never heard of"
    );
    s.pair.run();
    s.assert_ok_once(0, wr);
    for (i, peer) in [(0, NodeAddr(1)), (1, NodeAddr(0))] {
        assert!(
            !s.pair.nics[i].busy_with(peer),
            "h{i} is done with {peer:?}"
        );
        assert!(s.pair.nics[i].peer_epoch(peer).is_some());
        assert!(s.pair.nics[i].release_peer(peer));
        assert_eq!(s.pair.nics[i].peer_epoch(peer), None, "forgotten");
    }
}

#[test]
fn a_queued_reply_is_work_toward_its_peer() {
    // A HELLO queued and not yet sent is work toward that peer: the host
    // may not forget it before it goes.
    let mut s = setup(config());
    let nic = &mut s.pair.nics[0];
    nic.hello(NodeAddr(5), 1);
    assert!(nic.busy_with(NodeAddr(5)), "a reply waits to go");
    assert!(!nic.release_peer(NodeAddr(5)));
    assert!(!nic.busy_with(NodeAddr(6)));
    let mut buf = Vec::new();
    while nic.poll_transmit(s.pair.now, &mut buf).is_some() {}
    assert!(!nic.busy_with(NodeAddr(5)));
    assert!(nic.release_peer(NodeAddr(5)));
}

/// h1's entry for h0's WRITE expired holding only its first packet, so
/// h1 remembers the operation, to refuse its later packets until h0
/// sends it all again. h0 reboots instead: its first packet of the new
/// life tells h1, which forgets the old life's record at once, as it does
/// the rest of that life's state.
#[test]
fn a_restart_forgets_the_previous_lifes_lost_registrations() {
    let mut s = setup(NicConfig {
        registry_timeout: Duration::from_micros(100),
        ..life(1)
    });
    s.pair.set_filter(|w| match w.repr {
        Some(r) if r.kind_name().starts_with("WRITE") && r.seg_index > 0 => Verdict::Drop,
        _ => Verdict::Deliver,
    });
    s.write(LEN4K);
    s.pair
        .advance_to(Instant::ZERO + Duration::from_micros(150));
    assert_eq!(s.pair.nics[1].stats().registry_expired, 1);
    assert_eq!(s.pair.nics[1].occupancy().lost_registrations.0, 1);
    reboot(&mut s, 2, 0x44);
    s.pair.clear_filter();
    let wr = s.write(LEN4K);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert!(s.dst_bytes(0, 4096).iter().all(|b| *b == 0x44));
    assert_eq!(s.pair.nics[1].occupancy().lost_registrations, (0, 1, 256));
}
