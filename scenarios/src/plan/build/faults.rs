//! The fault rules and host pauses a scenario asks for: each `[[fault]]`
//! as a rule of the fault-injection crate, each `[[pause]]` as a host
//! pause; every value checked, every error located.

use udrma_faults::{Direction, HostPause, Jitter, Model, Rule, RuleSet, Target};
use udrma_proto::{Duration, Flags, Instant, NodeAddr, Opcode};

use crate::file::schema::{FaultSpec, ModelKind, PauseSpec};
use crate::file::source::Locate;
use crate::ScenarioError;

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

fn opcode(sc: &dyn Locate, name: &str) -> Result<Opcode, ScenarioError> {
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

fn flag(sc: &dyn Locate, name: &str) -> Result<Flags, ScenarioError> {
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

/// The fault plan for `seed`: the rules of `faults` (their links checked
/// against `topology`; the world resolves its own copy) and the host
/// `pauses`, each error located by `at`.
pub fn fault_plan(
    faults: &[FaultSpec],
    pauses: &[PauseSpec],
    at: &dyn Locate,
    seed: u64,
    topology: &udrma_fabric::Topology,
) -> Result<(RuleSet, Vec<HostPause>), ScenarioError> {
    let n = topology.n_hosts();
    let rules = rules(at, faults, seed, n)?;
    check_links(at, &rules, topology)?;
    Ok((rules, host_pauses(pauses, at, n)?))
}

/// Checks that every link `rules` name is a link of `topology` (the
/// world resolves its own copy).
pub fn check_links(
    sc: &dyn Locate,
    rules: &RuleSet,
    topology: &udrma_fabric::Topology,
) -> Result<(), ScenarioError> {
    let names = topology.link_names();
    rules
        .clone()
        .resolve(|l| topology.link_by_name(l), &names)
        .map_err(|e| match &e {
            udrma_faults::FaultError::UnknownLink { link, .. } => sc.error_at(link, e.to_string()),
            _ => sc.error_at("fault", e.to_string()),
        })?;
    Ok(())
}

/// Builds the rules of `faults` for `seed` (names resolved to links by
/// the world), each error located by `sc`.
pub fn rules(
    sc: &dyn Locate,
    faults: &[FaultSpec],
    seed: u64,
    n_hosts: usize,
) -> Result<RuleSet, ScenarioError> {
    let mut set = RuleSet::new();
    for (i, f) in faults.iter().enumerate() {
        let name = f.name.clone().unwrap_or_else(|| format!("fault{i}"));
        let Some(model) = model(sc, f, &name, n_hosts)? else {
            continue;
        };
        let target = target(sc, f, &name, n_hosts)?;
        let rule =
            Rule::new(seed, &name, target, model).map_err(|e| rule_error(sc, i, &name, e))?;
        set.push(rule);
    }
    Ok(set)
}

/// A rule the fault model refused, at the key it names when the file
/// sets that key in fault `i` (`p = 7`, `gap = 0`), else at the rule's
/// name.
fn rule_error(sc: &dyn Locate, i: usize, name: &str, e: udrma_faults::FaultError) -> ScenarioError {
    use udrma_faults::FaultError;
    let key = match &e {
        FaultError::Probability { field, .. } => Some(field.to_string()),
        // "gap must be at least 1", "copies must be 1..=64", ...
        FaultError::Invalid { what, .. } => what.split_whitespace().next().map(str::to_string),
        _ => None,
    };
    let at = key
        .filter(|k| sc.text().contains(k.as_str()))
        .and_then(|k| crate::file::edit::locate(sc.text(), &format!("fault.{i}.{k}")));
    match at {
        Some(at) => ScenarioError {
            file: sc.path().to_string(),
            at: Some(at),
            message: e.to_string(),
        },
        None => sc.error_at(name, e.to_string()),
    }
}

/// What fault `f` (named `name`) does to a packet it strikes; `None` for
/// a model that is not a packet fault (the messaging layer applies it).
fn model(
    sc: &dyn Locate,
    f: &FaultSpec,
    name: &str,
    n_hosts: usize,
) -> Result<Option<Model>, ScenarioError> {
    let model_name = f.model.name();
    let need = |what: &str| {
        sc.error_at(
            name,
            format!("fault {name:?}: model {model_name} needs `{what}`"),
        )
    };
    let p = || f.p.ok_or_else(|| need("p"));
    Ok(Some(match f.model {
        // Not a packet fault: the messaging layer applies it.
        ModelKind::RegistrationFailure => return Ok(None),
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
            // An empty side would cut nothing, silently.
            for (key, side) in [("a", &f.a), ("b", &f.b)] {
                if side.is_empty() {
                    return Err(need(key));
                }
            }
            let side = |names: &[String]| -> Result<Vec<NodeAddr>, ScenarioError> {
                names.iter().map(|h| sc.host(h, n_hosts, &format!("fault {name:?}"))).collect()
            };
            Model::Partition {
                a: side(&f.a)?,
                b: side(&f.b)?,
                two_way: f.two_way,
            }
        }
    }))
}

/// Which packets fault `f` (named `name`) strikes: links, direction,
/// hosts, opcodes, flags, time window and which of them.
fn target(
    sc: &dyn Locate,
    f: &FaultSpec,
    name: &str,
    n_hosts: usize,
) -> Result<Target, ScenarioError> {
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
        .map(|h| sc.host(h, n_hosts, &who))
        .collect::<Result<_, _>>()?;
    target.dst = f
        .dst
        .iter()
        .map(|h| sc.host(h, n_hosts, &who))
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
    Ok(target)
}

/// The host pauses.
fn host_pauses(
    pauses: &[PauseSpec],
    at: &dyn Locate,
    n_hosts: usize,
) -> Result<Vec<HostPause>, ScenarioError> {
    pauses
        .iter()
        .map(|p| {
            let h = at.host(&p.host, n_hosts, "pause")?;
            if p.until.0 <= p.from.0 {
                return Err(at.error_at(
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
