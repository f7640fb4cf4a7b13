//! Standard workloads shared by benchmarks, examples and the CLI.

use udrma_faults::rng::{below, stream};
use udrma_faults::RuleSet;
use udrma_nic::{Access, NicConfig, WorkRequest};
use udrma_proto::{Duration, Instant, NodeAddr};

use crate::matrix::Connection;

use crate::routing::Policy;
use crate::topology::{LinkParams, Topology};
use crate::world::{FabricConfig, FabricError, World};

/// Bytes each host writes in the speed shape.
pub const SPEED_WRITE_BYTES: u64 = 2_000_000;

/// A random permutation in which no host maps to itself (Sattolo's
/// algorithm: one cycle through every host), from the seed's
/// `workload:permutation` stream.
pub fn derangement(n: u32, seed: u64) -> Vec<u32> {
    let mut p: Vec<u32> = (0..n).collect();
    let mut rng = stream(seed, "workload:permutation");
    for i in (1..n as usize).rev() {
        let j = below(&mut rng, i as u64) as usize;
        p.swap(i, j);
    }
    p
}

/// The standard speed shape: a 3-tier k-ary fat tree of 100 Gb/s links
/// with 1 µs latency, 4000-byte packets, per-packet spraying, and a random
/// permutation of 2 MB WRITEs (each host writes to exactly one other),
/// over phantom memory. Returns the world with every WRITE posted.
pub fn speed_shape(k: u32, seed: u64) -> Result<World, FabricError> {
    speed_shape_for(k, seed, None)
}

/// The speed shape built for shard `me` of `shards` (`Some((shards,
/// me))`, [`World::new_shard`]): the shard holds only its run of hosts,
/// and a host another shard runs gives its state back as soon as its
/// WRITE is posted.
pub fn speed_shape_for(
    k: u32,
    seed: u64,
    shard: Option<(usize, usize)>,
) -> Result<World, FabricError> {
    let mut w = speed_world(k, seed, SPEED_WRITE_BYTES, shard)?;
    let n = w.topology().n_hosts() as u32;
    let flows: Vec<Connection> = derangement(n, seed)
        .into_iter()
        .enumerate()
        .map(|(h, to)| Connection {
            src: h as u32,
            dst: to,
            start: Instant::ZERO,
            size: SPEED_WRITE_BYTES,
        })
        .collect();
    post_flows(&mut w, &flows)?;
    Ok(w)
}

/// The speed shape's fabric and NICs carrying `flows` (for example a
/// connection matrix written for htsim) instead of the permutation: each
/// flow is one WRITE from its own stretch of the sender's phantom memory
/// to its own stretch of the receiver's, posted at its start time.
pub fn speed_shape_with(k: u32, seed: u64, flows: &[Connection]) -> Result<World, FabricError> {
    speed_shape_with_for(k, seed, flows, None)
}

/// [`speed_shape_with`] built for shard `me` of `shards`
/// ([`speed_shape_for`]).
pub fn speed_shape_with_for(
    k: u32,
    seed: u64,
    flows: &[Connection],
    shard: Option<(usize, usize)>,
) -> Result<World, FabricError> {
    let largest = flows.iter().map(|f| f.size).max().unwrap_or(1);
    let mut w = speed_world(k, seed, largest.max(SPEED_WRITE_BYTES), shard)?;
    post_flows(&mut w, flows)?;
    Ok(w)
}

/// The fabric and NICs of the speed shape, with nothing posted, whole or
/// shard `me` of `shards` ([`World::new_shard`]); a WRITE of up to
/// `largest` bytes is one operation.
fn speed_world(
    k: u32,
    seed: u64,
    largest: u64,
    shard: Option<(usize, usize)>,
) -> Result<World, FabricError> {
    let params = LinkParams {
        bandwidth_bps: 100_000_000_000,
        latency: Duration::from_micros(1),
        ..LinkParams::default()
    };
    let topo = Topology::fat_tree(k, params).map_err(FabricError::Topology)?;
    let cfg = FabricConfig {
        seed,
        routing: Policy::Spray,
        nic: NicConfig {
            mtu_payload: 4000,
            segment_threshold: largest,
            ..NicConfig::default()
        },
        phantom_payload: true,
        seal_bytes: 0,
    };
    match shard {
        Some((shards, me)) => World::new_shard(topo, cfg, RuleSet::new(), shards, me),
        None => World::new(topo, cfg, RuleSet::new()),
    }
}

/// Registers each host's phantom regions, sized to what it sends and
/// receives, and posts `flows`.
fn post_flows(w: &mut World, flows: &[Connection]) -> Result<(), FabricError> {
    let n = w.topology().n_hosts() as u32;
    // Each host's bytes to send and to receive, laid end to end.
    let mut out = vec![0u64; n as usize];
    let mut inn = vec![0u64; n as usize];
    for f in flows {
        for h in [f.src, f.dst] {
            if h >= n {
                return Err(FabricError::NoHost(h, n as usize));
            }
        }
        out[f.src as usize] += f.size;
        inn[f.dst as usize] += f.size;
    }
    let mut keys = Vec::with_capacity(n as usize);
    for h in 0..n {
        let m = w.nic_mut(NodeAddr(h)).memory_mut();
        let src = m.register_phantom(SRC_BASE, out[h as usize].max(1), Access::ALL);
        let dst = m.register_phantom(DST_BASE, inn[h as usize].max(1), Access::ALL);
        keys.push((src, dst));
    }
    out.fill(0);
    inn.fill(0);
    for f in flows {
        let (s, d) = (f.src as usize, f.dst as usize);
        let wr = WorkRequest::write(
            NodeAddr(f.dst),
            keys[s].0,
            SRC_BASE + out[s],
            f.size,
            keys[d].1 .0,
            DST_BASE + inn[d],
        );
        out[s] += f.size;
        inn[d] += f.size;
        if f.start == Instant::ZERO {
            w.post(NodeAddr(f.src), wr)?;
        } else {
            w.post_at(f.start, NodeAddr(f.src), wr)?;
        }
    }
    Ok(())
}

const SRC_BASE: u64 = 0x1000_0000;
const DST_BASE: u64 = 0x2000_0000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derangements_move_every_host() {
        for seed in 0..20 {
            let p = derangement(16, seed);
            let mut seen = p.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..16).collect::<Vec<_>>());
            assert!(p.iter().enumerate().all(|(i, t)| i as u32 != *t));
        }
    }
}
