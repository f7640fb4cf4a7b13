//! Routing: which egress ports of a switch lead toward a host on a
//! shortest path, and which one a packet takes.
//!
//! Fat trees are routed by their structure (up to any aggregation/core,
//! down to the one that leads to the destination), so a 1024-host fabric
//! needs no tables. Other shapes use breadth-first distance tables.

use rand_chacha::ChaCha8Rng;
use rand_core::Rng;
use udrma_faults::rng::{accept_below, below_from, mix};
use udrma_proto::NodeAddr;

use crate::topology::{NodeId, NodeKind, PortId, Shape, Topology};

/// How a switch picks among equal-cost next hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Policy {
    /// Always the first (one fixed path per destination).
    ShortestPath,
    /// By a hash of the flow (source host, destination host, UDP source
    /// port): one path per flow.
    Ecmp,
    /// A random next hop for every packet (reorders within a flow).
    Spray,
}

/// A switch's random stream (ChaCha8) that can show its next draw
/// without taking it. The event loop works a sprayed packet's route out
/// an event early, to prefetch the port it will leave by; the draw it
/// looked at stays first in line, so the real route takes the same value
/// and the stream's sequence is exactly the plain stream's. (Looking at
/// a copy of the stream instead cost a 300-byte copy per look, and a
/// block of ChaCha thrown away every 32nd.)
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct SwitchRng {
    rng: ChaCha8Rng,
    ahead: Option<u64>,
}

impl SwitchRng {
    /// Wraps `rng`.
    pub fn new(rng: ChaCha8Rng) -> SwitchRng {
        SwitchRng { rng, ahead: None }
    }

    /// Takes the next draw (the one looked at, if any).
    fn next_u64(&mut self) -> u64 {
        match self.ahead.take() {
            Some(v) => v,
            None => self.rng.next_u64(),
        }
    }

    /// The next draw, left in line.
    fn peek_u64(&mut self) -> u64 {
        match self.ahead {
            Some(v) => v,
            None => *self.ahead.insert(self.rng.next_u64()),
        }
    }

    /// Uniform in `0..n` (n > 0), as `udrma_proto::rng::below` draws it.
    fn below(&mut self, n: u64) -> u64 {
        below_from(|| self.next_u64(), n)
    }
}

/// Next-hop computation for one topology.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Router {
    policy: Policy,
    shape: Shape,
    n_hosts: u32,
    n_nodes: u32,
    /// Generic shapes: distance (in links) of every node to every host,
    /// `dist[host * n_nodes + node]`.
    dist: Vec<u16>,
}

impl Router {
    /// Builds the router (distance tables for generic shapes).
    pub fn new(topo: &Topology, policy: Policy) -> Router {
        let n_nodes = topo.nodes.len() as u32;
        let n_hosts = topo.n_hosts() as u32;
        let mut dist = Vec::new();
        if topo.shape == Shape::Generic {
            dist = vec![u16::MAX; (n_hosts * n_nodes) as usize];
            for (h, &start) in topo.hosts.iter().enumerate() {
                let d = &mut dist[h * n_nodes as usize..(h + 1) * n_nodes as usize];
                let mut frontier = std::collections::VecDeque::from([start]);
                d[start as usize] = 0;
                while let Some(u) = frontier.pop_front() {
                    // Hosts do not forward: only the start expands from a host.
                    if u != start && matches!(topo.nodes[u as usize].kind, NodeKind::Host(_)) {
                        continue;
                    }
                    for &p in &topo.nodes[u as usize].ports {
                        let v = topo.ports[p as usize].peer;
                        if d[v as usize] == u16::MAX {
                            d[v as usize] = d[u as usize] + 1;
                            frontier.push_back(v);
                        }
                    }
                }
            }
        }
        Router {
            policy,
            shape: topo.shape,
            n_hosts,
            n_nodes,
            dist,
        }
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Fills `out` with the egress ports of `node` on shortest paths to
    /// `dst` (empty if unreachable).
    pub fn candidates(&self, topo: &Topology, node: NodeId, dst: NodeAddr, out: &mut Vec<PortId>) {
        out.clear();
        if let Some(ports) = self.structural(topo, node, dst) {
            out.extend_from_slice(ports);
            return;
        }
        if dst.0 >= self.n_hosts {
            return;
        }
        let d = &self.dist[(dst.0 * self.n_nodes) as usize..((dst.0 + 1) * self.n_nodes) as usize];
        let here = d[node as usize];
        if here == u16::MAX || here == 0 {
            return;
        }
        for &p in &topo.nodes[node as usize].ports {
            if d[topo.ports[p as usize].peer as usize] == here - 1 {
                out.push(p);
            }
        }
    }

    /// On a fat tree, the candidates of [`Router::candidates`] without
    /// copying them: they are always a run of `node`'s ports (one down,
    /// or every one up; none toward an address that is not a host).
    /// `None` on other shapes.
    #[inline]
    pub fn structural<'t>(
        &self,
        topo: &'t Topology,
        node: NodeId,
        dst: NodeAddr,
    ) -> Option<&'t [PortId]> {
        let Shape::FatTree { k } = self.shape else {
            return None;
        };
        let ports = &topo.nodes[node as usize].ports;
        let half = k / 2;
        let h = dst.0;
        if h >= self.n_hosts {
            return Some(&[]);
        }
        if node < self.n_hosts {
            return Some(&ports[..1]);
        }
        let idx = node - self.n_hosts;
        let one = |i: u32| Some(&ports[i as usize..i as usize + 1]);
        if idx < k * half {
            // Edge switch: hosts first, then its pod's aggregations.
            if h / half == idx {
                one(h % half)
            } else {
                Some(&ports[half as usize..])
            }
        } else if idx < 2 * k * half {
            // Aggregation: its pod's edges first, then cores.
            let pod = (idx - k * half) / half;
            if h / (half * half) == pod {
                one((h / half) % half)
            } else {
                Some(&ports[half as usize..])
            }
        } else {
            // Core: one port per pod.
            one(h / (half * half))
        }
    }

    /// Picks one of `candidates` (non-empty) by the policy.
    pub fn choose(
        &self,
        candidates: &[PortId],
        flow: (NodeAddr, NodeAddr, u16),
        switch: NodeId,
        rng: &mut SwitchRng,
    ) -> PortId {
        self.pick(candidates, flow, switch, |n| Some(rng.below(n)))
            .unwrap_or(candidates[0])
    }

    /// The port [`Router::choose`] will pick if it is called next on
    /// this switch's stream, without drawing from it; `None` when that
    /// is not known yet (the draw it looks at would be rejected and drawn
    /// again: with `n` candidates, a chance below n in 2^64).
    pub fn predict(
        &self,
        candidates: &[PortId],
        flow: (NodeAddr, NodeAddr, u16),
        switch: NodeId,
        rng: &mut SwitchRng,
    ) -> Option<PortId> {
        self.pick(candidates, flow, switch, |n| {
            accept_below(rng.peek_u64(), n)
        })
    }

    /// One of `candidates` by the policy, `spray(n)` drawing the index
    /// below `n` for spraying.
    fn pick(
        &self,
        candidates: &[PortId],
        flow: (NodeAddr, NodeAddr, u16),
        switch: NodeId,
        spray: impl FnOnce(u64) -> Option<u64>,
    ) -> Option<PortId> {
        if candidates.len() == 1 {
            return Some(candidates[0]);
        }
        let i = match self.policy {
            Policy::ShortestPath => 0,
            Policy::Ecmp => {
                // Salted by the switch, as real switches seed their hash:
                // with one hash everywhere, a fat tree's aggregation
                // switch would pick the same index as the edge switch
                // below it and only k/2 of the (k/2)² core switches would
                // carry traffic (hash polarization).
                let h = mix(u64::from(flow.0 .0) << 40
                    ^ u64::from(flow.1 .0) << 16
                    ^ u64::from(flow.2)
                    ^ u64::from(switch).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                h % candidates.len() as u64
            }
            Policy::Spray => spray(candidates.len() as u64)?,
        };
        candidates.get(i as usize).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::LinkParams;
    use proptest::prelude::*;

    proptest! {
        /// Looking ahead changes no draw: a switch stream that is looked
        /// at (any number of times) between its draws gives exactly the
        /// plain stream's values, and a sprayed route predicted from a
        /// look is the route then chosen.
        #[test]
        fn looking_at_the_next_draw_changes_no_draw(
            steps in proptest::collection::vec((any::<bool>(), 1u64..70), 1..200),
            seed in any::<u64>(),
        ) {
            let mut plain = udrma_faults::rng::stream(seed, "route:e0");
            let mut looked = SwitchRng::new(plain.clone());
            let t = Topology::fat_tree(4, LinkParams::default()).unwrap();
            let r = Router::new(&t, Policy::Spray);
            let cands: Vec<PortId> = (0..70).collect();
            for (look, n) in steps {
                let cands = &cands[..n as usize];
                let flow = (NodeAddr(0), NodeAddr(1), 7);
                let predicted = look.then(|| r.predict(cands, flow, 20, &mut looked));
                let chosen = r.choose(cands, flow, 20, &mut looked);
                let want = if n == 1 {
                    cands[0]
                } else {
                    cands[udrma_faults::rng::below(&mut plain, n) as usize]
                };
                prop_assert_eq!(chosen, want);
                if let Some(p) = predicted {
                    prop_assert_eq!(p, Some(chosen));
                }
            }
            prop_assert_eq!(looked.next_u64(), plain.next_u64());
        }
    }

    /// Follows first candidates from every host to every other host and
    /// checks the path length against the fat tree's structure.
    #[test]
    fn fat_tree_paths_are_shortest() {
        let k = 4;
        let t = Topology::fat_tree(k, LinkParams::default()).unwrap();
        let r = Router::new(&t, Policy::ShortestPath);
        let mut out = Vec::new();
        for s in 0..t.n_hosts() as u32 {
            for d in 0..t.n_hosts() as u32 {
                if s == d {
                    continue;
                }
                let mut node = t.hosts[s as usize];
                let mut hops = 0;
                while node != t.hosts[d as usize] {
                    r.candidates(&t, node, NodeAddr(d), &mut out);
                    assert!(!out.is_empty());
                    node = t.ports[out[0] as usize].peer;
                    hops += 1;
                    assert!(hops <= 6);
                }
                let want = if s / 2 == d / 2 {
                    2
                } else if s / 4 == d / 4 {
                    4
                } else {
                    6
                };
                assert_eq!(hops, want, "h{s} → h{d}");
            }
        }
    }

    /// A k-ary n-tree's paths climb to the lowest common level: 2 hops
    /// under one leaf switch, 4 within a subtree of k² hosts, 6 beyond.
    #[test]
    fn kary_ntree_paths_climb_only_as_high_as_needed() {
        let t = Topology::kary_ntree(4, 3, 50, LinkParams::default()).unwrap();
        let r = Router::new(&t, Policy::Ecmp);
        let mut out = Vec::new();
        for (s, d) in [(0u32, 3u32), (0, 4), (5, 14), (0, 16), (49, 1)] {
            let mut node = t.hosts[s as usize];
            let mut hops = 0;
            while node != t.hosts[d as usize] {
                r.candidates(&t, node, NodeAddr(d), &mut out);
                assert!(!out.is_empty(), "h{s} → h{d} stuck at {node}");
                node = t.ports[out[0] as usize].peer;
                hops += 1;
            }
            let want = if s / 4 == d / 4 {
                2
            } else if s / 16 == d / 16 {
                4
            } else {
                6
            };
            assert_eq!(hops, want, "h{s} → h{d}");
        }
        // Between two leaf switches of one subtree, k equal-cost paths up.
        let leaf0 = t.n_hosts() as u32;
        r.candidates(&t, leaf0, NodeAddr(4), &mut out);
        assert_eq!(out.len(), 4);
        assert!(Topology::kary_ntree(4, 2, 17, LinkParams::default()).is_err());
    }

    /// ECMP spreads inter-pod flows over every core switch of a k=8 fat
    /// tree. With one unsalted hash at every switch, the aggregation
    /// switch picked the same index as the edge switch below it and only 4
    /// of the 16 cores carried anything (hash polarization).
    #[test]
    fn ecmp_uses_every_core_switch() {
        let t = Topology::fat_tree(8, LinkParams::default()).unwrap();
        let r = Router::new(&t, Policy::Ecmp);
        let mut rng = SwitchRng::new(udrma_faults::rng::stream(1, "test"));
        let mut out = Vec::new();
        let mut cores = std::collections::BTreeSet::new();
        for s in 0..128u32 {
            // To a host four pods across (16 hosts per pod).
            let d = NodeAddr((s + 64) % 128);
            let mut node = t.hosts[s as usize];
            while node != t.hosts[d.0 as usize] {
                r.candidates(&t, node, d, &mut out);
                let port = r.choose(&out, (NodeAddr(s), d, 49_152), node, &mut rng);
                node = t.ports[port as usize].peer;
                if t.nodes[node as usize].name.starts_with('c') {
                    cores.insert(node);
                }
            }
        }
        assert_eq!(cores.len(), 16, "cores used: {cores:?}");
    }

    #[test]
    fn generic_tables_route_a_dumbbell_and_offer_equal_costs() {
        let t = Topology::dumbbell(2, LinkParams::default(), LinkParams::default());
        let r = Router::new(&t, Policy::Ecmp);
        let mut out = Vec::new();
        let s0 = t.nodes.iter().position(|n| n.name == "s0").unwrap() as u32;
        r.candidates(&t, s0, NodeAddr(3), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            t.links[t.ports[out[0] as usize].link as usize].name,
            "s0-s1"
        );
        let ft = Topology::fat_tree(4, LinkParams::default()).unwrap();
        let e0 = ft.n_hosts() as u32;
        Router::new(&ft, Policy::Spray).candidates(&ft, e0, NodeAddr(15), &mut out);
        assert_eq!(out.len(), 2, "two aggregations up");
    }

    /// On a fat tree no switch has a way to an address past the hosts
    /// (the tree's arithmetic would index past a core's ports).
    #[test]
    fn a_fat_tree_has_no_route_to_a_non_host() {
        let ft = Topology::fat_tree(4, LinkParams::default()).unwrap();
        let r = Router::new(&ft, Policy::Spray);
        let mut out = vec![0];
        for node in 0..ft.nodes.len() as u32 {
            for d in [16, 17, 1 << 20, u32::MAX] {
                assert_eq!(r.structural(&ft, node, NodeAddr(d)), Some(&[][..]));
                r.candidates(&ft, node, NodeAddr(d), &mut out);
                assert!(out.is_empty(), "node {node} routes to {d}");
            }
        }
    }
}
