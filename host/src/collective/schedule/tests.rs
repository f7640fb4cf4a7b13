//! Every algorithm, on every communicator size from 1 to 17 and counts
//! that do and do not divide, carried out by the interpreter: each
//! rank's result must equal the collective's definition.

use super::run::{run, Ran};
use super::*;

/// Rank `r`'s input: `len` bytes that differ by rank and position.
fn data(r: u32, len: u64, salt: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (udrma_proto::rng::mix(salt ^ u64::from(r) << 32 ^ i) & 0xff) as u8)
        .collect()
}

/// Element-wise wrapping sum of `elem`-byte little-endian integers.
fn add(elem: u64) -> impl Fn(&[u8], &mut [u8]) {
    move |got: &[u8], held: &mut [u8]| {
        let w = elem as usize;
        for (g, h) in got.chunks_exact(w).zip(held.chunks_exact_mut(w)) {
            let mut x = [0u8; 8];
            let mut y = [0u8; 8];
            x[..w].copy_from_slice(g);
            y[..w].copy_from_slice(h);
            let s = u64::from_le_bytes(x).wrapping_add(u64::from_le_bytes(y));
            h.copy_from_slice(&s.to_le_bytes()[..w]);
        }
    }
}

/// What rank `r` must hold at its output span.
fn expected(s: &Spec, plans: &[Plan], r: u32, salt: u64) -> Vec<u8> {
    let p = s.ranks;
    let n = s.bytes();
    let input = |q: u32| data(q, plans[q as usize].input.len, salt);
    match s.collective {
        Collective::Allreduce | Collective::Reduce => {
            if s.collective == Collective::Reduce && r != s.root {
                return Vec::new();
            }
            let mut acc = input(0);
            for q in 1..p {
                add(s.elem)(&input(q), &mut acc);
            }
            acc
        }
        Collective::Broadcast => input(s.root),
        Collective::Allgather => (0..p).flat_map(input).collect(),
        Collective::Alltoall => (0..p)
            .flat_map(|q| {
                let block = u64::from(r) * n;
                input(q)[block as usize..(block + n) as usize].to_vec()
            })
            .collect(),
        Collective::ReduceScatter => {
            let mine = |q: u32| {
                let at = (u64::from(r) * n) as usize;
                input(q)[at..at + n as usize].to_vec()
            };
            let mut acc = mine(0);
            for q in 1..p {
                add(s.elem)(&mine(q), &mut acc);
            }
            acc
        }
        Collective::Barrier => Vec::new(),
    }
}

fn check(s: &Spec, salt: u64) -> Result<Ran, String> {
    let plans = (0..s.ranks)
        .map(|r| s.plan(r).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let ran = run(
        &plans,
        |r| data(r, plans[r as usize].input.len, salt),
        add(s.elem),
    )?;
    for r in 0..s.ranks {
        let out = plans[r as usize].output;
        let got = &ran.arenas[r as usize][out.at as usize..out.end() as usize];
        if got != expected(s, &plans, r, salt).as_slice() {
            return Err(format!("rank {r} holds the wrong result"));
        }
    }
    if s.collective == Collective::Barrier && ran.heard.iter().flatten().any(|&h| !h) {
        return Err("a rank left before hearing from every rank".into());
    }
    Ok(ran)
}

fn specs() -> impl Iterator<Item = Spec> {
    let all = Collective::ALL;
    all.into_iter().flat_map(|collective| {
        collective.algorithms().iter().flat_map(move |&algorithm| {
            (1..=17u32).flat_map(move |ranks| {
                [0u64, 1, 3, 16, 37].into_iter().flat_map(move |count| {
                    [(8u64, 0u32), (4, ranks - 1), (8, 3 % ranks)]
                        .into_iter()
                        .map(move |(elem, root)| Spec {
                            collective,
                            algorithm,
                            ranks,
                            count,
                            elem,
                            root,
                            pipeline: Spec::PIPELINE,
                        })
                })
            })
        })
    })
}

/// The whole grid: 17 algorithms × 17 sizes × 5 counts × 3 roots and
/// element sizes.
#[test]
fn every_algorithm_gives_every_rank_the_collectives_result() {
    let mut cases = 0;
    for s in specs() {
        if let Err(e) = check(&s, 7) {
            panic!(
                "{} {} on {} ranks, {} × {} B, root {}: {e}",
                s.collective, s.algorithm, s.ranks, s.count, s.elem, s.root
            );
        }
        cases += 1;
    }
    assert_eq!(cases, 17 * 17 * 5 * 3);
}

/// The ring allreduce's pipeline cuts each allgather block into pieces
/// of at most `pipeline` bytes (whole elements), one piece a step, and
/// the result is the same: 5 ranks, blocks of 13 or 12 elements of 8
/// bytes, pieces of 3 elements (24 B, or 30 B rounded down to whole
/// elements): 19 allgather steps where MPICH's 32 KiB takes 4 (a step
/// sends the next piece of one block and receives one of another).
#[test]
fn the_pipeline_cuts_the_rings_allgather_into_pieces() {
    let s = Spec {
        collective: Collective::Allreduce,
        algorithm: Algorithm::Ring,
        ranks: 5,
        count: 62,
        elem: 8,
        root: 0,
        pipeline: Spec::PIPELINE,
    };
    let steps = |s: &Spec| s.plan(0).unwrap().steps.len();
    assert_eq!(steps(&s), 4 + 4);
    for pipeline in [24, 30] {
        let cut = Spec { pipeline, ..s };
        check(&cut, 3).unwrap();
        assert_eq!(steps(&cut), 4 + 19, "pipeline {pipeline}");
    }
}

/// The check catches a schedule that is wrong: one allreduce step sent
/// to the wrong rank deadlocks or leaves a wrong sum, and a barrier round
/// left out lets a rank leave early.
#[test]
fn a_wrong_schedule_is_caught() {
    let s = Spec {
        collective: Collective::Allreduce,
        algorithm: Algorithm::RecursiveDoubling,
        ranks: 8,
        count: 4,
        elem: 8,
        root: 0,
        pipeline: Spec::PIPELINE,
    };
    let mut plans: Vec<Plan> = (0..8).map(|r| s.plan(r).unwrap()).collect();
    plans[0].steps[1].sends[0].peer = 3;
    let ran = run(&plans, |r| data(r, 32, 1), add(8));
    assert!(
        ran.is_err_and(|e| e.contains("deadlock")),
        "a lost send deadlocks"
    );
    let mut plans: Vec<Plan> = (0..8).map(|r| s.plan(r).unwrap()).collect();
    for p in &mut plans {
        p.steps[2].recvs[0].1 = Land::Copy;
    }
    let ran = run(&plans, |r| data(r, 32, 1), add(8)).unwrap();
    assert_ne!(
        ran.arenas[0],
        expected(&s, &plans, 0, 1),
        "a copy is not a fold"
    );
    let b = Spec {
        collective: Collective::Barrier,
        algorithm: Algorithm::Dissemination,
        ..s
    };
    let mut plans: Vec<Plan> = (0..8).map(|r| b.plan(r).unwrap()).collect();
    for p in &mut plans {
        p.steps.pop();
    }
    let ran = run(&plans, |_| Vec::new(), add(8)).unwrap();
    assert!(ran.heard.iter().flatten().any(|&h| !h));
}

/// The message counts the algorithms are known by, on 16 ranks: `log2 p`
/// for recursive doubling and Bruck, `2 log2 p` for Rabenseifner,
/// `2(p − 1)` for the ring allreduce of a short vector, `p − 1` for
/// pairwise exchange.
#[test]
fn each_algorithm_sends_the_messages_it_is_known_by() {
    let sent = |collective, algorithm, count| {
        let s = Spec {
            collective,
            algorithm,
            ranks: 16,
            count,
            elem: 8,
            root: 0,
            pipeline: Spec::PIPELINE,
        };
        let plan = s.plan(5).unwrap();
        plan.steps.iter().map(|st| st.sends.len()).sum::<usize>()
    };
    use Algorithm::*;
    use Collective::*;
    assert_eq!(sent(Allreduce, RecursiveDoubling, 64), 4);
    assert_eq!(sent(Allreduce, Rabenseifner, 64), 8);
    assert_eq!(sent(Allreduce, Ring, 64), 30);
    assert_eq!(sent(Allgather, Bruck, 64), 4);
    assert_eq!(sent(Alltoall, Bruck, 64), 4);
    assert_eq!(sent(Alltoall, Pairwise, 64), 15);
    assert_eq!(sent(Barrier, Dissemination, 0), 4);
}

/// An algorithm asked for a collective it does not do is refused, naming
/// the ones that do.
#[test]
fn an_algorithm_for_another_collective_is_refused() {
    let s = Spec {
        collective: Collective::Alltoall,
        algorithm: Algorithm::Ring,
        ranks: 4,
        count: 1,
        elem: 8,
        root: 0,
        pipeline: Spec::PIPELINE,
    };
    let e = s.plan(0).unwrap_err().to_string();
    assert_eq!(
        e,
        "ring does not do alltoall (it does: pairwise, brucks, scattered)"
    );
    let bad = Spec { ranks: 0, ..s };
    assert!(bad.plan(0).is_err());
}

/// A collective of no elements sends nothing, as MPICH returns before any
/// algorithm runs (recorded with MPICH 4.0.2 on 4 ranks: no message for
/// an allreduce, reduce, broadcast, allgather, all-to-all or
/// reduce-scatter of count 0); a barrier, which has no count, still runs.
#[test]
fn a_collective_of_no_elements_sends_nothing_but_a_barrier_runs() {
    for s in specs().filter(|s| s.count == 0) {
        let plan = s.plan(s.ranks - 1).unwrap();
        let messages: usize = plan.steps.iter().map(|st| st.sends.len()).sum();
        if s.collective == Collective::Barrier {
            assert_eq!(messages > 0, s.ranks > 1, "{s:?}");
        } else {
            assert_eq!(messages, 0, "{s:?}");
            assert_eq!((plan.arena, plan.output.len), (0, 0), "{s:?}");
        }
    }
    // The refusal of a wrong algorithm comes first, whatever the count.
    let wrong = Spec {
        collective: Collective::Barrier,
        algorithm: Algorithm::Ring,
        ranks: 4,
        count: 0,
        elem: 8,
        root: 0,
        pipeline: Spec::PIPELINE,
    };
    assert!(matches!(wrong.plan(0), Err(ScheduleError::NotFor { .. })));
}
