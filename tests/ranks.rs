//! One run over MPI ranks, as a user launches it: `mpiexec -n N udrma
//! bench sim` gives the trace hash and counters of one process for 1 to
//! 4 ranks; ranks started with different runs are refused, once, naming
//! the rank; a rank killed in the middle stops the whole job within
//! seconds with a non-zero exit, and the launcher's report names a
//! process of the roster printed at the start. (Hydra names the first
//! process it saw end badly, which is not always the one killed: when
//! the survivors are cleaned up first it names one of them.)
//!
//! These need the `mpi` feature and an MPI launcher (`.ci/run` installs
//! MPICH and runs them with `--features mpi`); without them they show as
//! ignored. A build without the feature that finds itself one of several
//! launched processes refuses to run the whole thing in each: that is
//! checked in every build.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn udrma() -> &'static str {
    env!("CARGO_BIN_EXE_udrma")
}

/// The launcher: `mpiexec` (MPICH's Hydra), or the command and flags in
/// `UDRMA_MPIEXEC` (for Open MPI, `.ci/run` gives `mpirun.openmpi
/// --allow-run-as-root --oversubscribe`).
fn launcher() -> Command {
    let line = std::env::var("UDRMA_MPIEXEC").unwrap_or_else(|_| "mpiexec".into());
    let mut words = line.split_whitespace();
    let mut c = Command::new(words.next().unwrap_or("mpiexec"));
    c.args(words);
    c
}

/// Whether the launcher is Open MPI's (whose messages differ from Hydra's).
fn open_mpi() -> bool {
    std::env::var("UDRMA_MPIEXEC").is_ok_and(|l| l.contains("openmpi"))
}

/// The sprayed k=4 fat tree of `scenarios/tests/ranks/`.
const SPRAY_K4: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scenarios/tests/ranks/spray-k4.toml"
);

/// Waits for `job` to end: killed, and the test failed, if it still runs
/// `limit` after `since` (`what` says since what).
fn ended_within(
    job: &mut std::process::Child,
    since: Instant,
    limit: Duration,
    what: &str,
) -> std::process::ExitStatus {
    loop {
        if let Some(s) = job.try_wait().unwrap() {
            return s;
        }
        if since.elapsed() > limit {
            let _ = job.kill();
            panic!("the job still runs {limit:?} after {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The launcher with `args` (its own, then the processes').
fn mpiexec(args: &[&str]) -> Output {
    launcher()
        .args(args)
        .output()
        .expect("the MPI launcher runs")
}

/// The launcher started with `args` (its own, then the processes'),
/// its output piped; its stderr's first line (the roster udrma prints:
/// `udrma: N ranks: rank 0 pid P on HOST, ...`) read; and the rest of
/// its stderr to read on.
fn launched(
    args: &[&str],
) -> (
    std::process::Child,
    BufReader<std::process::ChildStderr>,
    String,
) {
    let mut job = launcher()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(job.stderr.take().unwrap());
    let mut roster = String::new();
    err.read_line(&mut roster).unwrap();
    (job, err, roster)
}

/// Rank `rank`'s PID in a roster line.
fn pid_of(roster: &str, rank: usize) -> String {
    let at = roster
        .find(&format!("rank {rank} pid "))
        .unwrap_or_else(|| panic!("no rank {rank} in {roster:?}"));
    roster[at..].split_whitespace().nth(3).unwrap().to_string()
}

/// A line of `udrma bench sim`'s output: the text after its label.
fn figure<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{out}"))
}

/// A launched process (the launcher's variables say it is one of two)
/// in a build without the `mpi` feature refuses, rather than run the
/// whole thing once in every process.
#[cfg(not(feature = "mpi"))]
#[test]
fn a_build_without_mpi_refuses_to_run_once_per_process() {
    let out = Command::new(udrma())
        .args(["bench", "sim", "--k", "4"])
        .env("PMI_SIZE", "2")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("one of 2 an MPI launcher started")
            && err.contains("--features mpi")
            && err.contains("docs/cluster.md"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// Tasks `srun` started without an MPI plugin (no PMI in their
/// environment) cannot meet: each would run the whole thing alone, so
/// each refuses, saying how to start them.
#[test]
fn srun_tasks_without_an_mpi_plugin_are_refused() {
    let out = Command::new(udrma())
        .args(["bench", "sim", "--k", "4"])
        .env("SLURM_STEP_NUM_TASKS", "2")
        .env_remove("PMI_SIZE")
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMIX_RANK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("srun started 2 tasks without an MPI plugin")
            && err.contains("srun --mpi=pmi2 -n 2"),
        "{err}"
    );
    // One task alone is a plain process.
    let one = Command::new(udrma())
        .args(["bench", "sim", "--k", "4"])
        .env("SLURM_STEP_NUM_TASKS", "1")
        .output()
        .unwrap();
    assert!(one.status.success());
}

/// The speed shape on 1 to 4 ranks (3 and 4 oversubscribe a 2-core
/// machine) gives one process's trace hash, events, hops and clock;
/// every rank runs every window, and with more than one rank packets
/// cross between them.
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs --features mpi and mpiexec (.ci/run runs it)"
)]
fn bench_sim_on_ranks_is_the_run_of_one_process() {
    for k in ["4", "8"] {
        let one = Command::new(udrma())
            .args(["bench", "sim", "--k", k])
            .output()
            .unwrap();
        assert!(one.status.success());
        let one = String::from_utf8_lossy(&one.stdout).into_owned();
        let counts = if k == "4" { 1..=4 } else { 2..=2 };
        for n in counts {
            let nn = n.to_string();
            let out = mpiexec(&["-n", &nn, udrma(), "bench", "sim", "--k", k]);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(out.status.success(), "k={k} on {n} ranks:\n{text}");
            for label in ["trace hash", "simulated"] {
                assert_eq!(
                    figure(&text, label),
                    figure(&one, label),
                    "k={k} on {n} ranks: {label}"
                );
            }
            assert!(
                figure(&text, "order").ends_with(&format!(
                    "split across {n} {}",
                    if n == 1 { "rank" } else { "ranks" }
                )),
                "{text}"
            );
            let rows: Vec<Vec<u64>> = text
                .lines()
                .skip_while(|l| !l.starts_with("rank  peak MiB"))
                .skip(1)
                .map(|l| {
                    l.split_whitespace()
                        .map(|w| w.parse::<f64>().unwrap() as u64)
                        .collect()
                })
                .collect();
            assert_eq!(rows.len(), n, "one row per rank:\n{text}");
            let windows = rows[0][2];
            assert!(
                rows.iter().all(|r| r[2] == windows && windows > 0),
                "{text}"
            );
            let packets: u64 = rows.iter().map(|r| r[6]).sum();
            assert_eq!(packets > 0, n > 1, "packets between ranks:\n{text}");
            let err = String::from_utf8_lossy(&out.stderr);
            let noun = if n == 1 { "rank" } else { "ranks" };
            assert!(
                err.starts_with(&format!("udrma: {n} {noun}: rank 0 pid ")),
                "the roster: {err}"
            );
        }
    }
}

/// The scenarios of `scenarios/tests/ranks/` (a sprayed k=4 and k=8 fat
/// tree, an incast whose queues drop and mark, a trimming fabric, a
/// k-ary n-tree of costed NICs, targeted faults): `mpiexec -n N udrma run
/// FILE --json` prints one process's JSON but for the wall-clock fields
/// and the ranks' own figures, for N = 1 to 4 (k=8 on 2 and 4); the
/// table says how many ranks ran.
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs --features mpi and mpiexec (.ci/run runs it)"
)]
fn udrma_run_on_ranks_prints_the_report_of_one_process() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/tests/ranks");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().display().to_string())
        .filter(|p| p.ends_with(".toml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 6);
    let json = |out: &Output| -> serde_json::Value {
        let mut v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let o = v.as_object_mut().unwrap();
        o.remove("wall_s");
        o.remove("packet_hops_per_s");
        v
    };
    for file in &files {
        let one = Command::new(udrma())
            .args(["run", file, "--json"])
            .output()
            .unwrap();
        assert!(one.status.success(), "{file}");
        let want = json(&one);
        let counts: &[usize] = if file.ends_with("spray-k8.toml") {
            &[2, 4]
        } else {
            &[1, 2, 3, 4]
        };
        for &n in counts {
            let nn = n.to_string();
            let out = mpiexec(&["-n", &nn, udrma(), "run", file, "--json"]);
            assert!(out.status.success(), "{file} on {n} ranks");
            let mut got = json(&out);
            let ranks = got.as_object_mut().unwrap().remove("ranks").unwrap();
            assert_eq!(ranks.as_array().unwrap().len(), n, "{file}");
            assert_eq!(got, want, "{file} on {n} ranks");
        }
    }
    let out = mpiexec(&["-n", "2", udrma(), "run", &files[0]]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("ranks       2 ("), "{table}");
    assert!(table.contains("  rank 1    "), "{table}");
}

/// What ranks cannot split is refused before they run, once, naming the
/// key or flag: a capture, and the udp backend.
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs --features mpi and mpiexec (.ci/run runs it)"
)]
fn what_ranks_cannot_split_is_refused_once() {
    let file = SPRAY_K4;
    for (flags, says) in [
        (
            &["--pcap", "/tmp/udrma-ranks-refused.pcap"][..],
            "2 MPI ranks: a capture cannot be split across ranks",
        ),
        (&["--backend", "udp"][..], "--backend udp runs real sockets"),
        (&["--threads", "2"][..], "drop --threads"),
    ] {
        let mut args = vec!["-n", "2", udrma(), "run", file];
        args.extend(flags);
        let out = mpiexec(&args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let said: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(said.len(), 1, "{flags:?}: said once: {err}");
        assert!(said[0].contains(says), "{flags:?}: {err}");
        assert!(out.stdout.is_empty(), "{flags:?}");
    }
}

/// Ranks started with different runs (here another seed) are refused
/// before they run: rank 0 says so once, naming the rank and both runs.
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs --features mpi and mpiexec (.ci/run runs it)"
)]
fn ranks_started_differently_are_refused_once_by_rank() {
    let sim = |seed: &'static str| [udrma(), "bench", "sim", "--k", "4", "--seed", seed];
    let mut args = vec!["-n", "1"];
    args.extend(sim("1"));
    args.extend([":", "-n", "1"]);
    args.extend(sim("2"));
    let out = mpiexec(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(said.len(), 1, "said once: {err}");
    assert!(
        said[0].contains("rank 1 was not started as rank 0 was")
            && said[0].contains("k=4 seed=2")
            && said[0].contains("k=4 seed=1"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    // Another command altogether: named, not read as the first's words.
    let file = SPRAY_K4;
    let mut args = vec!["-n", "1", udrma(), "run", file, ":", "-n", "1"];
    args.extend(sim("1"));
    let out = mpiexec(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        said,
        ["error: rank 1 runs `udrma bench sim`, rank 0 runs `udrma run`: start every rank with the same command"],
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// A process the launcher started that never joins MPI (a build without
/// the `mpi` feature refuses and exits; here `true`) does not leave the
/// ranks waiting for it for good: they give up after
/// `UDRMA_MPI_INIT_SECONDS`, saying why (Open MPI's launcher may stop
/// the job first, in its own words).
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs --features mpi and mpiexec (.ci/run runs it)"
)]
fn a_process_that_never_joins_stops_the_ranks() {
    let file = SPRAY_K4;
    let mut job = launcher()
        .args(["-n", "1", udrma(), "run", file, ":", "-n", "1", "true"])
        .env("UDRMA_MPI_INIT_SECONDS", "2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the MPI launcher runs");
    let status = ended_within(
        &mut job,
        Instant::now(),
        Duration::from_secs(60),
        "it started",
    );
    assert!(!status.success(), "{status:?}");
    let mut err = String::new();
    std::io::Read::read_to_string(job.stderr.as_mut().unwrap(), &mut err).unwrap();
    if !open_mpi() {
        assert!(
            err.contains("error: MPI_Init has not returned in 2 s: some process the launcher started has not joined"),
            "{err}"
        );
    }
    // A wait of no time would blame a process that is on its way: refused,
    // said once.
    let out = launcher()
        .args(["-n", "2", udrma(), "run", file])
        .env("UDRMA_MPI_INIT_SECONDS", "0")
        .output()
        .expect("the MPI launcher runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let said: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(
        said,
        ["error: UDRMA_MPI_INIT_SECONDS=0: not a whole number of seconds from 1 up"],
        "{err}"
    );
}

/// A rank killed while the run goes on stops every rank within seconds,
/// with a non-zero exit; the launcher names a process that ended badly
/// by its PID, and the roster says which rank that was.
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs --features mpi and mpiexec (.ci/run runs it)"
)]
fn a_killed_rank_stops_the_job_and_is_named() {
    let (mut job, mut err, roster) = launched(&["-n", "3", udrma(), "bench", "sim", "--k", "16"]);
    let pid_of = |rank: usize| pid_of(&roster, rank);
    let victim = pid_of(1);
    let killed = Instant::now();
    assert!(Command::new("kill")
        .args(["-9", &victim])
        .status()
        .unwrap()
        .success());
    let status = ended_within(
        &mut job,
        killed,
        Duration::from_secs(30),
        "rank 1 was killed",
    );
    let took = killed.elapsed();
    assert!(!status.success(), "{status:?}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(job.stdout.as_mut().unwrap(), &mut out).unwrap();
    let said = format!("{out}{rest}");
    // Hydra names the process by its PID; Open MPI names the rank.
    let named = if open_mpi() {
        (0..3).find(|r| said.contains(&format!("rank {r} ")))
    } else {
        (0..3).find(|r| said.contains(&format!("PID {} ", pid_of(*r))))
    };
    let bad = said.contains("BAD TERMINATION") || said.contains("exited on signal");
    assert!(
        named.is_some() && bad,
        "the launcher names a process of the roster {roster:?} (rank 1, {victim}, was killed):\n{said}"
    );
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
}

/// Ctrl-C that reaches one rank only (here rank 1, by its PID from the
/// roster) stops every rank at the same window: rank 0 prints the
/// summary of the run so far under the line saying so, and the job
/// exits 130. (A Ctrl-C at MPICH's `mpiexec` reaches every rank: Hydra
/// passes it on, as tried by hand.)
#[test]
#[cfg_attr(
    not(feature = "mpi"),
    ignore = "needs --features mpi and mpiexec (.ci/run runs it)"
)]
fn ctrl_c_on_one_rank_stops_every_rank_with_the_run_so_far() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/examples/all-to-all-k8.toml"
    );
    // (The rest of stderr stays open until the job ends.)
    let (job, _err, roster) = launched(&["-n", "2", udrma(), "run", file]);
    let pid = pid_of(&roster, 1);
    // all-to-all-k8 runs for over a second even optimised on two ranks
    // (tests run the unoptimised build, far slower); the ranks hear
    // Ctrl-C from before the roster, so any moment in between will do.
    std::thread::sleep(Duration::from_millis(800));
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let out = job.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if open_mpi() {
        // Open MPI's launcher reports a rank's non-zero exit as its own
        // failure, in its own words.
        assert!(!out.status.success(), "{stdout}");
    } else {
        assert_eq!(out.status.code(), Some(130), "{stdout}");
    }
    assert!(stdout.starts_with("interrupted (Ctrl-C) at "), "{stdout}");
    assert!(stdout.contains("ranks       2 ("), "{stdout}");
    assert!(
        stdout.contains("note: interrupted before the time limit (1.000000s)"),
        "{stdout}"
    );
}
