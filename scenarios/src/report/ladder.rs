//! Ladder (sequence) diagrams of the packets between two hosts, from the
//! fabric's journal of their journeys.

use std::collections::BTreeMap;

use udrma_fabric::World;
use udrma_proto::{Duration, Instant, NodeAddr};

/// What a ladder diagram shows: the packets between two hosts, sent in a
/// time window, at most `max` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ladder {
    /// The left host (`h0`).
    pub left: String,
    /// The right host.
    pub right: String,
    /// Packets sent at or after this time.
    pub from: Duration,
    /// Packets sent before this time (none: to the end).
    pub until: Option<Duration>,
    /// At most this many packets (the first ones in the window).
    pub max: usize,
}

impl Ladder {
    /// The default number of packets drawn.
    pub const DEFAULT_MAX: usize = 400;

    /// The packets between `left` and `right`, from the start, at most
    /// [`Ladder::DEFAULT_MAX`].
    pub fn between(left: &str, right: &str) -> Ladder {
        Ladder {
            left: left.to_string(),
            right: right.to_string(),
            from: Duration::ZERO,
            until: None,
            max: Ladder::DEFAULT_MAX,
        }
    }
}

/// The ladder diagram of the packets between `a` and `b`.
pub(crate) fn draw(
    world: &World,
    a: NodeAddr,
    b: NodeAddr,
    spec: &Ladder,
    first_only: bool,
    name: &str,
) -> String {
    use crate::report::svg::{Arrow, Mark};
    use udrma_proto::{Flags, Opcode};
    let journeys = world.journeys();
    let from = Instant::ZERO + spec.from;
    let until = spec.until.map(|u| Instant::ZERO + u);
    let in_window = |t: Instant| t >= from && until.is_none_or(|u| t < u);
    let shown_total = journeys.iter().filter(|j| in_window(j.sent)).count();
    // When each operation's FIRST packet reached its receiver.
    let mut first_arrival: BTreeMap<(NodeAddr, u32), u64> = BTreeMap::new();
    for j in journeys {
        let op = Opcode::from(j.opcode);
        if matches!(op, Opcode::Write | Opcode::Send)
            && Flags(j.flags).contains(Flags::FIRST)
            && !j.corrupted
        {
            if let Some(t) = j.arrived {
                let e = first_arrival.entry((j.src, j.msg)).or_insert(t.as_ps());
                *e = (*e).min(t.as_ps());
            }
        }
    }
    let arrows: Vec<Arrow> = journeys
        .iter()
        .filter(|j| in_window(j.sent))
        .take(spec.max)
        .map(|j| {
            let flags = Flags(j.flags);
            let op = Opcode::from(j.opcode);
            let mark = if j.copy_of.is_some() {
                Mark::Duplicate
            } else if j.dropped.is_some() {
                Mark::Dropped
            } else if j.corrupted {
                Mark::Corrupted
            } else if flags.contains(Flags::RETRANSMIT) {
                Mark::Retransmit
            } else {
                Mark::Normal
            };
            let end = j
                .arrived
                .or(j.dropped.map(|(t, _)| t))
                .unwrap_or(j.sent)
                .as_ps();
            let data = matches!(op, Opcode::Write | Opcode::Send)
                && !flags.contains(Flags::FIRST)
                && !j.corrupted;
            let held_until = match (j.arrived, first_arrival.get(&(j.src, j.msg))) {
                (Some(t), Some(first)) if first_only && data && t.as_ps() < *first => Some(*first),
                _ => None,
            };
            Arrow {
                rightward: j.src == a,
                sent: j.sent.as_ps(),
                end,
                label: format!("{} msg {} seg {}", op.kind_name(flags), j.msg, j.seg),
                mark,
                held_until,
                msg: j.msg,
            }
        })
        .collect();
    let window = match until {
        Some(u) => format!(" sent in [{}, {})", spec.from, u - Instant::ZERO),
        None if spec.from > Duration::ZERO => format!(" sent from {}", spec.from),
        None => String::new(),
    };
    let note = if shown_total > arrows.len() {
        format!(
            "{name}: first {} of {shown_total} packets{window} ({} in the run; --ladder-from, --ladder-until and --ladder-max choose)",
            arrows.len(),
            journeys.len()
        )
    } else {
        format!("{name}: {shown_total} packets{window}")
    };
    crate::report::svg::ladder(&a.to_string(), &b.to_string(), &arrows, &note)
}
