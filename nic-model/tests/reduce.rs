//! NIC-offloaded reductions as protocol stories: a k-nomial tree of NICs
//! over a wire that loses, duplicates and reorders, where every node's
//! result must equal the tree-order reduction computed outside the NICs.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use udrma_nic::reduce::alu::{self, Operand};
use udrma_nic::reduce::{CollectiveKind, Parent, ReducePost};
use udrma_nic::{Access, Event, MrKey, Nic, NicConfig, WcError, WrKind};
use udrma_proto::time::{Duration, Instant};
use udrma_proto::{NodeAddr, Opcode, ReduceOp, ReduceType, Repr};

/// Each node's parent and its branch there.
type Parents = Vec<Option<(usize, u8)>>;

/// A k-nomial tree rooted at 0: parent (and branch there) and children.
fn knomial(n: usize, k: usize) -> (Parents, Vec<Vec<usize>>) {
    let mut parent = vec![None; n];
    let mut children = vec![Vec::new(); n];
    for (i, kids) in children.iter_mut().enumerate() {
        let mut p = 1;
        while p < n {
            if i % (p * k) != 0 {
                break;
            }
            for j in 1..k {
                let c = i + j * p;
                if c < n {
                    kids.push(c);
                }
            }
            p *= k;
        }
    }
    for (i, cs) in children.iter().enumerate() {
        for (b, c) in cs.iter().enumerate() {
            parent[*c] = Some((i, b as u8));
        }
    }
    (parent, children)
}

/// What the wire does.
#[derive(Debug, Clone, Copy)]
struct Faults {
    loss: f64,
    dup: f64,
    /// Up to this much extra delay per datagram (reorders).
    jitter: Duration,
}

struct Mesh {
    nics: Vec<Nic>,
    now: Instant,
    wire: BTreeMap<(Instant, u64), (usize, usize, Vec<u8>)>,
    n: u64,
    rng: ChaCha8Rng,
    faults: Faults,
    events: Vec<Vec<Event>>,
    sent: BTreeMap<String, u64>,
}

const LATENCY: Duration = Duration::from_micros(1);

impl Mesh {
    fn new(n: usize, cfg: NicConfig, faults: Faults, seed: u64) -> Mesh {
        Mesh {
            nics: (0..n)
                .map(|i| Nic::new(NodeAddr(i as u32), cfg.clone()).unwrap())
                .collect(),
            now: Instant::ZERO,
            wire: BTreeMap::new(),
            n: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
            faults,
            events: vec![Vec::new(); n],
            sent: BTreeMap::new(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn flush(&mut self) {
        let mut buf = Vec::new();
        for i in 0..self.nics.len() {
            while let Some(t) = self.nics[i].poll_transmit(self.now, &mut buf) {
                let kind = Repr::parse_bytes(&buf).unwrap().kind_name();
                *self.sent.entry(kind).or_default() += 1;
                if self.chance(self.faults.loss) {
                    continue;
                }
                let copies = 1 + u32::from(self.chance(self.faults.dup));
                for _ in 0..copies {
                    let j = self.faults.jitter.as_ps();
                    let extra = if j == 0 { 0 } else { self.rng.next_u64() % j };
                    // The sender's NIC work and the receiver's go on the
                    // packet's time (a fabric charges them the same way).
                    let rx = self.nics[t.dst.0 as usize].receive_work(NodeAddr(i as u32), &buf);
                    let at = self.now + LATENCY + t.nic_work + rx + Duration::from_ps(extra);
                    self.n += 1;
                    self.wire
                        .insert((at, self.n), (t.dst.0 as usize, i, buf.clone()));
                }
            }
            while let Some(e) = self.nics[i].poll_event() {
                self.events[i].push(e);
            }
        }
    }

    /// Runs until nothing is left to happen or `limit` passes.
    fn run(&mut self, limit: Instant) {
        loop {
            self.flush();
            let wire = self.wire.keys().next().map(|k| k.0);
            let timer = self.nics.iter().filter_map(|n| n.poll_timeout()).min();
            let Some(next) = [wire, timer].into_iter().flatten().min() else {
                return;
            };
            if next > limit {
                return;
            }
            self.now = next;
            while let Some(e) = self.wire.first_entry() {
                if e.key().0 > self.now {
                    break;
                }
                let (to, from, bytes) = e.remove();
                self.nics[to].handle_datagram(self.now, NodeAddr(from as u32), &bytes);
            }
            for nic in &mut self.nics {
                if nic.poll_timeout().is_some_and(|t| t <= self.now) {
                    nic.handle_timeout(self.now);
                }
            }
        }
    }

    /// A 4 KiB result region on every NIC.
    fn regions(&mut self) -> Vec<MrKey> {
        self.nics
            .iter_mut()
            .map(|n| n.register(RESULT_AT, 4096, Access::ALL))
            .collect()
    }

    fn completions(&self, i: usize) -> Vec<(Result<(), WcError>, Instant)> {
        self.events[i]
            .iter()
            .filter_map(|e| match e {
                Event::Completed {
                    kind: WrKind::Reduce,
                    result,
                    at,
                    ..
                } => Some((*result, *at)),
                _ => None,
            })
            .collect()
    }
}

/// One collective over `n` nodes: node `i` contributes `values(i)`.
struct Run {
    kind: CollectiveKind,
    op: ReduceOp,
    ty: ReduceType,
    count: u32,
    k: usize,
}

const RESULT_AT: u64 = 0x10_0000;

impl Run {
    fn operand(&self, i: usize, seed: u64) -> Operand {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (i as u64) << 20);
        let values = (0..self.count)
            .map(|_| {
                let r = rng.next_u64();
                match self.ty {
                    // Varied magnitudes so that the order of a float sum
                    // shows in its bits.
                    ReduceType::F64 => {
                        (((r % 2000) as f64 - 1000.0) * 10f64.powi((r >> 40) as i32 % 12)).to_bits()
                    }
                    ReduceType::F32 => u64::from((((r % 2000) as f32 - 1000.0) / 7.0).to_bits()),
                    ReduceType::I32 | ReduceType::U32 => r & 0xffff_ffff,
                    _ => r,
                }
            })
            .collect();
        let locs = if self.op.has_locations() {
            vec![i as u32; self.count as usize]
        } else {
            Vec::new()
        };
        Operand { values, locs }
    }

    /// The result computed outside the NICs, in the tree's order.
    fn reference(&self, n: usize, seed: u64) -> Operand {
        if self.kind == CollectiveKind::Broadcast {
            return self.operand(0, seed);
        }
        let (_, children) = knomial(n, self.k);
        fn fold(run: &Run, i: usize, children: &[Vec<usize>], seed: u64) -> Operand {
            let mut acc = run.operand(i, seed);
            for c in &children[i] {
                let x = fold(run, *c, children, seed);
                alu::combine(run.op, run.ty, &mut acc, &x).unwrap();
            }
            acc
        }
        fold(self, 0, &children, seed)
    }

    fn post_all(&self, mesh: &mut Mesh, seed: u64) -> Vec<MrKey> {
        let keys = mesh.regions();
        for (i, key) in keys.iter().enumerate() {
            self.post_one(mesh, i, seed, 1, *key);
        }
        keys
    }

    /// Node `i`'s descriptor for collective `seq`.
    fn post_one(
        &self,
        mesh: &mut Mesh,
        i: usize,
        seed: u64,
        seq: u32,
        key: MrKey,
    ) -> udrma_nic::WrId {
        let n = mesh.nics.len();
        let (parent, children) = knomial(n, self.k);
        {
            let kids = &children[i];
            let carries = self.kind != CollectiveKind::Broadcast || i == 0;
            let post = ReducePost {
                kind: self.kind,
                ep: 7,
                tree: 3,
                seq,
                op: self.op,
                ty: self.ty,
                count: self.count,
                operand: if carries {
                    self.operand(i, seed)
                } else {
                    Operand::default()
                },
                parent: parent[i].map(|(p, b)| Parent {
                    addr: NodeAddr(p as u32),
                    branch: b,
                    fan_in: children[p].len() as u16,
                }),
                children: kids.iter().map(|c| NodeAddr(*c as u32)).collect(),
                level: 0,
                result: Some((key, RESULT_AT + u64::from(seq - 1) * 1024)),
            };
            let now = mesh.now;
            mesh.nics[i].post_reduce(now, post).unwrap()
        }
    }

    fn check(&self, mesh: &Mesh, keys: &[MrKey], seed: u64) -> Result<(), String> {
        let n = mesh.nics.len();
        let want = alu::to_host_bytes(self.op, self.ty, &self.reference(n, seed));
        for (i, key) in keys.iter().enumerate().take(n) {
            let done = mesh.completions(i);
            if done.len() != 1 || done[0].0.is_err() {
                return Err(format!("node {i}: completions {done:?}"));
            }
            let gets = self.kind != CollectiveKind::Reduce || i == 0;
            if gets {
                let r = mesh.nics[i].memory().region(*key).unwrap();
                if r.bytes[..want.len()] != want[..] {
                    return Err(format!("node {i}: result differs from the reference"));
                }
            }
            if !mesh.nics[i].is_idle() {
                return Err(format!("node {i} is not idle at the end"));
            }
        }
        Ok(())
    }
}

fn cfg() -> NicConfig {
    NicConfig {
        rto_initial: Duration::from_micros(20),
        rto_min: Duration::from_micros(10),
        max_retries: 30,
        ..NicConfig::default()
    }
}

#[test]
fn an_allreduce_of_16_nodes_over_a_perfect_wire_takes_one_packet_per_edge_each_way() {
    let run = Run {
        kind: CollectiveKind::Allreduce,
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        count: 6,
        k: 4,
    };
    let none = Faults {
        loss: 0.0,
        dup: 0.0,
        jitter: Duration::ZERO,
    };
    let mut mesh = Mesh::new(16, cfg(), none, 1);
    let keys = run.post_all(&mut mesh, 9);
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    run.check(&mesh, &keys, 9).unwrap();
    // 15 edges: one REDUCE up and one REDUCE_BCAST down each, all acked.
    assert_eq!(mesh.sent["REDUCE"], 15);
    assert_eq!(mesh.sent["REDUCE_BCAST"], 15);
    assert_eq!(mesh.sent["REDUCE_ACK"], 30);
    // Depth 2 (4-nomial over 16): up 2 hops, down 2 hops, 1 µs each.
    let last = (0..16).map(|i| mesh.completions(i)[0].1).max().unwrap();
    assert_eq!(last, Instant::ZERO + Duration::from_micros(4));
    let fired: u64 = mesh.nics.iter().map(|n| n.stats().reduce_fired).sum();
    assert_eq!(
        fired,
        16 + 4,
        "16 up descriptors, 4 broadcasts (root and 3 leaders)"
    );
}

#[test]
fn a_duplicated_operand_is_never_added_twice() {
    // Every datagram arrives twice: a sum that counted duplicates would be
    // off; the branch slots keep it exact.
    let run = Run {
        kind: CollectiveKind::Allreduce,
        op: ReduceOp::Sum,
        ty: ReduceType::U64,
        count: 1,
        k: 2,
    };
    let dup = Faults {
        loss: 0.0,
        dup: 1.0,
        jitter: Duration::ZERO,
    };
    let mut mesh = Mesh::new(8, cfg(), dup, 2);
    let keys = run.post_all(&mut mesh, 3);
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    run.check(&mesh, &keys, 3).unwrap();
    let dups: u64 = mesh.nics.iter().map(|n| n.stats().reduce_duplicates).sum();
    assert_eq!(dups, 14, "7 REDUCE and 7 REDUCE_BCAST copies dropped");
}

#[test]
fn a_56_byte_vector_takes_two_descriptors_per_edge() {
    let run = Run {
        kind: CollectiveKind::Allreduce,
        op: ReduceOp::Max,
        ty: ReduceType::F64,
        count: 7,
        k: 4,
    };
    let none = Faults {
        loss: 0.0,
        dup: 0.0,
        jitter: Duration::ZERO,
    };
    let mut mesh = Mesh::new(4, cfg(), none, 1);
    let keys = run.post_all(&mut mesh, 5);
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    run.check(&mesh, &keys, 5).unwrap();
    assert_eq!(mesh.sent["REDUCE"], 6, "3 children x 2 chunks");
}

#[test]
fn a_node_that_never_posts_fails_its_children_after_their_retries() {
    let run = Run {
        kind: CollectiveKind::Reduce,
        op: ReduceOp::Sum,
        ty: ReduceType::I32,
        count: 2,
        k: 2,
    };
    let none = Faults {
        loss: 0.0,
        dup: 0.0,
        jitter: Duration::ZERO,
    };
    let mut mesh = Mesh::new(2, cfg(), none, 1);
    // Node 1 posts; node 0 (the root) never does, and its NIC has no room
    // for arrivals it was not told about.
    let key = mesh.nics[1].register(RESULT_AT, 64, Access::ALL);
    let post = ReducePost {
        kind: run.kind,
        ep: 7,
        tree: 3,
        seq: 1,
        op: run.op,
        ty: run.ty,
        count: run.count,
        operand: run.operand(1, 0),
        parent: Some(Parent {
            addr: NodeAddr(0),
            branch: 0,
            fan_in: 1,
        }),
        children: Vec::new(),
        level: 0,
        result: Some((key, RESULT_AT)),
    };
    mesh.nics[0] = Nic::new(
        NodeAddr(0),
        NicConfig {
            reduce_chunks: 1,
            ..cfg()
        },
    )
    .unwrap();
    // Fill node 0's only chunk with a collective of its own.
    let own = mesh.nics[0].register(RESULT_AT, 64, Access::ALL);
    mesh.nics[0]
        .post_reduce(
            Instant::ZERO,
            ReducePost {
                seq: 99,
                operand: run.operand(0, 0),
                parent: None,
                children: vec![NodeAddr(1)],
                result: Some((own, RESULT_AT)),
                ..post.clone()
            },
        )
        .unwrap();
    mesh.nics[1].post_reduce(Instant::ZERO, post).unwrap();
    mesh.run(Instant::ZERO + Duration::from_millis(10_000));
    let done = mesh.completions(1);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, Err(WcError::RetryExceeded));
    // Every retry went out, then one more timeout gave up.
    let st = mesh.nics[1].stats();
    assert_eq!(st.reduce_sent, 1);
    assert_eq!(st.reduce_retransmits, u64::from(cfg().max_retries));
    assert_eq!(st.timeouts, u64::from(cfg().max_retries) + 1);
    assert_eq!(st.retries_exhausted, 1);
    assert_eq!(st.failed, 1);
    assert!(
        !mesh.nics[0].is_idle(),
        "the root still waits for its child"
    );
    assert!(mesh.nics[0].stats().reduce_refused > 0);
    assert!(
        mesh.nics[1].is_idle(),
        "a failed collective leaves nothing behind"
    );
}

#[test]
fn bad_descriptors_are_refused_by_reason() {
    let mut nic = Nic::new(NodeAddr(0), cfg()).unwrap();
    let key = nic.register(RESULT_AT, 16, Access::ALL);
    let good = ReducePost {
        kind: CollectiveKind::Allreduce,
        ep: 1,
        tree: 1,
        seq: 1,
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        count: 2,
        operand: Operand {
            values: vec![0, 0],
            locs: Vec::new(),
        },
        parent: None,
        children: vec![NodeAddr(1)],
        level: 1,
        result: Some((key, RESULT_AT)),
    };
    let refuse = |p: ReducePost| {
        let mut nic = Nic::new(NodeAddr(0), cfg()).unwrap();
        nic.register(RESULT_AT, 16, Access::ALL);
        nic.post_reduce(Instant::ZERO, p).unwrap_err().to_string()
    };
    assert!(refuse(ReducePost {
        op: ReduceOp::Bxor,
        ..good.clone()
    })
    .contains("not defined"));
    assert!(refuse(ReducePost {
        count: 3,
        ..good.clone()
    })
    .contains("`count` elements"));
    assert!(refuse(ReducePost {
        op: ReduceOp::MinLoc,
        ..good.clone()
    })
    .contains("location"));
    assert!(refuse(ReducePost {
        children: vec![NodeAddr(0)],
        ..good.clone()
    })
    .contains("own"));
    assert!(refuse(ReducePost {
        result: Some((key, RESULT_AT + 8)),
        ..good.clone()
    })
    .contains("result buffer"));
    let bcast_leaf = ReducePost {
        kind: CollectiveKind::Broadcast,
        parent: Some(Parent {
            addr: NodeAddr(1),
            branch: 0,
            fan_in: 1,
        }),
        children: Vec::new(),
        ..good.clone()
    };
    assert!(refuse(bcast_leaf.clone()).contains("give no operand"));
    let mut quiet_leaf = bcast_leaf.clone();
    quiet_leaf.operand = Operand::default();
    let mut ok = Nic::new(NodeAddr(0), cfg()).unwrap();
    ok.register(RESULT_AT, 16, Access::ALL);
    ok.post_reduce(Instant::ZERO, quiet_leaf).unwrap();
    assert!(refuse(ReducePost {
        parent: Some(Parent {
            addr: NodeAddr(1),
            branch: 2,
            fan_in: 2
        }),
        ..good.clone()
    })
    .contains("below the parent's fan-in"));
    assert!(refuse(ReducePost {
        children: (1..=256).map(NodeAddr).collect(),
        ..good.clone()
    })
    .contains("255 children"));
    // MINLOC results take 12 B an element: 24 B for two, not 16.
    let minloc = ReducePost {
        op: ReduceOp::MinLoc,
        operand: Operand {
            values: vec![0, 0],
            locs: vec![0, 0],
        },
        ..good.clone()
    };
    assert!(refuse(minloc.clone()).contains("result buffer"));
    let mut wide = Nic::new(NodeAddr(0), cfg()).unwrap();
    let k24 = wide.register(RESULT_AT, 24, Access::ALL);
    wide.post_reduce(
        Instant::ZERO,
        ReducePost {
            result: Some((k24, RESULT_AT)),
            ..minloc
        },
    )
    .unwrap();
    // A vector that needs more chunks than the NIC tracks.
    let mut small = Nic::new(
        NodeAddr(0),
        NicConfig {
            reduce_chunks: 2,
            ..cfg()
        },
    )
    .unwrap();
    let big = small.register(RESULT_AT, 4096, Access::ALL);
    let vector = |count: u32| ReducePost {
        count,
        operand: Operand {
            values: vec![0; count as usize],
            locs: Vec::new(),
        },
        result: Some((big, RESULT_AT)),
        ..good.clone()
    };
    assert!(small
        .post_reduce(Instant::ZERO, vector(13))
        .unwrap_err()
        .to_string()
        .contains("more chunks"));
    small.post_reduce(Instant::ZERO, vector(12)).unwrap();
    nic.post_reduce(Instant::ZERO, good.clone()).unwrap();
    assert!(nic
        .post_reduce(Instant::ZERO, good)
        .unwrap_err()
        .to_string()
        .contains("already posted"));
}

#[test]
fn hostile_reduce_packets_change_nothing() {
    let mut nic = Nic::new(NodeAddr(0), cfg()).unwrap();
    // A REDUCE whose branch is beyond its fan-in, one with an operation the
    // type does not have, and an ACK for nothing.
    let mk = |branch: u8, op: ReduceOp| {
        Repr {
            flags: udrma_proto::Flags::empty(),
            src_ep: 1,
            dst_ep: 1,
            op_num: 0,
            msg_id: 1,
            seg_index: 0,
            seg_count: 1,
            credits: 0,
            epoch: 1,
            body: udrma_proto::Body::Reduce {
                hdr: udrma_proto::ReduceHeader {
                    op,
                    ty: ReduceType::F64,
                    count: 1,
                    branch,
                    fan_in: 2,
                    tree: 1,
                    level: 0,
                    first: 0,
                },
                data: &[0; 8],
            },
        }
        .to_vec()
        .unwrap()
    };
    nic.handle_datagram(Instant::ZERO, NodeAddr(1), &mk(2, ReduceOp::Sum));
    nic.handle_datagram(Instant::ZERO, NodeAddr(1), &mk(0, ReduceOp::Bor));
    let ack = Repr {
        flags: udrma_proto::Flags::empty(),
        src_ep: 1,
        dst_ep: 1,
        op_num: 0,
        msg_id: 1,
        seg_index: 0,
        seg_count: 1,
        credits: 0,
        epoch: 1,
        body: udrma_proto::Body::ReduceAck {
            acked: Opcode::Reduce,
            branch: 0,
            tree: 1,
        },
    }
    .to_vec()
    .unwrap();
    nic.handle_datagram(Instant::ZERO, NodeAddr(1), &ack);
    assert_eq!(nic.stats().reduce_invalid, 2);
    assert_eq!(nic.stats().reduce_stale_acks, 1);
    assert!(nic.is_idle());
    assert!(nic.poll_transmit(Instant::ZERO, &mut Vec::new()).is_none());
}

fn quiet() -> Faults {
    Faults {
        loss: 0.0,
        dup: 0.0,
        jitter: Duration::ZERO,
    }
}

fn total(mesh: &Mesh, f: fn(&udrma_nic::Stats) -> u64) -> u64 {
    mesh.nics.iter().map(|n| f(n.stats())).sum()
}

#[test]
fn the_ledger_of_an_allreduce_in_two_chunks_adds_up() {
    // 4 nodes, binomial: 0 <- 1, 0 <- 2 <- 3. Seven doubles: two chunks
    // of 6 and 1 (48 B a descriptor).
    let run = Run {
        kind: CollectiveKind::Allreduce,
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        count: 7,
        k: 2,
    };
    let mut mesh = Mesh::new(4, cfg(), quiet(), 1);
    let keys = run.post_all(&mut mesh, 4);
    assert_eq!(mesh.nics[0].reduce_occupancy(), (2, 2, 1024));
    assert!(!mesh.nics[0].is_idle(), "the root waits for its children");
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    run.check(&mesh, &keys, 4).unwrap();
    assert_eq!(total(&mesh, |s| s.posted), 4);
    assert_eq!(total(&mesh, |s| s.completed), 4);
    assert_eq!(total(&mesh, |s| s.failed), 0);
    // 3 edges x 2 chunks, each way.
    assert_eq!(total(&mesh, |s| s.reduce_sent), 12);
    assert_eq!(total(&mesh, |s| s.reduce_acks), 12);
    assert_eq!(total(&mesh, |s| s.control_sent), 12);
    assert_eq!(total(&mesh, |s| s.rtt_samples), 12);
    assert_eq!(total(&mesh, |s| s.reduce_counted), 6);
    assert_eq!(total(&mesh, |s| s.alu_operands), 6);
    // Up: every node, every chunk; broadcasts: nodes 0 and 2, every chunk.
    assert_eq!(total(&mesh, |s| s.reduce_fired), 8 + 4);
    assert_eq!(total(&mesh, |s| s.reduce_results), 8);
    for f in [
        |s: &udrma_nic::Stats| s.reduce_retransmits,
        |s: &udrma_nic::Stats| s.timeouts,
        |s: &udrma_nic::Stats| s.reduce_duplicates,
        |s: &udrma_nic::Stats| s.reduce_invalid,
        |s: &udrma_nic::Stats| s.reduce_stale_acks,
        |s: &udrma_nic::Stats| s.reduce_expired,
    ] {
        assert_eq!(total(&mesh, f), 0);
    }
    for (i, nic) in mesh.nics.iter().enumerate() {
        let done: Vec<u64> = mesh.events[i]
            .iter()
            .filter_map(|e| match e {
                Event::Completed { len, .. } => Some(*len),
                _ => None,
            })
            .collect();
        assert_eq!(done, [56], "node {i}: the result's bytes");
        assert_eq!(nic.reduce_occupancy().0, 0);
        assert!(nic.occupancy().violation().is_none());
    }
}

#[test]
fn two_collectives_on_one_tree_run_side_by_side() {
    let run = Run {
        kind: CollectiveKind::Allreduce,
        op: ReduceOp::Max,
        ty: ReduceType::I64,
        count: 3,
        k: 3,
    };
    let mut mesh = Mesh::new(7, cfg(), quiet(), 1);
    let keys = mesh.regions();
    for (i, key) in keys.iter().enumerate() {
        let a = run.post_one(&mut mesh, i, 11, 1, *key);
        let b = run.post_one(&mut mesh, i, 22, 2, *key);
        assert_ne!(a, b);
    }
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    for (seq, seed) in [(1u64, 11u64), (2, 22)] {
        let want = alu::to_host_bytes(run.op, run.ty, &run.reference(7, seed));
        for (i, key) in keys.iter().enumerate() {
            let bytes = &mesh.nics[i].memory().region(*key).unwrap().bytes;
            let at = ((seq - 1) * 1024) as usize;
            assert_eq!(&bytes[at..at + want.len()], &want[..], "node {i} seq {seq}");
        }
    }
    for (i, nic) in mesh.nics.iter().enumerate() {
        assert_eq!(nic.stats().posted, 2, "node {i}");
        assert_eq!(nic.stats().completed, 2, "node {i}");
        assert!(nic.is_idle());
    }
}

#[test]
fn operands_that_arrive_before_the_parent_posts_wait_for_it() {
    let run = Run {
        kind: CollectiveKind::Allreduce,
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        count: 5,
        k: 2,
    };
    // 0 <- 1, 0 <- 2 <- 3: node 2 posts 20 us after its child's operand
    // arrived, node 0 too.
    let mut mesh = Mesh::new(4, cfg(), quiet(), 1);
    let keys = mesh.regions();
    run.post_one(&mut mesh, 1, 5, 1, keys[1]);
    run.post_one(&mut mesh, 3, 5, 1, keys[3]);
    mesh.run(Instant::ZERO + Duration::from_micros(20));
    assert_eq!(mesh.nics[2].reduce_occupancy().0, 1, "held for the host");
    assert!(!mesh.nics[2].is_idle());
    run.post_one(&mut mesh, 2, 5, 1, keys[2]);
    run.post_one(&mut mesh, 0, 5, 1, keys[0]);
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    run.check(&mesh, &keys, 5).unwrap();
    assert_eq!(total(&mesh, |s| s.reduce_invalid), 0);
}

#[test]
fn a_broadcast_that_reaches_a_node_before_its_host_posts_is_kept() {
    let run = Run {
        kind: CollectiveKind::Broadcast,
        op: ReduceOp::Sum,
        ty: ReduceType::U32,
        count: 4,
        k: 2,
    };
    let mut mesh = Mesh::new(4, cfg(), quiet(), 1);
    let keys = mesh.regions();
    for i in [0, 1, 3] {
        run.post_one(&mut mesh, i, 6, 1, keys[i]);
    }
    mesh.run(Instant::ZERO + Duration::from_micros(20));
    run.post_one(&mut mesh, 2, 6, 1, keys[2]);
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    run.check(&mesh, &keys, 6).unwrap();
}

#[test]
fn an_operand_that_disagrees_with_the_parents_descriptor_is_dropped() {
    let run = Run {
        kind: CollectiveKind::Reduce,
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        count: 2,
        k: 2,
    };
    let mut mesh = Mesh::new(2, cfg(), quiet(), 1);
    let keys = mesh.regions();
    run.post_one(&mut mesh, 1, 7, 1, keys[1]);
    mesh.run(Instant::ZERO + Duration::from_micros(20));
    // The root's host asks for three elements, not two.
    let other = Run { count: 3, ..run };
    other.post_one(&mut mesh, 0, 7, 1, keys[0]);
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    assert_eq!(mesh.nics[0].stats().reduce_invalid, 1);
    assert!(
        mesh.completions(0).is_empty(),
        "it never had the operand it asked for"
    );
}

#[test]
fn a_chunk_no_host_claims_is_forgotten_after_the_registry_timeout() {
    let run = Run {
        kind: CollectiveKind::Reduce,
        op: ReduceOp::Sum,
        ty: ReduceType::I32,
        count: 1,
        k: 2,
    };
    let mut mesh = Mesh::new(2, cfg(), quiet(), 1);
    let key = mesh.nics[1].register(RESULT_AT, 64, Access::ALL);
    run.post_one(&mut mesh, 1, 1, 1, key);
    mesh.run(Instant::ZERO + Duration::from_millis(50));
    // The child's operand was acknowledged, so its part is done.
    assert_eq!(mesh.completions(1).len(), 1);
    assert_eq!(mesh.nics[0].reduce_occupancy(), (1, 1, 1024));
    mesh.run(Instant::ZERO + Duration::from_millis(150));
    assert_eq!(mesh.nics[0].stats().reduce_expired, 1);
    assert_eq!(mesh.nics[0].reduce_occupancy().0, 0);
    assert!(mesh.nics[0].is_idle());
}

#[test]
fn the_cost_model_times_triggers_the_alu_and_the_result_dma() {
    // A star of 3: 0 <- 1, 0 <- 2. Leaves fire at once: doorbell 1 +
    // fetch 2 + trigger 3 = 6 us, then 1 us of wire: both arrive at 7.
    // The ALU takes them one after the other (5 us each): done at 17, so
    // the root's broadcast leaves 3 + 10 us after 7, farthest child
    // first: to node 2 after one more trigger (16 us of NIC work) and to
    // node 1 after two (19 us). Each child's NIC writes the result to
    // host memory: 7 us.
    let cost = udrma_nic::CostModel {
        doorbell: Duration::from_micros(1),
        descriptor_fetch: Duration::from_micros(2),
        reduce_trigger: Duration::from_micros(3),
        alu_per_operand: Duration::from_micros(5),
        dma_setup: Duration::from_micros(7),
        ..udrma_nic::CostModel::ZERO
    };
    let run = Run {
        kind: CollectiveKind::Allreduce,
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        count: 6,
        k: 3,
    };
    let mut mesh = Mesh::new(3, NicConfig { cost, ..cfg() }, quiet(), 1);
    let keys = run.post_all(&mut mesh, 8);
    mesh.run(Instant::ZERO + Duration::from_millis(10));
    run.check(&mesh, &keys, 8).unwrap();
    let at = |i: usize| mesh.completions(i)[0].1;
    let us = |x: u64| Instant::ZERO + Duration::from_micros(x);
    assert_eq!(at(0), us(7));
    assert_eq!(at(2), us(7 + 1 + 16 + 7), "the farthest child first");
    assert_eq!(at(1), us(7 + 1 + 19 + 7));
}

fn op_and_type() -> impl Strategy<Value = (ReduceOp, ReduceType)> {
    (0usize..ReduceOp::ALL.len(), 0usize..ReduceType::ALL.len())
        .prop_map(|(o, t)| (ReduceOp::ALL[o], ReduceType::ALL[t]))
        .prop_filter("operation defined on the type", |(o, t)| o.applies_to(*t))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Under loss, duplication and reordering every node of every
    /// collective ends with exactly the tree-order result, and every NIC
    /// goes idle (nothing hangs, nothing is counted twice).
    #[test]
    fn every_node_gets_the_reference_result_over_a_bad_wire(
        (op, ty) in op_and_type(),
        kind in prop_oneof![
            Just(CollectiveKind::Reduce),
            Just(CollectiveKind::Allreduce),
            Just(CollectiveKind::Broadcast)
        ],
        n in 2usize..40,
        k in 2usize..6,
        count in 1u32..20,
        loss in 0.0f64..0.3,
        dup in 0.0f64..0.3,
        jitter_us in 0u64..5,
        seed in any::<u64>(),
    ) {
        let run = Run { kind, op, ty, count, k };
        let faults = Faults { loss, dup, jitter: Duration::from_micros(jitter_us) };
        let mut mesh = Mesh::new(n, cfg(), faults, seed);
        let keys = run.post_all(&mut mesh, seed);
        mesh.run(Instant::ZERO + Duration::from_millis(1000));
        if let Err(e) = run.check(&mesh, &keys, seed) {
            return Err(TestCaseError::fail(e));
        }
    }
}
