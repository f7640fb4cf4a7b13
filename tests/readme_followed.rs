//! What a new user ran into when following the README, each now a test:
//! flags that must accept what the docs show, runs whose operations fail,
//! messages that must say what really happened and where.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;
use common::{command, example, tmp, udrma};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The demo with its loss rule set to `p`, written to a file.
fn demo_with_loss(name: &str, p: &str, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(example("demo.toml"))
        .unwrap()
        .replace("p = 0.02", &format!("p = {p}"));
    let path = tmp(name);
    std::fs::write(&path, format!("{text}\n{extra}")).unwrap();
    path
}

#[test]
fn ladder_hosts_take_the_comma_form_the_docs_show() {
    let svg = tmp("readme-ladder.svg");
    let out = udrma(&[
        "run",
        &example("demo.toml"),
        "--ladder",
        svg.to_str().unwrap(),
        "--ladder-hosts",
        "h0,h1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = udrma(&[
        "run",
        &example("demo.toml"),
        "--ladder",
        svg.to_str().unwrap(),
        "--ladder-hosts",
        "h0,h1,h2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--ladder-hosts takes two hosts, as `h0,h1`; got h0,h1,h2"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_run_whose_operations_all_fail_does_not_pass() {
    let lost = demo_with_loss("readme-all-lost.toml", "1.0", "");
    let out = udrma(&["run", lost.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("all-succeeded:FAIL"), "{text}");
    // No operation completed: no completion time is made up for them.
    assert!(
        text.contains("completion  none of the 2 operations completed"),
        "{text}"
    );
    // The note says the time limit stopped it, when, and what was left.
    assert!(
        text.contains("note: stopped at the time limit (50.000ms): the last event ran at ")
            && text.contains("and the next was due at ")
            && text.contains("h0: 1 request outstanding; h2: 1 request outstanding"),
        "{text}"
    );

    // Half the packets lost: the WRITE gives up; the check names it.
    let half = demo_with_loss("readme-half-lost.toml", "0.5", "");
    let text = std::fs::read_to_string(&half)
        .unwrap()
        .replace("time_limit = \"50ms\"", "time_limit = \"1s\"");
    std::fs::write(&half, text).unwrap();
    let out = udrma(&["run", half.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["checks"]["all-complete"], true, "{v}");
    assert_eq!(v["checks"]["all-succeeded"], false, "{v}");
    assert!(v["ops"]["failed"].as_u64().unwrap() > 0);
    // Its percentiles are over the operations that completed, and the
    // summary says so; a failed one's time to give up is not among them.
    let summary = stdout(&udrma(&["run", half.to_str().unwrap()]));
    let completed = v["ops"]["completed"].as_u64().unwrap();
    let said = if completed == 0 {
        "completion  none of the 2 operations completed".to_string()
    } else {
        format!("(over the {completed} completed)")
    };
    assert!(summary.contains(&said), "{summary}");

    // One WRITE completes, one gives up on a dead link: the percentiles
    // are the completed one's alone (its 4.69 µs, not the other's time to
    // give up), and the line says over how many.
    let partly = tmp("readme-partly-failed.toml");
    std::fs::write(
        &partly,
        "name = \"partly-failed\"\nseed = 1\ntime_limit = \"1s\"\n[topology]\nkind = \"star\"\nhosts = 3\n\
         [[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h1\"\nsize = 4096\n\
         [[workload]]\nkind = \"single\"\nsrc = \"h0\"\ndst = \"h2\"\nsize = 4096\n\
         [[fault]]\nmodel = \"down\"\nlinks = [\"h2-s0\"]\nfrom = \"0ns\"\n",
    )
    .unwrap();
    let summary = stdout(&udrma(&["run", partly.to_str().unwrap()]));
    assert!(
        summary.contains("completion  p50 4.690 us  p99 4.690 us  max 4.690 us")
            && summary.contains("(over the 1 completed)"),
        "{summary}"
    );

    // A scenario that expects failures says so, and passes.
    let expected = std::fs::read_to_string(&half).unwrap() + "\n[checks]\nexpect_failures = true\n";
    let path = tmp("readme-expected-failures.toml");
    std::fs::write(&path, expected).unwrap();
    let out = udrma(&["run", path.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["checks"].get("all-succeeded").is_none(), "{v}");
    assert!(v["ops"]["failed"].as_u64().unwrap() > 0);
}

#[test]
fn sweeps_count_failed_operations_in_the_table_and_the_csv() {
    let csv = tmp("readme-sweep.csv");
    let out = udrma(&[
        "sweep",
        &example("demo.toml"),
        "--set",
        "fault.loss.p=0,0.6",
        "--set",
        "nic.max_retries=2",
        "--seeds",
        "2",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let row = |v: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(v))
            .unwrap_or_else(|| panic!("no row {v}:\n{text}"))
            .to_string()
    };
    assert!(text.contains("failed ops (runs)"), "{text}");
    assert!(
        row("0").trim_end().ends_with("2/2              0 (0)"),
        "{text}"
    );
    let lossy = row("0.6");
    assert!(lossy.contains("0/2"), "{lossy}");
    assert!(lossy.trim_end().ends_with("(2)"), "{lossy}");
    let table = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = table.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "ops_failed").unwrap();
    let failed: u64 = table
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(failed >= 2, "{table}");
}

#[test]
fn sweep_errors_point_at_the_key_in_the_file() {
    let out = udrma(&["sweep", &example("demo.toml"), "--set", "fault.loss.p=2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    // `p = 0.02` of the `loss` fault is on line 36 of demo.toml.
    let line = std::fs::read_to_string(example("demo.toml"))
        .unwrap()
        .lines()
        .position(|l| l == "p = 0.02")
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!(
            "demo.toml:{line}:1: --set fault.loss.p=2: rule loss: p = 2 is not a probability in [0, 1]"
        )),
        "{err}"
    );
    assert!(!err.contains("[fault.loss.p=2]"), "{err}");

    let out = udrma(&["sweep", &example("demo.toml"), "--set", "fault.los.p=0.1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("no `fault` named \"los\"; the names are \"loss\", \"dup\", \"reorder\""),
        "{}",
        stderr(&out)
    );

    let out = udrma(&[
        "sweep",
        &example("demo.toml"),
        "--set",
        "fault.loss.p=0.1",
        "--seeds",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("'0' for '--seeds"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bench_and_capture_errors_say_what_is_wrong() {
    let out = udrma(&["bench", "sim", "--k", "7"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("topology: fat tree k = 7: k must be even") && !err.contains("unknown link"),
        "{err}"
    );
    // Too large to number its nodes: refused before anything is built.
    let out = udrma(&["bench", "sim", "--k", "100000"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("fat tree k = 100000: at most k = 256"),
        "{err}"
    );

    // `bench sim --matrix`: htsim's format, checked line by line and
    // against the fabric's size; a good one runs the flows it lists.
    let cm = tmp("readme-matrix.cm");
    std::fs::write(
        &cm,
        "Nodes 16\nConnections 1\n0->15 id 1 start 0 size 64000 trigger 2\n",
    )
    .unwrap();
    let out = udrma(&["bench", "sim", "--k", "4", "--matrix", cm.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("readme-matrix.cm: connection matrix line 3: `trigger` is not a key"),
        "{err}"
    );
    std::fs::write(&cm, "Nodes 128\n0->1 size 64000\n").unwrap();
    let err = stderr(&udrma(&[
        "bench",
        "sim",
        "--k",
        "4",
        "--matrix",
        cm.to_str().unwrap(),
    ]));
    assert!(
        err.contains("the matrix says Nodes 128, but a k=4 fat tree has 16 hosts"),
        "{err}"
    );
    std::fs::write(
        &cm,
        "Nodes 16\n0->15 size 64000\n3->2 start 2000000 size 4000\n",
    )
    .unwrap();
    let out = udrma(&["bench", "sim", "--k", "4", "--matrix", cm.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("2 connections of"), "{text}");

    let pcap = tmp("readme-links.pcap");
    let out = udrma(&[
        "run",
        &example("lossy-write.toml"),
        "--pcap",
        pcap.to_str().unwrap(),
        "--pcap-links",
        "h0-e1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("unknown link \"h0-e1\"; did you mean \"h0-e0\"? links are h0-e0, h1-e0,")
            && err.contains("(48 in all)"),
        "{err}"
    );
}

#[test]
fn decode_says_why_a_file_is_not_a_capture() {
    let empty = tmp("readme-empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let out = udrma(&["decode", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("not a pcap capture: the file ends inside the 24-byte pcap file header"),
        "{}",
        stderr(&out)
    );

    let cut = tmp("readme-cut.pcap");
    let mut bytes = Vec::new();
    udrma::proto::samples::write_capture(&mut bytes).unwrap();
    std::fs::write(&cut, &bytes[..30]).unwrap();
    let out = udrma(&["decode", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("frame 1: the file ends inside its packet record (cut short)"),
        "{}",
        stderr(&out)
    );

    let dir = env!("CARGO_TARGET_TMPDIR");
    let out = udrma(&["decode", dir]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is a directory, not a capture file"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("Error reading bytes"));
}

#[test]
fn peers_may_be_named_by_host_name() {
    // A port of our own on loopback, named `localhost` on both sides.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("localhost:{port}");
    let mut server = Command::new(env!("CARGO_BIN_EXE_udrma"))
        .args([
            "bridge",
            "serve",
            "--bind",
            &bind,
            "--region",
            "1MiB",
            "--duration",
            "10s",
            "--quiet",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = udrma(&[
        "bridge", "put", "--peer", &bind, "--size", "64KiB", "--verify",
    ]);
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("verified byte-exact"),
        "{}",
        stdout(&out)
    );

    let out = udrma(&["bridge", "put", "--peer", "localhost", "--size", "1KiB"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has no port: expected HOST:PORT"));
}

#[test]
fn the_ladder_has_a_time_scale_a_lane_per_message_and_a_window() {
    let svg = tmp("readme-ladder-lanes.svg");
    let out = udrma(&[
        "run",
        &example("late-first-packet.toml"),
        "--ladder",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("time since first packet"));
    // Holds of different messages are told apart.
    for msg in [1, 2, 3] {
        assert!(
            text.contains(&format!("held in the escape channel: msg {msg} until")),
            "msg {msg}"
        );
    }
    let xs: std::collections::BTreeSet<&str> = text
        .match_indices("fill=\"#c62828\" fill-opacity=\"0.6\"")
        .map(|(i, _)| {
            let before = &text[..i];
            let at = before.rfind("<rect x=\"").unwrap() + 9;
            let end = at + before[at..].find('"').unwrap();
            &text[at..end]
        })
        .collect();
    assert_eq!(xs.len(), 3, "three lanes: {xs:?}");

    // A window and a cap choose what is drawn, and the note says so.
    let out = udrma(&[
        "run",
        &example("demo.toml"),
        "--ladder",
        svg.to_str().unwrap(),
        "--ladder-from",
        "20us",
        "--ladder-until",
        "40us",
        "--ladder-max",
        "100",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("demo: first 100 of ")
            && text.contains(" packets sent in [20.000us, 40.000us)"),
        "{}",
        &text[text.len() - 400..]
    );
    assert_eq!(text.matches("marker-end").count(), 100);
}

/// The parts of a printed line that change from run to run (wall-clock
/// time and rates, memory): blanked, so that the rest is compared.
fn steady(line: &str) -> String {
    let line = line.trim_end();
    // `simulated ... (0.034 s wall, 0.39 M hops/s)`
    if let Some(at) = line.find(" s wall") {
        if let Some(open) = line[..at].rfind(" (") {
            return line[..open].to_string();
        }
    }
    // `udrma bench sim`: the label of a measured line, not its figure.
    const MEASURED: [&str; 8] = [
        "build",
        // `udrma check`'s speed, and its guess of the time it takes.
        "time",
        "estimate",
        "wall",
        "packet-hops/s",
        "events/s",
        "peak memory",
        "huge pages",
    ];
    let label = line.split("  ").next().unwrap_or("");
    if MEASURED.contains(&label) {
        return label.to_string();
    }
    line.to_string()
}

/// A command shown in a doc with the output shown under it.
struct Shown {
    doc: &'static str,
    line: usize,
    /// The command as the doc shows it.
    shown: String,
    args: Vec<String>,
    /// An environment variable set before the command (`RUST_LOG=...`).
    env: Option<(String, String)>,
    echo_exit: bool,
    expected: Vec<String>,
}

/// Every deterministic `udrma run scenarios/examples/...`, `udrma replay`,
/// `udrma sweep`, `udrma bench sim` and `cargo run --release` (the demo)
/// transcript in `doc`, also with a `RUST_LOG=...` in front: real-time
/// runs (`--backend udp`) and commands that write files are left out.
fn transcripts(doc: &'static str) -> Vec<Shown> {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut shown = Vec::new();
    let mut in_fence = false;
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            continue;
        }
        // `RUST_LOG=FILTER udrma ...`: the filter goes to the environment.
        let (env, l) = match l
            .strip_prefix("$ RUST_LOG=")
            .and_then(|r| r.split_once(' '))
        {
            Some((filter, rest)) => (
                Some(("RUST_LOG".to_string(), filter.to_string())),
                format!("$ {rest}"),
            ),
            None => (None, l.to_string()),
        };
        // `cargo run --release` is `udrma` with no arguments: the demo.
        let cmd = if l == "$ cargo run --release" {
            "demo"
        } else if let Some(cmd) = l.strip_prefix("$ udrma ") {
            cmd
        } else {
            continue;
        };
        let (cmd, echo_exit) = match cmd.strip_suffix("; echo \"exit $?\"") {
            Some(c) => (c, true),
            None => (cmd, false),
        };
        let mut args: Vec<String> = cmd.split_whitespace().map(String::from).collect();
        let deterministic = match args.first().map(String::as_str) {
            Some("demo") => {
                args.clear();
                true
            }
            Some("run") | Some("replay") | Some("validate") => {
                args[1].starts_with("scenarios/examples/")
                    && !args.iter().any(|a| {
                        [
                            "--backend",
                            "--ladder",
                            "--pcap",
                            "--trace",
                            "--json",
                            "--timeline",
                        ]
                        .contains(&a.as_str())
                    })
            }
            Some("bench") => args.get(1).map(String::as_str) == Some("sim"),
            // A sweep's table (no progress bar off a terminal), when it
            // writes no files.
            Some("sweep") => {
                args.get(1)
                    .is_some_and(|f| f.starts_with("scenarios/examples/"))
                    && !args.iter().any(|a| {
                        ["--csv", "--json", "--plot", "--shard", "--parts"].contains(&a.as_str())
                    })
            }
            // (Run where its counterexample may be written: see
            // `check_transcripts`.)
            Some("check") => args
                .get(1)
                .is_some_and(|f| f.starts_with("scenarios/examples/")),
            _ => false,
        };
        if !deterministic || cmd.contains(['|', '&', '>', '\\']) {
            continue;
        }
        let expected = lines[i + 1..]
            .iter()
            .take_while(|o| !o.starts_with("$ ") && !o.starts_with("```"))
            .map(|o| o.to_string())
            .collect();
        shown.push(Shown {
            doc,
            line: i + 1,
            shown: lines[i].trim_start_matches("$ ").to_string(),
            args,
            env,
            echo_exit,
            expected,
        });
    }
    shown
}

/// Runs each transcript and requires every line shown (`...` stands for
/// lines left out) in the order shown; with no `...`, nothing more.
fn check_transcripts(docs: &[&'static str], at_least: usize) {
    let mut checked = 0;
    for doc in docs {
        for s in transcripts(doc) {
            // `udrma check` writes its counterexample in the working
            // directory: a scratch one, which sees the examples.
            let dir = if s.args.first().map(String::as_str) == Some("check") {
                let d = tmp(&format!(
                    "transcript-{}-{}",
                    s.doc.replace('/', "-"),
                    s.line
                ));
                let _ = std::fs::remove_dir_all(&d);
                std::fs::create_dir_all(&d).unwrap();
                std::os::unix::fs::symlink(
                    format!("{}/scenarios", env!("CARGO_MANIFEST_DIR")),
                    d.join("scenarios"),
                )
                .unwrap();
                d
            } else {
                env!("CARGO_MANIFEST_DIR").into()
            };
            let mut cmd = command();
            if let Some((k, v)) = &s.env {
                cmd.env(k, v);
            }
            let out = cmd.current_dir(&dir).args(&s.args).output().unwrap();
            let mut printed: Vec<String> = stdout(&out)
                .lines()
                .chain(stderr(&out).lines())
                .map(steady)
                .collect();
            if s.echo_exit {
                printed.push(format!("exit {}", out.status.code().unwrap_or(-1)));
            }
            let elided = s.expected.iter().any(|e| e.trim() == "...");
            let expected: Vec<String> = s
                .expected
                .iter()
                .filter(|e| e.trim() != "...")
                .map(|e| steady(e))
                .collect();
            let mut rest = printed.iter();
            for e in &expected {
                assert!(
                    rest.any(|p| p == e),
                    "{}:{}: `{}` no longer prints, in this order,\n{e}\nIt printed:\n{}",
                    s.doc,
                    s.line,
                    s.shown,
                    printed.join("\n")
                );
            }
            if !elided {
                assert_eq!(
                    printed.len(),
                    expected.len(),
                    "{}:{}: `{}` prints other lines than shown:\n{}",
                    s.doc,
                    s.line,
                    s.shown,
                    printed.join("\n")
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= at_least,
        "only {checked} transcripts found in {docs:?}: the check lost its examples"
    );
}

#[test]
fn the_readme_shows_what_its_run_prints() {
    check_transcripts(&["README.md"], 1);
}

/// The scenario page's runs are small (an 8-host star): they run in
/// debug builds too.
#[test]
fn the_scenario_page_shows_what_its_runs_print() {
    check_transcripts(&["docs/scenarios.md"], 1);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "reruns fat-tree and all-to-all examples (millions of events): run with --release (CI does)"
)]
fn the_cli_page_and_the_area_docs_show_what_their_runs_print() {
    check_transcripts(&AREA_DOCS, 18);
}

/// The docs whose transcripts `the_cli_page_and_the_area_docs_show_what_their_runs_print`
/// reruns (README.md's are rerun by `the_readme_shows_what_its_run_prints`).
const AREA_DOCS: [&str; 7] = [
    "docs/cli.md",
    "docs/messaging.md",
    "docs/noncontig.md",
    "docs/collectives.md",
    "docs/congestion.md",
    "docs/check.md",
    "docs/lossless.md",
];

/// A fenced block of a doc, with the marker line before it, if any.
struct Block {
    doc: String,
    /// 1-based line of the opening fence.
    line: usize,
    /// What follows the opening ``` (`text`, `sh`, ...; empty if nothing).
    info: String,
    body: Vec<String>,
    /// The last non-blank line before the fence, when it is an HTML
    /// comment: `<!-- rerun: ... -->` or `<!-- not rerun: ... -->`.
    marker: Option<String>,
}

impl Block {
    /// An output block shows what a program printed: a block tagged
    /// `text` or `console`, or a transcript (a `$ ` command with lines
    /// under it that are not commands or their `\` continuations).
    fn is_output(&self) -> bool {
        if self.info == "text" || self.info == "console" {
            return true;
        }
        let (mut command, mut continued, mut printed) = (false, false, false);
        for l in &self.body {
            if l.starts_with("$ ") {
                command = true;
                continued = l.ends_with('\\');
            } else if continued {
                continued = l.ends_with('\\');
            } else if !l.trim().is_empty() {
                printed = true;
            }
        }
        command && printed
    }

    /// The 1-based lines of its `$ ` commands.
    fn commands(&self) -> Vec<usize> {
        (self.body.iter().enumerate())
            .filter(|(_, l)| l.starts_with("$ "))
            .map(|(i, _)| self.line + 1 + i)
            .collect()
    }
}

/// README.md and every docs/*.md, by their paths from the root.
fn walked_docs() -> Vec<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut docs: Vec<String> = std::fs::read_dir(format!("{root}/docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_string());
    docs
}

/// Every fenced block of `doc` (fences of three backticks at the start of
/// a line, as every doc here writes them).
fn blocks(doc: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(format!("{}/{doc}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].starts_with("```"))
            .unwrap_or_else(|| panic!("{doc}:{}: a fence that never closes", i + 1));
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .filter(|l| l.starts_with("<!--"))
            .map(|l| l.to_string());
        found.push(Block {
            doc: doc.to_string(),
            line: i + 1,
            info: info.trim().to_string(),
            body: lines[i + 1..end].iter().map(|l| l.to_string()).collect(),
            marker,
        });
        i = end + 1;
    }
    found
}

/// What a marker says: `Ok(true)` for a test that reruns the block (its
/// file and function exist), `Ok(false)` for a reason it is not rerun.
fn read_marker(marker: &str, doc: &str) -> Result<bool, String> {
    let inner = marker
        .strip_prefix("<!--")
        .and_then(|m| m.strip_suffix("-->"))
        .map(str::trim)
        .ok_or("a marker is one line, `<!-- ... -->`")?;
    if let Some(reason) = inner.strip_prefix("not rerun:") {
        return match reason.trim().len() {
            0..=9 => Err("`not rerun:` needs its reason".into()),
            _ => Ok(false),
        };
    }
    let test = inner
        .strip_prefix("rerun:")
        .ok_or("a marker says `rerun: FILE TEST` or `not rerun: REASON`")?;
    let (file, name) = test
        .trim()
        .split_once(' ')
        .ok_or("`rerun:` names a file and a test in it")?;
    let path = format!("{}/{file}", env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(&path).map_err(|e| format!("{file}: {e}"))?;
    if !source.contains(&format!("fn {}(", name.trim())) {
        return Err(format!("{file} has no test `{}`", name.trim()));
    }
    // The test must read the doc it is named in (its path in a string),
    // not only exist.
    if !source.contains(&format!("{doc}\"")) {
        return Err(format!(
            "{file} never reads {doc}: it cannot compare the block"
        ));
    }
    Ok(true)
}

/// Every output block in README.md and docs/*.md is rerun by a test or
/// says why not. Rerun: each of its `$ ` commands is a transcript that
/// `check_transcripts` reruns (README.md, docs/scenarios.md and
/// `AREA_DOCS`), or the line
/// before it is `<!-- rerun: FILE TEST -->`, naming a test that compares
/// the block with what the program prints now. Not rerun: the line
/// before it is `<!-- not rerun: REASON -->` (wall-clock figures, root,
/// MPI, Slurm, long benchmarks, another program's output). The counts are
/// written to stderr past the test harness's capture, so that every
/// `cargo test` shows them.
#[test]
fn every_output_block_is_rerun_or_says_why_not() {
    // The docs whose transcripts the tests above rerun.
    let rerun: std::collections::BTreeSet<(String, usize)> = ["README.md", "docs/scenarios.md"]
        .into_iter()
        .chain(AREA_DOCS)
        .flat_map(transcripts)
        .map(|s| (s.doc.to_string(), s.line))
        .collect();
    let (mut by_transcript, mut by_test, mut marked, mut other) = (0, 0, 0, 0);
    let mut wrong = Vec::new();
    for doc in walked_docs() {
        for b in blocks(&doc) {
            let at = format!("{}:{}", b.doc, b.line);
            let verdict = b.marker.as_deref().map(|m| read_marker(m, &b.doc));
            if let Some(Err(e)) = &verdict {
                wrong.push(format!("{at}: {e}"));
                continue;
            }
            if !b.is_output() {
                if verdict.is_some() {
                    wrong.push(format!("{at}: a marker on a block that is not output"));
                }
                other += 1;
                continue;
            }
            let commands = b.commands();
            match verdict {
                Some(Ok(true)) => by_test += 1,
                Some(Ok(false)) => marked += 1,
                _ if !commands.is_empty()
                    && commands.iter().all(|&l| rerun.contains(&(doc.clone(), l))) =>
                {
                    by_transcript += 1
                }
                _ => wrong.push(format!(
                    "{at}: an output block that no test reruns: rerun it, or mark it `<!-- not rerun: REASON -->`"
                )),
            }
        }
    }
    use std::io::Write;
    let _ = std::io::stderr().write_all(
        format!(
            "output blocks in README.md and docs/*.md: {} rerun ({by_transcript} as transcripts, {by_test} by a named test), {marked} marked not rerun; {other} other fenced blocks (code, input, figures)\n",
            by_transcript + by_test
        )
        .as_bytes(),
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        by_transcript >= 20 && marked >= 1,
        "the walk lost its blocks"
    );
}

/// The lines of the first block of `doc` whose opening fence is `fence`.
fn first_block(doc: &str, fence: &str) -> Vec<String> {
    (blocks(doc).into_iter())
        .find(|b| format!("```{}", b.info) == fence)
        .unwrap_or_else(|| panic!("{doc} has no {fence} block"))
        .body
}

/// The doctests of a crate's docs (`//!` lines of `lib.rs`), each as
/// its lines; none may hide a line (`# `) that a doc showing it could not.
fn doctests(lib_rs: &str) -> Vec<Vec<String>> {
    let path = format!("{}/{lib_rs}", env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(&path).unwrap();
    let docs: Vec<&str> = lib
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| {
            l.strip_prefix("//! ")
                .unwrap_or(l.trim_start_matches("//!"))
        })
        .collect();
    let mut found = Vec::new();
    let mut open = None;
    for (i, l) in docs.iter().enumerate() {
        match (open, *l == "```") {
            (None, true) => open = Some(i),
            (Some(o), true) => {
                let body: Vec<String> = docs[o + 1..i].iter().map(|l| l.to_string()).collect();
                assert!(
                    !body.iter().any(|l| l.starts_with("# ") || l == "#"),
                    "{lib_rs}: a doctest hides lines that a doc cannot show"
                );
                found.push(body);
                open = None;
            }
            _ => {}
        }
    }
    found
}

/// The Rust programs README.md and docs/library.md show are doctests of
/// `udrma-sim` and `udrma-scenarios`, line for line, so the code a reader
/// copies is what `cargo test --workspace` compiles and runs: the
/// README's is the first of `udrma-sim`'s, and every ```rust block of
/// docs/library.md is one of either crate's.
#[test]
fn the_library_programs_the_docs_show_are_doctests() {
    let sim = doctests("sim/src/lib.rs");
    let scenarios = doctests("scenarios/src/lib.rs");
    let readme = first_block("README.md", "```rust");
    assert!(readme.iter().any(|l| l.starts_with("fn main()")));
    assert_eq!(
        readme, sim[0],
        "README.md's ```rust block and the first doctest of sim/src/lib.rs differ: make them equal"
    );
    let shown: Vec<Block> = (blocks("docs/library.md").into_iter())
        .filter(|b| b.info == "rust")
        .collect();
    assert!(shown.len() >= 2, "docs/library.md lost its programs");
    for b in shown {
        assert!(
            sim.contains(&b.body) || scenarios.contains(&b.body),
            "docs/library.md:{}: this program is no doctest of sim/src/lib.rs or scenarios/src/lib.rs: make it one",
            b.line
        );
    }
}

/// docs/cli.md's bad-input sample: the file it shows, run as it shows,
/// prints the line under the command.
#[test]
fn the_bad_input_sample_is_what_udrma_prints() {
    let file = first_block("docs/cli.md", "```toml").join("\n") + "\n";
    let dir = tmp("cli-bad-input");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("bad.toml"), file).unwrap();
    let block = (blocks("docs/cli.md").into_iter())
        .find(|b| b.body.first().map(String::as_str) == Some("$ udrma run bad.toml"))
        .expect("docs/cli.md shows `udrma run bad.toml`");
    let out = command()
        .current_dir(&dir)
        .args(["run", "bad.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let printed: Vec<String> = stderr(&out).lines().map(String::from).collect();
    assert_eq!(
        printed,
        block.body[1..],
        "docs/cli.md's bad-input sample drifted"
    );
}

/// docs/cli.md's table of examples names every file in
/// scenarios/examples/, and no file that is not there.
#[test]
fn the_cli_examples_table_lists_every_example() {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = std::fs::read_to_string(format!("{root}/docs/cli.md")).unwrap();
    let table = text
        .split("## The examples (`scenarios/examples/`)")
        .nth(1)
        .expect("cli.md has its examples section");
    let listed: std::collections::BTreeSet<String> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(String::from))
        .filter(|name| name.ends_with(".toml"))
        .collect();
    let shipped: std::collections::BTreeSet<String> =
        std::fs::read_dir(format!("{root}/scenarios/examples"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .collect();
    let missing: Vec<_> = shipped.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&shipped).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/cli.md's examples table: missing {missing:?}, naming files that do not exist {extra:?}"
    );
}
