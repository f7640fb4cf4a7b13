//! The ahead lane's own backlog into a NIC that works packets one at a
//! time (a costed host): the NIC time its waiting packets (control
//! packets under priority, trimmed headers) will take.
//!
//! The lane holds as many bytes as its port's queue, so it is full when
//! its waiting packets take as long as a full lane of packets like the
//! next one would. Only the lane's own packets count: data the NIC is
//! still placing delays a lane packet, but takes no room in the lane.
//! Before, the lane counted the NIC's whole backlog, so an ACK heading
//! for a NIC busy placing writes through an indirect key (a hundred
//! microseconds a packet) was dropped as if the lane were full, every
//! ACK of a sender for milliseconds, and its WRITEs ran out of retries
//! (docs/testing.md, finding 38).

use std::collections::VecDeque;

use udrma_proto::{Duration, Instant};

/// One port's lane: when each waiting packet starts across the link, and
/// the NIC time it costs.
#[derive(Debug, Default)]
pub(super) struct Lane {
    waiting: VecDeque<(Instant, Duration)>,
    work: Duration,
}

impl Lane {
    /// Whether a packet costing `work` fits beside the packets still
    /// waiting at `now`, in a lane that holds `full` of NIC time.
    pub(super) fn admits(&mut self, now: Instant, work: Duration, full: Duration) -> bool {
        while let Some(&(start, w)) = self.waiting.front() {
            if start > now {
                break;
            }
            self.waiting.pop_front();
            self.work = Duration(self.work.0.saturating_sub(w.0));
        }
        self.work + work <= full
    }

    /// Books a packet that starts across the link at `start`.
    pub(super) fn book(&mut self, start: Instant, work: Duration) {
        self.waiting.push_back((start, work));
        self.work = self.work + work;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A lane of 3 µs of NIC time takes three 1 µs packets waiting, not a
    /// fourth; once the first has started, the fourth fits.
    #[test]
    fn a_lane_counts_only_its_own_waiting_packets() {
        let mut lane = Lane::default();
        let t0 = Instant::ZERO;
        for k in 1..=3 {
            assert!(lane.admits(t0, us(1), us(3)));
            lane.book(t0 + us(k), us(1));
        }
        assert!(!lane.admits(t0, us(1), us(3)));
        assert!(lane.admits(t0 + us(1), us(1), us(3)));
    }
}
