//! `udrma run` and Ctrl-C: the run stops at the next slice of events (of
//! windows, on threads) and
//! the summary of the run so far is printed under a line saying where it
//! was interrupted, with exit status 130; on a pipe nothing is drawn on
//! stderr. (The progress line itself is drawn only on a terminal; its
//! wording is tested in `src/run_cmd.rs`.)

use std::process::{Output, Stdio};
use std::time::Duration;

mod common;
use common::{command, example, udrma};

/// `udrma run ARGS`, interrupted with SIGINT once it has run for a
/// while. all-to-all-k8 runs for about three seconds optimised and far
/// longer in the unoptimised build tests run, so the interrupt comes
/// mid-run on any machine.
fn interrupted(args: &[&str]) -> Output {
    let child = command()
        .arg("run")
        .arg(example("all-to-all-k8.toml"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) reads no memory of ours; the pid is our own child's.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    child.wait_with_output().unwrap()
}

#[test]
fn ctrl_c_prints_the_summary_of_the_run_so_far_and_exits_130() {
    let out = interrupted(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    let first = stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("interrupted (Ctrl-C) at ")
            && first
                .ends_with(" of the time limit 1.000000s: the summary below is of the run so far"),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nscenario    all-to-all-k8  (seed "),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "note: interrupted before the time limit (1.000000s): the last event ran at "
        ),
        "{stdout}"
    );
    assert!(stdout.contains("liveness:FAIL"), "{stdout}");
    // A pipe: no progress drawn, nothing else said.
    assert_eq!(stderr, "", "{stderr}");
}

/// Split across threads, the run stops between two windows, with the
/// same words.
#[test]
fn ctrl_c_stops_a_run_on_threads_between_windows() {
    let out = interrupted(&["--threads", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    assert!(stdout.starts_with("interrupted (Ctrl-C) at "), "{stdout}");
    assert!(
        stdout.contains("note: interrupted before the time limit (1.000000s)"),
        "{stdout}"
    );
}

/// With `--json` stdout holds only the report (of the run so far); the
/// line saying it was interrupted goes to stderr.
#[test]
fn ctrl_c_with_json_keeps_stdout_one_json_object() {
    let out = interrupted(&["--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["checks"]["liveness"], false);
    assert_eq!(v["interrupted"], true);
    assert!(stderr.starts_with("interrupted (Ctrl-C) at "), "{stderr}");
}

/// A run that is not interrupted says nothing on stderr when it is not
/// a terminal, as before.
#[test]
fn a_run_on_a_pipe_says_nothing_on_stderr() {
    let out = udrma(&["run", &example("lossy-write.toml")]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
