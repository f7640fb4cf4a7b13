//! Messaging scenarios end to end: the examples' stated outcomes, the
//! MyVIA calibration, the protocol step at the rendezvous threshold, and
//! bad messaging input.

use udrma_scenarios::report::SizeRow;
use udrma_scenarios::{run, RunOptions, Scenario};

fn example(name: &str) -> udrma_scenarios::Report {
    let path = format!("{}/examples/{name}.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let sc = Scenario::parse(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    run(&sc, RunOptions::default()).unwrap()
}

fn rows(r: &udrma_scenarios::Report) -> Vec<SizeRow> {
    r.messaging
        .as_ref()
        .expect("a messaging report")
        .sizes
        .clone()
}

#[test]
fn myvia_pingpong_reproduces_the_published_latency_and_bandwidth() {
    let r = example("myvia-pingpong");
    assert!(r.passed(), "{:?}", r.notes);
    let rows = rows(&r);
    let lat = rows.iter().find(|x| x.kind == "msg-latency").unwrap();
    assert_eq!((lat.size, lat.protocol.as_str()), (4, "eager"));
    // MyVIA: 8.46 us minimum one-way latency.
    assert!((lat.latency_us - 8.46).abs() < 0.05, "{lat:?}");
    // MyVIA: 250 MB/s at 4 KB; we carry more headers (see the profile).
    let bw = rows.iter().find(|x| x.kind == "msg-bw").unwrap();
    assert_eq!(bw.size, 4096);
    assert!(
        bw.bandwidth_mbs > 225.0 && bw.bandwidth_mbs <= 250.0,
        "{bw:?}"
    );
}

#[test]
fn a_one_way_stream_lives_on_noops() {
    let r = example("credit-starvation");
    assert!(r.passed(), "{:?}", r.notes);
    let m = r.messaging.unwrap();
    assert!(m.noops > 100, "{m:?}");
    assert!(m.credit_stalls > 100, "{m:?}");
    assert!(m.fallbacks > 0 && m.r3 > 0, "{m:?}");
}

#[test]
fn failed_registrations_fall_back_to_r3_and_recover() {
    let r = example("registration-failure");
    assert!(r.passed(), "{:?}", r.notes);
    let m = r.messaging.unwrap();
    assert!(m.fallbacks > 0 && m.r3 > 0 && m.rput > 0, "{m:?}");
    assert_eq!(m.r3, m.fallbacks, "every R3 here is a fallback");
}

/// The step at the rendezvous threshold: eager up to 4 KiB, RPUT from
/// 8 KiB, and a latency jump between them (the RTS/CTS round trip).
#[test]
fn the_protocol_changes_at_the_rendezvous_threshold() {
    let text = r#"
name = "step"
profile = "roce-100g"
[topology]
kind = "pair"
[[workload]]
kind = "msg-latency"
src = "h0"
dst = "h1"
sizes = ["1KiB", "4KiB", "8KiB", "16KiB"]
count = 5
"#;
    let sc = Scenario::parse("step.toml", text).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}", r.notes);
    let rows = rows(&r);
    let p: Vec<&str> = rows.iter().map(|x| x.protocol.as_str()).collect();
    assert_eq!(p, ["eager", "eager", "rput", "rput"]);
    let l: Vec<f64> = rows.iter().map(|x| x.latency_us).collect();
    assert!(l[2] - l[1] > l[1] - l[0], "a step at the threshold: {l:?}");
}

#[test]
fn bad_messaging_input_is_located_and_explained() {
    let err2 = |top: &str, extra: &str| {
        let text = format!(
            "name = \"x\"\n{top}[topology]\nkind = \"pair\"\n[[workload]]\nkind = \"msg-bw\"\nsrc = \"h0\"\ndst = \"h1\"\nsizes = [\"1KiB\"]\n{extra}"
        );
        Scenario::parse("x.toml", &text).unwrap_err().to_string()
    };
    let err = |extra: &str| err2("", extra);
    let e = err("[messaging]\nrendezvous = \"rgett\"\n");
    assert!(
        e.contains("x.toml:") && e.contains("expected r3, rget or rput"),
        "{e}"
    );
    let e = err2("profile = \"myrinet-lanai8\"\n", "");
    assert!(e.contains("did you mean \"myrinet-lanai9\""), "{e}");
    let e = err("[messaging]\nvbufs_per_peer = 4\ncredit_preserve = 4\n");
    assert!(e.contains("credit_preserve"), "{e}");
    let e = err("[[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 10\n");
    assert!(e.contains("not both"), "{e}");
    let e = err("[[workload]]\nkind = \"msg-latency\"\nsrc = \"h0\"\ndst = \"h1\"\nsizes = \"4KiB..1KiB\"\n");
    assert!(e.contains("FROM must be"), "{e}");
    let e = err("[cost]\ndoorbel = \"1us\"\n");
    assert!(e.contains("doorbell"), "{e}");
}

/// The `credits` check once the run is quiet: every count a side re-posted
/// must reach the other. `check-credits.toml` with the one ACK that carries
/// h1's last count dropped: the engine's repair NOOP brings it back (finding
/// 8). When every NOOP from h1 is lost too, the repairs run out and h0 stays
/// a vbuf short for good: the check fails and says by how much.
#[test]
fn a_credit_count_lost_for_good_fails_the_credits_check() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/check-credits.toml");
    let base = std::fs::read_to_string(path).unwrap();
    let ack = "\n[[fault]]\nmodel = \"loss\"\np = 1.0\nlinks = [\"h0-h1\"]\ndirection = \"reverse\"\nopcodes = [\"ack\"]\nevery = 4\noffset = 3\ntimes = 1\n";
    let noops = "\n[[fault]]\nmodel = \"loss\"\np = 1.0\nlinks = [\"h0-h1\"]\ndirection = \"reverse\"\nopcodes = [\"credit\"]\n";
    let report = |text: String| {
        let sc = Scenario::parse("check-credits.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        run(&sc, RunOptions::default()).unwrap()
    };
    let repaired = report(format!("{base}{ack}"));
    assert!(repaired.passed(), "{:?}", repaired.notes);
    // Stopped after every message arrived but before the repair went out:
    // liveness fails, and the count still in repair is not called lost.
    let cut =
        report(format!("{base}{ack}").replace("time_limit = \"100ms\"", "time_limit = \"20us\""));
    assert_eq!(
        cut.checks.get("all-complete"),
        Some(&true),
        "{:?}",
        cut.checks
    );
    assert_eq!(cut.checks.get("liveness"), Some(&false), "{:?}", cut.checks);
    assert_eq!(cut.checks.get("credits"), Some(&true), "{:?}", cut.notes);
    let lost = report(format!("{base}{ack}{noops}"));
    assert_eq!(
        lost.checks.get("credits"),
        Some(&false),
        "{:?}",
        lost.checks
    );
    assert_eq!(lost.checks.get("liveness"), Some(&true), "quiet, not stuck");
    assert!(
        lost.notes
            .iter()
            .any(|n| n == "h0 sees 2 of the 3 vbufs h1 has posted for it once the run is quiet (a credit count was lost)"),
        "{:?}",
        lost.notes
    );
}
