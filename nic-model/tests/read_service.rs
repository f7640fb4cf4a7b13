//! READ service under congestion, over virtual time: a READ's requester
//! and responder behind a queue the READ's own responses overflow. The
//! responder does not queue a response twice, the requester's timer learns
//! the round trip of a READ, and a READ whose responder keeps answering is
//! not failed for a lost burst.

use udrma_nic::pair::{Pair, Verdict};
use udrma_nic::{Access, Event, NicConfig, WcError, WorkRequest};
use udrma_proto::{Body, Flags, NodeAddr, Opcode, Repr};

fn small() -> NicConfig {
    NicConfig {
        mtu_payload: 1000,
        ..NicConfig::default()
    }
}

/// A READ request for `length` bytes at 0x9000 of `rkey`, as requester h0
/// would send it (operation 7, message 3).
/// Hands `bytes` to h1, the responder, as if from h0 at `now`.
fn to_responder(p: &mut Pair, now: udrma_nic::Instant, bytes: &[u8]) {
    p.nics[1].handle_datagram(now, NodeAddr(0), bytes);
}

fn read_request(rkey: u32, length: u32, flags: Flags) -> Vec<u8> {
    request_of(3, 7, rkey, length, flags)
}

/// The same for message `msg_id`, operation `op_num`.
fn request_of(msg_id: u32, op_num: u32, rkey: u32, length: u32, flags: Flags) -> Vec<u8> {
    Repr {
        flags: Flags::FIRST | Flags::LAST | Flags::ACK_REQ | flags,
        src_ep: 0,
        dst_ep: 0,
        op_num,
        msg_id,
        seg_index: 0,
        seg_count: 1,
        credits: 0,
        epoch: 1,
        body: Body::ReadRequest {
            remote_addr: 0x9000,
            rkey,
            length,
        },
    }
    .to_vec()
    .unwrap()
}

/// Sends what `nic` has to send now and returns the READ responses' segment
/// indices, in order.
fn drain_responses(p: &mut Pair, nic: usize) -> Vec<u32> {
    let now = p.now;
    let mut buf = Vec::new();
    let mut segs = Vec::new();
    while p.nics[nic].poll_transmit(now, &mut buf).is_some() {
        let r = Repr::parse_bytes(&buf).unwrap();
        if r.opcode() == Opcode::ReadResponse {
            segs.push(r.seg_index);
        }
    }
    segs
}

#[test]
fn a_retried_read_gets_no_second_copy_of_responses_still_queued() {
    let mut p = Pair::new(small());
    let remote = p.nics[1].register(0x9000, 1 << 16, Access::ALL);
    let now = p.now;
    // The request arrives; before its eight responses have left, the
    // requester's timer fires and the same request arrives again.
    to_responder(&mut p, now, &read_request(remote.0, 8000, Flags::empty()));
    to_responder(
        &mut p,
        now,
        &read_request(remote.0, 8000, Flags::RETRANSMIT),
    );
    assert_eq!(drain_responses(&mut p, 1), (0..8).collect::<Vec<_>>());
    assert_eq!(p.nics[1].stats().read_responses_still_queued, 8);
    assert_eq!(p.nics[1].stats().read_requests_served, 2);
    // Once they have left, a retry is served in full: they may be lost.
    to_responder(
        &mut p,
        now,
        &read_request(remote.0, 8000, Flags::RETRANSMIT),
    );
    assert_eq!(drain_responses(&mut p, 1), (0..8).collect::<Vec<_>>());
    assert_eq!(p.nics[1].stats().read_responses_still_queued, 8);
}

#[test]
fn a_retry_skips_only_the_responses_still_queued_and_only_its_own() {
    let mut p = Pair::new(small());
    let remote = p.nics[1].register(0x9000, 1 << 16, Access::ALL);
    let now = p.now;
    // Three of eight responses have left when the retry comes: the other
    // five are not queued again, the three are.
    to_responder(&mut p, now, &read_request(remote.0, 8000, Flags::empty()));
    let mut buf = Vec::new();
    for _ in 0..3 {
        p.nics[1].poll_transmit(now, &mut buf).unwrap();
    }
    to_responder(
        &mut p,
        now,
        &read_request(remote.0, 8000, Flags::RETRANSMIT),
    );
    assert_eq!(drain_responses(&mut p, 1), [3, 4, 5, 6, 7, 0, 1, 2]);
    assert_eq!(p.nics[1].stats().read_responses_still_queued, 5);
    // Responses queued for another message, or another operation number,
    // are not this request's: its retry is served whole.
    for (msg, op) in [(4, 8), (4, 7), (3, 8)] {
        to_responder(
            &mut p,
            now,
            &request_of(msg, op, remote.0, 2000, Flags::empty()),
        );
    }
    to_responder(
        &mut p,
        now,
        &read_request(remote.0, 2000, Flags::RETRANSMIT),
    );
    assert_eq!(drain_responses(&mut p, 1), [0, 1, 0, 1, 0, 1, 0, 1]);
    assert_eq!(p.nics[1].stats().read_responses_still_queued, 5);
}

#[test]
fn a_first_request_is_served_whole_even_with_an_older_copy_queued() {
    // Only a request marked as a retransmission is checked against the
    // queue: a first request never has a copy there.
    let mut p = Pair::new(small());
    let remote = p.nics[1].register(0x9000, 1 << 16, Access::ALL);
    let now = p.now;
    for _ in 0..2 {
        to_responder(&mut p, now, &read_request(remote.0, 3000, Flags::empty()));
    }
    assert_eq!(drain_responses(&mut p, 1), [0, 1, 2, 0, 1, 2]);
    assert_eq!(p.nics[1].stats().read_responses_still_queued, 0);
    // Two copies queued (a duplicated first request), then a retry: each
    // response counts once as still queued, and none is queued again.
    for _ in 0..2 {
        to_responder(&mut p, now, &read_request(remote.0, 3000, Flags::empty()));
    }
    to_responder(
        &mut p,
        now,
        &read_request(remote.0, 3000, Flags::RETRANSMIT),
    );
    assert_eq!(drain_responses(&mut p, 1), [0, 1, 2, 0, 1, 2]);
    assert_eq!(p.nics[1].stats().read_responses_still_queued, 3);
}

/// A pair with regions on both sides, h1's filled with a pattern.
fn read_pair() -> (Pair, udrma_nic::MrKey, udrma_nic::MrKey) {
    let mut p = Pair::new(small());
    let local = p.nics[0].register(0x1000, 1 << 16, Access::ALL);
    let remote = p.nics[1].register(0x9000, 1 << 16, Access::ALL);
    (p, local, remote)
}

#[test]
fn the_first_response_of_a_read_is_a_round_trip_sample() {
    let (mut p, local, remote) = read_pair();
    p.nics[0]
        .post(
            p.now,
            WorkRequest::read(NodeAddr(1), local, 0x1000, 8000, remote.0, 0x9000),
        )
        .unwrap();
    p.run();
    // One sample for the READ (its first response), none for the rest.
    assert_eq!(p.nics[0].stats().rtt_samples, 1);
    // A READ sent again gives none: whose copy answered is unknown.
    let (mut p, local, remote) = read_pair();
    let mut dropped = false;
    p.set_filter(move |w| match w.repr {
        Some(r) if r.opcode() == Opcode::ReadRequest && !dropped => {
            dropped = true;
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    p.nics[0]
        .post(
            p.now,
            WorkRequest::read(NodeAddr(1), local, 0x1000, 8000, remote.0, 0x9000),
        )
        .unwrap();
    p.run();
    assert_eq!(p.nics[0].stats().rtt_samples, 0);
}

fn read_results(p: &Pair) -> Vec<Result<(), WcError>> {
    p.events_of(0)
        .filter_map(|e| match e {
            Event::Completed { result, .. } => Some(*result),
            _ => None,
        })
        .collect()
}

/// h0 READs 8,000 bytes from h1 and every response to that READ (its first
/// message) is lost, `keep_lost` copies of the request in all; after each
/// copy of the request leaves, h0 posts a one-packet READ of its own, whose
/// response arrives (the responder is answering) when `others` is true.
fn starved_read(others: bool, keep_lost: usize) -> Pair {
    let cfg = NicConfig {
        max_retries: 2,
        ..small()
    };
    let mut p = Pair::new(cfg);
    let local = p.nics[0].register(0x1000, 1 << 16, Access::ALL);
    let remote = p.nics[1].register(0x9000, 1 << 16, Access::ALL);
    p.nics[0]
        .post(
            p.now,
            WorkRequest::read(NodeAddr(1), local, 0x1000, 8000, remote.0, 0x9000),
        )
        .unwrap();
    let mut starved = None;
    let mut asked = 0;
    p.set_filter(move |w| match w.repr {
        Some(r) if r.opcode() == Opcode::ReadResponse => {
            let first = *starved.get_or_insert(r.msg_id);
            if r.msg_id == first && asked <= keep_lost {
                Verdict::Drop
            } else {
                Verdict::Deliver
            }
        }
        Some(r) if r.opcode() == Opcode::ReadRequest && r.seg_count == 1 && r.msg_id == 1 => {
            asked += 1;
            Verdict::Deliver
        }
        _ => Verdict::Deliver,
    });
    let mut seen = 0;
    while p.step() {
        let requests = p
            .log
            .iter()
            .filter(|l| l.kind.starts_with("READ_REQ") && l.msg_id == 1)
            .count();
        if requests > seen {
            seen = requests;
            if others && requests <= keep_lost {
                let at = 0x2000 + 1000 * requests as u64;
                p.nics[0]
                    .post(
                        p.now,
                        WorkRequest::read(NodeAddr(1), local, at, 1000, remote.0, 0x9000),
                    )
                    .unwrap();
            }
        }
    }
    p
}

#[test]
fn a_read_whose_responder_answers_other_reads_outlives_its_retry_budget() {
    // Six copies of the request lose all their responses, more than the
    // budget of two retries; the responder answers a READ after each, so
    // the path works: the READ keeps going and completes.
    let p = starved_read(true, 6);
    let results = read_results(&p);
    assert_eq!(results.len(), 7, "{results:?}");
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    assert!(p.nics[0].stats().read_retries_congested >= 3);
}

#[test]
fn a_read_whose_responder_answers_nothing_fails_on_its_budget() {
    let p = starved_read(false, 6);
    assert_eq!(read_results(&p), [Err(WcError::RetryExceeded)]);
    assert_eq!(p.nics[0].stats().read_retries_congested, 0);
}
