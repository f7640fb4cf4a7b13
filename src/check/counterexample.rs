//! The smallest failing schedule as a scenario file: the original file
//! with the schedule's faults as its only `[[fault]]` rules, replayed
//! with `udrma run`'s own path before the command says it is.

use std::path::{Path, PathBuf};

use anyhow::Context;
use udrma_scenarios::{RunOptions, Scenario};

use super::enumerate::Bound;
use super::schedule::{Base, Outcome, Schedule};

/// The file written and what its replay showed.
pub struct Written {
    /// Where.
    pub path: PathBuf,
    /// The checks its replay fails.
    pub failing: Vec<String>,
    /// Its replay's trace hash (the search's run's, or the replay differs).
    pub trace_hash: String,
    /// Whether the replay is the search's run (same trace hash, same
    /// failing checks).
    pub same: bool,
    /// The two hosts of the first fault's packet (for `--ladder-hosts`).
    pub hosts: (u32, u32),
}

/// Writes `<name>-counterexample.toml` into `out` and replays it.
#[allow(clippy::too_many_arguments)]
pub fn write(
    file: &Path,
    doc: &toml::Table,
    base: &Base,
    schedule: &Schedule,
    outcome: &Outcome,
    out: &Path,
    bound: &Bound,
    flags: &str,
) -> anyhow::Result<Written> {
    let name = &base.scenario.file.name;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let path = out.join(format!("{name}-counterexample.toml"));
    let tables = schedule
        .iter()
        .enumerate()
        .map(|(i, f)| f.table(i, &base.link_names))
        .collect();
    let mut d = super::with_faults(doc, tables);
    // The seed the search ran with, so the file replays as it is.
    d.insert("seed".into(), toml::Value::Integer(base.seed as i64));
    let body = udrma_scenarios::file::edit::render(&d);
    let failing = outcome.failing();
    let kinds: Vec<&str> = bound.kinds.iter().map(|k| k.name()).collect();
    let mut text = format!(
        "# Counterexample found by `udrma check {} --faults {} --kinds {}{}`:\n\
         # with {} fault(s) it fails {}.\n\
         # The original file's own [[fault]] rules are left out; these rules each\n\
         # strike once, on the n-th packet (offset, 0-based) their target matches.\n",
        file.display(),
        bound.faults,
        kinds.join(","),
        flags,
        schedule.len(),
        failing.join(", "),
    );
    for (i, f) in schedule.iter().enumerate() {
        text.push_str(&format!(
            "# fault {}: {}\n",
            i + 1,
            f.describe(&base.link_names)
        ));
    }
    text.push_str(&body);
    std::fs::write(&path, &text).with_context(|| format!("cannot write {}", path.display()))?;
    // Read back as `udrma run` reads it.
    let sc = Scenario::parse(&path.display().to_string(), &text)
        .map_err(|e| anyhow::anyhow!("internal: the counterexample does not parse: {e}"))?;
    let report = udrma_scenarios::run(
        &sc,
        // As `udrma run FILE` runs it: the file's seed, now the search's.
        RunOptions::default(),
    )
    .map_err(|e| anyhow::anyhow!("internal: the counterexample does not run: {e}"))?;
    let replay_failing: Vec<String> = report
        .checks
        .iter()
        .filter(|(_, ok)| !**ok)
        .map(|(k, _)| k.clone())
        .collect();
    let same = report.trace_hash == outcome.trace_hash && replay_failing == failing;
    let hosts = schedule
        .first()
        .map_or((0, 1), |f| (f.packet.src.0, f.packet.dst.0));
    Ok(Written {
        path,
        failing: replay_failing,
        trace_hash: report.trace_hash,
        same,
        hosts,
    })
}
