//! The answers `udrma check` must keep: twenty small scenarios in
//! `tests/check-cases/` (the shipped check examples, variants of them,
//! the patent's stale-duplicate hazard, and findings 3, 8, 9 and 12
//! reinstated through the configurations that still have them), each
//! headed by the flags it is searched with (`# check: ...`) and the
//! lines the search printed last (`# answer: ...`): the verdict, and the
//! smallest counterexample's faults when there is one. How many
//! schedules violate is printed but not compared (a search that prunes
//! runs fewer).
//!
//! A search that prunes schedules (issue 65's state merging, when it is
//! built) must give every case the same answer as the plain search that
//! pinned them. `--merge-bound` (an unsound upper bound on merging, for
//! measuring) is held to the same answers here, so that a case it would
//! miss is seen. `UDRMA_BLESS=1` rewrites the answers from the plain
//! search, for a case added or an engine change that moves one (say why
//! in the commit).

mod common;
use common::{tmp, udrma};

/// The lines of a search's output that are its answer: the verdict and
/// the counterexample's faults.
fn answer(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("result ") || l.starts_with("fault "))
        .map(str::to_string)
        .collect()
}

/// A line of an answer as searches must agree on it: a `result` line
/// without how many schedules violate (a search that prunes runs fewer
/// of them; the verdict, its number of faults and the failing checks
/// stay).
fn agreed(line: &str) -> String {
    match (line.find(" (the smallest"), line.find("violate)")) {
        (Some(a), Some(b)) if line.starts_with("result ") && a < b => {
            format!("{}{}", &line[..a], &line[b + "violate)".len()..])
        }
        _ => line.to_string(),
    }
}

/// Where a search's answer `got` is not the `pinned` one (as searches
/// must agree on it): what each says, `who` naming the search.
fn mismatch(name: &str, who: &str, pinned: &[String], got: &[String]) -> Option<String> {
    let same = got
        .iter()
        .map(|l| agreed(l))
        .eq(pinned.iter().map(|l| agreed(l)));
    (!same).then(|| {
        format!(
            "{name}: pinned\n  {}\n{who}\n  {}",
            pinned.join("\n  "),
            got.join("\n  ")
        )
    })
}

/// The case files, by name.
fn cases() -> Vec<std::path::PathBuf> {
    let dir = format!("{}/tests/check-cases", env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

/// A case's `# check:` flags and pinned `# answer:` lines.
fn header(text: &str, name: &str) -> (Vec<String>, Vec<String>) {
    let flags = text
        .lines()
        .find_map(|l| l.strip_prefix("# check: "))
        .unwrap_or_else(|| panic!("{name} has no `# check:` line"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let pinned = text
        .lines()
        .filter_map(|l| l.strip_prefix("# answer: "))
        .map(str::to_string)
        .collect();
    (flags, pinned)
}

/// Searches `path` with its own flags and `extra`: the answer lines and
/// the schedules that ran.
fn search(path: &std::path::Path, flags: &[String], extra: &[&str]) -> (Vec<String>, u64) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let out_dir = tmp("check-cases");
    let mut args = vec!["check", path.to_str().unwrap()];
    args.extend(flags.iter().map(String::as_str));
    args.extend(extra);
    args.extend(["--out", out_dir.to_str().unwrap()]);
    let out = udrma(&args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let got = answer(&stdout);
    assert!(
        matches!(out.status.code(), Some(0 | 1)) && !got.is_empty(),
        "{name}: udrma check {args:?} exited {:?}\n{stdout}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let ran = stdout
        .lines()
        .find_map(|l| l.strip_prefix("explored "))
        .and_then(|l| l.split("ran ").nth(1))
        .and_then(|l| l.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{name}: no `explored` line\n{stdout}"));
    (got, ran)
}

/// The count of violating schedules is not part of the answer.
#[test]
fn an_answer_leaves_out_how_many_schedules_violate() {
    assert_eq!(
        agreed("result      VIOLATION with 2 fault(s) (the smallest; 34 schedule(s) with 2 faults violate): fails credits"),
        "result      VIOLATION with 2 fault(s): fails credits"
    );
    assert_eq!(
        agreed("result      VIOLATION with 2 fault(s) (the smallest that ran; 8 schedule(s) with 2 faults violate): fails credits"),
        "result      VIOLATION with 2 fault(s): fails credits"
    );
    assert_eq!(
        agreed("result      no violation within 2 faults"),
        "result      no violation within 2 faults"
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 60,000 runs of the engine: seconds in release, many minutes in debug: run with --release (CI does)"
)]
fn every_check_case_gives_its_pinned_answer() {
    let bless = std::env::var_os("UDRMA_BLESS").is_some();
    let files = cases();
    assert!(files.len() >= 20, "{} cases", files.len());
    let mut wrong = Vec::new();
    let mut violations = 0;
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let (flags, pinned) = header(&text, &name);
        let (got, _) = search(path, &flags, &[]);
        if got.iter().any(|l| l.starts_with("result      VIOLATION")) {
            violations += 1;
        }
        if bless {
            let kept: Vec<&str> = text
                .lines()
                .filter(|l| !l.starts_with("# answer: "))
                .collect();
            let at = kept
                .iter()
                .position(|l| l.starts_with("# check: "))
                .unwrap();
            let mut lines: Vec<String> = kept.iter().map(|l| l.to_string()).collect();
            for (i, l) in got.iter().enumerate() {
                lines.insert(at + 1 + i, format!("# answer: {l}"));
            }
            std::fs::write(path, lines.join("\n") + "\n").unwrap();
        } else {
            wrong.extend(mismatch(&name, "the search now says", &pinned, &got));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    // The set must hold counterexamples to compare, not only passes.
    assert!(violations >= 4, "{violations} cases with a violation");
}

/// Every case searched with `extra` flags and plainly: where the
/// answer differs from the pinned one (as `expect` rewrites each pinned
/// line), each case's runs with and without, and the runs in all.
fn against_pinned(
    extra: &str,
    expect: impl Fn(String) -> String,
) -> (Vec<String>, Vec<(String, u64, u64)>) {
    let mut wrong = Vec::new();
    let mut runs = Vec::new();
    for path in &cases() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let (flags, pinned) = header(&text, &name);
        let (got, ran) = search(path, &flags, &[extra]);
        let (_, ran_plain) = search(path, &flags, &[]);
        let expected: Vec<String> = pinned.iter().map(|l| expect(agreed(l))).collect();
        if got.iter().map(|l| agreed(l)).ne(expected.iter().cloned()) {
            wrong.push(format!(
                "{name}: pinned\n  {}\n{extra} says\n  {}",
                expected.join("\n  "),
                got.join("\n  ")
            ));
        }
        runs.push((name, ran, ran_plain));
    }
    (wrong, runs)
}

/// `--merge-bound` cuts a run's children where its fault-free future
/// meets an earlier run's: not sound (two states with one future may
/// differ where only a later fault looks), so it is measured here
/// against the pinned answers. On every case it finds the same smallest
/// counterexample, the patent's hazard included, and says of a pass
/// that it is not a proof; and it runs fewer schedules.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 30,000 runs of the engine: run with --release (CI does)"
)]
fn the_merge_bound_gives_every_case_its_pinned_answer_with_fewer_runs() {
    let (wrong, runs) = against_pinned("--merge-bound", |l| {
        match l.strip_prefix("result      no violation within ") {
            Some(k) => format!(
                "result      no violation in the schedules that ran (--merge-bound: not a proof within {k})"
            ),
            None => l,
        }
    });
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    let bounded: u64 = runs.iter().map(|r| r.1).sum();
    let plain: u64 = runs.iter().map(|r| r.2).sum();
    assert!(
        bounded * 2 < plain,
        "--merge-bound ran {bounded} schedules, the plain search {plain}: it no longer cuts"
    );
}

/// `--merge-states` cuts a run's children where it reaches a state (the
/// whole world's fingerprint before an event) that an earlier run reached
/// with as many faults left: sound, so on every case it gives the plain
/// search's answer line for line — its verdict and its smallest
/// counterexample, fault by fault, the patent's hazard included — and it
/// runs no more schedules.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 50,000 runs of the engine: run with --release (CI does)"
)]
fn merged_states_give_every_case_its_pinned_answer() {
    let (mut wrong, runs) = against_pinned("--merge-states", |l| l);
    for (name, ran, ran_plain) in &runs {
        println!("{name}: {ran} runs merged, {ran_plain} plain");
        if ran > ran_plain {
            wrong.push(format!("{name}: merged ran {ran}, plain {ran_plain}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    let merged: u64 = runs.iter().map(|r| r.1).sum();
    let plain: u64 = runs.iter().map(|r| r.2).sum();
    assert!(
        merged < plain,
        "--merge-states ran {merged} schedules, the plain search {plain}: it no longer merges"
    );
}

/// `--merge-states` across machines: each case searched as two shards,
/// each merging only the states it saw, then `--merge`d, gives the plain
/// search's answer line for line (a state one shard cut its run at was
/// reached in that shard, or by the fault-free run whose children the
/// shards share out, so every cut schedule has its twin searched in some
/// shard, and the merge takes the least counterexample of all).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "about 50,000 runs of the engine: run with --release (CI does)"
)]
fn merged_states_split_into_shards_give_every_case_its_pinned_answer() {
    let mut wrong = Vec::new();
    for path in &cases() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        let (flags, pinned) = header(&text, &name);
        let dir = tmp(&format!("check-case-shards-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = path.to_str().unwrap();
        let out = dir.to_str().unwrap();
        let mut shards = Vec::new();
        for share in ["0/2", "1/2"] {
            let mut args = vec!["check", file];
            args.extend(flags.iter().map(String::as_str));
            args.extend(["--merge-states", "--shard", share, "--out", out]);
            let run = udrma(&args);
            assert!(
                matches!(run.status.code(), Some(0 | 1)),
                "{name}: udrma check {args:?} exited {:?}\n{}",
                run.status.code(),
                String::from_utf8_lossy(&run.stderr)
            );
        }
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.to_string_lossy().contains("-check-shard-") {
                shards.push(p.to_string_lossy().into_owned());
            }
        }
        assert_eq!(shards.len(), 2, "{name}: shard files {shards:?}");
        let mut args = vec!["check", file, "--out", out, "--merge"];
        args.extend(shards.iter().map(String::as_str));
        let merged = udrma(&args);
        let stdout = String::from_utf8_lossy(&merged.stdout);
        assert!(
            stdout.contains("merged      ") && stdout.contains("states recorded"),
            "{name}: the merge does not tally the shards' merged states\n{stdout}"
        );
        let got = answer(&stdout);
        wrong.extend(mismatch(&name, "two merged shards say", &pinned, &got));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}
