//! One hop at a time: what a switch port and a NIC's own work do to a
//! packet (queue limits to the byte, the MTU, marking ramps, priority for
//! acknowledgements, per-packet NIC cost).

mod common;

use common::*;
use udrma_fabric::{DropReason, FabricConfig, LinkParams, Topology, World};
use udrma_faults::RuleSet;
use udrma_nic::WrId;
use udrma_proto::{Duration, Instant};

/// A packet whose first bit leaves at the very instant another joins the
/// queue is no longer queued: the newcomer is judged against what is
/// still waiting. Hosts 1 and 2 of a star each send a 4 KiB packet at
/// once, and host 1 a second right behind its first; at the switch's port
/// to host 0 one of the first two waits, and host 1's second arrives
/// exactly when that one starts. A queue of one and a half packets holds
/// it then, and nothing is dropped; counting the starting packet as still
/// waiting would drop it.
#[test]
fn a_packet_that_starts_as_another_arrives_no_longer_counts_as_queued() {
    let (payload, len) = full_packet();
    let params = LinkParams {
        queue_bytes: len + len / 2,
        ..LinkParams::default()
    };
    let (mut w, keys) = star(3, params);
    let two = write(&mut w, &keys, 1, 0, 2 * payload);
    let one = write(&mut w, &keys, 2, 0, payload);
    assert!(w.run());
    assert_eq!(completions(&w, 1, two), vec![true]);
    assert_eq!(completions(&w, 2, one), vec![true]);
    assert_eq!(w.stats().dropped.get(&DropReason::QueueFull), None);
    assert!(w.stats().max_queue_bytes >= len, "one packet waited");
}

/// A queue of N bytes holds N bytes: h1 and h2 each WRITE one full
/// packet to h0 at the same instant through a switch port whose queue is
/// exactly one packet. One starts across at once, the other waits and
/// fills the queue to the byte, and neither is dropped; a third packet
/// at the same instant would not fit.
#[test]
fn a_queue_holds_exactly_its_size() {
    let (payload, len) = full_packet();
    let run = |senders: u32| {
        let params = LinkParams {
            queue_bytes: len,
            ..LinkParams::default()
        };
        let (mut w, keys) = star(4, params);
        for h in 1..=senders {
            write(&mut w, &keys, h, 0, payload);
        }
        assert!(w.run());
        (
            w.stats().dropped.get(&DropReason::QueueFull).copied(),
            w.stats().max_queue_bytes,
        )
    };
    assert_eq!(
        run(2),
        (None, len),
        "the second packet fills the queue exactly"
    );
    assert_eq!(
        run(3).0,
        Some(1),
        "the third does not fit (and is sent again)"
    );
}

/// A NIC that spends 5 µs on every packet it moves (`nic_per_packet`,
/// the only cost) delays a one-packet WRITE four times over: the WRITE
/// leaves h1 5 µs late and is taken in 5 µs late at h0, and h0's
/// acknowledgement the same on its way back. Without a cost model the
/// same WRITE completes 20 µs sooner.
#[test]
fn a_costed_nic_spends_its_work_on_the_way_out_and_on_the_way_in() {
    let done_at = |nic_per_packet: Duration| {
        let mut cfg = FabricConfig::default();
        cfg.nic.cost.nic_per_packet = nic_per_packet;
        let (mut w, keys) = world(
            Topology::star(2, LinkParams::default()),
            cfg,
            RuleSet::new(),
            64 * 1024,
        );
        let wr = write(&mut w, &keys, 1, 0, 1000);
        assert!(w.run());
        completed_at(&w, 1, wr).expect("the WRITE completes")
    };
    let free = done_at(Duration::ZERO);
    let costed = done_at(Duration::from_micros(5));
    assert_eq!(
        costed - free,
        Duration::from_micros(20),
        "{free:?} then {costed:?}"
    );
}

/// A star of nine hosts whose switch trims on a 16 KiB queue, every NIC
/// spending `ns` nanoseconds on each packet.
fn trimming_star_into_a_slow_nic(ns: u64) -> (World, Vec<(udrma_nic::MrKey, udrma_nic::MrKey)>) {
    let params = LinkParams {
        queue_bytes: 16 * 1024,
        trim: true,
        ..LinkParams::default()
    };
    let cfg = FabricConfig {
        nic: costed_nics(ns),
        ..FabricConfig::default()
    };
    world(Topology::star(9, params), cfg, RuleSet::new(), 1 << 20)
}

/// Trimmed headers wait for a slow NIC as data does. Eight hosts WRITE
/// 64 KiB each into h0, whose NIC spends 2 µs on every packet (a whole
/// packet's time on the wire is a tenth of that), through a trimming
/// switch port of 16 KiB. The port fills and trims; the headers go ahead
/// of its queue but, like the data, only as fast as h0's receive unit
/// takes packets in, so no packet waits in that unit for more than the
/// one it is working on. Before (finding 30), the headers went straight
/// into the unit and every packet behind them waited there, out of the
/// switch's reach and inside its sender's round trip.
#[test]
fn trimmed_headers_wait_for_a_slow_nic_as_data_does() {
    let (mut w, keys) = trimming_star_into_a_slow_nic(2_000);
    let wrs: Vec<WrId> = (1..9)
        .map(|h| write(&mut w, &keys, h, 0, 64 * 1024))
        .collect();
    assert!(w.run());
    for (i, wr) in wrs.iter().enumerate() {
        assert_eq!(completions(&w, i as u32 + 1, *wr), vec![true]);
    }
    let s = w.stats();
    assert!(s.trimmed > 50, "the port trims: {}", s.trimmed);
    let work = Duration::from_micros(2).as_ps();
    assert!(
        s.max_rx_wait_ps <= work,
        "a packet waited {} ps in h0's receive unit (one packet's work is {work} ps)",
        s.max_rx_wait_ps
    );
}

/// The header lane into a slow NIC is bounded (in bytes, and in the
/// NIC's work: the story below), and a header that finds it full is
/// dropped there. Eight hosts WRITE 64 KiB each into h0, whose NIC
/// spends 20 µs on every packet, through a trimming port of 16 KiB: the
/// lane fills, and later headers are dropped on h0's link (where nothing
/// else is dropped: the port trims data, and h0's own replies leave no
/// faster than they are asked for). Without a bound none is. Every
/// packet that got through still waited in the NIC for no more than one
/// packet's work.
#[test]
fn a_full_header_lane_into_a_slow_nic_drops_the_header() {
    let (mut w, keys) = trimming_star_into_a_slow_nic(20_000);
    let trace = Shared::default();
    w.set_trace_sink(udrma_fabric::TraceFormat::Postcard, Box::new(trace.clone()));
    for h in 1..9 {
        write(&mut w, &keys, h, 0, 64 * 1024);
    }
    w.run_until(Instant::ZERO + Duration::from_millis(20));
    w.finish().unwrap();
    let events = udrma_fabric::trace::read_postcard(&trace.bytes()).unwrap();
    let lane_drops = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                udrma_fabric::TraceEvent::Drop {
                    link: 0,
                    reason: DropReason::QueueFull,
                    ..
                }
            )
        })
        .count();
    assert!(lane_drops > 0, "no header dropped on h0's link");
    // The counters tell them from tail drops on other links: on h0's
    // link every drop is the lane's, and only those are counted as such.
    assert_eq!(w.stats().lane_dropped, lane_drops as u64);
    let work = Duration::from_micros(20).as_ps();
    assert!(
        w.stats().max_rx_wait_ps <= work,
        "{}",
        w.stats().max_rx_wait_ps
    );
}

/// A lane holds no more of the NIC's work than its patience. Eight
/// hosts WRITE 64 KiB each into h0, whose NIC spends 20 µs on every
/// packet, through a trimming port of 16 KiB. A full queue of data is
/// under four packets of 4 KiB, under 80 µs of h0's work; the lane holds
/// more only to take one header from each of the switch's 8 other
/// ports, 160 µs, and no header finds more of the NIC's work ahead of it
/// in the lane (those that would are dropped there). Before (finding
/// 39), the lane held 16 KiB of headers whatever they cost the NIC, and
/// a header found 10.2 ms of work ahead of it: on slow NICs headers
/// waited past their senders' timeouts, and operations ran out of
/// retries with nothing lost to a fault.
#[test]
fn a_lane_holds_no_more_of_the_nics_work_than_its_patience() {
    let (mut w, keys) = trimming_star_into_a_slow_nic(20_000);
    for h in 1..9 {
        write(&mut w, &keys, h, 0, 64 * 1024);
    }
    w.run_until(Instant::ZERO + Duration::from_millis(20));
    let ahead = w.stats().max_lane_work_ps;
    let work = Duration::from_micros(20).as_ps();
    let patience = 8 * work;
    assert!(
        ahead + work <= patience,
        "a header found {ahead} ps of the NIC's work ahead of it; the lane's patience is {patience} ps"
    );
    assert!(
        ahead >= 4 * work,
        "no header found four headers' work ahead of it: {ahead} ps"
    );
}

/// A link carries a datagram of exactly its MTU (and drops one byte
/// more): a one-packet WRITE through links whose MTU is that packet's
/// datagram crosses, and is counted hop by hop (two links each for the
/// WRITE, its acknowledgement and its COMPLETION).
#[test]
fn a_datagram_of_exactly_the_mtu_crosses() {
    let (payload, len) = full_packet();
    let run = |mtu: u64| {
        let params = LinkParams {
            mtu: mtu as u32,
            ..LinkParams::default()
        };
        let (mut w, keys) = star(2, params);
        let wr = write(&mut w, &keys, 1, 0, payload);
        w.run_until(Instant::ZERO + Duration::from_micros(50));
        let s = w.stats();
        (
            completions(&w, 1, wr),
            s.dropped.get(&DropReason::Mtu).copied(),
            s.packet_hops,
        )
    };
    assert_eq!(run(len), (vec![true], None, 6));
    let (done, mtu_drops, _) = run(len - 1);
    assert!(
        done.is_empty() && mtu_drops.is_some(),
        "one byte over the MTU"
    );
}

/// Hosts 1 to 8 of a star each WRITE `bytes` into h0 at once, through
/// links of `params`; every WRITE must complete. Returns the world run.
fn incast_into_h0(params: LinkParams, bytes: u64) -> World {
    let (mut w, keys) = star(9, params);
    let wrs: Vec<WrId> = (1..9).map(|h| write(&mut w, &keys, h, 0, bytes)).collect();
    assert!(w.run());
    for (i, wr) in wrs.iter().enumerate() {
        assert_eq!(completions(&w, i as u32 + 1, *wr), vec![true]);
    }
    w
}

#[test]
fn incast_overflows_a_small_queue_and_still_completes() {
    let params = LinkParams {
        queue_bytes: 32 * 1024,
        ecn_threshold: Some(16 * 1024),
        ..LinkParams::default()
    };
    let w = incast_into_h0(params, 256 * 1024);
    let s = w.stats();
    assert!(
        s.dropped.get(&DropReason::QueueFull).copied().unwrap_or(0) > 0,
        "tail drops at h0's port"
    );
    assert!(s.ecn_marked > 0);
    assert!(s.max_queue_bytes <= 32 * 1024);
}

/// Eight hosts WRITE 128 KiB each into h0 through a 512 KiB queue, with
/// no congestion control, so h0's port fills well past 64 KiB. Marking
/// everything above 16 KiB marks the most; a ramp from 16 KiB to 64 KiB
/// marks fewer (the packets that find 16–64 KiB queued are marked only
/// sometimes), and marking above 64 KiB fewer still. The ramp's draws
/// are a hash, not a random stream: the same run twice marks the same
/// packets.
#[test]
fn a_marking_ramp_marks_between_its_two_ends() {
    let marked = |ecn_threshold, ecn_max| {
        let params = LinkParams {
            queue_bytes: 512 * 1024,
            ecn_threshold: Some(ecn_threshold),
            ecn_max,
            ..LinkParams::default()
        };
        let w = incast_into_h0(params, 128 * 1024);
        assert!(
            w.stats().max_queue_bytes > 64 * 1024,
            "the queue passes the ramp"
        );
        (w.stats().ecn_marked, w.trace().hash())
    };
    let (step_low, _) = marked(16 * 1024, None);
    let (ramp, hash) = marked(16 * 1024, Some(64 * 1024));
    let (step_high, _) = marked(64 * 1024, None);
    assert!(
        step_low > ramp && ramp > step_high && step_high > 0,
        "marked: {step_low} above 16 KiB, {ramp} on the ramp, {step_high} above 64 KiB"
    );
    assert_eq!(
        marked(16 * 1024, Some(64 * 1024)),
        (ramp, hash),
        "deterministic"
    );
    // A ramp that does not rise, or has no start, is refused.
    for (ecn_threshold, ecn_max, want) in [
        (
            Some(64 * 1024),
            Some(16 * 1024),
            "ecn_max (16384 B) must be above ecn_threshold (65536 B)",
        ),
        (None, Some(16 * 1024), "ecn_max without ecn_threshold"),
    ] {
        let params = LinkParams {
            ecn_threshold,
            ecn_max,
            ..LinkParams::default()
        };
        let Err(e) = World::new(
            Topology::star(2, params),
            FabricConfig::default(),
            RuleSet::new(),
        ) else {
            panic!("a ramp from {ecn_threshold:?} to {ecn_max:?} was accepted");
        };
        let e = e.to_string();
        assert!(e.starts_with("topology: link ") && e.contains(want), "{e}");
    }
}

/// h1 and h2 each WRITE 1 MiB to h0, so the switch port toward h0 queues;
/// 50 µs in, h0 WRITEs one packet to h1, whose acknowledgement comes back
/// through that port. Returns how long h0's WRITE took and the stats.
fn ack_behind_a_queue(control_priority: bool) -> (Duration, udrma_fabric::FabricStats) {
    let params = LinkParams {
        control_priority,
        ..LinkParams::default()
    };
    let (mut w, keys) = star(3, params);
    let bulk: Vec<WrId> = [1, 2]
        .iter()
        .map(|h| write(&mut w, &keys, *h, 0, 1 << 20))
        .collect();
    let posted = Instant::ZERO + Duration::from_micros(50);
    w.run_until(posted);
    let small = write(&mut w, &keys, 0, 1, 1000);
    assert!(w.run());
    for (h, wr) in [(1, bulk[0]), (2, bulk[1]), (0, small)] {
        assert_eq!(completions(&w, h, wr), vec![true]);
    }
    let done = completed_at(&w, 0, small).unwrap();
    (done - posted, w.stats().clone())
}

#[test]
fn a_priority_switch_port_sends_acknowledgements_ahead_of_its_queue() {
    let (queued, plain) = ack_behind_a_queue(false);
    let (ahead, prio) = ack_behind_a_queue(true);
    // Behind about 50 µs of queued data without priority; a few
    // microseconds (two hops each way) with it.
    assert!(queued > Duration::from_micros(30), "{queued:?}");
    assert!(ahead < Duration::from_micros(8), "{ahead:?}");
    assert_eq!(plain.control_ahead, 0);
    assert!(prio.control_ahead > 0);
    // Data still queues: the port's depth is the same either way.
    assert!(prio.max_queue_bytes > 500_000);
}
