//! Congestion control end to end: ECN marks reach the engines and come
//! back to the senders, each controller tames an all-to-all that drops
//! without one, and a controller name that does not exist is located.

use udrma_scenarios::{run, Report, RunOptions, Scenario};

/// An all-to-all on a k=4 fat tree (16 hosts, 64 KiB per pair) through
/// 128 KiB queues that mark above 32 KiB.
fn all_to_all(cc: &str) -> String {
    format!(
        r#"
name = "a2a-k4-{cc}"
seed = 1
time_limit = "100ms"

[topology]
kind = "fat-tree"
k = 4
routing = "ecmp"
phantom = true
queue = "128KiB"
ecn_threshold = "32KiB"

[nic]
max_retries = 16
cc = "{cc}"

[[workload]]
kind = "all-to-all"
size = "64KiB"
"#
    )
}

fn report(text: &str) -> Report {
    let sc = Scenario::parse("test.toml", text).unwrap_or_else(|e| panic!("{e}"));
    run(&sc, RunOptions::default()).unwrap()
}

#[test]
fn marks_reach_the_receivers_and_come_back_to_the_senders() {
    let r = report(&all_to_all("none"));
    assert!(r.passed(), "{:?}", r.notes);
    assert_eq!(r.cc, "none");
    // Marked packets are counted where a queue marks them; the receivers
    // echo every marked data packet they acknowledge.
    assert!(r.packets.ecn_marked > 1000, "{:?}", r.packets);
    assert!(r.ecn_echoes > 1000, "{}", r.ecn_echoes);
    assert!(r.ecn_echoes <= r.packets.ecn_marked);
}

#[test]
fn each_controller_tames_an_all_to_all_that_drops_without_one() {
    let none = report(&all_to_all("none"));
    assert!(none.packets.dropped > 1000, "{:?}", none.packets);
    for cc in ["nscc", "dcqcn", "rccc"] {
        let r = report(&all_to_all(cc));
        assert!(r.passed(), "{cc}: {:?}", r.notes);
        assert_eq!(r.cc, cc);
        assert!(
            r.packets.dropped * 20 < none.packets.dropped,
            "{cc}: {} drops against {} without a controller",
            r.packets.dropped,
            none.packets.dropped
        );
        assert!(
            r.completion_ns.max * 2 < none.completion_ns.max,
            "{cc}: done at {} ns against {} ns",
            r.completion_ns.max,
            none.completion_ns.max
        );
    }
}

#[test]
fn an_unknown_controller_is_named_with_its_line() {
    let text = all_to_all("bbr");
    let e = Scenario::parse("test.toml", &text).unwrap_err().to_string();
    assert!(e.contains("test.toml:16"), "{e}");
    assert!(
        e.contains(r#"nic.cc = "bbr": unknown controller; known: none, nscc, dcqcn, rccc"#),
        "{e}"
    );
}

/// A 15-to-1 incast of 256 KiB each through 64 KiB queues (the shipped
/// `incast.toml`), with or without trimming switches.
fn incast(cc: &str, trim: bool) -> String {
    format!(
        r#"
name = "incast-{cc}"
seed = 1

[topology]
kind = "star"
hosts = 16
queue = "64KiB"
ecn_threshold = "32KiB"
trim = {trim}

[nic]
max_retries = 16
cc = "{cc}"

[[workload]]
kind = "incast"
dst = "h0"
size = "256KiB"
"#
    )
}

#[test]
fn trimming_switches_turn_every_tail_drop_into_a_nack() {
    for cc in ["none", "nscc", "dcqcn"] {
        let dropping = report(&incast(cc, false));
        let trimming = report(&incast(cc, true));
        assert!(trimming.passed(), "{cc}: {:?}", trimming.notes);
        assert!(dropping.packets.dropped > 0, "{cc}");
        // Not one packet lost without its receiver hearing of it, and each
        // trimmed payload was sent again once: no timeouts needed.
        assert_eq!(trimming.packets.dropped, 0, "{cc}");
        assert!(trimming.packets.trimmed > 0, "{cc}");
        assert_eq!(trimming.retransmits, trimming.packets.trimmed, "{cc}");
        assert!(
            trimming.completion_ns.max < dropping.completion_ns.max,
            "{cc}: {} ns trimming against {} ns dropping",
            trimming.completion_ns.max,
            dropping.completion_ns.max
        );
    }
}

#[test]
fn receiver_credit_runs_the_incast_near_line_rate_without_a_loss() {
    let none = report(&incast("none", false));
    let r = report(&incast("rccc", false));
    assert!(r.passed(), "{:?}", r.notes);
    assert_eq!(r.cc, "rccc");
    // The senders wait for h0's grants, so its 64 KiB queue never
    // overflows: nothing dropped, nothing sent twice.
    assert!(none.packets.dropped > 1000, "{:?}", none.packets);
    assert_eq!(r.packets.dropped, 0, "{:?}", r.packets);
    assert_eq!(r.retransmits, 0);
    // 15 × 256 KiB into one 100 Gb/s port: at least 90 % of the line.
    assert!(r.goodput_gbps >= 90.0, "{} Gb/s", r.goodput_gbps);
    // h0 grants the senders in turn, so they finish together (served one
    // after another, the first would be done at a fifteenth of the time).
    let c = &r.completion_ns;
    assert!(
        c.p50 * 10 >= c.max * 9,
        "p50 {} ns, max {} ns",
        c.p50,
        c.max
    );
}

/// A 15-to-1 incast of 256 KiB each into a 1 MiB queue that marks above
/// 100 KiB: deep enough that queueing, not loss, is what a timer sees.
fn deep_incast(cc: &str, rto_min: &str) -> String {
    format!(
        r#"
name = "deep-incast-{cc}"
seed = 1

[topology]
kind = "star"
hosts = 16
queue = "1MiB"
ecn_threshold = "100KiB"

[nic]
max_retries = 16
cc = "{cc}"
rto_min = "{rto_min}"

[[workload]]
kind = "incast"
dst = "h0"
size = "256KiB"
"#
    )
}

#[test]
fn a_full_queue_timer_floor_leaves_recovery_to_the_acks_and_resends_only_what_was_lost() {
    // A 20 us floor: the queue at h0 grows faster than the smoothed RTT
    // follows, so packets only queued time out and go twice.
    let short = report(&deep_incast("nscc", "20us"));
    assert!(short.passed(), "{:?}", short.notes);
    assert!(short.timeouts > 0);
    assert!(
        short.retransmits > short.packets.dropped,
        "{} resent for {} dropped",
        short.retransmits,
        short.packets.dropped
    );
    // "full-queues": the floor is every queue of a round trip drained
    // (a star's path crosses two, its ACK two more), so the timer waits
    // for the selective ACKs: each lost packet is resent once, on their
    // word, and nothing else is.
    let r = report(&deep_incast("nscc", "full-queues"));
    assert!(r.passed(), "{:?}", r.notes);
    assert!(r.packets.dropped > 0, "{:?}", r.packets);
    assert_eq!(r.timeouts, 0);
    assert_eq!(r.retransmits, r.packets.dropped);
    assert_eq!(r.fast_retransmits, r.packets.dropped);
    assert_eq!(r.dup_dropped, 0);
}

#[test]
fn the_full_queue_floor_is_worked_out_from_the_topology() {
    let floor = |extra: &str| {
        let text = deep_incast("nscc", "full-queues").replace("[nic]", &format!("{extra}\n[nic]"));
        let sc = Scenario::parse("test.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        sc.resolve().unwrap().nic.rto_min.as_ps()
    };
    // 1 MiB at 100 Gb/s drains in 83.886 us; a star's round trip crosses
    // two queues out and two back.
    let drain = (1u64 << 20) * 8 * 10; // ps at 100 Gb/s: 10 ps a bit
    assert_eq!(floor(""), 4 * drain);
    // Switches that serve ACKs first leave only the ACK's host queue.
    assert_eq!(floor("control_priority = true"), 3 * drain);
    // A fat tree's longest path crosses six queues, and so does a
    // three-level k-ary n-tree's (two per level): twelve on a round trip.
    let shape = |topology: &str| {
        let text = deep_incast("nscc", "full-queues")
            .replace("kind = \"star\"\nhosts = 16", topology)
            .replace("dst = \"h0\"", "dst = \"h0\"\nsrcs = [\"h1\"]");
        let sc = Scenario::parse("test.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        sc.resolve().unwrap().nic.rto_min.as_ps()
    };
    assert_eq!(shape("kind = \"fat-tree\"\nk = 4"), 12 * drain);
    assert_eq!(
        shape("kind = \"kary-ntree\"\nk = 4\nhosts = 64\nlevels = 3"),
        12 * drain
    );
    // A floor equal to the ceiling is allowed (only one above it is not).
    let text = deep_incast("nscc", "full-queues").replace(
        "max_retries",
        &format!("rto_max = \"{}ps\"\nmax_retries", 4 * drain),
    );
    let sc = Scenario::parse("test.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sc.resolve().unwrap().nic.rto_min.as_ps(), 4 * drain);
    // A fixed floor is taken as given.
    let text = deep_incast("nscc", "35us");
    let sc = Scenario::parse("test.toml", &text).unwrap();
    assert_eq!(sc.resolve().unwrap().nic.rto_min.as_ps(), 35_000_000);
}

#[test]
fn a_floor_that_is_neither_a_time_nor_full_queues_is_named_with_its_line() {
    let text = deep_incast("nscc", "full");
    let e = Scenario::parse("test.toml", &text).unwrap_err().to_string();
    assert!(e.contains("test.toml:14"), "{e}");
    assert!(
        e.contains(r#"(or "full-queues", from the topology)"#),
        "{e}"
    );
    // A floor above the ceiling would clamp every timeout to the ceiling.
    let text = deep_incast("nscc", "full-queues")
        .replace("max_retries", "rto_max = \"200us\"\nmax_retries");
    let e = Scenario::parse("test.toml", &text).unwrap_err().to_string();
    assert!(e.contains("test.toml:15"), "{e}");
    assert!(
        e.contains(r#"nic.rto_min = "full-queues" works out to 335.544us on this topology, above nic.rto_max (200.000us)"#),
        "{e}"
    );
}

/// A permutation given by its pairs, on a 4-host star.
fn pairs(list: &str) -> String {
    format!(
        r#"
name = "pairs"
seed = 1

[topology]
kind = "star"
hosts = 4

[[workload]]
kind = "permutation"
size = "8KiB"
pairs = {list}
"#
    )
}

#[test]
fn a_permutation_given_by_pairs_runs_exactly_those_flows() {
    let r = report(&pairs(r#"[["h0", "h3"], ["h3", "h1"]]"#));
    assert!(r.passed(), "{:?}", r.notes);
    assert_eq!(r.ops.posted, 2);
    assert_eq!(r.ops.completed, 2);
}

#[test]
fn bad_pairs_are_named_with_the_workload() {
    for (list, want) in [
        (r#"[["h0", "h9"]]"#, "h9"),
        (
            r#"[["h0", "h1"], ["h2", "h2"]]"#,
            "pairs[1] sends from h2 to itself",
        ),
    ] {
        let e = Scenario::parse("test.toml", &pairs(list))
            .and_then(|sc| run(&sc, RunOptions::default()).map(|_| ()))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
        assert!(e.contains("workload 0"), "{e}");
    }
}

/// Go-back-N on sprayed paths: every early arrival is discarded and NACKed
/// (the hunt's findings 24 and 25 were 23,046 NACKs for 53 drops, and
/// congestion marks lost with the discarded packets). The file is refused
/// at the key that spreads, and one path per flow is accepted.
#[test]
fn go_back_n_on_sprayed_paths_is_refused_at_the_key_that_sprays() {
    let file = |routing: &str, multipath: &str| {
        format!(
            "name = \"gbn\"\nseed = 1\n\n[topology]\nkind = \"fat-tree\"\nk = 4\nrouting = \"{routing}\"\n\n[nic]\nretransmit = \"go-back-n\"\nmultipath = \"{multipath}\"\n\n[[workload]]\nkind = \"incast\"\ndst = \"h0\"\nsize = \"64KiB\"\n"
        )
    };
    for (routing, multipath, line, what) in [
        (
            "ecmp",
            "spray",
            11,
            r#"nic.multipath = "spray" reorders every flow"#,
        ),
        (
            "ecmp",
            "reps",
            11,
            r#"nic.multipath = "reps" reorders every flow"#,
        ),
        (
            "spray",
            "single",
            7,
            r#"topology.routing = "spray" reorders every flow"#,
        ),
    ] {
        let e = Scenario::parse("gbn.toml", &file(routing, multipath))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("gbn.toml:{line}:")), "{e}");
        assert!(e.contains(what), "{e}");
        assert!(e.contains(r#"use retransmit = "selective""#), "{e}");
    }
    let ok = Scenario::parse("gbn.toml", &file("ecmp", "single")).unwrap();
    let r = run(&ok, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}", r.notes);
    let sprayed = file("spray", "spray").replace("go-back-n", "selective");
    assert!(Scenario::parse("gbn.toml", &sprayed).is_ok());
}

/// `loss_window` answers losses near a sign of congestion: under go-back-N
/// on a fabric that trims or marks, and trims under selective
/// retransmission with no controller. Set where no such loss can happen
/// it would change nothing, so the file is refused at the key; where one
/// can, either value is taken.
#[test]
fn a_loss_window_that_changes_nothing_is_refused_at_its_key() {
    let file = |retransmit: &str, cc: &str, trim: bool, on: bool| {
        format!(
            "name = \"lw\"\nseed = 1\n\n[topology]\nkind = \"pair\"\ntrim = {trim}\n\n[nic]\nretransmit = \"{retransmit}\"\ncc = \"{cc}\"\nloss_window = {on}\n\n[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"64KiB\"\n"
        )
    };
    for (retransmit, cc, trim) in [
        ("selective", "none", false),
        ("selective", "dcqcn", true),
        ("go-back-n", "none", false),
    ] {
        let e = Scenario::parse("lw.toml", &file(retransmit, cc, trim, true))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lw.toml:11:"), "{e}");
        assert!(e.contains("nic.loss_window changes nothing here"), "{e}");
    }
    for (retransmit, cc, trim) in [
        ("go-back-n", "none", true),
        ("go-back-n", "dcqcn", true),
        ("selective", "none", true),
    ] {
        for on in [true, false] {
            let sc = Scenario::parse("lw.toml", &file(retransmit, cc, trim, on)).unwrap();
            assert!(run(&sc, RunOptions::default()).unwrap().passed());
        }
    }
}
