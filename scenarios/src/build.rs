//! From a scenario file to the pieces of a world: topology, NIC
//! configuration, fault rules, pauses; every value checked, every error
//! located.

use udrma_fabric::{FabricConfig, LinkParams, Policy, Topology};
use udrma_faults::{Direction, HostPause, Jitter, Model, Rule, RuleSet, Target};
use udrma_host::messaging::MsgConfig;
use udrma_nic::{AckMode, NicConfig, RegistrationMode, RetransmitMode, TombstoneMode};
use udrma_proto::{Duration, Flags, Instant, NodeAddr, Opcode, Protocol};

use crate::profile::Profile;
use crate::schema::{ModelKind, RoutingKind, TopologyKind};
use crate::units::RtoFloor;
use crate::{Scenario, ScenarioError};

/// Most hosts a scenario's topology may have (a k = 128 fat tree).
pub const MAX_HOSTS: u64 = 524_288;
/// Most operations one scenario may plan.
pub const MAX_OPS: u128 = 2_000_000;
/// Most bytes the workloads may move when memory is real (every byte is
/// stored twice: at its source and at its target).
pub const MAX_STORED_BYTES: u128 = 4 << 30;

/// Builds the topology (over the hardware profile's link, if any).
pub fn topology(sc: &Scenario, profile: Option<&Profile>) -> Result<Topology, ScenarioError> {
    let t = &sc.file.topology;
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
        return Err(sc.error_at_key(
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
                return Err(sc.error_at_key(
                    "ecn_max",
                    "topology.ecn_max needs topology.ecn_threshold (where the marking ramp starts)"
                        .into(),
                ))
            }
            Some(min) if max.0 <= min.0 => {
                return Err(sc.error_at_key(
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
        return Err(sc.error_at_key(
            if t.kind == TopologyKind::FatTree { "k" } else { "hosts" },
            format!("this topology would have {hosts} hosts; scenario files allow at most {MAX_HOSTS} (a fat tree up to k = 128)"),
        ));
    }
    let need = |what: &str| {
        sc.error_at(
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
            Topology::fat_tree(k, params).map_err(|m| sc.error_at_key("k", m))?
        }
        TopologyKind::Ring => Topology::ring(t.hosts.ok_or_else(|| need("ring"))?, params)
            .map_err(|m| sc.error_at_key("hosts", m))?,
        TopologyKind::KaryNtree => {
            let k = t
                .k
                .ok_or_else(|| sc.error_at("kind", "topology kind kary-ntree needs `k`".into()))?;
            let hosts = t.hosts.ok_or_else(|| need("kary-ntree"))?;
            let levels = match t.levels {
                Some(l) => l,
                None => kary_levels(k, hosts),
            };
            Topology::kary_ntree(k, levels, hosts, params).map_err(|m| {
                sc.error_at_key(
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
        return Err(sc.error_at(
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

fn mode<T: Copy>(
    sc: &Scenario,
    key: &str,
    value: &Option<String>,
    options: &[(&str, T)],
    default: T,
) -> Result<T, ScenarioError> {
    let Some(v) = value else {
        return Ok(default);
    };
    options
        .iter()
        .find(|(n, _)| n == v)
        .map(|(_, m)| *m)
        .ok_or_else(|| {
            let names: Vec<&str> = options.iter().map(|(n, _)| *n).collect();
            sc.error_at(
                v,
                format!("nic.{key} = {v:?}: expected one of {}", names.join(", ")),
            )
        })
}

/// Builds and validates the NIC configuration (over the hardware
/// profile's, if any; timer floors from the topology's paths).
pub fn nic_config(
    sc: &Scenario,
    profile: Option<&Profile>,
    topo: &Topology,
) -> Result<NicConfig, ScenarioError> {
    let n = &sc.file.nic;
    let mut d = NicConfig::default();
    if let Some(p) = profile {
        if let Some(m) = p.mtu_payload {
            d.mtu_payload = m.0 as u32;
        }
        d.max_sge = p.nic.max_sge.unwrap_or(d.max_sge);
        if let Some(l) = p.nic.reduce_data_limit {
            d.reduce_data_limit = usize::try_from(l.0).unwrap_or(usize::MAX);
        }
        let t = &mut d.translation;
        t.sets = p.nic.translation_sets.unwrap_or(t.sets);
        t.ways = p.nic.translation_ways.unwrap_or(t.ways);
        t.entries_per_line = p
            .nic
            .translation_entries_per_line
            .unwrap_or(t.entries_per_line);
    }
    d.cost = crate::profile::cost_model(sc, profile);
    if let Some(r) = n.descriptor_ring {
        d.descriptor_ring = r;
        d.ring_low_water = n.ring_low_water.unwrap_or(r / 4);
    } else if let Some(l) = n.ring_low_water {
        d.ring_low_water = l;
    }
    let t = |v: Option<crate::units::Time>, d: Duration| v.map_or(d, |x| x.0);
    let sack_delay = t(n.sack_delay, Duration::from_micros(2));
    // Built once: the controller and the full-queue floor both read it.
    let shape = path_shape(sc, topo);
    let mut cfg = NicConfig {
        mtu_payload: n.mtu_payload.map_or(Ok(d.mtu_payload), |s| {
            u32::try_from(s.0)
                .map_err(|_| sc.error_at("mtu_payload", "nic.mtu_payload is too large".into()))
        })?,
        segment_threshold: n.segment_threshold.map_or(d.segment_threshold, |s| s.0),
        segment_size: n.segment_size.map_or(Ok(d.segment_size), |s| {
            u32::try_from(s.0)
                .map_err(|_| sc.error_at("segment_size", "nic.segment_size is too large".into()))
        })?,
        op_table_capacity: n.op_table.unwrap_or(d.op_table_capacity),
        command_queue_capacity: n.command_queue.unwrap_or(d.command_queue_capacity),
        registry_capacity: n.registry.unwrap_or(d.registry_capacity),
        registry_timeout: t(n.registry_timeout, d.registry_timeout),
        escape_capacity: n.escape_entries.unwrap_or(d.escape_capacity),
        escape_bytes: n.escape_bytes.map_or(d.escape_bytes, |s| s.0 as usize),
        escape_timeout: t(n.escape_timeout, d.escape_timeout),
        tombstones: n.tombstones.unwrap_or(d.tombstones),
        tombstone_capacity: n.tombstone_capacity.unwrap_or(d.tombstone_capacity),
        tombstone_mode: mode(
            sc,
            "tombstone_mode",
            &n.tombstone_mode,
            &[
                ("window", TombstoneMode::Window),
                ("fifo", TombstoneMode::Fifo),
            ],
            d.tombstone_mode,
        )?,
        registration: mode(
            sc,
            "registration",
            &n.registration,
            &[
                ("first-only", RegistrationMode::FirstOnly),
                ("self-describing", RegistrationMode::SelfDescribing),
            ],
            d.registration,
        )?,
        ack_mode: mode(
            sc,
            "ack",
            &n.ack,
            &[
                ("per-packet", AckMode::PerPacket),
                ("selective", AckMode::Selective { delay: sack_delay }),
            ],
            d.ack_mode,
        )?,
        retransmit: mode(
            sc,
            "retransmit",
            &n.retransmit,
            &[
                ("selective", RetransmitMode::Selective),
                ("go-back-n", RetransmitMode::GoBackN),
            ],
            d.retransmit,
        )?,
        fast_retransmit: n.fast_retransmit.unwrap_or(d.fast_retransmit),
        spurious_by_timing: n.spurious_by_timing.unwrap_or(d.spurious_by_timing),
        completion_acks: n.completion_acks.unwrap_or(d.completion_acks),
        rto_restart: n.rto_restart.unwrap_or(d.rto_restart),
        tail_probe: n.tail_probe.unwrap_or(d.tail_probe),
        timeout_hold: n.timeout_hold.unwrap_or(d.timeout_hold),
        credit_repair: n.credit_repair.unwrap_or(d.credit_repair),
        loss_window: n.loss_window.unwrap_or(d.loss_window),
        rto_initial: t(n.rto_initial, d.rto_initial),
        rto_min: match n.rto_min {
            None => d.rto_min,
            Some(RtoFloor::Fixed(x)) => x,
            Some(RtoFloor::FullQueues) => {
                let floor = full_queue_floor(&shape);
                let max = t(n.rto_max, d.rto_max);
                if floor > max {
                    return Err(sc.error_at_key(
                        "rto_min",
                        format!(
                            "nic.rto_min = \"full-queues\" works out to {floor} on this topology, above nic.rto_max ({max}): raise rto_max or give rto_min as a time"
                        ),
                    ));
                }
                floor
            }
        },
        rto_max: t(n.rto_max, d.rto_max),
        max_retries: n.max_retries.unwrap_or(d.max_retries),
        rnr_delay: t(n.rnr_delay, d.rnr_delay),
        max_rnr_retries: n.max_rnr_retries.unwrap_or(d.max_rnr_retries),
        recv_queue_capacity: n.recv_queue.unwrap_or(d.recv_queue_capacity),
        transmit_queue_capacity: n.transmit_queue.unwrap_or(d.transmit_queue_capacity),
        read_window: n.read_window.map_or(d.read_window, |s| s.0),
        max_sge: n.max_sge.unwrap_or(d.max_sge),
        reduce_data_limit: n.reduce_data_limit.map_or(d.reduce_data_limit, |l| {
            usize::try_from(l.0).unwrap_or(usize::MAX)
        }),
        reduce_chunks: n.reduce_chunks.unwrap_or(d.reduce_chunks),
        cc: cc_config(sc, &d, &shape)?,
        multipath: mode(
            sc,
            "multipath",
            &n.multipath,
            &[
                ("single", udrma_nic::Multipath::Single),
                ("spray", udrma_nic::Multipath::Spray),
                ("reps", udrma_nic::Multipath::Reps),
            ],
            d.multipath,
        )?,
        entropies: n.entropies.unwrap_or(d.entropies),
        translation: udrma_nic::translation::TranslationConfig {
            sets: n.translation_sets.unwrap_or(d.translation.sets),
            ways: n.translation_ways.unwrap_or(d.translation.ways),
            entries_per_line: n
                .translation_entries_per_line
                .unwrap_or(d.translation.entries_per_line),
            ..d.translation
        },
        ..d
    };
    // The first timer, before any round trip is measured, is never
    // shorter than an unloaded round trip, the cost model's NIC work at
    // both ends included: one that is fires on every first packet (a
    // profile whose NICs take long per packet, at a large MTU, has a
    // round trip near the default 100 us).
    let floor = cost_round_trip(&cfg, &shape);
    cfg.rto_initial = cfg.rto_initial.max(floor.min(cfg.rto_max));
    refuse_reordering_go_back_n(sc, &cfg)?;
    refuse_loss_window_where_it_changes_nothing(sc, &cfg)?;
    if cfg.retransmit == RetransmitMode::GoBackN && sc.file.nic.timeout_hold.is_some() {
        return Err(sc.error_at_key(
            "timeout_hold",
            "nic.timeout_hold changes nothing under retransmit = \"go-back-n\": a \
             go-back-N timeout already sends again everything after the packet \
             lost, and the receiver answers only in order; remove it"
                .to_string(),
        ));
    }
    cfg.validate().map_err(|e| {
        let udrma_nic::ConfigError::OutOfRange { field, .. } = &e;
        sc.error_at_key(field, format!("nic: {e}"))
    })?;
    Ok(cfg)
}

/// Go-back-N assumes one path: its receiver discards every packet after
/// a gap and NACKs it, so spreading one flow over paths of different
/// delay turns each early arrival into a NACK and a resent window
/// (docs/testing.md, findings 24 and 25: 23,046 NACKs for 53 drops, and
/// congestion marks lost with the discarded packets). RoCE NICs that
/// resend windows do not spray; a file that asks for both is refused.
fn refuse_reordering_go_back_n(sc: &Scenario, cfg: &NicConfig) -> Result<(), ScenarioError> {
    if cfg.retransmit != RetransmitMode::GoBackN {
        return Ok(());
    }
    let spreading = match cfg.multipath {
        udrma_nic::Multipath::Single => None,
        udrma_nic::Multipath::Spray => Some(("multipath", "nic.multipath = \"spray\"")),
        udrma_nic::Multipath::Reps => Some(("multipath", "nic.multipath = \"reps\"")),
    }
    .or((sc.file.topology.routing == RoutingKind::Spray)
        .then_some(("routing", "topology.routing = \"spray\"")));
    match spreading {
        None => Ok(()),
        Some((key, what)) => Err(sc.error_at_key(
            key,
            format!(
                "{what} reorders every flow, and retransmit = \"go-back-n\" discards \
                 every packet after a gap: use retransmit = \"selective\" to spread \
                 packets over paths, or one path per flow (multipath = \"single\", \
                 routing = \"ecmp\" or \"shortest\") with go-back-n"
            ),
        )),
    }
}

/// `loss_window` answers losses that congestion caused: under go-back-N
/// on a fabric that trims or marks ECN (the signs it reads), under
/// selective retransmission with no controller on a trimming fabric.
/// Anywhere else it would change nothing, so a file that sets it there
/// is refused at the key.
fn refuse_loss_window_where_it_changes_nothing(
    sc: &Scenario,
    cfg: &NicConfig,
) -> Result<(), ScenarioError> {
    let t = &sc.file.topology;
    let applies = match cfg.retransmit {
        RetransmitMode::GoBackN => t.trim || t.ecn_threshold.is_some(),
        RetransmitMode::Selective => cfg.cc.algorithm == udrma_nic::CcAlgorithm::None && t.trim,
    };
    if applies || sc.file.nic.loss_window.is_none() {
        return Ok(());
    }
    Err(sc.error_at_key(
        "loss_window",
        "nic.loss_window changes nothing here: it answers losses near a sign of \
         congestion, under retransmit = \"go-back-n\" on a fabric that trims or \
         marks (topology.trim = true or topology.ecn_threshold), and trims under \
         selective retransmission with no controller (cc = \"none\", \
         topology.trim = true); remove it"
            .to_string(),
    ))
}

/// The congestion controller and what it is told about the network: the
/// host's line rate and the unloaded round trip across the topology's
/// longest path (a full-size packet out, an ACK back), unless the file
/// gives `cc_base_rtt`.
fn cc_config(
    sc: &Scenario,
    d: &NicConfig,
    shape: &PathShape,
) -> Result<udrma_nic::CcConfig, ScenarioError> {
    let n = &sc.file.nic;
    let algorithm = match &n.cc {
        None => d.cc.algorithm,
        Some(name) => udrma_nic::CcAlgorithm::parse(name).ok_or_else(|| {
            let known: Vec<&str> = udrma_nic::CcAlgorithm::ALL
                .iter()
                .map(|a| a.name())
                .collect();
            sc.error_at_key(
                "cc",
                format!(
                    "nic.cc = {name:?}: unknown controller; known: {}",
                    known.join(", ")
                ),
            )
        })?,
    };
    let PathShape {
        rate,
        latency,
        mtu,
        links,
        ..
    } = *shape;
    let payload = n.mtu_payload.map_or(u64::from(d.mtu_payload), |s| s.0);
    let mtu_bytes = (payload + 64).min(mtu);
    let wire = |bytes: u64| udrma_nic::cc::serialization(bytes + udrma_fabric::WIRE_OVERHEAD, rate);
    let one_way = |bytes| (latency + wire(bytes)).saturating_mul(links);
    let base_rtt = n
        .cc_base_rtt
        .map_or(one_way(mtu_bytes) + one_way(40), |x| x.0);
    Ok(udrma_nic::CcConfig {
        algorithm,
        line_rate_bps: rate,
        base_rtt,
        target_delay: n.cc_target_delay.map_or(Duration::ZERO, |x| x.0),
        mtu_bytes,
        unscheduled: n.cc_unscheduled.map_or(0, |s| s.0),
        pace_slack: Duration::ZERO,
    })
}

/// An unloaded round trip of a full packet out and its ACK back across
/// the topology's longest path, with the cost model's NIC work at both
/// ends of both (send and receive; zero without a cost model).
fn cost_round_trip(cfg: &NicConfig, shape: &PathShape) -> Duration {
    let header = (udrma_proto::HEADER_LEN + 16 + udrma_proto::ICRC_LEN) as u64;
    let data = (u64::from(cfg.mtu_payload) + header).min(shape.mtu);
    let ack = header;
    let wire =
        |bytes: u64| udrma_nic::cc::serialization(bytes + udrma_fabric::WIRE_OVERHEAD, shape.rate);
    let one_way = |bytes: u64| (shape.latency + wire(bytes)).saturating_mul(shape.links);
    let nic = |bytes: u64| cfg.cost.packet(bytes as usize).saturating_mul(2);
    one_way(data) + one_way(ack) + nic(data) + nic(ack)
}

/// What the timers and controllers are told about the topology: its
/// first link's rate, latency and MTU, the links a longest one-way path
/// crosses, and the longest a full queue of any link takes to drain.
#[derive(Clone, Copy)]
struct PathShape {
    rate: u64,
    latency: Duration,
    mtu: u64,
    links: u64,
    drain: Duration,
    control_priority: bool,
}

fn path_shape(sc: &Scenario, topo: &Topology) -> PathShape {
    let link = topo.links.first().map(|l| l.params);
    let (rate, latency, mtu) = link
        .map_or((100_000_000_000, Duration::from_micros(1), 9216), |p| {
            (p.bandwidth_bps, p.latency, u64::from(p.mtu))
        });
    let drain = topo
        .links
        .iter()
        .map(|l| udrma_nic::cc::serialization(l.params.queue_bytes, l.params.bandwidth_bps))
        .max()
        .unwrap_or(Duration::ZERO);
    let t = &sc.file.topology;
    let links: u64 = match t.kind {
        TopologyKind::Pair => 1,
        TopologyKind::Star => 2,
        TopologyKind::Dumbbell => 3,
        TopologyKind::FatTree => 6,
        // Half way round, and a host link at each end.
        TopologyKind::Ring => u64::from(t.hosts.unwrap_or(3) / 2) + 2,
        TopologyKind::KaryNtree => {
            let k = t.k.unwrap_or(2);
            2 * u64::from(
                t.levels
                    .unwrap_or_else(|| kary_levels(k, t.hosts.unwrap_or(1))),
            )
        }
    };
    PathShape {
        rate,
        latency,
        mtu,
        links,
        drain,
        control_priority: t.control_priority,
    }
}

/// `rto_min = "full-queues"`: the time every queue a packet and its
/// acknowledgement can wait in on a longest round trip takes to drain
/// when full. The data crosses `links` queues; the acknowledgement as
/// many again, or only its host's own when switches serve control packets
/// first. The timer adds it to the smoothed RTT, so it fires only on a
/// packet that cannot still be queued (htsim_uec sets its fixed RTO the
/// same way: 15 us and six full queues).
fn full_queue_floor(p: &PathShape) -> Duration {
    let back = if p.control_priority { 1 } else { p.links };
    p.drain.saturating_mul(p.links + back)
}

/// `[topology] pfc` and its keys: the lossless configuration, or `None`
/// for a lossy fabric (a `pfc_*` key without `pfc = true` is refused at
/// its place: it would change nothing).
pub fn pfc_config(sc: &Scenario) -> Result<Option<udrma_fabric::PfcConfig>, ScenarioError> {
    let t = &sc.file.topology;
    let set = [
        ("pfc_xoff", t.pfc_xoff.is_some()),
        ("pfc_xon", t.pfc_xon.is_some()),
        ("pfc_headroom", t.pfc_headroom.is_some()),
        ("pfc_data_priority", t.pfc_data_priority.is_some()),
        ("pfc_control_priority", t.pfc_control_priority.is_some()),
    ];
    if !t.pfc {
        if let Some((key, _)) = set.iter().find(|(_, on)| *on) {
            return Err(sc.error_at_key(
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
pub fn check_pfc(
    sc: &Scenario,
    cfg: &udrma_fabric::PfcConfig,
    topo: &Topology,
) -> Result<(), ScenarioError> {
    if sc.file.topology.order == crate::schema::OrderKind::Windows {
        return Err(pfc_error(sc, udrma_fabric::PfcError::Windows));
    }
    cfg.check(topo).map(|_| ()).map_err(|e| pfc_error(sc, e))
}

/// Makes `world` lossless as `cfg` says.
pub fn apply_pfc(
    sc: &Scenario,
    world: &mut udrma_fabric::World,
    cfg: udrma_fabric::PfcConfig,
) -> Result<(), ScenarioError> {
    world.set_pfc(cfg).map_err(|e| pfc_error(sc, e))
}

/// A refused PFC configuration, at the key that asked for it.
fn pfc_error(sc: &Scenario, e: udrma_fabric::PfcError) -> ScenarioError {
    use udrma_fabric::PfcError;
    let t = &sc.file.topology;
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
    sc.error_at_key(key, format!("topology.{key}: {e}"))
}

/// The fabric configuration for `seed`, with NICs configured as `nic`.
pub fn fabric_config(
    sc: &Scenario,
    seed: u64,
    nic: &NicConfig,
) -> Result<FabricConfig, ScenarioError> {
    Ok(FabricConfig {
        seed,
        routing: match sc.file.topology.routing {
            RoutingKind::Shortest => Policy::ShortestPath,
            RoutingKind::Ecmp => Policy::Ecmp,
            RoutingKind::Spray => Policy::Spray,
        },
        nic: nic.clone(),
        phantom_payload: sc.file.topology.phantom,
        seal_bytes: match sc.file.security.mode.as_deref() {
            None | Some("none") => 0,
            Some("aead") => udrma_proto::secure::OVERHEAD as u64,
            Some(other) => {
                return Err(sc.error_at_key(
                    "mode",
                    format!("security.mode = {other:?}: expected \"none\" or \"aead\""),
                ))
            }
        },
    })
}

/// `h<n>` → host `n`, if the topology has it.
pub fn host(
    sc: &Scenario,
    name: &str,
    n_hosts: usize,
    whose: &str,
) -> Result<NodeAddr, ScenarioError> {
    let id = name.strip_prefix('h').and_then(|n| n.parse::<u32>().ok());
    match id {
        Some(i) if (i as usize) < n_hosts => Ok(NodeAddr(i)),
        Some(_) => Err(sc.error_at(
            name,
            format!(
                "{whose}: no host {name:?} in this topology (it has {n_hosts} hosts, h0..h{})",
                n_hosts - 1
            ),
        )),
        None => Err(sc.error_at(
            name,
            format!("{whose}: {name:?} is not a host name (expected h0, h1, ...)"),
        )),
    }
}

/// The opcodes a `[[fault]]` rule can name (`opcodes = [...]`), by the
/// name a scenario file gives them.
pub const OPCODE_NAMES: [(&str, Opcode); 13] = [
    ("write", Opcode::Write),
    ("read-request", Opcode::ReadRequest),
    ("read-response", Opcode::ReadResponse),
    ("send", Opcode::Send),
    ("ack", Opcode::Ack),
    ("sack", Opcode::SelectiveAck),
    ("nack", Opcode::Nack),
    ("completion", Opcode::Completion),
    ("data-arrived", Opcode::DataArrived),
    ("credit", Opcode::Credit),
    ("rts", Opcode::Rts),
    ("cts", Opcode::Cts),
    ("fin", Opcode::Fin),
];

fn opcode(sc: &Scenario, name: &str) -> Result<Opcode, ScenarioError> {
    OPCODE_NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, o)| *o)
        .ok_or_else(|| {
            let names: Vec<&str> = OPCODE_NAMES.iter().map(|(n, _)| *n).collect();
            let hint = udrma_faults::closest(name, &names)
                .map(|b| format!(" (did you mean {b:?}?)"))
                .unwrap_or_default();
            sc.error_at(
                name,
                format!(
                    "unknown opcode {name:?}{hint}; expected one of {}",
                    names.join(", ")
                ),
            )
        })
}

fn flag(sc: &Scenario, name: &str) -> Result<Flags, ScenarioError> {
    const NAMES: [(&str, Flags); 7] = [
        ("ack-req", Flags::ACK_REQ),
        ("first", Flags::FIRST),
        ("last", Flags::LAST),
        ("last-segment", Flags::LAST_SEGMENT),
        ("retransmit", Flags::RETRANSMIT),
        ("credits", Flags::CREDITS_VALID),
        ("solicited", Flags::SOLICITED),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .ok_or_else(|| {
            let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            sc.error_at(
                name,
                format!(
                    "unknown flag {name:?}; expected one of {}",
                    names.join(", ")
                ),
            )
        })
}

/// Builds the fault rules (names resolved to links by the world).
pub fn rules(sc: &Scenario, seed: u64, n_hosts: usize) -> Result<RuleSet, ScenarioError> {
    let mut set = RuleSet::new();
    for (i, f) in sc.file.faults.iter().enumerate() {
        let name = f.name.clone().unwrap_or_else(|| format!("fault{i}"));
        let model_name = f.model.name();
        let need = |what: &str| {
            sc.error_at(
                &name,
                format!("fault {name:?}: model {model_name} needs `{what}`"),
            )
        };
        let p = || f.p.ok_or_else(|| need("p"));
        let model = match f.model {
            // Not a packet fault: the messaging layer applies it.
            ModelKind::RegistrationFailure => continue,
            ModelKind::Loss => Model::Loss {
                p: p()?,
                correlation: f.correlation.unwrap_or(0.0),
            },
            ModelKind::GilbertElliott => Model::GilbertElliott {
                p: p()?,
                r: f.r.ok_or_else(|| need("r"))?,
                loss_good: f.loss_good.unwrap_or(0.0),
                loss_bad: f.loss_bad.unwrap_or(1.0),
            },
            ModelKind::Duplicate => Model::Duplicate {
                p: p()?,
                copies: f.copies.unwrap_or(1),
                correlation: f.correlation.unwrap_or(0.0),
            },
            ModelKind::Reorder => Model::Reorder {
                p: p()?,
                correlation: f.correlation.unwrap_or(0.0),
                gap: f.gap.unwrap_or(1),
                delay: f.delay.ok_or_else(|| need("delay"))?.0,
                limit: f.limit,
            },
            ModelKind::Delay => Model::Delay {
                base: f.delay.ok_or_else(|| need("delay"))?.0,
                jitter: f.jitter.map_or(Duration::ZERO, |j| j.0),
                dist: match f.distribution.as_deref() {
                    None | Some("uniform") => Jitter::Uniform,
                    Some("normal") => Jitter::Normal,
                    Some("pareto") => Jitter::Pareto,
                    Some(other) => {
                        return Err(sc.error_at(
                            other,
                            format!("fault {name:?}: distribution {other:?}: expected uniform, normal or pareto"),
                        ))
                    }
                },
                limit: f.limit,
            },
            ModelKind::Corrupt => Model::Corrupt {
                p: p()?,
                bits: f.bits.unwrap_or(1),
            },
            ModelKind::Rate => Model::Rate {
                bits_per_sec: f.rate.ok_or_else(|| need("rate"))?.0,
                limit: f.limit.unwrap_or(1000),
            },
            ModelKind::Down => Model::Down,
            ModelKind::Partition => {
                let side = |names: &[String]| -> Result<Vec<NodeAddr>, ScenarioError> {
                    names.iter().map(|h| host(sc, h, n_hosts, &format!("fault {name:?}"))).collect()
                };
                Model::Partition {
                    a: side(&f.a)?,
                    b: side(&f.b)?,
                    two_way: f.two_way,
                }
            }
        };
        let mut target = Target::any();
        target.links = f.links.clone();
        target.direction = match f.direction.as_deref() {
            None => None,
            Some("forward") => Some(Direction::Forward),
            Some("reverse") => Some(Direction::Reverse),
            Some(other) => {
                return Err(sc.error_at(
                    other,
                    format!("fault {name:?}: direction {other:?}: expected forward or reverse"),
                ))
            }
        };
        let who = format!("fault {name:?}");
        target.src = f
            .src
            .iter()
            .map(|h| host(sc, h, n_hosts, &who))
            .collect::<Result<_, _>>()?;
        target.dst = f
            .dst
            .iter()
            .map(|h| host(sc, h, n_hosts, &who))
            .collect::<Result<_, _>>()?;
        target.opcodes = f
            .opcodes
            .iter()
            .map(|o| opcode(sc, o))
            .collect::<Result<_, _>>()?;
        for fl in &f.flags {
            target.flags |= flag(sc, fl)?;
        }
        if f.from.is_some() || f.until.is_some() {
            let from = Instant::ZERO + f.from.map_or(Duration::ZERO, |t| t.0);
            let until = f.until.map_or(Instant(u64::MAX), |t| Instant::ZERO + t.0);
            target.window = Some((from, until));
        }
        if f.every.is_some() || f.times.is_some() {
            target.nth = Some(udrma_faults::Nth {
                every: f.every.unwrap_or(1),
                offset: f.offset.unwrap_or(0),
                limit: f.times,
            });
        }
        let rule =
            Rule::new(seed, &name, target, model).map_err(|e| sc.error_at(&name, e.to_string()))?;
        set.push(rule);
    }
    Ok(set)
}

/// The host pauses.
pub fn pauses(sc: &Scenario, n_hosts: usize) -> Result<Vec<HostPause>, ScenarioError> {
    sc.file
        .pauses
        .iter()
        .map(|p| {
            let h = host(sc, &p.host, n_hosts, "pause")?;
            if p.until.0 <= p.from.0 {
                return Err(sc.error_at(
                    &p.host,
                    format!("pause of {}: `until` must be after `from`", p.host),
                ));
            }
            Ok(HostPause {
                host: h,
                from: Instant::ZERO + p.from.0,
                until: Instant::ZERO + p.until.0,
            })
        })
        .collect()
}

/// The messaging layer's configuration for host `h` of `n` hosts whose
/// NICs use `nic`.
pub fn msg_config(
    sc: &Scenario,
    seed: u64,
    h: NodeAddr,
    n: usize,
    nic: &NicConfig,
) -> Result<MsgConfig, ScenarioError> {
    let m = &sc.file.messaging;
    let d = MsgConfig::default();
    let small = |v: Option<crate::units::Size>, d: u32, key: &str| {
        v.map_or(Ok(d), |s| {
            u32::try_from(s.0)
                .map_err(|_| sc.error_at_key(key, format!("messaging.{key} is too large")))
        })
    };
    let rendezvous = match m.rendezvous.as_deref() {
        None => d.rendezvous,
        Some("r3") => Protocol::R3,
        Some("rget") => Protocol::Rget,
        Some("rput") => Protocol::Rput,
        Some(other) => {
            return Err(sc.error_at(
                other,
                format!("messaging.rendezvous = {other:?}: expected r3, rget or rput"),
            ))
        }
    };
    let mut registration_failure = match m.registration.as_deref() {
        None | Some("ok") => 0.0,
        Some("fail") => 1.0,
        Some(other) => {
            return Err(sc.error_at(
                other,
                format!("messaging.registration = {other:?}: expected ok or fail"),
            ))
        }
    };
    let mut window = None;
    for (i, f) in sc.file.faults.iter().enumerate() {
        if f.model != ModelKind::RegistrationFailure {
            continue;
        }
        let name = f.name.clone().unwrap_or_else(|| format!("fault{i}"));
        let who = format!("fault {name:?}");
        let hosts = f
            .src
            .iter()
            .map(|x| host(sc, x, n, &who))
            .collect::<Result<Vec<_>, _>>()?;
        let p = f.p.ok_or_else(|| {
            sc.error_at(
                &name,
                format!("{who}: model registration-failure needs `p`"),
            )
        })?;
        if !(0.0..=1.0).contains(&p) {
            return Err(sc.error_at(&name, format!("{who}: p = {p} is not a probability")));
        }
        if hosts.is_empty() || hosts.contains(&h) {
            registration_failure = p;
            if f.from.is_some() || f.until.is_some() {
                window = Some((
                    Instant::ZERO + f.from.map_or(Duration::ZERO, |t| t.0),
                    f.until.map_or(Instant(u64::MAX), |t| Instant::ZERO + t.0),
                ));
            }
        }
    }
    let cfg = MsgConfig {
        vbuf_size: small(m.vbuf_size, d.vbuf_size, "vbuf_size")?,
        vbufs_per_peer: m.vbufs_per_peer.unwrap_or(d.vbufs_per_peer),
        send_vbufs: m.send_vbufs.unwrap_or(d.send_vbufs),
        credit_notify_threshold: m
            .credit_notify_threshold
            .unwrap_or(d.credit_notify_threshold),
        credit_preserve: m.credit_preserve.unwrap_or(d.credit_preserve),
        rendezvous_threshold: m
            .rendezvous_threshold
            .map_or(d.rendezvous_threshold, |s| s.0),
        rendezvous,
        noop_interval: m.noop_interval.map_or(d.noop_interval, |t| t.0),
        unexpected_bytes: m.unexpected_bytes.map_or(d.unexpected_bytes, |s| s.0),
        registration_failure,
        registration_failure_window: window,
        seed,
    };
    cfg.validate(nic).map_err(|e| {
        // At the key when the file gives it, else at the table (the value
        // is a default's), never at a comment that mentions messaging.
        let udrma_host::messaging::MsgConfigError::Field { field, .. } = &e;
        // The messaging layer names the NIC's fields as the engine spells
        // them; a scenario file spells them in [nic].
        let message = format!("[messaging] {e}").replace("recv_queue_capacity", "[nic] recv_queue");
        let at_key = sc.error_at_key(field, message.clone());
        if at_key.at.is_some() {
            at_key
        } else {
            sc.error_at("[messaging]", message)
        }
    })?;
    Ok(cfg)
}
