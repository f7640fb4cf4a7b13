//! The ranks of MPI's world communicator (rsmpi over the system's MPI),
//! behind the `mpi` feature.

use mpi::datatype::{Partition, PartitionMut};
use mpi::traits::*;

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
        let count = |n: usize| {
            i32::try_from(n).map_err(|_| format!("a message of {n} bytes is over MPI's 2 GiB"))
        };
        let counts = out
            .iter()
            .map(|m| count(m.len()))
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
        let send = out.concat();
        let total: usize = theirs.iter().map(|&n| n as usize).sum();
        let mut recv = vec![0u8; total];
        {
            let s = Partition::new(&send[..], &counts[..], &ours_at[..]);
            let mut r = PartitionMut::new(&mut recv[..], &theirs[..], &theirs_at[..]);
            self.world.all_to_all_varcount_into(&s, &mut r);
        }
        let mut got = Vec::with_capacity(self.size);
        let mut rest = &recv[..];
        for &n in &theirs {
            let (m, tail) = rest.split_at(n as usize);
            got.push(m.to_vec());
            rest = tail;
        }
        Ok(got)
    }
}
