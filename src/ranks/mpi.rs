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
    // Last: MPI is finalised when it drops.
    _universe: mpi::environment::Universe,
}

impl Mpi {
    pub(crate) fn init() -> Result<Mpi, BadInput> {
        let universe = mpi::initialize()
            .ok_or_else(|| BadInput("MPI could not be initialised (or was already)".into()))?;
        let world = universe.world();
        Ok(Mpi {
            rank: world.rank() as usize,
            size: world.size() as usize,
            world,
            _universe: universe,
        })
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
        let mut recv = vec![0u8; lens.iter().sum()];
        {
            let s = Partition::new(&out.bytes[..], &counts[..], &ours_at[..]);
            let mut r = PartitionMut::new(&mut recv[..], &theirs[..], &theirs_at[..]);
            self.world.all_to_all_varcount_into(&s, &mut r);
        }
        Ok(Packed { bytes: recv, lens })
    }
}
