//! One pass from a parsed scenario to what a run needs.
//!
//! [`resolve`] builds, for one seed, the pieces validation checks and
//! every run takes: the hardware profile (its TOML parsed once), the
//! topology, the NIC configuration (whose timer floors depend on the
//! topology's paths), what the simulated world is built from (the fabric
//! configuration, the fault rules with their seeded streams, the pauses,
//! the lossless configuration, the event order) and the messaging
//! layer's configuration. [`plan`] adds, for one backend, every workload
//! planned by its family's planner and what the runner reads from the
//! file (name, checks, outputs, time limit, host link, congestion
//! controller, topology kind, workload kinds, and the `[[fault]]` tables
//! as data, from which a udp run seeds one rule set per host): the
//! [`Plan`] that runners, split runs and `udrma host` take. They never
//! read the parsed file; errors they find are located in its text by
//! the plan's [`Locator`].

use std::sync::Arc;

use udrma_fabric::{FabricConfig, PfcConfig, Policy, Topology};
use udrma_faults::{HostPause, RuleSet};
use udrma_host::workload::msg::MsgWorkload;
use udrma_host::workload::rdma::RdmaPlan;
use udrma_nic::NicConfig;
use udrma_proto::Duration;

use crate::file::schema::{
    ChecksSpec, FaultSpec, OrderKind, OutputsSpec, RoutingKind, SecuritySpec, TopologyKind,
    TopologySpec, WorkloadKind,
};
use crate::file::source::{Locate, Locator};
use crate::plan::build::{self, MsgSetup};
use crate::plan::profile::{self, Profile};
use crate::plan::{collplan, messaging, ncplan, rdma};
use crate::{Scenario, ScenarioError};

/// A scenario resolved for one seed, each piece built once.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The seed everything seeded below draws from.
    pub seed: u64,
    /// The hardware profile the file names, if any.
    pub profile: Option<Profile>,
    /// The topology, with the profile's link under the file's values.
    pub topology: Topology,
    /// The NIC configuration every host starts with.
    pub nic: NicConfig,
    /// The simulated fabric's configuration (routing, the NICs, phantom
    /// payloads, sealing), for `seed`.
    pub fabric: FabricConfig,
    /// The fault rules, their streams seeded from `seed` (link names not
    /// yet resolved: the world resolves them against its topology).
    pub rules: RuleSet,
    /// The host pauses.
    pub pauses: Vec<HostPause>,
    /// The lossless configuration (`None`: a lossy fabric).
    pub pfc: Option<PfcConfig>,
    /// Whether the world runs in lookahead windows (`order = "windows"`).
    pub windows: bool,
    /// The messaging layer's configuration (messaging workloads and the
    /// collective's host baseline run messengers).
    pub msg: MsgSetup,
}

impl Resolved {
    /// How many hosts the topology has.
    pub fn n_hosts(&self) -> usize {
        self.topology.n_hosts()
    }

    /// The simulated fabric: topology, NICs, fault rules, pauses, the
    /// lossless configuration and the event order (errors located by
    /// `at`).
    pub fn world(&self, at: &dyn Locate) -> Result<udrma_fabric::World, ScenarioError> {
        let mut world = udrma_fabric::World::new(
            self.topology.clone(),
            self.fabric.clone(),
            self.rules.clone(),
        )
        .map_err(|e| at.error_at("fault", e.to_string()))?;
        if self.windows {
            world
                .set_event_order(udrma_fabric::EventOrder::Windows)
                .map_err(|e| at.error_at_key("order", format!("order = \"windows\": {e}")))?;
        }
        if let Some(cfg) = self.pfc {
            // Checked against this topology and event order by `resolve`.
            world
                .set_pfc(cfg)
                .map_err(|e| at.error_at_key("pfc", format!("topology.pfc: {e}")))?;
        }
        for p in &self.pauses {
            world
                .pause(*p)
                .map_err(|e| at.error_at("pause", e.to_string()))?;
        }
        Ok(world)
    }
}

/// Resolves `sc` for `seed`: each piece built once, each error located.
/// Each builder is handed only the tables it reads and a [`Locator`]
/// (the file's name and text, for errors), never the whole scenario.
pub fn resolve(sc: &Scenario, seed: u64) -> Result<Resolved, ScenarioError> {
    let f = &sc.file;
    let at = sc.locator();
    if f.time_limit.0 == Duration::ZERO {
        return Err(at.error_at_key(
            "time_limit",
            "time_limit = 0 lets nothing run: give the time the run may take (the default is 100ms)".into(),
        ));
    }
    let (profile, cost) = profile::hardware(f.profile.as_ref(), &f.cost, &at)?;
    let (topology, pfc) = build::shape(&f.topology, &at, profile.as_ref())?;
    let keys = build::NicKeys {
        nic: &f.nic,
        topology: &f.topology,
        at: &at,
    };
    let nic = build::nic_config(&keys, profile.as_ref(), &cost, &topology)?;
    let fabric = fabric_config(&f.topology, &f.security, &at, seed, &nic)?;
    let (rules, pauses) = build::fault_plan(&f.faults, &f.pauses, &at, seed, &topology)?;
    let msg = build::msg_setup(&f.messaging, &f.faults, &at, seed, topology.n_hosts())?;
    Ok(Resolved {
        msg,
        seed,
        fabric,
        rules,
        pauses,
        pfc,
        windows: sc.file.topology.order == OrderKind::Windows,
        profile,
        topology,
        nic,
    })
}

/// The fabric configuration for `seed`, with NICs configured as `nic`:
/// the routing and phantom payloads of `[topology]` (`t`), the seal of
/// `[security]`.
fn fabric_config(
    t: &TopologySpec,
    security: &SecuritySpec,
    at: &dyn Locate,
    seed: u64,
    nic: &NicConfig,
) -> Result<FabricConfig, ScenarioError> {
    Ok(FabricConfig {
        seed,
        routing: match t.routing {
            RoutingKind::Shortest => Policy::ShortestPath,
            RoutingKind::Ecmp => Policy::Ecmp,
            RoutingKind::Spray => Policy::Spray,
        },
        nic: nic.clone(),
        phantom_payload: t.phantom,
        seal_bytes: match security.mode.as_deref() {
            None | Some("none") => 0,
            Some("aead") => udrma_proto::secure::OVERHEAD as u64,
            Some(other) => {
                return Err(at.error_at_key(
                    "mode",
                    format!("security.mode = {other:?}: expected \"none\" or \"aead\""),
                ))
            }
        },
    })
}

/// Where the packets go.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// The simulated fabric: virtual time, deterministic, every feature.
    #[default]
    Sim,
    /// One UDP socket per host on loopback, in real time, with the
    /// scenario's fault rules applied to what each host sends.
    Udp,
}

/// The shortest time limit a real-time run gets: a scenario's limit is
/// sized for virtual time, where nothing waits for a scheduler.
pub const UDP_MIN_TIME_LIMIT: Duration = Duration::from_millis(10_000);

/// The workloads, planned by their family's planner (a scenario's
/// workloads are of one family).
#[derive(Debug, Clone)]
pub enum Work {
    /// Every RDMA operation: who posts it, when, where its bytes live.
    Rdma(Arc<RdmaPlan>),
    /// The messaging loops (`msg-*`).
    Messaging(Vec<MsgWorkload>),
    /// The non-contiguous ping-pong.
    Noncontig(ncplan::Planned),
    /// The collective study.
    Collective(collplan::Planned),
    /// A collective by one of MPI's algorithms.
    Scheduled(Arc<udrma_host::collective::scheduled::ScheduledPlan>),
}

/// Everything one run of a scenario needs, for one seed and one backend.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The pieces resolution builds. On the udp backend its NIC
    /// configuration has real-time floors ([`real_time_floors`]).
    pub resolved: Resolved,
    /// The backend this plan is for.
    pub backend: BackendKind,
    /// The file's name and text, to locate a run's errors.
    pub at: Locator,
    /// The scenario's name (shown in reports).
    pub name: String,
    /// When the run stops: the file's, raised to
    /// [`UDP_MIN_TIME_LIMIT`] on the udp backend.
    pub time_limit: Duration,
    /// The checks the file skips, and whether it expects failures.
    pub checks: ChecksSpec,
    /// The files the run writes.
    pub outputs: OutputsSpec,
    /// The congestion controller's name (`none` for none).
    pub cc: String,
    /// A host's link rate (bit/s) and latency: the simulated topology's
    /// host link, or over real sockets the file's (100 Gb/s and 1 µs by
    /// default). Flow arrivals and ideal flow times are read against it.
    pub host_link: (u64, Duration),
    /// The topology's kind.
    pub topology_kind: TopologyKind,
    /// The fault rules as the file gives them (a udp run seeds one set
    /// per host from them).
    pub faults: Vec<FaultSpec>,
    /// Each workload's kind, in file order.
    pub kinds: Vec<WorkloadKind>,
    /// The workloads, planned.
    pub work: Work,
}

impl Plan {
    /// The seed everything seeded draws from.
    pub fn seed(&self) -> u64 {
        self.resolved.seed
    }

    /// This plan with `faults` for its `[[fault]]` tables: the rules
    /// rebuilt from them for the plan's seed (their links checked against
    /// its topology), and nothing else planned again. A search that
    /// tries many fault plans on one scenario (`udrma check`) plans the
    /// scenario once and swaps its rules. Packet faults only: a
    /// `registration-failure` fault acts in the messaging layer's
    /// configuration, which this does not rebuild, and is refused.
    pub fn with_faults(&self, faults: Vec<FaultSpec>) -> Result<Plan, ScenarioError> {
        if let Some(f) = faults
            .iter()
            .find(|f| f.model == crate::file::schema::ModelKind::RegistrationFailure)
        {
            return Err(self.at.error(format!(
                "fault {:?}: a registration-failure fault changes the messaging layer's configuration; plan the scenario with it instead",
                f.name.as_deref().unwrap_or("")
            )));
        }
        let topo = &self.resolved.topology;
        let rules = build::rules(&self.at, &faults, self.seed(), topo.n_hosts())?;
        build::check_links(&self.at, &rules, topo)?;
        let mut plan = self.clone();
        plan.resolved.rules = rules;
        plan.faults = faults;
        Ok(plan)
    }
}

/// Plans one run of `sc` with `seed` on `backend`: resolution, then the
/// workloads by their family's planner, then what the runner reads.
pub fn plan(sc: &Scenario, seed: u64, backend: BackendKind) -> Result<Plan, ScenarioError> {
    let mut resolved = resolve(sc, seed)?;
    let n = resolved.n_hosts();
    let f = &sc.file;
    let host_link = match backend {
        BackendKind::Sim => topology_host_link(&resolved),
        BackendKind::Udp => None,
    }
    .unwrap_or((
        f.topology.bandwidth.map_or(100_000_000_000, |r| r.0),
        f.topology.latency.map_or(Duration::from_micros(1), |l| l.0),
    ));
    let has = |k: WorkloadKind| f.workloads.iter().any(|w| w.kind == k);
    let work = if has(WorkloadKind::Noncontig) {
        Work::Noncontig(ncplan::plan(sc, &resolved.nic, &resolved.topology)?)
    } else if f.workloads.iter().any(|w| w.is_scheduled()) {
        Work::Scheduled(Arc::new(super::schedplan::plan(sc, seed, n)?))
    } else if has(WorkloadKind::Collective) {
        Work::Collective(collplan::plan(sc, seed, n)?)
    } else if f.workloads.iter().any(|w| w.kind.is_messaging()) {
        Work::Messaging(messaging::workloads(sc, seed, n)?)
    } else {
        Work::Rdma(Arc::new(rdma::plan(sc, seed, n, host_link.0)?))
    };
    let mut time_limit = f.time_limit.0;
    if backend == BackendKind::Udp {
        resolved.nic = real_time_floors(resolved.nic);
        time_limit = time_limit.max(UDP_MIN_TIME_LIMIT);
    }
    Ok(Plan {
        resolved,
        backend,
        at: sc.locator(),
        name: f.name.clone(),
        time_limit,
        checks: f.checks.clone(),
        outputs: f.outputs.clone(),
        cc: f.nic.cc.clone().unwrap_or_else(|| "none".to_string()),
        host_link,
        topology_kind: f.topology.kind,
        faults: f.faults.clone(),
        kinds: f.workloads.iter().map(|w| w.kind).collect(),
        work,
    })
}

/// The rate and latency of host 0's link in the simulated topology.
fn topology_host_link(r: &Resolved) -> Option<(u64, Duration)> {
    let t = &r.topology;
    let h = *t.hosts.first()?;
    let p = *t.nodes[h as usize].ports.first()?;
    let l = &t.links[t.ports[p as usize].link as usize];
    Some((l.params.bandwidth_bps, l.params.latency))
}

/// A NIC configuration with timers no finer than a real-time driver can
/// keep (tokio's timers have millisecond resolution, and a loopback
/// round trip under load takes tens of microseconds to milliseconds).
pub fn real_time_floors(mut nic: NicConfig) -> NicConfig {
    let at_least = |d: &mut Duration, min: Duration| *d = (*d).max(min);
    at_least(&mut nic.rto_initial, Duration::from_millis(20));
    at_least(&mut nic.rto_min, Duration::from_millis(2));
    at_least(&mut nic.rto_max, Duration::from_millis(500));
    at_least(&mut nic.rnr_delay, Duration::from_millis(1));
    at_least(&mut nic.escape_timeout, Duration::from_millis(20));
    at_least(&mut nic.registry_timeout, Duration::from_millis(2000));
    nic.max_retries = nic.max_retries.max(16);
    nic
}
