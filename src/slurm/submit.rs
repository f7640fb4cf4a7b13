//! `udrma slurm submit`: the job directory, the sbatch array script, and
//! `sbatch`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::Context;

use super::{path_str, JobDir, JobFile};
use crate::sweep::bad;
use crate::sweep::plan::Plan;
use crate::sweep::shell_line;

/// `udrma slurm submit` arguments.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The scenario (TOML).
    file: PathBuf,
    /// KEY=V1,V2,... as for `udrma sweep`; repeat for a cross product.
    #[arg(long = "set", required = true)]
    sets: Vec<String>,
    /// Seeds per setting.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    seeds: u32,
    /// Array tasks: the number of shards (at most the number of runs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    tasks: u32,
    /// The job directory (default: slurm-NAME, after the scenario's name).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Slurm partition (`#SBATCH --partition`).
    #[arg(long)]
    partition: Option<String>,
    /// Time limit per task, in any form sbatch takes (`30:00`, `1-0`).
    #[arg(long)]
    time: Option<String>,
    /// Account to charge.
    #[arg(long)]
    account: Option<String>,
    /// CPUs per task; the task's sweep runs that many runs at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    cpus_per_task: u32,
    /// Memory per task (`#SBATCH --mem`, `4G`).
    #[arg(long)]
    mem: Option<String>,
    /// Any other sbatch option, written as an `#SBATCH` line (repeat).
    #[arg(long = "sbatch-arg", value_name = "OPTION", allow_hyphen_values = true)]
    sbatch_args: Vec<String>,
    /// The udrma binary the tasks run (default: this one; it must be
    /// reachable from the compute nodes).
    #[arg(long)]
    udrma: Option<PathBuf>,
    /// Write the job directory but do not call sbatch.
    #[arg(long)]
    no_submit: bool,
}

/// One `#SBATCH` value: no newlines (they would end the directive).
fn directive(name: &str, v: &str) -> anyhow::Result<String> {
    if v.contains(['\n', '\r']) || v.trim().is_empty() {
        return Err(bad(format!("--{name} {v:?}: expected one non-empty line")));
    }
    Ok(v.to_string())
}

/// The sbatch script of `job` in `dir`.
fn script(dir: &JobDir, job: &JobFile, plan: &Plan, a: &SubmitArgs) -> anyhow::Result<String> {
    let mut s = String::new();
    let abs = |p: PathBuf| path_str(&p);
    s.push_str("#!/bin/bash\n");
    s.push_str(&format!(
        "# Written by `udrma slurm submit` (udrma {}): {} runs of {} ({} cases x {} seeds)\n\
         # in {} array tasks, one shard each. Edit and resubmit with\n\
         #   sbatch {}\n\
         # or rerun task I alone with `sbatch --array=I {}`; `udrma slurm collect {}`\n\
         # waits for the shards and merges them.\n",
        job.udrma_version,
        plan.layout.job_count(),
        job.scenario,
        plan.layout.case_count(),
        plan.layout.seeds,
        job.tasks,
        shell_line(&[abs(dir.script())]),
        shell_line(&[abs(dir.script())]),
        shell_line(&[path_str(&dir.0)]),
    ));
    s.push_str(&format!("#SBATCH --job-name={}\n", job.job_name));
    s.push_str(&format!("#SBATCH --array=0-{}\n", job.tasks - 1));
    s.push_str(&format!(
        "#SBATCH --output={}\n",
        path_str(&dir.logs().join("task-%a.log"))
    ));
    s.push_str(&format!("#SBATCH --cpus-per-task={}\n", a.cpus_per_task));
    for (flag, v) in [
        ("partition", &a.partition),
        ("time", &a.time),
        ("account", &a.account),
        ("mem", &a.mem),
    ] {
        if let Some(v) = v {
            s.push_str(&format!("#SBATCH --{flag}={}\n", directive(flag, v)?));
        }
    }
    for extra in &a.sbatch_args {
        s.push_str(&format!("#SBATCH {}\n", directive("sbatch-arg", extra)?));
    }
    let mut words = vec![job.udrma.clone(), "sweep".into(), abs(dir.scenario())];
    words.extend(plan.layout.args());
    let sweep = shell_line(&words);
    s.push_str(&format!(
        "\nset -u\n\
         export RAYON_NUM_THREADS=\"${{SLURM_CPUS_PER_TASK:-1}}\"\n\
         # The shard is explicit (not taken from SLURM_ARRAY_TASK_COUNT) so that\n\
         # `sbatch --array=I` reruns task I as the same shard.\n\
         {sweep} \\\n    --shard \"$SLURM_ARRAY_TASK_ID/{tasks}\" --parts {parts}\n\
         rc=$?\n\
         mkdir -p {status}\n\
         echo \"$rc\" > {status}/task-\"$SLURM_ARRAY_TASK_ID\".exit\n\
         # 1 means a run failed a check: the shard is complete and its part is\n\
         # written (the failure is in the results); anything else is a failed task.\n\
         if [ \"$rc\" -le 1 ]; then exit 0; fi\n\
         exit \"$rc\"\n",
        tasks = job.tasks,
        parts = shell_line(&[abs(dir.parts())]),
        status = shell_line(&[abs(dir.status())]),
    ));
    Ok(s)
}

/// `udrma-NAME-XXXXXXXX`: the scenario's name (what `squeue` shows) and 8
/// hex digits of the job directory's path, so two directories never share
/// a name.
fn job_name(name: &str, dir: &Path) -> String {
    let name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let tag = crate::sweep::plan::sha256_hex(path_str(dir).as_bytes());
    format!("udrma-{name}-{}", &tag[..8])
}

/// `udrma slurm submit`.
pub fn submit(a: SubmitArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan::new(&a.file, &a.sets, a.seeds)?;
    let runs = plan.layout.job_count();
    if a.tasks as usize > runs {
        return Err(bad(format!(
            "--tasks {} but the sweep has {runs} runs: at most one task per run",
            a.tasks
        )));
    }
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("slurm-{}", plan.name)));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = JobDir(
        dir.canonicalize()
            .with_context(|| format!("cannot resolve {}", dir.display()))?,
    );
    if dir.job().exists() {
        return Err(bad(format!(
            "{} already holds a submitted sweep ({}): choose another --dir or remove it",
            dir.0.display(),
            dir.job().display()
        )));
    }
    let udrma = match &a.udrma {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("cannot find this udrma binary")?,
    };
    let udrma = udrma
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", udrma.display()))?;
    for d in [dir.parts(), dir.logs(), dir.status()] {
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    std::fs::copy(&a.file, dir.scenario())
        .with_context(|| format!("cannot copy {} into {}", a.file.display(), dir.0.display()))?;
    let mut job = JobFile {
        udrma_version: env!("CARGO_PKG_VERSION").to_string(),
        scenario: path_str(&a.file),
        layout: plan.layout.clone(),
        tasks: a.tasks,
        job_id: None,
        job_name: job_name(&plan.name, &dir.0),
        udrma: path_str(&udrma),
    };
    let text = script(&dir, &job, &plan, &a)?;
    std::fs::write(dir.script(), text)
        .with_context(|| format!("cannot write {}", dir.script().display()))?;
    let save = |job: &JobFile| -> anyhow::Result<()> {
        std::fs::write(dir.job(), serde_json::to_string_pretty(job)? + "\n")
            .with_context(|| format!("cannot write {}", dir.job().display()))
    };
    if a.no_submit {
        save(&job)?;
        println!(
            "wrote {} ({runs} runs in {} tasks); submit it with `sbatch {}`, then \
             `udrma slurm collect {}`",
            dir.script().display(),
            a.tasks,
            dir.script().display(),
            dir.0.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let id = sbatch(&dir.script())?;
    job.job_id = Some(id.clone());
    save(&job)?;
    println!(
        "submitted job {id}: {runs} runs of {} in {} array tasks; script {}\n\
         collect with: udrma slurm collect {}",
        job.scenario,
        a.tasks,
        dir.script().display(),
        dir.0.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Submits `script`; returns the job id.
fn sbatch(script: &Path) -> anyhow::Result<String> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .arg(script)
        .output()
        .map_err(|e| {
            bad(format!(
                "cannot run sbatch ({e}): is this a Slurm login node? The script is written: \
                 submit {} yourself, then run `udrma slurm collect`",
                script.display()
            ))
        })?;
    if !out.status.success() {
        return Err(bad(format!(
            "sbatch refused {} ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad(format!(
            "sbatch answered {:?}, not a job id",
            text.trim()
        )));
    }
    Ok(id)
}
