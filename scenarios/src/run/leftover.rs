//! What a run left undone, said the way it happened: stopped by the time
//! limit with events still due, gone quiet with state still held, or
//! interrupted by its caller.

use udrma_proto::{Instant, NodeAddr};

use crate::backend::Backend;
pub use crate::backend::Ending;

/// The note for a run that is not idle at its end: why it stopped, when,
/// and which hosts hold what. `extra` adds per-host findings the engine
/// cannot see (a messaging layer with work queued).
pub fn note(
    world: &dyn Backend,
    limit: Instant,
    ending: Ending,
    extra: impl Fn(NodeAddr) -> Option<String>,
) -> String {
    let held = (0..world.n_hosts() as u32)
        .map(NodeAddr)
        .filter(|h| world.is_local(*h))
        .map(|h| {
            let mut held = held(world.nic(h));
            held.extend(extra(h));
            (h, held)
        });
    note_of(world.now(), limit, ending, held)
}

/// What host `h`'s NIC still holds, in words (empty: nothing).
pub fn held(nic: &udrma_nic::Nic) -> Vec<String> {
    let o = nic.occupancy();
    let mut held = Vec::new();
    let count = |n: usize, one: &str, many: &str| {
        (n > 0).then(|| format!("{n} {}", if n == 1 { one } else { many }))
    };
    held.extend(count(
        o.requests.0,
        "request outstanding",
        "requests outstanding",
    ));
    held.extend(count(
        o.registry.0,
        "partly received operation in the receive registry",
        "partly received operations in the receive registry",
    ));
    held.extend(count(
        o.escape_entries.0,
        "packet in the escape channel",
        "packets in the escape channel",
    ));
    held.extend(count(
        o.transmit_queue.0,
        "packet waiting to leave",
        "packets waiting to leave",
    ));
    held
}

/// The note, from the time of the last event and what each host still
/// holds (in host order; hosts that hold nothing are passed over).
pub fn note_of(
    now: Instant,
    limit: Instant,
    ending: Ending,
    held: impl Iterator<Item = (NodeAddr, Vec<String>)>,
) -> String {
    let now = now - Instant::ZERO;
    let head = match ending {
        Ending::Limit(next) => format!(
            "stopped at the time limit ({}): the last event ran at {now} and the next was due at {}",
            limit - Instant::ZERO,
            next - Instant::ZERO
        ),
        Ending::Quiet => format!("the run went quiet at {now} with work left"),
        Ending::Stopped => format!(
            "interrupted before the time limit ({}): the last event ran at {now}",
            limit - Instant::ZERO
        ),
    };
    const SHOWN: usize = 4;
    let mut parts = Vec::new();
    let mut hosts = 0;
    for (h, held) in held {
        if held.is_empty() {
            continue;
        }
        hosts += 1;
        if hosts <= SHOWN {
            parts.push(format!("{h}: {}", held.join(", ")));
        }
    }
    if hosts > SHOWN {
        parts.push(format!("and {} more hosts", hosts - SHOWN));
    }
    if parts.is_empty() {
        head
    } else {
        format!("{head}; {}", parts.join("; "))
    }
}
