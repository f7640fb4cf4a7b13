//! The ahead lane's own backlog into a NIC that works packets one at a
//! time (a costed host): the bytes of its waiting packets (control
//! packets under priority, trimmed headers), those that have not started
//! across the link yet.
//!
//! The lane holds as many bytes as its port's queue, and no packet that
//! would wait to start longer than a full queue of the port's data takes
//! to cross into the NIC (its `patience`). Only the lane's own packets
//! count: data the NIC is still placing delays a lane packet, but takes
//! no room in the lane.
//! The time bound came second (finding 39): a queue's worth of trimmed
//! headers into a slow NIC is several times the queue's own wait (each
//! header costs a whole packet's firmware time, and a header is a tenth
//! of a packet's bytes), so headers waited past their senders' RTO,
//! every sender timed out and sent again into the same queues, and
//! operations ran out of retries with nothing lost to a fault.
//! Before, the lane counted the NIC's whole backlog, so an ACK heading
//! for a NIC busy placing writes through an indirect key (a hundred
//! microseconds a packet) was dropped as if the lane were full, every
//! ACK of a sender for milliseconds, and its WRITEs ran out of retries
//! (docs/testing.md, finding 38).

use std::collections::VecDeque;

use udrma_nic::cost::CostModel;
use udrma_proto::{Duration, Instant};

use super::PS_PER_S;
use crate::topology::Topology;

/// One port's lane: when each waiting packet starts across the link, and
/// its bytes; and what it holds.
#[derive(Debug, Default)]
pub(super) struct Lane {
    waiting: VecDeque<(Instant, u64)>,
    bytes: u64,
    room: Room,
}

/// What a lane holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Room {
    /// Bytes of waiting packets (the port's queue size).
    pub(super) bytes: u64,
    /// The longest a packet may wait to start (`patience`).
    pub(super) patience: Duration,
}

/// How long a packet may wait in the lane of a port whose queue holds
/// `queue_bytes`, on a link of `bandwidth_bps` and `mtu`, into a NIC that
/// spends `mtu_work` on a full packet and `least_work` on any: as long as
/// a full queue of data takes to cross into the NIC (at the line rate, or
/// at the NIC's pace if that is slower), and never less than one packet's
/// work for each of the switch's `other_ports` (a header from each of
/// them can always wait; with a queue of one or two packets, an incast
/// of eight would otherwise lose most of its headers).
pub(super) fn patience(
    queue_bytes: u64,
    bandwidth_bps: u64,
    mtu: u64,
    mtu_work: Duration,
    least_work: Duration,
    other_ports: u64,
) -> Duration {
    let line =
        u128::from(queue_bytes) * 8 * u128::from(PS_PER_S) / u128::from(bandwidth_bps.max(1));
    let nic = u128::from(queue_bytes) * u128::from(mtu_work.as_ps()) / u128::from(mtu.max(1));
    let each = u128::from(other_ports) * u128::from(least_work.as_ps());
    Duration::from_ps(line.max(nic).max(each).min(u128::from(u64::MAX)) as u64)
}

/// A lane for every port of `topo`, into NICs that cost `cost`.
pub(super) fn for_ports(topo: &Topology, cost: &CostModel) -> Vec<Lane> {
    let mut degree = vec![0u64; topo.nodes.len()];
    for p in &topo.ports {
        degree[p.node as usize] += 1;
    }
    topo.ports
        .iter()
        .map(|p| {
            let params = topo.links[p.link as usize].params;
            let room = Room {
                bytes: params.queue_bytes,
                patience: patience(
                    params.queue_bytes,
                    params.bandwidth_bps,
                    u64::from(params.mtu),
                    cost.packet(params.mtu as usize),
                    cost.packet(0),
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
    /// Whether a packet of `bytes` that would start at `start` fits
    /// beside the packets still waiting at `now`.
    pub(super) fn admits(&mut self, now: Instant, start: Instant, bytes: u64) -> bool {
        while let Some(&(s, b)) = self.waiting.front() {
            if s > now {
                break;
            }
            self.waiting.pop_front();
            self.bytes = self.bytes.saturating_sub(b);
        }
        self.bytes + bytes <= self.room.bytes && start <= now + self.room.patience
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
            assert!(lane.admits(t0, t0 + us(k), 64));
            lane.book(t0 + us(k), 64);
        }
        assert!(!lane.admits(t0, t0 + us(4), 64));
        assert!(lane.admits(t0 + us(1), t0 + us(4), 64));
    }

    /// A packet that would start later than the lane's patience is
    /// turned away, however few bytes wait: at 10 µs of patience, one
    /// that starts 10 µs from now fits, one that starts at 11 does not.
    #[test]
    fn a_lane_turns_away_a_packet_that_would_wait_too_long() {
        let mut lane = lane(1 << 20, us(10));
        let t0 = Instant::ZERO;
        assert!(lane.admits(t0, t0 + us(10), 64));
        assert!(!lane.admits(t0, t0 + us(11), 64));
    }

    /// Patience is the time a full queue takes the NIC: 64 KiB at
    /// 10 Gb/s is 52.4 µs on the wire; a NIC that spends 10 µs on each
    /// 4 KiB packet takes 160 µs for the same queue, and that is the
    /// patience; a 4 KiB queue on a switch of 33 ports into a NIC that
    /// spends 2 µs on any packet waits for a header from each of the 32
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
