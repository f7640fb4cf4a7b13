//! `udrma check FILE`: an exhaustive, bounded search over fault
//! placements, run on the real engine and fabric (docs/check.md).
//!
//! The scenario runs once without faults; every packet the fault rules
//! would judge is logged. Then every schedule of up to K faults is run —
//! each fault "the n-th packet of one link, direction and opcode",
//! dropped, duplicated, delayed, corrupted or swapped with the next — as
//! targeted `[[fault]]` rules, so a schedule that fails a check is
//! written out as a scenario file `udrma run` replays.
//!
//! Children:
//! - `schedule`: fault kinds, a fault as a `[[fault]]` rule, one run;
//! - `enumerate`: the level-by-level search, the estimate, the threads;
//! - `counterexample`: the failing schedule as a scenario file, replayed;
//! - `report`: what the command prints;
//! - `shard`: one search across machines (`--shard`, `--merge`);
//! - `merge`: `--merge-states`, sound merging of runs that reach one
//!   state (the world's fingerprint, `udrma_fabric`'s
//!   `world/fingerprint.rs`);
//! - `future_bound`: `--merge-bound`, merging on equal fault-free
//!   futures instead (a measurement, not a proof).
//!
//! With `--shrink`, the counterexample also goes through `udrma shrink`
//! (`crate::shrink`): it cannot take a fault away (every smaller schedule
//! ran and passed), but it can drop or halve workloads the failure does
//! not need.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant as Wall;

use toml::Value;
use udrma_scenarios::Scenario;

use crate::sweep::plan::{sha256_hex, Shard};
use crate::BadInput;
use indicatif::{ProgressBar, ProgressStyle};

mod counterexample;
mod enumerate;
mod future_bound;
mod merge;
mod report;
mod schedule;
mod shard;

pub use schedule::Kind;

/// The flags of `udrma check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The scenario (TOML). Its own `[[fault]]` rules are left out: the
    /// search starts from a fault-free run.
    pub file: PathBuf,
    /// Most faults in one schedule (0 to 8).
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(0..=8))]
    pub faults: u32,
    /// Fault kinds to place, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "drop,duplicate,delay,corrupt,reorder"
    )]
    pub kinds: Vec<Kind>,
    /// How long `delay` holds a packet (default: twice the scenario's
    /// initial retransmission timeout, so the sender has resent it).
    #[arg(long, value_parser = crate::sim_time)]
    pub delay: Option<udrma_proto::Duration>,
    /// Threads running schedules (the output is the same for any count;
    /// default: the machine's cores).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: Option<u16>,
    /// Refuse to start when the estimated number of schedules is larger.
    #[arg(long, default_value_t = 2_000_000, allow_negative_numbers = true)]
    pub max_schedules: u64,
    /// Where to write `<name>-counterexample.toml`.
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Seed (default: the file's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also hand the counterexample to `udrma shrink` (fewer or smaller
    /// workloads while it still fails) and write
    /// `<name>-counterexample-shrunk.toml`.
    #[arg(long)]
    pub shrink: bool,
    /// Search one share of the schedules, `I/N` (shard I of N, from 0):
    /// those whose first fault is on packet i of the fault-free run with
    /// i mod N = I. Writes `<name>-check-shard-I-of-N.json` in `--out`
    /// for `--merge`.
    #[arg(long, conflicts_with_all = ["merge", "shrink"])]
    pub shard: Option<Shard>,
    /// Add up the shard files of one search (every shard, each once) and
    /// report what one process would have: its counts, its smallest
    /// counterexample (written to `--out`). The bound and the seed come
    /// from the shards.
    #[arg(long, num_args = 1.., conflicts_with_all = ["faults", "kinds", "delay", "seed", "max_schedules"])]
    pub merge: Vec<PathBuf>,
    /// A fast first look, and an estimate of what state merging could
    /// save: skip a run's children where its fault-free future (the
    /// packets it goes on to send, at the same gaps) meets an earlier
    /// run's. A violation it finds is real (run and written out to
    /// replay), but may not be the smallest; a pass is not a proof. One
    /// process only: not with --shard or --merge.
    #[arg(long, conflicts_with_all = ["shard", "merge"])]
    pub merge_bound: bool,
    /// Merge states: skip a run's children where it reaches a state (the
    /// whole world's, fingerprinted before each event) that an earlier
    /// run reached with at least as many faults left. Sound: the same
    /// verdict and smallest counterexample as the plain search. With
    /// --shard, each shard merges the states it saw: the shards' merge
    /// gives the same verdict and counterexample, and runs more
    /// schedules in all than one process would (a --merge takes it from
    /// the shard files).
    #[arg(long, conflicts_with = "merge_bound")]
    pub merge_states: bool,
}

/// Runs `udrma check`: read the file (and the shards, for a merge), set
/// up the search (`prepare`), run the fault-free scenario, bound and
/// estimate, search or merge (`search_or_merge`), then report
/// (`conclude`).
pub fn check(mut args: CheckArgs) -> anyhow::Result<ExitCode> {
    let start = Wall::now();
    let (text, doc) = crate::sweep::read_doc(&args.file)?;
    let sha256 = sha256_hex(text.as_bytes());
    // A merge searches nothing: the bound and the seed are the shards'.
    let merged = if args.merge.is_empty() {
        None
    } else if args.merge_states {
        return Err(BadInput(
            "--merge-states goes with each --shard; --merge reads it from the shard files: leave it out here".into(),
        )
        .into());
    } else {
        Some(shard::adopt(&mut args, &sha256)?)
    };
    let asked = shard::Asked {
        file: &args.file,
        sha256,
        seed_given: merged
            .as_ref()
            .map_or(args.seed.is_some(), |s| s[0].seed_given),
        delay_given: merged
            .as_ref()
            .map_or(args.delay.is_some(), |s| s[0].delay_given),
        seed: 0,
        zero_trace: String::new(),
    };
    let Prepared {
        base,
        kinds,
        delay,
        dropped_rules,
    } = prepare(&args)?;
    let seed = base.seed;
    let asked = shard::Asked { seed, ..asked };
    let (zero, zero_wall) = fault_free(&base, merged.as_deref(), &args.file)?;
    let asked = shard::Asked {
        zero_trace: zero.trace_hash.clone(),
        ..asked
    };
    let bound = enumerate::Bound {
        faults: args.faults as usize,
        kinds,
        delay_ns: delay.as_ps().div_ceil(1000).max(1),
        merge_bound: args.merge_bound,
        merge_states: args.merge_states,
    };
    // A shard searches about its share.
    let estimate = enumerate::estimate(zero.egress.len(), bound.kinds.len(), bound.faults)
        / args.shard.map_or(1, |s| u128::from(s.count));
    let head = report::Head {
        file: &args.file,
        name: &base.scenario.file.name,
        seed,
        bound: &bound,
        dropped_rules,
        packets: zero.egress.len(),
        links: zero
            .egress
            .iter()
            .map(|e| e.link)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        estimate,
        zero: &zero,
    };
    if estimate > u128::from(args.max_schedules) {
        return Err(BadInput(format!(
            "{}: about {estimate} schedules{} within {} faults of {} kinds over the {} packets of its fault-free run, more than --max-schedules {}; use fewer operations or smaller ones, a smaller --faults, fewer --kinds, {}or raise --max-schedules",
            args.file.display(),
            args.shard.map_or(String::new(), |s| format!(" (shard {s}'s share of about {})", estimate * u128::from(s.count))),
            bound.faults,
            bound.kinds.len(),
            zero.egress.len(),
            args.max_schedules,
            if args.shard.is_some() { "more shards, " } else { "" },
        ))
        .into());
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );
    report::print_head(&mut out, &head)?;
    if merged.is_none() {
        let how = (bound.merge_bound.then_some("--merge-bound"))
            .or(bound.merge_states.then_some("--merge-states"));
        report::print_estimate(&mut out, estimate, zero_wall, jobs, how)?;
    }
    let searched = Searched {
        base: &base,
        zero: &zero,
        bound: &bound,
        estimate,
    };
    let found = search_or_merge(&mut out, &searched, merged.as_deref(), args.shard, jobs)?;
    let mut wall = start.elapsed().as_secs_f64();
    if let Some(shards) = &merged {
        // The search's time is the shards': their walls, added up, and
        // their count.
        wall = shard::wall_s(shards);
        jobs = shards.len();
        report::print_merged(&mut out, jobs, wall)?;
    }
    let workers = if merged.is_some() { "shard" } else { "job" };
    report::print_search(&mut out, &found, &bound, wall, (jobs, workers))?;
    if let Some(s) = args.shard {
        let to = shard::path(&args.out, &base.scenario.file.name, s);
        shard::write(&shard::record(&asked, &bound, s, &found, wall), &to)?;
        return report::print_shard(&mut out, &found, &bound, s, &to);
    }
    conclude(&mut out, &args, &asked, &doc, &searched, &found)
}

/// What a search starts from, once the file is read and its flags checked.
struct Prepared {
    /// The scenario without its fault rules, the seed, the link names.
    base: schedule::Base,
    /// The fault kinds, sorted, each once.
    kinds: Vec<Kind>,
    /// How long `delay` holds a packet.
    delay: udrma_proto::Duration,
    /// How many `[[fault]]` rules of the file were left out.
    dropped_rules: usize,
}

/// Loads the scenario (which refuses a file with no workload), refuses
/// what cannot be searched (collective workloads, a zero `--delay`,
/// delays that reach the time limit), and drops its fault rules.
fn prepare(args: &CheckArgs) -> anyhow::Result<Prepared> {
    let mut kinds = args.kinds.clone();
    kinds.sort();
    kinds.dedup();
    let mut sc: Scenario = crate::load(&args.file)?;
    if sc
        .file
        .workloads
        .iter()
        .any(|w| w.kind == udrma_scenarios::file::schema::WorkloadKind::Collective)
    {
        // A collective study may run a second fabric (`method = "both"`)
        // whose packets the fault rules would also count.
        return Err(BadInput(format!(
            "{}: udrma check takes RDMA, messaging and non-contiguous workloads, not collective ones (a study may run on two fabrics, and a rule's n-th packet would be counted in both)",
            args.file.display()
        ))
        .into());
    }
    let dropped_rules = sc.file.faults.len();
    sc.file.faults.clear();
    let resolved = udrma_scenarios::plan::resolved::resolve(&sc, sc.file.seed)
        .map_err(|e| BadInput(e.to_string()))?;
    let link_names = resolved
        .topology
        .link_names()
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    let delay = match args.delay {
        Some(d) if d == udrma_proto::Duration::ZERO => {
            return Err(BadInput(
                "--delay 0: a delayed packet must be held for some time (at least 1ns)".into(),
            )
            .into());
        }
        Some(d) => d,
        None => {
            let nic = &resolved.nic;
            nic.rto_initial + nic.rto_initial
        }
    };
    // Delays that add up to the time limit fail liveness by construction.
    let limit = sc.file.time_limit.0;
    if args.faults > 0
        && kinds.contains(&Kind::Delay)
        && delay.as_ps().saturating_mul(u64::from(args.faults)) >= limit.as_ps()
    {
        return Err(BadInput(format!(
            "{}: --faults {} delays of {} ns each reach the scenario's time_limit ({} ns): such runs would fail liveness by construction; use a shorter --delay or raise time_limit",
            args.file.display(),
            args.faults,
            delay.as_ps() / 1000,
            limit.as_ps() / 1000
        ))
        .into());
    }
    let seed = args.seed.unwrap_or(sc.file.seed);
    let plan = udrma_scenarios::plan(&sc, seed, udrma_scenarios::BackendKind::Sim)
        .map_err(|e| BadInput(e.to_string()))?;
    Ok(Prepared {
        base: schedule::Base {
            plan,
            fingerprints: args.merge_states,
            scenario: sc,
            seed,
            link_names,
        },
        kinds,
        delay,
        dropped_rules,
    })
}

/// The fault-free run, and the wall time of a plain one (the estimate's
/// pace); for a merge, refused if its trace is not the shards'.
fn fault_free(
    base: &schedule::Base,
    merged: Option<&[shard::ShardFile]>,
    file: &std::path::Path,
) -> anyhow::Result<(schedule::Outcome, std::time::Duration)> {
    let zero = base.run(&[]).map_err(BadInput)?;
    // The estimate is at the pace of a plain run (no fingerprints: most
    // runs, the leaves, take none), and of a warm one: the first run in a
    // process pays for pages no later run touches anew, up to a hundred
    // times a run. Two more runs, the faster kept.
    let mut zero_wall = std::time::Duration::MAX;
    for _ in 0..2 {
        let plain = Wall::now();
        base.run_with(&[], false).map_err(BadInput)?;
        zero_wall = zero_wall.min(plain.elapsed());
    }
    if let Some(f) = merged.map(|s| &s[0]) {
        if f.zero_trace != zero.trace_hash {
            return Err(BadInput(format!(
                "{}: its fault-free run here has trace {}, the shards' {}: they ran another build of udrma",
                file.display(),
                zero.trace_hash,
                f.zero_trace
            ))
            .into());
        }
    }
    Ok((zero, zero_wall))
}

/// One search's fixed parts.
struct Searched<'a> {
    base: &'a schedule::Base,
    zero: &'a schedule::Outcome,
    bound: &'a enumerate::Bound,
    /// About how many schedules (for the progress bar).
    estimate: u128,
}

/// Runs the search on `jobs` threads, each number of faults printed as it
/// finishes, with a progress bar on stderr (drawn only on a terminal);
/// or, with `merged`, adds up the shards' instead.
fn search_or_merge(
    out: &mut impl Write,
    s: &Searched<'_>,
    merged: Option<&[shard::ShardFile]>,
    share: Option<Shard>,
    jobs: usize,
) -> anyhow::Result<enumerate::Search> {
    if let Some(shards) = merged {
        let found = shard::merge(shards, s.base, s.zero, s.bound).map_err(BadInput)?;
        for (i, l) in found.levels.iter().enumerate() {
            report::print_level(out, i, l, s.bound.merge_states)?;
        }
        return Ok(found);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start {jobs} threads: {e}"))?;
    // Ctrl-C: the search finishes the runs under way and prints what it
    // covered.
    let stop = crate::interrupt::flag();
    let bar = ProgressBar::new(u64::try_from(s.estimate).unwrap_or(u64::MAX));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/~{len} schedules ({per_sec}, about {eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut printed = Ok(());
    let found = enumerate::search(
        s.base,
        s.zero.clone(),
        s.bound,
        share,
        &pool,
        &stop,
        &mut |p| match p {
            enumerate::Progress::Ran(n) => bar.inc(n),
            enumerate::Progress::Level(i, l) => {
                if printed.is_ok() {
                    printed = bar.suspend(|| report::print_level(out, i, l, s.bound.merge_states));
                }
            }
        },
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    bar.finish_and_clear();
    printed?;
    Ok(found)
}

/// The verdict of a whole search: interrupted (130), no violation (0),
/// or the smallest counterexample, written out and shrunk if asked (1).
fn conclude(
    out: &mut impl Write,
    args: &CheckArgs,
    asked: &shard::Asked<'_>,
    doc: &toml::Table,
    s: &Searched<'_>,
    found: &enumerate::Search,
) -> anyhow::Result<ExitCode> {
    let bound = s.bound;
    if found.interrupted {
        report::print_interrupted(out, found, bound)?;
        return Ok(ExitCode::from(130));
    }
    let Some((schedule, outcome)) = &found.first else {
        if bound.merge_bound {
            writeln!(
                out,
                "result      no violation in the schedules that ran (--merge-bound: not a proof within {} faults)",
                bound.faults
            )?;
        } else {
            writeln!(
                out,
                "result      no violation within {} faults",
                bound.faults
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    report::print_violation(out, found, schedule, outcome, &s.base.link_names)?;
    let seed = s.base.seed;
    let flags = search_flags(asked, seed, bound);
    let written = counterexample::write(
        &args.file, doc, s.base, schedule, outcome, &args.out, bound, &flags,
    )?;
    report::print_replay(out, &written)?;
    if args.shrink {
        shrink_counterexample(out, &written.path, seed)?;
    }
    Ok(ExitCode::from(1))
}

/// The flags that change the search, so the counterexample's header
/// command searches again as this one did.
fn search_flags(asked: &shard::Asked, seed: u64, bound: &enumerate::Bound) -> String {
    let mut flags = String::new();
    if asked.seed_given {
        flags.push_str(&format!(" --seed {seed}"));
    }
    if asked.delay_given {
        flags.push_str(&format!(" --delay {}ns", bound.delay_ns));
    }
    if bound.merge_bound {
        flags.push_str(" --merge-bound");
    }
    flags
}

/// `--shrink`: hands the counterexample at `path` to `udrma shrink`,
/// writing `<stem>-shrunk.toml` beside it.
fn shrink_counterexample(
    out: &mut dyn Write,
    path: &std::path::Path,
    seed: u64,
) -> anyhow::Result<()> {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let to = path.with_file_name(format!("{stem}-shrunk.toml"));
    write!(out, "shrink      ")?;
    out.flush()?;
    crate::shrink::shrink(path, seed, &to)?;
    Ok(())
}

/// The scenario document with `faults` as its only `[[fault]]` rules.
fn with_faults(doc: &toml::Table, tables: Vec<toml::Table>) -> toml::Table {
    let mut d = doc.clone();
    d.remove("fault");
    if !tables.is_empty() {
        d.insert(
            "fault".into(),
            Value::Array(tables.into_iter().map(Value::Table).collect()),
        );
    }
    d
}
