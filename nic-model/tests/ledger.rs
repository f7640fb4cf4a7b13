//! The engine's counters and limits, told as stories with exact numbers:
//! what a user reads in a run's summary must be what happened, and each
//! limit holds at its edge (a request of exactly the threshold, a READ of
//! exactly the transmit queue, a READ request of exactly the largest
//! operation).

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use udrma_nic::pair::Verdict;
use udrma_nic::{NicConfig, TombstoneMode, WorkRequest};
use udrma_proto::{NodeAddr, Syndrome};

/// Message ids of the data packets h0 sent, distinct, in order.
fn operations(s: &Setup) -> Vec<u32> {
    let mut ids: Vec<u32> = s
        .pair
        .log
        .iter()
        .filter(|l| l.from == NodeAddr(0) && l.kind.starts_with("WRITE"))
        .map(|l| l.msg_id)
        .collect();
    ids.dedup();
    ids
}

#[test]
fn a_request_of_exactly_the_segment_threshold_is_one_operation() {
    let threshold = config().segment_threshold;
    let mut s = setup(config());
    let wr = s.write(threshold);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert_eq!(operations(&s).len(), 1);
    // One byte more is cut into segments of `segment_size`.
    let mut s = setup(config());
    let wr = s.write(threshold + 1);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let segments = (threshold + 1).div_ceil(u64::from(config().segment_size));
    assert_eq!(operations(&s).len() as u64, segments);
    s.assert_written((threshold + 1) as usize);
}

#[test]
fn a_read_larger_than_the_read_window_still_goes_one_at_a_time() {
    // 64 KiB segments through a 32 KiB window: each READ exceeds the
    // window alone, and must still be asked for when nothing else is.
    let mut s = setup(NicConfig {
        read_window: 32 * 1024,
        ..config()
    });
    let wr = s.read(256 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    assert_eq!(s.src_bytes(0, 256 * 1024), s.dst_bytes(0, 256 * 1024));
}

#[test]
fn a_write_does_not_wait_for_the_responses_of_a_read_before_it() {
    // Requests start in order (a READ that must wait for the window holds
    // back the requests behind it, as a queue pair's send queue does at
    // its outstanding-READ limit), but a READ that has been asked for does
    // not hold back the WRITE after it: the window bounds READ responses,
    // not WRITEs.
    let mut s = setup(NicConfig {
        read_window: 64 * 1024,
        ..config()
    });
    let read = s.read(64 * 1024);
    let write = s.write_at(768 * 1024, 4096);
    s.pair.run();
    s.assert_ok_once(0, read);
    s.assert_ok_once(0, write);
    let first = |pred: &dyn Fn(&str) -> bool| {
        s.pair
            .log
            .iter()
            .find(|l| pred(&l.kind))
            .map(|l| l.n)
            .unwrap()
    };
    let write_at = first(&|k| k.starts_with("WRITE"));
    let response = first(&|k| k.starts_with("READ_RESP"));
    assert!(write_at < response, "{write_at} vs {response}");
}

#[test]
fn counters_tell_what_happened() {
    // Five one-packet WRITEs into four tombstones. A window of four per
    // peer holds the fifth until the first is acknowledged, and forgets
    // only what its sender has finished with; one bounded set for all
    // peers forgets the first completion while a copy could still come.
    counters(TombstoneMode::Window, 0);
    counters(TombstoneMode::Fifo, 1);
}

fn counters(tombstone_mode: TombstoneMode, evictions: u64) {
    let mut s = setup(NicConfig {
        tombstone_capacity: 4,
        tombstone_mode,
        ..config()
    });
    let writes: Vec<_> = (0..5).map(|i| s.write_at(i * 8192, 1024)).collect();
    s.pair.run();
    // A 4 KiB READ: its first response arrives twice (one copy dropped by
    // the mask), its last twice (the copy comes after the READ completed).
    s.pair.set_filter(|w| match w.repr {
        Some(r) if r.kind_name() == "READ_RESP_FIRST" => Verdict::Duplicate(1),
        Some(r) if r.kind_name() == "READ_RESP_LAST" => Verdict::Duplicate(1),
        _ => Verdict::Deliver,
    });
    let read = s.read(4096);
    s.pair.run();
    for wr in writes.iter().chain([&read]) {
        s.assert_ok_once(0, *wr);
    }
    let (h0, h1) = (s.pair.nics[0].stats(), s.pair.nics[1].stats());
    assert_eq!((h0.posted, h0.completed, h0.failed), (6, 6, 0));
    assert_eq!(
        (h1.receiver_completions, h1.tombstone_evictions),
        (5, evictions),
        "{tombstone_mode:?}: five WRITEs completed at h1"
    );
    let waited = tombstone_mode == TombstoneMode::Window;
    assert_eq!(h0.window_waits > 0, waited, "{tombstone_mode:?}");
    assert_eq!(s.pair.nics[1].occupancy().tombstones.0, 4);
    assert_eq!(h1.read_requests_served, 1);
    assert_eq!((h0.dup_dropped, h0.stale_read_responses), (1, 1));
    assert_eq!(h0.rx_invalid + h1.rx_invalid, 0);
    // Every datagram on the wire was counted once by its sender, and
    // every delivered one once by its receiver.
    for (i, st) in [h0, h1].into_iter().enumerate() {
        let sent = s.pair.log.iter().filter(|l| l.from == NodeAddr(i as u32));
        assert_eq!(
            st.data_sent + st.retransmits + st.control_sent,
            sent.count() as u64,
            "h{i} sent"
        );
    }
    let delivered_to = |i: u32| -> u64 {
        s.pair
            .log
            .iter()
            .filter(|l| l.from != NodeAddr(i))
            .map(|l| match l.verdict {
                Verdict::Duplicate(k) => 1 + u64::from(k),
                Verdict::Drop => 0,
                _ => 1,
            })
            .sum()
    };
    assert_eq!(h0.rx_datagrams, delivered_to(0));
    assert_eq!(h1.rx_datagrams, delivered_to(1));
}

/// Copies of every datagram h0 sends whose kind is `kind`.
fn capture(s: &mut Setup, kind: &'static str) -> Rc<RefCell<Vec<Vec<u8>>>> {
    let got: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let g = got.clone();
    s.pair.set_filter(move |w| {
        if let Some(r) = w.repr.filter(|r| r.kind_name() == kind) {
            let mut out = Vec::new();
            r.emit_vec(&mut out).unwrap();
            g.borrow_mut().push(out);
        }
        Verdict::Deliver
    });
    got
}

#[test]
fn a_read_request_of_exactly_the_largest_operation_is_served_and_one_packet_more_is_not() {
    let cfg = config();
    let largest = cfg.max_op_bytes() as u32;
    let mut s = setup(cfg.clone());
    let got = capture(&mut s, "READ_REQ");
    s.read(1024);
    s.pair.run();
    let req = got.borrow()[0].clone();
    // READ_REQ extension: remote_addr (8), rkey (4), length (4).
    let with_len = |len: u32| {
        let mut b = req.clone();
        b[44..48].copy_from_slice(&len.to_be_bytes());
        reseal(b)
    };
    let served = s.pair.nics[1].stats().read_requests_served;
    s.pair.inject(0, with_len(largest));
    s.pair.run();
    assert_eq!(s.pair.nics[1].stats().read_requests_served, served + 1);
    s.pair.inject(0, with_len(largest + cfg.mtu_payload));
    s.pair.run();
    let h1 = s.pair.nics[1].stats();
    assert_eq!(h1.read_requests_served, served + 1, "refused");
    assert_eq!(h1.rx_invalid, 1);
    assert_eq!(h1.nacks_sent.get(&Syndrome::InvalidRequest), Some(&1));
}

#[test]
fn a_read_that_exactly_fills_the_transmit_queue_is_served_and_one_packet_more_waits() {
    let cfg = NicConfig {
        transmit_queue_capacity: 8,
        ..config()
    };
    let mut s = setup(cfg);
    let got = capture(&mut s, "READ_REQ");
    let wr = s.read(8 * 1024);
    s.pair.run();
    s.assert_ok_once(0, wr);
    let h1 = s.pair.nics[1].stats();
    assert_eq!(h1.read_requests_served, 1);
    assert_eq!(h1.nacks_out(), 0, "no receiver-not-ready: {h1:?}");
    // The same request for 9 KiB calls for 9 responses: the queue cannot
    // take them, so the responder answers receiver-not-ready.
    let mut nine = got.borrow()[0].clone();
    nine[44..48].copy_from_slice(&(9u32 * 1024).to_be_bytes());
    s.pair.inject(0, reseal(nine));
    s.pair.run();
    let h1 = s.pair.nics[1].stats();
    assert_eq!(h1.read_requests_served, 1);
    assert_eq!(h1.nacks_sent.get(&Syndrome::ReceiverNotReady), Some(&1));
}

#[test]
fn forged_read_responses_are_invalid_or_stale_and_write_nothing() {
    let mut s = setup(config());
    // A READ whose responses are all lost stays outstanding.
    let read = s.pair.nics[0]
        .post(
            s.pair.now,
            WorkRequest::read(NodeAddr(1), s.src, SRC, 4096, s.dst.0, DST),
        )
        .unwrap();
    let got: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let g = got.clone();
    s.pair.set_filter(move |w| match w.repr {
        Some(r) if r.kind_name().starts_with("READ_RESP") => {
            let mut out = Vec::new();
            r.emit_vec(&mut out).unwrap();
            g.borrow_mut().push(out);
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    s.pair.flush();
    s.pair
        .advance_to(s.pair.now + udrma_nic::Duration::from_micros(5));
    let resp = got.borrow()[0].clone();
    let before = s.src_bytes(0, 8192);
    // The forgeries arrive as they are; the READ's retransmission timer
    // has not run yet.
    s.pair.clear_filter();
    // Packet index past the count; data past the READ's end; a response
    // for a message that is no READ of ours.
    let mut past = resp.clone();
    past[16..20].copy_from_slice(&4u32.to_be_bytes());
    let mut beyond = resp.clone();
    beyond[32..36].copy_from_slice(&4000u32.to_be_bytes());
    let mut count = resp.clone();
    count[20..24].copy_from_slice(&5u32.to_be_bytes());
    let mut unknown = resp.clone();
    unknown[12..16].copy_from_slice(&0xdead_beefu32.to_be_bytes());
    // A WRITE is outstanding too (just sent): a response naming it is no
    // READ's.
    let write = s.write_at(8192, 1024);
    s.pair.flush();
    let write_msg = s.pair.log.last().unwrap().msg_id;
    let mut at_write = resp.clone();
    at_write[12..16].copy_from_slice(&write_msg.to_be_bytes());
    for b in [past, beyond, count, unknown, at_write] {
        s.pair.inject(1, reseal(b));
    }
    // The READ's own response, from a host that is not the responder.
    let now = s.pair.now;
    s.pair.nics[0].handle_datagram(now, NodeAddr(7), &resp);
    s.pair
        .advance_to(s.pair.now + udrma_nic::Duration::from_micros(2));
    let h0 = s.pair.nics[0].stats();
    assert_eq!((h0.rx_invalid, h0.stale_read_responses), (3, 3));
    assert_eq!(s.src_bytes(0, 8192), before, "nothing written");
    // The honest responses get through once the READ is asked again.
    s.pair.run();
    s.assert_ok_once(0, read);
    s.assert_ok_once(0, write);
}

#[test]
fn a_failing_request_leaves_the_ones_waiting_for_the_ring_alone() {
    // A descriptor ring of 2: the third and fourth requests wait in the
    // host's overflow ring. The first fails (bad key); the others must
    // still run, each completing once.
    let mut s = setup(NicConfig {
        descriptor_ring: 2,
        ring_low_water: 1,
        ..config()
    });
    let bad = s.pair.nics[0]
        .post(
            s.pair.now,
            WorkRequest::write(NodeAddr(1), s.src, SRC, 1024, 0xdead, DST),
        )
        .unwrap();
    let good: Vec<_> = (1..4).map(|i| s.write_at(i * 8192, 1024)).collect();
    assert!(s.pair.nics[0].stats().ring_overflows >= 2);
    s.pair.run();
    assert_eq!(
        s.completions(0, bad),
        vec![Err(udrma_nic::WcError::Remote(Syndrome::BadRkey))]
    );
    for wr in good {
        s.assert_ok_once(0, wr);
    }
    assert!(s.pair.nics[0].is_idle());
}
