//! A schedule: a few faults, each "the n-th packet a rule's target
//! matches", written as the `[[fault]]` rules a scenario file already
//! takes, and one run of the real engine and fabric under them.

use std::collections::BTreeMap;

use toml::{Table, Value};
use udrma_fabric::Egress;
use udrma_faults::Direction;
use udrma_proto::{Flags, Opcode};
use udrma_scenarios::file::schema::FaultSpec;
use udrma_scenarios::{Plan, RunOptions, Scenario};

/// What a fault does to its packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Kind {
    /// Lost on the link.
    Drop,
    /// Sent twice.
    Duplicate,
    /// Held for `--delay` before it enters the link.
    Delay,
    /// One bit flipped (the receiver's ICRC check must catch it).
    Corrupt,
    /// Held until just after the next packet on the same link, in the
    /// same direction, entered it: the two swap.
    Reorder,
}

impl Kind {
    /// Its name on the command line and in rule names.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Drop => "drop",
            Kind::Duplicate => "duplicate",
            Kind::Delay => "delay",
            Kind::Corrupt => "corrupt",
            Kind::Reorder => "reorder",
        }
    }
}

/// The rule vocabulary's name of `op`, if it has one.
fn opcode_name(op: Option<Opcode>) -> Option<&'static str> {
    let op = op?;
    udrma_scenarios::plan::build::OPCODE_NAMES
        .iter()
        .find(|(_, o)| *o == op)
        .map(|(n, _)| *n)
}

/// Which packets a fault's rule counts: one link, one direction, and the
/// packet's opcode when the rule vocabulary can name it (otherwise every
/// packet crossing that way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Class {
    /// Link index.
    pub link: u32,
    /// True for `reverse` (b→a of link `a-b`).
    pub reverse: bool,
    /// The opcode the rule names (`None`: any).
    pub opcode: Option<&'static str>,
}

impl Class {
    /// The class a fault on `e` counts in.
    pub fn of(e: &Egress) -> Class {
        Class {
            link: e.link,
            reverse: e.direction == Direction::Reverse,
            opcode: opcode_name(e.opcode),
        }
    }

    /// Whether the rule of this class matches `e` (as the rule's own
    /// target test does: link, direction, opcode).
    pub fn matches(&self, e: &Egress) -> bool {
        e.link == self.link
            && (e.direction == Direction::Reverse) == self.reverse
            && (self.opcode.is_none() || opcode_name(e.opcode) == self.opcode)
    }
}

/// One fault: the `nth` (0-based) packet of `class`, and what happens
/// to it; with where it fell in the run that found it, for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// The packets its rule counts.
    pub class: Class,
    /// Which of them (0-based).
    pub nth: u64,
    /// What happens.
    pub kind: Kind,
    /// For `delay` and `reorder`: how long, in nanoseconds.
    pub delay_ns: u64,
    /// Its place in the run's egress log (every packet judged, in order).
    pub pos: usize,
    /// The packet, as the fault rules saw it.
    pub packet: Egress,
}

impl Fault {
    /// Its `[[fault]]` table; `i` numbers it in its schedule (the rule's
    /// name, which also names its random stream).
    pub fn table(&self, i: usize, link_names: &[String]) -> Table {
        let mut t = Table::new();
        let s = |v: &str| Value::String(v.to_string());
        t.insert(
            "name".into(),
            s(&format!("check-{}-{}", i + 1, self.kind.name())),
        );
        match self.kind {
            Kind::Drop => {
                t.insert("model".into(), s("loss"));
                t.insert("p".into(), Value::Float(1.0));
            }
            Kind::Duplicate => {
                t.insert("model".into(), s("duplicate"));
                t.insert("p".into(), Value::Float(1.0));
                t.insert("copies".into(), Value::Integer(1));
            }
            Kind::Delay | Kind::Reorder => {
                t.insert("model".into(), s("delay"));
                t.insert("delay".into(), s(&time(self.delay_ns)));
            }
            Kind::Corrupt => {
                t.insert("model".into(), s("corrupt"));
                t.insert("p".into(), Value::Float(1.0));
                t.insert("bits".into(), Value::Integer(1));
            }
        }
        let link = link_names
            .get(self.class.link as usize)
            .cloned()
            .unwrap_or_default();
        t.insert("links".into(), Value::Array(vec![Value::String(link)]));
        t.insert(
            "direction".into(),
            s(if self.class.reverse {
                "reverse"
            } else {
                "forward"
            }),
        );
        if let Some(op) = self.class.opcode {
            t.insert("opcodes".into(), Value::Array(vec![s(op)]));
        }
        t.insert("every".into(), Value::Integer(self.nth as i64 + 1));
        t.insert("offset".into(), Value::Integer(self.nth as i64));
        t.insert("times".into(), Value::Integer(1));
        t
    }

    /// One line for people: what, which packet, where, when.
    pub fn describe(&self, link_names: &[String]) -> String {
        let p = &self.packet;
        let link = link_names.get(p.link as usize).map_or("?", String::as_str);
        let what = match self.kind {
            Kind::Delay => format!("delay {} ns", self.delay_ns),
            Kind::Reorder => format!("reorder (hold {} ns, past the next)", self.delay_ns),
            k => k.name().to_string(),
        };
        let op = p.opcode.map_or_else(|| "?".to_string(), |o| o.to_string());
        let nth = self.nth + 1;
        let counted = self.class.opcode.unwrap_or("any");
        format!(
            "{what} the {nth}{} {counted} packet on {link} {} ({op} h{}→h{} msg {} seg {} flags {}) at {:.3} us",
            ordinal(nth),
            if self.class.reverse { "reverse" } else { "forward" },
            p.src.0,
            p.dst.0,
            p.msg,
            p.seg,
            flag_names(p.flags),
            p.t.as_ps() as f64 / 1e6,
        )
    }
}

/// `200us` or `1337ns`: a time the scenario file reads back exactly.
fn time(ns: u64) -> String {
    if ns % 1000 == 0 {
        format!("{}us", ns / 1000)
    } else {
        format!("{ns}ns")
    }
}

/// `st`, `nd`, `rd`, `th`.
fn ordinal(n: u64) -> &'static str {
    match (n % 10, n % 100) {
        (1, x) if x != 11 => "st",
        (2, x) if x != 12 => "nd",
        (3, x) if x != 13 => "rd",
        _ => "th",
    }
}

/// `FIRST|LAST`, or `-`.
fn flag_names(f: Flags) -> String {
    let names: Vec<&str> = Flags::NAMED
        .iter()
        .filter(|(flag, _)| f.contains(*flag))
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join("|")
    }
}

/// The faults of a schedule, in the order they struck.
pub type Schedule = Vec<Fault>;

/// What one run under a schedule showed.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Check name → passed (every check `udrma run` evaluates).
    pub checks: BTreeMap<String, bool>,
    /// The report's notes (why checks failed).
    pub notes: Vec<String>,
    /// The run's trace hash.
    pub trace_hash: String,
    /// Every packet presented to the fault rules, in judging order.
    pub egress: Vec<Egress>,
    /// With `Base::fingerprints`: before each event, the packets judged
    /// and the state's fingerprint (`None`: not asked, or a part of the
    /// state could not say).
    pub fingerprints: Option<Vec<(u32, u64, u128)>>,
}

impl Outcome {
    /// The checks that failed.
    pub fn failing(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The scenario a check explores (its own `[[fault]]` rules removed) and
/// what every run of it shares.
pub struct Base {
    /// The scenario without fault rules.
    pub scenario: Scenario,
    /// Its plan for `seed` in the simulated fabric, planned once: each
    /// run swaps in its own fault rules (`Plan::with_faults`).
    pub plan: Plan,
    /// Take state fingerprints (`--merge-states`).
    pub fingerprints: bool,
    /// The seed every run uses.
    pub seed: u64,
    /// Link names by index.
    pub link_names: Vec<String>,
}

impl Base {
    /// Runs the real engine and fabric under `faults` (the same path as
    /// `udrma run`: the scenario's plan, `udrma_scenarios::run_plan`).
    /// Fails on input the scenario crate refuses.
    pub fn run(&self, faults: &[Fault]) -> Result<Outcome, String> {
        self.run_with(faults, self.fingerprints)
    }

    /// [`Base::run`], with state fingerprints when `fingerprints` (from
    /// the packet after the last fault: the search reads no decision
    /// before it).
    pub fn run_with(&self, faults: &[Fault], fingerprints: bool) -> Result<Outcome, String> {
        let specs = faults
            .iter()
            .enumerate()
            .map(|(i, f)| {
                Value::Table(f.table(i, &self.link_names))
                    .try_into::<FaultSpec>()
                    .map_err(|e| format!("internal: fault rule {}: {e}", i + 1))
            })
            .collect::<Result<_, _>>()?;
        let plan = self.plan.with_faults(specs).map_err(|e| e.to_string())?;
        let report = udrma_scenarios::run_plan(
            &plan,
            RunOptions {
                egress_log: true,
                fingerprints: fingerprints.then(|| faults.last().map_or(0, |f| f.pos as u32 + 1)),
                ..RunOptions::default()
            },
        )
        .map_err(|e| e.to_string())?;
        let egress = report.egress.ok_or_else(|| {
            format!(
                "{}: udrma check needs the egress log of one simulated world, which this scenario's runner does not keep",
                self.scenario.path
            )
        })?;
        Ok(Outcome {
            checks: report.checks,
            notes: report.notes,
            trace_hash: report.trace_hash,
            egress,
            fingerprints: report
                .fingerprints
                .and_then(|f| f.refused.is_none().then_some(f.taken)),
        })
    }
}
