//! `--merge-states`: sound state merging. Before every event a run
//! takes the fingerprint of the whole world's state (every host's NIC,
//! app and held packets, every port's queue and flight line, the pending
//! events in the order they will come out, the completion log; times
//! relative to the event's; see `udrma_fabric`'s `world/fingerprint.rs`).
//! The decision for packet `i` of a run's egress log is made inside the
//! event that judged it: its state is that event's fingerprint and the
//! packet's place among the packets the event judged. Two runs at one
//! decision state go on alike for every placement of further faults, so
//! a run that reaches a decision state an earlier run reached with at
//! least as many faults left to spend has its children cut from there:
//! the earlier run's children covered them.
//!
//! A decision inside the event of the run's own last fault is neither
//! recorded nor cut (the fingerprint was taken before that fault struck).
//!
//! A corruption flips a bit drawn from its rule's own stream, named by
//! the rule's place in the schedule (`check-3-corrupt`): the same fault
//! on the same packet flips another bit as a schedule's third fault than
//! as its second. So when `corrupt` is among the kinds, states merge only
//! between schedules of the same length.

use std::collections::BTreeMap;

/// A decision state: the fingerprint of the event's state, the packet's
/// place among those the event judged, and (when only equal lengths
/// merge) the faults left.
type Decision = (u128, u32, Option<usize>);

/// The decision states recorded so far: for each, the runs that reached
/// it, as (faults left, time reached), none of them dominated by
/// another.
#[derive(Debug, Default)]
pub struct States {
    /// (fingerprint, place in its event, faults left if only equal
    /// lengths merge) → (faults left, time in ps) of the runs that
    /// reached it.
    seen: BTreeMap<Decision, Vec<(usize, u64)>>,
    /// Merge only schedules of one length (`corrupt` is searched).
    pub same_length: bool,
    /// Runs whose children were cut because they met an earlier state.
    pub met: u64,
    /// States the shards of a merged search recorded (each shard its
    /// own), for a search added up from shard files.
    by_shards: usize,
}

impl States {
    /// No state recorded yet; with `same_length`, states merge only
    /// between schedules of one length.
    pub fn new(same_length: bool) -> States {
        States {
            same_length,
            ..States::default()
        }
    }

    /// A search's tally added up from its shards: `met` runs cut, and
    /// `recorded` states (each shard's own, added).
    pub fn tallied(same_length: bool, met: u64, recorded: usize) -> States {
        States {
            same_length,
            met,
            by_shards: recorded,
            ..States::default()
        }
    }

    /// States recorded.
    pub fn recorded(&self) -> usize {
        self.seen.len() + self.by_shards
    }

    /// Walks the decisions of a run from `start` (the packet after its
    /// last fault) to `judged` (the packets its egress log holds), with
    /// `fingerprints` (before each event: packets judged before it, its
    /// time, the state's fingerprint or 0); returns the first position
    /// whose decision state an earlier run reached with at least `left`
    /// faults to spend and no more time to spend (as late or later: a
    /// run with less time before the limit that passed, passes with
    /// more), recording the ones before it. `usize::MAX` when none met.
    pub fn cut(
        &mut self,
        fingerprints: &[(u32, u64, u128)],
        judged: usize,
        start: usize,
        left: usize,
    ) -> usize {
        let mut e = 0;
        for i in start..judged {
            // The event that judged packet i: the last that began with
            // at most i packets judged.
            while e + 1 < fingerprints.len() && fingerprints[e + 1].0 as usize <= i {
                e += 1;
            }
            let Some(&(before, at, f)) = fingerprints.get(e) else {
                break;
            };
            if (before as usize) < start || f == 0 {
                // The run's own last fault struck in this event (its
                // fingerprint is 0, "none").
                continue;
            }
            let key = (f, i as u32 - before, self.same_length.then_some(left));
            let runs = self.seen.entry(key).or_default();
            if runs.iter().any(|&(l, t)| l >= left && t >= at) {
                self.met += 1;
                return i;
            }
            runs.retain(|&(l, t)| !(l <= left && t <= at));
            runs.push((left, at));
        }
        usize::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events of a run: (packets judged before it, time, fingerprint).
    const RUN: [(u32, u64, u128); 4] = [(0, 0, 7), (2, 10, 8), (2, 20, 0), (3, 30, 9)];

    #[test]
    fn a_run_meets_a_state_an_earlier_run_reached_with_as_much_left_as_late() {
        let mut s = States::new(false);
        // The first run records its decisions: packets 0 and 1 in the
        // event of 7, packet 2 in the unfingerprinted one (none), 3 and 4
        // in the event of 9.
        assert_eq!(s.cut(&RUN, 5, 0, 2), usize::MAX);
        assert_eq!(s.recorded(), 4);
        // The same states, as late, with as many faults left: cut at the
        // first.
        assert_eq!(s.cut(&RUN, 5, 0, 2), 0);
        // From packet 3 on (its last fault on packet 2, whose event is
        // the unfingerprinted one): packet 3 met.
        assert_eq!(s.cut(&RUN, 5, 3, 1), 3);
        assert_eq!(s.met, 2);
    }

    #[test]
    fn more_faults_left_or_more_time_to_spend_is_not_covered() {
        let mut s = States::new(false);
        assert_eq!(s.cut(&RUN[3..], 5, 3, 1), usize::MAX);
        // More faults left: the earlier run searched less below.
        assert_eq!(s.cut(&RUN[3..], 5, 3, 2), usize::MAX);
        // Later in time (less time before the limit): not covered by a
        // run that had more, which might have needed it.
        let mut t = States::new(false);
        assert_eq!(t.cut(&RUN[3..], 5, 3, 1), usize::MAX);
        let later = [(3, 40, 9)];
        assert_eq!(t.cut(&later, 5, 3, 1), usize::MAX);
        // Earlier (more time to spend), as much left: covered by either.
        let earlier = [(3, 25, 9)];
        assert_eq!(t.cut(&earlier, 5, 3, 1), 3);
    }

    #[test]
    fn one_state_is_met_whatever_number_of_packets_led_to_it() {
        let mut s = States::new(false);
        // State 9 with packets 3 and 4 judged in its event...
        assert_eq!(s.cut(&RUN[3..], 5, 3, 1), usize::MAX);
        // ... reached (as early) by a run that had judged six packets
        // before it: its first packet there is the other's first.
        let longer = [(0, 0, 5), (6, 20, 9)];
        assert_eq!(s.cut(&longer, 8, 6, 1), 6);
    }

    #[test]
    fn a_state_keeps_every_run_no_other_covers() {
        let mut s = States::new(false);
        let at = |t: u64| [(3, t, 9)];
        // Two faults left at 30, then one left at 40: neither covers the
        // other, so both stay.
        assert_eq!(s.cut(&at(30), 4, 3, 2), usize::MAX);
        assert_eq!(s.cut(&at(40), 4, 3, 1), usize::MAX);
        // Two left at 25: covered by the first only.
        assert_eq!(s.cut(&at(25), 4, 3, 2), 3);
        // One left at 35: covered by the second only.
        assert_eq!(s.cut(&at(35), 4, 3, 1), 3);
        // Two left at 35: by neither; it then covers the first.
        assert_eq!(s.cut(&at(35), 4, 3, 2), usize::MAX);
        assert_eq!(s.cut(&at(33), 4, 3, 2), 3);
        // The other way round: one left at 40, then two at 30; one left
        // at 35 is still covered by the first.
        let mut s = States::new(false);
        assert_eq!(s.cut(&at(40), 4, 3, 1), usize::MAX);
        assert_eq!(s.cut(&at(30), 4, 3, 2), usize::MAX);
        assert_eq!(s.cut(&at(35), 4, 3, 1), 3);
    }

    #[test]
    fn a_decision_in_the_event_of_the_last_fault_is_not_compared() {
        let mut s = States::new(false);
        // The last fault on packet 0: packet 1 is judged in the same
        // event (begun before the fault struck); only 3 and 4 count.
        assert_eq!(s.cut(&RUN, 5, 1, 1), usize::MAX);
        assert_eq!(s.recorded(), 2);
    }

    #[test]
    fn with_corruptions_only_schedules_of_one_length_merge() {
        let mut s = States::new(true);
        assert_eq!(s.cut(&RUN[3..], 5, 3, 2), usize::MAX);
        // Fewer faults left, which would be covered otherwise: another
        // length, another key.
        assert_eq!(s.cut(&RUN[3..], 5, 3, 1), usize::MAX);
        assert_eq!(s.cut(&RUN[3..], 5, 3, 1), 3);
    }
}
