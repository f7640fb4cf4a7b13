//! Hardware profiles and what they set: the link's defaults, the cost
//! model and the NIC's limits (a scenario's `profile =` and `[cost]`).

use serde::Deserialize;
use udrma_nic::CostModel;
use udrma_proto::Duration;

use crate::file::schema::CostSpec;
use crate::file::source::Locate;
use crate::file::units::{Rate, Time};
use crate::ScenarioError;

/// The shipped profiles, by name.
pub const PROFILES: [(&str, &str); 5] = [
    ("ideal", include_str!("../../profiles/ideal.toml")),
    (
        "myrinet-lanai9",
        include_str!("../../profiles/myrinet-lanai9.toml"),
    ),
    ("roce-100g", include_str!("../../profiles/roce-100g.toml")),
    ("tianhe-nic", include_str!("../../profiles/tianhe-nic.toml")),
    (
        "connectx5-roce",
        include_str!("../../profiles/connectx5-roce.toml"),
    ),
];

/// A profile file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Its name.
    pub name: String,
    /// What it models, with sources.
    #[serde(default)]
    pub description: String,
    /// Link defaults.
    #[serde(default)]
    pub link: ProfileLink,
    /// Costs.
    #[serde(default)]
    pub cost: CostSpec,
    /// Largest payload per packet.
    pub mtu_payload: Option<crate::file::units::Size>,
    /// NIC limits.
    #[serde(default)]
    pub nic: ProfileNic,
}

/// A profile's NIC limits (`[nic]` in a profile file).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileNic {
    /// Most scatter-gather entries per work request.
    pub max_sge: Option<usize>,
    /// Translation cache sets.
    pub translation_sets: Option<u32>,
    /// Translation cache lines per set.
    pub translation_ways: Option<u32>,
    /// Translation table entries per cache line.
    pub translation_entries_per_line: Option<u32>,
    /// Bytes of reduce data one descriptor carries.
    pub reduce_data_limit: Option<crate::file::units::Size>,
}

/// A profile's link defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileLink {
    /// Line rate.
    pub bandwidth: Option<Rate>,
    /// Propagation (and switch) latency.
    pub latency: Option<Time>,
}

/// The hardware the file names: its profile, if any, and the cost model
/// (the profile's, under the file's `[cost]`).
pub fn hardware(
    name: Option<&String>,
    cost: &CostSpec,
    at: &dyn Locate,
) -> Result<(Option<Profile>, CostModel), ScenarioError> {
    let profile = profile(name, at)?;
    let cost = cost_model(cost, profile.as_ref());
    Ok((profile, cost))
}

/// The hardware profile named `name`, if any.
fn profile(name: Option<&String>, at: &dyn Locate) -> Result<Option<Profile>, ScenarioError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let Some((_, text)) = PROFILES.iter().find(|(n, _)| n == name) else {
        let names: Vec<&str> = PROFILES.iter().map(|(n, _)| *n).collect();
        let hint = udrma_faults::closest(name, &names)
            .map(|b| format!(" (did you mean {b:?}?)"))
            .unwrap_or_default();
        return Err(at.error_at(
            name,
            format!(
                "profile {name:?} does not exist; expected one of {}{hint}",
                names.join(", ")
            ),
        ));
    };
    toml::from_str(text)
        .map(Some)
        .map_err(|e| at.error_at(name, format!("profile {name:?} is broken: {e}")))
}

fn ps_per_byte(r: Option<Rate>) -> Option<u64> {
    // 8 bits per byte, 10^12 ps per second.
    r.map(|r| (8_000_000_000_000u128 / u128::from(r.0.max(1))) as u64)
}

/// The cost model: the profile's, with the scenario's `[cost]` (`o`) on
/// top.
pub fn cost_model(o: &CostSpec, profile: Option<&Profile>) -> CostModel {
    let base = profile.map(|p| p.cost.clone()).unwrap_or_default();
    let t = |a: Option<Time>, b: Option<Time>| a.or(b).map_or(Duration::ZERO, |t| t.0);
    CostModel {
        doorbell: t(o.doorbell, base.doorbell),
        descriptor_fetch: t(o.descriptor_fetch, base.descriptor_fetch),
        per_sge: t(o.per_sge, base.per_sge),
        dma_setup: t(o.dma_setup, base.dma_setup),
        dma_ps_per_byte: ps_per_byte(o.dma_bandwidth.or(base.dma_bandwidth)).unwrap_or(0),
        nic_per_packet: t(o.nic_per_packet, base.nic_per_packet),
        host_copy_ps_per_byte: ps_per_byte(o.host_copy_bandwidth.or(base.host_copy_bandwidth))
            .unwrap_or(0),
        interrupt: t(o.interrupt, base.interrupt),
        host_copy_per_block: t(o.host_copy_per_block, base.host_copy_per_block),
        host_reduce_ps_per_byte: ps_per_byte(
            o.host_reduce_bandwidth.or(base.host_reduce_bandwidth),
        )
        .unwrap_or(0),
        translate_hit: t(o.translate_hit, base.translate_hit),
        translate_miss: t(o.translate_miss, base.translate_miss),
        translate_search: t(o.translate_search, base.translate_search),
        key_create: t(o.key_create, base.key_create),
        recv_fetch: t(o.recv_fetch, base.recv_fetch),
        reduce_trigger: t(o.reduce_trigger, base.reduce_trigger),
        alu_per_operand: t(o.alu_per_operand, base.alu_per_operand),
        aead_per_packet: t(o.aead_per_packet, base.aead_per_packet),
        aead_ps_per_byte: ps_per_byte(o.aead_bandwidth.or(base.aead_bandwidth)).unwrap_or(0),
    }
}
