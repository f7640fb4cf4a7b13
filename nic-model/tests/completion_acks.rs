//! `completion_acks`, over virtual time: the completion notice of a
//! one-packet operation is also its packet's acknowledgement, so one
//! datagram answers it instead of two. The sender samples the round trip
//! and hears ECN from it; a lost notice costs a timeout, not the operation.

use std::sync::{Arc, Mutex};

use udrma_nic::pair::{Pair, Verdict};
use udrma_nic::{Access, Duration, Event, NicConfig, WorkRequest};
use udrma_proto::{Flags, NodeAddr, Opcode};

fn cfg(completion_acks: bool) -> NicConfig {
    NicConfig {
        mtu_payload: 1000,
        completion_acks,
        ..NicConfig::default()
    }
}

/// A pair with a WRITE of `len` bytes posted from h0 to h1.
fn write_pair(cfg: NicConfig, len: u64) -> Pair {
    let mut p = Pair::new(cfg);
    let src = p.nics[0].register(0x1000, 1 << 20, Access::ALL);
    let dst = p.nics[1].register(0x9000_0000, 1 << 20, Access::ALL);
    p.nics[0]
        .post(
            p.now,
            WorkRequest::write(NodeAddr(1), src, 0x1000, len, dst.0, 0x9000_0000),
        )
        .unwrap();
    p
}

/// Records (opcode, flags) of every datagram h1 sends back.
fn answers(p: &mut Pair) -> Arc<Mutex<Vec<(Opcode, Flags)>>> {
    answers_with(p, |_, _| Verdict::Deliver)
}

fn answers_with(
    p: &mut Pair,
    mut judge: impl FnMut(Opcode, Flags) -> Verdict + 'static,
) -> Arc<Mutex<Vec<(Opcode, Flags)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    p.set_filter(move |w| match w.repr {
        Some(r) if w.from == NodeAddr(1) => {
            log.lock().unwrap().push((r.opcode(), r.flags));
            judge(r.opcode(), r.flags)
        }
        Some(r) if r.opcode() == Opcode::Write => judge(r.opcode(), r.flags),
        _ => Verdict::Deliver,
    });
    seen
}

fn completions(p: &Pair) -> usize {
    p.events_of(0)
        .filter(|e| matches!(e, Event::Completed { result: Ok(()), .. }))
        .count()
}

#[test]
fn a_one_packet_write_is_answered_by_its_completion_alone() {
    let mut p = write_pair(cfg(true), 500);
    let seen = answers(&mut p);
    p.run();
    assert_eq!(completions(&p), 1);
    assert_eq!(
        seen.lock().unwrap().clone(),
        [(Opcode::Completion, Flags::ACKS)]
    );
    // The notice was the acknowledgement: a round-trip sample.
    assert_eq!(p.nics[0].stats().rtt_samples, 1);
    assert_eq!(p.nics[0].stats().acks, 1);
}

#[test]
fn without_completion_acks_an_ack_and_a_completion_come_back() {
    let mut p = write_pair(cfg(false), 500);
    let seen = answers(&mut p);
    p.run();
    assert_eq!(completions(&p), 1);
    assert_eq!(
        seen.lock().unwrap().clone(),
        [
            (Opcode::Ack, Flags::empty()),
            (Opcode::Completion, Flags::empty())
        ]
    );
    assert_eq!(p.nics[0].stats().rtt_samples, 1);
}

#[test]
fn a_multi_packet_write_is_acknowledged_packet_by_packet_as_before() {
    let mut p = write_pair(cfg(true), 3000);
    let seen = answers(&mut p);
    p.run();
    assert_eq!(completions(&p), 1);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().filter(|(o, _)| *o == Opcode::Ack).count(), 3);
    assert_eq!(seen.last(), Some(&(Opcode::Completion, Flags::empty())));
}

#[test]
fn a_marked_packet_comes_back_as_ece_on_the_completion() {
    let mut p = write_pair(cfg(true), 500);
    let seen = answers_with(&mut p, |op, _| {
        if op == Opcode::Write {
            Verdict::MarkCe(Duration::ZERO)
        } else {
            Verdict::Deliver
        }
    });
    p.run();
    assert_eq!(completions(&p), 1);
    assert_eq!(
        seen.lock().unwrap().clone(),
        [(Opcode::Completion, Flags::ACKS | Flags::ECE)]
    );
    assert_eq!(p.nics[0].stats().ecn_echoes, 1);
}

#[test]
fn a_lost_completion_costs_a_timeout_and_the_copy_is_acked_by_its_tombstone() {
    let mut p = write_pair(cfg(true), 500);
    let mut lost = false;
    let seen = answers_with(&mut p, move |op, _| {
        if op == Opcode::Completion && !lost {
            lost = true;
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    p.run();
    assert_eq!(completions(&p), 1);
    assert_eq!(
        seen.lock().unwrap().clone(),
        [
            (Opcode::Completion, Flags::ACKS),
            // The copy found a tombstone: the receiver had the packet, and
            // its ACK says so, and that the copy came after the packet had
            // been answered (RETX: an answer lost, not a packet late).
            (Opcode::Ack, Flags::DUP | Flags::RETRANSMIT)
        ]
    );
    let tx = p.nics[0].stats();
    assert_eq!((tx.timeouts, tx.retransmits), (1, 1));
    // The timer's copy was needed (its COMPLETION was lost): no widening.
    assert_eq!(tx.spurious_fast_retransmits, 0);
    // Karn: the copy's acknowledgement is no sample.
    assert_eq!(tx.rtt_samples, 0);
    assert_eq!(p.nics[1].stats().stale_dropped, 1);
}

#[test]
fn a_completion_without_the_flag_acknowledges_but_is_no_sample() {
    // Receiver without completion_acks; its ACK is lost, so the COMPLETION
    // is what ends the operation at the sender, with no round-trip sample
    // (a notice without ACKS is not an acknowledgement of a packet), as
    // before the flag existed.
    let mut p = write_pair(cfg(false), 500);
    answers_with(&mut p, |op, _| {
        if op == Opcode::Ack {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    p.run();
    assert_eq!(completions(&p), 1);
    let tx = p.nics[0].stats();
    assert_eq!(
        (tx.rtt_samples, tx.timeouts, tx.completion_notices),
        (0, 0, 1)
    );
}
