//! Ranks: one run spread over the processes an MPI launcher started
//! (`mpiexec -n N`, Slurm's `srun -n N`), each running its shard of the
//! world (`udrma_fabric::RankedWorld`); docs/cluster.md.
//!
//! A launcher is recognised by what it puts in each process's
//! environment; only then is MPI started. A binary built without the
//! `mpi` feature that finds itself one of several processes refuses to
//! run, rather than run the whole scenario once per process.
//!
//! Children: `mpi` (MPI's ranks, with the feature) and `run` (`udrma run
//! FILE` on ranks).

use std::fmt::Write as _;

use udrma_fabric::ShardError;

use crate::BadInput;

/// Environment variables a launcher sets to the count of processes it
/// started: MPICH's Hydra and Slurm's PMI-2 set `PMI_SIZE`, Open MPI
/// `OMPI_COMM_WORLD_SIZE`. (A PMIx launcher sets `PMIX_RANK`, and MPI
/// itself then says how many.)
const SIZE_VARS: [&str; 2] = ["PMI_SIZE", "OMPI_COMM_WORLD_SIZE"];

/// How many processes the launcher says it started, if this process was
/// started by one.
pub(crate) fn launched() -> Option<usize> {
    launcher_says(&SIZE_VARS).or_else(|| std::env::var_os("PMIX_RANK").map(|_| 0))
}

/// Environment variables a launcher sets to this process's rank.
#[cfg(feature = "mpi")]
const RANK_VARS: [&str; 2] = ["PMI_RANK", "OMPI_COMM_WORLD_RANK"];

/// This process's rank, as the launcher says before MPI starts.
#[cfg(feature = "mpi")]
fn launched_rank() -> Option<usize> {
    launcher_says(&RANK_VARS)
}

/// The number the first of `vars` that is set holds.
fn launcher_says(vars: &[&str]) -> Option<usize> {
    (vars.iter())
        .find_map(|v| std::env::var(v).ok())
        .and_then(|s| s.trim().parse().ok())
}

/// What identifies this run for the ranks to compare: `what` (the
/// command, the file's text, the seed) and this build (the version and
/// a checksum of the executable, so that ranks started from different
/// builds are told apart).
pub(crate) fn identity(what: &str) -> String {
    // Read a block at a time: the executable (with its debug lines) is
    // tens of MiB, which would count in every rank's peak memory.
    let exe = std::env::current_exe()
        .and_then(std::fs::File::open)
        .and_then(|mut f| {
            let mut sum = crc32fast::Hasher::new();
            let mut block = vec![0u8; 1 << 16];
            loop {
                match std::io::Read::read(&mut f, &mut block)? {
                    0 => return Ok(sum.finalize()),
                    n => sum.update(&block[..n]),
                }
            }
        });
    let mut id = format!("udrma {}", env!("CARGO_PKG_VERSION"));
    match exe {
        Ok(sum) => {
            let _ = write!(id, " (executable crc32 {sum:08x})");
        }
        Err(e) => {
            let _ = write!(id, " (executable unreadable: {e})");
        }
    }
    let _ = write!(id, ", {what}");
    id
}

/// The ranks this process is one of, when a launcher started it; `None`
/// when it runs alone. Without the `mpi` feature, being one of several
/// processes is refused.
pub(crate) fn join() -> anyhow::Result<Option<Mpi>> {
    match launched() {
        None => match slurm_tasks() {
            Some(n) if n > 1 => Err(BadInput(format!(
                "srun started {n} tasks without an MPI plugin, so each would run the whole thing alone: start them with `srun --mpi=pmi2 -n {n}` (MPICH; `--mpi=pmix` for Open MPI with PMIx), docs/cluster.md"
            ))
            .into()),
            _ => Ok(None),
        },
        Some(n) => start(n),
    }
}

/// How many tasks `srun` started in this job step, if it started this
/// process (a batch script's own shell is no step of `srun`'s).
fn slurm_tasks() -> Option<usize> {
    std::env::var("SLURM_STEP_NUM_TASKS")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(not(feature = "mpi"))]
fn start(n: usize) -> anyhow::Result<Option<Mpi>> {
    if n <= 1 {
        return Ok(None);
    }
    Err(BadInput(format!(
        "this process is one of {n} an MPI launcher started, but this udrma was built without the `mpi` feature, so each would run the whole thing: build with `cargo build --release --features mpi` (docs/cluster.md)"
    ))
    .into())
}

/// Stands in for MPI's ranks in a build without it: never made.
#[cfg(not(feature = "mpi"))]
pub(crate) enum Mpi {}

#[cfg(not(feature = "mpi"))]
impl udrma_fabric::Ranks for Mpi {
    fn rank(&self) -> usize {
        match *self {}
    }
    fn size(&self) -> usize {
        match *self {}
    }
    fn exchange(&mut self, _: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
        match *self {}
    }
}

/// An error every rank has already met alike and rank 0 reports: the
/// other ranks exit with its code, saying nothing.
#[derive(Debug)]
pub(crate) struct Quiet;

impl std::fmt::Display for Quiet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("another rank reports the error")
    }
}

impl std::error::Error for Quiet {}

/// Tells rank 0's standard error which process and host runs each rank
/// (every rank calls it together, first), so that a launcher's word on a
/// process that died (Hydra names its PID) names a rank; and refuses, at
/// every rank alike, ranks started with different commands (`command`:
/// `run` or `bench sim`), which would go on to read each other's
/// messages as their own.
pub(crate) fn roster(ranks: &mut Mpi, command: &str) -> anyhow::Result<()> {
    use udrma_fabric::Ranks;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "an unnamed host".into());
    let me = format!("{command}\npid {} on {host}", std::process::id());
    let got =
        (ranks.exchange(vec![me.into_bytes(); ranks.size()])).map_err(|e| anyhow::anyhow!(e))?;
    let said: Vec<(String, String)> = got
        .iter()
        .map(|b| {
            let s = String::from_utf8_lossy(b);
            match s.split_once('\n') {
                Some((cmd, who)) => (cmd.to_string(), who.to_string()),
                None => (String::new(), s.into_owned()),
            }
        })
        .collect();
    if ranks.rank() == 0 {
        let all: Vec<String> = (said.iter().enumerate())
            .map(|(r, (_, who))| format!("rank {r} {who}"))
            .collect();
        let n = ranks.size();
        let noun = if n == 1 { "rank" } else { "ranks" };
        eprintln!("udrma: {n} {noun}: {}", all.join(", "));
    }
    match differs(&said) {
        Some(why) => alike(ranks.rank(), &why),
        None => Ok(()),
    }
}

/// Which rank runs another command than rank 0's, by what each said
/// (its command, and where it runs).
fn differs(said: &[(String, String)]) -> Option<String> {
    let first = &said.first()?.0;
    let (r, (cmd, _)) = (said.iter().enumerate()).find(|(_, (cmd, _))| cmd != first)?;
    let name = |c: &str| {
        if c.is_empty() {
            "a command this build does not know (another build?)".to_string()
        } else {
            format!("`udrma {c}`")
        }
    };
    Some(format!(
        "rank {r} runs {}, rank 0 runs {}: start every rank with the same command",
        name(cmd),
        name(first)
    ))
}

/// Bad input every rank met alike: rank 0 (`me`) reports it, the others
/// exit with its code saying nothing.
pub(crate) fn alike<T>(me: usize, why: &str) -> anyhow::Result<T> {
    if me == 0 {
        Err(BadInput(why.to_string()).into())
    } else {
        Err(Quiet.into())
    }
}

/// What rank `me` of `size` does with a failed run: an error every rank
/// met alike (refused at the start: a difference between the ranks,
/// what a split cannot carry, a rank count out of range, a build that
/// failed) is rank 0's to report, and every rank exits with it; any
/// other ends this process at once, naming this rank, and the launcher
/// stops the others, so that none waits for it.
pub(crate) fn settle<T>(me: usize, size: usize, r: Result<T, ShardError>) -> anyhow::Result<T> {
    match r {
        Ok(x) => Ok(x),
        Err(
            e @ (ShardError::Differ(..)
            | ShardError::Started(..)
            | ShardError::Unsupported(_)
            | ShardError::Count(_)
            | ShardError::Build(_)),
        ) => alike(me, &e.to_string()),
        Err(e) => {
            eprintln!("error: rank {me} of {size}: {e}; stopping every rank");
            std::process::exit(1)
        }
    }
}

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "mpi")]
pub(crate) use self::mpi::{finish, Mpi};

/// Nothing to finalise without the `mpi` feature.
#[cfg(not(feature = "mpi"))]
pub(crate) fn finish() {}
mod run;
pub(crate) use run::run_file;

#[cfg(feature = "mpi")]
fn start(_n: usize) -> anyhow::Result<Option<Mpi>> {
    Mpi::init().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks started with different commands are told apart by the
    /// first word each says, before either reads the other's messages as
    /// its own; a rank whose word has no command is another build.
    #[test]
    fn a_rank_running_another_command_is_named() {
        let said = |cmds: &[&str]| -> Vec<(String, String)> {
            (cmds.iter())
                .map(|c| (c.to_string(), "pid 1 on vm".to_string()))
                .collect()
        };
        assert_eq!(differs(&said(&["run", "run", "run"])), None);
        assert_eq!(
            differs(&said(&["run", "run", "bench sim"])).as_deref(),
            Some("rank 2 runs `udrma bench sim`, rank 0 runs `udrma run`: start every rank with the same command")
        );
        let other = differs(&said(&["bench sim", ""])).unwrap();
        assert!(
            other.starts_with("rank 1 runs a command this build does not know"),
            "{other}"
        );
    }

    /// Two builds of the same run differ in their identities only where
    /// the caller's words differ.
    #[test]
    fn identity_names_the_build_and_the_run() {
        let a = identity("bench sim k=8 seed=1");
        let b = identity("bench sim k=8 seed=2");
        assert!(a.starts_with("udrma "), "{a}");
        assert!(a.contains("executable crc32"), "{a}");
        assert!(a.ends_with(", bench sim k=8 seed=1"), "{a}");
        assert_eq!(a.split(", ").next(), b.split(", ").next());
        assert_ne!(a, b);
    }
}
