//! The messaging layer's configuration a scenario asks for (`[messaging]`
//! and the `registration-failure` faults), for every host; checked
//! against the NIC its messenger drives.

use udrma_host::messaging::MsgConfig;
use udrma_nic::NicConfig;
use udrma_proto::{Duration, Instant, NodeAddr, Protocol};

use crate::file::schema::{FaultSpec, MessagingSpec, ModelKind};
use crate::file::source::Locate;
use crate::ScenarioError;

/// The messaging layer's configuration as the file gives it: one for
/// every host, but for the `registration-failure` faults that name
/// hosts ([`MsgSetup::config`] picks a host's).
#[derive(Debug, Clone)]
pub struct MsgSetup {
    /// Every host's configuration before the registration faults.
    base: MsgConfig,
    /// The `registration-failure` faults, in file order.
    failures: Vec<RegistrationFault>,
}

impl MsgSetup {
    /// Every host's configuration before the registration faults.
    pub fn base(&self) -> &MsgConfig {
        &self.base
    }
}

/// A `registration-failure` fault: the hosts it names (none: every
/// host), its probability, and its window.
#[derive(Debug, Clone)]
struct RegistrationFault {
    hosts: Vec<NodeAddr>,
    p: f64,
    window: Option<(Instant, Instant)>,
}

impl MsgSetup {
    /// Host `h`'s configuration: the last registration fault that
    /// names it sets the probability; the last of those with a window
    /// sets the window.
    pub fn config(&self, h: NodeAddr) -> MsgConfig {
        let mut cfg = self.base.clone();
        for f in &self.failures {
            if f.hosts.is_empty() || f.hosts.contains(&h) {
                cfg.registration_failure = f.p;
                if f.window.is_some() {
                    cfg.registration_failure_window = f.window;
                }
            }
        }
        cfg
    }
}

/// The messaging layer's configuration for `n` hosts from `[messaging]`
/// and the registration faults among `faults`, seeded with `seed`
/// (checked against a NIC by [`msg_checked`]); errors located by `at`.
pub fn msg_setup(
    m: &MessagingSpec,
    faults: &[FaultSpec],
    at: &dyn Locate,
    seed: u64,
    n: usize,
) -> Result<MsgSetup, ScenarioError> {
    let d = MsgConfig::default();
    let small = |v: Option<crate::file::units::Size>, d: u32, key: &str| {
        v.map_or(Ok(d), |s| {
            u32::try_from(s.0)
                .map_err(|_| at.error_at_key(key, format!("messaging.{key} is too large")))
        })
    };
    let rendezvous = match m.rendezvous.as_deref() {
        None => d.rendezvous,
        Some("r3") => Protocol::R3,
        Some("rget") => Protocol::Rget,
        Some("rput") => Protocol::Rput,
        Some(other) => {
            return Err(at.error_at(
                other,
                format!("messaging.rendezvous = {other:?}: expected r3, rget or rput"),
            ))
        }
    };
    let registration_failure = match m.registration.as_deref() {
        None | Some("ok") => 0.0,
        Some("fail") => 1.0,
        Some(other) => {
            return Err(at.error_at(
                other,
                format!("messaging.registration = {other:?}: expected ok or fail"),
            ))
        }
    };
    let mut failures = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        if f.model != ModelKind::RegistrationFailure {
            continue;
        }
        let name = f.name.clone().unwrap_or_else(|| format!("fault{i}"));
        let who = format!("fault {name:?}");
        let hosts = f
            .src
            .iter()
            .map(|x| at.host(x, n, &who))
            .collect::<Result<Vec<_>, _>>()?;
        let p = f.p.ok_or_else(|| {
            at.error_at(
                &name,
                format!("{who}: model registration-failure needs `p`"),
            )
        })?;
        if !(0.0..=1.0).contains(&p) {
            return Err(at.error_at(&name, format!("{who}: p = {p} is not a probability")));
        }
        let window = (f.from.is_some() || f.until.is_some()).then(|| {
            (
                Instant::ZERO + f.from.map_or(Duration::ZERO, |t| t.0),
                f.until.map_or(Instant(u64::MAX), |t| Instant::ZERO + t.0),
            )
        });
        failures.push(RegistrationFault { hosts, p, window });
    }
    let base = MsgConfig {
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
        registration_failure_window: None,
        seed,
    };
    Ok(MsgSetup { base, failures })
}

/// `cfg`, checked against the NIC `nic` its messenger drives; an error
/// is located by `at` at the key the file sets, else at `[messaging]`.
pub fn msg_checked(
    at: &dyn Locate,
    cfg: MsgConfig,
    nic: &NicConfig,
) -> Result<MsgConfig, ScenarioError> {
    cfg.validate(nic).map_err(|e| {
        // At the key when the file gives it, else at the table (the value
        // is a default's), never at a comment that mentions messaging.
        let udrma_host::messaging::MsgConfigError::Field { field, .. } = &e;
        // The messaging layer names the NIC's fields as the engine spells
        // them; a scenario file spells them in [nic].
        let message = format!("[messaging] {e}").replace("recv_queue_capacity", "[nic] recv_queue");
        let at_key = at.error_at_key(field, message.clone());
        if at_key.at.is_some() {
            at_key
        } else {
            at.error_at("[messaging]", message)
        }
    })?;
    Ok(cfg)
}
