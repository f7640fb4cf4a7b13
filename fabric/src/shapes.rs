//! Standard workloads shared by benchmarks, examples and the CLI.

use udrma_faults::rng::{below, stream};
use udrma_faults::RuleSet;
use udrma_nic::{Access, NicConfig, WorkRequest};
use udrma_proto::{Duration, NodeAddr};

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
    let params = LinkParams {
        bandwidth_bps: 100_000_000_000,
        latency: Duration::from_micros(1),
        ..LinkParams::default()
    };
    let topo = Topology::fat_tree(k, params).map_err(FabricError::Topology)?;
    let n = topo.n_hosts() as u32;
    let cfg = FabricConfig {
        seed,
        routing: Policy::Spray,
        nic: NicConfig {
            mtu_payload: 4000,
            segment_threshold: SPEED_WRITE_BYTES,
            ..NicConfig::default()
        },
        phantom_payload: true,
        seal_bytes: 0,
    };
    let mut w = World::new(topo, cfg, RuleSet::new())?;
    let mut keys = Vec::with_capacity(n as usize);
    for h in 0..n {
        let m = w.nic_mut(NodeAddr(h)).memory_mut();
        let src = m.register_phantom(0x1000_0000, SPEED_WRITE_BYTES, Access::ALL);
        let dst = m.register_phantom(0x2000_0000, SPEED_WRITE_BYTES, Access::ALL);
        keys.push((src, dst));
    }
    for (h, to) in derangement(n, seed).into_iter().enumerate() {
        let wr = WorkRequest::write(
            NodeAddr(to),
            keys[h].0,
            0x1000_0000,
            SPEED_WRITE_BYTES,
            keys[to as usize].1 .0,
            0x2000_0000,
        );
        w.post(NodeAddr(h as u32), wr)?;
    }
    Ok(w)
}

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
