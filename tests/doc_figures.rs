//! Figures the docs quote in prose and tables, rerun: each case runs an
//! example (with the `--set` edits the docs name), formats the figures
//! the way the doc writes them, and requires the doc to contain that
//! text. When the engine changes a figure, the text no longer matches and
//! the test names the doc, the run and the line it expected.
//!
//! The large examples take seconds in release and minutes in debug, so
//! the test runs in release only (`.ci/run`, "transcripts in the README
//! and docs"); in debug it is ignored.

use udrma_scenarios::{run, Report, RunOptions, Scenario};

/// The ideal time of the k=8 all-to-all (bytes per host at line rate
/// plus one base RTT), as docs/congestion.md divides by it.
const IDEAL_US: f64 = 697.3;

fn run_example(file: &str, sets: &[&str]) -> Report {
    let path = format!("{}/scenarios/examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    if !sets.is_empty() {
        use udrma_scenarios::file::edit;
        let mut doc = edit::parse_doc(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        for set in sets {
            let (key, v) = set.split_once('=').expect("KEY=VALUE");
            edit::set(&mut doc, key, edit::value(v)).unwrap_or_else(|e| panic!("{set}: {e}"));
        }
        text = edit::render(&doc);
    }
    let sc = Scenario::parse(file, &text).unwrap_or_else(|e| panic!("{e}"));
    run(&sc, RunOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn doc(name: &str) -> String {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `1234567` → `1,234,567`, as the docs write counts.
fn commas(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn us(ns: u64) -> String {
    commas((ns as f64 / 1000.0).round() as u64)
}

fn ratio(ns: u64) -> String {
    format!("{:.2}×", ns as f64 / 1000.0 / IDEAL_US)
}

/// A row of congestion.md's all-to-all tables: drops, retransmits,
/// timeouts, duplicates dropped, p99, all done, against the ideal.
fn a2a_row(label: &str, r: &Report) -> String {
    format!(
        "| {label} | {} | {} | {} | {} | {} µs | {} µs | {} |",
        commas(r.packets.dropped),
        commas(r.retransmits),
        commas(r.timeouts),
        commas(r.dup_dropped),
        us(r.completion_ns.p99),
        us(r.completion_ns.max),
        ratio(r.completion_ns.max)
    )
}

/// How cli.md's example table sums up a drop-free all-to-all.
fn no_drop(r: &Report) -> String {
    format!(
        "no drop, {} µs ({} the ideal)",
        us(r.completion_ns.max),
        ratio(r.completion_ns.max)
    )
}

fn require(doc_name: &str, text: &str, want: &str, run: &str) {
    assert!(
        text.contains(want),
        "docs/{doc_name} no longer says what `{run}` prints; expected the text\n  {want}"
    );
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release only: large examples")]
fn the_congestion_tables_say_what_the_examples_print() {
    let congestion = doc("congestion.md");
    let cli = doc("cli.md");
    let a2a = "all-to-all-k8-nscc.toml";
    let mut default_timeouts = 0;
    for cc in ["none", "nscc", "dcqcn", "rccc"] {
        let set = format!("nic.cc={cc}");
        let r = run_example(a2a, &[&set]);
        if cc == "none" {
            default_timeouts = r.timeouts;
        }
        let row = a2a_row(cc, &r);
        require(
            "congestion.md",
            &congestion,
            &row,
            &format!("udrma run {a2a} --set {set}"),
        );
        let every = format!(
            "| all-to-all (k=8, 128 hosts, 64 KiB per pair) | {cc} | {} Gb/s | {} µs | {} | {} | 0 |",
            commas(r.goodput_gbps.round() as u64),
            us(r.completion_ns.p99),
            commas(r.packets.dropped),
            commas(r.retransmits)
        );
        require(
            "congestion.md",
            &congestion,
            &every,
            &format!("udrma run {a2a} --set {set}"),
        );
        if cc == "nscc" {
            require("cli.md", &cli, &no_drop(&r), &format!("udrma run {a2a}"));
            let floor = format!("({} with the 20 µs floor)", commas(r.retransmits));
            require("cli.md", &cli, &floor, &format!("udrma run {a2a}"));
        }
    }
    let r = run_example("all-to-all-k8-probes.toml", &[]);
    let probes = format!(
        "{} drops, {} timeouts ({} with the defaults), {:.2} ms",
        commas(r.packets.dropped),
        commas(r.timeouts),
        commas(default_timeouts),
        r.completion_ns.max as f64 / 1e6
    );
    require(
        "cli.md",
        &cli,
        &probes,
        "udrma run all-to-all-k8-probes.toml",
    );
    let r = run_example("all-to-all-k8-rccc.toml", &[]);
    let row = a2a_row("rccc, sprayed", &r);
    require(
        "congestion.md",
        &congestion,
        &row,
        "udrma run all-to-all-k8-rccc.toml",
    );
    require(
        "cli.md",
        &cli,
        &no_drop(&r),
        "udrma run all-to-all-k8-rccc.toml",
    );
}

#[test]
#[cfg_attr(debug_assertions, ignore = "release only: large examples")]
fn the_incast_and_rendezvous_figures_say_what_the_examples_print() {
    let congestion = doc("congestion.md");
    let cli = doc("cli.md");
    for (file, switches) in [("incast.toml", "drop"), ("incast-trim.toml", "trim")] {
        for cc in ["none", "nscc", "dcqcn", "rccc"] {
            let set = format!("nic.cc={cc}");
            let r = run_example(file, &[&set]);
            let row = format!(
                "| {cc} | {switches} | {} | {} | {} | {} µs | {:.1} Gb/s |",
                commas(r.packets.dropped),
                commas(r.packets.trimmed),
                commas(r.retransmits),
                us(r.completion_ns.max),
                r.goodput_gbps
            );
            require(
                "congestion.md",
                &congestion,
                &row,
                &format!("udrma run {file} --set {set}"),
            );
            if file == "incast-trim.toml" && cc == "nscc" {
                let line = format!(
                    "no drop, {} payloads trimmed and resent at once, {:.0} % of the line",
                    commas(r.packets.trimmed),
                    r.goodput_gbps
                );
                require("cli.md", &cli, &line, "udrma run incast-trim.toml");
            }
        }
    }
    for cc in ["none", "nscc", "dcqcn", "rccc"] {
        let set = format!("nic.cc={cc}");
        let fifo = "topology.control_priority=false";
        let r = run_example("perm-128-uec.toml", &[&set, fifo]);
        let row = format!(
            "| permutation (perm-128-uec, REPS) | {cc} | {} Gb/s | {} µs | {} | {} | 0 |",
            commas(r.goodput_gbps.round() as u64),
            us(r.completion_ns.p99),
            commas(r.packets.dropped),
            commas(r.retransmits)
        );
        let cmd = format!("udrma run perm-128-uec.toml --set {set} --set {fifo}");
        require("congestion.md", &congestion, &row, &cmd);
        let selective = "nic.retransmit=selective";
        let r = run_example("irn-gbn.toml", &[&set, selective]);
        let row = format!(
            "| 1 % loss (16 MiB, 100 Gb/s pair, 40 µs links, selective) | {cc} | {:.1} Gb/s | {} µs | {} | {} | 0 |",
            r.goodput_gbps,
            us(r.completion_ns.p99),
            commas(r.packets.dropped),
            commas(r.retransmits)
        );
        let cmd = format!("udrma run irn-gbn.toml --set {set} --set {selective}");
        require("congestion.md", &congestion, &row, &cmd);
    }
    let r = run_example("rget-bottleneck.toml", &[]);
    let ms = (r.sim_time_ns as f64 / 1e6).round() as u64;
    let row = format!(
        "| nscc | 378 of 378 | {ms} ms | {} | {} |",
        commas(r.packets.dropped),
        commas(r.retransmits)
    );
    require(
        "congestion.md",
        &congestion,
        &row,
        "udrma run rget-bottleneck.toml",
    );
}
