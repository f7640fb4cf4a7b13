//! Part files: what one shard of a sweep ran, with where it came from.
//!
//! A shard writes two files into the parts directory:
//! `part-IIII-of-NNNN.jsonl`, which `udrma merge` reads (a header line,
//! then one line per run), and `part-IIII-of-NNNN.csv`, the same runs as
//! CSV rows for a quick look (the merged CSV's columns, then the shard and
//! the provenance). Both are written under a temporary name and renamed,
//! so a part file that exists is whole.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::bad;
use super::plan::{Job, Layout, Plan, Shard};
use super::record::RunRecord;

/// The format of part files this build writes and reads (2: the MPI
/// collectives' per-size rows, `osu`; 3: what was lost by cause, `lost`, and a non-contiguous run's method
/// and latency, `noncontig`).
pub const FORMAT: u32 = 3;

/// The first line of a part file: where its runs came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`FORMAT`].
    pub udrma_part: u32,
    /// The udrma that ran the shard.
    pub udrma_version: String,
    /// The scenario file as the shard was given it.
    pub scenario: String,
    /// The scenario's `name`.
    pub scenario_name: String,
    /// SHA-256 of the scenario file's bytes.
    pub scenario_sha256: String,
    /// The settings and seeds of the whole sweep.
    pub layout: Layout,
    /// This shard, from 0.
    pub shard: u32,
    /// Of how many.
    pub shards: u32,
    /// Run lines that follow.
    pub runs: u64,
}

/// One run line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// The case's settings, `(key, value)` per axis.
    pub settings: Vec<(String, String)>,
    /// Index of the case in the layout.
    pub case: usize,
    /// The seed.
    pub seed: u64,
    /// What the run gave.
    pub run: RunRecord,
}

/// The part files' name stem for a shard.
pub fn stem(shard: Shard) -> String {
    format!("part-{:04}-of-{:04}", shard.index, shard.count)
}

/// Writes `dir/part-I-of-N.{jsonl,csv}`; returns the JSON lines' path.
pub fn write(
    dir: &Path,
    plan: &Plan,
    shard: Shard,
    jobs: &[Job],
    records: &[RunRecord],
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let header = Header {
        udrma_part: FORMAT,
        udrma_version: env!("CARGO_PKG_VERSION").to_string(),
        scenario: plan.file.display().to_string(),
        scenario_name: plan.name.clone(),
        scenario_sha256: plan.sha256.clone(),
        layout: plan.layout.clone(),
        shard: shard.index,
        shards: shard.count,
        runs: jobs.len() as u64,
    };
    let mut text = serde_json::to_string(&header)?;
    text.push('\n');
    for (job, r) in jobs.iter().zip(records) {
        let line = Line {
            settings: plan.layout.case(job.case),
            case: job.case,
            seed: job.seed,
            run: r.clone(),
        };
        text.push_str(&serde_json::to_string(&line)?);
        text.push('\n');
    }
    let jsonl = dir.join(format!("{}.jsonl", stem(shard)));
    let csv = dir.join(format!("{}.csv", stem(shard)));
    let rows: Vec<(Job, &RunRecord)> = jobs.iter().copied().zip(records).collect();
    let extra = [
        ("shard", shard.to_string()),
        ("scenario_sha256", plan.sha256.clone()),
        ("udrma_version", header.udrma_version.clone()),
    ];
    let tmp_csv = csv.with_extension("csv.tmp");
    super::output::write_csv(&tmp_csv, &plan.layout, &rows, &extra)?;
    rename(&tmp_csv, &csv)?;
    let tmp = jsonl.with_extension("jsonl.tmp");
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    rename(&tmp, &jsonl)?;
    Ok(jsonl)
}

fn rename(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::rename(from, to)
        .with_context(|| format!("cannot rename {} to {}", from.display(), to.display()))
}

/// A part file read back.
pub struct Part {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its header.
    pub header: Header,
    /// Its runs.
    pub lines: Vec<Line>,
}

/// Reads a part file, checking its format, its line count, and that every
/// line's settings are its case's.
pub fn read(path: &Path) -> anyhow::Result<Part> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let at = |n: usize| format!("{}:{n}", path.display());
    let mut lines = BufReader::new(f).lines();
    let first = lines
        .next()
        .transpose()
        .with_context(|| format!("cannot read {}", path.display()))?
        .ok_or_else(|| bad(format!("{}: empty, not a part file", at(1))))?;
    // The format first, so that a newer part gets a message about its
    // version rather than about a field this build does not know.
    let format = serde_json::from_str::<serde_json::Value>(&first)
        .ok()
        .and_then(|v| v.get("udrma_part").and_then(serde_json::Value::as_u64));
    match format {
        Some(f) if f == u64::from(FORMAT) => {}
        Some(f) => {
            return Err(bad(format!(
                "{}: part format {f}, but this udrma ({}) reads format {FORMAT}",
                at(1),
                env!("CARGO_PKG_VERSION")
            )))
        }
        None => {
            return Err(bad(format!(
                "{}: not a udrma part file (no `udrma_part` header)",
                at(1)
            )))
        }
    }
    let header: Header =
        serde_json::from_str(&first).map_err(|e| bad(format!("{}: bad header: {e}", at(1))))?;
    if header.shards == 0 || header.shard >= header.shards {
        return Err(bad(format!(
            "{}: shard {} of {} does not exist",
            at(1),
            header.shard,
            header.shards
        )));
    }
    let mut out = Vec::new();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let line = line.with_context(|| format!("cannot read {}", at(n)))?;
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(&line)
            .map_err(|e| bad(format!("{}: bad run line: {e}", at(n))))?;
        let job = Job {
            case: l.case,
            seed: l.seed,
        };
        if header.layout.position(job).is_none() {
            return Err(bad(format!(
                "{}: case {} seed {} is not in the sweep's {} cases × {} seeds",
                at(n),
                l.case,
                l.seed,
                header.layout.case_count(),
                header.layout.seeds
            )));
        }
        if l.settings != header.layout.case(l.case) {
            return Err(bad(format!(
                "{}: the settings of case {} are not the header's ({})",
                at(n),
                l.case,
                header.layout.describe(job)
            )));
        }
        out.push(l);
    }
    if out.len() as u64 != header.runs {
        return Err(bad(format!(
            "{}: holds {} runs but its header says {}: the file is cut short or edited",
            path.display(),
            out.len(),
            header.runs
        )));
    }
    Ok(Part {
        path: path.to_path_buf(),
        header,
        lines: out,
    })
}
