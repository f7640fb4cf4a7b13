//! Sharded sweeps as a user runs them: shards written apart and merged give
//! the very CSV, table and plot of one `udrma sweep`; a missing, doubled
//! or foreign part is named; a batch system's variables pick the shard;
//! `udrma slurm` writes a job directory and reports a failed task with its
//! log. (The same on a real Slurm cluster: scripts/slurm-test.sh, in CI.)

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{command, example, tmp, udrma};

const SETS: [&str; 6] = [
    "--set",
    "fault.loss.p=0,0.05",
    "--set",
    "nic.max_retries=4,8",
    "--seeds",
    "5",
];

fn fresh(name: &str) -> PathBuf {
    let d = tmp(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `udrma sweep` of the standard cases, with extra arguments.
fn sweep(extra: &[&str]) -> Output {
    let file = example("small-faults.toml");
    let mut args = vec!["sweep", file.as_str()];
    args.extend(SETS);
    args.extend(extra);
    udrma(&args)
}

/// The single-machine outputs: (csv, svg, table).
fn reference(dir: &Path) -> (String, String, String) {
    let (csv, svg) = (dir.join("local.csv"), dir.join("local.svg"));
    let out = sweep(&["--csv", s(&csv), "--plot", s(&svg)]);
    assert!(out.status.success(), "{}", stderr(&out));
    (
        std::fs::read_to_string(csv).unwrap(),
        std::fs::read_to_string(svg).unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn shards_merge_into_exactly_what_one_sweep_writes() {
    let dir = fresh("shards-merge");
    let (csv, svg, table) = reference(&dir);
    let parts = dir.join("parts");
    for i in 0..3 {
        let out = sweep(&["--shard", &format!("{i}/3"), "--parts", s(&parts)]);
        assert!(out.status.success(), "{}", stderr(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.starts_with(&format!("shard {i}/3 (--shard): ")),
            "{said}"
        );
    }
    // 20 runs in 3 shards: 7, 7 and 6.
    for (i, n) in [(0, 7), (1, 7), (2, 6)] {
        let part =
            std::fs::read_to_string(parts.join(format!("part-000{i}-of-0003.jsonl"))).unwrap();
        assert_eq!(part.lines().count(), 1 + n, "{part}");
        let rows = std::fs::read_to_string(parts.join(format!("part-000{i}-of-0003.csv"))).unwrap();
        assert!(rows
            .lines()
            .next()
            .unwrap()
            .ends_with(",shard,scenario_sha256,udrma_version"));
        assert_eq!(rows.lines().count(), 1 + n);
    }
    let (mcsv, msvg) = (dir.join("merged.csv"), dir.join("merged.svg"));
    let out = udrma(&["merge", s(&parts), "--csv", s(&mcsv), "--plot", s(&msvg)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&mcsv).unwrap(), csv);
    // `parts/*` as a shell expands it also names each part's CSV: those
    // are skipped, each with a note, and the merge is the same.
    let mut glob: Vec<PathBuf> = std::fs::read_dir(&parts)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    glob.sort();
    let mut args = vec!["merge".to_string()];
    args.extend(glob.iter().map(|p| s(p).to_string()));
    args.extend(["--csv".into(), s(&dir.join("glob.csv")).into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let globbed = udrma(&args);
    assert!(globbed.status.success(), "{}", stderr(&globbed));
    assert_eq!(
        stderr(&globbed).matches("note: skipped ").count(),
        3,
        "{}",
        stderr(&globbed)
    );
    assert_eq!(std::fs::read_to_string(dir.join("glob.csv")).unwrap(), csv);
    assert_eq!(std::fs::read_to_string(msvg).unwrap(), svg);
    assert!(stderr(&out).contains("merged 3 part files: 20 runs"));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), table);
}

#[test]
fn a_missing_doubled_or_foreign_part_is_named_and_nothing_is_written() {
    let dir = fresh("shards-bad");
    let parts = dir.join("parts");
    for i in 0..3 {
        assert!(sweep(&["--shard", &format!("{i}/3"), "--parts", s(&parts)])
            .status
            .success());
    }
    let part = |i: u32| parts.join(format!("part-000{i}-of-0003.jsonl"));
    let out_csv = dir.join("out.csv");

    // Shard 1 missing: its runs are named, and the command that reruns it.
    let out = udrma(&["merge", s(&part(0)), s(&part(2)), "--csv", s(&out_csv)]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("7 of 20 runs are missing: "), "{e}");
    assert!(e.contains("fault.loss.p=0 nic.max_retries=4 seed=2"), "{e}");
    assert!(e.contains("missing shards (of 3): 1"), "{e}");
    assert!(e.contains("--seeds 5 --shard 1/3 --parts"), "{e}");
    assert!(!out_csv.exists());

    // Shard 1 given twice (a copy under another name).
    let copy = dir.join("copy.jsonl");
    std::fs::copy(part(1), &copy).unwrap();
    let out = udrma(&["merge", s(&parts), s(&copy), "--csv", s(&out_csv)]);
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert!(e.contains("7 runs are in more than one part: "), "{e}");
    assert!(e.contains("copy.jsonl"), "{e}");
    assert!(!out_csv.exists());

    // A part of another sweep (other settings) or another scenario file.
    let other = dir.join("other");
    let file = example("small-faults.toml");
    let o = udrma(&[
        "sweep",
        &file,
        "--set",
        "fault.loss.p=0",
        "--shard",
        "0/1",
        "--parts",
        s(&other),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = udrma(&[
        "merge",
        s(&part(0)),
        s(&other.join("part-0000-of-0001.jsonl")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("parts of one sweep only"),
        "{}",
        stderr(&out)
    );
    let edited = dir.join("edited.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&edited, format!("{text}\n# edited\n")).unwrap();
    let mut args = vec!["sweep", s(&edited)];
    args.extend(SETS);
    args.extend(["--shard", "1/3", "--parts", s(&other)]);
    assert!(udrma(&args).status.success());
    let out = udrma(&[
        "merge",
        s(&part(0)),
        s(&other.join("part-0001-of-0003.jsonl")),
        s(&part(2)),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the scenario file with SHA-256"),
        "{}",
        stderr(&out)
    );

    // A part cut short, and a file that is no part at all.
    let cut = dir.join("cut.jsonl");
    let whole = std::fs::read_to_string(part(0)).unwrap();
    let lines: Vec<&str> = whole.lines().collect();
    std::fs::write(&cut, lines[..lines.len() - 1].join("\n")).unwrap();
    let out = udrma(&["merge", s(&cut)]);
    assert!(
        stderr(&out).contains("holds 6 runs but its header says 7"),
        "{}",
        stderr(&out)
    );
    let junk = dir.join("junk.jsonl");
    std::fs::write(&junk, "{\"hello\": 1}\n").unwrap();
    let out = udrma(&["merge", s(&junk)]);
    assert!(
        stderr(&out).contains("junk.jsonl:1: not a udrma part file"),
        "{}",
        stderr(&out)
    );
    let header = lines[0];
    for (edit, says) in [
        (
            ("\"udrma_part\":3", "\"udrma_part\":2"),
            "junk.jsonl:1: part format 2, but this udrma",
        ),
        (
            ("\"shard\":0", "\"shard\":3"),
            "junk.jsonl:1: shard 3 of 3 does not exist",
        ),
        (
            ("\"shards\":3", "\"shards\":0"),
            "junk.jsonl:1: shard 0 of 0 does not exist",
        ),
    ] {
        assert!(header.contains(edit.0), "{header}");
        std::fs::write(&junk, header.replace(edit.0, edit.1) + "\n").unwrap();
        let out = udrma(&["merge", s(&junk)]);
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
    std::fs::write(&junk, format!("{header}\n{{\"settings\": 3}}\n")).unwrap();
    let out = udrma(&["merge", s(&junk)]);
    assert!(
        stderr(&out).contains("junk.jsonl:2: bad run line"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_batch_system_names_the_shard() {
    let dir = fresh("shards-env");
    let (csv, _, _) = reference(&dir);
    let parts = dir.join("parts");
    let file = example("small-faults.toml");
    // A Slurm array 1-4 (counted from SLURM_ARRAY_TASK_MIN) and a
    // Kubernetes Indexed Job of 4 completions cut the same way.
    for (i, vars) in [
        (
            0,
            vec![("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_MIN", "1")],
        ),
        (
            1,
            vec![("SLURM_ARRAY_TASK_ID", "2"), ("SLURM_ARRAY_TASK_MIN", "1")],
        ),
        (2, vec![("JOB_COMPLETION_INDEX", "2")]),
        (3, vec![("JOB_COMPLETION_INDEX", "3")]),
    ] {
        let mut c = command();
        c.arg("sweep")
            .arg(&file)
            .args(SETS)
            .arg("--parts")
            .arg(&parts);
        for (k, v) in &vars {
            c.env(k, v);
        }
        if vars[0].0.starts_with("SLURM") {
            c.env("SLURM_ARRAY_TASK_COUNT", "4");
        } else {
            c.args(["--shards", "4"]);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.starts_with(&format!("shard {i}/4 ({}): ", vars[0].0)),
            "{said}"
        );
    }
    let merged = dir.join("merged.csv");
    assert!(udrma(&["merge", s(&parts), "--csv", s(&merged)])
        .status
        .success());
    assert_eq!(std::fs::read_to_string(merged).unwrap(), csv);
    // An index without its count, and --csv on a shard, are refused.
    let out = command()
        .args(["sweep", &file, "--set", "fault.loss.p=0"])
        .env("JOB_COMPLETION_INDEX", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--shards N"), "{}", stderr(&out));
    let out = sweep(&["--shard", "0/2", "--csv", s(&dir.join("x.csv"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("give those to `udrma merge"),
        "{}",
        stderr(&out)
    );
    let out = sweep(&["--shard", "2/2"]);
    assert!(
        stderr(&out).contains("not below the count 2"),
        "{}",
        stderr(&out)
    );
}

/// `udrma slurm collect JOB ARGS` where Slurm cannot be asked (no
/// `squeue` on the PATH, even on a machine that has one): tasks without a
/// part or an exit code count as waiting.
fn collect(job: &Path, args: &[&str]) -> Output {
    collect_with(job, args, None)
}

/// The same with a stand-in `squeue` whose body is `script` (a shell
/// script), the only program on the PATH.
fn collect_with(job: &Path, args: &[&str], script: Option<&str>) -> Output {
    let bin = tmp(&format!("slurm-bin-{}", script.map_or(0, |s| s.len())));
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::create_dir_all(&bin).unwrap();
    if let Some(body) = script {
        use std::os::unix::fs::PermissionsExt;
        let sq = bin.join("squeue");
        std::fs::write(&sq, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&sq, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    command()
        .args(["slurm", "collect", s(job)])
        .args(args)
        .env("PATH", &bin)
        .output()
        .unwrap()
}

#[test]
fn slurm_collect_names_a_failed_task_and_merges_once_it_is_rerun() {
    let dir = fresh("slurm-job");
    let (csv, _, _) = reference(&dir);
    let job = dir.join("job");
    let file = example("small-faults.toml");
    let mut args = vec!["slurm", "submit", file.as_str()];
    args.extend(SETS);
    args.extend([
        "--tasks",
        "3",
        "--dir",
        s(&job),
        "--partition",
        "debug",
        "--no-submit",
    ]);
    let out = udrma(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let script = std::fs::read_to_string(job.join("udrma-sweep.sbatch")).unwrap();
    for line in [
        "#SBATCH --array=0-2\n",
        "#SBATCH --partition=debug\n",
        "#SBATCH --cpus-per-task=1\n",
        "--shard \"$SLURM_ARRAY_TASK_ID/3\" --parts ",
        "sweep ",
        " --set fault.loss.p=0,0.05 --set nic.max_retries=4,8 --seeds 5",
    ] {
        assert!(script.contains(line), "{line:?} not in\n{script}");
    }
    assert_eq!(
        std::fs::read(job.join("scenario.toml")).unwrap(),
        std::fs::read(&file).unwrap()
    );
    // Pretend the array ran: task 0 finished, task 1 failed, task 2 did not
    // start (with no Slurm to ask, collect counts it as waiting).
    let scenario = job.join("scenario.toml");
    let shard = |i: u32| {
        let mut a = vec!["sweep", s(&scenario)];
        a.extend(SETS);
        let sh = format!("{i}/3");
        let parts = job.join("parts");
        a.extend(["--shard", &sh, "--parts", s(&parts)]);
        assert!(udrma(&a).status.success());
    };
    shard(0);
    // Waiting for task 1 (no Slurm to ask here: it counts as waiting) ends
    // at the timeout, with one line per change of the count.
    let began = std::time::Instant::now();
    let out = collect(&job, &["--poll", "0.05", "--timeout", "0.3"]);
    assert!(
        began.elapsed().as_secs_f64() >= 0.3,
        "gave up before the timeout"
    );
    assert_eq!(out.status.code(), Some(2));
    let e = stderr(&out);
    assert_eq!(
        e.matches("collect: 1/3 shards done, 2 queued or running, 0 failed\n")
            .count(),
        1,
        "{e}"
    );
    assert!(
        e.contains("gave up after 0 s with tasks 1, 2 still queued or running"),
        "{e}"
    );
    let out = collect(&job, &["--poll", "0"]);
    assert!(
        stderr(&out).contains("--poll 0: expected seconds above 0"),
        "{}",
        stderr(&out)
    );
    std::fs::write(job.join("status/task-1.exit"), "2\n").unwrap();
    std::fs::write(
        job.join("logs/task-1.log"),
        "starting\nerror: out of disk\n",
    )
    .unwrap();
    let out = collect(&job, &["--no-wait"]);
    assert_eq!(out.status.code(), Some(1));
    let e = stderr(&out);
    let log = job.join("logs/task-1.log");
    assert!(
        e.contains(&format!("task 1: exit 2; log {}", log.display())),
        "{e}"
    );
    assert!(e.contains("    error: out of disk"), "{e}");
    assert!(e.contains("--shard 1/3 --parts"), "{e}");
    assert!(!job.join("sweep.csv").exists());
    // Asking Slurm (a stand-in squeue, by the job's name): a task it lists
    // is waiting; one it does not list and that left nothing has failed;
    // a squeue that fails is as good as none.
    let name = |out: &Output| stderr(out);
    let listed = collect_with(
        &job,
        &["--no-wait"],
        Some("case \"$*\" in *\"-h -r --name udrma-small-faults-\"*\" -o %K\") echo 2;; esac"),
    );
    assert!(
        name(&listed).contains("collect: 1/3 shards done, 1 queued or running, 1 failed"),
        "{}",
        name(&listed)
    );
    let gone = collect_with(&job, &["--no-wait"], Some("exit 0"));
    assert!(
        name(&gone).contains("task 2: ended without a part file or an exit code"),
        "{}",
        name(&gone)
    );
    let broken = collect_with(&job, &["--no-wait"], Some("exit 1"));
    assert!(
        name(&broken).contains("1/3 shards done, 1 queued or running, 1 failed"),
        "{}",
        name(&broken)
    );
    // Rerun alone, as collect says; the last one too.
    shard(1);
    shard(2);
    let out = collect(&job, &["--no-wait"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(job.join("sweep.csv")).unwrap(), csv);
    assert!(job.join("sweep.svg").exists());
    // The same directory is not submitted twice; too many tasks are refused.
    let out = udrma(&args);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("already holds a submitted sweep"),
        "{}",
        stderr(&out)
    );
    let mut many = vec!["slurm", "submit", file.as_str()];
    many.extend(SETS);
    let other = dir.join("other");
    many.extend(["--tasks", "21", "--dir", s(&other), "--no-submit"]);
    let out = udrma(&many);
    assert!(
        stderr(&out).contains("--tasks 21 but the sweep has 20 runs"),
        "{}",
        stderr(&out)
    );
    let out = udrma(&["slurm", "collect", s(&dir)]);
    assert!(stderr(&out).contains("a job directory"), "{}", stderr(&out));
}

/// A collective by MPI's algorithms on four hosts, eight sizes.
const ALLREDUCE: &str = r#"
name = "sweep-allreduce"
seed = 1
profile = "roce-100g"
[topology]
kind = "star"
hosts = 4
[[workload]]
kind = "collective"
collective = "allreduce"
algorithm = "auto"
datatype = "f32"
sizes = "8B..1KiB"
count = 2
"#;

#[test]
fn an_mpi_collective_sweeps_to_one_row_per_size_in_csv_and_json() {
    let dir = fresh("sweep-osu");
    let file = dir.join("allreduce.toml");
    std::fs::write(&file, ALLREDUCE).unwrap();
    let (csv, json, svg) = (dir.join("a.csv"), dir.join("a.json"), dir.join("a.svg"));
    let sets = [
        "--set",
        "workload.0.algorithm=ring,recursive_doubling",
        "--seeds",
        "2",
    ];
    let mut args = vec!["sweep", s(&file)];
    args.extend(sets);
    args.extend(["--csv", s(&csv), "--json", s(&json), "--plot", s(&svg)]);
    let out = udrma(&args);
    assert!(out.status.success(), "{}", stderr(&out));

    // 2 algorithms × 2 seeds × 8 sizes, each row OSU's and NCCL-tests'.
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut rows = csv_rows(&text);
    let header = rows.remove(0);
    assert_eq!(rows.len(), 2 * 2 * 8, "{text}");
    let col = |name: &str| header.iter().position(|h| h == name).unwrap();
    let sizes: Vec<&str> = rows[..8]
        .iter()
        .map(|r| r[col("osu_size_bytes")].as_str())
        .collect();
    assert_eq!(sizes, ["8", "16", "32", "64", "128", "256", "512", "1024"]);
    for r in &rows {
        assert_eq!(r[col("algorithm")], r[col("workload.0.algorithm")]);
        let avg: f64 = r[col("osu_avg_us")].parse().unwrap();
        let (min, max): (f64, f64) = (
            r[col("osu_min_us")].parse().unwrap(),
            r[col("osu_max_us")].parse().unwrap(),
        );
        assert!(min <= avg && avg <= max && min > 0.0, "{r:?}");
        assert!(r[col("busbw_gbs")].parse::<f64>().unwrap() >= 0.0);
    }
    // Latency grows with size within a run: the rows are each size's own.
    let at = |i: usize| rows[i][col("osu_avg_us")].parse::<f64>().unwrap();
    assert!(at(7) > at(0), "{text}");

    // The JSON holds the same rows, keyed by the same columns in order
    // (in the text: a parsed map forgets the order).
    let raw = std::fs::read_to_string(&json).unwrap();
    let first = raw.lines().nth(1).unwrap();
    let at: Vec<usize> = header
        .iter()
        .map(|h| first.find(&format!("\"{h}\":")).unwrap())
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{first}");
    let doc: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let objects = doc.as_array().unwrap();
    assert_eq!(objects.len(), rows.len());
    for (o, r) in objects.iter().zip(&rows) {
        let o = o.as_object().unwrap();
        let keys: Vec<&String> = o.keys().collect();
        let mut sorted = header.iter().collect::<Vec<_>>();
        sorted.sort();
        assert_eq!(keys, sorted, "the same columns");
        for (h, cell) in header.iter().zip(r) {
            let v = &o[h];
            let as_text = match v {
                serde_json::Value::String(t) => t.clone(),
                serde_json::Value::Null => String::new(),
                other => other.to_string(),
            };
            // Floats print alike in both ("0" in CSV, "0.0" in JSON aside).
            let same = as_text == *cell
                || matches!((as_text.parse::<f64>(), cell.parse::<f64>()), (Ok(a), Ok(b)) if a == b);
            assert!(same, "{h}: JSON {v} against CSV {cell:?}");
        }
        assert!(o["trace_hash"].is_string() && o["osu_size_bytes"].is_u64());
    }
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("busbw GB/s") && !table.contains("goodput"),
        "{table}"
    );
    assert!(
        table.contains("recursive_doubling") && table.contains("1KiB"),
        "{table}"
    );
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("OSU average latency") && plot.contains("algorithm=ring"));

    // Shards merge into the very same outputs.
    let parts = dir.join("parts");
    for i in 0..2 {
        let mut a = vec!["sweep", s(&file)];
        a.extend(sets);
        let shard = format!("{i}/2");
        a.extend(["--shard", &shard, "--parts", s(&parts)]);
        let o = udrma(&a);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let (mcsv, mjson) = (dir.join("m.csv"), dir.join("m.json"));
    let out = udrma(&["merge", s(&parts), "--csv", s(&mcsv), "--json", s(&mjson)]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(mcsv).unwrap(), text);
    assert_eq!(
        std::fs::read_to_string(mjson).unwrap(),
        std::fs::read_to_string(&json).unwrap()
    );
}

/// A CSV's rows as fields (no quoting in these files but the header's).
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}
