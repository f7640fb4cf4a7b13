//! The RDMA workloads' plan (single, many, pingpong, window, flows,
//! all-to-all, incast, random pairs, permutation, reuse): every
//! operation, who posts it, when, and where its bytes live; the same plan
//! in every process, from the file and the seed alone. The runner
//! (`crate::run::rdma`) installs it and checks what became of it.

use udrma_fabric::shapes::derangement;
use udrma_faults::rng::{below, stream};
use udrma_host::workload::rdma::{OpKind, RdmaPlan, Reuse, When};
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::file::schema::{OpKind as SchemaOp, WorkloadKind, WorkloadSpec};
use crate::file::source::Locate;
use crate::plan::build::MAX_STORED_BYTES;
use crate::{Scenario, ScenarioError};

/// Plans every operation of the RDMA workloads and where its bytes live:
/// the same plan in every process (it depends on the file and the seed
/// only).
pub fn plan(sc: &Scenario, seed: u64, n: usize, host_bps: u64) -> Result<RdmaPlan, ScenarioError> {
    let mut p = RdmaPlan::new(n, sc.file.topology.phantom);
    let host = |name: &Option<String>, who: &str| sc.host(name.as_deref().unwrap_or(""), n, who);
    for (wi, w) in sc.file.workloads.iter().enumerate() {
        let who = format!("workload {wi}");
        let start = Instant::ZERO + w.start.map_or(Duration::ZERO, |t| t.0);
        let size = w.size.map_or(0, |s| s.0);
        let kind = match w.op {
            SchemaOp::Write => OpKind::Write,
            SchemaOp::Read => OpKind::Read,
            SchemaOp::Send => OpKind::Send,
        };
        let mut add = |poster: NodeAddr, peer: NodeAddr, when: When| {
            p.add(wi, kind, poster, peer, size, when, start)
        };
        match w.kind {
            WorkloadKind::Noncontig => {
                return Err(sc.error_at("noncontig", format!("{who}: runs alone")))
            }
            WorkloadKind::Collective => {
                return Err(sc.error_at("collective", format!("{who}: runs alone")))
            }
            WorkloadKind::Single | WorkloadKind::Many => {
                let (s, d) = (host(&w.src, &who)?, host(&w.dst, &who)?);
                let count = if w.kind == WorkloadKind::Single {
                    1
                } else {
                    w.count
                };
                for _ in 0..count {
                    add(s, d, When::At(start));
                }
            }
            WorkloadKind::Pingpong => {
                // Each WRITE but the first answers the one before it.
                let (s, d) = (host(&w.src, &who)?, host(&w.dst, &who)?);
                let mut last = None;
                for i in 0..2 * w.count {
                    let (a, b) = if i % 2 == 0 { (s, d) } else { (d, s) };
                    let when = last.map_or(When::At(start), When::AfterLanded);
                    last = Some(add(a, b, when));
                }
            }
            WorkloadKind::Window => {
                let (s, d) = (host(&w.src, &who)?, host(&w.dst, &who)?);
                let window = w.window.unwrap_or(64).max(1) as usize;
                let queue: Vec<usize> = (0..w.count as usize)
                    .map(|i| {
                        add(
                            s,
                            d,
                            if i < window {
                                When::At(start)
                            } else {
                                When::Window
                            },
                        )
                    })
                    .collect();
                p.windows.push((queue, window));
            }
            WorkloadKind::Flows => {
                // (Validated with the file.)
                let cdf = crate::plan::flows::validate(sc, w, &who, n)?;
                let load = w.load.unwrap_or(1.0);
                for f in crate::plan::flows::plan(&cdf, load, w.count, n as u32, host_bps, seed, wi)
                {
                    p.add(
                        wi,
                        kind,
                        NodeAddr(f.src),
                        NodeAddr(f.dst),
                        f.size,
                        When::At(start + f.after),
                        start,
                    );
                }
            }
            WorkloadKind::AllToAll
            | WorkloadKind::Incast
            | WorkloadKind::RandomPairs
            | WorkloadKind::Permutation => {
                let (round, times) = rounds(sc, w, wi, n, seed, &who)?;
                for _ in 0..times {
                    for (a, b) in &round {
                        add(*a, *b, When::At(start));
                    }
                }
            }
            // The messaging runner runs these.
            WorkloadKind::MsgLatency
            | WorkloadKind::MsgBw
            | WorkloadKind::MsgBibw
            | WorkloadKind::MsgMixed => {}
            WorkloadKind::Reuse => p.reuses.push(Reuse {
                at: start,
                host: host(&w.dst, &who)?,
                tag: wi as u32 + 1,
            }),
        }
    }
    flows_fit(sc, &p, seed)?;
    Ok(p)
}

/// Validation bounded the bytes stored at the file's own seed; flows
/// drawn at another seed (`--seed`, a sweep) are bounded here, at theirs.
fn flows_fit(sc: &Scenario, p: &RdmaPlan, seed: u64) -> Result<(), ScenarioError> {
    let flows = sc
        .file
        .workloads
        .iter()
        .any(|w| w.kind == WorkloadKind::Flows);
    let stored: u128 = p.src_len.iter().map(|&b| u128::from(b)).sum();
    if flows && !p.phantom && stored > MAX_STORED_BYTES {
        return Err(sc.error_at_key(
            "cdf",
            format!(
                "at seed {seed} the workloads move {stored} bytes, which would all be stored (more than {MAX_STORED_BYTES}); set `phantom = true` in [topology] for scale runs"
            ),
        ));
    }
    Ok(())
}

/// The workloads whose operations all start at once: the (poster, peer)
/// pairs of one round, in posting order, and how many rounds (each
/// random pair is a round of its own).
fn rounds(
    sc: &Scenario,
    w: &WorkloadSpec,
    wi: usize,
    n: usize,
    seed: u64,
    who: &str,
) -> Result<(Vec<(NodeAddr, NodeAddr)>, u32), ScenarioError> {
    let host = |name: &str| sc.host(name, n, who);
    let hosts = (0..n as u32).map(NodeAddr);
    Ok(match w.kind {
        WorkloadKind::AllToAll => {
            let all = hosts
                .clone()
                .flat_map(|a| hosts.clone().map(move |b| (a, b)));
            (all.filter(|(a, b)| a != b).collect(), w.count)
        }
        WorkloadKind::Incast => {
            let d = host(w.dst.as_deref().unwrap_or(""))?;
            let srcs: Vec<NodeAddr> = if w.srcs.is_empty() {
                hosts.filter(|h| *h != d).collect()
            } else {
                w.srcs.iter().map(|h| host(h)).collect::<Result<_, _>>()?
            };
            (
                srcs.into_iter()
                    .filter(|s| *s != d)
                    .map(|s| (s, d))
                    .collect(),
                w.count,
            )
        }
        WorkloadKind::RandomPairs => {
            let mut rng = stream(seed, &format!("workload:{wi}"));
            let pairs = (0..w.count)
                .map(|_| {
                    let a = below(&mut rng, n as u64) as u32;
                    let b = (a + 1 + below(&mut rng, n as u64 - 1) as u32) % n as u32;
                    (NodeAddr(a), NodeAddr(b))
                })
                .collect();
            (pairs, 1)
        }
        WorkloadKind::Permutation if !w.pairs.is_empty() => {
            let pairs = w
                .pairs
                .iter()
                .map(|[a, b]| Ok((host(a)?, host(b)?)))
                .collect::<Result<Vec<_>, ScenarioError>>()?;
            (pairs, w.count)
        }
        WorkloadKind::Permutation => {
            let perm = derangement(n as u32, seed ^ wi as u64);
            let pairs = perm
                .iter()
                .enumerate()
                .map(|(a, b)| (NodeAddr(a as u32), NodeAddr(*b)))
                .collect();
            (pairs, w.count)
        }
        _ => (Vec::new(), 0),
    })
}
