//! Each algorithm's messages, rank by rank, against what MPICH 4.0.2
//! itself sent: `scripts/mpich-schedules/schedules.tsv`, recorded from
//! the real library by intercepting its UCX calls (how, and how to
//! record it again, in that folder's README). For every case we schedule
//! (2 to 17 ranks, counts 1 to 1,000 `MPI_INT`s, roots 0 and 3), every
//! rank's sends (peer, bytes) and receives (peer, bytes that arrived)
//! must be MPICH's, in MPICH's order.

use std::collections::BTreeMap;
use std::path::Path;

use udrma_host::collective::schedule::{Algorithm, Collective, Spec};

/// (collective, algorithm, p, count, root) → rank → direction → (peer, bytes).
type Table = BTreeMap<(String, String, u32, u64, u32), BTreeMap<u32, [Vec<(u32, u64)>; 2]>>;

fn table() -> Table {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mpich-schedules/schedules.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut t = Table::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 11, "line {}: {line}", i + 1);
        let num = |k: usize| {
            f[k].parse::<u64>()
                .unwrap_or_else(|e| panic!("line {}: {e}", i + 1))
        };
        let key = (
            f[0].into(),
            f[1].into(),
            num(2) as u32,
            num(3),
            num(4) as u32,
        );
        let dir = usize::from(f[7] == "recv");
        let rank = num(5) as u32;
        let seq = num(6) as usize;
        let list = &mut t.entry(key).or_default().entry(rank).or_default()[dir];
        assert_eq!(list.len(), seq, "line {}: rows in order", i + 1);
        list.push((num(8) as u32, num(10)));
    }
    t
}

/// Our name for MPICH's (collective, algorithm), where we schedule it.
fn ours(collective: &str, algorithm: &str) -> Option<(Collective, Algorithm)> {
    use Algorithm::*;
    Some(match (collective, algorithm) {
        ("allreduce", "recursive_doubling") => (Collective::Allreduce, RecursiveDoubling),
        ("allreduce", "reduce_scatter_allgather") => (Collective::Allreduce, Rabenseifner),
        ("reduce", "binomial") => (Collective::Reduce, Binomial),
        ("reduce", "reduce_scatter_gather") => (Collective::Reduce, ReduceScatterGather),
        ("allgather", "recursive_doubling") => (Collective::Allgather, RecursiveDoubling),
        ("bcast", "binomial") => (Collective::Broadcast, Binomial),
        ("bcast", "scatter_ring_allgather") => (Collective::Broadcast, ScatterRingAllgather),
        ("bcast", "scatter_recursive_doubling_allgather") => {
            (Collective::Broadcast, ScatterDoublingAllgather)
        }
        ("allgather", "ring") => (Collective::Allgather, Ring),
        ("allgather", "brucks") => (Collective::Allgather, Bruck),
        ("alltoall", "pairwise") => (Collective::Alltoall, Pairwise),
        ("alltoall", "brucks") => (Collective::Alltoall, Bruck),
        ("alltoall", "scattered") => (Collective::Alltoall, Scattered),
        ("barrier", "dissemination") => (Collective::Barrier, Dissemination),
        ("reduce_scatter_block", "recursive_halving") => {
            (Collective::ReduceScatter, RecursiveHalving)
        }
        ("reduce_scatter_block", "pairwise") => (Collective::ReduceScatter, Pairwise),
        _ => return None,
    })
}

/// Every rank's messages as our schedule posts them: sends, and
/// receives, each in step order.
fn scheduled(spec: &Spec) -> BTreeMap<u32, [Vec<(u32, u64)>; 2]> {
    (0..spec.ranks)
        .map(|r| {
            let plan = spec.plan(r).unwrap();
            let sends = plan.steps.iter().flat_map(|s| &s.sends);
            let recvs = plan
                .steps
                .iter()
                .flat_map(|s| s.recvs.iter().map(|(m, _)| m));
            let list = |it: &mut dyn Iterator<Item = &udrma_host::collective::schedule::Msg>| {
                it.map(|m| (m.peer, m.bytes())).collect::<Vec<_>>()
            };
            (
                r,
                [list(&mut sends.into_iter()), list(&mut recvs.into_iter())],
            )
        })
        .filter(|(_, d)| !d[0].is_empty() || !d[1].is_empty())
        .collect()
}

#[test]
fn every_scheduled_algorithm_sends_what_mpich_sends() {
    let t = table();
    let mut compared = BTreeMap::<(String, String), usize>::new();
    let mut differ = Vec::new();
    for ((coll, alg, p, count, root), want) in &t {
        let Some((collective, algorithm)) = ours(coll, alg) else {
            continue;
        };
        let spec = Spec {
            collective,
            algorithm,
            ranks: *p,
            count: *count,
            elem: 4,
            root: *root,
            pipeline: Spec::PIPELINE,
        };
        let got = scheduled(&spec);
        // MPICH's scattered all-to-all sends each rank's own block to
        // itself through UCX; udrma copies it (a rank never messages
        // itself). Nothing else in the table does.
        let own = |r: &u32, d: &[Vec<(u32, u64)>; 2]| -> [Vec<(u32, u64)>; 2] {
            d.clone()
                .map(|l| l.into_iter().filter(|x| x.0 != *r).collect())
        };
        let selfless: BTreeMap<u32, [Vec<(u32, u64)>; 2]> =
            want.iter().map(|(r, d)| (*r, own(r, d))).collect();
        if selfless != *want {
            assert_eq!(
                alg, "scattered",
                "{coll} {alg} p={p}: only scattered messages itself"
            );
        }
        let want = &selfless;
        if &got != want {
            let r = (0..*p)
                .find(|r| got.get(r) != want.get(r))
                .unwrap_or_default();
            differ.push(format!(
                "{coll} {alg} p={p} count={count} root={root}: rank {r} sends {:?} receives {:?}; MPICH sends {:?} receives {:?}",
                got.get(&r).map(|d| &d[0]),
                got.get(&r).map(|d| &d[1]),
                want.get(&r).map(|d| &d[0]),
                want.get(&r).map(|d| &d[1]),
            ));
        }
        *compared.entry((coll.clone(), alg.clone())).or_default() += 1;
    }
    assert!(
        differ.is_empty(),
        "{} cases differ; the first:\n{}",
        differ.len(),
        differ[..differ.len().min(5)].join("\n")
    );
    // Every algorithm we schedule was compared, on every size and count.
    assert_eq!(compared.len(), 16, "{compared:?}");
    for ((coll, alg), n) in &compared {
        let roots = if alg == "binomial" { 2 } else { 1 };
        let expect = if coll == "barrier" {
            16
        } else {
            16 * 5 + (roots - 1) * 14 * 5
        };
        assert_eq!(*n, expect, "{coll} {alg}");
    }
}

/// MPICH 4.0.2 has no blocking ring allreduce; its ring is the
/// non-blocking `MPI_Iallreduce` (`tsp_ring`), recorded as `iallreduce`.
/// udrma's ring follows MPICH 4.1's blocking ring, which hands the
/// allgather to the pipelined ring allgatherv: that one skips empty
/// pieces, where 4.0.2's ring sends an empty message for each (when
/// the vector has fewer elements than ranks). Without empty messages
/// the two agree on every case, and they differ in some only by them.
#[test]
fn the_ring_allreduce_sends_what_mpichs_nonblocking_ring_sends_but_empty_messages() {
    let t = table();
    let (mut compared, mut only_empty) = (0, 0);
    for ((coll, alg, p, count, root), want) in &t {
        if (coll.as_str(), alg.as_str()) != ("iallreduce", "tsp_ring") {
            continue;
        }
        let spec = Spec {
            collective: Collective::Allreduce,
            algorithm: Algorithm::Ring,
            ranks: *p,
            count: *count,
            elem: 4,
            root: *root,
            pipeline: Spec::PIPELINE,
        };
        let got = scheduled(&spec);
        let full =
            |m: &BTreeMap<u32, [Vec<(u32, u64)>; 2]>| -> BTreeMap<u32, [Vec<(u32, u64)>; 2]> {
                m.iter()
                    .map(|(r, d)| {
                        (
                            *r,
                            d.clone()
                                .map(|l| l.into_iter().filter(|x| x.1 > 0).collect()),
                        )
                    })
                    .collect()
            };
        assert_eq!(full(&got), full(want), "ring p={p} count={count}");
        if &got != want {
            only_empty += 1;
        }
        compared += 1;
    }
    assert_eq!(compared, 16 * 5);
    assert!(only_empty > 0, "some cases differ by their empty messages");
}

/// `auto` against what MPICH 4.0.2 itself picked by default
/// (`scripts/mpich-schedules/auto.tsv`: each default run's messages
/// matched to the one forced algorithm that sends the same), on 4 to 16
/// ranks at sizes on both sides of its thresholds.
#[test]
fn auto_picks_what_mpich_picks_by_default() {
    use udrma_host::collective::schedule::auto::choose;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mpich-schedules/auto.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut rows = 0;
    let mut kinds = std::collections::BTreeSet::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 5, "{line}");
        let collective = match f[0] {
            "allreduce" => Collective::Allreduce,
            "reduce" => Collective::Reduce,
            "bcast" => Collective::Broadcast,
            "allgather" => Collective::Allgather,
            "alltoall" => Collective::Alltoall,
            "reduce_scatter_block" => Collective::ReduceScatter,
            "barrier" => Collective::Barrier,
            other => panic!("{other}"),
        };
        let (p, count): (u32, u64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        let ours = choose(collective, p, count, 4);
        assert_eq!(ours.name(), f[4], "{line}");
        rows += 1;
        kinds.insert((f[0], f[4]));
    }
    assert_eq!(rows, 192);
    assert!(kinds.len() >= 14, "every choice appears: {kinds:?}");
}
