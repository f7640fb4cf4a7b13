//! One pass from a parsed scenario to the pieces every runner takes: the
//! hardware profile (its TOML parsed once), the topology, and the NIC
//! configuration (whose timer floors depend on the topology's paths).
//! Validation and each run resolve a scenario once and hand the result
//! down, so no runner rebuilds a piece from the file.

use udrma_fabric::Topology;
use udrma_nic::NicConfig;

use crate::plan::build;
use crate::plan::profile::{self, Profile};
use crate::{Scenario, ScenarioError};

/// A scenario's profile, topology and NIC configuration, built once.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The hardware profile the file names, if any.
    pub profile: Option<Profile>,
    /// The topology, with the profile's link under the file's values.
    pub topology: Topology,
    /// The NIC configuration every host starts with.
    pub nic: NicConfig,
}

impl Resolved {
    /// How many hosts the topology has.
    pub fn n_hosts(&self) -> usize {
        self.topology.n_hosts()
    }
}

/// Resolves `sc`: each piece built once, each error located.
pub fn resolve(sc: &Scenario) -> Result<Resolved, ScenarioError> {
    let profile = profile::profile(sc)?;
    let topology = build::topology(sc, profile.as_ref())?;
    if let Some(cfg) = build::pfc_config(sc)? {
        build::check_pfc(sc, &cfg, &topology)?;
    }
    let nic = build::nic_config(sc, profile.as_ref(), &topology)?;
    Ok(Resolved {
        profile,
        topology,
        nic,
    })
}
