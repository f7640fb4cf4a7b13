//! `udrma sweep`: many runs of one scenario file, on this machine or cut
//! into shards for a batch system (`--shard I/N`, Slurm array tasks,
//! Kubernetes Indexed Jobs), and `udrma merge`, which puts the shards'
//! part files back together.
//!
//! Children not named above:
//! - `osu`: A sweep of a collective run by MPI's algorithms: the OSU table of every size and a plot of its average latency
//! - `output`: A sweep's outputs from its records: the CSV and JSON (one row per run, or per size of an MPI collective), the table on stdout and the plot
//! - `plan`: What a sweep runs
//! - `record`: What a sweep keeps of each run: the figures its CSV, table and plot read, and nothing else

use std::path::Path;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use toml::Table;
use udrma_scenarios::file::edit::{render, set, value};
use udrma_scenarios::{Report, RunOptions, Scenario};

use crate::BadInput;

/// `println!` that ignores a closed stdout: `udrma sweep … | head` must
/// still write its CSV, JSON and plot, which follow the table.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

pub mod merge;
pub mod osu;
pub mod output;
pub mod part;
pub mod plan;
pub mod record;

use plan::{Job, Plan, Shard};
use record::RunRecord;

pub(crate) fn bad(msg: String) -> anyhow::Error {
    BadInput(msg).into()
}

/// An error in the case `assign` of a sweep, located at the key's line in
/// the original file (not in the edited document, which the user never
/// sees). When several settings apply, the first that fails on its own is
/// blamed; if only their combination fails, all are named.
pub(crate) fn case_error(
    file: &Path,
    text: &str,
    doc: &Table,
    assign: &[(String, String)],
) -> anyhow::Error {
    let name = file.display().to_string();
    let try_parse = |pairs: &[(String, String)]| -> Result<(), String> {
        let mut d = doc.clone();
        for (k, v) in pairs {
            set(&mut d, k, value(v))?;
        }
        Scenario::parse(&name, &render(&d))
            .map(|_| ())
            .map_err(|e| e.message)
    };
    let blamed: Vec<&(String, String)> = assign
        .iter()
        .filter(|a| try_parse(std::slice::from_ref(*a)).is_err())
        .collect();
    let (culprits, message) = match blamed.first() {
        Some(one) => (
            vec![*one],
            try_parse(std::slice::from_ref(*one)).unwrap_err(),
        ),
        None => (
            assign.iter().collect(),
            try_parse(assign).err().unwrap_or_default(),
        ),
    };
    let settings = culprits
        .iter()
        .map(|(k, v)| format!("--set {k}={v}"))
        .collect::<Vec<_>>()
        .join(" with ");
    let at = culprits
        .first()
        .and_then(|(k, _)| udrma_scenarios::file::edit::locate(text, k))
        .map(|(l, c)| format!(":{l}:{c}"))
        .unwrap_or_default();
    bad(format!("{name}{at}: {settings}: {message}"))
}

pub(crate) fn read_doc(file: &Path) -> anyhow::Result<(String, Table)> {
    let text = crate::read_text(file)?;
    // Parse once as a scenario for located errors, then as a table to edit.
    Scenario::parse(&file.display().to_string(), &text).map_err(|e| bad(e.to_string()))?;
    let doc: Table = udrma_scenarios::file::edit::parse_doc(&text)
        .map_err(|e| bad(format!("{}: {e}", file.display())))?;
    Ok((text, doc))
}

pub(crate) fn run_one(name: &str, text: &str, seed: u64) -> anyhow::Result<Report> {
    let sc = Scenario::parse(name, text).map_err(|e| bad(e.to_string()))?;
    udrma_scenarios::run(
        &sc,
        RunOptions {
            seed: Some(seed),
            ..RunOptions::default()
        },
    )
    .map_err(|e| bad(e.to_string()))
}

/// Where a sharded sweep's part files go, and which shard it is.
pub struct Sharding {
    /// This shard.
    pub shard: Shard,
    /// What named it (`--shard`, `SLURM_ARRAY_TASK_ID`, ...).
    pub from: &'static str,
    /// The directory of part files.
    pub parts: std::path::PathBuf,
}

/// Runs `jobs` of `plan` in parallel, with a progress bar on stderr.
fn run_jobs(plan: &Plan, jobs: &[Job]) -> anyhow::Result<Vec<RunRecord>> {
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} runs ({eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let name = plan.file.display().to_string();
    let results: Vec<anyhow::Result<RunRecord>> = jobs
        .par_iter()
        .map(|j| {
            let r = run_one(&name, &plan.texts[j.case], j.seed).map(|r| RunRecord::of(&r));
            bar.inc(1);
            r
        })
        .collect();
    bar.finish_and_clear();
    results.into_iter().collect()
}

/// `udrma sweep`: every run of the cross product of `sets` × `seeds`
/// seeds, or one shard's share of them.
pub fn sweep(
    file: &Path,
    sets: &[String],
    seeds: u32,
    sharding: Option<Sharding>,
    out: output::Outputs,
) -> anyhow::Result<ExitCode> {
    let plan = Plan::new(file, sets, seeds)?;
    let Some(sh) = sharding else {
        let records = run_jobs(&plan, &plan.layout.jobs())?;
        return output::report(&plan.name, &plan.layout, &records, out);
    };
    if out.csv.is_some() || out.json.is_some() || out.plot.is_some() {
        return Err(bad(format!(
            "shard {} ({}) writes part files, not --csv, --json or --plot: give those to \
             `udrma merge {}` once every shard is done",
            sh.shard,
            sh.from,
            sh.parts.display()
        )));
    }
    let jobs = plan.layout.shard_jobs(sh.shard);
    let records = run_jobs(&plan, &jobs)?;
    let written = part::write(&sh.parts, &plan, sh.shard, &jobs, &records)?;
    let failed = records.iter().filter(|r| !r.passed()).count();
    println!(
        "shard {} ({}): {} of {} runs, {} passed; wrote {}",
        sh.shard,
        sh.from,
        jobs.len(),
        plan.layout.job_count(),
        jobs.len() - failed,
        written.display()
    );
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `s` as one word for a POSIX shell: as is when it is plainly safe,
/// otherwise in single quotes.
pub(crate) fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./=,:+-%@".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Words joined into one shell command line.
pub(crate) fn shell_line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_word(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}
