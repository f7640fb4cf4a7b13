//! What `udrma check` prints: the bound, the fault-free run, the search's
//! counts and speed, and the result with how to replay it.

use std::io::{self, Write};
use std::path::Path;

use super::counterexample::Written;
use super::enumerate::{Bound, Level, Search};
use super::schedule::{Fault, Kind, Outcome};

/// What is known before the search.
pub struct Head<'a> {
    /// The scenario file.
    pub file: &'a Path,
    /// Its name.
    pub name: &'a str,
    /// The seed every run uses.
    pub seed: u64,
    /// The bound.
    pub bound: &'a Bound,
    /// The file's own `[[fault]]` rules, left out.
    pub dropped_rules: usize,
    /// Packets the fault-free run judged (every link crossing).
    pub packets: usize,
    /// Links they crossed.
    pub links: usize,
    /// Estimated schedules within the bound.
    pub estimate: u128,
    /// The fault-free run.
    pub zero: &'a Outcome,
}

/// `name:PASS name:FAIL ...`.
fn checks(o: &Outcome) -> String {
    o.checks
        .iter()
        .map(|(k, ok)| format!("{k}:{}", if *ok { "PASS" } else { "FAIL" }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `n thing` or `n things`.
fn count(n: impl Into<u128>, thing: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// The lines before the search.
pub fn print_head(out: &mut dyn Write, h: &Head) -> io::Result<()> {
    let kinds: Vec<&str> = h.bound.kinds.iter().map(|k| k.name()).collect();
    let delay = if h.bound.kinds.contains(&Kind::Delay) {
        format!("; delay holds {} ns", h.bound.delay_ns)
    } else {
        String::new()
    };
    writeln!(
        out,
        "check       {}  ({}, seed {}): up to {} of {}{delay}",
        h.name,
        h.file.display(),
        h.seed,
        count(h.bound.faults as u64, "fault"),
        kinds.join(","),
    )?;
    if h.dropped_rules > 0 {
        writeln!(
        out,
            "note        the file's {} [[fault]] rule(s) left out: the search starts from a fault-free run",
            h.dropped_rules
        )?;
    }
    writeln!(
        out,
        "fault-free  {} judged on {}, trace {}",
        count(h.packets as u64, "packet"),
        count(h.links as u64, "link"),
        h.zero.trace_hash
    )?;
    writeln!(out, "checks      {}", checks(h.zero))?;
    writeln!(
        out,
        "bound       about {} within {} ({}, {}; faulted runs judge more packets, so this estimates)",
        count(h.estimate, "schedule"),
        count(h.bound.faults as u64, "fault"),
        count(h.packets as u64, "packet"),
        count(h.bound.kinds.len() as u64, "kind"),
    )?;
    Ok(())
}

/// How long the search may take: the estimate's schedules at the
/// fault-free run's pace, shared by `jobs` threads. Faulted runs take
/// longer (timeouts, copies), so the bar's own estimate, from the pace
/// of the runs so far, is the better one once it moves.
pub fn print_estimate(
    out: &mut dyn Write,
    schedules: u128,
    zero: std::time::Duration,
    jobs: usize,
    cut_by: Option<&str>,
) -> io::Result<()> {
    let secs = zero.as_secs_f64() * schedules as f64 / jobs.max(1) as f64;
    writeln!(
        out,
        "estimate    about {} on {} at the fault-free run's pace ({:.2} ms a run; faulted runs take longer){}",
        duration(secs),
        count(jobs as u64, "job"),
        zero.as_secs_f64() * 1e3,
        match cut_by {
            Some(flag) => format!("; for the plain search, which {flag} cuts"),
            None => String::new(),
        }
    )
}

/// `42 s`, `7 min`, `3.5 h`.
fn duration(secs: f64) -> String {
    if secs < 90.0 {
        format!("{:.0} s", secs.max(1.0))
    } else if secs < 90.0 * 60.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{:.1} h", secs / 3600.0)
    }
}

/// The counts for `i` faults, printed as soon as they are all run; with
/// `merged` (`--merge-states`), the schedules cut at a merged state count
/// as pruned, as in the totals.
pub fn print_level(out: &mut dyn Write, i: usize, l: &Level, merged: bool) -> io::Result<()> {
    let pruned = l.same_rule + if merged { l.cut } else { 0 };
    writeln!(
        out,
        "faults {i:<4} ran {}  violations {}  pruned {pruned}  not applicable {}",
        l.ran, l.violations, l.not_applicable
    )
}

/// The totals and the speed (after the counts per number of faults).
pub fn print_search(
    out: &mut dyn Write,
    s: &Search,
    bound: &Bound,
    wall_s: f64,
    (jobs, unit): (usize, &str),
) -> io::Result<()> {
    let ran = s.ran();
    // Merged states prune soundly; the merge bound's cuts are not proof.
    let pruned = s.pruned() + if s.states.is_some() { s.cut() } else { 0 };
    let considered = ran + pruned;
    writeln!(
        out,
        "explored    {} schedules: ran {ran}, pruned as equivalent {pruned} ({:.1} %), not applicable {}",
        considered,
        if considered == 0 {
            0.0
        } else {
            100.0 * pruned as f64 / considered as f64
        },
        s.not_applicable()
    )?;
    if let Some(m) = &s.states {
        writeln!(
            out,
            "merged      {} runs reached a state an earlier run had reached as late or later with as many faults left ({} states recorded): {} schedules with a fault from there on were not run, nor any deeper below them",
            m.met,
            m.recorded(),
            s.cut()
        )?;
    }
    if let Some(f) = &s.futures {
        writeln!(
            out,
            "merge bound {} runs met an earlier run's future ({} futures recorded): {} schedules with a fault from there on were not run, nor any deeper below them",
            f.met,
            f.recorded(),
            s.cut()
        )?;
    }
    if s.first.is_some() && s.levels.len() <= bound.faults {
        writeln!(
            out,
            "            stopped after {} faults: the smallest counterexample{} has that many",
            s.levels.len() - 1,
            if s.futures.is_some() {
                " among the schedules that ran"
            } else {
                ""
            }
        )?;
    }
    writeln!(
        out,
        "time        {wall_s:.2} s wall, {:.0} schedules/s, {}",
        if wall_s > 0.0 {
            ran as f64 / wall_s
        } else {
            0.0
        },
        count(jobs as u64, unit),
    )?;
    Ok(())
}

/// Where a merge's counts come from.
pub fn print_merged(out: &mut dyn Write, shards: usize, wall_s: f64) -> io::Result<()> {
    writeln!(
        out,
        "shards      {}; their searches took {wall_s:.2} s in all (the time below is theirs, added up)",
        count(shards as u64, "shard")
    )
}

/// What one shard found, where it went, and the exit code: 0 when its
/// share has no violation, 1 when it has one (the merge gives the
/// smallest), 130 when interrupted (the merge refuses its file).
pub fn print_shard(
    out: &mut dyn Write,
    s: &Search,
    bound: &Bound,
    shard: crate::sweep::plan::Shard,
    to: &Path,
) -> anyhow::Result<std::process::ExitCode> {
    writeln!(
        out,
        "shard       {shard}: the schedules whose first fault is on packet i of the fault-free run, i mod {} = {}; wrote {}",
        shard.count,
        shard.index,
        to.display()
    )?;
    if s.levels
        .get(1)
        .is_some_and(|l| l.ran + l.same_rule + l.not_applicable == 0)
    {
        writeln!(
            out,
            "note        this shard has no schedule: the fault-free run has no packet i with i mod {} = {} (fewer shards would do)",
            shard.count, shard.index
        )?;
    }
    if s.interrupted {
        print_interrupted(out, s, bound)?;
        return Ok(std::process::ExitCode::from(130));
    }
    match &s.first {
        None => {
            writeln!(
                out,
                "result      no violation in this shard within {}",
                count(bound.faults as u64, "fault")
            )?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Some((f, o)) => {
            writeln!(
                out,
                "result      this shard has a violation with {} (fails {}): merge every shard (--merge) for the smallest counterexample",
                count(f.len() as u64, "fault"),
                o.failing().join(", ")
            )?;
            Ok(std::process::ExitCode::from(1))
        }
    }
}

/// What an interrupt left covered.
pub fn print_interrupted(out: &mut dyn Write, s: &Search, bound: &Bound) -> io::Result<()> {
    let done = s.levels.len().saturating_sub(2);
    writeln!(
        out,
        "interrupted every schedule of up to {} ran; {} with {} ran before the interrupt (of up to {} asked)",
        count(done as u64, "fault"),
        s.levels.last().map_or(0, |l| l.ran),
        count(s.levels.len().saturating_sub(1) as u64, "fault"),
        count(bound.faults as u64, "fault"),
    )?;
    match &s.first {
        Some((f, o)) => writeln!(
            out,
            "result      a violation with {} faults was found before the interrupt: fails {}",
            f.len(),
            o.failing().join(", ")
        )?,
        None => writeln!(out, "result      no violation in what ran")?,
    }
    Ok(())
}

/// The smallest counterexample.
pub fn print_violation(
    out: &mut dyn Write,
    s: &Search,
    schedule: &[Fault],
    outcome: &Outcome,
    links: &[String],
) -> io::Result<()> {
    let n = schedule.len();
    let same = s.levels.get(n).map_or(1, |l| l.violations);
    // Under --merge-bound, schedules with fewer faults may not have run.
    let smallest = if s.futures.is_some() {
        "the smallest that ran"
    } else {
        "the smallest"
    };
    // Pruned schedules are not counted among those that violate.
    let ran = if s.futures.is_some() || s.states.is_some() {
        " that ran"
    } else {
        ""
    };
    writeln!(
        out,
        "result      VIOLATION with {n} fault(s) ({smallest}; {same} schedule(s) with {n} faults{ran} violate): fails {}",
        outcome.failing().join(", ")
    )?;
    for (i, f) in schedule.iter().enumerate() {
        writeln!(out, "fault {:<5} {}", i + 1, f.describe(links))?;
    }
    for note in &outcome.notes {
        writeln!(out, "note        {note}")?;
    }
    Ok(())
}

/// Where the counterexample is and how to look at it.
pub fn print_replay(out: &mut dyn Write, w: &Written) -> io::Result<()> {
    let p = w.path.display();
    writeln!(
        out,
        "wrote       {p} (replayed with udrma run: fails {}, trace {}{})",
        w.failing.join(", "),
        w.trace_hash,
        if w.same {
            ", the search's run"
        } else {
            "; NOT the search's run: please report"
        }
    )?;
    let stem = w.path.file_stem().map_or_else(
        || "counterexample".into(),
        |s| s.to_string_lossy().to_string(),
    );
    // The ladder and the capture go beside the file (`--out`).
    let dir = match w.path.parent().map(|d| d.display().to_string()) {
        Some(d) if !d.is_empty() && d != "." => format!("{d}/"),
        _ => String::new(),
    };
    writeln!(out, "replay      udrma run {p}")?;
    writeln!(
        out,
        "ladder      udrma run {p} --ladder {dir}{stem}.svg --ladder-hosts h{},h{}",
        w.hosts.0, w.hosts.1
    )?;
    writeln!(
        out,
        "capture     udrma run {p} --pcap {dir}{stem}.pcap; udrma decode {dir}{stem}.pcap"
    )?;
    Ok(())
}
