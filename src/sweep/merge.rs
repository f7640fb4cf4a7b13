//! `udrma merge`: the part files of a sharded sweep back into the CSV,
//! table and plot that one `udrma sweep` of the same cases writes.
//!
//! Every run must be present exactly once, and every part must come from
//! the same scenario file (by hash), the same settings and seeds, and the
//! same udrma version; otherwise the merge names what is wrong and writes
//! nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::bad;
use super::part::{self, Part};
use super::plan::{Job, Shard};
use super::record::RunRecord;

/// How many runs an error lists by name before it counts the rest.
const NAMED: usize = 8;

/// The part files among `inputs`: `*.jsonl` files as given, directories
/// by their `*.jsonl` files in name order. Other files (the `.csv` beside
/// each part, which `parts/*` also matches) are skipped with a note.
pub fn part_files(inputs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for input in inputs {
        if input.is_file() && input.extension().is_none_or(|x| x != "jsonl") {
            eprintln!(
                "note: skipped {}: not a part file (part files end in .jsonl)",
                input.display()
            );
            continue;
        }
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("cannot list {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            found.sort();
            out.extend(found);
        } else if input.exists() {
            out.push(input.clone());
        } else {
            return Err(bad(format!(
                "{}: no such file or directory",
                input.display()
            )));
        }
    }
    if out.is_empty() {
        return Err(bad(format!(
            "no part files (*.jsonl) in {}",
            inputs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(out)
}

/// Checks that `p` belongs to the same sweep as `first`.
fn same_sweep(first: &Part, p: &Part) -> anyhow::Result<()> {
    let (a, b) = (&first.header, &p.header);
    let differs = |what: &str, x: String, y: String| {
        bad(format!(
            "{} is from {what} {y}, but {} is from {x}: parts of one sweep only",
            p.path.display(),
            first.path.display()
        ))
    };
    if a.scenario_sha256 != b.scenario_sha256 {
        return Err(differs(
            "the scenario file with SHA-256",
            format!("{} ({})", a.scenario_sha256, a.scenario),
            format!("{} ({})", b.scenario_sha256, b.scenario),
        ));
    }
    if a.udrma_version != b.udrma_version {
        return Err(differs(
            "udrma",
            a.udrma_version.clone(),
            b.udrma_version.clone(),
        ));
    }
    if a.layout != b.layout {
        return Err(differs(
            "the sweep",
            a.layout.args().join(" "),
            b.layout.args().join(" "),
        ));
    }
    Ok(())
}

/// `a, b, c, ... and N more`.
fn named(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > NAMED {
        s.push_str(&format!("; and {} more", items.len() - NAMED));
    }
    s
}

/// Reads and checks the parts; returns the first part (for the sweep's
/// description) and every run's record in the layout's job order.
pub fn gather(files: &[PathBuf]) -> anyhow::Result<(Part, Vec<RunRecord>)> {
    let mut parts = Vec::with_capacity(files.len());
    for f in files {
        parts.push(part::read(f)?);
    }
    let mut rest = parts.split_off(1);
    let first = parts.pop().expect("part_files returns at least one");
    for p in &rest {
        same_sweep(&first, p)?;
    }
    let layout = first.header.layout.clone();
    let mut slots: Vec<Option<(RunRecord, usize)>> = vec![None; layout.job_count()];
    let mut duplicates = Vec::new();
    let mut all = vec![first];
    all.append(&mut rest);
    let paths: Vec<String> = all.iter().map(|p| p.path.display().to_string()).collect();
    for (pi, p) in all.iter_mut().enumerate() {
        for line in std::mem::take(&mut p.lines) {
            let job = Job {
                case: line.case,
                seed: line.seed,
            };
            let at = layout.position(job).expect("part::read checked it");
            match &slots[at] {
                Some((_, other)) => duplicates.push(format!(
                    "{} in {} and {}",
                    layout.describe(job),
                    paths[*other],
                    paths[pi]
                )),
                None => slots[at] = Some((line.run, pi)),
            }
        }
    }
    if !duplicates.is_empty() {
        return Err(bad(format!(
            "{} runs are in more than one part: {}",
            duplicates.len(),
            named(&duplicates)
        )));
    }
    let jobs = layout.jobs();
    let missing: Vec<Job> = jobs
        .iter()
        .zip(&slots)
        .filter(|(_, s)| s.is_none())
        .map(|(j, _)| *j)
        .collect();
    if !missing.is_empty() {
        return Err(missing_error(&all, &missing));
    }
    let records = slots
        .into_iter()
        .map(|s| s.expect("checked").0)
        .collect::<Vec<_>>();
    let first = all.swap_remove(0);
    Ok((first, records))
}

/// Names the missing runs and, when every part cut the sweep the same way,
/// the shards they belong to with the command that reruns each.
fn missing_error(all: &[Part], missing: &[Job]) -> anyhow::Error {
    let h = &all[0].header;
    let layout = &h.layout;
    let names: Vec<String> = missing.iter().map(|j| layout.describe(*j)).collect();
    let mut msg = format!(
        "{} of {} runs are missing: {}",
        missing.len(),
        layout.job_count(),
        named(&names)
    );
    if all.iter().all(|p| p.header.shards == h.shards) {
        let shards: BTreeSet<u32> = missing
            .iter()
            .map(|j| layout.shard_of(*j, h.shards))
            .collect();
        let dir = all[0]
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        msg.push_str(&format!(
            "\nmissing shards (of {}): {}",
            h.shards,
            shards
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if let Some(s) = shards.first() {
            let mut words = vec!["udrma".to_string(), "sweep".into(), h.scenario.clone()];
            words.extend(layout.args());
            words.push("--shard".into());
            words.push(
                Shard {
                    index: *s,
                    count: h.shards,
                }
                .to_string(),
            );
            words.push("--parts".into());
            words.push(if dir.as_os_str().is_empty() {
                ".".into()
            } else {
                dir.display().to_string()
            });
            msg.push_str(&format!("\nrerun one alone: {}", super::shell_line(&words)));
        }
    }
    bad(msg)
}

/// `udrma merge PARTS... --csv OUT --json OUT.json --plot OUT.svg`.
pub fn merge(inputs: &[PathBuf], out: super::output::Outputs) -> anyhow::Result<ExitCode> {
    let files = part_files(inputs)?;
    let (first, records) = gather(&files)?;
    eprintln!(
        "merged {} part files: {} runs of {} ({} cases × {} seeds)",
        files.len(),
        records.len(),
        first.header.scenario,
        first.header.layout.case_count(),
        first.header.layout.seeds
    );
    super::output::report(
        &first.header.scenario_name,
        &first.header.layout,
        &records,
        out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lists_are_cut_after_eight_names() {
        let items: Vec<String> = (0..10).map(|i| format!("r{i}")).collect();
        assert_eq!(named(&items[..1]), "r0");
        assert_eq!(named(&items[..8]), "r0; r1; r2; r3; r4; r5; r6; r7");
        assert_eq!(
            named(&items[..9]),
            "r0; r1; r2; r3; r4; r5; r6; r7; and 1 more"
        );
        assert!(named(&items).ends_with("r7; and 2 more"));
    }
}
