//! `udrma slurm collect`: watch an array's shards arrive, name the tasks
//! that failed, merge when every shard is in.
//!
//! A task is *done* when its part file exists (a shard writes it whole,
//! by renaming, before it exits). It is *waiting* while Slurm lists it
//! (by the array's job name, so a task resubmitted with `sbatch --array=I`
//! counts). It has *failed* when it is gone without a part: its exit-code
//! file says how, or there is none (killed at its time limit, its node
//! lost). Where squeue cannot be asked, a task without a part or an exit
//! code is taken to be waiting.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use super::{path_str, JobDir, JobFile};
use crate::sweep::bad;

/// `udrma slurm collect` arguments.
#[derive(Debug, clap::Args)]
pub struct CollectArgs {
    /// The job directory `udrma slurm submit` wrote.
    dir: PathBuf,
    /// Where to write the merged CSV (default: DIR/sweep.csv).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Where to write the plot (default: DIR/sweep.svg).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also write the CSV's rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Report the shards' state once instead of waiting for them.
    #[arg(long)]
    no_wait: bool,
    /// Seconds between looks while waiting.
    #[arg(long, default_value_t = 2.0)]
    poll: f64,
    /// Give up waiting after this many seconds (default: wait as long as
    /// tasks are queued or running).
    #[arg(long)]
    timeout: Option<f64>,
}

/// Where each task stands.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Tasks with a part file.
    pub done: BTreeSet<u32>,
    /// Tasks that ended without one: (task, why).
    pub failed: Vec<(u32, String)>,
    /// Tasks still queued or running.
    pub waiting: BTreeSet<u32>,
}

/// The array tasks Slurm still lists (queued or running) under the job's
/// name, which resubmitted tasks share, or `None` when that cannot be
/// asked (no squeue here, or squeue failed).
fn queued(job: &JobFile) -> Option<BTreeSet<u32>> {
    let mut child = Command::new("squeue")
        .args(["-h", "-r", "--name", &job.job_name, "-o", "%K"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // A squeue that cannot reach its controller retries for a minute or
    // more: past SQUEUE_WAIT, take it as unanswered.
    let began = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if began.elapsed() > SQUEUE_WAIT => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(task_ids(&out))
}

/// How long `squeue` may take to answer.
const SQUEUE_WAIT: Duration = Duration::from_secs(10);

/// The array task ids of `squeue -r -o %K` output, one per line.
fn task_ids(squeue: &str) -> BTreeSet<u32> {
    squeue
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Looks at every task once.
pub fn census(dir: &JobDir, job: &JobFile, queued: Option<&BTreeSet<u32>>) -> Census {
    let mut c = Census::default();
    for i in 0..job.tasks {
        if dir.part(i, job.tasks).exists() {
            c.done.insert(i);
            continue;
        }
        // A task Slurm lists is waiting even if an earlier run of it left
        // an exit code (it was resubmitted).
        if queued.is_some_and(|q| q.contains(&i)) {
            c.waiting.insert(i);
            continue;
        }
        match (std::fs::read_to_string(dir.exit_file(i)).ok(), queued) {
            (Some(code), _) => c.failed.push((i, format!("exit {}", code.trim()))),
            (None, Some(_)) => c
                .failed
                .push((i, "ended without a part file or an exit code".into())),
            (None, None) => {
                c.waiting.insert(i);
            }
        }
    }
    c
}

/// The last non-empty line of a log, if any.
fn last_line(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// `udrma slurm collect`.
pub fn collect(a: CollectArgs) -> anyhow::Result<ExitCode> {
    let dir = JobDir(a.dir.clone());
    let job = dir.read()?;
    if !(a.poll > 0.0 && a.poll.is_finite()) {
        return Err(bad(format!("--poll {}: expected seconds above 0", a.poll)));
    }
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let bar = tty.then(|| {
        let b = ProgressBar::new(u64::from(job.tasks));
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} shards {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    });
    let mut last = None;
    let c = loop {
        let q = queued(&job);
        let c = census(&dir, &job, q.as_ref());
        let line = format!(
            "{}/{} shards done, {} queued or running, {} failed",
            c.done.len(),
            job.tasks,
            c.waiting.len(),
            c.failed.len()
        );
        match &bar {
            Some(b) => {
                b.set_position(c.done.len() as u64);
                b.set_message(format!(
                    "({} waiting, {} failed)",
                    c.waiting.len(),
                    c.failed.len()
                ));
            }
            None if last.as_ref() != Some(&line) => eprintln!("collect: {line}"),
            None => {}
        }
        last = Some(line);
        if c.waiting.is_empty() || a.no_wait {
            break c;
        }
        if a.timeout
            .is_some_and(|t| started.elapsed().as_secs_f64() > t)
        {
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
            return Err(bad(format!(
                "gave up after {:.0} s with tasks {} still queued or running",
                started.elapsed().as_secs_f64(),
                list(&c.waiting)
            )));
        }
        std::thread::sleep(Duration::from_secs_f64(a.poll));
    };
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    if !c.failed.is_empty() {
        let mut msg = format!("{} of {} tasks failed:", c.failed.len(), job.tasks);
        for (i, why) in &c.failed {
            let log = dir.log(*i);
            msg.push_str(&format!("\n  task {i}: {why}; log {}", path_str(&log)));
            if let Some(l) = last_line(&log) {
                msg.push_str(&format!("\n    {l}"));
            }
        }
        let first = c.failed[0].0;
        msg.push_str(&format!(
            "\nrerun a task alone with `sbatch --array=I {}`, or here: {}\n\
             then `udrma slurm collect {}` again",
            path_str(&dir.script()),
            dir.rerun_line(&job, first),
            path_str(&dir.0)
        ));
        eprintln!("{msg}");
        return Ok(ExitCode::from(1));
    }
    if !c.waiting.is_empty() {
        println!(
            "{}/{} shards done; tasks {} still queued or running",
            c.done.len(),
            job.tasks,
            list(&c.waiting)
        );
        return Ok(ExitCode::from(1));
    }
    let csv = a.csv.unwrap_or_else(|| dir.0.join("sweep.csv"));
    let plot = a.plot.unwrap_or_else(|| dir.0.join("sweep.svg"));
    let out = crate::sweep::output::Outputs {
        csv: Some(&csv),
        json: a.json.as_deref(),
        plot: Some(&plot),
    };
    crate::sweep::merge::merge(&[dir.parts()], out)
}

/// `1, 2, 5`.
fn list(s: &BTreeSet<u32>) -> String {
    s.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::plan::Layout;

    #[test]
    fn each_task_is_done_waiting_or_failed() {
        let root = std::env::temp_dir().join(format!("udrma-census-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = JobDir(root.clone());
        for d in [dir.parts(), dir.status()] {
            std::fs::create_dir_all(d).unwrap();
        }
        let job = JobFile {
            udrma_version: "0".into(),
            scenario: "s.toml".into(),
            layout: Layout::new(&["a=1".into()], 5, 1).unwrap(),
            tasks: 5,
            job_id: Some("7".into()),
            job_name: "udrma-s-00000000".into(),
            udrma: "udrma".into(),
        };
        // 0: a part (and an old failure): done. 1: failed before, queued
        // again: waiting. 2: failed. 3: nothing, and Slurm lists it:
        // waiting. 4: nothing, and Slurm does not list it: failed.
        std::fs::write(dir.part(0, 5), "").unwrap();
        for i in [0, 1, 2] {
            std::fs::write(dir.exit_file(i), "2\n").unwrap();
        }
        let q = task_ids("1\n 3\nnot-a-task\n");
        assert_eq!(q, BTreeSet::from([1, 3]));
        let c = census(&dir, &job, Some(&q));
        assert_eq!(c.done, BTreeSet::from([0]));
        assert_eq!(c.waiting, BTreeSet::from([1, 3]));
        assert_eq!(
            c.failed,
            vec![
                (2, "exit 2".to_string()),
                (4, "ended without a part file or an exit code".to_string())
            ]
        );
        // Where Slurm cannot be asked, only an exit code says "failed".
        let c = census(&dir, &job, None);
        assert_eq!(c.waiting, BTreeSet::from([3, 4]));
        assert_eq!(c.failed.iter().map(|f| f.0).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(list(&c.waiting), "3, 4");
        let _ = std::fs::remove_dir_all(root);
    }
}
