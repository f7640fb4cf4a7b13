//! Runs split across threads (`run_sharded`): each thread runs its own
//! nodes' part of every window, and the run comes out exactly as one
//! thread runs it in windows: the same trace hash, counters, clock and
//! host events, for any number of threads. The stories cover what a
//! split must carry between threads: packets on lines between shards,
//! queues judged by a sender whose packets another shard holds (drops,
//! ECN marks, retransmissions), headers and control packets sent ahead
//! of a queue to another shard, NIC cost-model events, and topologies
//! split by pod and by node number.

mod common;

use common::*;
use proptest::prelude::*;
use udrma_fabric::{
    partition, run_ranked, run_sharded, EventOrder, FabricConfig, FabricError, FabricStats,
    HostEvent, LinkParams, LocalRanks, Policy, RankedRun, ShardError, Topology, World,
};
use udrma_faults::{Jitter, Model, Rule, RuleSet, Target};
use udrma_nic::NicConfig;
use udrma_proto::{Duration, Instant};

/// What a run leaves to compare: trace hash and event count, counters,
/// clock and the hosts' events in order.
type Outcome = (u64, u64, FabricStats, Instant, Vec<HostEvent>);

/// How a story builds its world (the same on every thread).
type Build<'a> = dyn Fn() -> Result<World, FabricError> + Sync + 'a;

/// The run on one thread, in windows.
fn one_thread(build: &Build) -> Outcome {
    let mut w = build().unwrap();
    w.set_event_order(EventOrder::Windows).unwrap();
    assert!(w.run(), "idle at the end");
    let events = w.take_host_events();
    (
        w.trace().hash(),
        w.trace().events(),
        w.stats().clone(),
        w.now(),
        events,
    )
}

/// The same run split into `n` threads.
fn split(n: usize, build: &Build) -> Outcome {
    let run = run_sharded(n, build).unwrap();
    assert_eq!(run.shards, n);
    (
        run.trace.hash(),
        run.trace.events(),
        run.stats,
        run.now,
        run.host_events,
    )
}

/// The same run on `n` ranks ([`LocalRanks`] on threads): rank 0's
/// figures, and what each rank exchanged.
fn ranked(n: usize, build: &Build) -> (Outcome, RankedRun) {
    let group = LocalRanks::group(n);
    let runs: Vec<Option<RankedRun>> = std::thread::scope(|scope| {
        let handles: Vec<_> = group
            .into_iter()
            .map(|r| scope.spawn(move || run_ranked(r, "a story", build).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut runs = runs.into_iter();
    let run = runs.next().flatten().expect("rank 0 has the figures");
    assert!(runs.all(|r| r.is_none()), "only rank 0 has them");
    assert_eq!(run.ranks.len(), n);
    let outcome = (
        run.trace_hash,
        run.trace_events,
        run.stats.clone(),
        run.now,
        Vec::new(),
    );
    (outcome, run)
}

/// Every host of a k=4 fat tree writes `len` bytes (real bytes) to the
/// host `step` along, sprayed packet by packet.
fn fat_tree(seed: u64, len: u64, step: u32) -> Result<World, FabricError> {
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let cfg = FabricConfig {
        seed,
        routing: Policy::Spray,
        ..FabricConfig::default()
    };
    let (mut w, keys) = world(topo, cfg, RuleSet::new(), len as usize);
    for h in 0..16 {
        write(&mut w, &keys, h, (h + step) % 16, len);
    }
    Ok(w)
}

/// The sprayed fat tree through every fault that judges each packet on
/// its own: loss, duplication and corruption on every link, jittered
/// delay on the links up from one edge switch, a reorder on another, and
/// one pod cut off from another for a while. Each thread judges the
/// packets its nodes send, drawing by packet and port.
fn faulty_fat_tree() -> Result<World, FabricError> {
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let cfg = FabricConfig {
        seed: 9,
        routing: Policy::Spray,
        nic: NicConfig {
            max_retries: 40,
            ..NicConfig::default()
        },
        ..FabricConfig::default()
    };
    let mut rules = messy_rules(9, 0.02);
    for (name, target, model) in [
        (
            "jitter",
            Target::any().links(&["e0-a0", "e0-a1"]),
            Model::Delay {
                base: Duration::from_nanos(500),
                jitter: Duration::from_nanos(400),
                dist: Jitter::Normal,
                limit: None,
            },
        ),
        (
            "reorder",
            Target::any().links(&["e2-a2"]),
            Model::Reorder {
                p: 0.5,
                correlation: 0.0,
                gap: 1,
                delay: Duration::from_micros(2),
                limit: None,
            },
        ),
        (
            "cut",
            Target::any().window(
                Instant::ZERO + Duration::from_micros(5),
                Instant::ZERO + Duration::from_micros(40),
            ),
            Model::Partition {
                a: (0..4).map(udrma_proto::NodeAddr).collect(),
                b: (8..12).map(udrma_proto::NodeAddr).collect(),
                two_way: true,
            },
        ),
    ] {
        rules.push(Rule::new(9, name, target, model).unwrap());
    }
    let (mut w, keys) = world(topo, cfg, rules, 32 * 1024);
    for h in 0..16 {
        write(&mut w, &keys, h, (h + 9) % 16, 32 * 1024);
    }
    Ok(w)
}

/// Four hosts on each side of a slow bottleneck with a short queue that
/// marks ECN: the left side writes across, so the bottleneck drops and
/// marks, and the NICs retransmit on their timers. Its nodes are split
/// by number, so most lines cross between threads.
fn dumbbell() -> Result<World, FabricError> {
    let edge = LinkParams::default();
    let bottleneck = LinkParams {
        bandwidth_bps: 10_000_000_000,
        queue_bytes: 24_000,
        ecn_threshold: Some(8_000),
        ..LinkParams::default()
    };
    let topo = Topology::dumbbell(4, edge, bottleneck);
    let cfg = FabricConfig {
        nic: NicConfig {
            max_retries: 30,
            ..NicConfig::default()
        },
        ..FabricConfig::default()
    };
    let (mut w, keys) = world(topo, cfg, RuleSet::new(), 96 * 1024);
    for h in 0..4 {
        write(&mut w, &keys, h, 4 + (h + 1) % 4, 96 * 1024);
        write(&mut w, &keys, 4 + h, h, 16 * 1024);
    }
    Ok(w)
}

/// Twelve hosts of the other pods of a k=4 fat tree write to the two
/// hosts of one edge switch through short queues that mark ECN: the
/// core switches' ports into that pod take three times their rate, so
/// they drop and mark, and half of those ports send to another thread's
/// pod (their queue judged from stand-ins).
fn incast() -> Result<World, FabricError> {
    incast_with(LinkParams::default())
}

/// The incast through switches that trim instead of dropping: the
/// headers go ahead of the core switches' queues, most of them to
/// another thread's pod, and every switch serves control packets ahead
/// of its data.
fn trimming_incast() -> Result<World, FabricError> {
    incast_with(LinkParams {
        trim: true,
        control_priority: true,
        ..LinkParams::default()
    })
}

fn incast_with(base: LinkParams) -> Result<World, FabricError> {
    let params = LinkParams {
        queue_bytes: 16_000,
        ecn_threshold: Some(6_000),
        ..base
    };
    let topo = Topology::fat_tree(4, params).unwrap();
    let cfg = FabricConfig {
        routing: Policy::Spray,
        nic: NicConfig {
            max_retries: 40,
            ..NicConfig::default()
        },
        ..FabricConfig::default()
    };
    let (mut w, keys) = world(topo, cfg, RuleSet::new(), 32 * 1024);
    for h in 4..16 {
        write(&mut w, &keys, h, h % 2, 32 * 1024);
    }
    Ok(w)
}

/// A k-ary n-tree (a generic topology to the router: tables, not
/// structure) whose NICs take time for every packet, so arrivals reach
/// the NIC through the cost model's own events.
fn costed_tree() -> Result<World, FabricError> {
    let topo = Topology::kary_ntree(2, 3, 8, LinkParams::default()).unwrap();
    let cfg = FabricConfig {
        routing: Policy::Ecmp,
        nic: costed_nics(150),
        ..FabricConfig::default()
    };
    let (mut w, keys) = world(topo, cfg, RuleSet::new(), 64 * 1024);
    for h in 0..4 {
        write(&mut w, &keys, h, 7 - h, 64 * 1024);
    }
    // The others post later: events with data, filed before the split.
    for h in 4..8 {
        let wr = udrma_nic::WorkRequest::write(
            udrma_proto::NodeAddr(7 - h),
            keys[h as usize].0,
            SRC,
            64 * 1024,
            keys[7 - h as usize].1 .0,
            DST,
        );
        w.post_at(
            Instant(3_500_000 * u64::from(h)),
            udrma_proto::NodeAddr(h),
            wr,
        )?;
    }
    Ok(w)
}

#[test]
fn a_run_split_across_threads_is_the_run_of_one() {
    let shapes: [(&str, &Build); 6] = [
        ("fat tree", &|| fat_tree(3, 48 * 1024, 5)),
        ("faulty fat tree", &faulty_fat_tree),
        ("incast", &incast),
        ("trimming incast", &trimming_incast),
        ("dumbbell", &dumbbell),
        ("costed k-ary n-tree", &costed_tree),
    ];
    for (name, build) in shapes {
        let want = one_thread(build);
        let completed = want
            .4
            .iter()
            .filter(|e| matches!(e.event, udrma_nic::Event::Completed { .. }))
            .count();
        assert!(completed >= 8, "{name}: {completed} completions");
        assert!(want.2.sent >= want.2.delivered && want.2.delivered > 0);
        if name == "dumbbell" || name == "incast" {
            let s = &want.2;
            assert!(
                s.dropped_total() > 0 && s.ecn_marked > 0,
                "{name}: the bottleneck drops and marks: {s:?}"
            );
        }
        if name == "faulty fat tree" {
            let s = &want.2;
            assert!(
                s.dropped_total() > 0 && s.duplicated > 0 && s.corrupted > 0 && s.delayed > 0,
                "{name}: every fault fires: {s:?}"
            );
        }
        if name == "trimming incast" {
            let s = &want.2;
            assert!(
                s.trimmed > 0 && s.control_ahead > 0,
                "{name}: headers and control packets go ahead: {s:?}"
            );
        }
        for n in 1..=4 {
            let got = split(n, build);
            assert_eq!(
                (got.0, got.1, got.3),
                (want.0, want.1, want.3),
                "{name} on {n} threads: trace hash, events, clock"
            );
            assert_eq!(got.2, want.2, "{name} on {n} threads: counters");
            assert_eq!(got.4, want.4, "{name} on {n} threads: host events");
            let (got, run) = ranked(n, build);
            assert_eq!(
                (got.0, got.1, got.3),
                (want.0, want.1, want.3),
                "{name} on {n} ranks: trace hash, events, clock"
            );
            assert_eq!(got.2, want.2, "{name} on {n} ranks: counters");
            let handed: u64 = run.ranks.iter().map(|r| r.packets).sum();
            assert_eq!(handed > 0, n > 1, "{name} on {n} ranks: {:?}", run.ranks);
            let windows = run.ranks[0].windows;
            assert!(
                run.ranks
                    .iter()
                    .all(|r| r.windows == windows && windows > 0),
                "{name} on {n} ranks: every rank runs every window: {:?}",
                run.ranks
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    /// Whatever the seed, the size and the pairing, two and three
    /// threads give the hash one thread gives.
    #[test]
    fn any_split_gives_the_same_trace(
        seed in 0u64..1000,
        len in 1u64..40_000,
        step in 1u32..16,
    ) {
        let build = || fat_tree(seed, len, step);
        let want = one_thread(&build);
        for n in [2, 3] {
            let got = split(n, &build);
            prop_assert_eq!((got.0, got.1), (want.0, want.1), "{} threads", n);
        }
    }
}

/// What a split run cannot carry is refused up front, with what it is.
#[test]
fn what_a_split_cannot_carry_is_refused_by_name() {
    let refused =
        |build: &(dyn Fn() -> Result<World, FabricError> + Sync)| match run_sharded(2, build) {
            Err(ShardError::Stopped(_, why)) | Err(ShardError::Unsupported(why)) => why,
            Err(e) => e.to_string(),
            Ok(_) => panic!("a split run accepted it"),
        };
    // A rule whose verdicts depend on the packets before it.
    let bursty = || {
        let ge = Model::GilbertElliott {
            p: 0.01,
            r: 0.25,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        let (w, _) = world(
            Topology::pair(LinkParams::default()),
            FabricConfig::default(),
            rules(1, vec![("bursty", Target::any(), ge)]),
            4096,
        );
        Ok(w)
    };
    let why = refused(&bursty);
    assert!(
        why.contains("fault rule \"bursty\"") && why.contains("Gilbert-Elliott"),
        "{why}"
    );
    let tapped = || {
        let (mut w, _) = world(
            Topology::pair(LinkParams::default()),
            FabricConfig::default(),
            RuleSet::new(),
            4096,
        );
        w.tap_all(Box::new(std::io::sink()))?;
        Ok(w)
    };
    assert!(refused(&tapped).contains("capture"));
    let traced = || {
        let (mut w, _) = world(
            Topology::pair(LinkParams::default()),
            FabricConfig::default(),
            RuleSet::new(),
            4096,
        );
        w.set_trace_sink(
            udrma_fabric::TraceFormat::JsonLines,
            Box::new(std::io::sink()),
        );
        Ok(w)
    };
    assert!(refused(&traced).contains("trace sink"));
    for n in [0, udrma_fabric::MAX_SHARDS + 1] {
        let e = run_sharded(n, tapped).expect_err("refused");
        assert!(matches!(e, ShardError::Count(c) if c == n), "{e}");
    }
    // As many threads as allowed, most of them with no node at all.
    let pair = || {
        let (mut w, keys) = world(
            Topology::pair(LinkParams::default()),
            FabricConfig::default(),
            RuleSet::new(),
            4096,
        );
        write(&mut w, &keys, 0, 1, 4096);
        Ok(w)
    };
    let most = split(udrma_fabric::MAX_SHARDS, &pair);
    assert_eq!(most.0, one_thread(&pair).0);
}

/// Each thread's build is checked against shard 0's: a build that is not
/// the same every time is refused, naming the shard.
#[test]
fn a_build_that_differs_between_threads_is_refused() {
    let calls = std::sync::atomic::AtomicU32::new(0);
    let wobbly = || {
        let n = calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (mut w, keys) = world(
            Topology::pair(LinkParams::default()),
            FabricConfig::default(),
            RuleSet::new(),
            8192,
        );
        write(&mut w, &keys, 0, 1, 4096);
        if n % 2 == 1 {
            write(&mut w, &keys, 1, 0, 4096);
        }
        Ok(w)
    };
    match run_sharded(2, wobbly) {
        Err(ShardError::Differ(1, why)) => assert!(why.contains("against"), "{why}"),
        other => panic!("{:?}", other.map(|r| r.trace.hash())),
    }
}

/// A fat tree is split pod by pod: a pod's hosts, edge and aggregation
/// switches share a thread, pods are shared out in order, and so are the
/// core switches, evenly; any other topology its switches in runs of
/// their numbers, each host with the node its link goes to (that node's
/// port books the host's receive unit, and the host's placing work moves
/// the booking on: both on one thread), a pair on one thread. (Any split
/// gives the same run; this one keeps most packets on one thread.)
#[test]
fn a_fat_tree_is_split_pod_by_pod() {
    let t = Topology::fat_tree(8, LinkParams::default()).unwrap();
    let shard_of = |part: &[u16], name: &str| {
        let i = t.nodes.iter().position(|n| n.name == name).unwrap();
        part[i]
    };
    for n in [1usize, 2, 3, 4, 8] {
        let part = partition(&t, n);
        assert_eq!(part.len(), t.nodes.len());
        for pod in 0..8 {
            let want = (pod * n / 8) as u16;
            for j in 0..16 {
                assert_eq!(
                    shard_of(&part, &format!("h{}", pod * 16 + j)),
                    want,
                    "n={n}"
                );
            }
            for j in 0..4 {
                assert_eq!(shard_of(&part, &format!("e{}", pod * 4 + j)), want, "n={n}");
                assert_eq!(shard_of(&part, &format!("a{}", pod * 4 + j)), want, "n={n}");
            }
        }
        let mut cores = vec![0; n];
        for c in 0..16 {
            let s = shard_of(&part, &format!("c{c}"));
            assert_eq!(s as usize, c * n / 16, "n={n}, core {c}");
            cores[s as usize] += 1;
        }
        assert!(
            cores.iter().all(|&c| c == 16 / n || c == 16 / n + 1),
            "n={n}: {cores:?}"
        );
    }
    let d = Topology::dumbbell(4, LinkParams::default(), LinkParams::default());
    // Hosts 0-3 hang off switch 8, hosts 4-7 off switch 9.
    assert_eq!(partition(&d, 2), [0, 0, 0, 0, 1, 1, 1, 1, 0, 1]);
    let p = Topology::pair(LinkParams::default());
    assert_eq!(partition(&p, 2), [0, 0]);
}

/// A rank keeps the packets for another until the window before they
/// arrive, so the far end's line can be empty at a window's start while
/// one process's still holds them, its head's arrival pending: the
/// pending count adds those lines, and the run's deepest event queue is
/// one process's. The k=32 speed shape is the smallest run found where it
/// shows (89,385 events pending at most; 89,372 without those lines), so
/// release only.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "release only: the k=32 speed shape (.ci/run runs it)"
)]
fn ranks_count_the_pending_events_of_one_process_at_k32() {
    let build = || udrma_fabric::shapes::speed_shape(32, 1);
    let one = one_thread(&build);
    let (two, _) = ranked(2, &build);
    assert_eq!(one.2.max_event_queue, 89_385);
    assert_eq!((two.0, two.1, &two.2, two.3), (one.0, one.1, &one.2, one.3));
}
