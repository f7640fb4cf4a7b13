//! `algorithm = "auto"`: the algorithm MPICH 4.0.2 picks by default for
//! a blocking collective on a communicator whose ranks are each on their
//! own node, for a built-in commutative operation.
//!
//! MPICH 4.0.2 decides by a selection tree compiled into the library
//! (`maint/tuning/coll/mpir/generic.json` in its source), not by the
//! older size variables (`MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE` and the
//! like), which only its non-blocking collectives still read. The rules
//! below are that tree's, with `n` the bytes of one rank's vector
//! (allreduce, reduce, broadcast) or of one pair's block (all-to-all),
//! `total` the bytes of all ranks' blocks (allgather, reduce-scatter),
//! and `p'` the largest power of two not above `p`. Where its device
//! layer could override the choice, it does not on such a communicator:
//! every collective's composition there forwards to these rules.

use super::{pof2, Algorithm, Collective};

/// The algorithm MPICH 4.0.2 picks for `collective` over `p` ranks with
/// `count` elements of `elem` bytes (as [`super::Spec::count`] says).
pub fn choose(collective: Collective, p: u32, count: u64, elem: u64) -> Algorithm {
    use Algorithm::*;
    let n = count * elem;
    let total = n * u64::from(p);
    let pof2 = u64::from(pof2(p.max(1)));
    match collective {
        // Recursive doubling up to 8 bytes, and below `p'` elements
        // (Rabenseifner cannot cut fewer); Rabenseifner above.
        Collective::Allreduce if n <= 8 || count < pof2 => RecursiveDoubling,
        Collective::Allreduce => Rabenseifner,
        // Binomial up to 2,048 bytes and below `p'` elements.
        Collective::Reduce if n <= 2048 || count < pof2 => Binomial,
        Collective::Reduce => ReduceScatterGather,
        // Binomial below 8 ranks or up to 12,288 bytes; then, on a power
        // of two, recursive doubling up to 524,288 bytes; else the ring.
        Collective::Broadcast if p < 8 || n <= 12288 => Binomial,
        Collective::Broadcast if p.is_power_of_two() && n <= 524_288 => ScatterDoublingAllgather,
        Collective::Broadcast => ScatterRingAllgather,
        // Recursive doubling (a power of two) below 524,288 bytes in all,
        // Bruck (otherwise) below 81,920; the ring above.
        Collective::Allgather if p.is_power_of_two() && total < 524_288 => RecursiveDoubling,
        Collective::Allgather if !p.is_power_of_two() && total < 81920 => Bruck,
        Collective::Allgather => Ring,
        // Recursive halving below 524,288 bytes in all, pairwise above.
        Collective::ReduceScatter if total < 524_288 => RecursiveHalving,
        Collective::ReduceScatter => Pairwise,
        // Up to 8 ranks (the tree's `comm_size < 8` is tested as `<=`
        // there): scattered up to 32 KiB blocks. From 9: Bruck up to 256
        // bytes, scattered up to 32 KiB. Pairwise above.
        Collective::Alltoall if p > 8 && n <= 256 => Bruck,
        Collective::Alltoall if n <= 32768 => Scattered,
        Collective::Alltoall => Pairwise,
        Collective::Barrier => Dissemination,
    }
}

/// The algorithm that runs when `algorithm` is asked for: itself, or,
/// where MPICH refuses it (Rabenseifner's allreduce and reduce below
/// `p'` elements, recursive-doubling allgather off a power of two),
/// MPICH's default choice, as its fallback does.
pub fn runs(
    collective: Collective,
    algorithm: Algorithm,
    p: u32,
    count: u64,
    elem: u64,
) -> Algorithm {
    use Algorithm::*;
    let pof2 = u64::from(pof2(p.max(1)));
    let refused = match (collective, algorithm) {
        (Collective::Allreduce, Rabenseifner) | (Collective::Reduce, ReduceScatterGather) => {
            count < pof2
        }
        (Collective::Allgather, RecursiveDoubling) => !p.is_power_of_two(),
        _ => false,
    };
    if refused {
        choose(collective, p, count, elem)
    } else {
        algorithm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Algorithm::*;

    /// A refused algorithm runs MPICH's default instead: Rabenseifner
    /// below `p'` elements, recursive-doubling allgather on 12 ranks
    /// (Bruck for a small total, the ring for a large one).
    #[test]
    fn a_refused_algorithm_runs_mpichs_default() {
        assert_eq!(
            runs(Collective::Allreduce, Rabenseifner, 16, 15, 8),
            RecursiveDoubling
        );
        assert_eq!(
            runs(Collective::Allreduce, Rabenseifner, 16, 16, 8),
            Rabenseifner
        );
        assert_eq!(
            runs(Collective::Reduce, ReduceScatterGather, 16, 15, 8),
            Binomial
        );
        assert_eq!(
            runs(Collective::Allgather, RecursiveDoubling, 12, 10, 8),
            Bruck
        );
        assert_eq!(
            runs(Collective::Allgather, RecursiveDoubling, 12, 1024, 8),
            Ring
        );
        assert_eq!(
            runs(Collective::Allgather, RecursiveDoubling, 16, 1024, 8),
            RecursiveDoubling
        );
        assert_eq!(runs(Collective::Alltoall, Pairwise, 12, 1, 8), Pairwise);
    }

    /// Each rule's boundary, on both sides (doubles: 8 bytes each).
    #[test]
    fn each_threshold_falls_where_mpich_puts_it() {
        let c = |coll, p, bytes: u64| choose(coll, p, bytes / 8, 8);
        assert_eq!(c(Collective::Allreduce, 16, 8), RecursiveDoubling);
        assert_eq!(
            c(Collective::Allreduce, 16, 64),
            RecursiveDoubling,
            "8 elements < 16"
        );
        assert_eq!(c(Collective::Allreduce, 16, 128), Rabenseifner);
        assert_eq!(c(Collective::Reduce, 4, 2048), Binomial);
        assert_eq!(c(Collective::Reduce, 4, 2056), ReduceScatterGather);
        // Above 2,048 bytes, fewer elements than `p'` still take the tree.
        assert_eq!(choose(Collective::Reduce, 1024, 600, 8), Binomial);
        assert_eq!(choose(Collective::Reduce, 512, 511, 8), Binomial);
        assert_eq!(choose(Collective::Reduce, 512, 512, 8), ReduceScatterGather);
        assert_eq!(c(Collective::Broadcast, 7, 1 << 20), Binomial);
        assert_eq!(c(Collective::Broadcast, 16, 12288), Binomial);
        assert_eq!(
            c(Collective::Broadcast, 16, 12296),
            ScatterDoublingAllgather
        );
        assert_eq!(c(Collective::Broadcast, 16, 524_296), ScatterRingAllgather);
        assert_eq!(c(Collective::Broadcast, 12, 12296), ScatterRingAllgather);
        assert_eq!(c(Collective::Allgather, 16, 32760), RecursiveDoubling);
        assert_eq!(c(Collective::Allgather, 16, 32768), Ring);
        assert_eq!(c(Collective::Allgather, 10, 8184), Bruck);
        assert_eq!(c(Collective::Allgather, 10, 8192), Ring);
        assert_eq!(c(Collective::ReduceScatter, 16, 32760), RecursiveHalving);
        assert_eq!(c(Collective::ReduceScatter, 16, 32768), Pairwise);
        assert_eq!(
            c(Collective::Alltoall, 8, 256),
            Scattered,
            "8 ranks count as fewer than 8"
        );
        assert_eq!(c(Collective::Alltoall, 9, 256), Bruck);
        assert_eq!(c(Collective::Alltoall, 9, 264), Scattered);
        assert_eq!(c(Collective::Alltoall, 9, 32776), Pairwise);
        assert_eq!(c(Collective::Barrier, 9, 0), Dissemination);
    }
}
