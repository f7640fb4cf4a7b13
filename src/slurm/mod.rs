//! `udrma slurm`: a sweep as a Slurm job array. udrma brings no scheduler
//! of its own: `submit` writes an sbatch script whose array tasks each run
//! one shard (`udrma sweep --shard I/N`), keeps it in a job directory the
//! user can edit and resubmit, and hands it to `sbatch`; `collect` watches
//! the shards' part files arrive, names the tasks that failed with their
//! logs and the command that reruns each alone, and merges when all are
//! in.
//!
//! A job directory holds:
//! - `job.json`: what was submitted (the sweep, the task count, the job id);
//! - `scenario.toml`: a copy of the scenario, so that editing the original
//!   while the array runs cannot mix two scenarios;
//! - `udrma-sweep.sbatch`: the array script;
//! - `parts/`: one part file per finished shard; `logs/`: one log per task;
//!   `status/`: each task's exit code;
//! - `sweep.csv` and `sweep.svg` once collected.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::sweep::plan::{Layout, Shard};
use crate::sweep::{bad, shell_line};

mod collect;
mod submit;

/// `udrma slurm ...`.
#[derive(Debug, clap::Subcommand)]
pub enum SlurmCmd {
    /// Write an sbatch array script for a sweep into a job directory and
    /// submit it with `sbatch`.
    Submit(submit::SubmitArgs),
    /// Wait for a submitted array's shards (a live count), report failed
    /// tasks with their logs, and merge into DIR/sweep.csv and
    /// DIR/sweep.svg when every shard is in.
    Collect(collect::CollectArgs),
}

/// Runs a `udrma slurm` command.
pub fn main(cmd: SlurmCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        SlurmCmd::Submit(a) => submit::submit(a),
        SlurmCmd::Collect(a) => collect::collect(a),
    }
}

/// `job.json`: what `submit` wrote and submitted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobFile {
    /// The udrma that wrote it.
    pub udrma_version: String,
    /// The scenario file the user named.
    pub scenario: String,
    /// The sweep.
    pub layout: Layout,
    /// Array tasks (shards).
    pub tasks: u32,
    /// The job id `sbatch` answered (absent with `--no-submit`).
    pub job_id: Option<String>,
    /// The array's job name, unique to this directory: `collect` asks
    /// Slurm by name, so tasks resubmitted from the script (a new job id)
    /// are followed too.
    pub job_name: String,
    /// The udrma binary the tasks run.
    pub udrma: String,
}

/// The files of a job directory.
pub struct JobDir(pub PathBuf);

impl JobDir {
    /// `job.json`.
    pub fn job(&self) -> PathBuf {
        self.0.join("job.json")
    }
    /// The scenario copy.
    pub fn scenario(&self) -> PathBuf {
        self.0.join("scenario.toml")
    }
    /// The sbatch script.
    pub fn script(&self) -> PathBuf {
        self.0.join("udrma-sweep.sbatch")
    }
    /// The part files.
    pub fn parts(&self) -> PathBuf {
        self.0.join("parts")
    }
    /// Task logs.
    pub fn logs(&self) -> PathBuf {
        self.0.join("logs")
    }
    /// Task `i`'s log.
    pub fn log(&self, i: u32) -> PathBuf {
        self.logs().join(format!("task-{i}.log"))
    }
    /// Exit codes.
    pub fn status(&self) -> PathBuf {
        self.0.join("status")
    }
    /// Task `i`'s exit code file.
    pub fn exit_file(&self, i: u32) -> PathBuf {
        self.status().join(format!("task-{i}.exit"))
    }
    /// Shard `i`'s part file.
    pub fn part(&self, i: u32, tasks: u32) -> PathBuf {
        self.parts().join(format!(
            "{}.jsonl",
            crate::sweep::part::stem(Shard {
                index: i,
                count: tasks
            })
        ))
    }

    /// Reads `job.json`.
    pub fn read(&self) -> anyhow::Result<JobFile> {
        let path = self.job();
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read {}: is {} a job directory `udrma slurm submit` wrote?",
                path.display(),
                self.0.display()
            )
        })?;
        serde_json::from_str(&text).map_err(|e| bad(format!("{}: {e}", path.display())))
    }

    /// The command that runs shard `i` of the job here, without Slurm.
    pub fn rerun_line(&self, job: &JobFile, i: u32) -> String {
        let mut words = vec![
            job.udrma.clone(),
            "sweep".into(),
            path_str(&self.scenario()),
        ];
        words.extend(job.layout.args());
        words.push("--shard".into());
        words.push(
            Shard {
                index: i,
                count: job.tasks,
            }
            .to_string(),
        );
        words.push("--parts".into());
        words.push(path_str(&self.parts()));
        shell_line(&words)
    }
}

/// A path as text (lossy for names that are not UTF-8).
pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}
