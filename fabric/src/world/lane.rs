//! The ahead lane's own backlog into a NIC that works packets one at a
//! time (a costed host): the bytes of its waiting packets (control
//! packets under priority, trimmed headers), those that have not started
//! across the link yet.
//!
//! The lane holds as many bytes as its port's queue. Only the lane's own
//! packets count: data the NIC is still placing delays a lane packet,
//! but takes no room in the lane.
//! Before, the lane counted the NIC's whole backlog, so an ACK heading
//! for a NIC busy placing writes through an indirect key (a hundred
//! microseconds a packet) was dropped as if the lane were full, every
//! ACK of a sender for milliseconds, and its WRITEs ran out of retries
//! (docs/testing.md, finding 38).

use std::collections::VecDeque;

use udrma_proto::Instant;

/// One port's lane: when each waiting packet starts across the link, and
/// its bytes.
#[derive(Debug, Default)]
pub(super) struct Lane {
    waiting: VecDeque<(Instant, u64)>,
    bytes: u64,
}

impl Lane {
    /// Whether a packet of `bytes` fits beside the packets still waiting
    /// at `now`, in a lane of `room` bytes.
    pub(super) fn admits(&mut self, now: Instant, bytes: u64, room: u64) -> bool {
        while let Some(&(start, b)) = self.waiting.front() {
            if start > now {
                break;
            }
            self.waiting.pop_front();
            self.bytes = self.bytes.saturating_sub(b);
        }
        self.bytes + bytes <= room
    }

    /// Books a packet of `bytes` that starts across the link at `start`.
    pub(super) fn book(&mut self, start: Instant, bytes: u64) {
        self.waiting.push_back((start, bytes));
        self.bytes += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udrma_proto::Duration;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A lane of 192 bytes takes three 64-byte headers waiting, not a
    /// fourth; once the first has started, the fourth fits.
    #[test]
    fn a_lane_counts_only_its_own_waiting_packets() {
        let mut lane = Lane::default();
        let t0 = Instant::ZERO;
        for k in 1..=3 {
            assert!(lane.admits(t0, 64, 192));
            lane.book(t0 + us(k), 64);
        }
        assert!(!lane.admits(t0, 64, 192));
        assert!(lane.admits(t0 + us(1), 64, 192));
    }
}
