//! The `flows` workload from a scenario file: its keys, what is refused
//! and where, and the flow figures a run reports.

use udrma_scenarios::{run, RunOptions, Scenario};

const BASE: &str = "name = \"x\"\n[topology]\nkind = \"star\"\nhosts = 8\nqueue = \"128KiB\"\n[[workload]]\nkind = \"flows\"\ncount = 200\n";
const CDF: &str = "cdf = [[1000, 0.5], [10000, 0.8], [200000, 1.0]]\n";

fn error(rest: &str) -> String {
    Scenario::parse("bad.toml", &format!("{BASE}{rest}"))
        .unwrap_err()
        .to_string()
}

/// A flow workload needs a load between 0 and 1 and a CDF that is one;
/// a key it does not read is refused, naming the keys it takes.
#[test]
fn a_flow_workload_is_refused_at_the_key_that_is_wrong() {
    assert!(error(CDF).contains("needs `load`"), "{}", error(CDF));
    assert_eq!(
        error(&format!("load = 1.5\n{CDF}")),
        "bad.toml:9:1: workload 0 (flows): load = 1.5: the offered load is a share of every host's link, above 0 and at most 1"
    );
    assert!(error("load = 0.5\n").contains("needs `cdf`"));
    assert_eq!(
        error("load = 0.5\ncdf = [[1000, 0.5], [500, 1.0]]\n"),
        "bad.toml:10:1: workload 0 (flows): cdf point 1 ([500, 1]): sizes must rise and probabilities must not fall (the point before is [1000, 0.5])"
    );
    assert!(error("load = 0.5\ncdf = [[1000, 0.5]]\n").contains("its last point must be 1"));
    let e = error(&format!("load = 0.5\n{CDF}size = \"4KiB\"\n"));
    assert_eq!(e, "bad.toml:11:1: workload 0: `size` does not apply to `kind = \"flows\"`, which takes `op`, `count`, `load`, `cdf`, `start`");
}

/// At half load on a star every flow completes; the report counts them,
/// and the slowdown is at least 1 (no flow beats an empty fabric). The
/// same file and seed plan the same flows: the same hash.
#[test]
fn a_flow_run_reports_completion_times_and_slowdown() {
    let text = format!("{BASE}load = 0.5\n{CDF}");
    let sc = Scenario::parse("flows.toml", &text).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}", r.notes);
    let f = r.flows.as_ref().unwrap();
    assert_eq!(f.flows, 200);
    assert!(
        f.avg_slowdown >= 1.0 && f.p99_fct_us >= f.avg_fct_us,
        "{f:?}"
    );
    assert!(r.table().contains("flows       200 done"));
    let again = run(&sc, RunOptions::default()).unwrap();
    assert_eq!(again.trace_hash, r.trace_hash);
    let other = run(
        &sc,
        RunOptions {
            seed: Some(2),
            ..RunOptions::default()
        },
    )
    .unwrap();
    assert_ne!(other.trace_hash, r.trace_hash, "another seed, other flows");
}
