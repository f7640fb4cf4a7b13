//! `udrma check`: the exhaustive fault search, driven as a user runs it
//! (docs/check.md). It must pass a small scenario within two faults, find
//! the stale-duplicate hazard of the receive registry without tombstones
//! (so it can fail), write a counterexample `udrma run` replays to the
//! same failing check, and refuse bad input before running.

use std::process::Output;

mod common;
use common::{command, example, tmp, udrma};

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value after `key` on the line that starts with `line`.
fn count(stdout: &str, line: &str, key: &str) -> u64 {
    let l = stdout
        .lines()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no line {line:?} in\n{stdout}"));
    let rest = &l[l.find(key).unwrap_or_else(|| panic!("{key:?} in {l:?}")) + key.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in {l:?}"))
}

/// The output without the lines that say how long it took and may take.
fn without_time(stdout: &str) -> String {
    stdout
        .lines()
        .filter(|l| !l.starts_with("time ") && !l.starts_with("estimate "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 1,500 runs of the engine twice: seconds in release, minutes in debug: run with --release (CI does)"
)]
fn the_small_pair_has_no_violation_within_two_faults_on_any_number_of_threads() {
    let file = example("check-pair.toml");
    let out_dir = tmp("check-pair");
    let run = |jobs: &str| {
        udrma(&[
            "check",
            &file,
            "--faults",
            "2",
            "--jobs",
            jobs,
            "--out",
            out_dir.to_str().unwrap(),
        ])
    };
    let one = run("1");
    let (stdout, stderr) = text(&one);
    assert_eq!(one.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.lines().last() == Some("result      no violation within 2 faults"),
        "{stdout}"
    );
    // The fault-free run judges 11 packets on the pair's one link: 55
    // single faults, less the two reorders of each direction's last
    // packet, which has nothing to swap with.
    assert!(
        stdout.contains("fault-free  11 packets judged on 1 link,"),
        "{stdout}"
    );
    assert_eq!(count(&stdout, "faults 0", "ran"), 1);
    assert_eq!(count(&stdout, "faults 1", "ran"), 53);
    assert_eq!(count(&stdout, "faults 1", "not applicable"), 2);
    let two = count(&stdout, "faults 2", "ran");
    // At least every pair of the fault-free run's packets (retransmissions
    // add more).
    assert!(two >= 55 * 50 / 2 - 200, "{stdout}");
    let ran = count(&stdout, "explored", "ran");
    let pruned = count(&stdout, "explored", "pruned as equivalent");
    assert_eq!(ran, 1 + 53 + two, "{stdout}");
    assert_eq!(count(&stdout, "explored", "explored"), ran + pruned);
    assert_eq!(count(&stdout, "faults 2", "violations"), 0);
    // Two threads: the same search, line for line.
    let both = run("2");
    let (stdout2, _) = text(&both);
    assert_eq!(both.status.code(), Some(0), "{stdout2}");
    assert_eq!(without_time(&stdout), without_time(&stdout2));
}

/// Finding 8 within its bound: on the credit ping-pong no placement of two
/// faults leaves a credit count lost once the run is quiet. With the
/// engine's credit repair switched off, one dropped ACK does (docs/check.md).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 8,500 runs of the engine: seconds in release, minutes in debug: run with --release (CI does)"
)]
fn the_credit_pingpong_loses_no_credit_within_two_faults() {
    let out_dir = tmp("check-credits");
    let out = udrma(&[
        "check",
        &example("check-credits.toml"),
        "--faults",
        "2",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("credits:PASS"), "{stdout}");
    assert!(
        stdout.lines().last() == Some("result      no violation within 2 faults"),
        "{stdout}"
    );
    assert!(count(&stdout, "faults 2", "ran") > 8_000, "{stdout}");
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 1,500 runs of the engine: seconds in release, minutes in debug: run with --release (CI does)"
)]
fn without_tombstones_the_check_finds_the_stale_duplicate_and_udrma_run_replays_it() {
    let out_dir = tmp("check-hazard");
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = udrma(&[
        "check",
        &example("stale-duplicate-hazard.toml"),
        "--faults",
        "2",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    // The file's own two rules (which stage the hazard) are left out: the
    // search finds it by itself, with two faults and not fewer.
    assert!(
        stdout.contains("the file's 2 [[fault]] rule(s) left out"),
        "{stdout}"
    );
    assert_eq!(count(&stdout, "faults 1", "violations"), 0, "{stdout}");
    assert!(
        stdout.contains("result      VIOLATION with 2 fault(s)")
            && stdout.contains("fails no-write-after-completion"),
        "{stdout}"
    );
    // A copy of the WRITE, and one of the two held past the reuse.
    assert!(stdout.contains("fault 1     duplicate"), "{stdout}");
    assert!(stdout.contains("fault 2     delay"), "{stdout}");
    assert!(stdout.contains("the search's run"), "{stdout}");
    let file = out_dir.join("stale-duplicate-hazard-counterexample.toml");
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        written.lines().filter(|l| *l == "[[fault]]").count(),
        2,
        "{written}"
    );
    assert!(written.contains("tombstones = false"), "{written}");
    // `udrma run` replays it to the same failing check.
    let replay = udrma(&["run", file.to_str().unwrap()]);
    let (rout, rerr) = text(&replay);
    assert_eq!(replay.status.code(), Some(1), "{rout}\n{rerr}");
    let checks = rout.lines().find(|l| l.starts_with("checks")).unwrap();
    let failing: Vec<&str> = checks
        .split_whitespace()
        .filter(|c| c.ends_with(":FAIL"))
        .collect();
    assert_eq!(failing, vec!["no-write-after-completion:FAIL"], "{rout}");
    // The capture line still decodes when the replay fails (it must), and
    // it and the ladder go beside the file.
    let dir = out_dir.to_str().unwrap();
    assert!(
        stdout.contains(&format!(
            "--pcap {dir}/stale-duplicate-hazard-counterexample.pcap; udrma decode {dir}/"
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "--ladder {dir}/stale-duplicate-hazard-counterexample.svg"
        )),
        "{stdout}"
    );
    // A search with its own --delay says so in the file's header, so the
    // command there searches again as this one did.
    let out = udrma(&[
        "check",
        &example("stale-duplicate-hazard.toml"),
        "--kinds",
        "duplicate,delay",
        "--delay",
        "60us",
        "--out",
        dir,
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(
        written
            .lines()
            .next()
            .is_some_and(|l| l.ends_with("--kinds duplicate,delay --delay 60000ns`:")),
        "{written}"
    );
}

#[test]
fn a_search_too_large_is_refused_before_it_runs() {
    let out = udrma(&[
        "check",
        &example("check-pair.toml"),
        "--faults",
        "3",
        "--max-schedules",
        "1000",
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    // 1 + 11·5 + 55·25 + 165·125
    assert!(stderr.contains("about 22056 schedules"), "{stderr}");
    assert!(stderr.contains("fewer --kinds"), "{stderr}");
}

#[test]
fn bad_input_gets_the_usual_errors() {
    let bad = tmp("check-bad.toml");
    std::fs::write(
        &bad,
        "name = \"x\"\n[topology]\nkind = \"pair\"\nbogus = 1\n",
    )
    .unwrap();
    let out = udrma(&["check", bad.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("check-bad.toml:4:1"), "{stderr}");
    let out = udrma(&["check", &example("check-pair.toml"), "--kinds", "drop,melt"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid value 'melt'"), "{stderr}");
    // A collective study may run a second fabric: refused, not half-searched.
    let out = udrma(&["check", &example("allreduce-lossy.toml"), "--faults", "1"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not collective ones"), "{stderr}");
    // A scenario that sends nothing has nothing to search.
    let empty = tmp("check-empty.toml");
    std::fs::write(&empty, "name = \"x\"\n[topology]\nkind = \"pair\"\n").unwrap();
    let out = udrma(&["check", empty.to_str().unwrap()]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no [[workload]]"), "{stderr}");
    // A delay of nothing is no delay.
    let out = udrma(&["check", &example("check-pair.toml"), "--delay", "0ns"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--delay 0"), "{stderr}");
    // A delay past the time limit matters only when delays are placed.
    let long = ["check", &example("check-pair.toml"), "--delay", "1s"];
    let out = udrma(&[&long[..], &["--faults", "1"]].concat());
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("reach the scenario's time_limit"),
        "{stderr}"
    );
    let out = udrma(&[&long[..], &["--faults", "1", "--kinds", "drop"]].concat());
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stdout.contains("delay holds"), "{stdout}");
    // The merge bound is one process's estimate, not a share of a search.
    refused_with(
        "--merge-bound",
        &[&["--shard", "0/2"], &["--merge", "x.json"]],
    );
}

/// `udrma check check-pair.toml FLAG` with each of `others` is refused
/// (exit 2) as flags that cannot be used together.
fn refused_with(flag: &str, others: &[&[&str]]) {
    let pair = example("check-pair.toml");
    for with in others {
        let out = udrma(&[&["check", pair.as_str(), flag][..], with].concat());
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{with:?}: {stderr}");
        assert!(stderr.contains("cannot be used with"), "{with:?}: {stderr}");
    }
}

/// `--merge-states` on check-pair at three faults: the plain search's
/// answer with fewer runs (the figures docs/check.md gives), and one
/// process only.
/// Searches `file` to `k` faults with `extra` flags, which must find no
/// violation; the schedules run and explored, as the report gives them.
fn searched(file: &str, k: u32, extra: &[&str]) -> (String, String) {
    let k = k.to_string();
    let out = udrma(&[&["check", file, "--faults", k.as_str()][..], extra].concat());
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("result      no violation within {k} faults")),
        "{stdout}"
    );
    let explored = stdout
        .lines()
        .find_map(|l| l.strip_prefix("explored "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let ran = explored
        .split("ran ")
        .nth(1)
        .and_then(|l| l.split(',').next())
        .unwrap_or_else(|| panic!("{stdout}"));
    let schedules = explored.split_whitespace().next().unwrap_or_default();
    (ran.to_string(), schedules.to_string())
}

/// The figures of docs/check.md's table of depths: each search's runs
/// and schedules explored, exactly (about sixteen minutes on two cores,
/// so not in CI: `cargo test --release --test check -- --ignored
/// depth`).
#[test]
#[ignore = "the depth targets of docs/check.md: about sixteen minutes on two cores"]
fn merged_searches_at_depth_run_the_counts_the_docs_give() {
    let big = ["--merge-states", "--max-schedules", "20000000"];
    let cases = [
        ("check-pair.toml", 6, "5455903", "16765662"),
        ("check-credits.toml", 4, "3658009", "7235377"),
        ("check-rendezvous.toml", 3, "2985937", "6427909"),
    ];
    for (file, k, ran, explored) in cases {
        assert_eq!(
            searched(&example(file), k, &big),
            (ran.to_string(), explored.to_string()),
            "{file} at K = {k}"
        );
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 50,000 runs of the engine: run with --release (CI does)"
)]
fn merging_states_runs_fewer_schedules_for_the_same_answer() {
    let pair = example("check-pair.toml");
    let ran = |extra: &[&str], k: u32| searched(&pair, k, extra);
    assert_eq!(ran(&[], 3), ("33527".into(), "33527".into()));
    assert_eq!(
        ran(&["--merge-states"], 3),
        ("17108".into(), "29228".into())
    );
    // Shards merge states too (`tests/check_cases.rs`); a `--merge`
    // takes it from their files.
    refused_with("--merge-states", &[&["--merge-bound"]]);
    let out = udrma(&["check", &pair, "--merge-states", "--merge", "x.json"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--merge reads it from the shard files"),
        "{stderr}"
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "needs a search that runs for seconds: run with --release (CI does)"
)]
fn an_interrupt_prints_what_was_covered() {
    let child = command()
        .args([
            "check",
            &example("check-pair.toml"),
            // About 230,000 schedules: a minute or more, so the interrupt
            // comes first on any machine.
            "--faults",
            "4",
            "--jobs",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill(2) reads no memory of ours; the pid is our own child's.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("interrupted every schedule of up to"),
        "{stdout}"
    );
    assert!(
        stdout.contains("result      no violation in what ran"),
        "{stdout}"
    );
}

/// `--shard` splits one search and `--merge` adds it up: what two shards
/// print merged is what one process prints (but for the lines of time),
/// on a scenario with no violation and on one whose smallest
/// counterexample has two faults, the counterexample file included.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 3,000 runs of the engine: seconds in release, minutes in debug: run with --release (CI does)"
)]
fn two_shards_merged_print_what_one_process_prints() {
    for (name, code) in [("check-pair", 0), ("stale-duplicate-hazard", 1)] {
        let file = example(&format!("{name}.toml"));
        let dir = tmp(&format!("check-shards-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        let (one, shards, merged) = (dir.join("one"), dir.join("shards"), dir.join("merged"));
        for d in [&one, &shards, &merged] {
            std::fs::create_dir_all(d).unwrap();
        }
        let search = |extra: &[&str], out: &std::path::Path| {
            let mut args = vec![
                "check",
                &file,
                "--faults",
                "2",
                "--out",
                out.to_str().unwrap(),
            ];
            args.extend_from_slice(extra);
            let o = udrma(&args);
            let (stdout, stderr) = text(&o);
            (o.status.code(), stdout, stderr)
        };
        let (c1, whole, e1) = search(&[], &one);
        assert_eq!(c1, Some(code), "{whole}\n{e1}");
        let mut files = Vec::new();
        for i in 0..2 {
            let (c, s, e) = search(&["--shard", &format!("{i}/2")], &shards);
            assert!(c == Some(0) || c == Some(1), "{s}\n{e}");
            assert!(s.contains(&format!("shard       {i}/2: ")), "{s}");
            files.push(shards.join(format!("{name}-check-shard-{i}-of-2.json")));
        }
        let mut args = vec!["check", &file, "--out", merged.to_str().unwrap(), "--merge"];
        args.extend(files.iter().map(|f| f.to_str().unwrap()));
        let o = udrma(&args);
        let (m, e) = text(&o);
        assert_eq!(o.status.code(), Some(code), "{m}\n{e}");
        assert!(m.contains("shards      2 shards"), "{m}");
        assert!(
            m.contains(" 2 shards\n"),
            "the time line counts shards: {m}"
        );
        let steady = |s: &str| {
            without_time(s)
                .lines()
                .filter(|l| {
                    !l.starts_with("shards ")
                        && !l.starts_with("wrote ")
                        && !l.starts_with("ladder ")
                        && !l.starts_with("capture ")
                        && !l.starts_with("replay ")
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(
            steady(&m),
            steady(&whole),
            "{name}: merged\n{m}\none process\n{whole}"
        );
        if code == 1 {
            let f = format!("{name}-counterexample.toml");
            assert_eq!(
                std::fs::read_to_string(merged.join(&f)).unwrap(),
                std::fs::read_to_string(one.join(&f)).unwrap()
            );
        }
        // A shard missing, or given twice, is refused by name.
        let o = udrma(&["check", &file, "--merge", files[0].to_str().unwrap()]);
        let (_, e) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains("1 of 2 shards given; missing: 1/2"), "{e}");
        let f0 = files[0].to_str().unwrap();
        let o = udrma(&["check", &file, "--merge", f0, f0]);
        let (_, e) = text(&o);
        assert!(e.contains("are both shard 0/2"), "{e}");
        // Another scenario's file is not the one the shards searched.
        let f1 = files[1].to_str().unwrap();
        let o = udrma(&["check", &example("check-credits.toml"), "--merge", f0, f1]);
        let (_, e) = text(&o);
        assert!(e.contains("not the scenario the shards searched"), "{e}");
        // Shards of two searches: the merge names what differs.
        let other = dir.join("other");
        std::fs::create_dir_all(&other).unwrap();
        let (c, s, e) = search(&["--shard", "1/2", "--merge-states"], &other);
        assert!(c == Some(0) || c == Some(1), "{s}\n{e}");
        let f1 = other.join(format!("{name}-check-shard-1-of-2.json"));
        let o = udrma(&["check", &file, "--merge", f0, f1.to_str().unwrap()]);
        let (_, e) = text(&o);
        assert!(
            e.contains("are shards of different searches: their --merge-states differ"),
            "{e}"
        );
    }
}

/// The job script docs/check.md shows is the one CI submits.
#[test]
fn the_docs_show_the_check_job_script_as_it_is() {
    let root = env!("CARGO_MANIFEST_DIR");
    let script = std::fs::read_to_string(format!("{root}/scripts/udrma-check.sbatch")).unwrap();
    let doc = std::fs::read_to_string(format!("{root}/docs/check.md")).unwrap();
    assert!(
        doc.contains(&format!("```bash\n{script}```")),
        "docs/check.md no longer shows scripts/udrma-check.sbatch as it is"
    );
}
