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

/// A star of 8 hosts with a `flows` workload of `count` flows drawn from
/// `cdf`, its payloads phantom or real.
fn named(count: u32, cdf: &str, phantom: bool) -> String {
    let topology = if phantom { "phantom = true\n" } else { "" };
    format!(
        "name = \"x\"\n[topology]\nkind = \"star\"\nhosts = 8\n{topology}[[workload]]\nkind = \"flows\"\ncount = {count}\nload = 0.5\ncdf = {cdf}\n"
    )
}

/// `cdf` may name a published distribution; a name it does not know is
/// refused at its line with the names it does, the nearest first if one
/// is near. Names are matched exactly (lower case); a value that is
/// neither a name nor points says what a `cdf` may be.
#[test]
fn a_distribution_is_named_or_refused_with_the_known_names() {
    let e = error("load = 0.5\ncdf = \"websearh\"\n");
    assert_eq!(
        e,
        "bad.toml:10:1: workload 0 (flows): cdf = \"websearh\" is not a known distribution; known: websearch, datamining, hadoop (did you mean `websearch`?)"
    );
    let doc = include_str!("../../docs/scenarios.md");
    assert!(
        doc.contains(&format!("\n{e}\n")),
        "docs/scenarios.md should show {e}"
    );
    assert!(error("load = 0.5\ncdf = \"Hadoop\"\n").ends_with("(did you mean `hadoop`?)"));
    let e = error("load = 0.5\ncdf = 5\n");
    assert!(
        e.starts_with("bad.toml:10:") && e.contains("expected a distribution's name"),
        "{e}"
    );
    for name in ["websearch", "datamining", "hadoop"] {
        let text = named(200, &format!("\"{name}\""), true);
        Scenario::parse("named.toml", &text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// Data-mining flows reach 973 MB: with real payloads the bytes the
/// flows draw (at the file's seed, not count times the mean) are bounded
/// as every workload's are, and `phantom = true` lifts the bound; a
/// `--seed` whose flows pass the bound is refused when the run is
/// planned, before anything is stored.
#[test]
fn heavy_flows_need_phantom_payloads() {
    let e = Scenario::parse("big.toml", &named(2000, "\"datamining\"", false))
        .unwrap_err()
        .to_string();
    assert!(e.contains("set `phantom = true` in [topology]"), "{e}");
    Scenario::parse("big.toml", &named(2000, "\"datamining\"", true)).unwrap();
    // A seed whose 300 flows fit and one whose flows do not.
    use udrma_scenarios::file::cdf::NAMED;
    use udrma_scenarios::plan::flows::{planned_bytes, SizeCdf};
    assert_eq!(NAMED[1].0, "datamining");
    let cdf = SizeCdf::new(NAMED[1].1).unwrap();
    let fits = |s: u64| planned_bytes(&cdf, 300, 8, s, 0) <= 4 << 30;
    let lo = (1..200).find(|&s| fits(s)).unwrap();
    let hi = (1..200).find(|&s| !fits(s)).unwrap();
    let text = format!("seed = {lo}\n{}", named(300, "\"datamining\"", false));
    let sc = Scenario::parse("seeded.toml", &text).unwrap();
    let e = run(
        &sc,
        RunOptions {
            seed: Some(hi),
            ..RunOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with(&format!(
            "seeded.toml:10:1: at seed {hi} the workloads move "
        )),
        "{e}"
    );
    // `udrma validate --seed` refuses it as the run at that seed does.
    let filled = udrma_scenarios::plan::filled::filled;
    assert!(filled(&sc, Some(lo)).is_ok());
    assert_eq!(filled(&sc, Some(hi)).unwrap_err().to_string(), e);
}
