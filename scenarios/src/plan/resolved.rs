//! One pass from a parsed scenario, for one seed, to the pieces every
//! runner takes: the hardware profile (its TOML parsed once), the
//! topology, the NIC configuration (whose timer floors depend on the
//! topology's paths), and what the simulated world is built from (the
//! fabric configuration, the fault rules with their seeded streams, the
//! pauses, the lossless configuration, the event order). Validation and
//! each run resolve a scenario once and hand the result down, so no
//! runner rebuilds a piece from the file.

use udrma_fabric::{FabricConfig, PfcConfig, Policy, Topology};
use udrma_faults::{HostPause, RuleSet};
use udrma_nic::NicConfig;

use crate::file::schema::{OrderKind, RoutingKind};

use crate::plan::build;
use crate::plan::profile::{self, Profile};
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
}

impl Resolved {
    /// How many hosts the topology has.
    pub fn n_hosts(&self) -> usize {
        self.topology.n_hosts()
    }
}

/// Resolves `sc` for `seed`: each piece built once, each error located.
pub fn resolve(sc: &Scenario, seed: u64) -> Result<Resolved, ScenarioError> {
    let (profile, cost) = profile::hardware(sc)?;
    let (topology, pfc) = build::shape(sc, profile.as_ref())?;
    let nic = build::nic_config(sc, profile.as_ref(), &cost, &topology)?;
    let fabric = fabric_config(sc, seed, &nic)?;
    let (rules, pauses) = build::fault_plan(sc, seed, &topology)?;
    Ok(Resolved {
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

/// The fabric configuration for `seed`, with NICs configured as `nic`.
fn fabric_config(sc: &Scenario, seed: u64, nic: &NicConfig) -> Result<FabricConfig, ScenarioError> {
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
