//! The messaging layer as protocol stories: two messengers over the
//! two-NIC harness, in virtual time, with loss, duplication and reordering
//! on the wire. Every step checks the layer's invariants, and every run
//! ends by checking that no receiver ever answered receiver-not-ready (no
//! vbuf overflow).

use proptest::prelude::*;
use udrma_host::messaging::{
    Messenger, MsgConfig, MsgError, MsgEvent, MsgProtocol, RecvId, SendId,
};
use udrma_nic::pair::{Pair, Verdict, Wire};
use udrma_nic::{CostModel, NicConfig};
use udrma_proto::{Duration, Instant, NodeAddr, Protocol};

/// A finished receive: id, tag, bytes, outcome.
type Received = (RecvId, u32, Vec<u8>, Result<(), MsgError>);

struct MsgPair {
    pair: Pair,
    m: [Messenger; 2],
    out: Vec<(usize, MsgEvent)>,
    /// Check the credit invariants after every event (off only where a
    /// test forges traffic behind a messenger's back on purpose).
    checks: bool,
}

impl MsgPair {
    fn new(nic: NicConfig, a: MsgConfig, b: MsgConfig) -> MsgPair {
        MsgPair::with_nics(nic.clone(), nic, a, b)
    }

    fn with_nics(na: NicConfig, nb: NicConfig, a: MsgConfig, b: MsgConfig) -> MsgPair {
        let mut pair = Pair::with_configs(na, nb);
        let m0 = Messenger::new(a, &pair.nics[0]).unwrap();
        let m1 = Messenger::new(b, &pair.nics[1]).unwrap();
        let mut mp = MsgPair {
            m: [m0, m1],
            out: Vec::new(),
            pair: Pair::new(NicConfig::default()),
            checks: true,
        };
        let now = pair.now;
        mp.m[0]
            .connect(now, &mut pair.nics[0], NodeAddr(1))
            .unwrap();
        mp.m[1]
            .connect(now, &mut pair.nics[1], NodeAddr(0))
            .unwrap();
        mp.pair = pair;
        mp
    }

    fn same(msg: MsgConfig) -> MsgPair {
        MsgPair::new(NicConfig::default(), msg.clone(), msg)
    }

    fn send(&mut self, from: usize, tag: u32, data: Vec<u8>) -> SendId {
        let now = self.pair.now;
        let to = NodeAddr(1 - from as u32);
        self.m[from]
            .send(now, &mut self.pair.nics[from], to, tag, data)
            .unwrap()
    }

    fn recv(&mut self, at: usize, src: Option<u32>, tag: Option<u32>, max: u64) -> RecvId {
        let now = self.pair.now;
        self.m[at].recv(now, &mut self.pair.nics[at], src.map(NodeAddr), tag, max)
    }

    /// Feeds NIC events to the messengers until nothing new happens now.
    fn settle(&mut self) {
        loop {
            self.pair.flush();
            let evs = std::mem::take(&mut self.pair.events);
            if evs.is_empty() {
                break;
            }
            let now = self.pair.now;
            for (i, e) in evs {
                self.m[i].handle_event(now, &mut self.pair.nics[i], e);
            }
        }
        for i in 0..2 {
            while let Some(e) = self.m[i].poll_event() {
                self.out.push((i, e));
            }
            if let (true, Err(e)) = (self.checks, self.m[i].check()) {
                panic!("invariant broken at host {i}, {}: {e}", self.pair.now);
            }
        }
    }

    fn step(&mut self) -> bool {
        self.settle();
        let tm = [self.m[0].poll_timeout(), self.m[1].poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let tp = self.pair.next_wakeup();
        match (tm, tp) {
            (None, None) => return false,
            (Some(t), p) if p.is_none_or(|p| t <= p) => {
                self.pair.now = self.pair.now.max(t);
                let now = self.pair.now;
                for i in 0..2 {
                    self.m[i].handle_timeout(now, &mut self.pair.nics[i]);
                }
            }
            _ => {
                self.pair.step();
            }
        }
        self.settle();
        true
    }

    /// Runs until nothing is left to happen (at most 10 simulated s).
    fn run(&mut self) {
        let limit = self.pair.now + Duration::from_millis(10_000);
        while self.pair.now < limit {
            if !self.step() {
                break;
            }
        }
        assert!(self.pair.now < limit, "still busy at {}", self.pair.now);
        for i in 0..2 {
            // Only a SEND with no vbuf posted breaks the credit protocol;
            // other refusals (an escaped packet that expired after its
            // operation's first packet was lost) are the engine's own.
            let overflows = self.pair.nics[i].stats().no_receive_buffer;
            assert_eq!(overflows, 0, "host {i} ran out of vbufs");
        }
    }

    fn run_until(&mut self, t: Instant) {
        while self.pair.now < t {
            self.settle();
            let next = [
                self.m[0].poll_timeout(),
                self.m[1].poll_timeout(),
                self.pair.next_wakeup(),
            ]
            .into_iter()
            .flatten()
            .min();
            if next.is_none_or(|n| n > t) {
                self.pair.now = t;
                break;
            }
            self.step();
        }
        self.settle();
    }

    fn received(&self, at: usize) -> Vec<Received> {
        self.out
            .iter()
            .filter(|(i, _)| *i == at)
            .filter_map(|(_, e)| match e {
                MsgEvent::RecvDone {
                    id,
                    tag,
                    data,
                    result,
                    ..
                } => Some((*id, *tag, data.clone(), result.clone())),
                _ => None,
            })
            .collect()
    }

    fn sent(&self, at: usize) -> Vec<(SendId, MsgProtocol, Result<(), MsgError>)> {
        self.out
            .iter()
            .filter(|(i, _)| *i == at)
            .filter_map(|(_, e)| match e {
                MsgEvent::SendDone {
                    id,
                    protocol,
                    result,
                    ..
                } => Some((*id, *protocol, result.clone())),
                _ => None,
            })
            .collect()
    }
}

/// Test data that never repeats within a message (a chunk shifted by
/// any number of bytes, 256 included, would show), and differs by seed.
fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len as u32)
        .map(|i| {
            let x = i
                .wrapping_add(u32::from(seed) << 24)
                .wrapping_mul(0x9E37_79B1);
            (x >> 24) as u8 ^ (x >> 11) as u8
        })
        .collect()
}

/// A deterministic lossy, duplicating, reordering wire.
fn hostile(seed: u64, loss: u64, dup: u64, reorder: u64) -> impl FnMut(&Wire<'_>) -> Verdict {
    let mut x = seed | 1;
    move |_w| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let r = x % 100;
        if r < loss {
            Verdict::Drop
        } else if r < loss + dup {
            Verdict::Duplicate(1)
        } else if r < loss + dup + reorder {
            Verdict::Delay(Duration::from_micros(3 + x % 7))
        } else {
            Verdict::Deliver
        }
    }
}

fn with_rendezvous(p: Protocol) -> MsgConfig {
    MsgConfig {
        rendezvous: p,
        ..MsgConfig::default()
    }
}

#[test]
fn an_eager_message_lands_in_the_receive_posted_for_its_tag() {
    let mut mp = MsgPair::same(MsgConfig::default());
    let other = mp.recv(1, Some(0), Some(8), 4096);
    let r = mp.recv(1, Some(0), Some(7), 4096);
    let s = mp.send(0, 7, bytes(100, 1));
    mp.run();
    assert_eq!(mp.received(1), vec![(r, 7, bytes(100, 1), Ok(()))]);
    assert_eq!(mp.sent(0), vec![(s, MsgProtocol::Eager, Ok(()))]);
    assert_eq!(mp.m[0].stats().eager, 1);
    // The tag-8 receive is still waiting.
    assert!(!mp.received(1).iter().any(|(id, ..)| *id == other));
}

#[test]
fn a_message_that_comes_first_waits_in_the_unexpected_queue() {
    let mut mp = MsgPair::same(MsgConfig::default());
    mp.send(0, 3, bytes(2000, 2));
    mp.run();
    assert_eq!(mp.m[1].unexpected(), (1, 2000));
    let r = mp.recv(1, None, None, 4096);
    mp.run();
    assert_eq!(mp.received(1), vec![(r, 3, bytes(2000, 2), Ok(()))]);
    assert_eq!(mp.m[1].unexpected(), (0, 0));
    assert_eq!(mp.m[1].stats().unexpected, 1);
}

#[test]
fn each_rendezvous_protocol_moves_a_large_message_through_loss_duplication_and_reordering() {
    for (p, name) in [
        (Protocol::R3, MsgProtocol::R3),
        (Protocol::Rget, MsgProtocol::Rget),
        (Protocol::Rput, MsgProtocol::Rput),
    ] {
        let mut mp = MsgPair::same(with_rendezvous(p));
        mp.pair.set_filter(hostile(7, 5, 3, 10));
        let data = bytes(300_000, 9);
        let r = mp.recv(1, Some(0), Some(1), 1 << 20);
        let s = mp.send(0, 1, data.clone());
        mp.run();
        assert_eq!(mp.received(1), vec![(r, 1, data, Ok(()))], "{name:?}");
        assert_eq!(mp.sent(0), vec![(s, name, Ok(()))], "{name:?}");
        let st = mp.m[0].stats();
        assert_eq!(
            (st.r3, st.rget, st.rput),
            match name {
                MsgProtocol::R3 => (1, 0, 0),
                MsgProtocol::Rget => (0, 1, 0),
                _ => (0, 0, 1),
            }
        );
    }
}

#[test]
fn rendezvous_that_arrives_before_its_receive_waits_then_completes() {
    for p in [Protocol::R3, Protocol::Rget, Protocol::Rput] {
        let mut mp = MsgPair::same(with_rendezvous(p));
        let data = bytes(50_000, 4);
        let s = mp.send(0, 5, data.clone());
        mp.run();
        // Only the RTS went: the send waits for the receiver.
        assert!(mp.sent(0).is_empty(), "{p:?}");
        assert_eq!(mp.m[1].unexpected().0, 1);
        let r = mp.recv(1, None, Some(5), 1 << 20);
        mp.run();
        assert_eq!(mp.received(1), vec![(r, 5, data, Ok(()))]);
        assert_eq!(mp.sent(0).len(), 1);
        assert_eq!(mp.sent(0)[0].0, s);
    }
}

#[test]
fn a_failed_registration_makes_rget_and_rput_fall_back_to_r3() {
    // At the sender: the RTS already says R3.
    for p in [Protocol::Rget, Protocol::Rput] {
        let failing = MsgConfig {
            registration_failure: 1.0,
            ..with_rendezvous(p)
        };
        let mut mp = MsgPair::new(NicConfig::default(), failing, with_rendezvous(p));
        let data = bytes(40_000, 5);
        let r = mp.recv(1, Some(0), Some(2), 1 << 20);
        mp.send(0, 2, data.clone());
        mp.run();
        assert_eq!(mp.received(1), vec![(r, 2, data, Ok(()))]);
        assert_eq!(mp.sent(0)[0].1, MsgProtocol::R3);
        let st = mp.m[0].stats();
        assert_eq!((st.fallbacks, st.fallback_registration, st.r3), (1, 1, 1));
        assert_eq!(st.registration_failures, 1);
    }
    // At the receiver: the CTS says R3, and the sender follows.
    for p in [Protocol::Rget, Protocol::Rput] {
        let failing = MsgConfig {
            registration_failure: 1.0,
            ..with_rendezvous(p)
        };
        let mut mp = MsgPair::new(NicConfig::default(), with_rendezvous(p), failing);
        let data = bytes(40_000, 6);
        let r = mp.recv(1, Some(0), Some(2), 1 << 20);
        mp.send(0, 2, data.clone());
        mp.run();
        assert_eq!(mp.received(1), vec![(r, 2, data, Ok(()))], "{p:?}");
        assert_eq!(mp.sent(0)[0].1, MsgProtocol::R3, "{p:?}");
        assert_eq!(mp.m[1].stats().fallback_registration, 1);
        assert_eq!(mp.m[1].stats().fallbacks, 1);
        let st = mp.m[0].stats();
        assert_eq!((st.r3, st.rget, st.rput), (1, 0, 0));
    }
}

#[test]
fn messages_keep_mpi_order_per_source_and_tag_over_a_reordering_wire() {
    let mut mp = MsgPair::same(MsgConfig::default());
    mp.pair.set_filter(hostile(11, 3, 2, 30));
    // Sizes mix eager and rendezvous, so later small messages would
    // overtake earlier large ones without the sequence numbers.
    let sizes = [10_000usize, 10, 7000, 100, 20, 60_000, 1, 4000, 5001, 3];
    let mut sent = Vec::new();
    for (i, len) in sizes.iter().enumerate() {
        let tag = (i % 2) as u32;
        let d = bytes(*len, i as u8);
        sent.push((tag, d.clone()));
        mp.send(0, tag, d);
    }
    // Wildcard receives take messages in the order they were sent.
    let ids: Vec<RecvId> = (0..sizes.len())
        .map(|_| mp.recv(1, None, None, 1 << 20))
        .collect();
    mp.run();
    let got = mp.received(1);
    assert_eq!(got.len(), sizes.len());
    for (k, (id, tag, data, res)) in got.iter().enumerate() {
        let pos = ids.iter().position(|x| x == id).unwrap();
        assert_eq!(res, &Ok(()));
        assert_eq!((*tag, data), (sent[pos].0, &sent[pos].1), "receive {k}");
    }
    assert!(mp.pair.log.iter().any(|l| l.verdict != Verdict::Deliver));
}

#[test]
fn a_message_longer_than_its_receive_is_truncated_and_said_so() {
    for p in [Protocol::R3, Protocol::Rget, Protocol::Rput] {
        let mut mp = MsgPair::same(with_rendezvous(p));
        let data = bytes(30_000, 3);
        let r = mp.recv(1, None, None, 1000);
        mp.send(0, 0, data.clone());
        let e = mp.recv(1, None, None, 10);
        mp.send(0, 0, bytes(100, 1));
        mp.run();
        // Matched in order (the big one to the first receive); the small
        // eager one may finish first.
        let got = mp.received(1);
        let big = got.iter().find(|g| g.0 == r).expect("first receive done");
        assert!(big.2 == data[..1000], "{p:?}: the first 1000 bytes");
        assert_eq!(
            big.3,
            Err(MsgError::Truncated {
                len: 30_000,
                max: 1000
            })
        );
        let small = got.iter().find(|g| g.0 == e).expect("second receive done");
        assert!(small.2 == bytes(10, 1));
        // The sender's sends succeed all the same.
        assert!(mp.sent(0).iter().all(|s| s.2.is_ok()));
        assert_eq!(mp.m[1].stats().recvs_done, 2);
    }
}

#[test]
fn a_message_that_exactly_fills_its_receive_keeps_rput() {
    // RPUT cannot offer a buffer shorter than the message, so a message
    // longer than its receive goes R3; one of exactly the receive's size
    // fits and stays RPUT.
    let mut mp = MsgPair::same(with_rendezvous(Protocol::Rput));
    let data = bytes(30_000, 4);
    let r = mp.recv(1, None, None, 30_000);
    mp.send(0, 0, data.clone());
    mp.run();
    assert_eq!(mp.received(1), vec![(r, 0, data, Ok(()))]);
    assert_eq!(mp.sent(0)[0].1, MsgProtocol::Rput);
}

#[test]
fn low_credits_turn_eager_into_rendezvous_and_the_backlog_drains() {
    let msg = MsgConfig {
        vbufs_per_peer: 4,
        credit_preserve: 1,
        rendezvous: Protocol::R3,
        ..MsgConfig::default()
    };
    let mut mp = MsgPair::same(msg);
    for i in 0..40u8 {
        mp.send(0, 0, bytes(3000, i));
    }
    for _ in 0..40 {
        mp.recv(1, Some(0), Some(0), 4096);
    }
    mp.run();
    let got = mp.received(1);
    assert_eq!(got.len(), 40);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.2, bytes(3000, i as u8));
    }
    let st = mp.m[0].stats();
    assert!(st.fallback_credits > 0, "{st:?}");
    assert_eq!(st.eager + st.r3, 40);
    assert!(st.credit_stalls > 0, "{st:?}");
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), Some(4));
}

/// Two messengers whose credits need NOOPs: host copies make a receiver
/// re-post its vbufs after the ACKs that could have carried them left,
/// NOOPs are not sent early (threshold 100), and whatever does not go
/// eagerly goes R3, so every byte needs credits.
fn noop_pair() -> MsgPair {
    let nic = NicConfig {
        cost: CostModel {
            host_copy_ps_per_byte: 2000,
            ..CostModel::ZERO
        },
        ..NicConfig::default()
    };
    let msg = MsgConfig {
        vbufs_per_peer: 4,
        credit_preserve: 0,
        credit_notify_threshold: 100,
        rendezvous: Protocol::R3,
        ..MsgConfig::default()
    };
    MsgPair::new(nic, msg.clone(), msg)
}

/// A one-way stream needs NOOPs, and a lost NOOP must not starve the
/// sender.
#[test]
fn a_receiver_that_never_sends_keeps_the_sender_alive_with_noops() {
    let mut mp = noop_pair();
    let mut lost = 0;
    mp.pair.set_filter(move |w| match w.repr {
        Some(r) if r.kind_name() == "CREDIT" && lost < 3 => {
            lost += 1;
            Verdict::Drop
        }
        _ => Verdict::Deliver,
    });
    for i in 0..60u8 {
        mp.send(0, 9, bytes(2000, i));
    }
    for _ in 0..60 {
        mp.recv(1, Some(0), Some(9), 4096);
    }
    mp.run();
    assert_eq!(mp.received(1).len(), 60);
    assert_eq!(mp.sent(0).len(), 60);
    assert!(mp.m[1].stats().noops >= 4, "{:?}", mp.m[1].stats());
    assert!(mp.m[0].stats().credit_stalls > 0);
}

#[test]
fn a_silent_receiver_never_deadlocks_a_sender() {
    let msg = MsgConfig {
        vbufs_per_peer: 4,
        unexpected_bytes: 16 * 1024,
        ..MsgConfig::default()
    };
    let mut mp = MsgPair::same(msg);
    for i in 0..100u8 {
        mp.send(0, 1, bytes(1000 + i as usize * 100, i));
    }
    // The receiving application posts nothing for 5 ms.
    mp.run_until(Instant::ZERO + Duration::from_millis(5));
    let eager_done = mp.sent(0).len();
    assert!(eager_done > 0);
    // Unexpected eager bytes stay bounded: vbufs stop being re-posted, the
    // sender runs dry of credits and goes rendezvous (RTS only).
    assert!(mp.m[1].stats().unexpected_bytes_peak <= 16 * 1024 + 5000);
    assert!(mp.m[0].stats().fallback_credits > 0);
    for _ in 0..100 {
        mp.recv(1, Some(0), Some(1), 1 << 20);
    }
    mp.run();
    let got = mp.received(1);
    assert_eq!(got.len(), 100);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.2, bytes(1000 + i * 100, i as u8), "message {i} in order");
    }
    assert_eq!(mp.sent(0).len(), 100);
    assert!(mp.m[0].is_quiet() && mp.m[1].is_quiet());
}

#[test]
fn forged_chunks_and_controls_are_counted_not_trusted() {
    let mut mp = MsgPair::same(MsgConfig::default());
    let r = mp.recv(1, None, None, 4096);
    // A FIN and a CTS for messages that never existed.
    let now = mp.pair.now;
    for c in [
        udrma_nic::Control::Fin {
            protocol: Protocol::Rput,
            tag: 0,
            seq: 77,
        },
        udrma_nic::Control::Cts(udrma_proto::Rendezvous {
            protocol: Protocol::R3,
            tag: 0,
            length: 10,
            addr: 0,
            rkey: 0,
            seq: 99,
        }),
    ] {
        mp.pair.nics[0]
            .post(
                now,
                udrma_nic::WorkRequest::control(NodeAddr(1), c).endpoints(1, 1),
            )
            .unwrap();
    }
    mp.run();
    assert_eq!(mp.m[1].stats().bad_messages, 2, "the FIN and the CTS");
    assert_eq!(mp.m[0].stats().bad_messages, 0);
    let s = mp.send(0, 4, bytes(64, 1));
    mp.run();
    assert_eq!(mp.received(1), vec![(r, 4, bytes(64, 1), Ok(()))]);
    assert!(mp.sent(0).iter().any(|x| x.0 == s));
}

#[test]
fn a_peer_that_advertises_more_credits_than_vbufs_is_caught() {
    // h0's credit toward h1 starts full (every vbuf h1 posted). h1's NIC
    // then claims three re-posted vbufs it never had, on the next packet
    // it sends: h0 clamps the credit, counts the overflow, and its check
    // says so (clamping alone would hide a peer that over-advertises).
    let mut mp = MsgPair::same(MsgConfig::default());
    let r = mp.recv(0, Some(1), Some(1), 64);
    mp.pair.nics[1].advertise_credits(NodeAddr(0), 3);
    mp.send(1, 1, bytes(64, 2));
    mp.pair.run();
    let now = mp.pair.now;
    for (i, e) in std::mem::take(&mut mp.pair.events) {
        mp.m[i].handle_event(now, &mut mp.pair.nics[i], e);
    }
    assert_eq!(mp.m[0].stats().credit_overflow, 1);
    let vbufs = u32::from(MsgConfig::default().vbufs_per_peer);
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), Some(vbufs), "clamped");
    let err = mp.m[0].check().unwrap_err();
    assert!(err.contains("more credits than vbufs_per_peer"), "{err}");
    // The message itself still arrived.
    while let Some(e) = mp.m[0].poll_event() {
        mp.out.push((0, e));
    }
    assert_eq!(mp.received(0), vec![(r, 1, bytes(64, 2), Ok(()))]);
}

#[test]
fn an_older_credit_count_arriving_late_is_ignored() {
    // Credit counts are cumulative (mod 2^16): one that is behind the
    // newest seen (here 0xffff, one before the start) is a late copy and
    // changes nothing; taking it as 65,535 new credits would overflow.
    let mut mp = MsgPair::same(MsgConfig::default());
    let r = mp.recv(0, Some(1), Some(1), 64);
    mp.pair.nics[1].advertise_credits(NodeAddr(0), 0xffff);
    mp.send(1, 1, bytes(64, 5));
    mp.run();
    assert_eq!(mp.m[0].stats().credit_overflow, 0);
    let vbufs = u32::from(MsgConfig::default().vbufs_per_peer);
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), Some(vbufs));
    assert_eq!(mp.received(0), vec![(r, 1, bytes(64, 5), Ok(()))]);
}

/// 8 vbufs, and at most 4000 B of unexpected messages before the
/// receiver holds vbufs back.
fn slow_reader() -> MsgConfig {
    MsgConfig {
        vbufs_per_peer: 8,
        unexpected_bytes: 4000,
        ..MsgConfig::default()
    }
}

#[test]
fn an_application_that_falls_behind_holds_back_vbufs_then_catches_up() {
    // h1 posts no receive while 20 messages of 1000 B arrive: past 4000
    // unexpected bytes it stops re-posting vbufs, so the sender runs out
    // of credits and announces the rest by rendezvous (no data until a
    // receive matches). Once the application posts its receives, the
    // held-back vbufs are re-posted, every message arrives in order, and
    // no credit ever passed the vbuf count.
    let mut mp = MsgPair::same(slow_reader());
    let sends: Vec<_> = (0..20).map(|i| mp.send(0, 3, bytes(1000, i))).collect();
    mp.run();
    let held = mp.m[1].stats().reposts_deferred;
    assert!(held > 0, "vbufs held back");
    let (waiting, bytes_waiting) = mp.m[1].unexpected();
    assert_eq!(waiting, 20, "every message waits for its receive");
    assert!(
        bytes_waiting > 4000 && bytes_waiting < 20_000,
        "{bytes_waiting} B of eager data"
    );
    assert!(mp.m[0].stats().fallbacks > 0, "the sender went rendezvous");
    let recvs: Vec<_> = (0..20)
        .map(|_| mp.recv(1, Some(0), Some(3), 1000))
        .collect();
    mp.run();
    let got = mp.received(1);
    assert_eq!(got.len(), 20);
    for (i, (id, tag, data, result)) in got.iter().enumerate() {
        assert_eq!((*id, *tag), (recvs[i], 3));
        assert_eq!(*data, bytes(1000, i as u8), "message {i}");
        assert_eq!(*result, Ok(()));
    }
    assert_eq!(mp.sent(0).len(), sends.len());
    assert_eq!(mp.m[1].unexpected(), (0, 0));
    assert_eq!(mp.m[0].stats().credit_overflow, 0);
    // The held-back vbufs were re-posted and advertised: the sender has
    // all its credits again, and small messages go eager once more.
    let vbufs = u32::from(MsgConfig::default().vbufs_per_peer.min(8));
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), Some(vbufs));
    let eager = mp.m[0].stats().eager;
    for i in 0..5 {
        mp.recv(1, Some(0), Some(4), 1000);
        mp.send(0, 4, bytes(100, 50 + i));
    }
    mp.run();
    assert_eq!(mp.m[0].stats().eager, eager + 5, "eager again");
}

// ---------------------------------------------------------------- property

/// One thing the two hosts' applications do, in order, with time passing
/// between them: sends and receives interleave, so messages meet posted
/// receives, wait as unexpected, or find their sender short of credits
/// while control messages (credit updates, NOOPs, rendezvous RTS/CTS/FIN)
/// are in flight.
#[derive(Debug, Clone)]
enum Act {
    /// Host `from` (0 or 1) sends `len` bytes with `tag`.
    Send { from: bool, tag: u32, len: usize },
    /// Host `at` posts its next receive (if a message is still due to it
    /// that no receive covers).
    Recv { at: bool },
    /// Time passes.
    Wait { us: u64 },
}

#[derive(Debug, Clone)]
struct Plan {
    acts: Vec<Act>,
    wildcard: bool,
    rendezvous: u8,
    vbufs: u16,
    loss: u64,
    dup: u64,
    reorder: u64,
    seed: u64,
}

fn plan() -> impl Strategy<Value = Plan> {
    let size = prop::sample::select(vec![0usize, 1, 100, 4000, 4984, 5000, 5001, 9000, 70_000]);
    let act = prop_oneof![
        4 => (any::<bool>(), 0u32..3, size).prop_map(|(from, tag, len)| Act::Send { from, tag, len }),
        3 => any::<bool>().prop_map(|at| Act::Recv { at }),
        2 => (1u64..200).prop_map(|us| Act::Wait { us }),
    ];
    (
        prop::collection::vec(act, 1..40),
        any::<bool>(),
        0u8..3,
        2u16..8,
        0u64..8,
        0u64..5,
        0u64..20,
        any::<u64>(),
    )
        .prop_map(
            |(acts, wildcard, rendezvous, vbufs, loss, dup, reorder, seed)| Plan {
                acts,
                wildcard,
                rendezvous,
                vbufs,
                loss,
                dup,
                reorder,
                seed,
            },
        )
}

proptest! {
    // 192 cases, or `PROPTEST_CASES` (a long hunt, or a quick run under
    // cargo-mutants).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(192),
        ..ProptestConfig::default()
    })]

    /// Invariant 5 of docs/design.md §8 (credits never negative or above the vbufs
    /// posted, no vbuf overflow, MPI order per (source, tag)) plus
    /// exactly-once delivery of the right bytes and liveness, for random
    /// interleavings of sends, receives and waits in both directions over
    /// a damaged wire. The messengers check their credit bounds after
    /// every event (`MsgPair::settle`).
    #[test]
    fn credits_order_and_delivery_hold_for_random_traffic(p in plan()) {
        let msg = MsgConfig {
            vbufs_per_peer: p.vbufs,
            credit_preserve: 1,
            credit_notify_threshold: 2,
            rendezvous: [Protocol::R3, Protocol::Rget, Protocol::Rput][p.rendezvous as usize],
            seed: p.seed,
            ..MsgConfig::default()
        };
        let nic = NicConfig { max_retries: 30, ..NicConfig::default() };
        let mut mp = MsgPair::new(nic, msg.clone(), msg);
        mp.pair.set_filter(hostile(p.seed, p.loss, p.dup, p.reorder));
        // What each side must receive, in sending order: the tags are
        // known up front, so a receive posted before its message is sent
        // can name the tag of the message it will take.
        let mut expect: [Vec<(u32, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
        for (i, a) in p.acts.iter().enumerate() {
            if let Act::Send { from, tag, len } = a {
                expect[1 - usize::from(*from)].push((*tag, bytes(*len, i as u8)));
            }
        }
        let mut posted: [Vec<(RecvId, Option<u32>)>; 2] = [Vec::new(), Vec::new()];
        let post = |mp: &mut MsgPair, posted: &mut [Vec<(RecvId, Option<u32>)>; 2], at: usize| {
            let k = posted[at].len();
            if k < expect[at].len() {
                let t = if p.wildcard { None } else { Some(expect[at][k].0) };
                let id = mp.recv(at, Some(1 - at as u32), t, 1 << 20);
                posted[at].push((id, t));
            }
        };
        for (i, a) in p.acts.iter().enumerate() {
            match a {
                Act::Send { from, tag, len } => {
                    mp.send(usize::from(*from), *tag, bytes(*len, i as u8));
                }
                Act::Recv { at } => post(&mut mp, &mut posted, usize::from(*at)),
                Act::Wait { us } => {
                    let t = mp.pair.now + Duration::from_micros(*us);
                    mp.run_until(t);
                }
            }
        }
        for at in 0..2 {
            while posted[at].len() < expect[at].len() {
                post(&mut mp, &mut posted, at);
            }
        }
        mp.run();
        for at in 0..2 {
            let got = mp.received(at);
            prop_assert_eq!(got.len(), expect[at].len(), "host {} received", at);
            // Per tag, the k-th message sent is the k-th received.
            for tag in 0..3u32 {
                let want: Vec<&Vec<u8>> = expect[at].iter().filter(|(t, _)| *t == tag).map(|(_, d)| d).collect();
                // In posting order of the receives that took them.
                let mut have: Vec<(usize, &Vec<u8>)> = got
                    .iter()
                    .filter(|g| g.1 == tag)
                    .map(|g| (posted[at].iter().position(|(id, _)| *id == g.0).expect("ours"), &g.2))
                    .collect();
                have.sort_by_key(|(k, _)| *k);
                let have: Vec<&Vec<u8>> = have.into_iter().map(|(_, d)| d).collect();
                let sizes = |v: &[&Vec<u8>]| v.iter().map(|d| d.len()).collect::<Vec<_>>();
                prop_assert!(want == have, "host {} tag {}: sent sizes {:?}, received {:?}", at, tag, sizes(&want), sizes(&have));
            }
            prop_assert!(got.iter().all(|g| g.3.is_ok()));
            prop_assert!(mp.sent(1 - at).iter().all(|s| s.2.is_ok()));
        }
        // Every credit comes back once the run is quiet, with nothing
        // more sent by either application (docs/testing.md finding 8: a
        // count that rode on a lost ACK is repaired by the peer's echo).
        for at in 0..2 {
            prop_assert_eq!(mp.m[at].remote_credit(NodeAddr(1 - at as u32)), Some(u32::from(p.vbufs)));
        }
    }
}

#[test]
fn vbufs_are_held_back_only_past_the_unexpected_limit_and_return_at_it() {
    // 1000 B messages against a 4000 B limit. A message's vbuf is held
    // back when, as it arrives, more than the limit already waits
    // unexpected: the fifth finds exactly 4000 B waiting and its vbuf is
    // re-posted; the sixth finds 5000 B and its vbuf is held back.
    let mut mp = MsgPair::same(slow_reader());
    for i in 0..5 {
        mp.send(0, 3, bytes(1000, i));
    }
    mp.run();
    assert_eq!(mp.m[1].unexpected(), (5, 5000));
    assert_eq!(mp.m[1].stats().reposts_deferred, 0, "at the limit");
    mp.send(0, 3, bytes(1000, 5));
    mp.run();
    assert_eq!(mp.m[1].stats().reposts_deferred, 1, "past the limit");
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), Some(7));
    // Two receives take the waiting bytes back to the limit exactly: the
    // held-back vbuf returns and the sender has all 8 credits again.
    for _ in 0..2 {
        mp.recv(1, Some(0), Some(3), 1000);
    }
    mp.run();
    assert_eq!(mp.m[1].unexpected(), (4, 4000));
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), Some(8));
}

#[test]
fn credits_from_a_host_that_is_no_peer_are_counted_and_ignored() {
    let mut mp = MsgPair::same(MsgConfig::default());
    let before = mp.m[0].remote_credit(NodeAddr(1));
    let now = mp.pair.now;
    mp.m[0].handle_event(
        now,
        &mut mp.pair.nics[0],
        udrma_nic::Event::Credits {
            from: NodeAddr(9),
            cumulative: 5,
            at: now,
        },
    );
    assert_eq!(mp.m[0].stats().bad_messages, 1);
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), before);
    assert_eq!(mp.m[0].remote_credit(NodeAddr(9)), None);
}

#[test]
fn noop_repeats_start_afresh_once_the_peer_has_spoken() {
    // A receiver repeats a NOOP (it is not acknowledged) with backoff, at
    // most NOOP_REPEATS times while its peer stays silent. When the peer
    // speaks again the count starts afresh, so the next silence gets its
    // repeats too (a lost NOOP must not leave the peer without credits).
    let mut mp = noop_pair();
    let exchange = |mp: &mut MsgPair, first: u8| {
        for i in first..first + 4 {
            mp.recv(1, Some(0), Some(9), 4096);
            mp.send(0, 9, bytes(2000, i));
        }
        mp.run();
        mp.m[1].stats().noops
    };
    let repeats = u64::from(udrma_host::messaging::NOOP_REPEATS);
    let first = exchange(&mut mp, 0);
    assert_eq!(first, repeats, "one NOOP, repeated while h0 is silent");
    let second = exchange(&mut mp, 4) - first;
    assert_eq!(second, repeats, "after h0 spoke, the repeats start afresh");
    assert_eq!(mp.received(1).len(), 8);
}

/// A wire that loses every SEND host `h` sends (its chunks), and nothing
/// else.
fn lose_sends_from(h: u32) -> impl FnMut(&Wire<'_>) -> Verdict {
    move |w| {
        if w.from == NodeAddr(h) && w.repr.is_some_and(|r| r.kind_name().starts_with("SEND")) {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    }
}

/// A chunk as a messenger puts it in a vbuf: kind, index, sequence number,
/// tag, total length, then `data`.
fn chunk(kind: u8, index: u16, seq: u32, tag: u32, total: u32, data: &[u8]) -> Vec<u8> {
    let mut b = vec![kind, 0];
    b.extend_from_slice(&index.to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&tag.to_be_bytes());
    b.extend_from_slice(&total.to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// h0's NIC SENDs `bytes` into one of h1's vbufs for h0, behind h0's
/// messenger's back (so h0's credit view is off afterwards: checks off).
fn forge(mp: &mut MsgPair, bytes: &[u8]) {
    mp.checks = false;
    let base = 0x7000_0000 + 0x10_0000 * mp.pair.log.len() as u64;
    let nic = &mut mp.pair.nics[0];
    let key = nic.register(base, bytes.len().max(1), udrma_nic::Access::ALL);
    nic.memory_mut().region_mut(key).unwrap().bytes[..bytes.len()].copy_from_slice(bytes);
    let now = mp.pair.now;
    let wr =
        udrma_nic::WorkRequest::send(NodeAddr(1), key, base, bytes.len() as u64).endpoints(2, 1);
    mp.pair.nics[0].post(now, wr).unwrap();
    mp.run();
}

#[test]
fn forged_chunks_are_counted_one_reason_at_a_time_and_deliver_nothing() {
    use udrma_host::messaging::{CHUNK_EAGER, CHUNK_R3};
    let d = MsgConfig::default();
    let cap = (d.vbuf_size as usize - udrma_host::messaging::CHUNK_HEADER) as u32;
    // Eager messages of up to two chunks.
    let cfg = MsgConfig {
        vbufs_per_peer: 2,
        credit_preserve: 1,
        rendezvous_threshold: 2 * u64::from(cap),
        ..d
    };
    let mut mp = MsgPair::same(cfg);
    // Message 0 arrives honestly, so sequence 0 is behind h1 from now on.
    mp.recv(1, Some(0), Some(5), 64);
    mp.send(0, 5, bytes(10, 1));
    mp.run();
    let two = vec![7u8; 2 * cap as usize];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("shorter than a chunk header", vec![CHUNK_EAGER; 9]),
        (
            "data shorter than its total says",
            chunk(CHUNK_EAGER, 0, 1, 5, 100, &[1; 50]),
        ),
        (
            "an index past the message's chunks",
            chunk(CHUNK_EAGER, 1, 1, 5, cap, &[]),
        ),
        (
            "eager larger than the eager limit",
            chunk(CHUNK_EAGER, 0, 1, 5, 2 * cap + 1, &two[..cap as usize]),
        ),
        (
            "a sequence number already delivered",
            chunk(CHUNK_EAGER, 0, 0, 5, 4, &[1; 4]),
        ),
        (
            "an R3 chunk for no receive",
            chunk(CHUNK_R3, 0, 1, 5, 4, &[1; 4]),
        ),
        ("an unknown kind", chunk(9, 0, 1, 5, 4, &[1; 4])),
    ];
    let mut bad = mp.m[1].stats().bad_messages;
    assert_eq!(bad, 0);
    for (what, c) in cases {
        forge(&mut mp, &c);
        bad += 1;
        assert_eq!(mp.m[1].stats().bad_messages, bad, "{what}");
    }
    // Two halves of one two-chunk eager message (sequence 1): the first
    // half twice (the copy is refused), then the second half claiming
    // another tag (refused).
    let half = |index: u16, seq, tag, total| {
        let at = usize::from(index) * cap as usize;
        chunk(
            CHUNK_EAGER,
            index,
            seq,
            tag,
            total,
            &two[at..at + cap as usize],
        )
    };
    forge(&mut mp, &half(0, 1, 5, 2 * cap));
    assert_eq!(mp.m[1].stats().bad_messages, bad, "the first half is fine");
    forge(&mut mp, &half(0, 1, 5, 2 * cap));
    bad += 1;
    assert_eq!(mp.m[1].stats().bad_messages, bad, "a copy");
    forge(&mut mp, &half(1, 1, 6, 2 * cap));
    bad += 1;
    assert_eq!(mp.m[1].stats().bad_messages, bad, "a changed tag");
    // Sequence 2: its second half first, then a first half claiming a
    // length one byte shorter (its own length still fits): refused.
    forge(&mut mp, &half(1, 2, 5, 2 * cap));
    assert_eq!(mp.m[1].stats().bad_messages, bad, "two assembling");
    forge(&mut mp, &half(0, 2, 5, 2 * cap - 1));
    bad += 1;
    assert_eq!(mp.m[1].stats().bad_messages, bad, "a changed length");
    // With two vbufs a peer can have at most two messages half-assembled:
    // a third is refused.
    forge(&mut mp, &half(0, 3, 5, 2 * cap));
    assert_eq!(mp.m[1].stats().bad_messages, bad + 1, "a third");
    assert_eq!(mp.received(1).len(), 1, "only the honest message");
}

/// h0's NIC sends control `c` to h1's messenger, behind h0's messenger.
fn forge_control(mp: &mut MsgPair, c: udrma_nic::Control) {
    let now = mp.pair.now;
    mp.pair.nics[0]
        .post(
            now,
            udrma_nic::WorkRequest::control(NodeAddr(1), c).endpoints(1, 1),
        )
        .unwrap();
    mp.run();
}

#[test]
fn forged_controls_are_counted_one_reason_at_a_time() {
    use udrma_nic::Control;
    use udrma_proto::Rendezvous;
    let rdv = |protocol, length, seq| Rendezvous {
        protocol,
        tag: 3,
        length,
        addr: 0,
        rkey: 0,
        seq,
    };
    let mut mp = MsgPair::same(with_rendezvous(Protocol::Rput));
    // h1 has a rendezvous send waiting for h0's CTS (message 0 of h1),
    // and h0 none of its own.
    let waiting = mp.send(1, 3, bytes(70_000, 1));
    mp.run();
    let mut bad = 0;
    let cases: Vec<(&str, Control)> = vec![
        (
            "an RTS of an unknown protocol",
            Control::Rts(rdv(Protocol::from(0x7f), 10, 0)),
        ),
        (
            "an RTS longer than 4 GiB",
            Control::Rts(rdv(Protocol::R3, 1 << 32, 0)),
        ),
        (
            "a CTS of the wrong protocol",
            Control::Cts(rdv(Protocol::Rget, 70_000, 0)),
        ),
        (
            "a FIN (RGET) for a send that is RPUT",
            Control::Fin {
                protocol: Protocol::Rget,
                tag: 3,
                seq: 0,
            },
        ),
        (
            "a FIN (RPUT) for no receive",
            Control::Fin {
                protocol: Protocol::Rput,
                tag: 3,
                seq: 0,
            },
        ),
        (
            "a FIN of R3, which has none",
            Control::Fin {
                protocol: Protocol::R3,
                tag: 3,
                seq: 0,
            },
        ),
    ];
    for (what, c) in cases {
        forge_control(&mut mp, c);
        bad += 1;
        assert_eq!(mp.m[1].stats().bad_messages, bad, "{what}");
    }
    // The honest exchange still completes, once.
    mp.recv(0, Some(1), Some(3), 1 << 20);
    mp.run();
    assert_eq!(mp.received(0).len(), 1);
    assert_eq!(mp.received(0)[0].2, bytes(70_000, 1));
    assert!(mp.sent(1).iter().any(|s| s.0 == waiting && s.2.is_ok()));
    assert_eq!(mp.m[1].stats().bad_messages, bad);
}

#[test]
fn a_receive_whose_read_cannot_be_posted_fails_once_with_the_reason() {
    // h1's NIC holds one request at a time, and h1 has a SEND of its own
    // outstanding (the wire loses it for now), so the RDMA READ an RGET
    // receive must post is refused: the receive completes once, with the
    // reason.
    let msg = MsgConfig {
        rendezvous: Protocol::Rget,
        ..MsgConfig::default()
    };
    let small = NicConfig {
        command_queue_capacity: 1,
        ..NicConfig::default()
    };
    let mut mp = MsgPair::with_nics(NicConfig::default(), small, msg.clone(), msg);
    mp.pair.set_filter(lose_sends_from(1));
    mp.send(1, 1, bytes(100, 8));
    let r = mp.recv(1, Some(0), Some(2), 1 << 20);
    mp.send(0, 2, bytes(20_000, 9));
    mp.run_until(Instant::ZERO + Duration::from_micros(300));
    let got = mp.received(1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, r);
    assert!(
        matches!(&got[0].3, Err(MsgError::Refused(why)) if why.contains("queue full")),
        "{:?}",
        got[0].3
    );
    assert_eq!(mp.m[1].stats().failed, 1);
}

#[test]
fn forged_envelopes_out_of_window_twice_or_from_strangers_are_counted() {
    use udrma_nic::Control;
    use udrma_proto::Rendezvous;
    let rts = |seq, length| {
        Control::Rts(Rendezvous {
            protocol: Protocol::R3,
            tag: 3,
            length,
            addr: 0,
            rkey: 0,
            seq,
        })
    };
    let mut mp = MsgPair::same(with_rendezvous(Protocol::R3));
    // Far ahead of anything h0 could have sent.
    forge_control(&mut mp, rts(100_000, 10));
    assert_eq!(mp.m[1].stats().out_of_window, 1);
    // Message 5 twice while 0-4 are missing: the copy is refused.
    forge_control(&mut mp, rts(5, 10));
    assert_eq!(mp.m[1].stats().bad_messages, 0);
    forge_control(&mut mp, rts(5, 10));
    assert_eq!(mp.m[1].stats().bad_messages, 1);
    // Exactly 4 GiB - 1 is a length an envelope may carry.
    forge_control(&mut mp, rts(6, u64::from(u32::MAX)));
    assert_eq!(mp.m[1].stats().bad_messages, 1);
    // A control from a host that is no peer.
    let now = mp.pair.now;
    mp.m[1].handle_event(
        now,
        &mut mp.pair.nics[1],
        udrma_nic::Event::Control {
            from: NodeAddr(9),
            src_ep: 10,
            dst_ep: 2,
            control: rts(0, 10),
            at: now,
        },
    );
    assert_eq!(mp.m[1].stats().bad_messages, 2);
}

#[test]
fn forged_r3_chunks_for_a_receive_in_progress_are_refused() {
    use udrma_host::messaging::CHUNK_R3;
    // h0's R3 message 0 (two chunks) is matched at h1, but its chunks are
    // lost on the wire for now, so h1's receive waits for them.
    let mut mp = MsgPair::same(with_rendezvous(Protocol::R3));
    // (still losing h0's SENDs, the message ids of those lost)
    let lost: std::rc::Rc<std::cell::RefCell<(bool, Vec<u32>)>> = Default::default();
    let l = lost.clone();
    mp.pair.set_filter(move |w| {
        let Some(r) = w.repr else {
            return Verdict::Deliver;
        };
        let mut l = l.borrow_mut();
        let send = w.from == NodeAddr(0) && r.kind_name().starts_with("SEND");
        if send && l.0 {
            l.1.push(r.msg_id);
        }
        if send && l.1.contains(&r.msg_id) {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    lost.borrow_mut().0 = true;
    let total = 10_000u32;
    mp.recv(1, Some(0), Some(3), 1 << 20);
    mp.send(0, 3, bytes(total as usize, 2));
    mp.run_until(Instant::ZERO + Duration::from_micros(50));
    // From now on only the real chunks (and their retransmissions) are
    // lost; the forged SENDs get through.
    lost.borrow_mut().0 = false;
    assert!(!lost.borrow().1.is_empty(), "the real chunks were sent");
    let cap = MsgConfig::default().vbuf_size as usize - udrma_host::messaging::CHUNK_HEADER;
    let before = mp.m[1].stats().bad_messages;
    // The wrong length; then a good first chunk, and a copy of it.
    forge(&mut mp, &chunk(CHUNK_R3, 0, 0, 3, total - 1, &vec![0; cap]));
    assert_eq!(mp.m[1].stats().bad_messages, before + 1, "wrong length");
    forge(&mut mp, &chunk(CHUNK_R3, 0, 0, 3, total, &vec![0; cap]));
    assert_eq!(mp.m[1].stats().bad_messages, before + 1, "a good chunk");
    forge(&mut mp, &chunk(CHUNK_R3, 0, 0, 3, total, &vec![0; cap]));
    assert_eq!(mp.m[1].stats().bad_messages, before + 2, "a copy");
    // A FIN (RPUT) for this receive, which is R3.
    forge_control(
        &mut mp,
        udrma_nic::Control::Fin {
            protocol: Protocol::Rput,
            tag: 3,
            seq: 0,
        },
    );
    assert_eq!(
        mp.m[1].stats().bad_messages,
        before + 3,
        "FIN (RPUT) for R3"
    );
}

#[test]
fn a_cts_or_fin_that_does_not_fit_the_sends_state_is_refused() {
    use udrma_nic::Control;
    use udrma_proto::Rendezvous;
    let cts = |protocol, seq| {
        Control::Cts(Rendezvous {
            protocol,
            tag: 3,
            length: 70_000,
            addr: 0x1000,
            rkey: 1,
            seq,
        })
    };
    // An RGET send of h1's waits for h0 to read it: a CTS offering RPUT
    // does not fit it.
    let mut mp = MsgPair::same(with_rendezvous(Protocol::Rget));
    mp.send(1, 3, bytes(70_000, 1));
    mp.run();
    forge_control(&mut mp, cts(Protocol::Rput, 0));
    assert_eq!(mp.m[1].stats().bad_messages, 1, "RPUT offered to RGET");
    // A FIN (RGET) for a send h1 never made.
    forge_control(
        &mut mp,
        Control::Fin {
            protocol: Protocol::Rget,
            tag: 3,
            seq: 999,
        },
    );
    assert_eq!(mp.m[1].stats().bad_messages, 2, "FIN for no send");
    mp.recv(0, Some(1), Some(3), 1 << 20);
    mp.run();
    assert_eq!(mp.received(0).len(), 1);

    // An R3 send of h1's past its CTS (sending chunks, which the wire
    // loses for now): a second CTS does not fit it.
    let mut mp = MsgPair::same(with_rendezvous(Protocol::R3));
    mp.pair.set_filter(lose_sends_from(1));
    mp.recv(0, Some(1), Some(3), 1 << 20);
    mp.send(1, 3, bytes(70_000, 2));
    mp.run_until(Instant::ZERO + Duration::from_micros(30));
    let before = mp.m[1].stats().bad_messages;
    let now = mp.pair.now;
    mp.pair.nics[0]
        .post(
            now,
            udrma_nic::WorkRequest::control(NodeAddr(1), cts(Protocol::R3, 0)).endpoints(1, 1),
        )
        .unwrap();
    mp.run_until(mp.pair.now + Duration::from_micros(5));
    assert_eq!(mp.m[1].stats().bad_messages, before + 1, "a second CTS");
}

/// docs/testing.md finding 8: a credit count that rode only on an answer
/// the wire lost. h0 sends A and h1 sends B at the same moment; the wire
/// holds back h1's answers to A (so h0 sends A again at its timeout) and B
/// itself. h1 re-posts A's vbuf; the one packet that carries the new count
/// is h1's answer to the needless copy of A, and the wire loses it. h0 then
/// has all it needs (the held-back answers arrive) and h1 sends nothing of
/// its own accord: its count left on a packet, so its messenger owes no
/// NOOP. B reaches h0 late, and h0's answers to it show h1 that h0 never
/// saw the count; h1's engine sends it again, once. Before the echo h0's
/// view stayed a vbuf short ("left: Some(31), right: Some(32)") until
/// h1's application happened to send again.
/// Two hosts that keep sending to each other echo each other's credit
/// counts on their own packets, news and echo in turn, so every count is
/// shown back within a round trip and a lossless exchange draws no
/// repair NOOP at all.
#[test]
fn a_busy_two_way_exchange_draws_no_credit_repair() {
    let mut mp = MsgPair::same(MsgConfig {
        vbufs_per_peer: 4,
        ..MsgConfig::default()
    });
    for i in 0..40u8 {
        mp.send(0, 0, bytes(200, i));
        mp.send(1, 0, bytes(200, i));
    }
    for _ in 0..40 {
        mp.recv(1, Some(0), Some(0), 4096);
        mp.recv(0, Some(1), Some(0), 4096);
    }
    mp.run();
    assert_eq!((mp.received(0).len(), mp.received(1).len()), (40, 40));
    let repairs = |h: usize| mp.pair.nics[h].stats().credit_repairs;
    assert_eq!((repairs(0), repairs(1)), (0, 0));
    assert_eq!(mp.m[0].remote_credit(NodeAddr(1)), Some(4));
    assert_eq!(mp.m[1].remote_credit(NodeAddr(0)), Some(4));
}

/// The story below, on a wire that also loses every NOOP from h0 when
/// `lose_echoes`; returns the pair once quiet.
fn credit_lost_with_an_answer(lose_echoes: bool) -> MsgPair {
    let msg = MsgConfig {
        noop_interval: Duration::from_millis(5),
        ..MsgConfig::default()
    };
    // h1 waits longer before sending B again than the wire holds it.
    let patient = NicConfig {
        rto_initial: Duration::from_millis(1),
        ..NicConfig::default()
    };
    let mut mp = MsgPair::with_nics(NicConfig::default(), patient, msg.clone(), msg);
    let (mut lost, mut held) = (false, false);
    mp.pair.set_filter(move |w| {
        let Some(r) = w.repr else {
            return Verdict::Deliver;
        };
        if w.from == NodeAddr(0) {
            return if lose_echoes && r.kind_name() == "CREDIT" {
                Verdict::Drop
            } else {
                Verdict::Deliver
            };
        }
        let early = w.at.as_ps() < 50_000_000;
        match r.kind_name().as_str() {
            _ if r.flags.contains(udrma_proto::Flags::CREDITS_VALID) && !lost => {
                lost = true;
                Verdict::Drop
            }
            "ACK" | "COMPLETION" if early => Verdict::Delay(Duration::from_micros(200)),
            "SEND_ONLY" if !held => {
                held = true;
                Verdict::Delay(Duration::from_micros(150))
            }
            _ => Verdict::Deliver,
        }
    });
    mp.recv(1, Some(0), Some(1), 64);
    mp.recv(0, Some(1), Some(2), 64);
    mp.send(0, 1, bytes(64, 1));
    mp.send(1, 2, bytes(64, 2));
    mp.run();
    assert_eq!(mp.received(0).len(), 1);
    assert_eq!(mp.received(1).len(), 1);
    mp
}

/// NOOPs h1 sent (repairs: its messenger sends none here).
fn noops_from_h1(mp: &MsgPair) -> usize {
    mp.pair
        .log
        .iter()
        .filter(|l| l.from == NodeAddr(1) && l.kind == "CREDIT")
        .count()
}

#[test]
fn a_credit_count_lost_with_an_answer_is_repaired_by_the_peers_echo() {
    let mp = credit_lost_with_an_answer(false);
    let dropped: Vec<String> = mp
        .pair
        .log
        .iter()
        .filter(|l| l.verdict == Verdict::Drop)
        .map(|l| l.kind.clone())
        .collect();
    assert_eq!(dropped, ["ACK"], "h1's answer to the copy of A");
    assert_eq!(mp.m[1].stats().noops, 0, "h1's messenger sent no NOOP");
    assert_eq!(
        mp.m[0].remote_credit(NodeAddr(1)),
        Some(u32::from(MsgConfig::default().vbufs_per_peer)),
        "h0 sees every vbuf of h1's again"
    );
    // The first NOOP repaired it and asked for an echo (ACK_REQ); h0's
    // one NOOP back showed the count, so h1 repaired it once and the link
    // fell quiet (before the echo was asked for, h1 could not tell and
    // repeated it CREDIT_REPAIRS times, a doubled timeout apart).
    assert_eq!(mp.pair.nics[1].stats().credit_repairs, 1);
    assert_eq!(noops_from_h1(&mp), 1, "one repair");
}

/// When no echo comes back (the wire loses them), the repair is repeated
/// exactly `CREDIT_REPAIRS` times, each check a doubled retransmit
/// timeout after the last, never more than `rto_max` apart.
#[test]
fn an_unanswered_credit_repair_stops_after_its_budget() {
    let mp = credit_lost_with_an_answer(true);
    let repairs = udrma_nic::nic::CREDIT_REPAIRS;
    assert_eq!(mp.pair.nics[1].stats().credit_repairs, u64::from(repairs));
    assert_eq!(noops_from_h1(&mp), repairs as usize);
    let at: Vec<u64> = mp
        .pair
        .log
        .iter()
        .filter(|l| l.from == NodeAddr(1) && l.kind == "CREDIT")
        .map(|l| l.at.as_ps())
        .collect();
    let gaps: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    let rto_max = NicConfig::default().rto_max.as_ps();
    assert!(gaps.iter().all(|g| *g <= rto_max), "{gaps:?}");
    assert!(gaps.contains(&rto_max), "the cap is reached: {gaps:?}");
}
