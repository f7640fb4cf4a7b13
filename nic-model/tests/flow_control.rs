//! A busy receiver is not a lossy path: receiver-not-ready NACKs (a full
//! registry, no receive buffer) are retried after `rnr_delay` against
//! their own budget, `max_rnr_retries`, and leave the loss retries and the
//! RTO alone.

mod common;

use common::*;
use udrma_nic::WorkRequest;
use udrma_nic::{NicConfig, WcError};
use udrma_proto::{Duration, NodeAddr, Syndrome};

#[test]
fn a_full_registry_costs_no_loss_retries() {
    // Eight WRITEs at once into a registry of one, with a loss budget of
    // one retry. The first WRITE's LAST packet is lost once, so it holds
    // the registry for a retransmission timeout; meanwhile the receiver
    // turns the others away every 5 µs, many times each, and every one
    // still completes (their RNR retries are counted apart).
    let mut s = setup(NicConfig {
        registry_capacity: 1,
        max_retries: 1,
        rnr_delay: Duration::from_micros(5),
        ..config()
    });
    s.pair.set_filter(first_matching(
        |w| is_kind(w, "WRITE_LAST"),
        udrma_nic::pair::Verdict::Drop,
        1,
    ));
    let wrs: Vec<_> = (0..8).map(|i| s.write_at(i * 8192, 4096)).collect();
    s.pair.run();
    for wr in wrs {
        s.assert_ok_once(0, wr);
    }
    for i in 0..8 {
        assert!(s.dst_bytes(i * 8192, 4096) == s.src_bytes(i * 8192, 4096));
    }
    let rnr = s.pair.nics[0].stats().nacks_received[&Syndrome::ReceiverNotReady];
    assert!(rnr > 7 * 2, "turned away {rnr} times");
    assert_eq!(s.pair.nics[0].stats().retries_exhausted, 0);
}

#[test]
fn a_receiver_that_never_posts_a_buffer_fails_the_send_after_its_rnr_budget() {
    let mut s = setup(NicConfig {
        max_rnr_retries: 5,
        rnr_delay: Duration::from_micros(10),
        ..config()
    });
    let wr = s.pair.nics[0]
        .post(s.pair.now, WorkRequest::send(NodeAddr(1), s.src, SRC, 100))
        .unwrap();
    s.pair.run();
    assert_eq!(s.completions(0, wr), vec![Err(WcError::RetryExceeded)]);
    assert_eq!(
        s.pair.nics[1].stats().no_receive_buffer,
        6,
        "the first try and 5 retries"
    );
}
