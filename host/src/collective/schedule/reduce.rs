//! Allreduce and reduce schedules, as MPICH 4 runs them for a commutative
//! built-in operation.
//!
//! A communicator that is not a power of two, `p = 2^k + rem`, first
//! shrinks to `2^k` (recursive doubling and Rabenseifner): each even rank
//! below `2·rem` gives its vector to the odd rank after it and sits out
//! until that rank hands the result back at the end.

use super::{pof2, Land, Msg, Plan, Span, Spec, Step};

/// A rank's standing in the power-of-two part: its new rank, or `None`
/// if it sits out.
fn shrunk(rank: u32, rem: u32) -> Option<u32> {
    if rank < 2 * rem {
        (rank % 2 == 1).then_some(rank / 2)
    } else {
        Some(rank - rem)
    }
}

/// The real rank of new rank `new`.
fn real(new: u32, rem: u32) -> u32 {
    if new < rem {
        new * 2 + 1
    } else {
        new + rem
    }
}

fn send(peer: u32, span: Span) -> Step {
    Step {
        sends: vec![Msg::one(peer, span)],
        ..Step::default()
    }
}

fn recv(peer: u32, span: Span, land: Land) -> Step {
    Step {
        recvs: vec![(Msg::one(peer, span), land)],
        ..Step::default()
    }
}

fn sendrecv(to: u32, out: Span, from: u32, into: Span, land: Land) -> Step {
    Step {
        copies: Vec::new(),
        sends: vec![Msg::one(to, out)],
        recvs: vec![(Msg::one(from, into), land)],
    }
}

/// Wraps the power-of-two part `body` (given the new rank) in the steps
/// that shrink a communicator that is not a power of two and give the
/// result back.
fn shrinking(s: &Spec, rank: u32, body: impl FnOnce(u32, u32) -> Vec<Step>) -> Plan {
    let whole = Span::new(0, s.bytes());
    let rem = s.ranks - pof2(s.ranks);
    let mut steps = Vec::new();
    if rank < 2 * rem {
        steps.push(if rank % 2 == 0 {
            send(rank + 1, whole)
        } else {
            recv(rank - 1, whole, Land::Fold)
        });
    }
    if let Some(new) = shrunk(rank, rem) {
        steps.extend(body(new, rem));
    }
    if rank < 2 * rem {
        steps.push(if rank % 2 == 1 {
            send(rank - 1, whole)
        } else {
            recv(rank + 1, whole, Land::Copy)
        });
    }
    Plan {
        arena: s.bytes(),
        input: whole,
        output: whole,
        steps,
    }
}

/// Recursive doubling: in step `k` a rank swaps its whole vector with
/// the rank `2^k` away and folds what it gets. `log2 p` steps of `n`
/// bytes: for short vectors.
pub(super) fn recursive_doubling(s: &Spec, rank: u32) -> Plan {
    let whole = Span::new(0, s.bytes());
    shrinking(s, rank, |new, rem| {
        let p2 = pof2(s.ranks);
        let mut steps = Vec::new();
        let mut mask = 1;
        while mask < p2 {
            let dst = real(new ^ mask, rem);
            steps.push(sendrecv(dst, whole, dst, whole, Land::Fold));
            mask <<= 1;
        }
        steps
    })
}

/// The `2^k` pieces Rabenseifner's algorithms cut a vector into:
/// `count / 2^k` elements each, the first `count mod 2^k` one larger.
struct Pieces {
    cnts: Vec<u64>,
    disps: Vec<u64>,
    elem: u64,
    bytes: u64,
}

impl Pieces {
    fn new(s: &Spec, p2: usize) -> Pieces {
        let p = p2 as u64;
        let cnts: Vec<u64> = (0..p)
            .map(|i| s.count / p + u64::from(i < s.count % p))
            .collect();
        let mut disps = vec![0u64; p2];
        for i in 1..p2 {
            disps[i] = disps[i - 1] + cnts[i - 1];
        }
        Pieces {
            cnts,
            disps,
            elem: s.elem,
            bytes: s.bytes(),
        }
    }

    /// The bytes of pieces `a..b`.
    fn span(&self, a: usize, b: usize) -> Span {
        Span::new(
            self.disps.get(a).map_or(self.bytes, |&d| d * self.elem),
            self.cnts[a..b].iter().sum::<u64>() * self.elem,
        )
    }
}

/// The reduce-scatter by recursive halving that both of Rabenseifner's
/// algorithms start with, at place `new` of the `p2` (partners' real
/// ranks from `real`), nearest first: each step swaps half of the pieces
/// still in play and folds what comes back. Returns the piece indices
/// it ends with, `[send, last]`, where the second half starts.
fn halving(
    new: usize,
    p2: usize,
    pieces: &Pieces,
    real: &dyn Fn(usize) -> u32,
    steps: &mut Vec<Step>,
) -> [usize; 2] {
    let (mut send_idx, mut recv_idx, mut last_idx) = (0usize, 0usize, p2);
    let mut mask = 1usize;
    while mask < p2 {
        let nd = new ^ mask;
        let (out, into);
        if new < nd {
            send_idx = recv_idx + p2 / (mask * 2);
            out = pieces.span(send_idx, last_idx);
            into = pieces.span(recv_idx, send_idx);
        } else {
            recv_idx = send_idx + p2 / (mask * 2);
            out = pieces.span(send_idx, recv_idx);
            into = pieces.span(recv_idx, last_idx);
        }
        steps.push(sendrecv(real(nd), out, real(nd), into, Land::Fold));
        send_idx = recv_idx;
        mask <<= 1;
        if mask < p2 {
            last_idx = recv_idx + p2 / mask;
        }
    }
    [send_idx, last_idx]
}

/// Rabenseifner's algorithm: a reduce-scatter by recursive halving (each
/// step swaps half of what is left with the rank `2^k` away, nearest
/// first), then an allgather by recursive doubling (the same partners in
/// reverse). The vector is cut into `2^k` pieces of `count / 2^k`
/// elements, the first `count mod 2^k` one larger. MPICH uses it only
/// when the vector has at least `2^k` elements; below that it runs
/// recursive doubling instead, and so does this.
pub(super) fn rabenseifner(s: &Spec, rank: u32) -> Plan {
    let p2 = pof2(s.ranks);
    if s.count < u64::from(p2) {
        return recursive_doubling(s, rank);
    }
    let pieces = Pieces::new(s, p2 as usize);
    let piece = |a: usize, b: usize| pieces.span(a, b);
    shrinking(s, rank, |new, rem| {
        let p2 = p2 as usize;
        let mut steps = Vec::new();
        let [mut send_idx, mut last_idx] = halving(
            new as usize,
            p2,
            &pieces,
            &|n| real(n as u32, rem),
            &mut steps,
        );
        let mut recv_idx;
        let mut mask = p2 >> 1;
        while mask > 0 {
            let newdst = new as usize ^ mask;
            let dst = real(newdst as u32, rem);
            let (out, into);
            if (new as usize) < newdst {
                if mask != p2 / 2 {
                    last_idx += p2 / (mask * 2);
                }
                recv_idx = send_idx + p2 / (mask * 2);
                out = piece(send_idx, recv_idx);
                into = piece(recv_idx, last_idx);
            } else {
                recv_idx = send_idx - p2 / (mask * 2);
                out = piece(send_idx, last_idx);
                into = piece(recv_idx, send_idx);
            }
            steps.push(sendrecv(dst, out, dst, into, Land::Copy));
            if new as usize > newdst {
                send_idx = recv_idx;
            }
            mask >>= 1;
        }
        steps
    })
}

/// The ring: the vector is cut into `p` pieces of `⌈count / p⌉`
/// elements (the last ones shorter or empty); in `p − 1` steps each rank
/// passes a piece to its right and folds the one from its left, so that
/// rank `r` ends with piece `r` complete; then a ring allgather passes
/// the complete pieces around, at most 32 KiB a message (MPICH's
/// allgatherv pipeline size). `2(p − 1)` steps of about `n / p` bytes:
/// for long vectors.
pub(super) fn ring(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks as usize;
    let el = s.elem;
    let mut cnts = vec![0u64; p];
    let mut total = 0;
    for c in cnts.iter_mut() {
        let want = s.count.div_ceil(p as u64);
        if total + want > s.count {
            *c = s.count - total;
            break;
        }
        *c = want;
        total += want;
    }
    let mut disps = vec![0u64; p];
    for i in 1..p {
        disps[i] = disps[i - 1] + cnts[i - 1];
    }
    let span = |i: usize, from: u64, len: u64| Span::new((disps[i] + from) * el, len * el);
    let r = rank as usize;
    let (left, right) = ((r + p - 1) % p, (r + 1) % p);
    let mut steps = Vec::new();
    for i in 0..p - 1 {
        let recv_rank = (p + r - 2 - i) % p;
        let send_rank = (p + r - 1 - i) % p;
        steps.push(sendrecv(
            right as u32,
            span(send_rank, 0, cnts[send_rank]),
            left as u32,
            span(recv_rank, 0, cnts[recv_rank]),
            Land::Fold,
        ));
    }
    steps.extend(ring_allgatherv(&cnts, r, el, s.pipeline, span));
    let whole = Span::new(0, s.bytes());
    Plan {
        arena: s.bytes(),
        input: whole,
        output: whole,
        steps,
    }
}

/// MPICH's pipelined ring allgatherv: block `i` has `cnts[i]` elements
/// (of `el` bytes) at `span(i, from, len)`; messages carry at most
/// `pipeline` bytes (whole elements, at least one) when some block is
/// larger.
fn ring_allgatherv(
    cnts: &[u64],
    r: usize,
    el: u64,
    pipeline: u64,
    span: impl Fn(usize, u64, u64) -> Span,
) -> Vec<Step> {
    let p = cnts.len();
    let (left, right) = ((r + p - 1) % p, (r + 1) % p);
    let total: u64 = cnts.iter().sum();
    let mut steps = Vec::new();
    if total == 0 {
        return steps;
    }
    let (mut torecv, mut tosend) = (total - cnts[r], total - cnts[right]);
    let max = cnts.iter().copied().max().unwrap_or(0);
    let chunk = if max * el > pipeline {
        (pipeline / el).max(1)
    } else {
        max
    };
    let (mut sidx, mut ridx, mut soff, mut roff) = (r, left, 0u64, 0u64);
    while tosend > 0 || torecv > 0 {
        let sendnow = if tosend > 0 {
            (cnts[sidx] - soff).min(chunk)
        } else {
            0
        };
        let recvnow = if torecv > 0 {
            (cnts[ridx] - roff).min(chunk)
        } else {
            0
        };
        let mut step = Step::default();
        if sendnow > 0 {
            step.sends
                .push(Msg::one(right as u32, span(sidx, soff, sendnow)));
            tosend -= sendnow;
        }
        if recvnow > 0 {
            let into = Msg::one(left as u32, span(ridx, roff, recvnow));
            step.recvs.push((into, Land::Copy));
            torecv -= recvnow;
        }
        if sendnow > 0 || recvnow > 0 {
            steps.push(step);
        }
        soff += sendnow;
        roff += recvnow;
        if soff == cnts[sidx] {
            soff = 0;
            sidx = (sidx + p - 1) % p;
        }
        if roff == cnts[ridx] {
            roff = 0;
            ridx = (ridx + p - 1) % p;
        }
    }
    steps
}

/// Rabenseifner's reduce (MPICH's `reduce_scatter_gather`): a
/// reduce-scatter by recursive halving, as in [`rabenseifner`], then a
/// binomial gather of the pieces to the root. Off a power of two the odd
/// ranks below `2·rem` give their vector to the even rank before them
/// (the allreduce's pairing the other way round); a root among them
/// takes over piece 0 and the place of rank 0 in the gather. Below
/// `2^k` elements MPICH runs the binomial reduce instead, and so does
/// this.
pub(super) fn rabenseifner_reduce(s: &Spec, rank: u32) -> Plan {
    let p2 = pof2(s.ranks) as usize;
    if s.count < p2 as u64 {
        return binomial(s, rank);
    }
    let rem = (s.ranks as usize) - p2;
    let r = rank as usize;
    let whole = Span::new(0, s.bytes());
    let pieces = Pieces::new(s, p2);
    let piece = |a: usize, b: usize| pieces.span(a, b);
    let real = |new: usize| if new < rem { new * 2 } else { new + rem } as u32;
    let mut steps = Vec::new();
    let new = if r < 2 * rem {
        if r % 2 == 1 {
            steps.push(send(rank - 1, whole));
            None
        } else {
            steps.push(recv(rank + 1, whole, Land::Fold));
            Some(r / 2)
        }
    } else {
        Some(r - rem)
    };
    let [send_idx, last_idx] = match new {
        Some(nr) => halving(nr, p2, &pieces, &real, &mut steps),
        None => [0, p2],
    };
    gather(
        s,
        rank,
        &mut steps,
        new,
        [send_idx, last_idx],
        &piece,
        &real,
    );
    Plan {
        arena: s.bytes(),
        input: whole,
        output: if rank == s.root {
            whole
        } else {
            Span::new(0, 0)
        },
        steps,
    }
}

/// The gather half of Rabenseifner's reduce: from the pieces the
/// reduce-scatter left (`new`: this rank's place among the `2^k`, and
/// its piece indices `[send, last]`), a binomial gather to the
/// root's place, with an odd root below `2·rem` first taking piece 0 and
/// rank 0's place.
#[allow(clippy::too_many_arguments)]
fn gather(
    s: &Spec,
    rank: u32,
    steps: &mut Vec<Step>,
    mut new: Option<usize>,
    [mut send_idx, mut last_idx]: [usize; 2],
    piece: &dyn Fn(usize, usize) -> Span,
    real: &dyn Fn(usize) -> u32,
) {
    let p2 = pof2(s.ranks) as usize;
    let rem = s.ranks as usize - p2;
    let r = rank as usize;
    let root = s.root as usize;
    let odd_root = root < 2 * rem && root % 2 == 1;
    let newroot = if root < 2 * rem {
        if odd_root {
            0
        } else {
            root / 2
        }
    } else {
        root - rem
    };
    if odd_root {
        if r == root {
            steps.push(recv(0, piece(0, 1), Land::Copy));
            new = Some(0);
            send_idx = 0;
            last_idx = 2;
        } else if new == Some(0) {
            steps.push(send(s.root, piece(0, 1)));
            new = None;
        }
    }
    let mut recv_idx;
    if let Some(nr) = new {
        let mut mask = p2 / 2;
        let mut j = p2.trailing_zeros() as i32 - 1;
        while mask > 0 {
            let nd = nr ^ mask;
            let dst = if nd == 0 && odd_root {
                s.root
            } else {
                real(nd)
            };
            let tree = |x: usize| (x >> j) << j;
            let (out, into);
            if nr < nd {
                if mask != p2 / 2 {
                    last_idx += p2 / (mask * 2);
                }
                recv_idx = send_idx + p2 / (mask * 2);
                out = piece(send_idx, recv_idx);
                into = piece(recv_idx, last_idx);
            } else {
                recv_idx = send_idx - p2 / (mask * 2);
                out = piece(send_idx, last_idx);
                into = piece(recv_idx, send_idx);
            }
            if tree(nd) == tree(newroot) {
                steps.push(send(dst, out));
                break;
            }
            steps.push(recv(dst, into, Land::Copy));
            if nr > nd {
                send_idx = recv_idx;
            }
            mask >>= 1;
            j -= 1;
        }
    }
}

/// The binomial reduce: relative to the root, a rank receives and folds
/// from ranks `r | 2^k` while bit `k` of its own relative rank is clear,
/// then sends its partial result to `r` with that bit cleared. Each
/// receive waits for the one before (MPICH's are blocking).
pub(super) fn binomial(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let whole = Span::new(0, s.bytes());
    let rel = (rank + p - s.root) % p;
    let mut steps = Vec::new();
    let mut mask = 1u32;
    while mask < p {
        if mask & rel == 0 {
            let source = rel | mask;
            if source < p {
                steps.push(recv((source + s.root) % p, whole, Land::Fold));
            }
        } else {
            steps.push(send(((rel & !mask) + s.root) % p, whole));
            break;
        }
        mask <<= 1;
    }
    Plan {
        arena: s.bytes(),
        input: whole,
        output: if rank == s.root {
            whole
        } else {
            Span::new(0, 0)
        },
        steps,
    }
}

/// A reduce-scatter plan: the `p` blocks of `n` bytes each rank gives
/// (worked on in place), then the rank's own block of the result.
fn scattered(s: &Spec, steps: Vec<Step>) -> Plan {
    let all = u64::from(s.ranks) * s.bytes();
    Plan {
        arena: all + s.bytes(),
        input: Span::new(0, all),
        output: Span::new(all, s.bytes()),
        steps,
    }
}

/// Reduce-scatter by recursive halving (MPICH's
/// `reduce_scatter_block` `recursive_halving`, for commutative
/// operations): off a power of two, even ranks below `2·rem` give all
/// their blocks to the odd rank after it; then, farthest first, each
/// step swaps half of the blocks still in play with the rank `2^k` away
/// and folds what comes back; a rank ends with its own block, and passes
/// its even neighbour's on.
pub(super) fn reduce_scatter_halving(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    let all = u64::from(p) * n;
    let p2 = pof2(p) as usize;
    let rem = p - pof2(p);
    let block = |b: u32| Span::new(u64::from(b) * n, n);
    let out = Span::new(all, n);
    let mut steps = Vec::new();
    if rank < 2 * rem {
        steps.push(if rank % 2 == 0 {
            send(rank + 1, Span::new(0, all))
        } else {
            recv(rank - 1, Span::new(0, all), Land::Fold)
        });
    }
    if let Some(new) = shrunk(rank, rem) {
        // New rank `i` stands for old blocks: two below `2·rem`, else one.
        let cnts: Vec<u64> = (0..p2 as u32)
            .map(|i| if real(i, rem) < 2 * rem { 2 * n } else { n })
            .collect();
        let mut disps = vec![0u64; p2];
        for i in 1..p2 {
            disps[i] = disps[i - 1] + cnts[i - 1];
        }
        let piece = |a: usize, b: usize| {
            Span::new(disps.get(a).map_or(all, |&d| d), cnts[a..b].iter().sum())
        };
        let new = new as usize;
        let (mut send_idx, mut recv_idx, mut last_idx) = (0usize, 0usize, p2);
        let mut mask = p2 >> 1;
        while mask > 0 {
            let nd = new ^ mask;
            let dst = real(nd as u32, rem);
            let (give, take);
            if new < nd {
                send_idx = recv_idx + mask;
                give = piece(send_idx, last_idx);
                take = piece(recv_idx, send_idx);
            } else {
                recv_idx = send_idx + mask;
                give = piece(send_idx, recv_idx);
                take = piece(recv_idx, last_idx);
            }
            let mut st = Step::default();
            if give.len > 0 {
                st.sends.push(Msg::one(dst, give));
            }
            if take.len > 0 {
                st.recvs.push((Msg::one(dst, take), Land::Fold));
            }
            steps.push(st);
            send_idx = recv_idx;
            last_idx = recv_idx + mask;
            mask >>= 1;
        }
        let mut last = Step {
            copies: vec![(block(rank), out)],
            ..Step::default()
        };
        if rank < 2 * rem {
            last.sends.push(Msg::one(rank - 1, block(rank - 1)));
        }
        steps.push(last);
    } else {
        steps.push(recv(rank + 1, out, Land::Copy));
    }
    scattered(s, steps)
}

/// Reduce-scatter by pairwise exchange (MPICH's `pairwise`, for
/// commutative operations): in step `i` a rank sends block `r + i` to
/// rank `r + i` and folds the block rank `r − i` sends it into its own.
pub(super) fn reduce_scatter_pairwise(s: &Spec, rank: u32) -> Plan {
    let p = s.ranks;
    let n = s.bytes();
    let block = |b: u32| Span::new(u64::from(b) * n, n);
    let out = Span::new(u64::from(p) * n, n);
    let mut steps = vec![Step {
        copies: vec![(block(rank), out)],
        ..Step::default()
    }];
    for i in 1..p {
        let (src, dst) = ((rank + p - i) % p, (rank + i) % p);
        steps.push(sendrecv(dst, block(dst), src, out, Land::Fold));
    }
    scattered(s, steps)
}
