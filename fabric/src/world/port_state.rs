//! A port's state: what a hop reads of its port and link (`PortHot`),
//! its queue's count and flight line (`PortState`), a packet in that
//! line (`InFlight`), and the ECN marking draw. The egress itself (queue,
//! tail drop, trimming, launch, arrival) is `ports`.

use super::*;

/// What a hop needs to know about a port and its link, copied next to the
/// port's state so a hop reads one place instead of five tables (on the
/// 1024-host shape each of those reads was a cache miss).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct PortHot {
    pub(super) link: LinkId,
    pub(super) direction: Direction,
    /// The host this port belongs to (its NIC's egress), or [`NO_HOST`]
    /// (see [`PortHot::host`]).
    pub(super) host_raw: u32,
    /// The node at the far end, and its host number if it is one (or
    /// [`NO_HOST`]).
    pub(super) peer: NodeId,
    pub(super) peer_host_raw: u32,
    pub(super) mtu: u32,
    pub(super) queue_bytes: u64,
    /// Mark above this many queued bytes (`u64::MAX`: never).
    pub(super) ecn_threshold: u64,
    /// Above the threshold, mark for certain from this many bytes more
    /// (0: at once); in between with a probability that grows linearly.
    pub(super) ecn_span: u64,
    /// A switch port that trims on a full queue.
    pub(super) trim: bool,
    /// A switch port that serves control packets ahead of its queue.
    pub(super) priority: bool,
    pub(super) bandwidth_bps: u64,
    /// Picoseconds per bit when that is a whole number that fits 32 bits
    /// (every rate from 1 kb/s that divides 1 Tb/s), else 0 and
    /// serialization divides.
    pub(super) ps_per_bit: u32,
    pub(super) latency: Duration,
    pub(super) tapped: bool,
    /// In a split run: the far end is another shard's, which `to_shard`
    /// names (`shards`).
    pub(super) remote: bool,
    pub(super) to_shard: u16,
}

/// No host at this end of the port (a switch).
pub(super) const NO_HOST: u32 = u32::MAX;

impl PortHot {
    /// The host this port belongs to (its NIC's egress), if any.
    #[inline]
    pub(super) fn host(&self) -> Option<u32> {
        (self.host_raw != NO_HOST).then_some(self.host_raw)
    }

    /// The host at the far end, if it is one.
    #[inline]
    pub(super) fn peer_host(&self) -> Option<u32> {
        (self.peer_host_raw != NO_HOST).then_some(self.peer_host_raw)
    }
}

/// A port's state: two cache lines, aligned (the constants a hop reads,
/// then the queue), so a hop touches exactly those two.
#[derive(Debug)]
#[repr(align(64))]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct PortState {
    pub(super) hot: PortHot,
    /// When the last packet given to this port finishes serializing.
    #[cfg_attr(
        feature = "fingerprint",
        serde(serialize_with = "udrma_proto::not_before_now")
    )]
    pub(super) free_at: Instant,
    /// How many packets at the tail of `flight` were waiting to start
    /// when last looked at (starts only grow along the line, so the
    /// waiting ones are always its tail). Brought up to date only when a
    /// decision depends on it ([`PortState::settle`]), so between times
    /// it may still count packets that have started.
    pub(super) waiting: u32,
    /// On a line to another rank: how many packets at the tail of
    /// `flight` are still this rank's to hand on (kept until the window
    /// before their arrival's, `World::hand_on`), the rest being
    /// stand-ins. Always 0 elsewhere.
    #[cfg_attr(feature = "fingerprint", serde(skip))]
    pub(super) kept: u32,
    /// The bytes of those packets (as charged to the queue): never less
    /// than the bytes really waiting.
    pub(super) queued_bytes: u64,
    /// Packets given to the port, in order (FIFO, one rate, one latency:
    /// arrivals and starts both increase). Only the head's arrival is in
    /// the event queue.
    pub(super) flight: VecDeque<InFlight>,
}

/// A packet given to a port: 72 bytes, which a hop reads at the line's
/// far end and writes into the next port's line. What the queue's
/// accounting needs besides, the bytes charged to the queue and when the
/// first bit left, follows from the packet and the port
/// ([`InFlight::charged`], [`InFlight::start`]) instead of being kept
/// (16 bytes an entry less: a large fabric's lines are about a third of
/// its memory).
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct InFlight {
    /// When it reaches the far end.
    pub(super) arrive: Instant,
    pub(super) pkt: Pkt,
}

impl InFlight {
    /// What the sender of a packet handed to another shard keeps of it
    /// for its queue's count: its arrival and its length, no bytes.
    pub(super) fn stand_in(&self) -> InFlight {
        let p = &self.pkt;
        debug_assert!(p.len() <= u64::from(u16::MAX), "a datagram fits 64 KiB");
        InFlight {
            arrive: self.arrive,
            pkt: Pkt {
                serial: p.serial,
                src: p.src,
                dst: p.dst,
                src_port: p.src_port,
                bytes: Vec::new(),
                elided: u16::try_from(p.len()).unwrap_or(u16::MAX),
                nic_work_ps: p.nic_work_ps,
                ce: p.ce,
                trimmed: p.trimmed,
                head: p.head,
            },
        }
    }

    /// Bytes charged to the queue while it waits: the datagram and the
    /// seal (`seal` bytes).
    #[inline]
    pub(super) fn charged(&self, seal: u64) -> u64 {
        self.pkt.len() + seal
    }

    /// When its first bit left `hot`'s port: its arrival less the link's
    /// latency and its serialization (the port's rate and latency never
    /// change, so this is exactly the start `enqueue` worked out).
    #[inline]
    pub(super) fn start(&self, hot: &PortHot, seal: u64) -> Instant {
        Instant(
            self.arrive.as_ps()
                - hot.latency.as_ps()
                - hot.serialization(self.charged(seal)).as_ps(),
        )
    }
}

impl PortHot {
    /// How long `len` bytes of UDP payload (and the wire's overhead) take
    /// to serialize.
    #[inline]
    pub(super) fn serialization(&self, len: u64) -> Duration {
        let bits = (len + WIRE_OVERHEAD) * 8;
        // Exactly the division below, without a 128-bit divide per hop
        // when the rate divides 1 Tb/s.
        match self.ps_per_bit {
            0 => Duration(
                (u128::from(bits) * u128::from(PS_PER_S) / u128::from(self.bandwidth_bps)) as u64,
            ),
            ps => Duration(bits * u64::from(ps)),
        }
    }
}

impl PortState {
    /// The first packet still counted as waiting, if any (the waiting
    /// are the line's tail).
    #[inline]
    pub(super) fn first_waiting(&self) -> Option<&InFlight> {
        let waiting = self.waiting as usize;
        if waiting == 0 {
            return None;
        }
        self.flight.get(self.flight.len().checked_sub(waiting)?)
    }

    /// Makes the queue's count exact where a packet of `len` bytes
    /// joining it at `now` could be judged by it: its drop or trim, its
    /// ECN mark, or the run's deepest queue (`deepest`). The count only
    /// overstates (started packets still counted), so while the
    /// overstated figure decides nothing, the line is not read: reading
    /// its first waiting packet was the one cold load of most switch
    /// hops, and catching up later reads several entries side by side.
    /// A port that has finished serializing everything has no waiting
    /// packet, which needs no line either.
    #[inline]
    pub(super) fn settle(&mut self, now: Instant, len: u64, deepest: u64, seal: u64) {
        if self.free_at <= now {
            self.waiting = 0;
            self.queued_bytes = 0;
            return;
        }
        let hot = &self.hot;
        if self.queued_bytes + len > hot.queue_bytes.min(deepest)
            || self.queued_bytes > hot.ecn_threshold
        {
            self.drain_started(now, seal);
        }
    }

    /// Stops counting the packets that started by `now` as queued.
    #[inline]
    pub(super) fn drain_started(&mut self, now: Instant, seal: u64) {
        while let Some(f) = self.first_waiting() {
            if f.start(&self.hot, seal) > now {
                return;
            }
            self.queued_bytes -= f.charged(seal);
            self.waiting -= 1;
        }
    }

    /// Takes the head of the line off as it arrives (it started long
    /// ago: if still counted as waiting, it stops being counted).
    #[inline]
    pub(super) fn pop_arrived(&mut self, seal: u64) -> Option<InFlight> {
        if self.waiting as usize == self.flight.len() && self.waiting > 0 {
            self.waiting -= 1;
            let f = self.flight.front()?;
            self.queued_bytes -= f.charged(seal);
        }
        self.flight.pop_front()
    }
}

/// Whether a packet that finds `queued` bytes ahead of it is marked, on a
/// port that marks above `threshold` and every packet from `span` bytes
/// above that: always at or beyond `span`, else with probability
/// `over / span` (`over` the bytes above the threshold), drawn as a hash
/// of the packet's serial number and the port (deterministic, and no
/// random stream is drawn from).
#[inline]
pub(super) fn ecn_marks(queued: u64, threshold: u64, span: u64, serial: u64, port: PortId) -> bool {
    if queued <= threshold {
        return false;
    }
    let over = queued - threshold;
    if over >= span {
        return true;
    }
    let h = udrma_proto::rng::mix(serial ^ (u64::from(port) << 40) ^ 0xEC4E_C4EC_4EC4_EC4E);
    // `h * span / 2^64` is uniform over 0..span.
    ((u128::from(h) * u128::from(span)) >> 64) < u128::from(over)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Above a threshold of 4000 bytes with a ramp of 1000: the draw
    /// marks about `over / 1000` of the packets, all of them from 5000
    /// bytes on, none at or below the threshold, and differs from port to
    /// port. Without a ramp, every packet above the threshold.
    #[test]
    fn the_marking_ramp_marks_in_proportion() {
        let share = |queued, span, port| {
            (0..20_000u64)
                .filter(|&s| ecn_marks(queued, 4000, span, s, port))
                .count()
        };
        assert_eq!(share(4000, 1000, 3), 0);
        assert_eq!(share(4000, 0, 3), 0);
        assert_eq!(share(4001, 0, 3), 20_000);
        assert_eq!(share(5000, 1000, 3), 20_000);
        assert_eq!(share(9000, 1000, 3), 20_000);
        for (over, want) in [(1, 20), (250, 5_000), (500, 10_000), (900, 18_000)] {
            let got = share(4000 + over, 1000, 3);
            assert!(
                got.abs_diff(want) <= want / 20 + 10,
                "{over} of 1000 over: {got} of 20000 marked, want about {want}"
            );
        }
        for (a, b) in [(1, 2), (3, 4), (0, 1 << 20)] {
            let differ = (0..1000u64)
                .filter(|&s| ecn_marks(4500, 4000, 1000, s, a) != ecn_marks(4500, 4000, 1000, s, b))
                .count();
            assert!(
                differ > 400,
                "ports {a} and {b} draw apart: {differ} of 1000 differ"
            );
        }
    }

    /// How long the test port takes to send one of its 1000-byte packets.
    fn one() -> u64 {
        port_with_stale_count(0, 0).hot.serialization(1000).as_ps()
    }

    /// A port whose line holds four packets of 1000 bytes, sent back to
    /// back from 0 (it is free after the fourth), the last three still
    /// counted as waiting: 3000 bytes, where half way through the third
    /// only the last really waits.
    fn port_with_stale_count(queue_bytes: u64, ecn_threshold: u64) -> PortState {
        let hot = PortHot {
            link: 0,
            direction: Direction::Forward,
            host_raw: NO_HOST,
            peer: 1,
            peer_host_raw: NO_HOST,
            mtu: 9216,
            queue_bytes,
            ecn_threshold,
            ecn_span: 0,
            trim: false,
            priority: false,
            bandwidth_bps: 100_000_000_000,
            ps_per_bit: 10,
            latency: Duration::from_micros(1),
            tapped: false,
            remote: false,
            to_shard: 0,
        };
        let one = hot.serialization(1000).as_ps();
        let entry = |i: u64| InFlight {
            arrive: Instant((i + 1) * one + 1_000_000),
            pkt: Pkt {
                serial: i,
                src: NodeAddr(0),
                dst: NodeAddr(1),
                src_port: 0,
                bytes: Vec::new(),
                elided: 1000,
                nic_work_ps: 0,
                ce: false,
                trimmed: false,
                head: Head::of(&[]),
            },
        };
        PortState {
            hot,
            free_at: Instant(4 * one),
            waiting: 3,
            kept: 0,
            queued_bytes: 3000,
            flight: (0..4).map(entry).collect(),
        }
    }

    /// Serialization is exact at every rate: by a whole number of
    /// picoseconds a bit where the rate divides 1 Tb/s, by a division
    /// where it does not (3 Gb/s: a third of a nanosecond a bit, rounded
    /// down once per packet, not per bit).
    #[test]
    fn serialization_is_exact_at_every_rate() {
        let mut hot = port_with_stale_count(0, 0).hot;
        let bits = (1000 + WIRE_OVERHEAD) * 8;
        assert_eq!(hot.serialization(1000), Duration(bits * 10), "100 Gb/s");
        hot.bandwidth_bps = 3_000_000_000;
        hot.ps_per_bit = 0;
        assert_eq!(hot.serialization(1000), Duration(bits * 1000 / 3));
        assert_eq!(hot.serialization(0), Duration(WIRE_OVERHEAD * 8 * 1000 / 3));
    }

    /// The head of a line that is still counted as waiting when it
    /// arrives (every packet of the line is) stops being counted: its
    /// charge leaves the queue's count with it. One that was not counted
    /// leaves the count alone.
    #[test]
    fn an_arrival_still_counted_as_waiting_leaves_the_count() {
        let mut st = port_with_stale_count(1 << 20, u64::MAX);
        st.pop_arrived(0).unwrap();
        assert_eq!((st.queued_bytes, st.waiting), (3000, 3), "not counted");
        st.pop_arrived(0).unwrap();
        assert_eq!((st.queued_bytes, st.waiting), (2000, 2), "counted");
        let mut st = port_with_stale_count(1 << 20, u64::MAX);
        st.queued_bytes = 3048;
        st.pop_arrived(16).unwrap();
        st.pop_arrived(16).unwrap();
        assert_eq!(st.queued_bytes, 2032, "the seal is charged too");
    }

    /// A line entry's start and charge, worked out from the packet and
    /// the port, are those the line was built with.
    #[test]
    fn an_entry_knows_its_start_and_its_charge() {
        let st = port_with_stale_count(0, 0);
        for (i, f) in st.flight.iter().enumerate() {
            assert_eq!(f.start(&st.hot, 0), Instant(i as u64 * one()));
            assert_eq!(f.charged(0), 1000);
            assert_eq!(f.charged(16), 1016);
        }
    }

    /// The queue's count is made exact exactly when a decision could
    /// read it: a packet of 1000 bytes joining half way through the third
    /// packet would be dropped by a 3500-byte queue, would set a new
    /// deepest queue above 3500, or would be marked above a threshold of
    /// 2999, if the stale count were believed; each time it is counted
    /// again (1000 bytes, one packet). Where nothing depends on it the
    /// count stays as it was, and a port that has sent everything is
    /// empty without its line being read.
    #[test]
    fn the_queue_is_counted_again_only_when_it_decides_something() {
        let now = Instant(one() * 5 / 2);
        let exact = |st: &PortState| (st.queued_bytes, st.waiting);
        for (queue, threshold, deepest, why) in [
            (3500, u64::MAX, u64::MAX, "a drop"),
            (1 << 20, u64::MAX, 3500, "the deepest queue"),
            (1 << 20, 2999, u64::MAX, "a mark"),
        ] {
            let mut st = port_with_stale_count(queue, threshold);
            st.settle(now, 1000, deepest, 0);
            assert_eq!(exact(&st), (1000, 1), "{why}");
        }
        let mut st = port_with_stale_count(1 << 20, 3000);
        st.settle(now, 1000, 4000, 0);
        assert_eq!(exact(&st), (3000, 3), "nothing depends on it");
        let mut st = port_with_stale_count(1 << 20, u64::MAX);
        st.flight.clear();
        st.settle(Instant(4 * one()), 1000, u64::MAX, 0);
        assert_eq!(exact(&st), (0, 0), "free after the fourth: nothing waits");
    }

    /// The arrival time and the packet, nothing else (the prefetches ask
    /// for two cache lines an entry).
    #[test]
    fn a_packet_in_a_line_is_72_bytes() {
        assert_eq!(std::mem::size_of::<InFlight>(), 72);
    }

    #[test]
    fn a_port_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<PortState>(), 128);
        assert_eq!(std::mem::align_of::<PortState>(), 64);
    }
}
