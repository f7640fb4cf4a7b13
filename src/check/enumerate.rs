//! The search: level by level (0 faults, 1, 2, ... up to the bound), each
//! schedule's children are its own faults plus one more, on a packet its
//! own run judged after its last fault. Runs go to a thread pool in
//! chunks; results are read back in enumeration order, so any number of
//! threads gives the same counts and the same counterexample.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;
use udrma_fabric::Egress;

use super::future_bound::Futures;
use super::merge::States;
use super::schedule::{Base, Class, Fault, Kind, Outcome, Schedule};
use crate::sweep::plan::Shard;

/// What to explore.
pub struct Bound {
    /// Most faults in a schedule.
    pub faults: usize,
    /// The fault kinds, in the order tried on each packet.
    pub kinds: Vec<Kind>,
    /// How long `delay` holds a packet, in nanoseconds.
    pub delay_ns: u64,
    /// `--merge-bound`: cut a run's children where its future meets an
    /// earlier run's (`future_bound`; a measurement, not a proof).
    pub merge_bound: bool,
    /// `--merge-states`: cut a run's children where it reaches a state an
    /// earlier run reached as late or later with as many faults left
    /// (`merge`; sound).
    pub merge_states: bool,
}

/// Counts for one number of faults.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Level {
    /// Schedules that ran.
    pub ran: u64,
    /// Of them, those that failed a check.
    pub violations: u64,
    /// Schedules not run because their rule is the same as a sibling's
    /// (a reorder whose hold equals the delay bound).
    pub same_rule: u64,
    /// Reorders of a packet with nothing after it on its link.
    pub not_applicable: u64,
    /// `--merge-bound` or `--merge-states`: children not run because
    /// their parent's run met an earlier run's future (or state) before
    /// their fault (schedules deeper still below them are not counted).
    #[serde(default)]
    pub cut: u64,
}

/// What the search did.
#[derive(Debug, Default)]
pub struct Search {
    /// Per number of faults (index 0: the fault-free run).
    pub levels: Vec<Level>,
    /// The first violation at the smallest number of faults.
    pub first: Option<(Schedule, Outcome)>,
    /// Stopped by an interrupt before the bound was covered.
    pub interrupted: bool,
    /// With `--merge-bound`: the futures recorded and the runs that met one.
    pub futures: Option<Futures>,
    /// With `--merge-states`: the states recorded and the runs that met one.
    pub states: Option<States>,
}

impl Search {
    /// Schedules that ran.
    pub fn ran(&self) -> u64 {
        self.levels.iter().map(|l| l.ran).sum()
    }

    /// Children not run under `--merge-bound` or `--merge-states` (not
    /// counting the deeper schedules below them).
    pub fn cut(&self) -> u64 {
        self.levels.iter().map(|l| l.cut).sum()
    }

    /// Schedules pruned as equivalent to one that ran.
    pub fn pruned(&self) -> u64 {
        self.levels.iter().map(|l| l.same_rule).sum()
    }

    /// Fault placements that do not exist (reorder with nothing to swap).
    pub fn not_applicable(&self) -> u64 {
        self.levels.iter().map(|l| l.not_applicable).sum()
    }
}

/// A schedule that ran and passed, whose children come next.
struct Node {
    schedule: Schedule,
    egress: Vec<Egress>,
    /// Before each event of its run: packets judged, state fingerprint
    /// (`--merge-states`).
    fingerprints: Option<Vec<(u32, u64, u128)>>,
    /// Children only on packets before this position (from here on the
    /// run's future, or its state, is an earlier run's).
    cutoff: usize,
}

impl Node {
    fn new(schedule: Schedule, egress: Vec<Egress>) -> Node {
        Node {
            schedule,
            egress,
            fingerprints: None,
            cutoff: usize::MAX,
        }
    }

    /// A node of the run `outcome` made, with its fingerprints.
    fn of(schedule: Schedule, outcome: Outcome) -> Node {
        Node {
            fingerprints: outcome.fingerprints,
            ..Node::new(schedule, outcome.egress)
        }
    }

    /// With `futures`, cut where this run meets an earlier future; with
    /// `states`, where it reaches an earlier run's state.
    fn cut(
        mut self,
        futures: Option<&mut Futures>,
        states: Option<&mut States>,
        faults: usize,
    ) -> Node {
        let start = self.schedule.last().map_or(0, |f| f.pos + 1);
        let left = faults - self.schedule.len();
        if let Some(f) = futures {
            self.cutoff = f.cut(&self.egress, start, left);
        }
        if let (Some(s), Some(fps)) = (states, self.fingerprints.take()) {
            self.cutoff = s.cut(&fps, self.egress.len(), start, left);
        }
        self
    }
}

/// Parents whose children go to the pool at once (bounds the schedules
/// held in memory; large enough to keep the threads busy).
const CHUNK_PARENTS: usize = 8;

/// Runs a thread takes between two reports to the progress bar: enough
/// that the threads rarely wait for the slowest run of a batch.
const BATCH_PER_THREAD: usize = 64;

/// The children of `node`: one more fault on each packet its run judged
/// after its last fault, of each kind. With `shard`, the fault-free run's
/// children are only those on the packets the shard owns (position `i`
/// with `i mod N = I`): every deeper schedule descends from one of them,
/// so the shards split the whole search, counts included.
fn children(node: &Node, bound: &Bound, level: &mut Level, shard: Option<Shard>) -> Vec<Schedule> {
    let log = &node.egress;
    let start = node.schedule.last().map_or(0, |f| f.pos + 1);
    let mut out = Vec::new();
    for i in start..log.len() {
        // Past the cut, a child is only counted (`--merge-bound`).
        let cut = i >= node.cutoff;
        if node.schedule.is_empty()
            && shard.is_some_and(|s| i % s.count as usize != s.index as usize)
        {
            continue;
        }
        let e = &log[i];
        let class = Class::of(e);
        // The rule counts what its target matches, from the start.
        // (Not needed for a child that is only counted.)
        let nth = if cut {
            0
        } else {
            log[..i].iter().filter(|x| class.matches(x)).count() as u64
        };
        for &kind in &bound.kinds {
            let delay_ns = match kind {
                Kind::Delay => bound.delay_ns,
                Kind::Reorder => {
                    let next = log[i + 1..]
                        .iter()
                        .find(|x| x.link == e.link && x.direction == e.direction);
                    match next {
                        // Enter the link just after the next one did.
                        Some(x) => (x.t.as_ps() - e.t.as_ps()).div_ceil(1000) + 1,
                        None => {
                            level.not_applicable += u64::from(!cut);
                            continue;
                        }
                    }
                }
                _ => 0,
            };
            if kind == Kind::Reorder
                && delay_ns == bound.delay_ns
                && bound.kinds.contains(&Kind::Delay)
            {
                level.same_rule += u64::from(!cut);
                continue;
            }
            if cut {
                level.cut += 1;
                continue;
            }
            let mut s = node.schedule.clone();
            s.push(Fault {
                class,
                nth,
                kind,
                delay_ns,
                pos: i,
                packet: *e,
            });
            out.push(s);
        }
    }
    out
}

/// What the search reports as it goes.
pub enum Progress<'a> {
    /// This many more schedules were run.
    Ran(u64),
    /// Every schedule with this many faults was run (or the interrupt came).
    Level(usize, &'a Level),
}

/// Explores every schedule of up to `bound.faults` faults over `base`,
/// starting from its fault-free run `zero`; stops after the first number
/// of faults at which some schedule fails a check (the smallest
/// counterexample has that many), or when `stop` is set. Tells
/// `progress` of each batch run and each number of faults finished.
pub fn search(
    base: &Base,
    zero: Outcome,
    bound: &Bound,
    shard: Option<Shard>,
    pool: &rayon::ThreadPool,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Search, String> {
    let mut out = Search {
        levels: vec![Level {
            ran: 1,
            ..Level::default()
        }],
        ..Search::default()
    };
    let fails = !zero.failing().is_empty();
    out.levels[0].violations = u64::from(fails);
    progress(Progress::Ran(1));
    progress(Progress::Level(0, &out.levels[0]));
    if fails {
        out.first = Some((Vec::new(), zero));
        return Ok(out);
    }
    let mut futures = bound.merge_bound.then(Futures::default);
    let mut states = bound
        .merge_states
        .then(|| States::new(bound.kinds.contains(&Kind::Corrupt)));
    let mut parents =
        vec![Node::of(Vec::new(), zero).cut(futures.as_mut(), states.as_mut(), bound.faults)];
    for depth in 1..=bound.faults {
        let leaf = depth == bound.faults;
        let mut level = Level::default();
        let mut next = Vec::new();
        for chunk in parents.chunks(CHUNK_PARENTS) {
            let mut cands: Vec<(usize, Schedule)> = Vec::new();
            for (k, node) in chunk.iter().enumerate() {
                cands.extend(
                    children(node, bound, &mut level, shard)
                        .into_iter()
                        .map(|s| (k, s)),
                );
            }
            // In batches of a few runs a thread, so that the bar moves
            // within a level (at K = 1 every schedule is the root's child,
            // one chunk) and counts only the runs that ran.
            let mut results: Vec<Option<Result<Outcome, String>>> = Vec::with_capacity(cands.len());
            for batch in cands.chunks(pool.current_num_threads().max(1) * BATCH_PER_THREAD) {
                let ran: Vec<Option<Result<Outcome, String>>> = pool.install(|| {
                    batch
                        .par_iter()
                        .map(|(_, s)| {
                            // A leaf's children are not searched: its
                            // states are not needed.
                            (!stop.load(Ordering::Relaxed))
                                .then(|| base.run_with(s, base.fingerprints && !leaf))
                        })
                        .collect()
                });
                progress(Progress::Ran(
                    ran.iter().filter(|r| r.is_some()).count() as u64
                ));
                results.extend(ran);
            }
            for ((k, schedule), r) in cands.into_iter().zip(results) {
                let Some(r) = r else {
                    out.interrupted = true;
                    continue;
                };
                let outcome = r?;
                level.ran += 1;
                replayed_prefix(&chunk[k], &schedule, &outcome)?;
                if !outcome.failing().is_empty() {
                    level.violations += 1;
                    if out.first.is_none() {
                        out.first = Some((schedule, outcome));
                    }
                } else if !leaf {
                    next.push(Node::of(schedule, outcome).cut(
                        futures.as_mut(),
                        states.as_mut(),
                        bound.faults,
                    ));
                }
            }
            if out.interrupted {
                break;
            }
        }
        progress(Progress::Level(depth, &level));
        out.levels.push(level);
        if out.first.is_some() || out.interrupted {
            break;
        }
        parents = next;
    }
    out.futures = futures;
    out.states = states;
    Ok(out)
}

/// The schedule a search reached by `path` (each fault's position in its
/// parent's run and its kind), and its outcome: run again fault by fault
/// from the fault-free run, as the search ran it. A merge of shards finds
/// its counterexample this way.
pub fn rebuild(
    base: &Base,
    zero: &Outcome,
    bound: &Bound,
    path: &[(usize, Kind)],
) -> Result<(Schedule, Outcome), String> {
    let mut node = Node::new(Vec::new(), zero.egress.clone());
    let mut outcome = zero.clone();
    for (depth, &(pos, kind)) in path.iter().enumerate() {
        let schedule = children(&node, bound, &mut Level::default(), None)
            .into_iter()
            .find(|s| s.last().is_some_and(|f| f.pos == pos && f.kind == kind))
            .ok_or_else(|| {
                format!(
                    "fault {} ({} of packet {pos}) is not a child of the schedule before it: the shard was searched on another build or scenario",
                    depth + 1,
                    kind.name()
                )
            })?;
        outcome = base.run(&schedule)?;
        node = Node::new(schedule, outcome.egress.clone());
    }
    Ok((node.schedule, outcome))
}

/// The enumeration's premise, checked on every run: until the new fault
/// strikes, a child's run is its parent's (the same packets judged in
/// the same order), so the new rule's n-th packet is the one chosen.
fn replayed_prefix(parent: &Node, child: &Schedule, outcome: &Outcome) -> Result<(), String> {
    let Some(f) = child.last() else {
        return Ok(());
    };
    let upto = f.pos + 1;
    if outcome.egress.get(..upto) == parent.egress.get(..upto) {
        Ok(())
    } else {
        Err(format!(
            "internal: the run with fault {} judged other packets before it than its parent's run did (the engine or fabric is not deterministic)",
            child.len()
        ))
    }
}

/// Schedules of up to `faults` faults of `kinds` kinds over `packets`
/// packets (each packet at most one fault): the sum over j ≤ faults of
/// C(packets, j) · kinds^j. Faulted runs judge more packets
/// (retransmissions), so this estimates; it is not a bound.
pub fn estimate(packets: usize, kinds: usize, faults: usize) -> u128 {
    let mut total: u128 = 0;
    let mut choose: u128 = 1; // C(packets, j)
    let mut pow: u128 = 1; // kinds^j
    for j in 0..=faults {
        if j > 0 {
            if j > packets {
                break;
            }
            choose = choose.saturating_mul((packets - j + 1) as u128) / j as u128;
            pow = pow.saturating_mul(kinds as u128);
        }
        total = total.saturating_add(choose.saturating_mul(pow));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use udrma_faults::Direction;
    use udrma_proto::{Flags, Instant, NodeAddr, Opcode};

    fn pkt(t_ns: u64, link: u32, reverse: bool, op: Opcode) -> Egress {
        Egress {
            t: Instant(t_ns * 1000),
            link,
            direction: if reverse {
                Direction::Reverse
            } else {
                Direction::Forward
            },
            src: NodeAddr(0),
            dst: NodeAddr(1),
            opcode: Some(op),
            flags: Flags::empty(),
            msg: 1,
            seg: 0,
        }
    }

    /// Two writes and an ACK on one link, a write on another; up to two
    /// drops or reorders.
    fn four_packets() -> (Node, Bound) {
        let node = Node::new(
            Vec::new(),
            vec![
                pkt(0, 0, false, Opcode::Write),
                pkt(1000, 0, true, Opcode::Ack),
                pkt(1500, 0, false, Opcode::Write),
                pkt(2000, 1, false, Opcode::Write),
            ],
        );
        let bound = Bound {
            faults: 2,
            kinds: vec![Kind::Drop, Kind::Reorder],
            delay_ns: 200_000,
            merge_bound: false,
            merge_states: false,
        };
        (node, bound)
    }

    /// A rule's n counts the earlier packets of its link, direction and
    /// opcode; a reorder holds just past the next packet of its link and
    /// direction, and has none for the last.
    #[test]
    fn children_count_the_nth_packet_of_their_class_and_swap_with_the_next() {
        let (node, bound) = four_packets();
        let mut level = Level::default();
        let kids = children(&node, &bound, &mut level, None);
        // 4 drops, 1 reorder (the first write, swapped with the second).
        assert_eq!(kids.len(), 5);
        assert_eq!(level.not_applicable, 3);
        let nths: Vec<(usize, u64, Kind)> = kids
            .iter()
            .map(|s| (s[0].pos, s[0].nth, s[0].kind))
            .collect();
        assert_eq!(
            nths,
            vec![
                (0, 0, Kind::Drop),
                (0, 0, Kind::Reorder),
                (1, 0, Kind::Drop),
                (2, 1, Kind::Drop),
                (3, 0, Kind::Drop),
            ]
        );
        // 1.5 us later, plus one nanosecond.
        assert_eq!(kids[1][0].delay_ns, 1501);
        // Children of a schedule come only after its last fault.
        let deeper = Node::new(kids[3].clone(), node.egress.clone());
        let grandkids = children(&deeper, &bound, &mut Level::default(), None);
        assert_eq!(grandkids.len(), 1);
        assert_eq!(grandkids[0].len(), 2);
        assert_eq!(grandkids[0][1].pos, 3);
    }

    /// Two shards split the fault-free run's children, and their counts,
    /// by packet position; deeper schedules are left to whichever shard
    /// owns their first fault.
    #[test]
    fn shards_split_the_first_faults_by_packet() {
        let (node, bound) = four_packets();
        let whole = children(&node, &bound, &mut Level::default(), None);
        let mut levels = [Level::default(), Level::default()];
        let mut kids: Vec<Schedule> = Vec::new();
        for (i, level) in levels.iter_mut().enumerate() {
            let shard = Shard::new(i as u32, 2).unwrap();
            let mine = children(&node, &bound, level, Some(shard));
            assert!(mine.iter().all(|s| s[0].pos % 2 == i));
            kids.extend(mine);
        }
        kids.sort_by_key(|s| (s[0].pos, s[0].kind));
        assert_eq!(kids.len(), whole.len());
        assert!(kids
            .iter()
            .zip(&whole)
            .all(|(a, b)| a[0].pos == b[0].pos && a[0].kind == b[0].kind));
        // Packets 1 to 3 have nothing after them on their link and
        // direction: a reorder of each is not applicable, packet 2's in
        // shard 0 and the other two in shard 1.
        assert_eq!((levels[0].not_applicable, levels[1].not_applicable), (1, 2));
        // Below the first fault, a shard takes every child.
        let deeper = Node::new(whole[0].clone(), node.egress.clone());
        let shard1 = Shard::new(1, 2).unwrap();
        assert_eq!(
            children(&deeper, &bound, &mut Level::default(), Some(shard1)).len(),
            children(&deeper, &bound, &mut Level::default(), None).len()
        );
    }

    /// A reorder whose hold is the delay bound is the delay rule itself.
    #[test]
    fn a_reorder_equal_to_the_delay_is_pruned() {
        let node = Node::new(
            Vec::new(),
            vec![
                pkt(0, 0, false, Opcode::Write),
                pkt(1999, 0, false, Opcode::Write),
            ],
        );
        let bound = Bound {
            faults: 1,
            kinds: vec![Kind::Delay, Kind::Reorder],
            delay_ns: 2000,
            merge_bound: false,
            merge_states: false,
        };
        let mut level = Level::default();
        let kids = children(&node, &bound, &mut level, None);
        assert_eq!(level.same_rule, 1);
        assert_eq!(level.not_applicable, 1);
        assert_eq!(kids.len(), 2);
        assert!(kids.iter().all(|s| s[0].kind == Kind::Delay));
    }

    #[test]
    fn the_estimate_counts_sets_of_packets_times_kinds() {
        // 1 + 10·5 + 45·25
        assert_eq!(estimate(10, 5, 2), 1 + 50 + 1125);
        assert_eq!(estimate(3, 1, 5), 8);
        assert_eq!(estimate(0, 5, 3), 1);
    }
}
