//! The fabric end to end: NIC engines over topologies, with faults,
//! traces, captures and pauses.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use udrma_fabric::{DropReason, FabricConfig, LinkParams, Policy, Topology, TraceFormat, World};
use udrma_faults::{Direction, HostPause, Model, Rule, RuleSet, Target};
use udrma_nic::{Access, Event, MrKey, NicConfig, WorkRequest, WrId};
use udrma_proto::{Duration, Instant, NodeAddr};

const SRC: u64 = 0x1000_0000;
const DST: u64 = 0x2000_0000;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(0x9e37_79b9)).to_be_bytes()[0])
        .collect()
}

/// Every host gets a source region (its own pattern) and a target region.
fn world(
    topo: Topology,
    cfg: FabricConfig,
    rules: RuleSet,
    region: usize,
) -> (World, Vec<(MrKey, MrKey)>) {
    let mut w = World::new(topo, cfg, rules).unwrap();
    let mut keys = Vec::new();
    for h in 0..w.topology().n_hosts() as u32 {
        let nic = w.nic_mut(NodeAddr(h));
        let src = nic.register(SRC, region, Access::ALL);
        nic.memory_mut().region_mut(src).unwrap().bytes = pattern(region, h);
        let dst = nic.register(DST, region, Access::ALL);
        keys.push((src, dst));
    }
    (w, keys)
}

fn write(w: &mut World, keys: &[(MrKey, MrKey)], from: u32, to: u32, len: u64) -> WrId {
    let wr = WorkRequest::write(
        NodeAddr(to),
        keys[from as usize].0,
        SRC,
        len,
        keys[to as usize].1 .0,
        DST,
    );
    w.post(NodeAddr(from), wr).unwrap()
}

fn completions(w: &World, host: u32, wr: WrId) -> Vec<bool> {
    w.host_events()
        .iter()
        .filter(|e| e.host == NodeAddr(host))
        .filter_map(|e| match &e.event {
            Event::Completed { wr: id, result, .. } if *id == wr => Some(result.is_ok()),
            _ => None,
        })
        .collect()
}

fn landed(w: &World, keys: &[(MrKey, MrKey)], from: u32, to: u32, len: usize) -> bool {
    let got = &w
        .nic(NodeAddr(to))
        .memory()
        .region(keys[to as usize].1)
        .unwrap()
        .bytes[..len];
    let sent = &w
        .nic(NodeAddr(from))
        .memory()
        .region(keys[from as usize].0)
        .unwrap()
        .bytes[..len];
    got == sent
}

fn rules(seed: u64, list: Vec<(&str, Target, Model)>) -> RuleSet {
    let mut set = RuleSet::new();
    for (name, t, m) in list {
        set.push(Rule::new(seed, name, t, m).unwrap());
    }
    set
}

/// Loss with probability `loss` and 1 % each of duplication and of
/// corruption (two bits), on every link.
fn messy_rules(seed: u64, loss: f64) -> RuleSet {
    rules(
        seed,
        vec![
            (
                "loss",
                Target::any(),
                Model::Loss {
                    p: loss,
                    correlation: 0.0,
                },
            ),
            (
                "dup",
                Target::any(),
                Model::Duplicate {
                    p: 0.01,
                    copies: 1,
                    correlation: 0.0,
                },
            ),
            (
                "corrupt",
                Target::any(),
                Model::Corrupt { p: 0.01, bits: 2 },
            ),
        ],
    )
}

#[test]
fn a_write_across_a_pair_takes_serialization_plus_latency() {
    let cfg = FabricConfig::default();
    let (mut w, keys) = world(
        Topology::pair(LinkParams::default()),
        cfg,
        RuleSet::new(),
        1 << 20,
    );
    let wr = write(&mut w, &keys, 0, 1, 64 * 1024);
    assert!(w.run());
    assert_eq!(completions(&w, 0, wr), vec![true]);
    assert!(landed(&w, &keys, 0, 1, 64 * 1024));
    // 16 packets of 4096 B + headers at 100 Gb/s, 1 µs away: the last data
    // packet lands after ~5.5 µs of serialization plus 1 µs, its ACK after
    // one more microsecond.
    let done = w
        .host_events()
        .iter()
        .find_map(|e| match e.event {
            Event::Completed { at, .. } => Some(at),
            _ => None,
        })
        .unwrap();
    let us = done.as_ps() as f64 / 1e6;
    assert!((7.0..8.0).contains(&us), "completed at {us} µs");
    assert!(w.is_idle());
}

fn trace_hash(seed: u64, policy: Policy, lossy: bool) -> u64 {
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let list = if lossy {
        vec![(
            "loss",
            Target::any(),
            Model::Loss {
                p: 0.02,
                correlation: 0.0,
            },
        )]
    } else {
        vec![]
    };
    let cfg = FabricConfig {
        seed,
        routing: policy,
        ..FabricConfig::default()
    };
    let (mut w, keys) = world(topo, cfg, rules(seed, list), 256 * 1024);
    for h in 0..16 {
        write(&mut w, &keys, h, (h + 5) % 16, 200 * 1024);
    }
    assert!(w.run());
    w.trace().hash()
}

#[test]
fn same_seed_same_hash_and_seeds_matter_only_where_randomness_does() {
    assert_eq!(
        trace_hash(1, Policy::Spray, true),
        trace_hash(1, Policy::Spray, true)
    );
    assert_ne!(
        trace_hash(1, Policy::Spray, true),
        trace_hash(2, Policy::Spray, true)
    );
    assert_ne!(
        trace_hash(1, Policy::Spray, false),
        trace_hash(2, Policy::Spray, false),
        "spraying draws"
    );
    assert_ne!(
        trace_hash(1, Policy::Ecmp, true),
        trace_hash(2, Policy::Ecmp, true),
        "loss draws"
    );
    // Nothing random: the seed cannot matter.
    assert_eq!(
        trace_hash(1, Policy::Ecmp, false),
        trace_hash(2, Policy::Ecmp, false)
    );
}

#[test]
fn one_mib_write_across_a_sprayed_fat_tree_with_loss_duplication_and_corruption() {
    // The story: every link drops 5 %, duplicates 5 % and corrupts
    // 1 % of what crosses it, packets are sprayed over all paths.
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let cfg = FabricConfig {
        seed: 7,
        routing: Policy::Spray,
        nic: NicConfig {
            max_retries: 20,
            ..NicConfig::default()
        },
        ..FabricConfig::default()
    };
    let faults = rules(
        7,
        vec![
            (
                "loss",
                Target::any(),
                Model::Loss {
                    p: 0.05,
                    correlation: 0.0,
                },
            ),
            (
                "dup",
                Target::any(),
                Model::Duplicate {
                    p: 0.05,
                    copies: 1,
                    correlation: 0.0,
                },
            ),
            (
                "corrupt",
                Target::any(),
                Model::Corrupt { p: 0.01, bits: 1 },
            ),
        ],
    );
    let (mut w, keys) = world(topo, cfg, faults, 1 << 20);
    let wr = write(&mut w, &keys, 0, 15, 1 << 20);
    assert!(w.run());
    assert_eq!(completions(&w, 0, wr), vec![true]);
    assert!(landed(&w, &keys, 0, 15, 1 << 20), "byte-exact");
    let s = w.stats();
    assert!(
        s.dropped[&DropReason::Fault] > 0 && s.duplicated > 0 && s.corrupted > 0,
        "{s:?}"
    );
    let rx = w.nic(NodeAddr(15)).stats();
    assert!(
        rx.rx_bad_checksum > 0,
        "corruption reached the receiver and its ICRC caught it"
    );
    assert!(rx.dup_dropped > 0);
    let counters: Vec<u64> = w
        .faults()
        .rules()
        .iter()
        .map(|r| r.counters.matched)
        .collect();
    assert!(
        counters.iter().all(|c| *c > 0),
        "every rule fired: {counters:?}"
    );
}

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
    let payload = u64::from(NicConfig::default().mtu_payload);
    // WRITE header, extension and ICRC.
    let len = payload + 52;
    let params = LinkParams {
        queue_bytes: len + len / 2,
        ..LinkParams::default()
    };
    let (mut w, keys) = world(
        Topology::star(3, params),
        FabricConfig::default(),
        RuleSet::new(),
        64 * 1024,
    );
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
    let payload = u64::from(NicConfig::default().mtu_payload);
    // WRITE header, extension and ICRC.
    let len = payload + 52;
    let run = |senders: u32| {
        let params = LinkParams {
            queue_bytes: len,
            ..LinkParams::default()
        };
        let (mut w, keys) = world(
            Topology::star(4, params),
            FabricConfig::default(),
            RuleSet::new(),
            64 * 1024,
        );
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
        w.host_events()
            .iter()
            .find_map(|e| match &e.event {
                Event::Completed { wr: id, at, .. } if e.host == NodeAddr(1) && *id == wr => {
                    Some(*at)
                }
                _ => None,
            })
            .expect("the WRITE completes")
    };
    let free = done_at(Duration::ZERO);
    let costed = done_at(Duration::from_micros(5));
    assert_eq!(
        costed - free,
        Duration::from_micros(20),
        "{free:?} then {costed:?}"
    );
}

/// A link carries a datagram of exactly its MTU (and drops one byte
/// more): a one-packet WRITE through links whose MTU is that packet's
/// datagram crosses, and is counted hop by hop (two links each for the
/// WRITE, its acknowledgement and its COMPLETION).
#[test]
fn a_datagram_of_exactly_the_mtu_crosses() {
    let payload = u64::from(NicConfig::default().mtu_payload);
    // WRITE header, extension and ICRC.
    let len = payload + 52;
    let run = |mtu: u64| {
        let params = LinkParams {
            mtu: mtu as u32,
            ..LinkParams::default()
        };
        let (mut w, keys) = world(
            Topology::star(2, params),
            FabricConfig::default(),
            RuleSet::new(),
            64 * 1024,
        );
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
    let (mut w, keys) = world(
        Topology::star(9, params),
        FabricConfig::default(),
        RuleSet::new(),
        1 << 20,
    );
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

#[test]
fn link_flap_and_host_pause_delay_but_do_not_lose() {
    let down = Target::any()
        .links(&["h0-h1"])
        .direction(Direction::Forward)
        .window(
            Instant::ZERO + Duration::from_micros(2),
            Instant::ZERO + Duration::from_micros(300),
        );
    let faults = rules(1, vec![("flap", down, Model::Down)]);
    let (mut w, keys) = world(
        Topology::pair(LinkParams::default()),
        FabricConfig::default(),
        faults,
        1 << 20,
    );
    w.pause(HostPause {
        host: NodeAddr(1),
        from: Instant::ZERO + Duration::from_micros(305),
        until: Instant::ZERO + Duration::from_micros(800),
    })
    .unwrap();
    let a = write(&mut w, &keys, 0, 1, 512 * 1024);
    assert!(w.run());
    assert_eq!(completions(&w, 0, a), vec![true]);
    assert!(landed(&w, &keys, 0, 1, 512 * 1024));
    assert!(w.stats().dropped[&DropReason::Fault] > 0);
    assert!(w.nic(NodeAddr(0)).stats().retransmits > 0);
    let done = w
        .host_events()
        .iter()
        .find_map(|e| match e.event {
            Event::Completed { at, .. } => Some(at),
            _ => None,
        })
        .unwrap();
    assert!(
        done > Instant::ZERO + Duration::from_micros(800),
        "finished after the pause: {done}"
    );
}

#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);
impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn pcap_tap_and_trace_sinks_agree_with_the_hash() {
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let (mut w, keys) = world(topo, FabricConfig::default(), RuleSet::new(), 1 << 20);
    let pcap = Shared::default();
    let trace = Shared::default();
    w.tap(&["h0-e0"], Box::new(pcap.clone())).unwrap();
    w.set_trace_sink(TraceFormat::Postcard, Box::new(trace.clone()));
    write(&mut w, &keys, 0, 9, 100 * 1024);
    assert!(w.run());
    w.finish().unwrap();
    let events = udrma_fabric::trace::read_postcard(&trace.0.borrow()).unwrap();
    assert_eq!(events.len() as u64, w.trace().events());
    let on_link: usize = events
        .iter()
        .filter(|e| matches!(e, udrma_fabric::TraceEvent::Tx { link: 0, .. }))
        .count();
    let frames: Vec<_> = udrma_proto::pcap::PcapSource::new(&pcap.0.borrow()[..])
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(frames.len(), on_link, "one frame per packet crossing h0-e0");
    // Every frame decodes as a udrma packet, timestamps never go back.
    for f in &frames {
        let d = udrma_proto::encap::decapsulate(&f.data).unwrap();
        udrma_proto::Repr::parse_bytes(d.payload).unwrap();
    }
    assert!(frames.windows(2).all(|p| p[0].time_ns <= p[1].time_ns));
    assert!(w.tap(&["h0-x9"], Box::new(Shared::default())).is_err());
}

#[test]
fn unknown_link_in_a_rule_is_refused_with_a_suggestion() {
    let faults = rules(
        1,
        vec![("flap", Target::any().links(&["h0-e9"]), Model::Down)],
    );
    let err = World::new(
        Topology::fat_tree(4, LinkParams::default()).unwrap(),
        FabricConfig::default(),
        faults,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown link \"h0-e9\" (did you mean \"h0-e0\"?)"),
        "{err}"
    );
}

#[test]
fn phantom_memory_runs_a_large_permutation_without_buffers() {
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let mut w = World::new(topo, FabricConfig::default(), RuleSet::new()).unwrap();
    let mut keys = Vec::new();
    for h in 0..16 {
        let m = w.nic_mut(NodeAddr(h)).memory_mut();
        keys.push((
            m.register_phantom(SRC, 1 << 30, Access::ALL),
            m.register_phantom(DST, 1 << 30, Access::ALL),
        ));
    }
    let wrs: Vec<WrId> = (0..16)
        .map(|h| write(&mut w, &keys, h, (h + 4) % 16, 2 << 20))
        .collect();
    assert!(w.run());
    for (h, wr) in wrs.iter().enumerate() {
        assert_eq!(completions(&w, h as u32, *wr), vec![true]);
    }
    assert!(w
        .nic(NodeAddr(0))
        .memory()
        .region(keys[0].0)
        .unwrap()
        .bytes
        .is_empty());
}

/// The trace hash of a fixed lossy, sprayed k=4 run, against the golden
/// file. The same value must come out in debug and release builds (CI runs
/// this test in both) and on every machine. If a deliberate change alters
/// it, update the file and say why in the commit.
#[test]
fn golden_trace_hash() {
    let golden = include_str!("golden/k4-spray-loss2pct-seed42.hash").trim();
    let hash = trace_hash(42, Policy::Spray, true);
    assert_eq!(format!("{hash:016x}"), golden, "trace hash changed");
}

/// Prefetching is a hint: the deep pipeline (routes drawn early on a copy
/// of each switch's random stream) gives the same trace and counters as
/// the near one, on a sprayed and on a hashed fat tree with losses,
/// duplicates and corruption.
#[test]
fn deep_prefetch_changes_no_outcome() {
    let run = |policy: Policy, deep: bool| {
        let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
        let cfg = FabricConfig {
            seed: 9,
            routing: policy,
            ..FabricConfig::default()
        };
        let (mut w, keys) = world(topo, cfg, messy_rules(9, 0.02), 256 * 1024);
        w.set_deep_prefetch(deep);
        for h in 0..16 {
            write(&mut w, &keys, h, (h + 5) % 16, 200 * 1024);
        }
        assert!(w.run());
        (w.trace().hash(), format!("{:?}", w.stats()))
    };
    for policy in [Policy::Spray, Policy::Ecmp] {
        let (near, deep) = (run(policy, false), run(policy, true));
        assert_eq!(near, deep, "{policy:?}");
        assert!(near.1.contains("packet_hops"));
    }
}

/// Phantom payloads are a representation, not a behaviour: with phantom
/// memory on every host, the same lossy, corrupting run gives the same
/// trace and the same counters with and without them.
#[test]
fn phantom_payloads_change_nothing_but_memory() {
    let run = |phantom_payload: bool| {
        let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
        let cfg = FabricConfig {
            seed: 3,
            routing: Policy::Spray,
            phantom_payload,
            ..FabricConfig::default()
        };
        let faults = messy_rules(3, 0.01);
        let mut w = World::new(topo, cfg, faults).unwrap();
        let mut keys = Vec::new();
        for h in 0..16 {
            let m = w.nic_mut(NodeAddr(h)).memory_mut();
            keys.push((
                m.register_phantom(SRC, 1 << 20, Access::ALL),
                m.register_phantom(DST, 1 << 20, Access::ALL),
            ));
        }
        for h in 0..16 {
            write(&mut w, &keys, h, (h + 7) % 16, 300 * 1024);
        }
        assert!(w.run());
        let bad: u64 = (0..16)
            .map(|h| w.nic(NodeAddr(h)).stats().rx_bad_checksum)
            .sum();
        (w.trace().hash(), w.stats().clone(), bad)
    };
    let (a, b) = (run(false), run(true));
    assert_eq!(a, b);
    assert!(
        a.2 > 0,
        "corrupted packets were rebuilt and caught by the ICRC"
    );
}

/// Found by the scenario property test: a fault that drops a packet at a
/// host's own egress must not stall that host. A READ responder has no
/// timers of its own: when a response is lost at its egress while it
/// still holds others, the rest must still go (that loss used to leave
/// the responder holding them forever). Here the first batch loses its
/// first and last responses, so the retry asks for the span 0..=15 again
/// (partial retries ask for the span still missing), and the retry's
/// third response is lost while thirteen wait behind it.
#[test]
fn losses_at_a_responders_egress_do_not_stall_it() {
    let responses = || {
        Target::any()
            .links(&["h0-h1"])
            .direction(Direction::Reverse)
            .opcodes(&[udrma_proto::Opcode::ReadResponse])
    };
    let faults = rules(
        5,
        vec![
            (
                "first-of-first-batch",
                responses().nth(1000, 0, Some(1)),
                Model::Down,
            ),
            // Counts exclude the packets earlier rules dropped.
            (
                "last-of-first-batch",
                responses().nth(1000, 14, Some(1)),
                Model::Down,
            ),
            (
                "third-of-retry",
                responses().nth(1000, 16, Some(1)),
                Model::Down,
            ),
        ],
    );
    let (mut w, keys) = world(
        Topology::pair(LinkParams::default()),
        FabricConfig::default(),
        faults,
        1 << 20,
    );
    let wr = WorkRequest::read(NodeAddr(1), keys[0].1, DST, 64 * 1024, keys[1].0 .0, SRC);
    let id = w.post(NodeAddr(0), wr).unwrap();
    assert!(w.run());
    assert_eq!(completions(&w, 0, id), vec![true]);
    assert_eq!(
        w.faults()
            .rules()
            .iter()
            .map(|r| r.counters.dropped)
            .collect::<Vec<u64>>(),
        [1, 1, 1]
    );
    assert_eq!(w.nic(NodeAddr(1)).stats().read_requests_partial, 1);
    assert!(
        w.nic(NodeAddr(1)).is_idle(),
        "the responder sent everything it owed: {:?}",
        w.nic(NodeAddr(1)).occupancy()
    );
}

/// Found by the scenario property test in CI: under Go-back-N a timeout
/// that fires while the host's link is busy puts every packet back in the
/// queue, so the NIC has no deadline left. The packets then leave one by
/// one as the link frees up, each arming a deadline, and the fabric used
/// to schedule no wake-up for them: if all of them were lost, the sender
/// slept forever with work in its OP table.
#[test]
fn go_back_n_timeouts_on_a_busy_link_keep_the_sender_awake() {
    let slow = LinkParams {
        bandwidth_bps: 1_000_000_000,
        ..LinkParams::default()
    };
    // No ACK gets back for 2 ms: the first RTO (100 µs) fires while the
    // link is still serialising the 64 KiB write. (The drop must not be at
    // the sender's egress: a packet dropped there never occupies the link.)
    let faults = rules(
        1,
        vec![(
            "blackout",
            Target::any()
                .links(&["h0-h1"])
                .direction(Direction::Reverse)
                .window(Instant::ZERO, Instant::ZERO + Duration::from_millis(2)),
            Model::Down,
        )],
    );
    let mut cfg = FabricConfig::default();
    cfg.nic.retransmit = udrma_nic::RetransmitMode::GoBackN;
    cfg.nic.max_retries = 40;
    cfg.nic.rto_max = Duration::from_millis(1);
    let (mut w, keys) = world(Topology::pair(slow), cfg, faults, 1 << 16);
    let id = write(&mut w, &keys, 0, 1, 64 * 1024);
    // (The receiver's tombstones keep the world busy after that.)
    w.run_until(Instant::ZERO + Duration::from_millis(100));
    assert_eq!(completions(&w, 0, id), vec![true]);
    assert!(landed(&w, &keys, 0, 1, 64 * 1024));
}

#[test]
fn fault_counters_and_copies_are_exact() {
    // A 16-packet WRITE across a pair: every WRITE packet is delayed 2 µs
    // by one rule, and every ACK is copied once by another.
    let set = rules(
        3,
        vec![
            (
                "slow-writes",
                Target::any().opcodes(&[udrma_proto::Opcode::Write]),
                Model::Delay {
                    base: Duration::from_micros(2),
                    jitter: Duration::ZERO,
                    dist: udrma_faults::Jitter::Uniform,
                    limit: None,
                },
            ),
            (
                "double-acks",
                Target::any().opcodes(&[udrma_proto::Opcode::Ack]),
                Model::Duplicate {
                    p: 1.0,
                    correlation: 0.0,
                    copies: 1,
                },
            ),
        ],
    );
    let (mut w, keys) = world(
        Topology::pair(LinkParams::default()),
        FabricConfig::default(),
        set,
        1 << 20,
    );
    w.watch(NodeAddr(1), NodeAddr(0));
    let wr = write(&mut w, &keys, 0, 1, 64 * 1024);
    assert!(w.run());
    assert_eq!(completions(&w, 0, wr), vec![true]);
    assert!(landed(&w, &keys, 0, 1, 64 * 1024));
    let st = w.stats();
    let j = w.journeys();
    let ack = u8::from(udrma_proto::Opcode::Ack);
    let acks = j
        .iter()
        .filter(|x| x.opcode == ack && x.copy_of.is_none())
        .count() as u64;
    assert_eq!(acks, 16, "one ACK per packet");
    assert_eq!(st.delayed, 16, "each WRITE packet once");
    assert_eq!(st.duplicated, acks, "one copy of each ACK");
    // Every copy is a packet of its own: a new serial, naming its original.
    let copies: Vec<_> = j.iter().filter(|x| x.copy_of.is_some()).collect();
    assert_eq!(copies.len() as u64, acks);
    let mut serials: Vec<u64> = j.iter().map(|x| x.serial).collect();
    serials.sort_unstable();
    serials.dedup();
    assert_eq!(serials.len(), j.len(), "serials are unique");
    for c in copies {
        let of = c.copy_of.unwrap();
        assert!(of != c.serial && j.iter().any(|x| x.serial == of));
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
    let (mut w, keys) = world(
        Topology::star(3, params),
        FabricConfig::default(),
        RuleSet::new(),
        1 << 20,
    );
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
    let done = w
        .host_events()
        .iter()
        .find_map(|e| match &e.event {
            Event::Completed { wr, at, .. } if e.host == NodeAddr(0) && *wr == small => Some(*at),
            _ => None,
        })
        .unwrap();
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
