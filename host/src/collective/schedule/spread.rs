//! Broadcast, allgather, all-to-all and barrier schedules, as MPICH 4
//! runs them.

use super::{Land, Msg, Plan, Span, Spec, Step};

fn step(sends: Vec<Msg>, recvs: Vec<Msg>) -> Step {
    Step {
        copies: Vec::new(),
        sends,
        recvs: recvs.into_iter().map(|m| (m, Land::Copy)).collect(),
    }
}

fn copies(copies: Vec<(Span, Span)>) -> Step {
    Step {
        copies,
        ..Step::default()
    }
}

/// A rooted plan over one vector of `n` bytes at 0.
fn rooted(s: &Spec, rank: u32, steps: Vec<Step>) -> Plan {
    let whole = Span::new(0, s.bytes());
    Plan {
        arena: s.bytes(),
        input: if rank == s.root {
            whole
        } else {
            Span::new(0, 0)
        },
        output: whole,
        steps,
    }
}

/// The binomial broadcast: relative to the root, a rank receives the
/// whole vector from the rank that differs in its lowest set bit, then
/// sends it on to `r + 2^k` for each lower bit, highest first. Nothing is
/// sent for an empty vector.
pub(super) fn bcast_binomial(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    let whole = Span::new(0, n);
    let rel = (rank + p - s.root) % p;
    let mut steps = Vec::new();
    if n > 0 {
        let mut mask = 1u32;
        while mask < p {
            if rel & mask != 0 {
                steps.push(step(vec![], vec![Msg::one((rank + p - mask) % p, whole)]));
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if rel + mask < p {
                steps.push(step(vec![Msg::one((rank + mask) % p, whole)], vec![]));
            }
            mask >>= 1;
        }
    }
    rooted(s, rank, steps)
}

/// Bytes `[from, to)` of an `n`-byte vector, clipped to it.
fn part(n: u64, from: u64, to: u64) -> Span {
    let (a, b) = (from.min(n), to.min(n));
    Span::new(a, b.saturating_sub(a))
}

/// MPICH's scatter for a long broadcast: relative rank `r` gets piece
/// `r` of `size` bytes and the pieces of its binomial subtree from the
/// rank that differs in its lowest set bit, then passes on the pieces
/// of its own subtrees, largest first; empty pieces are not sent.
fn scatter(s: &Spec, rank: u32, size: u64) -> Vec<Step> {
    let p = s.ranks;
    let n = s.bytes();
    let rel = (rank + p - s.root) % p;
    let mut steps = Vec::new();
    let mut mask = 1u32;
    while mask < p {
        if rel & mask != 0 {
            let got = part(n, u64::from(rel) * size, u64::from(rel + mask) * size);
            if got.len > 0 {
                steps.push(step(vec![], vec![Msg::one((rank + p - mask) % p, got)]));
            }
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < p {
            let give = part(
                n,
                u64::from(rel + mask) * size,
                u64::from(rel + 2 * mask) * size,
            );
            if give.len > 0 {
                steps.push(step(vec![Msg::one((rank + mask) % p, give)], vec![]));
            }
        }
        mask >>= 1;
    }
    steps
}

/// The broadcast for long vectors: a binomial scatter cuts the vector
/// into `p` pieces of `⌈n / p⌉` bytes (relative rank `r` gets piece `r`
/// and the pieces of its subtree), then a ring allgather passes the
/// pieces around in `p − 1` steps, empty pieces included.
pub(super) fn bcast_scatter_ring(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    if n == 0 {
        return rooted(s, rank, Vec::new());
    }
    let size = n.div_ceil(u64::from(p));
    let mut steps = scatter(s, rank, size);
    let (left, right) = ((rank + p - 1) % p, (rank + 1) % p);
    let piece = |j: u32| {
        let r = u64::from((j + p - s.root) % p);
        part(n, r * size, (r + 1) * size)
    };
    let (mut j, mut jnext) = (rank, left);
    for _ in 1..p {
        steps.push(step(
            vec![Msg::one(right, piece(j))],
            vec![Msg::one(left, piece(jnext))],
        ));
        j = jnext;
        jnext = (jnext + p - 1) % p;
    }
    rooted(s, rank, steps)
}

/// The broadcast for medium vectors: the same scatter, then an allgather
/// by recursive doubling over relative ranks: in step `k` a rank swaps
/// the pieces of its subtree of `2^k` ranks with the rank `2^k` away.
/// Off a power of two some partners do not exist; the ranks of a subtree
/// that did get the other half then pass it on, within the subtree, to
/// those that did not (MPICH's `nprocs_completed` step).
pub(super) fn bcast_scatter_doubling(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    if n == 0 {
        return rooted(s, rank, Vec::new());
    }
    let size = n.div_ceil(u64::from(p));
    let mut steps = scatter(s, rank, size);
    let rel = (rank + p - s.root) % p;
    let real = |r: u32| (r + s.root) % p;
    // The pieces of relative ranks `[a, b)` that exist.
    let held = |a: u32, b: u32| part(n, u64::from(a) * size, u64::from(b.min(p)) * size);
    let (mut mask, mut i) = (1u32, 0u32);
    while mask < p {
        let rd = rel ^ mask;
        let dtr = rd >> i << i;
        let mtr = rel >> i << i;
        if rd < p {
            steps.push(step(
                vec![Msg::one(real(rd), held(mtr, mtr + mask))],
                vec![Msg::one(real(rd), held(dtr, dtr + mask))],
            ));
        }
        if dtr + mask > p {
            let done = p.saturating_sub(mtr + mask);
            let piece = held(mtr + mask, mtr + 2 * mask);
            let (mut tmp, mut k) = (mask >> 1, i);
            while tmp > 0 {
                let rd = rel ^ tmp;
                let root = rel >> k << k;
                if rd > rel && rel < root + done && rd >= root + done {
                    steps.push(step(vec![Msg::one(real(rd), piece)], vec![]));
                } else if rd < rel && rd < root + done && rel >= root + done {
                    steps.push(step(vec![], vec![Msg::one(real(rd), piece)]));
                }
                tmp >>= 1;
                k = k.saturating_sub(1);
            }
        }
        mask <<= 1;
        i += 1;
    }
    rooted(s, rank, steps)
}

/// A plan whose input is the rank's own block of an allgather's output.
fn gathered(s: &Spec, rank: u32, arena: u64, steps: Vec<Step>) -> Plan {
    let n = s.bytes();
    Plan {
        arena,
        input: Span::new(u64::from(rank) * n, n),
        output: Span::new(0, u64::from(s.ranks) * n),
        steps,
    }
}

/// The ring allgather: in `p − 1` steps each rank passes the block it
/// got last (its own first) to its right and takes one from its left.
pub(super) fn allgather_ring(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    let block = |j: u32| Span::new(u64::from(j) * n, n);
    let (left, right) = ((rank + p - 1) % p, (rank + 1) % p);
    let (mut j, mut jnext) = (rank, left);
    let mut steps = Vec::new();
    for _ in 1..p {
        steps.push(step(
            vec![Msg::one(right, block(j))],
            vec![Msg::one(left, block(jnext))],
        ));
        j = jnext;
        jnext = (jnext + p - 1) % p;
    }
    gathered(s, rank, u64::from(p) * n, steps)
}

/// Recursive doubling (allgather, a power of two of ranks): in step `k` a
/// rank swaps the `2^k` blocks of its subtree with the rank `2^k` away.
/// MPICH runs it only on a power of two; otherwise it falls back to its
/// default (Bruck below 81,920 bytes in all, the ring above), as a
/// scenario's plan does ([`super::auto::runs`]). Asked for here off a
/// power of two, this gives Bruck's schedule.
pub(super) fn allgather_recursive_doubling(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    if !p.is_power_of_two() {
        return allgather_bruck(s, rank);
    }
    let n = s.bytes();
    let mut steps = Vec::new();
    let mut mask = 1u32;
    while mask < p {
        let dst = rank ^ mask;
        let tree = |x: u32| u64::from(x & !(mask - 1)) * n;
        let len = u64::from(mask) * n;
        steps.push(step(
            vec![Msg::one(dst, Span::new(tree(rank), len))],
            vec![Msg::one(dst, Span::new(tree(dst), len))],
        ));
        mask <<= 1;
    }
    gathered(s, rank, u64::from(p) * n, steps)
}

/// Bruck's allgather: in scratch room after the output, a rank starts
/// with its own block and, in step `k`, sends all it has to the rank
/// `2^k` before it and appends as much from the rank `2^k` after it;
/// the last step sends only what is missing; the blocks are then
/// rotated into rank order. Nothing is sent for empty blocks.
pub(super) fn allgather_bruck(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    let all = u64::from(p) * n;
    if n == 0 {
        return gathered(s, rank, all, Vec::new());
    }
    let tmp = |at: u64, len: u64| Span::new(all + at, len);
    let own = Span::new(u64::from(rank) * n, n);
    let mut steps = vec![copies(vec![(own, tmp(0, n))])];
    let (mut cur, mut pof2) = (n, 1u32);
    while pof2 <= p / 2 {
        let (src, dst) = ((rank + pof2) % p, (rank + p - pof2) % p);
        steps.push(step(
            vec![Msg::one(dst, tmp(0, cur))],
            vec![Msg::one(src, tmp(cur, cur))],
        ));
        cur *= 2;
        pof2 *= 2;
    }
    let rem = u64::from(p - pof2);
    if rem > 0 {
        let (src, dst) = ((rank + pof2) % p, (rank + p - pof2) % p);
        steps.push(step(
            vec![Msg::one(dst, tmp(0, rem * n))],
            vec![Msg::one(src, tmp(cur, rem * n))],
        ));
    }
    let r = u64::from(rank);
    let tail = (u64::from(p) - r) * n;
    let mut rotate = vec![(tmp(0, tail), Span::new(r * n, tail))];
    if rank > 0 {
        rotate.push((tmp(tail, r * n), Span::new(0, r * n)));
    }
    steps.push(copies(rotate));
    gathered(s, rank, 2 * all, steps)
}

/// An all-to-all plan: the send blocks, then the receive blocks, then
/// `extra` bytes of scratch.
fn exchanged(s: &Spec, extra: u64, steps: Vec<Step>) -> Plan {
    let all = u64::from(s.ranks) * s.bytes();
    Plan {
        arena: 2 * all + extra,
        input: Span::new(0, all),
        output: Span::new(all, all),
        steps,
    }
}

/// Pairwise exchange: a rank keeps its own block, then in step `i` sends
/// block `r + i` to rank `r + i` and receives from rank `r − i` (on a
/// power of two, both are `r xor i`).
pub(super) fn alltoall_pairwise(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    let all = u64::from(p) * n;
    let sent = |j: u32| Span::new(u64::from(j) * n, n);
    let got = |j: u32| Span::new(all + u64::from(j) * n, n);
    let mut steps = vec![copies(vec![(sent(rank), got(rank))])];
    for i in 1..p {
        let (src, dst) = if p.is_power_of_two() {
            (rank ^ i, rank ^ i)
        } else {
            ((rank + p - i) % p, (rank + i) % p)
        };
        steps.push(step(
            vec![Msg::one(dst, sent(dst))],
            vec![Msg::one(src, got(src))],
        ));
    }
    exchanged(s, 0, steps)
}

/// Scattered (MPICH's all-to-all for medium blocks): in batches of 32
/// peers (`MPIR_CVAR_ALLTOALL_THROTTLE`), a rank posts the receives
/// from ranks `r, r + 1, …` and the sends to ranks `r, r − 1, …` of
/// the batch at once and waits for them all. Its own block is a local
/// copy.
pub(super) fn alltoall_scattered(s: &Spec, rank: u32) -> Plan {
    const THROTTLE: u32 = 32;
    let p = s.ranks;
    let n = s.bytes();
    let all = u64::from(p) * n;
    let sent = |j: u32| Span::new(u64::from(j) * n, n);
    let got = |j: u32| Span::new(all + u64::from(j) * n, n);
    let mut steps = Vec::new();
    let mut first = 0;
    while first < p {
        let size = (p - first).min(THROTTLE);
        let mut st = Step::default();
        for i in first..first + size {
            let src = (rank + i) % p;
            if src == rank {
                st.copies.push((sent(rank), got(rank)));
            } else {
                st.recvs.push((Msg::one(src, got(src)), Land::Copy));
            }
        }
        for i in first..first + size {
            let dst = (rank + p - i % p) % p;
            if dst != rank {
                st.sends.push(Msg::one(dst, sent(dst)));
            }
        }
        steps.push(st);
        first += size;
    }
    exchanged(s, 0, steps)
}

/// Bruck's all-to-all: the blocks are rotated so that block `i` is meant
/// for rank `r + i`; in step `k` every block whose index has bit `k` set
/// goes, packed into one message, to rank `r + 2^k`, and the blocks from
/// rank `r − 2^k` land in the same places; a last rotation and reversal
/// put them in rank order. `⌈log2 p⌉` steps of about `n·p/2` bytes: for
/// short blocks.
pub(super) fn alltoall_bruck(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    let all = u64::from(p) * n;
    let r = u64::from(rank);
    let pp = u64::from(p);
    let sent = |j: u64, blocks: u64| Span::new(j * n, blocks * n);
    let got = |j: u64, blocks: u64| Span::new(all + j * n, blocks * n);
    let tmp = |j: u64, blocks: u64| Span::new(2 * all + j * n, blocks * n);
    let mut steps = vec![copies(vec![
        (sent(r, pp - r), got(0, pp - r)),
        (sent(0, r), got(pp - r, r)),
    ])];
    let mut pof2 = 1u32;
    while pof2 < p {
        let (dst, src) = ((rank + pof2) % p, (rank + p - pof2) % p);
        let blocks: Vec<Span> = (1..pp)
            .filter(|b| b & u64::from(pof2) != 0)
            .map(|b| got(b, 1))
            .collect();
        steps.push(step(
            vec![Msg {
                peer: dst,
                spans: blocks.clone(),
            }],
            vec![Msg {
                peer: src,
                spans: blocks,
            }],
        ));
        pof2 *= 2;
    }
    let mut last = vec![
        (got(r + 1, pp - r - 1), tmp(0, pp - r - 1)),
        (got(0, r + 1), tmp(pp - r - 1, r + 1)),
    ];
    last.extend((0..pp).map(|i| (tmp(i, 1), got(pp - i - 1, 1))));
    steps.push(copies(last));
    exchanged(s, all, steps)
}

/// Dissemination: in round `k` every rank sends an empty message to the
/// rank `2^k` after it and waits for one from the rank `2^k` before.
pub(super) fn barrier(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let none = Span::new(0, 0);
    let mut steps = Vec::new();
    let mut mask = 1u32;
    while mask < p {
        steps.push(step(
            vec![Msg::one((rank + mask) % p, none)],
            vec![Msg::one((rank + p - mask) % p, none)],
        ));
        mask <<= 1;
    }
    Plan {
        arena: 0,
        input: none,
        output: none,
        steps,
    }
}
