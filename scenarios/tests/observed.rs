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
        assert!(part.interrupted && !full.interrupted, "{name}");
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

/// `sc` in windows, as a split run can take it.
fn in_windows(name: &str) -> Scenario {
    let mut sc = Scenario::parse(name, &example(name)).unwrap();
    sc.file.topology.order = udrma_scenarios::file::schema::OrderKind::Windows;
    sc
}

/// An observer that counts its calls into `calls` and says stop at the
/// `stop_at`th (never, if 0); it records whether it was told another
/// rank stopped the run.
fn counting(
    calls: &Arc<AtomicU64>,
    elsewhere: &Arc<AtomicU64>,
    stop_at: u64,
) -> udrma_scenarios::run::observed::Observer {
    let (calls, elsewhere) = (calls.clone(), elsewhere.clone());
    let mut last = 0;
    Box::new(move |p: &Progress| {
        assert!(p.now <= p.limit && p.traffic.events > 0);
        // Each slice runs events (on ranks, the count all agreed); the
        // call that says another rank stopped repeats the last.
        assert!(
            p.elsewhere || p.traffic.events > last,
            "{} after {last}",
            p.traffic.events
        );
        last = p.traffic.events;
        if p.elsewhere {
            elsewhere.fetch_add(1, Ordering::Relaxed);
        }
        let n = calls.fetch_add(1, Ordering::Relaxed) + 1;
        if n == stop_at {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
}

/// On threads, a slice is whole windows (of 64 times the events asked
/// for, here 3): watched, the split run is the
/// run unwatched; stopped, it reports the run so far, as one thread does.
#[test]
fn a_split_run_is_watched_in_windows() {
    let sc = in_windows("lossy-write.toml");
    let split = |observer| {
        let opts = RunOptions {
            threads: Some(2),
            observer,
            ..RunOptions::default()
        };
        run(&sc, opts).unwrap()
    };
    let plain = split(None);
    let (calls, elsewhere) = (Arc::default(), Arc::default());
    let watched = split(Some((3, counting(&calls, &elsewhere, 0))));
    assert!(calls.load(Ordering::Relaxed) > 3);
    assert_eq!(json(&plain), json(&watched));
    let calls = Arc::default();
    let part = split(Some((3, counting(&calls, &elsewhere, 3))));
    assert_eq!(calls.load(Ordering::Relaxed), 3);
    assert!(part.events < plain.events && !part.passed());
    assert!(part.notes.iter().any(|n| n.contains("interrupted before")));
    assert_eq!(elsewhere.load(Ordering::Relaxed), 0);
}

/// `sc` on `n` ranks (threads carrying the messages), rank `r` watched
/// by an observer that says stop at its `stops[r]`th call (0: never):
/// each rank's report, calls and calls told that another rank stopped.
fn on_ranks(sc: &Scenario, stops: &[u64]) -> Vec<(Report, u64, u64)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = udrma_fabric::LocalRanks::group(stops.len())
            .into_iter()
            .zip(stops)
            .map(|(r, &stop_at)| {
                scope.spawn(move || {
                    let (calls, elsewhere) = (Arc::default(), Arc::default());
                    let opts = RunOptions {
                        ranks: Some(udrma_scenarios::RankOptions {
                            ranks: Box::new(r),
                            identity: "the same file".into(),
                        }),
                        observer: Some((3, counting(&calls, &elsewhere, stop_at))),
                        ..RunOptions::default()
                    };
                    let report = run(sc, opts).unwrap_or_else(|e| panic!("{e}"));
                    let n = |a: &Arc<AtomicU64>| a.load(Ordering::Relaxed);
                    (report, n(&calls), n(&elsewhere))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// On ranks every rank is watched after the same windows, and a stop
/// asked on one rank (a Ctrl-C that reached only it) stops every rank
/// there: rank 0 reports the run so far, and the others' observers are
/// told why.
#[test]
fn a_stop_on_one_rank_stops_every_rank_at_the_same_window() {
    let sc = in_windows("lossy-write.toml");
    let plain = run(&sc, RunOptions::default()).unwrap();
    let all = on_ranks(&sc, &[0, 0]);
    assert_eq!(all[0].1, all[1].1, "every rank is asked after every slice");
    assert!(all[0].1 > 3);
    assert_eq!(all[0].0.trace_hash, plain.trace_hash);
    assert_eq!(all[0].0.events, plain.events);
    let stopped = on_ranks(&sc, &[0, 3]);
    let (rank0, calls0, told0) = &stopped[0];
    assert!(
        rank0.interrupted,
        "rank 0 reports the stop rank 1 asked for"
    );
    assert_eq!((*calls0, *told0), (4, 1), "rank 0 is asked, then told");
    assert_eq!((stopped[1].1, stopped[1].2), (3, 0));
    assert!(rank0.events < plain.events && !rank0.passed());
    let note = rank0
        .notes
        .iter()
        .find(|n| n.contains("interrupted before"));
    assert!(note.is_some(), "{:?}", rank0.notes);
}

/// Over sockets a slice is a tenth of a second of real time: a run that
/// cannot finish (every datagram lost) is asked about between slices and
/// stops at the second, long before its time limit.
#[test]
fn a_run_over_sockets_is_watched_in_real_time() {
    let text = r#"
name = "all-lost"
seed = 1
time_limit = "20s"
[topology]
kind = "pair"
[[workload]]
kind = "single"
op = "write"
src = "h0"
dst = "h1"
size = "4KiB"
[[fault]]
name = "loss"
model = "loss"
p = 1.0
"#;
    let sc = Scenario::parse("all-lost.toml", text).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    let observer = Box::new(move |p: &Progress| {
        assert!(p.now <= p.limit && p.traffic.sent > 0);
        if seen.fetch_add(1, Ordering::Relaxed) == 1 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    let opts = RunOptions {
        backend: udrma_scenarios::BackendKind::Udp,
        observer: Some((1, observer)),
        ..RunOptions::default()
    };
    let r = run(&sc, opts).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert!(r.sim_time_ns < 5_000_000_000, "{} ns", r.sim_time_ns);
    assert!(r.notes.iter().any(|n| n.contains("interrupted before")));
}

/// `method = "auto"` tries each method on the simulated fabric before
/// the ping-pong: the run's observer watches those trials too, and a
/// stop in the first ends the run there, saying so.
#[test]
fn the_trials_of_auto_are_watched_and_can_be_stopped() {
    let text = example("noncontig-columns.toml");
    let auto = regex_free_method(&text, "auto");
    let full = run_with(&auto, None);
    let nc = full.noncontig.as_ref().unwrap();
    assert_eq!(nc.measured_us.len(), 3, "{:?}", nc.measured_us);
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    let observer = Box::new(move |_: &Progress| {
        if seen.fetch_add(1, Ordering::Relaxed) == 1 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    let part = run_with(&auto, Some((50, observer)));
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert_eq!(part.events, 0, "the ping-pong itself did not run");
    assert!(!part.checks["all-complete"] && part.checks["memory-equal"]);
    let note = part.notes.iter().find(|n| n.contains("trials"));
    assert_eq!(
        note.map(String::as_str),
        Some(
            "interrupted during method = \"auto\"'s trials (finished: none; under way: pack): \
             the ping-pong itself did not run, so its figures here are zero"
        ),
        "{:?}",
        part.notes
    );
}

/// `text` with its `method = "..."` line set to `method`.
fn regex_free_method(text: &str, method: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("method =") {
                format!("method = \"{method}\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Ranks meet between slices, so they must slice alike: a watched rank
/// beside an unwatched one is refused at the start, on every rank, not
/// left to fall out of step.
#[test]
fn ranks_watched_differently_are_refused_at_the_start() {
    let sc = in_windows("two-hosts.toml");
    let errors: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = udrma_fabric::LocalRanks::group(2)
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let sc = &sc;
                scope.spawn(move || {
                    let (calls, elsewhere) = (Arc::default(), Arc::default());
                    let opts = RunOptions {
                        ranks: Some(udrma_scenarios::RankOptions {
                            ranks: Box::new(r),
                            identity: "the same file".into(),
                        }),
                        observer: (i == 0).then(|| (3, counting(&calls, &elsewhere, 0))),
                        ..RunOptions::default()
                    };
                    run(sc, opts).unwrap_err().to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for e in &errors {
        assert!(e.contains("rank 1") && e.contains("unwatched"), "{e}");
    }
}
