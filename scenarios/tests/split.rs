//! `--threads`: an example split across threads reports exactly what one
//! thread reports running it in windows (every count, percentile, check
//! and note, and the trace hash), faults and all, and what a split
//! cannot carry (fault rules whose draws depend on the packets before,
//! captures, traces, ladders, workloads other than RDMA) is refused by
//! name, never run differently.

use std::path::PathBuf;

use udrma_scenarios::{run, RunOptions, Scenario};

/// Example `name`, in windows.
fn example(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut sc = Scenario::parse(name, &text).unwrap_or_else(|e| panic!("{e}"));
    sc.file.topology.order = udrma_scenarios::file::schema::OrderKind::Windows;
    sc
}

fn threads(n: Option<usize>) -> RunOptions {
    RunOptions {
        threads: n,
        ..RunOptions::default()
    }
}

/// The RDMA examples, with and without fault rules, split on one to
/// three threads; the larger ones in release builds only (`cargo test --release`; CI runs
/// them).
#[test]
fn a_split_example_reports_what_one_thread_does() {
    let mut names = vec![
        "incast-trim.toml",
        "incast-rccc.toml",
        "two-hosts.toml",
        "dup-storm.toml",
        "small-faults.toml",
        "link-flap.toml",
        "late-first-packet.toml",
        "demo.toml",
    ];
    if !cfg!(debug_assertions) {
        names.extend([
            "lossy-write.toml",
            "perm-k8-linkdown.toml",
            "irn-gbn.toml",
            "authenticated-cost.toml",
            "reorder-spray.toml",
            "perm-128-uec.toml",
            "all-to-all-k8-nscc.toml",
            "bench-perm-k8.toml",
        ]);
    }
    for name in names {
        let sc = example(name);
        let want = run(&sc, threads(None)).unwrap();
        assert!(want.passed(), "{name}: {:?}", want.notes);
        for n in [1, 2, 3] {
            let got = run(&sc, threads(Some(n))).unwrap();
            assert_eq!(got, want, "{name} on {n} threads");
        }
    }
}

/// `sc` on `n` ranks (on threads, `LocalRanks`): rank 0's report, with
/// what each rank exchanged.
fn on_ranks(sc: &Scenario, n: usize) -> udrma_scenarios::Report {
    let reports = std::thread::scope(|scope| {
        let handles: Vec<_> = udrma_fabric::LocalRanks::group(n)
            .into_iter()
            .map(|r| {
                scope.spawn(move || {
                    let opts = RunOptions {
                        ranks: Some(udrma_scenarios::RankOptions {
                            ranks: Box::new(r),
                            identity: "the same file".into(),
                        }),
                        ..RunOptions::default()
                    };
                    run(sc, opts).unwrap_or_else(|e| panic!("{e}"))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    reports.into_iter().next().unwrap()
}

/// The same examples on one to four ranks: rank 0's report is one
/// thread's in windows, but for the ranks' own figures (every rank ran
/// every window).
#[test]
fn an_example_on_ranks_reports_what_one_thread_does() {
    let mut names = vec![
        "incast-trim.toml",
        "incast-rccc.toml",
        "two-hosts.toml",
        "small-faults.toml",
        "late-first-packet.toml",
        "demo.toml",
    ];
    if !cfg!(debug_assertions) {
        names.extend([
            "lossy-write.toml",
            "perm-k8-linkdown.toml",
            "reorder-spray.toml",
            "all-to-all-k8-nscc.toml",
            "bench-perm-k8.toml",
        ]);
    }
    for name in names {
        let sc = example(name);
        let want = run(&sc, threads(None)).unwrap();
        assert!(want.passed(), "{name}: {:?}", want.notes);
        for n in 1..=4 {
            let mut got = on_ranks(&sc, n);
            let ranks = got.ranks.take().expect("the ranks' figures");
            assert_eq!(ranks.len(), n, "{name} on {n} ranks");
            assert!(
                ranks.iter().all(|r| r.windows == ranks[0].windows),
                "{name} on {n} ranks: {ranks:?}"
            );
            assert_eq!(got, want, "{name} on {n} ranks");
        }
    }
}

/// The scenarios `tests/ranks.rs` runs under `mpiexec` (a sprayed k=4
/// and k=8 fat tree, an incast whose queues drop and mark, a trimming
/// fabric, a k-ary n-tree of costed NICs, targeted faults), here on one
/// to four ranks on threads: one thread's report, and packets cross
/// between ranks.
#[test]
fn the_rank_scenarios_report_on_ranks_what_one_thread_does() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ranks");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 6, "{files:?}");
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let sc = Scenario::parse(&name, &text).unwrap_or_else(|e| panic!("{e}"));
        let want = run(&sc, RunOptions::default()).unwrap();
        assert!(want.passed(), "{name}: {:?}", want.notes);
        let p = &want.packets;
        match name.as_str() {
            "incast-drop-mark.toml" => assert!(p.dropped > 0 && p.ecn_marked > 0, "{name}"),
            "trim-k4.toml" => assert!(p.trimmed > 0, "{name}"),
            "lossy-targeted.toml" => assert!(
                p.dropped > 0 && p.duplicated > 0 && p.corrupted > 0,
                "{name}: every rule fires"
            ),
            _ => {}
        }
        let counts = if name == "spray-k8.toml" && cfg!(debug_assertions) {
            vec![3]
        } else {
            vec![1, 2, 3, 4]
        };
        for n in counts {
            let mut got = on_ranks(&sc, n);
            let ranks = got.ranks.take().expect("the ranks' figures");
            let packets: u64 = ranks.iter().map(|r| r.packets).sum();
            assert_eq!(packets > 0, n > 1, "{name} on {n} ranks: {ranks:?}");
            assert_eq!(got, want, "{name} on {n} ranks");
        }
    }
}

/// A NIC that prices address translation moves its link's booking on by
/// each packet's placing work when it takes the packet (docs/engine.md,
/// "The timer rule"), on the receiving host's thread: so a host shares
/// its thread with the switch that feeds it, and a split incast into
/// `connectx5-roce` NICs reports what one thread does. (With hosts split
/// from their switch it did not.)
#[test]
fn a_split_run_with_placing_work_reports_what_one_thread_does() {
    let text =
        "name = \"placing\"\nseed = 3\nprofile = \"connectx5-roce\"\ntime_limit = \"50ms\"\n\
                [topology]\nkind = \"star\"\nhosts = 6\norder = \"windows\"\n\
                [[workload]]\nkind = \"incast\"\ndst = \"h0\"\nsize = \"64KiB\"\ncount = 4\n";
    let sc = Scenario::parse("placing.toml", text).unwrap_or_else(|e| panic!("{e}"));
    let want = run(&sc, threads(None)).unwrap();
    assert!(want.passed(), "{:?}", want.notes);
    for n in [2, 3] {
        let got = run(&sc, threads(Some(n))).unwrap();
        assert_eq!(got, want, "on {n} threads");
    }
}

#[test]
fn what_a_split_cannot_carry_is_refused_by_name() {
    // A loss rule whose draws are correlated depends on the packets
    // judged before it.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/lossy-write.toml");
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("p = 0.01", "p = 0.01\ncorrelation = 0.25");
    let mut bursty = Scenario::parse("bursty.toml", &text).unwrap();
    bursty.file.topology.order = udrma_scenarios::file::schema::OrderKind::Windows;
    let e = run(&bursty, threads(Some(2)))
        .expect_err("correlated")
        .to_string();
    assert!(
        e.contains("fault rule \"loss\"") && e.contains("correlation"),
        "{e}"
    );
    for (name, why) in [
        ("two-hosts-msg.toml", "the msg-latency workload"),
        ("noncontig-columns.toml", "the noncontig workload"),
    ] {
        let e = run(&example(name), threads(Some(2))).expect_err(name);
        let e = e.to_string();
        assert!(e.contains(why) && e.contains("--threads 2"), "{name}: {e}");
    }
    let mut opts = threads(Some(2));
    opts.trace = Some((
        udrma_fabric::TraceFormat::JsonLines,
        Box::new(std::io::sink()),
    ));
    let e = run(&example("incast.toml"), opts).expect_err("a trace");
    assert!(e.to_string().contains("a trace file"), "{e}");
    let e = run(&example("incast.toml"), threads(Some(65))).expect_err("65");
    assert!(e.to_string().contains("from 1 to 64"), "{e}");
}
