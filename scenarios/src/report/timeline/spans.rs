//! The operations' spans on the hosts' threads: what every workload
//! family hands the timeline (`OpSpan`), and how they are laid out so
//! that none overlap on one thread.

use std::collections::BTreeMap;

use super::{quoted, us, Out};

/// One operation, for its span: an RDMA operation, a message, a
/// non-contiguous round trip, or one rank's iteration of a collective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpSpan {
    /// The host that posted it.
    pub host: u32,
    /// `WRITE`, `READ`, `SEND`, `MSG`, `allreduce`, ...
    pub kind: String,
    /// Bytes.
    pub size: u64,
    /// The peer (`None`: a collective's, which has many).
    pub peer: Option<u32>,
    /// Posted (started), in picoseconds.
    pub posted: u64,
    /// Completed (ended), in picoseconds (`None`: never, or it failed
    /// at a time not recorded).
    pub done: Option<u64>,
    /// Success, failure, or not completed.
    pub ok: Option<bool>,
}

impl OpSpan {
    /// `done` and `ok` for an operation whose end is `end`: when it
    /// ended, or why it failed (at a time not recorded); `None` while it
    /// still ran.
    pub fn ended<E>(end: Option<&Result<udrma_proto::Instant, E>>) -> (Option<u64>, Option<bool>) {
        match end {
            Some(Ok(at)) => (Some(at.as_ps()), Some(true)),
            Some(Err(_)) => (None, Some(false)),
            None => (None, None),
        }
    }
}

/// Writes the operations' spans, each host's on as few threads as keep
/// them from overlapping, at most `room` of them; returns how many.
pub(super) fn spans(out: &mut Out, ops: &[OpSpan], room: usize, end_ps: u64) -> usize {
    // Those posted after a cut are not drawn (nor counted as drawn).
    let mut order: Vec<usize> = (0..ops.len())
        .filter(|&i| ops[i].posted <= out.cut)
        .collect();
    order.sort_by_key(|&i| (ops[i].posted, i));
    order.truncate(room);
    // Per host, when each of its threads is free again.
    let mut lanes: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut written = 0;
    for i in order {
        let op = &ops[i];
        // Not completed: drawn to the end. Failed with no time recorded
        // (a collective's iteration): a mark at its start, not a span
        // that would hold its thread to the end.
        let end = match (op.done, op.ok) {
            (Some(done), _) => done,
            (None, Some(false)) => op.posted,
            (None, _) => end_ps,
        }
        .max(op.posted);
        let free = lanes.entry(op.host).or_default();
        let lane = match free.iter().position(|f| *f <= op.posted) {
            Some(k) => k,
            None => {
                free.push(0);
                out.meta(&format!(
                    "\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":\"ops {}\"}}",
                    op.host + 1,
                    free.len(),
                    free.len() - 1
                ));
                free.len() - 1
            }
        };
        free[lane] = end;
        let result = match op.ok {
            Some(true) => "ok",
            Some(false) => "failed",
            None => "not completed",
        };
        let peer = op
            .peer
            .map(|p| format!("\"peer\":\"h{p}\","))
            .unwrap_or_default();
        out.event(
            op.posted,
            &format!(
                "\"ph\":\"X\",\"pid\":{},\"tid\":{},\"dur\":{},\"name\":{},\"args\":{{{peer}\"bytes\":{},\"result\":\"{result}\"}}",
                op.host + 1,
                lane + 1,
                us(end - op.posted),
                quoted(&format!("{} {} B", op.kind, op.size)),
                op.size
            ),
        );
        written += 1;
    }
    written
}
