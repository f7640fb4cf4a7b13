//! Non-contiguous ping-pongs end to end: every method and form byte-exact
//! over a fabric that loses, duplicates and reorders; asymmetric layouts;
//! what `auto` picks; bad input named by its key.

use proptest::prelude::*;
use udrma_scenarios::plan::validate::validate;
use udrma_scenarios::{run, RunOptions, Scenario};

fn scenario(body: &str) -> Scenario {
    let text = format!(
        "name = \"nc\"\nprofile = \"connectx5-roce\"\ntime_limit = \"50ms\"\n\
         [topology]\nkind = \"pair\"\n[nic]\nrto_initial = \"200us\"\n{body}"
    );
    Scenario::parse("nc.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn workload(method: &str, form: &str, layout: &str) -> String {
    format!(
        "[[workload]]\nkind = \"noncontig\"\nsrc = \"h0\"\ndst = \"h1\"\nmethod = \"{method}\"\n\
         form = \"{form}\"\ncount = 4\nwarmup = 1\n{layout}\n"
    )
}

const ROUGH: &str = "[[fault]]\nmodel = \"loss\"\np = 0.03\n\
                     [[fault]]\nmodel = \"duplicate\"\np = 0.03\n\
                     [[fault]]\nmodel = \"reorder\"\np = 0.05\ngap = 3\ndelay = \"5us\"\n";

fn passes(sc: &Scenario) -> udrma_scenarios::Report {
    let r = run(sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    r
}

#[test]
fn every_method_and_form_is_byte_exact_over_a_rough_fabric() {
    let layout = "block = \"300B\"\nblocks = 70\nstride = \"1000B\"";
    for method in ["pack", "sgl", "indirect"] {
        for form in ["messaging", "rdma"] {
            let sc = scenario(&format!("{}{ROUGH}", workload(method, form, layout)));
            let r = passes(&sc);
            let nc = r.noncontig.as_ref().unwrap();
            assert_eq!(nc.method, method);
            assert!(r.retransmits > 0, "{method}/{form}: the faults bit");
            // What each method costs, in the units the study counts.
            match method {
                "pack" => assert_eq!(nc.bytes_copied, 2.0 * 21_000.0),
                "sgl" => assert!(nc.work_requests >= 3.0, "{nc:?}"),
                _ => assert_eq!(nc.work_requests, 1.0),
            }
        }
    }
}

#[test]
fn asymmetric_layouts_land_byte_exact() {
    for layout in [
        "layout = \"transpose\"\nblock = \"8B\"\nblocks = 90",
        "block = \"1KiB\"\nblocks = 40\npeer_layout = \"contiguous\"",
        "layout = \"face-z\"\nblocks = 12",
        "layout = \"halo\"\nhalo = 3\nblocks = 40",
    ] {
        for method in ["pack", "sgl", "indirect"] {
            for form in ["messaging", "rdma"] {
                passes(&scenario(&workload(method, form, layout)));
            }
        }
    }
}

#[test]
fn auto_copies_small_blocks_and_moves_large_ones_without_copies() {
    let pick = |layout: &str| {
        let r = passes(&scenario(&workload("auto", "messaging", layout)));
        r.noncontig.unwrap().method
    };
    assert_eq!(pick("block = \"32B\"\nblocks = 64"), "pack");
    assert_ne!(pick("block = \"16KiB\"\nblocks = 64"), "pack");
}

#[test]
fn the_indirect_key_pays_for_a_fresh_key_without_the_cache() {
    let layout = "block = \"1KiB\"\nblocks = 32";
    let cached = passes(&scenario(&workload("indirect", "rdma", layout)));
    let fresh = passes(&scenario(&format!(
        "{}key_cache = false\n",
        workload("indirect", "rdma", layout)
    )));
    let (c, f) = (cached.noncontig.unwrap(), fresh.noncontig.unwrap());
    assert!(f.keys_created > c.keys_created, "{f:?}");
    assert!(f.latency_p50_us > c.latency_p50_us, "{f:?} vs {c:?}");
}

/// The peer's answer is no sign that a transfer is over: the receiver
/// completes one round trip before the sender does. Here h1's ACKs and
/// completion notices for h0's first transfers are lost, so h1 answers
/// while h0 still waits to hear that its transfer arrived. The answer
/// lands, h0 makes a fresh key for the next transfer (no key cache), and
/// then its timer fires and it sends the unacknowledged packets again,
/// reading them through the key the first transfer named. That key must
/// still exist: a key dies only when every request naming it has
/// completed. The old app destroyed it when it made the next one, and the
/// retransmission failed `local access error: BAD_RKEY`.
#[test]
fn a_fresh_key_leaves_the_old_one_alive_until_its_retransmissions_are_done() {
    let layout = "block = \"1KiB\"\nblocks = 16\nstride = \"2KiB\"";
    // Every ACK-like packet h1 sends for a while: h0's transfers stay
    // unacknowledged while h1's answers (acknowledged by h0) go through.
    let lost_acks = "[[fault]]\nmodel = \"loss\"\np = 1.0\nsrc = [\"h1\"]\n\
                     opcodes = [\"ack\", \"sack\", \"completion\"]\ntimes = 12\n";
    for method in ["indirect", "sgl", "pack"] {
        for form in ["rdma", "messaging"] {
            let sc = scenario(&format!(
                "{}key_cache = false\n{lost_acks}",
                workload(method, form, layout)
            ));
            let r = passes(&sc);
            assert!(r.retransmits > 0, "{method}/{form}: the lost ACKs bit");
        }
    }
}

#[test]
fn bad_noncontig_input_is_named_by_its_key() {
    let bad = |body: &str, needle: &str| {
        let text = format!("name = \"x\"\n[topology]\nkind = \"pair\"\n{body}");
        let e = Scenario::parse("x.toml", &text)
            .and_then(|sc| validate(&sc).map(|_| sc))
            .map(|_| ())
            .expect_err(body);
        assert!(e.to_string().contains(needle), "{e} (wanted {needle:?})");
    };
    let w = |extra: &str| {
        format!("[[workload]]\nkind = \"noncontig\"\nsrc = \"h0\"\ndst = \"h1\"\n{extra}\n")
    };
    bad(
        &w("method = \"zip\"\nblock = \"1KiB\"\nblocks = 4"),
        "unknown method \"zip\"",
    );
    bad(&w("block = \"1KiB\"\nblocks = 0"), "`blocks = 0`");
    bad(&w("block = \"1KiB\""), "needs `blocks`");
    bad(&w("blocks = 4"), "needs `block`");
    bad(
        &w("layout = \"spiral\"\nblocks = 4"),
        "unknown layout \"spiral\"",
    );
    bad(
        &w("block = \"1KiB\"\nblocks = 4\nstride = \"10B\""),
        "blocks would overlap",
    );
    bad(&w("layout = \"halo\"\nhalo = 9\nblocks = 4"), "`halo = 9`");
    bad(
        &w("block = \"1KiB\"\nblocks = 4\nform = \"udp\""),
        "unknown form",
    );
    bad(
        &w("block = \"1KiB\"\nblocks = 4\npeer_layout = \"twisted\""),
        "unknown peer_layout",
    );
    bad(
        &w("block = \"16MiB\"\nblocks = 8"),
        "at most 67108864 are allowed",
    );
    bad(
        "[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"1KiB\"\nmethod = \"sgl\"\n",
        "`method` does not apply to `kind = \"single\"`, which takes `op`, `src`, `dst`, `size`, `start`",
    );
    bad(
        &format!(
            "{}[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = \"1KiB\"\n",
            w("block = \"1KiB\"\nblocks = 4")
        ),
        "runs alone",
    );
    bad("[nic]\nmax_sge = 0\n", "max_sge");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    /// Random layouts, methods, forms, seeds and faults: every check holds.
    #[test]
    fn random_transfers_are_byte_exact(
        block in 1u64..3000,
        blocks in 1u64..100,
        gap in 0u64..2000,
        method in prop::sample::select(vec!["pack", "sgl", "indirect", "auto"]),
        form in prop::sample::select(vec!["messaging", "rdma"]),
        contiguous_peer in any::<bool>(),
        rough in any::<bool>(),
        key_cache in any::<bool>(),
        seed in 1u64..1000,
    ) {
        let layout = format!(
            "block = \"{block}B\"\nblocks = {blocks}\nstride = \"{}B\"\npeer_layout = \"{}\"",
            block + gap,
            if contiguous_peer { "contiguous" } else { "same" }
        );
        let body = format!(
            "seed = {seed}\n{}key_cache = {key_cache}\n{}",
            workload(method, form, &layout),
            if rough { ROUGH } else { "" }
        );
        // `seed` must come before the tables.
        let text = format!(
            "name = \"nc\"\nprofile = \"connectx5-roce\"\ntime_limit = \"50ms\"\n{body}\n[topology]\nkind = \"pair\"\n"
        );
        let sc = Scenario::parse("nc.toml", &text).unwrap();
        let r = run(&sc, RunOptions::default()).unwrap();
        prop_assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    }
}

/// On a timeline, each round trip of a ping-pong is a span on host `a`;
/// one under way when the run ends (here every packet is lost, so the
/// first never ends) is drawn to the end, not completed.
#[test]
fn round_trips_are_spans_and_an_unfinished_one_is_not_completed() {
    let spans = |body: &str| -> Vec<serde_json::Value> {
        let opts = RunOptions {
            timeline: Some(udrma_scenarios::Timeline::default()),
            ..RunOptions::default()
        };
        let r = run(&scenario(body), opts).unwrap();
        let json = r.timeline_json.as_deref().unwrap();
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let events = v["traceEvents"].as_array().unwrap();
        events.iter().filter(|e| e["ph"] == "X").cloned().collect()
    };
    let body = workload(
        "pack",
        "messaging",
        "block = \"300B\"\nblocks = 70\nstride = \"1000B\"",
    );
    let done = spans(&body);
    assert_eq!(done.len(), 5, "4 timed round trips and 1 warm-up");
    assert!(done
        .iter()
        .all(|s| s["args"]["result"] == "ok" && s["pid"] == 1 && s["args"]["peer"] == "h1"));
    let lost = format!("{body}[[fault]]\nmodel = \"loss\"\np = 1.0\n");
    let open = spans(&lost);
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0]["args"]["result"], "not completed");
}

/// A key the layout needs but the file leaves out is named at the
/// workload it belongs to.
#[test]
fn a_missing_layout_key_is_located_at_its_workload() {
    let text = "name = \"nc\"\n[topology]\nkind = \"pair\"\n[[workload]]\nkind = \"noncontig\"\n\
                src = \"h0\"\ndst = \"h1\"\nlayout = \"vector\"\nblocks = 16\n";
    let e = Scenario::parse("nb.toml", text).unwrap_err().to_string();
    assert_eq!(
        e,
        "nb.toml:5:1: noncontig workload: layout \"vector\" needs `block` (bytes per block)"
    );
}
