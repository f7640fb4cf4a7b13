//! `--merge-bound`: an estimate of how much state merging could save,
//! made before the sound fingerprint (`merge`, `--merge-states`) existed,
//! and still a fast first look.
//!
//! Two runs in the same state at a decision point have the same future:
//! without further faults they judge the same packets, at the same times
//! relative to that point. So wherever a sound fingerprint would merge two
//! runs, their futures are equal too, and merging on equal futures cuts
//! there and in more places (states that differ only where the
//! fault-free future does not look: a counter, an RTT estimate that no
//! timer reaches, the memory a check reads). Its count of runs is what we
//! expect the best merging to approach; that it is a floor is an
//! argument, not a proof (a run cut here may lead, under a sound search,
//! to states that are pruned later and are not here; hashes collide; a
//! corruption's bit depends on the rule's place in the schedule). Nor is
//! its verdict a proof: the schedules it leaves out were never shown to
//! behave like the ones it kept.
//!
//! The future at position `q` of a run's egress log is the log from `q`
//! on, each packet as the fault rules see it (link, direction, hosts,
//! opcode, flags, message and segment) with its time as the gap from
//! the packet before (the first's gap is not counted: it is "now").

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use udrma_fabric::Egress;

/// The futures recorded so far, each with the most faults a schedule
/// that reached it had left.
#[derive(Debug, Default)]
pub struct Futures {
    seen: BTreeMap<u64, usize>,
    /// Runs whose children were cut because they met an earlier future.
    pub met: u64,
}

impl Futures {
    /// Futures recorded.
    pub fn recorded(&self) -> usize {
        self.seen.len()
    }

    /// Walks `log` from `start` (the packet after the run's last fault)
    /// and returns the first position whose future was already recorded
    /// with at least `left` faults to spend: from there on the run's
    /// children would be taken to repeat that run's. Records the futures
    /// before it. `usize::MAX` when none met. (The search makes runs level
    /// by level, so an earlier run never had fewer faults left; the test
    /// keeps the rule whole.)
    pub fn cut(&mut self, log: &[Egress], start: usize, left: usize) -> usize {
        let n = log.len();
        // tail[i]: the packets from i on, each with its gap from the one
        // before; so the future at q is packet q (gap not counted) and
        // tail[q + 1].
        let mut tail = vec![0u64; n + 1];
        for i in (start + 1..n).rev() {
            let mut h = DefaultHasher::new();
            (log[i].t.as_ps() - log[i - 1].t.as_ps()).hash(&mut h);
            packet(&log[i], &mut h);
            tail[i + 1].hash(&mut h);
            tail[i] = h.finish();
        }
        for q in start..n {
            let mut h = DefaultHasher::new();
            packet(&log[q], &mut h);
            tail[q + 1].hash(&mut h);
            let future = h.finish();
            match self.seen.get(&future) {
                Some(&had) if had >= left => {
                    self.met += 1;
                    return q;
                }
                _ => {
                    self.seen.insert(future, left);
                }
            }
        }
        usize::MAX
    }
}

/// What the fault rules see of a packet, apart from its time.
fn packet(e: &Egress, h: &mut DefaultHasher) {
    e.link.hash(h);
    (e.direction == udrma_faults::Direction::Reverse).hash(h);
    (e.src.0, e.dst.0).hash(h);
    e.opcode.map(u8::from).hash(h);
    e.flags.bits().hash(h);
    (e.msg, e.seg).hash(h);
}

#[cfg(test)]
mod tests {
    use super::*;
    use udrma_faults::Direction;
    use udrma_proto::{Flags, Instant, NodeAddr, Opcode};

    fn at(t_ns: u64, seg: u32) -> Egress {
        Egress {
            t: Instant(t_ns * 1000),
            link: 0,
            direction: Direction::Forward,
            src: NodeAddr(0),
            dst: NodeAddr(1),
            opcode: Some(Opcode::Write),
            flags: Flags::empty(),
            msg: 1,
            seg,
        }
    }

    /// A run whose last three packets go as another's did, later by any
    /// amount, meets that run's future at the first of them; one with a
    /// gap of another length does not.
    #[test]
    fn the_same_packets_at_the_same_gaps_later_are_one_future() {
        let mut f = Futures::default();
        let first = [at(0, 0), at(10, 1), at(20, 2), at(30, 3)];
        assert_eq!(f.cut(&first, 0, 2), usize::MAX);
        assert_eq!(f.recorded(), 4);
        // Segment 0 again (a retransmission), then 1..3 shifted by 500 ns.
        let shifted = [at(0, 0), at(400, 0), at(510, 1), at(520, 2), at(530, 3)];
        assert_eq!(f.cut(&shifted, 0, 2), 2, "meets at segment 1");
        assert_eq!(f.met, 1);
        // With more faults left than the recorded run had, it is not cut.
        assert_eq!(f.cut(&shifted, 2, 3), usize::MAX);
        // Another gap between segments 2 and 3: another future.
        let other = [at(0, 1), at(10, 2), at(25, 3)];
        assert_eq!(f.cut(&other, 0, 1), 2, "only the last packet alone matches");
    }

    /// The same gaps with other packets (another segment, another
    /// direction) are another future.
    #[test]
    fn other_packets_at_the_same_gaps_are_another_future() {
        let mut f = Futures::default();
        assert_eq!(f.cut(&[at(0, 0), at(10, 1)], 0, 1), usize::MAX);
        assert_eq!(f.cut(&[at(0, 5), at(10, 6)], 0, 1), usize::MAX);
        let mut back = at(0, 1);
        back.direction = Direction::Reverse;
        assert_eq!(f.cut(&[back], 0, 1), usize::MAX);
        assert_eq!(
            f.cut(&[at(7, 1)], 0, 1),
            0,
            "segment 1 forward, alone, was seen"
        );
    }
}
