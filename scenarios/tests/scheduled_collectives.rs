//! MPI collective algorithms over the engine, as protocol stories: every
//! rank runs its schedule over the messaging layer on a simulated
//! fabric, and every rank's result must equal what the same schedules
//! compute in memory, bit for bit (floats in the algorithm's own fold
//! order).

use std::sync::Arc;

use udrma_fabric::sim::Sim;
use udrma_fabric::{LinkParams, Topology};
use udrma_faults::{Model, Target};
use udrma_host::collective::schedule::run::{fold_elements, run};
use udrma_host::collective::schedule::{Algorithm, Collective, Spec};
use udrma_host::collective::scheduled::{ScheduledApp, ScheduledPlan, SizeRun, Wire};
use udrma_host::messaging::{Messenger, MsgConfig};
use udrma_proto::{Duration, Instant, NodeAddr, ReduceOp, ReduceType};

/// Each rank's result and laps after running `plan` on a star of its
/// ranks (with `lossy`, 2 % of packets lost).
fn on_fabric(plan: &ScheduledPlan, lossy: bool) -> Vec<(Vec<u8>, bool, usize)> {
    let loss = Model::Loss {
        p: 0.02,
        correlation: 0.0,
    };
    on_faulty_fabric(plan, if lossy { vec![loss] } else { vec![] })
}

/// The same under `faults`, each on every link: per rank its first
/// measured result, whether later ones equalled it, and its laps that
/// ended.
fn on_faulty_fabric(plan: &ScheduledPlan, faults: Vec<Model>) -> Vec<(Vec<u8>, bool, usize)> {
    on_runs(plan, faults)
        .into_iter()
        .map(|mut r| {
            let (result, same) = r.results.swap_remove(0);
            (result, same, r.laps.len())
        })
        .collect()
}

/// What every rank must hold: the same schedules run in memory.
fn reference(plan: &ScheduledPlan) -> Vec<Vec<u8>> {
    let plans: Vec<_> = (0..plan.spec.ranks)
        .map(|r| plan.spec_at(0).plan(r).unwrap())
        .collect();
    let ran = run(
        &plans,
        |r| plan.input(r, plans[r as usize].input.len),
        |g, h| fold_elements(plan.op, plan.ty, g, h),
    )
    .unwrap();
    plans
        .iter()
        .zip(&ran.arenas)
        .map(|(pl, a)| a[pl.output.at as usize..pl.output.end() as usize].to_vec())
        .collect()
}

fn plan(collective: Collective, algorithm: Algorithm, ranks: u32, count: u64) -> ScheduledPlan {
    ScheduledPlan {
        spec: Spec {
            collective,
            algorithm,
            ranks,
            count: 0,
            elem: 8,
            root: ranks / 2,
            pipeline: Spec::PIPELINE,
        },
        sizes: vec![SizeRun { count, algorithm }],
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        iterations: 3,
        warmup: 1,
        start: Instant::ZERO,
        seed: 5,
        wire: Wire::Messaging,
        phantom: false,
    }
}

/// Every algorithm on 6 ranks (not a power of two), eager-sized and
/// rendezvous-sized vectors: each rank ends every iteration with the
/// result the schedules give in memory.
#[test]
fn every_algorithm_over_the_engine_gives_the_in_memory_result() {
    for collective in Collective::ALL {
        for &algorithm in collective.algorithms() {
            for count in [5, 3000] {
                let pl = plan(collective, algorithm, 6, count);
                let want = reference(&pl);
                let got = on_fabric(&pl, false);
                for (r, (g, same, laps)) in got.iter().enumerate() {
                    let what = format!("{collective} {algorithm} × {count}, rank {r}");
                    assert_eq!(*laps, 4, "{what}: every iteration ends");
                    assert!(*same, "{what}: every iteration gives the same result");
                    assert!(
                        g == &want[r],
                        "{what}: the result differs from the schedule's"
                    );
                }
            }
        }
    }
}

/// The same under 2 % loss: the transport's retransmissions make it
/// whole, and the results do not change.
#[test]
fn a_lossy_fabric_changes_the_time_not_the_result() {
    let pl = plan(Collective::Allreduce, Algorithm::Rabenseifner, 7, 1000);
    let want = reference(&pl);
    let got = on_fabric(&pl, true);
    for (r, (g, same, laps)) in got.iter().enumerate() {
        assert_eq!(*laps, 4, "rank {r}");
        assert!(*same && g == &want[r], "rank {r}");
    }
    // The comparison can fail: other inputs give other bits.
    let other = reference(&ScheduledPlan { seed: 6, ..pl });
    assert!(got.iter().zip(&other).all(|((g, ..), o)| g != o));
}

/// The same over the RDMA wire: every message one WRITE into the slot
/// its receiver registered for it, and three sizes in one run (each size
/// lays its slots out anew while its peers may already be writing the
/// barrier's). Every rank's result is the schedules' in memory.
#[test]
fn every_algorithm_over_rdma_writes_gives_the_in_memory_result() {
    for collective in Collective::ALL {
        for &algorithm in collective.algorithms() {
            let sizes = [5, 3000, 1]
                .map(|count| SizeRun { count, algorithm })
                .to_vec();
            let pl = ScheduledPlan {
                sizes,
                wire: Wire::Write,
                ..plan(collective, algorithm, 6, 0)
            };
            let got = on_runs(&pl, vec![]);
            for size in 0..3 {
                let at = ScheduledPlan {
                    sizes: vec![pl.sizes[size]],
                    ..pl.clone()
                };
                let want = reference(&at);
                for (r, rank) in got.iter().enumerate() {
                    let what = format!("{collective} {algorithm} size {size}, rank {r}");
                    let (g, same) = &rank.results[size];
                    assert!(*same, "{what}: every iteration gives the same result");
                    assert!(g == &want[r], "{what}: the result differs");
                }
            }
            for (r, rank) in got.iter().enumerate() {
                assert_eq!(rank.laps.len(), 12, "rank {r}: every iteration ends");
                assert_eq!(rank.strays, 0, "rank {r}: a WRITE landed outside its slots");
            }
        }
    }
}

/// With phantom payloads nothing is stored or moved, and the run takes
/// the same time to the picosecond: the packets are the same, only their
/// bytes are left out. (The real run's results are checked above.)
#[test]
fn phantom_payloads_take_the_time_real_ones_take() {
    let real = ScheduledPlan {
        wire: Wire::Write,
        ..plan(Collective::Allreduce, Algorithm::Ring, 5, 40_000)
    };
    let phantom = ScheduledPlan {
        phantom: true,
        ..real.clone()
    };
    let (a, b) = (on_runs(&real, vec![]), on_runs(&phantom, vec![]));
    for (r, (a, b)) in a.iter().zip(&b).enumerate() {
        assert_eq!(a.laps.len(), 4, "rank {r}");
        assert_eq!(a.laps, b.laps, "rank {r}: the same laps to the picosecond");
        assert!(!a.results[0].0.is_empty(), "rank {r}: a real result");
        assert!(b.results[0].0.is_empty(), "rank {r}: no phantom result");
    }
}

/// Broadcasts on the RDMA wire under 10 % loss: a rank can leave one
/// barrier and, its broadcast needing nobody, be in the next while a
/// peer is still in this one, stuck at an earlier round on a lost
/// packet; its next barrier message then lands in a slot whose message
/// the peer has not read yet (19 times in this run, counted once by
/// hand). The slot holds both messages' bytes, and each barrier must
/// take only its own: taking the whole count loses the newer one and
/// the next barrier never ends.
#[test]
fn a_rank_ahead_by_a_barrier_leaves_its_peer_the_older_message() {
    let pl = ScheduledPlan {
        wire: Wire::Write,
        iterations: 100,
        ..plan(Collective::Broadcast, Algorithm::Binomial, 16, 4)
    };
    let loss = Model::Loss {
        p: 0.1,
        correlation: 0.0,
    };
    for (r, rank) in on_runs(&pl, vec![loss]).iter().enumerate() {
        assert_eq!(rank.laps.len(), 101, "rank {r}: every barrier ends");
        assert_eq!(rank.strays, 0, "rank {r}");
    }
}

/// A message of more pieces than the NIC gathers in one request goes as
/// several WRITEs into consecutive bytes of its slot, and is in only
/// when all have landed: Bruck's all-to-all on 9 ranks sends messages of
/// up to 8 pieces, here through NICs that gather 2.
#[test]
fn a_message_of_many_pieces_lands_whole_through_several_writes() {
    // No warm-up: an iteration that read a slot early would find the
    // previous iteration's bytes there, the same as this one's.
    let pl = ScheduledPlan {
        wire: Wire::Write,
        warmup: 0,
        ..plan(Collective::Alltoall, Algorithm::Bruck, 9, 100)
    };
    let nic = udrma_nic::NicConfig {
        max_sge: 2,
        ..udrma_nic::NicConfig::default()
    };
    let want = reference(&pl);
    let got = on_runs_with(&pl, vec![], Some(nic));
    for (r, rank) in got.iter().enumerate() {
        assert_eq!(rank.laps.len(), 3, "rank {r}");
        assert!(
            rank.results[0].1 && rank.results[0].0 == want[r],
            "rank {r}"
        );
    }
}

/// What one rank's run left: per size its first measured result and
/// whether later ones equalled it; its finished laps (start, end); and
/// the WRITEs that landed in no slot.
struct Ran {
    results: Vec<(Vec<u8>, bool)>,
    laps: Vec<(Instant, Instant)>,
    strays: u64,
}

/// Runs `plan` on a star of its ranks under `faults`, each on every
/// link, over the wire the plan names.
fn on_runs(plan: &ScheduledPlan, faults: Vec<Model>) -> Vec<Ran> {
    on_runs_with(plan, faults, None)
}

/// The same with NICs configured as `nic` says.
fn on_runs_with(
    plan: &ScheduledPlan,
    faults: Vec<Model>,
    nic: Option<udrma_nic::NicConfig>,
) -> Vec<Ran> {
    let p = plan.spec.ranks;
    let mut b = Sim::builder()
        .topology(Topology::star(p, LinkParams::default()))
        .time_limit(Duration::from_millis(500));
    if let Some(nic) = nic {
        b = b.nic(nic);
    }
    for (i, m) in faults.into_iter().enumerate() {
        b = b.fault(&format!("f{i}"), Target::default(), m);
    }
    let mut sim = b.build().unwrap();
    let plan = Arc::new(plan.clone());
    for h in 0..p {
        let nic = sim.nic_mut(NodeAddr(h)).unwrap();
        let app = match plan.wire {
            Wire::Messaging => {
                let mut m = Messenger::new(MsgConfig::default(), nic).unwrap();
                for peer in plan.peers(h).unwrap() {
                    m.connect(Instant::ZERO, nic, peer).unwrap();
                }
                sim.service(NodeAddr(h)).unwrap();
                ScheduledApp::new(h, plan.clone(), m).unwrap()
            }
            Wire::Write => ScheduledApp::over_writes(h, plan.clone(), nic).unwrap(),
        };
        sim.add_app(NodeAddr(h), app).unwrap();
    }
    let o = sim.run();
    o.assert_invariants();
    (0..p)
        .map(|h| {
            let a = sim.app::<ScheduledApp>(NodeAddr(h)).unwrap();
            Ran {
                results: (0..plan.sizes.len())
                    .map(|s| {
                        let (r, same) = a.result(s);
                        (r.unwrap_or_default().to_vec(), same)
                    })
                    .collect(),
                laps: a
                    .laps()
                    .iter()
                    .filter_map(|l| match l.end {
                        Some(Ok(end)) => Some((l.start, end)),
                        _ => None,
                    })
                    .collect(),
                strays: a.strays(),
            }
        })
        .collect()
}

fn file(topology: &str, workload: &str, faults: &str) -> String {
    format!(
        "name = \"mpi\"\ntime_limit = \"500ms\"\n[topology]\n{topology}\n\
         [[workload]]\nkind = \"collective\"\n{workload}\n{faults}"
    )
}

/// From a scenario file: a size sweep of every allreduce algorithm on a
/// fat tree, with and without loss, and on a star over real sockets; every row's result equals the schedules' in memory, and the
/// latency grows with the size.
#[test]
fn a_scenario_file_runs_an_algorithm_over_sizes_and_reports_osu_rows() {
    use udrma_scenarios::{run, BackendKind, RunOptions, Scenario};
    let fat = "kind = \"fat-tree\"\nk = 4";
    let star = "kind = \"star\"\nhosts = 5";
    let loss = "[[fault]]\nmodel = \"loss\"\np = 0.01\n";
    for alg in ["recursive_doubling", "reduce_scatter_allgather", "ring"] {
        for (topology, faults, backend) in [
            (fat, "", BackendKind::Sim),
            (fat, loss, BackendKind::Sim),
            (star, "", BackendKind::Udp),
        ] {
            let w = format!("algorithm = \"{alg}\"\nsizes = [8, 4096, 65536]\ncount = 3");
            let sc = Scenario::parse("mpi.toml", &file(topology, &w, faults)).unwrap();
            let opts = RunOptions {
                backend,
                ..RunOptions::default()
            };
            let r = run(&sc, opts).unwrap();
            assert!(r.passed(), "{alg}: {:?}\n{}", r.notes, r.table());
            let o = r.scheduled.as_ref().unwrap();
            assert_eq!(o.rows.len(), 3);
            assert!(o.rows.iter().all(|row| row.result_equal));
            // Rabenseifner below 16 elements (8 B) is refused by MPICH,
            // which runs recursive doubling instead; the row says so.
            let ran: Vec<&str> = o.rows.iter().map(|row| row.algorithm.as_str()).collect();
            let first = if alg == "reduce_scatter_allgather" {
                "recursive_doubling"
            } else {
                alg
            };
            assert_eq!(ran, [first, alg, alg], "{}", r.table());
            if backend == BackendKind::Sim {
                assert!(o.rows[0].avg_us < o.rows[2].avg_us, "{}", r.table());
                assert!(o.rows.iter().all(|x| x.measured == x.wanted
                    && x.min_us <= x.avg_us
                    && x.avg_us <= x.max_us
                    && x.min_us.is_some()));
            }
        }
    }
}

/// Keys that do not fit an algorithm are refused, each by name and
/// place.
#[test]
fn bad_algorithm_keys_are_named() {
    use udrma_scenarios::Scenario;
    let star = "kind = \"star\"\nhosts = 4";
    let bad = |w: &str, want: &str| {
        let e = Scenario::parse("bad.toml", &file(star, w, ""))
            .unwrap_err()
            .to_string();
        // Located: `bad.toml:LINE:COL: ...`.
        let at = e.strip_prefix("bad.toml:").unwrap_or_default();
        assert!(at.starts_with(|c: char| c.is_ascii_digit()), "{e}");
        assert!(e.contains(want), "{e}");
    };
    bad(
        "collective = \"alltoall\"\nalgorithm = \"ring\"\nsize = 8",
        "`algorithm = \"ring\"` does not run alltoall: it takes pairwise, brucks, scattered, \"auto\"",
    );
    bad(
        "algorithm = \"ring\"\nsize = 8\nfan_in = 2",
        "`fan_in` belongs to the NIC study",
    );
    bad(
        "size = 8\nwarmup = 2",
        "`warmup` belongs to an MPI algorithm",
    );
    bad(
        "algorithm = \"ring\"\nsize = 12",
        "12 B is not a whole number of f64 elements",
    );
    bad(
        "algorithm = \"ring\"\nsizes = \"12B\"",
        "12 B is not a whole number of f64 elements",
    );
    let e = Scenario::parse(
        "bad.toml",
        &file(
            "kind = \"star\"\nhosts = 4\nphantom = true",
            "algorithm = \"ring\"\nsize = 8",
            "",
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("bad.toml:6:1:") && e.contains("need `form = \"rdma\"`"),
        "{e}"
    );
    bad(
        "algorithm = \"ring\"\nsize = 8\nreduce_op = \"minloc\"",
        "an MPI algorithm takes one of",
    );
    bad(
        "algorithm = \"ring\"\nsize = 8\nnodes = 9",
        "`nodes = 9`: must be 1..=4",
    );
    bad(
        "collective = \"alltoall\"\nalgorithm = \"brucks\"\nsize = \"8MiB\"",
        "at most 67108864 B, as the bytes are real: with `[topology] phantom = true`",
    );
    bad(
        "collective = \"alltoall\"\nalgorithm = \"brucks\"\nsizes = \"8MiB\"",
        "at most 67108864 B, as the bytes are real",
    );
    bad("algorithm = \"nic\"", "collective workload: needs `size`");
    bad(
        "collective = \"gather\"\nalgorithm = \"ring\"\nsize = 8",
        "expected one of allreduce",
    );
    bad(
        "algorithm = \"ring\"\nsize = \"1KiB\"\nsizes = \"2KiB\"",
        "`sizes` and `size` both given: give one",
    );
    // A mistyped key: the keys a collective workload takes, not every
    // kind's, and the nearest of them.
    bad(
        "algorithm = \"ring\"\nsize = 8\nroot = 3",
        "unknown field `root` in a `collective` workload, expected one of `kind`, `collective`,",
    );
    bad(
        "algorithm = \"ring\"\nsizs = 8",
        "in a `collective` workload, expected one of `kind`, `collective`, `reduce_op`, `datatype`, `size`, `fan_in`, `nodes`, `count`, `interval`, `method`, `algorithm`, `sizes`, `warmup`, `form`, `pipeline`, `start` (did you mean `size`?)",
    );
    // Keys the collective has no use for.
    bad(
        "collective = \"barrier\"\nalgorithm = \"auto\"\nsizes = \"8B..1KiB\"",
        "`sizes` does not apply to barrier: a barrier moves no data",
    );
    bad(
        "collective = \"barrier\"\nalgorithm = \"auto\"\ndatatype = \"f32\"",
        "`datatype` does not apply to barrier",
    );
    bad(
        "collective = \"allgather\"\nalgorithm = \"ring\"\nsize = 8\nreduce_op = \"max\"",
        "`reduce_op` does not apply to allgather: it reduces nothing",
    );
    bad(
        "algorithm = \"nic\"\nsize = 8\nmethod = \"both\"",
        "runs the NIC offload only",
    );
    // A range whose end is near u64::MAX is refused, not doubled forever.
    bad(
        "algorithm = \"ring\"\nsizes = \"1..17179869184GiB\"",
        "real bytes are limited to 64 MiB a size: up to 1 GiB with phantom payloads",
    );
    bad(
        "algorithm = \"ring\"\nsizes = -8",
        "\"-8\" is negative: a size is a whole number of bytes",
    );
    bad(
        "algorithm = \"ring\"\nsize = 8\nwarmup = 10001",
        "`warmup = 10001`",
    );
    bad(
        "algorithm = \"ring\"\nsize = 8\nform = \"verbs\"",
        "`form = \"verbs\"`: expected \"messaging\"",
    );
    bad(
        "algorithm = \"nic\"\nsize = 8\nform = \"rdma\"",
        "`form` belongs to an MPI algorithm",
    );
    bad(
        "algorithm = \"nic\"\nsize = 8\npipeline = \"1MiB\"",
        "`pipeline` belongs to an MPI algorithm",
    );
    bad(
        "algorithm = \"ring\"\nsize = 8\npipeline = 4",
        "a piece must hold at least one f64 element",
    );
    bad(
        "algorithm = \"ring\"\nsize = \"64MiB\"\npipeline = 8",
        "into more than 65536 pieces per rank",
    );
    // On the RDMA wire each message received has its own slot: recursive
    // doubling on 4 ranks receives its vector twice.
    bad(
        "algorithm = \"recursive_doubling\"\nform = \"rdma\"\nsize = \"32MiB\"",
        "needs 100663296 B of buffer at rank 0 (its landing slots included",
    );
    // Phantom payloads need the RDMA wire, and stop at 1 GiB.
    let phantom = "kind = \"star\"\nhosts = 4\nphantom = true";
    let e = Scenario::parse(
        "bad.toml",
        &file(phantom, "algorithm = \"ring\"\nsize = 8", ""),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("phantom payloads (`[topology] phantom = true`) need `form = \"rdma\"`"),
        "{e}"
    );
    let e = Scenario::parse(
        "bad.toml",
        &file(
            phantom,
            "algorithm = \"ring\"\nform = \"rdma\"\nsize = \"2GiB\"",
            "",
        ),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("2147483648 B asked for, and phantom payloads are limited to 1 GiB a rank"),
        "{e}"
    );
}

/// From a file: the RDMA wire with a 64 KiB pipeline gives the
/// schedules' result on a lossy fat tree; with phantom payloads the same
/// file runs 256 MiB per rank (past what real bytes may hold) and
/// checks no result, saying so (on two ranks, to keep the test short).
#[test]
fn a_file_runs_the_rdma_wire_and_phantom_payloads() {
    use udrma_scenarios::{run, RunOptions, Scenario};
    let fat = "kind = \"fat-tree\"\nk = 4";
    let loss = "[[fault]]\nmodel = \"loss\"\np = 0.01\n";
    let w = "algorithm = \"ring\"\nform = \"rdma\"\npipeline = \"64KiB\"\nsizes = [8, 262144]\ncount = 2";
    let sc = Scenario::parse("rdma.toml", &file(fat, w, loss)).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    assert_eq!(r.checks.get("result-equal"), Some(&true), "{}", r.table());
    assert!(
        r.messaging.is_none(),
        "no messaging counters on the RDMA wire"
    );
    let o = r.scheduled.as_ref().unwrap();
    // 16 ranks: 15 reduce-scatter steps, then 15 allgather steps, each
    // block (256 KiB / 16) one piece under the 64 KiB pipeline.
    assert_eq!(o.rows[1].messages, 16 * 30);
    let star = "kind = \"star\"\nhosts = 2\nphantom = true";
    let w = "algorithm = \"ring\"\nform = \"rdma\"\nsize = \"256MiB\"\ncount = 1\nwarmup = 0";
    let sc = Scenario::parse("phantom.toml", &file(star, w, "")).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    assert!(!r.checks.contains_key("result-equal"));
    assert!(r.notes.iter().any(|n| n.contains("no result is checked")));
    let row = &r.scheduled.as_ref().unwrap().rows[0];
    assert_eq!(row.size, 256 << 20);
    assert!(row.busbw_gbs.is_some_and(|b| b > 1.0), "{}", r.table());
}

/// `algorithm = "auto"` picks per size as MPICH 4.0.2 does, and the
/// table says which it picked: on 16 ranks, recursive doubling for an
/// 8-byte allreduce and Rabenseifner from 16 elements up.
#[test]
fn auto_picks_mpichs_algorithm_per_size_and_says_which() {
    use udrma_scenarios::{run, RunOptions, Scenario};
    let fat = "kind = \"fat-tree\"\nk = 4";
    let w = "algorithm = \"auto\"\nsizes = [8, 64, 128, 4096]\ncount = 2";
    let sc = Scenario::parse("auto.toml", &file(fat, w, "")).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    let algs: Vec<&str> = r
        .scheduled
        .as_ref()
        .unwrap()
        .rows
        .iter()
        .map(|x| x.algorithm.as_str())
        .collect();
    assert_eq!(
        algs,
        [
            "recursive_doubling",
            "recursive_doubling",
            "reduce_scatter_allgather",
            "reduce_scatter_allgather"
        ]
    );
}

/// Any algorithm of any collective, on 2 to 9 ranks (most not powers of
/// two), any count up to 600 elements of any element type, through any
/// mix of loss, duplication and reordering: every rank's result in every
/// measured iteration equals, bit for bit, what the same schedules give
/// in memory.
mod under_faults {
    use super::*;
    use proptest::prelude::*;

    fn plan_strategy() -> impl Strategy<Value = ScheduledPlan> {
        let all = Collective::ALL;
        (
            proptest::sample::select(all.to_vec()),
            any::<prop::sample::Index>(),
            2u32..=9,
            0u64..=600,
            proptest::sample::select(vec![
                ReduceType::F64,
                ReduceType::F32,
                ReduceType::I32,
                ReduceType::U64,
            ]),
            any::<u64>(),
        )
            .prop_map(|(collective, which, ranks, count, ty, seed)| {
                let algorithm = *which.get(collective.algorithms());
                ScheduledPlan {
                    spec: Spec {
                        collective,
                        algorithm,
                        ranks,
                        count: 0,
                        elem: ty.width().unwrap_or(8) as u64,
                        root: (seed % u64::from(ranks)) as u32,
                        pipeline: Spec::PIPELINE,
                    },
                    sizes: vec![SizeRun { count, algorithm }],
                    op: ReduceOp::Sum,
                    ty,
                    iterations: 2,
                    warmup: 1,
                    start: Instant::ZERO,
                    seed,
                    wire: if seed % 2 == 0 {
                        Wire::Messaging
                    } else {
                        Wire::Write
                    },
                    phantom: false,
                }
            })
    }

    fn faults_strategy() -> impl Strategy<Value = Vec<Model>> {
        (0.0..0.05f64, 0.0..0.05f64, 0.0..0.1f64).prop_map(|(loss, dup, reorder)| {
            vec![
                Model::Loss {
                    p: loss,
                    correlation: 0.0,
                },
                Model::Duplicate {
                    p: dup,
                    copies: 1,
                    correlation: 0.0,
                },
                Model::Reorder {
                    p: reorder,
                    correlation: 0.0,
                    gap: 1,
                    delay: Duration::from_micros(3),
                    limit: None,
                },
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_rank_gets_the_schedules_result_through_any_faults(
            plan in plan_strategy(),
            faults in faults_strategy(),
        ) {
            let want = reference(&plan);
            let got = on_faulty_fabric(&plan, faults);
            for (r, (g, same, laps)) in got.iter().enumerate() {
                prop_assert_eq!(*laps, 3, "rank {} finishes every iteration", r);
                prop_assert!(*same, "rank {}: every iteration gives the same result", r);
                prop_assert!(g == &want[r], "rank {}: the result differs from the schedule's", r);
            }
        }
    }
}

/// A host's link goes down for good partway: the size that finished
/// before it has its row; the sizes after it have no latency at all (not
/// a latency of 0) and say how few of their iterations finished; and
/// result-equal passes on what it compared, with the sizes it could not
/// compare named.
#[test]
fn a_size_no_rank_finished_has_no_latency_and_says_so() {
    use udrma_scenarios::{run, RunOptions, Scenario};
    let star = "kind = \"star\"\nhosts = 4";
    let w = "algorithm = \"ring\"\nsizes = \"64KiB..128KiB\"\ncount = 2\nwarmup = 0";
    let down = "[[fault]]\nmodel = \"down\"\nlinks = [\"h1-s0\"]\nfrom = \"200us\"\n";
    let sc = Scenario::parse("down.toml", &file(star, w, down)).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    let o = r.scheduled.as_ref().unwrap();
    let (first, last) = (&o.rows[0], &o.rows[1]);
    assert_eq!((first.measured, first.wanted), (8, 8), "{}", r.table());
    assert!(first.avg_us.is_some_and(|a| a > 0.0), "{}", r.table());
    assert_eq!((last.measured, last.wanted), (0, 8), "{}", r.table());
    assert_eq!(
        (last.avg_us, last.min_us, last.max_us, last.busbw_gbs),
        (None, None, None, None),
        "{}",
        r.table()
    );
    let table = r.table();
    assert!(
        table.contains("PARTIAL: 0 of 8 rank-iterations finished"),
        "{table}"
    );
    assert_eq!(r.checks.get("all-complete"), Some(&false));
    assert_eq!(r.checks.get("result-equal"), Some(&true));
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("no result at 131072 B")),
        "{:?}",
        r.notes
    );
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["scheduled"]["rows"][1]["avg_us"].is_null());
}
