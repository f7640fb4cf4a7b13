//! `udrma run --timeline`: the file changes nothing of the run, is the
//! same byte for byte on every run, holds what docs/cli.md says, and a
//! real consumer of the trace-event format opens it: speedscope, in
//! headless Chromium.
//!
//! Without Chromium or speedscope the consumer test prints a skip notice
//! and passes, unless `UDRMA_REQUIRE_SPEEDSCOPE=1` (CI sets it, after
//! `scripts/timeline-screenshot.sh --fetch` put speedscope in
//! `target/speedscope`), when it fails.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{example, tmp, udrma};

/// `udrma run FILE --json ARGS`: the report without its wall-clock
/// fields, and the raw output.
fn report(file: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["run", file, "--json"];
    all.extend_from_slice(args);
    let out = udrma(&all);
    assert!(
        out.status.code() == Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("wall_s");
    o.remove("packet_hops_per_s");
    v
}

fn timeline(name: &str, file: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let path = tmp(name);
    let mut args = vec!["--timeline", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let _ = report(file, &args);
    let v = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    (path, v)
}

fn events<'a>(v: &'a serde_json::Value, ph: &str) -> Vec<&'a serde_json::Value> {
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == ph)
        .collect()
}

#[test]
fn the_timeline_changes_neither_report_nor_trace_and_is_the_same_each_run() {
    for ex in ["demo.toml", "pfc-incast.toml"] {
        let file = example(ex);
        let plain = report(&file, &[]);
        let a = tmp(&format!("tl-same-a-{ex}.json"));
        let b = tmp(&format!("tl-same-b-{ex}.json"));
        let with = report(&file, &["--timeline", a.to_str().unwrap()]);
        assert_eq!(plain, with, "{ex}: the report (trace hash in it) moved");
        let again = report(&file, &["--timeline", b.to_str().unwrap()]);
        assert_eq!(plain, again);
        let (a, b) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert!(a == b, "{ex}: two runs wrote different timelines");
    }
}

#[test]
fn a_trace_file_is_the_same_with_a_timeline() {
    let file = example("demo.toml");
    for ext in ["jsonl", "postcard"] {
        let alone = tmp(&format!("tl-trace-alone.{ext}"));
        let both = tmp(&format!("tl-trace-both.{ext}"));
        report(&file, &["--trace", alone.to_str().unwrap()]);
        let tl = tmp("tl-trace-both.json");
        report(
            &file,
            &[
                "--trace",
                both.to_str().unwrap(),
                "--timeline",
                tl.to_str().unwrap(),
            ],
        );
        let (a, b) = (
            std::fs::read(&alone).unwrap(),
            std::fs::read(&both).unwrap(),
        );
        assert!(!a.is_empty() && a == b, "{ext}: the trace file changed");
    }
}

#[test]
fn the_timeline_holds_ops_marks_queues_and_pauses() {
    let (_, v) = timeline("tl-pfc.json", &example("pfc-incast.toml"), &[]);
    let names: Vec<&str> = events(&v, "M")
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    let mut want: Vec<String> = (0..16).map(|h| format!("h{h}")).collect();
    want.push("fabric".into());
    assert_eq!(names, want);
    let spans = events(&v, "X");
    assert_eq!(spans.len(), 15, "one WRITE per sender");
    assert!(spans
        .iter()
        .all(|s| s["name"] == "WRITE 262144 B" && s["args"]["result"] == "ok"));
    let counters = events(&v, "C");
    let queue = |e: &&&serde_json::Value| e["name"] == "queue s0→h0";
    let deepest = counters
        .iter()
        .filter(queue)
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .max()
        .unwrap();
    // The fabric's own deepest queue in this run
    // (`FabricStats::max_queue_bytes`, printed once).
    assert_eq!(deepest, 1_339_804, "the incast's queue");
    // As docs/cli.md says: a sample at each change only.
    let samples = counters
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("queue"))
        .count();
    assert_eq!(samples, 1_211);
    // 75 pauses and 75 resumes on 15 ports (the run's own summary).
    let pauses = counters
        .iter()
        .filter(|e| e["name"].as_str().unwrap().starts_with("pfc pause"))
        .collect::<Vec<_>>();
    assert_eq!(pauses.len(), 150);
    assert_eq!(
        pauses.iter().filter(|e| e["args"]["paused"] == 1).count(),
        75
    );
    // Times never go back within one counter.
    let mut last = std::collections::BTreeMap::new();
    for c in &counters {
        let t = c["ts"].as_f64().unwrap();
        let before = last.insert(c["name"].as_str().unwrap(), t).unwrap_or(0.0);
        assert!(t >= before, "{c}");
    }
    assert_eq!(v["otherData"]["note"], "");

    // A lossy run: its retransmissions, on the host that sent them.
    let (_, v) = timeline("tl-demo.json", &example("demo.toml"), &[]);
    let marks = events(&v, "i");
    assert!(marks
        .iter()
        .any(|m| m["pid"] == 1 && m["name"].as_str().unwrap().starts_with("retransmit")));
    // A duplicate rule on every link copies packets at the hosts' own
    // egress too: those copies are the fault's, not retransmissions; the
    // timeline shows as many retransmissions as the NICs made.
    let (_, dups) = timeline("tl-dups.json", &example("dup-storm.toml"), &[]);
    let dup_marks = events(&dups, "i");
    let named = |n: &str| dup_marks.iter().filter(|m| m["name"] == n).count() as u64;
    assert!(
        named("duplicate (fault)") > 0,
        "copies made at a host's egress"
    );
    let resent = named("retransmit (timeout or SACK gap)") + named("retransmit after NACK");
    let made = report(&example("dup-storm.toml"), &[])["retransmits"]
        .as_u64()
        .unwrap();
    assert_eq!(
        resent, made,
        "one instant a retransmission, none for a fault's copy"
    );
    assert!(marks.iter().any(|m| m["name"] == "drop"));
    // Each retransmit timer that expired is an instant on its host, as
    // many as the run's `timeouts` counter.
    let timeouts = report(&example("demo.toml"), &[])["timeouts"]
        .as_u64()
        .unwrap();
    let marked: Vec<_> = marks
        .iter()
        .filter(|m| m["name"] == "retransmit timeout")
        .collect();
    assert!(timeouts > 0, "the demo times out");
    assert_eq!(marked.len() as u64, timeouts, "one instant a timeout");
    assert!(marked.iter().all(|m| m["args"]["msg"].is_u64()));
}

#[test]
fn a_cap_cuts_the_timeline_and_says_so() {
    let (_, v) = timeline(
        "tl-cap.json",
        &example("pfc-incast.toml"),
        &["--timeline-max", "100"],
    );
    let timed = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] != "M")
        .count();
    // The cap counts the packets' events; the operations posted before
    // the cut (all 15 WRITEs, at the start) are drawn besides.
    let spans = events(&v, "X").len();
    assert_eq!(spans, 15, "every operation posted before the cut");
    assert!(timed - spans <= 100, "{timed} events");
    let note = v["otherData"]["note"].as_str().unwrap();
    assert!(note.starts_with("cut at "), "{note}");
}

#[test]
fn a_bad_timeline_path_is_a_clear_error() {
    let out = udrma(&[
        "run",
        &example("demo.toml"),
        "--timeline",
        "/nonexistent-dir/t.json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot create /nonexistent-dir/t.json"),
        "{err}"
    );
    let refused = tmp("tl-threads.json");
    let _ = std::fs::remove_file(&refused);
    let out = udrma(&[
        "run",
        &example("demo.toml"),
        "--threads",
        "2",
        "--timeline",
        refused.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a timeline"), "{err}");
    assert!(!refused.exists(), "a refused run leaves no empty timeline");
    // Nor does it empty one that was there.
    std::fs::write(&refused, "an earlier timeline").unwrap();
    let out = udrma(&[
        "run",
        &example("demo.toml"),
        "--backend",
        "udp",
        "--timeline",
        refused.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let kept = std::fs::read_to_string(&refused).unwrap();
    assert_eq!(kept, "an earlier timeline");
    let out = udrma(&[
        "run",
        &example("demo.toml"),
        "--timeline",
        refused.to_str().unwrap(),
        "--timeline-max",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--timeline-max 0 would keep no event"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&refused).unwrap(),
        "an earlier timeline"
    );
}

#[test]
fn the_cli_page_shows_the_timelines_first_lines() {
    let doc =
        std::fs::read_to_string(format!("{}/docs/cli.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let shown: Vec<&str> = doc
        .lines()
        .skip_while(|l| *l != "$ head -n 4 pfc-incast.json")
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert_eq!(shown.len(), 4, "docs/cli.md's timeline block");
    let (path, _) = timeline("tl-cli-page.json", &example("pfc-incast.toml"), &[]);
    let text = std::fs::read_to_string(path).unwrap();
    let first: Vec<&str> = text.lines().take(4).collect();
    assert_eq!(shown, first);
}

/// `n` with a comma every three digits, as the docs write it.
fn thousands(n: usize) -> String {
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

#[test]
fn the_sizes_docs_cli_md_quotes_are_the_runs() {
    let doc = std::fs::read_to_string(format!("{}/docs/cli.md", env!("CARGO_MANIFEST_DIR")))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for ex in ["demo.toml", "pfc-incast.toml", "incast.toml"] {
        let (path, v) = timeline(&format!("tl-size-{ex}.json"), &example(ex), &[]);
        let n = v["traceEvents"].as_array().unwrap().len();
        let kb = (std::fs::metadata(&path).unwrap().len() + 500) / 1000;
        let said = format!("`{ex}`: {} events, {kb} KB", thousands(n));
        assert!(doc.contains(&said), "docs/cli.md should say {said}");
    }
}

/// speedscope's built app (`dist/release`) and Chromium, if both are here.
fn consumer() -> Option<(PathBuf, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let app = std::env::var_os("UDRMA_SPEEDSCOPE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/speedscope/package/dist/release"));
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .map(PathBuf::from);
    match (app.join("index.html").is_file(), chromium) {
        (true, Some(c)) => return Some((app, c)),
        _ if std::env::var_os("UDRMA_REQUIRE_SPEEDSCOPE").is_some_and(|v| v == "1") => {
            panic!(
                "speedscope and Chromium are required (UDRMA_REQUIRE_SPEEDSCOPE=1): {} or chromium missing",
                app.display()
            )
        }
        _ => {}
    }
    // Straight to stderr: the harness captures the macros, and a skip
    // must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: speedscope ({}) or chromium missing; `bash scripts/timeline-screenshot.sh --fetch` and `apt-get install chromium` to open the timeline in speedscope",
        app.display()
    );
    None
}

#[test]
fn speedscope_opens_the_timeline() {
    let Some((app, chromium)) = consumer() else {
        return;
    };
    let (path, v) = timeline("tl-speedscope.json", &example("pfc-incast.toml"), &[]);
    // As speedscope's own command line hands it a file: a script that
    // loads it, named in the page's address.
    let loader = tmp("tl-speedscope-load.js");
    let b64 = base64(&std::fs::read(&path).unwrap());
    std::fs::write(
        &loader,
        format!("speedscope.loadFileFromBase64(\"pfc-incast.json\", \"{b64}\")"),
    )
    .unwrap();
    let url = format!(
        "file://{}/index.html#localProfilePath={}",
        app.display(),
        loader.display()
    );
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--allow-file-access-from-files",
            "--timeout=5000",
            "--dump-dom",
            &url,
        ])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    // Loaded: the title names the file, and the toolbar the first of the
    // threads with spans, out of one per sending host.
    assert!(
        dom.contains("<title>pfc-incast.json - speedscope</title>"),
        "{dom}"
    );
    assert!(dom.contains("h1 (pid 2), ops 0 (tid 1)"), "{dom}");
    let threads = events(&v, "X").len();
    assert!(dom.contains(&format!("(1/{threads})")), "{dom}");
}

/// Standard base64 (the loader's encoding), written out here to need no
/// crate for it.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= c.len() {
                s.push(A[(n >> shift) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Every workload family draws its operations as spans: each message on
/// its sender, each non-contiguous round trip on host `a`, each node's
/// iteration of a collective (of the first fabric, the one a timeline
/// records, when both methods run), each rank's iteration of a scheduled
/// collective.
#[test]
fn every_workload_family_draws_its_operations() {
    let spans = |name: &str| -> (Vec<serde_json::Value>, serde_json::Value) {
        let path = tmp(&format!("tl-family-{name}.json"));
        let file = example(name);
        let out = udrma(&["run", &file, "--json", "--timeline", path.to_str().unwrap()]);
        let r = serde_json::from_slice(&out.stdout).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let x = events(&v, "X").into_iter().cloned().collect();
        (x, r)
    };
    let name = |s: &serde_json::Value| s["name"].as_str().unwrap().to_string();
    let (msgs, r) = spans("two-hosts-msg.toml");
    assert_eq!(msgs.len() as u64, r["ops"]["posted"].as_u64().unwrap());
    assert!(msgs
        .iter()
        .all(|s| name(s).starts_with("MSG ") && s["args"]["peer"].is_string()));
    assert!(msgs.iter().all(|s| s["args"]["result"] == "ok"));
    let (rounds, _) = spans("noncontig-columns.toml");
    assert_eq!(rounds.len(), 22, "20 timed round trips and 2 warm-up ones");
    assert!(rounds
        .iter()
        .all(|s| name(s) == "pack round trip 2048 B" && s["args"]["peer"] == "h1"));
    let (iters, r) = spans("allreduce-lossy.toml");
    assert_eq!(
        iters.len() as u64 * 2,
        r["ops"]["posted"].as_u64().unwrap(),
        "the NIC's half of method = both"
    );
    assert!(iters
        .iter()
        .all(|s| name(s).starts_with("allreduce #") && s["args"].get("peer").is_none()));
    let (laps, _) = spans("allreduce-ring-linkdown.toml");
    let open = laps
        .iter()
        .filter(|s| s["args"]["result"] == "not completed")
        .count();
    assert!(laps.iter().all(|s| name(s).starts_with("allreduce #")));
    assert_eq!(
        (laps.len(), open),
        (94, 14),
        "a link that goes down stalls the ring"
    );
}
