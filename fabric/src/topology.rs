//! Topologies: hosts and switches joined by full-duplex links, each with a
//! stable name (`h0`, `e3`, `a1`, `c0`, `h0-e0`) that fault targeting,
//! traces and outputs use.

use std::collections::BTreeMap;

use udrma_faults::Direction;
use udrma_proto::{Duration, NodeAddr};

/// Index of a node (host or switch).
pub type NodeId = u32;
/// Index of a link.
pub type LinkId = u32;
/// Index of an egress port (one per link end).
pub type PortId = u32;

/// Physical parameters of one link (both directions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct LinkParams {
    /// Line rate in bits per second.
    pub bandwidth_bps: u64,
    /// Propagation latency.
    pub latency: Duration,
    /// Largest datagram (UDP payload) the link carries; larger ones are
    /// dropped and counted.
    pub mtu: u32,
    /// Egress queue capacity in bytes (tail drop beyond it).
    pub queue_bytes: u64,
    /// Queue depth in bytes above which packets are ECN-marked (counted).
    pub ecn_threshold: Option<u64>,
    /// With a threshold: the queue depth in bytes from which every packet
    /// is marked. Between the threshold and it a packet is marked with a
    /// probability that grows linearly from 0 to 1, as RED and htsim's
    /// composite queue mark (the draw is a hash of the packet's serial
    /// number and the port, so it uses no random stream). `None`: every
    /// packet above the threshold is marked.
    pub ecn_max: Option<u64>,
    /// A switch port of this link trims instead of dropping: a packet that
    /// does not fit its full queue loses its payload and its header goes
    /// ahead of the queue (NDP/UET packet trimming). Host ports never trim.
    pub trim: bool,
    /// A switch port of this link serves control packets (acknowledgements
    /// and flow control, [`udrma_proto::Opcode::is_control`]) ahead of its
    /// data queue, as a two-level priority queue does (htsim's composite
    /// queue, NDP/UET switches); their few bytes are not charged to the
    /// queue. Host ports keep one queue.
    pub control_priority: bool,
}

impl Default for LinkParams {
    /// 100 Gb/s, 1 µs, 9216-byte MTU, 1 MiB queue, no ECN marking.
    fn default() -> Self {
        LinkParams {
            bandwidth_bps: 100_000_000_000,
            latency: Duration::from_micros(1),
            mtu: 9216,
            queue_bytes: 1 << 20,
            ecn_threshold: None,
            ecn_max: None,
            trim: false,
            control_priority: false,
        }
    }
}

/// Host or switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum NodeKind {
    /// An end host with a NIC; its `NodeAddr` is its index among hosts.
    Host(NodeAddr),
    /// A switch.
    Switch,
}

/// A node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Node {
    /// Stable name.
    pub name: String,
    /// What it is.
    pub kind: NodeKind,
    /// Its egress ports, in link order.
    pub ports: Vec<PortId>,
}

/// A full-duplex link `a-b`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Link {
    /// Stable name, `a-b`.
    pub name: String,
    /// First end.
    pub a: NodeId,
    /// Second end.
    pub b: NodeId,
    /// Parameters.
    pub params: LinkParams,
    /// Egress port at `a` (toward `b`) and at `b` (toward `a`).
    pub ports: [PortId; 2],
}

/// One direction of a link: where a packet leaves from and goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Port {
    /// Node it belongs to.
    pub node: NodeId,
    /// Node at the other end.
    pub peer: NodeId,
    /// Link.
    pub link: LinkId,
    /// Forward if `node` is the link's `a`.
    pub direction: Direction,
}

/// The shape, where routing can use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Shape {
    /// Any graph: routing by breadth-first distance tables.
    Generic,
    /// A 3-tier k-ary fat tree built by [`Topology::fat_tree`]: routing by
    /// its structure (no tables).
    FatTree {
        /// Ports per switch.
        k: u32,
    },
}

/// Nodes, links and ports.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Topology {
    /// All nodes.
    pub nodes: Vec<Node>,
    /// All links.
    pub links: Vec<Link>,
    /// All egress ports.
    pub ports: Vec<Port>,
    /// Node of each host, by `NodeAddr`.
    pub hosts: Vec<NodeId>,
    /// Shape.
    pub shape: Shape,
    names: BTreeMap<String, LinkId>,
}

/// Largest fat-tree arity: 4,194,304 hosts, whose node and port numbers
/// still fit their 32-bit ids (and the event codes' 30 bits) with room.
pub const MAX_FAT_TREE_K: u32 = 256;

impl Topology {
    fn empty(shape: Shape) -> Topology {
        Topology {
            nodes: Vec::new(),
            links: Vec::new(),
            ports: Vec::new(),
            hosts: Vec::new(),
            shape,
            names: BTreeMap::new(),
        }
    }

    fn host(&mut self) -> NodeId {
        let addr = NodeAddr(self.hosts.len() as u32);
        let id = self.nodes.len() as NodeId;
        self.nodes.push(Node {
            name: addr.to_string(),
            kind: NodeKind::Host(addr),
            ports: Vec::new(),
        });
        self.hosts.push(id);
        id
    }

    fn switch(&mut self, name: String) -> NodeId {
        let id = self.nodes.len() as NodeId;
        self.nodes.push(Node {
            name,
            kind: NodeKind::Switch,
            ports: Vec::new(),
        });
        id
    }

    fn link(&mut self, a: NodeId, b: NodeId, params: LinkParams) -> LinkId {
        let id = self.links.len() as LinkId;
        let name = format!(
            "{}-{}",
            self.nodes[a as usize].name, self.nodes[b as usize].name
        );
        let pa = self.ports.len() as PortId;
        self.ports.push(Port {
            node: a,
            peer: b,
            link: id,
            direction: Direction::Forward,
        });
        self.ports.push(Port {
            node: b,
            peer: a,
            link: id,
            direction: Direction::Reverse,
        });
        self.nodes[a as usize].ports.push(pa);
        self.nodes[b as usize].ports.push(pa + 1);
        self.names.insert(name.clone(), id);
        self.links.push(Link {
            name,
            a,
            b,
            params,
            ports: [pa, pa + 1],
        });
        id
    }

    /// Two hosts back to back: `h0-h1`.
    pub fn pair(params: LinkParams) -> Topology {
        let mut t = Topology::empty(Shape::Generic);
        let (a, b) = (t.host(), t.host());
        t.link(a, b, params);
        t
    }

    /// `n` hosts on one switch `s0`: links `hI-s0`.
    pub fn star(n: u32, params: LinkParams) -> Topology {
        let mut t = Topology::empty(Shape::Generic);
        let hosts: Vec<NodeId> = (0..n).map(|_| t.host()).collect();
        let s = t.switch("s0".into());
        for h in hosts {
            t.link(h, s, params);
        }
        t
    }

    /// `n` hosts on `s0` and `n` on `s1`, joined by the bottleneck `s0-s1`.
    pub fn dumbbell(n: u32, edge: LinkParams, bottleneck: LinkParams) -> Topology {
        let mut t = Topology::empty(Shape::Generic);
        let left: Vec<NodeId> = (0..n).map(|_| t.host()).collect();
        let right: Vec<NodeId> = (0..n).map(|_| t.host()).collect();
        let (s0, s1) = (t.switch("s0".into()), t.switch("s1".into()));
        for h in left {
            t.link(h, s0, edge);
        }
        for h in right {
            t.link(h, s1, edge);
        }
        t.link(s0, s1, bottleneck);
        t
    }

    /// `n` switches `r0`…`r{n-1}` in a ring (links `rI-rJ`, J = I + 1
    /// mod n, made after the hosts' links), one host on each (`hI-rI`).
    /// On an odd ring the shortest path two switches on is unique and
    /// goes one way round: the cyclic buffer dependency a lossless fabric
    /// can deadlock on (docs/lossless.md).
    pub fn ring(n: u32, params: LinkParams) -> Result<Topology, String> {
        if n < 3 {
            return Err(format!("ring of {n} switches: a ring needs at least 3"));
        }
        let mut t = Topology::empty(Shape::Generic);
        let hosts: Vec<NodeId> = (0..n).map(|_| t.host()).collect();
        let switches: Vec<NodeId> = (0..n).map(|i| t.switch(format!("r{i}"))).collect();
        for (&h, &s) in hosts.iter().zip(&switches) {
            t.link(h, s, params);
        }
        for i in 0..n as usize {
            t.link(switches[i], switches[(i + 1) % n as usize], params);
        }
        Ok(t)
    }

    /// The 3-tier k-ary fat tree (k even): k pods of k/2 edge switches
    /// (`e…`) and k/2 aggregation switches (`a…`), (k/2)² core switches
    /// (`c…`), k/2 hosts per edge switch, k³/4 hosts in all. Aggregation
    /// switch j of every pod connects to cores j·k/2 … j·k/2 + k/2 − 1.
    pub fn fat_tree(k: u32, params: LinkParams) -> Result<Topology, String> {
        if k < 2 || k % 2 != 0 {
            return Err(format!("fat tree k = {k}: k must be even and at least 2"));
        }
        if k > MAX_FAT_TREE_K {
            return Err(format!(
                "fat tree k = {k}: at most k = {MAX_FAT_TREE_K} ({} hosts)",
                MAX_FAT_TREE_K.pow(3) / 4
            ));
        }
        let half = k / 2;
        let mut t = Topology::empty(Shape::FatTree { k });
        let n_hosts = k * k * k / 4;
        for _ in 0..n_hosts {
            t.host();
        }
        let edges: Vec<NodeId> = (0..k * half).map(|i| t.switch(format!("e{i}"))).collect();
        let aggs: Vec<NodeId> = (0..k * half).map(|i| t.switch(format!("a{i}"))).collect();
        let cores: Vec<NodeId> = (0..half * half)
            .map(|i| t.switch(format!("c{i}")))
            .collect();
        // Port order matters for structural routing: hosts, then up.
        for (e, &edge) in edges.iter().enumerate() {
            for j in 0..half {
                let h = t.hosts[(e as u32 * half + j) as usize];
                t.link(h, edge, params);
            }
        }
        for pod in 0..k {
            for e in 0..half {
                for a in 0..half {
                    t.link(
                        edges[(pod * half + e) as usize],
                        aggs[(pod * half + a) as usize],
                        params,
                    );
                }
            }
        }
        for pod in 0..k {
            for a in 0..half {
                for c in 0..half {
                    t.link(
                        aggs[(pod * half + a) as usize],
                        cores[(a * half + c) as usize],
                        params,
                    );
                }
            }
        }
        Ok(t)
    }

    /// The k-ary n-tree (Petrini and Vanneschi's fat tree, as the Tianhe
    /// and Quadrics networks build it): `n` levels of `k^(n-1)` switches
    /// of `2k` ports, `k` hosts on each leaf switch, and `hosts` hosts
    /// (at most `k^n`) on the first leaf switches. Leaf switch `s` serves
    /// hosts `s·k … s·k + k − 1`; switch `s` of level `l` links up to the
    /// `k` switches of level `l + 1` whose index differs from `s` only in
    /// base-`k` digit `l`. Switches are named `l{level}s{index}`.
    pub fn kary_ntree(k: u32, n: u32, hosts: u32, params: LinkParams) -> Result<Topology, String> {
        if k < 2 {
            return Err(format!("k-ary n-tree k = {k}: k must be at least 2"));
        }
        if n < 1 {
            return Err("k-ary n-tree n = 0: it needs at least one level".into());
        }
        let cap = u64::from(k).checked_pow(n).filter(|c| *c <= 1 << 20);
        let Some(cap) = cap else {
            return Err(format!("k-ary n-tree {k}^{n} hosts: at most 2^20"));
        };
        if u64::from(hosts) > cap || hosts < 1 {
            return Err(format!(
                "k-ary n-tree with k = {k}, n = {n} holds 1..={cap} hosts, not {hosts}"
            ));
        }
        let per_level = k.pow(n - 1);
        let mut t = Topology::empty(Shape::Generic);
        for _ in 0..hosts {
            t.host();
        }
        let switches: Vec<Vec<NodeId>> = (0..n)
            .map(|l| {
                (0..per_level)
                    .map(|s| t.switch(format!("l{l}s{s}")))
                    .collect()
            })
            .collect();
        for h in 0..hosts {
            t.link(t.hosts[h as usize], switches[0][(h / k) as usize], params);
        }
        for l in 0..n.saturating_sub(1) {
            let digit = k.pow(l);
            for s in 0..per_level {
                let base = s - (s / digit % k) * digit;
                for j in 0..k {
                    t.link(
                        switches[l as usize][s as usize],
                        switches[l as usize + 1][(base + j * digit) as usize],
                        params,
                    );
                }
            }
        }
        Ok(t)
    }

    /// The link named `name`.
    pub fn link_by_name(&self, name: &str) -> Option<LinkId> {
        self.names.get(name).copied()
    }

    /// The error for a link name this topology lacks: the closest name if
    /// one is near, then the valid names (the first dozen and a count when
    /// there are more).
    pub fn unknown_link(&self, name: &str) -> crate::error::FabricError {
        let names = self.link_names();
        let mut known = String::new();
        if let Some(best) = udrma_faults::closest(name, &names) {
            known.push_str(&format!("did you mean {best:?}? "));
        }
        const SHOWN: usize = 12;
        known.push_str("links are ");
        known.push_str(
            &names
                .iter()
                .take(SHOWN)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
        );
        if names.len() > SHOWN {
            known.push_str(&format!(", ... ({} in all)", names.len()));
        }
        crate::error::FabricError::NoLink {
            name: name.to_string(),
            known,
        }
    }

    /// Every link name, in link order.
    pub fn link_names(&self) -> Vec<&str> {
        self.links.iter().map(|l| l.name.as_str()).collect()
    }

    /// Number of hosts.
    pub fn n_hosts(&self) -> usize {
        self.hosts.len()
    }

    /// The host at `node`, if it is one.
    pub fn host_addr(&self, node: NodeId) -> Option<NodeAddr> {
        match self.nodes[node as usize].kind {
            NodeKind::Host(a) => Some(a),
            NodeKind::Switch => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fat_tree_sizes_and_names() {
        for (k, hosts, switches) in [(4u32, 16usize, 20usize), (8, 128, 80), (16, 1024, 320)] {
            let t = Topology::fat_tree(k, LinkParams::default()).unwrap();
            assert_eq!(t.n_hosts(), hosts);
            assert_eq!(t.nodes.len() - hosts, switches);
            // Every switch has exactly k ports, every host one.
            for n in &t.nodes {
                let want = if matches!(n.kind, NodeKind::Host(_)) {
                    1
                } else {
                    k as usize
                };
                assert_eq!(n.ports.len(), want, "{}", n.name);
            }
        }
        let t = Topology::fat_tree(4, LinkParams::default()).unwrap();
        assert_eq!(t.link_by_name("h0-e0"), Some(0));
        assert!(t.link_by_name("e0-a0").is_some());
        assert!(t.link_by_name("a1-c2").is_some());
        assert!(Topology::fat_tree(5, LinkParams::default()).is_err());
    }

    #[test]
    fn small_shapes() {
        assert_eq!(
            Topology::pair(LinkParams::default()).link_names(),
            vec!["h0-h1"]
        );
        assert_eq!(
            Topology::star(3, LinkParams::default()).link_names(),
            vec!["h0-s0", "h1-s0", "h2-s0"]
        );
        let d = Topology::dumbbell(2, LinkParams::default(), LinkParams::default());
        assert_eq!(d.link_names().last(), Some(&"s0-s1"));
        assert_eq!(d.n_hosts(), 4);
    }
}
