//! A proptest state machine over a `Pair`: random posts (WRITE,
//! WRITE-with-notify, READ, SEND, and WRITEs that must be refused) from h0,
//! WRITEs the other way from h1, random fault plans (drop, duplicate,
//! delay or corrupt the next datagrams), time advances, hostile datagrams,
//! buffer reuse and reboots of h0 (a new boot epoch while its old packets
//! are still on the wire). Each case draws its engine: ordinary (1 KiB
//! packets, 4 KiB segments) or big (256 B packets, operations of up to
//! 160 packets, so receive masks span three words), and 64 tombstones or
//! only 4 (a window of 4 per peer: the sender waits for its oldest). After every
//! step it checks the invariants of docs/design.md §8:
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
//!    request table never pass their limits;
//!
//! and, at the end, that every datagram the wire delivered was received
//! once and every corrupted or hostile one was rejected by the checks.
//!
//! The engines remember completions in the default per-peer window
//! (`tombstone_mode = "window"`): with only 4 places the sender holds new
//! operations back until its oldest is finished, so buffers are reused
//! and late copies come with 4 tombstones as with 64, and no lightly
//! harmed request may run out of retries (findings 3, 9 and 12 of
//! docs/testing.md, which one first-in first-out set of 4 allowed).

use std::cell::{Cell, RefCell};
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

const SLOT: u64 = 48 * 1024;
const SLOTS: u64 = 48;
const SIZE: usize = (SLOT * SLOTS) as usize;
/// Longest request in an ordinary case (12 packets of 1 KiB) and in a big
/// one (160 packets of 256 B).
const MAX_LEN: u32 = 12 * 1024;
const MAX_BIG: u32 = 40 * 1024;

const SRC: u64 = 0x0100_0000; // h0: WRITE/SEND sources
const RBUF: u64 = 0x0200_0000; // h0: READ destinations
const BACK: u64 = 0x0300_0000; // h0: targets of h1's WRITEs
const DST: u64 = 0x1000_0000; // h1: WRITE targets
const RSRC: u64 = 0x1100_0000; // h1: READ sources
const RECV: u64 = 0x1200_0000; // h1: SEND receive buffers
const SRC1: u64 = 0x1300_0000; // h1: sources of its WRITEs
const GUARD: u64 = 0x1400_0000; // h1: no remote rights at all
/// Reboots of h0 per case.
const MAX_RESTARTS: u32 = 3;
/// Retries per packet: a request can only run out of them if the wire
/// harmed at least this many datagrams (see `Sut::harm`).
const MAX_RETRIES: u32 = 12;

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
    Corrupt(u16, u8),
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
    /// h1 WRITEs into h0 (traffic both ways).
    WriteBack {
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
    /// h0 reboots: a new engine with the next epoch and fresh memory.
    Restart,
}

#[derive(Debug, Clone)]
struct Model {
    registration: RegistrationMode,
    ack: AckMode,
    retransmit: RetransmitMode,
    /// 256 B packets and 32 KiB segments: operations past 64 packets.
    big: bool,
    /// 4 tombstones instead of 64: a window the sender fills while copies
    /// are in flight.
    few_tombstones: bool,
    /// Tail loss probes on both NICs.
    tail_probe: bool,
    posts: u64,
    restarts: u32,
}

fn step_strategy(max_len: u32) -> BoxedStrategy<Step> {
    let fault = prop_oneof![
        3 => Just(Fault::Pass),
        2 => Just(Fault::Drop),
        1 => (1u32..3).prop_map(Fault::Duplicate),
        2 => (1u64..150).prop_map(Fault::Delay),
        1 => (any::<u16>(), 1u8..=255).prop_map(|(at, xor)| Fault::Corrupt(at, xor)),
    ];
    prop_oneof![
        4 => (0..=max_len, any::<bool>()).prop_map(|(len, notify)| Step::Write { len, notify }),
        2 => (0..=max_len).prop_map(|len| Step::Read { len }),
        2 => (0..=max_len.min(8192)).prop_map(|len| Step::Send { len }),
        2 => (0..=max_len).prop_map(|len| Step::WriteBack { len }),
        1 => (0u8..3).prop_map(|how| Step::BadWrite { how }),
        3 => proptest::collection::vec(fault, 1..12).prop_map(Step::Faults),
        3 => (1u32..300).prop_map(|us| Step::Advance { us }),
        1 => (0u8..2, proptest::collection::vec(any::<u8>(), 0..200), any::<bool>())
            .prop_map(|(from, bytes, reseal_unknown)| Step::Garbage { from, bytes, reseal_unknown }),
        1 => Just(Step::Reuse),
        1 => Just(Step::Restart),
    ]
    .boxed()
}

impl ReferenceStateMachine for Model {
    type State = Model;
    type Transition = Step;

    fn init_state() -> BoxedStrategy<Model> {
        (
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(self_describing, sack, gbn, big, few_tombstones, tail_probe)| Model {
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
                    big,
                    few_tombstones,
                    tail_probe,
                    posts: 0,
                    restarts: 0,
                },
            )
            .boxed()
    }

    fn transitions(m: &Model) -> BoxedStrategy<Step> {
        step_strategy(if m.big { MAX_BIG } else { MAX_LEN })
    }

    fn apply(mut state: Model, step: &Step) -> Model {
        match step {
            Step::Write { .. }
            | Step::Read { .. }
            | Step::Send { .. }
            | Step::WriteBack { .. }
            | Step::BadWrite { .. } => state.posts += 1,
            Step::Restart => state.restarts += 1,
            _ => {}
        }
        state
    }

    fn preconditions(state: &Model, step: &Step) -> bool {
        let max = if state.big { MAX_BIG } else { MAX_LEN };
        match step {
            Step::Write { len, .. }
            | Step::Read { len }
            | Step::Send { len }
            | Step::WriteBack { len } => state.posts < SLOTS && *len <= max,
            Step::BadWrite { .. } => state.posts < SLOTS,
            Step::Restart => state.restarts < MAX_RESTARTS,
            _ => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Write {
        slot: u64,
        len: u64,
    },
    Read {
        slot: u64,
        len: u64,
    },
    Send {
        slot: u64,
        len: u64,
    },
    /// h1's WRITE into h0's `BACK` region.
    Back {
        slot: u64,
        len: u64,
    },
    Bad {
        slot: u64,
    },
}

/// A request: the NIC that posted it, the life of h0 when it was posted
/// (h0's request ids start again after a reboot), and its id.
type Key = (usize, u32, WrId);

/// Datagrams a NIC threw away as damaged or meaningless.
fn rejected(nic: &udrma_nic::Nic) -> u64 {
    let s = nic.stats();
    s.rx_truncated
        + s.rx_bad_checksum
        + s.rx_bad_version
        + s.rx_bad_length
        + s.rx_unknown_opcode
        + s.rx_unhandled
        + s.rx_invalid
}

struct Sut {
    pair: Pair,
    cfg: NicConfig,
    plan: Rc<RefCell<VecDeque<Fault>>>,
    /// Datagrams the plan corrupted (a byte XORed with a non-zero value).
    corrupted: Rc<Cell<u64>>,
    /// Retries the wire's faults can have cost at most: one per datagram
    /// dropped or corrupted, a few per delay (it may outlast several
    /// RTOs). Every retry needs a harmed datagram (a lost packet or ACK,
    /// or a late one), so a request may run out of retries only once this
    /// reaches `MAX_RETRIES + 1`: an engine that gave up too soon fails.
    harm: Rc<Cell<u64>>,
    /// Wire numbers of the hostile datagrams injected.
    hostile: Rc<RefCell<Vec<u64>>>,
    /// Rejections and datagrams received counted by h0's earlier lives.
    rejected_before: u64,
    received_before: u64,
    /// Datagrams sent and requests finished by h0's earlier lives.
    sent_before: u64,
    finished_before: u64,
    /// h0's boot count (0 = first life).
    life: u32,
    src: MrKey,
    rbuf: MrKey,
    back: MrKey,
    dst: MrKey,
    rsrc: MrKey,
    recv: MrKey,
    src1: MrKey,
    guard: MrKey,
    /// What each request must do.
    expects: BTreeMap<Key, Expect>,
    recvs: BTreeMap<WrId, u64>,
    completions: BTreeMap<Key, (u32, Result<(), WcError>)>,
    seen_events: usize,
    /// Slots of h1's WRITE region and what they must hold from now on.
    pinned: BTreeMap<u64, Vec<u8>>,
    /// Slots targeted by accepted WRITEs whose outcome is not pinned.
    touched: Vec<u64>,
    /// Slots of h0's `BACK` region that h1 ever targeted.
    back_touched: Vec<u64>,
    /// For each `BACK` slot h1 targeted: h0's life then, and whether h1
    /// still believed in an earlier life (it learns of a reboot only from
    /// h0's next packet, and then fails what it had posted).
    back_life: BTreeMap<u64, (u32, bool)>,
    /// What h1's WRITE region and h0's `BACK` region held at the start
    /// (`BACK`: of h0's current life).
    initial_dst: Vec<u8>,
    initial_back: Vec<u8>,
    reused: u8,
}

/// h0's regions in life `life`: WRITE/SEND sources, READ destinations and
/// the target of h1's WRITEs, each with its own pattern.
fn h0_regions(nic: &mut udrma_nic::Nic, life: u32) -> (MrKey, MrKey, MrKey) {
    let seed = life as u8;
    let src = nic.register(SRC, SIZE, Access::ALL);
    nic.memory_mut().region_mut(src).unwrap().bytes = pattern(SIZE, 0x11 ^ seed).into();
    let rbuf = nic.register(RBUF, SIZE, Access::LOCAL);
    let back = nic.register(BACK, SIZE, Access::ALL);
    nic.memory_mut().region_mut(back).unwrap().bytes = pattern(SIZE, 0x66 ^ seed).into();
    (src, rbuf, back)
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
            let key = (nic, if nic == 0 { self.life } else { 0 }, wr);
            let entry = self.completions.entry(key).or_insert((0, result));
            entry.0 += 1;
            assert_eq!(
                entry.0, 1,
                "invariant 1: {wr} ({kind:?}) on h{nic} completed twice"
            );
            if result.is_err() {
                continue;
            }
            match self.expects.get(&key).copied() {
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
                Some(Expect::Back { slot, len }) if !self.restarted_since(slot) => {
                    assert!(
                        self.slot_of(0, self.back, slot, len)
                            == self.slot_of(1, self.src1, slot, len),
                        "invariant 2: h1's WRITE {wr} bytes differ"
                    );
                }
                Some(Expect::Bad { .. }) => {
                    panic!("a WRITE that had to be refused succeeded: {wr}")
                }
                _ => {}
            }
        }
    }

    /// Whether h0 rebooted after h1 posted its WRITE into `BACK` slot
    /// `slot` (the bytes then went to memory that no longer exists).
    fn restarted_since(&self, slot: u64) -> bool {
        self.back_life.get(&slot).is_some_and(|l| l.0 != self.life)
    }

    /// Whether h1's WRITE into `BACK` slot `slot` may fail because h0
    /// rebooted.
    fn may_meet_reboot(&self, slot: u64) -> bool {
        self.restarted_since(slot) || self.back_life.get(&slot).is_some_and(|l| l.1)
    }

    fn post(&mut self, nic: usize, wr: WorkRequest, expect: Expect) {
        let id = self.pair.nics[nic]
            .post(self.pair.now, wr)
            .expect("post accepted");
        match expect {
            Expect::Write { slot, .. } => self.touched.push(slot),
            Expect::Back { slot, .. } => {
                self.back_touched.push(slot);
                let epoch = self.cfg.epoch + self.life;
                let stale =
                    self.life > 0 && self.pair.nics[1].peer_epoch(NodeAddr(0)) != Some(epoch);
                self.back_life.insert(slot, (self.life, stale));
            }
            _ => {}
        }
        let life = if nic == 0 { self.life } else { 0 };
        self.expects.insert((nic, life, id), expect);
    }

    /// h0 reboots: its requests are forgotten (the host died with them),
    /// its memory starts afresh, and its next packets carry a newer epoch.
    /// Its old packets may still be on the wire.
    fn reboot(&mut self) {
        self.absorb_events();
        self.rejected_before += rejected(&self.pair.nics[0]);
        let old = self.pair.nics[0].stats();
        self.received_before += old.rx_datagrams;
        self.sent_before += old.data_sent + old.retransmits + old.control_sent;
        self.finished_before += old.completed + old.failed;
        self.life += 1;
        let cfg = NicConfig {
            epoch: self.cfg.epoch + self.life,
            ..self.cfg.clone()
        };
        let mut nic = udrma_nic::Nic::new(NodeAddr(0), cfg).expect("valid configuration");
        let (src, rbuf, back) = h0_regions(&mut nic, self.life);
        assert_eq!(
            (src, rbuf, back),
            (self.src, self.rbuf, self.back),
            "a fresh engine hands out the same keys"
        );
        self.pair.nics[0] = nic;
        self.initial_back = pattern(SIZE, 0x66 ^ self.life as u8);
    }
}

struct NicMachine;

impl StateMachineTest for NicMachine {
    type SystemUnderTest = Sut;
    type Reference = Model;

    fn init_test(m: &Model) -> Sut {
        let (mtu_payload, segment) = if m.big {
            (256, 32 * 1024)
        } else {
            (1024, 4 * 1024)
        };
        let cfg = NicConfig {
            mtu_payload,
            segment_threshold: 2 * u64::from(segment),
            segment_size: segment,
            op_table_capacity: if m.big { 48 } else { 16 },
            registry_capacity: 4,
            registry_timeout: Duration::from_millis(2),
            escape_capacity: 8,
            escape_bytes: 8 * 1100,
            escape_timeout: Duration::from_micros(60),
            tombstone_capacity: if m.few_tombstones { 4 } else { 64 },
            registration: m.registration,
            ack_mode: m.ack,
            retransmit: m.retransmit,
            rto_initial: Duration::from_micros(20),
            rto_min: Duration::from_micros(10),
            rto_max: Duration::from_millis(1),
            max_retries: MAX_RETRIES,
            rnr_delay: Duration::from_micros(15),
            transmit_queue_capacity: 256,
            tail_probe: m.tail_probe,
            ..NicConfig::default()
        };
        let mut pair = Pair::new(cfg.clone());
        let (src, rbuf, back) = h0_regions(&mut pair.nics[0], 0);
        let h1 = &mut pair.nics[1];
        let dst = h1.register(DST, SIZE, Access::ALL);
        h1.memory_mut().region_mut(dst).unwrap().bytes = pattern(SIZE, 0x22).into();
        let rsrc = h1.register(
            RSRC,
            SIZE,
            Access {
                remote_read: true,
                ..Access::default()
            },
        );
        h1.memory_mut().region_mut(rsrc).unwrap().bytes = pattern(SIZE, 0x33).into();
        let recv = h1.register(RECV, SIZE, Access::LOCAL);
        let src1 = h1.register(SRC1, SIZE, Access::LOCAL);
        h1.memory_mut().region_mut(src1).unwrap().bytes = pattern(SIZE, 0x55).into();
        let guard = h1.register(GUARD, 4096, Access::LOCAL);
        h1.memory_mut().region_mut(guard).unwrap().bytes = pattern(4096, 0x44).into();
        let plan: Rc<RefCell<VecDeque<Fault>>> = Rc::default();
        let corrupted: Rc<Cell<u64>> = Rc::default();
        let hostile: Rc<RefCell<Vec<u64>>> = Rc::default();
        let harm: Rc<Cell<u64>> = Rc::default();
        let (p, c, h, hm) = (
            plan.clone(),
            corrupted.clone(),
            hostile.clone(),
            harm.clone(),
        );
        pair.set_filter(move |w| {
            // The plan judges what the engines send; injected datagrams
            // arrive as they are.
            if h.borrow().contains(&w.n) {
                return Verdict::Deliver;
            }
            match p.borrow_mut().pop_front() {
                None | Some(Fault::Pass) => Verdict::Deliver,
                Some(Fault::Drop) => {
                    hm.set(hm.get() + 1);
                    Verdict::Drop
                }
                Some(Fault::Duplicate(n)) => Verdict::Duplicate(n),
                Some(Fault::Delay(us)) => {
                    // The RTO starts at 10 µs or more and doubles with
                    // each retry: a delay of `us` outlasts at most
                    // 1 + log2(us / 10) of them.
                    hm.set(hm.get() + 1 + u64::from((us / 10).max(1).ilog2()));
                    Verdict::Delay(Duration::from_micros(us))
                }
                Some(Fault::Corrupt(at, xor)) => {
                    hm.set(hm.get() + 1);
                    c.set(c.get() + 1);
                    Verdict::Corrupt { at, xor }
                }
            }
        });
        Sut {
            pair,
            cfg,
            plan,
            corrupted,
            harm,
            hostile,
            rejected_before: 0,
            received_before: 0,
            sent_before: 0,
            finished_before: 0,
            life: 0,
            src,
            rbuf,
            back,
            dst,
            rsrc,
            recv,
            src1,
            guard,
            expects: BTreeMap::new(),
            recvs: BTreeMap::new(),
            completions: BTreeMap::new(),
            seen_events: 0,
            pinned: BTreeMap::new(),
            touched: Vec::new(),
            back_touched: Vec::new(),
            back_life: BTreeMap::new(),
            initial_dst: pattern(SIZE, 0x22),
            initial_back: pattern(SIZE, 0x66),
            reused: 0,
        }
    }

    fn apply(mut s: Sut, m: &Model, step: Step) -> Sut {
        let slot = m.posts.saturating_sub(1);
        let now = s.pair.now;
        let (h0, h1) = (NodeAddr(0), NodeAddr(1));
        match step {
            Step::Write { len, notify } => {
                let (len, local, remote) = (u64::from(len), SRC + slot * SLOT, DST + slot * SLOT);
                let wr = if notify {
                    WorkRequest::write_notify(h1, s.src, local, len, s.dst.0, remote, slot as u32)
                } else {
                    WorkRequest::write(h1, s.src, local, len, s.dst.0, remote)
                };
                s.post(0, wr, Expect::Write { slot, len });
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
                s.post(0, wr, Expect::Read { slot, len });
            }
            Step::Send { len } => {
                let len = u64::from(len);
                let recv = s.pair.nics[1]
                    .post_recv(now, 0, s.recv, RECV + slot * SLOT, SLOT)
                    .expect("recv posted");
                s.recvs.insert(recv, slot);
                let wr = WorkRequest::send(h1, s.src, SRC + slot * SLOT, len);
                s.post(0, wr, Expect::Send { slot, len });
            }
            Step::WriteBack { len } => {
                let len = u64::from(len);
                let wr = WorkRequest::write(
                    h0,
                    s.src1,
                    SRC1 + slot * SLOT,
                    len,
                    s.back.0,
                    BACK + slot * SLOT,
                );
                s.post(1, wr, Expect::Back { slot, len });
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
                s.post(0, wr, Expect::Bad { slot });
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
                s.hostile.borrow_mut().push(s.pair.log.len() as u64);
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
            Step::Restart => s.reboot(),
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
        let dst = s.region(1, s.dst);
        let back = s.region(0, s.back);
        for slot in 0..SLOTS {
            let range = (slot * SLOT) as usize..((slot + 1) * SLOT) as usize;
            if let Some(pinned) = s.pinned.get(&slot) {
                // 4 (and 2): a completed WRITE's target keeps what it holds.
                assert!(
                    dst[range.clone()] == pinned[..],
                    "invariant 4: slot {slot} changed after its WRITE completed"
                );
            } else if !s.touched.contains(&slot) || slot >= m.posts {
                assert!(
                    dst[range.clone()] == s.initial_dst[range.clone()],
                    "invariant 3: untargeted slot {slot} written"
                );
            }
            if !s.back_touched.contains(&slot) {
                assert!(
                    back[range.clone()] == s.initial_back[range],
                    "invariant 3: untargeted slot {slot} of h0 written"
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
        for (&(nic, life, wr), expect) in &s.expects {
            if nic == 0 && life != s.life {
                // Posted by an earlier life of h0: the host that waited for
                // it is gone.
                continue;
            }
            let (n, result) = s
                .completions
                .get(&(nic, life, wr))
                .copied()
                .unwrap_or((0, Ok(())));
            assert_eq!(n, 1, "invariant 1: {wr} ({expect:?}) completed {n} times");
            match expect {
                Expect::Bad { .. } => assert!(result.is_err(), "refused WRITE {wr} succeeded"),
                // A valid request between two live hosts may only run out
                // of retries (drops, delays past the RTO and a full
                // registry all cost retries), or, for h1's, meet h0's
                // reboot; any other error is a bug (garbage cannot forge a
                // NACK: it fails the ICRC or has an unknown opcode).
                Expect::Back { slot, .. } if s.may_meet_reboot(*slot) => assert!(
                    matches!(
                        result,
                        Ok(()) | Err(WcError::RetryExceeded | WcError::PeerRestarted)
                    ),
                    "{wr} ({expect:?}) failed with {result:?}"
                ),
                _ => assert!(
                    matches!(result, Ok(()) | Err(WcError::RetryExceeded)),
                    "{wr} ({expect:?}) failed with {result:?}"
                ),
            }
            // Only a wire that harmed more datagrams than the retry budget
            // can exhaust it. (A first-in, first-out set of 4 tombstones
            // forgot completed operations whose copies then could never be
            // acknowledged: finding 12.)
            if result == Err(WcError::RetryExceeded) && !matches!(expect, Expect::Bad { .. }) {
                assert!(
                    s.harm.get() > u64::from(MAX_RETRIES),
                    "{wr} ({expect:?}) ran out of {MAX_RETRIES} retries, but the wire harmed \
                     at most {} datagrams' worth",
                    s.harm.get()
                );
            }
        }
        // Every damaged datagram was thrown away, and nothing else was.
        let rejected = s.rejected_before + rejected(&s.pair.nics[0]) + rejected(&s.pair.nics[1]);
        assert_eq!(
            rejected,
            s.corrupted.get() + s.hostile.borrow().len() as u64,
            "integrity: {} corrupted and {} hostile datagrams, {rejected} rejected",
            s.corrupted.get(),
            s.hostile.borrow().len()
        );
        // Every datagram the wire delivered (copies included) was received
        // once.
        let delivered: u64 = s
            .pair
            .log
            .iter()
            .map(|l| match l.verdict {
                Verdict::Drop => 0,
                Verdict::Duplicate(k) => 1 + u64::from(k),
                _ => 1,
            })
            .sum();
        let received = s.received_before
            + s.pair.nics[0].stats().rx_datagrams
            + s.pair.nics[1].stats().rx_datagrams;
        assert_eq!(received, delivered, "datagrams received vs delivered");
        // Each engine counted every datagram it sent and every request it
        // finished, once.
        for i in 0..2 {
            let st = s.pair.nics[i].stats();
            let before = if i == 0 {
                (s.sent_before, s.finished_before)
            } else {
                (0, 0)
            };
            let sent = s
                .pair
                .log
                .iter()
                .filter(|l| l.from == NodeAddr(i as u32))
                .count() as u64;
            let hostile_from_i = s
                .pair
                .log
                .iter()
                .filter(|l| l.from == NodeAddr(i as u32) && s.hostile.borrow().contains(&l.n))
                .count() as u64;
            assert_eq!(
                before.0 + st.data_sent + st.retransmits + st.control_sent,
                sent - hostile_from_i,
                "h{i}: datagrams sent"
            );
            let finished = s
                .pair
                .events_of(i)
                .filter(|e| matches!(e, Event::Completed { .. }))
                .count() as u64;
            assert_eq!(
                before.1 + st.completed + st.failed,
                finished,
                "h{i}: requests finished"
            );
        }
        let sent_ok = |e: &Expect, key: &Key| {
            matches!(e, Expect::Send { .. }) && s.completions.get(key).is_some_and(|c| c.1.is_ok())
        };
        let sends_ok = s.expects.iter().filter(|(k, e)| sent_ok(e, k)).count();
        let recvs_done = s
            .recvs
            .keys()
            .filter(|wr| s.completions.contains_key(&(1, 0, **wr)))
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
        // The bytes of the life that sent them.
        let sources: Vec<Vec<u8>> = (0..=s.life)
            .map(|l| pattern(SIZE, 0x11 ^ l as u8))
            .collect();
        for (key, e) in &s.expects {
            if let (Expect::Send { slot, len }, true) = (e, sent_ok(e, key)) {
                let sent = sources[key.1 as usize]
                    [(slot * SLOT) as usize..(slot * SLOT + len) as usize]
                    .to_vec();
                let at = filled.iter().position(|b| *b == sent);
                assert!(
                    at.is_some(),
                    "SEND {} ({len} B) landed in no receive buffer",
                    key.2
                );
                filled.swap_remove(at.unwrap());
            }
        }
        for (i, nic) in s.pair.nics.iter().enumerate() {
            assert!(nic.is_idle(), "h{i} not idle after draining");
            assert_eq!(nic.occupancy().violation(), None);
        }
    }
}

/// Cases per run: `PROPTEST_CASES` if set (a long hunt, or a quick run
/// under cargo-mutants), else 96.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(96)
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2048,
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn invariants_hold_under_random_posts_and_faults(sequential 1..40 => NicMachine);
}
