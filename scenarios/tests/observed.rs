//! `RunOptions::observer`: a run watched between slices of events is the
//! run unwatched (its report and trace hash, in every workload family,
//! in time order and in windows), and an observer that says stop gets the
//! report of the run so far, whose note says it was interrupted.

use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use udrma_scenarios::run::observed::Progress;
use udrma_scenarios::{run, Report, RunOptions, Scenario};

fn example(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

fn run_with(
    text: &str,
    observer: Option<(u64, udrma_scenarios::run::observed::Observer)>,
) -> Report {
    let sc = Scenario::parse("inline.toml", text).unwrap();
    run(
        &sc,
        RunOptions {
            observer,
            ..RunOptions::default()
        },
    )
    .unwrap()
}

/// The report as JSON: every count, check and note.
fn json(r: &Report) -> String {
    serde_json::to_string(r).unwrap()
}

#[test]
fn a_watched_run_is_the_run_unwatched() {
    let lossy = example("lossy-write.toml");
    let windows = lossy.replace(
        "routing = \"ecmp\"\n",
        "routing = \"ecmp\"\norder = \"windows\"\n",
    );
    assert_ne!(lossy, windows);
    let cases = [
        ("lossy-write", lossy),
        ("lossy-write in windows", windows),
        ("two-hosts-msg", example("two-hosts-msg.toml")),
        ("noncontig-columns", example("noncontig-columns.toml")),
        ("allreduce-lossy", example("allreduce-lossy.toml")),
        ("pfc-incast", example("pfc-incast.toml")),
    ];
    for (name, text) in cases {
        let plain = run_with(&text, None);
        let calls = Arc::new(AtomicU64::new(0));
        let seen = calls.clone();
        let observer = Box::new(move |p: &Progress| {
            // (A collective's second phase starts a new fabric: its
            // clock and counters start again.)
            assert!(p.now <= p.limit && p.traffic.events > 0);
            seen.fetch_add(1, Ordering::Relaxed);
            ControlFlow::Continue(())
        });
        let watched = run_with(&text, Some((100, observer)));
        let calls = calls.load(Ordering::Relaxed);
        assert!(calls > 3, "{name}: called {calls} times");
        assert_eq!(plain.trace_hash, watched.trace_hash, "{name}");
        assert_eq!(json(&plain), json(&watched), "{name}");
    }
}

/// Stopped after a few slices, the run reports what it reached: fewer
/// events than in full, a liveness check that fails, and a note that
/// says it was interrupted before the time limit; a collective's second
/// phase does not run.
#[test]
fn an_observer_that_says_stop_gets_the_run_so_far() {
    for name in ["lossy-write.toml", "allreduce-lossy.toml"] {
        let text = example(name);
        let full = run_with(&text, None);
        let mut calls = 0;
        let observer = Box::new(move |_: &Progress| {
            calls += 1;
            if calls == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        let part = run_with(&text, Some((200, observer)));
        assert!(part.events < full.events, "{name}");
        assert!(part.events >= 600, "{name}: {} events", part.events);
        assert!(!part.passed(), "{name}");
        let note = part
            .notes
            .iter()
            .find(|n| n.contains("interrupted before the time limit"));
        assert!(note.is_some(), "{name}: {:?}", part.notes);
    }
}
