//! The NIC configuration a scenario asks for: the `[nic]` keys over the
//! hardware profile's values, timer floors from the topology's paths, the
//! congestion controller, and the combinations refused.

use udrma_fabric::Topology;
use udrma_nic::{AckMode, NicConfig, RegistrationMode, RetransmitMode, TombstoneMode};
use udrma_proto::Duration;

use crate::file::schema::{NicSpec, RoutingKind, TopologyKind, TopologySpec};
use crate::file::source::Locate;
use crate::file::units::RtoFloor;
use crate::plan::profile::Profile;
use crate::ScenarioError;
use udrma_nic::CostModel;

use super::kary_levels;

/// What the NIC's configuration reads of a scenario: its `[nic]` and
/// `[topology]` tables, and where they are written (for errors).
pub struct Keys<'a> {
    /// `[nic]`.
    pub nic: &'a NicSpec,
    /// `[topology]`: routing, the paths' shape (timer floors), and the
    /// trimming and marking a loss window needs.
    pub topology: &'a TopologySpec,
    /// The file, for locating an error at its key.
    pub at: &'a dyn Locate,
}

impl Locate for Keys<'_> {
    fn path(&self) -> &str {
        self.at.path()
    }
    fn text(&self) -> &str {
        self.at.text()
    }
}

fn mode<T: Copy>(
    k: &Keys<'_>,
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
            k.error_at(
                v,
                format!("nic.{key} = {v:?}: expected one of {}", names.join(", ")),
            )
        })
}

/// Builds and validates the NIC configuration (over the hardware
/// profile's, if any; timer floors from the topology's paths).
pub fn nic_config(
    k: &Keys<'_>,
    profile: Option<&Profile>,
    cost: &CostModel,
    topo: &Topology,
) -> Result<NicConfig, ScenarioError> {
    let n = &k.nic;
    let d = profile_defaults(k, profile, cost);
    let t = |v: Option<crate::file::units::Time>, d: Duration| v.map_or(d, |x| x.0);
    let sack_delay = t(n.sack_delay, Duration::from_micros(2));
    let m = Modes::of(k, &d, sack_delay)?;
    // Built once: the controller and the full-queue floor both read it.
    let shape = path_shape(k, topo);
    let mut cfg = NicConfig {
        mtu_payload: n.mtu_payload.map_or(Ok(d.mtu_payload), |s| {
            u32::try_from(s.0)
                .map_err(|_| k.error_at("mtu_payload", "nic.mtu_payload is too large".into()))
        })?,
        segment_threshold: n.segment_threshold.map_or(d.segment_threshold, |s| s.0),
        segment_size: n.segment_size.map_or(Ok(d.segment_size), |s| {
            u32::try_from(s.0)
                .map_err(|_| k.error_at("segment_size", "nic.segment_size is too large".into()))
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
        tombstone_mode: m.tombstone_mode,
        registration: m.registration,
        ack_mode: m.ack_mode,
        retransmit: m.retransmit,
        fast_retransmit: n.fast_retransmit.unwrap_or(d.fast_retransmit),
        spurious_by_timing: n.spurious_by_timing.unwrap_or(d.spurious_by_timing),
        completion_acks: n.completion_acks.unwrap_or(d.completion_acks),
        rto_restart: n.rto_restart.unwrap_or(d.rto_restart),
        tail_probe: n.tail_probe.unwrap_or(d.tail_probe),
        timeout_hold: n.timeout_hold.unwrap_or(d.timeout_hold),
        credit_repair: n.credit_repair.unwrap_or(d.credit_repair),
        loss_window: n.loss_window.unwrap_or(d.loss_window),
        rto_initial: t(n.rto_initial, d.rto_initial),
        rto_min: rto_min(k, &d, &shape)?,
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
        cc: cc_config(k, &d, &shape)?,
        multipath: m.multipath,
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
    refuse_reordering_go_back_n(k, &cfg)?;
    refuse_loss_window_where_it_changes_nothing(k, &cfg)?;
    refuse_timeout_hold_under_go_back_n(k, &cfg)?;
    cfg.validate().map_err(|e| {
        let udrma_nic::ConfigError::OutOfRange { field, .. } = &e;
        // The engine names its fields; the file names its keys.
        let key = file_key(field);
        let message = e.to_string().replacen(field, &format!("nic.{key}"), 1);
        k.error_at_key(key, message)
    })?;
    Ok(cfg)
}

/// The `[nic]` key that sets the engine's configuration field `field`.
fn file_key(field: &str) -> &str {
    match field {
        "op_table_capacity" => "op_table",
        "command_queue_capacity" => "command_queue",
        "registry_capacity" => "registry",
        "escape_capacity" => "escape_entries",
        "recv_queue_capacity" => "recv_queue",
        "transmit_queue_capacity" => "transmit_queue",
        other => other,
    }
}

/// The `[nic]` keys that name a mode, each read against its names.
struct Modes {
    tombstone_mode: TombstoneMode,
    registration: RegistrationMode,
    ack_mode: AckMode,
    retransmit: RetransmitMode,
    multipath: udrma_nic::Multipath,
}

impl Modes {
    fn of(k: &Keys<'_>, d: &NicConfig, sack_delay: Duration) -> Result<Modes, ScenarioError> {
        let n = &k.nic;
        Ok(Modes {
            tombstone_mode: mode(
                k,
                "tombstone_mode",
                &n.tombstone_mode,
                &[
                    ("window", TombstoneMode::Window),
                    ("fifo", TombstoneMode::Fifo),
                ],
                d.tombstone_mode,
            )?,
            registration: mode(
                k,
                "registration",
                &n.registration,
                &[
                    ("first-only", RegistrationMode::FirstOnly),
                    ("self-describing", RegistrationMode::SelfDescribing),
                ],
                d.registration,
            )?,
            ack_mode: mode(
                k,
                "ack",
                &n.ack,
                &[
                    ("per-packet", AckMode::PerPacket),
                    ("selective", AckMode::Selective { delay: sack_delay }),
                ],
                d.ack_mode,
            )?,
            retransmit: mode(
                k,
                "retransmit",
                &n.retransmit,
                &[
                    ("selective", RetransmitMode::Selective),
                    ("go-back-n", RetransmitMode::GoBackN),
                ],
                d.retransmit,
            )?,
            multipath: mode(
                k,
                "multipath",
                &n.multipath,
                &[
                    ("single", udrma_nic::Multipath::Single),
                    ("spray", udrma_nic::Multipath::Spray),
                    ("reps", udrma_nic::Multipath::Reps),
                ],
                d.multipath,
            )?,
        })
    }
}

/// The defaults a `[nic]` key falls back to: the engine's, with the
/// hardware profile's MTU, limits, translation cache and costs, and the
/// descriptor ring's low-water mark a quarter of its size unless given.
fn profile_defaults(k: &Keys<'_>, profile: Option<&Profile>, cost: &CostModel) -> NicConfig {
    let n = &k.nic;
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
    d.cost = *cost;
    if let Some(r) = n.descriptor_ring {
        d.descriptor_ring = r;
        d.ring_low_water = n.ring_low_water.unwrap_or(r / 4);
    } else if let Some(l) = n.ring_low_water {
        d.ring_low_water = l;
    }
    d
}

/// `nic.rto_min`: a time, or `"full-queues"` (every queue on the longest
/// path full, there and back), which must not exceed `rto_max`.
fn rto_min(k: &Keys<'_>, d: &NicConfig, shape: &PathShape) -> Result<Duration, ScenarioError> {
    let n = &k.nic;
    Ok(match n.rto_min {
        None => d.rto_min,
        Some(RtoFloor::Fixed(x)) => x,
        Some(RtoFloor::FullQueues) => {
            let floor = full_queue_floor(shape);
            let max = n.rto_max.map_or(d.rto_max, |x| x.0);
            if floor > max {
                return Err(k.error_at_key(
                    "rto_min",
                    format!(
                        "nic.rto_min = \"full-queues\" works out to {floor} on this topology, above nic.rto_max ({max}): raise rto_max or give rto_min as a time"
                    ),
                ));
            }
            floor
        }
    })
}

/// The timeout hold under go-back-N: a go-back-N timeout already sends
/// everything after the lost packet again, and its receiver answers only
/// in order, so the key changes nothing and a file that sets it is
/// refused.
fn refuse_timeout_hold_under_go_back_n(k: &Keys<'_>, cfg: &NicConfig) -> Result<(), ScenarioError> {
    if cfg.retransmit == RetransmitMode::GoBackN && k.nic.timeout_hold.is_some() {
        return Err(k.error_at_key(
            "timeout_hold",
            "nic.timeout_hold changes nothing under retransmit = \"go-back-n\": a \
             go-back-N timeout already sends again everything after the packet \
             lost, and the receiver answers only in order; remove it"
                .to_string(),
        ));
    }
    Ok(())
}

/// Go-back-N assumes one path: its receiver discards every packet after
/// a gap and NACKs it, so spreading one flow over paths of different
/// delay turns each early arrival into a NACK and a resent window
/// (docs/testing.md, findings 24 and 25: 23,046 NACKs for 53 drops, and
/// congestion marks lost with the discarded packets). RoCE NICs that
/// resend windows do not spray; a file that asks for both is refused.
fn refuse_reordering_go_back_n(k: &Keys<'_>, cfg: &NicConfig) -> Result<(), ScenarioError> {
    if cfg.retransmit != RetransmitMode::GoBackN {
        return Ok(());
    }
    let spreading = match cfg.multipath {
        udrma_nic::Multipath::Single => None,
        udrma_nic::Multipath::Spray => Some(("multipath", "nic.multipath = \"spray\"")),
        udrma_nic::Multipath::Reps => Some(("multipath", "nic.multipath = \"reps\"")),
    }
    .or((k.topology.routing == RoutingKind::Spray)
        .then_some(("routing", "topology.routing = \"spray\"")));
    match spreading {
        None => Ok(()),
        Some((key, what)) => Err(k.error_at_key(
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
    k: &Keys<'_>,
    cfg: &NicConfig,
) -> Result<(), ScenarioError> {
    let t = k.topology;
    let applies = match cfg.retransmit {
        RetransmitMode::GoBackN => t.trim || t.ecn_threshold.is_some(),
        RetransmitMode::Selective => cfg.cc.algorithm == udrma_nic::CcAlgorithm::None && t.trim,
    };
    if applies || k.nic.loss_window.is_none() {
        return Ok(());
    }
    Err(k.error_at_key(
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
    k: &Keys<'_>,
    d: &NicConfig,
    shape: &PathShape,
) -> Result<udrma_nic::CcConfig, ScenarioError> {
    let n = &k.nic;
    let algorithm = match &n.cc {
        None => d.cc.algorithm,
        Some(name) => udrma_nic::CcAlgorithm::parse(name).ok_or_else(|| {
            let known: Vec<&str> = udrma_nic::CcAlgorithm::ALL
                .iter()
                .map(|a| a.name())
                .collect();
            k.error_at_key(
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
    let ack = (udrma_proto::HEADER_LEN + udrma_proto::ICRC_LEN) as u64;
    let wire =
        |bytes: u64| udrma_nic::cc::serialization(bytes + udrma_fabric::WIRE_OVERHEAD, shape.rate);
    let one_way = |bytes: u64| (shape.latency + wire(bytes)).saturating_mul(shape.links);
    // Both ends work on each: data with its DMA, the ACK without one.
    let data_work = cfg.cost.packet(data as usize).saturating_mul(2);
    let ack_work = cfg.cost.control(ack as usize).saturating_mul(2);
    one_way(data) + one_way(ack) + data_work + ack_work
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

fn path_shape(k: &Keys<'_>, topo: &Topology) -> PathShape {
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
    let t = k.topology;
    let links: u64 = match t.kind {
        TopologyKind::Pair => 1,
        TopologyKind::Star => 2,
        TopologyKind::Dumbbell => 3,
        TopologyKind::FatTree => 6,
        // Half way round, and a host link at each end.
        TopologyKind::Ring => u64::from(t.hosts.unwrap_or(3) / 2) + 2,
        TopologyKind::KaryNtree => {
            let arity = t.k.unwrap_or(2);
            2 * u64::from(
                t.levels
                    .unwrap_or_else(|| kary_levels(arity, t.hosts.unwrap_or(1))),
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
