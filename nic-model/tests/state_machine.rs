//! A proptest state machine over a `Pair`: random posts (WRITE,
//! WRITE-with-notify, READ, SEND, and WRITEs that must be refused), random
//! fault plans (drop, duplicate, delay the next datagrams), time advances,
//! hostile datagrams and buffer reuse. After every step it checks the
//! invariants of docs/design.md §8:
//!
//! 1. every request completes at most once (and, once the run drains,
//!    exactly once);
//! 2. after a successful WRITE the receiver's bytes equal the sender's,
//!    after a READ the requester's equal the responder's;
//! 3. no byte changes outside the ranges of accepted WRITEs and SENDs (a
//!    guard region without remote rights, never-targeted slots, and the
//!    targets of refused WRITEs stay as they were);
//! 4. no write lands after completion: a completed WRITE's target, reused
//!    by the host for new data, keeps the new data whatever late copies
//!    arrive (tombstones on);
//! 6. registry, escape channel, OP table, tombstones, transmit queue and
//!    request table never pass their limits.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use udrma_nic::pair::{Pair, Verdict};
use udrma_nic::{
    Access, AckMode, Duration, Event, MrKey, NicConfig, RegistrationMode, RetransmitMode, WcError,
    WorkRequest, WrId, WrKind,
};
use udrma_proto::NodeAddr;

const SLOT: u64 = 16 * 1024;
const SLOTS: u64 = 48;
const MAX_LEN: u32 = 12 * 1024;

const SRC: u64 = 0x1000; // h0: WRITE/SEND sources
const RBUF: u64 = 0x80_0000; // h0: READ destinations
const DST: u64 = 0x10_0000; // h1: WRITE targets
const RSRC: u64 = 0x20_0000; // h1: READ sources
const RECV: u64 = 0x30_0000; // h1: SEND receive buffers
const GUARD: u64 = 0x40_0000; // h1: no remote rights at all

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[1] ^ seed)
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    Pass,
    Drop,
    Duplicate(u32),
    Delay(u64),
}

#[derive(Debug, Clone)]
enum Step {
    Write {
        len: u32,
        notify: bool,
    },
    Read {
        len: u32,
    },
    Send {
        len: u32,
    },
    /// A WRITE with a bad rkey (0), out of bounds (1) or into the guard
    /// region (2): it must fail and write nothing.
    BadWrite {
        how: u8,
    },
    Faults(Vec<Fault>),
    Advance {
        us: u32,
    },
    Garbage {
        from: u8,
        bytes: Vec<u8>,
        reseal_unknown: bool,
    },
    Reuse,
}

#[derive(Debug, Clone)]
struct Model {
    registration: RegistrationMode,
    ack: AckMode,
    retransmit: RetransmitMode,
    posts: u64,
}

fn step_strategy() -> BoxedStrategy<Step> {
    let fault = prop_oneof![
        3 => Just(Fault::Pass),
        2 => Just(Fault::Drop),
        1 => (1u32..3).prop_map(Fault::Duplicate),
        2 => (1u64..150).prop_map(Fault::Delay),
    ];
    prop_oneof![
        4 => (0..=MAX_LEN, any::<bool>()).prop_map(|(len, notify)| Step::Write { len, notify }),
        2 => (0..=MAX_LEN).prop_map(|len| Step::Read { len }),
        2 => (0..=8192u32).prop_map(|len| Step::Send { len }),
        1 => (0u8..3).prop_map(|how| Step::BadWrite { how }),
        3 => proptest::collection::vec(fault, 1..12).prop_map(Step::Faults),
        3 => (1u32..300).prop_map(|us| Step::Advance { us }),
        1 => (0u8..2, proptest::collection::vec(any::<u8>(), 0..200), any::<bool>())
            .prop_map(|(from, bytes, reseal_unknown)| Step::Garbage { from, bytes, reseal_unknown }),
        1 => Just(Step::Reuse),
    ]
    .boxed()
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        (any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(self_describing, sack, gbn)| Model {
                registration: if self_describing {
                    RegistrationMode::SelfDescribing
                } else {
                    RegistrationMode::FirstOnly
                },
                ack: if sack {
                    AckMode::Selective {
                        delay: Duration::from_micros(3),
                    }
                } else {
                    AckMode::PerPacket
                },
                retransmit: if gbn {
                    RetransmitMode::GoBackN
                } else {
                    RetransmitMode::Selective
                },
                posts: 0,
            })
            .boxed()
    }

    fn transitions(_: &Model) -> BoxedStrategy<Step> {
        step_strategy()
    }

    fn apply(mut state: Model, step: &Step) -> Model {
        if matches!(
            step,
            Step::Write { .. } | Step::Read { .. } | Step::Send { .. } | Step::BadWrite { .. }
        ) {
            state.posts += 1;
        }
        state
    }

    fn preconditions(state: &Model, step: &Step) -> bool {
        match step {
            Step::Write { .. } | Step::Read { .. } | Step::Send { .. } | Step::BadWrite { .. } => {
                state.posts < SLOTS
            }
            _ => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Write { slot: u64, len: u64 },
    Read { slot: u64, len: u64 },
    Send { slot: u64, len: u64 },
    Bad { slot: u64 },
}

struct Sut {
    pair: Pair,
    plan: Rc<RefCell<VecDeque<Fault>>>,
    src: MrKey,
    rbuf: MrKey,
    dst: MrKey,
    rsrc: MrKey,
    recv: MrKey,
    guard: MrKey,
    expects: BTreeMap<WrId, Expect>,
    recvs: BTreeMap<WrId, u64>,
    /// Completions by (NIC, request): request ids are per NIC.
    completions: BTreeMap<(usize, WrId), (u32, Result<(), WcError>)>,
    seen_events: usize,
    /// Slots of h1's WRITE region and what they must hold from now on.
    pinned: BTreeMap<u64, Vec<u8>>,
    /// Slots targeted by accepted WRITEs whose outcome is not pinned.
    touched: Vec<u64>,
    reused: u8,
}

impl Sut {
    fn region(&self, nic: usize, key: MrKey) -> &[u8] {
        &self.pair.nics[nic]
            .memory()
            .region(key)
            .expect("region")
            .bytes
    }

    fn slot_of(&self, nic: usize, key: MrKey, slot: u64, len: u64) -> Vec<u8> {
        let r = self.region(nic, key);
        r[(slot * SLOT) as usize..(slot * SLOT + len) as usize].to_vec()
    }

    /// Takes new events: counts completions and pins what they guarantee.
    fn absorb_events(&mut self) {
        let new: Vec<(usize, Event)> = self.pair.events[self.seen_events..].to_vec();
        self.seen_events = self.pair.events.len();
        for (nic, e) in new {
            let Event::Completed {
                wr, result, kind, ..
            } = e
            else {
                continue;
            };
            let entry = self.completions.entry((nic, wr)).or_insert((0, result));
            entry.0 += 1;
            assert_eq!(
                entry.0, 1,
                "invariant 1: {wr} ({kind:?}) on h{nic} completed twice"
            );
            if result.is_err() || nic != 0 {
                continue;
            }
            match self.expects.get(&wr).copied() {
                Some(Expect::Write { slot, len }) => {
                    let sent = self.slot_of(0, self.src, slot, len);
                    assert!(
                        self.slot_of(1, self.dst, slot, len) == sent,
                        "invariant 2: WRITE {wr} bytes differ"
                    );
                    self.touched.retain(|s| *s != slot);
                    self.pinned
                        .insert(slot, self.slot_of(1, self.dst, slot, SLOT));
                }
                Some(Expect::Read { slot, len }) => {
                    assert!(
                        self.slot_of(0, self.rbuf, slot, len)
                            == self.slot_of(1, self.rsrc, slot, len),
                        "invariant 2: READ {wr} bytes differ"
                    );
                }
                Some(Expect::Bad { .. }) => {
                    panic!("a WRITE that had to be refused succeeded: {wr}")
                }
                Some(Expect::Send { .. }) | None => {}
            }
        }
    }

    fn post(&mut self, wr: WorkRequest, expect: Expect) {
        let id = self.pair.nics[0]
            .post(self.pair.now, wr)
            .expect("post accepted");
        if let Expect::Write { slot, .. } = expect {
            self.touched.push(slot);
        }
        self.expects.insert(id, expect);
    }
}

struct NicMachine;

impl StateMachineTest for NicMachine {
    type SystemUnderTest = Sut;
    type Reference = Model;

    fn init_test(m: &Model) -> Sut {
        let cfg = NicConfig {
            mtu_payload: 1024,
            segment_threshold: 8 * 1024,
            segment_size: 4 * 1024,
            op_table_capacity: 16,
            registry_capacity: 4,
            registry_timeout: Duration::from_millis(2),
            escape_capacity: 8,
            escape_bytes: 8 * 1100,
            escape_timeout: Duration::from_micros(60),
            tombstone_capacity: 64,
            registration: m.registration,
            ack_mode: m.ack,
            retransmit: m.retransmit,
            rto_initial: Duration::from_micros(20),
            rto_min: Duration::from_micros(10),
            rto_max: Duration::from_millis(1),
            max_retries: 6,
            rnr_delay: Duration::from_micros(15),
            transmit_queue_capacity: 256,
            ..NicConfig::default()
        };
        let mut pair = Pair::new(cfg);
        let size = (SLOT * SLOTS) as usize;
        let src = pair.nics[0].register(SRC, size, Access::ALL);
        pair.nics[0].memory_mut().region_mut(src).unwrap().bytes = pattern(size, 0x11);
        let rbuf = pair.nics[0].register(RBUF, size, Access::LOCAL);
        let dst = pair.nics[1].register(DST, size, Access::ALL);
        pair.nics[1].memory_mut().region_mut(dst).unwrap().bytes = pattern(size, 0x22);
        let rsrc = pair.nics[1].register(
            RSRC,
            size,
            Access {
                remote_read: true,
                ..Access::default()
            },
        );
        pair.nics[1].memory_mut().region_mut(rsrc).unwrap().bytes = pattern(size, 0x33);
        let recv = pair.nics[1].register(RECV, size, Access::LOCAL);
        let guard = pair.nics[1].register(GUARD, 4096, Access::LOCAL);
        pair.nics[1].memory_mut().region_mut(guard).unwrap().bytes = pattern(4096, 0x44);
        let plan: Rc<RefCell<VecDeque<Fault>>> = Rc::default();
        let p = plan.clone();
        pair.set_filter(move |_| match p.borrow_mut().pop_front() {
            None | Some(Fault::Pass) => Verdict::Deliver,
            Some(Fault::Drop) => Verdict::Drop,
            Some(Fault::Duplicate(n)) => Verdict::Duplicate(n),
            Some(Fault::Delay(us)) => Verdict::Delay(Duration::from_micros(us)),
        });
        Sut {
            pair,
            plan,
            src,
            rbuf,
            dst,
            rsrc,
            recv,
            guard,
            expects: BTreeMap::new(),
            recvs: BTreeMap::new(),
            completions: BTreeMap::new(),
            seen_events: 0,
            pinned: BTreeMap::new(),
            touched: Vec::new(),
            reused: 0,
        }
    }

    fn apply(mut s: Sut, m: &Model, step: Step) -> Sut {
        let slot = m.posts.saturating_sub(1);
        let now = s.pair.now;
        let h1 = NodeAddr(1);
        match step {
            Step::Write { len, notify } => {
                let (len, local, remote) = (u64::from(len), SRC + slot * SLOT, DST + slot * SLOT);
                let wr = if notify {
                    WorkRequest::write_notify(h1, s.src, local, len, s.dst.0, remote, slot as u32)
                } else {
                    WorkRequest::write(h1, s.src, local, len, s.dst.0, remote)
                };
                s.post(wr, Expect::Write { slot, len });
            }
            Step::Read { len } => {
                let len = u64::from(len);
                let wr = WorkRequest::read(
                    h1,
                    s.rbuf,
                    RBUF + slot * SLOT,
                    len,
                    s.rsrc.0,
                    RSRC + slot * SLOT,
                );
                s.post(wr, Expect::Read { slot, len });
            }
            Step::Send { len } => {
                let len = u64::from(len);
                let recv = s.pair.nics[1]
                    .post_recv(now, 0, s.recv, RECV + slot * SLOT, SLOT)
                    .expect("recv posted");
                s.recvs.insert(recv, slot);
                let wr = WorkRequest::send(h1, s.src, SRC + slot * SLOT, len);
                s.post(wr, Expect::Send { slot, len });
            }
            Step::BadWrite { how } => {
                let local = SRC + slot * SLOT;
                let wr = match how {
                    0 => WorkRequest::write(h1, s.src, local, 2048, 0x7777, DST + slot * SLOT),
                    1 => WorkRequest::write(
                        h1,
                        s.src,
                        local,
                        4096,
                        s.dst.0,
                        DST + SLOT * SLOTS - 1024,
                    ),
                    _ => WorkRequest::write(h1, s.src, local, 2048, s.guard.0, GUARD),
                };
                s.post(wr, Expect::Bad { slot });
            }
            Step::Faults(faults) => s.plan.borrow_mut().extend(faults),
            Step::Advance { us } => {
                let t = s.pair.now + Duration::from_micros(u64::from(us));
                s.pair.advance_to(t);
            }
            Step::Garbage {
                from,
                mut bytes,
                reseal_unknown,
            } => {
                if reseal_unknown && bytes.len() >= 36 {
                    bytes[0] = 1;
                    bytes[1] = 0x30 + (bytes[1] & 0x0f);
                    udrma_proto::Packet::new_unchecked(&mut bytes[..]).fill_icrc();
                }
                s.pair.inject(usize::from(from), bytes);
            }
            Step::Reuse => {
                // The host reuses the oldest completed WRITE target for new
                // data; late copies of the old WRITE must not touch it.
                if let Some((&slot, _)) = s
                    .pinned
                    .iter()
                    .nth(usize::from(s.reused) % s.pinned.len().max(1))
                {
                    s.reused = s.reused.wrapping_add(1);
                    let fresh = pattern(SLOT as usize, 0x90 ^ s.reused);
                    let at = (slot * SLOT) as usize;
                    s.pair.nics[1].memory_mut().region_mut(s.dst).unwrap().bytes
                        [at..at + SLOT as usize]
                        .copy_from_slice(&fresh);
                    s.pinned.insert(slot, fresh);
                }
            }
        }
        s.pair.flush();
        s.absorb_events();
        s
    }

    fn check_invariants(s: &Sut, m: &Model) {
        // 3: no byte outside accepted operations changed.
        assert_eq!(
            s.region(1, s.guard),
            &pattern(4096, 0x44)[..],
            "invariant 3: guard region written"
        );
        let initial = pattern((SLOT * SLOTS) as usize, 0x22);
        let dst = s.region(1, s.dst);
        for slot in 0..SLOTS {
            let range = (slot * SLOT) as usize..((slot + 1) * SLOT) as usize;
            if let Some(pinned) = s.pinned.get(&slot) {
                // 4 (and 2): a completed WRITE's target keeps what it holds.
                assert!(
                    dst[range] == pinned[..],
                    "invariant 4: slot {slot} changed after its WRITE completed"
                );
            } else if !s.touched.contains(&slot) || slot >= m.posts {
                assert!(
                    dst[range.clone()] == initial[range],
                    "invariant 3: untargeted slot {slot} written"
                );
            }
        }
        // 6: bounded state.
        for (i, nic) in s.pair.nics.iter().enumerate() {
            assert_eq!(
                nic.occupancy().violation(),
                None,
                "invariant 6 on h{i}: {:?}",
                nic.occupancy()
            );
        }
    }

    fn teardown(mut s: Sut, _: Model) {
        // Faults stop; the run must drain (liveness) and every request must
        // have completed exactly once.
        s.plan.borrow_mut().clear();
        s.pair.clear_filter();
        let limit = s.pair.now + Duration::from_millis(1_000);
        assert!(
            s.pair.run_until(limit),
            "invariant 8: still busy at {}",
            s.pair.now
        );
        s.absorb_events();
        for (wr, expect) in &s.expects {
            let (n, result) = s.completions.get(&(0, *wr)).copied().unwrap_or((0, Ok(())));
            assert_eq!(n, 1, "invariant 1: {wr} ({expect:?}) completed {n} times");
            match expect {
                Expect::Bad { .. } => assert!(result.is_err(), "refused WRITE {wr} succeeded"),
                // A valid WRITE, READ or SEND between two live hosts may
                // only run out of retries (drops, delays past the RTO and
                // a full registry all cost retries); any other error is a
                // bug (garbage cannot forge a NACK: it fails the ICRC or
                // has an unknown opcode).
                _ => assert!(
                    matches!(result, Ok(()) | Err(WcError::RetryExceeded)),
                    "{wr} ({expect:?}) failed with {result:?}"
                ),
            }
        }
        let sends_ok = s
            .expects
            .iter()
            .filter(|(wr, e)| {
                matches!(e, Expect::Send { .. }) && s.completions[&(0, **wr)].1.is_ok()
            })
            .count();
        let recvs_done = s
            .recvs
            .keys()
            .filter(|wr| s.completions.contains_key(&(1, **wr)))
            .count();
        assert!(
            recvs_done >= sends_ok && recvs_done <= s.recvs.len(),
            "receive completions {recvs_done} vs sends {sends_ok}"
        );
        // Receive buffers are consumed in arrival order (as in VIA and
        // MPI), so a SEND may fill a buffer posted for another: each
        // successful SEND's bytes must be in exactly one filled buffer.
        let mut filled: Vec<Vec<u8>> = s
            .pair
            .events_of(1)
            .filter_map(|e| match e {
                Event::Completed {
                    wr,
                    kind: WrKind::Recv,
                    len,
                    result: Ok(()),
                    ..
                } => Some(s.slot_of(1, s.recv, s.recvs[wr], *len)),
                _ => None,
            })
            .collect();
        for (wr, e) in &s.expects {
            if let (Expect::Send { slot, len }, Ok(())) = (e, s.completions[&(0, *wr)].1) {
                let sent = s.slot_of(0, s.src, *slot, *len);
                let at = filled.iter().position(|b| *b == sent);
                assert!(
                    at.is_some(),
                    "SEND {wr} ({len} B) landed in no receive buffer"
                );
                filled.swap_remove(at.unwrap());
            }
        }
        for (i, nic) in s.pair.nics.iter().enumerate() {
            assert!(nic.is_idle(), "h{i} not idle after draining");
            assert_eq!(nic.occupancy().violation(), None);
        }
        let kinds: Vec<WrKind> = s
            .pair
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::Completed { kind, .. } => Some(*kind),
                _ => None,
            })
            .collect();
        assert!(kinds.len() >= s.expects.len());
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        max_shrink_iters: 2048,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn invariants_hold_under_random_posts_and_faults(sequential 1..40 => NicMachine);
}
