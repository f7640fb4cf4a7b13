//! Which keys each workload kind and each fault model takes: the tables
//! [`crate::file::applies`] refuses other keys by, and that a parse error
//! for an unknown key lists (`crate::file::source`); and for each key,
//! whether it must be given and what is used when it is not
//! ([`needs_of`], [`model_needs`]: docs/scenarios.md prints them).

use crate::file::schema::{ModelKind, WorkloadKind};

/// The keys a workload of `kind` reads (besides `kind` itself), in the
/// order of [`needs_of`].
pub fn keys_of(kind: WorkloadKind) -> Vec<&'static str> {
    needs_of(kind).iter().map(|(k, _)| *k).collect()
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
/// packet faults, the targeting keys ([`TARGETING`]), in the order of
/// [`model_needs`].
pub fn model_keys(model: ModelKind) -> Vec<&'static str> {
    model_needs(model).iter().map(|(k, _)| *k).collect()
}

/// Whether a key must be given, and what is used when it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The file must give it.
    Required,
    /// Required unless the other key (named) is given instead.
    Or(&'static str),
    /// Left out, this value is used (as TOML: the file may say the same).
    Default(&'static str),
    /// Left out, what the words say happens (a value that follows from
    /// other keys, or none).
    Else(&'static str),
}

const OP: (&str, Need) = ("op", Need::Default("\"write\""));
const START: (&str, Need) = ("start", Need::Default("\"0us\""));
const COUNT: (&str, Need) = ("count", Need::Default("1"));
const SRC: (&str, Need) = ("src", Need::Required);
const DST: (&str, Need) = ("dst", Need::Required);
const SIZE: (&str, Need) = ("size", Need::Required);
const WINDOW: (&str, Need) = ("window", Need::Default("64"));

/// Each key a workload of `kind` reads (besides `kind`), with what it
/// needs.
pub fn needs_of(kind: WorkloadKind) -> &'static [(&'static str, Need)] {
    use Need::{Default, Else, Or, Required};
    match kind {
        WorkloadKind::Single => &[OP, SRC, DST, SIZE, START],
        WorkloadKind::Many | WorkloadKind::Pingpong => &[OP, SRC, DST, SIZE, COUNT, START],
        WorkloadKind::Window => &[OP, SRC, DST, SIZE, COUNT, WINDOW, START],
        WorkloadKind::AllToAll | WorkloadKind::RandomPairs => &[OP, SIZE, COUNT, START],
        WorkloadKind::Incast => &[
            OP,
            DST,
            ("srcs", Else("every host but `dst`")),
            SIZE,
            COUNT,
            START,
        ],
        WorkloadKind::Flows => &[OP, COUNT, ("load", Required), ("cdf", Required), START],
        WorkloadKind::Permutation => &[
            OP,
            SIZE,
            COUNT,
            ("pairs", Else("a permutation drawn from the seed")),
            START,
        ],
        WorkloadKind::Reuse => &[DST, START],
        WorkloadKind::MsgLatency => &[
            SRC,
            DST,
            ("size", Or("sizes")),
            ("sizes", Or("size")),
            ("warmup", Default("2")),
            COUNT,
            START,
        ],
        WorkloadKind::MsgBw | WorkloadKind::MsgBibw => &[
            SRC,
            DST,
            ("size", Or("sizes")),
            ("sizes", Or("size")),
            ("warmup", Default("2")),
            COUNT,
            WINDOW,
            START,
        ],
        WorkloadKind::MsgMixed => &[SRC, DST, COUNT, START],
        WorkloadKind::Noncontig => &[
            SRC,
            DST,
            ("method", Default("\"auto\"")),
            ("form", Default("\"messaging\"")),
            ("layout", Default("\"vector\"")),
            ("block", Else("required by the `vector` and `transpose` layouts")),
            ("blocks", Required),
            ("stride", Else("twice `block` (`vector`)")),
            ("peer_layout", Default("\"same\"")),
            ("halo", Default("1")),
            ("key_cache", Default("true")),
            COUNT,
            ("warmup", Default("2")),
            START,
        ],
        WorkloadKind::Collective => &[
            ("collective", Default("\"allreduce\"")),
            ("reduce_op", Default("\"sum\"")),
            ("datatype", Default("\"f64\"")),
            ("size", Or("sizes")),
            ("fan_in", Else("follows the topology: k of a k-ary n-tree, k/2 of a fat tree, the hosts of a star or dumbbell, 2 otherwise")),
            ("nodes", Else("every host")),
            COUNT,
            ("interval", Default("\"500us\"")),
            ("method", Else("\"both\" (\"nic\" with `algorithm = \"nic\"`)")),
            ("algorithm", Else("none: the NIC study (host and NIC trees)")),
            ("sizes", Or("size")),
            ("warmup", Default("1")),
            ("form", Default("\"messaging\"")),
            ("pipeline", Default("\"32KiB\"")),
            START,
        ],
    }
}

/// Each key a fault of `model` reads besides `name`, `model` and the
/// targeting keys, with what it needs.
pub fn model_needs(model: ModelKind) -> &'static [(&'static str, Need)] {
    use Need::{Default, Else, Required};
    const P: (&str, Need) = ("p", Required);
    const CORRELATION: (&str, Need) = ("correlation", Default("0.0"));
    const LIMIT: (&str, Need) = ("limit", Else("no limit"));
    match model {
        ModelKind::Loss => &[P, CORRELATION],
        ModelKind::GilbertElliott => &[
            P,
            ("r", Required),
            ("loss_good", Default("0.0")),
            ("loss_bad", Default("1.0")),
        ],
        ModelKind::Duplicate => &[P, ("copies", Default("1")), CORRELATION],
        ModelKind::Reorder => &[
            P,
            CORRELATION,
            ("gap", Default("1")),
            ("delay", Required),
            LIMIT,
        ],
        ModelKind::Delay => &[
            ("delay", Required),
            ("jitter", Default("\"0us\"")),
            ("distribution", Default("\"uniform\"")),
            LIMIT,
        ],
        ModelKind::Corrupt => &[P, ("bits", Default("1"))],
        ModelKind::Rate => &[("rate", Required), ("limit", Default("1000"))],
        ModelKind::Down => &[],
        ModelKind::Partition => &[
            ("a", Required),
            ("b", Required),
            ("two_way", Default("false")),
        ],
        ModelKind::RegistrationFailure => &[
            P,
            ("src", Else("every host")),
            ("from", Else("the start")),
            ("until", Else("the end")),
        ],
    }
}
