//! The MoE-like all-to-all example with and without congestion control
//! (docs/collectives.md, "An MoE all-to-all with and without congestion
//! control"): the story its comment tells, rerun.

use udrma_scenarios::{run, Report, RunOptions, Scenario};

const FILE: &str = include_str!("../examples/alltoall-moe-k4.toml");

/// The example with `nic.cc` set to `cc`.
fn with_cc(cc: &str) -> Report {
    assert!(FILE.contains("cc = \"nscc\""), "the example sets nic.cc");
    let text = FILE.replace("cc = \"nscc\"", &format!("cc = \"{cc}\""));
    let sc = Scenario::parse("alltoall-moe-k4.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "cc = {cc}: {:?}", r.notes);
    r
}

/// The measured iterations' average, µs.
fn average(r: &Report) -> f64 {
    let row = &r.scheduled.as_ref().expect("a collective table").rows[0];
    row.avg_us.expect("an iteration finished")
}

/// Without a controller the steps' flows that hash onto one core link
/// overflow its queue, and the 20 µs timer floor fires on packets that
/// only wait (more timeouts than drops); NSCC keeps every queue below its
/// limit, so nothing is dropped, and the exchange ends sooner.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "two 16-rank all-to-alls of 1 MiB a pair take a minute in debug: run with --release (CI does)"
)]
fn congestion_control_keeps_the_moe_exchange_lossless_and_sooner() {
    let none = with_cc("none");
    let nscc = with_cc("nscc");
    assert!(none.packets.dropped > 1000, "{:?}", none.packets);
    assert!(none.timeouts > none.packets.dropped, "spurious timeouts");
    assert_eq!(nscc.packets.dropped, 0);
    assert!(
        average(&nscc) < 0.8 * average(&none),
        "nscc {} us, none {} us",
        average(&nscc),
        average(&none)
    );
}
