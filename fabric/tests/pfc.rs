//! A lossless fabric (Priority Flow Control, IEEE 802.1Qbb): pauses that
//! stop a sender at the instant its ingress passes XOFF and start it
//! again at XON, headroom that takes what is in flight, incasts that drop
//! nothing, a victim flow blocked by another's congestion, and a ring
//! whose buffers wait on each other until nothing moves.

mod common;

use common::*;
use udrma_fabric::{
    read_postcard, DropReason, FabricConfig, LinkParams, PfcConfig, PfcError, Topology, TraceEvent,
    TraceFormat, World, PFC_WIRE_BYTES, WIRE_OVERHEAD,
};
use udrma_faults::RuleSet;
use udrma_proto::{Duration, Instant};

const GBPS: u64 = 1_000_000_000;

/// How long `bytes` of datagram take on a link of `bps` (with the wire's
/// overhead).
fn ser(bytes: u64, bps: u64) -> Duration {
    Duration::from_ps((bytes + WIRE_OVERHEAD) * 8 * 1_000_000_000_000 / bps)
}

fn traced(w: &mut World) -> Shared {
    let sink = Shared::default();
    w.set_trace_sink(TraceFormat::Postcard, Box::new(sink.clone()));
    sink
}

/// Four hosts WRITE 1 MiB each into a fifth through one switch whose
/// ports queue 64 KiB and mark ECN above 32 KiB. Lossy, the port drops (and the senders send
/// again); lossless, nothing is dropped, the switch pauses the senders'
/// links, and every byte lands.
#[test]
fn an_incast_into_a_lossless_switch_drops_nothing_and_pauses_its_senders() {
    let run = |pfc: bool| {
        let params = LinkParams {
            queue_bytes: 64 << 10,
            ecn_threshold: Some(32 << 10),
            ..LinkParams::default()
        };
        let (mut w, keys) = star(5, params);
        if pfc {
            w.set_pfc(PfcConfig::default()).unwrap();
        }
        let wrs: Vec<_> = (1..5)
            .map(|h| write(&mut w, &keys, h, 0, 1 << 20))
            .collect();
        w.run_until(Instant::ZERO + Duration::from_millis(100));
        for (h, wr) in (1..5).zip(wrs) {
            assert_eq!(completions(&w, h, wr), vec![true], "host {h}");
        }
        let pauses: u64 = w.pfc_stats().iter().map(|s| s.pauses).sum();
        assert!(w.stats().ecn_marked > 0, "a lossless queue still marks");
        assert!(w.pfc_deadlock().is_none());
        (w.stats().dropped_total(), pauses, w.pfc_stats())
    };
    let (lossy_drops, _, none) = run(false);
    assert!(lossy_drops > 0, "the lossy port drops");
    assert!(none.is_empty());
    let (drops, pauses, stats) = run(true);
    assert_eq!(drops, 0, "lossless: nothing dropped");
    assert!(pauses > 0, "the senders were paused");
    let xoff = PfcConfig::default().xoff_bytes;
    let (needed, _) = PfcConfig::headroom_needed(100 * GBPS, Duration::from_micros(1), 9216);
    for s in &stats {
        assert!(
            s.max_ingress_bytes <= xoff + needed,
            "an ingress held {} B, past XOFF and headroom",
            s.max_ingress_bytes
        );
    }
    assert!(
        stats.iter().any(|s| s.max_ingress_bytes > xoff),
        "the headroom took bytes in flight"
    );
    assert!(
        stats.iter().all(|s| s.pauses == s.resumes),
        "every pause ended"
    );
}

/// One WRITE of sixteen 4 KiB packets from h0 to h1 across a dumbbell
/// whose middle link runs at a tenth of the edge's speed, XOFF at two and
/// a half packets, XON at half of one. Packet i reaches s0 at a(i) = (i +
/// 1)·T + 1 µs (T one packet at 100 Gb/s; h0 sends back to back from 0);
/// s0 starts packet 0 on the slow link at once and the next every 10·T.
/// So after packet 3 arrives three wait (counted as they arrive,
/// uncounted as they start): s0 sends the PAUSE back at exactly a(3). It
/// reaches h0 84 bytes and a microsecond later, when h0 has started
/// packets 0 to 9 (packet j leaves at j·T), and h0 starts no more. Nine
/// wait at s0 at most; when packet 9 starts on, at a(0) + 9·10·T, none
/// does, and s0 sends the RESUME; h0 starts packet 10 the instant it
/// arrives. The port's paused time is the time between the frames'
/// arrivals, for this pause and the one that follows.
/// The slow-middle dumbbell of the stories below: one WRITE of sixteen
/// packets from h0 to h1 with XOFF and XON as given. Gives the world, the
/// times h0's data packets left, and every PFC frame (time, link,
/// direction, quanta).
#[allow(clippy::type_complexity)]
fn slow_middle(xoff: u64, xon: u64) -> (World, Vec<Instant>, Vec<(Instant, u32, u8, u16)>) {
    let (payload, len) = full_packet();
    let edge = LinkParams::default();
    let slow = LinkParams {
        bandwidth_bps: 10 * GBPS,
        ..edge
    };
    let (mut w, keys) = world(
        Topology::dumbbell(1, edge, slow),
        FabricConfig::default(),
        RuleSet::new(),
        1 << 20,
    );
    w.set_pfc(PfcConfig {
        xoff_bytes: xoff,
        xon_bytes: xon,
        ..PfcConfig::default()
    })
    .unwrap();
    let sink = traced(&mut w);
    let wr = write(&mut w, &keys, 0, 1, 16 * payload);
    w.run_until(Instant::ZERO + Duration::from_millis(10));
    assert!(w.peek_time().is_none(), "nothing left to do");
    assert_eq!(completions(&w, 0, wr), vec![true]);
    assert!(landed(&w, &keys, 0, 1, 16 * payload as usize));
    w.finish().unwrap();
    let events = read_postcard(&sink.bytes()).unwrap();
    let h0_link = w.topology().link_by_name("h0-s0").unwrap();
    let h0_tx: Vec<Instant> = events
        .iter()
        .filter_map(|e| match *e {
            TraceEvent::Tx {
                t,
                link,
                dir: 0,
                len: l,
                ..
            } if link == h0_link && u64::from(l) == len => Some(Instant(t)),
            _ => None,
        })
        .collect();
    assert_eq!(h0_tx.len(), 16);
    assert_eq!(h0_tx[0], Instant::ZERO);
    let pfc = events
        .iter()
        .filter_map(|e| match *e {
            TraceEvent::Pfc {
                t,
                link,
                dir,
                quanta,
                ..
            } => Some((Instant(t), link, dir, quanta)),
            _ => None,
        })
        .collect();
    (w, h0_tx, pfc)
}

/// When packet i of the slow-middle run reaches s0: (i + 1)·T + 1 µs.
fn reaches_s0(i: u64) -> Instant {
    let t = ser(full_packet().1, 100 * GBPS);
    Instant::ZERO + Duration::from_ps(t.as_ps() * (i + 1)) + Duration::from_micros(1)
}

#[test]
fn a_pause_stops_a_flow_at_xoff_and_a_resume_starts_it_at_xon() {
    let len = full_packet().1;
    let (w, h0_tx, pfc) = slow_middle(len * 5 / 2, len / 2);
    let a = reaches_s0;
    let h0_link = w.topology().link_by_name("h0-s0").unwrap();
    let lat = Duration::from_micros(1);
    let frame = ser(PFC_WIRE_BYTES - WIRE_OVERHEAD, 100 * GBPS);
    assert_eq!(
        pfc[0],
        (a(3), h0_link, 1, 0xFFFF),
        "a PAUSE toward h0 as packet 3 arrives"
    );
    let paused_at = a(3) + frame + lat;
    let before = h0_tx.iter().filter(|&&x| x < paused_at).count();
    assert_eq!(before, 10, "h0 had started packets 0 to 9");
    let resume = a(0) + Duration::from_ps(ser(len, 10 * GBPS).as_ps() * 9);
    assert_eq!(
        pfc[1],
        (resume, h0_link, 1, 0),
        "a RESUME as packet 9 starts on"
    );
    assert_eq!(
        h0_tx[10],
        resume + frame + lat,
        "packet 10 leaves as it arrives"
    );
    // The pauses h0's port saw, and for how long.
    let port = w.topology().links[h0_link as usize].ports[0] as usize;
    let stats = &w.pfc_stats()[port];
    assert_eq!(pfc.len() % 2, 0, "every PAUSE resumed: {pfc:?}");
    let n = pfc.len() as u64 / 2;
    assert_eq!((stats.pauses, stats.resumes), (n, n));
    let paused: u64 = pfc.chunks(2).map(|p| (p[1].0 - p[0].0).as_ps()).sum();
    assert_eq!(stats.paused_ps, paused);
    assert_eq!(stats.max_ingress_bytes, 9 * len);
}

/// The thresholds hold to the byte: XOFF at exactly three packets pauses
/// only once a fourth waits (at a(4), not a(3)), and XON at exactly one
/// resumes as soon as one waits: h0 has started packets 0 to 10 when
/// the PAUSE lands, so the RESUME goes as packet 9 starts on, one
/// waiting behind it.
#[test]
fn xoff_and_xon_are_exact_to_the_byte() {
    let len = full_packet().1;
    let (w, h0_tx, pfc) = slow_middle(3 * len, len);
    let h0_link = w.topology().link_by_name("h0-s0").unwrap();
    assert_eq!(pfc[0], (reaches_s0(4), h0_link, 1, 0xFFFF));
    let lat = Duration::from_micros(1);
    let paused_at = reaches_s0(4) + ser(PFC_WIRE_BYTES - WIRE_OVERHEAD, 100 * GBPS) + lat;
    assert_eq!(h0_tx.iter().filter(|&&x| x < paused_at).count(), 11);
    let resume = reaches_s0(0) + Duration::from_ps(ser(len, 10 * GBPS).as_ps() * 9);
    assert_eq!(pfc[1], (resume, h0_link, 1, 0));
}

/// The headroom must take what arrives while a PAUSE takes effect: a
/// round trip of the link at line rate and a largest frame each way. At
/// 100 Gb/s and 1 µs that is 25,000 + 2 × 9,282 + 84 bytes; one byte less
/// is refused, with the arithmetic, and XON must lie below XOFF.
#[test]
fn a_headroom_that_cannot_take_a_round_trip_is_refused_with_its_arithmetic() {
    let (needed, how) = PfcConfig::headroom_needed(100 * GBPS, Duration::from_micros(1), 9216);
    assert_eq!(needed, 25_000 + 2 * 9_282 + 84);
    let (mut w, _) = star(2, LinkParams::default());
    let short = PfcConfig {
        headroom_bytes: Some(needed - 1),
        ..PfcConfig::default()
    };
    let err = w.set_pfc(short).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, PfcError::Headroom { given, needed: n, .. } if given == needed - 1 && n == needed),
        "{msg}"
    );
    assert!(msg.contains(&how) && msg.contains("h0-s0"), "{msg}");
    assert!(w.pfc().is_none(), "refused: nothing changed");
    let enough = PfcConfig {
        headroom_bytes: Some(needed),
        ..PfcConfig::default()
    };
    w.set_pfc(enough).unwrap();
    let backwards = PfcConfig {
        xon_bytes: 70_000,
        ..PfcConfig::default()
    };
    assert_eq!(
        w.set_pfc(backwards).unwrap_err().to_string(),
        "pfc_xon (70000 B) must be below pfc_xoff (65536 B)"
    );
}

/// Below XOFF a lossless fabric changes no completion: one WRITE across
/// a star, lossy and lossless, completes at the same picosecond.
#[test]
fn below_xoff_a_lossless_fabric_changes_no_completion() {
    let at = |pfc: bool| {
        let (mut w, keys) = star(2, LinkParams::default());
        if pfc {
            w.set_pfc(PfcConfig::default()).unwrap();
        }
        let wr = write(&mut w, &keys, 0, 1, 1 << 16);
        assert!(w.run());
        let pauses: u64 = w.pfc_stats().iter().map(|s| s.pauses).sum();
        assert_eq!(pauses, 0);
        completed_at(&w, 0, wr).unwrap()
    };
    assert_eq!(at(true), at(false));
}

/// Head-of-line blocking. On a dumbbell, h0 (left) and h3 (right) both
/// WRITE 1 MiB to h2 (right), congesting s1's port to h2. A 64 KiB WRITE
/// from h1 (left) to h3, whose port is idle, shares only the middle link
/// with h0's flow. Lossy, it crosses in tens of microseconds; lossless,
/// s1's ingress from the middle link passes XOFF with h0's packets, s1
/// pauses the whole link, and h1's WRITE waits behind a congestion it
/// has nothing to do with (a victim): 28.9 µs against 17.2 µs lossy,
/// where it only shared the middle link's queue.
#[test]
fn a_victim_flow_is_blocked_by_a_pause_it_did_not_cause() {
    let victim_time = |pfc: bool| {
        let params = LinkParams {
            queue_bytes: 256 << 10,
            ..LinkParams::default()
        };
        let (mut w, keys) = world(
            Topology::dumbbell(2, params, params),
            FabricConfig::default(),
            RuleSet::new(),
            1 << 20,
        );
        if pfc {
            w.set_pfc(PfcConfig::default()).unwrap();
        }
        write(&mut w, &keys, 0, 2, 1 << 20);
        write(&mut w, &keys, 3, 2, 1 << 20);
        let posted = Instant::ZERO + Duration::from_micros(20);
        w.run_until(posted);
        let small = write(&mut w, &keys, 1, 3, 1 << 16);
        w.run_until(Instant::ZERO + Duration::from_millis(100));
        let pauses: u64 = w.pfc_stats().iter().map(|s| s.pauses).sum();
        (completed_at(&w, 1, small).unwrap() - posted, pauses)
    };
    let (lossy, _) = victim_time(false);
    let (lossless, pauses) = victim_time(true);
    assert!(pauses > 0);
    assert!(
        2 * lossless.as_ps() > 3 * lossy.as_ps(),
        "the victim waited: {lossless} lossless against {lossy} lossy"
    );
    // The figures docs/lossless.md gives.
    assert_eq!(
        (lossless.to_string(), lossy.to_string()),
        ("28.889us".into(), "17.196us".into())
    );
}

/// A PFC storm and the pause tree it grows. On a dumbbell, h2's host
/// stops taking packets from 5 µs to 1 ms (a host pause: its NIC holds
/// what arrives), while h0 WRITEs 1 MiB to it and, from 20 µs, h1 WRITEs
/// 256 KiB to h3, whose host is fine. h2's NIC passes XOFF and pauses
/// s1's port, and keeps refreshing the PAUSE every half pause time for as
/// long as it is stuck (the storm). s1's ingress from the middle link
/// fills with h0's packets and s1 pauses s0's port (the pause spreads up
/// the tree), so h1's WRITE, which never goes near h2, waits for h2's
/// host: it completes only after the stuck host resumes. Lossy, the same
/// WRITE takes tens of microseconds.
#[test]
fn a_stuck_receiver_keeps_pausing_and_its_pauses_spread_to_a_bystander() {
    let run = |pfc: bool| {
        let (mut w, keys) = world(
            Topology::dumbbell(2, LinkParams::default(), LinkParams::default()),
            FabricConfig::default(),
            RuleSet::new(),
            1 << 20,
        );
        if pfc {
            w.set_pfc(PfcConfig::default()).unwrap();
        }
        let at = |us| Instant::ZERO + Duration::from_micros(us);
        w.pause(udrma_faults::HostPause {
            host: udrma_proto::NodeAddr(2),
            from: at(5),
            until: at(1000),
        })
        .unwrap();
        write(&mut w, &keys, 0, 2, 1 << 20);
        w.run_until(at(20));
        let victim = write(&mut w, &keys, 1, 3, 1 << 18);
        w.run_until(at(20_000));
        let took = completed_at(&w, 1, victim).unwrap() - at(20);
        (took, w.pfc_stats(), w)
    };
    let (lossy, _, _) = run(false);
    let (lossless, stats, w) = run(true);
    assert!(lossy < Duration::from_micros(100), "lossy: {lossy}");
    assert!(
        lossless > Duration::from_micros(900),
        "lossless, the bystander waited for the stuck host: {lossless}"
    );
    let port = |name: &str, from_a: bool| {
        let link = &w.topology().links[w.topology().link_by_name(name).unwrap() as usize];
        &stats[link.ports[usize::from(!from_a)] as usize]
    };
    let storm = port("h2-s1", false);
    assert!(
        storm.pauses >= 5,
        "h2's NIC kept pausing s1 while stuck: {} PAUSE frames",
        storm.pauses
    );
    assert_eq!(
        storm.resumes, 1,
        "one RESUME, once the host takes packets again"
    );
    let paused = Duration::from_ps(storm.paused_ps);
    assert!(
        paused > Duration::from_micros(980) && paused < Duration::from_micros(1000),
        "paused from XOFF, some 10 µs in, to the RESUME just after 1 ms: {paused}"
    );
    let xoff = PfcConfig::default().xoff_bytes;
    assert!(
        storm.max_ingress_bytes > xoff,
        "the NIC's buffer passed XOFF"
    );
    assert!(w.pfc_deadlock().is_none(), "a storm is not a deadlock");
    let middle = port("s0-s1", true);
    assert!(middle.pauses > 0, "the pause spread to s0's port");
    assert!(port("h0-s0", true).pauses > 0, "and on to h0");
    assert_eq!(w.stats().dropped_total(), 0);
}

/// Five switches in a ring, one host on each; host i WRITEs to host i +
/// 2, whose only shortest path goes two links clockwise. Every ring link
/// carries a flow's first hop and another's second, so each switch's
/// ingress from the ring waits for its egress to the next, which waits
/// for the next switch's ingress: once all five are over XOFF, each ring
/// port is paused by the next switch and holds the packets the next one
/// waits for. The detector names the cycle of five ring ports and when
/// it formed, and nothing completes.
#[test]
fn a_cyclic_buffer_dependency_deadlocks_and_is_reported_with_its_cycle() {
    let (mut w, keys) = world(
        Topology::ring(5, LinkParams::default()).unwrap(),
        FabricConfig::default(),
        RuleSet::new(),
        1 << 22,
    );
    w.set_pfc(PfcConfig::default()).unwrap();
    for h in 0..5 {
        write(&mut w, &keys, h, (h + 2) % 5, 1 << 22);
    }
    w.run_until(Instant::ZERO + Duration::from_millis(20));
    let dl = w.pfc_deadlock().expect("a deadlock").clone();
    assert_eq!(dl.cycle.len(), 5, "{:?}", dl.cycle);
    for name in &dl.cycle {
        assert!(
            name.starts_with('r') && name.contains("-r"),
            "a ring port: {name}"
        );
    }
    assert_eq!(
        dl.confirmed - dl.formed,
        udrma_proto::pfc::pause_time(0xFFFF, 100 * GBPS),
        "confirmed one pause time after it formed, nothing having moved"
    );
    let delivered = w.stats().delivered;
    assert_eq!(delivered_then(&mut w), delivered, "and nothing moves after");
    assert_eq!(w.stats().dropped.get(&DropReason::Headroom), None);
}

/// What has been delivered after running 2 ms more.
fn delivered_then(w: &mut World) -> u64 {
    let now = w.now();
    w.run_until(now + Duration::from_millis(2));
    w.stats().delivered
}

/// A lossless fabric needs time order: lookahead windows are refused
/// either way round, naming PFC.
#[test]
fn a_lossless_fabric_refuses_lookahead_windows() {
    let (mut w, _) = star(2, LinkParams::default());
    w.set_pfc(PfcConfig::default()).unwrap();
    let err = w
        .set_event_order(udrma_fabric::EventOrder::Windows)
        .unwrap_err();
    assert!(err.to_string().contains("PFC"), "{err}");
    let (mut w, _) = star(2, LinkParams::default());
    w.set_event_order(udrma_fabric::EventOrder::Windows)
        .unwrap();
    assert_eq!(w.set_pfc(PfcConfig::default()), Err(PfcError::Windows));
}
