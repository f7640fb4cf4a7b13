//! Collective studies end to end: every collective, operation and type
//! the NIC offload and the host baseline run, over every topology kind,
//! through loss, duplication and reordering, with every node's result
//! equal to the reference; over real sockets too; bad input named by its
//! key.

use proptest::prelude::*;
use udrma_scenarios::{run, BackendKind, RunOptions, Scenario};

fn scenario(topology: &str, workload: &str, faults: &str) -> Scenario {
    scenario_with(topology, "", workload, faults)
}

fn scenario_with(topology: &str, nic: &str, workload: &str, faults: &str) -> Scenario {
    let text = format!(
        "name = \"coll\"\nprofile = \"tianhe-nic\"\ntime_limit = \"200ms\"\n\
         [topology]\n{topology}\n[nic]\nrto_initial = \"40us\"\nrto_min = \"20us\"\n{nic}\n\
         [[workload]]\nkind = \"collective\"\n{workload}\n{faults}"
    );
    Scenario::parse("coll.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

const ROUGH: &str = "[[fault]]\nmodel = \"loss\"\np = 0.03\n\
                     [[fault]]\nmodel = \"duplicate\"\np = 0.03\n\
                     [[fault]]\nmodel = \"reorder\"\np = 0.05\ndelay = \"3us\"\n";

fn passes(sc: &Scenario, backend: BackendKind) -> udrma_scenarios::Report {
    let r = run(
        sc,
        RunOptions {
            backend,
            ..RunOptions::default()
        },
    )
    .unwrap();
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    r
}

#[test]
fn every_collective_passes_on_every_topology_through_a_rough_fabric() {
    let topologies = [
        "kind = \"kary-ntree\"\nk = 4\nhosts = 27",
        "kind = \"fat-tree\"\nk = 4",
        "kind = \"star\"\nhosts = 9",
        "kind = \"pair\"",
    ];
    for topo in topologies {
        for collective in ["allreduce", "reduce", "broadcast"] {
            let w = format!(
                "collective = \"{collective}\"\nreduce_op = \"minloc\"\ndatatype = \"f32\"\n\
                 size = \"64B\"\ncount = 4"
            );
            let r = passes(&scenario(topo, &w, ROUGH), BackendKind::Sim);
            let c = r.collective.unwrap();
            assert_eq!(
                c.nic.unwrap().completed_iterations,
                4,
                "{topo} {collective}"
            );
            assert_eq!(
                c.host.unwrap().completed_iterations,
                4,
                "{topo} {collective}"
            );
        }
    }
}

#[test]
fn the_default_fan_in_follows_the_topology() {
    let w = "size = \"8B\"\nmethod = \"nic\"";
    let radix = |topo: &str| {
        passes(&scenario(topo, w, ""), BackendKind::Sim)
            .collective
            .unwrap()
            .radix
    };
    assert_eq!(radix("kind = \"kary-ntree\"\nk = 4\nhosts = 16"), 4);
    assert_eq!(radix("kind = \"fat-tree\"\nk = 4"), 2);
    assert_eq!(radix("kind = \"star\"\nhosts = 7"), 7);
}

#[test]
fn the_offload_beats_host_software_on_the_calibrated_profile() {
    let topo = "kind = \"kary-ntree\"\nk = 4\nhosts = 64";
    let w = "size = \"48B\"\nfan_in = 8\ncount = 2";
    let r = passes(&scenario(topo, w, ""), BackendKind::Sim);
    let c = r.collective.unwrap();
    assert!(c.speedup > 1.5, "speedup {}", c.speedup);
    // 64 nodes, radix 8: 63 REDUCE up and 63 REDUCE_BCAST down per
    // iteration, 64 up descriptors and 8 broadcasts fired.
    let nic = c.nic.unwrap();
    assert_eq!(nic.packets, 2 * 126);
    assert_eq!(nic.descriptors_fired, 2 * (64 + 8));
}

#[test]
fn a_longer_vector_takes_more_descriptors_and_more_time() {
    let topo = "kind = \"kary-ntree\"\nk = 4\nhosts = 16";
    let t = |size: &str| {
        let w = format!("size = \"{size}\"\nfan_in = 8\nmethod = \"nic\"");
        let c = passes(&scenario(topo, &w, ""), BackendKind::Sim)
            .collective
            .unwrap();
        let nic = c.nic.unwrap();
        (nic.completion_us.p50, nic.packets)
    };
    let (t48, p48) = t("48B");
    let (t56, p56) = t("56B");
    assert_eq!(p56, 2 * p48, "two chunks per tree edge");
    assert!(t56 > t48 * 1.05, "{t56} vs {t48}");
}

#[test]
fn the_same_engine_runs_the_collective_over_real_sockets() {
    let w = "reduce_op = \"bxor\"\ndatatype = \"u64\"\nsize = \"24B\"\ncount = 3\nstart = \"20ms\"";
    let r = passes(
        &scenario("kind = \"star\"\nhosts = 5", w, ""),
        BackendKind::Udp,
    );
    assert_eq!(r.backend, "udp");
    assert!(r.checks["result-equal"]);
}

#[test]
fn bad_collective_keys_are_named() {
    let bad = |topo: &str, w: &str, want: &str| {
        let text = format!(
            "name = \"bad\"\n[topology]\n{topo}\n[[workload]]\nkind = \"collective\"\n{w}\n"
        );
        let e = Scenario::parse("bad.toml", &text).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        assert!(e.starts_with("bad.toml:"), "located: {e}");
    };
    let star = "kind = \"star\"\nhosts = 4";
    bad(
        star,
        "size = \"8B\"\nreduce_op = \"avg\"",
        "expected one of sum, min",
    );
    bad(
        star,
        "size = \"8B\"\nreduce_op = \"band\"",
        "band is not defined on f64",
    );
    bad(star, "size = \"12B\"", "whole number of f64 elements");
    bad(star, "", "needs `size`");
    bad(
        star,
        "size = \"8B\"\nnodes = 9",
        "`nodes = 9`: must be 2..=4",
    );
    bad(
        star,
        "size = \"8B\"\ncollective = \"scan\"",
        "expected allreduce, reduce or broadcast",
    );
    bad(
        star,
        "size = \"8B\"\nmethod = \"gpu\"",
        "expected nic, host or both",
    );
    bad(star, "size = \"8B\"\nfan_in = 1", "radix must be 2..=256");
    bad(
        "kind = \"kary-ntree\"\nk = 4\nhosts = 17\nlevels = 2",
        "size = \"8B\"",
        "holds 1..=16 hosts",
    );
    let text = "name = \"bad\"\n[topology]\nkind = \"pair\"\n[[workload]]\nkind = \"single\"\n\
                src = \"h0\"\ndst = \"h1\"\nsize = \"8B\"\nreduce_op = \"sum\"\n";
    let e = Scenario::parse("bad.toml", text).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "bad.toml:9:1: workload 0: `reduce_op` does not apply to `kind = \"single\"`"
        ),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random studies on a k-ary n-tree through a rough fabric: every
    /// node's result equals the reference in every iteration, both ways.
    #[test]
    fn random_studies_agree_with_the_reference(
        hosts in 2u32..40,
        k in 2u32..5,
        fan_in in 2u32..9,
        op in 0usize..11,
        ty in 0usize..6,
        elements in 1u64..20,
        collective in 0usize..3,
        seed in any::<u64>(),
    ) {
        let op = udrma_proto::ReduceOp::ALL[op];
        let ty = udrma_proto::ReduceType::ALL[ty];
        prop_assume!(op.applies_to(ty));
        let w = format!(
            "collective = \"{}\"\nreduce_op = \"{}\"\ndatatype = \"{}\"\nsize = \"{}B\"\n\
             fan_in = {fan_in}\ncount = 3",
            ["allreduce", "reduce", "broadcast"][collective],
            op.name(),
            ty.name(),
            elements * ty.width().unwrap() as u64,
        );
        let topo = format!("kind = \"kary-ntree\"\nk = {k}\nhosts = {hosts}");
        // The faults act on every link, and a binary tree of 40 hosts is
        // six levels deep: a packet and its acknowledgement cross up to 24
        // links, so one try in two can fail (1 - 0.97^24 = 0.52) and the
        // default budget of 8 retries runs out about three times per thousand
        // packets (0.52^9). CI found such a case (saved in
        // collective.proptest-regressions). This property is about
        // results, so the budget is sized for the path: 0.52^31 < 1e-8.
        let nic = "rto_max = \"1ms\"\nmax_retries = 30";
        let sc = scenario_with(&topo, nic, &w, ROUGH);
        let r = run(&sc, RunOptions { seed: Some(seed), ..RunOptions::default() }).unwrap();
        prop_assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    }
}

/// A time limit that lets the offload finish one iteration of ten and the
/// host baseline none: the summary says so, rather than showing times of
/// zero for iterations that never finished.
#[test]
fn a_version_that_finished_no_iteration_says_so() {
    let text = "name = \"short\"\ntime_limit = \"30us\"\nprofile = \"tianhe-nic\"\n\
                [topology]\nkind = \"kary-ntree\"\nk = 2\nhosts = 32\n\
                [[workload]]\nkind = \"collective\"\nsize = \"48B\"\nfan_in = 2\ncount = 10\n";
    let sc = Scenario::parse("short.toml", text).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(!r.checks["all-complete"]);
    let table = r.table();
    assert!(
        table.contains("  host  no iteration finished (of 10);  packets "),
        "{table}"
    );
    assert!(
        table.contains("  (1 of 10 iterations finished)\n"),
        "{table}"
    );
    assert!(!table.contains("all nodes done p50 0.000"), "{table}");
}

/// The summary describes the trees of the versions that ran: with
/// `method = "host"` no NIC tree (it printed one before), with
/// `method = "nic"` no host tree, with both (the default) both.
#[test]
fn the_summary_names_only_the_trees_that_ran() {
    let topo = "kind = \"star\"\nhosts = 9";
    for (method, nic, host) in [
        ("host", false, true),
        ("nic", true, false),
        ("both", true, true),
    ] {
        let w = format!(
            "collective = \"allreduce\"\nreduce_op = \"sum\"\ndatatype = \"f64\"\n\
             size = \"48B\"\ncount = 2\nmethod = \"{method}\""
        );
        let r = passes(&scenario(topo, &w, ""), BackendKind::Sim);
        let line = r
            .table()
            .lines()
            .find(|l| l.starts_with("collective"))
            .expect("a collective line")
            .to_string();
        assert_eq!(line.contains("NIC tree"), nic, "{method}: {line}");
        assert_eq!(line.contains("host tree"), host, "{method}: {line}");
    }
}
