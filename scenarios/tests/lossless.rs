//! A lossless fabric from a scenario file: its keys, what is refused and
//! where, and what a run reports (docs/lossless.md).

use udrma_scenarios::{run, RunOptions, Scenario};

const BASE: &str = "name = \"x\"\n[topology]\nkind = \"star\"\nhosts = 4\n";
const WORK: &str = "[[workload]]\nkind = \"incast\"\ndst = \"h0\"\nsize = \"256KiB\"\n";

fn error(topology: &str) -> String {
    Scenario::parse("bad.toml", &format!("{BASE}{topology}{WORK}"))
        .unwrap_err()
        .to_string()
}

/// Every refusal names its key's place in the file and says why; a
/// headroom too small for a round trip at line rate shows the
/// arithmetic.
#[test]
fn a_lossless_configuration_is_refused_at_the_key_that_is_wrong() {
    assert_eq!(
        error("pfc_xoff = \"32KiB\"\n"),
        "bad.toml:5:1: topology.pfc_xoff applies only to a lossless fabric: add `pfc = true` to [topology] (or remove pfc_xoff)"
    );
    let headroom = error("pfc = true\npfc_headroom = \"20KiB\"\n");
    assert_eq!(
        headroom,
        "bad.toml:6:1: topology.pfc_headroom: pfc_headroom (20480 B) cannot absorb what arrives on link h0-s0 while a PAUSE takes effect: 2 × 1000 ns × 100 Gb/s (25000 B on the wire) + 2 × 9282 B (a frame each way) + 84 B (the PAUSE) = 43648 B"
    );
    // docs/lossless.md shows this one.
    let doc = include_str!("../../docs/lossless.md");
    assert!(
        doc.contains(&format!("\nerror: {headroom}\n")),
        "docs/lossless.md should show: error: {headroom}"
    );
    assert_eq!(
        error("pfc = true\npfc_xon = \"80KiB\"\n"),
        "bad.toml:6:1: topology.pfc_xon: pfc_xon (81920 B) must be below pfc_xoff (65536 B)"
    );
    assert_eq!(
        error("pfc = true\npfc_control_priority = 8\n"),
        "bad.toml:6:1: topology.pfc_control_priority: PFC priority 8 is not one of 0 to 7"
    );
    assert!(error("pfc = true\ntrim = true\n")
        .starts_with("bad.toml:6:1: topology.trim: link h0-s0 trims"));
    assert!(error("pfc = true\norder = \"windows\"\n")
        .starts_with("bad.toml:6:1: topology.order: PFC needs time order"));
    // A headroom of exactly what is needed is taken.
    Scenario::parse(
        "ok.toml",
        &format!("{BASE}pfc = true\npfc_headroom = 43648\n{WORK}"),
    )
    .unwrap();
}

/// `--threads` and the udp backend are refused, naming PFC.
#[test]
fn threads_and_real_sockets_refuse_a_lossless_fabric() {
    let sc = Scenario::parse("ok.toml", &format!("{BASE}pfc = true\n{WORK}")).unwrap();
    let threads = run(
        &sc,
        RunOptions {
            threads: Some(2),
            ..RunOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        threads.contains("--threads 2: a lossless fabric (pfc = true"),
        "{threads}"
    );
    let udp = run(
        &sc,
        RunOptions {
            backend: udrma_scenarios::BackendKind::Udp,
            ..RunOptions::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        udp.contains("ok.toml:5:1: pfc = true makes the simulated fabric lossless"),
        "{udp}"
    );
}

/// The same incast, lossy and lossless: lossy, the port drops and the
/// report has no `pfc`; lossless, nothing is dropped, the two lossless
/// checks pass, and the report and its JSON count the pauses.
#[test]
fn a_lossless_run_reports_its_pauses_and_checks_that_nothing_dropped() {
    let go = |extra: &str| {
        let sc = Scenario::parse(
            "x.toml",
            &format!("{BASE}queue = \"64KiB\"\n{extra}[nic]\nrto_min = \"1ms\"\n{WORK}"),
        )
        .unwrap();
        run(&sc, RunOptions::default()).unwrap()
    };
    let lossy = go("");
    assert!(lossy.packets.dropped > 0);
    assert!(lossy.pfc.is_none());
    assert!(!lossy.checks.contains_key("no-queue-drop"));
    let json = serde_json::to_value(&lossy).unwrap();
    assert!(json.get("pfc").is_none());

    let lossless = go("pfc = true\n");
    assert_eq!(lossless.packets.dropped, 0);
    assert_eq!(lossless.retransmits, 0);
    assert_eq!(lossless.checks.get("no-queue-drop"), Some(&true));
    assert_eq!(lossless.checks.get("no-pfc-deadlock"), Some(&true));
    let pfc = lossless.pfc.as_ref().unwrap();
    assert!(pfc.pauses > 0 && pfc.paused_ns > 0, "{pfc:?}");
    assert_eq!(pfc.ports.len(), 3, "the three senders' links: {pfc:?}");
    assert!(pfc.deadlock.is_none());
    let json = serde_json::to_value(&lossless).unwrap();
    assert_eq!(json["pfc"]["pauses"], pfc.pauses);
    assert!(lossless
        .table()
        .contains(&format!("pfc         {} PAUSE", pfc.pauses)));
}

/// The ring example deadlocks, and the check fails with the cycle in
/// its note; skipping nothing, the writes' own checks fail with it.
#[test]
fn a_deadlocked_ring_fails_no_pfc_deadlock_and_names_its_cycle() {
    let path = format!("{}/examples/pfc-deadlock.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace("time_limit = \"20ms\"", "time_limit = \"2ms\"");
    let sc = Scenario::parse("ring.toml", &text).unwrap();
    let r = run(&sc, RunOptions::default()).unwrap();
    assert_eq!(r.checks.get("no-pfc-deadlock"), Some(&false));
    let d = r.pfc.as_ref().unwrap().deadlock.as_ref().unwrap();
    assert_eq!(d.cycle.len(), 5);
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("PFC deadlock formed at")),
        "{:?}",
        r.notes
    );
    let unskipped = text.replace(
        "[checks]\nskip = [\"all-complete\", \"all-succeeded\", \"memory-equal\", \"liveness\"]\n",
        "",
    );
    assert_ne!(unskipped, text);
    let r = run(
        &Scenario::parse("ring.toml", &unskipped).unwrap(),
        RunOptions::default(),
    )
    .unwrap();
    for check in ["all-complete", "liveness", "no-pfc-deadlock"] {
        assert_eq!(r.checks.get(check), Some(&false), "{check}");
    }
}
