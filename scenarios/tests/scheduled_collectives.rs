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
use udrma_host::collective::scheduled::{ScheduledApp, ScheduledPlan};
use udrma_host::messaging::{Messenger, MsgConfig};
use udrma_proto::{Duration, Instant, NodeAddr, ReduceOp, ReduceType};

/// Each rank's result and laps after running `plan` on a star of its
/// ranks (with `lossy`, 2 % of packets lost).
fn on_fabric(plan: &ScheduledPlan, lossy: bool) -> Vec<(Vec<u8>, bool, usize)> {
    let p = plan.spec.ranks;
    let mut b = Sim::builder()
        .topology(Topology::star(p, LinkParams::default()))
        .time_limit(Duration::from_millis(200));
    if lossy {
        b = b.fault(
            "loss",
            Target::default(),
            Model::Loss {
                p: 0.02,
                correlation: 0.0,
            },
        );
    }
    let mut sim = b.build().unwrap();
    let plan = Arc::new(plan.clone());
    for h in 0..p {
        let nic = sim.nic_mut(NodeAddr(h)).unwrap();
        let mut m = Messenger::new(MsgConfig::default(), nic).unwrap();
        for peer in plan.peers(h).unwrap() {
            m.connect(Instant::ZERO, nic, peer).unwrap();
        }
        sim.service(NodeAddr(h)).unwrap();
        let app = ScheduledApp::new(h, plan.clone(), m).unwrap();
        sim.add_app(NodeAddr(h), app).unwrap();
    }
    sim.run().assert_invariants();
    (0..p)
        .map(|h| {
            let a = sim.app::<ScheduledApp>(NodeAddr(h)).unwrap();
            let (r, same) = a.result();
            let ok = a.laps().iter().filter(|l| l.end.is_ok()).count();
            (r.unwrap_or_default().to_vec(), same, ok)
        })
        .collect()
}

/// What every rank must hold: the same schedules run in memory.
fn reference(plan: &ScheduledPlan) -> Vec<Vec<u8>> {
    let plans: Vec<_> = (0..plan.spec.ranks)
        .map(|r| plan.spec.plan(r).unwrap())
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
            count,
            elem: 8,
            root: ranks / 2,
        },
        op: ReduceOp::Sum,
        ty: ReduceType::F64,
        iterations: 3,
        warmup: 1,
        start: Instant::ZERO,
        seed: 5,
        reduce_ps_per_byte: 100,
    }
}

/// Every algorithm on 6 ranks (not a power of two), eager-sized and
/// rendezvous-sized vectors: each rank ends every iteration with the
/// result the schedules give in memory.
#[test]
fn every_algorithm_over_the_engine_gives_the_in_memory_result() {
    for collective in [
        Collective::Allreduce,
        Collective::Reduce,
        Collective::Broadcast,
        Collective::Allgather,
        Collective::Alltoall,
        Collective::Barrier,
    ] {
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
