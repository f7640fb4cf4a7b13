//! Stories about what a run lost and why: the drops a user asked for
//! (each fault rule by name), congestion (full queues), and corruption
//! the receiving NICs caught, each counted apart and adding up to the
//! total. A new user saw one `dropped` counter of 133 with 2 % loss and
//! 5 % reordering, and 137 with both faults at 0, and could not tell
//! the two kinds apart.

use udrma_scenarios::{run, Report, RunOptions, Scenario};

fn run_toml(name: &str, text: &str) -> Report {
    let sc = Scenario::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
    run(&sc, RunOptions::default()).unwrap()
}

/// Six hosts write 256 KiB each into one through 64 KiB queues (an
/// incast that overflows), with `loss` and `corrupt` rules on every link.
fn incast(loss: f64, corrupt: f64) -> String {
    let mut s = String::from(
        r#"
name = "incast-by-cause"
seed = 3
time_limit = "20ms"
[topology]
kind = "star"
hosts = 7
bandwidth = "100Gbps"
latency = "1us"
queue = "64KiB"
[nic]
mtu_payload = "4KiB"
"#,
    );
    for h in 1..7 {
        s += &format!(
            "[[workload]]\nkind = \"single\"\nop = \"write\"\nsrc = \"h{h}\"\ndst = \"h0\"\nsize = \"256KiB\"\n"
        );
    }
    s += &format!(
        "[[fault]]\nname = \"loss\"\nmodel = \"loss\"\np = {loss}\n\
         [[fault]]\nname = \"bitrot\"\nmodel = \"corrupt\"\np = {corrupt}\n\
         [[fault]]\nname = \"reorder\"\nmodel = \"reorder\"\np = 0.95\ndelay = \"2us\"\n"
    );
    s
}

/// The fault rules' drops, by name.
fn by_rule(r: &Report) -> Vec<(&str, u64)> {
    r.lost
        .faults
        .iter()
        .map(|f| (f.rule.as_str(), f.dropped))
        .collect()
}

/// With loss, corruption and an overflowing incast, each cause is
/// counted apart: the loss rule's drops, the full queues', and the
/// corrupted packets the NICs refused; the fabric's causes add up to
/// `packets.dropped`, and with the refusals to the total.
#[test]
fn loss_congestion_and_corruption_are_counted_apart() {
    let r = run_toml("by-cause", &incast(0.02, 0.01));
    assert!(r.passed(), "{:?}", r.notes);
    let l = &r.lost;
    let rules = by_rule(&r);
    assert_eq!(
        rules.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        ["loss", "bitrot", "reorder"]
    );
    assert!(rules[0].1 > 0, "the loss rule dropped: {rules:?}");
    assert_eq!(
        (rules[1].1, rules[2].1),
        (0, 0),
        "corrupting and reordering drop nothing"
    );
    assert!(l.queue_full > 0, "the incast overflowed: {l:?}");
    assert!(
        l.refused_corrupt > 0 && l.refused_corrupt <= r.packets.corrupted,
        "the NICs refused corrupted packets, no more than were corrupted: {l:?}, {:?}",
        r.packets
    );
    assert_eq!(
        l.total - l.refused_corrupt,
        r.packets.dropped,
        "the fabric's causes add up to its drops"
    );
    assert_eq!(l.causes().map(|(_, n)| n).sum::<u64>(), l.total);
    let table = r.table();
    let line = table.lines().find(|x| x.starts_with("lost ")).unwrap();
    assert!(
        line.contains("fault \"loss\"") && line.contains("queue full") && line.contains("corrupt"),
        "{line}"
    );
}

/// With both faults at 0 the incast still loses packets, and every one
/// is a full queue's: the summary does not blame the rules.
#[test]
fn without_faults_every_drop_is_congestion() {
    let r = run_toml("congestion-only", &incast(0.0, 0.0));
    assert!(r.passed(), "{:?}", r.notes);
    assert!(r.packets.dropped > 0, "the incast still overflows");
    assert_eq!(by_rule(&r), [("loss", 0), ("bitrot", 0), ("reorder", 0)]);
    assert_eq!(r.lost.queue_full, r.packets.dropped);
    assert_eq!(
        (r.lost.refused_corrupt, r.lost.total),
        (0, r.packets.dropped)
    );
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["lost"]["queue_full"], r.packets.dropped);
    assert_eq!(json["lost"]["faults"][0]["rule"], "loss");
}

/// A split run (two threads) counts the same causes as one thread, each
/// shard's counts added: a fat tree with targeted faults, and an incast
/// whose ports drop and mark (the fixtures the rank tests use).
#[test]
fn a_split_run_counts_the_same_causes() {
    for name in ["lossy-targeted.toml", "incast-drop-mark.toml"] {
        let path = format!("{}/tests/ranks/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let sc = Scenario::parse(name, &text).unwrap_or_else(|e| panic!("{e}"));
        let one = run(&sc, RunOptions::default()).unwrap();
        let two = run(
            &sc,
            RunOptions {
                threads: Some(2),
                ..RunOptions::default()
            },
        )
        .unwrap();
        assert!(one.lost.total > 0, "{name}: something was lost");
        assert_eq!(one.lost, two.lost, "{name}");
    }
}
