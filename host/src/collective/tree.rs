//! Reduction trees: which node combines whose operands.
//!
//! udrma uses k-nomial trees rooted at node 0. With radix `k`, nodes form
//! groups of `k` consecutive ranks; the first of each group is its leader
//! and the other `k − 1` are its children at that level; leaders then
//! group by `k` again, and so on. On a k-ary n-tree fat tree with hosts
//! numbered switch by switch, radix `k` puts each level of the reduction
//! under one switch level: leaves talk to their leader through their own
//! leaf switch, leaders to theirs one switch level up. Radix 2 is the
//! binomial tree host software (MPICH, Open MPI) uses for short reductions
//! and broadcasts.

use udrma_nic::reduce::Parent;
use udrma_proto::NodeAddr;

/// A rooted tree over nodes `0..n`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Tree {
    /// Each node's parent (`None` at the root, node 0).
    pub parent: Vec<Option<Parent>>,
    /// Each node's children, in branch order.
    pub children: Vec<Vec<NodeAddr>>,
    /// Each node's height (0 for leaves).
    pub level: Vec<u8>,
}

impl Tree {
    /// The k-nomial tree of radix `radix` (at least 2) over `n` nodes
    /// (at least 1). Children of a node are listed level by level, nearest
    /// first.
    pub fn knomial(n: u32, radix: u32) -> Tree {
        let n = n.max(1) as usize;
        let k = radix.max(2) as usize;
        let mut children: Vec<Vec<NodeAddr>> = vec![Vec::new(); n];
        for (i, kids) in children.iter_mut().enumerate() {
            let mut span = 1usize;
            while span < n && i % (span * k) == 0 {
                for j in 1..k {
                    let c = i + j * span;
                    if c < n {
                        kids.push(NodeAddr(c as u32));
                    }
                }
                span = span.saturating_mul(k);
            }
        }
        let mut parent = vec![None; n];
        for (i, kids) in children.iter().enumerate() {
            for (b, c) in kids.iter().enumerate() {
                parent[c.0 as usize] = Some(Parent {
                    addr: NodeAddr(i as u32),
                    branch: b as u8,
                    fan_in: kids.len() as u16,
                });
            }
        }
        // Children have higher ranks than their parent.
        let mut level = vec![0u8; n];
        for i in (0..n).rev() {
            level[i] = children[i]
                .iter()
                .map(|c| level[c.0 as usize] + 1)
                .max()
                .unwrap_or(0);
        }
        Tree {
            parent,
            children,
            level,
        }
    }

    /// Nodes.
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    /// Whether it has no node (never: a tree has its root).
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    /// The root's height: hops from the deepest leaf to the root.
    pub fn depth(&self) -> u8 {
        self.level[0]
    }

    /// The most children any node has.
    pub fn max_fan_in(&self) -> usize {
        self.children.iter().map(Vec::len).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_4_nomial_tree_of_16_has_depth_2_and_leaders_every_4() {
        let t = Tree::knomial(16, 4);
        assert_eq!(t.depth(), 2);
        let kids = |i: usize| t.children[i].iter().map(|c| c.0).collect::<Vec<_>>();
        assert_eq!(kids(0), [1, 2, 3, 4, 8, 12]);
        assert_eq!(kids(4), [5, 6, 7]);
        assert!(kids(5).is_empty());
        assert_eq!(t.parent[13].unwrap().addr, NodeAddr(12));
        assert_eq!(t.parent[12].unwrap().branch, 5);
        assert_eq!(t.parent[12].unwrap().fan_in, 6);
    }

    #[test]
    fn every_node_but_the_root_has_one_parent_that_lists_it() {
        for n in 1..70 {
            for k in 2..7 {
                let t = Tree::knomial(n, k);
                assert!(t.parent[0].is_none());
                for i in 1..n as usize {
                    let p = t.parent[i].expect("non-root has a parent");
                    assert!((p.addr.0 as usize) < i);
                    let siblings = &t.children[p.addr.0 as usize];
                    assert_eq!(siblings[p.branch as usize], NodeAddr(i as u32));
                    assert_eq!(siblings.len(), p.fan_in as usize);
                }
                // Depth: one per power of k below n, at most.
                let mut spans = 0;
                let mut span = 1;
                while span < n {
                    span *= k;
                    spans += 1;
                }
                assert!(t.depth() <= spans, "n={n} k={k}");
                assert!(n == 1 || t.depth() >= 1);
            }
        }
    }
}
