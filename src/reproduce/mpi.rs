//! MPI's collective algorithms over the engine: each algorithm's time
//! beside its α-β-γ cost (Thakur, Rabenseifner and Gropp, 2005), where
//! each overtakes the others as the size grows, beside MPICH 4's default
//! choice, and how close a ring allreduce comes to the link.
//!
//! α is measured, not fitted: one round of a two-rank barrier on the same
//! fabric (an empty WRITE each way, each rank waiting for its send's
//! acknowledgement and its peer's message, as every step of the
//! algorithms waits). β and γ are the profile's: a full packet's time on
//! the wire over the payload it carries, and the host's reduction time
//! per byte.

use std::fmt::Write as _;

use rayon::prelude::*;
use udrma_host::collective::schedule::{auto, Algorithm, Collective, Spec};

use super::{scenario, simulate, Row, Section};

const MPI: &str = include_str!("../../scenarios/reproduce/collective-mpi.toml");
const RING: &str = include_str!("../../scenarios/reproduce/ring-busbw.toml");

/// Ranks of every run but α's.
const P: u32 = 16;

/// Bytes of one element (`f32`).
const ELEM: u64 = 4;

/// How far an algorithm's time may be from its α-β-γ cost.
const MODEL_TOL: (f64, f64) = (0.97, 1.03);

/// The bus bandwidth a ring allreduce must reach, as a share of the link.
const BUSBW_FLOOR: f64 = 0.9;

/// How much slower than the fastest algorithm MPICH's choice may be at a
/// swept size for the choice to count as a good one here.
const CHOICE_SLACK: f64 = 1.25;

/// The costs of the model, in µs and µs per byte: α; β one way (a data
/// packet's time on the wire over its payload) and β both ways (with the
/// acknowledgement of a packet coming the other way on the same link, as
/// in every step where each rank sends and receives at once); γ; and δ
/// per byte a rank copies locally (the profile's host copy).
#[derive(Debug, Clone, Copy)]
struct Costs {
    alpha: f64,
    beta: f64,
    beta2: f64,
    gamma: f64,
    delta: f64,
}

/// The sizes a collective's rows use: small (α's part), large (β's); a
/// barrier has no size.
fn sizes(c: Collective) -> &'static [u64] {
    match c {
        Collective::Barrier => &[0],
        Collective::Allgather | Collective::Alltoall | Collective::ReduceScatter => &[64, 1 << 20],
        _ => &[64, 16 << 20],
    }
}

/// The swept sizes of a collective's crossovers: every power of two from
/// 64 B to its large size.
fn sweep(c: Collective) -> Vec<u64> {
    let s = sizes(c);
    let (small, large) = (s[0].max(1), s[s.len() - 1]);
    std::iter::successors(Some(small), |s| Some(s * 2))
        .take_while(|s| *s <= large)
        .collect()
}

/// The time of `c` by `a` at `size` bytes on [`MPI`] with further
/// settings, µs: the slowest rank's, in a run of that size alone. Only a
/// run's first size starts every rank at once (a later one starts each
/// rank as it leaves the barrier before it).
fn time_at(
    c: Collective,
    a: Algorithm,
    size: u64,
    extra: &[(&str, String)],
) -> anyhow::Result<f64> {
    let mut sets = vec![
        ("workload.0.collective", format!("\"{}\"", c.name())),
        ("workload.0.algorithm", format!("\"{}\"", a.name())),
    ];
    // A barrier moves no data: the file's size and element type, which
    // it refuses, are left out.
    let text: String = if c == Collective::Barrier {
        MPI.lines()
            .filter(|l| !l.starts_with("datatype") && !l.starts_with("sizes"))
            .map(|l| format!("{l}\n"))
            .collect()
    } else {
        sets.push(("workload.0.sizes", format!("\"{size}B\"")));
        MPI.to_string()
    };
    sets.extend(extra.iter().cloned());
    let sc = scenario("collective-mpi.toml", &text, &sets)?;
    let r = simulate(&sc)?;
    r.scheduled
        .and_then(|o| o.rows.first().and_then(|row| row.max_us))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "collective-mpi.toml: {c} {a} at {size} B: no row, or no iteration finished"
            )
        })
}

/// α from a two-rank barrier, the others from the profile.
fn costs() -> anyhow::Result<Costs> {
    use udrma_proto::packet::{HEADER_LEN, ICRC_LEN};
    use udrma_proto::Opcode;
    let two = [("topology.hosts", "2".to_string())];
    let alpha = time_at(Collective::Barrier, Algorithm::Dissemination, 0, &two)?;
    let sc = scenario("collective-mpi.toml", MPI, &[])?;
    let res = sc.resolve().map_err(|e| anyhow::anyhow!("{e}"))?;
    let link = res.topology.links[0].params;
    let mtu = u64::from(res.nic.mtu_payload);
    let on_wire = |op: Opcode, payload: u64| {
        (HEADER_LEN + op.ext_len().unwrap_or(0) + ICRC_LEN) as u64
            + payload
            + udrma_fabric::WIRE_OVERHEAD
    };
    let per_byte = |bytes: u64| bytes as f64 * 8.0 / link.bandwidth_bps as f64 * 1e6 / mtu as f64;
    let data = on_wire(Opcode::Write, mtu);
    let ack = on_wire(Opcode::Ack, 0);
    let cost = res.nic.cost;
    Ok(Costs {
        alpha,
        beta: per_byte(data),
        beta2: per_byte(data + ack),
        gamma: cost.host_reduce_ps_per_byte as f64 * 1e-6,
        delta: cost.host_copy_ps_per_byte as f64 * 1e-6,
    })
}

/// The α-β-γ cost of `c` by `a` over `p` ranks at `n` bytes (a rank's
/// vector, or one block), µs: Thakur, Rabenseifner and Gropp's formulas,
/// with β both ways in the steps where each rank sends and receives at
/// once; for the ring allreduce, Patarasuk and Yuan's (a ring
/// reduce-scatter, then a ring allgather); and for the two none of them
/// give (scattered all-to-all, dissemination barrier) the same
/// reasoning.
fn model(c: Collective, a: Algorithm, p: u32, n: u64, k: Costs) -> f64 {
    use Algorithm::*;
    let (pf, n) = (f64::from(p), n as f64);
    let lg = pf.log2().ceil();
    let share = (pf - 1.0) / pf;
    let Costs {
        alpha,
        beta,
        beta2,
        gamma,
        ..
    } = k;
    match (c, a) {
        (Collective::Allreduce, RecursiveDoubling) => lg * (alpha + n * beta2 + n * gamma),
        (Collective::Allreduce, Rabenseifner) => {
            2.0 * lg * alpha + 2.0 * share * n * beta2 + share * n * gamma
        }
        (Collective::Allreduce, _) => {
            2.0 * (pf - 1.0) * alpha + 2.0 * share * n * beta2 + share * n * gamma
        }
        (Collective::Reduce, Binomial) => lg * (alpha + n * beta + n * gamma),
        (Collective::Reduce, _) => {
            2.0 * lg * alpha + share * n * (beta + beta2) + share * n * gamma
        }
        (Collective::Broadcast, Binomial) => lg * (alpha + n * beta),
        (Collective::Broadcast, ScatterDoublingAllgather) => {
            2.0 * lg * alpha + share * n * (beta + beta2)
        }
        (Collective::Broadcast, _) => (lg + pf - 1.0) * alpha + share * n * (beta + beta2),
        (Collective::Allgather, Ring) => (pf - 1.0) * (alpha + n * beta2),
        (Collective::Allgather, _) => lg * alpha + (pf - 1.0) * n * beta2,
        (Collective::Alltoall, Bruck) => lg * alpha + pf / 2.0 * lg * n * beta2,
        (Collective::Alltoall, Scattered) => alpha + (pf - 1.0) * n * beta2,
        (Collective::Alltoall, _) => (pf - 1.0) * (alpha + n * beta2),
        (Collective::ReduceScatter, RecursiveHalving) => {
            lg * alpha + (pf - 1.0) * n * (beta2 + gamma)
        }
        (Collective::ReduceScatter, _) => (pf - 1.0) * (alpha + n * beta2 + n * gamma),
        (Collective::Barrier, _) => lg * alpha,
    }
}

/// The most bytes a rank copies locally (its plan's copies), which
/// Thakur's formulas leave out (Bruck's rotations aside).
fn copied(c: Collective, a: Algorithm, n: u64) -> anyhow::Result<u64> {
    let spec = Spec {
        collective: c,
        algorithm: a,
        ranks: P,
        count: n / ELEM,
        elem: ELEM,
        root: 0,
        pipeline: u64::MAX,
    };
    let mut most = 0;
    for rank in 0..P {
        let plan = spec.plan(rank)?;
        let bytes: u64 = plan
            .steps
            .iter()
            .flat_map(|s| s.copies.iter().map(|(from, _)| from.len))
            .sum();
        most = most.max(bytes);
    }
    Ok(most)
}

/// Every collective's algorithms, in the docs' order.
fn pairs() -> Vec<(Collective, Algorithm)> {
    Collective::ALL
        .iter()
        .flat_map(|c| c.algorithms().iter().map(move |a| (*c, *a)))
        .collect()
}

/// A size in the units people read.
fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// One row per algorithm and size: ours against the α-β-γ cost.
fn model_rows(k: Costs) -> anyhow::Result<Vec<Row>> {
    // The ring allreduce in one piece per block, as the model has it
    // (MPICH's pieces are the crossover sweep's).
    let whole = [("workload.0.pipeline", "\"1GiB\"".to_string())];
    let points: Vec<(Collective, Algorithm, u64)> = pairs()
        .into_iter()
        .flat_map(|(c, a)| sizes(c).iter().map(move |&n| (c, a, n)))
        .collect();
    let rows: Vec<anyhow::Result<Row>> = points
        .par_iter()
        .map(|&(c, a, n)| {
            let ours = time_at(c, a, n, &whole)?;
            let copies = copied(c, a, n.max(ELEM))?;
            let want = model(c, a, P, n, k) + copies as f64 * k.delta;
            let ratio = ours / want;
            Ok(Row {
                what: format!("{c} {a}, {P} ranks, {}", bytes(n)),
                published: format!("{want:.2} µs (α-β-γ)"),
                ours: format!("{ours:.2} µs"),
                ratio: Some(ratio),
                tolerance: format!("{}–{}", MODEL_TOL.0, MODEL_TOL.1),
                holds: (MODEL_TOL.0..=MODEL_TOL.1).contains(&ratio),
            })
        })
        .collect();
    rows.into_iter().collect()
}

/// (collective, size, per algorithm its time: until the last rank is
/// done, as the model counts) over the swept sizes.
type Sweep = (Collective, Vec<(u64, Vec<(Algorithm, f64)>)>);

/// Every collective but the barrier, every algorithm, every swept size.
fn crossovers() -> anyhow::Result<Vec<Sweep>> {
    let points: Vec<(Collective, Algorithm, u64)> = pairs()
        .into_iter()
        .filter(|(c, _)| *c != Collective::Barrier)
        .flat_map(|(c, a)| sweep(c).into_iter().map(move |n| (c, a, n)))
        .collect();
    let times: Vec<anyhow::Result<f64>> = points
        .par_iter()
        .map(|&(c, a, n)| time_at(c, a, n, &[]))
        .collect();
    let mut out: Vec<Sweep> = Vec::new();
    for (&(c, a, n), t) in points.iter().zip(times) {
        if out.last().is_none_or(|(last, _)| *last != c) {
            out.push((c, sweep(c).into_iter().map(|s| (s, Vec::new())).collect()));
        }
        let sizes = &mut out.last_mut().expect("pushed").1;
        let (_, at) = sizes
            .iter_mut()
            .find(|(s, _)| *s == n)
            .expect("a swept size");
        at.push((a, t?));
    }
    Ok(out)
}

/// The fastest of `times`.
fn fastest(times: &[(Algorithm, f64)]) -> (Algorithm, f64) {
    times
        .iter()
        .copied()
        .fold((Algorithm::Binomial, f64::INFINITY), |best, t| {
            if t.1 < best.1 {
                t
            } else {
                best
            }
        })
}

/// MPICH's choice at `size` bytes (a vector or a block) and its time.
fn mpich(c: Collective, size: u64, times: &[(Algorithm, f64)]) -> (Algorithm, f64) {
    let a = auto::choose(c, P, size / ELEM, ELEM);
    let t = times
        .iter()
        .find(|(b, _)| *b == a)
        .map_or(f64::INFINITY, |t| t.1);
    (a, t)
}

/// One row per collective: MPICH's choice against the fastest at every
/// swept size.
fn choice_rows(sweeps: &[Sweep]) -> Vec<Row> {
    sweeps
        .iter()
        .map(|(c, sizes)| {
            let worst = sizes
                .iter()
                .map(|(size, times)| {
                    let (_, best) = fastest(times);
                    let (_, chosen) = mpich(*c, *size, times);
                    (chosen / best, *size)
                })
                .fold((0.0f64, 0u64), |w, x| if x.0 > w.0 { x } else { w });
            Row {
                what: format!("{c}, {P} ranks: MPICH's choice against the fastest, worst size"),
                // What is published is MPICH's choice per size, not a
                // time: the bound is ours, in the tolerance column.
                published: "MPICH 4.0.2's default choice at each size".into(),
                ours: format!("{:.2}× at {}", worst.0, bytes(worst.1)),
                ratio: Some(worst.0),
                tolerance: format!("≤ {CHOICE_SLACK}"),
                holds: worst.0 <= CHOICE_SLACK,
            }
        })
        .collect()
}

/// The ring allreduce's bus bandwidth, its share of the link rate, the
/// link rate (GB/s) and the host's reduction rate (Gb/s), at a pipeline
/// piece, with the reduction free (the file's) or the profile's.
fn busbw(pipeline: &str, profile_reduction: bool) -> anyhow::Result<(f64, f64, f64, f64)> {
    let sets = vec![("workload.0.pipeline", format!("\"{pipeline}\""))];
    let text: String = if profile_reduction {
        RING.lines()
            .filter(|l| !l.starts_with("host_reduce_bandwidth"))
            .map(|l| format!("{l}\n"))
            .collect()
    } else {
        RING.to_string()
    };
    let sc = scenario("ring-busbw.toml", &text, &sets)?;
    let res = sc.resolve().map_err(|e| anyhow::anyhow!("{e}"))?;
    let link = res.topology.links[0].params.bandwidth_bps as f64 / 8e9;
    let ps = res.nic.cost.host_reduce_ps_per_byte.max(1) as f64;
    let reduce_gbps = 8e3 / ps;
    let r = simulate(&sc)?;
    let row = r
        .scheduled
        .and_then(|s| s.rows.first().cloned())
        .ok_or_else(|| anyhow::anyhow!("ring-busbw.toml: no collective table"))?;
    let bw = row
        .busbw_gbs
        .ok_or_else(|| anyhow::anyhow!("ring-busbw.toml: no iteration finished"))?;
    Ok((bw, bw / link, link, reduce_gbps))
}

/// The bound, and beside it (not judged) MPICH's pieces and the
/// profile's reduction.
fn busbw_rows() -> anyhow::Result<(Vec<Row>, String)> {
    let cases = [
        ("4MiB", false, "one piece per block, reduction free"),
        ("32KiB", false, "MPICH's 32 KiB pieces, reduction free"),
        ("4MiB", true, "one piece per block, the profile's reduction"),
    ];
    let got: Vec<anyhow::Result<(f64, f64, f64, f64)>> =
        cases.par_iter().map(|(p, r, _)| busbw(p, *r)).collect();
    let got = got.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    let (gbs, share, link, _) = got[0];
    let rows = vec![Row {
        what: format!("ring allreduce, 64 MiB, {P} hosts of a k = 4 fat tree, reduction free"),
        published: format!("≥ {BUSBW_FLOOR} of the link ({link:.1} GB/s)"),
        ours: format!("{gbs:.2} GB/s, {share:.3} of the link"),
        ratio: Some(share / BUSBW_FLOOR),
        tolerance: format!("≥ {BUSBW_FLOOR}"),
        holds: share >= BUSBW_FLOOR,
    }];
    let mut extra = String::from(
        "\n| ring allreduce, 64 MiB, 16 hosts | bus bandwidth | of the link |\n|---|---:|---:|\n",
    );
    for ((_, profile, what), (gbs, share, _, reduce)) in cases.iter().zip(&got) {
        let rate = if *profile {
            format!(" ({reduce:.0} Gb/s)")
        } else {
            String::new()
        };
        let _ = writeln!(extra, "| {what}{rate} | {gbs:.2} GB/s | {share:.3} |");
    }
    Ok((rows, extra))
}

/// The crossover table: per collective and size, each algorithm's time,
/// the fastest, and MPICH's choice.
fn crossover_table(sweeps: &[Sweep]) -> String {
    let mut s = String::new();
    for (c, sizes) in sweeps {
        let algs: Vec<Algorithm> = sizes
            .first()
            .map(|(_, t)| t.iter().map(|(a, _)| *a).collect())
            .unwrap_or_default();
        let _ = write!(s, "\n**{c}**, {P} ranks (µs)\n\n| size |");
        for a in &algs {
            let _ = write!(s, " {a} |");
        }
        let _ = writeln!(s, " fastest | MPICH 4 |");
        let _ = writeln!(s, "|---|{}---|---|", "---:|".repeat(algs.len()));
        for (size, times) in sizes {
            let _ = write!(s, "| {} |", bytes(*size));
            for (_, t) in times {
                let _ = write!(s, " {t:.2} |");
            }
            let (best, bt) = fastest(times);
            let (chosen, t) = mpich(*c, *size, times);
            let _ = writeln!(s, " {best} | {chosen} ({:.2}×) |", t / bt);
        }
    }
    s
}

/// The section.
pub fn mpi() -> anyhow::Result<Section> {
    let k = costs()?;
    let mut rows = model_rows(k)?;
    let sweeps = crossovers()?;
    rows.extend(choice_rows(&sweeps));
    let (bus, bus_table) = busbw_rows()?;
    rows.extend(bus);
    let mut extra = format!(
        "\nα = {:.3} µs (one round of a two-rank barrier); β = {:.3} ns/B one way, {:.3} \
         ns/B both ways (the wire); γ = {:.3} ns/B (`host_reduce_bandwidth`); δ = {:.3} ns/B \
         (`host_copy_bandwidth`).\n",
        k.alpha,
        k.beta * 1e3,
        k.beta2 * 1e3,
        k.gamma * 1e3,
        k.delta * 1e3
    );
    extra.push_str(&bus_table);
    extra.push_str(&crossover_table(&sweeps));
    Ok(Section {
        title: "MPI's collective algorithms over the engine".into(),
        files: "`scenarios/reproduce/collective-mpi.toml` (16 hosts on one switch, \
                `roce-100g`), with `workload.0.collective`, `.algorithm`, `.sizes` and \
                `.pipeline` set per run; `scenarios/reproduce/ring-busbw.toml` (a k = 4 fat \
                tree) for the bus bandwidth"
            .into(),
        intro: "Thakur, Rabenseifner and Gropp (2005) cost each of MPICH's algorithms as \
                α per message, β per byte sent and γ per byte reduced (the ring allreduce: \
                Patarasuk and Yuan, 2009). On a fabric where \
                no two flows share a link each algorithm's time should be that cost: \
                here at 64 B (α's part) and at 16 MiB of vector or 1 MiB of block (β's and \
                γ's), with α measured once and β, γ from the profile. The sweep shows \
                which algorithm is fastest at every size and how far MPICH 4's default \
                choice is from it; the ring allreduce shows how close a collective comes \
                to the link."
            .into(),
        rows,
        extra,
        plots: Vec::new(),
        known: known(),
    })
}

/// Rows known not to hold, and why.
fn known() -> Vec<(String, String)> {
    let one_way = "a reduce's ranks send up the tree as soon as their children's \
                   vectors are in, and no step waits for its own send's acknowledgement: \
                   each level costs a one-way WRITE (1.5 µs), where α, a barrier round, \
                   also waits for the acknowledgement (2.05 µs)";
    let choice = |c: &str, why: &str| {
        (
            format!("{c}, {P} ranks: MPICH's choice against the fastest, worst size"),
            why.to_string(),
        )
    };
    vec![
        (format!("reduce binomial, {P} ranks, 64 B"), one_way.into()),
        (
            format!("reduce reduce_scatter_gather, {P} ranks, 64 B"),
            one_way.into(),
        ),
        (
            format!("alltoall brucks, {P} ranks, 64 B"),
            "each of Bruck's steps gathers eight blocks into one WRITE: a DMA setup per \
             block beyond the first and a gather entry each, about 0.45 µs a step that \
             α's one-block message does not pay"
                .into(),
        ),
        (
            format!("alltoall scattered, {P} ranks, 64 B"),
            "all fifteen WRITEs are posted at once, and the NIC fetches their descriptors \
             one at a time (0.41 µs each): the fetch unit, not α, sets the time"
                .into(),
        ),
        choice(
            "allreduce",
            "MPICH 4 takes Rabenseifner above 8 B; on a 100 Gb/s link β is so small that \
             recursive doubling's lg p messages beat Rabenseifner's 2 lg p up to 8 KiB",
        ),
        choice(
            "reduce",
            "MPICH 4 takes reduce-scatter and gather above 2 KiB; the binomial tree's \
             one-way levels stay cheaper up to 8 KiB here",
        ),
        choice(
            "broadcast",
            "MPICH 4 leaves the binomial tree above 12 KiB and takes the ring allgather \
             above 512 KiB; here the tree wins to 32 KiB and recursive doubling beats \
             the ring's p − 1 steps at every size, with no topology to favour the ring",
        ),
        choice(
            "allgather",
            "MPICH 4 takes the ring above 512 KiB in all; on one switch recursive \
             doubling's distant partners cost no more than neighbours, and its lg p \
             messages beat the ring's p − 1 at every size",
        ),
        choice(
            "alltoall",
            "MPICH 4 takes Bruck up to 256 B and pairwise above 32 KiB; posting every \
             WRITE at once wins at every size here, as the crossbar never congests",
        ),
    ]
}
