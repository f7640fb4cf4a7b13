//! The ranks of MPI's world communicator (rsmpi over the system's MPI),
//! behind the `mpi` feature.

use mpi::datatype::{Partition, PartitionMut};
use mpi::traits::*;

use udrma_fabric::Packed;

use crate::BadInput;

/// This process's rank in MPI's world communicator.
pub(crate) struct Mpi {
    world: mpi::topology::SimpleCommunicator,
    rank: usize,
    size: usize,
    /// The last message sent, its room kept to receive the next one in
    /// while it is small (`Packed::spare`): fresh room each window cost
    /// its pages' faults.
    spare: Vec<u8>,
}

std::thread_local! {
    /// MPI itself, finalised by [`finish`] once the process has said what
    /// it has to say: a rank that finalised and exited while rank 0 was
    /// still about to print the error they all met could have the
    /// launcher (Open MPI's) stop rank 0 before it printed.
    static UNIVERSE: std::cell::RefCell<Option<mpi::environment::Universe>> =
        const { std::cell::RefCell::new(None) };
}

/// How long a rank waits in `MPI_Init` for the others before it gives
/// up, in seconds, unless `UDRMA_MPI_INIT_SECONDS` says otherwise.
const INIT_PATIENCE_S: u64 = 30;

/// How long to wait in `MPI_Init`: `UDRMA_MPI_INIT_SECONDS`, or
/// [`INIT_PATIENCE_S`]. A value that is not a whole number of seconds
/// from 1 up is refused, said by the first process only (MPI has not
/// started, so the launcher's word on which rank this is is taken).
fn init_patience() -> anyhow::Result<u64> {
    let Ok(s) = std::env::var("UDRMA_MPI_INIT_SECONDS") else {
        return Ok(INIT_PATIENCE_S);
    };
    match s.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ if super::launched_rank().is_some_and(|r| r != 0) => Err(super::Quiet.into()),
        _ => Err(BadInput(format!(
            "UDRMA_MPI_INIT_SECONDS={s}: not a whole number of seconds from 1 up"
        ))
        .into()),
    }
}

impl Mpi {
    pub(crate) fn init() -> anyhow::Result<Mpi> {
        // A process the launcher started that never joins (a build
        // without the `mpi` feature refuses and exits) leaves the others
        // waiting in MPI_Init for good: give up after a while, saying why.
        let patience = init_patience()?;
        let (joined, wait) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let waited = wait.recv_timeout(std::time::Duration::from_secs(patience));
            if waited == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                eprintln!(
                    "error: MPI_Init has not returned in {patience} s: some process the launcher started has not joined (a udrma built without the `mpi` feature refuses and exits, and every rank must run the same build; UDRMA_MPI_INIT_SECONDS waits longer; docs/cluster.md, \"What is refused, and how\")"
                );
                std::process::exit(2);
            }
        });
        let universe = mpi::initialize();
        let _ = joined.send(());
        let universe = universe
            .ok_or_else(|| BadInput("MPI could not be initialised (or was already)".into()))?;
        let world = universe.world();
        UNIVERSE.with(|u| *u.borrow_mut() = Some(universe));
        Ok(Mpi {
            rank: world.rank() as usize,
            size: world.size() as usize,
            world,
            spare: Vec::new(),
        })
    }
}

/// Finalises MPI, if this process started it (after its last word: every
/// rank waits there for the others).
pub(crate) fn finish() {
    if let Ok(Some(u)) = UNIVERSE.try_with(|u| u.borrow_mut().take()) {
        drop(u);
    }
}

impl udrma_fabric::Ranks for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn exchange(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
        if out.len() != self.size {
            return Err(format!("{} messages for {} ranks", out.len(), self.size));
        }
        Ok(self.exchange_packed(Packed::join(out))?.split())
    }

    /// One `MPI_Alltoall` of the lengths, then one `MPI_Alltoallv` from
    /// the caller's buffer into one received buffer: no copy either way.
    fn exchange_packed(&mut self, out: Packed) -> Result<Packed, String> {
        if out.lens.len() != self.size {
            return Err(format!(
                "{} messages for {} ranks",
                out.lens.len(),
                self.size
            ));
        }
        let count = |n: usize| {
            i32::try_from(n).map_err(|_| format!("a message of {n} bytes is over MPI's 2 GiB"))
        };
        let counts = out
            .lens
            .iter()
            .map(|&n| count(n))
            .collect::<Result<Vec<i32>, _>>()?;
        let mut theirs = vec![0i32; self.size];
        self.world.all_to_all_into(&counts[..], &mut theirs[..]);
        let at = |c: &[i32]| -> Result<Vec<i32>, String> {
            let mut sum = 0usize;
            c.iter()
                .map(|&n| {
                    let here = count(sum)?;
                    sum += n as usize;
                    count(sum)?;
                    Ok(here)
                })
                .collect()
        };
        let (ours_at, theirs_at) = (at(&counts)?, at(&theirs)?);
        let lens: Vec<usize> = theirs.iter().map(|&n| n as usize).collect();
        let total: usize = lens.iter().sum();
        // Never an empty buffer: its address would be 1, which Open MPI
        // takes for `MPI_IN_PLACE` and refuses (MPI_ERR_ARG).
        let mut recv = std::mem::take(&mut self.spare);
        recv.clear();
        recv.resize(total.max(1), 0);
        let pad = [0u8; 1];
        let send: &[u8] = if out.bytes.is_empty() {
            &pad
        } else {
            &out.bytes
        };
        {
            let s = Partition::new(send, &counts[..], &ours_at[..]);
            let mut r = PartitionMut::new(&mut recv[..], &theirs[..], &theirs_at[..]);
            self.world.all_to_all_varcount_into(&s, &mut r);
        }
        recv.truncate(total);
        self.spare = udrma_fabric::Packed::spare(out.bytes);
        Ok(Packed { bytes: recv, lens })
    }
}
