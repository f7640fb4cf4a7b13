//! `udrma run FILE` on ranks.

use super::{identity, roster, Mpi, Quiet};
use crate::BadInput;

/// `udrma run FILE` on ranks: every rank loads the file and plans it;
/// the ranks agree that all did (or rank 0 says what failed where), then
/// run the plan with each rank running its shard, and rank 0 prints the
/// report. The exit code is rank 0's verdict; the other ranks exit 0, or
/// 130 when Ctrl-C stopped the run.
pub(crate) fn run_file(
    mut ranks: Mpi,
    file: &std::path::Path,
    flags: crate::RunFlags,
) -> anyhow::Result<std::process::ExitCode> {
    use std::io::IsTerminal;
    use udrma_fabric::Ranks;
    // Ctrl-C is heard from here on, before the roster that says which
    // processes run (a launcher may pass one on while the ranks still
    // load the file): it stops the run at its first slice. Rank 0 draws
    // the progress, if its stderr is a terminal (under a launcher it
    // seldom is).
    let me = ranks.rank();
    let watch =
        crate::run_cmd::Watch::new(me == 0 && !flags.json && std::io::stderr().is_terminal());
    roster(&mut ranks, "run")?;
    let crate::RunFlags {
        sets,
        threads,
        seed,
        json,
        pcap,
        pcap_links: _,
        trace,
        timeline,
        ladder,
        backend,
    } = flags;
    let ready = (|| -> anyhow::Result<(udrma_scenarios::Scenario, String)> {
        let text = std::fs::read(file)
            .map_err(|e| BadInput(format!("cannot read {}: {e}", file.display())))?;
        let sc = if sets.is_empty() {
            crate::load(file)?
        } else {
            crate::load_with(file, &sets)?
        };
        let refuse = |what: &str| -> anyhow::Result<()> {
            Err(BadInput(format!(
                "{} MPI ranks: {what} cannot be split across ranks",
                ranks.size()
            ))
            .into())
        };
        if pcap.is_some() || sc.file.outputs.pcap.is_some() {
            refuse("a capture")?;
        }
        if trace.is_some() || sc.file.outputs.trace.is_some() {
            refuse("a trace file (a split run has the trace's hash, not its events)")?;
        }
        if ladder.is_some() {
            refuse("a ladder diagram")?;
        }
        if timeline.is_some() {
            refuse("a timeline (it is read from the trace's events)")?;
        }
        let what = format!(
            "run {} (crc32 {:08x}), seed {}, {} backend{}",
            file.display(),
            crc32fast::hash(&text),
            seed.map_or_else(|| "the file's".to_string(), |s| s.to_string()),
            match backend {
                udrma_scenarios::BackendKind::Sim => "sim",
                udrma_scenarios::BackendKind::Udp => "udp",
            },
            sets.iter()
                .map(|s| format!(", --set {s}"))
                .collect::<String>()
        );
        Ok((sc, identity(&what)))
    })();
    // Every rank says whether it is ready; rank 0 reports what is not.
    let mine = ready.as_ref().err().map(|e| format!("{e:#}"));
    let said = ranks
        .exchange(vec![
            mine.clone().unwrap_or_default().into_bytes();
            ranks.size()
        ])
        .map_err(|e| anyhow::anyhow!(e))?;
    let failed: Vec<(usize, String)> = said
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(r, b)| (r, String::from_utf8_lossy(b).into_owned()))
        .collect();
    let (sc, identity) = match ready {
        Ok(x) if failed.is_empty() => x,
        _ => {
            if me == 0 {
                // Each error once: the first rank's, then any other
                // rank's that says something else.
                let first = &failed[0].1;
                for (i, (r, why)) in failed.iter().enumerate() {
                    if i == 0 || why != first {
                        let at = if *r == 0 {
                            String::new()
                        } else {
                            format!("rank {r}: ")
                        };
                        eprintln!("error: {at}{why}");
                    }
                }
            }
            return Ok(std::process::ExitCode::from(2));
        }
    };
    let opts = udrma_scenarios::RunOptions {
        seed,
        backend,
        threads,
        ranks: Some(udrma_scenarios::RankOptions {
            ranks: Box::new(ranks),
            identity,
        }),
        ..udrma_scenarios::RunOptions::default()
    };
    run_watched(&sc, opts, (me, &watch), json)
}

/// Runs `sc` on this rank, watched (`opts` has its ranks): rank 0 prints
/// the report, under the interrupted line if Ctrl-C stopped the run.
fn run_watched(
    sc: &udrma_scenarios::Scenario,
    mut opts: udrma_scenarios::RunOptions,
    (me, watch): (usize, &crate::run_cmd::Watch),
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    // Every rank is watched, for Ctrl-C (a launcher hands it to every
    // rank; one that reaches any stops all).
    opts.observer = Some((
        udrma_scenarios::run::observed::SLICE_EVENTS,
        watch.observer(),
    ));
    let start = std::time::Instant::now();
    let result = udrma_scenarios::run(sc, opts);
    watch.bar.finish_and_clear();
    match result {
        Ok(mut report) if me == 0 => {
            report.set_wall(start.elapsed().as_secs_f64());
            crate::run_cmd::print_watched(watch, &report, json)
        }
        Ok(_) if watch.stopped().is_some() => {
            Ok(std::process::ExitCode::from(crate::interrupt::EXIT))
        }
        Ok(_) => Ok(std::process::ExitCode::SUCCESS),
        Err(e) if me == 0 => Err(BadInput(e.to_string()).into()),
        Err(_) => Err(Quiet.into()),
    }
}
