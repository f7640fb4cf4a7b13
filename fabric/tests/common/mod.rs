//! What the fabric's stories share: a world whose every host has a
//! source region (its own pattern) and a target region, WRITEs between
//! hosts, and what became of them.

#![allow(dead_code)]

use udrma_fabric::{FabricConfig, LinkParams, Topology, World};
use udrma_faults::{Model, Rule, RuleSet, Target};
use udrma_nic::{Access, Event, MrKey, NicConfig, WorkRequest, WrId};
use udrma_proto::{Instant, NodeAddr};

pub const SRC: u64 = 0x1000_0000;
pub const DST: u64 = 0x2000_0000;

pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(0x9e37_79b9)).to_be_bytes()[0])
        .collect()
}

/// Every host gets a source region (its own pattern) and a target region.
pub fn world(
    topo: Topology,
    cfg: FabricConfig,
    rules: RuleSet,
    region: usize,
) -> (World, Vec<(MrKey, MrKey)>) {
    let mut w = World::new(topo, cfg, rules).unwrap();
    let mut keys = Vec::new();
    for h in 0..w.topology().n_hosts() as u32 {
        let nic = w.nic_mut(NodeAddr(h));
        let src = nic.register(SRC, region, Access::ALL);
        nic.memory_mut().region_mut(src).unwrap().bytes = pattern(region, h).into();
        let dst = nic.register(DST, region, Access::ALL);
        keys.push((src, dst));
    }
    (w, keys)
}

pub fn write(w: &mut World, keys: &[(MrKey, MrKey)], from: u32, to: u32, len: u64) -> WrId {
    let wr = WorkRequest::write(
        NodeAddr(to),
        keys[from as usize].0,
        SRC,
        len,
        keys[to as usize].1 .0,
        DST,
    );
    w.post(NodeAddr(from), wr).unwrap()
}

pub fn completions(w: &World, host: u32, wr: WrId) -> Vec<bool> {
    w.host_events()
        .iter()
        .filter(|e| e.host == NodeAddr(host))
        .filter_map(|e| match &e.event {
            Event::Completed { wr: id, result, .. } if *id == wr => Some(result.is_ok()),
            _ => None,
        })
        .collect()
}

pub fn landed(w: &World, keys: &[(MrKey, MrKey)], from: u32, to: u32, len: usize) -> bool {
    let got = &w
        .nic(NodeAddr(to))
        .memory()
        .region(keys[to as usize].1)
        .unwrap()
        .bytes[..len];
    let sent = &w
        .nic(NodeAddr(from))
        .memory()
        .region(keys[from as usize].0)
        .unwrap()
        .bytes[..len];
    got == sent
}

/// NICs that take `ns` nanoseconds for every packet (the cost model's
/// own events carry arrivals to the NIC), otherwise the defaults.
pub fn costed_nics(ns: u64) -> NicConfig {
    NicConfig {
        cost: udrma_nic::cost::CostModel {
            nic_per_packet: udrma_proto::Duration::from_nanos(ns),
            ..udrma_nic::cost::CostModel::ZERO
        },
        ..NicConfig::default()
    }
}

/// A star of `hosts` on links of `params`, no faults, 1 MiB regions.
pub fn star(hosts: u32, params: LinkParams) -> (World, Vec<(MrKey, MrKey)>) {
    world(
        Topology::star(hosts, params),
        FabricConfig::default(),
        RuleSet::new(),
        1 << 20,
    )
}

/// When `host`'s request `wr` completed, if it did.
pub fn completed_at(w: &World, host: u32, wr: WrId) -> Option<Instant> {
    w.host_events().iter().find_map(|e| match &e.event {
        Event::Completed { wr: id, at, .. } if e.host == NodeAddr(host) && *id == wr => Some(*at),
        _ => None,
    })
}

/// A full packet's payload and its datagram (WRITE header, extension and
/// ICRC added), in bytes.
pub fn full_packet() -> (u64, u64) {
    let payload = u64::from(NicConfig::default().mtu_payload);
    (payload, payload + 52)
}

pub fn rules(seed: u64, list: Vec<(&str, Target, Model)>) -> RuleSet {
    let mut set = RuleSet::new();
    for (name, t, m) in list {
        set.push(Rule::new(seed, name, t, m).unwrap());
    }
    set
}

/// Loss with probability `loss` and 1 % each of duplication and of
/// corruption (two bits), on every link.
pub fn messy_rules(seed: u64, loss: f64) -> RuleSet {
    rules(
        seed,
        vec![
            (
                "loss",
                Target::any(),
                Model::Loss {
                    p: loss,
                    correlation: 0.0,
                },
            ),
            (
                "dup",
                Target::any(),
                Model::Duplicate {
                    p: 0.01,
                    copies: 1,
                    correlation: 0.0,
                },
            ),
            (
                "corrupt",
                Target::any(),
                Model::Corrupt { p: 0.01, bits: 2 },
            ),
        ],
    )
}

/// A sink a test can read back (traces, captures).
#[derive(Clone, Default)]
pub struct Shared(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
impl Shared {
    /// What was written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}
impl std::io::Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
