//! The `udrma` command-line tool.
//!
//! Exit codes: 0 when every check passes (or the command succeeded), 1 when
//! a check fails, 2 on bad input (a file that does not parse, a wrong flag).
//!
//! Children not named above:
//! - `run_cmd`: `udrma run`: its flags, progress on a terminal, and the
//!   partial summary on Ctrl-C
//! - `interrupt`: Ctrl-C for `udrma run` and `udrma check` (the first
//!   stops at the next boundary, the second exits with 130)
//! - `output`: the files a run writes, moved onto their paths only when
//!   the run ended, so that a refused run leaves them as they were
//! - `bench_cmd`: `udrma bench sim`
//! - `ranks`: one run over MPI ranks (`mpiexec -n N udrma ...`)
//! - `bridge_cmd`: `udrma bridge serve/put/get` and `udrma perf latency/bandwidth`
//! - `reproduce`: `udrma reproduce`
//! - `shrink`: `udrma shrink`: reduce a failing case to a smaller scenario that still fails the same check
//! - `slurm`: `udrma slurm`: a sweep as a Slurm job array
//! - `sweep`: `udrma sweep`

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant as Wall;

use anyhow::Context;
use clap::{Parser, Subcommand};
use udrma::decode::{decode_capture_with, DecodeError};
use udrma::proto;
use udrma_scenarios::{RunOptions, Scenario, ScenarioError};

mod bench_cmd;
mod bridge_cmd;
mod check;

/// mimalloc: measured as fast as the hand-written huge-page heap it
/// replaced at k=16 and faster at k=32 (docs/benchmarks.md, "The
/// allocator"); it asks the kernel for transparent huge pages itself.
/// No outcome depends on it: no address reaches a result or a hash.
#[global_allocator]
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
mod interrupt;
mod output;
mod ranks;
mod reproduce;
mod run_cmd;
mod shrink;
mod slurm;
mod sweep;

use run_cmd::{run, LadderArgs, RunFlags};
use sweep::plan;

/// udrma: a deterministic testbed for reliable, connectionless RDMA over UDP.
///
/// With no command, runs the built-in demo scenario and prints its summary.
#[derive(Debug, Parser)]
#[command(name = "udrma", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario file and check the invariants of docs/design.md §8
    /// (exit 1 if a check fails).
    ///
    /// On a terminal, a run on the simulated fabric in one thread shows
    /// its progress on stderr once it has gone on for a second: simulated
    /// time reached of the time limit, events and their rate, packets
    /// sent (not with --json, and never on a pipe). Ctrl-C stops it
    /// there: the summary of the run so far is printed under a line
    /// saying where it was interrupted (with --json, that line goes to
    /// stderr), and the exit status is 130; a second Ctrl-C exits at
    /// once. The run is the same watched or not (its trace hash and
    /// report).
    Run {
        /// The scenario (TOML).
        file: PathBuf,
        /// Seed (default: the file's).
        #[arg(long)]
        seed: Option<u64>,
        /// Print one JSON object instead of the summary.
        #[arg(long)]
        json: bool,
        /// Write a nanosecond pcap of the run.
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Links to capture, comma-separated (default: all).
        #[arg(long, value_delimiter = ',')]
        pcap_links: Vec<String>,
        /// Write the trace (postcard; a .jsonl name writes JSON lines).
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Draw a ladder (sequence) diagram as SVG.
        #[arg(long)]
        ladder: Option<PathBuf>,
        #[command(flatten)]
        timeline: run_cmd::TimelineArgs,
        /// The two hosts of the ladder, as `h0,h1` (default: the first
        /// workload's source and destination).
        #[arg(long, value_delimiter = ',')]
        ladder_hosts: Vec<String>,
        /// Draw the packets sent from this simulated time on (`300us`).
        #[arg(long, value_parser = sim_time, default_value = "0ns")]
        ladder_from: udrma_proto::Duration,
        /// ... and before this time (default: to the end).
        #[arg(long, value_parser = sim_time)]
        ladder_until: Option<udrma_proto::Duration>,
        /// Draw at most this many packets (the first in the window).
        #[arg(long, default_value_t = udrma_scenarios::Ladder::DEFAULT_MAX)]
        ladder_max: usize,
        /// Where the packets go: `sim` (the simulated fabric) or `udp` (one
        /// real UDP socket per host on loopback, in real time, with the
        /// scenario's fault rules on each host's egress).
        #[arg(long, value_enum, default_value_t = BackendArg::Sim)]
        backend: BackendArg,
        /// KEY=VALUE: change one setting of the file before the run (KEY is
        /// a dotted path, as for `udrma sweep`: nic.cc, fault.loss.p,
        /// workload.0.size); repeat for several.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
        /// Split the simulated run across N threads (1 to 64): it runs in
        /// lookahead windows, as `order = "windows"`, and gives the same
        /// report and trace hash as one thread in windows. RDMA workloads
        /// only; no fault rules with memory (correlation, Gilbert-Elliott,
        /// n-th packet, reorder gap), captures, traces or ladders.
        ///
        /// Under an MPI launcher (`mpiexec -n N`, `srun --mpi=pmi2 -n N`;
        /// a build with the `mpi` feature) the run is split across the N
        /// ranks instead, with the report, JSON and trace hash of
        /// `--threads 1`, on the same terms; rank 0 prints it
        /// (docs/cluster.md).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
        threads: Option<u16>,
    },
    /// Run one host's part of a scenario over real UDP, in this process;
    /// the other hosts run as their own `udrma host` processes (found
    /// in-band with HELLO). Exit 0 when this host's checks pass, 1 when one
    /// fails or a peer is unreachable, 2 on bad input.
    Host {
        /// The scenario (TOML); every process runs the same file.
        file: PathBuf,
        /// The host this process runs (`h1`).
        #[arg(long = "as")]
        host: String,
        /// This host's UDP address.
        #[arg(long, value_parser = bridge_cmd::host_port)]
        bind: std::net::SocketAddr,
        /// Another host and its address, as `h0=10.0.0.1:18791` (one per
        /// other host of the scenario).
        #[arg(long = "peer", value_parser = peer_arg)]
        peers: Vec<(String, std::net::SocketAddr)>,
        /// Seed (default: the file's; every process must use the same).
        #[arg(long)]
        seed: Option<u64>,
        /// Print one JSON object instead of the summary.
        #[arg(long)]
        json: bool,
    },
    /// Run the cross product of settings × seeds in parallel.
    Sweep {
        /// The scenario (TOML).
        file: PathBuf,
        /// KEY=V1,V2,... (KEY is a dotted path: fault.loss.p, nic.max_retries,
        /// workload.0.size); repeat for a cross product.
        #[arg(long = "set", required = true)]
        sets: Vec<String>,
        /// Seeds per setting (the file's seed, then the next ones); at
        /// least 1.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        seeds: u32,
        /// Write one CSV row per run (for a collective by MPI's
        /// algorithms, one per size: OSU's and NCCL-tests' columns).
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Write the CSV's rows as a JSON array of objects.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Plot goodput, p99 completion and retransmits against the first
        /// setting (SVG); for a collective study, host and NIC completion;
        /// for a collective by MPI's algorithms, OSU's average latency
        /// against size.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Run only the I-th of N balanced, stable slices of the runs (I
        /// from 0) and write a part file for `udrma merge`. Without it, a
        /// Slurm array task (SLURM_ARRAY_TASK_ID and _COUNT) or a
        /// Kubernetes Indexed Job (JOB_COMPLETION_INDEX, with --shards)
        /// names the slice.
        #[arg(long, value_name = "I/N")]
        shard: Option<plan::Shard>,
        /// The number of shards, for JOB_COMPLETION_INDEX.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        shards: Option<u32>,
        /// Where a shard writes its part files
        /// (part-IIII-of-NNNN.jsonl and .csv).
        #[arg(long, value_name = "DIR", default_value = "sweep-parts")]
        parts: PathBuf,
    },
    /// Merge the part files of a sharded sweep into the CSV, table and plot
    /// one `udrma sweep` of the same runs writes; every run must be there
    /// exactly once, from one scenario file and one udrma version.
    Merge {
        /// Part files (*.jsonl), or directories of them.
        #[arg(required = true)]
        parts: Vec<PathBuf>,
        /// Write one CSV row per run (per size for an MPI collective).
        #[arg(long)]
        csv: Option<PathBuf>,
        /// Write the CSV's rows as a JSON array of objects.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Plot against the first setting (SVG), as `udrma sweep --plot`.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Run a sweep as a Slurm job array: write the sbatch script, submit
    /// it, and collect the shards.
    Slurm {
        #[command(subcommand)]
        what: slurm::SlurmCmd,
    },
    /// Explore every placement of up to K faults (drop, duplicate, delay,
    /// corrupt, reorder) over the packets of a scenario's run, on the real
    /// engine; write the smallest failing schedule as a scenario file
    /// (docs/check.md). Exit 0 when none fails, 1 when one does, 2 on bad
    /// input, 130 when interrupted.
    Check(check::CheckArgs),
    /// Reduce a failing case to a minimal scenario that still fails.
    Shrink {
        /// The scenario (TOML).
        file: PathBuf,
        /// Seed of the failing case.
        #[arg(long)]
        seed: u64,
        /// Where to write the minimal scenario.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Rerun the published results udrma models (MyVIA, MVICH, the
    /// receive-registry patent, the non-contiguous study, the
    /// NIC-offloaded reduction, IRN, MPI's collective algorithms against
    /// their α-β-γ cost) from the shipped
    /// scenario files and print ours beside each published figure with the
    /// ratio. Exit 0 when every trend holds within its stated tolerance, 1
    /// otherwise.
    Reproduce {
        /// Also write the results as Markdown (docs/reproduce.md is made
        /// this way).
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// Also write the plots (SVG) into this directory (docs/img).
        #[arg(long)]
        plots: Option<PathBuf>,
    },
    /// Check a scenario file without running it, and print it as it
    /// would run: every key with the value used, each the file leaves out
    /// marked `# default` or `# profile NAME`, as TOML that runs the same
    /// when pasted back (exit 2 on bad input, as `run`).
    Validate {
        /// The scenario (TOML).
        file: PathBuf,
        /// Seed (default: the file's; the flows a seed draws are checked).
        #[arg(long)]
        seed: Option<u64>,
        /// KEY=VALUE: change one setting first, as for `udrma run`.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        sets: Vec<String>,
    },
    /// Re-run one case and print its trace hash.
    Replay {
        /// The scenario (TOML).
        file: PathBuf,
        /// Seed (default: the file's `seed`).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
    /// Print one line per packet of a pcap capture (time, src→dst, kind,
    /// message id, segment i/n, op number, flags, payload length), and
    /// "BAD: <reason>" for frames that are not valid udrma packets.
    Decode {
        /// The capture (Ethernet link type; nanosecond or microsecond pcap).
        file: PathBuf,
        /// UDP port udrma traffic uses.
        #[arg(long, default_value_t = proto::DEFAULT_UDP_PORT)]
        port: u16,
        /// Key file of the authenticated mode (`udrma bridge --key`):
        /// sealed datagrams are verified and decrypted, then decoded.
        #[arg(long)]
        key: Option<PathBuf>,
    },
    /// The same engine over real UDP sockets: serve a region, put, get.
    Bridge {
        #[command(subcommand)]
        what: bridge_cmd::Bridge,
    },
    /// OSU-style latency and bandwidth over the UDP bridge.
    Perf {
        #[command(subcommand)]
        what: bridge_cmd::Perf,
    },
    /// The built-in demo scenario (what `udrma` with no command runs).
    Demo {
        /// Print one JSON object instead of the summary.
        #[arg(long)]
        json: bool,
    },
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendArg {
    /// The simulated fabric (virtual time, deterministic).
    Sim,
    /// Real UDP sockets on loopback (real time).
    Udp,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// The standard speed shape: fat-tree permutation of 2 MB WRITEs,
    /// 100 Gb/s, 1 µs, 4000 B packets, spraying.
    Sim {
        /// Fat-tree arity (8: 128 hosts, 16: 1024 hosts).
        #[arg(long, default_value_t = 8)]
        k: u32,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Carry the flows of a connection matrix in htsim's text format
        /// (`SRC->DST id N start PS size BYTES` lines, as htsim's
        /// gen_permutation.py writes them) instead of the seed's
        /// permutation: the same traffic for a side-by-side run.
        #[arg(long, value_name = "FILE")]
        matrix: Option<PathBuf>,
        /// The order events run in: `windows` (node by node within
        /// windows as wide as the shortest link latency, the faster on
        /// large fabrics) or `time` (strictly by time, as scenarios run).
        #[arg(long, value_enum, default_value_t = Order::Windows)]
        order: Order,
        /// Split the run across this many threads, node by node (windows
        /// only; the same trace hash for any count). Under an MPI launcher
        /// (`mpiexec -n N`, `srun --mpi=pmi2 -n N`; a build with the `mpi`
        /// feature) the N ranks split it instead, and rank 0 adds a row
        /// per rank (docs/cluster.md).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        threads: u16,
    },
}

/// `udrma bench sim --order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Order {
    Time,
    Windows,
}

/// Which shard a sweep runs, if any: `--shard`, or what a batch system's
/// environment says.
fn sharding(
    shard: Option<plan::Shard>,
    shards: Option<u32>,
    parts: PathBuf,
) -> anyhow::Result<Option<sweep::Sharding>> {
    let found = match shard {
        Some(s) => {
            if let Some(n) = shards.filter(|n| *n != s.count) {
                return Err(BadInput(format!("--shards {n} disagrees with --shard {s}")).into());
            }
            Some((s, "--shard"))
        }
        None => plan::Shard::from_env(|k| std::env::var(k).ok(), shards)?,
    };
    Ok(found.map(|(shard, from)| sweep::Sharding { shard, from, parts }))
}

/// A failure that is the input's fault: exit code 2.
#[derive(Debug)]
struct BadInput(String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// `udrma sweep FILE ... | head`: `println!` panics once the reader has
/// left. That is not a failure of ours, as [`is_broken_pipe`] says for
/// errors: end quietly, with the exit code such an error gets.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    // RUST_LOG=udrma_fabric=debug shows drops and faults, =info host events;
    // every line carries the simulated time (sim_ns), not the wall clock.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .without_time()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .init();
    }
    let result = dispatch(cli.command.unwrap_or(Command::Demo { json: false }));
    let code = match result {
        Ok(code) => code,
        // `udrma decode x.pcap | head`: the reader left; not our failure.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        // Another rank reports it (`ranks::settle`).
        Err(e) if e.is::<ranks::Quiet>() => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    };
    // On MPI ranks, only once every rank has said what it had to.
    ranks::finish();
    code
}

/// Runs one subcommand.
fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run {
            file,
            seed,
            json,
            pcap,
            pcap_links,
            trace,
            ladder,
            timeline,
            ladder_hosts,
            ladder_from,
            ladder_until,
            ladder_max,
            backend,
            sets,
            threads,
        } => run(
            &file,
            RunFlags {
                sets,
                threads: threads.map(usize::from),
                seed,
                json,
                pcap,
                pcap_links,
                trace,
                timeline: timeline.timeline.map(|path| (path, timeline.timeline_max)),
                ladder: ladder.map(|path| LadderArgs {
                    path,
                    hosts: ladder_hosts,
                    from: ladder_from,
                    until: ladder_until,
                    max: ladder_max,
                }),
                backend: match backend {
                    BackendArg::Sim => udrma_scenarios::BackendKind::Sim,
                    BackendArg::Udp => udrma_scenarios::BackendKind::Udp,
                },
            },
        ),
        Command::Host {
            file,
            host,
            bind,
            peers,
            seed,
            json,
        } => run_host(
            &file,
            udrma_scenarios::HostOptions {
                seed,
                host,
                bind,
                peers,
            },
            json,
        ),
        Command::Sweep {
            file,
            sets,
            seeds,
            csv,
            json,
            plot,
            shard,
            shards,
            parts,
        } => {
            let out = sweep::output::Outputs {
                csv: csv.as_deref(),
                json: json.as_deref(),
                plot: plot.as_deref(),
            };
            sharding(shard, shards, parts).and_then(|sh| sweep::sweep(&file, &sets, seeds, sh, out))
        }
        Command::Merge {
            parts,
            csv,
            json,
            plot,
        } => {
            let out = sweep::output::Outputs {
                csv: csv.as_deref(),
                json: json.as_deref(),
                plot: plot.as_deref(),
            };
            sweep::merge::merge(&parts, out)
        }
        Command::Slurm { what } => slurm::main(what),
        Command::Check(args) => check::check(args),
        Command::Shrink { file, seed, output } => shrink::shrink(&file, seed, &output),
        Command::Replay { file, seed } => replay(&file, seed),
        Command::Validate { file, seed, sets } => validate(&file, seed, &sets),
        Command::Reproduce { markdown, plots } => {
            reproduce::main(markdown.as_deref(), plots.as_deref()).map(|ok| {
                if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            })
        }
        Command::Bench {
            what:
                Bench::Sim {
                    k,
                    seed,
                    matrix,
                    order,
                    threads,
                },
        } => bench_cmd::bench_sim(k, seed, matrix.as_deref(), order, threads.into()),
        Command::Decode { file, port, key } => decode(&file, port, key.as_deref()),
        Command::Demo { json } => demo(json),
        Command::Bridge { what } => bridge_cmd::bridge(what),
        Command::Perf { what } => bridge_cmd::perf(what),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<DecodeError>()
            .is_some_and(DecodeError::is_broken_pipe)
            || cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Most bytes a scenario file may have: a scenario is a few KiB of text
/// (a 1,024-host permutation's pairs about 30 KiB), and an endless input
/// (`/dev/zero`) must be refused, not read until memory runs out.
const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// The text of scenario file `path`, at most [`MAX_SCENARIO_BYTES`].
pub(crate) fn read_text(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let cannot = || format!("cannot read {}", path.display());
    let file = std::fs::File::open(path).with_context(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(cannot)?;
    if bytes.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(BadInput(format!(
            "{}: more than {} MiB: not a scenario file",
            path.display(),
            MAX_SCENARIO_BYTES >> 20
        ))
        .into());
    }
    String::from_utf8(bytes)
        .map_err(|e| BadInput(format!("{}: not UTF-8 text: {e}", path.display())).into())
}

fn load(path: &Path) -> anyhow::Result<Scenario> {
    let text = read_text(path)?;
    Scenario::parse(&path.display().to_string(), &text)
        .map_err(|e: ScenarioError| BadInput(e.to_string()).into())
}

/// Loads `path` with `--set KEY=VALUE` changes applied; an error names the
/// setting and the key's line in the file.
fn load_with(path: &Path, sets: &[String]) -> anyhow::Result<Scenario> {
    let mut assign = Vec::with_capacity(sets.len());
    for s in sets {
        let (k, v) = s
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| BadInput(format!("--set {s:?}: expected KEY=VALUE")))?;
        if v.contains(',') && !v.trim_start().starts_with('"') && !v.trim_start().starts_with('[') {
            return Err(BadInput(format!(
                "--set {s:?}: one value per key in `udrma run` (a list of values is for `udrma sweep`)"
            ))
            .into());
        }
        assign.push((k.trim().to_string(), v.trim().to_string()));
    }
    let (text, original) = sweep::read_doc(path)?;
    let mut doc = original.clone();
    for (k, v) in &assign {
        if let Err(message) =
            udrma_scenarios::file::edit::set(&mut doc, k, udrma_scenarios::file::edit::value(v))
        {
            return Err(BadInput(format!("{}: --set {k}={v}: {message}", path.display())).into());
        }
    }
    let name = path.display().to_string();
    Scenario::parse(&name, &udrma_scenarios::file::edit::render(&doc))
        .map_err(|_| sweep::case_error(path, &text, &original, &assign))
}

fn create(path: &Path) -> anyhow::Result<Box<dyn Write + Send>> {
    output::create(path)
}

fn execute(sc: &Scenario, opts: RunOptions, json: bool) -> anyhow::Result<ExitCode> {
    run_cmd::execute(sc, opts, json)
}

/// `h0=ADDR` (ADDR as for --peer of the bridge: an address or a name).
fn peer_arg(s: &str) -> Result<(String, std::net::SocketAddr), String> {
    let (host, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected HOST=ADDR, e.g. h0=10.0.0.1:18791"))?;
    Ok((host.trim().to_string(), bridge_cmd::host_port(addr.trim())?))
}

fn run_host(
    file: &Path,
    opts: udrma_scenarios::HostOptions,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let sc = load(file)?;
    let start = Wall::now();
    let mut report = match udrma_scenarios::run_host(&sc, &opts) {
        Ok(r) => r,
        Err(udrma_scenarios::HostError::Input(e)) => return Err(BadInput(e.to_string()).into()),
        Err(udrma_scenarios::HostError::Network(e)) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    report.set_wall(start.elapsed().as_secs_f64());
    report.notes.insert(
        0,
        format!("host {} of the scenario, at {}", opts.host, opts.bind),
    );
    print_report(&report, json)
}

fn print_report(report: &udrma_scenarios::Report, json: bool) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        serde_json::to_writer_pretty(&mut out, report).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.table())?;
    }
    out.flush()?;
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A simulated time (`300us`, `1.5ms`).
fn sim_time(s: &str) -> Result<udrma_proto::Duration, String> {
    udrma_scenarios::file::units::parse_time(s)
}

/// `udrma validate`: the file checked, and printed with every key filled in.
fn validate(file: &Path, seed: Option<u64>, sets: &[String]) -> anyhow::Result<ExitCode> {
    let sc = load_with(file, sets)?;
    let text =
        udrma_scenarios::plan::filled::filled(&sc, seed).map_err(|e| BadInput(e.to_string()))?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

fn replay(file: &Path, seed: Option<u64>) -> anyhow::Result<ExitCode> {
    let sc = load(file)?;
    let report = udrma_scenarios::run(
        &sc,
        RunOptions {
            seed,
            ..RunOptions::default()
        },
    )
    .map_err(|e| BadInput(e.to_string()))?;
    println!("{}", report.trace_hash);
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn demo(json: bool) -> anyhow::Result<ExitCode> {
    let sc =
        Scenario::parse("<demo>", udrma_scenarios::DEMO).map_err(|e| BadInput(e.to_string()))?;
    if !json {
        println!(
            "udrma demo: {}\n",
            sc.file.description.lines().next().unwrap_or(&sc.file.name)
        );
    }
    execute(&sc, RunOptions::default(), json)
}

fn decode(path: &Path, port: u16, key: Option<&Path>) -> anyhow::Result<ExitCode> {
    if path.is_dir() {
        return Err(BadInput(format!(
            "{} is a directory, not a capture file",
            path.display()
        ))
        .into());
    }
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let keys = key.map(udrma::bridge::secure::KeyRing::load).transpose()?;
    decode_capture_with(BufReader::new(file), port, keys.as_ref(), &mut out)
        .with_context(|| format!("decoding {}", path.display()))?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
