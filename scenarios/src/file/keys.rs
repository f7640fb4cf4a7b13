//! Which keys each workload kind and each fault model takes: the tables
//! [`crate::file::applies`] refuses other keys by, and that a parse error
//! for an unknown key lists (`crate::file::source`).

use crate::file::schema::{ModelKind, WorkloadKind};

/// The keys a workload of `kind` reads (besides `kind` itself).
pub fn keys_of(kind: WorkloadKind) -> &'static [&'static str] {
    match kind {
        WorkloadKind::Single => &["op", "src", "dst", "size", "start"],
        WorkloadKind::Many | WorkloadKind::Pingpong => {
            &["op", "src", "dst", "size", "count", "start"]
        }
        WorkloadKind::Window => &["op", "src", "dst", "size", "count", "window", "start"],
        WorkloadKind::AllToAll | WorkloadKind::RandomPairs => &["op", "size", "count", "start"],
        WorkloadKind::Incast => &["op", "dst", "srcs", "size", "count", "start"],
        WorkloadKind::Flows => &["op", "count", "load", "cdf", "start"],
        WorkloadKind::Permutation => &["op", "size", "count", "pairs", "start"],
        WorkloadKind::Reuse => &["dst", "start"],
        WorkloadKind::MsgLatency => &["src", "dst", "size", "sizes", "warmup", "count", "start"],
        WorkloadKind::MsgBw | WorkloadKind::MsgBibw => &[
            "src", "dst", "size", "sizes", "warmup", "count", "window", "start",
        ],
        WorkloadKind::MsgMixed => &["src", "dst", "count", "start"],
        WorkloadKind::Noncontig => &[
            "src",
            "dst",
            "method",
            "form",
            "layout",
            "block",
            "blocks",
            "stride",
            "peer_layout",
            "halo",
            "key_cache",
            "count",
            "warmup",
            "start",
        ],
        WorkloadKind::Collective => &[
            "collective",
            "reduce_op",
            "datatype",
            "size",
            "fan_in",
            "nodes",
            "count",
            "interval",
            "method",
            "algorithm",
            "sizes",
            "warmup",
            "form",
            "pipeline",
            "start",
        ],
    }
}

/// The keys that say which packets a fault rule touches, and when.
pub const TARGETING: [&str; 11] = [
    "links",
    "direction",
    "src",
    "dst",
    "opcodes",
    "flags",
    "from",
    "until",
    "every",
    "offset",
    "times",
];

/// The keys a fault of `model` reads besides `name`, `model` and, for
/// packet faults, the targeting keys (`links`, `direction`, `src`, `dst`,
/// `opcodes`, `flags`, `from`, `until`, `every`, `offset`, `times`).
pub fn model_keys(model: ModelKind) -> &'static [&'static str] {
    match model {
        ModelKind::Loss => &["p", "correlation"],
        ModelKind::GilbertElliott => &["p", "r", "loss_good", "loss_bad"],
        ModelKind::Duplicate => &["p", "copies", "correlation"],
        ModelKind::Reorder => &["p", "correlation", "gap", "delay", "limit"],
        ModelKind::Delay => &["delay", "jitter", "distribution", "limit"],
        ModelKind::Corrupt => &["p", "bits"],
        ModelKind::Rate => &["rate", "limit"],
        ModelKind::Down => &[],
        ModelKind::Partition => &["a", "b", "two_way"],
        // Not a packet fault: hosts and a window only.
        ModelKind::RegistrationFailure => &["p", "src", "from", "until"],
    }
}
