//! The largest size a collective takes: 1 GiB per rank, with phantom
//! payloads (docs/collectives.md, "Phantom payloads"), run whole.

use udrma_scenarios::{run, RunOptions, Scenario};

/// The file docs/collectives.md shows.
const FILE: &str = r#"name = "allreduce-1gib"
seed = 1
profile = "roce-100g"
time_limit = "2s"
[topology]
kind = "star"
hosts = 4
phantom = true
[[workload]]
kind = "collective"
collective = "allreduce"
algorithm = "ring"
form = "rdma"
datatype = "f32"
sizes = "1GiB"
pipeline = "64MiB"
count = 1
warmup = 0
"#;

/// A ring allreduce of 1 GiB of floats on each of 4 ranks completes, at
/// the bus bandwidth the docs give (half the link: the profile's 53 Gb/s
/// reduction sits on the ring's path), in the simulated time they give.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "12 million events: run with --release (CI does)"
)]
fn a_gib_per_rank_allreduce_runs_whole() {
    let sc = Scenario::parse("allreduce-1gib.toml", FILE).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    let row = &r.scheduled.as_ref().unwrap().rows[0];
    assert_eq!(row.size, 1 << 30);
    assert_eq!((row.measured, row.wanted), (4, 4));
    assert_eq!(row.avg_us, Some(257783.516), "{}", r.table());
    assert_eq!(row.busbw_gbs, Some(6.2479), "{}", r.table());
    // The doc's block shows the whole table.
    let doc = include_str!("../../docs/collectives.md");
    let shown = r.table();
    let line = shown
        .lines()
        .find(|l| l.contains("1073741824 ring"))
        .unwrap();
    assert!(
        doc.contains(line),
        "docs/collectives.md no longer shows\n{line}"
    );
}
