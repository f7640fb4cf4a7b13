//! The names of the checks a run makes (the invariants of
//! `docs/design.md`), in report order. The runners compute them; the
//! validation pass and the report refer to them by these names.

/// Every check a run can make, in report order.
pub const CHECKS: [&str; 14] = [
    "all-complete",
    "all-succeeded",
    "exactly-once",
    "memory-equal",
    "mpi-order",
    "credits",
    "no-out-of-bounds",
    "no-write-after-completion",
    "max-sge",
    "result-equal",
    "bounded-state",
    "liveness",
    "no-queue-drop",
    "no-pfc-deadlock",
];
