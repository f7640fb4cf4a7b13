//! The peer table: which UDP addresses the engine talks to, under which
//! [`NodeAddr`], and what each announced. Datagrams from addresses not in the
//! table are dropped before the engine sees them, except a well-formed
//! HELLO ask, which admits its sender while there is room.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use udrma_proto::NodeAddr;

/// A region a peer announced in its HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RemoteRegion {
    /// First address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Remote key.
    pub rkey: u32,
}

/// One peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Its UDP address.
    pub addr: SocketAddr,
    /// The engine's name for it.
    pub node: NodeAddr,
    /// The region it announced, once it has said HELLO.
    pub region: Option<RemoteRegion>,
    /// Its largest data payload, once it has said HELLO.
    pub max_payload: Option<u16>,
    /// Its boot epoch, once it has said HELLO.
    pub epoch: Option<u32>,
    /// Never evicted: this host connected to it or was told its address
    /// (a stranger admitted by its HELLO is not).
    pub pinned: bool,
    /// When a datagram last came from it (over any of its ports).
    pub last_heard: Option<std::time::Instant>,
    /// The admission cookie its HELLO retry gave, to echo in the next ask.
    pub cookie: Option<[u8; 16]>,
    /// It answered an ask with "my peer table is full".
    pub refused_full: bool,
}

/// The table, bounded by `capacity` peers.
#[derive(Debug)]
pub struct Peers {
    by_addr: BTreeMap<SocketAddr, NodeAddr>,
    by_node: BTreeMap<NodeAddr, Peer>,
    capacity: usize,
    next: u32,
}

impl Peers {
    /// Empty; at most `capacity` peers. Node 0 is this host.
    pub fn new(capacity: usize) -> Peers {
        Peers {
            by_addr: BTreeMap::new(),
            by_node: BTreeMap::new(),
            capacity,
            next: 1,
        }
    }

    /// The node of a known address.
    pub fn node(&self, addr: SocketAddr) -> Option<NodeAddr> {
        self.by_addr.get(&addr).copied()
    }

    /// A peer by node.
    pub fn get(&self, node: NodeAddr) -> Option<&Peer> {
        self.by_node.get(&node)
    }

    /// A peer by node, to record what it announced.
    pub fn get_mut(&mut self, node: NodeAddr) -> Option<&mut Peer> {
        self.by_node.get_mut(&node)
    }

    /// Admits `addr` (or finds it); `None` when the table is full.
    pub fn admit(&mut self, addr: SocketAddr) -> Option<NodeAddr> {
        if let Some(n) = self.node(addr) {
            return Some(n);
        }
        if self.by_node.len() >= self.capacity {
            return None;
        }
        let node = NodeAddr(self.next);
        self.next += 1;
        self.record(node, addr);
        Some(node)
    }

    /// Enters `addr` as `node`, knowing nothing else of it yet.
    fn record(&mut self, node: NodeAddr, addr: SocketAddr) {
        self.by_addr.insert(addr, node);
        self.by_node.insert(
            node,
            Peer {
                addr,
                node,
                region: None,
                max_payload: None,
                epoch: None,
                pinned: false,
                last_heard: None,
                cookie: None,
                refused_full: false,
            },
        );
    }

    /// Records `addr` as `node` (a fixed name, as the hosts of a scenario
    /// have). `false` when the table is full, or the node or the address
    /// is already taken by another.
    pub fn insert(&mut self, node: NodeAddr, addr: SocketAddr) -> bool {
        match (self.by_addr.get(&addr), self.by_node.get(&node)) {
            (Some(n), _) => return *n == node,
            (None, Some(_)) => return false,
            (None, None) => {}
        }
        if self.by_node.len() >= self.capacity {
            return false;
        }
        self.next = self.next.max(node.0.saturating_add(1));
        self.record(node, addr);
        if let Some(p) = self.by_node.get_mut(&node) {
            p.pinned = true;
        }
        true
    }

    /// Whether another peer could be admitted now.
    pub fn is_full(&self) -> bool {
        self.by_node.len() >= self.capacity
    }

    /// Removes `node` and every address known as it; its name is never
    /// given out again.
    pub fn remove(&mut self, node: NodeAddr) -> Option<Peer> {
        let p = self.by_node.remove(&node)?;
        self.by_addr.retain(|_, n| *n != node);
        Some(p)
    }

    /// Peers admitted by HELLO (not pinned) that nothing has been heard
    /// from since `before` (or ever), oldest first.
    pub fn silent_since(&self, before: std::time::Instant) -> Vec<NodeAddr> {
        let mut v: Vec<(Option<std::time::Instant>, NodeAddr)> = self
            .by_node
            .values()
            .filter(|p| !p.pinned && p.last_heard.is_none_or(|t| t < before))
            .map(|p| (p.last_heard, p.node))
            .collect();
        v.sort();
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// Knows the `ports` − 1 ports after `node`'s own (on its IP address)
    /// as `node` too, as its HELLO announced; at most
    /// [`crate::sockets::MAX_PATHS`] in all. A port already known as
    /// another peer stays that peer's. Returns how many were added.
    pub fn alias_ports(&mut self, node: NodeAddr, ports: u16) -> usize {
        let Some(addr) = self.by_node.get(&node).map(|p| p.addr) else {
            return 0;
        };
        let mut added = 0;
        for k in 1..ports.min(crate::sockets::MAX_PATHS) {
            let Some(port) = addr.port().checked_add(k) else {
                break;
            };
            let alias = SocketAddr::new(addr.ip(), port);
            if let std::collections::btree_map::Entry::Vacant(e) = self.by_addr.entry(alias) {
                e.insert(node);
                added += 1;
            }
        }
        added
    }

    /// Peers now.
    pub fn len(&self) -> usize {
        self.by_node.len()
    }

    /// No peers.
    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }

    /// Every peer, by node.
    pub fn iter(&self) -> impl Iterator<Item = &Peer> {
        self.by_node.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_is_idempotent_and_bounded() {
        let mut p = Peers::new(2);
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:1001".parse().unwrap();
        let c: SocketAddr = "127.0.0.1:1002".parse().unwrap();
        assert_eq!(p.admit(a), Some(NodeAddr(1)));
        assert_eq!(p.admit(a), Some(NodeAddr(1)));
        assert_eq!(p.admit(b), Some(NodeAddr(2)));
        assert_eq!(p.admit(c), None);
        assert_eq!(p.len(), 2);
        assert_eq!(p.get(NodeAddr(2)).unwrap().addr, b);
    }

    #[test]
    fn a_peers_announced_ports_are_known_as_it_but_never_steal_another() {
        let mut p = Peers::new(4);
        let a: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2002".parse().unwrap();
        let na = p.admit(a).unwrap();
        let nb = p.admit(b).unwrap();
        // a says it sends from 2000..2004; 2002 is b's and stays b's.
        assert_eq!(p.alias_ports(na, 4), 2);
        assert_eq!(p.node("127.0.0.1:2001".parse().unwrap()), Some(na));
        assert_eq!(p.node(b), Some(nb));
        assert_eq!(p.node("127.0.0.1:2003".parse().unwrap()), Some(na));
        assert_eq!(p.node("127.0.0.1:2004".parse().unwrap()), None);
        // Idempotent, bounded, and a peer it does not know gets none.
        assert_eq!(p.alias_ports(na, 4), 0);
        assert_eq!(p.alias_ports(NodeAddr(9), 4), 0);
        let c: SocketAddr = "127.0.0.2:3000".parse().unwrap();
        let nc = p.admit(c).unwrap();
        assert_eq!(
            p.alias_ports(nc, u16::MAX),
            usize::from(crate::sockets::MAX_PATHS) - 1
        );
        assert_eq!(p.len(), 3, "aliases are not peers");
    }
}
