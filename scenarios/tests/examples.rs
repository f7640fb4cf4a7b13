//! Every example scenario runs with the outcome its `# expect:` line
//! states; invalid files fail with the place and the reason.

use std::path::{Path, PathBuf};

use udrma_scenarios::{run, RunOptions, Scenario};

fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut v: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The large shapes take seconds in release and minutes in debug: they
/// run here only in release builds (CI runs them through the CLI).
const LARGE: [&str; 16] = [
    "all-to-all-k8.toml",
    "all-to-all-k8-probes.toml",
    "perm-128-uec.toml",
    "perm-1024-uec.toml",
    "all-to-all-k8-nscc.toml",
    "all-to-all-k8-nscc-rto.toml",
    "all-to-all-k8-rccc.toml",
    "rget-bottleneck.toml",
    "perm-k8-reps.toml",
    "perm-k8-linkdown.toml",
    "bench-perm-k8.toml",
    "bench-perm-k16.toml",
    "osu-bw.toml",
    "osu-latency.toml",
    "rnr-backpressure.toml",
    "alltoall-moe-k4.toml",
];

/// Scale runs: minutes even in release, more than CI's budget holds, so
/// only the ignored test `scale_examples_have_the_outcome_they_state`
/// runs them (`cargo test --release -p udrma-scenarios --test examples --
/// --ignored scale`); their hash is pinned at their own seed only.
const SCALE: [&str; 1] = ["allreduce-sweep-k8.toml"];

/// Runs one example at its own seed and checks the outcome its
/// `# expect:` line states; returns the seed and the trace hash.
fn check_outcome(name: &str, text: &str) -> (u64, String) {
    let expect = text
        .lines()
        .find_map(|l| l.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{name}: no `# expect:` line"));
    let sc = Scenario::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
    let report = run(&sc, RunOptions::default()).unwrap();
    let failed: Vec<&String> = report
        .checks
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(k, _)| k)
        .collect();
    match expect.strip_prefix("fail ") {
        None => assert!(
            failed.is_empty(),
            "{name}: expected pass, failed {failed:?}: {:?}",
            report.notes
        ),
        Some(checks) => {
            let mut want: Vec<&str> = checks.split_whitespace().collect();
            want.sort_unstable();
            assert_eq!(failed, want, "{name}");
        }
    }
    // Every operation ends, unless the file says a run that stops at
    // its time limit is its point (a deadlock skips `liveness`).
    if report.checks.contains_key("liveness") {
        assert_eq!(
            report.ops.posted,
            report.ops.completed + report.ops.failed,
            "{name}"
        );
    }
    (sc.file.seed, report.trace_hash)
}

#[test]
fn every_example_has_the_outcome_it_states() {
    let all = examples();
    assert!(all.len() >= 11, "{} examples", all.len());
    for (name, text) in all {
        if !LARGE.contains(&name.as_str()) && !SCALE.contains(&name.as_str()) {
            check_outcome(&name, &text);
        }
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "large shapes take minutes in debug: run with --release (CI does)"
)]
fn large_examples_have_the_outcome_they_state() {
    // The run at the file's own seed also checks its pinned hash, so the
    // hash test below runs the large ones at their other seeds only.
    outcomes_and_own_seed_hashes(&LARGE);
}

#[test]
#[ignore = "scale runs take minutes in release: cargo test --release -p udrma-scenarios --test examples -- --ignored scale"]
fn scale_examples_have_the_outcome_they_state() {
    outcomes_and_own_seed_hashes(&SCALE);
}

/// Runs each example named in `names` at its own seed: the outcome its
/// file states, and the hash pinned at that seed.
fn outcomes_and_own_seed_hashes(names: &[&str]) {
    let pinned = pinned_hashes();
    for (name, text) in examples() {
        if names.contains(&name.as_str()) {
            let (seed, got) = check_outcome(&name, &text);
            let want = pinned
                .iter()
                .find(|(n, s, _)| *n == name && *s == seed)
                .unwrap_or_else(|| panic!("{name}: no pinned hash at its own seed {seed}"));
            assert_eq!(got, want.2, "{name} seed {seed}: the trace hash changed");
        }
    }
}

/// docs/cli.md's table of examples names every example (two had gone
/// missing from it, issue 69).
#[test]
fn the_cli_docs_list_every_example() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
    let text = std::fs::read_to_string(docs).unwrap();
    let missing: Vec<String> = examples()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !text.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/cli.md's table: {missing:?}"
    );
}

/// `scenarios/tests/example-hashes.txt`: the trace hash of every example
/// at seeds 1 and 7. A change to it is a change to what the simulator does:
/// make it on purpose and say why in the commit.
fn pinned_hashes() -> Vec<(String, u64, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/example-hashes.txt");
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_string(), f[1].parse().unwrap(), f[2].to_string())
        })
        .collect()
}

fn check_hashes(large: bool) {
    let all = examples();
    let pinned = pinned_hashes();
    for (name, _) in &all {
        assert!(
            pinned.iter().any(|(n, _, _)| n == name),
            "{name} has no pinned hash in tests/example-hashes.txt"
        );
    }
    for (name, seed, want) in pinned {
        if LARGE.contains(&name.as_str()) != large || SCALE.contains(&name.as_str()) {
            continue;
        }
        let (_, text) = all
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("pinned {name} is not an example"));
        let sc = Scenario::parse(&name, text).unwrap();
        if large && sc.file.seed == seed {
            // Checked with the outcome, in the same run.
            continue;
        }
        let got = run(
            &sc,
            RunOptions {
                seed: Some(seed),
                ..RunOptions::default()
            },
        )
        .unwrap()
        .trace_hash;
        assert_eq!(got, want, "{name} seed {seed}: the trace hash changed");
    }
}

#[test]
fn example_trace_hashes_are_pinned() {
    check_hashes(false);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "large shapes take minutes in debug: run with --release (CI does)"
)]
fn large_example_trace_hashes_are_pinned() {
    check_hashes(true);
}

/// Runs example `name` with `from` replaced by `to` (which must occur)
/// and requires every check to pass.
fn passes_with(name: &str, from: &str, to: &str) {
    let (_, text) = examples().into_iter().find(|(n, _)| n == name).unwrap();
    let fixed = text.replace(from, to);
    assert_ne!(fixed, text, "{name} says {from:?}");
    let report = run(
        &Scenario::parse("fixed", &fixed).unwrap(),
        RunOptions::default(),
    )
    .unwrap();
    assert!(report.passed(), "{:?}", report.notes);
}

#[test]
fn the_hazard_passes_with_tombstones_on() {
    passes_with(
        "stale-duplicate-hazard.toml",
        "tombstones = false",
        "tombstones = true",
    );
}

#[test]
fn the_late_send_passes_with_the_default_window() {
    passes_with("stale-duplicate-send.toml", "tombstone_mode = \"fifo\"", "");
}

#[test]
fn a_tombstone_mode_is_one_of_two() {
    let e = error(&format!("{BASE}[nic]\ntombstone_mode = \"lru\"\n"));
    assert!(
        e.contains("bad.toml:6:18") && e.contains("expected one of window, fifo"),
        "{e}"
    );
    let e = error(&format!("{BASE}[nic]\ntombstone_capacity = 1\n"));
    assert!(
        e.contains("tombstone_capacity") && e.contains("at least 2"),
        "{e}"
    );
}

#[test]
fn same_seed_same_hash_other_seed_other_hash() {
    let (_, text) = examples()
        .into_iter()
        .find(|(n, _)| n == "reorder-spray.toml")
        .unwrap();
    let sc = Scenario::parse("x", &text).unwrap();
    let hash = |seed| {
        run(
            &sc,
            RunOptions {
                seed: Some(seed),
                ..RunOptions::default()
            },
        )
        .unwrap()
        .trace_hash
    };
    assert_eq!(hash(5), hash(5));
    assert_ne!(hash(5), hash(6));
}

fn error(text: &str) -> String {
    Scenario::parse("bad.toml", text).unwrap_err().to_string()
}

const BASE: &str = "name = \"x\"\n[topology]\nkind = \"star\"\nhosts = 4\n";

#[test]
fn invalid_files_say_where_and_what() {
    // A mistyped key after a multi-line array: still the workload's own
    // keys (a line of the array is no table header).
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"permutation\"\nsize = 8\npairs = [\n  [\"h0\", \"h1\"],\n  [\"h1\", \"h0\"],\n]\nsiez = 3\n"
    ));
    assert!(
        e.ends_with("unknown field `siez` in a `permutation` workload, expected one of `kind`, `op`, `size`, `count`, `pairs`, `start` (did you mean `size`?)"),
        "{e}"
    );
    // A file that sends nothing is refused, not passed.
    assert_eq!(
        error(BASE),
        "bad.toml:1:1: no [[workload]]: the run would send nothing and pass on nothing (docs/scenarios.md lists the workload kinds)"
    );
    // Unknown key, with the closest valid one.
    assert_eq!(
        error("name = \"x\"\n[topology]\nkind = \"star\"\nhostz = 4\n"),
        "bad.toml:4:1: unknown field `hostz`, expected one of `kind`, `hosts`, `k`, `levels`, `bandwidth`, `latency`, `mtu`, `queue`, `ecn_threshold`, `ecn_max`, `trim`, `control_priority`, `bottleneck`, `routing`, `phantom`, `order`, `pfc`, `pfc_xoff`, `pfc_xon`, `pfc_headroom`, `pfc_data_priority`, `pfc_control_priority` (did you mean `hosts`?)"
    );
    // A marking ramp needs its start, and must rise.
    assert_eq!(
        error(&format!("{BASE}ecn_max = \"64KiB\"\n")),
        "bad.toml:5:1: topology.ecn_max needs topology.ecn_threshold (where the marking ramp starts)"
    );
    assert_eq!(
        error(&format!("{BASE}ecn_threshold = \"64KiB\"\necn_max = \"16KiB\"\n")),
        "bad.toml:6:1: topology.ecn_max (16384 B) must be above ecn_threshold (65536 B): the ramp marks more as the queue grows from one to the other"
    );
    // The NIC's receive queue is named as the file spells it.
    let e = error("name = \"x\"\n[topology]\nkind = \"pair\"\n[nic]\nrecv_queue = 4\n[messaging]\nvbufs_per_peer = 8\n[[workload]]\nkind = \"msg-latency\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\n");
    assert!(
        e.contains("8 must be 1..=4 (the NIC's [nic] recv_queue)"),
        "{e}"
    );
    // A workload kind is named as the file spells it.
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"msg-latency\"\nsrc = \"h0\"\nsize = 8\n"
    ));
    assert!(
        e.ends_with("workload 0 (msg-latency) needs `src` and `dst`"),
        "{e}"
    );
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"random-pairs\"\nop = \"write\"\n"
    ));
    assert!(e.ends_with("workload 0 (random-pairs) needs `size`"), "{e}");
    // A window that keeps nothing in flight (it was raised to 1 in
    // silence).
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"window\"\nop = \"write\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\nwindow = 0\n"
    ));
    assert_eq!(
        e,
        "bad.toml:11:1: workload 0 (window): window = 0 keeps nothing in flight; it must be at least 1"
    );
    // At the workload that says it, not the first `window` of the file.
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"window\"\nop = \"write\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\nwindow = 2\n[[workload]]\nkind = \"window\"\nop = \"write\"\nsrc = \"h1\"\ndst = \"h0\"\nsize = 8\nwindow = 0\n"
    ));
    assert!(e.starts_with("bad.toml:18:1: workload 1 (window)"), "{e}");
    // A fault model's own refusal points at the key it names, not at the
    // rule's name.
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"single\"\nop = \"write\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\n[[fault]]\nname = \"r\"\nmodel = \"reorder\"\np = 0.1\ndelay = \"1us\"\ngap = 0\n"
    ));
    assert_eq!(e, "bad.toml:16:1: rule r: gap must be at least 1");
    // A queue that holds no packet (issue 51: `queue = 0` ran, dropping
    // everything).
    assert_eq!(
        error(&format!("{BASE}queue = 0\n")),
        "bad.toml:5:1: topology.queue = 0 B holds no packet: every port would drop all it is given; it must hold at least one of the link's MTU (9216 B)"
    );
    assert!(error(&format!("{BASE}mtu = 1500\nqueue = \"1KB\"\n")).contains("(1500 B)"));
    // A value of the wrong type or out of its type's range names its key
    // and says what it takes, in words; a duplicate key is named too.
    assert_eq!(
        error(&format!("{BASE}[nic]\nop_table = -64\n")),
        "bad.toml:6:12: nic.op_table: invalid value: integer `-64`, expected a whole number 0..=65535"
    );
    assert_eq!(
        error(&format!("{BASE}[nic]\nmtu_payload = \"-64\"\n")),
        "bad.toml:6:15: nic.mtu_payload: \"-64\" is negative: a size is a whole number of bytes, 0 or more"
    );
    assert_eq!(
        error("name = \"x\"\nseed = 1\nseed = 2\n"),
        "bad.toml:3:1: duplicate key `seed`"
    );
    let two = "[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\n";
    let e = error(&format!(
        "{BASE}{two}{}",
        two.replace("size = 8", "size = -8")
    ));
    assert!(
        e.ends_with("14:8: workload[1].size: \"-8\" is negative: a size is a whole number of bytes, 0 or more"),
        "{e}"
    );
    // A syntax error names what the parser expected, and suggests
    // nothing (there is no name to correct).
    assert_eq!(
        error("name = \"x\"\n[topology\nkind = \"pair\"\n"),
        "bad.toml:2:10: unclosed table, expected `]`"
    );
    // A unit off by case is named.
    assert!(
        error(&format!("{BASE}bandwidth = \"10gbps\"\n")).ends_with("(did you mean `Gbps`?)"),
        "{}",
        error(&format!("{BASE}bandwidth = \"10gbps\"\n"))
    );
    // A messaging setting out of range: at its key when the file gives
    // it, else at the table (the value is a default's), never at a
    // comment that happens to say "messaging".
    let msg = "name = \"x\"\n# a messaging case\n[topology]\nkind = \"pair\"\n[messaging]\nvbufs_per_peer = 2\n";
    assert!(
        error(msg).starts_with("bad.toml:5:1: [messaging] credit_preserve: 2 must be below"),
        "{}",
        error(msg)
    );
    let msg = format!("{msg}credit_preserve = 5\n");
    assert!(
        error(&msg).starts_with("bad.toml:7:1: [messaging] credit_preserve: 5 must be below"),
        "{}",
        error(&msg)
    );
    // A size that does not parse.
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"1MIB\"\n"
    ));
    assert!(
        e.starts_with("bad.toml:9:8: workload[0].size: unknown size unit \"MIB\""),
        "{e}"
    );
    // A host the topology lacks.
    let e = error(&format!(
        "{BASE}[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h9\"\nsize = \"1KiB\"\n"
    ));
    assert_eq!(e, "bad.toml:8:7: workload 0 (single): no host \"h9\" in this topology (it has 4 hosts, h0..h3)");
    // An unknown link in a fault, with a suggestion.
    let e = error(&format!(
        "{BASE}[[fault]]\nmodel = \"down\"\nlinks = [\"h0-s1\"]\n"
    ));
    assert!(
        e.contains("unknown link \"h0-s1\" (did you mean \"h0-s0\"?)")
            && e.starts_with("bad.toml:7:"),
        "{e}"
    );
    // A model without its parameter, an enum value that does not exist.
    let e = error(&format!(
        "{BASE}[[fault]]\nname = \"l\"\nmodel = \"loss\"\n"
    ));
    assert!(e.contains("fault \"l\": model loss needs `p`"), "{e}");
    let e = error(&format!("{BASE}[[fault]]\nmodel = \"lose\"\np = 0.1\n"));
    assert!(
        e.starts_with("bad.toml:6:9: fault[0].model: unknown variant `lose`")
            && e.contains("did you mean `loss`"),
        "{e}"
    );
    // Broken TOML.
    assert!(error("name = \"x\"\n[topology\n").starts_with("bad.toml:2:"));
    // What a file may ask for is bounded.
    let e = error(&format!("{BASE}[[workload]]\nkind = \"many\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 1\ncount = 4000000000\n"));
    assert!(e.contains("at most 2000000 are allowed"), "{e}");
    let e = error(&format!("{BASE}[[workload]]\nkind = \"many\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"1GiB\"\ncount = 8\n"));
    assert!(e.contains("set `phantom = true`"), "{e}");
    // NIC values out of range name the field.
    let e = error(&format!("{BASE}[nic]\nmtu_payload = 0\n"));
    assert!(e.contains("nic.mtu_payload = 0"), "{e}");
}

/// `order = "windows"`: the lossy example passes the same checks in
/// windows, with a trace of its own; a rate shaper, whose backlog needs
/// its packets in time order, refuses windows at the key that asks for
/// them.
#[test]
fn windows_pass_the_lossy_example_and_a_shaper_refuses_them_by_key() {
    let time = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/lossy-write.toml"),
    )
    .unwrap();
    let windows = time.replace(
        "routing = \"ecmp\"\n",
        "routing = \"ecmp\"\norder = \"windows\"\n",
    );
    assert_ne!(time, windows);
    let (a, b) = (run_text(&time), run_text(&windows));
    assert!(a.passed() && b.passed(), "{:?} {:?}", a.checks, b.checks);
    assert_eq!(a.ops.completed, b.ops.completed);
    assert_ne!(a.trace_hash, b.trace_hash);
    let shaped = format!(
        "{BASE}order = \"windows\"\n[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"64KiB\"\n[[fault]]\nname = \"shaper\"\nmodel = \"rate\"\nrate = \"10Gbps\"\n"
    );
    let e = run(
        &Scenario::parse("bad.toml", &shaped).unwrap(),
        RunOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("bad.toml:5:1: order = \"windows\": fault rule \"shaper\""),
        "{e}"
    );
}

fn run_text(text: &str) -> udrma_scenarios::Report {
    run(
        &Scenario::parse("inline.toml", text).unwrap(),
        RunOptions::default(),
    )
    .unwrap()
}

#[test]
fn pingpong_alternates_and_reports_round_trips() {
    let r = run_text(
        "name = \"pp\"\n[topology]\nkind = \"pair\"\n[[workload]]\nkind = \"pingpong\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 8\ncount = 10\n",
    );
    assert!(r.passed(), "{:?}", r.notes);
    assert_eq!((r.ops.posted, r.ops.completed), (20, 20));
    // Each one-way write over a 1 µs link lands in about 1 µs; the sender
    // completes on the ACK, a round trip: p50 near 2 µs.
    assert!(
        (1_900..2_300).contains(&r.completion_ns.p50),
        "{:?}",
        r.completion_ns
    );
    // Twenty writes back to back: the run lasts ~20 one-way trips, not 10.
    assert!(r.sim_time_ns >= 20_000, "{}", r.sim_time_ns);
}

#[test]
fn random_pairs_and_window_workloads_complete() {
    let r = run_text(
        "name = \"rp\"\n[topology]\nkind = \"star\"\nhosts = 6\n[[workload]]\nkind = \"random-pairs\"\nsize = \"8KiB\"\ncount = 30\n[[workload]]\nkind = \"window\"\nop = \"read\"\nsrc = \"h0\"\ndst = \"h5\"\nsize = \"4KiB\"\ncount = 20\nwindow = 3\n",
    );
    assert!(r.passed(), "{:?}", r.notes);
    assert_eq!(r.ops.completed, 50);
}

#[test]
fn a_time_limit_too_short_fails_all_complete_and_liveness() {
    let r = run_text("name = \"short\"\ntime_limit = \"3us\"\n[topology]\nkind = \"pair\"\n[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"1MiB\"\n");
    assert!(!r.checks["all-complete"]);
    assert!(!r.checks["liveness"]);
    assert!(
        r.notes.iter().any(|n| n
            .starts_with("stopped at the time limit (3.000us): the last event ran at ")
            && n.contains("h0: 1 request outstanding")),
        "{:?}",
        r.notes
    );
}

/// Fault rules are addressed by name (`--set fault.NAME.KEY=...`): a
/// second rule of the same name is refused at its own `name` line, and a
/// default name (`fault<i>`) taken by hand counts too.
#[test]
fn two_fault_rules_of_one_name_are_refused_at_the_second() {
    let file = |a: &str, b: &str| {
        format!(
            "name = \"dup\"\n[topology]\nkind = \"pair\"\n[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 100\n[[fault]]\n{a}model = \"loss\"\np = 0.1\n[[fault]]\n{b}model = \"duplicate\"\np = 0.1\n"
        )
    };
    let e = Scenario::parse("dup.toml", &file("name = \"loss\"\n", "name = \"loss\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("dup.toml:14:1: fault 1 is named \"loss\" like fault 0"),
        "{e}"
    );
    assert!(e.contains("--set fault.loss.KEY"), "{e}");
    let e = Scenario::parse("dup.toml", &file("", "name = \"fault0\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fault 1 is named \"fault0\" like fault 0"),
        "{e}"
    );
    assert!(Scenario::parse("dup.toml", &file("name = \"a\"\n", "name = \"b\"\n")).is_ok());
}

/// A ping-pong whose first WRITE runs out of retries (the link is down
/// for the whole run): the failure is reported, and the rounds that wait
/// for that WRITE to land are never posted. They are accounted, each
/// with a note naming the failure that ended its chain, not lost:
/// all-complete and liveness hold, all-succeeded does not.
#[test]
fn a_ping_pong_ends_where_its_write_failed_and_says_so() {
    let r = run_text(
        "name = \"cut\"\ntime_limit = \"1s\"\n[topology]\nkind = \"pair\"\n[nic]\nmax_retries = 3\n\
         [[workload]]\nkind = \"pingpong\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"4KiB\"\ncount = 2\n\
         [[fault]]\nname = \"cut\"\nmodel = \"down\"\nlinks = [\"h0-h1\"]\nfrom = \"0us\"\nuntil = \"1s\"\n",
    );
    assert_eq!((r.ops.posted, r.ops.failed), (1, 1), "{:?}", r.notes);
    assert!(r.checks["all-complete"], "{:?}", r.notes);
    assert!(r.checks["liveness"], "{:?}", r.notes);
    assert!(!r.checks["all-succeeded"]);
    let ended: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| n.ends_with("not posted: op 0, whose landing it waits for, failed"))
        .collect();
    assert_eq!(ended.len(), 3, "{:?}", r.notes);
    assert!(
        ended[0].starts_with("op 1 (Write h1→h0 4096 B)"),
        "{ended:?}"
    );
}
