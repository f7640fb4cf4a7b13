//! `udrma run FILE`: the flags, the run, and what a user sees while it
//! runs. The run is watched between slices (`udrma_scenarios::run::
//! observed`: events on one thread, windows on threads and ranks, a tenth
//! of a second over sockets): on a terminal (and without `--json`) a
//! progress line on stderr once it has run for a second, and on Ctrl-C
//! the run stops there and the summary of the run so far is printed
//! under a line saying so (exit 130). On ranks, a Ctrl-C that reaches
//! any rank stops all of them at the same window, and rank 0 prints.
//! The watch reads the wall clock here, in the CLI; the run it watches
//! is the same without it.

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as WallDuration, Instant as Wall};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use udrma_fabric::TraceFormat;
use udrma_proto::Instant;
use udrma_scenarios::run::observed::{Observer, Progress, SLICE_EVENTS};
use udrma_scenarios::{BackendKind, RunOptions, Scenario};

use crate::{create, load, load_with, print_report, ranks, BadInput};

/// The `--ladder*` flags.
pub(crate) struct LadderArgs {
    pub(crate) path: PathBuf,
    pub(crate) hosts: Vec<String>,
    pub(crate) from: udrma_proto::Duration,
    pub(crate) until: Option<udrma_proto::Duration>,
    pub(crate) max: usize,
}

/// The `--timeline*` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct TimelineArgs {
    /// Write a timeline (Chrome trace-event JSON, for Perfetto,
    /// chrome://tracing or speedscope): per host its operations, NACKs
    /// and retransmits; per switch port its queue depth and PFC pauses
    /// (docs/cli.md).
    #[arg(long, value_name = "FILE.json")]
    pub(crate) timeline: Option<PathBuf>,
    /// Keep at most this many timeline events; the timeline ends where
    /// the run was when they filled, and says so.
    #[arg(long, value_name = "N", default_value_t = udrma_scenarios::Timeline::DEFAULT_MAX, requires = "timeline")]
    pub(crate) timeline_max: usize,
}

/// The flags of `udrma run`.
pub(crate) struct RunFlags {
    pub(crate) sets: Vec<String>,
    pub(crate) threads: Option<usize>,
    pub(crate) seed: Option<u64>,
    pub(crate) json: bool,
    pub(crate) pcap: Option<PathBuf>,
    pub(crate) pcap_links: Vec<String>,
    pub(crate) trace: Option<PathBuf>,
    /// `--timeline` and `--timeline-max`.
    pub(crate) timeline: Option<(PathBuf, usize)>,
    pub(crate) ladder: Option<LadderArgs>,
    pub(crate) backend: BackendKind,
}

/// `udrma run FILE`.
pub(crate) fn run(file: &Path, flags: RunFlags) -> anyhow::Result<ExitCode> {
    if let Some(ranks) = ranks::join()? {
        return ranks::run_file(ranks, file, flags);
    }
    let sc = if flags.sets.is_empty() {
        load(file)?
    } else {
        load_with(file, &flags.sets)?
    };
    let (mut opts, timeline) = options(&sc, &flags).inspect_err(|_| crate::output::discard())?;
    let outputs = (flags.ladder.as_ref().map(|l| l.path.as_path()), timeline);
    // Progress on a terminal, never beside JSON (a script reads that).
    let watch = Watch::new(!flags.json && std::io::stderr().is_terminal());
    opts.observer = Some((SLICE_EVENTS, watch.observer()));
    let start = Wall::now();
    let result = udrma_scenarios::run(&sc, opts);
    watch.bar.finish_and_clear();
    let mut report = match result {
        Ok(report) => report,
        // A refused or failed run leaves its output files as they were
        // (`crate::output`).
        Err(e) => {
            crate::output::discard();
            return Err(BadInput(e.to_string()).into());
        }
    };
    write_outputs(outputs, &mut report).inspect_err(|_| crate::output::discard())?;
    crate::output::commit()?;
    report.set_wall(start.elapsed().as_secs_f64());
    print_watched(&watch, &report, flags.json)
}

/// Prints the report of a watched run, under a line saying where it was
/// stopped if Ctrl-C stopped it (exit 130).
pub(crate) fn print_watched(
    watch: &Watch,
    report: &udrma_scenarios::Report,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let Some(at) = watch.stopped() else {
        return print_report(report, json);
    };
    let head = interrupted_line(&at);
    if json {
        eprintln!("{head}");
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{head}")?;
        out.flush()?;
    }
    print_report(report, json)?;
    Ok(ExitCode::from(crate::interrupt::EXIT))
}

/// A file opened for writing, and its path (for errors).
pub(crate) type Opened = (Box<dyn Write + Send>, PathBuf);

/// What `udrma run` writes besides the report: the ladder's path and the
/// timeline's file.
pub(crate) type Outputs<'a> = (Option<&'a Path>, Option<Opened>);

/// The run's options from the flags and the file's outputs, and the
/// timeline's file, opened (a bad path fails before the run).
fn options(sc: &Scenario, flags: &RunFlags) -> anyhow::Result<(RunOptions, Option<Opened>)> {
    let mut opts = RunOptions {
        seed: flags.seed,
        backend: flags.backend,
        threads: flags.threads,
        ..RunOptions::default()
    };
    let pcap = flags.pcap.clone();
    let pcap = pcap.or_else(|| sc.file.outputs.pcap.as_ref().map(PathBuf::from));
    if let Some(path) = pcap {
        let links = if flags.pcap_links.is_empty() {
            sc.file.outputs.pcap_links.clone()
        } else {
            flags.pcap_links.clone()
        };
        opts.pcap = Some((create(&path)?, links));
    }
    let trace = flags.trace.clone();
    let trace = trace.or_else(|| sc.file.outputs.trace.as_ref().map(PathBuf::from));
    if let Some(path) = trace {
        let format = if path.extension().is_some_and(|e| e == "jsonl") {
            TraceFormat::JsonLines
        } else {
            TraceFormat::Postcard
        };
        opts.trace = Some((format, create(&path)?));
    }
    if let Some(l) = &flags.ladder {
        let (left, right) = match l.hosts.as_slice() {
            [a, b] => (a.clone(), b.clone()),
            [_, ..] => {
                return Err(BadInput(format!(
                    "--ladder-hosts takes two hosts, as `h0,h1`; got {}",
                    l.hosts.join(",")
                ))
                .into())
            }
            [] => {
                let w = sc.file.workloads.first();
                let a = w.and_then(|w| w.src.clone()).unwrap_or_else(|| "h0".into());
                let b = w.and_then(|w| w.dst.clone()).unwrap_or_else(|| "h1".into());
                (a, b)
            }
        };
        if l.until.is_some_and(|u| u <= l.from) {
            return Err(BadInput("--ladder-until must be later than --ladder-from".into()).into());
        }
        opts.ladder = Some(udrma_scenarios::Ladder {
            left,
            right,
            from: l.from,
            until: l.until,
            max: l.max,
        });
    }
    let timeline = match &flags.timeline {
        Some((_, 0)) => {
            return Err(BadInput(
                "--timeline-max 0 would keep no event of the run: give at least 1".into(),
            )
            .into())
        }
        Some((path, max_events)) => {
            opts.timeline = Some(udrma_scenarios::Timeline {
                max_events: *max_events,
            });
            Some((create(path)?, path.clone()))
        }
        None => None,
    };
    Ok((opts, timeline))
}

/// Runs `sc` unwatched and prints its report (the demo: no files).
pub(crate) fn execute(sc: &Scenario, opts: RunOptions, json: bool) -> anyhow::Result<ExitCode> {
    let start = Wall::now();
    let mut report = udrma_scenarios::run(sc, opts).map_err(|e| BadInput(e.to_string()))?;
    report.set_wall(start.elapsed().as_secs_f64());
    print_report(&report, json)
}

fn write_outputs(
    (ladder, timeline): Outputs<'_>,
    report: &mut udrma_scenarios::Report,
) -> anyhow::Result<()> {
    if let (Some(path), Some(svg)) = (ladder, report.ladder_svg.as_ref()) {
        std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))?;
    }
    if let (Some((mut out, path)), Some(text)) = (timeline, report.timeline_json.take()) {
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// How long a run goes before its progress shows: a short run prints
/// nothing more than before.
const QUIET_FOR: WallDuration = WallDuration::from_secs(1);

/// How often the progress line is redrawn.
const REDRAW: WallDuration = WallDuration::from_millis(100);

/// What `udrma run` watches a run with: Ctrl-C, the progress bar (hidden
/// until the run has gone on for [`QUIET_FOR`], and only on a terminal),
/// and where the run was stopped, if it was.
pub(crate) struct Watch {
    interrupted: Arc<AtomicBool>,
    tty: bool,
    pub(crate) bar: ProgressBar,
    stopped: Arc<Mutex<Option<Progress>>>,
}

impl Watch {
    /// A watch that draws progress if `tty`.
    pub(crate) fn new(tty: bool) -> Watch {
        let bar = ProgressBar::hidden();
        bar.set_style(
            // No bar: most runs end long before their time limit, and
            // an empty bar would only take room from the line (which
            // fits 80 columns without it).
            ProgressStyle::with_template("[{elapsed_precise}] {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Watch {
            interrupted: crate::interrupt::flag(),
            tty,
            bar,
            stopped: Arc::new(Mutex::new(None)),
        }
    }

    /// Where the run was stopped, if Ctrl-C stopped it (here or, on
    /// ranks, elsewhere).
    pub(crate) fn stopped(&self) -> Option<Progress> {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The observer: stops the run once Ctrl-C came, and otherwise draws
    /// (on a terminal, after [`QUIET_FOR`], the line throttling itself).
    pub(crate) fn observer(&self) -> Observer {
        let (interrupted, stopped) = (self.interrupted.clone(), self.stopped.clone());
        let (tty, bar) = (self.tty, self.bar.clone());
        let start = Wall::now();
        let mut drawn: Option<WallDuration> = None;
        Box::new(move |p: &Progress| {
            if p.elsewhere || interrupted.load(Ordering::Relaxed) {
                *stopped.lock().unwrap_or_else(|e| e.into_inner()) = Some(*p);
                return ControlFlow::Break(());
            }
            if !tty {
                return ControlFlow::Continue(());
            }
            let wall = start.elapsed();
            let due = match drawn {
                None => wall >= QUIET_FOR,
                Some(last) => wall >= last + REDRAW,
            };
            if due {
                if drawn.is_none() {
                    bar.set_draw_target(ProgressDrawTarget::stderr());
                }
                drawn = Some(wall);
                bar.set_message(progress_line(p, wall.as_secs_f64()));
            }
            ControlFlow::Continue(())
        })
    }
}

/// The progress line: virtual time reached of the limit, events and
/// their rate over the wall time so far (none over sockets, which count
/// no events), packets sent; under 70 characters, so that with the
/// elapsed time before it it fits 80 columns.
pub(crate) fn progress_line(p: &Progress, wall_s: f64) -> String {
    let rate = if wall_s > 0.0 {
        p.traffic.events as f64 / wall_s
    } else {
        0.0
    };
    let events = if p.traffic.events == 0 {
        String::new()
    } else {
        format!(
            " {} events ({}/s),",
            count(p.traffic.events as f64),
            count(rate)
        )
    };
    format!(
        "{} of {},{events} {} packets",
        p.now - Instant::ZERO,
        p.limit - Instant::ZERO,
        count(p.traffic.sent as f64),
    )
}

/// A count as people read one: `950`, `12.3 k`, `4.56 M`, `1.20 G`.
fn count(n: f64) -> String {
    let (v, unit) = match n {
        n if n < 1e4 => return format!("{n:.0}"),
        n if n < 1e6 => (n / 1e3, "k"),
        n if n < 1e9 => (n / 1e6, "M"),
        n => (n / 1e9, "G"),
    };
    let digits = if v < 10.0 {
        2
    } else if v < 100.0 {
        1
    } else {
        0
    };
    format!("{v:.digits$} {unit}")
}

/// The line above the summary of an interrupted run.
pub(crate) fn interrupted_line(at: &Progress) -> String {
    format!(
        "interrupted (Ctrl-C) at {} of the time limit {}: the summary below is of the run so far",
        at.now - Instant::ZERO,
        at.limit - Instant::ZERO
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use udrma_proto::Duration;
    use udrma_scenarios::backend::Traffic;

    fn at(now_us: u64, limit_ms: u64, events: u64, sent: u64) -> Progress {
        Progress {
            now: Instant::ZERO + Duration::from_micros(now_us),
            limit: Instant::ZERO + Duration::from_millis(limit_ms),
            traffic: Traffic {
                events,
                sent,
                ..Traffic::default()
            },
            elsewhere: false,
        }
    }

    #[test]
    fn the_progress_line_says_where_the_run_is_and_how_fast() {
        assert_eq!(
            progress_line(&at(1250, 10, 12_345_678, 4_560_000), 4.0),
            "1.250ms of 10.000ms, 12.3 M events (3.09 M/s), 4.56 M packets"
        );
        assert_eq!(
            progress_line(&at(3, 1, 950, 12), 0.0),
            "3.000us of 1.000ms, 950 events (0/s), 12 packets"
        );
        assert_eq!(
            progress_line(&at(250_000, 2000, 0, 40), 1.0),
            "250.000ms of 2.000000s, 40 packets",
            "over sockets no events are counted, and none are shown"
        );
    }

    /// The longest line a run of up to 1,000 s draws fits 80 columns
    /// after its elapsed time (`[00:00:01] `).
    #[test]
    fn the_progress_line_fits_80_columns() {
        let line = progress_line(
            &at(999_999_999, 999_999, 999_000_000_000, 999_000_000_000),
            1e-3,
        );
        assert_eq!(
            line,
            "999.999999s of 999.999000s, 999 G events (999000 G/s), 999 G packets"
        );
        assert!(11 + line.chars().count() <= 80, "{}", line.len());
    }

    #[test]
    fn counts_keep_three_digits() {
        let shown: Vec<String> = [0.0, 9999.0, 10_000.0, 123_456.0, 2.5e9]
            .into_iter()
            .map(count)
            .collect();
        assert_eq!(shown, ["0", "9999", "10.0 k", "123 k", "2.50 G"]);
    }

    #[test]
    fn the_interrupted_line_names_the_time_reached_and_the_limit() {
        assert_eq!(
            interrupted_line(&at(700, 5, 1, 1)),
            "interrupted (Ctrl-C) at 700.000us of the time limit 5.000ms: the summary below is of the run so far"
        );
    }
}
