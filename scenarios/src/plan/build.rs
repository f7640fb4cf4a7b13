//! From a scenario file to the pieces of a world: topology, NIC
//! configuration, fault rules, pauses; every value checked, every error
//! located.
//!
//! Children:
//! - `nic`: the NIC configuration (`nic_config`);
//! - `faults`: the fault rules and host pauses (`fault_plan`, `rules`);
//! - `msg`: the messaging layer's configuration (`msg_setup`,
//!   `msg_checked`).
//!
//! Here: the topology and PFC.

use udrma_fabric::{LinkParams, Topology};

use crate::file::schema::{TopologyKind, TopologySpec};
use crate::file::source::Locate;
use crate::plan::profile::Profile;
use crate::ScenarioError;

mod faults;
mod msg;
mod nic;

pub use faults::{check_links, fault_plan, rules, OPCODE_NAMES};
pub use msg::{msg_checked, msg_setup, MsgSetup};
pub use nic::{nic_config, Keys as NicKeys};

/// Most hosts a scenario's topology may have (a k = 128 fat tree).
pub const MAX_HOSTS: u64 = 524_288;
/// Most operations one scenario may plan.
pub const MAX_OPS: u128 = 2_000_000;
/// Most bytes the workloads may move when memory is real (every byte is
/// stored twice: at its source and at its target).
pub const MAX_STORED_BYTES: u128 = 4 << 30;

/// The fabric's shape: the topology (over the hardware profile's link,
/// if any) and, for a lossless fabric, its PFC configuration checked
/// against it.
pub fn shape(
    t: &TopologySpec,
    at: &dyn Locate,
    profile: Option<&Profile>,
) -> Result<(Topology, Option<udrma_fabric::PfcConfig>), ScenarioError> {
    let topology = topology(t, at, profile)?;
    let pfc = pfc_config(t, at)?;
    if let Some(cfg) = &pfc {
        check_pfc(t, at, cfg, &topology)?;
    }
    Ok((topology, pfc))
}

/// Builds the topology (over the hardware profile's link, if any).
fn topology(
    t: &TopologySpec,
    at: &dyn Locate,
    profile: Option<&Profile>,
) -> Result<Topology, ScenarioError> {
    let mut d = LinkParams::default();
    if let Some(p) = profile {
        d.bandwidth_bps = p.link.bandwidth.map_or(d.bandwidth_bps, |r| r.0);
        d.latency = p.link.latency.map_or(d.latency, |l| l.0);
    }
    let params = LinkParams {
        bandwidth_bps: t.bandwidth.map_or(d.bandwidth_bps, |r| r.0),
        latency: t.latency.map_or(d.latency, |l| l.0),
        mtu: t.mtu.unwrap_or(d.mtu),
        queue_bytes: t.queue.map_or(d.queue_bytes, |q| q.0),
        ecn_threshold: t.ecn_threshold.map(|e| e.0),
        ecn_max: t.ecn_max.map(|e| e.0),
        trim: t.trim,
        control_priority: t.control_priority,
    };
    if u64::from(params.mtu) > params.queue_bytes {
        return Err(at.error_at_key(
            "queue",
            format!(
                "topology.queue = {} B holds no packet: every port would drop all it is given; it must hold at least one of the link's MTU ({} B)",
                params.queue_bytes, params.mtu
            ),
        ));
    }
    if let Some(max) = t.ecn_max {
        match t.ecn_threshold {
            None => {
                return Err(at.error_at_key(
                    "ecn_max",
                    "topology.ecn_max needs topology.ecn_threshold (where the marking ramp starts)"
                        .into(),
                ))
            }
            Some(min) if max.0 <= min.0 => {
                return Err(at.error_at_key(
                    "ecn_max",
                    format!(
                        "topology.ecn_max ({} B) must be above ecn_threshold ({} B): the ramp marks more as the queue grows from one to the other",
                        max.0, min.0
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    let hosts = match t.kind {
        TopologyKind::Pair => 2u64,
        TopologyKind::Star => u64::from(t.hosts.unwrap_or(0)),
        TopologyKind::Dumbbell => 2 * u64::from(t.hosts.unwrap_or(0)),
        TopologyKind::FatTree => u64::from(t.k.unwrap_or(0)).pow(3) / 4,
        TopologyKind::KaryNtree | TopologyKind::Ring => u64::from(t.hosts.unwrap_or(0)),
    };
    if hosts > MAX_HOSTS {
        return Err(at.error_at_key(
            if t.kind == TopologyKind::FatTree { "k" } else { "hosts" },
            format!("this topology would have {hosts} hosts; scenario files allow at most {MAX_HOSTS} (a fat tree up to k = 128)"),
        ));
    }
    let need = |what: &str| {
        at.error_at(
            "kind",
            format!(
                "topology kind {what} needs `{}`",
                if what == "fat-tree" { "k" } else { "hosts" }
            ),
        )
    };
    let topo = match t.kind {
        TopologyKind::Pair => Topology::pair(params),
        TopologyKind::Star => Topology::star(t.hosts.ok_or_else(|| need("star"))?, params),
        TopologyKind::Dumbbell => {
            let bottleneck = LinkParams {
                bandwidth_bps: t.bottleneck.map_or(params.bandwidth_bps, |r| r.0),
                ..params
            };
            Topology::dumbbell(t.hosts.ok_or_else(|| need("dumbbell"))?, params, bottleneck)
        }
        TopologyKind::FatTree => {
            let k = t.k.ok_or_else(|| need("fat-tree"))?;
            Topology::fat_tree(k, params).map_err(|m| at.error_at_key("k", m))?
        }
        TopologyKind::Ring => Topology::ring(t.hosts.ok_or_else(|| need("ring"))?, params)
            .map_err(|m| at.error_at_key("hosts", m))?,
        TopologyKind::KaryNtree => {
            let k = t
                .k
                .ok_or_else(|| at.error_at("kind", "topology kind kary-ntree needs `k`".into()))?;
            let hosts = t.hosts.ok_or_else(|| need("kary-ntree"))?;
            let levels = match t.levels {
                Some(l) => l,
                None => kary_levels(k, hosts),
            };
            Topology::kary_ntree(k, levels, hosts, params).map_err(|m| {
                at.error_at_key(
                    if t.levels.is_some() {
                        "levels"
                    } else {
                        "hosts"
                    },
                    m,
                )
            })?
        }
    };
    if topo.n_hosts() < 2 {
        return Err(at.error_at(
            "hosts",
            format!(
                "a topology needs at least 2 hosts, this one has {}",
                topo.n_hosts()
            ),
        ));
    }
    Ok(topo)
}

/// The fewest levels of a k-ary n-tree that hold `hosts` hosts.
pub fn kary_levels(k: u32, hosts: u32) -> u32 {
    let mut n = 1;
    let mut cap = u64::from(k.max(2));
    while cap < u64::from(hosts) {
        cap *= u64::from(k.max(2));
        n += 1;
    }
    n
}

/// `[topology] pfc` and its keys: the lossless configuration, or `None`
/// for a lossy fabric (a `pfc_*` key without `pfc = true` is refused at
/// its place: it would change nothing).
fn pfc_config(
    t: &TopologySpec,
    at: &dyn Locate,
) -> Result<Option<udrma_fabric::PfcConfig>, ScenarioError> {
    let set = [
        ("pfc_xoff", t.pfc_xoff.is_some()),
        ("pfc_xon", t.pfc_xon.is_some()),
        ("pfc_headroom", t.pfc_headroom.is_some()),
        ("pfc_data_priority", t.pfc_data_priority.is_some()),
        ("pfc_control_priority", t.pfc_control_priority.is_some()),
    ];
    if !t.pfc {
        if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
            return Err(at.error_at_key(
                key,
                format!("topology.{key} applies only to a lossless fabric: add `pfc = true` to [topology] (or remove {key})"),
            ));
        }
        return Ok(None);
    }
    let d = udrma_fabric::PfcConfig::default();
    let xoff = t.pfc_xoff.map_or(d.xoff_bytes, |s| s.0);
    let cfg = udrma_fabric::PfcConfig {
        xoff_bytes: xoff,
        xon_bytes: match t.pfc_xon {
            Some(s) => s.0,
            None => xoff.saturating_sub(d.xoff_bytes - d.xon_bytes),
        },
        headroom_bytes: t.pfc_headroom.map(|s| s.0),
        data_priority: t.pfc_data_priority.unwrap_or(d.data_priority),
        control_priority: t.pfc_control_priority.unwrap_or(d.control_priority),
    };
    Ok(Some(cfg))
}

/// Checks `cfg` against `topo` (and the event order), naming the key at
/// fault: a headroom that cannot take one round trip at line rate is
/// refused with the arithmetic.
fn check_pfc(
    t: &TopologySpec,
    at: &dyn Locate,
    cfg: &udrma_fabric::PfcConfig,
    topo: &Topology,
) -> Result<(), ScenarioError> {
    if t.order == crate::file::schema::OrderKind::Windows {
        return Err(pfc_error(t, at, udrma_fabric::PfcError::Windows));
    }
    cfg.check(topo).map(|_| ()).map_err(|e| pfc_error(t, at, e))
}

/// A refused PFC configuration, at the key that asked for it.
fn pfc_error(t: &TopologySpec, at: &dyn Locate, e: udrma_fabric::PfcError) -> ScenarioError {
    use udrma_fabric::PfcError;
    let key = match &e {
        PfcError::Thresholds { .. } if t.pfc_xon.is_some() => "pfc_xon",
        PfcError::Thresholds { .. } => "pfc_xoff",
        PfcError::Priority(p) if t.pfc_data_priority == Some(*p) => "pfc_data_priority",
        PfcError::Priority(_) => "pfc_control_priority",
        PfcError::Headroom { .. } if t.pfc_headroom.is_some() => "pfc_headroom",
        PfcError::Headroom { .. } => "pfc",
        PfcError::Windows => "order",
        PfcError::Trim(_) => "trim",
    };
    at.error_at_key(key, format!("topology.{key}: {e}"))
}
