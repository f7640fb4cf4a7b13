//! The same scenario file in both backends: the simulated fabric and real
//! UDP sockets on loopback. What completed must be the same — the same
//! operations, byte-exact memory, MPI order — though real time makes
//! the timings (and the retransmissions) differ.

use udrma_scenarios::{run, BackendKind, Report, RunOptions, Scenario};

fn example(name: &str) -> String {
    let path = format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

fn both(name: &str, text: &str) -> (Report, Report) {
    let sc = Scenario::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
    let go = |backend| {
        run(
            &sc,
            RunOptions {
                backend,
                ..RunOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"))
    };
    (go(BackendKind::Sim), go(BackendKind::Udp))
}

fn assert_passed(r: &Report) {
    let failed: Vec<&String> = r
        .checks
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(k, _)| k)
        .collect();
    assert!(
        failed.is_empty(),
        "{} backend: {failed:?} failed: {:?}",
        r.backend,
        r.notes
    );
}

/// Same operations posted and completed, every check passed in both.
fn assert_same_outcome(sim: &Report, udp: &Report) {
    assert_eq!((sim.backend.as_str(), udp.backend.as_str()), ("sim", "udp"));
    assert_passed(sim);
    assert_passed(udp);
    assert_eq!(sim.ops, udp.ops, "the same operations completed");
    assert_eq!(
        sim.checks.keys().collect::<Vec<_>>(),
        udp.checks.keys().collect::<Vec<_>>(),
        "the same checks ran"
    );
    assert!(udp.trace_hash.starts_with("none"), "{}", udp.trace_hash);
}

#[test]
fn the_demo_completes_the_same_in_both_backends() {
    // Loss, duplication and reordering: on sockets they are the same
    // fault rules, applied to what each host sends.
    let (sim, udp) = both("demo.toml", &example("demo.toml"));
    assert_same_outcome(&sim, &udp);
    assert!(sim.checks["memory-equal"] && udp.checks["memory-equal"]);
    assert!(
        udp.packets.dropped > 0 && udp.packets.duplicated > 0,
        "{:?}",
        udp.packets
    );
    // On sockets only the egress rules drop: every drop is the loss
    // rule's, named as in the file.
    for r in [&sim, &udp] {
        let rules: Vec<_> = r.lost.faults.iter().map(|f| f.rule.as_str()).collect();
        assert_eq!(rules, ["loss", "dup", "reorder"], "{}", r.backend);
    }
    assert_eq!(udp.lost.faults[0].dropped, udp.packets.dropped);
    assert_eq!(udp.lost.total, udp.packets.dropped);
}

#[test]
fn an_osu_latency_shaped_run_matches_in_order_and_bytes() {
    let text = r#"
name = "osu-latency-small"
seed = 3
time_limit = "200ms"
profile = "roce-100g"
[topology]
kind = "pair"
[[workload]]
kind = "msg-latency"
src = "h0"
dst = "h1"
sizes = "1B..64KiB"
count = 20
warmup = 2
"#;
    let (sim, udp) = both("osu-latency-small.toml", text);
    assert_same_outcome(&sim, &udp);
    assert!(udp.checks["mpi-order"] && udp.checks["memory-equal"]);
    let rows = |r: &Report| {
        r.messaging
            .as_ref()
            .unwrap()
            .sizes
            .iter()
            .map(|row| (row.size, row.messages, row.protocol.clone()))
            .collect::<Vec<_>>()
    };
    // The same sizes, message counts and protocols per size (eager up to
    // the threshold, rendezvous above).
    assert_eq!(rows(&sim), rows(&udp));
    assert_eq!(rows(&sim).len(), 17);
}

#[test]
fn a_faulted_messaging_run_repairs_the_same_losses_on_sockets() {
    let text = r#"
name = "lossy-messages"
seed = 5
time_limit = "500ms"
[topology]
kind = "star"
hosts = 3
[[workload]]
kind = "msg-bw"
src = "h0"
dst = "h2"
sizes = [4096, 65536]
count = 4
window = 8
[[fault]]
name = "loss"
model = "loss"
p = 0.03
[[fault]]
name = "reorder"
model = "reorder"
p = 0.8
delay = "200us"
"#;
    let (sim, udp) = both("lossy-messages.toml", text);
    assert_same_outcome(&sim, &udp);
    assert!(udp.packets.dropped > 0, "{:?}", udp.packets);
    assert!(udp.retransmits > 0);
}

#[test]
fn what_sockets_cannot_do_is_refused_by_key() {
    let refuse = |name: &str, text: &str, want: &str| {
        let sc = Scenario::parse(name, text).unwrap();
        let e = run(
            &sc,
            RunOptions {
                backend: BackendKind::Udp,
                ..RunOptions::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(want), "{e}");
    };
    refuse(
        "lossy-write.toml",
        &example("lossy-write.toml"),
        "lossy-write.toml:11:1: topology kind `fat-tree` has switches",
    );
    refuse(
        "link-flap.toml",
        &example("link-flap.toml"),
        "host pauses are simulated-only",
    );
    refuse(
        "osu-latency.toml",
        &example("osu-latency.toml").replace("[topology]\n", "[topology]\norder = \"windows\"\n"),
        "osu-latency.toml:13:1: order = \"windows\" is how the simulator runs its events",
    );
}

/// Every non-contiguous method and form, byte-exact over real sockets as
/// in the simulator (asymmetric layouts and `auto` included), and over a
/// lossy egress on sockets.
#[test]
fn non_contiguous_transfers_are_byte_exact_on_sockets_too() {
    for (method, form, layout) in [
        (
            "pack",
            "messaging",
            "block = \"300B\"\nblocks = 70\nstride = \"1000B\"",
        ),
        (
            "sgl",
            "messaging",
            "block = \"300B\"\nblocks = 70\nstride = \"1000B\"",
        ),
        (
            "indirect",
            "messaging",
            "block = \"300B\"\nblocks = 70\nstride = \"1000B\"",
        ),
        (
            "pack",
            "rdma",
            "layout = \"transpose\"\nblock = \"8B\"\nblocks = 64",
        ),
        ("sgl", "rdma", "layout = \"face-z\"\nblocks = 8"),
        (
            "indirect",
            "rdma",
            "block = \"2KiB\"\nblocks = 40\npeer_layout = \"contiguous\"",
        ),
        (
            "auto",
            "messaging",
            "layout = \"halo\"\nhalo = 2\nblocks = 32",
        ),
    ] {
        let text = format!(
            "name = \"nc-{method}-{form}\"\n[topology]\nkind = \"pair\"\n\
             [[workload]]\nkind = \"noncontig\"\nsrc = \"h0\"\ndst = \"h1\"\n\
             method = \"{method}\"\nform = \"{form}\"\ncount = 3\n{layout}\n\
             [[fault]]\nmodel = \"loss\"\np = 0.02\n"
        );
        let (sim, udp) = both("nc.toml", &text);
        assert_passed(&sim);
        assert_passed(&udp);
        let (s, u) = (sim.noncontig.unwrap(), udp.noncontig.unwrap());
        assert_eq!((s.method, s.bytes), (u.method, u.bytes), "{method}/{form}");
    }
}
