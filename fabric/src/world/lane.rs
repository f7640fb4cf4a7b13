//! The ahead lane's own backlog into a NIC that works packets one at a
//! time (a costed host): its waiting packets (control packets under
//! priority, trimmed headers), those that have not started across the
//! link yet, their bytes and the NIC's work on them.
//!
//! The lane holds as many bytes as its port's queue, and no more of the
//! NIC's work than its patience: as long as a full queue of the port's
//! data takes to cross into the NIC (`patience`). Only the lane's own
//! packets count: data the NIC is still placing delays a lane packet,
//! but takes no room in the lane (finding 38: the lane counted the
//! data's work as its own, and dropped ACKs heading for a NIC 22 ms
//! behind placing writes through an indirect key).
//! The bound on work came second (finding 39): a queue's bytes of
//! trimmed headers is many more packets than a queue's bytes of data,
//! and into a slow NIC each header costs a whole packet's firmware time,
//! so headers waited past their senders' RTO, every sender timed out and
//! sent again into the same queues, and operations ran out of retries
//! with nothing lost to a fault.

use std::collections::VecDeque;

use udrma_nic::cost::CostModel;
use udrma_proto::{Duration, Instant};

use super::PS_PER_S;
use crate::topology::Topology;

/// One port's lane: when each waiting packet starts across the link,
/// its bytes and the NIC's work on it; and what it holds.
#[derive(Debug, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Lane {
    waiting: VecDeque<(Instant, u64, u64)>,
    bytes: u64,
    /// The NIC's work on the waiting packets, in picoseconds.
    work_ps: u64,
    room: Room,
}

/// What a lane holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Room {
    /// Bytes of waiting packets (the port's queue size).
    pub(super) bytes: u64,
    /// The NIC's work on waiting packets (`patience`).
    pub(super) patience: Duration,
}

/// How much of the NIC's work a lane may hold, on a port whose queue
/// holds `queue_bytes`, on a link of `bandwidth_bps`, into a NIC that
/// spends `full_work` on a data packet of `full` bytes and `least_work`
/// on any: as long as a full queue of data takes to cross into the NIC
/// (at the line rate, or at the NIC's pace if that is slower), and never
/// less than one packet's work for each of the switch's `other_ports` (a
/// header from each of them can always wait; with a queue of one or two
/// packets, an incast of eight would otherwise lose most of its
/// headers).
pub(super) fn patience(
    queue_bytes: u64,
    bandwidth_bps: u64,
    full: u64,
    full_work: Duration,
    least_work: Duration,
    other_ports: u64,
) -> Duration {
    let line =
        u128::from(queue_bytes) * 8 * u128::from(PS_PER_S) / u128::from(bandwidth_bps.max(1));
    let nic = u128::from(queue_bytes) * u128::from(full_work.as_ps()) / u128::from(full.max(1));
    let each = u128::from(other_ports) * u128::from(least_work.as_ps());
    Duration::from_ps(line.max(nic).max(each).min(u128::from(u64::MAX)) as u64)
}

/// A lane for every port of `topo`, into NICs that cost `cost` and send
/// data packets of at most `packet` bytes (the link's MTU if smaller).
pub(super) fn for_ports(topo: &Topology, cost: &CostModel, packet: u64) -> Vec<Lane> {
    let mut degree = vec![0u64; topo.nodes.len()];
    for p in &topo.ports {
        degree[p.node as usize] += 1;
    }
    topo.ports
        .iter()
        .map(|p| {
            let params = topo.links[p.link as usize].params;
            let full = packet.min(u64::from(params.mtu)).max(1);
            let room = Room {
                bytes: params.queue_bytes,
                patience: patience(
                    params.queue_bytes,
                    params.bandwidth_bps,
                    full,
                    cost.packet(full as usize),
                    cost.control(udrma_proto::packet::HEADER_LEN),
                    degree[p.node as usize].saturating_sub(1),
                ),
            };
            Lane {
                room,
                ..Lane::default()
            }
        })
        .collect()
}

impl Lane {
    /// Whether a packet of `bytes` on which the NIC spends `work` fits
    /// beside the packets still waiting at `now`; if it does, the NIC's
    /// work on the lane's packets ahead of it.
    pub(super) fn admits(&mut self, now: Instant, bytes: u64, work: Duration) -> Option<Duration> {
        while let Some(&(s, b, w)) = self.waiting.front() {
            if s > now {
                break;
            }
            self.waiting.pop_front();
            self.bytes = self.bytes.saturating_sub(b);
            self.work_ps = self.work_ps.saturating_sub(w);
        }
        let fits = self.bytes + bytes <= self.room.bytes
            && self.work_ps + work.as_ps() <= self.room.patience.as_ps();
        fits.then_some(Duration::from_ps(self.work_ps))
    }

    /// Books a packet of `bytes` and `work` that starts across the link
    /// at `start`.
    pub(super) fn book(&mut self, start: Instant, bytes: u64, work: Duration) {
        self.waiting.push_back((start, bytes, work.as_ps()));
        self.bytes += bytes;
        self.work_ps += work.as_ps();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn lane(bytes: u64, patience: Duration) -> Lane {
        Lane {
            room: Room { bytes, patience },
            ..Lane::default()
        }
    }

    /// A lane of 192 bytes takes three 64-byte headers waiting, not a
    /// fourth; once the first has started, the fourth fits.
    #[test]
    fn a_lane_counts_only_its_own_waiting_packets() {
        let mut lane = lane(192, us(1000));
        let t0 = Instant::ZERO;
        for k in 1..=3 {
            assert!(lane.admits(t0, 64, us(1)).is_some());
            lane.book(t0 + us(k), 64, us(1));
        }
        assert_eq!(lane.admits(t0, 64, us(1)), None);
        assert_eq!(lane.admits(t0 + us(1), 64, us(1)), Some(us(2)));
    }

    /// A lane holds no more of the NIC's work than its patience, however
    /// few bytes wait, and however late the NIC's own backlog of data
    /// makes its packets start: at 10 µs of patience, a fifth packet of
    /// 2 µs fits behind four, a sixth does not; the four starting a
    /// millisecond from now (the NIC busy placing data) changes nothing.
    #[test]
    fn a_lane_holds_no_more_work_than_its_patience() {
        let mut lane = lane(1 << 20, us(10));
        let t0 = Instant::ZERO;
        for k in 1..=4 {
            assert!(lane.admits(t0, 64, us(2)).is_some());
            lane.book(t0 + us(1000 + 2 * k), 64, us(2));
        }
        assert_eq!(lane.admits(t0, 64, us(2)), Some(us(8)));
        lane.book(t0 + us(1010), 64, us(2));
        assert_eq!(lane.admits(t0, 64, us(2)), None);
    }

    /// Patience is the time a full queue takes the NIC: 64 KiB at
    /// 10 Gb/s is 52.4 µs on the wire; a NIC that spends 10 µs on each
    /// 4 KiB packet takes 160 µs for the same queue, and that is the
    /// patience; a 4 KiB queue on a switch of 33 ports into a NIC that
    /// spends 2 µs on any packet holds a header from each of the 32
    /// others, 64 µs.
    #[test]
    fn patience_is_a_full_queues_time_at_the_slower_of_link_and_nic() {
        let kib = 1024;
        let wire = patience(64 * kib, 10_000_000_000, 4096, us(0), us(0), 3);
        assert_eq!(wire.as_ps(), 52_428_800);
        let nic = patience(64 * kib, 10_000_000_000, 4096, us(10), us(1), 3);
        assert_eq!(nic, us(160));
        let fan_in = patience(4 * kib, 10_000_000_000, 4096, us(2), us(2), 32);
        assert_eq!(fan_in, us(64));
    }
}
