//! The hosts' states, by host number: in a whole world every host's, in
//! one rank's shard only the run of hosts that rank runs, so that a rank's
//! memory for hosts is its share and not the whole (docs/fabric.md,
//! "Ranks").
//!
//! A shard's table holds the hosts from its first to its last in one
//! vector (on a fat tree a rank's hosts are one run of numbers). While
//! the world is built, every rank posts on every host, as one process
//! would, so that the first packets are numbered and traced the same; a
//! host outside the run gets its state on first touch, kept aside
//! ("visiting") until the split, which drops it. The hot loop only ever
//! reaches hosts in the run: looking one up costs a subtraction more
//! than a vector's bounds check.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};

use udrma_nic::NicConfig;
use udrma_proto::NodeAddr;

use super::hosts::HostState;
use super::FabricError;
use crate::topology::{PortId, Topology};

/// The hosts' states (see the module doc).
pub(super) struct HostTable {
    /// The hosts from `base` on.
    here: Vec<HostState>,
    base: u32,
    /// Hosts in the whole world.
    count: u32,
    /// Hosts outside the run that the build has touched.
    visiting: BTreeMap<u32, Box<HostState>>,
    /// What a host outside the run is made from; `None` in a whole world.
    blueprint: Option<Box<Blueprint>>,
}

/// How a host's state is made.
struct Blueprint {
    nic: NicConfig,
    phantom_payload: bool,
    /// Per host, the port of its link.
    ports: Vec<PortId>,
    /// What a host outside the run reads as before it is touched: a
    /// fresh NIC (the address of the first host outside the run).
    blank: HostState,
}

impl HostTable {
    /// Every host of `topo`, or (`mine`: per host, whether this shard
    /// runs it) the run from this shard's first host to its last.
    pub(super) fn new(
        topo: &Topology,
        nic: &NicConfig,
        phantom_payload: bool,
        mine: Option<&[bool]>,
    ) -> Result<HostTable, FabricError> {
        let ports: Vec<PortId> = topo
            .hosts
            .iter()
            .map(|&n| topo.nodes[n as usize].ports[0])
            .collect();
        let count = ports.len() as u32;
        let make = |h: u32| -> Result<HostState, FabricError> {
            HostState::fresh(NodeAddr(h), ports[h as usize], nic, phantom_payload)
        };
        let Some(mine) = mine else {
            return Ok(HostTable {
                here: (0..count).map(make).collect::<Result<_, _>>()?,
                base: 0,
                count,
                visiting: BTreeMap::new(),
                blueprint: None,
            });
        };
        let (first, end) = run_of(mine);
        let outside = (0..count).find(|h| !(first..end).contains(h));
        let blank = make(outside.unwrap_or(0))?;
        Ok(HostTable {
            here: (first..end).map(make).collect::<Result<_, _>>()?,
            base: first,
            count,
            visiting: BTreeMap::new(),
            blueprint: Some(Box::new(Blueprint {
                nic: nic.clone(),
                phantom_payload,
                ports,
                blank,
            })),
        })
    }

    /// Hosts in the whole world.
    pub(super) fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether host `h`'s state lives in the run (always so in a whole
    /// world).
    #[inline(always)]
    fn slot(&self, h: usize) -> Option<usize> {
        let i = h.wrapping_sub(self.base as usize);
        (i < self.here.len()).then_some(i)
    }

    /// Host `h`'s state, if this table holds it.
    #[inline(always)]
    pub(super) fn get(&self, h: usize) -> Option<&HostState> {
        match self.slot(h) {
            Some(i) => Some(&self.here[i]),
            None => self.visiting.get(&(h as u32)).map(|b| &**b),
        }
    }

    /// Host `h`'s state, made now if the build touches a host outside
    /// the run; `None` for a host the world does not have.
    #[inline(always)]
    pub(super) fn get_mut(&mut self, h: usize) -> Option<&mut HostState> {
        match self.slot(h) {
            Some(i) => Some(&mut self.here[i]),
            None => self.visit(h),
        }
    }

    #[cold]
    fn visit(&mut self, h: usize) -> Option<&mut HostState> {
        let b = self.blueprint.as_ref()?;
        let port = *b.ports.get(h)?;
        let h = h as u32;
        match self.visiting.entry(h) {
            std::collections::btree_map::Entry::Occupied(e) => Some(&mut **e.into_mut()),
            std::collections::btree_map::Entry::Vacant(e) => {
                let state = HostState::fresh(NodeAddr(h), port, &b.nic, b.phantom_payload).ok()?;
                Some(&mut **e.insert(Box::new(state)))
            }
        }
    }

    /// The hosts this table holds, with their numbers, in host order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &HostState)> {
        let base = self.base;
        let visiting =
            |r: std::ops::RangeFrom<u32>| self.visiting.range(r).map(|(&h, s)| (h, &**s));
        self.visiting
            .range(..base)
            .map(|(&h, s)| (h, &**s))
            .chain(
                self.here
                    .iter()
                    .enumerate()
                    .map(move |(i, s)| (base + i as u32, s)),
            )
            .chain(visiting(base..))
    }

    /// The hosts this table holds, to change (the run's, then the
    /// visitors').
    #[cfg(feature = "fingerprint")]
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut HostState> {
        self.here
            .iter_mut()
            .chain(self.visiting.values_mut().map(|b| &mut **b))
    }

    /// The hosts in the run, in host order (what a fingerprint holds:
    /// every host in a whole world).
    #[cfg(feature = "fingerprint")]
    pub(super) fn in_run(&self) -> &[HostState] {
        &self.here
    }

    /// Keeps the run from this shard's first host to its last (`mine`:
    /// per host, whether this shard runs it): the split, after which the
    /// shard's world never reaches another host. The hosts outside the
    /// run go; those inside it that another shard runs give their state
    /// back ([`HostState::vacate`]).
    pub(super) fn keep_run(&mut self, mine: &[bool], phantom_payload: bool) {
        let (first, end) = run_of(mine);
        self.visiting = BTreeMap::new();
        if self.blueprint.is_none() {
            let Some(nic) = self.here.first().map(|s| s.nic.config().clone()) else {
                return;
            };
            let ports = self.here.iter().map(|s| s.port).collect();
            let outside = (0..self.count).find(|h| !(first..end).contains(h));
            let here = std::mem::take(&mut self.here);
            self.here = here
                .into_iter()
                .skip(first as usize)
                .take((end - first) as usize)
                .collect();
            self.base = first;
            let Ok(blank) = HostState::fresh(
                NodeAddr(outside.unwrap_or(0)),
                self.here.first().map_or(0, |s| s.port),
                &nic,
                phantom_payload,
            ) else {
                return;
            };
            self.blueprint = Some(Box::new(Blueprint {
                nic,
                phantom_payload,
                ports,
                blank,
            }));
        }
        let base = self.base;
        for (i, s) in self.here.iter_mut().enumerate() {
            let h = base + i as u32;
            if !mine.get(h as usize).copied().unwrap_or(false) {
                s.vacate(NodeAddr(h));
            }
        }
    }

    /// How many hosts' states this table holds (for the test that a rank
    /// holds no other rank's hosts).
    pub(super) fn held(&self) -> usize {
        self.here.len() + self.visiting.len()
    }
}

impl Index<usize> for HostTable {
    type Output = HostState;

    /// Host `h`'s state; a host outside a shard's run that the build has
    /// not touched reads as a fresh NIC.
    #[inline(always)]
    fn index(&self, h: usize) -> &HostState {
        match self.get(h) {
            Some(s) => s,
            None => self.blank(h),
        }
    }
}

impl IndexMut<usize> for HostTable {
    #[inline(always)]
    fn index_mut(&mut self, h: usize) -> &mut HostState {
        let count = self.count;
        match self.get_mut(h) {
            Some(s) => s,
            None => panic!("host {h}: the world has {count} hosts"),
        }
    }
}

impl HostTable {
    #[cold]
    fn blank(&self, h: usize) -> &HostState {
        match &self.blueprint {
            Some(b) if h < self.len() => &b.blank,
            _ => panic!("host {h}: the world has {} hosts", self.count),
        }
    }
}

/// The run of host numbers from the first `mine` to the last (empty at
/// 0 if none).
fn run_of(mine: &[bool]) -> (u32, u32) {
    let first = mine.iter().position(|&m| m).unwrap_or(0) as u32;
    let end = mine
        .iter()
        .rposition(|&m| m)
        .map_or(first, |l| l as u32 + 1);
    (first, end)
}
